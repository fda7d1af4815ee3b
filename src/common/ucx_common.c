/* Shared UCX start-up and address encoding (see ucx_common.h). */
#include "common/ucx_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds__ucx_fail(char *err, size_t cap, const char *what, const char *call, ucs_status_t st)
{
    const char *tls = getenv("UCX_TLS");
    snprintf(err, cap,
             "cannot start UCX for %s: %s: %s (UCX_TLS=%s; `ucx_info -d` lists the transports "
             "and devices UCX can use here)",
             what, call, ucs_status_string(st), tls ? tls : "unset, all");
    return -1;
}

void ds__ucx_to_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

ssize_t ds__ucx_from_hex(const char *s, size_t n, uint8_t *out, size_t cap)
{
    if (n % 2 || n / 2 > cap) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (ssize_t)(n / 2);
}

int ds__ucx_worker_address(const char *what, ucp_worker_h worker, char *addr_hex, char *err,
                           size_t err_cap)
{
    ucp_address_t *addr;
    size_t alen;
    ucs_status_t st = ucp_worker_get_address(worker, &addr, &alen);
    if (st != UCS_OK) return ds__ucx_fail(err, err_cap, what, "ucp_worker_get_address", st);
    if (alen * 2 > DS_UCX_ADDR_HEX_MAX) {
        ucp_worker_release_address(worker, addr);
        snprintf(err, err_cap,
                 "cannot start UCX for %s: its worker address is %zu bytes, more than the %d "
                 "that can be passed on (narrow UCX_TLS or UCX_NET_DEVICES)",
                 what, alen, DS_UCX_ADDR_HEX_MAX / 2);
        return -1;
    }
    ds__ucx_to_hex((const uint8_t *)addr, alen, addr_hex);
    ucp_worker_release_address(worker, addr);
    return 0;
}

int ds__ucx_open(const char *what, ucs_thread_mode_t mode, ucp_context_h *ctx, ucp_worker_h *worker,
                 char *addr_hex, char *err, size_t err_cap)
{
    *ctx = NULL;
    *worker = NULL;
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) return ds__ucx_fail(err, err_cap, what, "reading the UCX_* settings", st);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP};
    st = ucp_init(&params, config, ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        *ctx = NULL;
        return ds__ucx_fail(err, err_cap, what, "ucp_init", st);
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = mode};
    st = ucp_worker_create(*ctx, &wp, worker);
    int rc = 0;
    if (st != UCS_OK) {
        *worker = NULL;
        rc = ds__ucx_fail(err, err_cap, what, "ucp_worker_create", st);
    }
    ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
    if (rc == 0 && mode == UCS_THREAD_MODE_MULTI && ucp_worker_query(*worker, &wa) == UCS_OK &&
        wa.thread_mode != UCS_THREAD_MODE_MULTI)
        rc = ds__ucx_fail(err, err_cap, what, "this UCX build has no multi-thread support",
                          UCS_ERR_UNSUPPORTED);
    if (rc == 0) rc = ds__ucx_worker_address(what, *worker, addr_hex, err, err_cap);
    if (rc != 0) {
        if (*worker) ucp_worker_destroy(*worker);
        ucp_cleanup(*ctx);
        *worker = NULL;
        *ctx = NULL;
    }
    return rc;
}
