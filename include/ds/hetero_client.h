/* The heterogeneous client (Yuanrong's HeteroClient): values moved between
 * device memory and the worker's shared-memory arena.
 *
 * ds_hetero_mset_d2h copies each key's device blobs straight into space
 * created for the value in the arena (one copy per byte, then one publish);
 * ds_hetero_mget_h2d copies each value from the worker's shared memory
 * straight into the key's device blobs. A key's blobs are its value's
 * pieces in order: the value is their concatenation, and a get splits it
 * the same way. A remote (TCP) client stages values in its own memory.
 *
 * Device memory is reached through a backend chosen once per process by
 * the environment variable DS_DEVICE_BACKEND:
 *   host  host memory stands in for device memory: a device pointer is a
 *         host address of this process (CPU-only pipelines, tests);
 *   cuda  NVIDIA GPUs through the driver (libcuda.so.1, loaded at run time;
 *         each device's primary context, as PyTorch uses). The arena is
 *         registered for DMA once, so copies to and from it are direct.
 * Unset: cuda when the driver loads and has a device, else the device
 * operations fail DS_K_NOT_SUPPORTED with a message naming the variable.
 * Operations that touch no device memory (ds_hetero_kv's) work either way.
 *
 * Ownership: keys, blob lists and parameters are read during the call (for
 * the async variants: copied before it returns); device memory is the
 * caller's and must stay valid until the call (or its future) completes.
 * Thread safety: as ds_client_t. Errors: every call returns a status, and
 * ds_last_error() names what was wrong. */
#ifndef DATASYSTEM_HETERO_CLIENT_H
#define DATASYSTEM_HETERO_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/export.h"
#include "ds/kv_client.h"
#include "ds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One piece of device memory (Yuanrong's Blob). */
typedef struct {
    uint64_t dev_ptr;
    uint64_t size;
} ds_blob_t;

/* A key's pieces on one device (Yuanrong's DeviceBlobList). dev_idx < 0:
 * the calling thread's current device. src_offset: a get starts copying at
 * this offset of the value (sets ignore it). */
typedef struct {
    const ds_blob_t *blobs;
    size_t n_blobs;
    int32_t dev_idx;
    uint64_t src_offset;
} ds_device_blob_list_t;

typedef struct ds_hetero ds_hetero_t;
typedef struct ds_future ds_future_t;

/* Connects as ds_client_connect. enable_remote_h2d (Yuanrong's flag): in
 * Yuanrong it picks a transport, the holding worker's shared memory read
 * straight into the device (RoCE or HCCS), and without it a get still
 * reaches keys held elsewhere through the client's worker. Here that
 * worker pulls a key held by another worker for every get, then the client
 * copies it to the device, so the flag is accepted and the answers are the
 * same either way (tests/cluster/ct_hetero.c). The device backend is not
 * opened here but by the first device operation. */
DS_EXPORT ds_status_t ds_hetero_connect(const ds_client_options_t *opts, bool enable_remote_h2d,
                                        ds_hetero_t **out);
/* Closes the client; waits for its futures' work to finish. NULL is fine. */
DS_EXPORT void ds_hetero_close(ds_hetero_t *h);
/* The KV client underneath, for exist, delete, meta info and key
 * generation; owned by h and valid until ds_hetero_close. */
DS_EXPORT ds_client_t *ds_hetero_kv(ds_hetero_t *h);
/* "host" or "cuda", or NULL with the error set when no backend can run. */
DS_EXPORT const char *ds_device_backend_name(void);

/* Writes n keys (up to DS_MAX_BATCH), each the concatenation of lists[i]'s
 * blobs (at least one, none of size 0). statuses (n entries, may be NULL):
 * each key's result. Returns DS_K_OK when all succeeded, else the first
 * failure's code. */
DS_EXPORT ds_status_t ds_hetero_mset_d2h(ds_hetero_t *h, size_t n, const char *const *keys,
                                         const ds_device_blob_list_t *lists,
                                         const ds_set_param_t *param, ds_status_t *statuses);
/* Reads n keys into their blobs, waiting up to sub_timeout_ms for missing
 * ones. A key whose value (from src_offset) is shorter than its blobs
 * together fails DS_K_INVALID; a missing one DS_K_NOT_FOUND. statuses (may
 * be NULL): each key's result. Returns DS_K_OK when any key succeeded (the
 * caller reads the failed ones from statuses), else the first failure's. */
DS_EXPORT ds_status_t ds_hetero_mget_h2d(ds_hetero_t *h, size_t n, const char *const *keys,
                                         const ds_device_blob_list_t *lists, int32_t sub_timeout_ms,
                                         ds_status_t *statuses);

/* The same calls run on a thread of their own; *out is the future of the
 * result (release with ds_future_release). The arguments are checked, and
 * copied, before they return. */
DS_EXPORT ds_status_t ds_hetero_async_mset_d2h(ds_hetero_t *h, size_t n, const char *const *keys,
                                               const ds_device_blob_list_t *lists,
                                               const ds_set_param_t *param, ds_future_t **out);
DS_EXPORT ds_status_t ds_hetero_async_mget_h2d(ds_hetero_t *h, size_t n, const char *const *keys,
                                               const ds_device_blob_list_t *lists,
                                               int32_t sub_timeout_ms, ds_future_t **out);
/* Waits up to timeout_ms (< 0: for ever) for the future's call. Returns its
 * status, with ds_last_error() its message, or DS_K_FUTURE_TIMEOUT while it
 * is still running. statuses (may be NULL; as many as the call's keys):
 * each key's result. May be called again. */
DS_EXPORT ds_status_t ds_future_get(ds_future_t *f, int32_t timeout_ms, ds_status_t *statuses);
/* The number of keys of the future's call. */
DS_EXPORT size_t ds_future_count(const ds_future_t *f);
/* Frees the future; a call still running goes on (the client's close
 * waits for it) and its result is dropped. NULL is fine. */
DS_EXPORT void ds_future_release(ds_future_t *f);

/* Yuanrong's PreRegisterDeviceMemory: registers n ranges that later copies
 * run to or from, until ds_hetero_close. cuda: a range of device memory
 * must lie within one allocation; host memory is page-locked
 * (cuMemHostRegister). host backend: the ranges are recorded. Either way a
 * later blob that starts in a registered range and runs past its end fails
 * its key DS_K_INVALID before any byte moves. The same range again is
 * DS_K_OK (kept as it is); a range overlapping a registered one otherwise
 * is DS_K_INVALID, and the call registers nothing (all or nothing). */
DS_EXPORT ds_status_t ds_hetero_pre_register_device_memory(ds_hetero_t *h, size_t n,
                                                           const uint64_t *dev_ptrs,
                                                           const uint64_t *sizes);

/* ---- device to device: Yuanrong's DevPublish / DevSubscribe ----
 *
 * ds_hetero_dev_publish publishes n keys, each its blobs joined, for one
 * ds_hetero_dev_subscribe: the value goes to the worker's arena (as
 * mset_d2h) with a record naming the publisher's device memory (the
 * backend's cross-process handles). A subscriber on the same machine and
 * backend copies straight from the publisher's device memory (device to
 * device, across processes); any other, or one whose handles no longer
 * open (the publisher exited or freed the memory), copies from the
 * worker's copy. Either way it receives the bytes the publisher wrote, and
 * then deletes the keys it received (the object is consumed).
 *
 * Lifetime (Yuanrong's rule): the publisher keeps its blobs alive and
 * unchanged until each key is received; ds_hetero_dev_wait_received waits
 * for that (the keys are gone from the worker), up to timeout_ms (< 0: for
 * ever), each key's status DS_K_OK once received, DS_K_FUTURE_TIMEOUT
 * while it is still published. DS_DEVICE_IPC=0 in the subscriber's
 * environment turns the device-to-device path off. A subscribe waits up to
 * sub_timeout_ms for keys not yet published; statuses and the return are as
 * ds_hetero_mget_h2d's. A value published by mset_d2h is read from the
 * worker's copy. */
DS_EXPORT ds_status_t ds_hetero_dev_publish(ds_hetero_t *h, size_t n, const char *const *keys,
                                            const ds_device_blob_list_t *lists,
                                            ds_status_t *statuses);
DS_EXPORT ds_status_t ds_hetero_dev_wait_received(ds_hetero_t *h, size_t n, const char *const *keys,
                                                  int32_t timeout_ms, ds_status_t *statuses);
DS_EXPORT ds_status_t ds_hetero_dev_subscribe(ds_hetero_t *h, size_t n, const char *const *keys,
                                              const ds_device_blob_list_t *lists,
                                              int32_t sub_timeout_ms, ds_status_t *statuses);
/* How this client's dev_subscribe calls received their keys so far. */
typedef struct {
    uint64_t d2d_keys;   /* straight from a publisher's device memory */
    uint64_t arena_keys; /* from the worker's copy */
} ds_hetero_dev_stats_t;
DS_EXPORT void ds_hetero_dev_stats(ds_hetero_t *h, ds_hetero_dev_stats_t *out);

/* ---- device memory helpers (tests, benchmarks, programs without a
 * framework of their own), on the same backend ---- */

/* n bytes of device memory on dev_idx (< 0: current); free with ds_device_free. */
DS_EXPORT ds_status_t ds_device_malloc(int32_t dev_idx, size_t n, uint64_t *dev_ptr);
DS_EXPORT ds_status_t ds_device_free(uint64_t dev_ptr);
/* The calling thread's current device (what dev_idx < 0 means), e.g. to fix
 * it before handing a batch to another thread. */
DS_EXPORT ds_status_t ds_device_current(int32_t *dev_idx);
typedef enum {
    DS_COPY_H2D = 0,
    DS_COPY_D2H = 1,
    DS_COPY_D2D = 2,
} ds_copy_kind_t;
/* A synchronous copy of n bytes; host addresses are passed as integers. */
DS_EXPORT ds_status_t ds_device_memcpy(uint64_t dst, uint64_t src, size_t n, ds_copy_kind_t kind);

#ifdef __cplusplus
}
#endif
#endif
