/* Framing of requests and responses over one connection to the worker.
 *
 * A request is built in place: the 32-byte header slot and the metadata go
 * into conn->w, the data section is a list of segments (small values copied
 * into conn->d, large ones referenced where the caller keeps them), and the
 * frames go to the connection's transport (conn->ops: a socket, a request
 * lane or the shared connection; client_internal.h) with one call that
 * also waits for the answer. A response is read in two steps: header and
 * metadata here, the data section by the caller, straight into wherever
 * the values belong. Both go through a small per-connection buffer that
 * the transport fills, so that a small response costs one read; large data
 * bypasses the buffer.
 *
 * This file also dials (HELLO, with TLS first when enable_tls) and knows
 * nothing about pools or sessions; it reports what happened to the
 * connection through conn->state and lets client.c decide. */
#include "client/client_internal.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/net.h"
#include "common/spin.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

/* Reads n bytes of the response into dst: what the buffer holds first, then
 * through the buffer, or straight into dst for a large remainder. */
static int read_resp(ds_conn_t *conn, void *dst, size_t n, uint64_t deadline)
{
    uint8_t *p = dst;
    while (n > 0) {
        size_t avail = conn->in_len - conn->in_pos;
        if (avail > 0) {
            size_t k = n < avail ? n : avail;
            memcpy(p, conn->in + conn->in_pos, k);
            conn->in_pos += (uint32_t)k;
            p += k;
            n -= k;
            continue;
        }
        if (n >= DS_CLIENT_INBUF) {
            ssize_t r = conn->ops->recv(conn, p, n, deadline);
            if (r < 0) return -1;
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (conn->in == NULL && (conn->in = malloc(DS_CLIENT_INBUF)) == NULL) {
            errno = ENOMEM;
            return -1;
        }
        ssize_t r = conn->ops->recv(conn, conn->in, DS_CLIENT_INBUF, deadline);
        if (r < 0) return -1;
        conn->in_pos = 0;
        conn->in_len = (uint32_t)r;
    }
    return 0;
}

/* Reads exactly len bytes with recvmsg so that a file descriptor riding along
 * with any of them is caught (a plain recv would silently drop it). */
static int read_full_fd(int fd, void *buf, size_t len, uint64_t deadline, int *got_fd)
{
    uint8_t *p = buf;
    while (len > 0) {
        if (ds__wait_fd(fd, POLLIN, deadline) != 0) return -1;
        int afd = -1;
        ssize_t r = ds__recv_with_fd(fd, p, len, &afd);
        if (afd >= 0) {
            if (*got_fd >= 0) close(*got_fd);
            *got_fd = afd;
        }
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -1;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Closes what a failed hello leaves open; the caller sets the error. */
static void dial_cleanup(int fd, int afd, uint8_t *meta)
{
    if (fd >= 0) close(fd);
    if (afd >= 0) close(afd);
    free(meta);
}

static const char *hello_io_reason(void)
{
    /* EPROTO: TLS failed (a TLS 1.3 worker refuses a client's certificate
     * after the client's side of the handshake is over). */
    if (errno == EPROTO) return ds__tls_last_error();
    return errno == ETIMEDOUT ? "timed out" : "connection closed";
}

/* One HELLO round trip carrying token and the session key; on success *meta
 * (malloc'd) holds the response metadata and *rh its header. The arena fd,
 * when granted, rides on the first bytes of the response. */
static ds_status_t hello_once(const ds_client_t *c, int fd, ds_tls_t *tls, const ds_dial_t *d,
                              const char *token, uint64_t deadline, ds_wire_header_t *rh,
                              uint8_t **meta, int *afd)
{
    char err[256];
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_reserve(&w, DS_WIRE_HEADER_LEN);
    ds__wbuf_u32(&w, DS_WIRE_VERSION); /* protocol */
    ds__wbuf_u64(&w, d->session);
    ds__wbuf_u8(&w, d->unix_path ? 1 : 0);
    ds__wbuf_cstr(&w, token);
    /* Workers that predate session keys stop reading after the token, and
     * those that predate discovery after the key. */
    ds__wbuf_cstr(&w, d->session_key ? d->session_key : "");
    if (d->proof_challenge) {
        ds__wbuf_u64(&w, d->proof_session);
        ds__wbuf_cstr(&w, d->proof_challenge);
    }
    if (w.oom) {
        ds__wbuf_free(&w);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory building hello");
    }
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = DS_OP_HELLO,
                          .meta_len = (uint32_t)(w.len - DS_WIRE_HEADER_LEN),
                          .req_id = 1};
    ds__wire_header_encode(&h, w.buf);
    int wr = tls ? ds__tls_write_full(tls, fd, w.buf, w.len, deadline)
                 : ds__write_full(fd, w.buf, w.len, deadline);
    ds__wbuf_free(&w);
    if (wr != 0)
        return ds__set_error(DS_K_RPC_UNAVAILABLE, "worker at %s did not take hello: %s", c->addr,
                             strerror(errno));
    uint8_t hb[DS_WIRE_HEADER_LEN];
    if ((tls ? ds__tls_read_full(tls, fd, hb, sizeof(hb), deadline)
             : read_full_fd(fd, hb, sizeof(hb), deadline, afd)) != 0)
        return ds__set_error(DS_K_RPC_UNAVAILABLE, "worker at %s did not answer hello: %s", c->addr,
                             hello_io_reason());
    if (ds__wire_header_decode(hb, 0, rh, err, sizeof(err)) != 0 ||
        !(rh->flags & DS_FLAG_RESPONSE) || rh->opcode != DS_OP_HELLO)
        return ds__set_error(DS_K_RUNTIME_ERROR, "worker at %s sent a malformed hello response",
                             c->addr);
    *meta = malloc(rh->meta_len ? rh->meta_len : 1);
    if (*meta == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading hello");
    if ((tls ? ds__tls_read_full(tls, fd, *meta, rh->meta_len, deadline)
             : read_full_fd(fd, *meta, rh->meta_len, deadline, afd)) != 0)
        return ds__set_error(DS_K_RPC_UNAVAILABLE, "worker at %s did not answer hello: %s", c->addr,
                             hello_io_reason());
    return DS_K_OK;
}

/* A worker that refuses a connection before its TLS handshake (at its
 * connection limit, or evicting it before HELLO) says why in a frame of
 * ours without TLS, which the failed handshake received first: its status,
 * its message in why, or DS_K_OK when what came was something else. The
 * frame's tail may still be on its way: read on from the socket until the
 * frame is whole, the socket closes or the deadline (at most a second). */
static ds_status_t plain_refusal(ds_tls_t *tls, int fd, uint64_t deadline, char *why, size_t cap)
{
    uint8_t b[512];
    size_t n = ds__tls_first_bytes(tls, b, sizeof(b));
    static const uint8_t magic[4] = {0x59, 0x52, 0x44, 0x53}; /* DS_WIRE_MAGIC on the wire */
    if (n < sizeof(magic) || memcmp(b, magic, sizeof(magic)) != 0) return DS_K_OK;
    uint64_t until = ds__now_ms() + 1000;
    if (until > deadline) until = deadline;
    ds_wire_header_t h;
    char err[128];
    for (int i = 0; i < 64; i++) {
        if (n >= DS_WIRE_HEADER_LEN) {
            if (ds__wire_header_decode(b, 0, &h, err, sizeof(err)) != 0 ||
                !(h.flags & DS_FLAG_RESPONSE) || h.opcode != DS_OP_HELLO || h.status == DS_K_OK ||
                h.meta_len > sizeof(b) - DS_WIRE_HEADER_LEN)
                return DS_K_OK;
            if (n >= DS_WIRE_HEADER_LEN + h.meta_len) break;
        }
        if (n == sizeof(b) || ds__wait_fd(fd, POLLIN, until) != 0) return DS_K_OK;
        ssize_t r = recv(fd, b + n, sizeof(b) - n, MSG_DONTWAIT);
        if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR))) return DS_K_OK;
        if (r > 0) n += (size_t)r;
    }
    if (n < DS_WIRE_HEADER_LEN || n < DS_WIRE_HEADER_LEN + h.meta_len) return DS_K_OK;
    ds_rbuf_t r;
    ds__rbuf_init(&r, b + DS_WIRE_HEADER_LEN, h.meta_len);
    const char *msg;
    uint32_t ml = ds__rbuf_str(&r, &msg);
    if (r.err) return DS_K_OK;
    snprintf(why, cap, "%.*s (sent without TLS)", (int)ml, msg);
    return (ds_status_t)h.status;
}

/* A string field of the response into out (cap bytes); r.err when longer. */
static void read_cstr(ds_rbuf_t *r, char *out, size_t cap)
{
    const char *p;
    uint32_t l = ds__rbuf_str(r, &p);
    if (l >= cap) r->err = true;
    snprintf(out, cap, "%.*s", r->err ? 0 : (int)l, r->err ? "" : p);
}

ds_status_t ds__conn_dial(const ds_client_t *c, const ds_dial_t *d, int *out_fd, ds_hello_t *out)
{
    char err[256];
    int fd = d->unix_path
                 ? ds__unix_connect(d->unix_path, c->connect_timeout_ms, err, sizeof(err))
                 : ds__tcp_connect(c->host, c->port, c->connect_timeout_ms, err, sizeof(err));
    if (fd < 0)
        return ds__set_error(DS_K_RPC_UNAVAILABLE, "cannot reach the worker at %s%s%s: %s", c->addr,
                             d->unix_path ? " through " : "", d->unix_path ? d->unix_path : "",
                             err);
    uint64_t deadline = ds__now_ms() + (uint64_t)c->connect_timeout_ms;
    int afd = -1;
    uint8_t *meta = NULL;
    ds_wire_header_t rh;
    ds_tls_t *tls = NULL;
    if (c->tls && !d->unix_path) {
        /* TLS first: nothing of ours crosses the wire before it. */
        char te[300];
        tls = ds__tls_new(c->tls, fd, te, sizeof(te));
        if (tls == NULL || ds__tls_handshake(tls, deadline, te, sizeof(te)) != 0) {
            char why[256];
            ds_status_t rs = tls ? plain_refusal(tls, fd, deadline, why, sizeof(why)) : DS_K_OK;
            ds__tls_free(tls);
            if (rs != DS_K_OK) {
                close(fd);
                return ds__set_error(rs, "worker at %s refused the connection: %s", c->addr, why);
            }
            close(fd);
            return ds__set_error(DS_K_RPC_UNAVAILABLE, "cannot reach the worker at %s: %s%s",
                                 c->addr, te,
                                 strstr(te, "wrong version number") || strstr(te, "closed")
                                     ? " (is the worker started with --enable_tls?)"
                                     : "");
        }
    }
    ds_status_t st = hello_once(c, fd, tls, d, "", deadline, &rh, &meta, &afd);
    ds_rbuf_t r;
    const char *msg = "";
    uint32_t ml = 0;
    if (st == DS_K_OK) {
        ds__rbuf_init(&r, meta, rh.meta_len);
        ml = ds__rbuf_str(&r, &msg);
    }
    if (st == DS_K_OK && rh.status == DS_K_NOT_AUTHORIZED && c->token && c->token[0]) {
        /* The worker wants proof of the shared secret: answer its challenge
         * (common/auth.h); the secret itself never crosses the wire. */
        const char *ch;
        uint32_t cl = ds__rbuf_str(&r, &ch);
        char chal[DS_AUTH_HEX_LEN + 1], proof[DS_AUTH_HEX_LEN + 1];
        snprintf(chal, sizeof(chal), "%.*s", (int)cl, ch);
        ds__auth_prove(c->token, chal, proof);
        free(meta);
        meta = NULL;
        st = hello_once(c, fd, tls, d, proof, deadline, &rh, &meta, &afd);
        if (st == DS_K_OK) {
            ds__rbuf_init(&r, meta, rh.meta_len);
            ml = ds__rbuf_str(&r, &msg);
        }
    }
    if (st != DS_K_OK) {
        ds__tls_free(tls);
        dial_cleanup(fd, afd, meta);
        return st;
    }
    if (rh.status != DS_K_OK) {
        ds__tls_free(tls);
        st = ds__set_error((ds_status_t)rh.status, "worker at %s refused the connection: %.*s%s",
                           c->addr, (int)ml, msg,
                           rh.status == DS_K_NOT_AUTHORIZED && !(c->token && c->token[0])
                               ? " (this worker needs the shared secret: set the client token)"
                               : "");
        dial_cleanup(fd, afd, meta);
        return st;
    }
    memset(out, 0, sizeof(*out));
    out->session = ds__rbuf_u64(&r);
    out->arena_size = ds__rbuf_u64(&r);
    out->inline_max = ds__rbuf_u32(&r);
    const char *wid;
    uint32_t wl = ds__rbuf_str(&r, &wid);
    out->pid = ds__rbuf_u32(&r);
    snprintf(out->worker_id, sizeof(out->worker_id), "%.*s", (int)wl, wid);
    /* The shared GET index fields: absent from older workers' responses. */
    if (!r.err && r.pos < r.len) {
        out->index_offset = ds__rbuf_u64(&r);
        out->index_slots = ds__rbuf_u32(&r);
        out->index_keymax = ds__rbuf_u32(&r);
    }
    /* The session key: absent from workers that predate it, which then
     * accept a join on the session id alone. */
    if (!r.err && r.pos < r.len) {
        const char *key;
        uint32_t kl = ds__rbuf_str(&r, &key);
        if (kl > DS_SESSION_KEY_MAX) r.err = true;
        snprintf(out->session_key, sizeof(out->session_key), "%.*s", (int)kl, key);
    }
    /* Discovery: absent from workers that predate it. */
    if (!r.err && r.pos < r.len) read_cstr(&r, out->unix_socket, sizeof(out->unix_socket));
    if (!r.err && r.pos < r.len) read_cstr(&r, out->local_proof, sizeof(out->local_proof));
    if (!r.err && r.pos < r.len) out->features = ds__rbuf_u32(&r);
    if (!r.err && r.pos < r.len) out->pins_offset = ds__rbuf_u64(&r);
    if (r.err) {
        ds__tls_free(tls);
        dial_cleanup(fd, afd, meta);
        return ds__set_error(DS_K_RUNTIME_ERROR, "worker at %s sent a malformed hello response",
                             c->addr);
    }
    free(meta);
    out->tls = tls;
    out->arena_fd = afd;
    *out_fd = fd;
    return DS_K_OK;
}

void ds__dial_close(int fd, ds_hello_t *h)
{
    ds__tls_free(h->tls);
    h->tls = NULL;
    close(fd);
}

ds_conn_t *ds__conn_new(const ds_conn_ops_t *ops, ds_sess_t *sess, const char *peer)
{
    ds_conn_t *conn = calloc(1, sizeof(*conn));
    if (conn == NULL) return NULL;
    conn->ops = ops;
    conn->sock.fd = -1;
    conn->lane.bell_fd = -1;
    conn->sess = sess;
    conn->peer = peer;
    conn->next_req = 1;
    ds__sess_ref(sess);
    return conn;
}

ds_conn_t *ds__conn_new_sock(int fd, ds_tls_t *tls, ds_sess_t *sess, const char *peer)
{
    ds_conn_t *conn = ds__conn_new(&ds__sock_ops, sess, peer);
    if (conn == NULL) return NULL;
    conn->sock.fd = fd;
    conn->sock.tls = tls;
    int domain = 0;
    socklen_t dl = sizeof(domain);
    conn->sock.is_unix =
        getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 && domain == AF_UNIX;
    return conn;
}

void ds__conn_free(ds_conn_t *conn)
{
    if (conn == NULL) return;
    conn->ops->close(conn);
    ds__wbuf_free(&conn->w);
    ds__wbuf_free(&conn->d);
    free(conn->segs);
    free(conn->meta);
    ds__space_drop(conn);
    free(conn->in);
    if (conn->sess) ds__sess_unref(conn->sess);
    free(conn);
}

void ds__conn_begin(ds_conn_t *conn)
{
    ds__wbuf_reset(&conn->w);
    ds__wbuf_reset(&conn->d);
    conn->nsegs = 0;
    ds__wbuf_reserve(&conn->w, DS_WIRE_HEADER_LEN);
    /* This thread's trace id (ds_context_set_trace_id) leads the metadata. */
    const char *trace = ds__trace_id();
    conn->traced = trace[0] != '\0';
    if (conn->traced) ds__wbuf_cstr(&conn->w, trace);
}

void ds__conn_add_data(ds_conn_t *conn, const void *p, size_t len)
{
    if (len == 0) return;
    bool copy = len <= DS_CLIENT_COALESCE_MAX;
    /* Consecutive copied values extend one segment. */
    if (copy && conn->nsegs > 0 && conn->segs[conn->nsegs - 1].p == NULL) {
        ds__wbuf_bytes(&conn->d, p, len);
        conn->segs[conn->nsegs - 1].len += len;
        return;
    }
    if (conn->nsegs == conn->segcap) {
        size_t cap = conn->segcap ? conn->segcap * 2 : 16;
        ds_seg_t *ns = realloc(conn->segs, cap * sizeof(*ns));
        if (ns == NULL) {
            conn->d.oom = true;
            return;
        }
        conn->segs = ns;
        conn->segcap = cap;
    }
    ds_seg_t *s = &conn->segs[conn->nsegs++];
    s->len = len;
    if (copy) {
        s->p = NULL;
        s->off = conn->d.len;
        ds__wbuf_bytes(&conn->d, p, len);
    } else {
        s->p = p;
        s->off = 0;
    }
}

ds_status_t ds__conn_protocol_error(ds_conn_t *conn, const char *what)
{
    conn->state = DS_CONN_BROKEN;
    return ds__set_error(DS_K_RUNTIME_ERROR, "malformed %s response from the worker at %s", what,
                         conn->peer);
}

static ds_status_t io_error(ds_conn_t *conn, const char *op, int err)
{
    if (err == EPROTO) return ds__conn_protocol_error(conn, op);
    if (err == ETIMEDOUT) {
        conn->state = DS_CONN_BROKEN;
        return ds__set_error(DS_K_RPC_DEADLINE_EXCEEDED,
                             "%s request to the worker at %s timed out; its connection was closed",
                             op, conn->peer);
    }
    conn->state = DS_CONN_LOST;
    return ds__set_error(DS_K_CLIENT_WORKER_DISCONNECT,
                         "lost the connection to the worker at %s during %s (%s); the next call "
                         "reconnects",
                         conn->peer, op, strerror(err));
}

/* Encodes a NOREPLY RELEASE frame of the session's deferred pins into buf
 * (room for DS_CLIENT_DEFER_MAX handles); its length, 0 when there are none. */
static size_t deferred_frame(ds_conn_t *conn, uint8_t *buf)
{
    uint64_t h[DS_CLIENT_DEFER_MAX];
    size_t n = conn->sess ? ds__sess_take_deferred(conn->sess, h) : 0;
    if (n == 0) return 0;
    uint8_t *p = buf + DS_WIRE_HEADER_LEN;
    for (int b = 0; b < 4; b++)
        *p++ = (uint8_t)(n >> (8 * b));
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            *p++ = (uint8_t)(h[i] >> (8 * b));
    ds_wire_header_t hd = {.magic = DS_WIRE_MAGIC,
                           .version = DS_WIRE_VERSION,
                           .flags = DS_FLAG_NOREPLY,
                           .opcode = DS_OP_RELEASE,
                           .meta_len = (uint32_t)(p - buf - DS_WIRE_HEADER_LEN),
                           .req_id = conn->next_req++};
    ds__wire_header_encode(&hd, buf);
    return (size_t)(p - buf);
}

/* Sends the request built in conn->w and conn->segs through the
 * connection's transport and, unless noreply, waits for its answer to be
 * readable; *req is its id. The session's deferred releases go first, in
 * the same write. */
static ds_status_t send_request(ds_conn_t *conn, ds_opcode_t op, bool noreply, uint64_t deadline,
                                uint64_t *req)
{
    const char *name = ds__opcode_name(op);
    if (conn->w.oom || conn->d.oom)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory building a %s request", name);
    uint64_t data_len = 0;
    for (size_t i = 0; i < conn->nsegs; i++)
        data_len += conn->segs[i].len;
    size_t meta_len = conn->w.len - DS_WIRE_HEADER_LEN;
    if (meta_len > DS_WIRE_MAX_META)
        return ds__set_error(DS_K_INVALID, "%s request metadata of %zu bytes exceeds %u", name,
                             meta_len, DS_WIRE_MAX_META);
    uint8_t rel[DS_WIRE_HEADER_LEN + 4 + 8 * DS_CLIENT_DEFER_MAX];
    size_t rel_len = deferred_frame(conn, rel);
    *req = conn->mux.m ? ds__mux_next_req(conn->mux.m) : conn->next_req++;
    ds_wire_header_t h = {
        .magic = DS_WIRE_MAGIC,
        .version = DS_WIRE_VERSION,
        .flags = (uint8_t)((noreply ? DS_FLAG_NOREPLY : 0) | (conn->traced ? DS_FLAG_TRACE : 0)),
        .opcode = (uint16_t)op,
        .meta_len = (uint32_t)meta_len,
        .req_id = *req,
        .data_len = data_len};
    ds__wire_header_encode(&h, conn->w.buf);

    struct iovec small[18];
    struct iovec *iov = small;
    size_t k = rel_len ? 1 : 0;
    if (conn->nsegs + k + 1 > sizeof(small) / sizeof(small[0])) {
        iov = malloc((conn->nsegs + k + 1) * sizeof(*iov));
        if (iov == NULL)
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory sending a %s request", name);
    }
    /* Sent or not, the deferred pins are off the list: a failed write
     * breaks the connection, and the worker drops them with the session. */
    if (k) {
        iov[0].iov_base = rel;
        iov[0].iov_len = rel_len;
    }
    iov[k].iov_base = conn->w.buf;
    iov[k].iov_len = conn->w.len;
    for (size_t i = 0; i < conn->nsegs; i++) {
        const ds_seg_t *s = &conn->segs[i];
        iov[k + i + 1].iov_base = (void *)(s->p ? s->p : conn->d.buf + s->off);
        iov[k + i + 1].iov_len = s->len;
    }
    int r = conn->ops->call(conn, iov, conn->nsegs + k + 1, *req, noreply, deadline);
    int err = errno;
    if (iov != small) free(iov);
    if (r != 0) return io_error(conn, name, err);
    return DS_K_OK;
}

ds_status_t ds__conn_call(ds_conn_t *conn, ds_opcode_t op, bool noreply, uint64_t deadline)
{
    const char *name = ds__opcode_name(op);
    uint64_t req = 0;
    ds_status_t st = send_request(conn, op, noreply, deadline, &req);
    if (st != DS_K_OK || noreply) return st;

    uint8_t hb[DS_WIRE_HEADER_LEN];
    if (read_resp(conn, hb, sizeof(hb), deadline) != 0) return io_error(conn, name, errno);
    char err[160];
    if (ds__wire_header_decode(hb, DS_CLIENT_MAX_RESP_DATA, &conn->rh, err, sizeof(err)) != 0 ||
        !(conn->rh.flags & DS_FLAG_RESPONSE) || conn->rh.opcode != op || conn->rh.req_id != req)
        return ds__conn_protocol_error(conn, name);
    if (conn->rh.meta_len > conn->meta_cap) {
        uint8_t *nm = realloc(conn->meta, conn->rh.meta_len);
        if (nm == NULL) {
            /* The response cannot be consumed, so the connection is unusable. */
            conn->state = DS_CONN_BROKEN;
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading a %s response", name);
        }
        conn->meta = nm;
        conn->meta_cap = conn->rh.meta_len;
    }
    if (read_resp(conn, conn->meta, conn->rh.meta_len, deadline) != 0)
        return io_error(conn, name, errno);
    conn->data_left = conn->rh.data_len;
    ds__rbuf_init(&conn->r, conn->meta, conn->rh.meta_len);
    const char *msg;
    uint32_t ml = ds__rbuf_str(&conn->r, &msg);
    if (conn->r.err) return ds__conn_protocol_error(conn, name);
    if (conn->rh.status == DS_K_OK) return DS_K_OK;
    if (ml == 0) return ds__set_error((ds_status_t)conn->rh.status, NULL);
    return ds__set_error((ds_status_t)conn->rh.status, "worker: %.*s", (int)ml, msg);
}

ds_status_t ds__conn_read_data(ds_conn_t *conn, void *dst, size_t n, uint64_t deadline)
{
    if (n > conn->data_left) return ds__conn_protocol_error(conn, ds__opcode_name(conn->rh.opcode));
    if (read_resp(conn, dst, n, deadline) != 0) return io_error(conn, "read", errno);
    conn->data_left -= n;
    return DS_K_OK;
}

ds_status_t ds__conn_skip(ds_conn_t *conn, uint64_t n, uint64_t deadline)
{
    if (n > conn->data_left) return ds__conn_protocol_error(conn, ds__opcode_name(conn->rh.opcode));
    uint8_t scratch[16384];
    while (n > 0) {
        size_t k = n < sizeof(scratch) ? (size_t)n : sizeof(scratch);
        if (read_resp(conn, scratch, k, deadline) != 0) return io_error(conn, "read", errno);
        conn->data_left -= k;
        n -= k;
    }
    return DS_K_OK;
}

ds_status_t ds__conn_lane_open(ds_conn_t *conn, uint64_t deadline)
{
    uint8_t f[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = DS_OP_LANE,
                          .req_id = conn->next_req++};
    ds__wire_header_encode(&h, f);
    if (ds__write_full(conn->sock.fd, f, sizeof(f), deadline) != 0)
        return io_error(conn, "lane", errno);
    int bell = -1;
    char err[160];
    ds_wire_header_t rh;
    uint8_t meta[256];
    if (read_full_fd(conn->sock.fd, f, sizeof(f), deadline, &bell) != 0) {
        int e = errno;
        if (bell >= 0) close(bell);
        return io_error(conn, "lane", e);
    }
    if (ds__wire_header_decode(f, 0, &rh, err, sizeof(err)) != 0 ||
        !(rh.flags & DS_FLAG_RESPONSE) || rh.opcode != DS_OP_LANE || rh.req_id != h.req_id ||
        rh.meta_len > sizeof(meta)) {
        if (bell >= 0) close(bell);
        return ds__conn_protocol_error(conn, "lane");
    }
    if (read_full_fd(conn->sock.fd, meta, rh.meta_len, deadline, &bell) != 0) {
        int e = errno;
        if (bell >= 0) close(bell);
        return io_error(conn, "lane", e);
    }
    ds_rbuf_t r;
    ds__rbuf_init(&r, meta, rh.meta_len);
    const char *msg;
    (void)ds__rbuf_str(&r, &msg);
    if (rh.status != DS_K_OK) {
        /* None to give (all taken): the connection goes without. */
        if (bell >= 0) close(bell);
        return DS_K_OK;
    }
    uint64_t hub = ds__rbuf_u64(&r), lane = ds__rbuf_u64(&r);
    uint32_t gen = ds__rbuf_u32(&r);
    if (r.err) {
        if (bell >= 0) close(bell);
        return ds__conn_protocol_error(conn, "lane");
    }
    return ds__lane_attach(conn, hub, lane, gen, bell);
}

void ds__conn_drain(ds_conn_t *conn, uint64_t deadline)
{
    if (conn->state != DS_CONN_OK || conn->data_left == 0) return;
    /* Draining happens on paths that already carry an error for the caller;
     * a failure here only decides the connection's fate. */
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", ds_last_error());
    ds_status_t st = ds__conn_skip(conn, conn->data_left, deadline);
    if (st != DS_K_OK) ds__set_error(st, "%s", saved);
}
