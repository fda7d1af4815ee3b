/* The L2 cache backend interface: a second, persistent tier behind the
 * arena. A backend stores whole objects by key; each call is synchronous and
 * may block on disk, so only the worker's disk I/O thread (ops/tier.c) calls
 * put, get and del. open and scan run on the loop at start-up, before any
 * client is served.
 *
 * Backends: sfs (l2_sfs.c), a directory on a possibly shared file system,
 * one object per file, written to a temporary name, fsynced and renamed, so
 * no reader ever sees half an object. */
#ifndef DS_WORKER_STORE_L2_H
#define DS_WORKER_STORE_L2_H

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
 * where there is one). get returns 1 when the key has no object. */
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
} ds_l2_ops_t;

struct ds_l2 {
    const ds_l2_ops_t *ops;
    char path[512]; /* for messages */
};

/* Opens (creating if missing) the sfs directory. NULL with err filled. */
ds_l2_t *ds__l2_sfs_open(const char *dir, char *err, size_t cap);
/* The file name sfs uses for key (for tests and messages). */
int ds__l2_sfs_name(const char *key, size_t keylen, char *out, size_t cap);

#endif
