/* One client connection: the state machine that reads frames (header ->
 * metadata -> data), hands complete requests to ops.c, and writes queued
 * responses. Small frames are read through a 64 KiB buffer (one recv per
 * request); large SET values are received straight into their arena range.
 * Responses reference arena bytes directly (holding an object reference until
 * the bytes are on the wire), so no value is ever copied by the worker.
 *
 * A connection never blocks the loop: every read and write is non-blocking and
 * bounded by DS_IO_SLICE per turn. A client that stops reading its responses
 * stops being read from once DS_OUT_HIGH bytes are queued, so its backlog is
 * bounded. A malformed frame gets an error answer and closes that connection. */
#include "worker/server.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "worker/cluster.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DS_RBUF 65536u
#define DS_OUT_HIGH (16u << 20)
#define DS_MAX_IOV 64
#define DS_CONNS_PER_CLIENT 70 /* the client library's pool (64) plus its anchor, with room */

struct ds_out {
    ds_out_t *next;
    uint32_t nseg, seg_idx;
    uint64_t seg_off;
    uint32_t nrefs;
    int fd;
    ds_obj_t **refs;
    uint8_t *head;
    struct iovec segs[];
};

/* The read buffer is allocated with the connection, right after it. */
typedef struct {
    ds_conn_t c;
    uint32_t rpos, rlen;
    uint8_t rbuf[DS_RBUF];
} conn_full_t;

/* Where skipped data bytes go (the loop is single-threaded). */
static uint8_t discard[DS_RBUF];

static inline conn_full_t *full(ds_conn_t *c)
{
    return (conn_full_t *)c;
}

static void update_interest(ds_conn_t *c)
{
    if (c->state == CONN_CLOSED) return;
    /* EPOLLRDHUP: a client that dies while its subscribe-get waits is noticed
     * at once, not when the wait times out. It is level-triggered, so it is
     * only asked for when it leads somewhere: while parked (the hang-up closes
     * the connection) or while reading (the read sees EOF). A client that
     * half-closes while its answers back up would otherwise make every loop
     * turn return at once: a busy loop. Its writes still fail once it is
     * fully gone. */
    uint32_t ev = 0;
    bool reading = c->state != CONN_PARKED && c->out_bytes < DS_OUT_HIGH && !c->close_after_write;
    if (reading) ev |= EPOLLIN;
    if (reading || c->state == CONN_PARKED) ev |= EPOLLRDHUP;
    if (c->out_head && c->bulk_out == NULL) ev |= EPOLLOUT;
    ds__loop_mod(c->srv->loop, &c->io, ev);
}

static void free_out(ds_server_t *srv, ds_out_t *o)
{
    for (uint32_t i = 0; i < o->nrefs; i++)
        ds__store_unref(srv->store, o->refs[i]);
    free(o->refs);
    free(o->head);
    free(o);
}

void ds__conn_release_pending(ds_conn_t *c)
{
    for (uint32_t i = 0; i < c->npend; i++)
        if (c->pend[i]) ds__store_unref(c->srv->store, c->pend[i]);
    free(c->pend);
    free(c->pend_status);
    free(c->sinks);
    c->pend = NULL;
    c->pend_status = NULL;
    c->sinks = NULL;
    c->npend = c->nsinks = c->sink_idx = 0;
    c->sink_off = 0;
}

static uint64_t out_total(const ds_out_t *o)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < o->nseg; i++)
        total += o->segs[i].iov_len;
    return total;
}

static uint64_t out_left(const ds_out_t *o)
{
    uint64_t left = 0;
    for (uint32_t i = o->seg_idx; i < o->nseg; i++)
        left += o->segs[i].iov_len - (i == o->seg_idx ? o->seg_off : 0);
    return left;
}

int ds__out_iov(const ds_out_t *o, struct iovec *iov, int max)
{
    int n = 0;
    for (uint32_t i = o->seg_idx; i < o->nseg && n < max; i++) {
        uint64_t off = i == o->seg_idx ? o->seg_off : 0;
        iov[n].iov_base = (uint8_t *)o->segs[i].iov_base + off;
        iov[n].iov_len = o->segs[i].iov_len - off;
        if (iov[n].iov_len) n++;
    }
    return n;
}

bool ds__out_advance(ds_out_t *o, uint64_t n)
{
    while (o->seg_idx < o->nseg) {
        uint64_t room = o->segs[o->seg_idx].iov_len - o->seg_off;
        if (n < room) {
            o->seg_off += n;
            return false;
        }
        n -= room;
        o->seg_idx++;
        o->seg_off = 0;
    }
    return true;
}

static void unqueue_head(ds_conn_t *c)
{
    ds_out_t *o = c->out_head;
    c->out_head = o->next;
    if (c->out_head == NULL) c->out_tail = NULL;
    c->out_bytes -= out_total(o);
    o->fd = -1;
    free_out(c->srv, o);
}

static void flush_out(ds_conn_t *c);

void ds__conn_bulk_done(ds_conn_t *c, ds_out_t *o, uint64_t sent, int err)
{
    ds_server_t *srv = c->srv;
    c->bulk_out = NULL;
    srv->ctr.bytes_out += sent;
    if (c->state == CONN_CLOSED) {
        /* Closed meanwhile: the socket and the connection waited for this. */
        free_out(srv, o);
        close(c->io.fd);
        c->next = srv->dead;
        srv->dead = c;
        return;
    }
    if (err) {
        ds__conn_close(c, strerror(err));
        return;
    }
    unqueue_head(c);
    flush_out(c);
}

void ds__conn_close(ds_conn_t *c, const char *why)
{
    if (c->state == CONN_CLOSED) return;
    ds_server_t *srv = c->srv;
    DS_LOG_DEBUG("conn %llu closed: %s", (unsigned long long)c->id, why);
    c->state = CONN_CLOSED;
    ds__loop_del(srv->loop, &c->io);
    /* The sender thread may be writing this socket: shut it down to fail
     * that write; it is closed when the frame comes back. */
    if (c->bulk_out)
        shutdown(c->io.fd, SHUT_RDWR);
    else
        close(c->io.fd);
    if (c->wait) ds__subs_cancel(srv, c->wait);
    if (c->cpend) {
        /* Its jobs still finish (and free what they hold); nobody is answered. */
        c->cpend->conn = NULL;
        c->cpend = NULL;
    }
    ds__conn_release_pending(c);
    free(c->meta);
    c->meta = NULL;
    while (c->out_head) {
        ds_out_t *o = c->out_head;
        c->out_head = o->next;
        if (o != c->bulk_out) free_out(srv, o);
    }
    c->out_tail = NULL;
    if (c->session && --c->session->nconns == 0) ds__session_free(srv, c->session);
    c->session = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    srv->nconns--;
    if (c->bulk_out) return; /* freed by ds__conn_bulk_done */
    c->next = srv->dead;
    srv->dead = c;
}

/* Writes as much queued output as the socket takes, up to DS_IO_SLICE. */
static void flush_out(ds_conn_t *c)
{
    uint64_t budget = DS_IO_SLICE;
    while (c->out_head && c->bulk_out == NULL && budget > 0) {
        struct iovec iov[DS_MAX_IOV];
        int n = 0;
        ds_out_t *o = c->out_head;
        if (o->fd < 0 && out_left(o) >= DS_BULK_MIN && ds__bulk_send(c->srv->bulk, c, o)) {
            c->bulk_out = o;
            break;
        }
        for (ds_out_t *f = o; f && n < DS_MAX_IOV; f = f->next) {
            /* A frame carrying an fd must start its own sendmsg. */
            if (f != o && f->fd >= 0) break;
            for (uint32_t i = f->seg_idx; i < f->nseg && n < DS_MAX_IOV; i++) {
                uint64_t off = (f == o && i == o->seg_idx) ? o->seg_off : 0;
                iov[n].iov_base = (uint8_t *)f->segs[i].iov_base + off;
                iov[n].iov_len = f->segs[i].iov_len - off;
                if (iov[n].iov_len) n++;
            }
        }
        ssize_t w;
        if (o->fd >= 0 && o->seg_idx == 0 && o->seg_off == 0) {
            /* SCM_RIGHTS needs at least one byte sent alongside: the header. */
            w = ds__send_with_fd(c->io.fd, o->segs[0].iov_base, o->segs[0].iov_len, o->fd);
        } else {
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            w = sendmsg(c->io.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            ds__conn_close(c, strerror(errno));
            return;
        }
        c->srv->ctr.bytes_out += (uint64_t)w;
        budget = (uint64_t)w >= budget ? 0 : budget - (uint64_t)w;
        uint64_t left = (uint64_t)w;
        while (left > 0 || (c->out_head && c->out_head->seg_idx == c->out_head->nseg)) {
            o = c->out_head;
            if (o == NULL) break;
            if (o->seg_idx < o->nseg) {
                uint64_t room = o->segs[o->seg_idx].iov_len - o->seg_off;
                if (left < room) {
                    o->seg_off += left;
                    left = 0;
                    break;
                }
                left -= room;
                o->seg_idx++;
                o->seg_off = 0;
                continue;
            }
            unqueue_head(c);
        }
    }
    if (c->out_head == NULL && c->close_after_write) {
        ds__conn_close(c, "closed after error reply");
        return;
    }
    update_interest(c);
}

void ds__conn_reply(ds_conn_t *c, uint64_t req_id, uint16_t op, ds_status_t st, const ds_wbuf_t *w,
                    const struct iovec *segs, uint32_t nseg, ds_obj_t **refs, uint32_t nrefs,
                    int fd)
{
    ds_server_t *srv = c->srv;
    ds_out_t *o = calloc(1, sizeof(*o) + (nseg + 1) * sizeof(struct iovec));
    size_t meta_len = w ? w->len : 0;
    uint8_t *head = malloc(DS_WIRE_HEADER_LEN + meta_len);
    ds_obj_t **r = nrefs ? malloc(nrefs * sizeof(*r)) : NULL;
    if (o == NULL || head == NULL || (nrefs && r == NULL)) {
        free(o);
        free(head);
        free(r);
        for (uint32_t i = 0; i < nrefs; i++)
            ds__store_unref(srv->store, refs[i]);
        ds__conn_close(c, "out of memory queueing a response");
        return;
    }
    uint64_t data_len = 0;
    for (uint32_t i = 0; i < nseg; i++)
        data_len += segs[i].iov_len;
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = DS_FLAG_RESPONSE,
                          .opcode = op,
                          .status = (uint32_t)st,
                          .meta_len = (uint32_t)meta_len,
                          .req_id = req_id,
                          .data_len = data_len};
    ds__wire_header_encode(&h, head);
    if (meta_len) memcpy(head + DS_WIRE_HEADER_LEN, w->buf, meta_len);
    o->head = head;
    o->segs[0].iov_base = head;
    o->segs[0].iov_len = DS_WIRE_HEADER_LEN + meta_len;
    /* Empty segments would stall the writer's progress accounting: skip them. */
    o->nseg = 1;
    for (uint32_t i = 0; i < nseg; i++)
        if (segs[i].iov_len) o->segs[o->nseg++] = segs[i];
    if (nrefs) memcpy(r, refs, nrefs * sizeof(*r));
    o->refs = r;
    o->nrefs = nrefs;
    o->fd = fd;
    if (st != DS_K_OK && op < DS_OP__MAX) srv->ctr.errors[op]++;
    if (c->req_start_ns && req_id == c->h.req_id) {
        ds__metrics_observe(srv, op, ds__now_ns() - c->req_start_ns);
        c->req_start_ns = 0;
    }
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    c->out_bytes += DS_WIRE_HEADER_LEN + meta_len + data_len;
    flush_out(c);
}

void ds__conn_reply_err(ds_conn_t *c, uint64_t req_id, uint16_t op, ds_status_t st, const char *fmt,
                        ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, msg);
    ds__conn_reply(c, req_id, op, st, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void protocol_error(ds_conn_t *c, const char *msg)
{
    ds_server_t *srv = c->srv;
    srv->ctr.protocol_errors++;
    DS_LOG_WARN("conn %llu: protocol error: %s", (unsigned long long)c->id, msg);
    c->close_after_write = true;
    c->state = CONN_READ_HEADER;
    /* A frame we could not read answers as a connection-level (HELLO) error
     * unless its opcode was valid, so the reply itself always decodes. */
    uint16_t op = ds__opcode_name(c->h.opcode) ? c->h.opcode : DS_OP_HELLO;
    ds__conn_reply_err(c, c->h.req_id, op, DS_K_INVALID, "protocol error: %s", msg);
}

/* The metadata is complete: start the data phase or run the request. */
static void meta_complete(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    if (c->h.opcode < DS_OP__MAX) srv->ctr.ops[c->h.opcode]++;
    if (!c->hello_done && c->h.opcode != DS_OP_HELLO) {
        if (!c->authed) {
            /* Unauthenticated: K_NOT_AUTHORIZED and nothing else. */
            srv->ctr.auth_failures++;
            c->close_after_write = true;
            c->state = CONN_READ_HEADER;
            ds__conn_reply_err(c, c->h.req_id, c->h.opcode, DS_K_NOT_AUTHORIZED,
                               "not authenticated: send HELLO and answer its challenge first");
            return;
        }
        protocol_error(c, "the first request on a connection must be HELLO");
        return;
    }
    if (c->h.opcode == DS_OP_SET) {
        ds__ops_set_begin(c);
        free(c->meta); /* reserve copied the keys */
        c->meta = NULL;
        if (c->state == CONN_READ_DATA && c->sink_idx == c->nsinks) {
            ds__ops_set_finish(c);
            if (c->state != CONN_CLOSED) c->state = CONN_READ_HEADER;
        }
        return;
    }
    if (c->h.data_len != 0) {
        protocol_error(c, "this operation carries no data section");
        return;
    }
    c->state = CONN_READ_HEADER;
    ds__ops_dispatch(c);
    if (c->state != CONN_CLOSED && c->state != CONN_PARKED) c->state = CONN_READ_HEADER;
    free(c->meta); /* NULL if a wait took it over */
    c->meta = NULL;
}

static void header_complete(ds_conn_t *c)
{
    char err[256];
    if (ds__wire_header_decode(c->hdr, c->srv->max_data, &c->h, err, sizeof(err)) != 0 ||
        (c->h.flags & DS_FLAG_RESPONSE)) {
        if (c->h.flags & DS_FLAG_RESPONSE) snprintf(err, sizeof(err), "got a response frame");
        protocol_error(c, err);
        return;
    }
    c->hdr_got = 0;
    c->meta_got = 0;
    c->req_start_ns = ds__now_ns();
    if (c->h.meta_len == 0) {
        meta_complete(c);
        return;
    }
    c->meta = malloc(c->h.meta_len);
    if (c->meta == NULL) {
        protocol_error(c, "out of memory for request metadata");
        return;
    }
    c->state = CONN_READ_META;
}

/* n more data bytes landed in the current sink: move on, and finish the SET
 * once every value has arrived. */
static void sink_advance(ds_conn_t *c, uint64_t n)
{
    c->sink_off += n;
    if (c->sink_off == c->sinks[c->sink_idx].len) {
        c->sink_idx++;
        c->sink_off = 0;
    }
    if (c->sink_idx == c->nsinks) {
        ds__ops_set_finish(c);
        if (c->state != CONN_CLOSED) c->state = CONN_READ_HEADER;
    }
}

/* Moves bytes from the read buffer into the current frame part. */
static void consume(ds_conn_t *c)
{
    conn_full_t *f = full(c);
    while (f->rpos < f->rlen && !c->close_after_write) {
        uint32_t avail = f->rlen - f->rpos;
        const uint8_t *p = f->rbuf + f->rpos;
        switch (c->state) {
        case CONN_READ_HEADER: {
            uint32_t n = DS_WIRE_HEADER_LEN - c->hdr_got;
            if (n > avail) n = avail;
            memcpy(c->hdr + c->hdr_got, p, n);
            c->hdr_got += n;
            f->rpos += n;
            if (c->hdr_got == DS_WIRE_HEADER_LEN) header_complete(c);
            break;
        }
        case CONN_READ_META: {
            uint32_t n = c->h.meta_len - c->meta_got;
            if (n > avail) n = avail;
            memcpy(c->meta + c->meta_got, p, n);
            c->meta_got += n;
            f->rpos += n;
            if (c->meta_got == c->h.meta_len) meta_complete(c);
            break;
        }
        case CONN_READ_DATA: {
            ds_sink_t *s = &c->sinks[c->sink_idx];
            uint64_t n = s->len - c->sink_off;
            if (n > avail) n = avail;
            memcpy(s->p ? s->p + c->sink_off : discard, p, n);
            f->rpos += (uint32_t)n;
            sink_advance(c, n);
            break;
        }
        default:
            return; /* parked or closed: the rest waits in the buffer */
        }
    }
}

static void process_input(ds_conn_t *c)
{
    conn_full_t *f = full(c);
    uint64_t budget = DS_IO_SLICE;
    for (;;) {
        consume(c);
        if (c->state == CONN_CLOSED || c->state == CONN_PARKED || c->close_after_write) break;
        if (budget == 0 || c->out_bytes >= DS_OUT_HIGH) break;
        ssize_t r;
        /* Big remaining values are received straight into the arena. */
        if (c->state == CONN_READ_DATA && c->sinks[c->sink_idx].len - c->sink_off >= DS_RBUF) {
            ds_sink_t *s = &c->sinks[c->sink_idx];
            uint64_t want = s->len - c->sink_off;
            if (want > budget) want = budget;
            if (s->p == NULL && want > sizeof(discard)) want = sizeof(discard);
            r = recv(c->io.fd, s->p ? s->p + c->sink_off : discard, want, MSG_DONTWAIT);
            if (r > 0) sink_advance(c, (uint64_t)r);
        } else {
            f->rpos = f->rlen = 0;
            r = recv(c->io.fd, f->rbuf, DS_RBUF, MSG_DONTWAIT);
            if (r > 0) f->rlen = (uint32_t)r;
        }
        if (r == 0) {
            ds__conn_close(c, "peer closed");
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            ds__conn_close(c, strerror(errno));
            return;
        }
        c->srv->ctr.bytes_in += (uint64_t)r;
        budget = (uint64_t)r >= budget ? 0 : budget - (uint64_t)r;
        /* A short read drained the socket: skip the recv that would only say
         * EAGAIN (level-triggered epoll calls again when more arrives). */
        if (c->state != CONN_READ_DATA && (uint32_t)r < DS_RBUF) {
            consume(c);
            break;
        }
    }
    update_interest(c);
}

static void on_io(void *ctx, uint32_t events)
{
    ds_conn_t *c = ctx;
    if (c->state == CONN_CLOSED) return;
    if (events & EPOLLOUT) flush_out(c);
    if (c->state == CONN_CLOSED) return;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
        if (c->state == CONN_PARKED) {
            /* Parked: only notice a hang-up; pending input stays queued. */
            if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))
                ds__conn_close(c, "hang-up while waiting");
            return;
        }
        process_input(c);
    }
}

void ds__conn_unpark(ds_conn_t *c)
{
    if (c->state != CONN_PARKED) return;
    c->state = CONN_READ_HEADER;
    process_input(c);
}

/* Accepts one connection on a listener (called from server.c). */
void ds__conn_accept(ds_server_t *srv, int lfd, bool is_unix)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        /* --max_client_num bounds clients (sessions, checked at HELLO); each
         * client may open a pool of connections, bounded here. */
        if (srv->nconns >= (uint32_t)srv->cfg.max_client_num * DS_CONNS_PER_CLIENT) {
            srv->ctr.conns_rejected++;
            /* Tell the client why before closing; best effort. */
            ds_wbuf_t w;
            ds__wbuf_init(&w);
            ds__wbuf_cstr(&w, "worker has reached its connection limit (70 per --max_client_num)");
            uint8_t hdr[DS_WIRE_HEADER_LEN];
            ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                                  .version = DS_WIRE_VERSION,
                                  .flags = DS_FLAG_RESPONSE,
                                  .opcode = DS_OP_HELLO,
                                  .status = DS_K_RUNTIME_ERROR,
                                  .meta_len = (uint32_t)w.len};
            ds__wire_header_encode(&h, hdr);
            ssize_t wr = send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (wr == (ssize_t)sizeof(hdr))
                wr = send(fd, w.buf, w.len, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)wr;
            ds__wbuf_free(&w);
            close(fd);
            DS_LOG_WARN("rejected a connection: %u clients already", srv->nconns);
            continue;
        }
        conn_full_t *f = calloc(1, sizeof(*f));
        if (f == NULL) {
            close(fd);
            return;
        }
        ds_conn_t *c = &f->c;
        c->srv = srv;
        c->is_unix = is_unix;
        c->authed = is_unix || srv->auth_token[0] == '\0';
        c->id = ++srv->next_conn_id;
        c->state = CONN_READ_HEADER;
        if (ds__loop_add(srv->loop, &c->io, fd, EPOLLIN | EPOLLRDHUP, on_io, c) != 0) {
            close(fd);
            free(f);
            return;
        }
        c->next = srv->conns;
        if (srv->conns) srv->conns->prev = c;
        srv->conns = c;
        srv->nconns++;
        srv->ctr.conns_accepted++;
    }
}
