/* Choosing the device backend, and the public device memory helpers.
 *
 * The backend is chosen once per process, on the first device operation,
 * from DS_DEVICE_BACKEND: "host" or "cuda" take that backend (cuda failing
 * to open is an error, never a silent fall-back to host memory); unset or
 * empty tries cuda and, when no driver or device is there, fails with a
 * message naming the variable, because treating host addresses as device
 * pointers without being asked would corrupt a GPU program's memory. The
 * outcome, success or error, is kept: every later call sees the same. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "device.h"
#include "ds/hetero_client.h"

static pthread_once_t choose_once = PTHREAD_ONCE_INIT;
static const ds__device_ops_t *chosen;
static ds_status_t choose_code;
static char choose_msg[512];

static void choose(void)
{
    const char *env = getenv("DS_DEVICE_BACKEND");
    ds_status_t st;
    if (env && *env) {
        const ds__device_ops_t *ops = NULL;
        if (strcmp(env, "host") == 0)
            ops = &ds__device_host;
        else if (strcmp(env, "cuda") == 0)
            ops = &ds__device_cuda;
        if (ops == NULL) {
            choose_code = DS_K_INVALID;
            snprintf(choose_msg, sizeof choose_msg,
                     "DS_DEVICE_BACKEND='%.64s' is not a device backend: use host or cuda", env);
            return;
        }
        if ((st = ops->open()) == DS_K_OK) {
            chosen = ops;
            return;
        }
        choose_code = st;
        snprintf(choose_msg, sizeof choose_msg, "DS_DEVICE_BACKEND=%s: %s", env, ds_last_error());
        return;
    }
    if ((st = ds__device_cuda.open()) == DS_K_OK) {
        chosen = &ds__device_cuda;
        return;
    }
    choose_code = DS_K_NOT_SUPPORTED;
    snprintf(choose_msg, sizeof choose_msg,
             "no device backend: DS_DEVICE_BACKEND is unset and the cuda backend cannot run "
             "(%s); set DS_DEVICE_BACKEND=host to use host memory as device memory, or cuda",
             ds_last_error());
}

const ds__device_ops_t *ds__device_get(ds_status_t *code)
{
    pthread_once(&choose_once, choose);
    if (chosen == NULL) *code = ds__set_error(choose_code, "%s", choose_msg);
    return chosen;
}

const char *ds_device_backend_name(void)
{
    ds__clear_error();
    ds_status_t code;
    const ds__device_ops_t *ops = ds__device_get(&code);
    return ops ? ops->name : NULL;
}

ds_status_t ds_device_malloc(int32_t dev_idx, size_t n, uint64_t *dev_ptr)
{
    ds__clear_error();
    if (dev_ptr == NULL || n == 0)
        return ds__set_error(DS_K_INVALID, "ds_device_malloc: dev_ptr is NULL or n is 0");
    *dev_ptr = 0;
    ds_status_t code;
    const ds__device_ops_t *ops = ds__device_get(&code);
    if (ops == NULL) return code;
    ds_status_t st = ops->set_device(dev_idx);
    return st == DS_K_OK ? ops->alloc(n, dev_ptr) : st;
}

ds_status_t ds_device_free(uint64_t dev_ptr)
{
    ds__clear_error();
    if (dev_ptr == 0) return DS_K_OK;
    ds_status_t code;
    const ds__device_ops_t *ops = ds__device_get(&code);
    if (ops == NULL) return code;
    ds_status_t st = ops->set_device(-1);
    return st == DS_K_OK ? ops->free(dev_ptr) : st;
}

ds_status_t ds_device_current(int32_t *dev_idx)
{
    ds__clear_error();
    if (dev_idx == NULL) return ds__set_error(DS_K_INVALID, "ds_device_current: dev_idx is NULL");
    ds_status_t code;
    const ds__device_ops_t *ops = ds__device_get(&code);
    if (ops == NULL) return code;
    return ops->current_device(dev_idx);
}

ds_status_t ds_device_memcpy(uint64_t dst, uint64_t src, size_t n, ds_copy_kind_t kind)
{
    ds__clear_error();
    ds_status_t code;
    const ds__device_ops_t *ops = ds__device_get(&code);
    if (ops == NULL) return code;
    ds_status_t st = ops->set_device(-1);
    if (st != DS_K_OK) return st;
    switch (kind) {
    case DS_COPY_H2D:
        return ops->copy_h2d(dst, (const void *)(uintptr_t)src, n, NULL);
    case DS_COPY_D2H:
        return ops->copy_d2h((void *)(uintptr_t)dst, src, n, NULL);
    case DS_COPY_D2D:
        return ops->copy_d2d(dst, src, n, NULL);
    }
    return ds__set_error(DS_K_INVALID, "copy kind %d is not H2D (0), D2H (1) or D2D (2)",
                         (int)kind);
}
