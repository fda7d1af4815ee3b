/* The storage tiers' internals, shared by tier.c (start, stop, the glue
 * SET, GET and DEL call), tier_index.c (the indexes), tier_io.c (the disk
 * queue and its thread), tier_done.c (completions on the loop) and spill.c
 * (spilling, writes waiting for room). Loop-only state unless said
 * otherwise; see tier.h and ../THREADS.md. */
#ifndef DS_WORKER_OPS_TIER_INT_H
#define DS_WORKER_OPS_TIER_INT_H

#include "worker/ops/ops_int.h"
#include "worker/ops/tier.h"

#include "common/dict.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef enum { JOB_PUT, JOB_GET, JOB_DEL, JOB_NOP, JOB_RETTL, JOB_HEAD } job_kind_t;

typedef struct waiter waiter_t;

typedef struct job {
    struct job *next;
    job_kind_t kind;
    ds_obj_t *obj; /* PUT: a reference to read from; GET: the reservation to fill */
    uint8_t *data; /* obj's bytes in the worker's mapping */
    ds_l2_meta_t meta;
    ds_l2_t *be; /* the backend: the L2 or the spill directory */
    bool spill;  /* be is the spill directory */
    char *key;   /* DEL: an owned copy */
    uint32_t keylen;
    uint32_t idx; /* PUT: the key's place in its request */
    waiter_t *w;  /* the request waiting for this job, or NULL */
    int rc;       /* thread: 0, 1 (GET: no object) or -1 */
    /* PUT (write-back): a later write of the key was queued behind it, so
     * the thread skips it (set by the loop, read by the thread) */
    atomic_bool superseded;
    bool skipped; /* thread: it did */
    /* PUT (write-back) that failed: tries so far, and when the next is due
     * (loop clock) while it waits on ds_tier_t.retry */
    uint32_t attempts;
    uint64_t due_ms;
    /* DEL with a waiter: the index entry it removed (in meta), put back if
     * the delete fails, since the copy is then still the key's value */
    bool restore;
    char err[300];
} job_t;

struct waiter {
    ds_req_t *r; /* NULL: nobody to answer */
    uint32_t pending;
    bool is_get;
    void (*resume)(ds_server_t *srv, ds_req_t *d);
    void (*resume_ctx)(ds_server_t *srv, ds_req_t *d, void *ctx); /* instead, with ctx */
    void *ctx;
    ds_obj_t **objs; /* write-through: the published objects (references), for the cluster */
    bool nx;
    uint32_t n;
    uint32_t *st;
    char first[400]; /* a write's first failure; a get's first failed L2 read */
};

typedef struct ent {
    ds_dict_node_t node; /* in its ix_t's table, by key */
    struct job *put;     /* the key's last queued L2 write-back, until it completes */
    uint64_t size, version, ttl_wall_ms;
    uint32_t keylen;
    uint8_t mode;
    char key[];
} ent_t;

/* An index of what a backend holds (loop only). */
typedef struct {
    ds_dict_t table; /* ent_t by key; the table frees those left at ds__tier_ix_free */
    uint64_t bytes;
    uint64_t disk;    /* bytes the files take on disk (disk_of) */
    uint64_t version; /* of entries, to tell a later write apart */
} ix_t;

typedef struct ds_tier {
    ds_l2_t *l2;    /* --l2_cache_type; NULL = none */
    ds_l2_t *spill; /* --spill_directory (an sfs directory emptied at start); NULL = none */
    ix_t ix;        /* what the L2 holds */
    ix_t sx;        /* what the spill directory holds */
    uint64_t spill_limit, spill_inflight;        /* bytes on disk (disk_of) */
    uint64_t spill_high, spill_low;              /* background spilling's watermarks, bytes */
    bool spill_paused;                           /* background spilling passed spill_high */
    struct room *rooms;                          /* writes waiting for room, in arrival order */
    ds_req_t *rerun_req;                         /* the waiting write running again, and */
    uint64_t rerun_deadline;                     /* its deadline */
    bool room_kick;                              /* a spill finished: waiting writes retry */
    uint64_t spill_err_until;                    /* a spill write failed: none until then */
    char spill_err[300];                         /* the last spill write error */
    uint64_t spill_stuck_used, spill_stuck_disk; /* a fruitless background round's figures */
    uint64_t spill_fs_free;
    /* queued L2 writes of WRITE_BACK_L2_CACHE_EVICT objects: each makes its
     * object evictable, so a write that found the arena full waits for them */
    uint32_t evict_writes; /* free on its file system, last looked */
    /* the queue */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *todo, *todo_tail, *done; /* under mu */
    job_t *pend, *pend_tail;        /* loop only: submitted, not yet handed over */
    int done_fd;
    ds_io_t done_io;
    uint64_t depth, cap; /* loop: jobs queued and not yet completed */
    waiter_t *open;      /* write-through writes of the request being answered */
    /* failed write-backs waiting to be tried again, earliest due first; not
     * counted in depth (they hold no place in the queue while they wait) */
    job_t *retry;
    uint64_t retry_pending;
    const char *get_miss; /* while a get's resume runs: its first failed L2 read, or NULL */
    ds_tier_counters_t c;
} ds_tier_t;

/* A write waiting for room (see ds__tier_wait_room). */
typedef struct room {
    struct room *next;
    ds_req_t *d;
    uint64_t deadline;
    void (*rerun)(ds_server_t *srv, ds_req_t *d);
} room_t;

/* What an object's file takes on disk: the value, the backend's header and
 * the key, in 4 KiB blocks (what du counts). */
static inline uint64_t ds__tier_disk_of(uint64_t size, uint32_t keylen)
{
    return (size + 64 + keylen + 4095) & ~(uint64_t)4095;
}

/* Wall-clock milliseconds: the L2's deadlines outlive the process, so
 * they are kept in wall time, not the loop's clock. */
static inline uint64_t ds__tier_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline bool ds__tier_is_l2_mode(uint8_t m)
{
    return m == DS_WRITE_THROUGH_L2_CACHE || m == DS_WRITE_BACK_L2_CACHE ||
           m == DS_WRITE_BACK_L2_CACHE_EVICT;
}

/* tier_index.c */
/* An empty index; false when out of memory. */
bool ds__tier_ix_init(ix_t *x);
/* Frees every entry and the table. */
void ds__tier_ix_free(ix_t *x);
/* The number of entries. */
uint64_t ds__tier_ix_count(const ix_t *x);
ent_t *ds__tier_ix_find(ix_t *x, const char *key, uint32_t keylen);
void ds__tier_ix_remove(ix_t *x, const char *key, uint32_t keylen);
/* Adds or replaces; returns the entry's version (0 when out of memory). */
uint64_t ds__tier_ix_put(ix_t *x, const char *key, uint32_t keylen, const ds_l2_meta_t *m);

/* tier_io.c */
/* The disk I/O thread (arg: the ds_tier_t). */
void *ds__tier_io_thread(void *arg);
/* Queues j on the loop; handed to the thread by ds__tier_submit_flush. */
void ds__tier_submit(ds_tier_t *t, job_t *j);
void ds__tier_submit_flush(ds_tier_t *t);
/* Queues the deletion of key's file in a backend (no index change); the
 * job, or NULL when out of memory. */
job_t *ds__tier_submit_del(ds_tier_t *t, bool spill, const char *key, uint32_t keylen);
waiter_t *ds__tier_open_waiter(ds_tier_t *t);
void ds__tier_del_waited(ds_tier_t *t, const char *key, uint32_t keylen, uint32_t idx,
                         const ent_t *e, bool restore);
void ds__tier_del_failed(ds_server_t *srv, job_t *j);

/* tier_done.c */
/* A waiter's ds__req_park cancel hook. */
void ds__tier_waiter_cancel(ds_req_t *d, void *ctx);
void ds__tier_drop_put(ds_server_t *srv, job_t *j);
/* Queues the retries that are due; returns when the next one is (0 none). */
uint64_t ds__tier_retry_due(ds_server_t *srv, uint64_t now);
/* The completion eventfd's handler (ctx: the server). */
void ds__tier_on_done(void *ctx, uint32_t events);

/* tier.c, for spill.c */
/* Queues o's copy to the spill directory (spill) or the L2, as a
 * write-back; false when out of memory. */
bool ds__tier_queue_put(ds_server_t *srv, ds_obj_t *o, bool spill);

/* spill.c, for tier.c */
/* Opens the spill directory (emptied) and settles its limit and watermarks. */
int ds__spill_open(ds_server_t *srv, char *err, size_t cap);
/* A spill copy's write is done (a completion on the loop). */
void ds__spill_put_done(ds_server_t *srv, job_t *j);
/* Starts a round of spills down to low arena bytes, plus extra bytes a
 * waiting write or read needs (extra 0: the background). */
void ds__spill_round(ds_server_t *srv, uint64_t low, uint64_t extra);
/* The arena's low watermark in bytes. */
uint64_t ds__spill_arena_low(ds_server_t *srv);
/* Runs the waiting writes again: all (now 0, spills finished) or those
 * past their deadline; returns the earliest deadline left (0 none). */
uint64_t ds__spill_rooms_resume(ds_server_t *srv, uint64_t now);
/* At stop: the waiting writes fail. */
void ds__spill_rooms_drop(ds_server_t *srv);

#endif
