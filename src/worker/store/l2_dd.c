/* The distributed_disk L2 backend: one append-only log per worker, an index
 * of it in memory, group commit and compaction.
 *
 * Where: <root>/<cluster>/<worker>/data.log, <worker> being the worker's
 * --worker_address with every byte outside [A-Za-z0-9._-] as '_' (so
 * "127.0.0.1:31501" -> "127.0.0.1_31501"). The address is what stays the
 * same when a worker restarts on the same path, so the restarted worker
 * finds its own log; two live workers on one address and path cannot both
 * open it: the worker's directory is flock()ed while open.
 *
 * File: a 64-byte header ("DSDDLOG1", u32 64, u32 format 1, u64 generation,
 * zeros, u64 checksum of bytes 0..55), then records, each
 *   0  magic "DSDDREC1"    8  u8 type (1 put, 2 delete)   9 u8 write mode
 *   12 u32 key length      16 u64 value size (0 for a delete)
 *   24 u64 version         32 u64 ttl deadline, wall-clock ms (0 none)
 *   48 u64 checksum of the value (ds__sum64)
 *   56 u64 checksum of bytes 0..55 and the key
 *   64 the key, then the value.
 * (Host byte order, little-endian on every target we build for.)
 *
 * Open replays the log into the index (key -> offset, size, deadline, mode),
 * checking every header and value checksum. A record that is short, has a
 * bad header or runs past the end of the file, with no intact record after
 * it, and a last record whose value does not match its checksum, is a torn
 * tail from a crash: the file is truncated there (logged) and nothing of it
 * is ever served. Damage in the middle (media corruption) is skipped: a
 * record whose value fails its checksum is dropped with its key; a damaged
 * header is passed over up to the next intact record (resync), the bytes
 * between counted in damaged_bytes (a record lost that way is not known,
 * so a tombstone among them can let an older value of its key return).
 *
 * Group commit: put and del append with pwritev and return DS_L2_PENDING;
 * sync fdatasyncs once for every record written since the last one, when
 * --distributed_disk_sync_batch_bytes are pending, when the oldest pending
 * record has waited --distributed_disk_sync_interval_ms, or when the caller
 * is idle (its queue is empty). A failed sync (or a log found unlinked)
 * makes the backend refuse writes until the worker restarts, since after a
 * failed fsync the kernel may have dropped the unwritten pages.
 *
 * Compaction (maintain, between jobs with nothing pending): once dead bytes
 * (overwritten, deleted, expired records and tombstones) reach both
 * compact_min_dead_bytes and compact_dead_pct of the log, the live records
 * are copied in log order into data.compact, which is fsynced and renamed
 * onto data.log (then the directory fsynced). A crash before the rename
 * leaves the old log intact (open deletes the leftover data.compact); after
 * it, the new one is complete. Only the disk I/O thread calls this backend,
 * so compaction needs no lock: jobs wait while it runs. */
#include "worker/store/l2.h"

#include "common/clock.h"
#include "common/dict.h"
#include "common/hash.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define DD_FILE_MAGIC "DSDDLOG1"
#define DD_REC_MAGIC "DSDDREC1"
#define DD_HDR 64u
#define DD_LOG "data.log"
#define DD_TMP "data.compact"
#define DD_CHUNK (1u << 20)
enum { REC_PUT = 1, REC_DEL = 2 };

typedef struct dent {
    ds_dict_node_t node; /* in dd_t.table, by key */
    uint64_t off;        /* the record's offset in the log */
    uint64_t size, version, ttl_wall_ms;
    uint32_t keylen;
    uint8_t mode;
    char key[];
} dent_t;

typedef struct {
    ds_l2_t base;
    int dir_fd, fd;
    ds_dict_t table;  /* the live records (dent_t) by key; it frees those left at close */
    uint64_t end;     /* where the next record goes (the log's size) */
    uint64_t live;    /* the file header plus every live record */
    uint64_t pending; /* bytes written since the last sync */
    uint64_t pending_since_ms;
    uint64_t generation;
    uint64_t retry_dead; /* after a failed compaction: wait for this much dead */
    int broken;          /* errno of a failed sync: writes refused */
    char broken_msg[800];
    ds_l2_dd_opts_t o;
    /* A compaction in progress (see compact_step): the live records at its
     * start, in log order, and where each went in data.compact. */
    struct {
        int fd; /* data.compact; -1 when none is in progress */
        uint64_t *from, *len, *to;
        uint64_t n, i, out;
        uint64_t start_end; /* the log's end when it started */
        uint64_t t0, before, dead;
        uint8_t *buf;
    } c;
} dd_t;

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t rec_len(const dent_t *e)
{
    return DD_HDR + e->keylen + e->size;
}

static void figures(dd_t *d)
{
    atomic_store_explicit(&d->base.fig.file_bytes, d->end, memory_order_relaxed);
    atomic_store_explicit(&d->base.fig.dead_bytes, d->end - d->live, memory_order_relaxed);
}

/* ---- the index (disk I/O thread only) ---- */

static bool dent_key_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const dent_t *e = DS_DICT_ENTRY(n, dent_t, node);
    return e->keylen == len && memcmp(e->key, key, len) == 0;
}

static void dent_destroy(ds_dict_node_t *n, void *ctx)
{
    (void)ctx;
    free(DS_DICT_ENTRY(n, dent_t, node));
}

static const ds_dict_type_t dent_type = {dent_key_eq, dent_destroy};

static dent_t *ix_find(dd_t *d, const char *key, uint32_t kl)
{
    ds_dict_node_t *n = ds__dict_find(&d->table, key, kl, ds__murmur3_32(key, kl, 0));
    return n ? DS_DICT_ENTRY(n, dent_t, node) : NULL;
}

/* Drops entry e, its record now dead space. Moves no other entry, so a walk
 * of the table may drop the entry it is at. */
static void ix_unlink(dd_t *d, dent_t *e)
{
    ds__dict_remove(&d->table, &e->node);
    d->live -= rec_len(e);
    free(e);
}

static void ix_del(dd_t *d, const char *key, uint32_t kl)
{
    dent_t *e = ix_find(d, key, kl);
    if (e != NULL) ix_unlink(d, e);
}

static int ix_set(dd_t *d, const char *key, uint32_t kl, uint64_t off, const ds_l2_meta_t *m)
{
    ix_del(d, key, kl);
    dent_t *e = malloc(sizeof(*e) + kl);
    if (e == NULL) return -1;
    e->keylen = kl;
    e->off = off;
    e->size = m->size;
    e->version = m->version;
    e->ttl_wall_ms = m->ttl_wall_ms;
    e->mode = m->write_mode;
    memcpy(e->key, key, kl);
    ds__dict_add(&d->table, &e->node, ds__murmur3_32(key, kl, 0));
    d->live += rec_len(e);
    return 0;
}

/* ---- records ---- */

static void rec_fill(uint8_t h[DD_HDR], uint8_t type, const char *key, uint32_t kl,
                     const ds_l2_meta_t *m, uint64_t dsum)
{
    memset(h, 0, DD_HDR);
    memcpy(h, DD_REC_MAGIC, 8);
    h[8] = type;
    h[9] = m->write_mode;
    memcpy(h + 12, &kl, 4);
    memcpy(h + 16, &m->size, 8);
    memcpy(h + 24, &m->version, 8);
    memcpy(h + 32, &m->ttl_wall_ms, 8);
    memcpy(h + 48, &dsum, 8);
    uint64_t hs = ds__sum64(ds__sum64(DS_SUM64_SEED, h, 56), key, kl);
    memcpy(h + 56, &hs, 8);
}

/* The fields of a header; its checksum is checked with the key (rec_key_ok). */
static int rec_parse(const uint8_t h[DD_HDR], uint8_t *type, uint32_t *kl, ds_l2_meta_t *m,
                     uint64_t *dsum)
{
    if (memcmp(h, DD_REC_MAGIC, 8) != 0 || (h[8] != REC_PUT && h[8] != REC_DEL)) return -1;
    *type = h[8];
    m->write_mode = h[9];
    memcpy(kl, h + 12, 4);
    memcpy(&m->size, h + 16, 8);
    memcpy(&m->version, h + 24, 8);
    memcpy(&m->ttl_wall_ms, h + 32, 8);
    memcpy(dsum, h + 48, 8);
    if (*kl == 0 || *kl > DS_L2_KEY_MAX || (*type == REC_DEL && m->size != 0)) return -1;
    return 0;
}

static bool rec_key_ok(const uint8_t h[DD_HDR], const char *key, uint32_t kl)
{
    uint64_t hs;
    memcpy(&hs, h + 56, 8);
    return ds__sum64(ds__sum64(DS_SUM64_SEED, h, 56), key, kl) == hs;
}

static int pread_full(int fd, void *p, uint64_t n, uint64_t off)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = pread(fd, b, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO;
            return -1;
        }
        b += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int pwritev_full(int fd, struct iovec *iov, int cnt, uint64_t off)
{
    int vi = 0;
    while (vi < cnt) {
        ssize_t w = pwritev(fd, iov + vi, cnt - vi, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        off += (uint64_t)w;
        size_t left = (size_t)w;
        while (vi < cnt && left >= iov[vi].iov_len)
            left -= iov[vi++].iov_len;
        if (vi < cnt) {
            iov[vi].iov_base = (uint8_t *)iov[vi].iov_base + left;
            iov[vi].iov_len -= left;
        }
    }
    return 0;
}

static void file_hdr_fill(uint8_t h[DD_HDR], uint64_t generation)
{
    memset(h, 0, DD_HDR);
    memcpy(h, DD_FILE_MAGIC, 8);
    uint32_t hl = DD_HDR, fmt = 1;
    memcpy(h + 8, &hl, 4);
    memcpy(h + 12, &fmt, 4);
    memcpy(h + 16, &generation, 8);
    uint64_t hs = ds__sum64(DS_SUM64_SEED, h, 56);
    memcpy(h + 56, &hs, 8);
}

/* Appends one record at the end; the log is cut back to its old end if the
 * write fails part-way. */
static int append(dd_t *d, uint8_t type, const char *key, uint32_t kl, const void *data,
                  const ds_l2_meta_t *m, char *err, size_t cap)
{
    if (d->broken) {
        snprintf(err, cap, "%s", d->broken_msg);
        return -1;
    }
    uint8_t h[DD_HDR];
    rec_fill(h, type, key, kl, m, ds__sum64(DS_SUM64_SEED, data, m->size));
    struct iovec iov[3] = {{h, DD_HDR}, {(void *)key, kl}, {(void *)data, m->size}};
    if (pwritev_full(d->fd, iov, m->size ? 3 : 2, d->end) != 0) {
        int e = errno;
        /* if this fails too, the next append overwrites the partial record */
        int trunc = ftruncate(d->fd, (off_t)d->end);
        (void)trunc;
        snprintf(err, cap, "distributed_disk: append to %s/" DD_LOG " failed: %s (errno %d)",
                 d->base.path, strerror(e), e);
        return -1;
    }
    uint64_t len = DD_HDR + kl + m->size;
    if (d->pending == 0) d->pending_since_ms = ds__now_ms();
    d->pending += len;
    d->end += len;
    return 0;
}

/* ---- the backend ---- */

static int dd_put(ds_l2_t *l2, const char *key, size_t keylen, const void *data,
                  const ds_l2_meta_t *meta, char *err, size_t cap)
{
    dd_t *d = (dd_t *)l2;
    uint64_t off = d->end;
    if (append(d, REC_PUT, key, (uint32_t)keylen, data, meta, err, cap) != 0) return -1;
    if (ix_set(d, key, (uint32_t)keylen, off, meta) != 0) {
        /* written, not indexed: dead space; the write fails */
        ix_del(d, key, (uint32_t)keylen);
        figures(d);
        snprintf(err, cap, "distributed_disk: out of memory indexing a record of %s", l2->path);
        return -1;
    }
    figures(d);
    return DS_L2_PENDING;
}

static int dd_get(ds_l2_t *l2, const char *key, size_t keylen, void *dst, uint64_t dst_cap,
                  ds_l2_meta_t *meta, char *err, size_t cap)
{
    dd_t *d = (dd_t *)l2;
    dent_t *e = ix_find(d, key, (uint32_t)keylen);
    if (e == NULL) return 1;
    uint8_t h[DD_HDR], type;
    uint32_t kl = 0;
    uint64_t dsum = 0;
    char *k = malloc(keylen);
    const char *why = NULL;
    if (k == NULL)
        why = "out of memory";
    else if (pread_full(d->fd, h, DD_HDR, e->off) != 0 ||
             pread_full(d->fd, k, keylen, e->off + DD_HDR) != 0)
        why = "short or unreadable record header";
    else if (rec_parse(h, &type, &kl, meta, &dsum) != 0 || type != REC_PUT || kl != keylen ||
             memcmp(k, key, keylen) != 0 || !rec_key_ok(h, key, kl) || meta->size != e->size)
        why = "bad record header";
    else if (meta->size > dst_cap)
        why = "object larger than the space reserved for it";
    else if (pread_full(d->fd, dst, meta->size, e->off + DD_HDR + kl) != 0)
        why = "short read of the value";
    else if (ds__sum64(DS_SUM64_SEED, dst, meta->size) != dsum)
        why = "value checksum mismatch";
    free(k);
    if (why == NULL) return 0;
    snprintf(err, cap, "distributed_disk: rejected the record at offset %llu of %s/" DD_LOG ": %s",
             (unsigned long long)e->off, l2->path, why);
    return -1;
}

static int dd_del(ds_l2_t *l2, const char *key, size_t keylen, char *err, size_t cap)
{
    dd_t *d = (dd_t *)l2;
    if (ix_find(d, key, (uint32_t)keylen) == NULL) return 0; /* no live record */
    ds_l2_meta_t m = {0, 0, 0, 0};
    if (append(d, REC_DEL, key, (uint32_t)keylen, NULL, &m, err, cap) != 0) return -1;
    ix_del(d, key, (uint32_t)keylen);
    figures(d);
    return DS_L2_PENDING;
}

static int64_t dd_scan(ds_l2_t *l2, uint64_t now_wall_ms,
                       void (*fn)(void *ctx, const char *key, size_t keylen, const ds_l2_meta_t *m),
                       void *ctx, char *err, size_t cap)
{
    (void)err;
    (void)cap;
    dd_t *d = (dd_t *)l2;
    int64_t n = 0;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &d->table);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        dent_t *e = DS_DICT_ENTRY(nd, dent_t, node);
        if (e->ttl_wall_ms != 0 && e->ttl_wall_ms <= now_wall_ms) {
            ix_unlink(d, e); /* dead space now */
            continue;
        }
        ds_l2_meta_t m = {e->size, e->version, e->ttl_wall_ms, e->mode};
        fn(ctx, e->key, e->keylen, &m);
        n++;
    }
    figures(d);
    return n;
}

static int dd_sync(ds_l2_t *l2, bool idle, char *err, size_t cap)
{
    dd_t *d = (dd_t *)l2;
    if (d->pending == 0) return 1;
    if (!idle && d->pending < d->o.sync_batch_bytes &&
        ds__now_ms() - d->pending_since_ms < d->o.sync_interval_ms)
        return 0;
    const char *what = "fdatasync";
    int rc = fdatasync(d->fd);
    atomic_fetch_add_explicit(&l2->fig.fsyncs, 1, memory_order_relaxed);
    struct stat st;
    if (rc == 0 && fstat(d->fd, &st) == 0 && st.st_nlink == 0) {
        what = "check (the file was removed)";
        errno = ENOENT;
        rc = -1;
    }
    if (rc != 0) {
        int e = errno;
        d->broken = e;
        snprintf(d->broken_msg, sizeof(d->broken_msg),
                 "distributed_disk: %s of %s/" DD_LOG
                 " failed: %s (errno %d); writes refused until the worker restarts",
                 what, l2->path, strerror(e), e);
        snprintf(err, cap, "%s", d->broken_msg);
        return -1;
    }
    d->pending = 0;
    return 1;
}

/* Copies len bytes of the log at from to out at to. */
static int copy_range(int in, uint64_t from, int out, uint64_t to, uint64_t len, uint8_t **buf)
{
    while (len > 0) {
        loff_t fi = (loff_t)from, fo = (loff_t)to;
        ssize_t n = copy_file_range(in, &fi, out, &fo, len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* not supported here (or a short file): copy by hand */
        from += (uint64_t)n;
        to += (uint64_t)n;
        len -= (uint64_t)n;
    }
    if (len > 0 && *buf == NULL && (*buf = malloc(DD_CHUNK)) == NULL) return -1;
    while (len > 0) {
        uint64_t n = len < DD_CHUNK ? len : DD_CHUNK;
        struct iovec v = {*buf, n};
        if (pread_full(in, *buf, n, from) != 0 || pwritev_full(out, &v, 1, to) != 0) return -1;
        from += n;
        to += n;
        len -= n;
    }
    return 0;
}

static int by_off(const void *a, const void *b)
{
    uint64_t x = (*(dent_t *const *)a)->off, y = (*(dent_t *const *)b)->off;
    return x < y ? -1 : x > y;
}

static void compact_free(dd_t *d)
{
    free(d->c.from);
    free(d->c.len);
    free(d->c.to);
    free(d->c.buf);
    memset(&d->c, 0, sizeof(d->c));
    d->c.fd = -1;
}

/* A compaction that failed at step: data.compact goes, the log stays. */
static void compact_fail(dd_t *d, const char *step)
{
    int e = errno;
    if (d->c.fd >= 0) close(d->c.fd);
    unlinkat(d->dir_fd, DD_TMP, 0);
    uint64_t dead = d->c.dead;
    d->retry_dead = dead + (d->o.compact_min_dead_bytes ? d->o.compact_min_dead_bytes : dead);
    DS_LOG_WARN("distributed_disk: compaction of %s/" DD_LOG " failed (%s: %s, errno %d); the "
                "log stays as it was",
                d->base.path, step, strerror(e), e);
    compact_free(d);
}

/* Starts a compaction: the live, unexpired records now in the log, in log
 * order, and data.compact with its header. */
static void compact_start(dd_t *d)
{
    uint64_t now = wall_ms(), n = 0, count = ds__dict_count(&d->table);
    dent_t **v = malloc((count ? count : 1) * sizeof(*v));
    d->c.from = malloc((count ? count : 1) * sizeof(uint64_t));
    d->c.len = malloc((count ? count : 1) * sizeof(uint64_t));
    d->c.to = malloc((count + 1) * sizeof(uint64_t)); /* and the tail's place */
    d->c.fd = -1;
    d->c.t0 = ds__now_ms();
    d->c.before = d->end;
    d->c.dead = d->end - d->live;
    if (v == NULL || d->c.from == NULL || d->c.len == NULL || d->c.to == NULL) {
        free(v);
        errno = ENOMEM;
        compact_fail(d, "start");
        return;
    }
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &d->table);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        dent_t *e = DS_DICT_ENTRY(nd, dent_t, node);
        if (e->ttl_wall_ms == 0 || e->ttl_wall_ms > now) v[n++] = e; /* expired: left */
    }
    qsort(v, n, sizeof(*v), by_off);
    for (uint64_t i = 0; i < n; i++) {
        d->c.from[i] = v[i]->off;
        d->c.len[i] = rec_len(v[i]);
    }
    free(v);
    d->c.n = n;
    d->c.start_end = d->end;
    /* A new file (O_EXCL): whatever a neighbour left at the name makes this
     * compaction fail, logged, and the log stays. */
    unlinkat(d->dir_fd, DD_TMP, 0);
    d->c.fd = openat(d->dir_fd, DD_TMP, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (d->c.fd < 0) {
        compact_fail(d, "create");
        return;
    }
    uint8_t h[DD_HDR];
    file_hdr_fill(h, d->generation + 1);
    struct iovec hv = {h, DD_HDR};
    if (pwritev_full(d->c.fd, &hv, 1, 0) != 0) {
        compact_fail(d, "write");
        return;
    }
    d->c.out = DD_HDR;
}

/* Where the record at off (in the old log) is in data.compact, or
 * UINT64_MAX if it was not copied (it had expired). */
static uint64_t compact_moved(const dd_t *d, uint64_t off)
{
    if (off >= d->c.start_end) return off - d->c.start_end + d->c.to[d->c.n];
    uint64_t lo = 0, hi = d->c.n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (d->c.from[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->c.n && d->c.from[lo] == off ? d->c.to[lo] : UINT64_MAX;
}

/* The last step: what was appended since the start (records and
 * tombstones, all synced: maintain runs with nothing pending) follows the
 * copies, the file is fsynced and renamed onto the log, and the index
 * moves to it. */
static void compact_finish(dd_t *d)
{
    uint64_t tail = d->end - d->c.start_end;
    d->c.to[d->c.n] = d->c.out; /* to has n + 1 slots: the tail's place */
    if (copy_range(d->fd, d->c.start_end, d->c.fd, d->c.out, tail, &d->c.buf) != 0) {
        compact_fail(d, "write");
        return;
    }
    if (fsync(d->c.fd) != 0) {
        compact_fail(d, "fsync");
        return;
    }
    atomic_fetch_add_explicit(&d->base.fig.fsyncs, 1, memory_order_relaxed);
    if (renameat(d->dir_fd, DD_TMP, d->dir_fd, DD_LOG) != 0) {
        compact_fail(d, "rename");
        return;
    }
    /* From here the new log is the log. */
    if (fsync(d->dir_fd) != 0)
        DS_LOG_WARN("distributed_disk: fsync of the directory %s failed after compaction: %s",
                    d->base.path, strerror(errno));
    uint64_t live = DD_HDR;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &d->table);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        dent_t *e = DS_DICT_ENTRY(nd, dent_t, node);
        uint64_t to = compact_moved(d, e->off);
        if (to == UINT64_MAX) { /* expired before the start: not copied */
            ix_unlink(d, e);
            continue;
        }
        e->off = to;
        live += rec_len(e);
    }
    close(d->fd);
    d->fd = d->c.fd;
    d->end = d->c.out + tail;
    d->live = live;
    d->generation++;
    d->retry_dead = 0;
    atomic_fetch_add_explicit(&d->base.fig.compactions, 1, memory_order_relaxed);
    figures(d);
    DS_LOG_INFO("distributed_disk: compacted %s/" DD_LOG ": %llu -> %llu bytes (%llu dead), "
                "%llu records, %llu ms",
                d->base.path, (unsigned long long)d->c.before, (unsigned long long)d->end,
                (unsigned long long)d->c.dead, (unsigned long long)d->c.n,
                (unsigned long long)(ds__now_ms() - d->c.t0));
    d->c.fd = -1; /* now the log's */
    compact_free(d);
}

/* Copies up to compact_step_bytes of the records of the start; finishes
 * once all are copied. Records are immutable in the log, so those
 * overwritten or deleted meanwhile are copied all the same (dead in the
 * new log, as their tombstones follow in the tail). */
static void compact_step(dd_t *d)
{
    uint64_t budget = d->o.compact_step_bytes ? d->o.compact_step_bytes : 8u << 20;
    while (d->c.i < d->c.n && budget > 0) {
        uint64_t i = d->c.i;
        if (copy_range(d->fd, d->c.from[i], d->c.fd, d->c.out, d->c.len[i], &d->c.buf) != 0) {
            compact_fail(d, "write");
            return;
        }
        d->c.to[i] = d->c.out;
        d->c.out += d->c.len[i];
        budget = d->c.len[i] < budget ? budget - d->c.len[i] : 0;
        d->c.i++;
    }
    if (d->c.i == d->c.n) compact_finish(d);
}

static bool dd_maintain(ds_l2_t *l2)
{
    dd_t *d = (dd_t *)l2;
    if (d->broken || d->pending) return false;
    if (d->c.fd < 0) {
        uint64_t dead = d->end - d->live;
        if (dead == 0 || dead < d->o.compact_min_dead_bytes || dead < d->retry_dead ||
            (double)dead * 100.0 < (double)d->o.compact_dead_pct * (double)d->end)
            return false;
        compact_start(d);
        if (d->c.fd < 0) return false;
    }
    compact_step(d);
    return d->c.fd >= 0;
}

static void dd_destroy(ds_l2_t *l2)
{
    dd_t *d = (dd_t *)l2;
    if (d == NULL) return;
    if (d->pending && !d->broken) fdatasync(d->fd);
    if (d->c.fd >= 0) { /* a compaction in progress: the log stays as it is */
        close(d->c.fd);
        unlinkat(d->dir_fd, DD_TMP, 0);
    }
    compact_free(d);
    if (d->fd >= 0) close(d->fd);
    if (d->dir_fd >= 0) close(d->dir_fd); /* and its lock */
    ds__dict_clear(&d->table);
    free(d);
}

static const ds_l2_ops_t dd_ops = {.name = "distributed_disk",
                                   .put = dd_put,
                                   .get = dd_get,
                                   .del = dd_del,
                                   .scan = dd_scan,
                                   .destroy = dd_destroy,
                                   .sync = dd_sync,
                                   .maintain = dd_maintain};

/* ---- open: replay ---- */

/* Whether a record whose header and key check out, and which fits in the
 * file, starts at off (-1: a read error). key: DS_L2_KEY_MAX bytes. */
static int record_at(dd_t *d, uint64_t off, uint64_t size, char *key)
{
    uint8_t h[DD_HDR], type;
    uint32_t kl;
    ds_l2_meta_t m;
    uint64_t dsum;
    if (size - off < DD_HDR) return 0;
    if (pread_full(d->fd, h, DD_HDR, off) != 0) return -1;
    if (rec_parse(h, &type, &kl, &m, &dsum) != 0 || m.size > size ||
        off + DD_HDR + kl + m.size > size)
        return 0;
    if (pread_full(d->fd, key, kl, off + DD_HDR) != 0) return -1;
    return rec_key_ok(h, key, kl);
}

/* After a record at off that does not parse: the offset of the next one
 * that does (record_at), or size if there is none; 0 on a read error. Only
 * the last record can be torn by a crash (appends are sequential), so
 * nothing found means a torn tail; something found means damage in the
 * middle (a bad sector, a stray write), whose bytes are skipped while the
 * records after it are kept. A value that holds a verbatim record of its
 * own could be taken for one, but only once the header before it is
 * damaged. */
static uint64_t resync(dd_t *d, uint64_t off, uint64_t size, uint8_t *buf, char *key)
{
    for (uint64_t p = off + 1; p + DD_HDR <= size;) {
        uint64_t n = size - p < DD_CHUNK ? size - p : DD_CHUNK;
        if (pread_full(d->fd, buf, n, p) != 0) return 0;
        for (uint64_t i = 0; i + 8 <= n; i++) {
            const uint8_t *hit = memmem(buf + i, n - i, DD_REC_MAGIC, 8);
            if (hit == NULL) break;
            i = (uint64_t)(hit - buf);
            int ok = record_at(d, p + i, size, key);
            if (ok < 0) return 0;
            if (ok) return p + i;
        }
        if (p + n >= size) break;
        p += n - 7; /* a magic that straddles two chunks is found in the second */
    }
    return size;
}

/* The key of a torn last record at off, when its header and key are whole
 * and check out (so the log can name what was lost): its length, or 0. */
static uint32_t torn_key(dd_t *d, uint64_t off, uint64_t size, char *key)
{
    uint8_t h[DD_HDR], type;
    uint32_t kl;
    ds_l2_meta_t m;
    uint64_t dsum;
    if (size - off < DD_HDR || pread_full(d->fd, h, DD_HDR, off) != 0 ||
        rec_parse(h, &type, &kl, &m, &dsum) != 0 || off + DD_HDR + kl > size ||
        pread_full(d->fd, key, kl, off + DD_HDR) != 0 || !rec_key_ok(h, key, kl))
        return 0;
    return kl;
}

/* Reads the records from the header to the end into the index; damage in
 * the middle is skipped, a torn tail is cut off. */
static int replay(dd_t *d, uint64_t size, char *err, size_t cap)
{
    uint8_t *buf = malloc(DD_CHUNK);
    char *key = malloc(DS_L2_KEY_MAX);
    uint64_t off = DD_HDR, skipped = 0, kept = 0;
    const char *why = NULL;
    if (buf == NULL || key == NULL) {
        free(buf);
        free(key);
        snprintf(err, cap, "distributed_disk: out of memory");
        return -1;
    }
    while (off < size) {
        uint8_t h[DD_HDR], type;
        uint32_t kl;
        ds_l2_meta_t m;
        uint64_t dsum;
        if (size - off < DD_HDR) {
            why = "a short record header";
        } else if (pread_full(d->fd, h, DD_HDR, off) != 0) {
            goto ioerr;
        } else if (rec_parse(h, &type, &kl, &m, &dsum) != 0) {
            why = "a bad record header";
        } else if (m.size > size || off + DD_HDR + kl + m.size > size) {
            why = "a record that runs past the end of the file";
        } else if (pread_full(d->fd, key, kl, off + DD_HDR) != 0) {
            goto ioerr;
        } else if (!rec_key_ok(h, key, kl)) {
            why = "a record header checksum mismatch";
        }
        if (why) {
            uint64_t next = resync(d, off, size, buf, key);
            if (next == 0) goto ioerr;
            if (next == size) break; /* a torn tail */
            DS_LOG_WARN("distributed_disk: %s/" DD_LOG ": %s at offset %llu: %llu damaged bytes "
                        "skipped, replay resumed at the next intact record",
                        d->base.path, why, (unsigned long long)off,
                        (unsigned long long)(next - off));
            atomic_fetch_add_explicit(&d->base.fig.damaged_bytes, next - off, memory_order_relaxed);
            why = NULL;
            off = next;
            continue;
        }
        uint64_t len = DD_HDR + kl + m.size;
        uint64_t s = DS_SUM64_SEED;
        for (uint64_t p = 0; p < m.size;) {
            uint64_t n = m.size - p < DD_CHUNK ? m.size - p : DD_CHUNK;
            if (pread_full(d->fd, buf, n, off + DD_HDR + kl + p) != 0) goto ioerr;
            s = ds__sum64(s, buf, n); /* chunks of 8-byte words: the same sum */
            p += n;
        }
        if (s != dsum) {
            if (off + len == size) {
                why = "a value checksum mismatch in the last record";
                break;
            }
            DS_LOG_WARN("distributed_disk: %s/" DD_LOG ": the record of '%.*s' at offset %llu "
                        "fails its value checksum: skipped, the key dropped",
                        d->base.path, (int)(kl > 64 ? 64 : kl), key, (unsigned long long)off);
            ix_del(d, key, kl);
            skipped++;
        } else if (type == REC_PUT) {
            kept++;
            if (ix_set(d, key, kl, off, &m) != 0) {
                snprintf(err, cap, "distributed_disk: out of memory indexing %s", d->base.path);
                goto fail;
            }
        } else {
            kept++;
            ix_del(d, key, kl);
        }
        off += len;
    }
    if (off < size) {
        char lost[160] = "its key unreadable";
        uint32_t kl = torn_key(d, off, size, key);
        if (kl > 0)
            snprintf(lost, sizeof(lost), "the record of '%.*s' lost", (int)(kl > 64 ? 64 : kl),
                     key);
        if (ftruncate(d->fd, (off_t)off) != 0 || fsync(d->fd) != 0) goto ioerr;
        atomic_store_explicit(&d->base.fig.torn_bytes, size - off, memory_order_relaxed);
        DS_LOG_WARN("distributed_disk: %s/" DD_LOG ": torn tail at offset %llu (%s): %llu bytes "
                    "truncated, never served (%s); the %llu intact records before it kept",
                    d->base.path, (unsigned long long)off, why, (unsigned long long)(size - off),
                    lost, (unsigned long long)kept);
    }
    d->end = off;
    figures(d);
    free(buf);
    free(key);
    return 0;
ioerr:
    snprintf(err, cap, "distributed_disk: cannot read %s/" DD_LOG ": %s (errno %d)", d->base.path,
             strerror(errno), errno);
fail:
    free(buf);
    free(key);
    return -1;
}

static void name_part(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 1 < cap; s++) {
        char c = *s;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '.' || c == '_' || c == '-';
        out[o++] = plain ? c : '_';
    }
    out[o] = '\0';
    if (o == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0) snprintf(out, cap, "_");
}

ds_l2_t *ds__l2_dd_open(const char *root, const char *cluster, const char *worker,
                        const ds_l2_dd_opts_t *o, char *err, size_t cap)
{
    if (root == NULL || root[0] == '\0') {
        snprintf(err, cap, "--l2_cache_type distributed_disk needs --distributed_disk_path");
        return NULL;
    }
    char c[128], w[128], path[512];
    name_part(c, sizeof(c), cluster ? cluster : "");
    name_part(w, sizeof(w), worker ? worker : "");
    const char *levels[3] = {root, c, w};
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        int n = snprintf(path + len, sizeof(path) - len, "%s%s", i ? "/" : "", levels[i]);
        if (n < 0 || (size_t)n >= sizeof(path) - len) {
            snprintf(err, cap, "distributed_disk: path under %s too long", root);
            return NULL;
        }
        len += (size_t)n;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, cap, "distributed_disk: cannot create %s: %s (errno %d)", path,
                     strerror(errno), errno);
            return NULL;
        }
    }
    dd_t *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        snprintf(err, cap, "distributed_disk: out of memory");
        return NULL;
    }
    d->base.ops = &dd_ops;
    snprintf(d->base.path, sizeof(d->base.path), "%s", path);
    d->fd = -1;
    d->c.fd = -1;
    d->o = *o;
    bool table_ok = ds__dict_init(&d->table, &dent_type, NULL, 1024) == 0;
    d->live = DD_HDR;
    const char *step = "open";
    struct stat st;
    d->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (!table_ok || d->dir_fd < 0) goto fail;
    if (flock(d->dir_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            snprintf(err, cap,
                     "distributed_disk: %s is in use by another worker process (its lock is held)",
                     path);
        else
            snprintf(err, cap, "distributed_disk: cannot lock %s: %s (errno %d)", path,
                     strerror(errno), errno);
        dd_destroy(&d->base);
        return NULL;
    }
    /* a compaction that did not reach its rename */
    unlinkat(d->dir_fd, DD_TMP, 0);
    /* The directory may be writable by others: no symbolic link is followed,
     * no FIFO waited on, and only a regular file is taken for the log. */
    d->fd = openat(d->dir_fd, DD_LOG, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (d->fd < 0 && errno == ELOOP) {
        snprintf(err, cap,
                 "distributed_disk: %s/" DD_LOG " is a symbolic link, not a log file; move it away",
                 path);
        dd_destroy(&d->base);
        return NULL;
    }
    int fl;
    if (d->fd < 0 || fstat(d->fd, &st) != 0 || (fl = fcntl(d->fd, F_GETFL)) < 0) goto fail;
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, cap, "distributed_disk: %s/" DD_LOG " is %s, not a log file; move it away",
                 path,
                 S_ISFIFO(st.st_mode)  ? "a FIFO"
                 : S_ISCHR(st.st_mode) ? "a character device"
                 : S_ISBLK(st.st_mode) ? "a block device"
                 : S_ISDIR(st.st_mode) ? "a directory"
                                       : "not a regular file");
        dd_destroy(&d->base);
        return NULL;
    }
    (void)fcntl(d->fd, F_SETFL, fl & ~O_NONBLOCK);
    uint8_t h[DD_HDR];
    if ((uint64_t)st.st_size < DD_HDR) {
        if (st.st_size > 0) { /* created with nothing after the header, or cut short */
            atomic_store_explicit(&d->base.fig.torn_bytes, (uint64_t)st.st_size,
                                  memory_order_relaxed);
            DS_LOG_WARN("distributed_disk: %s/" DD_LOG ": torn file header: the file ends at "
                        "offset %llu of its %u-byte header; no record survives (every key it "
                        "held is lost), a new log is started",
                        path, (unsigned long long)st.st_size, DD_HDR);
        }
        /* new (or its header torn while being created: nothing after it) */
        step = "write the header of";
        file_hdr_fill(h, 0);
        struct iovec v = {h, DD_HDR};
        if (ftruncate(d->fd, 0) != 0 || pwritev_full(d->fd, &v, 1, 0) != 0 || fsync(d->fd) != 0 ||
            fsync(d->dir_fd) != 0)
            goto fail;
        st.st_size = DD_HDR;
    } else {
        step = "read";
        if (pread_full(d->fd, h, DD_HDR, 0) != 0) goto fail;
        uint8_t want[DD_HDR];
        memcpy(&d->generation, h + 16, 8);
        file_hdr_fill(want, d->generation);
        if (memcmp(h, want, DD_HDR) != 0) {
            snprintf(err, cap,
                     "distributed_disk: %s/" DD_LOG
                     " is not a distributed_disk log (bad file header); move it away",
                     path);
            dd_destroy(&d->base);
            return NULL;
        }
    }
    if (replay(d, (uint64_t)st.st_size, err, cap) != 0) {
        dd_destroy(&d->base);
        return NULL;
    }
    return &d->base;
fail:
    snprintf(err, cap, "distributed_disk: cannot %s %s/" DD_LOG ": %s (errno %d)", step, path,
             strerror(errno), errno);
    dd_destroy(&d->base);
    return NULL;
}
