/* The client object: options, the pool of connections to the worker, the
 * worker session with its arena mapping, and recovery after the worker goes
 * away (see client_internal.h for the session and locking model).
 *
 * Recovery. A call that loses its connection fails with
 * DS_K_CLIENT_WORKER_DISCONNECT and, on its way out, checks the idle
 * connections and the session anchor: the ones the worker closed are dropped,
 * and if the anchor is gone the session is detached. The next call then finds
 * no session and says HELLO afresh, getting a new session and a new arena
 * mapping; buffers of the old session keep their own mapping until released.
 * If a call instead joins a session the worker no longer knows (it restarted
 * between calls), the worker hands out a different session id or refuses,
 * and the client starts a new session right there. */
#include "client/client_internal.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void ds_free(void *p)
{
    free(p);
}

void ds_client_options_init(ds_client_options_t *opts)
{
    if (opts == NULL) return;
    memset(opts, 0, sizeof(*opts));
    opts->connect_timeout_ms = DS_CLIENT_DEFAULT_CONNECT_MS;
    opts->request_timeout_ms = DS_CLIENT_DEFAULT_REQUEST_MS;
    opts->transport = DS_TRANSPORT_AUTO;
}

uint64_t ds__client_deadline(const ds_client_t *c, int32_t sub_timeout_ms)
{
    uint64_t extra = sub_timeout_ms > 0 ? (uint64_t)sub_timeout_ms : 0;
    return ds__now_ms() + (uint64_t)c->request_timeout_ms + extra;
}

/* ---- sessions ---- */

void ds__sess_ref(ds_sess_t *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void ds__sess_unref(ds_sess_t *s)
{
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1) return;
    /* Closing the anchor ends the worker session (if no pool connection of it
     * is left), which drops every pin; only then is unmapping safe to do. */
    if (s->anchor_fd >= 0) close(s->anchor_fd);
    int bell = atomic_load(&s->lane_bell);
    if (bell >= 0) close(bell);
    if (s->base) munmap(s->base, s->size);
    pthread_mutex_destroy(&s->anchor_mu);
    pthread_mutex_destroy(&s->defer_mu);
    free(s);
}

size_t ds__sess_take_deferred(ds_sess_t *s, uint64_t *out)
{
    if (atomic_load_explicit(&s->ndeferred, memory_order_relaxed) == 0) return 0;
    pthread_mutex_lock(&s->defer_mu);
    size_t n = atomic_load_explicit(&s->ndeferred, memory_order_relaxed);
    memcpy(out, s->deferred, n * sizeof(*out));
    atomic_store_explicit(&s->ndeferred, 0, memory_order_relaxed);
    s->deferred_bytes = 0;
    pthread_mutex_unlock(&s->defer_mu);
    return n;
}

void ds__sess_release(ds_sess_t *s, const uint64_t *handles, size_t n)
{
    if (s == NULL || n == 0 || s->anchor_fd < 0 || atomic_load(&s->anchor_dead)) return;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_reserve(&w, DS_WIRE_HEADER_LEN);
    ds__wbuf_u32(&w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        ds__wbuf_u64(&w, handles[i]);
    /* Out of memory here leaves the pins to be dropped with the session: a
     * release has no way to report failure. */
    if (!w.oom) {
        pthread_mutex_lock(&s->anchor_mu);
        ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                              .version = DS_WIRE_VERSION,
                              .flags = DS_FLAG_NOREPLY,
                              .opcode = DS_OP_RELEASE,
                              .meta_len = (uint32_t)(w.len - DS_WIRE_HEADER_LEN),
                              .req_id = ++s->anchor_req};
        ds__wire_header_encode(&h, w.buf);
        /* Release frames are tiny; a worker that does not take one within
         * seconds is gone or wedged, and the session with it. */
        if (ds__write_full(s->anchor_fd, w.buf, w.len, ds__now_ms() + 10000) != 0)
            atomic_store(&s->anchor_dead, true);
        pthread_mutex_unlock(&s->anchor_mu);
    }
    ds__wbuf_free(&w);
}

/* True when the worker has closed fd (or sent something unasked, which on an
 * idle connection means the same: its state is unknown). */
static bool peer_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0;
}

/* True when the session's anchor is gone, and with it (the worker holds the
 * session while any connection of it is open, and the anchor is the one that
 * never times out) most likely the worker. Needs no lock. */
static bool anchor_gone(ds_sess_t *s)
{
    if (!atomic_load(&s->anchor_dead) && peer_closed(s->anchor_fd))
        atomic_store(&s->anchor_dead, true);
    return atomic_load(&s->anchor_dead);
}

ds_sess_t *ds__client_index_session(ds_client_t *c)
{
    if (!atomic_load_explicit(&c->local, memory_order_relaxed)) return NULL;
    pthread_mutex_lock(&c->mu);
    ds_sess_t *s = c->sess;
    if (s && s->ix.hdr && !atomic_load(&s->anchor_dead))
        ds__sess_ref(s);
    else
        s = NULL;
    pthread_mutex_unlock(&c->mu);
    if (s == NULL) return NULL;
    /* A worker that crashed cannot mark its index dead; its closed anchor
     * says so instead. Checking costs a poll, hence at most once per ms. */
    uint64_t now = ds__now_ms();
    if (now - atomic_load_explicit(&s->ix_checked_ms, memory_order_relaxed) >= 1) {
        if (anchor_gone(s)) {
            ds__sess_unref(s);
            return NULL;
        }
        atomic_store_explicit(&s->ix_checked_ms, now, memory_order_relaxed);
    }
    return s;
}

static bool sess_gone_locked(ds_sess_t *s)
{
    return s->anchor_fd >= 0 ? anchor_gone(s) : s->nconns == 0;
}

static void close_conn_locked(ds_client_t *c, ds_conn_t *conn)
{
    c->nconns--;
    conn->sess->nconns--;
    if (conn->all_prev)
        conn->all_prev->all_next = conn->all_next;
    else
        c->all = conn->all_next;
    if (conn->all_next) conn->all_next->all_prev = conn->all_prev;
    ds__conn_free(conn);
}

/* Forgets session s: later calls start a new one. Idle connections of s are
 * closed; busy ones are closed when returned. */
static void detach_locked(ds_client_t *c, ds_sess_t *s)
{
    for (ds_conn_t **pp = &c->idle; *pp;) {
        ds_conn_t *conn = *pp;
        if (conn->sess == s) {
            *pp = conn->next;
            close_conn_locked(c, conn);
        } else {
            pp = &conn->next;
        }
    }
    if (c->sess == s) {
        c->sess = NULL;
        ds__sess_unref(s);
    }
    pthread_cond_broadcast(&c->cv);
}

static void detach(ds_client_t *c, ds_sess_t *s)
{
    pthread_mutex_lock(&c->mu);
    detach_locked(c, s);
    pthread_mutex_unlock(&c->mu);
}

/* Builds a session from a HELLO that created it. For a local session the
 * dialled socket becomes the anchor and *fd is set to -1; otherwise the
 * socket stays the caller's, to serve as the first pool connection. */
static ds_status_t sess_new(const ds_hello_t *h, int *fd, ds_sess_t **out)
{
    ds_sess_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory creating a session");
    atomic_init(&s->refs, 1);
    atomic_init(&s->anchor_dead, false);
    pthread_mutex_init(&s->anchor_mu, NULL);
    pthread_mutex_init(&s->defer_mu, NULL);
    atomic_init(&s->ndeferred, 0);
    s->id = h->session;
    s->inline_max = h->inline_max;
    s->setr = (h->features & DS_FEATURE_SETR) != 0;
    s->pipeline = (h->features & DS_FEATURE_PIPELINE) != 0;
    s->worker_pid = h->pid;
    s->anchor_fd = -1;
    atomic_init(&s->lane_hub, NULL);
    atomic_init(&s->lane_bell, -1);
    atomic_init(&s->promise_ok, false);
    snprintf(s->worker_id, sizeof(s->worker_id), "%s", h->worker_id);
    snprintf(s->key, sizeof(s->key), "%s", h->session_key);
    if (h->arena_fd >= 0) {
        /* MAP_POPULATE: faulting pages in lazily costs far more than the
         * copies themselves on this kind of machine. */
        void *base = mmap(NULL, h->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                          h->arena_fd, 0);
        if (base == MAP_FAILED) {
            int e = errno;
            ds__sess_unref(s);
            return ds__set_error(DS_K_OUT_OF_MEMORY,
                                 "cannot map the worker's arena of %llu bytes: %s",
                                 (unsigned long long)h->arena_size, strerror(e));
        }
        s->base = base;
        s->size = h->arena_size;
        if (h->index_slots)
            ds__shm_index_attach(&s->ix, base, h->arena_size, h->index_offset, h->index_slots,
                                 h->index_keymax);
        /* Shared pins need the index, and a table that lies in the mapping. */
        uint64_t po = h->pins_offset;
        if (s->ix.hdr && (h->features & DS_FEATURE_SHM_PINS) && po != 0 && po % 64 == 0 &&
            po <= h->arena_size && h->arena_size - po >= sizeof(ds_shm_pins_t)) {
            s->pins = (ds_shm_pins_t *)(void *)(base + po);
            atomic_init(&s->pins_free, (UINT64_C(1) << DS_SHM_PINS_SLOTS) - 1);
        }
        s->anchor_fd = *fd;
        *fd = -1;
    }
    *out = s;
    return DS_K_OK;
}

static bool transport_failure(ds_status_t st)
{
    return st == DS_K_RPC_UNAVAILABLE || st == DS_K_RPC_DEADLINE_EXCEEDED ||
           st == DS_K_OUT_OF_MEMORY;
}

/* Adds a connection just opened to the pool's books, unless the client was
 * closed meanwhile (then the connection is freed and the call fails). */
static ds_status_t add_conn(ds_client_t *c, ds_conn_t *conn)
{
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->closed)) {
        pthread_mutex_unlock(&c->mu);
        ds__conn_free(conn);
        return ds__set_error(DS_K_INVALID, "the client is closed");
    }
    conn->sess->nconns++;
    conn->all_prev = NULL;
    conn->all_next = c->all;
    if (c->all) c->all->all_prev = conn;
    c->all = conn;
    pthread_mutex_unlock(&c->mu);
    return DS_K_OK;
}

/* ---- choosing the transport ---- */

/* Dials for a new session, choosing its transport, and sets where the
 * session's later connections dial (c->use_unix, c->unix_path). Runs under
 * open_mu. The decision:
 *   1. DS_TRANSPORT_TCP: TCP, nothing else.
 *   2. The conventional socket (socket directory + host:port), when the host
 *      is this one (or the transport is LOCAL) and something answers there.
 *   3. Else TCP, and when the worker's answer names its Unix socket, that
 *      socket, asking for the arena and for proof that the process there is
 *      the worker at host:port: the same worker_id, and an HMAC of a fresh
 *      challenge under the key of the TCP session held open meanwhile (wire.h,
 *      HELLO). Only when all of that holds does the session move to the Unix
 *      socket and shared memory; else it stays on TCP (AUTO) or fails
 *      (LOCAL).
 * Threat model: the worker_id is random per start and the TCP session key is
 * told to one TCP connection alone, so a process that merely listens at the
 * named path (another worker, a stale or planted socket) cannot pass, and the
 * client never maps the arena of a worker other than the one at host:port. A
 * process that can connect to the worker's own Unix socket could relay the
 * proof and hand over another memfd; it already has every right a local
 * client has, which the socket directory's permissions (0700) decide. */
static ds_status_t new_session_dial(ds_client_t *c, int *fd, ds_hello_t *h)
{
    ds_status_t st, conv_st = DS_K_OK;
    char conv_err[300] = "";
    bool local_host = ds__host_is_local(c->host);
    if (c->transport != DS_TRANSPORT_TCP && c->sock_path[0] &&
        (local_host || c->transport == DS_TRANSPORT_LOCAL)) {
        ds_dial_t d = {.unix_path = c->sock_path};
        st = ds__conn_dial(c, &d, fd, h);
        if (st == DS_K_OK) {
            c->use_unix = true;
            snprintf(c->unix_path, sizeof(c->unix_path), "%s", c->sock_path);
            DS_LOG_DEBUG("client: using shared memory via %s", c->sock_path);
            return DS_K_OK;
        }
        if (st != DS_K_RPC_UNAVAILABLE) return st; /* a worker there refused us */
        conv_st = st;
        snprintf(conv_err, sizeof(conv_err), "%s", ds_last_error());
    }
    c->use_unix = false;
    ds_dial_t td = {.session_key = ""};
    if ((st = ds__conn_dial(c, &td, fd, h)) != DS_K_OK) {
        if (c->require_local && conv_st != DS_K_OK) {
            /* A copy: ds_last_error() is the buffer ds__set_error writes. */
            char tcp_err[300];
            snprintf(tcp_err, sizeof(tcp_err), "%s", ds_last_error());
            return ds__set_error(conv_st, "%s (and over TCP: %s)", conv_err, tcp_err);
        }
        return st;
    }
    if (c->transport == DS_TRANSPORT_TCP) return DS_K_OK;

    char why[512], chal[DS_AUTH_HEX_LEN + 1];
    if (h->unix_socket[0] == '\0') {
        snprintf(why, sizeof(why), "the worker names no Unix socket (an older worker)");
    } else if (h->session_key[0] == '\0' || ds__auth_challenge(chal) != 0) {
        snprintf(why, sizeof(why), "cannot check that %s belongs to the worker", h->unix_socket);
    } else {
        ds_dial_t ud = {.unix_path = h->unix_socket,
                        .session_key = "",
                        .proof_session = h->session,
                        .proof_challenge = chal};
        int ufd = -1;
        ds_hello_t uh;
        st = ds__conn_dial(c, &ud, &ufd, &uh);
        char expect[DS_AUTH_HEX_LEN + 1];
        ds__auth_prove(h->session_key, chal, expect);
        if (st != DS_K_OK) {
            snprintf(why, sizeof(why), "%s", ds_last_error());
        } else if (strcmp(uh.worker_id, h->worker_id) != 0) {
            snprintf(why, sizeof(why), "another worker (id %s, not %s) answers at %s", uh.worker_id,
                     h->worker_id, h->unix_socket);
        } else if (strlen(uh.local_proof) != DS_AUTH_HEX_LEN ||
                   !ds__auth_equal(uh.local_proof, expect, DS_AUTH_HEX_LEN)) {
            snprintf(why, sizeof(why), "the process at %s could not prove it is the worker",
                     h->unix_socket);
        } else if (uh.arena_fd < 0) {
            snprintf(why, sizeof(why), "the worker did not share its memory arena over %s",
                     h->unix_socket);
        } else {
            /* The TCP session ends with its only connection. */
            ds__dial_close(*fd, h);
            *fd = ufd;
            *h = uh;
            c->use_unix = true;
            snprintf(c->unix_path, sizeof(c->unix_path), "%s",
                     uh.unix_socket[0] ? uh.unix_socket : ud.unix_path);
            ds__clear_error();
            DS_LOG_INFO("client: using shared memory via %s (the worker at %s)", c->unix_path,
                        c->addr);
            return DS_K_OK;
        }
        if (ufd >= 0) close(ufd);
        if (st == DS_K_OK && uh.arena_fd >= 0) close(uh.arena_fd);
    }
    if (c->require_local) {
        ds__dial_close(*fd, h);
        *fd = -1;
        if (conv_st != DS_K_OK)
            return ds__set_error(conv_st, "%s (and the socket the worker names: %s)", conv_err,
                                 why);
        return ds__set_error(DS_K_NOT_SUPPORTED,
                             "the worker at %s cannot share its memory with this client: %s",
                             c->addr, why);
    }
    ds__clear_error();
    if (local_host)
        DS_LOG_INFO("client: using TCP to the worker at %s: %s", c->addr, why);
    else
        DS_LOG_DEBUG("client: using TCP to the worker at %s: %s", c->addr, why);
    return DS_K_OK;
}

/* Points the client at host:port: the address, and the conventional socket
 * path that goes with it. Runs under open_mu; takes mu for the writes, so
 * readers under either lock see a whole address. */
static void set_worker(ds_client_t *c, const char *host, int port)
{
    pthread_mutex_lock(&c->mu);
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    snprintf(c->addr, sizeof(c->addr), "%s:%d", c->host, c->port);
    if (ds__socket_path(c->sock_dir[0] ? c->sock_dir : NULL, c->host, c->port, c->sock_path,
                        sizeof(c->sock_path)) != 0)
        c->sock_path[0] = '\0';
    pthread_mutex_unlock(&c->mu);
}

/* Failover: the worker did not answer a new session's dial (st). Asks the
 * discovery for another ready worker and dials it, a bounded number of
 * times (a dead worker stays listed until its lease runs out). Runs under
 * open_mu. Returns the last dial's status. */
static ds_status_t failover_dial(ds_client_t *c, ds_status_t st, int *fd, ds_hello_t *h)
{
    for (int attempt = 0; attempt < DS_CLIENT_FAILOVER_TRIES && transport_failure(st) &&
                          st != DS_K_OUT_OF_MEMORY && !atomic_load(&c->closed);
         attempt++) {
        char failed[300], why[300], ip[256];
        snprintf(failed, sizeof(failed), "%s", c->addr);
        snprintf(why, sizeof(why), "%s", ds_last_error());
        int port = 0;
        if (ds__discovery_select(c->sd, failed, ip, sizeof(ip), &port, NULL) != DS_K_OK) {
            char derr[300];
            snprintf(derr, sizeof(derr), "%s", ds_last_error());
            return ds__set_error(st, "%s; no other worker to fail over to: %s", why, derr);
        }
        char next[300];
        snprintf(next, sizeof(next), "%s:%d", ip, port);
        if (strcmp(next, failed) == 0)
            return ds__set_error(st, "%s; service discovery lists no other worker", why);
        DS_LOG_INFO("client: the worker at %s does not answer (%s); failing over to %s", failed,
                    why, next);
        set_worker(c, ip, port);
        st = new_session_dial(c, fd, h);
    }
    return st;
}

/* Opens one pool connection, creating a session first when there is none. */
static ds_status_t open_conn(ds_client_t *c, ds_conn_t **out)
{
    ds_status_t st = DS_K_OK;
    pthread_mutex_lock(&c->open_mu);
    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_mutex_lock(&c->mu);
        ds_sess_t *s = c->sess;
        if (s) ds__sess_ref(s);
        bool closed = atomic_load(&c->closed);
        pthread_mutex_unlock(&c->mu);
        if (closed) {
            ds__sess_unref(s);
            st = ds__set_error(DS_K_INVALID, "the client is closed");
            break;
        }

        int fd = -1;
        ds_hello_t h;
        if (s) {
            ds_dial_t d = {.unix_path = c->use_unix ? c->unix_path : NULL,
                           .session = s->id,
                           .session_key = s->key};
            st = ds__conn_dial(c, &d, &fd, &h);
        } else {
            st = new_session_dial(c, &fd, &h);
            if (st != DS_K_OK && c->failover) st = failover_dial(c, st, &fd, &h);
        }
        if (st != DS_K_OK) {
            if (s && !transport_failure(st) && (s->anchor_fd < 0 || anchor_gone(s))) {
                /* The worker refused to let us join (an unknown session, or
                 * a key that does not match one it made since) and the
                 * session's anchor is gone too: the worker no longer knows
                 * the session. Start a new one. (With the anchor alive the
                 * refusal is about something else, e.g. a connection limit
                 * or a key the worker disputes, and is returned.) */
                detach(c, s);
                ds__sess_unref(s);
                continue;
            }
            ds__sess_unref(s);
            break;
        }
        if (s && (h.session != s->id || strcmp(h.worker_id, s->worker_id) != 0)) {
            /* Another worker identity answered the join (it restarted, and
             * an older worker may even know a session of that id: someone
             * else's), or it put us in another session. Either way this
             * socket is not in our session: never use it, and start anew. */
            if (strcmp(h.worker_id, s->worker_id) != 0)
                DS_LOG_INFO("client: the worker at %s restarted (worker id %s, was %s); "
                            "starting a new session",
                            c->addr, h.worker_id, s->worker_id);
            ds__dial_close(fd, &h);
            if (h.arena_fd >= 0) close(h.arena_fd);
            detach(c, s);
            ds__sess_unref(s);
            st = ds__set_error(DS_K_CLIENT_WORKER_DISCONNECT,
                               "the worker at %s restarted; the session was lost", c->addr);
            continue;
        }
        if (s == NULL) {
            if (c->require_local && h.arena_fd < 0) {
                ds__dial_close(fd, &h);
                st = ds__set_error(DS_K_NOT_SUPPORTED,
                                   "the worker at %s did not share its memory arena", c->addr);
                break;
            }
            st = sess_new(&h, &fd, &s);
            if (h.arena_fd >= 0) close(h.arena_fd);
            if (st != DS_K_OK) {
                if (fd >= 0) ds__dial_close(fd, &h);
                break;
            }
            pthread_mutex_lock(&c->mu);
            if (atomic_load(&c->closed)) {
                pthread_mutex_unlock(&c->mu);
                if (fd >= 0) ds__dial_close(fd, &h);
                ds__sess_unref(s);
                st = ds__set_error(DS_K_INVALID, "the client is closed");
                break;
            }
            if (c->sess) detach_locked(c, c->sess);
            c->sess = s; /* the client's reference; ours is taken below */
            atomic_store(&c->local, s->base != NULL);
            ds__sess_ref(s);
            pthread_mutex_unlock(&c->mu);
            if (fd < 0) {
                /* The first socket became the anchor; join for a pool one. */
                ds_dial_t d = {.unix_path = c->unix_path, .session = s->id, .session_key = s->key};
                st = ds__conn_dial(c, &d, &fd, &h);
                if (st == DS_K_OK && h.arena_fd >= 0) close(h.arena_fd);
                if (st == DS_K_OK &&
                    (h.session != s->id || strcmp(h.worker_id, s->worker_id) != 0)) {
                    ds__dial_close(fd, &h);
                    st = ds__set_error(DS_K_RUNTIME_ERROR,
                                       "the worker at %s did not let a connection join its "
                                       "session",
                                       c->addr);
                }
                if (st != DS_K_OK) {
                    ds__sess_unref(s);
                    break;
                }
            }
        } else if (h.arena_fd >= 0) {
            close(h.arena_fd);
        }
        ds_conn_t *conn = ds__conn_new_sock(fd, h.tls, s, c->addr);
        if (conn) ds__spin_init(&conn->spin, (uint64_t)c->busy_poll_us * 1000u);
        ds__sess_unref(s);
        if (conn == NULL) {
            ds__dial_close(fd, &h);
            st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory opening a connection");
            break;
        }
        if (conn->sess->base && (h.features & DS_FEATURE_LANE) && ds__lane_wanted() &&
            (st = ds__conn_lane_open(conn, ds__now_ms() + (uint64_t)c->connect_timeout_ms)) !=
                DS_K_OK) {
            ds__conn_free(conn);
            break;
        }
        if ((st = add_conn(c, conn)) != DS_K_OK) break;
        *out = conn;
        break;
    }
    pthread_mutex_unlock(&c->open_mu);
    return st;
}

static ds_status_t acquire(ds_client_t *c, uint64_t deadline, ds_conn_t **out)
{
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (atomic_load(&c->closed)) {
            pthread_mutex_unlock(&c->mu);
            return ds__set_error(DS_K_INVALID, "the client is closed");
        }
        if (c->idle) {
            ds_conn_t *conn = c->idle;
            c->idle = conn->next;
            pthread_mutex_unlock(&c->mu);
            conn->next = NULL;
            *out = conn;
            return DS_K_OK;
        }
        if (c->nconns < DS_CLIENT_MAX_CONNS) {
            c->nconns++;
            pthread_mutex_unlock(&c->mu);
            ds_conn_t *conn = NULL;
            ds_status_t st = open_conn(c, &conn);
            if (st != DS_K_OK) {
                pthread_mutex_lock(&c->mu);
                c->nconns--;
                pthread_cond_signal(&c->cv);
                pthread_mutex_unlock(&c->mu);
                return st;
            }
            *out = conn;
            return DS_K_OK;
        }
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                              .tv_nsec = (long)(deadline % 1000) * 1000000L};
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT && c->idle == NULL &&
            c->nconns >= DS_CLIENT_MAX_CONNS) {
            pthread_mutex_unlock(&c->mu);
            return ds__set_error(DS_K_RPC_DEADLINE_EXCEEDED,
                                 "timed out waiting for one of the client's %d connections to "
                                 "the worker at %s",
                                 DS_CLIENT_MAX_CONNS, c->addr);
        }
    }
}

/* A pool connection for a call already counted in c->busy. */
static ds_status_t acquire_counted(ds_client_t *c, uint64_t *deadline, ds_conn_t **out)
{
    uint64_t t0 = ds__now_ms();
    ds_status_t st = acquire(c, *deadline, out);
    if (st == DS_K_OK)
        *deadline += ds__now_ms() - t0;
    else
        atomic_fetch_sub(&c->busy, 1);
    return st;
}

ds_status_t ds__client_acquire(ds_client_t *c, uint64_t *deadline, ds_conn_t **out)
{
    atomic_fetch_add(&c->busy, 1);
    return acquire_counted(c, deadline, out);
}

/* Opens the shared connection: one more TCP socket joining session s. NULL
 * when that fails (the caller then takes a pool connection, which deals
 * with a lost worker or session). */
static ds_mux_t *mux_open(ds_client_t *c, ds_sess_t *s)
{
    int fd = -1;
    ds_hello_t h;
    ds_dial_t d = {.session = s->id, .session_key = s->key};
    /* Under open_mu, as every dial: a failover may change the address. */
    pthread_mutex_lock(&c->open_mu);
    ds_status_t st = ds__conn_dial(c, &d, &fd, &h);
    pthread_mutex_unlock(&c->open_mu);
    if (st != DS_K_OK) {
        ds__clear_error();
        return NULL;
    }
    if (h.arena_fd >= 0) close(h.arena_fd);
    ds_mux_t *m = NULL;
    if (h.tls == NULL && h.session == s->id && strcmp(h.worker_id, s->worker_id) == 0)
        m = ds__mux_new(fd, s);
    if (m == NULL) ds__dial_close(fd, &h);
    return m;
}

/* A call state on the shared connection, or NULL: none is open and usable
 * and one could not be opened. Called with mu held; drops and retakes it. */
static ds_conn_t *mux_conn_locked(ds_client_t *c, ds_sess_t *s, uint64_t deadline)
{
    if (c->mux && (ds__mux_sess(c->mux) != s || !ds__mux_usable(c->mux))) {
        ds__mux_unref(c->mux); /* calls in flight keep it until they end */
        c->mux = NULL;
        for (ds_conn_t *v; (v = c->vidle) != NULL;) {
            c->vidle = v->next;
            ds__conn_free(v);
        }
    }
    if (c->mux == NULL) {
        /* One thread opens it; the others wait for it (briefly: a dial). */
        if (c->mux_opening) {
            struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                                  .tv_nsec = (long)(deadline % 1000) * 1000000L};
            while (c->mux_opening && !atomic_load(&c->closed))
                if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) return NULL;
            if (c->mux == NULL || c->sess != s || atomic_load(&c->closed)) return NULL;
            return mux_conn_locked(c, s, deadline);
        }
        c->mux_opening = true;
        ds__sess_ref(s);
        pthread_mutex_unlock(&c->mu);
        ds_mux_t *m = mux_open(c, s);
        pthread_mutex_lock(&c->mu);
        c->mux_opening = false;
        pthread_cond_broadcast(&c->cv);
        ds__sess_unref(s);
        if (m && (c->sess != s || atomic_load(&c->closed))) {
            ds__mux_unref(m); /* things moved on meanwhile */
            m = NULL;
        }
        if (m == NULL) return NULL;
        c->mux = m;
    }
    ds_conn_t *v = c->vidle;
    if (v) {
        c->vidle = v->next;
        v->next = NULL;
        return v;
    }
    return ds__mux_conn_new(c->mux, c->addr);
}

ds_status_t ds__client_acquire_small(ds_client_t *c, uint64_t *deadline, size_t bytes,
                                     ds_conn_t **out)
{
    /* Sharing pays only while another call is in progress; a lone caller
     * keeps a connection of its own and polls for its reply. */
    int others = atomic_fetch_add(&c->busy, 1);
    if (others == 0 || c->mux_off || bytes > DS_CLIENT_MUX_MAX || c->ucx || atomic_load(&c->local))
        return acquire_counted(c, deadline, out);
    pthread_mutex_lock(&c->mu);
    ds_sess_t *s = c->sess;
    ds_conn_t *v = NULL;
    if (s && s->base == NULL && s->pipeline && !atomic_load(&c->closed))
        v = mux_conn_locked(c, s, *deadline);
    pthread_mutex_unlock(&c->mu);
    if (v == NULL) return acquire_counted(c, deadline, out);
    *out = v;
    return DS_K_OK;
}

/* Gives back a call state of the shared connection; a failed call retires
 * the connection (a timeout may leave a frame half written). */
static void put_mux_conn(ds_client_t *c, ds_conn_t *v)
{
    if (v->mux.in_cap > 2 * DS_CLIENT_MUX_MAX) {
        /* A large answer came in (a get into a small buffer is answered
         * with the whole value): do not keep its room. */
        free(v->in);
        v->in = NULL;
        v->mux.in_cap = v->in_pos = v->in_len = 0;
    }
    pthread_mutex_lock(&c->mu);
    if (v->state != DS_CONN_OK) ds__mux_retire(v->mux.m);
    if (v->state == DS_CONN_OK && v->mux.m == c->mux && !atomic_load(&c->closed)) {
        v->next = c->vidle;
        c->vidle = v;
        v = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    ds__conn_free(v);
}

/* The call stops counting as busy only once its connection is back: a
 * caller that then finds no other call in progress takes this connection
 * from the idle list, rather than opening one more beside it. */
void ds__client_put(ds_client_t *c, ds_conn_t *conn)
{
    if (conn == NULL) return;
    if (conn->mux.m) {
        put_mux_conn(c, conn);
        atomic_fetch_sub(&c->busy, 1);
        return;
    }
    pthread_mutex_lock(&c->mu);
    ds_sess_t *s = conn->sess;
    if (conn->state == DS_CONN_OK && conn->data_left == 0 && !atomic_load(&c->closed) &&
        s == c->sess) {
        conn->next = c->idle;
        c->idle = conn;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        atomic_fetch_sub(&c->busy, 1);
        return;
    }
    bool lost = conn->state == DS_CONN_LOST;
    ds__sess_ref(s);
    close_conn_locked(c, conn);
    if (lost) {
        /* The worker may be gone: drop every idle connection it closed, so
         * the next call does not fail on one of them a second time. */
        for (ds_conn_t **pp = &c->idle; *pp;) {
            ds_conn_t *x = *pp;
            if (peer_closed(x->sock.fd)) {
                *pp = x->next;
                close_conn_locked(c, x);
            } else {
                pp = &x->next;
            }
        }
    }
    if (s == c->sess && (lost || s->anchor_fd < 0) && sess_gone_locked(s)) detach_locked(c, s);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_sub(&c->busy, 1);
    ds__sess_unref(s);
}

/* An option's string, else the environment's; NULL when neither says. */
static const char *opt_or_env(const char *opt, const char *name)
{
    if (opt && opt[0]) return opt;
    const char *env = getenv(name);
    return env && env[0] ? env : NULL;
}

/* enable_tls and the files it names: the TLS context for TCP connections,
 * or *out NULL when TLS is off. */
static ds_status_t tls_setup(const ds_client_options_t *opts, bool ucx, ds_tls_ctx_t **out)
{
    *out = NULL;
    int on = opts->enable_tls;
    if (on < -1 || on > 1)
        return ds__set_error(DS_K_INVALID,
                             "enable_tls %d is not -1 (off), 0 ($DATASYSTEM_ENABLE_TLS) or 1", on);
    const char *env = getenv("DATASYSTEM_ENABLE_TLS");
    if (on == 0 && env && *env) {
        if (strcmp(env, "1") == 0 || strcasecmp(env, "true") == 0)
            on = 1;
        else if (strcmp(env, "0") == 0 || strcasecmp(env, "false") == 0)
            on = -1;
        else
            return ds__set_error(DS_K_INVALID,
                                 "DATASYSTEM_ENABLE_TLS='%.32s' is not 1, true, 0 or false", env);
    }
    if (on != 1) return DS_K_OK;
    if (ucx)
        return ds__set_error(DS_K_INVALID,
                             "enable_tls cannot be combined with enable_ucx: UCX moves values "
                             "unencrypted, outside the TLS connection");
    ds_tls_conf_t tc = {.server = false,
                        .ca = opt_or_env(opts->tls_ca, "DATASYSTEM_TLS_CA"),
                        .cert = opt_or_env(opts->tls_cert, "DATASYSTEM_TLS_CERT"),
                        .key = opt_or_env(opts->tls_key, "DATASYSTEM_TLS_KEY")};
    char err[700];
    *out = ds__tls_ctx_new(&tc, err, sizeof(err));
    if (*out == NULL) return ds__set_error(DS_K_INVALID, "%s", err);
    return DS_K_OK;
}

ds_status_t ds_client_connect(const ds_client_options_t *opts, ds_client_t **out)
{
    ds__clear_error();
    if (out == NULL) return ds__set_error(DS_K_INVALID, "out is NULL");
    *out = NULL;
    if (opts == NULL) return ds__set_error(DS_K_INVALID, "options are NULL");
    ds__client_env_init();
    char sd_host[256];
    int port = opts->port;
    const char *host = opts->host;
    const char *token = opts->token;
    int connect_ms = opts->connect_timeout_ms;
    ds_status_t est = ds__client_env_fallbacks(&host, &port, &token, &connect_ms);
    if (est != DS_K_OK) return est;
    if (opts->enable_cross_node_connection < 0 || opts->enable_cross_node_connection > 1)
        return ds__set_error(DS_K_INVALID, "enable_cross_node_connection %d is not 0 or 1",
                             opts->enable_cross_node_connection);
    if (opts->service_discovery) {
        /* As in Yuanrong, the discovery decides; host and port are ignored. */
        ds_status_t sst = ds__discovery_select(opts->service_discovery, NULL, sd_host,
                                               sizeof(sd_host), &port, NULL);
        if (sst != DS_K_OK) return sst;
        host = sd_host;
    }
    if (host == NULL || *host == '\0')
        return ds__set_error(DS_K_INVALID,
                             "worker host is not set (options, DATASYSTEM_HOST or a service "
                             "discovery)");
    if (strlen(host) >= sizeof(((ds_client_t *)0)->host))
        return ds__set_error(DS_K_INVALID, "worker host '%.64s...' is too long", host);
    if (port <= 0 || port > 65535)
        return ds__set_error(DS_K_INVALID, "worker port %d is not in 1..65535", port);
    if (opts->transport < DS_TRANSPORT_AUTO || opts->transport > DS_TRANSPORT_LOCAL)
        return ds__set_error(DS_K_INVALID, "unknown transport %d", (int)opts->transport);
    if (connect_ms < 0 || opts->request_timeout_ms < 0)
        return ds__set_error(DS_K_INVALID, "timeouts must not be negative");
    int poll_us = opts->busy_poll_us;
    const char *env = getenv("DS_BUSY_POLL_US");
    if (poll_us == 0 && env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end != '\0' || v < 0 || v > 1000000)
            return ds__set_error(DS_K_INVALID, "DS_BUSY_POLL_US='%.32s' is not 0..1000000", env);
        poll_us = v == 0 ? -1 : (int)v;
    }
    if (poll_us < -1 || poll_us > 1000000)
        return ds__set_error(DS_K_INVALID, "busy_poll_us %d is not -1 (off) or 0..1000000",
                             poll_us);
    if (poll_us == 0) poll_us = DS_CLIENT_DEFAULT_POLL_US;
    if (poll_us < 0) poll_us = 0;
    int use_ucx = opts->enable_ucx;
    if (use_ucx < -1 || use_ucx > 1)
        return ds__set_error(DS_K_INVALID, "enable_ucx %d is not -1 (off), 0 ($DS_CLIENT_UCX) or 1",
                             use_ucx);
    env = getenv("DS_CLIENT_UCX");
    if (use_ucx == 0 && env && *env) {
        if (strcmp(env, "1") != 0 && strcmp(env, "0") != 0)
            return ds__set_error(DS_K_INVALID, "DS_CLIENT_UCX='%.32s' is not 1 or 0", env);
        use_ucx = env[0] == '1';
    }

    ds_tls_ctx_t *tls = NULL;
    ds_status_t tst = tls_setup(opts, use_ucx == 1, &tls);
    if (tst != DS_K_OK) return tst;

    env = getenv("DS_CLIENT_MUX");
    if (env && *env && strcmp(env, "1") != 0 && strcmp(env, "0") != 0)
        return ds__set_error(DS_K_INVALID, "DS_CLIENT_MUX='%.32s' is not 1 or 0", env);
    bool mux_off = env && env[0] == '0';

    ds_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        ds__tls_ctx_free(tls);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory creating a client");
    }
    c->tls = tls;
    c->mux_off = mux_off || tls != NULL;
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    snprintf(c->addr, sizeof(c->addr), "%s:%d", c->host, c->port);
    c->sd = opts->service_discovery;
    c->failover = c->sd && opts->enable_cross_node_connection == 1;
    if (opts->unix_socket_dir)
        snprintf(c->sock_dir, sizeof(c->sock_dir), "%s", opts->unix_socket_dir);
    c->connect_timeout_ms = connect_ms ? connect_ms : DS_CLIENT_DEFAULT_CONNECT_MS;
    c->request_timeout_ms =
        opts->request_timeout_ms ? opts->request_timeout_ms : DS_CLIENT_DEFAULT_REQUEST_MS;
    c->busy_poll_us = (uint32_t)poll_us;
    if (token && (c->token = strdup(token)) == NULL) {
        ds__tls_ctx_free(tls);
        free(c);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory creating a client");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->open_mu, NULL);
    atomic_init(&c->refs, 1);
    atomic_init(&c->closed, false);
    atomic_init(&c->busy, 0);

    /* A path too long for a socket leaves only discovery (new_session_dial). */
    if (ds__socket_path(opts->unix_socket_dir, c->host, c->port, c->sock_path,
                        sizeof(c->sock_path)) != 0)
        c->sock_path[0] = '\0';
    c->transport = opts->transport;
    c->require_local = opts->transport == DS_TRANSPORT_LOCAL;

    ds_conn_t *conn = NULL;
    ds_status_t st = use_ucx == 1 ? ds__cucx_new(&c->ucx) : DS_K_OK;
    if (st != DS_K_OK) goto fail;
    uint64_t deadline = ds__now_ms() + (uint64_t)c->connect_timeout_ms;
    st = ds__client_acquire(c, &deadline, &conn);
    if (st != DS_K_OK) goto fail;
    ds__client_put(c, conn);
    *out = c;
    return DS_K_OK;
fail:
    ds_client_close(c);
    return st;
}

static void client_unref(ds_client_t *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1) return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->open_mu);
    ds__cucx_free(c->ucx);
    ds__tls_ctx_free(c->tls);
    free(c->token);
    free(c);
}

void ds__client_enter(ds_client_t *c)
{
    if (c) atomic_fetch_add(&c->refs, 1);
}

ds_status_t ds__client_leave(ds_client_t *c, ds_status_t st)
{
    if (c == NULL) return st;
    /* Shutting a borrowed connection down reads as a lost worker to the
     * call that had it; say what really happened. */
    if ((st == DS_K_CLIENT_WORKER_DISCONNECT || st == DS_K_RPC_UNAVAILABLE ||
         st == DS_K_RPC_DEADLINE_EXCEEDED) &&
        atomic_load(&c->closed))
        st = ds__set_error(DS_K_INVALID, "the client is closed (closed during the call)");
    client_unref(c);
    return st;
}

void ds_client_close(ds_client_t *c)
{
    if (c == NULL) return;
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->closed, true);
    while (c->idle) {
        ds_conn_t *conn = c->idle;
        c->idle = conn->next;
        close_conn_locked(c, conn);
    }
    /* What is left is borrowed by calls in progress: make their reads and
     * writes fail now rather than at their deadlines (a subscribe-get may
     * wait minutes). Each borrower closes its socket when it gives it back. */
    for (ds_conn_t *conn = c->all; conn; conn = conn->all_next) {
        conn->ops->shutdown(conn);
    }
    if (c->mux) {
        ds__mux_shutdown(c->mux);
        ds__mux_unref(c->mux);
        c->mux = NULL;
    }
    for (ds_conn_t *v; (v = c->vidle) != NULL;) {
        c->vidle = v->next;
        ds__conn_free(v);
    }
    ds_sess_t *s = c->sess;
    c->sess = NULL;
    atomic_store(&c->local, false);
    pthread_cond_broadcast(&c->cv); /* waiters for a connection see closed */
    pthread_mutex_unlock(&c->mu);
    /* Buffers still hold the session (and so its mapping and anchor) until
     * they are released. */
    ds__sess_unref(s);
    client_unref(c);
}

bool ds_client_is_local(const ds_client_t *client)
{
    ds_client_t *c = (ds_client_t *)client;
    if (c == NULL) return false;
    ds__client_enter(c);
    bool local = atomic_load(&c->local);
    ds__client_leave(c, DS_K_OK);
    return local;
}

static ds_status_t health_check(ds_client_t *c)
{
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    ds_status_t st = ds__client_acquire(c, &deadline, &conn);
    if (st != DS_K_OK) return st;
    ds__conn_begin(conn);
    st = ds__conn_call(conn, DS_OP_HEALTH, false, deadline);
    ds__conn_drain(conn, deadline);
    ds__client_put(c, conn);
    return st;
}

ds_status_t ds_client_health_check(ds_client_t *c)
{
    ds__clear_error();
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds__client_enter(c);
    return ds__client_leave(c, health_check(c));
}
