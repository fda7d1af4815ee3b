/* What the files of the cluster's latches and global references share
 * (cluster_hold.c and cluster_hold_*.c; the design is in cluster_hold.c):
 * the per-worker state and the helpers that apply holds.
 *
 * Each file is one section of the design, and its functions call the
 * helpers by their short names; the names below map them to internal
 * (ds__) linkage names. */
#ifndef DS_WORKER_CLUSTER_CLUSTER_HOLD_INT_H
#define DS_WORKER_CLUSTER_CLUSTER_HOLD_INT_H

#include "worker/cluster/cluster_int.h"

#define HINT_BUCKETS 256u
#define MIRROR_BUCKETS 1024u
/* OWNED's op with this bit: a rebuild (the owner does not check that the
 * key is stored: its location may not be registered with it yet). */
#define OWNED_REBUILD 0x8000u

/* KIND_SEEN (key "") marks a session that took holds at other owners: its
 * end is told to every member even when it released them all (the owners
 * then forget its holder). */
enum { KIND_READ = 0, KIND_WRITE = 1, KIND_REF = 2, KIND_SEEN = 3 };

/* A holder at this owner that is a session of another worker. */
typedef struct rholder {
    struct rholder *next;
    uint64_t sid;
    char addr[300];
} rholder_t;

/* A key some owner said is latched until `until`. */
typedef struct hint {
    struct hint *next;
    uint64_t until;
    uint64_t stamp; /* ds_holds' hint_stamp when last put */
    uint32_t len;
    char key[];
} hint_t;

/* What one of this worker's sessions holds on a key at its owner. */
typedef struct mirror {
    struct mirror *next;
    uint64_t sid;
    uint64_t until; /* latches: the latest deadline */
    uint32_t count;
    uint8_t kind;
    uint32_t len;
    char key[];
} mirror_t;

/* A LATCH_WAIT waiting for the rebuild (its parked request). */
typedef struct rb_wait {
    struct rb_wait *next;
    ds_req_t *d;
} rb_wait_t;

/* A member's last REBUILD_DONE: what it sent for the ring ring_id is in. */
typedef struct done_peer {
    struct done_peer *next;
    uint64_t ring_id;
    char addr[300];
} done_peer_t;

struct ds_holds {
    rholder_t *holders;
    hint_t *hints[HINT_BUCKETS];
    uint32_t nhints;
    uint64_t hint_stamp; /* counts hint_puts */
    mirror_t *mirror[MIRROR_BUCKETS];
    uint32_t nmirror;
    /* LATCH_WAITs on the job threads, and those queued behind them (FIFO,
     * linked by next, each counted in its pend already) */
    uint32_t waits;
    ds_job_t *wait_head, *wait_tail;
    /* The rebuild after a ring change (cluster_hold_ring.c): the ring before
     * the earliest change not yet rebuilt here (NULL: none) and when the
     * wait for it ends regardless; each member's last REBUILD_DONE; this
     * worker's rebuild jobs not yet answered, and whether its own
     * REBUILD_DONE goes out once they are. */
    ds_ring_t *rb_old;
    uint64_t rb_until;
    /* LATCH_WAITs of keys being rebuilt here, answered once it is done
     * (parked requests; the list's nodes are rb_wait_t) */
    struct rb_wait *rb_waits;
    done_peer_t *done;
    uint32_t rb_out;
    bool rb_due;
};

typedef struct {
    const char **keys;
    uint32_t *lens;
    uint64_t *until;
    uint32_t n, cap;
} grants_t;

#define holds ds__hold_holds
#define is_self ds__hold_is_self
#define rholder_find ds__hold_rholder_find
#define rholder_get ds__hold_rholder_get
#define holders_end ds__hold_holders_end
#define hint_bucket ds__hold_hint_bucket
#define hint_put ds__hold_hint_put
#define hinted ds__hold_hinted
#define mirror_find ds__hold_mirror_find
#define mirror_note ds__hold_mirror_note
#define op_kind ds__hold_op_kind
#define grant_add ds__hold_grant_add
#define grants_free ds__hold_grants_free
#define hints_send ds__hold_hints_send
#define apply_one ds__hold_apply_one
#define op_ok ds__hold_op_ok
#define pend_err ds__hold_pend_err
#define rebuild_done_op ds__hold_rebuild_done_op
#define rebuild_park ds__hold_rebuild_park
#define latch_wait_op ds__hold_latch_wait_op
#define read_sender ds__hold_read_sender

ds_holds_t *holds(ds_server_t *srv);
/* Starts reading r's meta into *rb: a request between workers opens with
 * the sender's address (*addr; its length returned, 0 when absent) and an
 * id. */
uint32_t read_sender(ds_rbuf_t *rb, const ds_req_t *r, const char **addr, uint64_t *id);
bool is_self(ds_server_t *srv, const char *addr);
rholder_t *rholder_find(ds_holds_t *h, const char *addr, uint32_t al, uint64_t sid);
rholder_t *rholder_get(ds_holds_t *h, const char *addr, uint32_t al, uint64_t sid);
void holders_end(ds_server_t *srv, const char *addr, uint32_t al, uint64_t sid);
uint32_t hint_bucket(const char *k, uint32_t kl);
void hint_put(ds_holds_t *h, const char *k, uint32_t kl, uint64_t until);
bool hinted(ds_holds_t *h, const char *k, uint32_t kl, uint64_t now);
mirror_t **mirror_find(ds_holds_t *h, uint64_t sid, uint8_t kind, const char *k, uint32_t kl);
void mirror_note(ds_holds_t *h, uint64_t sid, uint8_t kind, const char *k, uint32_t kl, int delta,
                 uint64_t until);
uint8_t op_kind(uint16_t op);
void grant_add(grants_t *g, const char *k, uint32_t kl, uint64_t until);
void grants_free(grants_t *g);
void hints_send(ds_server_t *srv, ds_pend_t *p, const grants_t *g);
ds_status_t apply_one(ds_server_t *srv, const void *holder, uint16_t op, int32_t arg,
                      bool check_exists, const char *k, uint32_t kl, uint32_t *count,
                      uint64_t *until, char *msg, size_t cap);
bool op_ok(uint16_t op);
void pend_err(ds_pend_t *p, uint32_t i, const char *msg);
/* REBUILD_DONE from another member. */
void rebuild_done_op(ds_server_t *srv, ds_req_t *r);
/* A LATCH_WAIT naming a key being rebuilt here waits for the rebuild
 * (false: out of memory, answer it now); latch_wait_op handles it then. */
bool rebuild_park(ds_server_t *srv, ds_req_t *r);
void latch_wait_op(ds_server_t *srv, ds_req_t *r);

#endif
