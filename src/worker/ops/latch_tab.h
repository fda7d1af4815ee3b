/* The read-latch table: which keys are latched, by which holders (client
 * sessions), until when, within the worker's limits. It does no I/O and
 * knows no requests: latch.c answers RLATCH / UNRLATCH and parks the
 * writers with it; tests/unit/test_latch_tab.c tests it alone.
 *
 * Every operation a write or a loop turn pays for is O(1) or O(log n) in
 * the number of latches: whether a key is latched is one lookup in a hash
 * of latched keys (each with the count of its live latches), and expiry
 * pops a min-heap of deadlines. A release finds the holder's latches on
 * that key through a second hash keyed by (holder, key); dropping a holder
 * walks only its own latches. Holders are found on a list, which has one
 * entry per session that holds latches.
 *
 * A holder whose name is about to be reused (a session that ended, whose
 * memory may hold the next one) can be retired in O(1): its latches keep
 * counting against their keys, writers still wait on them, but the old
 * name no longer owns them, and they are dropped a slice at a time. */
#ifndef DS_WORKER_OPS_LATCH_TAB_H
#define DS_WORKER_OPS_LATCH_TAB_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ds_latch ds_latch_t;
typedef struct ds_latch_key ds_latch_key_t;
typedef struct ds_latch_hk ds_latch_hk_t;
typedef struct ds_latch_holder ds_latch_holder_t;

/* A chained hash table of nodes that start with struct ds_latch_hnode. */
struct ds_latch_hnode {
    struct ds_latch_hnode *next;
    uint32_t hash;
};
typedef struct {
    struct ds_latch_hnode **b;
    uint32_t nb; /* a power of two, or 0 before the first insert */
    uint32_t n;
} ds_latch_htab_t;

typedef struct {
    uint64_t max_per_holder; /* --max_read_latches_per_client */
    uint64_t max_total;      /* --max_read_latches */
    ds_latch_htab_t keys;    /* key -> ds_latch_key_t (count of its latches) */
    ds_latch_htab_t hks;     /* (holder, key) -> ds_latch_hk_t (that holder's latches on it) */
    ds_latch_holder_t *holders;
    ds_latch_t **heap; /* by deadline, earliest first; its size is the number of latches */
    uint32_t n, cap;
} ds_latch_tab_t;

typedef enum {
    DS_LATCH_ADDED = 0,
    DS_LATCH_HOLDER_FULL, /* the holder has max_per_holder latches */
    DS_LATCH_FULL,        /* the worker has max_total latches */
    DS_LATCH_NOMEM,
} ds_latch_add_t;

void ds__latch_tab_init(ds_latch_tab_t *t, uint64_t max_per_holder, uint64_t max_total);
void ds__latch_tab_destroy(ds_latch_tab_t *t);
/* One more latch of holder on key until deadline (ms; the caller's clock).
 * A key may be latched many times, by one holder or several: each counts. */
ds_latch_add_t ds__latch_tab_add(ds_latch_tab_t *t, const void *holder, const char *key,
                                 uint32_t len, uint64_t deadline);
/* Removes the latch holder took last on key: false when it holds none. */
bool ds__latch_tab_release(ds_latch_tab_t *t, const void *holder, const char *key, uint32_t len);
/* Removes every latch of holder; how many there were. */
uint32_t ds__latch_tab_drop_holder(ds_latch_tab_t *t, const void *holder);
/* Renames holder's latches to a name of the table's own, which it returns
 * (NULL when holder has none): holder is then free for a new holder with no
 * latches, and the old ones are dropped with ds__latch_tab_drop_retired or
 * expire. */
const void *ds__latch_tab_retire_holder(ds_latch_tab_t *t, const void *holder);
/* Removes up to max latches of the retired holder name (*gone: how many);
 * true when it has none left. Once its latches are all gone the name finds
 * nothing, or a later retired holder at the same address, whose latches
 * are as much due to go; never a live holder whose name happens to equal
 * it. */
bool ds__latch_tab_drop_retired(ds_latch_tab_t *t, const void *name, uint32_t max, uint32_t *gone);
/* Removes every latch of holder on a key for which drop(ctx, key, len,
 * deadline) is true; how many. */
typedef bool (*ds_latch_drop_fn)(void *ctx, const char *key, uint32_t len, uint64_t deadline);
uint32_t ds__latch_tab_drop_holder_if(ds_latch_tab_t *t, const void *holder, ds_latch_drop_fn drop,
                                      void *ctx);
/* Removes the latches whose deadline is at or before now; how many. */
uint32_t ds__latch_tab_expire(ds_latch_tab_t *t, uint64_t now);
/* The earliest deadline of a latch, 0 when none. */
uint64_t ds__latch_tab_next(const ds_latch_tab_t *t);
/* Whether key has a latch (expired ones count until expire removes them). */
bool ds__latch_tab_held(const ds_latch_tab_t *t, const char *key, uint32_t len);
/* Whether key has a latch of a holder other than holder. */
bool ds__latch_tab_held_by_other(const ds_latch_tab_t *t, const void *holder, const char *key,
                                 uint32_t len);
/* Latches holder has. */
uint32_t ds__latch_tab_holder_count(const ds_latch_tab_t *t, const void *holder);

static inline uint32_t ds__latch_tab_count(const ds_latch_tab_t *t)
{
    return t->n;
}

/* Distinct keys latched. */
static inline uint32_t ds__latch_tab_keys(const ds_latch_tab_t *t)
{
    return t->keys.n;
}

#endif
