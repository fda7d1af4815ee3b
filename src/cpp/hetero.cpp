/* HeteroClient and Future: each call is the matching ds_hetero_* call (or a
 * KV call of its client) on one ds_hetero_t held by ObjectClientImpl.
 *
 * The async calls use the C library's own (ds_hetero_async_*), which copy
 * their arguments and fix "the current device" on the calling thread; a
 * thread of the SDK waits for the C future and turns it into an
 * AsyncResult. Work that touches the client after the C future completed
 * (AsyncDevDelete) and the waits of DevPublish's and DevSubscribe's futures
 * hold the connection (ObjectClientImpl::Enter), so ShutDown waits for
 * them. */
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "datasystem/hetero_client.h"
#include "internal.h"

namespace datasystem
{

using object_cache::ObjectClientImpl;

/* The one maker of Futures (the constructor is private, as Yuanrong's). */
class PromiseWithEvent
{
  public:
    static Future Make(std::shared_future<Status> f, const std::string &key)
    {
        return Future(std::move(f), nullptr, key);
    }
};

Future::Future(std::shared_future<Status> future, std::shared_ptr<DeviceRtEventWrapper> event,
               const std::string &objectKey)
    : future_(std::move(future)), event_(std::move(event)), objectKey_(objectKey)
{
}

/* The longest a Future's Get may wait (Yuanrong's bound). */
static constexpr uint64_t kMaxFutureWaitMs = 1800000;

Status Future::Get(uint64_t subTimeoutMs)
{
    if (subTimeoutMs > kMaxFutureWaitMs)
        return Status(K_INVALID, "The subTimeoutMs should be in range of [0, 1'800'000].");
    std::string name = "future with objectKey: " + objectKey_;
    if (!future_.valid()) return Status(K_RUNTIME_ERROR, "The " + name + " is invalid.");
    if (future_.wait_for(std::chrono::milliseconds(subTimeoutMs)) != std::future_status::ready)
        return Status(K_FUTURE_TIMEOUT, "The " + name + " get is timeout (" +
                                            std::to_string(subTimeoutMs) +
                                            " ms), still waiting for promise setting value, "
                                            "please try again.");
    return future_.get();
}

namespace
{

/* How long DevSubscribe waits for its keys to be published (Yuanrong's). */
constexpr int32_t kSubscribeWaitMs = 60000;

/* A batch in the C API's terms; the pointers are into keys and blobs. */
struct CBatch {
    std::vector<const char *> keys;
    std::vector<ds_blob_t> blobs;
    std::vector<ds_device_blob_list_t> lists;
};

Status BuildBatch(const char *method, const std::vector<std::string> &keys,
                  const std::vector<DeviceBlobList> &lists, CBatch &b)
{
    std::string m(method);
    if (keys.empty() || lists.empty())
        return Status(K_INVALID, m + ": The input of keys and devBlobList should not be empty");
    if (keys.size() != lists.size())
        return Status(K_INVALID, m + ": keys has " + std::to_string(keys.size()) +
                                     " entries and devBlobList " + std::to_string(lists.size()) +
                                     "; they must match");
    size_t nb = 0;
    for (size_t i = 0; i < lists.size(); i++) {
        if (lists[i].srcOffset < 0)
            return Status(K_INVALID, m + ": devBlobList[" + std::to_string(i) +
                                         "].srcOffset is negative (" +
                                         std::to_string(lists[i].srcOffset) + ")");
        nb += lists[i].blobs.size();
    }
    b.keys = KeyPtrs(keys);
    b.blobs.clear();
    b.blobs.reserve(nb);
    b.lists.resize(lists.size());
    for (size_t i = 0; i < lists.size(); i++) {
        ds_device_blob_list_t &l = b.lists[i];
        l.blobs = b.blobs.data() + b.blobs.size();
        l.n_blobs = lists[i].blobs.size();
        l.dev_idx = lists[i].deviceIdx;
        l.src_offset = static_cast<uint64_t>(lists[i].srcOffset);
        for (const Blob &x : lists[i].blobs)
            b.blobs.push_back(ds_blob_t{reinterpret_cast<uintptr_t>(x.pointer), x.size});
        if (l.n_blobs == 0) l.blobs = nullptr;
    }
    return Status();
}

/* Builds the batch and finds the client's hetero handle: nullptr, with *st
 * saying why, when the input is bad or the client cannot serve hetero calls. */
ds_hetero_t *BatchAndHetero(const ObjectClientImpl &impl, const char *method,
                            const std::vector<std::string> &keys,
                            const std::vector<DeviceBlobList> &lists, CBatch &b, Status *st)
{
    *st = BuildBatch(method, keys, lists, b);
    if (st->IsError()) return nullptr;
    return impl.GetHetero(st, method);
}

std::vector<std::string> Failed(const std::vector<std::string> &keys,
                                const std::vector<ds_status_t> &st)
{
    std::vector<std::string> out;
    for (size_t i = 0; i < keys.size(); i++)
        if (st[i] != DS_K_OK) out.push_back(keys[i]);
    return out;
}

/* DevMSet's copy of each key's device blobs to the host
 * with the default SetParam: the call's status, each key's in sts. Bad
 * input, or a client that cannot serve hetero calls, gives its status
 * with sts left empty. */
Status SetFromDevice(const ObjectClientImpl &impl, const char *method,
                     const std::vector<std::string> &keys, const std::vector<DeviceBlobList> &lists,
                     std::vector<ds_status_t> &sts)
{
    CBatch b;
    Status st;
    ds_hetero_t *h = BatchAndHetero(impl, method, keys, lists, b, &st);
    if (h == nullptr) return st;
    sts.assign(keys.size(), DS_K_OK);
    return FromC(
        ds_hetero_mset_d2h(h, keys.size(), b.keys.data(), b.lists.data(), nullptr, sts.data()));
}

std::shared_future<AsyncResult> Ready(Status st, std::vector<std::string> failed)
{
    std::promise<AsyncResult> p;
    p.set_value(AsyncResult{std::move(st), std::move(failed)});
    return p.get_future().share();
}

/* Runs fn on a thread of its own; a thread that cannot start gives the
 * error as the result. */
template <typename Fn> std::shared_future<AsyncResult> Spawn(Fn fn)
{
    try {
        return std::async(std::launch::async, std::move(fn)).share();
    } catch (const std::system_error &e) {
        return Ready(Status(K_RUNTIME_ERROR,
                            std::string("cannot start the async call's thread: ") + e.what()),
                     {});
    }
}

/* The AsyncResult of a C future (taken over). */
std::shared_future<AsyncResult> Await(ds_future_t *f, std::vector<std::string> keys)
{
    std::shared_ptr<ds_future_t> hold(f, ds_future_release);
    return Spawn([hold, keys]() {
        std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
        Status st = FromC(ds_future_get(hold.get(), -1, sts.data()));
        return AsyncResult{st, Failed(keys, sts)};
    });
}

/* Deletes keys on the held connection: K_OK when any key was deleted. */
AsyncResult DeleteHeld(const std::shared_ptr<ObjectClientImpl> &impl,
                       const std::vector<std::string> &keys, const char *method)
{
    ds_client_t *c = impl->Enter();
    if (c == nullptr)
        return AsyncResult{Status(K_NOT_READY, std::string(method) +
                                                   ": the client is not connected (Init not "
                                                   "called, failed, or ShutDown)"),
                           keys};
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    Status st = FromC(ds_kv_del(c, keys.size(), k.data(), sts.data()));
    impl->Leave();
    std::vector<std::string> failed = Failed(keys, sts);
    if (st.IsError() && failed.size() < keys.size()) st = Status();
    return AsyncResult{st, failed};
}

} // namespace

HeteroClient::HeteroClient(const ConnectOptions &connectOptions)
    : impl_(std::make_shared<ObjectClientImpl>(connectOptions))
{
}

HeteroClient::~HeteroClient() = default;

Status HeteroClient::IsCompileWithHetero()
{
    return Status();
}

Status HeteroClient::ShutDown()
{
    return impl_->ShutDown();
}

Status HeteroClient::Init()
{
    return impl_->Connect("HeteroClient", true);
}

Status HeteroClient::MGetH2D(const std::vector<std::string> &keys,
                             const std::vector<DeviceBlobList> &devBlobList,
                             std::vector<std::string> &failKeys, int32_t subTimeoutMs)
{
    failKeys.clear();
    CBatch b;
    Status st;
    ds_hetero_t *h = BatchAndHetero(*impl_, "HeteroClient::MGetH2D", keys, devBlobList, b, &st);
    if (h == nullptr) return st;
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st = FromC(ds_hetero_mget_h2d(h, keys.size(), b.keys.data(), b.lists.data(), subTimeoutMs,
                                  sts.data()));
    failKeys = Failed(keys, sts);
    return st;
}

Status HeteroClient::PreRegisterDeviceMemory(const std::vector<void *> &devPtrs,
                                             const std::vector<uint64_t> &sizes)
{
    if (devPtrs.empty() || sizes.empty())
        return Status(K_INVALID, "The input of devPtrs and sizes should not be empty");
    if (devPtrs.size() != sizes.size())
        return Status(K_INVALID, "The size of devPtrs and sizes does not match");
    Status st;
    ds_hetero_t *h = impl_->GetHetero(&st, "HeteroClient::PreRegisterDeviceMemory");
    if (h == nullptr) return st;
    std::vector<uint64_t> ptrs(devPtrs.size());
    for (size_t i = 0; i < devPtrs.size(); i++)
        ptrs[i] = reinterpret_cast<uintptr_t>(devPtrs[i]);
    return FromC(ds_hetero_pre_register_device_memory(h, ptrs.size(), ptrs.data(), sizes.data()));
}

Status HeteroClient::MSetD2H(const std::vector<std::string> &keys,
                             const std::vector<DeviceBlobList> &devBlobList,
                             const SetParam &setParam)
{
    return MSetD2H(keys, devBlobList, setParam, nullptr);
}

Status HeteroClient::MSetD2H(const std::vector<std::string> &keys,
                             const std::vector<DeviceBlobList> &devBlobList,
                             const SetParam &setParam, std::vector<std::string> *outLocalSetKeys)
{
    if (outLocalSetKeys != nullptr) outLocalSetKeys->clear();
    const char *m = "HeteroClient::MSetD2H";
    CBatch b;
    Status st = BuildBatch(m, keys, devBlobList, b);
    if (st.IsError()) return st;
    if (setParam.cacheType != CacheType::MEMORY)
        return NotSupported(m, "CacheType::DISK (values live in the worker's memory)");
    ds_hetero_t *h = impl_->GetHetero(&st, m);
    if (h == nullptr) return st;
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = static_cast<ds_write_mode_t>(setParam.writeMode);
    p.ttl_second = setParam.ttlSecond;
    p.existence = static_cast<ds_existence_t>(setParam.existence);
    /* An NX set keeps a key that exists with K_OK: such keys were not set
     * by this call, so they are left out of outLocalSetKeys. */
    std::unique_ptr<bool[]> existed(new bool[keys.size()]());
    if (outLocalSetKeys != nullptr && setParam.existence == ExistenceOpt::NX)
        (void)ds_kv_exist(ds_hetero_kv(h), keys.size(), b.keys.data(), existed.get());
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st = FromC(ds_hetero_mset_d2h(h, keys.size(), b.keys.data(), b.lists.data(), &p, sts.data()));
    if (outLocalSetKeys != nullptr)
        for (size_t i = 0; i < keys.size(); i++)
            if (sts[i] == DS_K_OK && !existed[i]) outLocalSetKeys->push_back(keys[i]);
    return st;
}

Status HeteroClient::Delete(const std::vector<std::string> &keys,
                            std::vector<std::string> &failedKeys)
{
    failedKeys.clear();
    if (keys.empty()) return Status(K_INVALID, "HeteroClient::Delete: the key list is empty");
    Status st;
    if (impl_->GetHetero(&st, "HeteroClient::Delete") == nullptr) return st;
    AsyncResult r = DeleteHeld(impl_, keys, "HeteroClient::Delete");
    failedKeys = std::move(r.failedList);
    return r.status;
}

std::shared_future<AsyncResult>
HeteroClient::AsyncMSetD2H(const std::vector<std::string> &keys,
                           const std::vector<DeviceBlobList> &devBlobList, const SetParam &setParam)
{
    const char *m = "HeteroClient::AsyncMSetD2H";
    CBatch b;
    Status st = BuildBatch(m, keys, devBlobList, b);
    if (st.IsError()) return Ready(st, keys);
    if (setParam.cacheType != CacheType::MEMORY)
        return Ready(NotSupported(m, "CacheType::DISK (values live in the worker's memory)"), keys);
    ds_hetero_t *h = impl_->GetHetero(&st, m);
    if (h == nullptr) return Ready(st, keys);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = static_cast<ds_write_mode_t>(setParam.writeMode);
    p.ttl_second = setParam.ttlSecond;
    p.existence = static_cast<ds_existence_t>(setParam.existence);
    ds_future_t *f = nullptr;
    st = FromC(ds_hetero_async_mset_d2h(h, keys.size(), b.keys.data(), b.lists.data(), &p, &f));
    if (st.IsError()) return Ready(st, keys);
    return Await(f, keys);
}

std::shared_future<AsyncResult>
HeteroClient::AsyncMGetH2D(const std::vector<std::string> &keys,
                           const std::vector<DeviceBlobList> &devBlobList, uint64_t subTimeoutMs)
{
    const char *m = "HeteroClient::AsyncMGetH2D";
    CBatch b;
    Status st = BuildBatch(m, keys, devBlobList, b);
    if (st.IsError()) return Ready(st, keys);
    if (subTimeoutMs > static_cast<uint64_t>(INT32_MAX))
        return Ready(Status(K_INVALID, std::string(m) + ": subTimeoutMs " +
                                           std::to_string(subTimeoutMs) + " is over " +
                                           std::to_string(INT32_MAX)),
                     keys);
    ds_hetero_t *h = impl_->GetHetero(&st, m);
    if (h == nullptr) return Ready(st, keys);
    ds_future_t *f = nullptr;
    st = FromC(ds_hetero_async_mget_h2d(h, keys.size(), b.keys.data(), b.lists.data(),
                                        static_cast<int32_t>(subTimeoutMs), &f));
    if (st.IsError()) return Ready(st, keys);
    return Await(f, keys);
}

Status HeteroClient::GenerateKey(const std::string &prefix, std::string &key)
{
    Status st;
    ds_hetero_t *h = impl_->GetHetero(&st, "HeteroClient::GenerateKey");
    if (h == nullptr) return st;
    /* Yuanrong's: a prefix is the key itself, once it passes the key rules. */
    if (!prefix.empty()) {
        st = FromC(ds_key_validate(prefix.c_str(), prefix.size()));
        if (st.IsOk()) key = prefix;
        return st;
    }
    char *out = nullptr;
    st = FromC(ds_kv_generate_key(ds_hetero_kv(h), "", &out));
    if (st.IsOk()) key.assign(out);
    ds_free(out);
    return st;
}

namespace
{

/* The waits of DevPublish's and DevSubscribe's futures run in slices of
 * this length, each holding the connection (Enter), so ShutDown ends them
 * within a slice. */
constexpr int32_t kWaitSliceMs = 200;

/* Runs step(hetero, pending key indexes, slice ms, codes out) on the held
 * client until every key in todo has a final code or kSubscribeWaitMs
 * passed; a code of DS_K_FUTURE_TIMEOUT or DS_K_NOT_FOUND means "not yet"
 * until the last slice. Sets each todo key's promise. */
template <typename Step>
void RunSlices(const std::shared_ptr<ObjectClientImpl> &impl, const char *method,
               std::vector<std::promise<Status>> &promises, std::vector<size_t> todo, Step step)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSubscribeWaitMs);
    std::vector<ds_status_t> codes(promises.size(), DS_K_OK);
    std::vector<size_t> all = todo;
    std::string msg;
    while (!todo.empty()) {
        long long left = std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())
                             .count();
        bool last = left <= kWaitSliceMs;
        int32_t slice = static_cast<int32_t>(left < 0 ? 0 : (last ? left : kWaitSliceMs));
        ds_client_t *c = impl->Enter();
        Status hs;
        ds_hetero_t *h = c ? impl->GetHetero(&hs, method) : nullptr;
        if (h == nullptr) {
            if (c) impl->Leave();
            for (size_t i : todo)
                codes[i] = DS_K_NOT_READY;
            msg = std::string(method) +
                  ": the client is not connected (Init not called, failed, or ShutDown)";
            break;
        }
        std::vector<ds_status_t> got(todo.size(), DS_K_OK);
        ds_status_t rc = step(h, todo, slice, got.data());
        if (rc != DS_K_OK) msg = ds_last_error();
        impl->Leave();
        std::vector<size_t> next;
        for (size_t p = 0; p < todo.size(); p++) {
            bool later = got[p] == DS_K_FUTURE_TIMEOUT || got[p] == DS_K_NOT_FOUND;
            if (later && !last)
                next.push_back(todo[p]);
            else
                codes[todo[p]] = got[p];
        }
        todo.swap(next);
    }
    for (size_t i : all)
        promises[i].set_value(codes[i] == DS_K_OK ? Status()
                                                  : Status(static_cast<StatusCode>(codes[i]), msg));
}

/* Starts fn on a detached thread: false when none could start. */
template <typename Fn> bool Detach(Fn fn)
{
    try {
        std::thread(std::move(fn)).detach();
        return true;
    } catch (const std::system_error &) {
        return false;
    }
}

} // namespace

/* DevPublish records the publisher's device memory with the value (the
 * C library's ds_hetero_dev_publish); each future completes once its key
 * was received (deleted by the subscriber), since until then a subscriber
 * may copy straight from this memory. */
Status HeteroClient::DevPublish(const std::vector<std::string> &keys,
                                const std::vector<DeviceBlobList> &devBlobList,
                                std::vector<Future> &futureVec)
{
    futureVec.clear();
    const char *m = "HeteroClient::DevPublish";
    CBatch b;
    Status st;
    ds_hetero_t *h = BatchAndHetero(*impl_, m, keys, devBlobList, b, &st);
    if (h == nullptr) return st;
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st = FromC(ds_hetero_dev_publish(h, keys.size(), b.keys.data(), b.lists.data(), sts.data()));
    if (st.IsError() && Failed(keys, sts).size() == keys.size()) return st;
    auto promises = std::make_shared<std::vector<std::promise<Status>>>(keys.size());
    std::vector<size_t> todo;
    for (size_t i = 0; i < keys.size(); i++) {
        futureVec.push_back(PromiseWithEvent::Make((*promises)[i].get_future().share(), keys[i]));
        if (sts[i] == DS_K_OK)
            todo.push_back(i);
        else
            (*promises)[i].set_value(Status(static_cast<StatusCode>(sts[i]), st.GetMsg()));
    }
    std::shared_ptr<ObjectClientImpl> impl = impl_;
    auto wait = [impl, keys, promises, todo, m]() {
        RunSlices(impl, m, *promises, todo,
                  [&keys](ds_hetero_t *hh, const std::vector<size_t> &pend, int32_t slice,
                          ds_status_t *out) {
                      std::vector<const char *> k;
                      for (size_t i : pend)
                          k.push_back(keys[i].c_str());
                      return ds_hetero_dev_wait_received(hh, k.size(), k.data(), slice, out);
                  });
    };
    if (!todo.empty() && !Detach(wait)) {
        futureVec.clear();
        return Status(K_RUNTIME_ERROR, std::string(m) + ": cannot start a thread");
    }
    return Status();
}

/* DevSubscribe: the C library's ds_hetero_dev_subscribe, device to device
 * from the publisher's memory on this machine, else from the worker's
 * copy; what it received is deleted (consumed). */
Status HeteroClient::DevSubscribe(const std::vector<std::string> &keys,
                                  const std::vector<DeviceBlobList> &devBlobList,
                                  std::vector<Future> &futureVec)
{
    futureVec.clear();
    const char *m = "HeteroClient::DevSubscribe";
    CBatch b;
    Status st;
    ds_hetero_t *h = BatchAndHetero(*impl_, m, keys, devBlobList, b, &st);
    if (h == nullptr) return st;
    /* "The current device" is the caller's: fixed here, as the copies run
     * on another thread. */
    std::vector<DeviceBlobList> lists = devBlobList;
    for (DeviceBlobList &l : lists)
        if (l.deviceIdx < 0) {
            int32_t cur = -1;
            st = FromC(ds_device_current(&cur));
            if (st.IsError()) return st;
            l.deviceIdx = cur;
        }
    auto promises = std::make_shared<std::vector<std::promise<Status>>>(keys.size());
    std::vector<size_t> todo;
    for (size_t i = 0; i < keys.size(); i++) {
        futureVec.push_back(PromiseWithEvent::Make((*promises)[i].get_future().share(), keys[i]));
        todo.push_back(i);
    }
    std::shared_ptr<ObjectClientImpl> impl = impl_;
    auto wait = [impl, keys, lists, promises, todo, m]() {
        RunSlices(impl, m, *promises, todo,
                  [&keys, &lists, m](ds_hetero_t *hh, const std::vector<size_t> &pend,
                                     int32_t slice, ds_status_t *out) {
                      std::vector<std::string> k;
                      std::vector<DeviceBlobList> l;
                      for (size_t i : pend) {
                          k.push_back(keys[i]);
                          l.push_back(lists[i]);
                      }
                      CBatch cb;
                      if (BuildBatch(m, k, l, cb).IsError()) return DS_K_INVALID;
                      return ds_hetero_dev_subscribe(hh, k.size(), cb.keys.data(), cb.lists.data(),
                                                     slice, out);
                  });
    };
    if (!Detach(wait)) {
        futureVec.clear();
        return Status(K_RUNTIME_ERROR, std::string(m) + ": cannot start a thread");
    }
    return Status();
}

Status HeteroClient::DevMGet(const std::vector<std::string> &keys,
                             std::vector<DeviceBlobList> &devBlobList,
                             std::vector<std::string> &failedKeys, int32_t subTimeoutMs)
{
    return MGetH2D(keys, devBlobList, failedKeys, subTimeoutMs);
}

Status HeteroClient::DevMSet(const std::vector<std::string> &keys,
                             const std::vector<DeviceBlobList> &devBlobList,
                             std::vector<std::string> &failedKeys)
{
    failedKeys.clear();
    std::vector<ds_status_t> sts;
    Status st = SetFromDevice(*impl_, "HeteroClient::DevMSet", keys, devBlobList, sts);
    if (sts.empty()) return st;
    failedKeys = Failed(keys, sts);
    if (st.IsError() && failedKeys.size() < keys.size()) st = Status();
    return st;
}

std::shared_future<AsyncResult> HeteroClient::AsyncDevDelete(const std::vector<std::string> &keys)
{
    if (keys.empty())
        return Ready(Status(K_INVALID, "HeteroClient::AsyncDevDelete: the key list is empty"), {});
    std::shared_ptr<ObjectClientImpl> impl = impl_;
    return Spawn([impl, keys]() { return DeleteHeld(impl, keys, "HeteroClient::AsyncDevDelete"); });
}

Status HeteroClient::DevDelete(const std::vector<std::string> &keys,
                               std::vector<std::string> &failedKeys)
{
    failedKeys.clear();
    if (keys.empty()) return Status(K_INVALID, "HeteroClient::DevDelete: the key list is empty");
    AsyncResult r = DeleteHeld(impl_, keys, "HeteroClient::DevDelete");
    failedKeys = std::move(r.failedList);
    return r.status;
}

Status HeteroClient::DevLocalDelete(const std::vector<std::string> &keys,
                                    std::vector<std::string> &failedKeys)
{
    failedKeys.clear();
    if (keys.empty())
        return Status(K_INVALID, "HeteroClient::DevLocalDelete: the key list is empty");
    AsyncResult r = DeleteHeld(impl_, keys, "HeteroClient::DevLocalDelete");
    failedKeys = std::move(r.failedList);
    return r.status;
}

Status HeteroClient::HealthCheck(ServerState &state)
{
    Status st;
    ds_client_t *c = impl_->Get(&st, "HeteroClient::HealthCheck");
    if (c == nullptr) return st;
    st = FromC(ds_client_health_check(c));
    if (st.IsOk()) state = ServerState::NORMAL;
    return st;
}

Status HeteroClient::Exist(const std::vector<std::string> &keys, std::vector<bool> &exists)
{
    return ExistKeys(*impl_, "HeteroClient::Exist", keys, exists);
}

Status HeteroClient::GetMetaInfo(const std::vector<std::string> &keys, bool isDevKey,
                                 std::vector<MetaInfo> &metaInfos,
                                 std::vector<std::string> &failKeys)
{
    (void)isDevKey; /* device and host keys are kept alike here */
    metaInfos.clear();
    failKeys.clear();
    if (keys.empty()) return Status(K_INVALID, "HeteroClient::GetMetaInfo: the key list is empty");
    Status st;
    ds_client_t *c = impl_->Get(&st, "HeteroClient::GetMetaInfo");
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<ds_obj_meta_t> metas(keys.size());
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st =
        FromC(ds_object_get_meta_info(c, nullptr, keys.size(), k.data(), metas.data(), sts.data()));
    metaInfos.resize(keys.size());
    for (size_t i = 0; i < keys.size(); i++) {
        if (sts[i] == DS_K_OK && metas[i].size > 0)
            metaInfos[i].blobSizeList.push_back(metas[i].size);
        else
            failKeys.push_back(keys[i]);
    }
    return st;
}

} // namespace datasystem
