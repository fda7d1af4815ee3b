/* What the files of the cluster's copies share (cluster_repl.c and
 * cluster_repl_*.c; the design is in cluster_repl.c): the copies table and
 * the helpers that several sections use. Loop thread only. */
#ifndef DS_WORKER_CLUSTER_CLUSTER_REPL_INT_H
#define DS_WORKER_CLUSTER_CLUSTER_REPL_INT_H

#include "worker/cluster/cluster_int.h"

/* How long after a member left the owners wait for re-registrations before
 * they make lost copies again. */
#define DS_REPL_REPAIR_DELAY_MS 1500
/* Copies made again per round; the rest wait for the next round. */
#define DS_REPL_REPAIR_BATCH 512

typedef enum { COPY_WRITE = 1, COPY_HOT_PENDING, COPY_HOT } copy_kind_t;

/* What this worker knows about one of its copies. */
typedef struct copy {
    ds_dict_node_t node;
    uint8_t kind;
    bool cancelled;          /* HOT_PENDING: dropped before the owner answered */
    uint64_t version;        /* the local object's version (WRITE, HOT) */
    const char *origin;      /* WRITE: the write (interned) */
    uint64_t origin_version; /* WRITE */
    uint32_t want;           /* WRITE: copies it asked for */
    ds_obj_t *obj;           /* HOT_PENDING: the pulled object (a reference) */
    const char *src;         /* HOT, HOT_PENDING: the worker it was pulled from (interned) */
    uint64_t size;           /* HOT: the object's size (counted in hot_bytes) */
    uint32_t keylen;
    char key[];
} copy_t;

struct ds_repl {
    ds_server_t *srv;
    ds_dict_t copies;
    char **names; /* interned addresses */
    size_t nnames;
    uint64_t repair_due; /* 0 = none */
    uint32_t repairs_out;
    /* hot copies whose owner changed, dropped after the store walk */
    char **stale;
    uint32_t *stale_len;
    size_t nstale, cap_stale;
    /* re-registrations being batched, one job per new owner */
    ds_job_t *rereg[16];
    uint32_t rereg_count[16];
    size_t rereg_at[16]; /* where each batch's count goes */
    /* counters */
    uint64_t pushes, received, push_failures, repairs, hot_kept, hot_refused, hot_dropped;
    uint64_t nhot;      /* COPY_HOT entries */
    uint64_t hot_bytes; /* and their objects' bytes */
};

/* The holders of one write, as REPL_META names them. */
typedef struct {
    uint32_t nrep;
    const char *addr[DS_META_MAX_LOCS]; /* interned */
    uint64_t version[DS_META_MAX_LOCS];
} holders_t;

/* Helpers several sections use. */
/* Up to max members other than the holders named in skip (nskip), in the
 * order of the ring's points from the key's hash: where its copies go. */
uint32_t ds__repl_pick_targets(ds_server_t *srv, const char *key, size_t len, const char **skip,
                               uint32_t nskip, const char **out, uint32_t max);
const char *ds__repl_intern(ds_repl_t *rp, const char *s, size_t len);
copy_t *ds__repl_copy_find(ds_repl_t *rp, const char *key, size_t len);
void ds__repl_copy_remove(ds_repl_t *rp, copy_t *c);
copy_t *ds__repl_copy_set(ds_repl_t *rp, const char *key, size_t len, copy_kind_t kind);
ds_job_t *ds__repl_push_job(ds_server_t *srv, ds_pend_t *p, const char *target, ds_obj_t *o,
                            const char *origin, uint64_t origin_version, uint32_t want,
                            void (*done)(ds_job_t *));
void ds__repl_meta_entry(ds_wbuf_t *w, const char *key, uint32_t kl, uint64_t size,
                         uint64_t origin_version, uint32_t want, const holders_t *h);
void ds__repl_schedule_repair(ds_repl_t *rp, uint64_t delay_ms);
void ds__repl_stale_add(ds_repl_t *rp, const char *key, uint32_t len);
void ds__repl_op_put(ds_server_t *srv, ds_req_t *r);
void ds__repl_op_meta(ds_server_t *srv, ds_req_t *r);
void ds__repl_op_copy(ds_server_t *srv, ds_req_t *r);
void ds__repl_op_hot_add(ds_server_t *srv, ds_req_t *r);
void ds__repl_op_hot_drop(ds_server_t *srv, ds_req_t *r);

#endif
