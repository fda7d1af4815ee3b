/* The read-latch table (latch_tab.h): two chained hash tables, a list of
 * holders and a deadline heap, all owned by the table. */
#include "worker/ops/latch_tab.h"

#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

/* A latched key and how many live latches it has. */
struct ds_latch_key {
    struct ds_latch_hnode h;
    uint32_t count;
    uint32_t len;
    char key[];
};

/* One holder's latches on one key, newest first. Its holder is ho's
 * current name: a retired holder's entries stop matching the old name at
 * once, though they stay in the bucket of its hash. */
struct ds_latch_hk {
    struct ds_latch_hnode h;
    ds_latch_holder_t *ho;
    ds_latch_key_t *k;
    ds_latch_t *top;
    uint32_t count;
};

/* A holder that has latches, and all of them. holder is the caller's name
 * for it, or the record's own address once retired. */
struct ds_latch_holder {
    ds_latch_holder_t *next;
    const void *holder;
    ds_latch_t *first;
    uint32_t n;
};

struct ds_latch {
    uint64_t deadline;
    uint32_t heap_idx;
    ds_latch_hk_t *hk;
    ds_latch_holder_t *ho;
    ds_latch_t *hk_prev, *hk_next; /* in hk's list */
    ds_latch_t *ho_prev, *ho_next; /* in ho's list */
};

/* ---- hash tables ---- */

static uint32_t key_hash(const char *key, uint32_t len)
{
    return ds__murmur3_32(key, len, 0);
}

static uint32_t hk_hash(const void *holder, const char *key, uint32_t len)
{
    uint64_t p = (uint64_t)(uintptr_t)holder;
    return ds__murmur3_32(key, len, (uint32_t)(p ^ (p >> 32)) * 2654435761u);
}

static struct ds_latch_hnode **bucket(const ds_latch_htab_t *h, uint32_t hash)
{
    return &h->b[hash & (h->nb - 1)];
}

/* Room for one more node: the table doubles once it holds as many nodes as
 * buckets. false only when it has no bucket at all and none can be made
 * (a full table that cannot grow just gets longer chains). */
static bool htab_room(ds_latch_htab_t *h)
{
    if (h->nb && h->n < h->nb) return true;
    uint32_t nb = h->nb ? h->nb * 2 : 16;
    struct ds_latch_hnode **b = nb > h->nb ? calloc(nb, sizeof(*b)) : NULL;
    if (b == NULL) return h->nb != 0;
    for (uint32_t i = 0; i < h->nb; i++)
        for (struct ds_latch_hnode *x = h->b[i], *next; x; x = next) {
            next = x->next;
            x->next = b[x->hash & (nb - 1)];
            b[x->hash & (nb - 1)] = x;
        }
    free(h->b);
    h->b = b;
    h->nb = nb;
    return true;
}

static void htab_insert(ds_latch_htab_t *h, struct ds_latch_hnode *x)
{
    struct ds_latch_hnode **p = bucket(h, x->hash);
    x->next = *p;
    *p = x;
    h->n++;
}

static void htab_remove(ds_latch_htab_t *h, struct ds_latch_hnode *x)
{
    for (struct ds_latch_hnode **p = bucket(h, x->hash); *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            h->n--;
            return;
        }
}

static ds_latch_key_t *find_key(const ds_latch_tab_t *t, const char *key, uint32_t len)
{
    if (t->keys.n == 0) return NULL;
    uint32_t hash = key_hash(key, len);
    for (struct ds_latch_hnode *x = *bucket(&t->keys, hash); x; x = x->next) {
        ds_latch_key_t *k = (ds_latch_key_t *)x;
        if (x->hash == hash && k->len == len && memcmp(k->key, key, len) == 0) return k;
    }
    return NULL;
}

static ds_latch_hk_t *find_hk(const ds_latch_tab_t *t, const void *holder, const char *key,
                              uint32_t len)
{
    if (t->hks.n == 0) return NULL;
    uint32_t hash = hk_hash(holder, key, len);
    for (struct ds_latch_hnode *x = *bucket(&t->hks, hash); x; x = x->next) {
        ds_latch_hk_t *hk = (ds_latch_hk_t *)x;
        if (x->hash == hash && hk->ho->holder == holder && hk->k->len == len &&
            memcmp(hk->k->key, key, len) == 0)
            return hk;
    }
    return NULL;
}

static ds_latch_holder_t *find_holder(const ds_latch_tab_t *t, const void *holder)
{
    for (ds_latch_holder_t *ho = t->holders; ho; ho = ho->next)
        if (ho->holder == holder) return ho;
    return NULL;
}

/* ---- the deadline heap ---- */

static void heap_set(ds_latch_tab_t *t, uint32_t i, ds_latch_t *l)
{
    t->heap[i] = l;
    l->heap_idx = i;
}

static void heap_up(ds_latch_tab_t *t, uint32_t i)
{
    ds_latch_t *l = t->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (t->heap[p]->deadline <= l->deadline) break;
        heap_set(t, i, t->heap[p]);
        i = p;
    }
    heap_set(t, i, l);
}

static void heap_down(ds_latch_tab_t *t, uint32_t i)
{
    ds_latch_t *l = t->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= t->n) break;
        if (c + 1 < t->n && t->heap[c + 1]->deadline < t->heap[c]->deadline) c++;
        if (t->heap[c]->deadline >= l->deadline) break;
        heap_set(t, i, t->heap[c]);
        i = c;
    }
    heap_set(t, i, l);
}

static void heap_remove(ds_latch_tab_t *t, ds_latch_t *l)
{
    uint32_t i = l->heap_idx;
    t->n--;
    if (i == t->n) return;
    heap_set(t, i, t->heap[t->n]);
    heap_down(t, i);
    heap_up(t, i);
}

/* ---- the table ---- */

void ds__latch_tab_init(ds_latch_tab_t *t, uint64_t max_per_holder, uint64_t max_total)
{
    memset(t, 0, sizeof(*t));
    t->max_per_holder = max_per_holder;
    t->max_total = max_total;
}

/* Takes latch l out of every structure and frees it, with its key, its
 * (holder, key) entry and its holder when l was their last. */
static void latch_remove(ds_latch_tab_t *t, ds_latch_t *l)
{
    heap_remove(t, l);
    ds_latch_hk_t *hk = l->hk;
    ds_latch_key_t *k = hk->k;
    ds_latch_holder_t *ho = l->ho;
    if (l->hk_prev)
        l->hk_prev->hk_next = l->hk_next;
    else
        hk->top = l->hk_next;
    if (l->hk_next) l->hk_next->hk_prev = l->hk_prev;
    if (l->ho_prev)
        l->ho_prev->ho_next = l->ho_next;
    else
        ho->first = l->ho_next;
    if (l->ho_next) l->ho_next->ho_prev = l->ho_prev;
    free(l);
    if (--hk->count == 0) {
        htab_remove(&t->hks, &hk->h);
        free(hk);
    }
    if (--k->count == 0) {
        htab_remove(&t->keys, &k->h);
        free(k);
    }
    if (--ho->n == 0) {
        for (ds_latch_holder_t **p = &t->holders; *p; p = &(*p)->next)
            if (*p == ho) {
                *p = ho->next;
                break;
            }
        free(ho);
    }
}

void ds__latch_tab_destroy(ds_latch_tab_t *t)
{
    while (t->n)
        latch_remove(t, t->heap[t->n - 1]);
    free(t->heap);
    free(t->keys.b);
    free(t->hks.b);
    memset(t, 0, sizeof(*t));
}

ds_latch_add_t ds__latch_tab_add(ds_latch_tab_t *t, const void *holder, const char *key,
                                 uint32_t len, uint64_t deadline)
{
    ds_latch_holder_t *ho = find_holder(t, holder);
    if (ho && ho->n >= t->max_per_holder) return DS_LATCH_HOLDER_FULL;
    if (t->n >= t->max_total) return DS_LATCH_FULL;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        ds_latch_t **nh = cap > t->cap ? realloc(t->heap, cap * sizeof(*nh)) : NULL;
        if (nh == NULL) return DS_LATCH_NOMEM;
        t->heap = nh;
        t->cap = cap;
    }
    if (!htab_room(&t->keys) || !htab_room(&t->hks)) return DS_LATCH_NOMEM;
    ds_latch_key_t *k = find_key(t, key, len);
    ds_latch_hk_t *hk = k ? find_hk(t, holder, key, len) : NULL;
    ds_latch_t *l = calloc(1, sizeof(*l));
    ds_latch_key_t *nk = k ? NULL : malloc(sizeof(*nk) + len);
    ds_latch_hk_t *nhk = hk ? NULL : calloc(1, sizeof(*nhk));
    ds_latch_holder_t *nho = ho ? NULL : calloc(1, sizeof(*nho));
    if (l == NULL || (!k && !nk) || (!hk && !nhk) || (!ho && !nho)) {
        free(l);
        free(nk);
        free(nhk);
        free(nho);
        return DS_LATCH_NOMEM;
    }
    if (nk) {
        nk->h.hash = key_hash(key, len);
        nk->count = 0;
        nk->len = len;
        memcpy(nk->key, key, len);
        htab_insert(&t->keys, &nk->h);
        k = nk;
    }
    if (nhk) {
        nhk->h.hash = hk_hash(holder, key, len);
        nhk->ho = ho ? ho : nho;
        nhk->k = k;
        htab_insert(&t->hks, &nhk->h);
        hk = nhk;
    }
    if (nho) {
        nho->holder = holder;
        nho->next = t->holders;
        t->holders = nho;
        ho = nho;
    }
    l->deadline = deadline;
    l->hk = hk;
    l->ho = ho;
    l->hk_next = hk->top;
    if (hk->top) hk->top->hk_prev = l;
    hk->top = l;
    l->ho_next = ho->first;
    if (ho->first) ho->first->ho_prev = l;
    ho->first = l;
    hk->count++;
    k->count++;
    ho->n++;
    heap_set(t, t->n++, l);
    heap_up(t, t->n - 1);
    return DS_LATCH_ADDED;
}

bool ds__latch_tab_release(ds_latch_tab_t *t, const void *holder, const char *key, uint32_t len)
{
    ds_latch_hk_t *hk = find_hk(t, holder, key, len);
    if (hk == NULL) return false;
    latch_remove(t, hk->top);
    return true;
}

uint32_t ds__latch_tab_drop_holder(ds_latch_tab_t *t, const void *holder)
{
    ds_latch_holder_t *ho = find_holder(t, holder);
    uint32_t n = ho ? ho->n : 0;
    /* the last removal frees ho */
    for (uint32_t i = 0; i < n; i++)
        latch_remove(t, ho->first);
    return n;
}

const void *ds__latch_tab_retire_holder(ds_latch_tab_t *t, const void *holder)
{
    ds_latch_holder_t *ho = find_holder(t, holder);
    if (ho == NULL) return NULL;
    ho->holder = ho;
    return ho;
}

bool ds__latch_tab_drop_retired(ds_latch_tab_t *t, const void *name, uint32_t max, uint32_t *gone)
{
    ds_latch_holder_t *ho = find_holder(t, name);
    /* Only a retired record is named by its own address. A live holder
     * whose name equals a name gone stale (its record freed by expiry, the
     * address reused for a session) is not touched. */
    if (ho != NULL && (const void *)ho != name) ho = NULL;
    uint32_t n = ho ? ho->n : 0, k = n < max ? n : max;
    /* the last removal frees ho */
    for (uint32_t i = 0; i < k; i++)
        latch_remove(t, ho->first);
    *gone = k;
    return k == n;
}

uint32_t ds__latch_tab_drop_holder_if(ds_latch_tab_t *t, const void *holder, ds_latch_drop_fn drop,
                                      void *ctx)
{
    ds_latch_holder_t *ho = find_holder(t, holder);
    uint32_t n = ho ? ho->n : 0, gone = 0;
    ds_latch_t *l = ho ? ho->first : NULL;
    /* The next latch is read before l goes (the last removal frees ho). */
    for (uint32_t i = 0; i < n && l; i++) {
        ds_latch_t *next = l->ho_next;
        const ds_latch_key_t *k = l->hk->k;
        if (drop(ctx, k->key, k->len, l->deadline)) {
            latch_remove(t, l);
            gone++;
        }
        l = next;
    }
    return gone;
}

uint32_t ds__latch_tab_expire(ds_latch_tab_t *t, uint64_t now)
{
    uint32_t n = 0;
    while (t->n && t->heap[0]->deadline <= now) {
        latch_remove(t, t->heap[0]);
        n++;
    }
    return n;
}

uint64_t ds__latch_tab_next(const ds_latch_tab_t *t)
{
    return t->n ? t->heap[0]->deadline : 0;
}

bool ds__latch_tab_held(const ds_latch_tab_t *t, const char *key, uint32_t len)
{
    return find_key(t, key, len) != NULL;
}

uint32_t ds__latch_tab_holder_count(const ds_latch_tab_t *t, const void *holder)
{
    const ds_latch_holder_t *ho = find_holder(t, holder);
    return ho ? ho->n : 0;
}

bool ds__latch_tab_held_by_other(const ds_latch_tab_t *t, const void *holder, const char *key,
                                 uint32_t len)
{
    const ds_latch_key_t *k = find_key(t, key, len);
    if (k == NULL) return false;
    const ds_latch_hk_t *hk = find_hk(t, holder, key, len);
    return k->count > (hk ? hk->count : 0);
}
