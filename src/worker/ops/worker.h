/* The worker's state and its operations layer: one handler per opcode
 * (ops.c, ops_set.c), subscribe-gets (subs.h), and the hooks through which a
 * cluster (src/worker/cluster) takes over what needs other workers. The
 * operations see requests (net/request.h), never connections.
 *
 * Layers, each using only those below it (see ../THREADS.md):
 *   store    the arena, its allocator and the object table
 *   net      the event loop, connections, sessions, HELLO, the request layer
 *   ops      this: the state below and the operations on it
 *   cluster  membership, owners, peers; plugs into ops through ds_remote_t
 *   core     the process: flags, listeners, signals, metrics, the run loop */
#ifndef DS_WORKER_OPS_WORKER_H
#define DS_WORKER_OPS_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/net/net.h"
#include "config/flags.h"
#include "worker/ops/subs.h"
#include "worker/ops/tier.h"
#include "worker/store/arena.h"
#include "worker/store/store.h"

typedef struct ds_server ds_server_t;
struct cJSON;

/* A write waiting for latches: resume(srv, d, ctx) runs once none blocks it
 * (d unparked: it must end d, or park it again with a cancel callback of its
 * own), cancel(ctx) instead if the connection closes first. */
typedef void (*ds_latch_resume_fn)(ds_server_t *srv, ds_req_t *d, void *ctx);
typedef void (*ds_latch_cancel_fn)(void *ctx);

/* What a cluster takes over (NULL hooks: standalone). Each hook answers r
 * (at once, or later through ds__req_park). */
typedef struct {
    /* A GET whose keys may live on other workers. */
    void (*get)(ds_server_t *srv, ds_req_t *r, int32_t wait_ms, uint8_t flags,
                const char *const *keys, const uint32_t *lens, uint32_t n);
    /* After local publishes (objs[i] NULL where key i failed with
     * status[i]): tell the owners, then answer the SET or PUBLISH. */
    void (*published)(ds_server_t *srv, ds_req_t *r, ds_obj_t **objs, const uint32_t *status,
                      uint32_t n, bool nx, const char *first_err);
    /* DEL, EXIST, EXPIRE and QSIZE across the cluster. */
    void (*keys_op)(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                    uint32_t n, uint32_t ttl);
    /* The worker-to-worker opcodes: LOCATE, META_PUT, META_DEL, DROP. */
    void (*peer_op)(ds_server_t *srv, ds_req_t *r);
    /* RLATCH, UNRLATCH, WLATCH, UNWLATCH and GREF (not NEST) of a client,
     * checked for shape: applied at each key's owner; false leaves r to the
     * caller (standalone semantics). */
    bool (*owned)(ds_server_t *srv, ds_req_t *r);
    /* A write of keys that some owner may hold latched: parks r and true
     * (as ds__latch_park), or false to go ahead. */
    bool (*latch_wait)(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                       uint32_t n, ds_latch_resume_fn resume, ds_latch_cancel_fn cancel, void *ctx);
    /* Whether any key may be latched at another owner (writes then check). */
    bool (*latch_hinted)(ds_server_t *srv);
    /* A client session ended: its latches and references at other owners go. */
    void (*session_end)(ds_server_t *srv, ds_session_t *s);
    /* Whether this worker is the key's ring owner. */
    bool (*owns)(ds_server_t *srv, const char *key, uint32_t len);
    /* A key's last global reference went at its owner: delete it everywhere. */
    void (*gref_gone)(ds_server_t *srv, const char *key, uint32_t len);
    /* SEAL of a client (checked for shape): marked here and at each key's
     * owner, which every write of the key then asks; answers r. */
    void (*seal)(ds_server_t *srv, ds_req_t *r);
    /* Whether a write of the key here must be refused as sealed (its owner
     * marked it; a writer elsewhere learnt it asking the owner). */
    bool (*sealed)(ds_server_t *srv, const char *key, uint32_t len);
    /* GREF NEST of a client whose parent is owned elsewhere: forwarded to
     * the parent's owner (true), else false (applied here). */
    bool (*nest)(ds_server_t *srv, ds_req_t *r);
    /* A parent here holds (delta 1) or lets go (-1) a nested key owned
     * elsewhere: told to its owner. batch NULL: at once, else collected for
     * nest_answer. */
    void (*kid_hold)(ds_server_t *srv, void **batch, const char *parent, uint32_t pl,
                     const char *key, uint32_t len, int32_t delta);
    /* Sends the collected holds and answers r with status and body once
     * every owner has them (batch NULL: at once). */
    void (*nest_answer)(ds_server_t *srv, void *batch, ds_req_t *r, ds_status_t st, ds_wbuf_t *w);
    /* Streams (docs/streams.md, cluster/cluster_stream.c): a local stream's
     * producer and consumer counts changed (tell its owner; r not NULL: a
     * SUBSCRIBE answered with handle once the owner has the count); whether the
     * stream's elements may be forwarded now (false: the queues to other
     * workers are full, the send waits); elements appended here (origin
     * NULL: by a local producer; else the worker that pushed them) go on to
     * the other workers with consumers; SC_QUERY answered from the owner. */
    void (*stream_reg)(ds_server_t *srv, const char *name, uint32_t len, uint32_t producers,
                       uint32_t consumers, ds_req_t *r, uint64_t handle);
    bool (*stream_room)(ds_server_t *srv);
    void (*stream_forward)(ds_server_t *srv, const char *name, uint32_t len, const char *origin,
                           uint32_t origin_len, const uint8_t *const *els, const uint32_t *lens,
                           uint32_t n);
    void (*stream_query)(ds_server_t *srv, ds_req_t *r, const char *name, uint32_t len);
    /* SC_DELETE_STREAM in a cluster: through the stream's owner, everywhere. */
    void (*stream_delete)(ds_server_t *srv, ds_req_t *r, const char *name, uint32_t len);
    /* Adds the "cluster" section to the STATS document (a cJSON object). */
    void (*stats)(ds_server_t *srv, struct cJSON *root);
    /* SHUTDOWN in a cluster: moves this worker's objects and metadata to
     * the others, leaves, then answers r and stops the worker. */
    void (*leave)(ds_server_t *srv, ds_req_t *r); /* r NULL: SIGTERM, nobody to answer */
} ds_remote_t;

typedef struct {
    /* cluster: peer requests sent over a link from the loop or by a job
     * thread, and GET values this owner sent along with a LOCATE answer */
    uint64_t peer_link_requests, peer_job_requests, locate_inline_values;
    uint64_t ucx_pulls, ucx_sends; /* --enable_rdma: values received / sent with UCX */
    uint64_t ucx_pull_fallbacks;   /* UCX_PULLs the owner answered on the peer connection */
    uint64_t peers_proven;         /* connections that completed PEER_AUTH */
} ds_cluster_counters_t;

typedef struct {
    /* --enable_rdma: values sent to remote clients with UCX (UCX_GET), their
     * bytes, and sends that failed or were ended at their deadline */
    uint64_t client_sends, client_bytes, client_send_failures;
    /* clients' UCX addresses checked by ds_ucx_check (UCX_ADDR), and refused */
    uint64_t addr_checks, addr_rejected;
} ds_ucx_counters_t;

struct ds_server {
    ds_worker_config_t cfg;
    char host[256];
    int port;
    char sock_path[300];
    char worker_id[DS_WORKER_ID_HEX + 1];
    char auth_token[256]; /* shared secret from --auth_token_file; empty = none */
    /* --enable_tls: the context of this worker's own connections to peers
     * (the server side's is net.tls); NULL = plain TCP */
    struct ds_tls_ctx *tls_peer;
    ds_arena_t arena;
    ds_store_t *store;
    struct ds_kv_events *kv_events; /* --kv_events_config; NULL = off */
    ds_net_t net;
    ds_subs_t subs;    /* GETs waiting for keys to be published here */
    ds_subs_t locates; /* the cluster's LOCATEs waiting for a key's location */
    uint32_t inline_max;
    bool stopping;
    bool leaving;              /* a SIGTERM started a planned exit (loop only) */
    const ds_remote_t *remote; /* NULL when standalone */
    struct ds_cluster *cluster;
    struct ds_metrics *metrics;
    ds_io_t sig_io;
    int tcp_fd, unix_fd, sig_fd;
    uint64_t genkey_counter;
    uint64_t start_ms;
    uint64_t liveness_due_ms; /* next liveness file refresh; 0 = none (core/probe.c) */
    bool probes_written;      /* this worker wrote probe files, to remove on a clean stop */
    ds_cluster_counters_t cctr;
    struct ds_ucx *ucx; /* the UCX data plane (--enable_rdma), else NULL (net/ucx.h) */
    ds_ucx_counters_t uctr;
    char ucx_check_path[4096];       /* ds_ucx_check, next to this binary (ops_ucx_addr.c) */
    struct ds_ucx_check *ucx_checks; /* address checks running */
    int ucx_nchecks;
    struct ds_grefs *grefs;     /* global reference counts (ops_read.c), lazily made */
    struct ds_latches *latches; /* read latches and the writers they hold (latch.c) */
    /* answers of subscribe-gets of many keys being read a slice a turn (ops.c) */
    struct ds_get_slices *get_slices, *get_slices_tail;
    struct ds_streams *streams;   /* streams (stream.c), lazily made */
    struct ds_cstreams *cstreams; /* streams across workers (cluster_stream.c) */
    struct ds_tier *tier;         /* L2 cache and disk I/O thread (tier.c); NULL = none */
    /* background eviction between the arena watermarks (memory.c) */
    bool evicting;
    uint64_t evict_stuck_at; /* arena use when a run found nothing more to evict */
    uint64_t bg_evictions;
};

/* The worker's request handler (registered as the net layer's dispatch). */
void ds__ops_dispatch(void *srv, ds_req_t *r);
/* The next slice of each subscribe-get answer being read (ops.c); now
 * while any is left (the loop must not sleep), else 0. */
uint64_t ds__ops_get_tick(ds_server_t *srv, uint64_t now);
/* Answers a GET from objs[i] (NULL = missing); takes its own references. */
void ds__ops_get_reply(ds_server_t *srv, ds_req_t *r, uint8_t flags, const char *const *keys,
                       const uint32_t *lens, uint32_t n, ds_obj_t **objs);
/* Read latches (latch.c): expiry (returns the next deadline, 0 = none), a
 * session's end (the net layer's session_end hook), teardown, and STATS
 * "latches" (held, keys, waiting, the limits). */
uint64_t ds__latch_expire(ds_server_t *srv, uint64_t now);
void ds__latch_session_end(void *srv, ds_session_t *s);
void ds__latch_destroy(ds_server_t *srv);
struct cJSON;
void ds__latch_stats(ds_server_t *srv, struct cJSON *root);
/* The net layer's session_end hook (ops_ucx.c): latches, global
 * references, then the session's UCX endpoint, if any (its sends end,
 * their pins go). */
void ds__ops_session_end(void *srv, ds_session_t *s);
/* --enable_rdma: finds the UCX address checker (ops_ucx_addr.c); -1 with a
 * message when it is missing. */
int ds__ops_ucx_addr_init(ds_server_t *srv, char *err, size_t cap);
/* Stops the address checks still running (their requests get no answer). */
void ds__ops_ucx_addr_destroy(ds_server_t *srv);
/* One key of a latch operation (op RLATCH, UNRLATCH, WLATCH or UNWLATCH;
 * timeout in ms for the first two) for holder, a session or any other
 * stable pointer the caller names holders by (latch.c). exists: whether the
 * key is stored (a latch of a missing key is K_NOT_FOUND). *until: the
 * granted latch's deadline (ms), 0 when none was granted. */
ds_status_t ds__latch_apply(ds_server_t *srv, const void *holder, uint16_t op, uint32_t timeout,
                            const char *k, uint32_t kl, bool exists, uint64_t *until, char *msg,
                            size_t cap);
/* ds__latch_park for holder, against this worker's own latches only. */
bool ds__latch_park_as(ds_server_t *srv, ds_req_t *r, const void *holder, const char *const *keys,
                       const uint32_t *lens, uint32_t n, ds_latch_resume_fn resume,
                       ds_latch_cancel_fn cancel, void *ctx);
/* Drops every latch of holder (waking the writers it held). */
void ds__latch_holder_end(ds_server_t *srv, const void *holder);
/* Drops holder's latches (read and write) on the keys for which
 * drop(ctx, key, len, deadline) is true, waking the writers they held. */
typedef bool (*ds_latch_drop_fn)(void *ctx, const char *key, uint32_t len, uint64_t deadline);
void ds__latch_holder_drop_if(ds_server_t *srv, const void *holder, ds_latch_drop_fn drop,
                              void *ctx);
/* One key of a GREF (delta -1, 0 or 1) for holder (ops_read.c); the count
 * after it in *count. */
ds_status_t ds__gref_apply(ds_server_t *srv, const void *holder, const char *k, uint32_t kl,
                           int32_t delta, uint32_t *count, char *msg, size_t cap);
/* Takes up to n of holder's references off key's count without deleting
 * anything (they moved to another worker); an entry left with no count and
 * no hold goes (ops_read.c). */
void ds__gref_forget(ds_server_t *srv, const void *holder, const char *k, uint32_t kl, uint32_t n);
/* Frees the global reference counts (ops_read.c). */
void ds__ops_grefs_free(ds_server_t *srv);
/* A KV delete removed key: the nested holds it had (as a parent) go, and
 * children left with no reference and no hold are deleted (ops_read.c). */
void ds__ops_grefs_deleted(ds_server_t *srv, const char *k, uint32_t kl);
/* GREF (ops_read.c); a cluster's NEST_OWNED is one whose parent this
 * worker owns. */
void ds__ops_gref(ds_server_t *srv, ds_req_t *r);
/* A parent owned elsewhere holds (delta 1) or lets go (-1) key, owned
 * here, once per parent: a key left with no reference and no hold is
 * deleted, and its own holds go (ops_read.c). */
ds_status_t ds__gref_nested(ds_server_t *srv, const char *k, uint32_t kl, const char *parent,
                            uint32_t pl, int32_t delta, char *msg, size_t cap);
/* At a parent's new owner: the parent holds kid (its hold already taken at
 * the kid's owner); the parent's entry is made if missing. */
void ds__gref_adopt(ds_server_t *srv, const char *parent, uint32_t pl, const char *kid,
                    uint32_t kl);
/* Calls on_kid for each (parent, kid) this worker's entries list, and
 * on_parent for each (parent, kid) hold a parent owned elsewhere has here. */
typedef void (*ds_gref_edge_fn)(void *ctx, const char *parent, uint32_t pl, const char *kid,
                                uint32_t kl);
void ds__grefs_walk(ds_server_t *srv, ds_gref_edge_fn on_kid, ds_gref_edge_fn on_parent, void *ctx);
/* Drops every global reference the session holds (its client has gone),
 * deleting the objects left with none (ops_read.c). */
void ds__ops_grefs_session_end(ds_server_t *srv, const void *session);
/* Background eviction and spill between the arena watermarks (memory.c),
 * run by the loop between events; returns when it wants to run again (now:
 * next turn; 0: when woken by events). */
uint64_t ds__ops_memory_tick(ds_server_t *srv, uint64_t now);
/* Stops the run loop after the current turn. */
void ds__server_stop(ds_server_t *srv);
/* The stats document (dscli status, STATS op) as a malloc'd JSON string. */
char *ds__server_stats_json(ds_server_t *srv);

/* ops_set.c */
void ds__ops_set(ds_server_t *srv, ds_req_t *r);
/* Status-list answer (str err, n, n*u32); the overall status is the first
 * failure's. */
void ds__ops_reply_statuses(ds_req_t *r, const uint32_t *st, uint32_t n, const char *first_err);
/* After local publishes: the owners learn the new copies (in a cluster)
 * before the client hears back. */
void ds__ops_answer_published(ds_server_t *srv, ds_req_t *r, ds_obj_t **published,
                              const uint32_t *st, uint32_t n, bool nx, const char *first_err);
/* The same once write-through copies are durable (tier.c calls it for a
 * held answer): in a cluster the owners learn the new copies, then the
 * client hears back. */
void ds__ops_answer_durable(ds_server_t *srv, ds_req_t *r, ds_obj_t **published, const uint32_t *st,
                            uint32_t n, bool nx, const char *first_err);

#endif
