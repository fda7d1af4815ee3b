// The C++ HeteroClient (include/datasystem/hetero_client.h) against a real
// worker on the host device backend (DS_DEVICE_BACKEND=host: device pointers
// are host addresses): MSetD2H / MGetH2D byte-exact with the blobs split
// differently, offsets and failed keys, the async calls' futures, Exist,
// Delete, GetMetaInfo, the Dev* calls, pre-registered device memory, and
// the codes of bad calls. DS_BUILD_DIR names the build with the worker.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpp_check.h"
#include "cpp_worker.h"
#include "datasystem/datasystem.h"

using namespace datasystem;

// The status has code and its message contains text.
#define CHECK_MSG(expr, code, text)                                                                \
    do {                                                                                           \
        Status _m = (expr);                                                                        \
        CHECK_CODE(_m, code);                                                                      \
        if (_m.GetMsg().find(text) == std::string::npos) {                                         \
            fprintf(stderr, "%s:%d: message '%s' lacks '%s'\n", __FILE__, __LINE__,                \
                    _m.GetMsg().c_str(), text);                                                    \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

static ConnectOptions Opts(int port)
{
    ConnectOptions o{.host = "127.0.0.1", .port = port, .connectTimeoutMs = 3000};
    return o;
}

// Bytes a key's value is made of: distinct per key and position.
static std::vector<unsigned char> Pattern(int key, size_t n)
{
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = static_cast<unsigned char>(key * 31 + i * 7 + (i >> 8));
    return v;
}

// A list of blobs cutting buf into pieces of the given sizes.
static DeviceBlobList Cut(std::vector<unsigned char> &buf, const std::vector<size_t> &sizes,
                          int32_t srcOffset = 0)
{
    DeviceBlobList l;
    l.deviceIdx = 0;
    l.srcOffset = srcOffset;
    size_t at = 0;
    for (size_t s : sizes) {
        l.blobs.push_back(Blob{buf.data() + at, s});
        at += s;
    }
    return l;
}

static void TestRoundTrip(int port)
{
    HeteroClient h(Opts(port));
    CHECK_OK(h.Init());
    const size_t kSize = 3 * 4096 + 100;
    std::vector<std::string> keys = {"hc.a", "hc.b", "hc.c"};
    std::vector<std::vector<unsigned char>> src, dst;
    std::vector<DeviceBlobList> setLists, getLists;
    for (int k = 0; k < 3; k++) {
        src.push_back(Pattern(k, kSize));
        dst.emplace_back(kSize, 0);
    }
    for (int k = 0; k < 3; k++) {
        setLists.push_back(Cut(src[k], {4096, 4096, 4096, 100}));
        getLists.push_back(Cut(dst[k], {100, 12288})); // split differently
    }
    SetParam p;
    p.writeMode = WriteMode::NONE_L2_CACHE_EVICT;
    CHECK_OK(h.MSetD2H(keys, setLists, p));
    std::vector<std::string> failed = {"stale"};
    CHECK_OK(h.MGetH2D(keys, getLists, failed, 0));
    CHECK(failed.empty());
    for (int k = 0; k < 3; k++)
        CHECK(dst[k] == src[k]);

    // From an offset: the blobs take the value's tail.
    std::vector<unsigned char> tail(kSize - 4096, 0);
    std::vector<DeviceBlobList> tl = {Cut(tail, {tail.size()}, 4096)};
    CHECK_OK(h.MGetH2D({"hc.b"}, tl, failed, 0));
    CHECK(failed.empty());
    CHECK(memcmp(tail.data(), src[1].data() + 4096, tail.size()) == 0);

    // A missing key fails alone; all missing is the call's failure.
    std::vector<unsigned char> one(kSize, 0), two(kSize, 0);
    std::vector<DeviceBlobList> two_lists = {Cut(one, {kSize}), Cut(two, {kSize})};
    CHECK_OK(h.MGetH2D({"hc.a", "hc.none"}, two_lists, failed, 0));
    CHECK(failed == std::vector<std::string>{"hc.none"});
    CHECK(one == src[0]);
    std::vector<DeviceBlobList> miss = {Cut(one, {kSize})};
    CHECK_MSG(h.MGetH2D({"hc.none"}, miss, failed, 0), K_NOT_FOUND, "hc.none");
    CHECK(failed == std::vector<std::string>{"hc.none"});
    // Blobs longer than the value: that key fails K_INVALID.
    std::vector<unsigned char> big(kSize + 1, 0);
    std::vector<DeviceBlobList> bl = {Cut(big, {kSize + 1})};
    CHECK_CODE(h.MGetH2D({"hc.a"}, bl, failed, 0), K_INVALID);

    // Exist, GetMetaInfo, Delete.
    std::vector<bool> ex;
    CHECK_OK(h.Exist({"hc.a", "hc.none"}, ex));
    CHECK(ex == (std::vector<bool>{true, false}));
    std::vector<MetaInfo> metas;
    CHECK_OK(h.GetMetaInfo({"hc.c", "hc.none"}, false, metas, failed));
    CHECK(metas.size() == 2 && metas[0].blobSizeList == std::vector<uint64_t>{kSize});
    CHECK(metas.size() == 2 && metas[1].blobSizeList.empty());
    CHECK(failed == std::vector<std::string>{"hc.none"});
    CHECK_OK(h.Delete({"hc.a", "hc.b"}, failed));
    CHECK(failed.empty());
    CHECK_OK(h.Exist({"hc.a", "hc.b", "hc.c"}, ex));
    CHECK(ex == (std::vector<bool>{false, false, true}));

    // outLocalSetKeys: an NX set leaves out the key that was there.
    std::vector<std::string> local = {"stale"};
    p.existence = ExistenceOpt::NX;
    std::vector<DeviceBlobList> two_set = {Cut(src[0], {kSize}), Cut(src[1], {kSize})};
    CHECK_OK(h.MSetD2H({"hc.c", "hc.d"}, two_set, p, &local));
    CHECK(local == std::vector<std::string>{"hc.d"});

    std::string key;
    CHECK_OK(h.GenerateKey("", key));
    CHECK(!key.empty());
    CHECK_OK(h.GenerateKey("mine", key));
    CHECK(key == "mine");
    CHECK_CODE(h.GenerateKey("bad key", key), K_INVALID);
    ServerState state = ServerState::REBOOT;
    CHECK_OK(h.HealthCheck(state));
    CHECK(state == ServerState::NORMAL);
    CHECK_OK(h.Delete({"hc.c", "hc.d"}, failed));
    CHECK_OK(h.ShutDown());
}

static void TestAsync(int port)
{
    HeteroClient h(Opts(port));
    CHECK_OK(h.Init());
    const size_t kSize = 64 * 1024;
    std::vector<std::string> keys;
    std::vector<std::vector<unsigned char>> src, dst;
    for (int k = 0; k < 8; k++) {
        keys.push_back("hc.async." + std::to_string(k));
        src.push_back(Pattern(k + 10, kSize));
        dst.emplace_back(kSize, 0);
    }
    std::vector<DeviceBlobList> setLists, getLists;
    for (int k = 0; k < 8; k++) {
        setLists.push_back(Cut(src[k], {kSize / 2, kSize / 2}));
        getLists.push_back(Cut(dst[k], {kSize}));
    }
    std::shared_future<AsyncResult> fs = h.AsyncMSetD2H(keys, setLists);
    AsyncResult rs = fs.get();
    CHECK_OK(rs.status);
    CHECK(rs.failedList.empty());
    // A get that waits for a key set after it started.
    std::vector<std::string> withLate = keys;
    withLate.push_back("hc.async.late");
    std::vector<unsigned char> late(kSize, 0), lateSrc = Pattern(99, kSize);
    std::vector<DeviceBlobList> withLateLists = getLists;
    withLateLists.push_back(Cut(late, {kSize}));
    std::shared_future<AsyncResult> fg = h.AsyncMGetH2D(withLate, withLateLists, 10000);
    std::vector<DeviceBlobList> lateSet = {Cut(lateSrc, {kSize})};
    CHECK_OK(h.MSetD2H({"hc.async.late"}, lateSet));
    AsyncResult rg = fg.get();
    CHECK_OK(rg.status);
    CHECK(rg.failedList.empty());
    for (int k = 0; k < 8; k++)
        CHECK(dst[k] == src[k]);
    CHECK(late == lateSrc);
    // A missing key with no wait: in the failed list.
    std::vector<DeviceBlobList> miss = {Cut(late, {kSize}), Cut(dst[0], {kSize})};
    AsyncResult rm = h.AsyncMGetH2D({"hc.async.none", "hc.async.0"}, miss, 0).get();
    CHECK_OK(rm.status);
    CHECK(rm.failedList == std::vector<std::string>{"hc.async.none"});
    // Bad arguments complete the future at once.
    AsyncResult bad = h.AsyncMSetD2H({}, {}).get();
    CHECK_CODE(bad.status, K_INVALID);
    AsyncResult del = h.AsyncDevDelete(withLate).get();
    CHECK_OK(del.status);
    CHECK(del.failedList.empty());
    std::vector<bool> ex;
    CHECK_OK(h.Exist({"hc.async.0", "hc.async.late"}, ex));
    CHECK(ex == (std::vector<bool>{false, false}));
    CHECK_OK(h.ShutDown());
}

static void TestDev(int port)
{
    HeteroClient a(Opts(port)), b(Opts(port));
    CHECK_OK(a.Init());
    CHECK_OK(b.Init());
    const size_t kSize = 10000;
    std::vector<unsigned char> s0 = Pattern(1, kSize), s1 = Pattern(2, kSize);
    std::vector<unsigned char> d0(kSize, 0), d1(kSize, 0);
    std::vector<DeviceBlobList> set = {Cut(s0, {5000, 5000}), Cut(s1, {kSize})};
    std::vector<DeviceBlobList> get = {Cut(d0, {kSize}), Cut(d1, {1, kSize - 1})};
    std::vector<std::string> failed = {"stale"};
    CHECK_OK(a.DevMSet({"hc.dev.0", "hc.dev.1"}, set, failed));
    CHECK(failed.empty());
    CHECK_OK(b.DevMGet({"hc.dev.0", "hc.dev.1"}, get, failed, 1000));
    CHECK(failed.empty());
    CHECK(d0 == s0 && d1 == s1);
    std::vector<MetaInfo> metas;
    CHECK_OK(b.GetMetaInfo({"hc.dev.1"}, true, metas, failed));
    CHECK(metas.size() == 1 && metas[0].blobSizeList == std::vector<uint64_t>{kSize});
    // Not deleted by the get: a second reader gets it too.
    std::fill(d0.begin(), d0.end(), 0);
    std::vector<DeviceBlobList> get0 = {get[0]};
    CHECK_OK(b.DevMGet({"hc.dev.0"}, get0, failed, 0));
    CHECK(d0 == s0);
    CHECK_OK(a.DevLocalDelete({"hc.dev.0"}, failed));
    CHECK_OK(a.DevDelete({"hc.dev.1"}, failed));
    std::vector<bool> ex;
    CHECK_OK(a.Exist({"hc.dev.0", "hc.dev.1"}, ex));
    CHECK(ex == (std::vector<bool>{false, false}));

    // Publish / subscribe: the subscriber may come first; what it received
    // is gone afterwards.
    std::fill(d0.begin(), d0.end(), 0);
    std::vector<Future> subs, pubs;
    std::vector<DeviceBlobList> recv = {Cut(d0, {kSize})};
    CHECK_OK(b.DevSubscribe({"hc.pub"}, recv, subs));
    CHECK(subs.size() == 1);
    std::vector<DeviceBlobList> send = {Cut(s1, {kSize})};
    CHECK_OK(a.DevPublish({"hc.pub"}, send, pubs));
    CHECK(pubs.size() == 1);
    CHECK_OK(pubs[0].Get());
    CHECK_OK(subs[0].Get(30000));
    CHECK_OK(subs[0].Get(0)); // again: the same result
    CHECK(d0 == s1);
    CHECK_OK(a.Exist({"hc.pub"}, ex));
    CHECK(ex == std::vector<bool>{false});
    CHECK_CODE(subs[0].Get(1800001), K_INVALID);
    CHECK_OK(a.ShutDown());
    CHECK_OK(b.ShutDown());
}

static void TestPreRegister(int port)
{
    HeteroClient h(Opts(port));
    CHECK_OK(h.Init());
    const size_t kSize = 8192;
    std::vector<unsigned char> region(2 * kSize, 0), src = Pattern(5, kSize);
    CHECK_MSG(h.PreRegisterDeviceMemory({}, {}), K_INVALID, "should not be empty");
    CHECK_MSG(h.PreRegisterDeviceMemory({region.data()}, {1, 2}), K_INVALID, "does not match");
    CHECK_MSG(h.PreRegisterDeviceMemory({nullptr}, {kSize}), K_INVALID, "dev_ptrs[0]");
    CHECK_MSG(h.PreRegisterDeviceMemory({region.data()}, {0}), K_INVALID, "sizes[0]");
    CHECK_OK(h.PreRegisterDeviceMemory({region.data()}, {region.size()}));
    // The same range again is kept as it is; a range overlapping it is refused.
    CHECK_OK(h.PreRegisterDeviceMemory({region.data()}, {region.size()}));
    CHECK_MSG(h.PreRegisterDeviceMemory({region.data() + 1}, {kSize}), K_INVALID, "overlaps");
    std::vector<DeviceBlobList> set = {Cut(src, {kSize})};
    CHECK_OK(h.MSetD2H({"hc.reg"}, set));
    // Into the registered range: fine; past its end: that key fails.
    std::vector<std::string> failed;
    std::vector<DeviceBlobList> in = {Cut(region, {kSize}, 0)};
    in[0].blobs[0].pointer = region.data() + kSize;
    CHECK_OK(h.MGetH2D({"hc.reg"}, in, failed, 0));
    CHECK(memcmp(region.data() + kSize, src.data(), kSize) == 0);
    std::vector<unsigned char> outside(kSize + 1, 0);
    std::vector<DeviceBlobList> past = {DeviceBlobList{}};
    past[0].blobs.push_back(Blob{region.data() + kSize + 1, kSize - 1});
    past[0].blobs.push_back(Blob{outside.data(), 1});
    CHECK_OK(h.MGetH2D({"hc.reg"}, past, failed, 0)); // inside, in two blobs
    past[0].blobs[0].size = kSize;
    past[0].blobs.pop_back();
    CHECK_MSG(h.MGetH2D({"hc.reg"}, past, failed, 0), K_INVALID, "registered");
    CHECK(failed == std::vector<std::string>{"hc.reg"});
    CHECK_OK(h.Delete({"hc.reg"}, failed));
    CHECK_OK(h.ShutDown());
}

static void TestErrors(int port)
{
    HeteroClient h(Opts(port));
    std::vector<std::string> failed;
    std::vector<unsigned char> buf(16, 1);
    std::vector<DeviceBlobList> one = {Cut(buf, {16})};
    CHECK_CODE(h.MSetD2H({"hc.e"}, one), K_NOT_READY); // before Init
    CHECK_CODE(h.MGetH2D({"hc.e"}, one, failed, 0), K_NOT_READY);
    CHECK_CODE(h.AsyncMGetH2D({"hc.e"}, one, 0).get().status, K_NOT_READY);
    CHECK_OK(h.Init());
    CHECK_MSG(h.MSetD2H({}, {}), K_INVALID, "should not be empty");
    CHECK_MSG(h.MSetD2H({"hc.e", "hc.f"}, one), K_INVALID, "must match");
    std::vector<DeviceBlobList> nul = {DeviceBlobList{}};
    nul[0].blobs.push_back(Blob{nullptr, 16});
    CHECK_MSG(h.MSetD2H({"hc.e"}, nul), K_INVALID, "NULL pointer");
    std::vector<DeviceBlobList> empty = {DeviceBlobList{}};
    CHECK_MSG(h.MSetD2H({"hc.e"}, empty), K_INVALID, "empty");
    CHECK_CODE(h.MSetD2H({"bad key"}, one), K_INVALID);
    one[0].srcOffset = -1;
    CHECK_MSG(h.MGetH2D({"hc.e"}, one, failed, 0), K_INVALID, "srcOffset");
    one[0].srcOffset = 0;
    one[0].deviceIdx = 1; // the host backend has device 0 only
    CHECK_MSG(h.MSetD2H({"hc.e"}, one), K_INVALID, "device index 1");
    CHECK_CODE(h.Delete({}, failed), K_INVALID);
    std::vector<bool> ex;
    CHECK_CODE(h.Exist({}, ex), K_INVALID);
    CHECK_OK(h.ShutDown());
    CHECK_CODE(h.Exist({"hc.e"}, ex), K_NOT_READY); // after ShutDown
}

int main()
{
    // Host memory stands in for device memory (chosen once per process).
    setenv("DS_DEVICE_BACKEND", "host", 1);
    const char *build = getenv("DS_BUILD_DIR");
    std::string bin = std::string(build ? build : ".") + "/src/worker/datasystem_worker";
    TestWorker w;
    if (!w.Start(bin, 64)) return 1;
    TestRoundTrip(w.Port());
    TestAsync(w.Port());
    TestDev(w.Port());
    TestPreRegister(w.Port());
    TestErrors(w.Port());
    return CheckReport("test_cpp_hetero");
}
