/* Subscribe-gets: requests waiting for keys to be published. A wait parks
 * its request (net/request.h) and subscribes to each missing key in a table
 * of the keys waited on (the intrusive hash table of common/dict.h), each
 * key holding the list of its subscriptions, and in a deadline heap.
 *
 * Waiters are resumed by the loop, never by the publisher (Redis's
 * handleClientsBlockedOnKeys). A publish only marks ready the waits that now
 * have every key: it takes them out of the table and the heap and queues
 * them on the table's ready list; the deadline sweep does the same with the
 * waits whose time is up. ds__subs_run_ready, which the worker calls from
 * the loop's after-event hook before resuming connections, hands each one to
 * the callback its owner registered, which answers with what the store holds
 * then (a GET whose key was deleted again meanwhile waits on, as a Redis
 * client blocked on a key does). So a publishing handler has answered (or parked) its own request
 * before any waiter runs, a key published twice in one event completes its
 * waits once, with the latest value, and a wait on several keys completes
 * when the last of them arrives. A wait whose connection closes while it is
 * on the ready list leaves it from its cancel callback. Nothing polls.
 *
 * Two limits bound the keys waited on: --max_pending_subscriptions for the
 * table, and --max_pending_subscriptions_per_client for each client session,
 * so that one client (a get of many keys never set, repeated) cannot take
 * every slot and starve the others. A wait past either is refused, and
 * ds__subs_refusal says which limit and by how much. Requests from peer
 * workers (DS_FLAG_PEER) count toward the table's limit only: they carry
 * many clients' waits.
 *
 * The worker keeps two tables: GETs wait on keys published on this worker,
 * the cluster's LOCATEs on keys whose location the owner learns. */
#ifndef DS_WORKER_OPS_SUBS_H
#define DS_WORKER_OPS_SUBS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/dict.h"
#include "worker/net/request.h"

struct ds_subs_owner;
typedef struct ds_wait ds_wait_t;

typedef struct {
    ds_dict_t keys;                     /* the keys waited on: their subscriptions */
    uint32_t count;                     /* subscriptions (a wait's keys, summed) */
    uint64_t reserved;                  /* keys of waits still registering, not yet subscribed */
    ds_wait_t *reg_head, *reg_tail;     /* waits still registering, oldest first */
    ds_wait_t **heap;                   /* waiting, by deadline */
    uint32_t n, cap;                    /* waits in the heap */
    ds_wait_t *ready_head, *ready_tail; /* marked ready, in order, not yet completed */
    ds_wait_t *gone;                    /* cancelled, still leaving the table a slice a turn */
    uint64_t max;                       /* --max_pending_subscriptions */
    uint64_t per_client;                /* --max_pending_subscriptions_per_client (resolved) */
    ds_dict_t owners;                   /* keys waited on, by client session id */
    struct ds_subs_owner *spare_owner;  /* allocated ahead, for a session's first wait */
    bool ok;                            /* the tables were allocated */
    char refusal[256];                  /* why the last ds__subs_wait refused, "" if not a limit */
} ds_subs_t;

/* The wait of d is over (all keys published, or timed_out): answer d, or
 * wait again until deadline_ms (the wait's own) if the store no longer
 * holds what was published. */
typedef void (*ds_wait_done_fn)(void *ctx, ds_req_t *d, bool timed_out, uint64_t deadline_ms);

/* per_client 0: a quarter of max_subscriptions (at least 1). */
void ds__subs_init(ds_subs_t *s, uint64_t max_subscriptions, uint64_t per_client);
/* Frees every wait, ready ones included, without their callbacks (their
 * requests must have been ended: call after the connections are closed). */
void ds__subs_destroy(ds_subs_t *s);
/* Parks r until every key is published or deadline_ms passes; keys are
 * copied. r may be parked already (a GET that loaded keys from disk): the
 * wait then takes it over. false when a subscription limit is reached
 * (ds__subs_refusal says which) or memory is short: r is then not parked
 * (or still parked as it was), the caller answers it. */
bool ds__subs_wait(ds_subs_t *s, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                   uint32_t nkeys, uint64_t deadline_ms, ds_wait_done_fn done, void *ctx);
/* Whether the store holds key now (a wait subscribes only to keys missing). */
typedef bool (*ds_subs_present_fn)(void *ctx, const char *key, uint32_t len);
/* Keys of a wait registered per loop turn (ds__subs_wait_keys). A key
 * costs a store lookup and a subscription (~0.2-0.4 us), so a slice holds
 * other clients back for about one small request's round trip at most. */
#define DS_SUB_SLICE 64u
/* Subscriptions of a completed wait taken out of the table per call of
 * ds__subs_run_ready (~0.1 us each). */
#define DS_SUB_UNLINK_SLICE 256u
/* ds__subs_wait for a wait of many keys, registered DS_SUB_SLICE keys per
 * loop turn so that other clients are served between slices: r's metadata
 * holds nkeys wire strings (u32 length, bytes; checked by the caller) from
 * offset pos, and each key present(pctx) says is missing when its slice
 * runs is subscribed to. The wait is admitted (or refused, at once, with
 * nothing else done: ds__subs_refusal) on the keys it names, which are
 * reserved against both limits until registration ends; the keys found
 * present then give their room back. r is parked at once (its connection
 * reads nothing more meanwhile, so its later requests keep their order); a
 * key published between slices counts as arrived; once every key is
 * registered the wait completes as any other (done), at once if nothing
 * was missing. false when refused or out of memory: r is then not parked
 * (or still parked as it was), the caller answers it. */
bool ds__subs_wait_keys(ds_subs_t *s, ds_req_t *r, size_t pos, uint32_t nkeys, uint64_t deadline_ms,
                        ds_wait_done_fn done, void *ctx, ds_subs_present_fn present, void *pctx);
/* After ds__subs_wait refused: the limit it hit, as a message for the
 * client naming the flag, or NULL when memory was short instead. */
const char *ds__subs_refusal(const ds_subs_t *s);
/* A key was published: marks ready the waits that now have every key. Runs
 * no callback. */
void ds__subs_publish(ds_subs_t *s, const char *key, size_t len);
/* Registers the next slice of each wait still registering (oldest
 * first), takes the next slice of each cancelled wait's subscriptions out
 * of the table, then marks ready the waits whose deadline passed (as timed
 * out); returns now_ms while either kind is left (the loop must not
 * sleep), else the next deadline or 0. Runs no callback. */
uint64_t ds__subs_expire(ds_subs_t *s, uint64_t now_ms);
/* True while waits are marked ready (the loop must not sleep). */
bool ds__subs_ready_pending(const ds_subs_t *s);
/* Completes the ready waits, in the order they became ready: each one's
 * callback answers its request once its subscriptions are out of the
 * table (a slice a call for a wait of many keys: those are left on the
 * list for the next call). For the loop's after-event hook. */
void ds__subs_run_ready(ds_subs_t *s);

#endif
