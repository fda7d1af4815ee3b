/* Device memory descriptors of the heterogeneous client (Yuanrong's
 * datasystem/hetero/device_common.h): Blob and DeviceBlobList, and a tensor
 * description. */
#ifndef DATASYSTEM_CPP_HETERO_DEVICE_COMMON_H
#define DATASYSTEM_CPP_HETERO_DEVICE_COMMON_H

#include <cstdint>
#include <string>
#include <vector>

#include "datasystem/utils/device_blob.h"

namespace datasystem
{

struct Tensor {
    uint64_t ptr;
    uint32_t elemSize;
    std::vector<uint64_t> shape;
};

} // namespace datasystem

#endif
