/* The intrusive hash table of dict.h. Growth starts when the table holds as
 * many entries as buckets and proceeds DS_DICT_REHASH_STEP buckets per find
 * or add; a step visits at most ten empty buckets per bucket it may move, so
 * that a sparse table's step stays short too (Redis's dictRehash rule). */
#include "common/dict.h"

#include <stdlib.h>
#include <string.h>

#define DS_DICT_REHASH_STEP 4u
#define DS_DICT_MIN_SIZE 4u

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t s = DS_DICT_MIN_SIZE;
    while (s < n && s < (UINT64_C(1) << 62))
        s <<= 1;
    return s;
}

int ds__dict_init(ds_dict_t *d, const ds_dict_type_t *type, void *ctx, uint64_t initial)
{
    memset(d, 0, sizeof(*d));
    d->type = type;
    d->ctx = ctx;
    d->rehash_idx = -1;
    uint64_t size = pow2_at_least(initial);
    d->ht[0].b = calloc(size, sizeof(*d->ht[0].b));
    if (d->ht[0].b == NULL) return -1;
    d->ht[0].size = size;
    return 0;
}

void ds__dict_clear(ds_dict_t *d)
{
    for (int t = 0; t < 2; t++) {
        ds_dict_ht_t *ht = &d->ht[t];
        for (uint64_t i = 0; i < ht->size; i++) {
            ds_dict_node_t *n = ht->b[i];
            while (n != NULL) {
                ds_dict_node_t *next = n->next;
                n->next = NULL;
                if (d->type && d->type->destroy) d->type->destroy(n, d->ctx);
                n = next;
            }
        }
        free(ht->b);
        memset(ht, 0, sizeof(*ht));
    }
    d->rehash_idx = -1;
}

static void rehash_step(ds_dict_t *d, unsigned buckets)
{
    unsigned empty_visits = buckets * 10;
    while (d->rehash_idx >= 0 && buckets > 0) {
        ds_dict_ht_t *from = &d->ht[0], *to = &d->ht[1];
        while ((uint64_t)d->rehash_idx < from->size && from->b[d->rehash_idx] == NULL) {
            d->rehash_idx++;
            if (--empty_visits == 0) return;
        }
        if ((uint64_t)d->rehash_idx < from->size) {
            ds_dict_node_t *n = from->b[d->rehash_idx];
            while (n != NULL) {
                ds_dict_node_t *next = n->next;
                uint64_t i = n->hash & (to->size - 1);
                n->next = to->b[i];
                to->b[i] = n;
                from->used--;
                to->used++;
                n = next;
            }
            from->b[d->rehash_idx++] = NULL;
            buckets--;
        }
        if ((uint64_t)d->rehash_idx >= from->size) {
            free(from->b);
            d->ht[0] = d->ht[1];
            memset(&d->ht[1], 0, sizeof(d->ht[1]));
            d->rehash_idx = -1;
        }
    }
}

ds_dict_node_t *ds__dict_find(ds_dict_t *d, const void *key, size_t len, uint32_t hash)
{
    rehash_step(d, DS_DICT_REHASH_STEP);
    for (int t = 0; t < 2; t++) {
        const ds_dict_ht_t *ht = &d->ht[t];
        if (ht->size == 0) continue;
        for (ds_dict_node_t *n = ht->b[hash & (ht->size - 1)]; n != NULL; n = n->next)
            if (n->hash == hash && d->type->key_eq(n, key, len)) return n;
        if (d->rehash_idx < 0) break;
    }
    return NULL;
}

void ds__dict_add(ds_dict_t *d, ds_dict_node_t *n, uint32_t hash)
{
    rehash_step(d, DS_DICT_REHASH_STEP);
    if (d->rehash_idx < 0 && d->ht[0].used >= d->ht[0].size) {
        uint64_t size = d->ht[0].size ? d->ht[0].size * 2 : DS_DICT_MIN_SIZE;
        ds_dict_node_t **b = calloc(size, sizeof(*b));
        if (b != NULL) {
            if (d->ht[0].size == 0) {
                d->ht[0].b = b;
                d->ht[0].size = size;
            } else {
                d->ht[1].b = b;
                d->ht[1].size = size;
                d->ht[1].used = 0;
                d->rehash_idx = 0;
            }
        }
    }
    ds_dict_ht_t *ht = d->rehash_idx >= 0 ? &d->ht[1] : &d->ht[0];
    if (ht->size == 0) {
        /* Not even the first array could be had: nothing to chain onto. A
         * table of DS_DICT_MIN_SIZE buckets is all that is asked here, so
         * this is a process out of memory; the caller's entry stays out. */
        n->next = NULL;
        return;
    }
    n->hash = hash;
    uint64_t i = hash & (ht->size - 1);
    n->next = ht->b[i];
    ht->b[i] = n;
    ht->used++;
}

bool ds__dict_remove(ds_dict_t *d, ds_dict_node_t *n)
{
    for (int t = 0; t < 2; t++) {
        ds_dict_ht_t *ht = &d->ht[t];
        if (ht->size == 0) continue;
        for (ds_dict_node_t **pp = &ht->b[n->hash & (ht->size - 1)]; *pp != NULL;
             pp = &(*pp)->next) {
            if (*pp == n) {
                *pp = n->next;
                n->next = NULL;
                ht->used--;
                return true;
            }
        }
    }
    return false;
}

ds_dict_node_t *ds__dict_pop(ds_dict_t *d, const void *key, size_t len, uint32_t hash)
{
    ds_dict_node_t *n = ds__dict_find(d, key, len, hash);
    if (n != NULL) ds__dict_remove(d, n);
    return n;
}

uint64_t ds__dict_count(const ds_dict_t *d)
{
    return d->ht[0].used + d->ht[1].used;
}

static ds_dict_node_t *iter_advance(ds_dict_iter_t *it)
{
    while (it->table < 2) {
        const ds_dict_ht_t *ht = &it->d->ht[it->table];
        while (it->bucket < ht->size) {
            ds_dict_node_t *n = ht->b[it->bucket++];
            if (n != NULL) return n;
        }
        it->table++;
        it->bucket = 0;
    }
    return NULL;
}

void ds__dict_iter_init(ds_dict_iter_t *it, const ds_dict_t *d)
{
    it->d = d;
    it->table = 0;
    it->bucket = 0;
    it->next = iter_advance(it);
}

ds_dict_node_t *ds__dict_iter_next(ds_dict_iter_t *it)
{
    ds_dict_node_t *n = it->next;
    if (n == NULL) return NULL;
    /* Look ahead now, so that the caller may unlink and free n. */
    it->next = n->next != NULL ? n->next : iter_advance(it);
    return n;
}

int ds__dict_verify(const ds_dict_t *d)
{
    if (d->rehash_idx >= 0 && d->ht[1].size == 0) return -1;
    for (int t = 0; t < 2; t++) {
        const ds_dict_ht_t *ht = &d->ht[t];
        if (ht->size & (ht->size - 1)) return -2;
        uint64_t n = 0;
        for (uint64_t i = 0; i < ht->size; i++)
            for (const ds_dict_node_t *e = ht->b[i]; e != NULL; e = e->next) {
                if ((e->hash & (ht->size - 1)) != i) return -3;
                if (++n > ht->used) return -4;
            }
        if (n != ht->used) return -5;
    }
    return 0;
}
