/* The worker's state and the pieces that share it: the server (listeners,
 * timers, shutdown), connections (conn.c), operations (ops.c), client sessions
 * and their pinned handles (session.c) and subscribe-gets (subs.c).
 *
 * Threading model: one thread runs everything, driven by the epoll loop, like
 * Redis. No locks exist, so nothing here needs a lock order (in a cluster,
 * the membership, watch and job threads of cluster.h never touch this state:
 * they hand their results to the loop through an eventfd). The worker never
 * copies bulk data itself on the hot path: local clients write and read the
 * arena in place, and TCP bytes move between socket and arena with
 * recv/writev, at most DS_IO_SLICE bytes per connection per turn, so one huge
 * transfer cannot starve other clients' small operations (no head-of-line
 * blocking). Response frames of DS_BULK_MIN bytes and more are written by a
 * sender thread instead (bulk.c), which only touches the frame and the socket:
 * the kernel's copy of a huge value then does not make the loop a CPU-bound
 * thread that the scheduler makes small requests wait behind. */
#ifndef DS_WORKER_SERVER_H
#define DS_WORKER_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/wire.h"
#include "worker/arena.h"
#include "worker/flags.h"
#include "worker/loop.h"
#include "worker/store.h"

/* Bytes moved per connection per loop turn before yielding to others. */
#define DS_IO_SLICE (128u << 10)
/* Response frames with at least this many bytes left go to the sender thread. */
#define DS_BULK_MIN (1u << 20)

typedef struct ds_server ds_server_t;
typedef struct ds_conn ds_conn_t;
typedef struct ds_session ds_session_t;
typedef struct ds_wait ds_wait_t;

/* ---- session.c: a client's identity across its connections ---- */

/* A handle slot: a reference the session holds on an object (a reader's pin
 * or an unpublished creation). Handles are (slot index << 32 | generation) so a
 * stale or forged handle never reaches another slot's object. */
typedef struct {
    ds_obj_t *obj;
    uint32_t gen;
    uint8_t existence; /* for CREATE: applied at publish */
    uint32_t next_free;
} ds_slot_t;

struct ds_session {
    ds_session_t *next;
    uint64_t id;
    uint32_t nconns;
    bool shm; /* mapped the arena */
    ds_slot_t *slots;
    uint32_t nslots, cap, free_head, live;
};

ds_session_t *ds__session_new(ds_server_t *srv);
ds_session_t *ds__session_find(ds_server_t *srv, uint64_t id);
/* Drops every handle's reference and frees the session. */
void ds__session_free(ds_server_t *srv, ds_session_t *s);
/* Takes over the caller's reference to obj; returns the handle, 0 on OOM. */
uint64_t ds__session_add(ds_session_t *s, ds_obj_t *obj, uint8_t existence);
/* The slot for a handle, or NULL if it is not live. */
ds_slot_t *ds__session_slot(ds_session_t *s, uint64_t handle);
/* Drops the handle's reference. false if the handle is not live. */
bool ds__session_release(ds_server_t *srv, ds_session_t *s, uint64_t handle);

/* ---- conn.c: one client connection ---- */

typedef enum {
    CONN_READ_HEADER = 0,
    CONN_READ_META,
    CONN_READ_DATA,
    CONN_PARKED, /* a subscribe-get is waiting; reads resume once it is answered */
    CONN_CLOSED,
} ds_conn_state_t;

/* Where incoming data bytes go: into arena objects (SET) or nowhere (skipped). */
typedef struct {
    uint8_t *p; /* NULL = discard */
    uint64_t len;
} ds_sink_t;

typedef struct ds_out ds_out_t;

struct ds_conn {
    ds_io_t io;
    ds_server_t *srv;
    ds_conn_t *prev, *next;
    ds_conn_state_t state;
    bool is_unix;
    bool hello_done;
    bool authed; /* Unix socket, no secret configured, or the challenge answered */
    uint8_t auth_failures;
    char challenge[68]; /* outstanding auth challenge, "" = none */
    bool close_after_write;
    ds_session_t *session;
    uint64_t id;

    uint8_t hdr[DS_WIRE_HEADER_LEN];
    uint32_t hdr_got;
    ds_wire_header_t h;
    uint8_t *meta;
    uint32_t meta_got;

    /* data phase of a SET */
    ds_sink_t *sinks;
    uint32_t nsinks, sink_idx;
    uint64_t sink_off;
    ds_obj_t **pend; /* reserved objects, one per key (NULL where it failed) */
    uint32_t *pend_status;
    uint32_t npend;
    uint8_t pend_existence;
    char pend_err[256];

    ds_wait_t *wait;
    struct ds_pend *cpend; /* a cluster operation waiting for peers */
    uint64_t req_start_ns; /* when the current request's header arrived */

    ds_out_t *out_head, *out_tail;
    uint64_t out_bytes;
    /* The head frame while the sender thread writes it; nothing else is
     * written meanwhile, and a closed connection is freed only once it is
     * back. */
    ds_out_t *bulk_out;
};

/* Queues a response: header + meta from w, then nseg data segments. refs are
 * object references the frame holds until sent (taken over). fd >= 0 rides
 * along as SCM_RIGHTS. Frees nothing of w. */
void ds__conn_reply(ds_conn_t *c, uint64_t req_id, uint16_t op, ds_status_t st, const ds_wbuf_t *w,
                    const struct iovec *segs, uint32_t nseg, ds_obj_t **refs, uint32_t nrefs,
                    int fd);
/* A response carrying only the error string. */
void ds__conn_reply_err(ds_conn_t *c, uint64_t req_id, uint16_t op, ds_status_t st, const char *fmt,
                        ...) __attribute__((format(printf, 5, 6)));
void ds__conn_close(ds_conn_t *c, const char *why);
/* The sender thread is done with c's head frame o: sent bytes, errno or 0. */
void ds__conn_bulk_done(ds_conn_t *c, ds_out_t *o, uint64_t sent, int err);
/* The unsent part of a frame as up to max iovecs (0 when all is sent), and
 * marking n more bytes sent (true once all are). For the sender thread. */
int ds__out_iov(const ds_out_t *o, struct iovec *iov, int max);
bool ds__out_advance(ds_out_t *o, uint64_t n);

/* ---- bulk.c: the sender thread for large response frames ---- */
typedef struct ds_bulk ds_bulk_t;
ds_bulk_t *ds__bulk_new(ds_server_t *srv, char *err, size_t err_cap);
/* Stops the thread; every frame it held comes back through
 * ds__conn_bulk_done (failed when unsent). */
void ds__bulk_free(ds_bulk_t *b);
/* Hands c's head frame o to the thread; false when it cannot take it. */
bool ds__bulk_send(ds_bulk_t *b, ds_conn_t *c, ds_out_t *o);
/* Drops a SET's reserved objects and sinks. */
void ds__conn_release_pending(ds_conn_t *c);
/* Accepts pending connections on a listener. */
void ds__conn_accept(ds_server_t *srv, int lfd, bool is_unix);
/* Resumes reading after a parked request was answered. */
void ds__conn_unpark(ds_conn_t *c);

/* ---- ops.c: the operations ---- */

/* Handles a complete request whose data section was empty. */
void ds__ops_dispatch(ds_conn_t *c);
/* For SET: after the metadata, prepares the sinks (reserving arena space). */
void ds__ops_set_begin(ds_conn_t *c);
/* For SET: after all data arrived, publishes and answers. */
void ds__ops_set_finish(ds_conn_t *c);
/* Answers a GET from objs[i] (NULL = missing); takes its own references. */
void ds__ops_get_reply(ds_conn_t *c, uint64_t req_id, uint8_t flags, const char *const *keys,
                       const uint32_t *lens, uint32_t n, ds_obj_t **objs);
/* Answers a GET (used directly and when a wait completes). */
void ds__ops_get_answer(ds_conn_t *c, uint64_t req_id, const uint8_t *meta, uint32_t meta_len);

/* ---- subs.c: subscribe-gets waiting for keys ---- */

struct ds_wait {
    ds_conn_t *conn;
    uint16_t op; /* GET or LOCATE: which answer to give */
    uint64_t req_id;
    uint64_t deadline_ms;
    uint8_t *meta; /* the GET's metadata, kept to answer later */
    uint32_t meta_len;
    uint32_t missing;
    uint32_t nsubs;
    struct ds_sub *subs;
    int32_t heap_idx;
};

/* Parks c on the missing keys of a GET. Takes over meta. false if the
 * subscription limit is reached (the caller answers at once instead). */
bool ds__subs_wait(ds_server_t *srv, ds_conn_t *c, uint16_t op, uint64_t req_id, uint8_t *meta,
                   uint32_t meta_len, const char **keys, const uint32_t *lens, uint32_t nkeys,
                   uint64_t deadline_ms);
/* A key was published: wakes waits that now have everything. */
void ds__subs_publish(ds_server_t *srv, const char *key, size_t len);
/* Answers waits whose deadline passed; returns the next deadline or 0. */
uint64_t ds__subs_expire(ds_server_t *srv, uint64_t now_ms);
/* Forgets a wait without answering (its connection closed). */
void ds__subs_cancel(ds_server_t *srv, ds_wait_t *w);
void ds__subs_init(ds_server_t *srv);
void ds__subs_destroy(ds_server_t *srv);

/* ---- metrics.c: Prometheus /metrics endpoint and latency histograms ---- */

/* Creates the histograms, and the HTTP listener on --metrics_port when it is
 * not 0 (bound to the worker's host). 0, or -1 with a message. */
int ds__metrics_init(ds_server_t *srv, char *err, size_t err_cap);
void ds__metrics_destroy(ds_server_t *srv);
/* Records one request's latency (header arrival -> response queued). */
void ds__metrics_observe(ds_server_t *srv, uint16_t op, uint64_t ns);

/* ---- server.c ---- */

typedef struct {
    uint64_t ops[DS_OP__MAX];
    uint64_t errors[DS_OP__MAX];
    uint64_t bytes_in, bytes_out;
    uint64_t conns_accepted, conns_rejected, protocol_errors, auth_failures;
    /* cluster: peer requests sent over a link from the loop or by a job
     * thread, and GET values this owner sent along with a LOCATE answer */
    uint64_t peer_link_requests, peer_job_requests, locate_inline_values;
} ds_counters_t;

struct ds_server {
    ds_worker_config_t cfg;
    char host[256];
    int port;
    char sock_path[300];
    char worker_id[64];
    char auth_token[256]; /* shared secret from --auth_token_file; empty = none */
    ds_loop_t *loop;
    ds_arena_t arena;
    ds_store_t *store;
    ds_io_t tcp_io, unix_io, sig_io;
    int tcp_fd, unix_fd, sig_fd;
    bool stopping;
    uint64_t max_data;
    uint32_t inline_max;

    ds_conn_t *conns;
    uint32_t nconns;
    uint64_t next_conn_id;
    ds_conn_t *dead; /* closed, freed after the current loop turn */

    ds_session_t *sessions;
    uint64_t next_session;

    /* subs.c */
    struct ds_sub **sub_buckets;
    uint32_t sub_nbuckets, sub_count;
    ds_wait_t **wait_heap;
    uint32_t wait_n, wait_cap;

    struct ds_metrics *metrics;
    struct ds_cluster *cluster;
    ds_bulk_t *bulk;
    /* NULL when standalone */ /* metrics.c: histograms and the /metrics listener */

    uint64_t genkey_counter;
    uint64_t start_ms;
    ds_counters_t ctr;
};

int ds__server_init(ds_server_t *srv, const ds_worker_config_t *cfg, char *err, size_t err_cap);
/* Runs until SIGTERM/SIGINT or a SHUTDOWN request. */
void ds__server_run(ds_server_t *srv);
void ds__server_destroy(ds_server_t *srv);
void ds__server_stop(ds_server_t *srv);
/* The stats document (dscli status, STATS op) as a malloc'd JSON string. */
char *ds__server_stats_json(ds_server_t *srv);

#endif
