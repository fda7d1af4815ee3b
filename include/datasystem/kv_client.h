/* Yuanrong-compatible KV client, a thin layer over the C API (ds/kv_client.h):
 * each call is the matching ds_kv_* call, with the same codes and messages.
 * Calls the C library cannot serve return K_NOT_SUPPORTED naming the call
 * (docs/cpp.md lists them). Thread safety as the C client: one KVClient may
 * be used from many threads, but not while ShutDown runs. */
#ifndef DATASYSTEM_CPP_KV_CLIENT_H
#define DATASYSTEM_CPP_KV_CLIENT_H

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "datasystem/context/context.h"
#include "datasystem/kv/read_only_buffer.h"
#include "datasystem/object/buffer.h"
#include "datasystem/object/object_enum.h"
#include "datasystem/utils/connection.h"
#include "datasystem/utils/device_blob.h"
#include "datasystem/utils/embedded_config.h"
#include "datasystem/utils/kv_client_config.h"
#include "datasystem/utils/optional.h"
#include "datasystem/utils/status.h"
#include "datasystem/utils/string_view.h"

namespace datasystem
{

enum class ExistenceOpt : int {
    NONE = 0, // overwrite
    NX = 1,   // set only if absent; an existing key is K_OK and keeps its value
};

struct SetParam {
    WriteMode writeMode = WriteMode::NONE_L2_CACHE;
    uint32_t ttlSecond = 0; // 0: no expiry
    ExistenceOpt existence = ExistenceOpt::NONE;
    CacheType cacheType = CacheType::MEMORY; // DISK: K_NOT_SUPPORTED
};

struct MSetParam {
    WriteMode writeMode = WriteMode::NONE_L2_CACHE;
    uint32_t ttlSecond = 0;
    ExistenceOpt existence = ExistenceOpt::NONE;
    CacheType cacheType = CacheType::MEMORY;
};

/* A range of a value: size bytes from offset (0: to the end). */
struct ReadParam {
    std::string key;
    uint64_t offset = 0;
    uint64_t size = 0;
};

struct AsyncResult {
    Status status;
    std::vector<std::string> failedList;
};

class DS_CPP_API KVClient
{
  public:
    explicit KVClient(const ConnectOptions &connectOptions = {});
    ~KVClient();

    Status ShutDown();
    /* Connects to the worker. */
    Status Init();
    Status Init(const KVClientConfig &clientConfig);
    /* K_NOT_SUPPORTED: no in-process worker; run datasystem_worker. */
    static Status InitEmbedded(const EmbeddedConfig &config);
    /* A client that InitEmbedded never connects: its calls fail K_NOT_READY. */
    static KVClient &EmbeddedInstance();

    Status Set(const std::string &key, const StringView &val, const SetParam &param = {});
    /* Sets val under a new generated key and returns it ("" on failure). */
    std::string Set(const StringView &val, const SetParam &param = {});
    Status Create(const std::string &key, uint64_t size, const SetParam &param,
                  std::shared_ptr<Buffer> &buffer);
    /* Publishes a buffer from Create. */
    Status Set(const std::shared_ptr<Buffer> &buffer);
    Status MCreate(const std::vector<std::string> &keys, const std::vector<uint64_t> &sizes,
                   const SetParam &param, std::vector<std::shared_ptr<Buffer>> &buffers);
    Status MSet(const std::vector<std::shared_ptr<Buffer>> &buffers);
    /* K_NOT_SUPPORTED: the C library has no all-or-nothing multi-set. */
    Status MSetTx(const std::vector<std::string> &keys, const std::vector<StringView> &vals,
                  const MSetParam &param = {});
    Status MSet(const std::vector<std::string> &keys, const std::vector<StringView> &vals,
                std::vector<std::string> &outFailedKeys, const MSetParam &param = {});
    /* K_NOT_SUPPORTED: no device memory here. */
    Status MGetH2D(const std::vector<std::string> &keys, const std::vector<Blob> &devBlob,
                   std::vector<std::string> &outFailedKeys, void *h2dStream = nullptr,
                   std::vector<Optional<ReadOnlyBuffer>> *readOnlyBuffers = nullptr);

    /* subTimeoutMs > 0 waits that long for the key to be published. */
    Status Get(const std::string &key, std::string &val, int32_t subTimeoutMs = 0);
    Status Get(const std::string &key, Optional<ReadOnlyBuffer> &readOnlyBuffer,
               int32_t subTimeoutMs = 0);
    Status Get(const std::string &key, Optional<Buffer> &buffer, int32_t subTimeoutMs = 0);
    /* Multi-key gets: K_OK when any key was found; a missing key's entry is
     * empty (an unset Optional, or ""). */
    Status Get(const std::vector<std::string> &keys, std::vector<Optional<Buffer>> &buffers,
               int32_t subTimeoutMs = 0);
    Status Get(const std::vector<std::string> &keys, std::vector<std::string> &vals,
               int32_t subTimeoutMs = 0);
    Status Get(const std::vector<std::string> &keys,
               std::vector<Optional<ReadOnlyBuffer>> &readOnlyBuffers, int32_t subTimeoutMs = 0);
    Status Read(const std::vector<ReadParam> &readParams,
                std::vector<Optional<ReadOnlyBuffer>> &readOnlyBuffers);

    /* A missing key is not an error. */
    Status Del(const std::string &key);
    Status Del(const std::vector<std::string> &keys, std::vector<std::string> &failedKeys);
    std::string GenerateKey(const std::string &prefixKey = "");
    Status GenerateKey(const std::string &prefixKey, std::string &key);
    /* K_NOT_SUPPORTED: the token is fixed at Init; no AK/SK or runtime config. */
    Status UpdateToken(SensitiveValue token);
    Status UpdateAkSk(const std::string accessKey, SensitiveValue secretKey);
    Status QuerySize(const std::vector<std::string> &objectKeys, std::vector<uint64_t> &outSizes);
    Status UpdateConfig(const std::string &configJson);
    Status HealthCheck();
    /* K_NOT_SUPPORTED: no background health thread; call HealthCheck. */
    Status SetWorkerHealthCallback(std::function<void(const Status &)> callback,
                                   uint32_t intervalMs = 3000);
    Status Exist(const std::vector<std::string> &keys, std::vector<bool> &exists);
    Status Expire(const std::vector<std::string> &keys, uint32_t ttlSeconds,
                  std::vector<std::string> &failedKeys);

  private:
    std::shared_ptr<object_cache::ObjectClientImpl> impl_;
};

} // namespace datasystem

#endif
