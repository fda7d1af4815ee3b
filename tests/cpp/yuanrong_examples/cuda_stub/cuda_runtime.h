// A stand-in for the CUDA runtime's header, so that Yuanrong's
// hetero_client_gpu_example.cpp builds and runs without a CUDA toolkit: the
// five runtime calls it makes go to this SDK's device helpers
// (ds/hetero_client.h) on the process's device backend. With
// DS_DEVICE_BACKEND=host, "device memory" is host memory, which is how the
// example runs on machines without a GPU; with cuda, the helpers use the
// driver's primary context, the one the real runtime would use.
#ifndef DS_TEST_CUDA_RUNTIME_STUB_H
#define DS_TEST_CUDA_RUNTIME_STUB_H

#include <cstddef>
#include <cstdint>

#include "ds/hetero_client.h"

typedef int cudaError_t;
static const cudaError_t cudaSuccess = 0;
static const cudaError_t cudaErrorInvalidValue = 1;
static const cudaError_t cudaErrorInvalidDevice = 101;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
};

static inline cudaError_t cudaSetDevice(int device)
{
    // Allocating on the device makes it current (or fails for a device the
    // backend does not have).
    uint64_t p = 0;
    if (ds_device_malloc(device, 1, &p) != DS_K_OK) return cudaErrorInvalidDevice;
    ds_device_free(p);
    return cudaSuccess;
}

static inline cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    uint64_t p = 0;
    if (ds_device_malloc(-1, size, &p) != DS_K_OK) return cudaErrorInvalidValue;
    *devPtr = reinterpret_cast<void *>(static_cast<uintptr_t>(p));
    return cudaSuccess;
}

static inline cudaError_t cudaFree(void *devPtr)
{
    return ds_device_free(reinterpret_cast<uintptr_t>(devPtr)) == DS_K_OK ? cudaSuccess
                                                                          : cudaErrorInvalidValue;
}

static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind)
{
    ds_copy_kind_t k;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        k = DS_COPY_H2D;
        break;
    case cudaMemcpyDeviceToHost:
        k = DS_COPY_D2H;
        break;
    case cudaMemcpyDeviceToDevice:
        k = DS_COPY_D2D;
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return ds_device_memcpy(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src),
                            count, k) == DS_K_OK
               ? cudaSuccess
               : cudaErrorInvalidValue;
}

#endif
