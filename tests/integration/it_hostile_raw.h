/* A small raw-protocol client for it_hostile.c: connects to a worker over its
 * Unix socket or TCP, says HELLO (optionally joining a session with its key),
 * queues several request frames into one buffer and sends them with ONE
 * write, then reads the answers with a deadline and finds them by request id.
 * Everything the worker says is decoded with the wire codec, never trusted:
 * a malformed frame, a closed connection or a missed deadline is an error
 * the caller can report.
 *
 * HELLO follows the session protocol being introduced: the request carries a
 * trailing `str session_key`, and the answer may carry one after the index
 * fields (a worker that does not send it leaves the key empty).
 *
 * Header-only (static functions) so the test stays one program. */
#ifndef DS_TESTS_IT_HOSTILE_RAW_H
#define DS_TESTS_IT_HOSTILE_RAW_H

#include "harness.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HR_MAX_FRAMES 64

/* One decoded answer: header, metadata and data (both malloc'd). */
typedef struct {
    ds_wire_header_t h;
    uint8_t *meta;
    uint8_t *data;
    char err[256]; /* the leading error string of the metadata */
} hr_frame_t;

typedef struct {
    int fd;
    bool is_unix;
    /* From the HELLO answer. */
    uint32_t hello_status;
    char hello_err[256];
    uint64_t sid;
    char skey[128];
    char worker_id[128];
    uint32_t pid;
    /* Frames queued by hr_add and not yet sent. */
    ds_wbuf_t out;
    uint64_t next_id;
    /* Answers read so far, in arrival order. */
    hr_frame_t got[HR_MAX_FRAMES];
    uint32_t ngot;
    /* keep_fds: descriptors riding along with answers are kept here (in
     * arrival order) instead of closed; hr_close closes them. */
    bool keep_fds;
    int fds[4];
    uint32_t nfds;
} hr_conn_t;

static inline void hr_frame_free(hr_frame_t *f)
{
    free(f->meta);
    free(f->data);
    f->meta = f->data = NULL;
}

/* Connects without saying anything; 0 or -1 (message on stderr). */
static inline int hr_open(hr_conn_t *c, const dst_worker_t *w, bool unix_sock)
{
    memset(c, 0, sizeof(*c));
    ds__wbuf_init(&c->out);
    c->next_id = 1;
    c->is_unix = unix_sock;
    char err[256], path[300];
    if (unix_sock) {
        ds__socket_path(w->sockdir[0] ? w->sockdir : NULL, w->host, w->port, path, sizeof(path));
        c->fd = ds__unix_connect(path, 2000, err, sizeof(err));
    } else {
        c->fd = ds__tcp_connect(w->host, w->port, 2000, err, sizeof(err));
    }
    if (c->fd < 0) fprintf(stderr, "hr_open(%s): %s\n", unix_sock ? "unix" : "tcp", err);
    return c->fd < 0 ? -1 : 0;
}

static inline void hr_close(hr_conn_t *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    for (uint32_t i = 0; i < c->nfds; i++)
        close(c->fds[i]);
    c->nfds = 0;
    for (uint32_t i = 0; i < c->ngot; i++)
        hr_frame_free(&c->got[i]);
    c->ngot = 0;
    ds__wbuf_free(&c->out);
}

/* Queues one request frame. data_len is what the header announces; nbytes
 * of data are queued (they differ only when a test lies on purpose).
 * Returns the request id. */
static inline uint64_t hr_add_raw(hr_conn_t *c, uint16_t op, uint8_t flags, const ds_wbuf_t *m,
                                  uint64_t data_len, const void *data, size_t nbytes)
{
    uint64_t id = c->next_id++;
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = flags,
                          .opcode = op,
                          .meta_len = m ? (uint32_t)m->len : 0,
                          .req_id = id,
                          .data_len = data_len};
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, hb);
    ds__wbuf_bytes(&c->out, hb, sizeof(hb));
    if (m && m->len) ds__wbuf_bytes(&c->out, m->buf, m->len);
    if (nbytes) ds__wbuf_bytes(&c->out, data, nbytes);
    return id;
}

static inline uint64_t hr_add(hr_conn_t *c, uint16_t op, const ds_wbuf_t *m, const void *data,
                              size_t len)
{
    return hr_add_raw(c, op, 0, m, len, data, len);
}

/* Sends everything queued with one write call (a small buffer goes out in
 * one send; the worker sees the frames together). 0 or -1. */
static inline int hr_flush(hr_conn_t *c)
{
    if (c->out.oom) return -1;
    int rc = ds__write_full(c->fd, c->out.buf, c->out.len, ds__now_ms() + 2000);
    ds__wbuf_reset(&c->out);
    return rc;
}

/* Reads one frame. On a Unix socket a file descriptor riding along (the
 * arena memfd of a granted HELLO) is received and closed. 0, or -1 with
 * errno (ETIMEDOUT at the deadline, ECONNRESET when the worker closed). */
static inline int hr_read_frame(hr_conn_t *c, hr_frame_t *f, uint64_t deadline)
{
    memset(f, 0, sizeof(*f));
    uint8_t hb[DS_WIRE_HEADER_LEN];
    size_t have = 0;
    if (c->is_unix) {
        /* The fd comes with the first byte of the frame: take it with recvmsg. */
        for (;;) {
            int64_t left = (int64_t)(deadline - ds__now_ms());
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            if (left <= 0 || poll(&p, 1, (int)left) == 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            int fd = -1;
            ssize_t r = ds__recv_with_fd(c->fd, hb, 1, &fd);
            if (fd >= 0 && c->keep_fds && c->nfds < 4)
                c->fds[c->nfds++] = fd;
            else if (fd >= 0)
                close(fd);
            if (r == 1) break;
            if (r == 0) {
                errno = ECONNRESET;
                return -1;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        }
        have = 1;
    }
    if (ds__read_full(c->fd, hb + have, sizeof(hb) - have, deadline) != 0) return -1;
    char err[256];
    if (ds__wire_header_decode(hb, UINT64_C(1) << 34, &f->h, err, sizeof(err)) != 0) {
        fprintf(stderr, "hr_read_frame: undecodable answer: %s\n", err);
        errno = EPROTO;
        return -1;
    }
    f->meta = malloc(f->h.meta_len + 1);
    f->data = malloc(f->h.data_len + 1);
    if (f->meta == NULL || f->data == NULL ||
        ds__read_full(c->fd, f->meta, f->h.meta_len, deadline) != 0 ||
        ds__read_full(c->fd, f->data, f->h.data_len, deadline) != 0) {
        int e = errno;
        hr_frame_free(f);
        errno = e ? e : ENOMEM;
        return -1;
    }
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *e;
    uint32_t el = ds__rbuf_str(&r, &e);
    snprintf(f->err, sizeof(f->err), "%.*s", r.err ? 0 : (int)el, r.err ? "" : e);
    return 0;
}

/* Reads answers until n have arrived in all (kept in c->got, in arrival
 * order) or the deadline passes. Returns how many have arrived. */
static inline uint32_t hr_collect(hr_conn_t *c, uint32_t n, uint64_t deadline)
{
    while (c->ngot < n && c->ngot < HR_MAX_FRAMES) {
        if (hr_read_frame(c, &c->got[c->ngot], deadline) != 0) break;
        c->ngot++;
    }
    return c->ngot;
}

/* The answer to request id (reading more until the deadline), or NULL. */
static inline hr_frame_t *hr_answer(hr_conn_t *c, uint64_t id, uint64_t deadline)
{
    for (;;) {
        for (uint32_t i = 0; i < c->ngot; i++)
            if (c->got[i].h.req_id == id) return &c->got[i];
        if (c->ngot == HR_MAX_FRAMES || hr_read_frame(c, &c->got[c->ngot], deadline) != 0)
            return NULL;
        c->ngot++;
    }
}

/* ---- metadata of the requests the tests use ---- */

/* HELLO: u32 proto, u64 session, u8 want_shm, str token, str session_key
 * (key NULL: the field is left out, as an older client would). */
static inline void hr_m_hello(ds_wbuf_t *m, uint64_t sid, bool want_shm, const char *key)
{
    ds__wbuf_u32(m, DS_WIRE_VERSION);
    ds__wbuf_u64(m, sid);
    ds__wbuf_u8(m, want_shm ? 1 : 0);
    ds__wbuf_cstr(m, "");
    if (key) ds__wbuf_cstr(m, key);
}

static inline void hr_m_get(ds_wbuf_t *m, const char *key, int32_t wait_ms, uint8_t flags)
{
    ds__wbuf_i32(m, wait_ms);
    ds__wbuf_u8(m, flags);
    ds__wbuf_u32(m, 1);
    ds__wbuf_cstr(m, key);
}

static inline void hr_m_set(ds_wbuf_t *m, const char *key, uint64_t len)
{
    ds__wbuf_u8(m, 0);  /* DS_WRITE_NONE_L2_CACHE */
    ds__wbuf_u32(m, 0); /* no TTL */
    ds__wbuf_u8(m, 0);  /* existence NONE */
    ds__wbuf_u32(m, 1);
    ds__wbuf_cstr(m, key);
    ds__wbuf_u64(m, len);
}

static inline void hr_m_keys(ds_wbuf_t *m, const char *key)
{
    ds__wbuf_u32(m, 1);
    ds__wbuf_cstr(m, key);
}

/* Queues the common requests; each returns its request id. */
static inline uint64_t hr_get(hr_conn_t *c, const char *key, int32_t wait_ms, uint8_t flags)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_get(&m, key, wait_ms, flags);
    uint64_t id = hr_add(c, DS_OP_GET, &m, NULL, 0);
    ds__wbuf_free(&m);
    return id;
}

static inline uint64_t hr_set(hr_conn_t *c, const char *key, const char *val)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_set(&m, key, strlen(val));
    uint64_t id = hr_add(c, DS_OP_SET, &m, val, strlen(val));
    ds__wbuf_free(&m);
    return id;
}

static inline uint64_t hr_del(hr_conn_t *c, const char *key)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_keys(&m, key);
    uint64_t id = hr_add(c, DS_OP_DEL, &m, NULL, 0);
    ds__wbuf_free(&m);
    return id;
}

static inline uint64_t hr_health(hr_conn_t *c)
{
    return hr_add(c, DS_OP_HEALTH, NULL, NULL, 0);
}

/* Says HELLO (sid 0 = a new session; key NULL = no key field) and reads the
 * answer into c->hello_*, c->sid, c->skey, c->worker_id. Returns 0 when an
 * answer came within timeout_ms (whatever its status), -1 when none did. */
static inline int hr_hello(hr_conn_t *c, uint64_t sid, bool want_shm, const char *key,
                           int timeout_ms)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_hello(&m, sid, want_shm, key);
    uint64_t id = hr_add(c, DS_OP_HELLO, &m, NULL, 0);
    ds__wbuf_free(&m);
    if (hr_flush(c) != 0) return -1;
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + (uint64_t)timeout_ms);
    if (f == NULL) return -1;
    c->hello_status = f->h.status;
    snprintf(c->hello_err, sizeof(c->hello_err), "%s", f->err);
    if (f->h.status != 0) return 0;
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *s;
    (void)ds__rbuf_str(&r, &s);
    c->sid = ds__rbuf_u64(&r);
    (void)ds__rbuf_u64(&r); /* arena size */
    (void)ds__rbuf_u32(&r); /* inline max */
    uint32_t wl = ds__rbuf_str(&r, &s);
    if (!r.err) snprintf(c->worker_id, sizeof(c->worker_id), "%.*s", (int)wl, s);
    c->pid = ds__rbuf_u32(&r);
    (void)ds__rbuf_u64(&r); /* index offset */
    (void)ds__rbuf_u32(&r); /* index slots */
    (void)ds__rbuf_u32(&r); /* index key max */
    if (!r.err && r.pos < r.len) {
        uint32_t kl = ds__rbuf_str(&r, &s);
        if (!r.err) snprintf(c->skey, sizeof(c->skey), "%.*s", (int)kl, s);
    }
    /* The HELLO answer is consumed: later answers start at got[0]. */
    for (uint32_t i = 0; i < c->ngot; i++)
        hr_frame_free(&c->got[i]);
    c->ngot = 0;
    return 0;
}

/* Opens and says HELLO for a new session; 0 when the worker said OK. */
static inline int hr_open_hello(hr_conn_t *c, const dst_worker_t *w, bool unix_sock)
{
    if (hr_open(c, w, unix_sock) != 0) return -1;
    if (hr_hello(c, 0, false, "", 3000) != 0 || c->hello_status != 0) {
        fprintf(stderr, "HELLO: status %u: %s\n", c->hello_status, c->hello_err);
        return -1;
    }
    return 0;
}

/* ---- reading answers ---- */

/* The first value of a GET answer: its kind (DS_VAL_*, or -1 when the
 * answer is malformed); inline bytes copied into out as a string. For
 * DS_VAL_SHM the handle goes to *handle. */
static inline int hr_get_value(const hr_frame_t *f, char *out, size_t cap, uint64_t *handle)
{
    out[0] = '\0';
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *e;
    (void)ds__rbuf_str(&r, &e);
    uint32_t n = ds__rbuf_u32(&r);
    if (r.err || n < 1) return -1;
    uint8_t kind = ds__rbuf_u8(&r);
    uint64_t size = ds__rbuf_u64(&r);
    if (kind == DS_VAL_SHM) {
        (void)ds__rbuf_u64(&r);
        uint64_t h = ds__rbuf_u64(&r);
        if (handle) *handle = h;
    }
    if (r.err) return -1;
    if (kind == DS_VAL_INLINE) {
        if (size > f->h.data_len) return -1;
        snprintf(out, cap, "%.*s", (int)size, (const char *)f->data);
    }
    return kind;
}

/* "id 2 get status 0 value 'c' (kind 1)": what an answer said, for the output. */
static inline const char *hr_describe(const hr_frame_t *f, char *buf, size_t cap)
{
    if (f == NULL) {
        snprintf(buf, cap, "no answer");
        return buf;
    }
    char v[96] = "";
    if (f->h.opcode == DS_OP_GET && f->h.status == 0) {
        char val[48];
        int kind = hr_get_value(f, val, sizeof(val), NULL);
        snprintf(v, sizeof(v), " value '%s' (kind %d)", val, kind);
    }
    snprintf(buf, cap, "id %llu %s status %u%s%s%s", (unsigned long long)f->h.req_id,
             ds__opcode_name(f->h.opcode) ? ds__opcode_name(f->h.opcode) : "?", f->h.status, v,
             f->err[0] ? " err: " : "", f->err);
    return buf;
}

#endif
