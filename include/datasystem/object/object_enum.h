/* Enums shared by the KV and object clients. WriteMode numbers equal the C
 * API's ds_write_mode_t. */
#ifndef DATASYSTEM_CPP_OBJECT_ENUM_H
#define DATASYSTEM_CPP_OBJECT_ENUM_H

#include <cstdint>
#include <memory>

#include "datasystem/utils/status.h"

namespace datasystem
{

enum class WriteMode : int {
    NONE_L2_CACHE = 0,
    WRITE_THROUGH_L2_CACHE = 1,
    WRITE_BACK_L2_CACHE = 2,
    NONE_L2_CACHE_EVICT = 3,
    WRITE_BACK_L2_CACHE_EVICT = 4,
};

enum class ConsistencyType : int {
    PRAM = 0,
    CAUSAL = 1,
};

enum class CacheType : int {
    MEMORY = 0,
    DISK = 1,
};

enum class ServerState : uint8_t {
    NORMAL = 0,
    REBOOT = 1,
};

} // namespace datasystem

#endif
