/* What the worker's UCX data plane (worker/net/ucx.c) and the client's
 * (client/ucx.c) share: opening a UCX context and worker with the features
 * they both use (tagged messages, a wake-up fd), the worker address as hex
 * (how it travels in membership records and UCX_GET requests), and the one
 * wording of a start-up failure, which names the UCX call, its status and
 * UCX_TLS, so that nobody is left guessing why UCX did not come up. */
#ifndef DS_COMMON_UCX_COMMON_H
#define DS_COMMON_UCX_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <ucp/api/ucp.h>

/* Longest UCX worker address (hex) a membership record or a UCX_GET carries. */
#define DS_UCX_ADDR_HEX_MAX 2048

/* Opens a context (features TAG and WAKEUP) and a worker in thread mode
 * `mode`, and writes the worker's address as hex into addr_hex (at least
 * DS_UCX_ADDR_HEX_MAX + 1 bytes). `what` names who asks, for the message:
 * "--enable_rdma", "the client (enable_ucx / DS_CLIENT_UCX)". On failure
 * -1 with *ctx and *worker NULL (nothing left open) and the reason in err. */
int ds__ucx_open(const char *what, ucs_thread_mode_t mode, ucp_context_h *ctx, ucp_worker_h *worker,
                 char *addr_hex, char *err, size_t err_cap);
/* The worker's address (hex, as above) again, e.g. after a new worker. */
int ds__ucx_worker_address(const char *what, ucp_worker_h worker, char *addr_hex, char *err,
                           size_t err_cap);
/* "cannot start UCX for <what>: <call>: <status> (UCX_TLS=...; ...)"; returns -1. */
int ds__ucx_fail(char *err, size_t cap, const char *what, const char *call, ucs_status_t st);

void ds__ucx_to_hex(const uint8_t *p, size_t n, char *out);
/* n bytes from lowercase hex, or -1 when s is not even-length lowercase hex
 * or longer than cap bytes. */
ssize_t ds__ucx_from_hex(const char *s, size_t len, uint8_t *out, size_t cap);

#endif
