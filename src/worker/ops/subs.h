/* Subscribe-gets: requests waiting for keys to be published. A wait defers
 * its request (net/request.h) and subscribes to each missing key in a hash
 * table keyed by the key bytes. Publishing a key walks only that key's
 * bucket; a wait that now has every key, or whose deadline passed, is taken
 * out of the table and heap first and then handed to the callback its owner
 * registered, which answers the request. The callback runs from inside the
 * publish (or the deadline sweep), so the answer reflects the store at that
 * moment; the request's connection resumes only after the current event
 * (the request layer sees to that). Nothing polls.
 *
 * Two limits bound the keys waited on: --max_pending_subscriptions for the
 * worker, and --max_pending_subscriptions_per_client for each client session,
 * so that one client (a get of many keys never set, repeated) cannot take
 * every slot and starve the others. A wait past either is refused, and
 * ds__subs_refusal says which limit and by how much. Requests from peer
 * workers (DS_FLAG_PEER) count toward the worker's limit only: they carry
 * many clients' waits. */
#ifndef DS_WORKER_OPS_SUBS_H
#define DS_WORKER_OPS_SUBS_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/net/request.h"

struct ds_sub;
struct ds_subs_owner;
typedef struct ds_wait ds_wait_t;

typedef struct {
    struct ds_sub **buckets;
    uint32_t nbuckets, count;          /* count: subscribed keys */
    ds_wait_t **heap;                  /* by deadline */
    uint32_t n, cap;                   /* waits */
    uint64_t max;                      /* --max_pending_subscriptions */
    uint64_t per_client;               /* --max_pending_subscriptions_per_client (resolved) */
    struct ds_subs_owner **owners;     /* keys waited on, by session id */
    uint32_t nowners;                  /* buckets of owners */
    struct ds_subs_owner *spare_owner; /* allocated ahead, for a session's first wait */
    char refusal[256];                 /* why the last ds__subs_wait refused, "" if not a limit */
} ds_subs_t;

/* The wait of d is over (all keys published, or timed_out): answer d. */
typedef void (*ds_wait_done_fn)(void *ctx, ds_req_t *d, bool timed_out);

/* per_client 0: a quarter of max_subscriptions (at least 1). */
void ds__subs_init(ds_subs_t *s, uint64_t max_subscriptions, uint64_t per_client);
/* Frees every wait (their requests must have been ended: call after the
 * connections are closed). */
void ds__subs_destroy(ds_subs_t *s);
/* Defers r until every key is published or deadline_ms passes; keys are
 * copied. r may be deferred already (a GET that loaded keys from disk):
 * the wait then takes it over. false when a subscription limit is reached
 * (ds__subs_refusal says which) or memory is short: r is then not deferred
 * (or still deferred as it was), the caller answers it. */
bool ds__subs_wait(ds_subs_t *s, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                   uint32_t nkeys, uint64_t deadline_ms, ds_wait_done_fn done, void *ctx);
/* After ds__subs_wait refused: the limit it hit, as a message for the
 * client naming the flag, or NULL when memory was short instead. */
const char *ds__subs_refusal(const ds_subs_t *s);
/* A key was published: completes the waits that now have every key. */
void ds__subs_publish(ds_subs_t *s, const char *key, size_t len);
/* Completes waits whose deadline passed; returns the next deadline or 0. */
uint64_t ds__subs_expire(ds_subs_t *s, uint64_t now_ms);

#endif
