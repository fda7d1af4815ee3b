/* The shared-memory GET index: a read-mostly hash table of small published
 * objects that the worker keeps at the start of its arena, so that a local
 * client can read a small value straight out of the mapping with no syscall.
 *
 * The worker is the only writer (its single-threaded loop); any number of
 * client threads and processes read concurrently. Every slot carries a
 * seqlock: the writer makes seq odd, rewrites the slot, then makes it even
 * again. A reader copies what it needs (including the value bytes the slot
 * points at) between two reads of seq and keeps the result only when both
 * reads are equal and even: the slot, and therefore the object's table
 * reference that keeps its arena range allocated, did not change meanwhile.
 *
 * Open addressing, linear probing over at most DS_SHM_INDEX_PROBE slots from
 * the key's home slot; removed entries become tombstones so that probes go
 * on past them. Anything that does not fit (long key, full probe run) is
 * simply not indexed: a miss always falls back to asking the worker, so the
 * index may omit keys but never holds a key that is not current.
 *
 * Layout of the region: `slots` 128-byte units (a multiple of
 * DS_SHM_INDEX_GRAIN, so the region is whole 2 MiB pages and leaves the
 * allocator's area aligned), the first a header (magic, live flag, slot
 * count), the others slots; keys go to slot hash % (slots - 1). Shared by the worker (writer) and
 * the client library (reader); local clients can write the arena, so readers validate every field
 * they use. */
#ifndef DS_COMMON_SHM_INDEX_H
#define DS_COMMON_SHM_INDEX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DS_SHM_INDEX_KEYMAX 86u
#define DS_SHM_INDEX_SLOT 128u
#define DS_SHM_INDEX_PROBE 16u
#define DS_SHM_INDEX_MIN_ARENA (UINT64_C(128) << 20)
/* The index's share of the arena (1/32) and the granule of its slot count
 * (2 MiB of slots). */
#define DS_SHM_INDEX_SHARE 32u
#define DS_SHM_INDEX_GRAIN 16384u
#define DS_SHM_INDEX_MAGIC UINT64_C(0x7864497a686d5364) /* "dShmzIdx" */
/* Slot hash values that are not key hashes. */
#define DS_SHM_INDEX_EMPTY 0u
#define DS_SHM_INDEX_TOMB 1u

typedef struct {
    _Atomic uint64_t seq; /* odd while the worker rewrites the slot */
    /* Relaxed atomics so that a reader racing the writer is defined
     * behaviour; the seqlock decides whether what it read is usable. */
    _Atomic uint64_t hash; /* DS_SHM_INDEX_EMPTY, _TOMB, or key hash + 2 */
    _Atomic uint64_t offset;
    _Atomic uint64_t size;
    _Atomic uint64_t version;
    _Atomic uint16_t keylen;
    char key[DS_SHM_INDEX_KEYMAX];
} ds_shm_slot_t;

typedef struct {
    uint64_t magic;
    _Atomic uint64_t live; /* 1 while the worker runs; 0 after a clean stop */
    uint64_t slots;
    uint8_t pad[DS_SHM_INDEX_SLOT - 24];
} ds_shm_index_hdr_t;

_Static_assert(sizeof(ds_shm_slot_t) == DS_SHM_INDEX_SLOT, "index slot is 128 bytes");
_Static_assert(sizeof(ds_shm_index_hdr_t) == DS_SHM_INDEX_SLOT, "index header is 128 bytes");

/* A view of an index region in some mapping. */
typedef struct {
    ds_shm_index_hdr_t *hdr;
    ds_shm_slot_t *slot;
    uint64_t n; /* usable slots: slots - 1, the header takes the first */
} ds_shm_index_t;

/* Bytes of a region holding `slots` slots. */
uint64_t ds__shm_index_bytes(uint64_t slots);
/* Slot count for an arena of arena_size bytes: 1/DS_SHM_INDEX_SHARE of it,
 * rounded down to DS_SHM_INDEX_GRAIN slots (32 MiB, 262,144 slots, for
 * 1 GiB: one slot per 4 KiB of arena); 0 (no index) for arenas under
 * DS_SHM_INDEX_MIN_ARENA. */
uint64_t ds__shm_index_slots_for(uint64_t arena_size);
/* Hash used to place keys; the same on both sides. */
uint32_t ds__shm_index_hash(const char *key, size_t keylen);

/* Writer side. init formats the region (all slots empty, live). */
void ds__shm_index_init(ds_shm_index_t *ix, void *region, uint64_t slots);
/* Indexes key -> (offset, size, version), replacing an entry for the key.
 * false when the key is too long or its probe run has no free slot; then the
 * key is not in the index at all. */
bool ds__shm_index_put(ds_shm_index_t *ix, const char *key, size_t keylen, uint64_t offset,
                       uint64_t size, uint64_t version);
/* Drops the key's entry, if any. */
void ds__shm_index_remove(ds_shm_index_t *ix, const char *key, size_t keylen);
void ds__shm_index_set_live(ds_shm_index_t *ix, bool live);

/* Reader side. attach checks a region that the worker described (offset,
 * slot count, key limit) against a mapping of map_size bytes; false when
 * anything does not fit, and then the index must not be used. */
bool ds__shm_index_attach(ds_shm_index_t *ix, uint8_t *base, uint64_t map_size, uint64_t offset,
                          uint64_t slots, uint32_t keymax);

typedef enum {
    DS_SHM_INDEX_MISS = 0, /* not indexed, or no consistent read: ask the worker */
    DS_SHM_INDEX_HIT,      /* value copied to dst, its size in *size */
    DS_SHM_INDEX_SMALL,    /* indexed, but *size bytes do not fit in cap */
} ds_shm_index_res_t;

/* Copies a value into an arena block. An index reader in another thread may
 * still be copying the block's previous value (the seqlock then discards its
 * copy): builds for ThreadSanitizer copy with relaxed atomic stores, so the
 * overlap is defined there; release builds use memcpy (shm_index.c says
 * why). */
void ds__shm_index_copy_in(uint8_t *dst, const void *src, size_t n);
/* The same, calling mid(arg) once the first at bytes are copied; copied
 * as one value of n bytes (common/copy.h, ds__copy_in_mid). */
void ds__shm_index_copy_in_mid(uint8_t *dst, const void *src, size_t n, size_t at,
                               void (*mid)(void *), void *arg);

/* Readers' pins in shared memory: a local client holds a zero-copy view of
 * an indexed value with no request at all. Each local session has one table
 * in the arena (its offset comes with HELLO); the client writes the value's
 * arena offset into a free slot of its table and then checks that the index
 * slot it read the offset from is unchanged. The worker, before it frees
 * the range of an object that was ever indexed, looks for the offset in
 * every table and keeps the range while some slot names it (store.c).
 *
 * Why that is enough: the client's store to its slot and the worker's
 * rewrite of the index slot are each followed by a seq_cst fence and then a
 * read of the other's location (a Dekker handshake). Either the client sees
 * the index slot changed (and lets go), or the worker sees the pin. `held`
 * counts the slots in use, raised before a slot is written and lowered
 * after it is cleared, so that the worker skips tables with none.
 *
 * A client can write anything into any table (it can write the whole
 * arena): the worst it can do is keep ranges that no reader holds
 * allocated until the table's session ends, which a pin taken with a
 * request can do as well. */
#define DS_SHM_PINS_SLOTS 63u
typedef struct {
    _Atomic uint64_t held;
    _Atomic uint64_t slot[DS_SHM_PINS_SLOTS]; /* a pinned value's arena offset; 0 = free */
} ds_shm_pins_t;

_Static_assert(sizeof(ds_shm_pins_t) == 512, "a pin table is 512 bytes");

/* Worker side: whether the table names offset. The caller has rewritten or
 * removed the index slot and issued ds__shm_pins_fence() since. */
bool ds__shm_pins_hold(const ds_shm_pins_t *p, uint64_t offset);
void ds__shm_pins_fence(void);

/* Reader side: looks the key up as ds__shm_index_get does and pins its
 * value in slot i of the table (free, owned by the caller): HIT with the
 * value's arena offset and size, the slot holding the pin until the caller
 * clears it with ds__shm_pins_clear; MISS with the slot free again. */
ds_shm_index_res_t ds__shm_index_pin(const ds_shm_index_t *ix, uint64_t map_size, const char *key,
                                     size_t keylen, ds_shm_pins_t *pins, unsigned i,
                                     uint64_t *offset, uint64_t *size);
void ds__shm_pins_clear(ds_shm_pins_t *pins, unsigned i);

/* Looks the key up and copies its value out of the mapping (base, map_size
 * bytes) under the slot's seqlock. A HIT is a version that was the key's
 * current one during the whole copy. */
ds_shm_index_res_t ds__shm_index_get(const ds_shm_index_t *ix, const uint8_t *base,
                                     uint64_t map_size, const char *key, size_t keylen, void *dst,
                                     size_t cap, uint64_t *size);

#endif
