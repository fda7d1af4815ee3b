/* The metadata owner's table: for each key this worker owns on the ring,
 * where copies of its current version live (worker address, version, size).
 * The first location is where the write was made (its origin); memory
 * replicas (--replica_num) and hot copies (--enable_data_replication) are
 * further locations of the same write. A write is named by its origin and
 * the origin's version; a publish elsewhere supersedes every location, each
 * reported so it can be dropped (a hot copy with version 0). Addresses are
 * interned (members are few); entries live in an intrusive hash table
 * (common/dict.h) that owns them. Loop thread only. */
#include "worker/cluster/cluster_int.h"

#include "common/dict.h"
#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LOCS DS_META_MAX_LOCS

typedef struct {
    const char *addr; /* interned */
    uint64_t version; /* at addr; 0 for a hot copy */
    uint64_t size;
} mloc_t;

typedef struct mentry {
    ds_dict_node_t node;
    uint32_t nlocs;
    uint32_t want;           /* replicas the write asked for (1 = none) */
    uint64_t origin_version; /* the write: locs[0] at its origin... */
    const char *origin;      /* ...unless the origin is gone: kept here */
    mloc_t locs[MAX_LOCS];
    uint32_t keylen;
    char key[];
} mentry_t;

struct ds_meta {
    ds_dict_t table;
    char **addrs;
    size_t naddrs;
};

static bool mentry_key_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const mentry_t *e = DS_DICT_ENTRY(n, mentry_t, node);
    return e->keylen == len && memcmp(e->key, key, len) == 0;
}

static void mentry_destroy(ds_dict_node_t *n, void *ctx)
{
    (void)ctx;
    free(DS_DICT_ENTRY(n, mentry_t, node));
}

static const ds_dict_type_t mentry_type = {mentry_key_eq, mentry_destroy};

ds_meta_t *ds__meta_new(void)
{
    ds_meta_t *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    if (ds__dict_init(&m->table, &mentry_type, NULL, 1024) != 0) {
        free(m);
        return NULL;
    }
    return m;
}

void ds__meta_free(ds_meta_t *m)
{
    if (m == NULL) return;
    ds__dict_clear(&m->table);
    for (size_t i = 0; i < m->naddrs; i++)
        free(m->addrs[i]);
    free(m->addrs);
    free(m);
}

uint64_t ds__meta_count(const ds_meta_t *m)
{
    return ds__dict_count(&m->table);
}

static const char *intern(ds_meta_t *m, const char *addr)
{
    for (size_t i = 0; i < m->naddrs; i++)
        if (strcmp(m->addrs[i], addr) == 0) return m->addrs[i];
    char **na = realloc(m->addrs, (m->naddrs + 1) * sizeof(*na));
    if (na == NULL) return NULL;
    m->addrs = na;
    m->addrs[m->naddrs] = strdup(addr);
    return m->addrs[m->naddrs] ? m->addrs[m->naddrs++] : NULL;
}

static mentry_t *find(ds_meta_t *m, const char *key, size_t len, uint32_t h)
{
    ds_dict_node_t *n = ds__dict_find(&m->table, key, len, h);
    return n ? DS_DICT_ENTRY(n, mentry_t, node) : NULL;
}

static void remove_entry(ds_meta_t *m, mentry_t *e)
{
    ds__dict_remove(&m->table, &e->node);
    free(e);
}

int ds__meta_find(ds_meta_t *m, const char *key, size_t len, const char **loc, uint64_t *size,
                  uint64_t *version)
{
    mentry_t *e = find(m, key, len, ds__murmur3_32(key, len, 0));
    if (e == NULL || e->nlocs == 0) return 0;
    /* The first full copy (hot copies answer only their own worker's reads). */
    mloc_t *l = NULL;
    for (uint32_t i = 0; i < e->nlocs && l == NULL; i++)
        if (e->locs[i].version != 0) l = &e->locs[i];
    if (l == NULL) return 0;
    *loc = l->addr;
    *size = l->size;
    *version = l->version;
    return 1;
}

void ds__meta_put(ds_meta_t *m, const char *key, size_t len, const char *loc, uint64_t size,
                  uint64_t version, void (*cb)(void *ctx, const char *loc, uint64_t version),
                  void *ctx)
{
    uint32_t h = ds__murmur3_32(key, len, 0);
    mentry_t *e = find(m, key, len, h);
    const char *a = intern(m, loc);
    if (a == NULL) return;
    if (e == NULL) {
        e = calloc(1, sizeof(*e) + len + 1);
        if (e == NULL) return;
        e->keylen = (uint32_t)len;
        memcpy(e->key, key, len);
        ds__dict_add(&m->table, &e->node, h);
    }
    /* Every other location holds a superseded version now. */
    for (uint32_t i = 0; i < e->nlocs; i++)
        if (e->locs[i].addr != a && cb) cb(ctx, e->locs[i].addr, e->locs[i].version);
    e->locs[0] = (mloc_t){a, version, size};
    e->nlocs = 1;
    e->want = 1;
    e->origin = a;
    e->origin_version = version;
}

void ds__meta_del(ds_meta_t *m, const char *key, size_t len, const char *loc, uint64_t version,
                  void (*cb)(void *ctx, const char *loc, uint64_t version), void *ctx)
{
    uint32_t h = ds__murmur3_32(key, len, 0);
    mentry_t *e = find(m, key, len, h);
    if (e == NULL) return;
    uint32_t k = 0, full = 0;
    for (uint32_t i = 0; i < e->nlocs; i++) {
        bool drop =
            loc == NULL || (strcmp(e->locs[i].addr, loc) == 0 && e->locs[i].version <= version);
        if (drop) {
            /* One copy that left: the others stay, and nobody is told. */
            if (cb && loc == NULL) cb(ctx, e->locs[i].addr, e->locs[i].version);
        } else {
            full += e->locs[i].version != 0;
            e->locs[k++] = e->locs[i];
        }
    }
    /* No full copy left: the hot copies of the write go as well. */
    for (uint32_t i = 0; full == 0 && i < k; i++)
        if (cb && loc != NULL) cb(ctx, e->locs[i].addr, e->locs[i].version);
    if (full == 0) k = 0;
    e->nlocs = k;
    if (k == 0) remove_entry(m, e);
}

void ds__meta_prune(ds_meta_t *m, ds_server_t *srv, const char *dead)
{
    const char *self = ds__cluster_self(srv);
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &m->table);
    for (ds_dict_node_t *n; (n = ds__dict_iter_next(&it)) != NULL;) {
        mentry_t *e = DS_DICT_ENTRY(n, mentry_t, node);
        if (dead) {
            uint32_t k = 0, full = 0;
            for (uint32_t j = 0; j < e->nlocs; j++)
                if (strcmp(e->locs[j].addr, dead) != 0) {
                    full += e->locs[j].version != 0;
                    e->locs[k++] = e->locs[j];
                }
            /* Hot copies of a write with no full copy left are dropped by
             * their holders (they were pulled from the member that left). */
            e->nlocs = full ? k : 0;
        } else {
            const char *owner = ds__cluster_owner(srv, e->key, e->keylen);
            if (owner && strcmp(owner, self) != 0) e->nlocs = 0;
        }
        if (e->nlocs == 0) remove_entry(m, e);
    }
}

void ds__meta_put_write(ds_meta_t *m, const char *key, size_t len, const char *origin,
                        uint64_t origin_version, uint32_t want, const char *loc, uint64_t size,
                        uint64_t version, void (*cb)(void *ctx, const char *loc, uint64_t version),
                        void *ctx)
{
    ds__meta_put(m, key, len, loc, size, version, cb, ctx);
    mentry_t *e = find(m, key, len, ds__murmur3_32(key, len, 0));
    const char *o = intern(m, origin);
    if (e == NULL || o == NULL) return;
    e->origin = o;
    e->origin_version = origin_version;
    e->want = want ? want : 1;
}

int ds__meta_write(ds_meta_t *m, const char *key, size_t len, const char **origin,
                   uint64_t *origin_version, uint32_t *want)
{
    mentry_t *e = find(m, key, len, ds__murmur3_32(key, len, 0));
    if (e == NULL || e->nlocs == 0 || e->origin == NULL) return 0;
    *origin = e->origin;
    *origin_version = e->origin_version;
    *want = e->want;
    return 1;
}

/* Adds (or updates) loc in entry e, which has room or already names it. */
static int add_loc(ds_meta_t *m, mentry_t *e, const char *loc, uint64_t version, uint64_t size)
{
    const char *a = intern(m, loc);
    if (a == NULL) return 0;
    for (uint32_t i = 0; i < e->nlocs; i++)
        if (e->locs[i].addr == a) {
            /* A full copy is never demoted to a hot one. */
            if (version != 0) e->locs[i].version = version;
            return 1;
        }
    if (e->nlocs >= MAX_LOCS) return 0;
    e->locs[e->nlocs++] = (mloc_t){a, version, size};
    return 1;
}

int ds__meta_add(ds_meta_t *m, const char *key, size_t len, const char *origin,
                 uint64_t origin_version, const char *loc, uint64_t size, uint64_t version)
{
    mentry_t *e = find(m, key, len, ds__murmur3_32(key, len, 0));
    if (e == NULL || e->nlocs == 0 || e->origin == NULL || strcmp(e->origin, origin) != 0 ||
        e->origin_version != origin_version)
        return 0;
    return add_loc(m, e, loc, version, size);
}

int ds__meta_add_hot(ds_meta_t *m, const char *key, size_t len, const char *src,
                     uint64_t src_version, const char *loc)
{
    mentry_t *e = find(m, key, len, ds__murmur3_32(key, len, 0));
    if (e == NULL) return 0;
    for (uint32_t i = 0; i < e->nlocs; i++)
        if (e->locs[i].version == src_version && e->locs[i].version != 0 &&
            strcmp(e->locs[i].addr, src) == 0)
            return add_loc(m, e, loc, 0, e->locs[i].size);
    return 0;
}

uint32_t ds__meta_copies(ds_meta_t *m, const char *key, size_t len, const char **addrs,
                         uint64_t *versions, uint32_t cap, uint64_t *size)
{
    mentry_t *e = find(m, key, len, ds__murmur3_32(key, len, 0));
    uint32_t k = 0;
    for (uint32_t i = 0; e && i < e->nlocs; i++) {
        if (e->locs[i].version == 0) continue;
        if (k < cap) {
            addrs[k] = e->locs[i].addr;
            versions[k] = e->locs[i].version;
        }
        *size = e->locs[i].size;
        k++;
    }
    return k;
}

void ds__meta_foreach_short(ds_meta_t *m,
                            void (*fn)(void *ctx, const char *key, uint32_t len, uint32_t want,
                                       uint32_t have),
                            void *ctx)
{
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &m->table);
    for (ds_dict_node_t *n; (n = ds__dict_iter_next(&it)) != NULL;) {
        mentry_t *e = DS_DICT_ENTRY(n, mentry_t, node);
        uint32_t have = 0;
        for (uint32_t i = 0; i < e->nlocs; i++)
            have += e->locs[i].version != 0;
        if (have >= 1 && have < e->want) fn(ctx, e->key, e->keylen, e->want, have);
    }
}

void ds__meta_foreach(ds_meta_t *m, const char *avoid,
                      void (*fn)(void *ctx, const char *key, uint32_t len, const char *loc,
                                 uint64_t size, uint64_t version),
                      void *ctx)
{
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &m->table);
    for (ds_dict_node_t *n; (n = ds__dict_iter_next(&it)) != NULL;) {
        const mentry_t *e = DS_DICT_ENTRY(n, mentry_t, node);
        /* The newest full copy (hot copies, version 0, are caches), one
         * held elsewhere than avoid first. */
        const mloc_t *l = NULL;
        for (int pass = 0; pass < 2 && l == NULL; pass++)
            for (uint32_t i = 0; i < e->nlocs; i++) {
                const mloc_t *c = &e->locs[i];
                if (c->version == 0 || (pass == 0 && avoid && strcmp(c->addr, avoid) == 0))
                    continue;
                if (l == NULL || c->version >= l->version) l = c;
            }
        if (l != NULL) fn(ctx, e->key, e->keylen, l->addr, l->size, l->version);
    }
}

void ds__meta_prune_rings(ds_meta_t *m, const char *self, const ds_ring_t *a, const ds_ring_t *b)
{
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &m->table);
    for (ds_dict_node_t *n; (n = ds__dict_iter_next(&it)) != NULL;) {
        mentry_t *e = DS_DICT_ENTRY(n, mentry_t, node);
        const char *oa = ds__ring_owner(a, e->key, e->keylen);
        const char *ob = ds__ring_owner(b, e->key, e->keylen);
        if ((oa && strcmp(oa, self) == 0) || (ob && strcmp(ob, self) == 0)) continue;
        remove_entry(m, e);
    }
}
