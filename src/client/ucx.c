/* Remote gets over UCX (enable_ucx / DS_CLIENT_UCX=1; see common/wire.h,
 * UCX_GET). The control exchange stays on the client's TCP connection; a
 * large value arrives as a UCX tagged message that the worker sends from its
 * arena, and this file posts the receive straight into the value's final
 * buffer (the caller's for ds_kv_get_into, the allocation ds_kv_get hands
 * out), so there is no staging copy: with RDMA transports UCX's rendezvous
 * registers that buffer and reads into it directly.
 *
 * One UCX context and worker per client, in thread mode SERIALIZED: every
 * UCX call is made under `mu`, by the calling threads themselves (no
 * progress thread). A waiting thread progresses the worker, then arms it and
 * polls its event fd together with the TCP connection; the connection
 * closing (the worker died) or the deadline ends the wait. A receive that
 * cannot be cancelled then (UCX is writing into it) cannot be left behind:
 * the caller is about to get its buffer back, so the UCX worker itself is
 * destroyed (which ends every receive on it) and a new one made; receives
 * of other threads on the old one fail, and the worker, for its part, ends
 * the sends of the old address when the session goes or at their deadline. */
#include "client/client_internal.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/ucx_common.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

static const char WHAT[] = "the client (enable_ucx / DS_CLIENT_UCX=1)";

struct ds_cucx {
    pthread_mutex_t mu;
    /* under mu */
    ucp_context_h ctx;
    ucp_worker_h worker; /* NULL when a reset could not make a new one */
    int efd;
    char addr_hex[DS_UCX_ADDR_HEX_MAX + 1];
    uint64_t gen; /* bumped when the worker is replaced */
    uint64_t next_tag;
    uint64_t completions;
    char broken[256]; /* why there is no worker */
};

static int open_worker(ds_cucx_t *u, char *err, size_t cap)
{
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucs_status_t st = ucp_worker_create(u->ctx, &wp, &u->worker);
    if (st != UCS_OK) {
        u->worker = NULL;
        return ds__ucx_fail(err, cap, WHAT, "ucp_worker_create", st);
    }
    if (ds__ucx_worker_address(WHAT, u->worker, u->addr_hex, err, cap) != 0 ||
        (st = ucp_worker_get_efd(u->worker, &u->efd)) != UCS_OK) {
        if (st != UCS_OK) ds__ucx_fail(err, cap, WHAT, "ucp_worker_get_efd", st);
        ucp_worker_destroy(u->worker);
        u->worker = NULL;
        return -1;
    }
    return 0;
}

ds_status_t ds__cucx_new(ds_cucx_t **out)
{
    *out = NULL;
    ds_cucx_t *u = calloc(1, sizeof(*u));
    if (u == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory starting UCX");
    char err[512];
    if (ds__ucx_open(WHAT, UCS_THREAD_MODE_SERIALIZED, &u->ctx, &u->worker, u->addr_hex, err,
                     sizeof(err)) != 0) {
        free(u);
        return ds__set_error(DS_K_RUNTIME_ERROR, "%s", err);
    }
    ucs_status_t st = ucp_worker_get_efd(u->worker, &u->efd);
    if (st != UCS_OK) {
        ds__ucx_fail(err, sizeof(err), WHAT, "ucp_worker_get_efd", st);
        ucp_worker_destroy(u->worker);
        ucp_cleanup(u->ctx);
        free(u);
        return ds__set_error(DS_K_RUNTIME_ERROR, "%s", err);
    }
    pthread_mutex_init(&u->mu, NULL);
    u->next_tag = 1;
    *out = u;
    return DS_K_OK;
}

void ds__cucx_free(ds_cucx_t *u)
{
    if (u == NULL) return;
    if (u->worker) ucp_worker_destroy(u->worker);
    ucp_cleanup(u->ctx);
    pthread_mutex_destroy(&u->mu);
    free(u);
}

ds_status_t ds__cucx_begin(ds_cucx_t *u, size_t n, uint64_t *tag, char *addr, uint64_t *gen)
{
    char why[sizeof(u->broken)];
    pthread_mutex_lock(&u->mu);
    bool ok = u->worker != NULL;
    if (ok) {
        *tag = u->next_tag;
        u->next_tag += n;
        *gen = u->gen;
        memcpy(addr, u->addr_hex, strlen(u->addr_hex) + 1);
    }
    memcpy(why, u->broken, sizeof(why));
    pthread_mutex_unlock(&u->mu);
    if (!ok) return ds__set_error(DS_K_RUNTIME_ERROR, "UCX is unusable in this client: %s", why);
    return DS_K_OK;
}

static void recv_cb(void *request, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)request;
    ds_crecv_t *rv = user; /* runs under mu, inside ucp_worker_progress */
    rv->st = (int)st;
    rv->got = st == UCS_OK ? info->length : 0;
    rv->done = true;
}

ds_status_t ds__cucx_recv(ds_cucx_t *u, ds_crecv_t *rv, uint64_t tag, void *dst, size_t len)
{
    memset(rv, 0, sizeof(*rv));
    rv->want = len;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                               .cb.recv = recv_cb,
                               .user_data = rv};
    char why[sizeof(u->broken)];
    pthread_mutex_lock(&u->mu);
    void *r = u->worker ? ucp_tag_recv_nbx(u->worker, dst, len, tag, UINT64_MAX, &prm) : NULL;
    rv->gen = u->gen;
    memcpy(why, u->broken, sizeof(why));
    pthread_mutex_unlock(&u->mu);
    if (r == NULL || UCS_PTR_IS_ERR(r))
        return ds__set_error(DS_K_RUNTIME_ERROR, "cannot post a UCX receive of %zu bytes: %s", len,
                             r ? ucs_status_string(UCS_PTR_STATUS(r)) : why);
    rv->req = r;
    rv->posted = true;
    return DS_K_OK;
}

/* Under mu: drives UCX; true when it completed something. */
static bool progress_locked(ds_cucx_t *u)
{
    bool any = false;
    while (u->worker && ucp_worker_progress(u->worker) != 0)
        any = true;
    return any;
}

/* Under mu: the receive is over for its waiter (done, or its worker gone). */
static bool over_locked(const ds_cucx_t *u, const ds_crecv_t *rv)
{
    return !rv->posted || rv->done || rv->gen != u->gen;
}

/* Under mu: replaces the UCX worker, ending every receive posted on it. */
static void reset_locked(ds_cucx_t *u)
{
    ucp_worker_destroy(u->worker);
    u->worker = NULL;
    u->gen++;
    char err[256];
    if (open_worker(u, err, sizeof(err)) != 0) snprintf(u->broken, sizeof(u->broken), "%s", err);
}

/* Ends the receives in rv[0..n) that are not over: cancelled (an unmatched
 * one at once), else, when UCX still holds them after a short while, by a
 * new UCX worker. Their buffers are the caller's again on return. */
static void abandon(ds_cucx_t *u, ds_crecv_t *rv, size_t n)
{
    pthread_mutex_lock(&u->mu);
    for (size_t i = 0; i < n; i++)
        if (!over_locked(u, &rv[i])) ucp_request_cancel(u->worker, rv[i].req);
    uint64_t until = ds__now_ms() + 200;
    bool all = false;
    while (!all) {
        progress_locked(u);
        all = true;
        for (size_t i = 0; i < n; i++)
            all = all && over_locked(u, &rv[i]);
        if (all || ds__now_ms() >= until) break;
        pthread_mutex_unlock(&u->mu);
        struct pollfd p = {.fd = u->efd, .events = POLLIN};
        (void)poll(&p, 1, 5);
        pthread_mutex_lock(&u->mu);
    }
    if (!all) reset_locked(u);
    for (size_t i = 0; i < n; i++) {
        if (rv[i].posted && rv[i].gen == u->gen) ucp_request_free(rv[i].req);
        rv[i].posted = false;
    }
    pthread_mutex_unlock(&u->mu);
}

/* The TCP connection has something to say while nothing is expected on it:
 * the worker closed it (died), or it sent bytes it should not have. */
static ds_status_t conn_event(ds_conn_t *conn)
{
    char b;
    ssize_t r = recv(conn->sock.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return DS_K_OK;
    if (r > 0) return ds__conn_protocol_error(conn, "get (bytes during a UCX transfer)");
    conn->state = DS_CONN_LOST;
    return ds__set_error(DS_K_CLIENT_WORKER_DISCONNECT,
                         "lost the connection to the worker at %s during a UCX transfer (%s); the "
                         "value was not received; the next call reconnects",
                         conn->peer, r == 0 ? "closed by the worker" : strerror(errno));
}

ds_status_t ds__cucx_wait(ds_cucx_t *u, ds_crecv_t *rv, size_t n, ds_conn_t *conn,
                          uint64_t deadline)
{
    ds_status_t st = DS_K_OK;
    for (;;) {
        pthread_mutex_lock(&u->mu);
        if (progress_locked(u)) {
            u->completions++;
            /* Others waiting on this worker may have been completed too. */
            if (u->worker) ucp_worker_signal(u->worker);
        }
        bool all = true, gone = false;
        size_t bad = n;
        for (size_t i = 0; i < n; i++) {
            if (rv[i].gen != u->gen) gone = true;
            if (rv[i].done && (rv[i].st != UCS_OK || rv[i].got != rv[i].want) && bad == n) bad = i;
            all = all && over_locked(u, &rv[i]);
        }
        ucs_status_t arm =
            all || gone || bad < n || !u->worker ? UCS_OK : ucp_worker_arm(u->worker);
        int efd = u->efd;
        pthread_mutex_unlock(&u->mu);
        if (gone) {
            st = ds__set_error(DS_K_RPC_UNAVAILABLE,
                               "a UCX receive from the worker at %s was ended: another get of "
                               "this client failed mid-transfer and its UCX worker was replaced",
                               conn->peer);
            break;
        }
        if (bad < n) {
            st = rv[bad].st != UCS_OK
                     ? ds__set_error(DS_K_RPC_UNAVAILABLE,
                                     "UCX receive from the worker at %s failed: %s", conn->peer,
                                     ucs_status_string((ucs_status_t)rv[bad].st))
                     : ds__set_error(DS_K_RUNTIME_ERROR,
                                     "UCX message from the worker at %s has %zu bytes, not the %zu "
                                     "announced",
                                     conn->peer, rv[bad].got, rv[bad].want);
            break;
        }
        if (all) break;
        if (arm == UCS_ERR_BUSY) continue;
        uint64_t now = ds__now_ms();
        if (now >= deadline) {
            conn->state = DS_CONN_BROKEN;
            st = ds__set_error(DS_K_RPC_DEADLINE_EXCEEDED,
                               "get from the worker at %s timed out waiting for its UCX "
                               "transfer; its connection was closed",
                               conn->peer);
            break;
        }
        uint64_t left = deadline - now;
        struct pollfd p[2] = {{.fd = efd, .events = POLLIN},
                              {.fd = conn->sock.fd, .events = POLLIN}};
        int pr = poll(p, 2, left > 100 ? 100 : (int)left);
        if (pr > 0 && p[1].revents && (st = conn_event(conn)) != DS_K_OK) break;
    }
    if (st != DS_K_OK) {
        if (conn->state == DS_CONN_OK) conn->state = DS_CONN_BROKEN;
        abandon(u, rv, n);
        return st;
    }
    pthread_mutex_lock(&u->mu);
    for (size_t i = 0; i < n; i++) {
        if (rv[i].posted) ucp_request_free(rv[i].req);
        rv[i].posted = false;
    }
    pthread_mutex_unlock(&u->mu);
    return DS_K_OK;
}

void ds__cucx_abandon(ds_cucx_t *u, ds_crecv_t *rv, size_t n)
{
    abandon(u, rv, n);
}
