/* The shared-memory GET index (see shm_index.h): the worker's writer and the
 * client's seqlock reader over the same slot layout. */
#include "common/shm_index.h"

#include <string.h>

#include "common/copy.h"
#include "common/hash.h"
#include "common/tsan.h"

/* Same seed as the worker's object table; any fixed value would do. */
#define DS_SHM_INDEX_SEED 0x9747b28cu
/* Reads of one slot that may collide with the writer before giving up. */
#define DS_SHM_INDEX_TRIES 8

uint64_t ds__shm_index_bytes(uint64_t slots)
{
    return slots * DS_SHM_INDEX_SLOT;
}

uint64_t ds__shm_index_slots_for(uint64_t arena_size)
{
    /* A small arena keeps every byte for values: there the index would
     * already cost a whole large value's worth of space to users who sized
     * it. Above, a slot per 4 KiB of arena: a million 1 KiB values in a
     * 1.5 GiB arena find 38% of their keys indexed (1/64 of it, rounded
     * down to a power of two as before, held 13%), for 3% of the arena. */
    if (arena_size < DS_SHM_INDEX_MIN_ARENA) return 0;
    uint64_t slots = arena_size / DS_SHM_INDEX_SHARE / DS_SHM_INDEX_SLOT;
    return slots / DS_SHM_INDEX_GRAIN * DS_SHM_INDEX_GRAIN;
}

uint32_t ds__shm_index_hash(const char *key, size_t keylen)
{
    return ds__murmur3_32(key, keylen, DS_SHM_INDEX_SEED);
}

void ds__shm_index_init(ds_shm_index_t *ix, void *region, uint64_t slots)
{
    memset(region, 0, ds__shm_index_bytes(slots));
    ix->hdr = region;
    ix->slot = (ds_shm_slot_t *)((uint8_t *)region + DS_SHM_INDEX_SLOT);
    ix->n = slots - 1;
    ix->hdr->magic = DS_SHM_INDEX_MAGIC;
    ix->hdr->slots = slots;
    atomic_store_explicit(&ix->hdr->live, 1, memory_order_release);
}

void ds__shm_index_set_live(ds_shm_index_t *ix, bool live)
{
    atomic_store_explicit(&ix->hdr->live, live ? 1 : 0, memory_order_release);
}

/* ---- writer ---- */

/* Opens a slot for rewriting: readers that started before see seq change,
 * readers that start now see it odd. The release fence keeps the field
 * stores below from becoming visible before the odd seq. */
static uint64_t slot_begin(ds_shm_slot_t *sl)
{
    uint64_t q = atomic_load_explicit(&sl->seq, memory_order_relaxed);
    atomic_store_explicit(&sl->seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    return q + 2;
}

static void slot_end(ds_shm_slot_t *sl, uint64_t q)
{
    atomic_store_explicit(&sl->seq, q, memory_order_release);
}

/* The key bytes, like the slot's other fields, are relaxed atomics: a reader
 * comparing them while the writer rewrites them is then defined behaviour,
 * and the seqlock decides whether the comparison counts. */
static bool key_is(const ds_shm_slot_t *sl, const char *key, size_t keylen)
{
    for (size_t i = 0; i < keylen; i++)
        if (__atomic_load_n(&sl->key[i], __ATOMIC_RELAXED) != key[i]) return false;
    return true;
}

static bool slot_is(const ds_shm_slot_t *sl, uint64_t want, const char *key, size_t keylen)
{
    return atomic_load_explicit(&sl->hash, memory_order_relaxed) == want &&
           atomic_load_explicit(&sl->keylen, memory_order_relaxed) == keylen &&
           key_is(sl, key, keylen);
}

bool ds__shm_index_put(ds_shm_index_t *ix, const char *key, size_t keylen, uint64_t offset,
                       uint64_t size, uint64_t version)
{
    if (keylen == 0 || keylen > DS_SHM_INDEX_KEYMAX) return false;
    uint32_t h = ds__shm_index_hash(key, keylen);
    uint64_t want = (uint64_t)h + 2;
    ds_shm_slot_t *dst = NULL;
    /* The key may sit past tombstones, so the run is searched for it before
     * the first free slot is taken; an empty slot ends the run. */
    for (uint64_t i = 0; i < DS_SHM_INDEX_PROBE && i < ix->n; i++) {
        ds_shm_slot_t *sl = &ix->slot[(h + i) % ix->n];
        uint64_t hv = atomic_load_explicit(&sl->hash, memory_order_relaxed);
        if (hv == DS_SHM_INDEX_EMPTY) {
            if (dst == NULL) dst = sl;
            break;
        }
        if (hv == DS_SHM_INDEX_TOMB) {
            if (dst == NULL) dst = sl;
            continue;
        }
        if (slot_is(sl, want, key, keylen)) {
            dst = sl;
            break;
        }
    }
    if (dst == NULL) return false;
    uint64_t q = slot_begin(dst);
    atomic_store_explicit(&dst->hash, want, memory_order_relaxed);
    atomic_store_explicit(&dst->offset, offset, memory_order_relaxed);
    atomic_store_explicit(&dst->size, size, memory_order_relaxed);
    atomic_store_explicit(&dst->version, version, memory_order_relaxed);
    atomic_store_explicit(&dst->keylen, (uint16_t)keylen, memory_order_relaxed);
    for (size_t i = 0; i < keylen; i++)
        __atomic_store_n(&dst->key[i], key[i], __ATOMIC_RELAXED);
    slot_end(dst, q);
    return true;
}

static void slot_set_hash(ds_shm_slot_t *sl, uint64_t hv)
{
    uint64_t q = slot_begin(sl);
    atomic_store_explicit(&sl->hash, hv, memory_order_relaxed);
    atomic_store_explicit(&sl->keylen, 0, memory_order_relaxed);
    slot_end(sl, q);
}

void ds__shm_index_remove(ds_shm_index_t *ix, const char *key, size_t keylen)
{
    if (keylen == 0 || keylen > DS_SHM_INDEX_KEYMAX) return;
    uint32_t h = ds__shm_index_hash(key, keylen);
    uint64_t want = (uint64_t)h + 2;
    for (uint64_t i = 0; i < DS_SHM_INDEX_PROBE && i < ix->n; i++) {
        uint64_t at = (h + i) % ix->n;
        ds_shm_slot_t *sl = &ix->slot[at];
        uint64_t hv = atomic_load_explicit(&sl->hash, memory_order_relaxed);
        if (hv == DS_SHM_INDEX_EMPTY) return;
        if (!slot_is(sl, want, key, keylen)) continue;
        slot_set_hash(sl, DS_SHM_INDEX_TOMB);
        /* Tombstones right before an empty slot end no probe run that could
         * reach a live key, so they become empty again: without this, churn
         * would leave every run a full-length walk over tombstones. */
        if (atomic_load_explicit(&ix->slot[(at + 1) % ix->n].hash, memory_order_relaxed) !=
            DS_SHM_INDEX_EMPTY)
            return;
        for (uint64_t n = 0; n < ix->n; n++, at = (at + ix->n - 1) % ix->n) {
            sl = &ix->slot[at];
            if (atomic_load_explicit(&sl->hash, memory_order_relaxed) != DS_SHM_INDEX_TOMB) break;
            slot_set_hash(sl, DS_SHM_INDEX_EMPTY);
        }
        return;
    }
}

/* ---- reader ---- */

bool ds__shm_index_attach(ds_shm_index_t *ix, uint8_t *base, uint64_t map_size, uint64_t offset,
                          uint64_t slots, uint32_t keymax)
{
    memset(ix, 0, sizeof(*ix));
    if (base == NULL || slots < 2 || keymax != DS_SHM_INDEX_KEYMAX || offset % 64 != 0 ||
        slots > map_size / DS_SHM_INDEX_SLOT || offset > map_size ||
        ds__shm_index_bytes(slots) > map_size - offset)
        return false;
    ds_shm_index_hdr_t *hdr = (ds_shm_index_hdr_t *)(base + offset);
    if (hdr->magic != DS_SHM_INDEX_MAGIC || hdr->slots != slots) return false;
    ix->hdr = hdr;
    ix->slot = (ds_shm_slot_t *)(base + offset + DS_SHM_INDEX_SLOT);
    ix->n = slots - 1;
    return true;
}

/* The seqlock's optimistic copy of a value may overlap a writer: the worker
 * can hand a block that was just freed to a new SET while a reader is still
 * copying the old value out of it. The reader throws such a copy away (the
 * slot's sequence moved), but C11 calls the overlap a data race whatever the
 * check. The portable cure is a copy made of relaxed atomic loads and stores
 * (a "byte-wise atomic memcpy"), which compilers cannot vectorise: measured
 * here it made a 1 MiB local get 3.2x slower (22 -> 71 us) and a 1 MiB local
 * set 1.4x slower. So release builds copy with memcpy (or `rep movsb`, see
 * common/copy.h), as the seqlocks of Linux and Folly do, and builds for
 * ThreadSanitizer use the atomic copies, so that TSan checks every other
 * access to the arena; the two differ in nothing but the instructions that
 * move the bytes. */
#ifdef DS__TSAN
/* Aligned words, and bytes at the unaligned ends. */
static void copy_relaxed(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t i = 0;
    for (; i < n && ((uintptr_t)(src + i) & 7u) != 0; i++)
        dst[i] = __atomic_load_n(src + i, __ATOMIC_RELAXED);
    for (; i + 8 <= n; i += 8) {
        uint64_t w = __atomic_load_n((const uint64_t *)(const void *)(src + i), __ATOMIC_RELAXED);
        memcpy(dst + i, &w, sizeof(w));
    }
    for (; i < n; i++)
        dst[i] = __atomic_load_n(src + i, __ATOMIC_RELAXED);
}

void ds__shm_index_copy_in(uint8_t *dst, const void *src, size_t n)
{
    const uint8_t *from = src;
    size_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 7u) != 0; i++)
        __atomic_store_n(dst + i, from[i], __ATOMIC_RELAXED);
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, from + i, sizeof(w));
        __atomic_store_n((uint64_t *)(void *)(dst + i), w, __ATOMIC_RELAXED);
    }
    for (; i < n; i++)
        __atomic_store_n(dst + i, from[i], __ATOMIC_RELAXED);
}

void ds__shm_index_copy_in_mid(uint8_t *dst, const void *src, size_t n, size_t at,
                               void (*mid)(void *), void *arg)
{
    if (at > n) at = n;
    ds__shm_index_copy_in(dst, src, at);
    mid(arg);
    ds__shm_index_copy_in(dst + at, (const uint8_t *)src + at, n - at);
}
#else
static void copy_relaxed(uint8_t *dst, const uint8_t *src, size_t n)
{
    ds__copy(dst, src, n);
}

void ds__shm_index_copy_in(uint8_t *dst, const void *src, size_t n)
{
    ds__copy_in(dst, src, n);
}

void ds__shm_index_copy_in_mid(uint8_t *dst, const void *src, size_t n, size_t at,
                               void (*mid)(void *), void *arg)
{
    ds__copy_in_mid(dst, src, n, at, mid, arg);
}
#endif

/* True when seq still reads s1: everything read since the acquire load of
 * s1 came from one unchanged version of the slot. */
static bool slot_stable(const ds_shm_slot_t *sl, uint64_t s1)
{
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&sl->seq, memory_order_relaxed) == s1;
}

/* What a reader does with the key's slot once it has read the entry's range
 * at sequence s1: a result, or RETRY when the slot changed under it. */
#define RETRY ((ds_shm_index_res_t)-1)
typedef ds_shm_index_res_t (*take_fn)(ds_shm_slot_t *sl, uint64_t s1, uint64_t off, uint64_t sz,
                                      void *ctx);

/* Finds the key's slot, reads its range under the seqlock and hands it to
 * take; MISS when the key is not there or the slot will not hold still. */
static ds_shm_index_res_t probe(const ds_shm_index_t *ix, uint64_t map_size, const char *key,
                                size_t keylen, take_fn take, void *ctx)
{
    if (ix->hdr == NULL || keylen == 0 || keylen > DS_SHM_INDEX_KEYMAX ||
        atomic_load_explicit(&ix->hdr->live, memory_order_acquire) != 1)
        return DS_SHM_INDEX_MISS;
    uint32_t h = ds__shm_index_hash(key, keylen);
    uint64_t want = (uint64_t)h + 2;
    for (uint64_t i = 0; i < DS_SHM_INDEX_PROBE && i < ix->n; i++) {
        ds_shm_slot_t *sl = &ix->slot[(h + i) % ix->n];
        int tries = 0;
        for (;;) {
            if (++tries > DS_SHM_INDEX_TRIES) return DS_SHM_INDEX_MISS;
            uint64_t s1 = atomic_load_explicit(&sl->seq, memory_order_acquire);
            if (s1 & 1) continue;
            uint64_t hv = atomic_load_explicit(&sl->hash, memory_order_relaxed);
            uint16_t kl = atomic_load_explicit(&sl->keylen, memory_order_relaxed);
            bool mine = hv == want && kl == keylen && key_is(sl, key, keylen);
            if (!mine) {
                if (!slot_stable(sl, s1)) continue;
                if (hv == DS_SHM_INDEX_EMPTY) return DS_SHM_INDEX_MISS;
                break; /* another key or a tombstone: probe on */
            }
            uint64_t off = atomic_load_explicit(&sl->offset, memory_order_relaxed);
            uint64_t sz = atomic_load_explicit(&sl->size, memory_order_relaxed);
            /* Other local clients can write the arena: never trust a range. */
            if (off == 0 || off > map_size || sz > map_size - off) return DS_SHM_INDEX_MISS;
            ds_shm_index_res_t r = take(sl, s1, off, sz, ctx);
            if (r != RETRY) return r;
        }
    }
    return DS_SHM_INDEX_MISS;
}

typedef struct {
    const uint8_t *base;
    void *dst;
    size_t cap;
    uint64_t *size;
} get_ctx_t;

static ds_shm_index_res_t take_copy(ds_shm_slot_t *sl, uint64_t s1, uint64_t off, uint64_t sz,
                                    void *ctx)
{
    get_ctx_t *g = ctx;
    if (sz > g->cap) {
        if (!slot_stable(sl, s1)) return RETRY;
        *g->size = sz;
        return DS_SHM_INDEX_SMALL;
    }
    if (sz > 0) {
        DS__TSAN_READING(g->base, g->base + off);
        copy_relaxed(g->dst, g->base + off, sz);
    }
    if (!slot_stable(sl, s1)) return RETRY;
    *g->size = sz;
    return DS_SHM_INDEX_HIT;
}

ds_shm_index_res_t ds__shm_index_get(const ds_shm_index_t *ix, const uint8_t *base,
                                     uint64_t map_size, const char *key, size_t keylen, void *dst,
                                     size_t cap, uint64_t *size)
{
    get_ctx_t g = {base, dst, cap, size};
    return probe(ix, map_size, key, keylen, take_copy, &g);
}

/* ---- readers' pins ---- */

void ds__shm_pins_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

bool ds__shm_pins_hold(const ds_shm_pins_t *p, uint64_t offset)
{
    if (atomic_load_explicit(&p->held, memory_order_seq_cst) == 0) return false;
    for (unsigned i = 0; i < DS_SHM_PINS_SLOTS; i++)
        if (atomic_load_explicit(&p->slot[i], memory_order_seq_cst) == offset) return true;
    return false;
}

void ds__shm_pins_clear(ds_shm_pins_t *pins, unsigned i)
{
    atomic_store_explicit(&pins->slot[i], 0, memory_order_release);
    atomic_fetch_sub_explicit(&pins->held, 1, memory_order_release);
}

typedef struct {
    ds_shm_pins_t *pins;
    unsigned i;
    uint64_t *offset, *size;
} pin_ctx_t;

/* The pin first, then the check that the slot (and so the object behind it)
 * did not change since s1 (see the header). */
static ds_shm_index_res_t take_pin(ds_shm_slot_t *sl, uint64_t s1, uint64_t off, uint64_t sz,
                                   void *ctx)
{
    pin_ctx_t *p = ctx;
    atomic_fetch_add_explicit(&p->pins->held, 1, memory_order_seq_cst);
    atomic_store_explicit(&p->pins->slot[p->i], off, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&sl->seq, memory_order_seq_cst) != s1) {
        ds__shm_pins_clear(p->pins, p->i);
        return RETRY;
    }
    *p->offset = off;
    *p->size = sz;
    return DS_SHM_INDEX_HIT;
}

ds_shm_index_res_t ds__shm_index_pin(const ds_shm_index_t *ix, uint64_t map_size, const char *key,
                                     size_t keylen, ds_shm_pins_t *pins, unsigned i,
                                     uint64_t *offset, uint64_t *size)
{
    if (i >= DS_SHM_PINS_SLOTS) return DS_SHM_INDEX_MISS;
    pin_ctx_t p = {pins, i, offset, size};
    return probe(ix, map_size, key, keylen, take_pin, &p);
}
