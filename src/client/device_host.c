/* The host device backend: host memory stands in for device memory.
 *
 * A device pointer is a host address in this process, so every copy is a
 * memcpy and a stream has nothing to queue: copies complete before they
 * return, and stream_sync only checks its argument. Registering host memory
 * has nothing to do. This is the backend of CPU-only pipelines and of every
 * test on a machine without a GPU; it exercises the same client paths as a
 * device backend (one copy into the arena, then publish; one copy out of
 * the worker's shared memory into the destination). */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "device.h"

/* Any non-NULL token works as a stream; one static byte keeps it valid
 * across threads without an allocation to lose. */
static char host_stream_token;

static ds_status_t host_open(void)
{
    return DS_K_OK;
}

static ds_status_t host_set_device(int32_t dev_idx)
{
    if (dev_idx > 0)
        return ds__set_error(DS_K_INVALID,
                             "device index %d does not exist: the host device backend "
                             "(DS_DEVICE_BACKEND=host) has one device, index 0",
                             (int)dev_idx);
    return DS_K_OK;
}

static ds_status_t host_current_device(int32_t *dev_idx)
{
    *dev_idx = 0;
    return DS_K_OK;
}

static ds_status_t host_alloc(size_t n, uint64_t *dptr)
{
    if (n == 0 || dptr == NULL) return ds__set_error(DS_K_INVALID, "device alloc of 0 bytes");
    void *p = NULL;
    if (posix_memalign(&p, 256, n) != 0)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for %zu bytes of device memory", n);
    *dptr = (uint64_t)(uintptr_t)p;
    return DS_K_OK;
}

static ds_status_t host_free(uint64_t dptr)
{
    free((void *)(uintptr_t)dptr);
    return DS_K_OK;
}

static ds_status_t host_stream_create(void **stream)
{
    *stream = &host_stream_token;
    return DS_K_OK;
}

static ds_status_t host_stream_destroy(void *stream)
{
    (void)stream;
    return DS_K_OK;
}

static ds_status_t host_stream_sync(void *stream)
{
    (void)stream;
    return DS_K_OK;
}

static ds_status_t check_ptrs(uintptr_t a, uintptr_t b, size_t n)
{
    if (n != 0 && (a == 0 || b == 0))
        return ds__set_error(DS_K_INVALID, "a copy of %zu bytes with a NULL address", n);
    return DS_K_OK;
}

static ds_status_t host_copy_d2h(void *dst, uint64_t src, size_t n, void *stream)
{
    (void)stream;
    ds_status_t st = check_ptrs((uintptr_t)dst, (uintptr_t)src, n);
    if (st == DS_K_OK && n) memcpy(dst, (const void *)(uintptr_t)src, n);
    return st;
}

static ds_status_t host_copy_h2d(uint64_t dst, const void *src, size_t n, void *stream)
{
    (void)stream;
    ds_status_t st = check_ptrs((uintptr_t)dst, (uintptr_t)src, n);
    if (st == DS_K_OK && n) memcpy((void *)(uintptr_t)dst, src, n);
    return st;
}

static ds_status_t host_copy_d2d(uint64_t dst, uint64_t src, size_t n, void *stream)
{
    (void)stream;
    ds_status_t st = check_ptrs((uintptr_t)dst, (uintptr_t)src, n);
    if (st == DS_K_OK && n) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return st;
}

static ds_status_t host_register(void *p, size_t n)
{
    (void)p;
    (void)n;
    return DS_K_OK;
}

static ds_status_t host_unregister(void *p)
{
    (void)p;
    return DS_K_OK;
}

/* Host memory needs no registration for copies; the client records the
 * range and checks later copies against it. */
static ds_status_t host_mem_register(uint64_t p, size_t n, int *pinned)
{
    (void)p;
    (void)n;
    *pinned = 0;
    return DS_K_OK;
}

static ds_status_t host_mem_unregister(uint64_t p, int pinned)
{
    (void)p;
    (void)pinned;
    return DS_K_OK;
}

const ds__device_ops_t ds__device_host = {
    .name = "host",
    .open = host_open,
    .set_device = host_set_device,
    .current_device = host_current_device,
    .alloc = host_alloc,
    .free = host_free,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .copy_d2h = host_copy_d2h,
    .copy_h2d = host_copy_h2d,
    .copy_d2d = host_copy_d2d,
    .host_register = host_register,
    .host_unregister = host_unregister,
    .mem_register = host_mem_register,
    .mem_unregister = host_mem_unregister,
};
