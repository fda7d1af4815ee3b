/* The shared connection (client_internal.h, "Multiplexing"): small requests
 * of concurrent callers over one TCP socket, pipelined.
 *
 * Sending combines: a caller copies its frames into the queue under mu, and
 * the first caller to find no one sending writes the whole queue, again and
 * again until it is empty, so callers arriving meanwhile ride along in one
 * write. Receiving has one reader at a time: a waiter that finds no reader
 * becomes it, reads what the socket has, and hands every complete answer to
 * its waiter in that waiter's conn->in, waking it if it sleeps (a futex word
 * of its own; an answered caller returns without the lock); when its own
 * answer is in, it passes the role to a waiter still waiting. The worker
 * answers a connection's requests in order and writes the answers to one
 * read in one write, so a turn of the worker costs one segment each way for
 * many callers instead of one per caller.
 *
 * Answers are taken in send order, each checked against its call's request
 * id; one for a call that gave up (timed out) is dropped. A failed read or
 * write, an answer out of order or a malformed one breaks the connection:
 * every waiter fails at once, and the client opens a new one for later
 * calls. An answer must fit in 4 GiB (conn->in counts in 32 bits). */
#include "client/client_internal.h"
#include "common/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The read buffer's usual size, and the most it keeps between answers. */
#define MUX_RBUF 65536u
#define MUX_RBUF_KEEP (4u << 20)
/* A reader blocks at most this long before it looks at its deadline. */
#define MUX_READ_SLICE_MS 50

struct ds_mux {
    int fd;
    ds_sess_t *sess;
    atomic_int refs;
    pthread_mutex_t mu;
    bool broken, retired; /* broken: the socket failed; retired: no new calls */
    int err;              /* why it broke (errno) */
    bool sending, reading;
    ds_wbuf_t out, spare; /* queued frames; what the sender is writing */
    uint8_t *rbuf;
    size_t rpos, rlen, rcap;
    /* Calls whose answers are due, in the order their requests went out
     * (the order the worker answers in); a call that gave up leaves a ghost
     * (conn NULL) that drops its answer when it comes. */
    ds_mux_wait_t *waiters, *tail;
    _Atomic uint64_t next_req;
};

ds_mux_t *ds__mux_new(int fd, ds_sess_t *sess)
{
    ds_mux_t *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    m->rbuf = malloc(MUX_RBUF);
    if (m->rbuf == NULL) {
        free(m);
        return NULL;
    }
    m->rcap = MUX_RBUF;
    m->fd = fd;
    m->sess = sess;
    ds__sess_ref(sess);
    atomic_init(&m->refs, 1);
    atomic_init(&m->next_req, 1);
    /* Held for a few hundred ns at a time by threads that come in bursts:
     * spinning a little beats sleeping on it. */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&m->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    ds__wbuf_init(&m->out);
    ds__wbuf_init(&m->spare);
    /* A read slice, so that a reader sees its deadline. */
    struct timeval tv = {.tv_sec = 0, .tv_usec = MUX_READ_SLICE_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return m;
}

void ds__mux_ref(ds_mux_t *m)
{
    atomic_fetch_add(&m->refs, 1);
}

void ds__mux_unref(ds_mux_t *m)
{
    if (m == NULL || atomic_fetch_sub(&m->refs, 1) != 1) return;
    /* Only ghosts can be left: every call holds a reference. */
    for (ds_mux_wait_t *g; (g = m->waiters) != NULL;) {
        m->waiters = g->next;
        free(g);
    }
    close(m->fd);
    pthread_mutex_destroy(&m->mu);
    ds__wbuf_free(&m->out);
    ds__wbuf_free(&m->spare);
    free(m->rbuf);
    ds__sess_unref(m->sess);
    free(m);
}

ds_sess_t *ds__mux_sess(const ds_mux_t *m)
{
    return m->sess;
}

bool ds__mux_usable(ds_mux_t *m)
{
    pthread_mutex_lock(&m->mu);
    bool ok = !m->broken && !m->retired;
    pthread_mutex_unlock(&m->mu);
    return ok;
}

void ds__mux_retire(ds_mux_t *m)
{
    pthread_mutex_lock(&m->mu);
    m->retired = true;
    pthread_mutex_unlock(&m->mu);
}

void ds__mux_shutdown(ds_mux_t *m)
{
    shutdown(m->fd, SHUT_RDWR);
}

uint64_t ds__mux_next_req(ds_mux_t *m)
{
    return atomic_fetch_add(&m->next_req, 1);
}

static void futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

/* Wakes w if it sleeps: it looks at the mux again (its turn to read, or a
 * failure). */
static void wake_locked(ds_mux_wait_t *w)
{
    if (!w->sleeping) return;
    w->sleeping = false;
    atomic_fetch_add(&w->wake, 1);
    (void)syscall(SYS_futex, (uint32_t *)&w->wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void wake_all_locked(ds_mux_t *m)
{
    for (ds_mux_wait_t *w = m->waiters; w; w = w->next)
        if (w->conn) wake_locked(w);
}

/* Takes w off the queue; with ghost, leaves a ghost in its place (false
 * when there is no memory for one). */
static bool unlink_locked(ds_mux_t *m, ds_mux_wait_t *w, bool ghost)
{
    ds_mux_wait_t *prev = NULL, *x = m->waiters;
    while (x && x != w) {
        prev = x;
        x = x->next;
    }
    if (x == NULL) return true;
    ds_mux_wait_t *g = ghost ? calloc(1, sizeof(*g)) : NULL;
    if (g) {
        g->req = w->req;
        g->next = w->next;
    }
    ds_mux_wait_t *rest = g ? g : w->next;
    if (prev)
        prev->next = rest;
    else
        m->waiters = rest;
    if (m->tail == w) m->tail = g ? g : prev;
    w->next = NULL;
    return g != NULL || !ghost;
}

/* The first call still waiting (not a ghost), or NULL. */
static ds_mux_wait_t *first_live_locked(ds_mux_t *m)
{
    ds_mux_wait_t *w = m->waiters;
    while (w && w->conn == NULL)
        w = w->next;
    return w;
}

/* Hands w its answer (already in w->conn->in). Its caller may return and
 * reuse or free the call state as soon as done is set, without the lock:
 * after that store only the futex word's address is used, by the kernel. */
static void finish_locked(ds_mux_t *m, ds_mux_wait_t *w)
{
    unlink_locked(m, w, false);
    bool asleep = w->sleeping;
    w->sleeping = false;
    if (asleep) atomic_fetch_add(&w->wake, 1);
    _Atomic uint32_t *word = &w->wake;
    atomic_store_explicit(&w->done, true, memory_order_release);
    if (asleep) (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void fail_locked(ds_mux_t *m, int err)
{
    if (!m->broken) {
        m->broken = true;
        m->err = err ? err : EPROTO;
    }
    wake_all_locked(m);
}

/* Moves the unread bytes to the front of the read buffer. */
static void compact_locked(ds_mux_t *m)
{
    memmove(m->rbuf, m->rbuf + m->rpos, m->rlen - m->rpos);
    m->rlen -= m->rpos;
    m->rpos = 0;
}

/* Hands each complete answer in the read buffer to its waiter. */
static void dispatch_locked(ds_mux_t *m)
{
    while (m->rlen - m->rpos >= DS_WIRE_HEADER_LEN) {
        ds_wire_header_t h;
        char err[96];
        if (ds__wire_header_decode(m->rbuf + m->rpos, DS_CLIENT_MAX_RESP_DATA, &h, err,
                                   sizeof(err)) != 0 ||
            !(h.flags & DS_FLAG_RESPONSE)) {
            fail_locked(m, EPROTO);
            return;
        }
        uint64_t total = DS_WIRE_HEADER_LEN + (uint64_t)h.meta_len + h.data_len;
        if (total > UINT32_MAX) { /* conn->in counts in 32 bits */
            fail_locked(m, EMSGSIZE);
            return;
        }
        if (m->rlen - m->rpos < total) {
            if (total > m->rcap - m->rpos) {
                /* Make room for the whole answer: move it to the front, and
                 * grow the buffer when even that is too small. */
                compact_locked(m);
                if (total > m->rcap) {
                    uint8_t *nb = realloc(m->rbuf, total);
                    if (nb == NULL) {
                        fail_locked(m, ENOMEM);
                        return;
                    }
                    m->rbuf = nb;
                    m->rcap = total;
                }
            }
            return;
        }
        /* The worker answers in order: anything but the oldest call's
         * answer is a worker that lies (or a stream out of step). */
        ds_mux_wait_t *w = m->waiters;
        if (w == NULL || w->req != h.req_id) {
            fail_locked(m, EPROTO);
            return;
        }
        if (w->conn == NULL) { /* a ghost: its caller gave up */
            m->waiters = w->next;
            if (m->tail == w) m->tail = NULL;
            free(w);
        } else {
            ds_conn_t *conn = w->conn;
            if (total > conn->mux.in_cap) {
                uint8_t *nb = realloc(conn->in, total);
                if (nb == NULL) {
                    fail_locked(m, ENOMEM);
                    return;
                }
                conn->in = nb;
                conn->mux.in_cap = (uint32_t)total;
            }
            memcpy(conn->in, m->rbuf + m->rpos, total);
            conn->in_pos = 0;
            conn->in_len = (uint32_t)total;
            finish_locked(m, w);
        }
        m->rpos += total;
    }
    if (m->rpos == m->rlen) {
        m->rpos = m->rlen = 0;
        if (m->rcap > MUX_RBUF_KEEP) {
            uint8_t *nb = realloc(m->rbuf, MUX_RBUF);
            if (nb) {
                m->rbuf = nb;
                m->rcap = MUX_RBUF;
            }
        }
    }
}

/* Queues conn's request (frames in iov) and writes the queue unless another
 * caller is writing it; unless noreply, conn then waits with mux_wait. */
static int mux_send(ds_conn_t *conn, const struct iovec *iov, size_t n, uint64_t req, bool noreply,
                    uint64_t deadline)
{
    ds_mux_t *m = conn->mux.m;
    pthread_mutex_lock(&m->mu);
    if (m->broken) {
        int err = m->err;
        pthread_mutex_unlock(&m->mu);
        errno = err;
        return -1;
    }
    size_t before = m->out.len;
    for (size_t i = 0; i < n; i++)
        ds__wbuf_bytes(&m->out, iov[i].iov_base, iov[i].iov_len);
    if (m->out.oom) {
        m->out.oom = false;
        m->out.len = before;
        pthread_mutex_unlock(&m->mu);
        errno = ENOMEM;
        return -1;
    }
    ds_mux_wait_t *w = &conn->mux.w;
    if (!noreply) {
        /* Waiting before the bytes leave: the answer cannot beat it. */
        w->req = req;
        w->sleeping = false;
        atomic_store_explicit(&w->done, false, memory_order_relaxed);
        w->next = NULL;
        if (m->tail)
            m->tail->next = w;
        else
            m->waiters = w;
        m->tail = w;
    }
    if (m->sending) {
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    m->sending = true;
    while (m->out.len > 0 && !m->broken) {
        ds_wbuf_t t = m->spare;
        m->spare = m->out;
        m->out = t;
        ds__wbuf_reset(&m->out);
        pthread_mutex_unlock(&m->mu);
        struct iovec one = {.iov_base = m->spare.buf, .iov_len = m->spare.len};
        int r = ds__send_iov(m->fd, NULL, &one, 1, deadline);
        int err = errno;
        pthread_mutex_lock(&m->mu);
        ds__wbuf_reset(&m->spare);
        /* A write cut short leaves a frame in pieces: nothing after it can
         * be sent, so the connection is done. */
        if (r != 0) fail_locked(m, err);
    }
    m->sending = false;
    pthread_mutex_unlock(&m->mu);
    return 0; /* a failure reaches every waiter, this one too, in mux_wait */
}

/* 0 with the whole answer in conn->in; -1 with errno (ETIMEDOUT, ECONNRESET
 * and others when the connection failed). */
static int mux_wait(ds_conn_t *conn, uint64_t deadline)
{
    ds_mux_t *m = conn->mux.m;
    ds_mux_wait_t *w = &conn->mux.w;
    int rc = 0, err = 0;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        if (atomic_load_explicit(&w->done, memory_order_relaxed)) break; /* unlinked */
        if (m->broken || ds__now_ms() >= deadline) {
            rc = -1;
            err = m->broken ? m->err : ETIMEDOUT;
            /* A broken stream answers nothing more; a live one will answer
             * this call, to a ghost. */
            if (!unlink_locked(m, w, !m->broken)) fail_locked(m, ENOMEM);
            break;
        }
        if (!m->reading) {
            m->reading = true;
            /* Only a part-read answer can be left at the end of the buffer
             * (dispatch_locked made room for all of it). */
            if (m->rcap - m->rlen < DS_WIRE_HEADER_LEN) compact_locked(m);
            uint8_t *dst = m->rbuf + m->rlen;
            size_t room = m->rcap - m->rlen;
            pthread_mutex_unlock(&m->mu);
            ssize_t r = recv(m->fd, dst, room, 0);
            int e = errno;
            pthread_mutex_lock(&m->mu);
            m->reading = false;
            if (r > 0) {
                m->rlen += (size_t)r;
                dispatch_locked(m);
            } else if (r == 0) {
                fail_locked(m, ECONNRESET);
            } else if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR) {
                fail_locked(m, e);
            }
            /* Done here: someone must read for those still waiting. */
            ds_mux_wait_t *next = first_live_locked(m);
            if (atomic_load_explicit(&w->done, memory_order_relaxed) && next) wake_locked(next);
            continue;
        }
        /* Sleep until answered, failed, or given the reader's turn. */
        w->sleeping = true;
        uint32_t seen = atomic_load(&w->wake);
        pthread_mutex_unlock(&m->mu);
        uint64_t now = ds__now_ms();
        futex_wait(&w->wake, seen, deadline > now ? deadline - now : 0);
        if (atomic_load_explicit(&w->done, memory_order_acquire)) return 0;
        pthread_mutex_lock(&m->mu);
        w->sleeping = false;
    }
    pthread_mutex_unlock(&m->mu);
    if (rc != 0) errno = err;
    return rc;
}

static int mux_call(ds_conn_t *conn, struct iovec *iov, size_t n, uint64_t req, bool noreply,
                    uint64_t deadline)
{
    if (mux_send(conn, iov, n, req, noreply, deadline) != 0) return -1;
    return noreply ? 0 : mux_wait(conn, deadline);
}

/* The whole answer came in: reading past it is a protocol error. */
static ssize_t mux_recv(ds_conn_t *conn, void *buf, size_t cap, uint64_t deadline)
{
    (void)conn, (void)buf, (void)cap, (void)deadline;
    errno = EPROTO;
    return -1;
}

/* The shared connection is shut down as a whole (ds__mux_shutdown). */
static void mux_shutdown(ds_conn_t *conn)
{
    (void)conn;
}

static void mux_close(ds_conn_t *conn)
{
    if (conn->mux.m) ds__mux_unref(conn->mux.m);
    conn->mux.m = NULL;
}

const ds_conn_ops_t ds__mux_ops = {
    .call = mux_call,
    .recv = mux_recv,
    .shutdown = mux_shutdown,
    .close = mux_close,
};

ds_conn_t *ds__mux_conn_new(ds_mux_t *m, const char *peer)
{
    ds_conn_t *v = ds__conn_new(&ds__mux_ops, m->sess, peer);
    if (v == NULL) return NULL;
    v->mux.w.conn = v;
    v->mux.m = m;
    ds__mux_ref(m);
    return v;
}
