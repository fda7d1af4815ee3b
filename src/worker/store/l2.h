/* The L2 cache backend interface: a second, persistent tier behind the
 * arena. A backend stores whole objects by key; each call is synchronous and
 * may block on disk, so only the worker's disk I/O thread (ops/tier_io.c) calls
 * put, get and del. open and scan run on the loop at start-up, before any
 * client is served.
 *
 * Backends: sfs (l2_sfs.c), a directory on a possibly shared file system,
 * one object per file, written to a temporary name, fsynced and renamed, so
 * no reader ever sees half an object; distributed_disk (l2_dd.c), one
 * append-only log per worker with an in-memory index, group commit and
 * compaction. */
#ifndef DS_WORKER_STORE_L2_H
#define DS_WORKER_STORE_L2_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a backend keeps beside the bytes. */
typedef struct {
    uint64_t size;
    uint64_t version;     /* the worker's version when written (informational) */
    uint64_t ttl_wall_ms; /* absolute deadline, wall clock (CLOCK_REALTIME) ms; 0 = none */
    uint8_t write_mode;   /* ds_write_mode_t */
} ds_l2_meta_t;

#define DS_L2_KEY_MAX 1024 /* DS_MAX_KEY_LEN */

typedef struct ds_l2 ds_l2_t;

/* Every call returns 0, or -1 with err filled (naming the path and errno
 * where there is one). get returns 1 when the key has no object. put and del
 * of a backend with group commit (sync not NULL) may return DS_L2_PENDING:
 * the record is written but durable only once a later sync returns 1. */
#define DS_L2_PENDING 2
typedef struct {
    const char *name;
    int (*put)(ds_l2_t *l2, const char *key, size_t keylen, const void *data,
               const ds_l2_meta_t *meta, char *err, size_t cap);
    /* Reads the object into dst (cap bytes, at least its size); a torn,
     * foreign or corrupt object is an error, never served. sfs: dst NULL
     * reads and checks only the header, filling meta (a probe for a key
     * the worker has no index entry for, e.g. another worker's object on a
     * shared directory). */
    int (*get)(ds_l2_t *l2, const char *key, size_t keylen, void *dst, uint64_t dst_cap,
               ds_l2_meta_t *meta, char *err, size_t cap);
    /* Deleting a missing key succeeds. */
    int (*del)(ds_l2_t *l2, const char *key, size_t keylen, char *err, size_t cap);
    /* Calls fn for every valid object (headers only, not the bytes), deleting
     * expired objects (deadline <= now_wall_ms), leftover temporary files and
     * files that fail their header check. Returns the number of objects
     * listed, or -1. */
    int64_t (*scan)(ds_l2_t *l2, uint64_t now_wall_ms,
                    void (*fn)(void *ctx, const char *key, size_t keylen, const ds_l2_meta_t *m),
                    void *ctx, char *err, size_t cap);
    void (*destroy)(ds_l2_t *l2);
    /* Group commit (NULL: every put and del is durable when it returns).
     * Returns 1 when everything written so far is durable (synced now, or
     * nothing was pending), 0 when nothing is due yet (the batch is short of
     * its bytes and interval and idle is false), -1 with err filled when the
     * sync failed (the pending records are not durable). idle: the caller
     * has nothing else queued, so anything pending is synced now. */
    int (*sync)(ds_l2_t *l2, bool idle, char *err, size_t cap);
    /* Background upkeep (compaction), NULL if none: called by the same
     * thread between calls, when nothing is queued or pending. It does a
     * bounded step and returns true while it has more to do (call again
     * when nothing is queued), so jobs never wait for more than one step. */
    bool (*maintain)(ds_l2_t *l2);
} ds_l2_ops_t;

/* Figures a backend keeps for STATS; written by the I/O thread, read by the
 * loop (relaxed atomics). */
typedef struct {
    atomic_uint_fast64_t fsyncs;        /* fsync / fdatasync calls on data */
    atomic_uint_fast64_t file_bytes;    /* distributed_disk: size of the log */
    atomic_uint_fast64_t dead_bytes;    /* distributed_disk: overwritten, deleted, expired */
    atomic_uint_fast64_t compactions;   /* distributed_disk: compactions completed */
    atomic_uint_fast64_t torn_bytes;    /* distributed_disk: torn tail truncated at open */
    atomic_uint_fast64_t damaged_bytes; /* distributed_disk: damage skipped mid-log at open */
} ds_l2_figures_t;

struct ds_l2 {
    const ds_l2_ops_t *ops;
    char path[512]; /* for messages */
    ds_l2_figures_t fig;
};

/* Opens (creating if missing) the sfs directory. NULL with err filled. */
ds_l2_t *ds__l2_sfs_open(const char *dir, char *err, size_t cap);
/* The file name sfs uses for key (for tests and messages). */
int ds__l2_sfs_name(const char *key, size_t keylen, char *out, size_t cap);

/* distributed_disk settings (--distributed_disk_*). */
typedef struct {
    uint64_t sync_interval_ms;       /* longest a written record waits for its sync */
    uint64_t sync_batch_bytes;       /* bytes written that force a sync */
    uint64_t compact_min_dead_bytes; /* compaction needs at least this much dead space */
    uint32_t compact_dead_pct;       /* ... and this share of the log (percent) */
    uint64_t compact_step_bytes;     /* bytes a compaction step copies (0: 8 MiB) */
} ds_l2_dd_opts_t;

/* Opens (creating if missing) the log of one worker under root:
 * root/<cluster>/<worker>/data.log, <worker> being the worker's host:port
 * with bytes outside [A-Za-z0-9._-] as '_' (stable across restarts on the
 * same address). Replays the log into the index; a torn tail is truncated.
 * NULL with err filled (also when another live process holds the log). */
ds_l2_t *ds__l2_dd_open(const char *root, const char *cluster, const char *worker,
                        const ds_l2_dd_opts_t *o, char *err, size_t cap);

#endif
