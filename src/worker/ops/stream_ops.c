/* The stream opcodes (SC_*, layouts in common/wire.h): parse, check, and
 * hand to the rules in stream.c. Every bad input is K_INVALID naming what
 * was wrong; a handle of another session is not found. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"
#include "worker/ops/stream.h"
#include "worker/ops/worker.h"

/* The longest a send or receive waits when the client gave no timeout. */
#define SC_DEFAULT_WAIT_MS 60000

static bool read_name(ds_req_t *r, ds_rbuf_t *rb, const char *what, const char **p, uint32_t *len)
{
    *len = ds__rbuf_str(rb, p);
    if (rb->err) {
        ds__req_error(r, DS_K_INVALID, "malformed request: no %s", what);
        return false;
    }
    char msg[256];
    if (*len == 0 || *len > DS_SC_NAME_MAX || ds__key_check(*p, *len, msg, sizeof(msg)) != 0) {
        ds__req_error(r, DS_K_INVALID,
                      "The %s contains illegal char(s) or is empty or longer than %u bytes", what,
                      DS_SC_NAME_MAX);
        return false;
    }
    return true;
}

/* The handle's end, of the caller's session and kind; answers r when not. */
static sc_end_t *find_end(ds_server_t *srv, ds_req_t *r, uint64_t id, bool consumer)
{
    ds_streams_t *S = srv->streams;
    sc_end_t *e = S ? ds__sc_end(S, id) : NULL;
    if (e == NULL || e->consumer != consumer || e->session != r->session) {
        ds__req_error(r, consumer ? DS_K_SC_CONSUMER_NOT_FOUND : DS_K_SC_PRODUCER_NOT_FOUND,
                      "%s %" PRIu64 " not found: closed, or never opened by this client",
                      consumer ? "consumer" : "producer", id);
        return NULL;
    }
    return e;
}

static void reply_u64s(ds_req_t *r, const uint64_t *v, int n)
{
    ds_wbuf_t w;
    uint8_t room[DS_REPLY_ROOM];
    ds__wbuf_init_on(&w, room, sizeof(room));
    ds__wbuf_cstr(&w, "");
    for (int i = 0; i < n; i++)
        ds__wbuf_u64(&w, v[i]);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_create_producer(ds_server_t *srv, ds_streams_t *S, ds_req_t *r, ds_rbuf_t *rb)
{
    (void)srv;
    const char *name;
    uint32_t nl;
    if (!read_name(r, rb, "streamName", &name, &nl)) return;
    uint64_t page = ds__rbuf_u64(rb), max = ds__rbuf_u64(rb);
    bool cleanup = ds__rbuf_u8(rb) != 0;
    uint64_t retain = ds__rbuf_u64(rb), reserve = ds__rbuf_u64(rb);
    (void)ds__rbuf_u8(rb); /* encrypt_stream: a cross-worker matter; nothing leaves this worker */
    /* delay_flush_time_ms, optional (absent: 0, every send visible at once). */
    int64_t delay = rb->pos < rb->len ? (int64_t)ds__rbuf_u64(rb) : 0;
    if (!ds__rbuf_done(rb)) goto bad;
    if (delay < 0 || delay > INT32_MAX)
        return ds__req_error(r, DS_K_INVALID, "delay_flush_time_ms must be in [0, %d]", INT32_MAX);
    /* Yuanrong's VerifyProducerConfig, its checks and messages in order. */
    if (page == 0 || page % DS_SC_MIN_PAGE != 0)
        return ds__req_error(r, DS_K_INVALID, "Page size not multiple of %u.", DS_SC_MIN_PAGE);
    if (page > DS_SC_MAX_PAGE)
        return ds__req_error(r, DS_K_INVALID,
                             "Page size exceeds the maximum. [page size, max size] : [ %" PRIu64
                             ", %u ]",
                             page, DS_SC_MAX_PAGE);
    if (retain > DS_SC_MAX_RETAIN)
        return ds__req_error(r, DS_K_INVALID,
                             "retainForNumConsumers exceeds the maximum. [retain value, max limit] "
                             ": [ %" PRIu64 ", %u ]",
                             retain, DS_SC_MAX_RETAIN);
    if (max < DS_SC_MIN_STREAM)
        return ds__req_error(r, DS_K_INVALID,
                             "Stream size must be at least the minimum size. [stream size, min "
                             "size] : [ %" PRIu64 ", %u ]",
                             max, DS_SC_MIN_STREAM);
    if (page > max)
        return ds__req_error(r, DS_K_INVALID,
                             "Page size exceeds the maximum stream size. [page size, max stream "
                             "size] : [ %" PRIu64 ", %" PRIu64 " ]",
                             page, max);
    if (reserve > max)
        return ds__req_error(r, DS_K_INVALID,
                             "Reserve size exceeds the maximum stream size. [reserve size, max "
                             "stream size] : [ %" PRIu64 ", %" PRIu64 " ]",
                             reserve, max);
    if (reserve % page != 0)
        return ds__req_error(r, DS_K_INVALID,
                             "Reserve size not a multiple of page size. [page size, reserve size] "
                             ": [ %" PRIu64 ", %" PRIu64 " ]",
                             page, reserve);
    if (max / page < 2)
        return ds__req_error(r, DS_K_INVALID,
                             "Stream size must be at least twice the page size. [page size, max "
                             "stream size] : [ %" PRIu64 ", %" PRIu64 " ]",
                             page, max);
    sc_stream_t *st = ds__sc_find(S, name, nl);
    if (st && st->configured && (st->page_size != page || st->max_size != max))
        return ds__req_error(r, DS_K_INVALID,
                             "Stream %.*s exists with another config: [page size, max stream size] "
                             ": [ %" PRIu64 ", %" PRIu64 " ], asked [ %" PRIu64 ", %" PRIu64 " ]",
                             (int)nl, name, st->page_size, st->max_size, page, max);
    if (st == NULL && (st = ds__sc_make(S, name, nl)) == NULL)
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    sc_end_t *e = ds__sc_end_new(S, st, false, r->session);
    if (e == NULL) return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    e->delay_ms = (uint32_t)delay;
    if (!st->configured) {
        st->configured = true;
        st->page_size = page;
        st->max_size = max;
        st->auto_cleanup = cleanup;
        st->retain = retain;
        st->reserve = reserve ? reserve : page;
    }
    st->producers++;
    ds__sc_counts_changed(srv, st);
    uint64_t id = e->id;
    reply_u64s(r, &id, 1);
    return;
bad:
    ds__req_error(r, DS_K_INVALID, "malformed sc_create_producer request");
}

static void sub_answer(ds_server_t *srv, ds_req_t *r, sc_stream_t *st, uint64_t id)
{
    /* In a cluster the answer waits until the stream's owner counts this
     * consumer: from then on other workers' elements reach it. */
    if (srv->remote && srv->remote->stream_reg)
        return srv->remote->stream_reg(srv, st->name, st->name_len, st->producers, st->consumers, r,
                                       id);
    reply_u64s(r, &id, 1);
}

static void op_subscribe(ds_server_t *srv, ds_streams_t *S, ds_req_t *r, ds_rbuf_t *rb)
{
    const char *name, *sub;
    uint32_t nl, sl;
    if (!read_name(r, rb, "streamName", &name, &nl)) return;
    if (!read_name(r, rb, "subscriptionName", &sub, &sl)) return;
    uint8_t type = ds__rbuf_u8(rb);
    if (!ds__rbuf_done(rb)) goto bad;
    if (type > DS_SC_SUB_KEY_PARTITIONS)
        return ds__req_error(r, DS_K_INVALID,
                             "subscription type %u unknown (0 STREAM, 1 ROUND_ROBIN, "
                             "2 KEY_PARTITIONS)",
                             type);
    sc_stream_t *st = ds__sc_find(S, name, nl);
    sc_sub_t *shared = NULL;
    if (st) {
        for (sc_sub_t *s = st->subs; s; s = s->next) {
            if (s->name_len != sl || memcmp(s->name, sub, sl) != 0) continue;
            if (s->type != type)
                return ds__req_error(
                    r, DS_K_INVALID,
                    "Subscription %.*s of stream %.*s exists with type %u, asked %u", (int)sl, sub,
                    (int)nl, name, s->type, type);
            if (type == DS_SC_SUB_STREAM)
                return ds__req_error(r, DS_K_INVALID,
                                     "Subscription %.*s of stream %.*s already has its consumer: "
                                     "a STREAM subscription has one",
                                     (int)sl, sub, (int)nl, name);
            shared = s;
        }
    } else if ((st = ds__sc_make(S, name, nl)) == NULL) {
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
    if (shared) { /* another consumer of a ROUND_ROBIN / KEY_PARTITIONS subscription */
        sc_end_t *e = ds__sc_end_new(S, st, true, r->session);
        if (e == NULL) return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
        e->sub = shared;
        if (!ds__sc_sub_join(st, shared, e)) {
            ds__dict_remove(&S->ends, &e->node);
            free(e);
            return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
        }
        st->consumers++;
        st->ever_consumers++;
        return sub_answer(srv, r, st, e->id);
    }
    sc_sub_t *s = calloc(1, sizeof(*s));
    char *sn = malloc(sl + 1);
    sc_end_t *e = (s && sn) ? ds__sc_end_new(S, st, true, r->session) : NULL;
    if (e == NULL) {
        free(s);
        free(sn);
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
    memcpy(sn, sub, sl);
    sn[sl] = '\0';
    s->name = sn;
    s->name_len = sl;
    s->type = type;
    /* From the tail; from the oldest element held while the stream retains. */
    bool retaining = st->retain > st->ever_consumers;
    s->cursor = retaining && st->head ? st->head->first_id : st->next_id;
    s->acked = s->cursor - 1;
    e->sub = s;
    if (type == DS_SC_SUB_STREAM) {
        s->consumer = e;
    } else if (!ds__sc_sub_join(st, s, e)) {
        ds__dict_remove(&S->ends, &e->node);
        free(e);
        free(sn);
        free(s);
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
    s->next = st->subs;
    st->subs = s;
    st->consumers++;
    st->ever_consumers++;
    sub_answer(srv, r, st, e->id);
    return;
bad:
    ds__req_error(r, DS_K_INVALID, "malformed sc_subscribe request");
}

bool ds__sc_send_step(ds_server_t *srv, ds_req_t *r, sc_stream_t *stream, uint32_t *done, bool push)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *origin = NULL, *skip;
    uint32_t origin_len = 0;
    if (push) {
        (void)ds__rbuf_str(&rb, &skip);
        origin_len = ds__rbuf_str(&rb, &origin);
    }
    uint64_t handle = ds__rbuf_u64(&rb);
    (void)ds__rbuf_i32(&rb);
    uint32_t n = ds__rbuf_count(&rb, 1u << 20, 4);
    const uint8_t **els = malloc((n ? n : 1) * sizeof(*els));
    uint32_t *lens = malloc((n ? n : 1) * sizeof(*lens));
    if (els == NULL || lens == NULL) {
        free(els);
        free(lens);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
        return false;
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *p;
        lens[i] = ds__rbuf_str(&rb, &p);
        els[i] = (const uint8_t *)p;
        if (!rb.err && lens[i] == 0) {
            free(els);
            free(lens);
            ds__req_error(r, DS_K_INVALID, "Element size should be greater than 0");
            return false;
        }
    }
    if (!ds__rbuf_done(&rb) || n == 0) {
        free(els);
        free(lens);
        ds__req_error(r, DS_K_INVALID, "malformed sc_send request");
        return false;
    }
    /* KEY_PARTITIONS' key: the producer (another worker's elements: that
     * worker). delay_flush_time_ms: the producer's. */
    ds_streams_t *S = srv->streams;
    uint64_t woken = S->woken;
    sc_end_t *pe = push ? NULL : ds__sc_end(S, handle);
    S->append_key = push ? ((uint64_t)1 << 63) | ds__murmur3_32(origin, origin_len, 0) : handle;
    S->append_delay = pe && pe->delay_ms > 0;
    uint64_t before = stream->next_id;
    ds_status_t st = ds__sc_append(srv, stream, els, lens, n, done, origin, origin_len);
    S->append_delay = false;
    free(els);
    free(lens);
    if (stream->next_id != before && pe && pe->delay_ms > 0) {
        /* Parked receives are woken within the delay of the producer that
         * sent (the earliest due flush wins). */
        uint64_t at = ds__now_ms() + pe->delay_ms;
        if (stream->flush_at == 0) S->flushes++;
        if (stream->flush_at == 0 || at < stream->flush_at) stream->flush_at = at;
    }
    if (st == DS_K_OK) {
        ds__sc_send_ok(srv, r, woken);
        return false;
    }
    if (st == DS_K_TRY_AGAIN) return true;
    ds__req_error(r, st, "worker out of memory");
    return false;
}

static void op_send(ds_server_t *srv, ds_req_t *r, ds_rbuf_t *rb)
{
    uint64_t id = ds__rbuf_u64(rb);
    int32_t timeout = ds__rbuf_i32(rb);
    if (rb->err) return ds__req_error(r, DS_K_INVALID, "malformed sc_send request");
    sc_end_t *e = find_end(srv, r, id, false);
    if (e == NULL) return;
    uint32_t done = 0;
    if (!ds__sc_send_step(srv, r, e->st, &done, false)) return;
    /* The stream is full: wait for acks to free pages, up to the timeout. */
    int32_t wait = timeout < 0 ? SC_DEFAULT_WAIT_MS : timeout;
    if (wait == 0)
        return ds__req_error(r, DS_K_OUT_OF_MEMORY,
                             "Producer unable to secure enough memory for the element within 0 ms");
    sc_wait_t w = {0};
    w.end_id = id;
    w.send = true;
    w.done = done;
    w.timeout_ms = wait;
    w.deadline = ds__now_ms() + (uint64_t)wait;
    if (!ds__sc_park(srv, r, &w)) ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
}

/* Elements another worker forwards: appended here as a local producer's
 * would be (waiting while the stream is full), passed on by the owner. */
static void op_push(ds_server_t *srv, ds_streams_t *S, ds_req_t *r, ds_rbuf_t *rb)
{
    const char *name, *origin;
    uint32_t nl = ds__rbuf_str(rb, &name), ol = ds__rbuf_str(rb, &origin);
    (void)ds__rbuf_u64(rb);
    int32_t timeout = ds__rbuf_i32(rb);
    if (rb->err || nl == 0 || nl > DS_SC_NAME_MAX || ol == 0)
        return ds__req_error(r, DS_K_INVALID, "malformed sc_peer_push request");
    sc_stream_t *st = ds__sc_find(S, name, nl);
    if (st == NULL && (st = ds__sc_make(S, name, nl)) == NULL)
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    uint32_t done = 0;
    if (!ds__sc_send_step(srv, r, st, &done, true)) return;
    int32_t wait = timeout < 0 ? SC_DEFAULT_WAIT_MS : timeout;
    sc_wait_t w = {0};
    w.send = true;
    w.push = true;
    w.done = done;
    w.timeout_ms = wait;
    w.deadline = ds__now_ms() + (uint64_t)wait;
    if (!ds__sc_park(srv, r, &w)) ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
}

static void op_receive(ds_server_t *srv, ds_req_t *r, ds_rbuf_t *rb)
{
    uint64_t id = ds__rbuf_u64(rb);
    uint32_t expect = ds__rbuf_u32(rb), timeout = ds__rbuf_u32(rb);
    /* An optional last byte: 1 asks for the elements in place (arena
     * offsets), which only a session that maps the arena is given. */
    uint8_t in_place = rb->err || rb->pos == rb->len ? 0 : ds__rbuf_u8(rb);
    if (!ds__rbuf_done(rb) || in_place > 1)
        return ds__req_error(r, DS_K_INVALID, "malformed sc_receive request");
    if (in_place && (r->session == NULL || !r->session->shm))
        return ds__req_error(r, DS_K_INVALID,
                             "sc_receive in place needs a local client that maps the arena");
    if (expect > INT32_MAX || timeout > INT32_MAX)
        return ds__req_error(r, DS_K_INVALID, "expect_num and timeout_ms must be in [0, %d]",
                             INT32_MAX);
    sc_end_t *e = find_end(srv, r, id, true);
    if (e == NULL) return;
    uint64_t avail = ds__sc_available(e);
    bool enough = expect == 0 ? avail > 0 : avail >= expect;
    if (enough || timeout == 0) return ds__sc_reply_elements(srv, r, e, expect, in_place != 0);
    sc_wait_t w = {0};
    w.end_id = id;
    w.expect = expect;
    w.in_place = in_place != 0;
    w.deadline = ds__now_ms() + timeout;
    if (!ds__sc_park(srv, r, &w)) ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
}

static void op_ack(ds_server_t *srv, ds_req_t *r, ds_rbuf_t *rb)
{
    uint64_t id = ds__rbuf_u64(rb), el = ds__rbuf_u64(rb);
    if (!ds__rbuf_done(rb)) return ds__req_error(r, DS_K_INVALID, "malformed sc_ack request");
    sc_end_t *e = find_end(srv, r, id, true);
    if (e == NULL) return;
    sc_sub_t *s = e->sub;
    if (s->type != DS_SC_SUB_STREAM) {
        if (!ds__sc_sub_ack(e, el))
            return ds__req_error(r, DS_K_INVALID,
                                 "element id %" PRIu64
                                 " has not been received yet (received up to %" PRIu64 ")",
                                 el, e->max_deliv);
        ds__sc_reclaim(srv, e->st);
        return ds__req_error(r, DS_K_OK, "%s", "");
    }
    if (el >= s->cursor)
        return ds__req_error(r, DS_K_INVALID,
                             "element id %" PRIu64
                             " has not been received yet (received up to %" PRIu64 ")",
                             el, s->cursor - 1);
    if (el > s->acked) {
        s->acked = el;
        ds__sc_reclaim(srv, e->st);
    }
    ds__req_error(r, DS_K_OK, "%s", "");
}

static void op_close(ds_server_t *srv, ds_req_t *r, ds_rbuf_t *rb, bool consumer)
{
    uint64_t id = ds__rbuf_u64(rb);
    if (!ds__rbuf_done(rb)) return ds__req_error(r, DS_K_INVALID, "malformed close request");
    sc_end_t *e = find_end(srv, r, id, consumer);
    if (e == NULL) return;
    ds__sc_close(srv, e);
    ds__req_error(r, DS_K_OK, "%s", "");
}

static void op_delete(ds_server_t *srv, ds_streams_t *S, ds_req_t *r, ds_rbuf_t *rb)
{
    const char *name;
    uint32_t nl;
    if (!read_name(r, rb, "streamName", &name, &nl)) return;
    if (!ds__rbuf_done(rb))
        return ds__req_error(r, DS_K_INVALID, "malformed sc_delete_stream request");
    sc_stream_t *st = ds__sc_find(S, name, nl);
    if (st && (st->producers || st->consumers))
        return ds__req_error(r, DS_K_SC_STREAM_IN_USE,
                             "Stream %.*s is in use: %u producer(s) and %u consumer(s) are open",
                             (int)nl, name, st->producers, st->consumers);
    /* In a cluster the owner decides, and every worker's copy goes. */
    if (srv->remote && srv->remote->stream_delete)
        return srv->remote->stream_delete(srv, r, name, nl);
    if (st == NULL)
        return ds__req_error(r, DS_K_SC_STREAM_NOT_FOUND, "Stream %.*s not found", (int)nl, name);
    ds__sc_delete(srv, st);
    ds__req_error(r, DS_K_OK, "%s", "");
}

static void op_query(ds_server_t *srv, ds_streams_t *S, ds_req_t *r, ds_rbuf_t *rb)
{
    const char *name;
    uint32_t nl;
    if (!read_name(r, rb, "streamName", &name, &nl)) return;
    if (!ds__rbuf_done(rb)) return ds__req_error(r, DS_K_INVALID, "malformed sc_query request");
    /* In a cluster the counts are the owner's. */
    if (srv->remote && srv->remote->stream_query)
        return srv->remote->stream_query(srv, r, name, nl);
    sc_stream_t *st = ds__sc_find(S, name, nl);
    /* Producers are counted per worker, as Yuanrong's master counts them. */
    uint64_t v[2] = {st && st->producers ? 1 : 0, st ? st->consumers : 0};
    reply_u64s(r, v, 2);
}

void ds__stream_dispatch(ds_server_t *srv, ds_req_t *r)
{
    if (r->session == NULL && r->op != DS_OP_SC_PEER_PUSH)
        return ds__req_error(r, DS_K_INVALID, "streams need a session (HELLO first)");
    ds_streams_t *S = ds__sc_get(srv);
    if (S == NULL) return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    switch (r->op) {
    case DS_OP_SC_CREATE_PRODUCER:
        return op_create_producer(srv, S, r, &rb);
    case DS_OP_SC_SUBSCRIBE:
        return op_subscribe(srv, S, r, &rb);
    case DS_OP_SC_CLOSE_PRODUCER:
        return op_close(srv, r, &rb, false);
    case DS_OP_SC_CLOSE_CONSUMER:
        return op_close(srv, r, &rb, true);
    case DS_OP_SC_SEND:
        return op_send(srv, r, &rb);
    case DS_OP_SC_RECEIVE:
        return op_receive(srv, r, &rb);
    case DS_OP_SC_ACK:
        return op_ack(srv, r, &rb);
    case DS_OP_SC_DELETE_STREAM:
        return op_delete(srv, S, r, &rb);
    case DS_OP_SC_QUERY:
        return op_query(srv, S, r, &rb);
    case DS_OP_SC_PEER_PUSH:
        return op_push(srv, S, r, &rb);
    default:
        ds__req_error(r, DS_K_INVALID, "opcode %u not handled here", r->op);
    }
}
