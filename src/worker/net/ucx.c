/* The UCX data plane (see ucx.h).
 *
 * Threads: UCX runs in thread mode MULTI; the progress thread drives it
 * (ucp_worker_progress, then ucp_worker_arm and a poll on its event fd),
 * and anything posted from another thread is followed by ucp_worker_signal
 * so that it wakes. Request callbacks run on the progress thread (every
 * operation is posted with UCP_OP_ATTR_FLAG_NO_IMM_CMPL, so never inside the
 * posting call) and take only `mu`; `mu` is never held across a UCX call.
 * Receives are cancelled by the progress thread too: ucp_request_cancel
 * asserts that the request has not completed, which only the thread that
 * completes requests can know. Endpoints are closed there as well (the loop
 * detaches them and queues the close): a FORCE close from the loop crashed
 * inside UCX's TCP transport (see run_closes). */
#include "worker/net/ucx.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/ucx_common.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

struct ds_ucx_op {
    ds_ucx_op_t *next;
    ds_ucx_t *u;
    void *req; /* a receive's UCX request: the posting thread's, until dropped */
    bool is_send;
    size_t len;
    /* under mu */
    bool finished;
    bool abandoned;
    bool cancel_pending; /* on the cancel list: only the progress thread ends it then */
    ds_ucx_op_t *cancel_next;
    ucs_status_t st;
    /* a send: runs on the loop */
    ds_ucx_sent_fn sent;
    void *ctx;
    /* a send in flight (loop only): on u->sends until its callback is back;
     * past deadline_ms its endpoint is closed, which ends it */
    ds_ucx_op_t *sprev, *snext;
    struct ucx_ep *ep;
    uint64_t deadline_ms;
    bool timed_out;
    /* a dropped receive still under way: runs on the loop once it ends */
    void (*release)(void *ctx, void *arg);
    void *rctx, *rarg;
    /* an endpoint that failed: the loop detaches it and the progress thread
     * closes it (UCX keeps a failed endpoint, and what arrives for it, until
     * it is closed) */
    struct ucx_ep *close;
    ucp_ep_h close_ep;
};

/* One endpoint per member (by its cluster address). Entries are kept until
 * the end: an endpoint's error callback names its entry. */
typedef struct ucx_ep {
    struct ucx_ep *next;
    ds_ucx_t *u;
    char peer[300]; /* "" once forgotten; written by the loop under mu (ep_err_cb reads it) */
    char addr[DS_UCX_ADDR_HEX_MAX + 1];
    ucp_ep_h ep; /* NULL once closed; written by the loop under mu */
    bool failed; /* under mu */
} ucx_ep_t;

struct ds_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_mem_h memh;
    char addr_hex[DS_UCX_ADDR_HEX_MAX + 1];
    int wefd; /* the UCX worker's event fd */
    pthread_t thread;
    bool started;
    atomic_bool stop;     /* the progress thread ends */
    atomic_bool stopping; /* waits on receives fail */
    atomic_uint_fast64_t next_tag;
    pthread_mutex_t mu;
    pthread_cond_t cv;                  /* a receive finished, or the worker stops */
    ds_ucx_op_t *done_head, *done_tail; /* for the loop */
    ds_ucx_op_t *cancels;               /* receives to cancel, for the progress thread */
    struct ucx_close *closes;           /* endpoints to force-close, for the progress thread */
    int done_fd;
    ds_io_t dio;
    ds_loop_t *loop;
    ucx_ep_t *eps;      /* loop only (their ep and failed fields: under mu) */
    ds_ucx_op_t *sends; /* loop only: sends in flight */
    uint64_t nsends, send_timeouts;
    uint64_t given_up;  /* loop only: sends past their deadline UCX has not ended yet */
    uint64_t abandoned; /* under mu: receives dropped while UCX still owned them, not ended */
};

static void to_loop_locked(ds_ucx_t *u, ds_ucx_op_t *op);
static void wake_loop(ds_ucx_t *u);

/* An endpoint the loop gave up (a send past its deadline, a client session
 * that ended), closed by the progress thread: a FORCE close from the loop
 * while the progress thread was in UCX's TCP transport crashed the worker
 * there (a NULL handler called from uct_tcp_iface_progress, ct_rdma). */
struct ucx_close {
    struct ucx_close *next;
    ucp_ep_h ep;
};

static void force_close(ds_ucx_t *u, ucp_ep_h ep)
{
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(ep, &prm);
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r); /* UCX finishes it on its own */
    (void)u;
}

/* On the progress thread (or once it has stopped): the closes the loop asked for. */
static void run_closes(ds_ucx_t *u)
{
    pthread_mutex_lock(&u->mu);
    struct ucx_close *list = u->closes;
    u->closes = NULL;
    pthread_mutex_unlock(&u->mu);
    while (list) {
        struct ucx_close *c = list;
        list = c->next;
        force_close(u, c->ep);
        free(c);
    }
}

/* On the progress thread: cancels the receives job threads gave up on. A
 * receive that completed meanwhile was left alone by its callback (it was on
 * this list); it is finished here instead. */
static void run_cancels(ds_ucx_t *u)
{
    pthread_mutex_lock(&u->mu);
    ds_ucx_op_t *list = u->cancels;
    u->cancels = NULL;
    pthread_mutex_unlock(&u->mu);
    while (list) {
        ds_ucx_op_t *op = list;
        list = op->cancel_next;
        pthread_mutex_lock(&u->mu);
        op->cancel_pending = false;
        bool finished = op->finished, abandoned = op->abandoned;
        if (finished && abandoned) to_loop_locked(u, op);
        if (finished && !abandoned) pthread_cond_broadcast(&u->cv);
        pthread_mutex_unlock(&u->mu);
        if (!finished) {
            /* Unmatched: its callback runs now, with UCS_ERR_CANCELED. Under
             * way: it runs when UCX ends the transfer. */
            ucp_request_cancel(u->worker, op->req);
        } else if (abandoned) {
            ucp_request_free(op->req);
            wake_loop(u);
        }
    }
}

static void *progress_thread(void *arg)
{
    ds_ucx_t *u = arg;
    struct pollfd pfd = {.fd = u->wefd, .events = POLLIN};
    while (!atomic_load(&u->stop)) {
        run_cancels(u);
        run_closes(u);
        while (ucp_worker_progress(u->worker) != 0)
            ;
        ucs_status_t st = ucp_worker_arm(u->worker);
        if (st == UCS_ERR_BUSY) continue;
        /* The timeout only bounds how long a stop may take to be seen. */
        if (poll(&pfd, 1, 200) < 0 && errno != EINTR) usleep(1000);
    }
    return NULL;
}

/* Hands a finished operation to the loop. */
static void to_loop_locked(ds_ucx_t *u, ds_ucx_op_t *op)
{
    op->next = NULL;
    if (u->done_tail)
        u->done_tail->next = op;
    else
        u->done_head = op;
    u->done_tail = op;
}

static void wake_loop(ds_ucx_t *u)
{
    uint64_t one = 1;
    ssize_t w = write(u->done_fd, &one, sizeof(one));
    (void)w;
}

static void send_cb(void *request, ucs_status_t st, void *user)
{
    ds_ucx_op_t *op = user;
    ds_ucx_t *u = op->u;
    ucp_request_free(request);
    pthread_mutex_lock(&u->mu);
    op->st = st;
    op->finished = true;
    to_loop_locked(u, op);
    pthread_mutex_unlock(&u->mu);
    wake_loop(u);
}

static void recv_cb(void *request, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    ds_ucx_op_t *op = user;
    ds_ucx_t *u = op->u;
    if (st == UCS_OK && info->length != op->len) st = UCS_ERR_MESSAGE_TRUNCATED;
    pthread_mutex_lock(&u->mu);
    op->st = st;
    op->finished = true;
    if (op->cancel_pending) { /* run_cancels ends it, on this thread */
        pthread_mutex_unlock(&u->mu);
        return;
    }
    bool abandoned = op->abandoned;
    if (abandoned)
        to_loop_locked(u, op);
    else
        pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    if (abandoned) {
        /* Nobody else holds the request once it was dropped. */
        ucp_request_free(request);
        wake_loop(u);
    }
}

static void close_ep(ds_ucx_t *u, struct ucx_ep *e);
static void close_later(ds_ucx_t *u, struct ucx_ep *e);
static void close_failed(ds_ucx_t *u, struct ucx_ep *e, ucp_ep_h ep);

/* On the loop: a send's callback is back; it leaves the in-flight list. */
/* Off the in-flight list (on the loop). */
static void unlink_send(ds_ucx_t *u, ds_ucx_op_t *op)
{
    if (op->sprev)
        op->sprev->snext = op->snext;
    else
        u->sends = op->snext;
    if (op->snext) op->snext->sprev = op->sprev;
    op->sprev = op->snext = NULL;
    u->nsends--;
}

/* On the loop: a send's callback is back. One ended at its deadline was
 * reported (and left the list) then: nothing is left to do. */
static void send_over(ds_ucx_t *u, ds_ucx_op_t *op)
{
    if (op->timed_out) {
        u->given_up--;
        return;
    }
    unlink_send(u, op);
    op->sent(op->ctx, op->st == UCS_OK, ucs_status_string(op->st));
}

static void on_done(void *ctx, uint32_t events)
{
    ds_ucx_t *u = ctx;
    (void)events;
    uint64_t v;
    ssize_t r = read(u->done_fd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&u->mu);
    ds_ucx_op_t *list = u->done_head;
    u->done_head = u->done_tail = NULL;
    pthread_mutex_unlock(&u->mu);
    while (list) {
        ds_ucx_op_t *op = list;
        list = op->next;
        if (op->close)
            close_failed(u, op->close, op->close_ep);
        else if (op->is_send)
            send_over(u, op);
        else if (op->release) {
            pthread_mutex_lock(&u->mu);
            u->abandoned--;
            pthread_mutex_unlock(&u->mu);
            op->release(op->rctx, op->rarg);
        }
        free(op);
    }
}

static int start(ds_ucx_t *u, void *base, size_t len, char *err, size_t err_cap)
{
    static const char what[] = "--enable_rdma";
    if (ds__ucx_open(what, UCS_THREAD_MODE_MULTI, &u->ctx, &u->worker, u->addr_hex, err, err_cap) !=
        0)
        return -1;
    ucp_mem_map_params_t mp = {.field_mask =
                                   UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = base,
                               .length = len};
    ucs_status_t st = ucp_mem_map(u->ctx, &mp, &u->memh);
    if (st != UCS_OK) {
        u->memh = NULL;
        return ds__ucx_fail(err, err_cap, what,
                            "mapping the arena (ucp_mem_map; check `ulimit -l`)", st);
    }
    st = ucp_worker_get_efd(u->worker, &u->wefd);
    if (st != UCS_OK) return ds__ucx_fail(err, err_cap, what, "ucp_worker_get_efd", st);
    return 0;
}

ds_ucx_t *ds__ucx_new(ds_loop_t *loop, void *base, size_t len, char *err, size_t err_cap)
{
    ds_ucx_t *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    u->loop = loop;
    u->done_fd = -1;
    atomic_init(&u->next_tag, 1);
    pthread_mutex_init(&u->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&u->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (start(u, base, len, err, err_cap) != 0) {
        ds__ucx_free(u);
        return NULL;
    }
    u->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->done_fd < 0 || ds__loop_add(loop, &u->dio, u->done_fd, EPOLLIN, on_done, u) != 0) {
        snprintf(err, err_cap, "cannot set up the UCX completions: %s", strerror(errno));
        if (u->done_fd >= 0) close(u->done_fd);
        u->done_fd = -1;
        ds__ucx_free(u);
        return NULL;
    }
    int rc = pthread_create(&u->thread, NULL, progress_thread, u);
    if (rc != 0) {
        snprintf(err, err_cap, "cannot start the UCX progress thread: %s", strerror(rc));
        ds__ucx_free(u);
        return NULL;
    }
    u->started = true;
    DS_LOG_INFO("rdma: UCX %s data plane up (UCX_TLS=%s), arena of %zu MiB mapped, address %zu "
                "bytes",
                ucp_get_version_string(), getenv("UCX_TLS") ? getenv("UCX_TLS") : "all", len >> 20,
                strlen(u->addr_hex) / 2);
    return u;
}

void ds__ucx_stopping(ds_ucx_t *u)
{
    if (u == NULL) return;
    pthread_mutex_lock(&u->mu);
    atomic_store(&u->stopping, true);
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

static void close_ep(ds_ucx_t *u, ucx_ep_t *e)
{
    pthread_mutex_lock(&u->mu);
    ucp_ep_h ep = e->ep;
    e->ep = NULL;
    pthread_mutex_unlock(&u->mu);
    if (ep == NULL) return;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(ep, &prm);
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r); /* UCX finishes it on its own */
    ucp_worker_signal(u->worker);
}

void ds__ucx_free(ds_ucx_t *u)
{
    if (u == NULL) return;
    ds__ucx_stopping(u);
    for (ucx_ep_t *e = u->eps; e; e = e->next)
        close_later(u, e);
    if (u->started) {
        /* Let the closes and their failed sends play out, then stop. */
        uint64_t until = ds__now_ms() + 200;
        while (ds__now_ms() < until) {
            pthread_mutex_lock(&u->mu);
            bool idle = u->done_head == NULL;
            pthread_mutex_unlock(&u->mu);
            if (!idle) on_done(u, 0);
            usleep(5000);
        }
        atomic_store(&u->stop, true);
        ucp_worker_signal(u->worker);
        pthread_join(u->thread, NULL);
    }
    run_closes(u);
    if (u->done_fd >= 0) {
        on_done(u, 0);
        ds__loop_del(u->loop, &u->dio);
        close(u->done_fd);
    }
    while (u->eps) {
        ucx_ep_t *e = u->eps;
        u->eps = e->next;
        free(e);
    }
    pthread_mutex_lock(&u->mu);
    uint64_t abandoned = u->abandoned;
    pthread_mutex_unlock(&u->mu);
    if (u->given_up > 0 || abandoned > 0) {
        /* A send given up at its deadline, or a receive a pull dropped, is
         * still UCX's, and ucp_worker_destroy asserts on an endpoint with a
         * request left (proto_reqs: it aborted workers at the end of
         * ct_rdma's stopped-requester test). The process is exiting, so UCX
         * is left to the OS. */
        DS_LOG_WARN("rdma: %llu sends given up and %llu receives dropped are still UCX's; UCX is "
                    "not torn down",
                    (unsigned long long)u->given_up, (unsigned long long)abandoned);
    } else {
        if (u->memh) ucp_mem_unmap(u->ctx, u->memh);
        if (u->worker) ucp_worker_destroy(u->worker);
        if (u->ctx) ucp_cleanup(u->ctx);
    }
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}

const char *ds__ucx_address(const ds_ucx_t *u)
{
    return u->addr_hex;
}

uint64_t ds__ucx_new_tag(ds_ucx_t *u)
{
    return atomic_fetch_add(&u->next_tag, 1);
}

/* ---- the requester ---- */

ds_ucx_op_t *ds__ucx_recv(ds_ucx_t *u, uint64_t tag, void *dst, size_t len, char *err,
                          size_t err_cap)
{
    ds_ucx_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    op->u = u;
    op->len = len;
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                   UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                               .cb.recv = recv_cb,
                               .user_data = op,
                               .memh = u->memh};
    void *r = ucp_tag_recv_nbx(u->worker, dst, len, tag, UINT64_MAX, &prm);
    if (UCS_PTR_IS_ERR(r)) {
        snprintf(err, err_cap, "posting a UCX receive: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        free(op);
        return NULL;
    }
    op->req = r;
    ucp_worker_signal(u->worker);
    return op;
}

int ds__ucx_wait(ds_ucx_t *u, ds_ucx_op_t *op, uint64_t deadline_ms, char *err, size_t err_cap)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                          .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
    pthread_mutex_lock(&u->mu);
    while (!op->finished && !atomic_load(&u->stopping) && ds__now_ms() < deadline_ms)
        pthread_cond_timedwait(&u->cv, &u->mu, &ts);
    bool finished = op->finished;
    ucs_status_t st = op->st;
    pthread_mutex_unlock(&u->mu);
    if (finished && st == UCS_OK) return 0;
    if (finished)
        snprintf(err, err_cap, "UCX transfer failed: %s", ucs_status_string(st));
    else if (atomic_load(&u->stopping))
        snprintf(err, err_cap, "the worker is stopping");
    else
        snprintf(err, err_cap, "UCX transfer timed out");
    return -1;
}

bool ds__ucx_drop(ds_ucx_t *u, ds_ucx_op_t *op, uint64_t wait_ms,
                  void (*release)(void *ctx, void *arg), void *ctx, void *arg)
{
    pthread_mutex_lock(&u->mu);
    bool signal = false;
    if (!op->finished && !op->cancel_pending) {
        op->cancel_pending = true;
        op->cancel_next = u->cancels;
        u->cancels = op;
        signal = true;
    }
    pthread_mutex_unlock(&u->mu);
    if (signal) ucp_worker_signal(u->worker);
    uint64_t until = ds__now_ms() + wait_ms;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000),
                          .tv_nsec = (long)(until % 1000) * 1000000L};
    pthread_mutex_lock(&u->mu);
    while ((!op->finished || op->cancel_pending) && !atomic_load(&u->stopping) &&
           ds__now_ms() < until)
        pthread_cond_timedwait(&u->cv, &u->mu, &ts);
    bool mine = op->finished && !op->cancel_pending;
    if (!mine) {
        u->abandoned++;
        op->abandoned = true;
        op->release = release;
        op->rctx = ctx;
        op->rarg = arg;
    }
    pthread_mutex_unlock(&u->mu);
    if (!mine) return false;
    ucp_request_free(op->req);
    free(op);
    return true;
}

/* ---- the owner ---- */

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    ucx_ep_t *e = arg;
    ds_ucx_t *u = e->u;
    ds_ucx_op_t *op = calloc(1, sizeof(*op));
    char peer[sizeof(e->peer)];
    pthread_mutex_lock(&u->mu);
    bool mine = e->ep == ep;
    if (mine) e->failed = true;
    memcpy(peer, e->peer, sizeof(peer)); /* the loop renames entries it reuses */
    if (mine && op) {
        op->close = e;
        op->close_ep = ep;
        to_loop_locked(u, op);
        op = NULL;
    }
    pthread_mutex_unlock(&u->mu);
    free(op);
    if (mine) {
        wake_loop(u);
        DS_LOG_WARN("rdma: UCX endpoint to %s failed: %s", peer, ucs_status_string(st));
    }
}

static void close_failed(ds_ucx_t *u, ucx_ep_t *e, ucp_ep_h ep)
{
    pthread_mutex_lock(&u->mu);
    bool same = e->ep == ep;
    pthread_mutex_unlock(&u->mu);
    if (same) close_later(u, e);
}

static ucx_ep_t *get_ep(ds_ucx_t *u, const char *peer, const char *addr_hex, char *err,
                        size_t err_cap)
{
    ucx_ep_t *e = u->eps;
    while (e && strcmp(e->peer, peer) != 0)
        e = e->next;
    if (e) {
        pthread_mutex_lock(&u->mu);
        bool usable = e->ep && !e->failed && strcmp(e->addr, addr_hex) == 0;
        pthread_mutex_unlock(&u->mu);
        if (usable) return e;
        close_later(u, e); /* failed, or the peer restarted with a new address */
    } else {
        /* An entry a forgotten peer left (a client's, ds__ucx_forget), else a new one. */
        e = u->eps;
        while (e && !(e->peer[0] == '\0' && e->ep == NULL))
            e = e->next;
        if (e == NULL && (e = calloc(1, sizeof(*e))) == NULL) {
            snprintf(err, err_cap, "out of memory");
            return NULL;
        }
        if (e->u == NULL) {
            e->u = u;
            e->next = u->eps;
            u->eps = e;
        }
        pthread_mutex_lock(&u->mu); /* ep_err_cb reads it */
        snprintf(e->peer, sizeof(e->peer), "%s", peer);
        pthread_mutex_unlock(&u->mu);
    }
    uint8_t bin[DS_UCX_ADDR_HEX_MAX / 2];
    ssize_t n = ds__ucx_from_hex(addr_hex, strlen(addr_hex), bin, sizeof(bin));
    if (n <= 0) {
        snprintf(err, err_cap, "member %.200s published a malformed UCX address", peer);
        return NULL;
    }
    memcpy(e->addr, addr_hex, 2 * (size_t)n + 1); /* from_hex checked its length */
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .address = (const ucp_address_t *)bin,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = ep_err_cb, .arg = e}};
    ucp_ep_h h;
    ucs_status_t st = ucp_ep_create(u->worker, &ep, &h);
    if (st != UCS_OK) {
        snprintf(err, err_cap, "UCX endpoint to %.200s: %s", peer, ucs_status_string(st));
        return NULL;
    }
    pthread_mutex_lock(&u->mu);
    e->ep = h;
    e->failed = false;
    pthread_mutex_unlock(&u->mu);
    ucp_worker_signal(u->worker);
    return e;
}

int ds__ucx_send(ds_ucx_t *u, const char *peer, const char *addr_hex, uint64_t tag, const void *src,
                 size_t len, uint64_t deadline_ms, ds_ucx_sent_fn done, void *ctx, char *err,
                 size_t err_cap)
{
    ucx_ep_t *e = get_ep(u, peer, addr_hex, err, err_cap);
    if (e == NULL) return -1;
    ds_ucx_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    op->u = u;
    op->is_send = true;
    op->len = len;
    op->sent = done;
    op->ctx = ctx;
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                   UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                               .cb.send = send_cb,
                               .user_data = op,
                               .memh = u->memh};
    void *r = ucp_tag_send_nbx(e->ep, src, len, tag, &prm);
    if (UCS_PTR_IS_ERR(r)) {
        snprintf(err, err_cap, "UCX send to %.200s: %s", peer,
                 ucs_status_string(UCS_PTR_STATUS(r)));
        free(op);
        return -1;
    }
    op->ep = e;
    op->deadline_ms = deadline_ms;
    op->snext = u->sends;
    if (u->sends) u->sends->sprev = op;
    u->sends = op;
    u->nsends++;
    ucp_worker_signal(u->worker);
    return 0;
}

/* On the loop: detaches e's endpoint (the next send opens a new one) and
 * has the progress thread close it. */
static void close_later(ds_ucx_t *u, ucx_ep_t *e)
{
    struct ucx_close *c = malloc(sizeof(*c));
    bool queued = false;
    pthread_mutex_lock(&u->mu);
    ucp_ep_h ep = e->ep;
    if (c && ep) {
        e->ep = NULL;
        c->ep = ep;
        c->next = u->closes;
        u->closes = c;
        queued = true;
    }
    pthread_mutex_unlock(&u->mu);
    if (queued) {
        ucp_worker_signal(u->worker);
        return;
    }
    free(c);
    if (ep) close_ep(u, e); /* no memory for the list: close it here */
}

uint64_t ds__ucx_tick(ds_ucx_t *u, uint64_t now)
{
    if (u == NULL) return 0;
    uint64_t next = 0;
    ds_ucx_op_t *op = u->sends;
    while (op) {
        ds_ucx_op_t *nx = op->snext;
        if (op->deadline_ms > now) {
            if (next == 0 || op->deadline_ms < next) next = op->deadline_ms;
            op = nx;
            continue;
        }
        /* UCX 1.13 cannot cancel a send, and force-closing the endpoint of
         * a send under way to a stopped peer crashed the worker inside UCX
         * (ct_rdma, twice, also when the progress thread made the close).
         * So the send is given up instead: its done callback runs now and
         * drops the pin; the request stays UCX's until it ends on its own
         * (the peer resumes, or its endpoint fails) and is then freed
         * unreported. UCX may meanwhile still read the range, whatever it
         * holds by then; the receiver gave up before this deadline, so
         * nothing it gets is ever published. */
        op->timed_out = true;
        u->send_timeouts++;
        u->given_up++;
        unlink_send(u, op);
        DS_LOG_WARN("rdma: UCX send of %zu bytes to %s still unfinished at its deadline; its pin "
                    "is dropped",
                    op->len, op->ep->peer[0] ? op->ep->peer : "a forgotten peer");
        char why[160];
        snprintf(why, sizeof(why),
                 "the receiver did not take the %zu bytes before the send's deadline", op->len);
        op->sent(op->ctx, false, why);
        op = nx;
    }
    return next;
}

void ds__ucx_forget(ds_ucx_t *u, const char *peer)
{
    if (u == NULL) return;
    for (ucx_ep_t *e = u->eps; e; e = e->next) {
        if (e->peer[0] && strcmp(e->peer, peer) == 0) {
            close_later(u, e);
            pthread_mutex_lock(&u->mu);
            e->peer[0] = '\0';
            pthread_mutex_unlock(&u->mu);
        }
    }
}

void ds__ucx_counts(const ds_ucx_t *u, uint64_t *in_flight, uint64_t *timeouts)
{
    *in_flight = u ? u->nsends : 0;
    *timeouts = u ? u->send_timeouts : 0;
}
