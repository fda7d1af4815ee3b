/* Subscribe-gets (see subs.h). */
#include "worker/ops/subs.h"

#include "common/hash.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ds_sub {
    struct ds_sub *next, *prev;
    ds_wait_t *w;
    const char *key; /* points into w->keys */
    uint32_t len;
    uint32_t hash;
    bool done;
    bool linked;
};

/* The keys one client session waits on (its wait's nsubs summed). */
struct ds_subs_owner {
    struct ds_subs_owner *next;
    uint64_t id; /* the session's id */
    uint64_t keys;
};

struct ds_wait {
    ds_subs_t *ss;
    uint64_t owner; /* the session counted for it, 0: none (a peer's request) */
    ds_req_t *req;  /* deferred */
    ds_wait_done_fn done;
    void *ctx;
    uint64_t deadline_ms;
    uint32_t missing;
    uint32_t nsubs;
    struct ds_sub *subs;
    char *keys; /* the subscribed keys' bytes */
    int32_t heap_idx;
    bool ready; /* collected by a publish, about to complete */
};

void ds__subs_init(ds_subs_t *ss, uint64_t max_subscriptions, uint64_t per_client)
{
    memset(ss, 0, sizeof(*ss));
    ss->max = max_subscriptions;
    ss->per_client = per_client ? per_client : (max_subscriptions + 3) / 4;
    ss->nbuckets = 1024;
    ss->buckets = calloc(ss->nbuckets, sizeof(*ss->buckets));
    ss->nowners = 256;
    ss->owners = calloc(ss->nowners, sizeof(*ss->owners));
}

/* ---- keys waited on per client session ---- */

static struct ds_subs_owner **owner_slot(ds_subs_t *ss, uint64_t id)
{
    struct ds_subs_owner **p = &ss->owners[(id ^ (id >> 32)) & (ss->nowners - 1)];
    while (*p && (*p)->id != id)
        p = &(*p)->next;
    return p;
}

/* Counts keys for the session id; node is a fresh entry to use if the
 * session has none (taken: *node set to NULL). */
static void owner_add(ds_subs_t *ss, uint64_t id, uint64_t keys, struct ds_subs_owner **node)
{
    struct ds_subs_owner **p = owner_slot(ss, id);
    if (*p == NULL) {
        *p = *node;
        *node = NULL;
        (*p)->next = NULL;
        (*p)->id = id;
        (*p)->keys = 0;
    }
    (*p)->keys += keys;
}

static void owner_sub(ds_subs_t *ss, uint64_t id, uint64_t keys)
{
    struct ds_subs_owner **p = owner_slot(ss, id), *o = *p;
    if (o == NULL) return;
    o->keys -= keys < o->keys ? keys : o->keys;
    if (o->keys > 0) return;
    *p = o->next;
    free(o);
}

const char *ds__subs_refusal(const ds_subs_t *ss)
{
    return ss->refusal[0] ? ss->refusal : NULL;
}

static void unlink_sub(ds_subs_t *ss, struct ds_sub *s)
{
    if (!s->linked) return;
    if (s->prev)
        s->prev->next = s->next;
    else
        ss->buckets[s->hash & (ss->nbuckets - 1)] = s->next;
    if (s->next) s->next->prev = s->prev;
    s->linked = false;
    ss->count--;
}

static void link_sub(ds_subs_t *ss, struct ds_sub *s)
{
    struct ds_sub **b = &ss->buckets[s->hash & (ss->nbuckets - 1)];
    s->prev = NULL;
    s->next = *b;
    if (*b) (*b)->prev = s;
    *b = s;
    s->linked = true;
    ss->count++;
}

static void grow(ds_subs_t *ss)
{
    uint32_t nb = ss->nbuckets * 2;
    struct ds_sub **nbk = calloc(nb, sizeof(*nbk));
    if (nbk == NULL) return; /* keep the smaller table: slower, still correct */
    struct ds_sub **old = ss->buckets;
    uint32_t on = ss->nbuckets;
    ss->buckets = nbk;
    ss->nbuckets = nb;
    ss->count = 0;
    for (uint32_t i = 0; i < on; i++) {
        struct ds_sub *s = old[i];
        while (s) {
            struct ds_sub *n = s->next;
            link_sub(ss, s);
            s = n;
        }
    }
    free(old);
}

/* ---- deadline heap ---- */

static void heap_swap(ds_subs_t *ss, uint32_t a, uint32_t b)
{
    ds_wait_t *t = ss->heap[a];
    ss->heap[a] = ss->heap[b];
    ss->heap[b] = t;
    ss->heap[a]->heap_idx = (int32_t)a;
    ss->heap[b]->heap_idx = (int32_t)b;
}

static void heap_up(ds_subs_t *ss, uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (ss->heap[p]->deadline_ms <= ss->heap[i]->deadline_ms) break;
        heap_swap(ss, i, p);
        i = p;
    }
}

static void heap_down(ds_subs_t *ss, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < ss->n && ss->heap[l]->deadline_ms < ss->heap[m]->deadline_ms) m = l;
        if (r < ss->n && ss->heap[r]->deadline_ms < ss->heap[m]->deadline_ms) m = r;
        if (m == i) return;
        heap_swap(ss, i, m);
        i = m;
    }
}

static void heap_remove(ds_subs_t *ss, ds_wait_t *w)
{
    if (w->heap_idx < 0) return;
    uint32_t i = (uint32_t)w->heap_idx;
    ss->n--;
    if (i != ss->n) {
        ss->heap[i] = ss->heap[ss->n];
        ss->heap[i]->heap_idx = (int32_t)i;
        heap_down(ss, i);
        heap_up(ss, i);
    }
    w->heap_idx = -1;
}

/* Takes w out of the table and the heap: nothing reaches it any more. */
static void detach(ds_subs_t *ss, ds_wait_t *w)
{
    if (w->owner) owner_sub(ss, w->owner, w->nsubs);
    w->owner = 0;
    heap_remove(ss, w);
    for (uint32_t i = 0; i < w->nsubs; i++)
        unlink_sub(ss, &w->subs[i]);
}

static void free_wait(ds_wait_t *w)
{
    free(w->subs);
    free(w->keys);
    free(w);
}

/* The request's connection closed: forget the wait. */
static void on_cancel(ds_req_t *d, void *ctx)
{
    ds_wait_t *w = ctx;
    detach(w->ss, w);
    free_wait(w);
    ds__req_drop(d);
}

bool ds__subs_wait(ds_subs_t *ss, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                   uint32_t nkeys, uint64_t deadline_ms, ds_wait_done_fn done, void *ctx)
{
    ss->refusal[0] = '\0';
    if (ss->buckets == NULL || ss->owners == NULL) return false;
    if ((uint64_t)ss->count + nkeys > ss->max) {
        snprintf(ss->refusal, sizeof(ss->refusal),
                 "the worker's subscription limit is reached: %" PRIu32
                 " keys are waited on, %" PRIu32
                 " more would pass --max_pending_subscriptions %" PRIu64,
                 ss->count, nkeys, ss->max);
        return false;
    }
    /* Each client session waits on a share of the slots; a peer worker's
     * request carries many clients' waits and counts only above. */
    uint64_t owner = r->session && !(r->flags & DS_FLAG_PEER) ? r->session->id : 0;
    if (owner) {
        struct ds_subs_owner *o = *owner_slot(ss, owner);
        uint64_t held = o ? o->keys : 0;
        if (held + nkeys > ss->per_client) {
            snprintf(ss->refusal, sizeof(ss->refusal),
                     "this client's subscription limit is reached: it waits on %" PRIu64
                     " keys, %" PRIu32 " more would pass --max_pending_subscriptions_per_client "
                     "%" PRIu64,
                     held, nkeys, ss->per_client);
            return false;
        }
        /* the entry it may need, allocated while failing is still simple */
        if (o == NULL && ss->spare_owner == NULL &&
            (ss->spare_owner = malloc(sizeof(*ss->spare_owner))) == NULL)
            return false;
    }
    if (ss->n == ss->cap) {
        uint32_t cap = ss->cap ? ss->cap * 2 : 64;
        ds_wait_t **nh = realloc(ss->heap, cap * sizeof(*nh));
        if (nh == NULL) return false;
        ss->heap = nh;
        ss->cap = cap;
    }
    size_t total = 0;
    for (uint32_t i = 0; i < nkeys; i++)
        total += lens[i];
    ds_wait_t *w = calloc(1, sizeof(*w));
    struct ds_sub *subs = calloc(nkeys, sizeof(*subs));
    char *kb = malloc(total ? total : 1);
    if (w == NULL || subs == NULL || kb == NULL) {
        free(w);
        free(subs);
        free(kb);
        return false;
    }
    /* A GET that loaded keys from disk first comes here parked already. */
    ds_req_t *d = ds__req_park(r, on_cancel, w);
    if (d == NULL) {
        free(w);
        free(subs);
        free(kb);
        return false;
    }
    while (ss->count + nkeys > 2 * ss->nbuckets) {
        uint32_t before = ss->nbuckets;
        grow(ss);
        if (ss->nbuckets == before) break;
    }
    w->ss = ss;
    w->req = d;
    w->done = done;
    w->ctx = ctx;
    w->deadline_ms = deadline_ms;
    w->subs = subs;
    w->keys = kb;
    w->nsubs = nkeys;
    w->missing = nkeys;
    size_t off = 0;
    for (uint32_t i = 0; i < nkeys; i++) {
        memcpy(kb + off, keys[i], lens[i]);
        subs[i].w = w;
        subs[i].key = kb + off;
        subs[i].len = lens[i];
        subs[i].hash = ds__murmur3_32(keys[i], lens[i], 0);
        link_sub(ss, &subs[i]);
        off += lens[i];
    }
    w->owner = owner;
    if (owner) owner_add(ss, owner, nkeys, &ss->spare_owner);
    w->heap_idx = (int32_t)ss->n;
    ss->heap[ss->n++] = w;
    heap_up(ss, (uint32_t)w->heap_idx);
    return true;
}

/* Runs the owner's callback for a wait already detached. */
static void complete(ds_wait_t *w, bool timed_out)
{
    ds_req_t *d = w->req;
    ds_wait_done_fn done = w->done;
    void *ctx = w->ctx;
    free_wait(w);
    ds__req_unpark(d);
    done(ctx, d, timed_out);
}

void ds__subs_publish(ds_subs_t *ss, const char *key, size_t len)
{
    if (ss->count == 0) return;
    uint32_t h = ds__murmur3_32(key, len, 0);
    /* First collect and detach every wait this publish completes, then run
     * their callbacks: a callback may change the table (not today's, but
     * nothing here depends on it not doing so). */
    ds_wait_t *local[64], **ready = local;
    uint32_t nready = 0, cap = 64;
    for (struct ds_sub *s = ss->buckets[h & (ss->nbuckets - 1)]; s; s = s->next) {
        if (s->hash != h || s->len != len || memcmp(s->key, key, len) != 0) continue;
        if (!s->done) {
            s->done = true;
            s->w->missing--;
        }
        if (s->w->missing == 0 && !s->w->ready) {
            if (nready == cap) {
                ds_wait_t **nr = malloc(2 * cap * sizeof(*nr));
                if (nr == NULL) break; /* the rest complete at their deadline */
                memcpy(nr, ready, nready * sizeof(*nr));
                if (ready != local) free(ready);
                ready = nr;
                cap *= 2;
            }
            s->w->ready = true;
            ready[nready++] = s->w;
        }
    }
    for (uint32_t i = 0; i < nready; i++)
        detach(ss, ready[i]);
    for (uint32_t i = 0; i < nready; i++)
        complete(ready[i], false);
    if (ready != local) free(ready);
}

uint64_t ds__subs_expire(ds_subs_t *ss, uint64_t now_ms)
{
    while (ss->n > 0 && ss->heap[0]->deadline_ms <= now_ms) {
        ds_wait_t *w = ss->heap[0];
        detach(ss, w);
        complete(w, true);
    }
    return ss->n ? ss->heap[0]->deadline_ms : 0;
}

void ds__subs_destroy(ds_subs_t *ss)
{
    while (ss->n > 0) {
        ds_wait_t *w = ss->heap[0];
        detach(ss, w);
        ds__req_drop(w->req);
        free_wait(w);
    }
    for (uint32_t i = 0; ss->owners && i < ss->nowners; i++)
        while (ss->owners[i]) {
            struct ds_subs_owner *o = ss->owners[i];
            ss->owners[i] = o->next;
            free(o);
        }
    free(ss->owners);
    free(ss->spare_owner);
    free(ss->heap);
    free(ss->buckets);
    memset(ss, 0, sizeof(*ss));
}
