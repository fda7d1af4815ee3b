/* How a client reaches its worker. An aggregate, so that designated
 * initializers in member order ({ .host = ..., .port = ... }) work. Fields
 * this SDK cannot honour make Init fail with K_NOT_SUPPORTED naming them
 * (docs/cpp.md); their defaults are always accepted. */
#ifndef DATASYSTEM_CPP_UTILS_CONNECTION_H
#define DATASYSTEM_CPP_UTILS_CONNECTION_H

#include <cstdint>
#include <memory>
#include <string>

#include "datasystem/object/object_enum.h"
#include "datasystem/utils/sensitive_value.h"
#include "datasystem/utils/string_view.h"

namespace datasystem
{

class IServiceDiscovery;

enum class DataPlacementPolicy : uint8_t {
    PREFERRED_SAME_NODE = 0,
    REQUIRED_SAME_NODE,
    PREFERRED_META_OWNER,
};

struct ConnectOptions {
    void SetAkSkAuth(const std::string &accessKey, const SensitiveValue &secretKey,
                     const std::string &tenantId)
    {
        this->accessKey = accessKey;
        this->secretKey = secretKey;
        this->tenantId = tenantId;
    }

    std::string host;
    int32_t port = 0;
    int32_t connectTimeoutMs = 9 * 1000;
    int32_t requestTimeoutMs = 0; // 0: the C library's default (60 s)
    SensitiveValue token = "";    // the worker's shared secret (--auth_token), or empty
    std::string clientPublicKey = "";
    SensitiveValue clientPrivateKey = "";
    std::string serverPublicKey = "";
    std::string accessKey = "";
    SensitiveValue secretKey = "";
    std::string tenantId = "";
    bool enableCrossNodeConnection = false;
    bool enableLocalCache = true;
    DataPlacementPolicy dataPlacementPolicy = DataPlacementPolicy::PREFERRED_SAME_NODE;
    bool enableRemoteH2D = false;
    bool enableClientDirectPipelineH2D = false;
    int32_t clientDirectPipelineH2DThreadNum = 64;
    std::shared_ptr<IServiceDiscovery> serviceDiscovery = nullptr;
    uint64_t fastTransportMemSize = 256 * 1024 * 1024;
    std::string deviceId = "";
};

} // namespace datasystem

#endif
