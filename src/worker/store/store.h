/* The object store: the key -> object table over the arena, with versions,
 * reader references, clock eviction of volatile objects and TTL expiry.
 *
 * An object (ds_obj_t) is one immutable version of a key's value. Its
 * reference count holds one reference for the table while it is the key's
 * current version, one for the client that created it until publish, and one
 * per reader pin. Overwrite and delete only drop the table's reference: the
 * arena range is freed when the last reference goes, so a reader's bytes stay
 * intact for as long as it holds its pin.
 *
 * Not thread-safe: the worker's event loop is the only caller. */
#ifndef DS_WORKER_STORE_H
#define DS_WORKER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/kv_client.h"
#include "common/dict.h"
#include "worker/store/alloc.h"
#include "worker/store/arena.h"

typedef enum {
    DS_OBJ_CREATING = 0, /* reserved, being written, invisible to readers */
    DS_OBJ_PUBLISHED,    /* the key's current version (in_table) or a superseded one */
    DS_OBJ_RESERVED,     /* keyless arena space a local session holds to write values into
                            before it names them (ds__store_carve); never in the table,
                            never evicted; block NULL once all of it was carved */
} ds_obj_state_t;

typedef struct ds_obj {
    ds_dict_node_t hnode;               /* in the store's key table; hnode.hash is the key's */
    struct ds_obj *clk_prev, *clk_next; /* ring of evictable objects (in_table, EVICT mode) */
    ds_block_t *block;                  /* arena range; NULL for size 0 never happens */
    uint64_t size;                      /* value size in bytes (<= block size) */
    uint64_t version;                   /* store-wide increasing publish counter */
    uint64_t ttl_deadline_ms;           /* monotonic ms; 0 = none */
    uint32_t refcnt;
    int32_t heap_idx; /* index in the TTL heap, -1 if not there */
    uint16_t keylen;
    uint8_t write_mode; /* ds_write_mode_t */
    uint8_t state;      /* ds_obj_state_t */
    uint8_t in_table;
    uint8_t l2_persisted; /* its L2 copy is durable (a WRITE_BACK_L2_CACHE_EVICT
                             object is then evictable) */
    uint8_t spilling;     /* being copied to the spill directory (ops/tier.c) */
    uint8_t indexed;      /* was in the shared GET index: readers' shared pins may name it */
    uint8_t sealed;       /* SEAL: no later version may replace it (only a delete) */
    uint32_t ttl_second;  /* as requested; applied at publish */
    uint32_t atime;       /* store tick of its last write or lookup (eviction) */
    char key[];           /* keylen bytes + NUL */
} ds_obj_t;

typedef struct ds_store ds_store_t;

typedef struct {
    uint64_t objects; /* keys in the table */
    uint64_t evictions;
    uint64_t expirations;
    uint64_t pinned;         /* objects with references beyond the table's */
    uint64_t shm_held;       /* of those, ranges kept only for readers' shared pins */
    uint64_t pin_tables;     /* readers' pin tables (one per local session) */
    uint64_t reservations;   /* DS_OBJ_RESERVED spaces */
    uint64_t reserved_bytes; /* arena bytes they hold (part of arena.used) */
    uint64_t region_bytes;   /* regions of ds__store_region (part of arena.used) */
    ds_alloc_stats_t arena;
} ds_store_stats_t;

/* The arena is borrowed and must outlive the store. NULL on out of memory. */
ds_store_t *ds__store_create(ds_arena_t *arena);
/* The same, with the shared GET index (common/shm_index.h) of index_slots
 * slots at the arena's start, listing current objects
 * without a TTL of at most value_max bytes; objects live in the rest. */
ds_store_t *ds__store_create_indexed(ds_arena_t *arena, uint64_t index_slots, uint64_t value_max);
/* A reader's pin table may name o's range though it was never indexed (a
 * writer's view, SETR's DS_SETR_SHM_PIN): it is checked before the range
 * is freed. */
void ds__store_mark_shm_pinned(ds_obj_t *o);
/* Where the index lies in the arena; false (and *slots 0) without one. */
bool ds__store_index(const ds_store_t *s, uint64_t *offset, uint64_t *slots);
/* Frees every object regardless of references. */
void ds__store_destroy(ds_store_t *s);

/* Pointer to an object's bytes in the worker's mapping. */
uint8_t *ds__store_data(ds_store_t *s, const ds_obj_t *o);
/* The object's offset in the arena (what local clients map). */
uint64_t ds__store_offset(const ds_store_t *s, const ds_obj_t *o);

/* The key's current published version, or NULL (also when its TTL passed:
 * expired objects are removed lazily here as well as by ds__store_expire_due).
 * Marks the object recently used for the clock. No reference is taken. */
ds_obj_t *ds__store_lookup(ds_store_t *s, const char *key, size_t keylen, uint64_t now_ms);

/* Reserves arena space for a new version (state CREATING, refcnt 1 owned by the
 * caller, not yet in the table). Evicts volatile objects that no reader holds,
 * clock order, until the space fits. DS_K_OUT_OF_MEMORY with a message when it
 * cannot. Key validity is the caller's job. */
ds_status_t ds__store_reserve(ds_store_t *s, const char *key, size_t keylen, uint64_t size,
                              ds_write_mode_t mode, uint32_t ttl_second, ds_obj_t **out, char *err,
                              size_t err_cap);

/* Reservations. Keyless arena space (state DS_OBJ_RESERVED, refcnt 1 owned
 * by the caller) that a local client writes values into before naming them:
 * reserve_space allocates it (evicting like ds__store_reserve; reserved space
 * itself is never evicted), carve turns the range [offset, offset + size)
 * (an arena offset, DS_ALLOC_ALIGN-aligned, inside the space) into a new
 * CREATING object for key, as ds__store_reserve would have made it: the
 * space before the range is freed and the space keeps what follows it, so a
 * range is never carved twice. Dropping the last reference frees what is
 * left. */
ds_status_t ds__store_reserve_space(ds_store_t *s, uint64_t size, ds_obj_t **out, char *err,
                                    size_t err_cap);
ds_status_t ds__store_carve(ds_store_t *s, ds_obj_t *space, uint64_t offset, uint64_t size,
                            const char *key, size_t keylen, ds_write_mode_t mode,
                            uint32_t ttl_second, ds_obj_t **out, char *err, size_t err_cap);
/* Replaces what is left of a space by a fresh range of size bytes (the old
 * range is freed first); on failure the space is left empty. */
ds_status_t ds__store_refill_space(ds_store_t *s, ds_obj_t *space, uint64_t size, char *err,
                                   size_t err_cap);
/* Bytes held by all spaces, in O(1). */
uint64_t ds__store_reserved(const ds_store_t *s);
/* The space's current range: arena offset and length (0, 0 when empty). */
void ds__store_space(const ds_store_t *s, const ds_obj_t *space, uint64_t *offset, uint64_t *len);

/* Readers' shared pins (common/shm_index.h, ds_shm_pins_t): a local
 * session's table of zero-copy views taken without a request.
 * pins_reserve allocates room for `tables` tables once (no tables without
 * it); pins_open gives a session a zeroed table, by its arena offset
 * (DS_K_OUT_OF_MEMORY when all are taken); pins_close gives it back, and
 * frees every range only that table kept. The range of an
 * object that was ever indexed is not freed while some table names it: the
 * object is held, and held_due (called from the event loop; returns when it
 * wants to run next, 0 = nothing held) frees those no table names any more,
 * as does an allocation that would otherwise evict. */
ds_status_t ds__store_pins_reserve(ds_store_t *s, uint32_t tables);
ds_status_t ds__store_pins_open(ds_store_t *s, uint64_t *offset);
void ds__store_pins_close(ds_store_t *s, uint64_t offset);
uint64_t ds__store_held_due(ds_store_t *s, uint64_t now_ms);
/* A region of the arena for the store's owner (the request lanes of
 * common/lane.h), allocated once for the worker's lifetime: its arena offset
 * and its address in the worker's mapping. DS_K_OUT_OF_MEMORY without room. */
ds_status_t ds__store_region(ds_store_t *s, uint64_t bytes, uint64_t *offset, uint8_t **addr);

/* Makes a CREATING object the key's current version. With DS_EXISTENCE_NX and a
 * current version present: DS_K_OC_KEY_ALREADY_EXIST, nothing changes. The
 * current version that is sealed: DS_K_OC_ALREADY_SEALED, nothing changes. The
 * superseded version leaves the table (and is freed once unreferenced). The
 * table takes its own reference; the caller's stays with the caller. The TTL
 * clock starts here. */
ds_status_t ds__store_publish(ds_store_t *s, ds_obj_t *o, ds_existence_t existence,
                              uint64_t now_ms);

/* o's L2 copy is durable: a WRITE_BACK_L2_CACHE_EVICT object becomes
 * evictable (enters the clock ring if it is in the table). */
void ds__store_persisted(ds_store_t *s, ds_obj_t *o);

void ds__store_ref(ds_obj_t *o);
/* Drops a reference; frees the arena range and the object at zero. */
void ds__store_unref(ds_store_t *s, ds_obj_t *o);

/* Removes the key's current version. true if there was one. */
bool ds__store_delete(ds_store_t *s, const char *key, size_t keylen);
/* Sets a new TTL from now (0 clears it). DS_K_NOT_FOUND if missing. */
ds_status_t ds__store_expire(ds_store_t *s, const char *key, size_t keylen, uint32_t ttl_second,
                             uint64_t now_ms);
/* Deletes every object whose deadline is <= now_ms. Returns the earliest
 * remaining deadline, or 0 when none. */
uint64_t ds__store_expire_due(ds_store_t *s, uint64_t now_ms);

/* Calls fn for every key in the table (for cluster re-registration and
 * listings). fn must not modify the store. */
void ds__store_foreach(ds_store_t *s, void (*fn)(void *ctx, ds_obj_t *o), void *ctx);

void ds__store_stats(const ds_store_t *s, ds_store_stats_t *out);
/* Arena bytes allocated and in all (objects' part of the arena), in O(1). */
void ds__store_usage(const ds_store_t *s, uint64_t *used, uint64_t *total);

/* Background eviction: evicts unpinned volatile objects in clock order
 * until arena use is at most target_used, at most max_objects of them.
 * Returns how many it evicted (max_objects: there may be more to do). */
uint32_t ds__store_evict_to(ds_store_t *s, uint64_t target_used, uint32_t max_objects);

/* Called when an object leaves the table by eviction or TTL expiry (not by
 * overwrite or delete, which the caller already knows about), before its
 * table reference is dropped; the cluster uses it to tell the key's owner. */
/* Key events (the KV event publisher): STORED when a version becomes the
 * key's current one (a new key or an overwrite), REMOVED when a key leaves
 * the table without a successor (delete, eviction, expiry). Called on the
 * event loop, inside the store: fn must not touch the store. */
typedef enum { DS_STORE_EV_STORED = 0, DS_STORE_EV_REMOVED = 1 } ds_store_ev_t;
typedef void (*ds_store_event_fn)(void *ctx, ds_store_ev_t ev, const ds_obj_t *o);
void ds__store_set_event_hook(ds_store_t *s, ds_store_event_fn fn, void *ctx);
typedef void (*ds_store_gone_fn)(void *ctx, const ds_obj_t *o);
void ds__store_set_gone_hook(ds_store_t *s, ds_store_gone_fn fn, void *ctx);
/* Walks the table, clock ring, TTL heap and allocator and checks that they
 * agree with each other. 0 when sound; for tests. */
int ds__store_check(const ds_store_t *s);

#endif
