/* Storage tiers behind the arena (docs/design.md section 8): the L2 cache
 * (store/l2.h), the spill directory, and the disk I/O thread that alone
 * calls their backends.
 *
 * Off (srv->tier NULL) unless --l2_cache_type names a backend or
 * --spill_directory is set; every entry
 * point below is then never called, so a worker without L2 behaves and
 * performs exactly as before.
 *
 * The loop keeps an index of what the L2 holds (key -> size, deadline, write
 * mode), updated when a write or delete is queued, so a GET that misses
 * memory only goes to disk for keys the L2 has, NX and EXIST see L2 objects,
 * and the queue's FIFO order makes every later read see the queued writes.
 * The I/O thread takes jobs from one bounded queue
 * (--l2_cache_async_write_queue_size) and hands them back through an eventfd;
 * it touches only the bytes of the arena range a job pins and its own files. */
#ifndef DS_WORKER_OPS_TIER_H
#define DS_WORKER_OPS_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/net/request.h"
#include "worker/store/l2.h"
#include "worker/store/store.h"

typedef struct ds_server ds_server_t;
struct cJSON;

/* Opens the backend named by --l2_cache_type (nothing for "none"), indexes
 * what it holds (deleting expired objects) and starts the I/O thread. */
int ds__tier_init(ds_server_t *srv, char *err, size_t cap);
/* Finishes queued jobs (write-back included), answers their requests and
 * stops the thread. */
void ds__tier_destroy(ds_server_t *srv);

/* Before publishing o: DS_K_OK; DS_K_OC_KEY_ALREADY_EXIST when nx and the
 * L2 holds the key (the caller keeps the old value, as for a key in memory);
 * DS_K_WRITE_BACK_QUEUE_FULL (msg filled) when an L2 write cannot be queued. */
ds_status_t ds__tier_admit(ds_server_t *srv, const ds_obj_t *o, bool nx, char *msg, size_t cap);
/* o has become its key's current version: queue its L2 write (write-back,
 * or write-through, whose answer ds__tier_hold_answer then holds back), or
 * delete a stale L2 copy (a cache-only overwrite). */
void ds__tier_published(ds_server_t *srv, ds_obj_t *o, uint32_t idx);
/* The answer to the writes just published: true when it is held until their
 * write-through L2 writes are durable (the tier then answers r through
 * ds__ops_answer_durable, which in a cluster tells the owners first;
 * statuses of failed writes become K_IO_ERROR naming the path and errno). */
bool ds__tier_hold_answer(ds_server_t *srv, ds_req_t *r, ds_obj_t **published, const uint32_t *st,
                          uint32_t n, bool nx, const char *first_err);
/* The writes just published get no answer (NOREPLY): persist them anyway. */
void ds__tier_no_answer(ds_server_t *srv);

/* GET: loads keys missing from memory that the L2 or the spill directory
 * holds into the arena, then calls resume(srv, d) with the deferred request;
 * false when nothing needs loading (r untouched). When the arena has no room
 * and spilling can make some, calls retry(srv, d) instead once the spills
 * are done (retry NULL: no second wait). A key on disk for which no room
 * can be made is answered K_OUT_OF_MEMORY (true) when nothing else loads. */
bool ds__tier_get(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                  uint32_t n, void (*resume)(ds_server_t *srv, ds_req_t *d),
                  void (*retry)(ds_server_t *srv, ds_req_t *d));
/* A cluster GET's keys that no live worker could serve: loads those the
 * local tiers hold, and with --enable_l2_cache_fallback on an sfs L2 also
 * those its directory holds without an index entry (a shared directory:
 * another, possibly dead, worker's objects), then calls done(srv, d, ctx)
 * (which must check ds__req_gone). false when nothing needs loading. */
bool ds__tier_get_ctx(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                      uint32_t n, void (*done)(ds_server_t *srv, ds_req_t *d, void *ctx),
                      void *ctx);
/* While a get that loaded keys from the L2 is answered: why one of them
 * could not be read (the index listed it, the copy was missing or
 * corrupt); NULL otherwise. */
const char *ds__tier_get_miss(ds_server_t *srv);
/* The L2 holds the key (and it has not expired). */
bool ds__tier_has(ds_server_t *srv, const char *key, uint32_t keylen);
/* DEL of the request's key idx: forget the key and delete its L2 copy
 * (queued; the answer, held by ds__tier_hold_answer, waits for the L2
 * delete and says K_IO_ERROR for idx if it failed) and its spill copy. */
void ds__tier_del(ds_server_t *srv, const char *key, uint32_t keylen, uint32_t idx);
/* idx for a delete no answer waits for (the cluster's DEL and DROP). */
#define DS_TIER_UNWATCHED UINT32_MAX

/* A write found no room for size bytes: adds the arena's and the spill
 * directory's figures to msg. */
void ds__tier_oom(ds_server_t *srv, uint64_t size, char *msg, size_t cap);
/* A write found no room for size bytes: when spills can make some (or
 * queued write-backs of WRITE_BACK_L2_CACHE_EVICT objects, which become
 * evictable once written), defers r
 * (or keeps it deferred) and calls rerun(srv, d) once they are done, to run
 * the write again (at most ROOM_WAIT_MS in all). false when nothing can make
 * room (no spill directory, both tiers full, or the wait is over): the
 * write then fails with K_OUT_OF_MEMORY. */
bool ds__tier_wait_room(ds_server_t *srv, ds_req_t *r, uint64_t size,
                        void (*rerun)(ds_server_t *srv, ds_req_t *d));
/* Background spilling (memory.c, spill true when arena use is past the
 * high watermark and eviction could not help) down to low bytes, and
 * deadlines of waiting writes; returns the next deadline (0 = none). */
uint64_t ds__tier_tick(ds_server_t *srv, uint64_t now, bool spill, uint64_t low);

/* EXPIRE changed o's TTL: its L2 copy is rewritten with the new deadline
 * (queued, like a write-back). */
void ds__tier_expire(ds_server_t *srv, ds_obj_t *o);

/* EXPIRE of a key that is not in memory: a new deadline (ttl seconds from
 * now, 0 none) for its L2 or spill copy (the L2 file is rewritten, queued).
 * DS_K_NOT_FOUND when neither holds it. */
ds_status_t ds__tier_expire_key(ds_server_t *srv, const char *key, uint32_t keylen, uint32_t ttl);

/* The "l2" section of STATS, and the figures /metrics shows. */
void ds__tier_stats(ds_server_t *srv, struct cJSON *root);
typedef struct {
    bool l2_on, spill_on;
    uint64_t objects, bytes, reads, read_bytes, writes, write_bytes, deletes, errors;
    uint64_t queue_depth, queue_cap, queue_full, fallback_reads, coalesced, retries, retry_pending;
    uint64_t spill_objects, spill_bytes, spill_disk, spill_limit, spill_writes, spill_reads,
        spill_errors, spill_rounds, spill_waits;
    /* the L2 backend's own figures (store/l2.h ds_l2_figures_t) */
    uint64_t fsyncs, file_bytes, dead_bytes, compactions, torn_bytes, damaged_bytes;
} ds_tier_counters_t;
bool ds__tier_counters(ds_server_t *srv, ds_tier_counters_t *out);

#endif
