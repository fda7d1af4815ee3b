/* Device memory descriptors (for the device-to-host calls, which this SDK
 * answers with K_NOT_SUPPORTED). */
#ifndef DATASYSTEM_CPP_UTILS_DEVICE_BLOB_H
#define DATASYSTEM_CPP_UTILS_DEVICE_BLOB_H

#include <cstdint>
#include <vector>

namespace datasystem
{

struct Blob {
    void *pointer = nullptr;
    uint64_t size = 0;
};

struct DeviceBlobList {
    std::vector<Blob> blobs;
    int32_t deviceIdx = -1;
    int32_t srcOffset = 0;
};

} // namespace datasystem

#endif
