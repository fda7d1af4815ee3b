/* The object store: key table, clock eviction, TTL heap and version lifetimes.
 *
 * The key table is the intrusive hash table of common/dict.h (MurmurHash3
 * of the key), whose incremental rehash keeps a table of millions of keys
 * from stalling the event loop.
 *
 * Every object is in exactly one of three places: the table (in_table,
 * holding the table's reference), the limbo list (CREATING objects and
 * superseded versions that readers still pin) or the held list (no
 * reference left, but a reader's shared pin in the arena still names the
 * range; see "readers' shared pins" below). All reuse clk_prev/clk_next: the
 * clock ring only ever holds in-table objects, limbo and held only the
 * others. Limbo exists so that destroy can free everything and stats can
 * count pins.
 *
 * The eviction ring holds in-table evictable objects in insertion order,
 * oldest at the hand. Each object carries the store tick of its last write
 * or lookup (atime); an eviction looks at the EVICT_SAMPLE unpinned objects
 * from the hand and takes the one used longest ago (sampled LRU, as Redis
 * does, but sampled where the old objects are). So without lookups eviction
 * is FIFO, an object read since it was written outlives older unread ones,
 * and the object just written is never the one taken (a plain clock with the
 * bit clear on insertion would take it first once every other object had
 * been read, which background eviction right after a publish makes real).
 * Pinned objects (refcnt > 1) are passed over, never evicted.
 *
 * Memory per key beyond the key and value bytes: the ds_obj_t (88 bytes) and
 * its malloc header and rounding (about 20), the allocator's block struct
 * (48) and one to two bucket pointers (8-16): about 156 bytes, measured by
 * the million-key unit test.
 *
 * Versions: a store-wide counter, incremented at each successful publish and
 * stored in the object; 0 means never published. Later publishes of any key
 * carry strictly larger versions. */
#include "worker/store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hash.h"
#include "common/shm_index.h"

#define DS_HASH_SEED 0x9747b28cu
#define DS_HT_INITIAL 1024u

struct ds_store {
    uint64_t region_bytes; /* ds__store_region's, for the owner's use */
    ds_arena_t *arena;
    ds_alloc_t *alloc;
    ds_dict_t table; /* published objects by key */
    ds_obj_t *hand;  /* oldest object of the eviction ring */
    uint32_t tick;   /* advances at each write and lookup (ds_obj_t.atime) */
    uint64_t ring_count;
    uint64_t ring_bytes;
    ds_obj_t *limbo;
    uint64_t limbo_count;
    ds_obj_t **heap;
    uint32_t heap_len, heap_cap;
    uint64_t last_version;
    uint64_t evictions;
    ds_store_gone_fn gone;
    ds_store_event_fn ev; /* key events, NULL = none */
    void *ev_ctx;
    bool replacing; /* publish is unlinking the version it replaces */
    void *gone_ctx;
    uint64_t expirations;
    uint64_t reservations, reserved_bytes; /* DS_OBJ_RESERVED spaces */
    /* The shared GET index at the arena's start, when enabled: objects are
     * allocated in [base, arena size) and offsets given out are arena
     * offsets (allocator offset + base). */
    ds_shm_index_t ix;
    bool ix_on;
    uint64_t ix_value_max;
    uint64_t base;
    /* Readers' pin tables: a region of pt_n tables allocated once (so that
     * a session's table never changes the arena's use, and a table is
     * never reused for values), which are taken, and the arena offsets of
     * those taken (npt of them); then the objects whose ranges only those
     * tables keep (through clk_prev/clk_next). */
    ds_block_t *pt_block;
    uint64_t pt_base;
    uint32_t pt_n, pt_cursor;
    uint8_t *pt_taken;
    uint64_t *pt;
    uint32_t npt;
    ds_obj_t *held;
    uint64_t held_count;
    uint64_t held_next_ms, held_gap_ms; /* next sweep, and the gap after it */
};

/* UNLINK_REPLACED: overwritten by a new version that already took over the
 * key's index slot (ds__store_publish), so the slot is left alone. */
typedef enum { UNLINK_DELETE, UNLINK_EVICT, UNLINK_EXPIRE, UNLINK_REPLACED } unlink_reason_t;

/* NONE_L2_CACHE_EVICT objects, and WRITE_BACK_L2_CACHE_EVICT ones once their
 * L2 copy is durable (ds__store_persisted). */
static bool obj_evictable(const ds_obj_t *o)
{
    return o->write_mode == DS_WRITE_NONE_L2_CACHE_EVICT ||
           (o->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT && o->l2_persisted);
}

/* ---- hash table ---- */

static bool obj_key_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const ds_obj_t *o = DS_DICT_ENTRY(n, ds_obj_t, hnode);
    return o->keylen == len && memcmp(o->key, key, len) == 0;
}

static void obj_destroy(ds_dict_node_t *n, void *ctx)
{
    (void)ctx;
    free(DS_DICT_ENTRY(n, ds_obj_t, hnode));
}

/* The table owns the objects in it until they are unlinked. */
static const ds_dict_type_t obj_table_type = {obj_key_eq, obj_destroy};

static ds_obj_t *ht_find(ds_store_t *s, const char *key, size_t keylen, uint32_t hash)
{
    ds_dict_node_t *n = ds__dict_find(&s->table, key, keylen, hash);
    return n ? DS_DICT_ENTRY(n, ds_obj_t, hnode) : NULL;
}

static void ht_insert(ds_store_t *s, ds_obj_t *o)
{
    ds__dict_add(&s->table, &o->hnode, o->hnode.hash);
}

static void ht_remove(ds_store_t *s, ds_obj_t *o)
{
    ds__dict_remove(&s->table, &o->hnode);
}

/* The next object of a walk of the table (ds__dict_iter_init), or NULL. */
static ds_obj_t *ht_next(ds_dict_iter_t *it)
{
    ds_dict_node_t *n = ds__dict_iter_next(it);
    return n ? DS_DICT_ENTRY(n, ds_obj_t, hnode) : NULL;
}

/* ---- clock ring and limbo list (both through clk_prev/clk_next) ---- */

static void ring_add(ds_store_t *s, ds_obj_t *o)
{
    if (s->hand == NULL) {
        o->clk_prev = o->clk_next = o;
        s->hand = o;
    } else {
        o->clk_next = s->hand;
        o->clk_prev = s->hand->clk_prev;
        s->hand->clk_prev->clk_next = o;
        s->hand->clk_prev = o;
    }
    o->atime = ++s->tick;
    s->ring_count++;
    s->ring_bytes += ds__block_size(o->block);
}

static void ring_del(ds_store_t *s, ds_obj_t *o)
{
    if (o->clk_next == o) {
        s->hand = NULL;
    } else {
        o->clk_prev->clk_next = o->clk_next;
        o->clk_next->clk_prev = o->clk_prev;
        if (s->hand == o) s->hand = o->clk_next;
    }
    o->clk_prev = o->clk_next = NULL;
    s->ring_count--;
    s->ring_bytes -= ds__block_size(o->block);
}

/* The limbo and held lists: NULL-ended, newest first. */
static void list_push(ds_obj_t **head, ds_obj_t *o)
{
    o->clk_prev = NULL;
    o->clk_next = *head;
    if (*head != NULL) (*head)->clk_prev = o;
    *head = o;
}

static void list_unlink(ds_obj_t **head, ds_obj_t *o)
{
    if (o->clk_prev != NULL)
        o->clk_prev->clk_next = o->clk_next;
    else
        *head = o->clk_next;
    if (o->clk_next != NULL) o->clk_next->clk_prev = o->clk_prev;
    o->clk_prev = o->clk_next = NULL;
}

static void limbo_add(ds_store_t *s, ds_obj_t *o)
{
    list_push(&s->limbo, o);
    s->limbo_count++;
}

static void limbo_del(ds_store_t *s, ds_obj_t *o)
{
    list_unlink(&s->limbo, o);
    s->limbo_count--;
}

/* ---- TTL min-heap on ttl_deadline_ms ---- */

static void heap_set(ds_store_t *s, uint32_t i, ds_obj_t *o)
{
    s->heap[i] = o;
    o->heap_idx = (int32_t)i;
}

static void heap_up(ds_store_t *s, uint32_t i)
{
    ds_obj_t *o = s->heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (s->heap[parent]->ttl_deadline_ms <= o->ttl_deadline_ms) break;
        heap_set(s, i, s->heap[parent]);
        i = parent;
    }
    heap_set(s, i, o);
}

static void heap_down(ds_store_t *s, uint32_t i)
{
    ds_obj_t *o = s->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->heap_len) break;
        if (c + 1 < s->heap_len && s->heap[c + 1]->ttl_deadline_ms < s->heap[c]->ttl_deadline_ms)
            c++;
        if (o->ttl_deadline_ms <= s->heap[c]->ttl_deadline_ms) break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, o);
}

/* Room for one more entry; false when the private heap is exhausted. */
static bool heap_reserve(ds_store_t *s)
{
    if (s->heap_len < s->heap_cap) return true;
    uint32_t cap = s->heap_cap ? s->heap_cap * 2 : 256;
    ds_obj_t **h = realloc(s->heap, cap * sizeof(*h));
    if (h == NULL) return false;
    s->heap = h;
    s->heap_cap = cap;
    return true;
}

/* Inserts or repositions o; heap_reserve must have succeeded if o is new. */
static void heap_update(ds_store_t *s, ds_obj_t *o)
{
    if (o->heap_idx < 0) {
        s->heap_len++;
        heap_set(s, s->heap_len - 1, o);
        heap_up(s, s->heap_len - 1);
        return;
    }
    heap_up(s, (uint32_t)o->heap_idx);
    heap_down(s, (uint32_t)o->heap_idx);
}

static void heap_remove(ds_store_t *s, ds_obj_t *o)
{
    uint32_t i = (uint32_t)o->heap_idx;
    o->heap_idx = -1;
    ds_obj_t *last = s->heap[--s->heap_len];
    if (last == o) return;
    heap_set(s, i, last);
    heap_up(s, i);
    heap_down(s, (uint32_t)last->heap_idx);
}

/* ---- shared GET index ---- */

/* Objects enter the index when they become the key's current version and
 * leave it before their table reference is dropped (table_unlink), so an
 * indexed range is always allocated to the object the slot names. Objects
 * with a TTL stay out: a reader in another process has no clock check, and
 * the worker's GET handles expiry. */
static bool ix_wanted(const ds_store_t *s, const ds_obj_t *o)
{
    return s->ix_on && o->ttl_second == 0 && o->ttl_deadline_ms == 0 && o->size <= s->ix_value_max;
}

/* Indexes o, replacing the key's entry if it has one. When the key's probe
 * run is full the put fails, but then the key was not indexed before either,
 * so in both cases no entry for an older version is left. */
static void ix_add(ds_store_t *s, ds_obj_t *o)
{
    if (!ix_wanted(s, o)) return;
    o->indexed = 1;
    ds__shm_index_put(&s->ix, o->key, o->keylen, s->base + ds__block_offset(o->block), o->size,
                      o->version);
}

static void ix_del(ds_store_t *s, const ds_obj_t *o)
{
    if (s->ix_on) ds__shm_index_remove(&s->ix, o->key, o->keylen);
}

/* ---- object lifetime ---- */

static void obj_release(ds_store_t *s, ds_obj_t *o)
{
    if (o->state == DS_OBJ_RESERVED) {
        s->reservations--;
        if (o->block) s->reserved_bytes -= ds__block_size(o->block);
    }
    ds__alloc_free(s->alloc, o->block);
    free(o);
}

/* ---- readers' shared pins ---- */

/* Whether some reader's pin table names o's range. The fence orders the
 * index rewrite that preceded (o left the index before its last reference
 * went) before the reads of the tables (common/shm_index.h). */
static bool shm_pinned(const ds_store_t *s, const ds_obj_t *o)
{
    if (!o->indexed || s->npt == 0) return false;
    uint64_t off = s->base + ds__block_offset(o->block);
    ds__shm_pins_fence();
    for (uint32_t i = 0; i < s->npt; i++)
        if (ds__shm_pins_hold((const ds_shm_pins_t *)(s->arena->base + s->pt[i]), off)) return true;
    return false;
}

void ds__store_mark_shm_pinned(ds_obj_t *o)
{
    o->indexed = 1;
}

static void held_add(ds_store_t *s, ds_obj_t *o)
{
    list_push(&s->held, o);
    s->held_count++;
    s->held_next_ms = 0; /* sweep soon: views are usually short */
    s->held_gap_ms = 1;
}

/* Frees the held objects that no table names any more. */
static void held_sweep(ds_store_t *s)
{
    ds_obj_t *next;
    for (ds_obj_t *o = s->held; o != NULL; o = next) {
        next = o->clk_next;
        if (shm_pinned(s, o)) continue;
        list_unlink(&s->held, o);
        s->held_count--;
        obj_release(s, o);
    }
}

/* Frees o's range and o, unless a reader's shared pin holds the range. */
static void obj_free(ds_store_t *s, ds_obj_t *o)
{
    if (shm_pinned(s, o)) {
        held_add(s, o);
        return;
    }
    obj_release(s, o);
}

ds_status_t ds__store_pins_reserve(ds_store_t *s, uint32_t tables)
{
    if (s->pt_block != NULL || tables == 0) return DS_K_OK;
    ds_block_t *b = ds__alloc_alloc(s->alloc, (uint64_t)tables * sizeof(ds_shm_pins_t));
    s->pt_taken = calloc(tables, 1);
    s->pt = calloc(tables, sizeof(*s->pt));
    if (b == NULL || s->pt_taken == NULL || s->pt == NULL) {
        ds__alloc_free(s->alloc, b);
        free(s->pt_taken);
        free(s->pt);
        s->pt_taken = NULL;
        s->pt = NULL;
        return ds__set_error(DS_K_OUT_OF_MEMORY, "no room for %u pin tables", tables);
    }
    s->pt_block = b;
    s->pt_base = s->base + ds__block_offset(b);
    s->pt_n = tables;
    return DS_K_OK;
}

ds_status_t ds__store_region(ds_store_t *s, uint64_t bytes, uint64_t *offset, uint8_t **addr)
{
    /* Never freed: the arena goes with the worker. */
    ds_block_t *b = ds__alloc_alloc(s->alloc, bytes);
    if (b == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "no room for %llu bytes",
                             (unsigned long long)bytes);
    *offset = s->base + ds__block_offset(b);
    *addr = s->arena->base + *offset;
    memset(*addr, 0, bytes);
    s->region_bytes += bytes;
    return DS_K_OK;
}

ds_status_t ds__store_pins_open(ds_store_t *s, uint64_t *offset)
{
    *offset = 0;
    if (s->npt == s->pt_n) return ds__set_error(DS_K_OUT_OF_MEMORY, "no free pin table");
    /* Round-robin, so that a freed table waits as long as it can before
     * another session gets it. */
    uint32_t i = s->pt_cursor;
    while (s->pt_taken[i])
        i = (i + 1) % s->pt_n;
    s->pt_cursor = (i + 1) % s->pt_n;
    s->pt_taken[i] = 1;
    uint64_t off = s->pt_base + (uint64_t)i * sizeof(ds_shm_pins_t);
    memset(s->arena->base + off, 0, sizeof(ds_shm_pins_t));
    s->pt[s->npt++] = off;
    *offset = off;
    return DS_K_OK;
}

void ds__store_pins_close(ds_store_t *s, uint64_t offset)
{
    for (uint32_t i = 0; i < s->npt; i++) {
        if (s->pt[i] != offset) continue;
        s->pt_taken[(offset - s->pt_base) / sizeof(ds_shm_pins_t)] = 0;
        s->pt[i] = s->pt[--s->npt];
        held_sweep(s);
        return;
    }
}

uint64_t ds__store_held_due(ds_store_t *s, uint64_t now_ms)
{
    if (s->held == NULL) return 0;
    if (now_ms >= s->held_next_ms) {
        uint64_t before = s->held_count;
        held_sweep(s);
        /* Views held for long are looked at less and less often (up to
         * every 100 ms), so a quiet worker does not wake for them. */
        if (s->held_count == before && s->held_gap_ms < 100) s->held_gap_ms *= 2;
        s->held_next_ms = now_ms + s->held_gap_ms;
    }
    return s->held ? s->held_next_ms : 0;
}

/* Takes o out of the table and drops the table's reference. */
static void table_unlink(ds_store_t *s, ds_obj_t *o, unlink_reason_t why)
{
    if (why != UNLINK_REPLACED) ix_del(s, o);
    ht_remove(s, o);
    if (o->clk_next != NULL) ring_del(s, o);
    if (o->heap_idx >= 0) heap_remove(s, o);
    o->in_table = 0;
    if (why == UNLINK_EVICT)
        s->evictions++;
    else if (why == UNLINK_EXPIRE)
        s->expirations++;
    if ((why == UNLINK_EVICT || why == UNLINK_EXPIRE) && s->gone) s->gone(s->gone_ctx, o);
    if (s->ev && why != UNLINK_REPLACED && !s->replacing) s->ev(s->ev_ctx, DS_STORE_EV_REMOVED, o);
    if (--o->refcnt == 0) {
        obj_free(s, o);
        return;
    }
    limbo_add(s, o);
}

static bool expired(const ds_obj_t *o, uint64_t now_ms)
{
    return o->ttl_deadline_ms != 0 && o->ttl_deadline_ms <= now_ms;
}

/* Evicts the first unpinned, not recently used object in clock order. */
/* Unpinned objects an eviction compares (see the top of the file). */
#define EVICT_SAMPLE 8

static bool evict_one(ds_store_t *s)
{
    ds_obj_t *victim = NULL, *o = s->hand;
    uint32_t seen = 0;
    for (uint64_t i = 0; o != NULL && i < s->ring_count && seen < EVICT_SAMPLE;
         i++, o = o->clk_next) {
        if (o->refcnt > 1) continue;
        /* ticks wrap: compare by signed distance */
        if (victim == NULL || (int32_t)(o->atime - victim->atime) < 0) victim = o;
        seen++;
    }
    if (victim == NULL) return false;
    /* the objects looked at before the victim were used more recently: the
     * hand moves past them, as a clock's hand moves past set bits */
    s->hand = victim->clk_next;
    table_unlink(s, victim, UNLINK_EVICT);
    return true;
}

static uint64_t evictable_bytes(const ds_store_t *s)
{
    uint64_t bytes = 0;
    const ds_obj_t *o = s->hand;
    for (uint64_t i = 0; i < s->ring_count; i++, o = o->clk_next)
        if (o->refcnt <= 1) bytes += ds__block_size(o->block);
    return bytes;
}

static void oom_message(const ds_store_t *s, const char *key, size_t keylen, uint64_t size,
                        char *err, size_t err_cap)
{
    if (err == NULL || err_cap == 0) return;
    ds_alloc_stats_t st;
    ds__alloc_stats(s->alloc, &st);
    uint64_t held = st.used - evictable_bytes(s);
    snprintf(err, err_cap,
             "out of shared memory for key '%.*s': asked %llu bytes, %llu free (largest free "
             "range %llu), %llu held by pinned or non-evictable objects, arena %llu",
             (int)(keylen > 64 ? 64 : keylen), key, (unsigned long long)size,
             (unsigned long long)st.free, (unsigned long long)st.largest_free,
             (unsigned long long)held, (unsigned long long)st.total);
}

/* ---- public API ---- */

ds_store_t *ds__store_create(ds_arena_t *arena)
{
    return ds__store_create_indexed(arena, 0, 0);
}

ds_store_t *ds__store_create_indexed(ds_arena_t *arena, uint64_t index_slots, uint64_t value_max)
{
    uint64_t base = index_slots ? ds__shm_index_bytes(index_slots) : 0;
    if (base >= arena->size) return NULL;
    ds_store_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->arena = arena;
    s->base = base;
    s->alloc = ds__alloc_create(arena->size - base);
    if (s->alloc == NULL || ds__dict_init(&s->table, &obj_table_type, NULL, DS_HT_INITIAL) != 0) {
        ds__alloc_destroy(s->alloc);
        ds__dict_clear(&s->table);
        free(s);
        return NULL;
    }
    if (index_slots) {
        ds__shm_index_init(&s->ix, arena->base, index_slots);
        s->ix_on = true;
        s->ix_value_max = value_max;
    }
    return s;
}

bool ds__store_index(const ds_store_t *s, uint64_t *offset, uint64_t *slots)
{
    *offset = 0;
    *slots = s->ix_on ? s->ix.n + 1 : 0;
    return s->ix_on;
}

void ds__store_destroy(ds_store_t *s)
{
    if (s == NULL) return;
    /* Clients that still map the arena must stop reading the index now. */
    if (s->ix_on) ds__shm_index_set_live(&s->ix, false);
    ds__dict_clear(&s->table);
    while (s->limbo != NULL) {
        ds_obj_t *next = s->limbo->clk_next;
        free(s->limbo);
        s->limbo = next;
    }
    while (s->held != NULL) {
        ds_obj_t *next = s->held->clk_next;
        free(s->held);
        s->held = next;
    }
    free(s->pt);
    free(s->pt_taken);
    free(s->heap);
    ds__alloc_destroy(s->alloc);
    free(s);
}

uint8_t *ds__store_data(ds_store_t *s, const ds_obj_t *o)
{
    return s->arena->base + s->base + ds__block_offset(o->block);
}

uint64_t ds__store_offset(const ds_store_t *s, const ds_obj_t *o)
{
    return s->base + ds__block_offset(o->block);
}

ds_obj_t *ds__store_lookup(ds_store_t *s, const char *key, size_t keylen, uint64_t now_ms)
{
    ds_obj_t *o = ht_find(s, key, keylen, ds__murmur3_32(key, keylen, DS_HASH_SEED));
    if (o == NULL) return NULL;
    if (expired(o, now_ms)) {
        table_unlink(s, o, UNLINK_EXPIRE);
        return NULL;
    }
    o->atime = ++s->tick;
    return o;
}

/* A block of size bytes, evicting unpinned volatile objects in clock order
 * until it fits; NULL when it cannot. */
static ds_block_t *alloc_evicting(ds_store_t *s, uint64_t size)
{
    /* Ranges readers let go of since the last sweep go back first: the
     * allocator hands out the most recently freed range of a size, which
     * is likely still in the CPU's caches. */
    if (s->held != NULL) held_sweep(s);
    ds_block_t *b = ds__alloc_alloc(s->alloc, size);
    while (b == NULL) {
        /* Evicting cannot help when even the free space plus every evictable
         * byte falls short; failing early keeps the cache intact. */
        ds_alloc_stats_t st;
        ds__alloc_stats(s->alloc, &st);
        if (size > st.free + s->ring_bytes || !evict_one(s)) return NULL;
        b = ds__alloc_alloc(s->alloc, size);
    }
    return b;
}

/* A new CREATING object of key over block b, in limbo, refcnt 1. */
static void obj_init(ds_store_t *s, ds_obj_t *o, ds_block_t *b, uint64_t size, const char *key,
                     size_t keylen, ds_write_mode_t mode, uint32_t ttl_second)
{
    memset(o, 0, sizeof(*o));
    o->block = b;
    o->size = size;
    o->refcnt = 1;
    o->heap_idx = -1;
    o->hnode.hash = ds__murmur3_32(key, keylen, DS_HASH_SEED);
    o->keylen = (uint16_t)keylen;
    o->write_mode = (uint8_t)mode;
    o->state = DS_OBJ_CREATING;
    o->ttl_second = ttl_second;
    memcpy(o->key, key, keylen);
    o->key[keylen] = '\0';
    limbo_add(s, o);
}

/* An object struct for key (not yet initialised); NULL, with err set, when
 * the worker's private heap is out of memory. */
static ds_obj_t *obj_alloc(const char *key, size_t keylen, char *err, size_t err_cap)
{
    ds_obj_t *o = malloc(sizeof(*o) + keylen + 1);
    if (o == NULL && err != NULL && err_cap > 0)
        snprintf(err, err_cap, "worker out of private memory for key '%.*s'",
                 (int)(keylen > 64 ? 64 : keylen), key);
    return o;
}

ds_status_t ds__store_reserve(ds_store_t *s, const char *key, size_t keylen, uint64_t size,
                              ds_write_mode_t mode, uint32_t ttl_second, ds_obj_t **out, char *err,
                              size_t err_cap)
{
    *out = NULL;
    if (size == 0 || keylen == 0 || keylen > UINT16_MAX) {
        if (err != NULL && err_cap > 0)
            snprintf(err, err_cap, "cannot reserve %llu bytes for a %zu-byte key",
                     (unsigned long long)size, keylen);
        return DS_K_INVALID;
    }
    uint64_t total = (s->arena->size - s->base) & ~(uint64_t)(DS_ALLOC_ALIGN - 1);
    if (size > total || (size + DS_ALLOC_ALIGN - 1) / DS_ALLOC_ALIGN * DS_ALLOC_ALIGN > total) {
        if (err != NULL && err_cap > 0)
            snprintf(err, err_cap,
                     "value of %llu bytes for key '%.*s' exceeds the whole shared-memory arena "
                     "(%llu bytes)",
                     (unsigned long long)size, (int)(keylen > 64 ? 64 : keylen), key,
                     (unsigned long long)total);
        return DS_K_OUT_OF_MEMORY;
    }
    ds_obj_t *o = obj_alloc(key, keylen, err, err_cap);
    if (o == NULL) return DS_K_OUT_OF_MEMORY;
    ds_block_t *b = alloc_evicting(s, size);
    if (b == NULL) {
        oom_message(s, key, keylen, size, err, err_cap);
        free(o);
        return DS_K_OUT_OF_MEMORY;
    }
    obj_init(s, o, b, size, key, keylen, mode, ttl_second);
    *out = o;
    return DS_K_OK;
}

ds_status_t ds__store_publish(ds_store_t *s, ds_obj_t *o, ds_existence_t existence, uint64_t now_ms)
{
    if (o->state != DS_OBJ_CREATING || o->in_table)
        return ds__set_error(DS_K_INVALID, "object for key '%s' was already published", o->key);
    ds_obj_t *cur = ht_find(s, o->key, o->keylen, o->hnode.hash);
    if (cur != NULL && expired(cur, now_ms)) {
        table_unlink(s, cur, UNLINK_EXPIRE);
        cur = NULL;
    }
    if (cur != NULL && existence == DS_EXISTENCE_NX)
        return ds__set_error(DS_K_OC_KEY_ALREADY_EXIST, "key '%s' already exists", o->key);
    if (cur != NULL && cur->sealed)
        return ds__set_error(DS_K_OC_ALREADY_SEALED, "object '%s' already be sealed.", o->key);
    if (o->ttl_second != 0 && !heap_reserve(s))
        return ds__set_error(DS_K_OUT_OF_MEMORY, "worker out of private memory for the TTL of '%s'",
                             o->key);
    limbo_del(s, o);
    o->state = DS_OBJ_PUBLISHED;
    o->version = ++s->last_version;
    /* An indexed new version takes over the old one's slot in one rewrite
     * (one probe run instead of a removal and an insertion), before the old
     * version's range can be freed: the slot names an allocated range
     * throughout. */
    bool indexed = ix_wanted(s, o);
    if (indexed) ix_add(s, o);
    s->replacing = true;
    if (cur != NULL) table_unlink(s, cur, indexed ? UNLINK_REPLACED : UNLINK_DELETE);
    s->replacing = false;
    o->in_table = 1;
    o->refcnt++;
    ht_insert(s, o);
    if (s->ev) s->ev(s->ev_ctx, DS_STORE_EV_STORED, o);
    if (obj_evictable(o)) ring_add(s, o);
    if (o->ttl_second != 0) {
        o->ttl_deadline_ms = now_ms + (uint64_t)o->ttl_second * 1000u;
        heap_update(s, o);
    }
    return DS_K_OK;
}

void ds__store_persisted(ds_store_t *s, ds_obj_t *o)
{
    if (o->l2_persisted) return;
    o->l2_persisted = 1;
    if (o->in_table && obj_evictable(o)) ring_add(s, o);
}

void ds__store_ref(ds_obj_t *o)
{
    o->refcnt++;
}

void ds__store_unref(ds_store_t *s, ds_obj_t *o)
{
    if (o == NULL || o->refcnt == 0) return;
    if (--o->refcnt == 0 && !o->in_table) {
        limbo_del(s, o);
        obj_free(s, o);
    }
}

bool ds__store_delete(ds_store_t *s, const char *key, size_t keylen)
{
    ds_obj_t *o = ht_find(s, key, keylen, ds__murmur3_32(key, keylen, DS_HASH_SEED));
    if (o == NULL) return false;
    table_unlink(s, o, UNLINK_DELETE);
    return true;
}

ds_status_t ds__store_expire(ds_store_t *s, const char *key, size_t keylen, uint32_t ttl_second,
                             uint64_t now_ms)
{
    ds_obj_t *o = ds__store_lookup(s, key, keylen, now_ms);
    if (o == NULL)
        return ds__set_error(DS_K_NOT_FOUND, "key '%.*s' not found",
                             (int)(keylen > 64 ? 64 : keylen), key);
    if (ttl_second == 0) {
        if (o->heap_idx >= 0) heap_remove(s, o);
        o->ttl_deadline_ms = 0;
        o->ttl_second = 0;
        ix_add(s, o);
        return DS_K_OK;
    }
    if (o->heap_idx < 0 && !heap_reserve(s))
        return ds__set_error(DS_K_OUT_OF_MEMORY, "worker out of private memory for the TTL of '%s'",
                             o->key);
    ix_del(s, o);
    o->ttl_second = ttl_second;
    o->ttl_deadline_ms = now_ms + (uint64_t)ttl_second * 1000u;
    heap_update(s, o);
    return DS_K_OK;
}

uint64_t ds__store_expire_due(ds_store_t *s, uint64_t now_ms)
{
    while (s->heap_len > 0 && s->heap[0]->ttl_deadline_ms <= now_ms)
        table_unlink(s, s->heap[0], UNLINK_EXPIRE);
    return s->heap_len > 0 ? s->heap[0]->ttl_deadline_ms : 0;
}

void ds__store_foreach(ds_store_t *s, void (*fn)(void *ctx, ds_obj_t *o), void *ctx)
{
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &s->table);
    for (ds_obj_t *o; (o = ht_next(&it)) != NULL;)
        fn(ctx, o);
}

void ds__store_stats(const ds_store_t *s, ds_store_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->objects = ds__dict_count(&s->table);
    out->evictions = s->evictions;
    out->expirations = s->expirations;
    /* ds__store_ref has no store to report to, so in-table pins are counted
     * here by a walk; limbo objects are pinned by definition. */
    out->pinned = s->limbo_count - s->reservations + s->held_count;
    out->shm_held = s->held_count;
    out->pin_tables = s->npt;
    out->reservations = s->reservations;
    out->reserved_bytes = s->reserved_bytes;
    out->region_bytes = s->region_bytes;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &s->table);
    for (const ds_obj_t *o; (o = ht_next(&it)) != NULL;)
        if (o->refcnt > 1) out->pinned++;
    ds__alloc_stats(s->alloc, &out->arena);
    /* The GET index is arena space in use: totals stay the arena's size. */
    out->arena.total += s->base;
    out->arena.used += s->base;
}

void ds__store_usage(const ds_store_t *s, uint64_t *used, uint64_t *total)
{
    ds__alloc_usage(s->alloc, used, total);
}

uint32_t ds__store_evict_to(ds_store_t *s, uint64_t target_used, uint32_t max_objects)
{
    uint32_t n = 0;
    while (n < max_objects) {
        uint64_t used, total;
        ds__alloc_usage(s->alloc, &used, &total);
        if (used <= target_used || s->ring_count == 0 || !evict_one(s)) break;
        n++;
    }
    return n;
}

int ds__store_check(const ds_store_t *s)
{
    if (ds__alloc_check(s->alloc) != 0) return -1;
    if (ds__dict_verify(&s->table) != 0) return -5;
    uint64_t in_ring = 0, in_heap = 0;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &s->table);
    for (const ds_obj_t *o; (o = ht_next(&it)) != NULL;) {
        if (!o->in_table || o->refcnt < 1 || o->state != DS_OBJ_PUBLISHED || o->version == 0 ||
            o->version > s->last_version)
            return -2;
        if (obj_evictable(o) != (o->clk_next != NULL)) return -3;
        in_ring += o->clk_next != NULL;
        if ((o->ttl_deadline_ms != 0) != (o->heap_idx >= 0)) return -4;
        in_heap += o->heap_idx >= 0;
    }
    if (in_ring != s->ring_count || in_heap != s->heap_len) return -6;
    uint64_t bytes = 0;
    const ds_obj_t *o = s->hand;
    for (uint64_t i = 0; i < s->ring_count; i++, o = o->clk_next) {
        if (o->clk_next->clk_prev != o || !o->in_table) return -7;
        bytes += ds__block_size(o->block);
    }
    if (o != s->hand || bytes != s->ring_bytes) return -7;
    for (uint32_t i = 0; i < s->heap_len; i++) {
        if (s->heap[i]->heap_idx != (int32_t)i) return -8;
        if (i > 0 && s->heap[(i - 1) / 2]->ttl_deadline_ms > s->heap[i]->ttl_deadline_ms) return -8;
    }
    uint64_t limbo = 0;
    for (o = s->limbo; o != NULL; o = o->clk_next) {
        if (o->in_table || o->refcnt < 1 || (o->clk_next != NULL && o->clk_next->clk_prev != o))
            return -9;
        limbo++;
    }
    if (limbo != s->limbo_count) return -9;
    uint64_t held = 0;
    for (o = s->held; o != NULL; o = o->clk_next) {
        if (o->in_table || o->refcnt != 0 || !o->indexed ||
            (o->clk_next != NULL && o->clk_next->clk_prev != o))
            return -10;
        held++;
    }
    return held == s->held_count ? 0 : -10;
}

void ds__store_set_event_hook(ds_store_t *s, ds_store_event_fn fn, void *ctx)
{
    s->ev = fn;
    s->ev_ctx = ctx;
}

void ds__store_set_gone_hook(ds_store_t *s, ds_store_gone_fn fn, void *ctx)
{
    s->gone = fn;
    s->gone_ctx = ctx;
}

/* ---- reservations (see store.h) ---- */

ds_status_t ds__store_reserve_space(ds_store_t *s, uint64_t size, ds_obj_t **out, char *err,
                                    size_t err_cap)
{
    *out = NULL;
    ds_obj_t *o = calloc(1, sizeof(*o) + 1);
    if (o == NULL) {
        if (err != NULL && err_cap > 0) snprintf(err, err_cap, "worker out of private memory");
        return DS_K_OUT_OF_MEMORY;
    }
    o->refcnt = 1;
    o->heap_idx = -1;
    o->state = DS_OBJ_RESERVED;
    limbo_add(s, o);
    s->reservations++;
    ds_status_t st = ds__store_refill_space(s, o, size, err, err_cap);
    if (st != DS_K_OK) {
        ds__store_unref(s, o);
        return st;
    }
    *out = o;
    return DS_K_OK;
}

ds_status_t ds__store_refill_space(ds_store_t *s, ds_obj_t *space, uint64_t size, char *err,
                                   size_t err_cap)
{
    if (space->block) {
        s->reserved_bytes -= ds__block_size(space->block);
        ds__alloc_free(s->alloc, space->block);
        space->block = NULL;
    }
    space->size = 0;
    ds_block_t *b = size ? alloc_evicting(s, size) : NULL;
    if (b == NULL) {
        if (size) oom_message(s, "(reservation)", 13, size, err, err_cap);
        return size ? DS_K_OUT_OF_MEMORY : DS_K_OK;
    }
    space->block = b;
    space->size = ds__block_size(b);
    s->reserved_bytes += space->size;
    return DS_K_OK;
}

uint64_t ds__store_reserved(const ds_store_t *s)
{
    return s->reserved_bytes;
}

void ds__store_space(const ds_store_t *s, const ds_obj_t *space, uint64_t *offset, uint64_t *len)
{
    *offset = space->block ? s->base + ds__block_offset(space->block) : 0;
    *len = space->block ? ds__block_size(space->block) : 0;
}

ds_status_t ds__store_carve(ds_store_t *s, ds_obj_t *space, uint64_t offset, uint64_t size,
                            const char *key, size_t keylen, ds_write_mode_t mode,
                            uint32_t ttl_second, ds_obj_t **out, char *err, size_t err_cap)
{
    *out = NULL;
    uint64_t start, len;
    ds__store_space(s, space, &start, &len);
    uint64_t need = (size + DS_ALLOC_ALIGN - 1) / DS_ALLOC_ALIGN * DS_ALLOC_ALIGN;
    if (space->state != DS_OBJ_RESERVED || size == 0 || keylen == 0 || keylen > UINT16_MAX ||
        offset < start || (offset - start) % DS_ALLOC_ALIGN != 0 || size > len ||
        need > len - (offset - start)) {
        if (err != NULL && err_cap > 0)
            snprintf(err, err_cap,
                     "range [%llu, +%llu) for key '%.*s' is not an aligned range of the "
                     "reservation [%llu, +%llu)",
                     (unsigned long long)offset, (unsigned long long)size,
                     (int)(keylen > 64 ? 64 : keylen), key, (unsigned long long)start,
                     (unsigned long long)len);
        return DS_K_INVALID;
    }
    ds_obj_t *o = obj_alloc(key, keylen, err, err_cap);
    if (o == NULL) return DS_K_OUT_OF_MEMORY;
    ds_block_t *b = space->block;
    uint64_t gap = offset - start;
    if (gap > 0) {
        ds_block_t *back = ds__alloc_split(s->alloc, b, gap);
        if (back == NULL) goto oom;
        ds__alloc_free(s->alloc, b); /* the space before the range */
        s->reserved_bytes -= gap;
        space->block = b = back;
    }
    ds_block_t *rest = NULL;
    if (need < len - gap) {
        rest = ds__alloc_split(s->alloc, b, need);
        if (rest == NULL) goto oom;
    }
    space->block = rest;
    space->size = rest ? ds__block_size(rest) : 0;
    s->reserved_bytes -= need;
    obj_init(s, o, b, size, key, keylen, mode, ttl_second);
    *out = o;
    return DS_K_OK;
oom:
    free(o);
    if (err != NULL && err_cap > 0) snprintf(err, err_cap, "worker out of private memory");
    return DS_K_OUT_OF_MEMORY;
}
