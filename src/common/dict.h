/* An intrusive chained hash table, after Redis's dict.c: every entry embeds a
 * ds_dict_node_t, so adding one allocates nothing, and the table's type
 * (ds_dict_type_t) says how an entry's key compares and who frees entries
 * still in the table when it is cleared (the ownership hook).
 *
 * The bucket array doubles when the table holds as many entries as buckets.
 * The move to the bigger array is incremental: while both arrays exist,
 * every find and add moves a few buckets across, so a table of millions of
 * entries never stalls its thread for a whole rehash. If the bigger array
 * cannot be had, chains just grow longer: slower, still correct.
 *
 * Hashes are the caller's (each user already has one for its key); the
 * table keeps each entry's in its node. Not thread-safe: each table belongs
 * to one thread, or to the holder of one lock. */
#ifndef DS_COMMON_DICT_H
#define DS_COMMON_DICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ds_dict_node {
    struct ds_dict_node *next;
    uint32_t hash;
} ds_dict_node_t;

/* The entry holding node n, of type T through member m. */
#define DS_DICT_ENTRY(n, T, m) ((T *)(void *)((char *)(n)-offsetof(T, m)))

typedef struct {
    /* The entry of node n has the key (key, len). Called only for an entry
     * whose hash matches. */
    bool (*key_eq)(const ds_dict_node_t *n, const void *key, size_t len);
    /* Frees the entry of node n, still in the table, when the table is
     * cleared (ds__dict_clear); NULL where the table owns no entry. */
    void (*destroy)(ds_dict_node_t *n, void *ctx);
} ds_dict_type_t;

typedef struct {
    ds_dict_node_t **b;
    uint64_t size; /* a power of two, or 0 when unused */
    uint64_t used;
} ds_dict_ht_t;

typedef struct {
    const ds_dict_type_t *type;
    void *ctx; /* handed to type->destroy */
    ds_dict_ht_t ht[2];
    int64_t rehash_idx; /* next ht[0] bucket to move, -1 when not rehashing */
} ds_dict_t;

/* An empty table of `initial` buckets (rounded up to a power of two, at
 * least 4). Returns 0, or -1 when out of memory (d is then empty and may
 * be cleared). */
int ds__dict_init(ds_dict_t *d, const ds_dict_type_t *type, void *ctx, uint64_t initial);
/* Removes every entry, handing each to type->destroy where there is one,
 * and frees the bucket arrays; d may be initialised again. */
void ds__dict_clear(ds_dict_t *d);

/* The entry with this key and hash, or NULL. */
ds_dict_node_t *ds__dict_find(ds_dict_t *d, const void *key, size_t len, uint32_t hash);
/* Adds node n, with hash, to the table. The caller has made sure no entry
 * with its key is there (ds__dict_find); n must not be in any table. */
void ds__dict_add(ds_dict_t *d, ds_dict_node_t *n, uint32_t hash);
/* Takes node n out of the table: true if it was there. Moves no bucket, so
 * an iterator's current entry may be removed. */
bool ds__dict_remove(ds_dict_t *d, ds_dict_node_t *n);
/* Finds and removes the entry with this key: the removed node, or NULL. */
ds_dict_node_t *ds__dict_pop(ds_dict_t *d, const void *key, size_t len, uint32_t hash);

/* The number of entries. */
uint64_t ds__dict_count(const ds_dict_t *d);

/* Walks every entry once. The entry just returned may be removed (and
 * freed) before the next call; no other entry may be added or removed, and
 * no find made, until the walk ends. */
typedef struct {
    const ds_dict_t *d;
    int table;
    uint64_t bucket;
    ds_dict_node_t *next;
} ds_dict_iter_t;

void ds__dict_iter_init(ds_dict_iter_t *it, const ds_dict_t *d);
ds_dict_node_t *ds__dict_iter_next(ds_dict_iter_t *it);

/* Checks the table's own invariants (each node in the bucket its hash
 * names, the counts right): 0, or a negative code naming the first fault.
 * For consistency checks of the tables' users. */
int ds__dict_verify(const ds_dict_t *d);

#endif
