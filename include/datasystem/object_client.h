/* Yuanrong-compatible object client over the C API: objects are keys of the
 * same store; Create/Publish are ds_kv_create/ds_kv_publish, Get pins values
 * (ds_kv_get_buffers), and global references are ds_object_g_*_ref. Calls the
 * C library cannot serve return K_NOT_SUPPORTED naming the call. */
#ifndef DATASYSTEM_CPP_OBJECT_CLIENT_H
#define DATASYSTEM_CPP_OBJECT_CLIENT_H

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "datasystem/context/context.h"
#include "datasystem/object/buffer.h"
#include "datasystem/object/object_enum.h"
#include "datasystem/utils/connection.h"
#include "datasystem/utils/optional.h"
#include "datasystem/utils/status.h"
#include "datasystem/utils/string_view.h"

namespace datasystem
{

struct CreateParam {
    ConsistencyType consistencyType = ConsistencyType::PRAM; // CAUSAL: K_NOT_SUPPORTED
    CacheType cacheType = CacheType::MEMORY;                 // DISK: K_NOT_SUPPORTED
};

struct ObjMetaInfo {
    uint64_t objSize{0};
    std::vector<std::string> locations;
};

class DS_CPP_API ObjectClient : public std::enable_shared_from_this<ObjectClient>
{
  public:
    explicit ObjectClient(const ConnectOptions &connectOptions = {});
    ~ObjectClient();

    Status ShutDown();
    Status Init();
    /* failedObjectKeys gets the keys whose count did not change. A
     * remoteClientId: K_NOT_SUPPORTED. */
    Status GIncreaseRef(const std::vector<std::string> &objectKeys,
                        std::vector<std::string> &failedObjectKeys,
                        const std::string &remoteClientId = "");
    Status GDecreaseRef(const std::vector<std::string> &objectKeys,
                        std::vector<std::string> &failedObjectKeys,
                        const std::string &remoteClientId = "");
    Status ReleaseGRefs(const std::string &remoteClientId);
    /* The count, or -1 when it cannot be read. */
    int QueryGlobalRefNum(const std::string &objectKey);
    Status Create(const std::string &objectKey, uint64_t size, const CreateParam &param,
                  std::shared_ptr<Buffer> &buffer);
    Status Put(const std::string &objectKey, const uint8_t *data, uint64_t size,
               const CreateParam &param,
               const std::unordered_set<std::string> &nestedObjectKeys = {});
    /* Waits up to subTimeoutMs for each object; K_OK when any was found. */
    Status Get(const std::vector<std::string> &objectKeys, int32_t subTimeoutMs,
               std::vector<Optional<Buffer>> &buffers);
    Status UpdateToken(SensitiveValue token);
    Status UpdateAkSk(const std::string accessKey, SensitiveValue secretKey);
    Status GetObjMetaInfo(const std::string &tenantId, const std::vector<std::string> &objectKeys,
                          std::vector<ObjMetaInfo> &objMetas);
    Status GenerateKey(const std::string &prefix, std::string &key);
    Status GenerateObjectKey(const std::string &prefix, std::string &objectId);
    /* The key itself (keys carry no worker id); K_INVALID for an invalid key. */
    Status GetPrefix(const std::string &key, std::string &prefix);
    Status HealthCheck();

  private:
    std::shared_ptr<object_cache::ObjectClientImpl> impl_;
};

} // namespace datasystem

#endif
