/* Device memory descriptors: a Blob is one piece of device memory, a
 * DeviceBlobList a key's pieces on one device (HeteroClient). */
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
    /* The blobs of one list are on one device. */
    std::vector<Blob> blobs;
    int32_t deviceIdx = -1; /* < 0: the calling thread's current device */
    int32_t srcOffset = 0;  /* a get starts copying the value at this byte */
};

} // namespace datasystem

#endif
