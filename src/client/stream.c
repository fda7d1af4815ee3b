/* Streams over the client's connections (include/ds/stream_client.h): each
 * call is one request; the worker keeps the streams (docs/streams.md). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "common/error.h"
#include "common/keys.h"
#include "ds/stream_client.h"

struct ds_producer {
    ds_client_t *c;
    uint64_t id;
};

struct ds_consumer {
    ds_client_t *c;
    uint64_t id;
};

static ds_status_t check_name(const char *what, const char *name)
{
    if (name == NULL) return ds__set_error(DS_K_INVALID, "%s is NULL", what);
    char msg[256];
    size_t n = strlen(name);
    if (n == 0 || ds__key_check(name, n, msg, sizeof(msg)) != 0)
        return ds__set_error(DS_K_INVALID, "The %s contains illegal char(s): %s", what,
                             n == 0 ? "it is empty" : msg);
    return DS_K_OK;
}

/* One request: the caller wrote the metadata through build(conn, ctx);
 * read(conn, ctx) parses the answer. */
typedef void (*build_fn)(ds_conn_t *conn, void *ctx);
typedef ds_status_t (*read_fn)(ds_conn_t *conn, void *ctx, uint64_t deadline);

static ds_status_t call(ds_client_t *c, ds_opcode_t op, int32_t wait_ms, build_fn build,
                        read_fn read, void *ctx)
{
    uint64_t deadline = ds__client_deadline(c, wait_ms);
    ds_conn_t *conn;
    ds_status_t st = ds__client_acquire(c, &deadline, &conn);
    if (st != DS_K_OK) return st;
    ds__conn_begin(conn);
    build(conn, ctx);
    st = ds__conn_call(conn, op, false, deadline);
    if (st == DS_K_OK && read) st = read(conn, ctx, deadline);
    ds__conn_drain(conn, deadline);
    ds__client_put(c, conn);
    return st;
}

static ds_status_t read_u64(ds_conn_t *conn, void *ctx, uint64_t deadline)
{
    (void)deadline;
    uint64_t *out = ctx;
    *out = ds__rbuf_u64(&conn->r);
    if (!ds__rbuf_done(&conn->r)) return ds__conn_protocol_error(conn, "stream handle");
    return DS_K_OK;
}

typedef struct {
    const char *name;
    const ds_producer_conf_t *conf;
    uint64_t id;
} create_t;

static void build_create(ds_conn_t *conn, void *ctx)
{
    create_t *a = ctx;
    ds__wbuf_cstr(&conn->w, a->name);
    ds__wbuf_u64(&conn->w, (uint64_t)a->conf->page_size);
    ds__wbuf_u64(&conn->w, a->conf->max_stream_size);
    ds__wbuf_u8(&conn->w, a->conf->auto_cleanup);
    ds__wbuf_u64(&conn->w, a->conf->retain_for_num_consumers);
    ds__wbuf_u64(&conn->w, a->conf->reserve_size);
    ds__wbuf_u8(&conn->w, a->conf->encrypt_stream);
    ds__wbuf_u64(&conn->w, (uint64_t)a->conf->delay_flush_time_ms);
}

static ds_status_t read_create(ds_conn_t *conn, void *ctx, uint64_t deadline)
{
    return read_u64(conn, &((create_t *)ctx)->id, deadline);
}

ds_status_t ds_stream_create_producer(ds_client_t *c, const char *stream_name,
                                      const ds_producer_conf_t *conf, ds_producer_t **out)
{
    ds__clear_error();
    if (c == NULL || out == NULL) return ds__set_error(DS_K_INVALID, "client or out is NULL");
    *out = NULL;
    ds_status_t st = check_name("streamName", stream_name);
    if (st != DS_K_OK) return st;
    ds_producer_conf_t def = DS_PRODUCER_CONF_INIT;
    if (conf == NULL) conf = &def;
    if (conf->delay_flush_time_ms < 0)
        return ds__set_error(DS_K_INVALID, "delay_flush_time_ms must be >= 0");
    if (conf->page_size <= 0) return ds__set_error(DS_K_INVALID, "Page size not multiple of 4096.");
    ds_producer_t *p = calloc(1, sizeof(*p));
    if (p == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    ds__client_enter(c);
    create_t a = {stream_name, conf, 0};
    st = call(c, DS_OP_SC_CREATE_PRODUCER, 0, build_create, read_create, &a);
    if (st != DS_K_OK) {
        free(p);
        return ds__client_leave(c, st);
    }
    p->c = c;
    p->id = a.id;
    *out = p;
    return DS_K_OK; /* the handle keeps the client's reference */
}

typedef struct {
    uint64_t id;
    int32_t timeout;
    size_t n;
    const void *const *data;
    const size_t *lens;
} send_t;

static void build_send(ds_conn_t *conn, void *ctx)
{
    send_t *a = ctx;
    ds__wbuf_u64(&conn->w, a->id);
    ds__wbuf_i32(&conn->w, a->timeout);
    ds__wbuf_u32(&conn->w, (uint32_t)a->n);
    for (size_t i = 0; i < a->n; i++)
        ds__wbuf_str(&conn->w, a->data[i], a->lens[i]);
}

ds_status_t ds_producer_send_batch(ds_producer_t *p, size_t n, const void *const *data,
                                   const size_t *lens, int64_t timeout_ms)
{
    ds__clear_error();
    if (p == NULL) return ds__set_error(DS_K_INVALID, "producer is NULL");
    if (n == 0 || data == NULL || lens == NULL)
        return ds__set_error(DS_K_INVALID, "no elements to send");
    if (n > (1u << 20))
        return ds__set_error(DS_K_INVALID, "more than %u elements in one send", 1u << 20);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0)
            return ds__set_error(DS_K_INVALID, "Element size should be greater than 0");
        if (data[i] == NULL)
            return ds__set_error(DS_K_INVALID, "Element ptr should not be a nullptr");
        if (lens[i] > DS_SC_ELEMENT_MAX)
            return ds__set_error(DS_K_INVALID,
                                 "Element of %zu bytes exceeds the maximum of %u bytes", lens[i],
                                 DS_SC_ELEMENT_MAX);
        total += lens[i];
    }
    if (total > DS_SC_ELEMENT_MAX)
        return ds__set_error(DS_K_INVALID, "one send carries at most %u bytes of elements",
                             DS_SC_ELEMENT_MAX);
    if (timeout_ms > INT32_MAX)
        return ds__set_error(DS_K_INVALID, "timeout_ms must be in [0, %d]", INT32_MAX);
    send_t a = {p->id, timeout_ms < 0 ? -1 : (int32_t)timeout_ms, n, data, lens};
    ds_client_t *c = p->c;
    ds__client_enter(c);
    int32_t wait = timeout_ms < 0 ? 60000 : (int32_t)timeout_ms;
    return ds__client_leave(c, call(c, DS_OP_SC_SEND, wait, build_send, NULL, &a));
}

ds_status_t ds_producer_send(ds_producer_t *p, const void *data, size_t len, int64_t timeout_ms)
{
    return ds_producer_send_batch(p, 1, &data, &len, timeout_ms);
}

static void build_id(ds_conn_t *conn, void *ctx)
{
    ds__wbuf_u64(&conn->w, *(uint64_t *)ctx);
}

static ds_status_t close_end(ds_client_t *c, uint64_t id, ds_opcode_t op)
{
    ds_status_t st = call(c, op, 0, build_id, NULL, &id);
    return ds__client_leave(c, st); /* the handle's reference */
}

ds_status_t ds_producer_close(ds_producer_t *p)
{
    ds__clear_error();
    if (p == NULL) return ds__set_error(DS_K_INVALID, "producer is NULL");
    ds_client_t *c = p->c;
    uint64_t id = p->id;
    free(p);
    return close_end(c, id, DS_OP_SC_CLOSE_PRODUCER);
}

typedef struct {
    const char *stream, *sub;
    uint8_t type;
    uint64_t id;
} sub_t;

static void build_sub(ds_conn_t *conn, void *ctx)
{
    sub_t *a = ctx;
    ds__wbuf_cstr(&conn->w, a->stream);
    ds__wbuf_cstr(&conn->w, a->sub);
    ds__wbuf_u8(&conn->w, a->type);
}

static ds_status_t read_sub(ds_conn_t *conn, void *ctx, uint64_t deadline)
{
    return read_u64(conn, &((sub_t *)ctx)->id, deadline);
}

ds_status_t ds_stream_subscribe(ds_client_t *c, const char *stream_name,
                                const char *subscription_name, ds_subscription_type_t type,
                                ds_consumer_t **out)
{
    ds__clear_error();
    if (c == NULL || out == NULL) return ds__set_error(DS_K_INVALID, "client or out is NULL");
    *out = NULL;
    ds_status_t st = check_name("streamName", stream_name);
    if (st == DS_K_OK) st = check_name("subscriptionName", subscription_name);
    if (st != DS_K_OK) return st;
    if ((unsigned)type > DS_SUB_KEY_PARTITIONS)
        return ds__set_error(DS_K_INVALID,
                             "subscription type %d is not one of STREAM (0), "
                             "ROUND_ROBIN (1), KEY_PARTITIONS (2)",
                             (int)type);
    ds_consumer_t *cs = calloc(1, sizeof(*cs));
    if (cs == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    ds__client_enter(c);
    sub_t a = {stream_name, subscription_name, (uint8_t)type, 0};
    st = call(c, DS_OP_SC_SUBSCRIBE, 0, build_sub, read_sub, &a);
    if (st != DS_K_OK) {
        free(cs);
        return ds__client_leave(c, st);
    }
    cs->c = c;
    cs->id = a.id;
    *out = cs;
    return DS_K_OK;
}

typedef struct {
    uint64_t id;
    uint32_t expect, timeout;
    bool in_place;
    ds_element_t *els;
    size_t n;
} recv_t;

/* An answer's element array sits after this header in one block; the
 * header holds the session whose mapping in-place elements point into, so
 * the mapping outlives the array (ds_elements_free lets it go). */
typedef struct {
    ds_sess_t *sess;
    uint64_t pad; /* keeps the elements 16-byte aligned */
} recv_hdr_t;

/* DS_STREAM_IN_PLACE=0 makes local consumers take copies, like remote ones. */
static bool in_place_wanted(void)
{
    const char *v = getenv("DS_STREAM_IN_PLACE");
    return v == NULL || strcmp(v, "0") != 0;
}

static void build_recv(ds_conn_t *conn, void *ctx)
{
    recv_t *a = ctx;
    ds__wbuf_u64(&conn->w, a->id);
    ds__wbuf_u32(&conn->w, a->expect);
    ds__wbuf_u32(&conn->w, a->timeout);
    /* A client that maps the arena reads the elements where the worker
     * put them: the answer gives their offsets, not their bytes. */
    a->in_place = conn->sess != NULL && conn->sess->base != NULL && in_place_wanted();
    if (a->in_place) ds__wbuf_u8(&conn->w, 1);
}

static ds_status_t read_recv(ds_conn_t *conn, void *ctx, uint64_t deadline)
{
    recv_t *a = ctx;
    uint32_t n = ds__rbuf_count(&conn->r, UINT32_MAX, a->in_place ? 20 : 12);
    if (conn->r.err) return ds__conn_protocol_error(conn, "sc_receive");
    if (n == 0)
        return ds__rbuf_done(&conn->r) ? DS_K_OK : ds__conn_protocol_error(conn, "sc_receive");
    uint64_t total = conn->rh.data_len;
    if (total > ((uint64_t)1 << 40) || (a->in_place && total != 0))
        return ds__conn_protocol_error(conn, "sc_receive");
    /* One block: the header, the element array, then (copies) their bytes. */
    recv_hdr_t *hdr = malloc(sizeof(*hdr) + n * sizeof(ds_element_t) + (size_t)total);
    if (hdr == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    hdr->sess = NULL;
    ds_element_t *els = (ds_element_t *)(hdr + 1);
    uint8_t *data = (uint8_t *)(els + n);
    const ds_sess_t *s = conn->sess;
    uint64_t at = 0;
    bool bad = false;
    for (uint32_t i = 0; i < n; i++) {
        els[i].id = ds__rbuf_u64(&conn->r);
        els[i].size = ds__rbuf_u32(&conn->r);
        if (a->in_place) {
            uint64_t off = ds__rbuf_u64(&conn->r);
            /* The element must lie in the mapping. */
            bad |= off > s->size || els[i].size > s->size - off;
            els[i].ptr = bad ? NULL : s->base + off;
        } else {
            els[i].ptr = data + at;
            at += els[i].size;
        }
    }
    if (!ds__rbuf_done(&conn->r) || at != total || bad) {
        free(hdr);
        return ds__conn_protocol_error(conn, "sc_receive");
    }
    if (a->in_place) {
        hdr->sess = conn->sess;
        ds__sess_ref(hdr->sess);
    } else {
        ds_status_t st = ds__conn_read_data(conn, data, (size_t)total, deadline);
        if (st != DS_K_OK) {
            free(hdr);
            return st;
        }
    }
    a->els = els;
    a->n = n;
    return DS_K_OK;
}

ds_status_t ds_consumer_receive(ds_consumer_t *cs, uint32_t expect_num, uint32_t timeout_ms,
                                ds_element_t **out, size_t *n)
{
    ds__clear_error();
    if (cs == NULL || out == NULL || n == NULL)
        return ds__set_error(DS_K_INVALID, "consumer, out or n is NULL");
    *out = NULL;
    *n = 0;
    if (expect_num > INT32_MAX || timeout_ms > INT32_MAX)
        return ds__set_error(DS_K_INVALID, "expect_num and timeout_ms must be in [0, %d]",
                             INT32_MAX);
    recv_t a = {cs->id, expect_num, timeout_ms, false, NULL, 0};
    ds_client_t *c = cs->c;
    ds__client_enter(c);
    ds_status_t st = call(c, DS_OP_SC_RECEIVE, (int32_t)timeout_ms, build_recv, read_recv, &a);
    if (st == DS_K_OK) {
        *out = a.els;
        *n = a.n;
    }
    return ds__client_leave(c, st);
}

void ds_elements_free(ds_element_t *elements)
{
    if (elements == NULL) return;
    recv_hdr_t *hdr = (recv_hdr_t *)(void *)elements - 1;
    if (hdr->sess) ds__sess_unref(hdr->sess);
    free(hdr);
}

typedef struct {
    uint64_t id, el;
} ack_t;

static void build_ack(ds_conn_t *conn, void *ctx)
{
    ack_t *a = ctx;
    ds__wbuf_u64(&conn->w, a->id);
    ds__wbuf_u64(&conn->w, a->el);
}

ds_status_t ds_consumer_ack(ds_consumer_t *cs, uint64_t element_id)
{
    ds__clear_error();
    if (cs == NULL) return ds__set_error(DS_K_INVALID, "consumer is NULL");
    ack_t a = {cs->id, element_id};
    ds_client_t *c = cs->c;
    ds__client_enter(c);
    return ds__client_leave(c, call(c, DS_OP_SC_ACK, 0, build_ack, NULL, &a));
}

ds_status_t ds_consumer_close(ds_consumer_t *cs)
{
    ds__clear_error();
    if (cs == NULL) return ds__set_error(DS_K_INVALID, "consumer is NULL");
    ds_client_t *c = cs->c;
    uint64_t id = cs->id;
    free(cs);
    return close_end(c, id, DS_OP_SC_CLOSE_CONSUMER);
}

static void build_name(ds_conn_t *conn, void *ctx)
{
    ds__wbuf_cstr(&conn->w, ctx);
}

ds_status_t ds_stream_delete(ds_client_t *c, const char *stream_name)
{
    ds__clear_error();
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds_status_t st = check_name("streamName", stream_name);
    if (st != DS_K_OK) return st;
    ds__client_enter(c);
    return ds__client_leave(
        c, call(c, DS_OP_SC_DELETE_STREAM, 0, build_name, NULL, (void *)stream_name));
}

typedef struct {
    const char *name;
    uint64_t v[2];
} query_t;

static void build_query(ds_conn_t *conn, void *ctx)
{
    ds__wbuf_cstr(&conn->w, ((query_t *)ctx)->name);
}

static ds_status_t read_query(ds_conn_t *conn, void *ctx, uint64_t deadline)
{
    (void)deadline;
    query_t *a = ctx;
    a->v[0] = ds__rbuf_u64(&conn->r);
    a->v[1] = ds__rbuf_u64(&conn->r);
    if (!ds__rbuf_done(&conn->r)) return ds__conn_protocol_error(conn, "sc_query");
    return DS_K_OK;
}

static ds_status_t query(ds_client_t *c, const char *stream_name, uint64_t *out, int which)
{
    ds__clear_error();
    if (c == NULL || out == NULL) return ds__set_error(DS_K_INVALID, "client or out is NULL");
    ds_status_t st = check_name("streamName", stream_name);
    if (st != DS_K_OK) return st;
    query_t a = {stream_name, {0, 0}};
    ds__client_enter(c);
    st = call(c, DS_OP_SC_QUERY, 0, build_query, read_query, &a);
    if (st == DS_K_OK) *out = a.v[which];
    return ds__client_leave(c, st);
}

ds_status_t ds_stream_query_global_producer_num(ds_client_t *c, const char *stream_name,
                                                uint64_t *out)
{
    return query(c, stream_name, out, 0);
}

ds_status_t ds_stream_query_global_consumer_num(ds_client_t *c, const char *stream_name,
                                                uint64_t *out)
{
    return query(c, stream_name, out, 1);
}
