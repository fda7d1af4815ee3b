/* Allocator over the shared-memory arena.
 *
 * Hands out variable-sized, 64-byte-aligned ranges of a region of `size` bytes
 * identified by offset. All bookkeeping lives in the worker's private heap,
 * never inside the arena: local clients can write the arena, so nothing the
 * allocator trusts may live there. Two-level segregated fits (TLSF): O(1)
 * allocate and free, immediate coalescing of neighbours, bounded fragmentation.
 * Not thread-safe: the worker's event loop is its only user. */
#ifndef DS_WORKER_ALLOC_H
#define DS_WORKER_ALLOC_H

#include <stdint.h>

#define DS_ALLOC_ALIGN 64u

typedef struct ds_alloc ds_alloc_t;
typedef struct ds_block ds_block_t;

typedef struct {
    uint64_t total;        /* region size */
    uint64_t used;         /* bytes in allocated blocks (after rounding) */
    uint64_t free;         /* total - used */
    uint64_t largest_free; /* biggest single allocation that would succeed now */
    uint64_t used_blocks;
    uint64_t free_blocks;
} ds_alloc_stats_t;

/* NULL on out of memory (of the private heap) or a region under 64 bytes. */
ds_alloc_t *ds__alloc_create(uint64_t size);
/* Frees the bookkeeping; outstanding blocks become invalid. */
void ds__alloc_destroy(ds_alloc_t *a);

/* A block of at least `size` bytes (size 0 is treated as 1), or NULL when no
 * free range is large enough. */
ds_block_t *ds__alloc_alloc(ds_alloc_t *a, uint64_t size);
void ds__alloc_free(ds_alloc_t *a, ds_block_t *b);
/* Splits the allocated block b at `at` bytes from its start (a multiple of
 * DS_ALLOC_ALIGN, 0 < at < its size): b keeps the front, and the back comes
 * back as a block of its own, allocated too. NULL (b unchanged) when the
 * arguments do not describe such a split or the private heap is out of
 * memory. Lets a caller hand parts of one allocation to different owners. */
ds_block_t *ds__alloc_split(ds_alloc_t *a, ds_block_t *b, uint64_t at);

uint64_t ds__block_offset(const ds_block_t *b);
uint64_t ds__block_size(const ds_block_t *b); /* rounded-up usable size */

void ds__alloc_stats(const ds_alloc_t *a, ds_alloc_stats_t *out);
/* Bytes allocated and in all, O(1) (no free-list walk). */
void ds__alloc_usage(const ds_alloc_t *a, uint64_t *used, uint64_t *total);
/* Walks every block and checks the invariants (neighbours coalesced, free
 * lists consistent, sizes add up). 0 when sound; for tests. */
int ds__alloc_check(const ds_alloc_t *a);

#endif
