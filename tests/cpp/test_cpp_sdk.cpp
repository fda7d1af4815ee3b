// The C++ SDK (include/datasystem/) against a real worker: each call's
// values and status codes, the calls answered K_NOT_SUPPORTED, and one client
// shared by several threads. DS_BUILD_DIR names the build with the worker.
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cpp_check.h"
#include "cpp_worker.h"
#include "datasystem/datasystem.h"

using namespace datasystem;

// K_NOT_SUPPORTED, with a message naming the method.
#define CHECK_UNSUPPORTED(expr, method)                                                            \
    do {                                                                                           \
        Status _s = (expr);                                                                        \
        CHECK(_s.GetCode() == K_NOT_SUPPORTED);                                                    \
        CHECK(_s.GetMsg().find(method) != std::string::npos);                                      \
    } while (0)

static ConnectOptions Opts(int port)
{
    ConnectOptions o{.host = "127.0.0.1", .port = port, .connectTimeoutMs = 3000};
    return o;
}

static void TestStatus()
{
    Status ok;
    CHECK(ok.IsOk() && !ok.IsError() && static_cast<bool>(ok));
    CHECK(ok.ToString() == "code: [K_OK], msg: []");
    Status nf(K_NOT_FOUND, "key 'a' not found");
    CHECK(nf.IsError() && nf.GetCode() == K_NOT_FOUND);
    CHECK(nf.ToString() == "code: [K_NOT_FOUND], msg: [key 'a' not found]");
    Status copy = nf;
    CHECK(copy == nf && copy != ok && copy.GetMsg() == nf.GetMsg());
    Status moved = std::move(copy);
    CHECK(moved.GetCode() == K_NOT_FOUND);
    moved.AppendMsg("!");
    CHECK(moved.GetMsg() == "key 'a' not found!");
    CHECK(Status::StatusCodeName(K_OC_KEY_ALREADY_EXIST) == "K_OC_KEY_ALREADY_EXIST");
    CHECK(Status::StatusCodeName(static_cast<StatusCode>(4242)) == "K_UNKNOWN");
    CHECK(GetStatusCodeByName("K_RPC_UNAVAILABLE") == K_RPC_UNAVAILABLE);
    CHECK(GetStatusCodeByName("nonsense") == K_UNKNOWN_ERROR);
    Status at(K_INVALID, 12, "f.cpp", "bad");
    CHECK(at.GetMsg() == "f.cpp:12 bad");
    CHECK(Status().WithExtra("x").GetExtra() == "x");
    SensitiveValue sv("secret");
    CHECK(sv.GetSize() == 6 && std::string(sv.GetData()) == "secret");
    SensitiveValue sv2 = sv;
    CHECK(sv2 == sv);
    sv.Clear();
    CHECK(sv.Empty() && std::string(sv.GetData()).empty());
    KVClientConfig cfg;
    CHECK_OK(KVClientConfig::Builder().LogDir("/tmp").MaxLogSize(100).Build(cfg));
    CHECK(cfg.GetArgs().at("MaxLogSize") == "100");
    CHECK_CODE(KVClientConfig::Builder().MaxLogSize(-1).Build(cfg), K_INVALID);
    CHECK_OK(Context::SetTraceId("cpp-test"));
    CHECK_CODE(Context::SetTraceId("bad id!"), K_INVALID);
    CHECK_OK(Context::SetTraceId(""));
}

static void TestInit(int port)
{
    KVClient notInit(Opts(port));
    CHECK_CODE(notInit.Set("k", "v"), K_NOT_READY);
    ConnectOptions bad = Opts(port);
    bad.host = "";
    CHECK(KVClient(bad).Init().IsError());
    ConnectOptions curve = Opts(port);
    curve.clientPublicKey = "pk";
    CHECK_UNSUPPORTED(KVClient(curve).Init(), "KVClient::Init");
    ConnectOptions aksk = Opts(port);
    aksk.SetAkSkAuth("ak", "sk", "");
    CHECK_UNSUPPORTED(ObjectClient(aksk).Init(), "ObjectClient::Init");
}

static void TestKV(int port)
{
    KVClient kv(Opts(port));
    KVClientConfig cfg;
    CHECK_OK(KVClientConfig::Builder().LogName("t").Build(cfg));
    CHECK_OK(kv.Init(cfg));
    CHECK_OK(kv.Init()); // a second Init keeps the connection
    CHECK_OK(kv.HealthCheck());

    CHECK_OK(kv.Set("cpp.a", "alpha"));
    std::string v;
    CHECK_OK(kv.Get("cpp.a", v));
    CHECK(v == "alpha");
    CHECK_CODE(kv.Get("cpp.missing", v), K_NOT_FOUND);

    // Small and large values in turn (Get picks its path from the last size).
    for (size_t size : {(size_t)10, (size_t)200000, (size_t)70000, (size_t)3, (size_t)5000000}) {
        std::string big(size, static_cast<char>('a' + size % 26));
        CHECK_OK(kv.Set("cpp.sz", big));
        CHECK_OK(kv.Get("cpp.sz", v));
        CHECK(v == big);
    }
    CHECK_CODE(kv.Get("cpp.missing", v), K_NOT_FOUND);
    CHECK_CODE(kv.Get("bad key", v), K_INVALID);

    SetParam nx;
    nx.existence = ExistenceOpt::NX;
    CHECK_OK(kv.Set("cpp.a", "beta", nx));
    CHECK_OK(kv.Get("cpp.a", v));
    CHECK(v == "alpha");

    SetParam disk;
    disk.cacheType = CacheType::DISK;
    CHECK_UNSUPPORTED(kv.Set("cpp.a", "x", disk), "KVClient::Set");

    Optional<ReadOnlyBuffer> rb;
    CHECK(!rb);
    CHECK_OK(kv.Get("cpp.a", rb));
    CHECK(static_cast<bool>(rb));
    CHECK_OK(rb->RLatch());
    CHECK(std::string(static_cast<const char *>(rb->ImmutableData()), rb->GetSize()) == "alpha");
    CHECK_OK(rb->UnRLatch());

    Optional<Buffer> b;
    CHECK_OK(kv.Get("cpp.a", b));
    CHECK(b && b->GetSize() == 5);

    std::vector<std::string> vals;
    CHECK_OK(kv.Get(std::vector<std::string>{"cpp.a", "cpp.missing"}, vals));
    CHECK(vals.size() == 2 && vals[0] == "alpha" && vals[1].empty());
    std::vector<Optional<Buffer>> bufs;
    CHECK_CODE(kv.Get(std::vector<std::string>{"cpp.missing"}, bufs), K_NOT_FOUND);
    CHECK(bufs.size() == 1 && !bufs[0]);

    std::shared_ptr<Buffer> created;
    CHECK_OK(kv.Create("cpp.c", 4, SetParam{}, created));
    CHECK_OK(created->MemoryCopy("wxyz", 4));
    CHECK_CODE(created->MemoryCopy("too long", 8), K_INVALID);
    CHECK_OK(kv.Set(created));
    CHECK_OK(kv.Get("cpp.c", v));
    CHECK(v == "wxyz");

    std::vector<std::shared_ptr<Buffer>> many;
    CHECK_OK(kv.MCreate({"cpp.m1", "cpp.m2"}, {1, 2}, SetParam{}, many));
    CHECK(many.size() == 2);
    CHECK_OK(many[0]->MemoryCopy("1", 1));
    CHECK_OK(many[1]->MemoryCopy("22", 2));
    CHECK_OK(kv.MSet(many));
    CHECK_CODE(kv.MSet(many), K_INVALID); // already published
    CHECK_OK(kv.Get("cpp.m2", v));
    CHECK(v == "22");

    std::vector<std::string> failed{"stale"};
    CHECK_OK(kv.MSet({"cpp.s1", "cpp.s2"}, {StringView("one"), StringView("two")}, failed));
    CHECK(failed.empty());
    CHECK_UNSUPPORTED(kv.MSetTx({"cpp.s1"}, {StringView("x")}), "KVClient::MSetTx");

    std::vector<Optional<ReadOnlyBuffer>> ranges;
    CHECK_OK(kv.Read({ReadParam{"cpp.s1", 1, 2}, ReadParam{"cpp.missing", 0, 0}}, ranges));
    CHECK(ranges.size() == 2 && ranges[0] && !ranges[1]);
    CHECK(std::string(static_cast<const char *>(ranges[0]->ImmutableData()),
                      ranges[0]->GetSize()) == "ne");

    std::vector<bool> exists;
    CHECK_OK(kv.Exist({"cpp.s1", "cpp.missing"}, exists));
    CHECK(exists.size() == 2 && exists[0] && !exists[1]);
    std::vector<uint64_t> sizes;
    CHECK_OK(kv.QuerySize({"cpp.s2"}, sizes));
    CHECK(sizes.size() == 1 && sizes[0] == 3);
    CHECK_CODE(kv.Expire({"cpp.s1", "cpp.missing"}, 100, failed), K_NOT_FOUND);
    CHECK(failed.size() == 1 && failed[0] == "cpp.missing");

    std::string gen = kv.GenerateKey("pre");
    CHECK(!gen.empty());
    std::string key = kv.Set(StringView("generated"));
    CHECK(!key.empty());
    CHECK_OK(kv.Get(key, v));
    CHECK(v == "generated");

    CHECK_OK(kv.Del("cpp.a"));
    CHECK_OK(kv.Del("cpp.a")); // a missing key is not an error
    CHECK_CODE(kv.Get("cpp.a", v), K_NOT_FOUND);
    CHECK_OK(kv.Del({"cpp.s1", "cpp.s2"}, failed));
    CHECK(failed.empty());

    CHECK_UNSUPPORTED(kv.UpdateToken("t"), "KVClient::UpdateToken");
    CHECK_UNSUPPORTED(kv.UpdateAkSk("a", "b"), "KVClient::UpdateAkSk");
    CHECK_UNSUPPORTED(kv.UpdateConfig("{}"), "KVClient::UpdateConfig");
    CHECK_UNSUPPORTED(kv.SetWorkerHealthCallback([](const Status &) {}),
                      "KVClient::SetWorkerHealthCallback");
    CHECK_UNSUPPORTED(kv.MGetH2D({"k"}, {}, failed), "KVClient::MGetH2D");
    EmbeddedConfig ec;
    CHECK(ec.Address("127.0.0.1:1").SharedMemorySizeMb(64).GetArgs().at("SharedMemorySizeMb") ==
          "64");
    CHECK_UNSUPPORTED(KVClient::InitEmbedded(ec), "KVClient::InitEmbedded");
    CHECK_CODE(KVClient::EmbeddedInstance().Set("k", "v"), K_NOT_READY);

    CHECK_OK(kv.ShutDown());
    CHECK_CODE(kv.Set("cpp.a", "x"), K_NOT_READY);
    // A buffer outlives its client's shutdown.
    CHECK(created->GetSize() == 4);
    CHECK(std::string(static_cast<const char *>(created->ImmutableData()), 4) == "wxyz");
}

static void TestObject(int port)
{
    ObjectClient oc(Opts(port));
    CHECK_OK(oc.Init());
    std::vector<std::string> failed;
    CHECK_OK(oc.GIncreaseRef({"cpp.obj"}, failed));
    CHECK(failed.empty());
    CHECK(oc.QueryGlobalRefNum("cpp.obj") == 1);

    std::shared_ptr<Buffer> buf;
    CHECK_OK(oc.Create("cpp.obj", 8, CreateParam{}, buf));
    CHECK_OK(buf->WLatch());
    CHECK_OK(buf->MemoryCopy("abcdefgh", 8));
    CHECK_OK(buf->Publish());
    CHECK_OK(buf->UnWLatch());
    CHECK_CODE(buf->UnWLatch(), K_INVALID); // not held
    CHECK_CODE(buf->UnRLatch(), K_INVALID);

    std::vector<Optional<Buffer>> got;
    CHECK_OK(oc.Get({"cpp.obj"}, 1000, got));
    CHECK(got.size() == 1 && got[0]);
    CHECK_OK(got[0]->RLatch());
    CHECK(std::string(static_cast<const char *>(got[0]->ImmutableData()), got[0]->GetSize()) ==
          "abcdefgh");
    CHECK_OK(got[0]->UnRLatch());
    // Modify a published object: the rest of its bytes stay.
    CHECK_OK(got[0]->WLatch());
    CHECK_OK(got[0]->MemoryCopy("XY", 2));
    CHECK_OK(got[0]->Publish());
    CHECK_OK(got[0]->UnWLatch());
    std::vector<Optional<Buffer>> again;
    CHECK_OK(oc.Get({"cpp.obj"}, 1000, again));
    CHECK(again[0] &&
          std::string(static_cast<const char *>(again[0]->ImmutableData()), 8) == "XYcdefgh");

    CHECK_OK(again[0]->Seal());
    CHECK_CODE(again[0]->MemoryCopy("z", 1), K_OC_ALREADY_SEALED);
    CHECK_CODE(again[0]->Publish(), K_OC_ALREADY_SEALED);
    CHECK(again[0]->MutableData() == nullptr);
    // The mark is the worker's: a put over a sealed object fails too.
    const uint8_t over[2] = {9, 9};
    CHECK_CODE(oc.Put("cpp.obj", over, 2, CreateParam{}), K_OC_ALREADY_SEALED);
    CHECK_UNSUPPORTED(again[0]->Publish({"nested"}), "Buffer::Publish");
    CHECK_UNSUPPORTED(again[0]->InvalidateBuffer(), "Buffer::InvalidateBuffer");

    // The last reference dropped deletes the object.
    CHECK_OK(oc.GDecreaseRef({"cpp.obj"}, failed));
    CHECK(failed.empty());
    CHECK_CODE(oc.Get({"cpp.obj"}, 0, got), K_NOT_FOUND);
    CHECK(oc.QueryGlobalRefNum("cpp.obj") == 0);

    const uint8_t data[3] = {1, 2, 3};
    CHECK_OK(oc.Put("cpp.put", data, 3, CreateParam{}));
    CHECK_OK(oc.Get({"cpp.put"}, 0, got));
    CHECK(got[0] && got[0]->GetSize() == 3 && memcmp(got[0]->ImmutableData(), data, 3) == 0);
    CreateParam causal;
    causal.consistencyType = ConsistencyType::CAUSAL;
    CHECK_UNSUPPORTED(oc.Create("cpp.c", 1, causal, buf), "ObjectClient::Create");
    CHECK_UNSUPPORTED(oc.GIncreaseRef({"k"}, failed, "remote"), "ObjectClient::GIncreaseRef");
    std::vector<ObjMetaInfo> metas;
    CHECK_UNSUPPORTED(oc.GetObjMetaInfo("", {"cpp.put"}, metas), "ObjectClient::GetObjMetaInfo");
    std::string id;
    CHECK_OK(oc.GenerateObjectKey("p", id));
    CHECK(!id.empty());
    std::string prefix;
    CHECK_OK(oc.GetPrefix(id, prefix));
    CHECK(prefix == id);
    CHECK_CODE(oc.GetPrefix("", prefix), K_INVALID);
    CHECK_CODE(oc.GetPrefix("bad key", prefix), K_INVALID);

    Buffer empty;
    CHECK_CODE(empty.Publish(), K_INVALID);
    CHECK(empty.GetSize() == 0 && empty.ImmutableData() == nullptr);
    CHECK_OK(oc.ShutDown());
}

static void TestThreads(int port)
{
    auto kv = std::make_shared<KVClient>(Opts(port));
    CHECK_OK(kv->Init());
    const int kThreads = 4, kOps = 50;
    std::vector<int> bad(kThreads, 0);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++)
        ts.emplace_back([&, t] {
            for (int i = 0; i < kOps; i++) {
                std::string key = "cpp.t" + std::to_string(t) + "." + std::to_string(i % 5);
                std::string val(100 + i, static_cast<char>('a' + t));
                std::string got;
                if (kv->Set(key, val).IsError() || kv->Get(key, got).IsError() || got != val)
                    bad[t]++;
            }
        });
    for (auto &t : ts)
        t.join();
    for (int t = 0; t < kThreads; t++)
        CHECK(bad[t] == 0);
    CHECK_OK(kv->ShutDown());
}

static void TestDsClient(int port)
{
    DsClient ds(Opts(port));
    CHECK_OK(ds.Init());
    CHECK(ds.Hetero() != nullptr);
    std::vector<bool> ex;
    CHECK_OK(ds.Hetero()->Exist({"cpp.ds"}, ex)); /* connected by ds.Init */
    CHECK_OK(ds.KV()->Set("cpp.ds", "v"));
    std::vector<Optional<Buffer>> got;
    CHECK_OK(ds.Object()->Get({"cpp.ds"}, 0, got));
    CHECK(got[0] && got[0]->GetSize() == 1);
    CHECK_OK(ds.ShutDown());
}

// A discovery of the caller's own: asked once, at Init.
class OneWorker : public IServiceDiscovery
{
  public:
    explicit OneWorker(int port) : port_(port) {}
    Status Init() override
    {
        return Status();
    }
    Status SelectWorker(std::string &ip, int &port, bool *same, bool *none) override
    {
        ip = "127.0.0.1";
        port = port_;
        if (same) *same = false;
        if (none) *none = false;
        calls++;
        return Status();
    }
    Status SelectSameNodeWorker(std::string &, int &) override
    {
        return Status(K_RUNTIME_ERROR, "none");
    }
    Status GetAllWorkers(std::vector<std::string> &same, std::vector<std::string> &other) override
    {
        same.clear();
        other = {"127.0.0.1:" + std::to_string(port_)};
        return Status();
    }
    ServiceAffinityPolicy GetAffinityPolicy() const override
    {
        return ServiceAffinityPolicy::RANDOM;
    }
    bool HasHostAffinity() const override
    {
        return false;
    }
    int calls = 0;

  private:
    int port_;
};

static void TestServiceDiscovery(int port)
{
    // The etcd-backed one: its options checked, an unreachable etcd named.
    ServiceDiscoveryOptions none;
    CHECK_CODE(ServiceDiscovery(none).Init(), K_INVALID);
    ServiceDiscoveryOptions bad;
    bad.etcdAddress = "127.0.0.1:1"; // nothing listens on port 1
    ServiceDiscovery unreachable(bad);
    Status st = unreachable.Init();
    CHECK(st.IsError() && st.GetMsg().find("etcd") != std::string::npos);
    std::string ip;
    int p = 0;
    bool noWorker = false;
    CHECK(unreachable.SelectWorker(ip, p, nullptr, &noWorker).IsError());
    bad.etcdCa = "ca.pem";
    CHECK_CODE(ServiceDiscovery(bad).Init(), K_NOT_SUPPORTED);
    CoordinatorServiceDiscoveryOptions co;
    CHECK_CODE(CoordinatorServiceDiscovery(co).Init(), K_INVALID);

    // A discovery of the caller's own names the worker.
    auto mine = std::make_shared<OneWorker>(port);
    ConnectOptions o;
    o.serviceDiscovery = mine;
    KVClient kv(o);
    CHECK_OK(kv.Init());
    CHECK(mine->calls == 1);
    CHECK_OK(kv.Set("cpp.sd", "v"));
    std::string got;
    CHECK_OK(kv.Get("cpp.sd", got));
    CHECK(got == "v");
    CHECK_OK(kv.ShutDown());
}

int main()
{
    const char *build = getenv("DS_BUILD_DIR");
    std::string bin = std::string(build ? build : ".") + "/src/worker/datasystem_worker";
    TestStatus();
    TestWorker w;
    if (!w.Start(bin, 64)) return 1;
    TestInit(w.Port());
    TestKV(w.Port());
    TestObject(w.Port());
    TestThreads(w.Port());
    TestDsClient(w.Port());
    TestServiceDiscovery(w.Port());
    return CheckReport("test_cpp_sdk");
}
