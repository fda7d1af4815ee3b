/* One client connection: the state machine that reads frames (header ->
 * metadata -> data), hands each complete request to the worker's dispatch
 * callback as a ds_req_t (request.c), and writes queued answers. Small
 * frames are read through a buffer of a little over 64 KiB (one recv per
 * request, a 64 KiB SET included); larger SET values are received straight
 * into their arena range. Answers reference arena bytes directly (holding an
 * object reference until the bytes are on the wire), so no value is ever
 * copied by the worker. An answer of DS_BULK_MIN or more goes to the sender
 * thread (bulk.c), unless one direct write of it finishes it; the rest of a
 * SET's data section of DS_BRECV_MIN or more goes to the receiver thread
 * (bulk_recv.c).
 *
 * A connection never blocks the loop: every read and write is non-blocking and
 * bounded per turn (DS_IO_SLICE; DS_IO_SLICE_DATA for SET data bound for the
 * arena; one direct write of at most DS_BULK_DIRECT for a large answer,
 * DS_BULK_DIRECT_TURN for all of a turn's). A client that stops reading its answers
 * stops being read from once DS_OUT_HIGH bytes are queued, so its backlog is
 * bounded. A malformed frame gets an error answer and closes that connection.
 * While a request of the connection is deferred the connection is parked:
 * its further requests wait (in the socket or the read buffer) until the
 * loop resumes it. */
#include "worker/net/conn.h"
#include "worker/net/lane.h"
#include "worker/net/refuse.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DS_RBUF 65536u
/* The read buffer holds a little more than DS_RBUF, so that a SET of a
 * 64 KiB value arrives, header and metadata included, in one recv (it took
 * two, and often a third that said EAGAIN, where Redis reads one). */
#define DS_RBUF_CAP (DS_RBUF + 4096u)
#define DS_OUT_HIGH (16u << 20)
#define DS_MAX_IOV 64
/* How long accepting pauses when the process is out of descriptors, unless
 * one of its own connections closes first. */
#define DS_ACCEPT_RETRY_MS 250

struct ds_out {
    ds_out_t *next;
    uint32_t nseg, seg_idx;
    uint64_t seg_off;
    uint32_t nrefs;
    int fd;
    bool direct_tried; /* a large frame's one direct write was made */
    ds_obj_t **refs;   /* in the same allocation, after segs */
    struct iovec segs[];
};

/* The read buffer is allocated with the connection, right after it. */
typedef struct {
    ds_conn_t c;
    uint32_t rpos, rlen;
    uint8_t rbuf[DS_RBUF_CAP];
} conn_full_t;

/* Where skipped data bytes go (only the loop's thread reads into it). */
static uint8_t discard[DS_RBUF];

static inline conn_full_t *full(ds_conn_t *c)
{
    return (conn_full_t *)c;
}

static void update_interest(ds_conn_t *c)
{
    if (c->state == CONN_CLOSED) return;
    /* EPOLLRDHUP: a client that dies while its request is deferred is
     * noticed at once, not when the wait times out. It is level-triggered,
     * so it is only asked for when it leads somewhere: while parked (the
     * hang-up closes the connection) or while reading (the read sees EOF). A
     * client that half-closes while its answers back up would otherwise make
     * every loop turn return at once: a busy loop. Its writes still fail
     * once it is fully gone. */
    uint32_t ev = 0;
    bool reading = c->state != CONN_PARKED && c->out_bytes < DS_OUT_HIGH && !c->close_after_write &&
                   !c->bulk_in;
    if (reading) ev |= EPOLLIN;
    if (reading || c->state == CONN_PARKED) ev |= EPOLLRDHUP;
    if (c->out_head && c->bulk_out == NULL && !c->out_held) ev |= EPOLLOUT;
    ds__loop_mod(c->net->loop, &c->io, ev);
    /* Bytes inside a TLS session are no event: read them after this one. */
    if (reading && ds__conn_tls_pending(c)) ds__conn_make_ready(c);
}

/* The frame, its segment list, its references and its header and metadata
 * bytes are one allocation (ds__conn_queue). */
static void free_out(ds_net_t *net, ds_out_t *o)
{
    for (uint32_t i = 0; i < o->nrefs; i++)
        ds__store_unref(net->store, o->refs[i]);
    free(o);
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

uint64_t ds__out_left(const ds_out_t *o)
{
    return out_left(o);
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
    free_out(c->net, o);
}

static void flush_out(ds_conn_t *c);

void ds__conn_bulk_done(ds_conn_t *c, ds_out_t *o, uint64_t sent, int err)
{
    ds_net_t *net = c->net;
    c->bulk_out = NULL;
    net->ctr.bytes_out += sent;
    if (c->state == CONN_CLOSED) {
        /* Closed meanwhile: the socket and the connection waited for this
         * (and for the receiver thread's job, if it has one). */
        free_out(net, o);
        if (c->bulk_in) return;
        ds__conn_tls_free(c);
        close(c->io.fd);
        if (!c->queued) {
            c->next = net->dead;
            net->dead = c;
        }
        return;
    }
    if (err) {
        ds__conn_close(c, strerror(err));
        return;
    }
    unqueue_head(c);
    flush_out(c);
}

/* A descriptor is free again: listeners paused for the lack of one resume. */
static void resume_listeners(ds_net_t *net)
{
    ds_listener_t *ls[2] = {&net->tcp, &net->unix_};
    for (int i = 0; i < 2; i++) {
        if (!ls[i]->paused) continue;
        ls[i]->paused = false;
        ds__loop_mod(net->loop, &ls[i]->io, EPOLLIN);
    }
    net->accept_retry_ms = 0;
}

void ds__conn_close(ds_conn_t *c, const char *why)
{
    if (c->state == CONN_CLOSED) return;
    ds_net_t *net = c->net;
    DS_LOG_DEBUG("conn %llu closed: %s", (unsigned long long)c->id, why);
    c->state = CONN_CLOSED;
    /* The lane says so before the socket does. */
    ds__lane_close(c);
    ds__loop_del(net->loop, &c->io);
    /* The sender or receiver thread may be using this socket: shut it down
     * to fail its next write or read; it is closed when its job comes back. */
    if (c->bulk_out || c->bulk_in) {
        shutdown(c->io.fd, SHUT_RDWR);
    } else {
        ds__conn_tls_free(c);
        close(c->io.fd);
    }
    if (c->deferred) {
        /* Its owner is told once and ends it when it is done with it. */
        ds_req_t *d = c->deferred;
        c->deferred = NULL;
        d->conn_ = NULL;
        d->session = NULL;
        if (d->cancel_) d->cancel_(d, d->cancel_ctx_);
    }
    /* The receiver thread may still be writing the SET's sinks: they are
     * let go when its job comes back (ds__conn_brecv_done). */
    if (c->data_done && !c->bulk_in) {
        ds_req_data_fn done = c->data_done;
        c->data_done = NULL;
        done(c->data_ctx, NULL);
    }
    c->sinks = NULL;
    if (c->meta_owned) free(c->meta);
    c->meta = NULL;
    while (c->out_head) {
        ds_out_t *o = c->out_head;
        c->out_head = o->next;
        if (o != c->bulk_out) free_out(net, o);
    }
    c->out_tail = NULL;
    ds__guard_untrack(c);
    ds__guard_uncharge(c);
    if (c->session && --c->session->nconns == 0) ds__session_free(net, c->session);
    c->session = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        net->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    net->nconns--;
    resume_listeners(net);
    /* On the ready list it stays until the list is walked: skipped there as
     * closed, and freed only after. */
    if (c->bulk_out || c->bulk_in || c->queued) return;
    c->next = net->dead;
    net->dead = c;
}

/* Writes as much queued output as the socket takes, up to DS_IO_SLICE. */
static void flush_out(ds_conn_t *c)
{
    uint64_t budget = DS_IO_SLICE;
    while (!c->out_held && c->out_head && c->bulk_out == NULL && budget > 0) {
        struct iovec iov[DS_MAX_IOV];
        int n = 0;
        ds_out_t *o = c->out_head;
        uint64_t big = o->fd < 0 ? out_left(o) : 0;
        if (big >= DS_BULK_MIN) {
            /* A large frame the loop may finish in one write (a 1 MiB
             * value's answer) gets that write first, within the turn's
             * budget; what it leaves goes to the sender thread, as does a
             * frame too large for it (whose first bytes the loop would
             * only delay). */
            ds_net_t *net = c->net;
            if (!o->direct_tried && big <= DS_BULK_DIRECT && big <= net->direct_left) {
                o->direct_tried = true;
                net->direct_left -= big;
                if (budget < big) budget = big;
            } else if (ds__bulk_send(net->bulk, c, o)) {
                c->bulk_out = o;
                break;
            }
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
            w = ds__conn_sendv(c, iov, n);
        }
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            ds__conn_close(c, strerror(errno));
            return;
        }
        c->net->ctr.bytes_out += (uint64_t)w;
        c->net->ctr.socket_writes++;
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

void ds__conn_queue(ds_conn_t *c, uint64_t req_id, uint16_t op, ds_status_t st, const ds_wbuf_t *w,
                    const struct iovec *segs, uint32_t nseg, ds_obj_t **refs, uint32_t nrefs,
                    int fd, bool flush)
{
    ds_net_t *net = c->net;
    size_t meta_len = w ? w->len : 0;
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
    if (st != DS_K_OK && op < DS_OP__MAX) net->ctr.errors[op]++;
    if (c->lane_wait) {
        /* The answer to a lane request: into the lane unless it carries a
         * descriptor, must follow answers still queued, or ends the
         * connection (those go on the socket, where the client is sent). */
        c->lane_wait = false;
        bool socket = fd >= 0 || c->out_head != NULL || c->close_after_write || c->out_held;
        if (ds__lane_reply(c, &h, meta_len ? w->buf : NULL, segs, nseg, socket)) {
            net->ctr.bytes_out += DS_WIRE_HEADER_LEN + meta_len + data_len;
            for (uint32_t i = 0; i < nrefs; i++)
                ds__store_unref(net->store, refs[i]);
            return;
        }
    }
    /* One allocation per answer: the frame, nseg + 1 segments, the
     * references, then the header and metadata bytes. */
    size_t segs_end = sizeof(ds_out_t) + (nseg + 1) * sizeof(struct iovec);
    size_t refs_end = segs_end + (size_t)nrefs * sizeof(ds_obj_t *);
    ds_out_t *o = malloc(refs_end + DS_WIRE_HEADER_LEN + meta_len);
    if (o == NULL) {
        for (uint32_t i = 0; i < nrefs; i++)
            ds__store_unref(net->store, refs[i]);
        ds__conn_close(c, "out of memory queueing a response");
        return;
    }
    memset(o, 0, sizeof(*o));
    ds_obj_t **r = (ds_obj_t **)(void *)((uint8_t *)o + segs_end);
    uint8_t *head = (uint8_t *)o + refs_end;
    ds__wire_header_encode(&h, head);
    if (meta_len) memcpy(head + DS_WIRE_HEADER_LEN, w->buf, meta_len);
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
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    c->out_bytes += DS_WIRE_HEADER_LEN + meta_len + data_len;
    if (!flush) return;
    if (c->in_input && data_len < DS_BULK_MIN)
        c->flush_after_input = true;
    else
        flush_out(c);
}

static void reply_err(ds_conn_t *c, uint16_t op, ds_status_t st, const char *msg)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, msg);
    ds__conn_queue(c, c->h.req_id, op, st, &w, NULL, 0, NULL, 0, -1, true);
    ds__wbuf_free(&w);
}

static void protocol_error(ds_conn_t *c, const char *msg)
{
    ds_net_t *net = c->net;
    net->ctr.protocol_errors++;
    DS_LOG_WARN("conn %llu: protocol error: %s", (unsigned long long)c->id, msg);
    c->close_after_write = true;
    c->state = CONN_READ_HEADER;
    /* A frame we could not read answers as a connection-level (HELLO) error
     * unless its opcode was valid, so the reply itself always decodes. */
    uint16_t op = ds__opcode_name(c->h.opcode) ? c->h.opcode : DS_OP_HELLO;
    char full_msg[320];
    snprintf(full_msg, sizeof(full_msg), "protocol error: %s", msg);
    reply_err(c, op, DS_K_INVALID, full_msg);
}

/* After a request's handler returned: read on, unless it was deferred or the
 * connection is gone. */
static void request_handled(ds_conn_t *c)
{
    if (c->meta_owned) free(c->meta); /* NULL when a deferred request took it over */
    c->meta = NULL;
    c->cur.meta = NULL;
    if (c->state == CONN_CLOSED || c->state == CONN_PARKED) return;
    if (c->sinks || c->skip) {
        c->state = CONN_READ_DATA;
        return;
    }
    c->state = CONN_READ_HEADER;
}

/* DS_FLAG_TRACE: takes the leading `str trace_id` off the metadata (moving
 * the rest to the front, so handlers see the opcode's own layout). 0, or -1
 * when it is malformed. */
static int take_trace_id(ds_conn_t *c, char out[DS_TRACE_ID_MAX + 1])
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, c->meta, c->h.meta_len);
    const char *t;
    uint32_t tl = ds__rbuf_str(&rb, &t);
    if (rb.err || tl == 0 || tl > DS_TRACE_ID_MAX) return -1;
    for (uint32_t i = 0; i < tl; i++) {
        char ch = t[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == ':' || ch == '-';
        if (!ok) return -1;
    }
    memcpy(out, t, tl);
    out[tl] = '\0';
    memmove(c->meta, c->meta + rb.pos, c->h.meta_len - rb.pos);
    c->h.meta_len -= (uint32_t)rb.pos;
    return 0;
}

/* The metadata is complete: run the request (a SET's data phase follows). */
static void meta_complete(ds_conn_t *c)
{
    ds_net_t *net = c->net;
    if (c->h.opcode < DS_OP__MAX) net->ctr.ops[c->h.opcode]++;
    if (!c->hello_done && c->h.opcode != DS_OP_HELLO) {
        if (!c->authed) {
            /* Unauthenticated: K_NOT_AUTHORIZED and nothing else. */
            net->ctr.auth_failures++;
            c->close_after_write = true;
            c->state = CONN_READ_HEADER;
            reply_err(c, c->h.opcode, DS_K_NOT_AUTHORIZED,
                      "not authenticated: send HELLO and answer its challenge first");
            return;
        }
        protocol_error(c, "the first request on a connection must be HELLO");
        return;
    }
    if (c->h.data_len != 0 && c->h.opcode != DS_OP_SET && c->h.opcode != DS_OP_REPL_PUT) {
        protocol_error(c, "this operation carries no data section");
        return;
    }
    char trace[DS_TRACE_ID_MAX + 1] = "";
    if ((c->h.flags & DS_FLAG_TRACE) && take_trace_id(c, trace) != 0) {
        protocol_error(c, "malformed trace id (1..128 bytes of [A-Za-z0-9._:-])");
        return;
    }
    c->cur = (ds_req_t){.conn_id = c->id,
                        .id = c->h.req_id,
                        .op = c->h.opcode,
                        .flags = (uint8_t)c->h.flags,
                        .is_unix = c->is_unix,
                        .meta = c->meta,
                        .meta_len = c->h.meta_len,
                        .data_len = c->h.data_len,
                        .session = c->session,
                        .net_ = net,
                        .conn_ = c,
                        .start_ns_ = c->cur.start_ns_};
    memcpy(c->cur.trace_id, trace, sizeof(trace));
    net->lane_last = c->lane_wait;
    c->state = CONN_READ_HEADER;
    c->skip = c->h.data_len; /* unless the handler names sinks for it */
    char why[200];
    ds_status_t denied = ds__conn_rights(c, why, sizeof(why));
    if (denied != DS_K_OK)
        ds__req_error(&c->cur, denied, "%s", why);
    else if (c->h.opcode == DS_OP_HELLO)
        ds__hello(c);
    else if (c->h.opcode == DS_OP_LANE)
        ds__lane_open(c, &c->cur);
    else if (c->h.opcode != DS_OP_SET || ds__guard_set_admit(c))
        net->dispatch(net->dispatch_ctx, &c->cur);
    request_handled(c);
    if (c->state == CONN_READ_DATA && c->sinks && c->sink_idx == c->nsinks && c->skip == 0) {
        /* Every value is empty: the data phase is already over. */
        ds_req_data_fn done = c->data_done;
        c->data_done = NULL;
        c->sinks = NULL;
        c->state = CONN_READ_HEADER;
        done(c->data_ctx, &c->cur);
        request_handled(c);
    }
}

static void header_complete(ds_conn_t *c)
{
    char err[256];
    /* A header that does not decode is named for what is wrong with it
     * (its flags byte, read from garbage, says nothing). */
    bool bad = ds__wire_header_decode(c->hdr, c->net->max_data, &c->h, err, sizeof(err)) != 0;
    if (!bad && (c->h.flags & DS_FLAG_RESPONSE)) {
        snprintf(err, sizeof(err), "got a response frame");
        bad = true;
    }
    if (bad) {
        protocol_error(c, err);
        return;
    }
    c->hdr_got = 0;
    c->meta_got = 0;
    c->cur.start_ns_ = ds__now_ns();
    if (c->h.meta_len == 0) {
        meta_complete(c);
        return;
    }
    conn_full_t *f = full(c);
    if (f->rlen - f->rpos >= c->h.meta_len) {
        /* All of it is in the read buffer (the usual case): the handler
         * reads it there. The buffer is refilled only after the handler
         * returned; a request that is deferred takes a copy
         * (ds__req_park). */
        c->meta = f->rbuf + f->rpos;
        c->meta_owned = false;
        f->rpos += c->h.meta_len;
        meta_complete(c);
        return;
    }
    c->meta_owned = true;
    c->meta = malloc(c->h.meta_len);
    if (c->meta == NULL) {
        protocol_error(c, "out of memory for request metadata");
        return;
    }
    c->state = CONN_READ_META;
}

static void data_finish(ds_conn_t *c);

/* n more data bytes were taken (into the current sink, or skipped): move on,
 * and hand the SET back to its handler once every value has arrived. */
static void data_advance(ds_conn_t *c, uint64_t n)
{
    if (c->sinks == NULL) {
        c->skip -= n;
        if (c->skip == 0) c->state = CONN_READ_HEADER;
        return;
    }
    c->sink_off += n;
    while (c->sink_idx < c->nsinks && c->sink_off == c->sinks[c->sink_idx].len) {
        c->sink_idx++;
        c->sink_off = 0;
    }
    if (c->sink_idx < c->nsinks) return;
    data_finish(c);
}

/* Every value of the SET has arrived: back to its handler. */
static void data_finish(ds_conn_t *c)
{
    ds_req_data_fn done = c->data_done;
    c->data_done = NULL;
    c->sinks = NULL;
    c->state = CONN_READ_HEADER;
    c->cur.meta = NULL;
    c->cur.meta_len = 0;
    done(c->data_ctx, &c->cur);
    request_handled(c);
}

/* Where the next data bytes go, and how many of them at most. */
static uint8_t *data_dest(ds_conn_t *c, uint64_t *want)
{
    if (c->sinks == NULL) {
        *want = c->skip < sizeof(discard) ? c->skip : sizeof(discard);
        return discard;
    }
    ds_sink_t *s = &c->sinks[c->sink_idx];
    *want = s->len - c->sink_off;
    if (s->p) return s->p + c->sink_off;
    if (*want > sizeof(discard)) *want = sizeof(discard);
    return discard;
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
            uint64_t n;
            uint8_t *dst = data_dest(c, &n);
            if (n > avail) n = avail;
            memcpy(dst, p, n);
            f->rpos += (uint32_t)n;
            data_advance(c, n);
            break;
        }
        default:
            return; /* parked or closed: the rest waits in the buffer */
        }
    }
}

/* Data bytes the SET still expects, counted up to DS_BRECV_MIN. */
static uint64_t data_left(const ds_conn_t *c)
{
    if (c->sinks == NULL) return c->skip;
    uint64_t left = 0;
    for (uint32_t i = c->sink_idx; i < c->nsinks && left < DS_BRECV_MIN; i++)
        left += c->sinks[i].len - (i == c->sink_idx ? c->sink_off : 0);
    return left;
}

/* Hands the rest of a large data section to the receiver thread once the
 * read buffer holds none of it; true when the thread took it. */
static bool data_to_thread(ds_conn_t *c)
{
    conn_full_t *f = full(c);
    /* A TLS connection's bytes come through its session, which the thread
     * reads then (what the session holds already included). */
    if (c->bulk_in || c->state != CONN_READ_DATA || f->rpos != f->rlen || c->net->brecv == NULL ||
        data_left(c) < DS_BRECV_MIN || !ds__brecv_take(c->net->brecv, c))
        return false;
    c->bulk_in = true;
    c->net->ctr.bulk_receives++;
    return true;
}

/* Reads and handles what the client sent, within the turn's budgets. */
static void read_input(ds_conn_t *c)
{
    conn_full_t *f = full(c);
    /* budget: all bytes this turn; small: those through the read buffer
     * (frames and small values), which keep the tighter DS_IO_SLICE. */
    uint64_t budget = DS_IO_SLICE_DATA, small = DS_IO_SLICE;
    for (;;) {
        consume(c);
        if (c->state == CONN_CLOSED || c->state == CONN_PARKED || c->close_after_write) break;
        /* What a TLS session still holds when the budget ends is read after
         * the current event (update_interest puts it on the ready list). */
        if (budget == 0 || c->out_bytes >= DS_OUT_HIGH) break;
        if (data_to_thread(c)) break;
        ssize_t r;
        uint64_t want = 0;
        uint8_t *dst = c->state == CONN_READ_DATA ? data_dest(c, &want) : NULL;
        /* Big remaining values are received straight into the arena. */
        if (dst && want >= DS_RBUF) {
            if (want > budget) want = budget;
            r = ds__conn_recv(c, dst, want);
            if (r > 0) data_advance(c, (uint64_t)r);
        } else {
            if (small == 0) break;
            f->rpos = f->rlen = 0;
            r = ds__conn_recv(c, f->rbuf, DS_RBUF_CAP);
            if (r > 0) {
                f->rlen = (uint32_t)r;
                small = (uint64_t)r >= small ? 0 : small - (uint64_t)r;
            }
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
        c->net->ctr.bytes_in += (uint64_t)r;
        budget = (uint64_t)r >= budget ? 0 : budget - (uint64_t)r;
        /* A short read drained the socket: skip the recv that would only say
         * EAGAIN (level-triggered epoll calls again when more arrives). */
        if (c->state != CONN_READ_DATA && (uint32_t)r < DS_RBUF_CAP && !ds__conn_tls_pending(c)) {
            consume(c);
            break;
        }
    }
}

/* read_input, then the small answers it queued in one write (see
 * flush_after_input). */
static void process_input(ds_conn_t *c)
{
    c->in_input = true;
    read_input(c);
    c->in_input = false;
    if (c->state == CONN_CLOSED) return;
    if (c->flush_after_input) {
        c->flush_after_input = false;
        flush_out(c); /* which sets the interest */
    } else {
        update_interest(c);
    }
}

static void on_io(void *ctx, uint32_t events);

void ds__conn_brecv_done(ds_conn_t *c, uint64_t got, int err)
{
    ds_net_t *net = c->net;
    c->bulk_in = false;
    net->ctr.bytes_in += got;
    if (c->state == CONN_CLOSED) {
        /* Closed meanwhile: the SET's sinks, the socket and the connection
         * waited for this (and for the sender thread's frame, if any). */
        if (c->data_done) {
            ds_req_data_fn done = c->data_done;
            c->data_done = NULL;
            done(c->data_ctx, NULL);
        }
        if (c->bulk_out) return;
        ds__conn_tls_free(c);
        close(c->io.fd);
        if (!c->queued) {
            c->next = net->dead;
            net->dead = c;
        }
        return;
    }
    if (c->io_off) {
        c->io_off = false;
        if (ds__loop_add(net->loop, &c->io, c->io.fd, 0, on_io, c) != 0 && err == 0) err = errno;
    }
    if (err) {
        ds__conn_close(c, err == EPIPE ? "peer closed" : strerror(err));
        return;
    }
    /* All of the data section is in: the SET goes back to its handler and
     * the connection reads on, as if the loop had read it. */
    c->in_input = true;
    if (c->sinks) {
        c->sink_idx = c->nsinks;
        c->sink_off = 0;
        data_finish(c);
    } else {
        c->skip = 0;
        c->state = CONN_READ_HEADER;
    }
    c->in_input = false;
    if (c->state == CONN_READ_HEADER) {
        process_input(c);
        return;
    }
    if (c->state == CONN_CLOSED) return;
    if (c->flush_after_input) {
        c->flush_after_input = false;
        flush_out(c);
    } else {
        update_interest(c);
    }
}

int ds__conn_feed(ds_conn_t *c, const uint8_t *p, uint32_t n)
{
    conn_full_t *f = full(c);
    /* A deferred request that has ended: its answer is out, the connection
     * resumes after the current event. */
    if (c->state == CONN_PARKED && c->deferred == NULL) return 0;
    if (c->state != CONN_READ_HEADER || c->hdr_got != 0 || f->rpos != f->rlen ||
        c->close_after_write || c->lane_wait || n > DS_RBUF_CAP)
        return -1;
    memcpy(f->rbuf, p, n);
    f->rpos = 0;
    f->rlen = n;
    c->net->ctr.bytes_in += n;
    c->lane_wait = true;
    c->in_input = true;
    consume(c);
    c->in_input = false;
    if (c->state == CONN_CLOSED) return 1;
    if (c->flush_after_input) {
        c->flush_after_input = false;
        flush_out(c);
    } else {
        update_interest(c);
    }
    return 1;
}

static void on_io(void *ctx, uint32_t events)
{
    ds_conn_t *c = ctx;
    if (c->state == CONN_CLOSED) return;
    if (c->tls_hs || c->tls_failed) {
        if (ds__conn_tls_handshake(c)) return;
        events = EPOLLIN; /* over: what followed it may be in the session already */
    }
    if (events & EPOLLOUT) flush_out(c);
    if (c->state == CONN_CLOSED) return;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
        if (c->bulk_in) {
            /* The receiver thread reads this socket and sees the hang-up
             * itself, after the data before it. epoll reports a hang-up
             * whatever the interest, level-triggered: the socket leaves the
             * loop's set until the job is back, or the loop would spin. */
            if (events & (EPOLLHUP | EPOLLERR)) {
                ds__loop_del(c->net->loop, &c->io);
                c->io_off = true;
            }
            return;
        }
        if (c->state == CONN_PARKED) {
            /* Parked: only notice a hang-up; pending input stays queued. */
            if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))
                ds__conn_close(c, "hang-up while waiting");
            return;
        }
        process_input(c);
    }
}

void ds__conn_make_ready(ds_conn_t *c)
{
    if (c->queued || c->state == CONN_CLOSED) return;
    ds_net_t *net = c->net;
    c->queued = true;
    c->ready_next = NULL;
    if (net->ready_tail)
        net->ready_tail->ready_next = c;
    else
        net->ready_head = c;
    net->ready_tail = c;
}

void ds__net_after_event(void *ctx)
{
    ds_net_t *net = ctx;
    if (net->before_resume) net->before_resume(net->before_resume_ctx);
    if (net->ready_head) net->resumed++;
    /* Only the connections queued so far: one resumed here may end another
     * connection's wait, which then runs on the next call, so a chain of
     * pipelining clients cannot hold the loop. */
    ds_conn_t *list = net->ready_head;
    net->ready_head = net->ready_tail = NULL;
    while (list) {
        ds_conn_t *c = list;
        list = c->ready_next;
        c->queued = false;
        if (c->state == CONN_CLOSED) {
            if (c->bulk_out == NULL && !c->bulk_in) {
                c->next = net->dead;
                net->dead = c;
            }
            continue;
        }
        flush_out(c);
        if (c->state == CONN_PARKED && c->deferred == NULL) {
            c->state = c->sinks || c->skip ? CONN_READ_DATA : CONN_READ_HEADER;
            process_input(c);
        } else if (c->state != CONN_CLOSED && c->state != CONN_PARKED && !c->bulk_in &&
                   ds__conn_tls_pending(c)) {
            process_input(c);
        }
    }
}

void ds__net_turn(ds_net_t *net)
{
    net->direct_left = DS_BULK_DIRECT_TURN;
}

bool ds__net_busy(const ds_net_t *net)
{
    return net->ready_head != NULL;
}

static void reject(ds_net_t *net, int fd)
{
    net->ctr.conns_rejected++;
    /* Tell the client why before closing; best effort. */
    ds__net_refuse_at_limit(fd);
    DS_LOG_WARN("rejected a connection: %u connections already", net->nconns);
}

/* accept4 failed for want of a resource: stop polling the listener (it is
 * level-triggered and would fire again at once, spinning the loop) until
 * one of our connections closes or DS_ACCEPT_RETRY_MS pass. */
static void pause_listener(ds_listener_t *l, int err)
{
    ds_net_t *net = l->net;
    net->ctr.accept_errors++;
    if (!net->tcp.paused && !net->unix_.paused)
        DS_LOG_WARN("cannot accept connections on the %s listener: %s (%u connections open); "
                    "pausing accepts until a descriptor is free",
                    l->is_unix ? "Unix" : "TCP", strerror(err), net->nconns);
    l->paused = true;
    ds__loop_mod(net->loop, &l->io, 0);
    net->accept_retry_ms = ds__now_ms() + DS_ACCEPT_RETRY_MS;
}

static void on_accept(void *ctx, uint32_t events)
{
    ds_listener_t *l = ctx;
    ds_net_t *net = l->net;
    (void)events;
    for (int i = 0; i < DS_ACCEPT_BATCH; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                pause_listener(l, errno);
            return;
        }
        /* --max_client_num bounds clients (sessions, checked at HELLO); each
         * client may open a pool of connections, bounded here, where those
         * that have not said HELLO give way (guard.c). */
        uint8_t peer[17];
        ds__guard_peer(fd, l->is_unix, peer);
        if (!ds__guard_admit(net, peer)) {
            reject(net, fd);
            continue;
        }
        conn_full_t *f = calloc(1, sizeof(*f));
        if (f == NULL) {
            close(fd);
            return;
        }
        ds_conn_t *c = &f->c;
        c->net = net;
        c->is_unix = l->is_unix;
        if (!l->is_unix) {
            /* As the client's side: the tail of a large answer, or an answer
             * written while an earlier one is unacknowledged, leaves at once
             * instead of waiting for an ACK (Nagle). */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        c->authed = l->is_unix || net->auth_token[0] == '\0';
        c->id = ++net->next_conn_id;
        c->state = CONN_READ_HEADER;
        c->io.fd = fd;
        ds__conn_tls_start(c);
        if (ds__loop_add(net->loop, &c->io, fd, EPOLLIN | EPOLLRDHUP, on_io, c) != 0) {
            ds__conn_tls_free(c);
            close(fd);
            free(f);
            return;
        }
        c->next = net->conns;
        if (net->conns) net->conns->prev = c;
        net->conns = c;
        net->nconns++;
        net->ctr.conns_accepted++;
        memcpy(c->origin, peer, sizeof(c->origin));
        ds__guard_track(c);
    }
}

int ds__net_listen(ds_net_t *net, ds_listener_t *l, int fd, bool is_unix)
{
    l->net = net;
    l->fd = fd;
    l->is_unix = is_unix;
    l->paused = false;
    return ds__loop_add(net->loop, &l->io, fd, EPOLLIN, on_accept, l);
}

uint64_t ds__net_tick(ds_net_t *net, uint64_t now_ms)
{
    uint64_t hs = ds__guard_tick(net, now_ms);
    uint64_t pz = ds__guard_pause_tick(net, now_ms);
    if (pz && (hs == 0 || pz < hs)) hs = pz;
    if (net->accept_retry_ms && now_ms >= net->accept_retry_ms) resume_listeners(net);
    uint64_t ar = net->accept_retry_ms;
    return ar == 0 ? hs : hs == 0 || ar < hs ? ar : hs;
}
