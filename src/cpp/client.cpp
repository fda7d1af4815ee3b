/* KVClient, ObjectClient and DsClient: each call is the matching C API call
 * on one shared ds_client_t (ObjectClientImpl). */
#include <cstring>
#include <memory>

#include "datasystem/datasystem.h"
#include "datasystem/utils/service_discovery.h"
#include "internal.h"

namespace datasystem
{

using object_cache::BufferState;
using object_cache::ObjectClientImpl;

std::vector<const char *> KeyPtrs(const std::vector<std::string> &keys)
{
    std::vector<const char *> p(keys.size());
    for (size_t i = 0; i < keys.size(); i++)
        p[i] = keys[i].c_str();
    return p;
}

namespace
{

/* The keys whose status is not K_OK. */
void FailedKeys(const std::vector<std::string> &keys, const std::vector<ds_status_t> &st,
                std::vector<std::string> &failed)
{
    failed.clear();
    for (size_t i = 0; i < keys.size(); i++)
        if (st[i] != DS_K_OK) failed.push_back(keys[i]);
}

template <typename P> Status ToC(const P &p, ds_set_param_t *out, const char *method)
{
    if (p.cacheType != CacheType::MEMORY)
        return NotSupported(
            method,
            "CacheType::DISK (values live in the worker's memory; spilling is its tiering)");
    out->write_mode = static_cast<ds_write_mode_t>(p.writeMode);
    out->ttl_second = p.ttlSecond;
    out->existence = static_cast<ds_existence_t>(p.existence);
    return Status();
}

Status CheckCreateParam(const CreateParam &p, const char *method)
{
    if (p.consistencyType != ConsistencyType::PRAM)
        return NotSupported(method, "ConsistencyType::CAUSAL (objects here are PRAM-consistent)");
    if (p.cacheType != CacheType::MEMORY)
        return NotSupported(method, "CacheType::DISK (values live in the worker's memory)");
    return Status();
}

Status CheckKeys(const std::vector<std::string> &keys, const char *method)
{
    if (keys.empty()) return Status(K_INVALID, std::string(method) + ": the key list is empty");
    return Status();
}

/* Pins keys' values (ds_kv_get_buffers); out[i] is nullptr for a missing one. */
Status GetBuffers(const std::shared_ptr<ObjectClientImpl> &impl,
                  const std::vector<std::string> &keys, int32_t timeoutMs,
                  std::vector<std::shared_ptr<BufferState>> &out, const char *method)
{
    Status st = CheckKeys(keys, method);
    if (st.IsError()) return st;
    ds_client_t *c = impl->Get(&st, method);
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<ds_buffer_t *> bufs(keys.size(), nullptr);
    st = FromC(ds_kv_get_buffers(c, keys.size(), k.data(), timeoutMs, bufs.data()));
    out.assign(keys.size(), nullptr);
    for (size_t i = 0; i < keys.size(); i++)
        if (bufs[i] != nullptr) out[i] = ObjectClientImpl::Wrap(impl, bufs[i], true);
    return st;
}

Status GenKey(const std::shared_ptr<ObjectClientImpl> &impl, const std::string &prefix,
              std::string &key, const char *method)
{
    Status st;
    ds_client_t *c = impl->Get(&st, method);
    if (c == nullptr) return st;
    char *out = nullptr;
    st = FromC(ds_kv_generate_key(c, prefix.c_str(), &out));
    if (st.IsOk()) key.assign(out);
    ds_free(out);
    return st;
}

} // namespace

/* ---- ObjectClientImpl ---- */

namespace object_cache
{

ObjectClientImpl::~ObjectClientImpl()
{
    (void)ShutDown();
}

Status ObjectClientImpl::Connect(const char *who, bool hetero)
{
    std::string method = std::string(who) + "::Init";
    const char *m = method.c_str();
    if (c_.load(std::memory_order_acquire) != nullptr) return Status();
    if (!opts_.clientPublicKey.empty() || !opts_.clientPrivateKey.Empty() ||
        !opts_.serverPublicKey.empty())
        return NotSupported(
            m, "curve keys (clientPublicKey, clientPrivateKey, serverPublicKey); workers here "
               "authenticate clients with the shared token (ConnectOptions::token)");
    if (!opts_.accessKey.empty() || !opts_.secretKey.Empty())
        return NotSupported(
            m, "AK/SK authentication (accessKey, secretKey); use ConnectOptions::token");
    if (!opts_.tenantId.empty()) return NotSupported(m, "tenants (ConnectOptions::tenantId)");
    /* enableRemoteH2D picks a transport for device gets; DsClient passes one
     * ConnectOptions to every client it holds, so KV and object clients
     * accept it and have nothing to do with it. */
    if (!hetero && opts_.enableClientDirectPipelineH2D)
        return NotSupported(m, "host-to-device transfers (enableClientDirectPipelineH2D)");
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = opts_.host.c_str();
    o.port = opts_.port;
    std::string sdHost;
    if (opts_.serviceDiscovery != nullptr) {
        /* This SDK's discoveries go to the C client, which fails over with
         * them; another implementation is asked once, here. */
        auto *native = dynamic_cast<NativeServiceDiscovery *>(opts_.serviceDiscovery.get());
        if (native != nullptr && native->Native() != nullptr) {
            o.service_discovery = native->Native();
            o.enable_cross_node_connection = opts_.enableCrossNodeConnection ? 1 : 0;
        } else {
            int sdPort = 0;
            Status sst = opts_.serviceDiscovery->SelectWorker(sdHost, sdPort);
            if (sst.IsError()) return sst;
            o.host = sdHost.c_str();
            o.port = sdPort;
        }
    }
    if (opts_.connectTimeoutMs > 0) o.connect_timeout_ms = opts_.connectTimeoutMs;
    if (opts_.requestTimeoutMs > 0) o.request_timeout_ms = opts_.requestTimeoutMs;
    o.token = opts_.token.Empty() ? nullptr : opts_.token.GetData();
    ds_client_t *c = nullptr;
    if (hetero) {
        /* enableClientDirectPipelineH2D needs nothing more: the client
         * itself always copies between the worker's memory and the device. */
        ds_hetero_t *h = nullptr;
        Status st = FromC(ds_hetero_connect(&o, opts_.enableRemoteH2D, &h));
        if (st.IsError()) return st;
        ds_hetero_t *expected = nullptr;
        if (!h_.compare_exchange_strong(expected, h, std::memory_order_acq_rel)) {
            ds_hetero_close(h);
            return Status();
        }
        c_.store(ds_hetero_kv(h), std::memory_order_release);
        return Status();
    }
    Status st = FromC(ds_client_connect(&o, &c));
    if (st.IsError()) return st;
    ds_client_t *expected = nullptr;
    /* Two threads racing through Init: the loser closes its connection. */
    if (!c_.compare_exchange_strong(expected, c, std::memory_order_acq_rel)) ds_client_close(c);
    return Status();
}

ds_client_t *ObjectClientImpl::Enter()
{
    std::lock_guard<std::mutex> g(busyMu_);
    ds_client_t *c = c_.load(std::memory_order_acquire);
    if (c != nullptr && !closing_) busy_++;
    return closing_ ? nullptr : c;
}

void ObjectClientImpl::Leave()
{
    std::lock_guard<std::mutex> g(busyMu_);
    if (--busy_ == 0) idle_.notify_all();
}

Status ObjectClientImpl::ShutDown()
{
    ds_client_t *c;
    ds_hetero_t *h;
    {
        std::unique_lock<std::mutex> g(busyMu_);
        closing_ = true;
        idle_.wait(g, [this] { return busy_ == 0; });
        c = c_.exchange(nullptr, std::memory_order_acq_rel);
        h = h_.exchange(nullptr, std::memory_order_acq_rel);
        closing_ = false; /* a later Init may connect again */
    }
    if (h != nullptr)
        ds_hetero_close(h); /* closes c, its KV client */
    else
        ds_client_close(c);
    return Status();
}

ds_hetero_t *ObjectClientImpl::GetHetero(Status *st, const char *method) const
{
    ds_hetero_t *h = h_.load(std::memory_order_acquire);
    if (h == nullptr)
        *st = Status(K_NOT_READY,
                     std::string(method) +
                         ": the client is not connected (Init not called, failed, or ShutDown)");
    return h;
}

ds_client_t *ObjectClientImpl::Get(Status *st, const char *method) const
{
    ds_client_t *c = c_.load(std::memory_order_acquire);
    if (c == nullptr)
        *st = Status(K_NOT_READY,
                     std::string(method) +
                         ": the client is not connected (Init not called, failed, or ShutDown)");
    return c;
}

std::shared_ptr<BufferState> ObjectClientImpl::Wrap(const std::shared_ptr<ObjectClientImpl> &self,
                                                    ds_buffer_t *buf, bool published)
{
    auto s = std::make_shared<BufferState>();
    s->client = self;
    s->buf = buf;
    const char *k = ds_buffer_key(buf);
    s->key = k ? k : "";
    s->published = published;
    return s;
}

} // namespace object_cache

/* ---- KVClient ---- */

KVClient::KVClient(const ConnectOptions &connectOptions)
    : impl_(std::make_shared<ObjectClientImpl>(connectOptions))
{
}

KVClient::~KVClient() = default;

Status KVClient::ShutDown()
{
    return impl_->ShutDown();
}

Status KVClient::Init()
{
    return impl_->Connect("KVClient");
}

Status KVClient::Init(const KVClientConfig &clientConfig)
{
    (void)clientConfig; /* log settings: this client writes no log files */
    return impl_->Connect("KVClient");
}

Status KVClient::InitEmbedded(const EmbeddedConfig &config)
{
    (void)config;
    return NotSupported("KVClient::InitEmbedded",
                        "no in-process worker here; run datasystem_worker and Init");
}

KVClient &KVClient::EmbeddedInstance()
{
    static KVClient instance;
    return instance;
}

Status KVClient::Set(const std::string &key, const StringView &val, const SetParam &param)
{
    ds_set_param_t p;
    Status st = ToC(param, &p, "KVClient::Set");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::Set");
    if (c == nullptr) return st;
    return FromC(ds_kv_set(c, key.c_str(), val.data(), val.size(), &p));
}

std::string KVClient::Set(const StringView &val, const SetParam &param)
{
    std::string key;
    if (GenKey(impl_, "", key, "KVClient::Set").IsError()) return "";
    if (Set(key, val, param).IsError()) return "";
    return key;
}

Status KVClient::Create(const std::string &key, uint64_t size, const SetParam &param,
                        std::shared_ptr<Buffer> &buffer)
{
    ds_set_param_t p;
    Status st = ToC(param, &p, "KVClient::Create");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::Create");
    if (c == nullptr) return st;
    ds_buffer_t *b = nullptr;
    st = FromC(ds_kv_create(c, key.c_str(), size, &p, &b));
    if (st.IsError()) return st;
    buffer = ObjectClientImpl::MakeSharedBuffer(ObjectClientImpl::Wrap(impl_, b, false));
    return st;
}

Status KVClient::Set(const std::shared_ptr<Buffer> &buffer)
{
    if (!buffer) return Status(K_INVALID, "KVClient::Set: the buffer is null");
    return buffer->Publish();
}

Status KVClient::MCreate(const std::vector<std::string> &keys, const std::vector<uint64_t> &sizes,
                         const SetParam &param, std::vector<std::shared_ptr<Buffer>> &buffers)
{
    Status st = CheckKeys(keys, "KVClient::MCreate");
    if (st.IsError()) return st;
    if (sizes.size() != keys.size())
        return Status(K_INVALID, "KVClient::MCreate: " + std::to_string(keys.size()) +
                                     " keys but " + std::to_string(sizes.size()) + " sizes");
    ds_set_param_t p;
    st = ToC(param, &p, "KVClient::MCreate");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::MCreate");
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<size_t> sz(sizes.begin(), sizes.end());
    std::vector<ds_buffer_t *> out(keys.size(), nullptr);
    st = FromC(ds_kv_mcreate(c, keys.size(), k.data(), sz.data(), &p, out.data()));
    if (st.IsError()) return st;
    buffers.clear();
    for (ds_buffer_t *b : out)
        buffers.push_back(
            ObjectClientImpl::MakeSharedBuffer(ObjectClientImpl::Wrap(impl_, b, false)));
    return st;
}

Status KVClient::MSet(const std::vector<std::shared_ptr<Buffer>> &buffers)
{
    if (buffers.empty()) return Status(K_INVALID, "KVClient::MSet: the buffer list is empty");
    std::vector<ds_buffer_t *> bufs;
    std::vector<BufferState *> states;
    for (const auto &b : buffers) {
        const std::shared_ptr<BufferState> *s = b ? &ObjectClientImpl::StateOf(*b) : nullptr;
        if (s == nullptr || !*s)
            return Status(K_INVALID, "KVClient::MSet: a buffer is null or empty");
        if ((*s)->published)
            return Status(K_INVALID,
                          "KVClient::MSet: the buffer of '" + (*s)->key + "' is already published");
        bufs.push_back((*s)->buf);
        states.push_back(s->get());
    }
    Status st;
    ds_client_t *c = impl_->Get(&st, "KVClient::MSet");
    if (c == nullptr) return st;
    std::vector<ds_status_t> sts(bufs.size(), DS_K_OK);
    st = FromC(ds_kv_mpublish(c, bufs.size(), bufs.data(), sts.data()));
    for (size_t i = 0; i < states.size(); i++)
        if (sts[i] == DS_K_OK) states[i]->published = true;
    return st;
}

Status KVClient::MSetTx(const std::vector<std::string> &keys, const std::vector<StringView> &vals,
                        const MSetParam &param)
{
    (void)keys, (void)vals, (void)param;
    return NotSupported("KVClient::MSetTx",
                        "the C library has no all-or-nothing multi-set; use MSet");
}

Status KVClient::MSet(const std::vector<std::string> &keys, const std::vector<StringView> &vals,
                      std::vector<std::string> &outFailedKeys, const MSetParam &param)
{
    Status st = CheckKeys(keys, "KVClient::MSet");
    if (st.IsError()) return st;
    if (vals.size() != keys.size())
        return Status(K_INVALID, "KVClient::MSet: " + std::to_string(keys.size()) + " keys but " +
                                     std::to_string(vals.size()) + " values");
    ds_set_param_t p;
    st = ToC(param, &p, "KVClient::MSet");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::MSet");
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<const void *> v(keys.size());
    std::vector<size_t> l(keys.size());
    for (size_t i = 0; i < keys.size(); i++) {
        v[i] = vals[i].data();
        l[i] = vals[i].size();
    }
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st = FromC(ds_kv_mset(c, keys.size(), k.data(), v.data(), l.data(), &p, sts.data()));
    FailedKeys(keys, sts, outFailedKeys);
    return st;
}

Status KVClient::MGetH2D(const std::vector<std::string> &keys, const std::vector<Blob> &devBlob,
                         std::vector<std::string> &outFailedKeys, void *h2dStream,
                         std::vector<Optional<ReadOnlyBuffer>> *readOnlyBuffers)
{
    (void)keys, (void)devBlob, (void)outFailedKeys, (void)h2dStream, (void)readOnlyBuffers;
    return NotSupported("KVClient::MGetH2D", "no device memory in this SDK");
}

Status KVClient::Get(const std::string &key, std::string &val, int32_t subTimeoutMs)
{
    /* One copy into val, as ds_kv_get makes one into its allocation. Small
     * values: read into this thread's scratch (ds_kv_get_into) and copied
     * from there, which costs less than pinning. Large ones: a pinned read
     * (ds_kv_get_buffers) copied once, released at once. Which one comes
     * first is guessed from this thread's last value; a wrong guess costs
     * one more lookup. */
    constexpr size_t kSmall = 64 * 1024;
    thread_local std::unique_ptr<char[]> scratch;
    thread_local size_t lastSize = 0;
    Status st;
    ds_client_t *c = impl_->Get(&st, "KVClient::Get");
    if (c == nullptr) return st;
    const char *k = key.c_str();
    if (lastSize <= kSmall) {
        if (!scratch) scratch.reset(new char[kSmall]);
        size_t len = 0;
        ds_status_t cs = ds_kv_get_into(c, k, subTimeoutMs, scratch.get(), kSmall, &len);
        if (cs == DS_K_OK) {
            val.assign(scratch.get(), len);
            lastSize = len;
            return st;
        }
        if (cs != DS_K_INVALID || len <= kSmall) return FromC(cs);
    }
    ds_buffer_t *b = nullptr;
    st = FromC(ds_kv_get_buffers(c, 1, &k, subTimeoutMs, &b));
    if (b != nullptr) {
        lastSize = ds_buffer_size(b);
        val.assign(static_cast<const char *>(ds_buffer_data(b)), lastSize);
        ds_buffer_release(b);
    }
    return st;
}

Status KVClient::Get(const std::string &key, Optional<ReadOnlyBuffer> &readOnlyBuffer,
                     int32_t subTimeoutMs)
{
    std::vector<Optional<ReadOnlyBuffer>> out;
    Status st = Get(std::vector<std::string>{key}, out, subTimeoutMs);
    readOnlyBuffer = out.empty() ? Optional<ReadOnlyBuffer>() : std::move(out[0]);
    return st;
}

Status KVClient::Get(const std::string &key, Optional<Buffer> &buffer, int32_t subTimeoutMs)
{
    std::vector<Optional<Buffer>> out;
    Status st = Get(std::vector<std::string>{key}, out, subTimeoutMs);
    buffer = out.empty() ? Optional<Buffer>() : std::move(out[0]);
    return st;
}

Status KVClient::Get(const std::vector<std::string> &keys, std::vector<Optional<Buffer>> &buffers,
                     int32_t subTimeoutMs)
{
    std::vector<std::shared_ptr<BufferState>> s;
    Status st = GetBuffers(impl_, keys, subTimeoutMs, s, "KVClient::Get");
    buffers.clear();
    buffers.reserve(s.size());
    for (auto &b : s)
        buffers.emplace_back(b ? Optional<Buffer>(ObjectClientImpl::MakeBuffer(std::move(b)))
                               : Optional<Buffer>());
    return st;
}

Status KVClient::Get(const std::vector<std::string> &keys, std::vector<std::string> &vals,
                     int32_t subTimeoutMs)
{
    Status st = CheckKeys(keys, "KVClient::Get");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::Get");
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<ds_buffer_t *> bufs(keys.size(), nullptr);
    st = FromC(ds_kv_get_buffers(c, keys.size(), k.data(), subTimeoutMs, bufs.data()));
    vals.assign(keys.size(), std::string());
    for (size_t i = 0; i < keys.size(); i++)
        if (bufs[i] != nullptr) {
            vals[i].assign(static_cast<const char *>(ds_buffer_data(bufs[i])),
                           ds_buffer_size(bufs[i]));
            ds_buffer_release(bufs[i]);
        }
    return st;
}

Status KVClient::Get(const std::vector<std::string> &keys,
                     std::vector<Optional<ReadOnlyBuffer>> &readOnlyBuffers, int32_t subTimeoutMs)
{
    std::vector<std::shared_ptr<BufferState>> s;
    Status st = GetBuffers(impl_, keys, subTimeoutMs, s, "KVClient::Get");
    readOnlyBuffers.clear();
    readOnlyBuffers.reserve(s.size());
    for (auto &b : s) {
        if (!b) {
            readOnlyBuffers.emplace_back();
            continue;
        }
        readOnlyBuffers.emplace_back(
            ObjectClientImpl::MakeReadOnly(ObjectClientImpl::MakeSharedBuffer(std::move(b))));
    }
    return st;
}

Status KVClient::Read(const std::vector<ReadParam> &readParams,
                      std::vector<Optional<ReadOnlyBuffer>> &readOnlyBuffers)
{
    if (readParams.empty()) return Status(K_INVALID, "KVClient::Read: the parameter list is empty");
    Status st;
    ds_client_t *c = impl_->Get(&st, "KVClient::Read");
    if (c == nullptr) return st;
    std::vector<ds_read_param_t> p(readParams.size());
    for (size_t i = 0; i < readParams.size(); i++)
        p[i] = {readParams[i].key.c_str(), readParams[i].offset, readParams[i].size};
    std::vector<ds_buffer_t *> bufs(p.size(), nullptr);
    st = FromC(ds_kv_read(c, p.size(), p.data(), bufs.data(), nullptr));
    readOnlyBuffers.clear();
    for (ds_buffer_t *b : bufs) {
        if (b == nullptr) {
            readOnlyBuffers.emplace_back();
            continue;
        }
        auto state = ObjectClientImpl::Wrap(impl_, b, true);
        readOnlyBuffers.emplace_back(
            ObjectClientImpl::MakeReadOnly(ObjectClientImpl::MakeSharedBuffer(state)));
    }
    return st;
}

Status KVClient::Del(const std::string &key)
{
    std::vector<std::string> failed;
    return Del(std::vector<std::string>{key}, failed);
}

Status KVClient::Del(const std::vector<std::string> &keys, std::vector<std::string> &failedKeys)
{
    Status st = CheckKeys(keys, "KVClient::Del");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::Del");
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st = FromC(ds_kv_del(c, keys.size(), k.data(), sts.data()));
    FailedKeys(keys, sts, failedKeys);
    return st;
}

std::string KVClient::GenerateKey(const std::string &prefixKey)
{
    std::string key;
    return GenKey(impl_, prefixKey, key, "KVClient::GenerateKey").IsOk() ? key : "";
}

Status KVClient::GenerateKey(const std::string &prefixKey, std::string &key)
{
    return GenKey(impl_, prefixKey, key, "KVClient::GenerateKey");
}

Status KVClient::UpdateToken(SensitiveValue token)
{
    (void)token;
    return NotSupported("KVClient::UpdateToken", "the token is fixed when the client connects");
}

Status KVClient::UpdateAkSk(const std::string accessKey, SensitiveValue secretKey)
{
    (void)accessKey, (void)secretKey;
    return NotSupported("KVClient::UpdateAkSk",
                        "no AK/SK authentication; workers use a shared token");
}

Status KVClient::QuerySize(const std::vector<std::string> &objectKeys,
                           std::vector<uint64_t> &outSizes)
{
    Status st = CheckKeys(objectKeys, "KVClient::QuerySize");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::QuerySize");
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(objectKeys);
    outSizes.assign(objectKeys.size(), 0);
    return FromC(ds_kv_query_size(c, objectKeys.size(), k.data(), outSizes.data(), nullptr));
}

Status KVClient::UpdateConfig(const std::string &configJson)
{
    (void)configJson;
    return NotSupported("KVClient::UpdateConfig",
                        "client settings are fixed when the client connects");
}

Status KVClient::HealthCheck()
{
    Status st;
    ds_client_t *c = impl_->Get(&st, "KVClient::HealthCheck");
    if (c == nullptr) return st;
    return FromC(ds_client_health_check(c));
}

Status KVClient::SetWorkerHealthCallback(std::function<void(const Status &)> callback,
                                         uint32_t intervalMs)
{
    (void)callback, (void)intervalMs;
    return NotSupported("KVClient::SetWorkerHealthCallback",
                        "no background health thread; call HealthCheck");
}

Status ExistKeys(const ObjectClientImpl &impl, const char *method,
                 const std::vector<std::string> &keys, std::vector<bool> &exists)
{
    Status st = CheckKeys(keys, method);
    if (st.IsError()) return st;
    ds_client_t *c = impl.Get(&st, method);
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::unique_ptr<bool[]> e(new bool[keys.size()]());
    st = FromC(ds_kv_exist(c, keys.size(), k.data(), e.get()));
    exists.assign(e.get(), e.get() + keys.size());
    return st;
}

Status KVClient::Exist(const std::vector<std::string> &keys, std::vector<bool> &exists)
{
    return ExistKeys(*impl_, "KVClient::Exist", keys, exists);
}

Status KVClient::Expire(const std::vector<std::string> &keys, uint32_t ttlSeconds,
                        std::vector<std::string> &failedKeys)
{
    Status st = CheckKeys(keys, "KVClient::Expire");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "KVClient::Expire");
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st = FromC(ds_kv_expire(c, keys.size(), k.data(), ttlSeconds, sts.data()));
    FailedKeys(keys, sts, failedKeys);
    return st;
}

/* ---- ObjectClient ---- */

ObjectClient::ObjectClient(const ConnectOptions &connectOptions)
    : impl_(std::make_shared<ObjectClientImpl>(connectOptions))
{
}

ObjectClient::~ObjectClient() = default;

Status ObjectClient::ShutDown()
{
    return impl_->ShutDown();
}

Status ObjectClient::Init()
{
    return impl_->Connect("ObjectClient");
}

namespace
{
Status RefCall(const std::shared_ptr<ObjectClientImpl> &impl, const std::vector<std::string> &keys,
               std::vector<std::string> &failed, const std::string &remoteClientId, bool inc)
{
    const char *method = inc ? "ObjectClient::GIncreaseRef" : "ObjectClient::GDecreaseRef";
    if (!remoteClientId.empty())
        return NotSupported(method, "references on behalf of a remote client");
    Status st = CheckKeys(keys, method);
    if (st.IsError()) return st;
    ds_client_t *c = impl->Get(&st, method);
    if (c == nullptr) return st;
    std::vector<const char *> k = KeyPtrs(keys);
    std::vector<ds_status_t> sts(keys.size(), DS_K_OK);
    st = FromC(inc ? ds_object_g_increase_ref(c, keys.size(), k.data(), sts.data())
                   : ds_object_g_decrease_ref(c, keys.size(), k.data(), sts.data()));
    FailedKeys(keys, sts, failed);
    return st;
}
} // namespace

Status ObjectClient::GIncreaseRef(const std::vector<std::string> &objectKeys,
                                  std::vector<std::string> &failedObjectKeys,
                                  const std::string &remoteClientId)
{
    return RefCall(impl_, objectKeys, failedObjectKeys, remoteClientId, true);
}

Status ObjectClient::GDecreaseRef(const std::vector<std::string> &objectKeys,
                                  std::vector<std::string> &failedObjectKeys,
                                  const std::string &remoteClientId)
{
    return RefCall(impl_, objectKeys, failedObjectKeys, remoteClientId, false);
}

Status ObjectClient::ReleaseGRefs(const std::string &remoteClientId)
{
    (void)remoteClientId;
    return NotSupported("ObjectClient::ReleaseGRefs", "references on behalf of a remote client");
}

int ObjectClient::QueryGlobalRefNum(const std::string &objectKey)
{
    Status st;
    ds_client_t *c = impl_->Get(&st, "ObjectClient::QueryGlobalRefNum");
    if (c == nullptr) return -1;
    uint32_t n = 0;
    if (ds_object_query_global_ref_num(c, objectKey.c_str(), &n) != DS_K_OK) return -1;
    return static_cast<int>(n);
}

Status ObjectClient::Create(const std::string &objectKey, uint64_t size, const CreateParam &param,
                            std::shared_ptr<Buffer> &buffer)
{
    Status st = CheckCreateParam(param, "ObjectClient::Create");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "ObjectClient::Create");
    if (c == nullptr) return st;
    ds_buffer_t *b = nullptr;
    st = FromC(ds_kv_create(c, objectKey.c_str(), size, nullptr, &b));
    if (st.IsError()) return st;
    buffer = ObjectClientImpl::MakeSharedBuffer(ObjectClientImpl::Wrap(impl_, b, false));
    return st;
}

Status ObjectClient::Put(const std::string &objectKey, const uint8_t *data, uint64_t size,
                         const CreateParam &param,
                         const std::unordered_set<std::string> &nestedObjectKeys)
{
    if (!nestedObjectKeys.empty())
        return NotSupported("ObjectClient::Put with nested keys", "objects have no nesting here");
    Status st = CheckCreateParam(param, "ObjectClient::Put");
    if (st.IsError()) return st;
    ds_client_t *c = impl_->Get(&st, "ObjectClient::Put");
    if (c == nullptr) return st;
    return FromC(ds_kv_set(c, objectKey.c_str(), data, size, nullptr));
}

Status ObjectClient::Get(const std::vector<std::string> &objectKeys, int32_t subTimeoutMs,
                         std::vector<Optional<Buffer>> &buffers)
{
    std::vector<std::shared_ptr<BufferState>> s;
    Status st = GetBuffers(impl_, objectKeys, subTimeoutMs, s, "ObjectClient::Get");
    buffers.clear();
    buffers.reserve(s.size());
    for (auto &b : s)
        buffers.emplace_back(b ? Optional<Buffer>(ObjectClientImpl::MakeBuffer(std::move(b)))
                               : Optional<Buffer>());
    return st;
}

Status ObjectClient::UpdateToken(SensitiveValue token)
{
    (void)token;
    return NotSupported("ObjectClient::UpdateToken", "the token is fixed when the client connects");
}

Status ObjectClient::UpdateAkSk(const std::string accessKey, SensitiveValue secretKey)
{
    (void)accessKey, (void)secretKey;
    return NotSupported("ObjectClient::UpdateAkSk",
                        "no AK/SK authentication; workers use a shared token");
}

Status ObjectClient::GetObjMetaInfo(const std::string &tenantId,
                                    const std::vector<std::string> &objectKeys,
                                    std::vector<ObjMetaInfo> &objMetas)
{
    (void)tenantId, (void)objectKeys, (void)objMetas;
    return NotSupported("ObjectClient::GetObjMetaInfo",
                        "the C client reports no object locations (sizes: "
                        "KVClient::QuerySize)");
}

Status ObjectClient::GenerateKey(const std::string &prefix, std::string &key)
{
    return GenKey(impl_, prefix, key, "ObjectClient::GenerateKey");
}

Status ObjectClient::GenerateObjectKey(const std::string &prefix, std::string &objectId)
{
    return GenKey(impl_, prefix, objectId, "ObjectClient::GenerateObjectKey");
}

Status ObjectClient::GetPrefix(const std::string &key, std::string &prefix)
{
    /* Keys carry no worker id, so a key is its own prefix, once it is valid. */
    if (key.empty()) return Status(K_INVALID, "ObjectClient::GetPrefix: the key is empty");
    Status st = FromC(ds_key_validate(key.data(), key.size()));
    if (st.IsOk()) prefix = key;
    return st;
}

Status ObjectClient::HealthCheck()
{
    Status st;
    ds_client_t *c = impl_->Get(&st, "ObjectClient::HealthCheck");
    if (c == nullptr) return st;
    return FromC(ds_client_health_check(c));
}

/* ---- DsClient ---- */

DsClient::DsClient(const ConnectOptions &connectOptions)
    : kvClient_(std::make_shared<KVClient>(connectOptions)),
      heteroClient_(std::make_shared<HeteroClient>(connectOptions)),
      objectClient_(std::make_shared<ObjectClient>(connectOptions))
{
}

Status DsClient::Init()
{
    Status st = kvClient_->Init();
    if (st.IsError()) return st;
    if ((st = heteroClient_->Init()).IsError()) return st;
    return objectClient_->Init();
}

Status DsClient::ShutDown()
{
    Status a = objectClient_->ShutDown();
    Status b = heteroClient_->ShutDown();
    Status c = kvClient_->ShutDown();
    return a.IsError() ? a : b.IsError() ? b : c;
}

std::shared_ptr<KVClient> DsClient::KV()
{
    return kvClient_;
}

std::shared_ptr<HeteroClient> DsClient::Hetero()
{
    return heteroClient_;
}

std::shared_ptr<ObjectClient> DsClient::Object()
{
    return objectClient_;
}

} // namespace datasystem
