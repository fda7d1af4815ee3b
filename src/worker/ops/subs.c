/* Subscribe-gets (see subs.h). */
#include "worker/ops/subs.h"

#include "common/clock.h"
#include "common/hash.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One key waited on, in the keys table: its subscriptions. Goes when the
 * last of them does. */
typedef struct {
    ds_dict_node_t node;
    struct ds_sub *head;
    uint32_t len;
    char key[];
} skey_t;

/* One wait's subscription to one key. */
struct ds_sub {
    struct ds_sub *next, *prev;
    ds_wait_t *w;
    skey_t *k; /* NULL: not in the table */
    bool done; /* the key was published */
};

/* The keys one client session waits on (its waits' nsubs summed). */
struct ds_subs_owner {
    ds_dict_node_t node;
    uint64_t id; /* the session's id */
    uint64_t keys;
};

struct ds_wait {
    ds_subs_t *ss;
    uint64_t owner; /* the session counted for it, 0: none (a peer's request) */
    ds_req_t *req;  /* parked */
    ds_wait_done_fn done;
    void *ctx;
    uint64_t deadline_ms;
    uint32_t missing;
    uint32_t nsubs;
    struct ds_sub *subs;
    int32_t heap_idx;
    bool ready;        /* on the ready list: out of the heap, its subscriptions leaving the table */
    uint32_t unlinked; /* of a ready wait: subscriptions taken out of the table so far */
    uint32_t linked;   /* its subscriptions in the table */
    bool uncounted;    /* detached: its subscriptions left in the table count no more */
    bool gone;         /* cancelled: on the table's gone list until out of the table */
    bool timed_out;    /* made ready by its deadline */
    ds_wait_t *rnext, *rprev;
    /* Registration in slices (ds__subs_wait_keys): on the table's
     * registering list until every key named was read from the request. */
    bool registering;
    bool cut;          /* out of memory subscribing: answered with what there is */
    uint32_t reg_i;    /* keys read so far */
    uint32_t reg_n;    /* keys named */
    size_t reg_pos;    /* where the next one is in req's metadata */
    uint64_t reserved; /* keys named, not yet read: held against the limits */
    ds_subs_present_fn present;
    void *pctx;
    ds_wait_t *reg_next;
};

static bool skey_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const skey_t *k = DS_DICT_ENTRY(n, skey_t, node);
    return k->len == len && memcmp(k->key, key, len) == 0;
}

static bool owner_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const struct ds_subs_owner *o = DS_DICT_ENTRY(n, struct ds_subs_owner, node);
    return len == sizeof(o->id) && memcmp(&o->id, key, len) == 0;
}

static void owner_destroy(ds_dict_node_t *n, void *ctx)
{
    (void)ctx;
    free(DS_DICT_ENTRY(n, struct ds_subs_owner, node));
}

/* The keys table owns no entry: a key goes with its last subscription, and
 * ds__subs_destroy takes every wait out first. */
static const ds_dict_type_t skey_type = {skey_eq, NULL};
static const ds_dict_type_t owner_type = {owner_eq, owner_destroy};

void ds__subs_init(ds_subs_t *ss, uint64_t max_subscriptions, uint64_t per_client)
{
    memset(ss, 0, sizeof(*ss));
    ss->max = max_subscriptions;
    ss->per_client = per_client ? per_client : (max_subscriptions + 3) / 4;
    if (ss->per_client == 0) ss->per_client = 1;
    int a = ds__dict_init(&ss->keys, &skey_type, NULL, 1024);
    int b = ds__dict_init(&ss->owners, &owner_type, NULL, 256);
    ss->ok = a == 0 && b == 0;
}

/* ---- keys waited on per client session ---- */

static uint32_t owner_hash(uint64_t id)
{
    return ds__murmur3_32(&id, sizeof(id), 0);
}

static struct ds_subs_owner *owner_find(ds_subs_t *ss, uint64_t id)
{
    ds_dict_node_t *n = ds__dict_find(&ss->owners, &id, sizeof(id), owner_hash(id));
    return n ? DS_DICT_ENTRY(n, struct ds_subs_owner, node) : NULL;
}

/* Counts keys for the session id; *spare is a fresh entry to use if the
 * session has none (taken: *spare set to NULL). */
static void owner_add(ds_subs_t *ss, uint64_t id, uint64_t keys, struct ds_subs_owner **spare)
{
    struct ds_subs_owner *o = owner_find(ss, id);
    if (o == NULL) {
        o = *spare;
        *spare = NULL;
        o->id = id;
        o->keys = 0;
        ds__dict_add(&ss->owners, &o->node, owner_hash(id));
    }
    o->keys += keys;
}

static void owner_sub(ds_subs_t *ss, uint64_t id, uint64_t keys)
{
    struct ds_subs_owner *o = owner_find(ss, id);
    if (o == NULL) return;
    o->keys -= keys < o->keys ? keys : o->keys;
    if (o->keys > 0) return;
    ds__dict_remove(&ss->owners, &o->node);
    free(o);
}

const char *ds__subs_refusal(const ds_subs_t *ss)
{
    return ss->refusal[0] ? ss->refusal : NULL;
}

/* ---- the keys table ---- */

static void unlink_sub(ds_subs_t *ss, struct ds_sub *s)
{
    skey_t *k = s->k;
    if (k == NULL) return;
    if (s->prev)
        s->prev->next = s->next;
    else
        k->head = s->next;
    if (s->next) s->next->prev = s->prev;
    s->k = NULL;
    s->w->linked--;
    if (!s->w->uncounted) ss->count--;
    if (k->head == NULL) {
        ds__dict_remove(&ss->keys, &k->node);
        free(k);
    }
}

/* Subscribes s to (key, len): -1 when out of memory (s is then not in the
 * table). */
static int link_sub(ds_subs_t *ss, struct ds_sub *s, const char *key, uint32_t len)
{
    uint32_t h = ds__murmur3_32(key, len, 0);
    ds_dict_node_t *n = ds__dict_find(&ss->keys, key, len, h);
    skey_t *k;
    if (n) {
        k = DS_DICT_ENTRY(n, skey_t, node);
    } else {
        k = malloc(sizeof(*k) + (len ? len : 1));
        if (k == NULL) return -1;
        k->head = NULL;
        k->len = len;
        memcpy(k->key, key, len);
        ds__dict_add(&ss->keys, &k->node, h);
    }
    s->prev = NULL;
    s->next = k->head;
    if (k->head) k->head->prev = s;
    k->head = s;
    s->k = k;
    ss->count++;
    s->w->linked++;
    return 0;
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

/* ---- the ready list ---- */

static void ready_push(ds_subs_t *ss, ds_wait_t *w)
{
    w->ready = true;
    w->rnext = NULL;
    w->rprev = ss->ready_tail;
    if (ss->ready_tail)
        ss->ready_tail->rnext = w;
    else
        ss->ready_head = w;
    ss->ready_tail = w;
}

static void ready_unlink(ds_subs_t *ss, ds_wait_t *w)
{
    if (!w->ready) return;
    if (w->rprev)
        w->rprev->rnext = w->rnext;
    else
        ss->ready_head = w->rnext;
    if (w->rnext)
        w->rnext->rprev = w->rprev;
    else
        ss->ready_tail = w->rprev;
    w->rnext = w->rprev = NULL;
    w->ready = false;
}

/* Takes w out of the heap and its keys off its client's count: no deadline
 * reaches it any more. Its subscriptions leave the table with
 * unlink_some. */
static void detach_start(ds_subs_t *ss, ds_wait_t *w)
{
    if (w->owner) owner_sub(ss, w->owner, w->nsubs + w->reserved);
    w->owner = 0;
    ss->reserved -= w->reserved;
    w->reserved = 0;
    heap_remove(ss, w);
    /* Its subscriptions still in the table no longer count as waited on. */
    if (!w->uncounted) ss->count -= w->linked;
    w->uncounted = true;
}

/* Takes up to max more of w's subscriptions out of the table; true when
 * none is left in it. */
static bool unlink_some(ds_subs_t *ss, ds_wait_t *w, uint32_t max)
{
    for (uint32_t end = max > w->nsubs - w->unlinked ? w->nsubs : w->unlinked + max;
         w->unlinked < end; w->unlinked++)
        unlink_sub(ss, &w->subs[w->unlinked]);
    return w->unlinked >= w->nsubs;
}

/* Takes w out of the table and the heap at once: no publish or deadline
 * reaches it any more, and its keys no longer count toward the limits. */
static void detach(ds_subs_t *ss, ds_wait_t *w)
{
    detach_start(ss, w);
    unlink_some(ss, w, UINT32_MAX);
}

/* w has every key, or its time is up: out of the heap, onto the ready
 * list; ds__subs_run_ready takes its subscriptions out of the table, a
 * slice a call (a publish meanwhile skips them), and completes it. */
static void make_ready(ds_subs_t *ss, ds_wait_t *w, bool timed_out)
{
    detach_start(ss, w);
    w->timed_out = timed_out;
    ready_push(ss, w);
}

static void free_wait(ds_wait_t *w)
{
    free(w->subs);
    free(w);
}

/* ---- the registering list ---- */

static void reg_push(ds_subs_t *ss, ds_wait_t *w)
{
    w->reg_next = NULL;
    if (ss->reg_tail)
        ss->reg_tail->reg_next = w;
    else
        ss->reg_head = w;
    ss->reg_tail = w;
}

static void reg_unlink(ds_subs_t *ss, ds_wait_t *w)
{
    ds_wait_t *prev = NULL;
    for (ds_wait_t *x = ss->reg_head; x; prev = x, x = x->reg_next)
        if (x == w) {
            if (prev)
                prev->reg_next = w->reg_next;
            else
                ss->reg_head = w->reg_next;
            if (ss->reg_tail == w) ss->reg_tail = prev;
            w->reg_next = NULL;
            return;
        }
}

/* The request's connection closed: forget the wait, registering, waiting
 * or ready. Its keys count no more at once; a wait of many keys leaves the
 * table DS_SUB_UNLINK_SLICE subscriptions a turn from the gone list (a
 * publish meanwhile skips them). */
static void on_cancel(ds_req_t *d, void *ctx)
{
    ds_wait_t *w = ctx;
    ds_subs_t *ss = w->ss;
    if (w->registering) reg_unlink(ss, w);
    w->registering = false;
    if (w->ready) ready_unlink(ss, w);
    detach_start(ss, w);
    w->req = NULL;
    ds__req_drop(d);
    if (unlink_some(ss, w, DS_SUB_UNLINK_SLICE)) {
        free_wait(w);
        return;
    }
    w->gone = true;
    w->reg_next = ss->gone;
    ss->gone = w;
}

/* One slice of each cancelled wait still in the table; whether any is
 * left. */
static bool gone_run(ds_subs_t *ss, uint32_t max)
{
    for (ds_wait_t **pp = &ss->gone; *pp;) {
        ds_wait_t *w = *pp;
        if (unlink_some(ss, w, max)) {
            *pp = w->reg_next;
            free_wait(w);
        } else {
            pp = &w->reg_next;
        }
    }
    return ss->gone != NULL;
}

/* Whether a wait of nkeys more keys for r fits both limits (the keys of
 * waits still registering count as waited on); *owner is the session it
 * counts for (0: none). On refusal ss->refusal says which limit. */
static bool admit(ds_subs_t *ss, const ds_req_t *r, uint32_t nkeys, uint64_t *owner_out)
{
    ss->refusal[0] = '\0';
    if (!ss->ok) return false;
    uint64_t waited = (uint64_t)ss->count + ss->reserved;
    if (waited + nkeys > ss->max) {
        snprintf(ss->refusal, sizeof(ss->refusal),
                 "the worker's subscription limit is reached: %" PRIu64
                 " keys are waited on, %" PRIu32
                 " more would pass --max_pending_subscriptions %" PRIu64,
                 waited, nkeys, ss->max);
        return false;
    }
    /* Each client session waits on a share of the slots; a peer worker's
     * request carries many clients' waits and counts only above. */
    uint64_t owner = r->session && !(r->flags & DS_FLAG_PEER) ? r->session->id : 0;
    if (owner) {
        struct ds_subs_owner *o = owner_find(ss, owner);
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
    *owner_out = owner;
    return true;
}

/* Room in the heap for one more wait. */
static bool heap_room(ds_subs_t *ss)
{
    if (ss->n < ss->cap) return true;
    uint32_t cap = ss->cap ? ss->cap * 2 : 64;
    ds_wait_t **nh = realloc(ss->heap, cap * sizeof(*nh));
    if (nh == NULL) return false;
    ss->heap = nh;
    ss->cap = cap;
    return true;
}

static void heap_add(ds_subs_t *ss, ds_wait_t *w)
{
    w->heap_idx = (int32_t)ss->n;
    ss->heap[ss->n++] = w;
    heap_up(ss, (uint32_t)w->heap_idx);
}

bool ds__subs_wait(ds_subs_t *ss, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                   uint32_t nkeys, uint64_t deadline_ms, ds_wait_done_fn done, void *ctx)
{
    uint64_t owner = 0;
    if (!admit(ss, r, nkeys, &owner)) return false;
    if (ss->n == ss->cap) {
        uint32_t cap = ss->cap ? ss->cap * 2 : 64;
        ds_wait_t **nh = realloc(ss->heap, cap * sizeof(*nh));
        if (nh == NULL) return false;
        ss->heap = nh;
        ss->cap = cap;
    }
    ds_wait_t *w = calloc(1, sizeof(*w));
    struct ds_sub *subs = calloc(nkeys ? nkeys : 1, sizeof(*subs));
    if (w == NULL || subs == NULL) {
        free(w);
        free(subs);
        return false;
    }
    w->ss = ss;
    w->subs = subs;
    w->nsubs = nkeys;
    w->heap_idx = -1;
    bool linked = true;
    for (uint32_t i = 0; i < nkeys && linked; i++) {
        subs[i].w = w;
        linked = link_sub(ss, &subs[i], keys[i], lens[i]) == 0;
    }
    /* A GET that loaded keys from disk first comes here parked already. */
    ds_req_t *d = linked ? ds__req_park(r, on_cancel, w) : NULL;
    if (d == NULL) {
        detach(ss, w); /* the subscriptions made so far */
        free_wait(w);
        return false;
    }
    w->req = d;
    w->done = done;
    w->ctx = ctx;
    w->deadline_ms = deadline_ms;
    w->missing = nkeys;
    w->owner = owner;
    if (owner) owner_add(ss, owner, nkeys, &ss->spare_owner);
    heap_add(ss, w);
    return true;
}

/* Reads the next slice of w's keys from its request, subscribing to those
 * the store does not hold; true when every key was read. */
static bool reg_slice(ds_subs_t *ss, ds_wait_t *w)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, w->req->meta, w->req->meta_len);
    rb.pos = w->reg_pos;
    uint64_t unused = 0; /* reserved keys the store holds: their room goes back */
    for (uint32_t end = w->reg_i + DS_SUB_SLICE; w->reg_i < w->reg_n && w->reg_i < end;
         w->reg_i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        if (rb.err) break; /* checked by the caller: not reached */
        w->reserved--;
        ss->reserved--;
        if (w->present(w->pctx, k, kl)) {
            unused++;
            continue;
        }
        struct ds_sub *sb = &w->subs[w->nsubs];
        sb->w = w;
        if (link_sub(ss, sb, k, kl) != 0) {
            unused++;
            w->cut = true;
            break;
        }
        w->nsubs++;
        w->missing++;
    }
    w->reg_pos = rb.pos;
    if (w->owner && unused) owner_sub(ss, w->owner, unused);
    return w->reg_i >= w->reg_n || rb.err || w->cut;
}

/* Every key of w is read: it waits as any other, or is ready at once (every
 * missing key published meanwhile, nothing missing, its deadline passed,
 * or out of memory). */
static void reg_commit(ds_subs_t *ss, ds_wait_t *w, uint64_t now_ms)
{
    w->registering = false;
    if (w->owner && w->reserved) owner_sub(ss, w->owner, w->reserved);
    if (w->owner && w->nsubs == 0) w->owner = 0; /* owner_sub dropped its entry */
    ss->reserved -= w->reserved;
    w->reserved = 0;
    if (w->missing == 0)
        make_ready(ss, w, false);
    else if (w->cut || w->deadline_ms <= now_ms || !heap_room(ss))
        make_ready(ss, w, true);
    else
        heap_add(ss, w);
}

bool ds__subs_wait_keys(ds_subs_t *ss, ds_req_t *r, size_t pos, uint32_t nkeys,
                        uint64_t deadline_ms, ds_wait_done_fn done, void *ctx,
                        ds_subs_present_fn present, void *pctx)
{
    uint64_t owner = 0;
    if (nkeys == 0 || !admit(ss, r, nkeys, &owner)) return false;
    ds_wait_t *w = calloc(1, sizeof(*w));
    struct ds_sub *subs = calloc(nkeys, sizeof(*subs));
    ds_req_t *d = w && subs ? ds__req_park(r, on_cancel, w) : NULL;
    if (d == NULL) {
        free(w);
        free(subs);
        return false;
    }
    w->ss = ss;
    w->req = d;
    w->subs = subs;
    w->heap_idx = -1;
    w->done = done;
    w->ctx = ctx;
    w->deadline_ms = deadline_ms;
    w->registering = true;
    w->reg_n = nkeys;
    w->reg_pos = pos;
    w->reserved = nkeys;
    w->present = present;
    w->pctx = pctx;
    ss->reserved += nkeys;
    w->owner = owner;
    if (owner) owner_add(ss, owner, nkeys, &ss->spare_owner);
    /* The first slice now; the rest from ds__subs_expire, a slice a turn. */
    if (reg_slice(ss, w))
        reg_commit(ss, w, ds__now_ms());
    else
        reg_push(ss, w);
    return true;
}

/* One slice of each registering wait, oldest first. Whether any is left. */
static bool reg_run(ds_subs_t *ss, uint64_t now_ms)
{
    uint32_t turn = 0;
    for (ds_wait_t *w = ss->reg_head; w; w = w->reg_next)
        turn++;
    while (ss->reg_head && turn-- > 0) {
        ds_wait_t *w = ss->reg_head;
        ss->reg_head = w->reg_next;
        if (ss->reg_head == NULL) ss->reg_tail = NULL;
        w->reg_next = NULL;
        if (reg_slice(ss, w))
            reg_commit(ss, w, now_ms);
        else
            reg_push(ss, w);
    }
    return ss->reg_head != NULL;
}

void ds__subs_publish(ds_subs_t *ss, const char *key, size_t len)
{
    if (ss->count == 0 || len > UINT32_MAX) return;
    ds_dict_node_t *n = ds__dict_find(&ss->keys, key, len, ds__murmur3_32(key, len, 0));
    if (n == NULL) return;
    skey_t *k = DS_DICT_ENTRY(n, skey_t, node);
    /* A wait made ready stays on the key's list (run_ready takes it off
     * later), so the walk's next stays valid. */
    for (struct ds_sub *s = k->head, *next; s; s = next) {
        ds_wait_t *w = s->w;
        next = s->next;
        if (w->ready || w->gone) continue; /* leaving the table */
        if (!s->done) {
            s->done = true;
            w->missing--;
        }
        /* A wait still registering completes when its last key is read. */
        if (w->missing > 0 || w->registering) continue;
        make_ready(ss, w, false);
    }
}

uint64_t ds__subs_expire(ds_subs_t *ss, uint64_t now_ms)
{
    bool busy = ss->reg_head && reg_run(ss, now_ms);
    if (ss->gone && gone_run(ss, DS_SUB_UNLINK_SLICE)) busy = true;
    while (ss->n > 0 && ss->heap[0]->deadline_ms <= now_ms)
        make_ready(ss, ss->heap[0], true);
    if (busy) return now_ms;
    return ss->n ? ss->heap[0]->deadline_ms : 0;
}

bool ds__subs_ready_pending(const ds_subs_t *ss)
{
    return ss->ready_head != NULL;
}

void ds__subs_run_ready(ds_subs_t *ss)
{
    /* Each wait completes once; a callback answers (or waits again, in the
     * table) and publishes nothing, so the list only shrinks (a wait whose
     * connection closes meanwhile leaves it from on_cancel). A wait still
     * in the table gets out of it DS_SUB_UNLINK_SLICE subscriptions a call,
     * in turn with the others, and completes when none is left. */
    uint32_t turn = 0;
    for (ds_wait_t *w = ss->ready_head; w; w = w->rnext)
        turn++;
    while (ss->ready_head && turn-- > 0) {
        ds_wait_t *w = ss->ready_head;
        ready_unlink(ss, w);
        if (!unlink_some(ss, w, DS_SUB_UNLINK_SLICE)) {
            ready_push(ss, w);
            continue;
        }
        ds_req_t *d = w->req;
        ds_wait_done_fn done = w->done;
        void *ctx = w->ctx;
        bool timed_out = w->timed_out;
        uint64_t deadline_ms = w->deadline_ms;
        free_wait(w);
        ds__req_unpark(d); /* its cancel context is freed */
        done(ctx, d, timed_out, deadline_ms);
    }
}

void ds__subs_destroy(ds_subs_t *ss)
{
    while (ss->reg_head) {
        ds_wait_t *w = ss->reg_head;
        ss->reg_head = w->reg_next;
        w->registering = false;
        make_ready(ss, w, true);
    }
    ss->reg_tail = NULL;
    gone_run(ss, UINT32_MAX);
    while (ss->n > 0)
        make_ready(ss, ss->heap[0], true);
    while (ss->ready_head) {
        ds_wait_t *w = ss->ready_head;
        ready_unlink(ss, w);
        unlink_some(ss, w, UINT32_MAX);
        ds__req_drop(w->req);
        free_wait(w);
    }
    ds__dict_clear(&ss->keys);
    ds__dict_clear(&ss->owners);
    free(ss->spare_owner);
    free(ss->heap);
    memset(ss, 0, sizeof(*ss));
}
