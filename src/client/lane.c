/* Request lanes, the client's side (common/lane.h says the protocol): a
 * local pool connection asks for a lane once (LANE, right after it is
 * opened), and its transport (ds__lane_ops) then sends each request that
 * expects an answer and fits through it, and waits for the answer there;
 * the rest take the socket (sock.c). What the lane gives back is the
 * answer's frame, which conn.c reads on from its input buffer exactly as
 * if the socket had delivered it. DS_CLIENT_LANE=0 turns lanes off. */
#include "client/client_internal.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/lane.h"
#include "common/net.h"
#include "common/shm_index.h"
#include "common/tsan.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

bool ds__lane_wanted(void)
{
    const char *e = getenv("DS_CLIENT_LANE");
    return e == NULL || strcmp(e, "0") != 0;
}

ds_status_t ds__lane_attach(ds_conn_t *conn, uint64_t hub_off, uint64_t lane_off, uint32_t gen,
                            int bell_fd)
{
    ds_sess_t *s = conn->sess;
    /* The lane must lie in the mapping, a whole number of lanes past the
     * hub, within the hub's ready mask. */
    bool ok = s && s->base && gen != 0 && bell_fd >= 0 && hub_off % 64 == 0 && lane_off > hub_off &&
              (lane_off - hub_off) % DS_LANE_SIZE == 0 &&
              (lane_off - hub_off) / DS_LANE_SIZE <= DS_LANE_MAX && hub_off <= s->size &&
              s->size - hub_off >= DS_LANE_SIZE && lane_off <= s->size &&
              s->size - lane_off >= DS_LANE_SIZE;
    if (!ok) {
        if (bell_fd >= 0) close(bell_fd);
        return ds__conn_protocol_error(conn, "lane");
    }
    conn->lane.hub = (ds_lane_hub_t *)(void *)(s->base + hub_off);
    conn->lane.l = (ds_lane_t *)(void *)(s->base + lane_off);
    conn->lane.gen = gen;
    conn->lane.idx = (uint32_t)((lane_off - hub_off) / DS_LANE_SIZE - 1);
    conn->lane.bell_fd = bell_fd;
    conn->lane.req = conn->lane.rep = 0;
    conn->ops = &ds__lane_ops;
    atomic_store_explicit(&conn->lane.l->client_polls, conn->spin.max_ns != 0,
                          memory_order_relaxed);
    /* The session's first lane lends it the hub and a doorbell of its own
     * (the hub is one per worker, so every lane's is the same). */
    if (atomic_load_explicit(&s->lane_bell, memory_order_acquire) < 0) {
        int bell = fcntl(bell_fd, F_DUPFD_CLOEXEC, 0);
        int none = -1;
        if (bell >= 0) {
            atomic_store_explicit(&s->lane_hub, conn->lane.hub, memory_order_relaxed);
            atomic_store_explicit(&s->promise_ok, conn->spin.max_ns != 0, memory_order_relaxed);
            if (!atomic_compare_exchange_strong_explicit(
                    &s->lane_bell, &none, bell, memory_order_release, memory_order_relaxed))
                close(bell);
        }
    }
    return DS_K_OK;
}

static void lane_detach(ds_conn_t *conn)
{
    if (conn->lane.bell_fd >= 0) close(conn->lane.bell_fd);
    conn->lane.bell_fd = -1;
    conn->lane.l = NULL;
    conn->lane.hub = NULL;
}

bool ds__lane_send(ds_conn_t *conn, const struct iovec *iov, size_t n)
{
    ds_lane_t *l = conn->lane.l;
    if (l == NULL || atomic_load_explicit(&l->closed, memory_order_relaxed)) return false;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (total > DS_LANE_REQ_MAX) return false;
    uint8_t *p = l->req;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    atomic_store_explicit(&l->req_len, (uint32_t)total, memory_order_relaxed);
    atomic_store_explicit(&l->req_gen, conn->lane.gen, memory_order_relaxed);
    conn->lane.cpu = sched_getcpu();
    atomic_store_explicit(&l->client_cpu, (uint32_t)conn->lane.cpu, memory_order_relaxed);
    atomic_store_explicit(&l->req_seq, ++conn->lane.req, memory_order_release);
    atomic_fetch_or_explicit(&conn->lane.hub->ready[conn->lane.idx / 64],
                             UINT64_C(1) << (conn->lane.idx % 64), memory_order_seq_cst);
    if (conn->lane.soon) {
        /* The request promised is here (unless another client has promised
         * one since: that promise stands). */
        uint64_t mine = conn->lane.soon;
        atomic_compare_exchange_strong(&conn->lane.hub->soon, &mine, 0);
        conn->lane.soon = 0;
    }
    if (atomic_load_explicit(&conn->lane.hub->sleeping, memory_order_seq_cst)) {
        uint64_t one = 1;
        /* Only fails when the counter is full, i.e. the worker is already
         * due to wake. */
        (void)!write(conn->lane.bell_fd, &one, sizeof(one));
    }
    return true;
}

void ds__lane_ahead_init(ds_lane_ahead_t *a, ds_conn_t *conn, uint64_t total)
{
    DS__TSAN_WRITING(conn->sess->base); /* the copies that follow write arena space */
    a->conn = conn;
    a->left = total;
    a->armed = conn->lane.l && conn->spin.max_ns && total >= DS_LANE_AHEAD_MIN;
}

/* Promises the worker a request within the rest of the copy (left bytes at
 * 1 GB/s, plus a margin) and rings the doorbell if it sleeps; not when this
 * thread runs on the worker's CPU, where a woken worker would only take
 * turns with the copy, nor to a worker whose polling is off. */
static uint64_t promise_on(ds_lane_hub_t *hub, int bell_fd, uint64_t left)
{
    uint32_t worker_cpu = atomic_load_explicit(&hub->worker_cpu, memory_order_relaxed);
    int cpu = sched_getcpu();
    if (worker_cpu == DS_LANE_CPU_NONE || (cpu >= 0 && (uint32_t)cpu == worker_cpu)) return 0;
    uint64_t ahead = left + DS_LANE_AHEAD_MARGIN_NS;
    if (ahead > DS_LANE_AHEAD_MAX_NS) ahead = DS_LANE_AHEAD_MAX_NS;
    uint64_t now = ds__now_ns(), soon = now + ahead;
    /* The later promise stands; one further ahead than any client makes
     * (a lie the worker ignores) is replaced. */
    uint64_t cur = atomic_load_explicit(&hub->soon, memory_order_relaxed);
    while ((cur < soon || cur - now > DS_LANE_AHEAD_MAX_NS) &&
           !atomic_compare_exchange_weak(&hub->soon, &cur, soon)) {
    }
    if (atomic_load_explicit(&hub->sleeping, memory_order_seq_cst)) {
        uint64_t one = 1;
        (void)!write(bell_fd, &one, sizeof(one));
    }
    return soon;
}

static void promise(ds_conn_t *conn, uint64_t left)
{
    uint64_t soon = promise_on(conn->lane.hub, conn->lane.bell_fd, left);
    if (soon) conn->lane.soon = soon;
}

typedef struct {
    ds_lane_ahead_t *a;
    uint64_t left; /* bytes left to copy when the promise is made */
} due_t;

static void promise_due(void *arg)
{
    due_t *d = arg;
    d->a->armed = false;
    promise(d->a->conn, d->left);
}

typedef struct {
    ds_sess_t *s;
    uint64_t left, soon;
} sess_due_t;

static void promise_sess(void *arg)
{
    sess_due_t *d = arg;
    int bell = atomic_load_explicit(&d->s->lane_bell, memory_order_acquire);
    d->soon =
        promise_on(atomic_load_explicit(&d->s->lane_hub, memory_order_relaxed), bell, d->left);
}

uint64_t ds__lane_copy_in_sess(ds_sess_t *s, uint8_t *dst, const void *src, size_t n)
{
    if (n < DS_LANE_AHEAD_MIN || atomic_load_explicit(&s->lane_bell, memory_order_acquire) < 0 ||
        !atomic_load_explicit(&s->promise_ok, memory_order_relaxed)) {
        ds__shm_index_copy_in(dst, src, n);
        return 0;
    }
    size_t first = n > DS_LANE_AHEAD_BYTES ? n - DS_LANE_AHEAD_BYTES : 0;
    sess_due_t d = {s, n - first, 0};
    ds__shm_index_copy_in_mid(dst, src, n, first, promise_sess, &d);
    return d.soon;
}

void ds__lane_take_promise(ds_conn_t *conn, uint64_t soon)
{
    /* Only a lane request takes a promise back; on the socket the promise
     * runs out by itself (DS_LANE_AHEAD_MAX_NS at most). */
    if (soon && conn->lane.l && conn->ops == &ds__lane_ops) conn->lane.soon = soon;
}

void ds__lane_copy_in(ds_lane_ahead_t *a, uint8_t *dst, const void *src, size_t n)
{
    size_t first = n;
    /* The promise falls due in this value: copy up to it, make it, copy on,
     * as one copy of the value (its size picks the way, common/copy.h). */
    if (a->armed && a->left - n < DS_LANE_AHEAD_BYTES)
        first = a->left > DS_LANE_AHEAD_BYTES ? (size_t)(a->left - DS_LANE_AHEAD_BYTES) : 0;
    if (first < n) {
        due_t d = {a, a->left - first};
        ds__shm_index_copy_in_mid(dst, src, n, first, promise_due, &d);
    } else {
        ds__shm_index_copy_in(dst, src, n);
    }
    a->left -= n;
}

/* From another thread (ds_client_close), with the socket shut down: a
 * call waiting on the lane stops and reads the socket. */
static void lane_kick(ds_conn_t *conn)
{
    ds_lane_t *l = conn->lane.l;
    if (l == NULL) return;
    atomic_store(&conn->lane.kick, true);
    ds__futex_wake(&l->rep_seq);
}

/* The worker closed the socket, or put something on it: the answer is to be
 * read there. */
static bool socket_says_something(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0;
}

/* Whether the worker's loop says it runs on this thread's CPU. */
static bool beside_worker(const ds_conn_t *conn, int cpu)
{
    return cpu >= 0 &&
           (uint32_t)cpu == atomic_load_explicit(&conn->lane.hub->worker_cpu, memory_order_relaxed);
}

/* The polling half of a lane wait (the client's latency policy, off with
 * busy_poll_us -1): watches rep_seq for the connection's window (its
 * longest right after the worker parted, DS_LANE_PARTED_NS), and returns
 * it as last seen. Sharing the worker's CPU, watching would only keep it
 * off; each step yields to it instead, and the worker taking the CPU is no
 * contention: it is what this wait waits for. Awake, this wait sees the
 * answer without a wake-up from the worker's CPU (which would pull it
 * there), also when the worker parts from it. */
static uint32_t poll_answer(ds_conn_t *conn, uint32_t seen, uint64_t t0, bool *contended)
{
    ds_lane_t *l = conn->lane.l;
    bool apart = !beside_worker(conn, conn->lane.cpu);
    uint64_t parted = atomic_load_explicit(&conn->lane.hub->parted, memory_order_relaxed);
    uint64_t window =
        t0 - parted < DS_LANE_PARTED_NS ? conn->spin.max_ns : ds__spin_window(&conn->spin, t0);
    uint32_t cur = atomic_load_explicit(&l->rep_seq, memory_order_acquire);
    if (cur != seen || window == 0) return cur;
    uint64_t until = t0 + window;
    for (unsigned k = 0;; k++) {
        uint64_t watch = ds__now_ns() + (apart ? DS_LANE_WATCH_NS : 0);
        for (unsigned i = 1;; i++) {
            if ((cur = atomic_load_explicit(&l->rep_seq, memory_order_acquire)) != seen) return cur;
            ds__cpu_relax();
            if (i % 16 == 0 && ds__now_ns() >= watch) break;
        }
        if (ds__now_ns() >= until) return cur;
        if (!apart) {
            if ((*contended = ds__spin_yield(NULL))) return cur;
        } else if ((*contended = ds__spin_pause(k, NULL))) {
            /* What took this CPU may have been the worker, woken onto it
             * by this request's doorbell (awake, it says where it runs):
             * no contention, the wait goes on beside it. Counted as one,
             * it stopped this process's polling for DS_SPIN_BACKOFF_NS,
             * and the next answers came with futex wakes that kept the two
             * on one CPU. */
            if (!beside_worker(conn, sched_getcpu())) return cur;
            apart = false;
            *contended = false;
        }
    }
}

int ds__lane_wait(ds_conn_t *conn, uint64_t deadline, bool *contended)
{
    ds_lane_t *l = conn->lane.l;
    uint32_t seen = conn->lane.rep;
    uint64_t t0 = conn->spin.max_ns ? ds__now_ns() : 0;
    uint32_t cur = t0 ? poll_answer(conn, seen, t0, contended)
                      : atomic_load_explicit(&l->rep_seq, memory_order_acquire);
    /* No answer yet: sleep on rep_seq (in slices, to notice a closed
     * socket and the deadline). */
    bool on_socket = false;
    while (cur == seen) {
        atomic_store_explicit(&l->waiting, 1, memory_order_seq_cst);
        if ((cur = atomic_load_explicit(&l->rep_seq, memory_order_seq_cst)) != seen) break;
        if (atomic_load(&conn->lane.kick)) {
            on_socket = true;
            break;
        }
        uint64_t now = ds__now_ms();
        if (now >= deadline) {
            atomic_store_explicit(&l->waiting, 0, memory_order_relaxed);
            errno = ETIMEDOUT;
            return -1;
        }
        uint64_t left = deadline - now;
        uint32_t slice = left < DS_LANE_SLEEP_SLICE_MS ? (uint32_t)left : DS_LANE_SLEEP_SLICE_MS;
        bool slept_out = ds__futex_wait(&l->rep_seq, seen, slice) != 0 && errno == ETIMEDOUT;
        cur = atomic_load_explicit(&l->rep_seq, memory_order_acquire);
        if (cur == seen && (atomic_load(&conn->lane.kick) ||
                            (slept_out && socket_says_something(conn->sock.fd)))) {
            /* No answer in the lane, but the socket closed (the worker
             * died, or ds_client_close shut it down): reading it says so. */
            on_socket = true;
            break;
        }
    }
    atomic_store_explicit(&l->waiting, 0, memory_order_relaxed);
    if (t0) ds__spin_done(&conn->spin, ds__now_ns() - t0, *contended);
    if (on_socket) return 0;
    conn->lane.rep = cur;
    uint32_t len = atomic_load_explicit(&l->rep_len, memory_order_relaxed);
    if (len == DS_LANE_ON_SOCKET) return 0;
    if (len < DS_WIRE_HEADER_LEN || len > DS_LANE_REP_MAX) {
        errno = EPROTO;
        return -1;
    }
    if (conn->in == NULL && (conn->in = malloc(DS_CLIENT_INBUF)) == NULL) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(conn->in, l->rep, len);
    conn->in_pos = 0;
    conn->in_len = len;
    return 0;
}

/* An answered request that fits goes through the lane; the rest, and an
 * answer the worker puts on the socket, take the socket. */
static int lane_call(ds_conn_t *conn, struct iovec *iov, size_t n, uint64_t req, bool noreply,
                     uint64_t deadline)
{
    if (noreply || !ds__lane_send(conn, iov, n))
        return ds__sock_call(conn, iov, n, req, noreply, deadline);
    bool contended = false;
    return ds__lane_wait(conn, deadline, &contended);
}

static void lane_shutdown(ds_conn_t *conn)
{
    ds__sock_shutdown(conn);
    lane_kick(conn);
}

static void lane_close(ds_conn_t *conn)
{
    lane_detach(conn);
    ds__sock_close(conn);
}

const ds_conn_ops_t ds__lane_ops = {
    .call = lane_call,
    .recv = ds__sock_recv,
    .shutdown = lane_shutdown,
    .close = lane_close,
};
