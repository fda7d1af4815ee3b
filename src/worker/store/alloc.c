/* TLSF allocator over the shared-memory arena, with out-of-band bookkeeping.
 *
 * Classic TLSF keeps its block headers inside the managed memory. Here the
 * region is writable by local clients, so every header is a ds_block_t in the
 * worker's private heap instead: each block knows its offset, its size and its
 * physical neighbours, which is all that boundary tags would have given us.
 * Block structs come from a private pool (slabs of DS_POOL_SLAB) so that each
 * one costs exactly sizeof(ds_block_t) = 48 bytes and no malloc header.
 *
 * Sizes are kept in 64-byte units. A size maps to a first-level index (its
 * highest set bit) and a second-level index (the next DS_SL_LOG2 bits); one
 * bitmap per level finds the smallest non-empty list that can serve a request
 * in O(1). Allocation first rounds the request up to the next list boundary so
 * that the head of any list found is guaranteed to fit ("good fit"); only when
 * that finds nothing does it scan the request's own list, so that an
 * allocation succeeds exactly when some free block is large enough. The store
 * relies on that: it evicts until an allocation succeeds, and a false failure
 * would make it evict far more than needed. */
#include "worker/store/alloc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DS_UNIT_LOG2 6u /* log2(DS_ALLOC_ALIGN) */
#define DS_SL_LOG2 5u
#define DS_SL_COUNT (1u << DS_SL_LOG2)
#define DS_FL_COUNT 64u
#define DS_POOL_SLAB 1024u

/* The low bit of size_flags marks a free block; sizes are multiples of 64. */
#define DS_BLOCK_FREE 1ull

struct ds_block {
    uint64_t off;
    uint64_t size_flags;
    ds_block_t *prev_phys, *next_phys;
    /* Links in a size-class free list while free; the pool's free list (via
     * next_free) while the struct itself is unused. */
    ds_block_t *prev_free, *next_free;
};

/* The per-key memory budget counts on this size; see the file comment. */
_Static_assert(sizeof(void *) != 8 || sizeof(ds_block_t) == 48, "ds_block_t grew");

typedef struct ds_slab {
    struct ds_slab *next;
    ds_block_t blocks[DS_POOL_SLAB];
} ds_slab_t;

struct ds_alloc {
    uint64_t total;
    uint64_t used;
    uint64_t used_blocks;
    uint64_t free_blocks;
    ds_block_t *first; /* the block at offset 0; merges always keep the lower struct */
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[DS_FL_COUNT];
    ds_block_t *heads[DS_FL_COUNT][DS_SL_COUNT];
    ds_slab_t *slabs;
    ds_block_t *spare; /* unused block structs */
};

static inline uint64_t blk_size(const ds_block_t *b)
{
    return b->size_flags & ~DS_BLOCK_FREE;
}

static inline bool blk_is_free(const ds_block_t *b)
{
    return (b->size_flags & DS_BLOCK_FREE) != 0;
}

static inline void blk_set(ds_block_t *b, uint64_t size, bool is_free)
{
    b->size_flags = size | (is_free ? DS_BLOCK_FREE : 0);
}

static inline unsigned fls64(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

/* Size (in units, > 0) -> (fl, sl) of the list that holds blocks of that size. */
static void mapping(uint64_t units, unsigned *fl, unsigned *sl)
{
    if (units < DS_SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)units;
        return;
    }
    unsigned f = fls64(units);
    *sl = (unsigned)(units >> (f - DS_SL_LOG2)) - DS_SL_COUNT;
    *fl = f - DS_SL_LOG2 + 1;
}

static ds_block_t *pool_get(ds_alloc_t *a)
{
    if (a->spare == NULL) {
        ds_slab_t *slab = malloc(sizeof(*slab));
        if (slab == NULL) return NULL;
        slab->next = a->slabs;
        a->slabs = slab;
        for (unsigned i = 0; i < DS_POOL_SLAB; i++) {
            slab->blocks[i].next_free = a->spare;
            a->spare = &slab->blocks[i];
        }
    }
    ds_block_t *b = a->spare;
    a->spare = b->next_free;
    memset(b, 0, sizeof(*b));
    return b;
}

static void pool_put(ds_alloc_t *a, ds_block_t *b)
{
    b->size_flags = 0;
    b->next_free = a->spare;
    a->spare = b;
}

static void list_insert(ds_alloc_t *a, ds_block_t *b)
{
    unsigned fl, sl;
    mapping(blk_size(b) >> DS_UNIT_LOG2, &fl, &sl);
    ds_block_t *head = a->heads[fl][sl];
    b->prev_free = NULL;
    b->next_free = head;
    if (head != NULL) head->prev_free = b;
    a->heads[fl][sl] = b;
    a->sl_bitmap[fl] |= 1u << sl;
    a->fl_bitmap |= 1ull << fl;
    a->free_blocks++;
}

static void list_remove(ds_alloc_t *a, ds_block_t *b)
{
    unsigned fl, sl;
    mapping(blk_size(b) >> DS_UNIT_LOG2, &fl, &sl);
    if (b->prev_free != NULL)
        b->prev_free->next_free = b->next_free;
    else
        a->heads[fl][sl] = b->next_free;
    if (b->next_free != NULL) b->next_free->prev_free = b->prev_free;
    if (a->heads[fl][sl] == NULL) {
        a->sl_bitmap[fl] &= ~(1u << sl);
        if (a->sl_bitmap[fl] == 0) a->fl_bitmap &= ~(1ull << fl);
    }
    b->prev_free = b->next_free = NULL;
    a->free_blocks--;
}

/* Head of the first non-empty list at or above (fl, sl), or NULL. */
static ds_block_t *find_from(const ds_alloc_t *a, unsigned fl, unsigned sl)
{
    if (fl >= DS_FL_COUNT) return NULL;
    uint32_t sl_map = sl < DS_SL_COUNT ? a->sl_bitmap[fl] & (~0u << sl) : 0;
    if (sl_map == 0) {
        uint64_t fl_map = fl + 1 < DS_FL_COUNT ? a->fl_bitmap & (~0ull << (fl + 1)) : 0;
        if (fl_map == 0) return NULL;
        fl = (unsigned)__builtin_ctzll(fl_map);
        sl_map = a->sl_bitmap[fl];
    }
    return a->heads[fl][__builtin_ctz(sl_map)];
}

ds_alloc_t *ds__alloc_create(uint64_t size)
{
    size &= ~(uint64_t)(DS_ALLOC_ALIGN - 1);
    if (size < DS_ALLOC_ALIGN) return NULL;
    ds_alloc_t *a = calloc(1, sizeof(*a));
    if (a == NULL) return NULL;
    a->total = size;
    ds_block_t *b = pool_get(a);
    if (b == NULL) {
        free(a);
        return NULL;
    }
    blk_set(b, size, true);
    a->first = b;
    list_insert(a, b);
    return a;
}

void ds__alloc_destroy(ds_alloc_t *a)
{
    if (a == NULL) return;
    while (a->slabs != NULL) {
        ds_slab_t *next = a->slabs->next;
        free(a->slabs);
        a->slabs = next;
    }
    free(a);
}

ds_block_t *ds__alloc_alloc(ds_alloc_t *a, uint64_t size)
{
    if (size == 0) size = 1;
    if (size > a->total) return NULL;
    uint64_t units = (size + DS_ALLOC_ALIGN - 1) >> DS_UNIT_LOG2;
    unsigned fl, sl;
    ds_block_t *b = NULL;
    /* Good fit: round up to the next list so that any block found is big enough. */
    if (units >= DS_SL_COUNT) {
        uint64_t rounded = units + (1ull << (fls64(units) - DS_SL_LOG2)) - 1;
        mapping(rounded, &fl, &sl);
    } else {
        mapping(units, &fl, &sl);
    }
    b = find_from(a, fl, sl);
    if (b == NULL) {
        /* Only the request's own list can still hold a block that fits. */
        mapping(units, &fl, &sl);
        for (b = a->heads[fl][sl]; b != NULL; b = b->next_free)
            if (blk_size(b) >> DS_UNIT_LOG2 >= units) break;
        if (b == NULL) return NULL;
    }
    uint64_t want = units << DS_UNIT_LOG2;
    ds_block_t *rest = NULL;
    if (blk_size(b) > want) {
        rest = pool_get(a);
        if (rest == NULL) return NULL;
    }
    list_remove(a, b);
    if (rest != NULL) {
        rest->off = b->off + want;
        blk_set(rest, blk_size(b) - want, true);
        rest->prev_phys = b;
        rest->next_phys = b->next_phys;
        if (b->next_phys != NULL) b->next_phys->prev_phys = rest;
        b->next_phys = rest;
        list_insert(a, rest);
    }
    blk_set(b, want, false);
    a->used += want;
    a->used_blocks++;
    return b;
}

void ds__alloc_free(ds_alloc_t *a, ds_block_t *b)
{
    if (b == NULL) return;
    uint64_t size = blk_size(b);
    a->used -= size;
    a->used_blocks--;
    ds_block_t *next = b->next_phys;
    if (next != NULL && blk_is_free(next)) {
        list_remove(a, next);
        size += blk_size(next);
        b->next_phys = next->next_phys;
        if (b->next_phys != NULL) b->next_phys->prev_phys = b;
        pool_put(a, next);
    }
    ds_block_t *prev = b->prev_phys;
    if (prev != NULL && blk_is_free(prev)) {
        list_remove(a, prev);
        size += blk_size(prev);
        prev->next_phys = b->next_phys;
        if (prev->next_phys != NULL) prev->next_phys->prev_phys = prev;
        pool_put(a, b);
        b = prev;
    }
    blk_set(b, size, true);
    list_insert(a, b);
}

ds_block_t *ds__alloc_split(ds_alloc_t *a, ds_block_t *b, uint64_t at)
{
    if (b == NULL || blk_is_free(b) || at == 0 || at % DS_ALLOC_ALIGN != 0 || at >= blk_size(b))
        return NULL;
    ds_block_t *back = pool_get(a);
    if (back == NULL) return NULL;
    back->off = b->off + at;
    blk_set(back, blk_size(b) - at, false);
    back->prev_phys = b;
    back->next_phys = b->next_phys;
    if (b->next_phys != NULL) b->next_phys->prev_phys = back;
    b->next_phys = back;
    blk_set(b, at, false);
    a->used_blocks++;
    return back;
}

uint64_t ds__block_offset(const ds_block_t *b)
{
    return b->off;
}

uint64_t ds__block_size(const ds_block_t *b)
{
    return blk_size(b);
}

void ds__alloc_usage(const ds_alloc_t *a, uint64_t *used, uint64_t *total)
{
    *used = a->used;
    *total = a->total;
}

void ds__alloc_stats(const ds_alloc_t *a, ds_alloc_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->total = a->total;
    out->used = a->used;
    out->free = a->total - a->used;
    out->used_blocks = a->used_blocks;
    out->free_blocks = a->free_blocks;
    /* The largest free block sits in the highest non-empty list. */
    if (a->fl_bitmap != 0) {
        unsigned fl = fls64(a->fl_bitmap);
        unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
        for (const ds_block_t *b = a->heads[fl][sl]; b != NULL; b = b->next_free)
            if (blk_size(b) > out->largest_free) out->largest_free = blk_size(b);
    }
}

int ds__alloc_check(const ds_alloc_t *a)
{
    uint64_t off = 0, used = 0, used_blocks = 0, free_blocks = 0;
    const ds_block_t *prev = NULL;
    for (const ds_block_t *b = a->first; b != NULL; b = b->next_phys) {
        uint64_t size = blk_size(b);
        if (b->off != off || size == 0 || size % DS_ALLOC_ALIGN != 0 || b->prev_phys != prev)
            return -1;
        if (blk_is_free(b)) {
            if (prev != NULL && blk_is_free(prev))
                return -2; /* two free neighbours should have been coalesced */
            free_blocks++;
        } else {
            used += size;
            used_blocks++;
        }
        off += size;
        prev = b;
    }
    if (off != a->total || used != a->used || used_blocks != a->used_blocks ||
        free_blocks != a->free_blocks)
        return -3;
    uint64_t listed = 0;
    for (unsigned fl = 0; fl < DS_FL_COUNT; fl++) {
        if (((a->fl_bitmap >> fl) & 1) != (a->sl_bitmap[fl] != 0)) return -4;
        for (unsigned sl = 0; sl < DS_SL_COUNT; sl++) {
            const ds_block_t *b = a->heads[fl][sl];
            if (((a->sl_bitmap[fl] >> sl) & 1) != (b != NULL)) return -5;
            for (const ds_block_t *p = NULL; b != NULL; p = b, b = b->next_free) {
                unsigned bfl, bsl;
                if (!blk_is_free(b) || b->prev_free != p) return -6;
                mapping(blk_size(b) >> DS_UNIT_LOG2, &bfl, &bsl);
                if (bfl != fl || bsl != sl) return -7;
                if (++listed > free_blocks) return -8;
            }
        }
    }
    return listed == free_blocks ? 0 : -8;
}
