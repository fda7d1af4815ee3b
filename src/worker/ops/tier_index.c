/* The tier indexes: what a backend (the L2, or the spill directory) holds,
 * key by key, with the size, mode, deadline and version the loop needs to
 * answer without touching the disk. One table per backend, on the loop only;
 * the byte figures (bytes, disk) follow every add and remove. */
#include "worker/ops/tier_int.h"

#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

static ent_t **ix_slot(ix_t *t, const char *key, uint32_t keylen, uint32_t h)
{
    ent_t **p = &t->b[h & (t->nb - 1)];
    while (*p &&
           !((*p)->hash == h && (*p)->keylen == keylen && memcmp((*p)->key, key, keylen) == 0))
        p = &(*p)->next;
    return p;
}

static void ix_grow(ix_t *t)
{
    uint64_t nb = t->nb * 2;
    ent_t **b = calloc(nb, sizeof(*b));
    if (b == NULL) return; /* longer chains, still correct */
    for (uint64_t i = 0; i < t->nb; i++)
        for (ent_t *e = t->b[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(t->b);
    t->b = b;
    t->nb = nb;
}

void ds__tier_ix_remove(ix_t *t, const char *key, uint32_t keylen)
{
    ent_t **p = ix_slot(t, key, keylen, ds__murmur3_32(key, keylen, 0));
    ent_t *e = *p;
    if (e == NULL) return;
    *p = e->next;
    t->count--;
    t->bytes -= e->size;
    t->disk -= ds__tier_disk_of(e->size, e->keylen);
    free(e);
}

/* Adds or replaces; returns the entry's version (0 when out of memory). */
uint64_t ds__tier_ix_put(ix_t *t, const char *key, uint32_t keylen, const ds_l2_meta_t *m)
{
    ds__tier_ix_remove(t, key, keylen);
    if (t->count >= t->nb) ix_grow(t);
    ent_t *e = malloc(sizeof(*e) + keylen + 1);
    if (e == NULL) return 0;
    e->hash = ds__murmur3_32(key, keylen, 0);
    e->keylen = keylen;
    e->size = m->size;
    e->ttl_wall_ms = m->ttl_wall_ms;
    e->mode = m->write_mode;
    e->version = ++t->version;
    e->put = NULL;
    memcpy(e->key, key, keylen);
    e->key[keylen] = '\0';
    ent_t **p = &t->b[e->hash & (t->nb - 1)];
    e->next = *p;
    *p = e;
    t->count++;
    t->bytes += e->size;
    t->disk += ds__tier_disk_of(e->size, e->keylen);
    return e->version;
}

ent_t *ds__tier_ix_find(ix_t *t, const char *key, uint32_t keylen)
{
    return *ix_slot(t, key, keylen, ds__murmur3_32(key, keylen, 0));
}

bool ds__tier_ix_init(ix_t *x)
{
    x->nb = 1024;
    x->b = calloc(x->nb, sizeof(*x->b));
    return x->b != NULL;
}

void ds__tier_ix_free(ix_t *x)
{
    for (uint64_t i = 0; x->b && i < x->nb; i++)
        for (ent_t *e = x->b[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    free(x->b);
}
