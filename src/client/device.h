/* The device layer: one small interface over the memory of an accelerator.
 *
 * The heterogeneous client (hetero.c) moves values between device memory
 * and the worker's arena through this table of operations and nothing else,
 * so a backend is one file:
 *
 *   host  (device_host.c)  host memory stands in for device memory: a
 *         "device pointer" is a host address. CPU-only pipelines and every
 *         test on a machine without a GPU use it.
 *   cuda  (device_cuda.c)  NVIDIA's driver API, loaded at run time from
 *         libcuda.so.1, on each device's primary context (the one PyTorch
 *         and the CUDA runtime use), so pointers from either work here and
 *         the build needs no CUDA toolkit.
 *
 * The backend is chosen once per process from DS_DEVICE_BACKEND ("host" or
 * "cuda"); unset, cuda when the driver loads and reports a device, else an
 * error naming the variable (ds__device_get).
 *
 * Cross-process device memory (ipc_*): a process exports a handle naming
 * one of its device allocations; another process of the same machine opens
 * it, reads the allocation device to device, and closes it. The exporter
 * keeps the allocation alive and unchanged while peers may read it; a
 * handle whose allocation or process is gone fails to open (never maps
 * other memory), so callers fall back to another path. Handles from the
 * calling process itself are not opened through here (cuda refuses them):
 * the caller reads its own pointers.
 *
 * Streams: copies given a stream are queued on it and complete by
 * stream_sync; copies given NULL complete before the call returns. A stream
 * belongs to the thread that uses it; the operations themselves are
 * thread-safe. Every operation returns a status and sets ds_last_error's
 * message on failure; none aborts. */
#ifndef DS_CLIENT_DEVICE_H
#define DS_CLIENT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ds/status.h"

/* Opaque bytes naming one shareable device allocation; equal handles name
 * the same allocation. */
#define DS__IPC_HANDLE_BYTES 80
typedef struct {
    uint8_t b[DS__IPC_HANDLE_BYTES];
} ds__ipc_handle_t;

typedef struct {
    const char *name;
    /* Opens the backend (once per process, under ds__device_get's lock):
     * DS_K_OK, or an error saying why it cannot run here. */
    ds_status_t (*open)(void);
    /* Makes device dev_idx current for the calling thread (its primary
     * context); dev_idx < 0 keeps the thread's current device, or device 0
     * when it has none. */
    ds_status_t (*set_device)(int32_t dev_idx);
    /* The calling thread's current device (after set_device, or the one
     * its context was made current on by other code, e.g. PyTorch). */
    ds_status_t (*current_device)(int32_t *dev_idx);
    /* Device memory of n bytes (for tests and benchmarks; the client copies
     * into memory its caller owns). */
    ds_status_t (*alloc)(size_t n, uint64_t *dptr);
    ds_status_t (*free)(uint64_t dptr);
    ds_status_t (*stream_create)(void **stream);
    ds_status_t (*stream_destroy)(void *stream);
    ds_status_t (*stream_sync)(void *stream);
    ds_status_t (*copy_d2h)(void *dst, uint64_t src, size_t n, void *stream);
    ds_status_t (*copy_h2d)(uint64_t dst, const void *src, size_t n, void *stream);
    ds_status_t (*copy_d2d)(uint64_t dst, uint64_t src, size_t n, void *stream);
    /* Page-locks host memory for DMA (the arena, once per mapping), so
     * copies to and from it run at full speed and may be asynchronous. */
    ds_status_t (*host_register)(void *p, size_t n);
    ds_status_t (*host_unregister)(void *p);
    /* Registers a caller's range [p, p + n) that later copies run to or
     * from (pre_register_device_memory): device memory must lie within one
     * allocation of the current context; host memory is page-locked, and
     * *pinned says so (the caller unregisters it with mem_unregister). An
     * error names what is wrong with the range. */
    ds_status_t (*mem_register)(uint64_t p, size_t n, int *pinned);
    ds_status_t (*mem_unregister)(uint64_t p, int pinned);
    /* The handle of the allocation holding [p, p + n), and p's offset in
     * it; an error when the range is not within one allocation this backend
     * can share with other processes. */
    ds_status_t (*ipc_export)(uint64_t p, size_t n, ds__ipc_handle_t *h, uint64_t *offset);
    /* Maps a peer process's allocation into this one, on the calling
     * thread's current device: *base is its first byte, *size its length,
     * *opened what ipc_close takes. An error (the process or allocation is
     * gone, another machine or PID namespace, no permission) says why. */
    ds_status_t (*ipc_open)(const ds__ipc_handle_t *h, uint64_t *base, size_t *size, void **opened);
    ds_status_t (*ipc_close)(void *opened);
} ds__device_ops_t;

extern const ds__device_ops_t ds__device_host;
extern const ds__device_ops_t ds__device_cuda;

/* The process's backend, opened on first use; NULL with the error set and
 * its code in *code (the same on every later call) when none can be used. */
const ds__device_ops_t *ds__device_get(ds_status_t *code);

#endif
