/* The tier indexes: what a backend (the L2, or the spill directory) holds,
 * key by key, with the size, mode, deadline and version the loop needs to
 * answer without touching the disk. One table per backend (common/dict.h,
 * which owns the entries), on the loop only; the byte figures (bytes, disk)
 * follow every add and remove. */
#include "worker/ops/tier_int.h"

#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

#define IX_INITIAL 1024u

static bool ent_key_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const ent_t *e = DS_DICT_ENTRY(n, ent_t, node);
    return e->keylen == len && memcmp(e->key, key, len) == 0;
}

static void ent_destroy(ds_dict_node_t *n, void *ctx)
{
    (void)ctx;
    free(DS_DICT_ENTRY(n, ent_t, node));
}

static const ds_dict_type_t ent_type = {ent_key_eq, ent_destroy};

bool ds__tier_ix_init(ix_t *x)
{
    return ds__dict_init(&x->table, &ent_type, NULL, IX_INITIAL) == 0;
}

void ds__tier_ix_free(ix_t *x)
{
    ds__dict_clear(&x->table);
}

uint64_t ds__tier_ix_count(const ix_t *x)
{
    return ds__dict_count(&x->table);
}

ent_t *ds__tier_ix_find(ix_t *x, const char *key, uint32_t keylen)
{
    ds_dict_node_t *n = ds__dict_find(&x->table, key, keylen, ds__murmur3_32(key, keylen, 0));
    return n ? DS_DICT_ENTRY(n, ent_t, node) : NULL;
}

void ds__tier_ix_remove(ix_t *x, const char *key, uint32_t keylen)
{
    ds_dict_node_t *n = ds__dict_pop(&x->table, key, keylen, ds__murmur3_32(key, keylen, 0));
    if (n == NULL) return;
    ent_t *e = DS_DICT_ENTRY(n, ent_t, node);
    x->bytes -= e->size;
    x->disk -= ds__tier_disk_of(e->size, e->keylen);
    free(e);
}

uint64_t ds__tier_ix_put(ix_t *x, const char *key, uint32_t keylen, const ds_l2_meta_t *m)
{
    ds__tier_ix_remove(x, key, keylen);
    ent_t *e = malloc(sizeof(*e) + keylen + 1);
    if (e == NULL) return 0;
    e->keylen = keylen;
    e->size = m->size;
    e->ttl_wall_ms = m->ttl_wall_ms;
    e->mode = m->write_mode;
    e->version = ++x->version;
    e->put = NULL;
    memcpy(e->key, key, keylen);
    e->key[keylen] = '\0';
    ds__dict_add(&x->table, &e->node, ds__murmur3_32(key, keylen, 0));
    x->bytes += e->size;
    x->disk += ds__tier_disk_of(e->size, e->keylen);
    return e->version;
}
