/* The CUDA device backend: NVIDIA's driver API, loaded at run time.
 *
 * libcuda.so.1 is opened with dlopen and the dozen functions used here are
 * declared in this file, so the project builds, and every other backend
 * runs, on machines with no CUDA toolkit and no driver. The versioned
 * symbol names (_v2) are the ones the driver has exported since CUDA 4;
 * the types are the driver API's ABI (CUdeviceptr is 64 bits, handles are
 * pointers, CUresult an int).
 *
 * Contexts: each device's primary context, retained once per process and
 * made current on the threads that copy. It is the context the CUDA runtime
 * (and so PyTorch) uses, so device pointers from either are valid here, and
 * a thread that already has a context current keeps it when no device is
 * named. Nothing here changes a device's flags or resets it.
 *
 * Cross-process memory: the driver's legacy IPC (cuIpcGetMemHandle of the
 * allocation holding a range, cuIpcOpenMemHandle in the reader with lazy
 * peer access, cuIpcCloseMemHandle after the copies). The three are looked
 * up apart from the rest: a driver without them still runs every other
 * operation, and exporting then fails so callers take another path. This
 * part has been written from NVIDIA's driver API documentation and has not
 * yet run on a GPU. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "device.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_MEMHOSTREGISTER_PORTABLE 0x1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_MEMORYTYPE_HOST 1
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CU_IPC_HANDLE_SIZE 64

/* The driver API's CUipcMemHandle, passed by value. */
typedef struct {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
/* The primary contexts retained, one per device index below this bound. */
#define CUDA_MAX_DEVICES 64

static struct {
    void *lib;
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemHostRegister)(void *, size_t, unsigned);
    CUresult (*MemHostUnregister)(void *);
    CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
    CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*GetErrorString)(CUresult, const char **);
    /* Optional (NULL when the driver lacks them): cross-process memory. */
    CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
    CUresult (*IpcCloseMemHandle)(CUdeviceptr);
    int ndev;
    pthread_mutex_t mu;
    CUcontext primary[CUDA_MAX_DEVICES];
} cu = {.mu = PTHREAD_MUTEX_INITIALIZER};

static ds_status_t cu_fail(CUresult r, const char *what)
{
    const char *text = NULL;
    if (cu.GetErrorString == NULL || cu.GetErrorString(r, &text) != CUDA_SUCCESS || text == NULL)
        text = "unknown CUDA error";
    return ds__set_error(DS_K_CUDA_ERROR, "%s failed: CUDA error %d (%s)", what, r, text);
}

#define CU_CALL(what, call)                                                                        \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) return cu_fail(r_, what);                                          \
    } while (0)

static ds_status_t cuda_open(void)
{
    cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cu.lib == NULL) {
        const char *why = dlerror();
        return ds__set_error(DS_K_NOT_SUPPORTED,
                             "the CUDA device backend cannot load the NVIDIA driver: %s",
                             why ? why : "dlopen(libcuda.so.1) failed");
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cuInit", (void **)&cu.Init},
        {"cuDeviceGetCount", (void **)&cu.DeviceGetCount},
        {"cuDeviceGet", (void **)&cu.DeviceGet},
        {"cuDevicePrimaryCtxRetain", (void **)&cu.DevicePrimaryCtxRetain},
        {"cuCtxSetCurrent", (void **)&cu.CtxSetCurrent},
        {"cuCtxGetCurrent", (void **)&cu.CtxGetCurrent},
        {"cuCtxGetDevice", (void **)&cu.CtxGetDevice},
        {"cuMemAlloc_v2", (void **)&cu.MemAlloc},
        {"cuMemFree_v2", (void **)&cu.MemFree},
        {"cuMemcpyDtoH_v2", (void **)&cu.MemcpyDtoH},
        {"cuMemcpyHtoD_v2", (void **)&cu.MemcpyHtoD},
        {"cuMemcpyDtoD_v2", (void **)&cu.MemcpyDtoD},
        {"cuMemcpyDtoHAsync_v2", (void **)&cu.MemcpyDtoHAsync},
        {"cuMemcpyHtoDAsync_v2", (void **)&cu.MemcpyHtoDAsync},
        {"cuMemcpyDtoDAsync_v2", (void **)&cu.MemcpyDtoDAsync},
        {"cuMemHostRegister_v2", (void **)&cu.MemHostRegister},
        {"cuMemHostUnregister", (void **)&cu.MemHostUnregister},
        {"cuPointerGetAttribute", (void **)&cu.PointerGetAttribute},
        {"cuMemGetAddressRange_v2", (void **)&cu.MemGetAddressRange},
        {"cuStreamCreate", (void **)&cu.StreamCreate},
        {"cuStreamDestroy_v2", (void **)&cu.StreamDestroy},
        {"cuStreamSynchronize", (void **)&cu.StreamSynchronize},
        {"cuGetErrorString", (void **)&cu.GetErrorString},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(cu.lib, syms[i].name);
        if (*syms[i].slot == NULL)
            return ds__set_error(DS_K_NOT_SUPPORTED,
                                 "the NVIDIA driver (libcuda.so.1) has no %s: driver too old",
                                 syms[i].name);
    }
    /* cuda.h maps cuIpcOpenMemHandle to its _v2 since CUDA 11; older
     * drivers have only the first. */
    cu.IpcGetMemHandle =
        (CUresult(*)(CUipcMemHandle *, CUdeviceptr))dlsym(cu.lib, "cuIpcGetMemHandle");
    void *open_fn = dlsym(cu.lib, "cuIpcOpenMemHandle_v2");
    if (open_fn == NULL) open_fn = dlsym(cu.lib, "cuIpcOpenMemHandle");
    cu.IpcOpenMemHandle = (CUresult(*)(CUdeviceptr *, CUipcMemHandle, unsigned))open_fn;
    cu.IpcCloseMemHandle = (CUresult(*)(CUdeviceptr))dlsym(cu.lib, "cuIpcCloseMemHandle");
    CU_CALL("cuInit", cu.Init(0));
    CU_CALL("cuDeviceGetCount", cu.DeviceGetCount(&cu.ndev));
    if (cu.ndev <= 0)
        return ds__set_error(DS_K_NOT_SUPPORTED, "the NVIDIA driver loaded but reports no device");
    return DS_K_OK;
}

static ds_status_t cuda_set_device(int32_t dev_idx)
{
    if (dev_idx < 0) {
        CUcontext cur = NULL;
        CU_CALL("cuCtxGetCurrent", cu.CtxGetCurrent(&cur));
        if (cur != NULL) return DS_K_OK;
        dev_idx = 0;
    }
    if (dev_idx >= cu.ndev || dev_idx >= CUDA_MAX_DEVICES)
        return ds__set_error(DS_K_INVALID, "device index %d does not exist: %d CUDA device(s)",
                             (int)dev_idx, cu.ndev);
    pthread_mutex_lock(&cu.mu);
    CUcontext ctx = cu.primary[dev_idx];
    if (ctx == NULL) {
        CUdevice d;
        CUresult r = cu.DeviceGet(&d, dev_idx);
        if (r == CUDA_SUCCESS) r = cu.DevicePrimaryCtxRetain(&ctx, d);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_unlock(&cu.mu);
            return cu_fail(r, "cuDevicePrimaryCtxRetain");
        }
        cu.primary[dev_idx] = ctx;
    }
    pthread_mutex_unlock(&cu.mu);
    CU_CALL("cuCtxSetCurrent", cu.CtxSetCurrent(ctx));
    return DS_K_OK;
}

static ds_status_t cuda_current_device(int32_t *dev_idx)
{
    ds_status_t st = cuda_set_device(-1);
    if (st != DS_K_OK) return st;
    CUdevice d = 0;
    CU_CALL("cuCtxGetDevice", cu.CtxGetDevice(&d));
    *dev_idx = d;
    return DS_K_OK;
}

static ds_status_t cuda_alloc(size_t n, uint64_t *dptr)
{
    CUdeviceptr p = 0;
    CU_CALL("cuMemAlloc", cu.MemAlloc(&p, n));
    *dptr = p;
    return DS_K_OK;
}

static ds_status_t cuda_free(uint64_t dptr)
{
    CU_CALL("cuMemFree", cu.MemFree(dptr));
    return DS_K_OK;
}

static ds_status_t cuda_stream_create(void **stream)
{
    CU_CALL("cuStreamCreate", cu.StreamCreate(stream, CU_STREAM_NON_BLOCKING));
    return DS_K_OK;
}

static ds_status_t cuda_stream_destroy(void *stream)
{
    CU_CALL("cuStreamDestroy", cu.StreamDestroy(stream));
    return DS_K_OK;
}

static ds_status_t cuda_stream_sync(void *stream)
{
    CU_CALL("cuStreamSynchronize", cu.StreamSynchronize(stream));
    return DS_K_OK;
}

static ds_status_t cuda_copy_d2h(void *dst, uint64_t src, size_t n, void *stream)
{
    if (stream)
        CU_CALL("cuMemcpyDtoHAsync", cu.MemcpyDtoHAsync(dst, src, n, stream));
    else
        CU_CALL("cuMemcpyDtoH", cu.MemcpyDtoH(dst, src, n));
    return DS_K_OK;
}

static ds_status_t cuda_copy_h2d(uint64_t dst, const void *src, size_t n, void *stream)
{
    if (stream)
        CU_CALL("cuMemcpyHtoDAsync", cu.MemcpyHtoDAsync(dst, src, n, stream));
    else
        CU_CALL("cuMemcpyHtoD", cu.MemcpyHtoD(dst, src, n));
    return DS_K_OK;
}

static ds_status_t cuda_copy_d2d(uint64_t dst, uint64_t src, size_t n, void *stream)
{
    if (stream)
        CU_CALL("cuMemcpyDtoDAsync", cu.MemcpyDtoDAsync(dst, src, n, stream));
    else
        CU_CALL("cuMemcpyDtoD", cu.MemcpyDtoD(dst, src, n));
    return DS_K_OK;
}

static ds_status_t cuda_host_register(void *p, size_t n)
{
    CU_CALL("cuMemHostRegister", cu.MemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE));
    return DS_K_OK;
}

static ds_status_t cuda_host_unregister(void *p)
{
    CU_CALL("cuMemHostUnregister", cu.MemHostUnregister(p));
    return DS_K_OK;
}

/* The device allocation, *base and *size bytes, that holds [p, p + n): the
 * whole range must lie in it. */
static ds_status_t cuda_alloc_range(uint64_t p, size_t n, CUdeviceptr *base, size_t *size)
{
    CU_CALL("cuMemGetAddressRange", cu.MemGetAddressRange(base, size, p));
    if (p - *base > *size || n > *size - (p - *base))
        return ds__set_error(DS_K_INVALID,
                             "the range 0x%llx + %zu runs past the end of its device allocation "
                             "(0x%llx + %zu)",
                             (unsigned long long)p, n, (unsigned long long)*base, *size);
    return DS_K_OK;
}

/* A range the driver knows as device memory (cuMemAlloc, PyTorch's caching
 * allocator) is DMA-capable already: it must lie within one allocation, so
 * a later copy into it cannot run off its end. Memory the driver does not
 * know (plain host memory under unified addressing) is page-locked with
 * cuMemHostRegister, so copies to and from it are direct; memory already
 * page-locked is left as it is. */
static ds_status_t cuda_mem_register(uint64_t p, size_t n, int *pinned)
{
    *pinned = 0;
    unsigned int type = 0;
    CUresult r = cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (r != CUDA_SUCCESS) {
        /* Unknown to the driver: host memory of this process. */
        CU_CALL("cuMemHostRegister",
                cu.MemHostRegister((void *)(uintptr_t)p, n, CU_MEMHOSTREGISTER_PORTABLE));
        *pinned = 1;
        return DS_K_OK;
    }
    if (type == CU_MEMORYTYPE_HOST) return DS_K_OK;
    CUdeviceptr base = 0;
    size_t size = 0;
    return cuda_alloc_range(p, n, &base, &size);
}

static ds_status_t cuda_mem_unregister(uint64_t p, int pinned)
{
    if (pinned) CU_CALL("cuMemHostUnregister", cu.MemHostUnregister((void *)(uintptr_t)p));
    return DS_K_OK;
}

/* A handle: the driver's, and the allocation's length (the reader checks
 * its ranges against it). */
typedef struct {
    CUipcMemHandle h;
    uint64_t size;
} cuda_handle_t;

_Static_assert(sizeof(cuda_handle_t) <= DS__IPC_HANDLE_BYTES, "cuda handle too large");

static ds_status_t cuda_no_ipc(void)
{
    return ds__set_error(DS_K_NOT_SUPPORTED,
                         "the NVIDIA driver has no cuIpcGetMemHandle / cuIpcOpenMemHandle / "
                         "cuIpcCloseMemHandle");
}

/* The handle names the whole allocation (cuMemAlloc's, or a segment of
 * PyTorch's caching allocator); the range's offset in it travels apart. */
static ds_status_t cuda_ipc_export(uint64_t p, size_t n, ds__ipc_handle_t *h, uint64_t *offset)
{
    if (cu.IpcGetMemHandle == NULL || cu.IpcOpenMemHandle == NULL || cu.IpcCloseMemHandle == NULL)
        return cuda_no_ipc();
    CUdeviceptr base = 0;
    size_t size = 0;
    ds_status_t st = cuda_alloc_range(p, n, &base, &size);
    if (st != DS_K_OK) return st;
    cuda_handle_t ch;
    memset(&ch, 0, sizeof ch);
    CU_CALL("cuIpcGetMemHandle", cu.IpcGetMemHandle(&ch.h, base));
    ch.size = size;
    memset(h, 0, sizeof *h);
    memcpy(h->b, &ch, sizeof ch);
    *offset = p - base;
    return DS_K_OK;
}

typedef struct {
    CUdeviceptr base;
    CUcontext ctx; /* the context it was opened in, current again to close */
} cuda_opened_t;

static ds_status_t cuda_ipc_open(const ds__ipc_handle_t *h, uint64_t *base, size_t *size,
                                 void **opened)
{
    if (cu.IpcOpenMemHandle == NULL || cu.IpcCloseMemHandle == NULL) return cuda_no_ipc();
    cuda_handle_t ch;
    memcpy(&ch, h->b, sizeof ch);
    cuda_opened_t *o = calloc(1, sizeof *o);
    if (o == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    CUresult r = cu.CtxGetCurrent(&o->ctx);
    if (r == CUDA_SUCCESS)
        r = cu.IpcOpenMemHandle(&o->base, ch.h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUDA_SUCCESS) {
        free(o);
        return cu_fail(r, "cuIpcOpenMemHandle");
    }
    *base = o->base;
    *size = (size_t)ch.size;
    *opened = o;
    return DS_K_OK;
}

static ds_status_t cuda_ipc_close(void *opened)
{
    cuda_opened_t *o = opened;
    if (o == NULL) return DS_K_OK;
    CUcontext cur = NULL;
    CUresult r = cu.CtxGetCurrent(&cur);
    if (r == CUDA_SUCCESS && cur != o->ctx) r = cu.CtxSetCurrent(o->ctx);
    if (r == CUDA_SUCCESS) r = cu.IpcCloseMemHandle(o->base);
    if (cur != o->ctx && cur != NULL) (void)cu.CtxSetCurrent(cur);
    free(o);
    return r == CUDA_SUCCESS ? DS_K_OK : cu_fail(r, "cuIpcCloseMemHandle");
}

const ds__device_ops_t ds__device_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .set_device = cuda_set_device,
    .current_device = cuda_current_device,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .copy_d2h = cuda_copy_d2h,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2d = cuda_copy_d2d,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .mem_register = cuda_mem_register,
    .mem_unregister = cuda_mem_unregister,
    .ipc_export = cuda_ipc_export,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
};
