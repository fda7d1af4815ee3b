/* The metadata owner's table: for each key this worker owns on the ring,
 * where its current copy lives (worker address, version, size). One location
 * per key: a publish elsewhere supersedes the old copy, which is reported so
 * it can be dropped. Addresses are interned (members are few), entries
 * chained in a hash table that doubles as it grows. Loop thread only. */
#include "worker/cluster/cluster_int.h"

#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LOCS 1

typedef struct {
    const char *addr; /* interned */
    uint64_t version;
    uint64_t size;
} mloc_t;

typedef struct mentry {
    struct mentry *next;
    uint32_t hash;
    uint32_t nlocs;
    mloc_t locs[MAX_LOCS];
    uint32_t keylen;
    char key[];
} mentry_t;

struct ds_meta {
    mentry_t **b;
    uint32_t nb;
    uint64_t count;
    char **addrs;
    size_t naddrs;
};

ds_meta_t *ds__meta_new(void)
{
    ds_meta_t *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    m->nb = 1024;
    m->b = calloc(m->nb, sizeof(*m->b));
    if (m->b == NULL) {
        free(m);
        return NULL;
    }
    return m;
}

void ds__meta_free(ds_meta_t *m)
{
    if (m == NULL) return;
    for (uint32_t i = 0; i < m->nb; i++) {
        mentry_t *e = m->b[i];
        while (e) {
            mentry_t *n = e->next;
            free(e);
            e = n;
        }
    }
    for (size_t i = 0; i < m->naddrs; i++)
        free(m->addrs[i]);
    free(m->addrs);
    free(m->b);
    free(m);
}

uint64_t ds__meta_count(const ds_meta_t *m)
{
    return m->count;
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

static mentry_t **find(ds_meta_t *m, const char *key, size_t len, uint32_t h)
{
    mentry_t **pp = &m->b[h & (m->nb - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->keylen == len && memcmp((*pp)->key, key, len) == 0)
            return pp;
    return pp;
}

static void grow(ds_meta_t *m)
{
    uint32_t nb = m->nb * 2;
    mentry_t **b = calloc(nb, sizeof(*b));
    if (b == NULL) return;
    for (uint32_t i = 0; i < m->nb; i++) {
        mentry_t *e = m->b[i];
        while (e) {
            mentry_t *n = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = n;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
}

int ds__meta_find(ds_meta_t *m, const char *key, size_t len, const char **loc, uint64_t *size,
                  uint64_t *version)
{
    mentry_t *e = *find(m, key, len, ds__murmur3_32(key, len, 0));
    if (e == NULL || e->nlocs == 0) return 0;
    /* The newest entry is last: that is the current version. */
    mloc_t *l = &e->locs[e->nlocs - 1];
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
    mentry_t **pp = find(m, key, len, h);
    mentry_t *e = *pp;
    const char *a = intern(m, loc);
    if (a == NULL) return;
    if (e == NULL) {
        e = calloc(1, sizeof(*e) + len + 1);
        if (e == NULL) return;
        e->hash = h;
        e->keylen = (uint32_t)len;
        memcpy(e->key, key, len);
        *pp = e;
        if (++m->count > 2ull * m->nb) grow(m);
    }
    /* Every other location holds a superseded version now. */
    for (uint32_t i = 0; i < e->nlocs; i++)
        if (e->locs[i].addr != a && cb) cb(ctx, e->locs[i].addr, e->locs[i].version);
    e->locs[0] = (mloc_t){a, version, size};
    e->nlocs = 1;
}

void ds__meta_del(ds_meta_t *m, const char *key, size_t len, const char *loc, uint64_t version,
                  void (*cb)(void *ctx, const char *loc, uint64_t version), void *ctx)
{
    uint32_t h = ds__murmur3_32(key, len, 0);
    mentry_t **pp = find(m, key, len, h);
    mentry_t *e = *pp;
    if (e == NULL) return;
    uint32_t k = 0;
    for (uint32_t i = 0; i < e->nlocs; i++) {
        bool drop =
            loc == NULL || (strcmp(e->locs[i].addr, loc) == 0 && e->locs[i].version <= version);
        if (drop) {
            if (cb) cb(ctx, e->locs[i].addr, e->locs[i].version);
        } else {
            e->locs[k++] = e->locs[i];
        }
    }
    e->nlocs = k;
    if (k == 0) {
        *pp = e->next;
        free(e);
        m->count--;
    }
}

void ds__meta_prune(ds_meta_t *m, ds_server_t *srv, const char *dead)
{
    const char *self = ds__cluster_self(srv);
    for (uint32_t i = 0; i < m->nb; i++) {
        mentry_t **pp = &m->b[i];
        while (*pp) {
            mentry_t *e = *pp;
            if (dead) {
                uint32_t k = 0;
                for (uint32_t j = 0; j < e->nlocs; j++)
                    if (strcmp(e->locs[j].addr, dead) != 0) e->locs[k++] = e->locs[j];
                e->nlocs = k;
            } else {
                const char *owner = ds__cluster_owner(srv, e->key, e->keylen);
                if (owner && strcmp(owner, self) != 0) e->nlocs = 0;
            }
            if (e->nlocs == 0) {
                *pp = e->next;
                free(e);
                m->count--;
            } else {
                pp = &e->next;
            }
        }
    }
}
