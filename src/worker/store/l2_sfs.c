/* The sfs L2 backend: a directory (possibly on a shared file system), one
 * object per file.
 *
 * File name: the key with every byte outside [A-Za-z0-9_-] written as %XX,
 * so keys with ':;()' or '.' never make paths or hidden names; a name that
 * would pass 160 bytes keeps its first 120 and ends in '~' and 16 hex digits
 * of two hashes of the whole key. The full key is in the file's header and is
 * compared on every read, so a colliding or renamed file is never served.
 *
 * File layout (host byte order, little-endian on every target we build for):
 *   0  magic "DSSFS02\n"     8  u32 header length (64)   12 u32 key length
 *   16 u64 value size        24 u64 version              32 u64 ttl deadline,
 *   wall-clock ms (0 none)   40 u8 write mode, 7 zero bytes
 *   48 u64 checksum of the value     56 u64 checksum of bytes 0..55 and the key
 *   64 the key, then the value.
 * The value checksum is ds__sum4 (four interleaved lanes, common/hash.h);
 * files of version 1 ("DSSFS01\n", ds__sum64 over the value, otherwise the
 * same) are still read.
 * The file's size must be exactly 64 + key + value. A writer creates
 * ".tmp-<random>-<n>", writes, fsyncs, renames it onto the name and fsyncs the
 * directory: a reader sees the old object or the new one, never a mix, and a
 * crash leaves at most a temporary file, which scan removes once it is old.
 *
 * The directory may be writable by others (a shared file system, a spill
 * directory on a shared disk): whatever sits under an object's name is
 * distrusted. Files are opened without following symbolic links and without
 * waiting (a FIFO would block the disk I/O thread for good, and every job
 * behind it), then checked to be regular files; anything else is rejected
 * with a log line naming it, read as a damaged copy, and never opened for
 * data. A directory in an object's place is moved aside to
 * ".rejected-<name>-<random>" when the object is written, so writes of that
 * key succeed again; nothing of the neighbour's is deleted. */
#include "worker/store/l2.h"

#include "common/hash.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SFS_MAGIC "DSSFS02\n"    /* written: value checksum ds__sum4 */
#define SFS_MAGIC_V1 "DSSFS01\n" /* still read: value checksum ds__sum64 */
#define SFS_HDR 64u
#define SFS_NAME_MAX 160
#define SFS_TMP_PREFIX ".tmp-"
#define SFS_TMP_STALE_S 600  /* older temporary files are a crashed writer's */
#define SFS_CHUNK (4u << 20) /* value bytes checksummed and written at a time */
#define SFS_REJECTED_PREFIX ".rejected-"
#define SFS_SCAN_LOG_MAX 32 /* rejected files named per scan; the rest counted */

typedef struct {
    ds_l2_t base;
    int dir_fd;
    uint64_t tmp_rand;
    uint64_t tmp_seq; /* only the I/O thread writes */
} sfs_t;

int ds__l2_sfs_name(const char *key, size_t keylen, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    bool hashed = false;
    for (size_t i = 0; i < keylen; i++) {
        unsigned char c = (unsigned char)key[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_' || c == '-';
        if (o + (plain ? 1 : 3) > SFS_NAME_MAX) {
            hashed = true;
            break;
        }
        if (plain) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (hashed) {
        if (o > 120) o = 120;
        while (o > 0 && (out[o - 1] == '%' || (o > 1 && out[o - 2] == '%')))
            o--;
        uint32_t a = ds__murmur3_32(key, keylen, 0x5f3759dfu);
        uint32_t b = ds__murmur3_32(key, keylen, 0x9e3779b9u);
        o += (size_t)snprintf(out + o, cap - o, "~%08x%08x", a, b);
    }
    if (o >= cap) return -1;
    out[o] = '\0';
    return 0;
}

static void hdr_fill(uint8_t h[SFS_HDR], const char *key, size_t keylen, const ds_l2_meta_t *m,
                     uint64_t data_sum)
{
    memset(h, 0, SFS_HDR);
    memcpy(h, SFS_MAGIC, 8);
    uint32_t hl = SFS_HDR, kl = (uint32_t)keylen;
    memcpy(h + 8, &hl, 4);
    memcpy(h + 12, &kl, 4);
    memcpy(h + 16, &m->size, 8);
    memcpy(h + 24, &m->version, 8);
    memcpy(h + 32, &m->ttl_wall_ms, 8);
    h[40] = m->write_mode;
    memcpy(h + 48, &data_sum, 8);
    uint64_t hs = ds__sum64(ds__sum64(DS_SUM64_SEED, h, 56), key, keylen);
    memcpy(h + 56, &hs, 8);
}

/* Parses and checks a header and its key: its format version (1, 2) when
 * sound, -1 when not. */
static int hdr_parse(const uint8_t h[SFS_HDR], const char *key, uint32_t keylen, ds_l2_meta_t *m,
                     uint64_t *data_sum)
{
    uint32_t hl, kl;
    uint64_t hs;
    memcpy(&hl, h + 8, 4);
    memcpy(&kl, h + 12, 4);
    memcpy(&hs, h + 56, 8);
    bool v1 = memcmp(h, SFS_MAGIC_V1, 8) == 0;
    if ((!v1 && memcmp(h, SFS_MAGIC, 8) != 0) || hl != SFS_HDR || kl != keylen) return -1;
    if (ds__sum64(ds__sum64(DS_SUM64_SEED, h, 56), key, keylen) != hs) return -1;
    memcpy(&m->size, h + 16, 8);
    memcpy(&m->version, h + 24, 8);
    memcpy(&m->ttl_wall_ms, h + 32, 8);
    m->write_mode = h[40];
    memcpy(data_sum, h + 48, 8);
    return v1 ? 1 : 2;
}

/* The key length a header claims (checked by hdr_parse). */
static uint32_t hdr_keylen(const uint8_t h[SFS_HDR])
{
    uint32_t kl;
    memcpy(&kl, h + 12, 4);
    return kl;
}

/* The value checksum of a file of format version ver. */
static uint64_t value_sum(int ver, const void *p, uint64_t n)
{
    if (ver == 1) return ds__sum64(DS_SUM64_SEED, p, n);
    ds_sum4_t s;
    ds__sum4_init(&s);
    ds__sum4_update(&s, p, n);
    return ds__sum4_final(&s);
}

static int full_read(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = read(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO;
            return -1;
        }
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Writes every byte of iov[0..n) (changed on the way); 0 or -1 with errno. */
static int full_writev(int fd, struct iovec *iov, int n)
{
    int vi = 0;
    while (vi < n) {
        ssize_t w = writev(fd, iov + vi, n - vi);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        size_t left = (size_t)w;
        while (vi < n && left >= iov[vi].iov_len)
            left -= iov[vi++].iov_len;
        if (vi < n) {
            iov[vi].iov_base = (uint8_t *)iov[vi].iov_base + left;
            iov[vi].iov_len -= left;
        }
    }
    return 0;
}

/* What a file type is, for a log line that rejects it. */
static const char *type_name(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISLNK(m)  ? "a symbolic link"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* Opens name in the directory for reading if it is a regular file, never
 * following a symbolic link, never waiting on a FIFO and never opening a
 * device (its type is looked at before the open and checked again on the
 * open file, in case it was swapped in between). The descriptor, or -1 with
 * errno (ENOENT: nothing there); *bad says what was there instead when the
 * name is not a regular file. */
static int open_regular(int dir_fd, const char *name, struct stat *st, const char **bad)
{
    *bad = NULL;
    if (fstatat(dir_fd, name, st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    if (!S_ISREG(st->st_mode)) {
        *bad = type_name(st->st_mode);
        errno = EINVAL;
        return -1;
    }
    int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP) *bad = "a symbolic link";
        return -1;
    }
    int fl;
    if (fstat(fd, st) != 0 || (fl = fcntl(fd, F_GETFL)) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        *bad = type_name(st->st_mode);
        close(fd);
        errno = EINVAL;
        return -1;
    }
    /* regular files ignore O_NONBLOCK on local file systems; reads of the
     * value must not see EAGAIN on one that honours it */
    (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* The name is taken by a directory (never ours): it is moved aside so the
 * object can be written; 0 when it was. */
static int move_aside(sfs_t *s, const char *name)
{
    char to[SFS_NAME_MAX + 64];
    snprintf(to, sizeof(to), SFS_REJECTED_PREFIX "%s-%016llx-%llu", name,
             (unsigned long long)s->tmp_rand, (unsigned long long)++s->tmp_seq);
    if (renameat(s->dir_fd, name, s->dir_fd, to) != 0) return -1;
    DS_LOG_WARN("sfs: %s/%s was a directory in place of an object file: moved to %s/%s so the "
                "object can be written",
                s->base.path, name, s->base.path, to);
    return 0;
}

static int sfs_put(ds_l2_t *l2, const char *key, size_t keylen, const void *data,
                   const ds_l2_meta_t *meta, char *err, size_t cap)
{
    sfs_t *s = (sfs_t *)l2;
    char name[SFS_NAME_MAX + 32], tmp[64];
    if (ds__l2_sfs_name(key, keylen, name, sizeof(name)) != 0) {
        snprintf(err, cap, "sfs: no file name for key '%.*s'", (int)(keylen > 64 ? 64 : keylen),
                 key);
        return -1;
    }
    snprintf(tmp, sizeof(tmp), SFS_TMP_PREFIX "%016llx-%llu", (unsigned long long)s->tmp_rand,
             (unsigned long long)++s->tmp_seq);
    /* O_EXCL: a new regular file, never one a neighbour put at the name */
    int fd = openat(s->dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, cap, "sfs: cannot create %s/%s: %s (errno %d)", l2->path, tmp,
                 strerror(errno), errno);
        return -1;
    }
    /* The header and key first (the header's value checksum is not known
     * yet: rewritten at the end), then the value in chunks, each
     * checksummed just before it is written (one pass over the bytes while
     * they are in cache) and handed to the device at once
     * (sync_file_range), so the disk writes while the next chunk is copied
     * and the final fsync has little left to do. */
    uint8_t h[SFS_HDR];
    hdr_fill(h, key, keylen, meta, 0);
    const char *step = "write";
    struct iovec iov[2] = {{h, SFS_HDR}, {(void *)key, keylen}};
    if (full_writev(fd, iov, 2) != 0) goto fail;
    ds_sum4_t sum;
    ds__sum4_init(&sum);
    uint64_t off = SFS_HDR + keylen;
    const uint8_t *v = data;
    for (uint64_t done = 0; done < meta->size;) {
        size_t n = meta->size - done > SFS_CHUNK ? SFS_CHUNK : (size_t)(meta->size - done);
        ds__sum4_update(&sum, v + done, n); /* SFS_CHUNK is a multiple of 32 */
        struct iovec one = {(void *)(v + done), n};
        if (full_writev(fd, &one, 1) != 0) goto fail;
        (void)sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
        off += n;
        done += n;
    }
    hdr_fill(h, key, keylen, meta, ds__sum4_final(&sum));
    step = "header write";
    ssize_t hw = pwrite(fd, h, SFS_HDR, 0);
    if (hw != (ssize_t)SFS_HDR) {
        if (hw >= 0) errno = EIO;
        goto fail;
    }
    step = "fsync";
    if (fsync(fd) != 0) goto fail;
    step = "close";
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    step = "rename";
    /* A symbolic link, FIFO or device at the name is replaced by the rename
     * (only the name goes); a directory refuses it and is moved aside. */
    if (renameat(s->dir_fd, tmp, s->dir_fd, name) != 0 &&
        ((errno != EISDIR && errno != ENOTEMPTY && errno != EEXIST) || move_aside(s, name) != 0 ||
         renameat(s->dir_fd, tmp, s->dir_fd, name) != 0))
        goto fail;
    step = "fsync of the directory";
    if (fsync(s->dir_fd) != 0) goto fail;
    atomic_fetch_add_explicit(&l2->fig.fsyncs, 2, memory_order_relaxed);
    return 0;
fail : {
    int e = errno;
    if (fd >= 0) close(fd);
    unlinkat(s->dir_fd, tmp, 0);
    snprintf(err, cap, "sfs: %s of %s/%s failed: %s (errno %d)", step, l2->path, name, strerror(e),
             e);
    return -1;
}
}

static int sfs_get(ds_l2_t *l2, const char *key, size_t keylen, void *dst, uint64_t dst_cap,
                   ds_l2_meta_t *meta, char *err, size_t cap)
{
    sfs_t *s = (sfs_t *)l2;
    char name[SFS_NAME_MAX + 32];
    if (ds__l2_sfs_name(key, keylen, name, sizeof(name)) != 0) return 1;
    struct stat st;
    const char *bad;
    int fd = open_regular(s->dir_fd, name, &st, &bad);
    if (fd < 0) {
        if (bad != NULL) {
            snprintf(err, cap, "sfs: rejected %s/%s: %s in place of an object file (not read)",
                     l2->path, name, bad);
            return -1;
        }
        if (errno == ENOENT) return 1;
        snprintf(err, cap, "sfs: cannot open %s/%s: %s (errno %d)", l2->path, name, strerror(errno),
                 errno);
        return -1;
    }
    uint8_t h[SFS_HDR];
    char *k = malloc(keylen ? keylen : 1);
    uint64_t dsum = 0;
    int ver = 0;
    const char *why = NULL;
    if (k == NULL)
        why = "out of memory";
    else if (full_read(fd, h, SFS_HDR) != 0 || full_read(fd, k, keylen) != 0)
        why = "short or unreadable header";
    else if (memcmp(k, key, keylen) != 0 ||
             (ver = hdr_parse(h, key, (uint32_t)keylen, meta, &dsum)) < 0)
        why = "bad header (torn, foreign or another key's file)";
    else if ((uint64_t)st.st_size != SFS_HDR + keylen + meta->size)
        why = "file size does not match its header (torn or truncated)";
    else if (dst == NULL)
        ; /* the header only (a probe): meta is filled */
    else if (meta->size > dst_cap)
        why = "object larger than the space reserved for it";
    else if (full_read(fd, dst, meta->size) != 0)
        why = "short read of the value";
    else if (value_sum(ver, dst, meta->size) != dsum)
        why = "value checksum mismatch";
    free(k);
    close(fd);
    if (why == NULL) return 0;
    snprintf(err, cap, "sfs: rejected %s/%s: %s", l2->path, name, why);
    return -1;
}

static int sfs_del(ds_l2_t *l2, const char *key, size_t keylen, char *err, size_t cap)
{
    sfs_t *s = (sfs_t *)l2;
    char name[SFS_NAME_MAX + 32];
    if (ds__l2_sfs_name(key, keylen, name, sizeof(name)) != 0) return 0;
    if (unlinkat(s->dir_fd, name, 0) == 0 || errno == ENOENT) return 0;
    int e = errno;
    if (e == EISDIR) { /* a neighbour's directory: no copy of ours to delete */
        DS_LOG_WARN("sfs: %s/%s is a directory in place of an object file: left alone", l2->path,
                    name);
        return 0;
    }
    /* A read-only file system refuses even a name that is not there (EROFS
     * comes before the lookup): only a copy that exists failed to go. */
    if (e == EROFS && faccessat(s->dir_fd, name, F_OK, AT_EACCESS) != 0 && errno == ENOENT)
        return 0;
    snprintf(err, cap, "sfs: cannot delete %s/%s: %s (errno %d)", l2->path, name, strerror(e), e);
    return -1;
}

static int64_t sfs_scan(ds_l2_t *l2, uint64_t now_wall_ms,
                        void (*fn)(void *ctx, const char *key, size_t keylen,
                                   const ds_l2_meta_t *m),
                        void *ctx, char *err, size_t cap)
{
    sfs_t *s = (sfs_t *)l2;
    int fd = dup(s->dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0) close(fd);
        snprintf(err, cap, "sfs: cannot list %s: %s (errno %d)", l2->path, strerror(errno), errno);
        return -1;
    }
    rewinddir(d);
    int64_t n = 0;
    uint64_t rejected = 0;
    char *key = malloc(DS_L2_KEY_MAX + 1);
    struct dirent *e;
    while (key && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strncmp(e->d_name, SFS_REJECTED_PREFIX, strlen(SFS_REJECTED_PREFIX)) == 0)
            continue;
        struct stat st;
        const char *bad = NULL, *why = NULL;
        bool tmp = strncmp(e->d_name, SFS_TMP_PREFIX, strlen(SFS_TMP_PREFIX)) == 0;
        if (tmp) {
            if (fstatat(s->dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            if (S_ISREG(st.st_mode)) {
                if (st.st_mtime + SFS_TMP_STALE_S < time(NULL)) unlinkat(s->dir_fd, e->d_name, 0);
                continue;
            }
            bad = type_name(st.st_mode);
        }
        int f = bad ? -1 : open_regular(s->dir_fd, e->d_name, &st, &bad);
        if (f < 0 && bad == NULL && errno == ENOENT) continue; /* gone meanwhile */
        uint8_t h[SFS_HDR];
        uint32_t kl = 0;
        ds_l2_meta_t m;
        uint64_t dsum;
        char want[SFS_NAME_MAX + 32];
        if (f < 0)
            why = bad ? bad : strerror(errno);
        else if (full_read(f, h, SFS_HDR) != 0)
            why = "shorter than an object file's header";
        else if ((kl = hdr_keylen(h)) == 0 || kl > DS_L2_KEY_MAX || full_read(f, key, kl) != 0 ||
                 hdr_parse(h, key, kl, &m, &dsum) < 0)
            why = "not an object file (a bad or torn header)";
        else if ((uint64_t)st.st_size != SFS_HDR + kl + m.size)
            why = "its size does not match its header (torn or truncated)";
        else if (ds__l2_sfs_name(key, kl, want, sizeof(want)) != 0 || strcmp(want, e->d_name) != 0)
            why = "the object of another key's name (renamed or copied)";
        if (f >= 0) close(f);
        if (why != NULL) { /* never indexed, never served; left where it is */
            if (rejected++ < SFS_SCAN_LOG_MAX)
                DS_LOG_WARN("sfs: %s/%s: %s: skipped, not served", l2->path, e->d_name, why);
            continue;
        }
        if (m.ttl_wall_ms != 0 && m.ttl_wall_ms <= now_wall_ms) {
            unlinkat(s->dir_fd, e->d_name, 0);
            continue;
        }
        fn(ctx, key, kl, &m);
        n++;
    }
    if (rejected > SFS_SCAN_LOG_MAX)
        DS_LOG_WARN("sfs: %s: %llu files skipped in all (the first %d named above)", l2->path,
                    (unsigned long long)rejected, SFS_SCAN_LOG_MAX);
    free(key);
    closedir(d);
    return n;
}

static void sfs_destroy(ds_l2_t *l2)
{
    sfs_t *s = (sfs_t *)l2;
    if (s == NULL) return;
    close(s->dir_fd);
    free(s);
}

static const ds_l2_ops_t sfs_ops = {.name = "sfs",
                                    .put = sfs_put,
                                    .get = sfs_get,
                                    .del = sfs_del,
                                    .scan = sfs_scan,
                                    .destroy = sfs_destroy};

ds_l2_t *ds__l2_sfs_open(const char *dir, char *err, size_t cap)
{
    if (dir == NULL || dir[0] == '\0') {
        snprintf(err, cap, "--l2_cache_type sfs needs --sfs_path");
        return NULL;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, cap, "sfs: cannot create %s: %s (errno %d)", dir, strerror(errno), errno);
        return NULL;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, cap, "sfs: cannot open %s: %s (errno %d)", dir, strerror(errno), errno);
        return NULL;
    }
    sfs_t *s = calloc(1, sizeof(*s));
    if (s == NULL || getrandom(&s->tmp_rand, sizeof(s->tmp_rand), 0) != sizeof(s->tmp_rand)) {
        free(s);
        close(fd);
        snprintf(err, cap, "sfs: out of memory or randomness");
        return NULL;
    }
    s->base.ops = &sfs_ops;
    snprintf(s->base.path, sizeof(s->base.path), "%s", dir);
    s->dir_fd = fd;
    return &s->base;
}
