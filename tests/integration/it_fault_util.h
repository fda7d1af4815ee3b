/* Helpers shared by the fault and soak tests (it_fault_*.c, it_soak.c):
 * raw protocol frames for clients that misbehave on purpose, polling the
 * worker's STATS until a value settles, reading a process's RSS and CPU time
 * from /proc, and self-describing values whose corruption, truncation or
 * mix-up with another key is detectable from the bytes alone.
 *
 * Header-only (static functions) so each test stays one program. */
#ifndef DS_TESTS_IT_FAULT_UTIL_H
#define DS_TESTS_IT_FAULT_UTIL_H

#include "harness.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/procstat.h"
#include "common/wire.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- raw protocol ---- */

static inline int fu_connect(const dst_worker_t *w, bool unix_sock)
{
    char err[256], path[300];
    if (!unix_sock) return ds__tcp_connect(w->host, w->port, 2000, err, sizeof(err));
    ds__socket_path(w->sockdir[0] ? w->sockdir : NULL, w->host, w->port, path, sizeof(path));
    return ds__unix_connect(path, 2000, err, sizeof(err));
}

static inline void fu_header(uint8_t *out, uint16_t op, uint32_t meta_len, uint64_t data_len,
                             uint64_t req_id)
{
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = op,
                          .meta_len = meta_len,
                          .req_id = req_id,
                          .data_len = data_len};
    ds__wire_header_encode(&h, out);
}

/* Sends header + metadata of one request. 0 or -1. */
static inline int fu_send(int fd, uint16_t op, const ds_wbuf_t *m, uint64_t data_len,
                          uint64_t req_id)
{
    uint8_t h[DS_WIRE_HEADER_LEN];
    fu_header(h, op, m ? (uint32_t)m->len : 0, data_len, req_id);
    uint64_t dl = ds__now_ms() + 5000;
    if (ds__write_full(fd, h, sizeof(h), dl) != 0) return -1;
    if (m && m->len && ds__write_full(fd, m->buf, m->len, dl) != 0) return -1;
    return 0;
}

/* Reads one response frame: header, and metadata into *meta (malloc'd, may
 * be NULL) ; the data section is read and dropped. Closes any fd that rides
 * along. 0 or -1. */
static inline int fu_recv(int fd, ds_wire_header_t *h, uint8_t **meta, uint64_t deadline)
{
    uint8_t hb[DS_WIRE_HEADER_LEN];
    int afd = -1;
    ssize_t got = ds__recv_with_fd(fd, hb, sizeof(hb), &afd);
    if (afd >= 0) close(afd);
    if (got <= 0) return -1;
    if ((size_t)got < sizeof(hb) &&
        ds__read_full(fd, hb + got, sizeof(hb) - (size_t)got, deadline) != 0)
        return -1;
    char err[128];
    if (ds__wire_header_decode(hb, UINT64_MAX, h, err, sizeof(err)) != 0) return -1;
    uint8_t *m = malloc(h->meta_len + 1);
    if (m == NULL || ds__read_full(fd, m, h->meta_len, deadline) != 0) {
        free(m);
        return -1;
    }
    static uint8_t sink[1 << 16];
    for (uint64_t left = h->data_len; left > 0;) {
        size_t n = left < sizeof(sink) ? (size_t)left : sizeof(sink);
        if (ds__read_full(fd, sink, n, deadline) != 0) {
            free(m);
            return -1;
        }
        left -= n;
    }
    if (meta)
        *meta = m;
    else
        free(m);
    return 0;
}

/* HELLO on a raw connection (want_shm: ask for the arena, whose fd is closed
 * on arrival). Returns the response status, or -1 on a transport failure. */
static inline int fu_hello(int fd, bool want_shm)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u32(&m, DS_WIRE_VERSION);
    ds__wbuf_u64(&m, 0);
    ds__wbuf_u8(&m, want_shm);
    ds__wbuf_cstr(&m, "");
    int rc = fu_send(fd, DS_OP_HELLO, &m, 0, 1);
    ds__wbuf_free(&m);
    if (rc != 0) return -1;
    ds_wire_header_t h;
    if (fu_recv(fd, &h, NULL, ds__now_ms() + 5000) != 0) return -1;
    return (int)h.status;
}

/* Metadata of a one-key SET of len bytes (mode 0, no TTL). */
static inline void fu_set_meta(ds_wbuf_t *m, const char *key, uint64_t len)
{
    ds__wbuf_init(m);
    ds__wbuf_u8(m, DS_WRITE_NONE_L2_CACHE);
    ds__wbuf_u32(m, 0);
    ds__wbuf_u8(m, DS_EXISTENCE_NONE);
    ds__wbuf_u32(m, 1);
    ds__wbuf_cstr(m, key);
    ds__wbuf_u64(m, len);
}

/* ---- worker state ---- */

/* Polls a STATS value until it equals want (or timeout_ms passes); returns
 * the last value seen. */
static inline double fu_wait_stat(const dst_worker_t *w, const char *path, double want,
                                  int timeout_ms)
{
    uint64_t dl = ds__now_ms() + (uint64_t)timeout_ms;
    double v = dst_stat(w, path);
    while (v != want && ds__now_ms() < dl) {
        usleep(10000);
        v = dst_stat(w, path);
    }
    return v;
}

/* VmRSS of pid in KiB, or -1. */
static inline long fu_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

/* User + system CPU time of pid in clock ticks, or -1. */
static inline long fu_cpu_ticks(pid_t pid)
{
    ds_proc_stat_t s;
    if (ds__proc_stat(pid, &s) != 0) return -1;
    return (long)(s.utime + s.stime);
}

/* ---- self-describing values ----
 * Layout: u64 tag (key id << 32 | version), u64 total length, then
 * dst_fill bytes seeded by the tag. A value at least 16 bytes long. */

static inline void fu_value(uint8_t *buf, size_t len, uint32_t key_id, uint32_t version)
{
    uint64_t tag = ((uint64_t)key_id << 32) | version;
    memcpy(buf, &tag, 8);
    uint64_t l = len;
    memcpy(buf + 8, &l, 8);
    dst_fill(buf + 16, len - 16, tag);
}

/* The version in a value of key_id, or -1 when the bytes are not an intact
 * value of that key (torn, truncated, another key's, garbage). */
static inline long fu_check(const uint8_t *buf, size_t len, uint32_t key_id)
{
    if (len < 16) return -1;
    uint64_t tag, l;
    memcpy(&tag, buf, 8);
    memcpy(&l, buf + 8, 8);
    if (l != len || (uint32_t)(tag >> 32) != key_id) return -1;
    if (!dst_check(buf + 16, len - 16, tag)) return -1;
    return (long)(uint32_t)tag;
}

/* A cheap deterministic generator for test choices. */
static inline uint64_t fu_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
