/* Many machines: a worker with --etcd_address joins a cluster.
 *
 * Membership (cluster.c): a membership thread registers
 * /datasystem/<cluster>/cluster/<ip:port> under an etcd lease and keeps it
 * alive; a watch thread follows the prefix and hands each new member list to
 * the event loop, which rebuilds the hash ring (ring.c).
 *
 * Data stays on the worker that wrote it; the key's ring owner keeps its
 * locations (a metadata table, cluster_meta.c). The event loop never blocks
 * on a peer: every worker-to-worker call is a job. Quick ones (a LOCATE that
 * does not wait, the pull of a value up to 64 KiB) go from the loop over a
 * non-blocking link per peer (peer_link.c); the rest run on a small thread
 * pool (blocking RPC, peer.c) whose results come back through an eventfd. A request that needs
 * peers becomes a pending operation (ds_pend_t) that parks its connection and answers when its last
 * job is done (cluster_ops.c). Job threads never touch the store: a pull writes into an arena range
 * the loop reserved for it before the job started.
 *
 * Consistency: a SET returns after the owner recorded the new location and
 * dropped every superseded copy; a DEL after every copy was dropped. Reads
 * are served by the owner's current location, so nothing stale is served
 * once a write or delete has returned. */
#ifndef DS_WORKER_CLUSTER_CLUSTER_INT_H
#define DS_WORKER_CLUSTER_CLUSTER_INT_H

#include "common/auth.h"
#include "worker/cluster/cluster.h"
#include "worker/cluster/peer_auth.h"
#include "worker/cluster/ring.h"
#include "worker/ops/worker.h"

typedef struct ds_pend ds_pend_t;
typedef struct ds_job ds_job_t;
typedef struct ds_meta ds_meta_t;
typedef struct ds_holds ds_holds_t;
typedef struct ds_seals ds_seals_t;
typedef struct ds_repl ds_repl_t;

/* A client request waiting for jobs. req is the handler's request while
 * the pend is being set up, and deferred once jobs are out (its connection
 * may then be gone: ds__req_gone). */
struct ds_pend {
    ds_server_t *srv;
    ds_req_t *req;
    uint16_t op;
    uint8_t flags;
    int outstanding;
    void (*finish)(ds_pend_t *p);
    /* per-operation state */
    uint32_t n;
    char **keys;
    uint32_t *keylens;
    ds_obj_t **objs;
    uint32_t *status;
    uint64_t *sizes;
    uint32_t ttl;
    uint32_t relocates;  /* GET: pulls that found the key moved and asked again */
    uint64_t started_ms; /* GET: when it began (its wait ends ttl ms later) */
    ds_status_t err_status;
    char err[256];
    /* SET/PUBLISH in a cluster: the client's per-key statuses, answered once
     * the owners recorded the new copies (and, for NX, agreed). */
    bool nx;
    uint32_t norig;
    uint32_t *orig_status;
    uint32_t *orig_idx; /* pend key k is the request's key orig_idx[k] */
    /* Runs instead of finish when the request cannot be answered (its
     * connection went, or it was failed when it could not be deferred). */
    void (*gone)(ds_pend_t *p);
    /* cluster_hold.c: a forwarded latch or GREF (arg: timeout or delta, err
     * the message of key err_idx, the first that failed), or a write waiting
     * for owners' latches (resume, cancel, ctx: ds__latch_park's) */
    int32_t arg;
    uint32_t err_idx;
    uint64_t sid;   /* the client's session */
    uint64_t stamp; /* a write waiting at owners: the hints' stamp when it asked */
    ds_latch_resume_fn resume;
    ds_latch_cancel_fn cancel;
    void *ctx;
    /* an operation's own state, freed with the pend by ext_free */
    void *ext;
    void (*ext_free)(ds_server_t *srv, void *ext);
};

struct ds_job {
    ds_job_t *next;
    ds_pend_t *pend; /* may be NULL: fire-and-forget */
    void *ctx;       /* for a done-handler without a pend */
    void (*done)(ds_job_t *j);
    char addr[300];
    uint16_t op;
    ds_wbuf_t req;
    uint64_t timeout_ms;
    uint32_t *idx; /* which keys of the pend this job's entries are */
    uint32_t nidx;
    /* pulls: read the single value into dst when it is dst_len bytes */
    uint8_t *dst;
    uint64_t dst_len;
    /* sends: the data section, src_len bytes of obj (a published object the
     * job holds a reference to) */
    const uint8_t *src;
    uint64_t src_len;
    uint32_t index;   /* which key of the pend */
    uint64_t version; /* a GET's pull: the version named where it pulls from */
    ds_obj_t *obj;
    uint64_t ucx_tag;  /* a UCX_PULL: the tag its value arrives with (cluster_ucx.c) */
    bool waits;        /* a LOCATE that may wait at the owner */
    bool connect_only; /* peer_link.c: connect and HELLO, hand back conn_fd */
    bool not_member;   /* addr is no member (ds__job_submit): fails without contact */
    char peer_pub[DS_AUTH_PUB_HEX + 1]; /* addr's member key from etcd, "" = none */
    int conn_fd;
    struct ds_tls *conn_tls; /* its TLS session (--enable_tls), else NULL */
    uint64_t link_req;       /* on a link: the request id and when it is overdue */
    uint64_t deadline;
    /* result */
    int transport_failed;
    uint32_t status;
    uint8_t *resp;
    uint32_t resp_len;
    ds_rbuf_t r; /* over resp, after the error string */
    char err[256];
};

/* A GET's LOCATE asks the owner to send values of up to this many bytes
 * along with the answer when the owner holds them itself (one round trip
 * instead of two); at most this many bytes in all per answer. */
#define DS_LOCATE_INLINE_MAX (64u << 10)

/* cluster.c */
const ds_ring_t *ds__cluster_ring(ds_server_t *srv);
ds_repl_t *ds__cluster_repl(ds_server_t *srv);
/* The member key (hex, "" = none in its record) of the member at addr, or
 * NULL when addr is not a member. */
const char *ds__cluster_member_key(ds_server_t *srv, const char *addr);
ds_peer_auth_t *ds__cluster_auth(ds_server_t *srv);
/* The ring owner of a key, or NULL when the ring is empty. */
const char *ds__cluster_owner(ds_server_t *srv, const char *key, size_t len);
/* Shortly after a ring change (--enable_redirect): the key's owner before
 * it, when that was another member still in the ring; else NULL. */
const char *ds__cluster_prev_owner(ds_server_t *srv, const char *key, size_t len);
const char *ds__cluster_self(ds_server_t *srv);
/* The key's owner should this worker leave the ring (NULL: no other member). */
const char *ds__cluster_backup(ds_server_t *srv, const char *key, size_t len);
/* The current members' identity (addresses and worker ids): equal on every
 * worker that sees the same members. */
uint64_t ds__cluster_ring_id(ds_server_t *srv);
ds_meta_t *ds__cluster_meta(ds_server_t *srv);
ds_job_t *ds__job_new(ds_pend_t *p, const char *addr, uint16_t op, void (*done)(ds_job_t *));
/* ds__job_new with j->idx room for n entries (which of the request's keys
 * the job carries); NULL, leaving nothing behind, when addr is NULL or
 * memory is short. A job is counted in p only once submitted. */
ds_job_t *ds__job_new_indexed(ds_pend_t *p, const char *addr, uint16_t op, void (*done)(ds_job_t *),
                              uint32_t n);
/* Sends the job (counting it in its pend): over the peer's link when it is
 * quick and the link is up, else through the job threads. */
void ds__job_submit(ds_server_t *srv, ds_job_t *j);
/* On the loop, once the job has its result: runs its done-handler, frees it
 * and finishes its pend when that was the pend's last job. */
void ds__job_complete(ds_server_t *srv, ds_job_t *j);
/* Fails overdue link requests; returns the next deadline (0 = none). */
uint64_t ds__cluster_tick(ds_server_t *srv, uint64_t now);
ds_pend_t *ds__pend_new(ds_server_t *srv, ds_req_t *r, void (*finish)(ds_pend_t *));
/* ds__pend_new for a batch request of n entries answered one status each:
 * p->status has room for n (each DS_K_OK) and p->n is n. NULL when memory
 * is short, r then answered K_OUT_OF_MEMORY. */
ds_pend_t *ds__pend_new_statuses(ds_server_t *srv, ds_req_t *r, void (*finish)(ds_pend_t *),
                                 uint32_t n);
/* Defers the request until the pend finishes (or finishes it now if no job
 * was submitted). finish answers p->req, unless its connection is gone. */
void ds__pend_start(ds_pend_t *p);
void ds__pend_free(ds_pend_t *p);
/* Copies key k (kl bytes) into the pend as its key p->n, NUL-terminated,
 * and counts it in p->n so that ds__pend_free frees exactly the keys
 * copied. p->keys and p->keylens must have room. False: out of memory. */
bool ds__pend_add_key(ds_pend_t *p, const char *k, uint32_t kl);
/* Allocates p->keys and p->keylens for n keys and reads n keys from rb into
 * them. False: out of memory; a truncated request sets rb->err instead. */
bool ds__pend_read_keys(ds_pend_t *p, ds_rbuf_t *rb, uint32_t n);
/* The head of a per-key record of META_MOVE and REPL_META: the key, its
 * value's size and a version (META_MOVE: the one the owner should record
 * now; REPL_META: the write's at its origin). The record's other fields
 * follow it. */
typedef struct {
    const char *key;
    uint32_t kl;
    uint64_t size;
    uint64_t version;
} ds_key_rec_t;
/* Reads a record's head from rb (the key points into rb's buffer); a
 * truncated record sets rb->err. */
void ds__key_rec_read(ds_rbuf_t *rb, ds_key_rec_t *kr);
/* Holds p open without a job (outstanding++), and lets it go again (it
 * finishes then if nothing else is outstanding). */
void ds__pend_hold(ds_pend_t *p);
void ds__pend_unhold(ds_pend_t *p);
/* A batch request's entry count, written where a placeholder u32 was put
 * (at: its offset in j->req) once the entries are in. */
void ds__job_set_count(ds_job_t *j, size_t at, uint32_t n);
/* Answers a batch request with one status per entry (st NULL: all OK). */
void ds__cluster_reply_statuses(ds_req_t *r, const uint32_t *st, uint32_t n);
/* A pend's finish for writes: answers p->req with the first failed status
 * (p->err as its message) and every key's status (orig_status). */
void ds__cluster_published_finish(ds_pend_t *p);

/* peer_link.c: quick requests (a LOCATE that does not wait, the pull of a
 * small value) sent from the loop over one non-blocking connection per peer,
 * skipping the job threads' two handoffs. */
typedef struct ds_links ds_links_t;
ds_links_t *ds__links_new(ds_server_t *srv);
/* Closes every link, failing what is in flight. */
void ds__links_free(ds_links_t *ls);
/* Sends j when it is quick and addr's link is up (starting one if there is
 * none); false means the caller runs it on a job thread. */
bool ds__links_submit(ds_links_t *ls, ds_job_t *j);
void ds__links_forget(ds_links_t *ls, const char *addr);
uint64_t ds__links_expire(ds_links_t *ls, uint64_t now);

/* The most members a cluster has. */
#define DS_MAX_MEMBERS 256

/* The latch and reference state of cluster_hold.c (NULL until first used). */
ds_holds_t **ds__cluster_holds(ds_server_t *srv);
/* The other members' addresses (at most cap) into out; how many. */
size_t ds__cluster_peers(ds_server_t *srv, const char **out, size_t cap);

/* cluster_hold.c: latches and global references held at each key's owner
 * (ds_remote_t's owned, latch_wait, latch_hinted, session_end, gref_gone),
 * the owner's side (OWNED, LATCH_WAIT, LATCH_HINT, HOLDER_END), and their
 * rebuild at new owners when the ring changes. */
bool ds__holds_owned(ds_server_t *srv, ds_req_t *r);
bool ds__holds_latch_wait(ds_server_t *srv, ds_req_t *r, const char *const *keys,
                          const uint32_t *lens, uint32_t n, ds_latch_resume_fn resume,
                          ds_latch_cancel_fn cancel, void *ctx);
bool ds__holds_hinted(ds_server_t *srv);
void ds__holds_session_end(ds_server_t *srv, ds_session_t *s);
void ds__holds_gref_gone(ds_server_t *srv, const char *key, uint32_t len);
bool ds__holds_owns(ds_server_t *srv, const char *key, uint32_t len);
void ds__holds_peer_op(ds_server_t *srv, ds_req_t *r);
/* A member left (or restarted): what its sessions held here goes. */
void ds__holds_member_left(ds_server_t *srv, const char *addr);
/* The ring changed: this worker's sessions' latches and references on keys
 * whose owner changed are taken again at the new owner. */
void ds__holds_ring_changed(ds_server_t *srv, const ds_ring_t *old_ring);
/* The rebuild after a ring change (cluster_hold_ring.c). Each worker tells
 * every member once what it sent for the change has been answered
 * (REBUILD_DONE); until every member did, or --node_timeout_s passed, a
 * key that came to this worker with the change is being rebuilt here, and
 * its holds, latches, seals and nests answer K_TRY_AGAIN.
 * ds__rebuild_round starts it (after the change's rebuild is sent);
 * ds__rebuild_submit sends a job that carries rebuilt state (the DONE
 * waits for it); ds__rebuild_pending: whether key (owned here) is being
 * rebuilt, with the message then in msg. */
void ds__rebuild_round(ds_server_t *srv, const ds_ring_t *old_ring);
void ds__rebuild_submit(ds_server_t *srv, ds_job_t *j);
bool ds__rebuild_pending(ds_server_t *srv, const char *key, uint32_t len, char *msg, size_t cap);
/* Ends the wait once its time is over (resuming the LATCH_WAITs held for
 * it); returns when it ends (0: no wait with LATCH_WAITs held). */
uint64_t ds__rebuild_tick(ds_server_t *srv, uint64_t now);
void ds__holds_free(ds_holds_t *h);

/* cluster_seal.c: seal marks and nested references at each key's owner
 * (ds_remote_t's seal, sealed, nest, kid_hold, nest_answer) and the owner's
 * side (SEAL_OWNED, NEST_OWNED, NEST_HOLD). */
ds_seals_t **ds__cluster_seals(ds_server_t *srv);
void ds__seals_free(ds_seals_t *s);
void ds__seal_client(ds_server_t *srv, ds_req_t *r);
bool ds__seal_refused(ds_server_t *srv, const char *key, uint32_t len);
/* At the owner: K_OC_ALREADY_SEALED when the key's current version is sealed. */
ds_status_t ds__seal_status(ds_server_t *srv, const char *key, uint32_t len);
/* A writer: the owner's LATCH_WAIT answer said the key is (not) sealed. */
void ds__seal_told(ds_server_t *srv, const char *key, uint32_t len, bool sealed);
/* At the owner: whether any of the keys is sealed; LATCH_WAIT's answer to r. */
bool ds__seal_wait_any(ds_server_t *srv, const char *const *keys, const uint32_t *lens, uint32_t n);
void ds__seal_wait_answer(ds_server_t *srv, ds_req_t *r);
bool ds__nest_client(ds_server_t *srv, ds_req_t *r);
void ds__nest_kid_hold(ds_server_t *srv, void **batch, const char *parent, uint32_t pl,
                       const char *key, uint32_t len, int32_t delta);
void ds__nest_answer(ds_server_t *srv, void *batch, ds_req_t *r, ds_status_t st, ds_wbuf_t *w);
void ds__seal_peer_op(ds_server_t *srv, ds_req_t *r);
/* After a ring change: sealed copies and marks of keys whose owner changed
 * go to the new owner (OWNER_REBUILD), and so do nested holds whose
 * parent's or key's owner changed; marks kept are hinted again. */
void ds__seal_ring_changed(ds_server_t *srv, const ds_ring_t *old_ring);
/* Seal marks kept here (as owner), and keys other owners hinted sealed:
 * stats' cluster.seals_known is their sum. */
uint32_t ds__seal_marks(ds_server_t *srv);
uint32_t ds__holds_seal_hints(ds_server_t *srv);
/* A seal's hint (LATCH_HINT, ms UINT32_MAX): this worker's copy is sealed. */
void ds__seal_hinted(ds_server_t *srv, const char *key, uint32_t len);
/* A write published here whose owner has yet to record it (begin at the
 * META_PUT, end at its answer); a LATCH_HINT of the key waits for it:
 * ds__inflight_wait holds p until the key has no write in flight (false:
 * none, p not held). */
void ds__inflight_begin(ds_server_t *srv, const char *k, uint32_t kl);
void ds__inflight_end(ds_server_t *srv, const char *k, uint32_t kl);
bool ds__inflight_wait(ds_server_t *srv, ds_pend_t *p, const char *k, uint32_t kl);

/* cluster_meta.c: the owner's location table */
ds_meta_t *ds__meta_new(void);
void ds__meta_free(ds_meta_t *m);
/* Location of a key: 1 with loc, size and version set, 0 when unknown. */
int ds__meta_find(ds_meta_t *m, const char *key, size_t len, const char **loc, uint64_t *size,
                  uint64_t *version);
/* Records loc as the key's current copy; the superseded locations and their
 * versions go to cb (to be dropped). */
void ds__meta_put(ds_meta_t *m, const char *key, size_t len, const char *loc, uint64_t size,
                  uint64_t version, void (*cb)(void *ctx, const char *loc, uint64_t version),
                  void *ctx);
/* Removes one location (if its version is <= version) or, loc NULL, the
 * whole key, reporting the removed locations to cb. */
void ds__meta_del(ds_meta_t *m, const char *key, size_t len, const char *loc, uint64_t version,
                  void (*cb)(void *ctx, const char *loc, uint64_t version), void *ctx);
/* Calls fn with every key's current location: its newest full copy held
 * elsewhere than `avoid` (a worker leaving), else avoid's own. fn must not
 * change the table. */
void ds__meta_foreach(ds_meta_t *m, const char *avoid,
                      void (*fn)(void *ctx, const char *key, uint32_t len, const char *loc,
                                 uint64_t size, uint64_t version),
                      void *ctx);
/* Forgets every key that self owns on neither ring. */
void ds__meta_prune_rings(ds_meta_t *m, const char *self, const ds_ring_t *a, const ds_ring_t *b);
/* Forgets every location on a member, and every key this worker no longer owns. */
void ds__meta_prune(ds_meta_t *m, ds_server_t *srv, const char *dead_member);
uint64_t ds__meta_count(const ds_meta_t *m);
/* Copies of one write a key's entry holds at most (origin, replicas, hot copies). */
#define DS_META_MAX_LOCS 8
/* ds__meta_put for a write made at origin (origin_version there) that asked
 * for want copies; loc is its first copy (the origin, unless the origin is
 * gone and a replica registers it again). */
void ds__meta_put_write(ds_meta_t *m, const char *key, size_t len, const char *origin,
                        uint64_t origin_version, uint32_t want, const char *loc, uint64_t size,
                        uint64_t version, void (*cb)(void *ctx, const char *loc, uint64_t version),
                        void *ctx);
/* The key's current write: 1 with its origin, origin version and wanted copies. */
int ds__meta_write(ds_meta_t *m, const char *key, size_t len, const char **origin,
                   uint64_t *origin_version, uint32_t *want);
/* Adds a full copy at loc (its version there) of the write origin@origin_version:
 * 1 when recorded, 0 when the key's current write is another one. */
int ds__meta_add(ds_meta_t *m, const char *key, size_t len, const char *origin,
                 uint64_t origin_version, const char *loc, uint64_t size, uint64_t version);
/* Adds a hot copy at loc of the full copy src@src_version: 1 when recorded,
 * 0 when that copy is no longer current. Hot copies are reported to the
 * drop callbacks with version 0. */
int ds__meta_add_hot(ds_meta_t *m, const char *key, size_t len, const char *src,
                     uint64_t src_version, const char *loc);
/* The key's full copies (hot ones left out): up to cap of them into addrs
 * and versions, their value size into *size; returns how many there are. */
uint32_t ds__meta_copies(ds_meta_t *m, const char *key, size_t len, const char **addrs,
                         uint64_t *versions, uint32_t cap, uint64_t *size);
/* Calls fn for every key with at least one and fewer than the wanted full
 * copies. fn must not change the table. */
void ds__meta_foreach_short(ds_meta_t *m,
                            void (*fn)(void *ctx, const char *key, uint32_t len, uint32_t want,
                                       uint32_t have),
                            void *ctx);

/* cluster_ops.c: the operations that consult peers (ds_remote_t's hooks) */
void ds__cluster_get(ds_server_t *srv, ds_req_t *r, int32_t wait_ms, uint8_t flags,
                     const char *const *keys, const uint32_t *lens, uint32_t n);
/* With nx the owners refuse keys that live on another worker; those local
 * copies are rolled back and answer K_OC_KEY_ALREADY_EXIST. */
void ds__cluster_published(ds_server_t *srv, ds_req_t *r, ds_obj_t **objs, const uint32_t *status,
                           uint32_t n, bool nx, const char *first_err);
/* Subscribe-waits whose owner died (cluster_ops.c): re-sent to the key's
 * new owner once the ring has dropped the dead one, within the GET's wait.
 * tick returns its next deadline (0 = none); destroy ends them all. */
uint64_t ds__cluster_rewait_tick(ds_server_t *srv, uint64_t now);
void ds__cluster_rewait_destroy(ds_server_t *srv);
struct ds_rewait **ds__cluster_rewait_slot(ds_server_t *srv);
void ds__cluster_keys_op(ds_server_t *srv, ds_req_t *r, const char *const *keys,
                         const uint32_t *lens, uint32_t n, uint32_t ttl);
/* cluster_ucx.c: pulls over UCX (--enable_rdma) */
typedef struct ds_ucx ds_ucx_t;
typedef struct ds_pconn ds_pconn_t;
/* This worker's UCX data plane; NULL without --enable_rdma. */
ds_ucx_t *ds__cluster_ucx(ds_server_t *srv);
/* The UCX address (hex) member addr published; NULL when it has none. */
const char *ds__cluster_ucx_address_of(ds_server_t *srv, const char *addr);
/* Turns a pull job (addr, dst, dst_len set) into a UCX_PULL of key when
 * this worker and the owner both run UCX and the value is large; false
 * leaves it a GET. */
bool ds__cluster_ucx_job(ds_server_t *srv, ds_job_t *j, const char *key, uint32_t kl);
/* On a job thread: runs a UCX_PULL over pc. *pc_ok false: pc is broken. */
void ds__cluster_ucx_run(ds_ucx_t *u, ds_pconn_t *pc, ds_job_t *j, uint64_t dl, bool *pc_ok);
/* The owner's side of UCX_PULL (on the loop). */
void ds__cluster_ucx_pull(ds_server_t *srv, ds_req_t *r);

/* cluster_migrate.c: the planned exit (SHUTDOWN in a cluster) and the
 * moves it makes (MIGRATE at the receiver, META_MOVE at the owner) */
void ds__migrate_leave(ds_server_t *srv, ds_req_t *r);
void ds__migrate_peer_op(ds_server_t *srv, ds_req_t *r);
/* Paces and advances the exit; returns its next deadline (0 = none). */
uint64_t ds__migrate_tick(ds_server_t *srv, uint64_t now);
/* Once this worker leaving the cluster has handed its metadata over: the
 * key's owner on the ring without it; NULL before that or when not leaving. */
const char *ds__migrate_next_owner(ds_server_t *srv, const char *key, size_t len);
void ds__migrate_destroy(ds_server_t *srv);
/* A MIGRATE of n objects (bytes in all) to `to`, from this worker; the
 * caller adds the n objects with ds__migrate_job_item and submits it. The
 * answer: str err, n, n*u32 status (wire.h). */
ds_job_t *ds__migrate_job(ds_server_t *srv, const char *to, uint32_t n, uint64_t bytes,
                          void (*done)(ds_job_t *));
void ds__migrate_job_item(ds_job_t *j, const char *key, uint32_t kl, uint64_t size,
                          uint64_t version, uint8_t mode, uint32_t ttl_s);
/* cluster_rebalance.c: --enable_memory_rebalance. ring_changed starts a
 * round when a member joined (old: the ring before); tick paces it and
 * returns its next deadline (0 = none); peer_op answers USAGE. */
void ds__rebal_ring_changed(ds_server_t *srv, const ds_ring_t *old);
uint64_t ds__rebal_tick(ds_server_t *srv, uint64_t now);
void ds__rebal_peer_op(ds_server_t *srv, ds_req_t *r);
void ds__rebal_stats(ds_server_t *srv, struct cJSON *cl);
void ds__rebal_destroy(ds_server_t *srv);
struct ds_rebal **ds__cluster_rebal_slot(ds_server_t *srv);
/* True when o is a copy the replication tables track (a replica of a
 * write held elsewhere too, or a hot copy): those stay where they are. */
bool ds__repl_tracked(ds_server_t *srv, const ds_obj_t *o);
/* Bytes of the hot copies this worker keeps (evictable caches). */
uint64_t ds__repl_hot_bytes(ds_server_t *srv);
/* cluster.c: the membership thread revokes this worker's lease and stops
 * renewing it; withdrawn once it did. The exit's state lives in the slot. */
void ds__cluster_withdraw(ds_server_t *srv);
bool ds__cluster_withdrawn(ds_server_t *srv);
struct ds_leave **ds__cluster_leave_slot(ds_server_t *srv);

/* cluster_auth.c: the acceptor's side of PEER_AUTH (on the loop) */
void ds__cluster_peer_auth(ds_server_t *srv, ds_req_t *r);

/* cluster_owner.c: LOCATE, META_PUT, META_DEL and DROP (and PEER_AUTH's dispatch) */
/* The owner drops superseded copies: a DROP (HOT_DROP for a hot copy,
 * version 0) to each location but except, as jobs of p. */
typedef struct {
    ds_pend_t *p; /* NULL: the drops are sent without waiting for them (srv set) */
    ds_server_t *srv;
    const char *key;
    uint32_t keylen;
    const char *except; /* the worker that asked: it has handled its own copy */
} ds_drop_ctx_t;
void ds__owner_queue_drop(void *ctx, const char *loc, uint64_t version);
void ds__cluster_peer_op(ds_server_t *srv, ds_req_t *r);
/* A local copy left the table by eviction or expiry: tell its owner. */
void ds__cluster_gone(ds_server_t *srv, const ds_obj_t *o);
/* The member list changed: re-register local keys whose owner changed
 * (old_ring NULL: every local key, after this worker was out of the ring).
 * A re-registration never supersedes a copy published elsewhere meanwhile. */
void ds__cluster_ring_changed(ds_server_t *srv, const ds_ring_t *old_ring);

/* cluster_stream.c: streams across workers (the ds_remote_t stream hooks,
 * SC_PEER_REG and SC_PEER_QUERY at the owner, STATS cluster.streams) */
void ds__cluster_stream_reg(ds_server_t *srv, const char *name, uint32_t len, uint32_t producers,
                            uint32_t consumers, ds_req_t *r, uint64_t handle);
bool ds__cluster_stream_room(ds_server_t *srv);
void ds__cluster_stream_forward(ds_server_t *srv, const char *name, uint32_t len,
                                const char *origin, uint32_t ol, const uint8_t *const *els,
                                const uint32_t *lens, uint32_t n);
void ds__cluster_stream_query(ds_server_t *srv, ds_req_t *r, const char *name, uint32_t len);
void ds__cluster_stream_delete(ds_server_t *srv, ds_req_t *r, const char *name, uint32_t len);
void ds__cluster_stream_peer_op(ds_server_t *srv, ds_req_t *r);
void ds__cluster_stream_stats(ds_server_t *srv, struct cJSON *cl);
void ds__cluster_stream_free(ds_server_t *srv);
/* cluster_repl.c: memory replicas (--replica_num) and hot copies
 * (--enable_data_replication) */
ds_repl_t *ds__repl_new(ds_server_t *srv);
void ds__repl_free(ds_repl_t *rp);
/* How many workers must hold a write before it is answered (the flag,
 * capped at the member count). */
uint32_t ds__repl_want(ds_server_t *srv);
/* SET/PUBLISH with replicas: pushes each published object to want - 1 other
 * members, then records all copies at the owners, then answers. */
void ds__repl_published(ds_server_t *srv, ds_req_t *r, ds_obj_t **objs, const uint32_t *status,
                        uint32_t n, bool nx, const char *first_err, uint32_t want);
/* The owner's and holders' side of REPL_PUT, REPL_META, HOT_ADD, HOT_DROP, REPL_COPY. */
void ds__repl_peer_op(ds_server_t *srv, ds_req_t *r);
/* A GET pulled obj (CREATING, the pend's reference) from src@src_version:
 * keep it as a hot copy once its owner recorded it. */
void ds__repl_keep_hot(ds_server_t *srv, const char *key, uint32_t keylen, ds_obj_t *obj,
                       const char *src, uint64_t src_version);
/* A hot copy on this worker must go (its write was superseded or deleted). */
void ds__repl_drop_hot(ds_server_t *srv, const char *key, uint32_t keylen);
/* A hot copy of key on its way here (its HOT_ADD unanswered) is not kept:
 * a DROP that overtook the owner's answer means the value it pulled is
 * gone or superseded. */
void ds__repl_cancel_pending_hot(ds_server_t *srv, const char *key, uint32_t keylen);
/* Re-registers o with its new owner when it is a replicated write's copy
 * (true), so the owner records every holder of the write; false: o is not. */
bool ds__repl_rereg(ds_server_t *srv, ds_obj_t *o, const char *owner);
/* After the store walk of a ring change: sends the batched re-registrations
 * and drops the hot copies whose owner changed. */
void ds__repl_rereg_flush(ds_server_t *srv);
/* A member left: the owners' copies of its writes are made again elsewhere
 * (after a short delay, so re-registrations arrive first). */
void ds__repl_member_left(ds_server_t *srv, const char *addr);
uint64_t ds__repl_tick(ds_server_t *srv, uint64_t now);
/* The key's copy here was written here, deleted or left the table: what
 * this worker knew about it as a copy (hot or replica) goes. */
void ds__repl_forget(ds_server_t *srv, const char *key, uint32_t keylen);
/* o is a hot copy (a cache of a write made elsewhere). */
bool ds__repl_is_hot(ds_server_t *srv, const ds_obj_t *o);
/* Counters for STATS. */
void ds__repl_stats(ds_server_t *srv, struct cJSON *cl);

#endif
