/* Streaming edges over the datasystem stream cache (omni/stream_edge.h). */
#include "omni/stream_edge.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "connector/builtins.h"
#include "connector/dsconn.h"
#include "ds/stream_client.h"

#define TAG_CHUNK 'C'
#define TAG_END 'E'
/* The reader's subscription: one per edge, as one consumer reads it. */
#define SUB_NAME "omni-chunk-reader"

struct omni_chunk_writer {
    ds_producer_t *p;
    char name[OMNI__KEY_CAP];
    uint8_t *scratch; /* tag + chunk */
    size_t cap;
    bool ended;
};

struct omni_chunk_reader {
    ds_client_t *client; /* for the delete at the end; the consumer keeps it alive */
    ds_consumer_t *cs;
    char name[OMNI__KEY_CAP];
    ds_element_t *batch; /* received, not yet handed out */
    size_t n, next;
    bool acked; /* the batch's last element was acknowledged */
    bool ended;
};

/* Enters c, checks it is datasystem-backed and builds the edge's key. The
 * caller leaves c. */
static ds_status_t edge(omni_connector_t *c, const char *op, const char *from, const char *to,
                        const char *request_id, omni__dsconn_t **d, char *name)
{
    const omni_connector_ops_t *ops;
    void *impl;
    if (from == NULL || to == NULL || request_id == NULL)
        return ds__set_error(DS_K_INVALID, "%s: from_stage, to_stage and request_id are required",
                             op);
    ds_status_t st = omni__connector_enter(c, op, &ops, &impl);
    if (st != DS_K_OK) return st;
    if (!omni__yuanrong_ops(ops) && !omni__shm_ops(ops)) {
        omni__connector_leave(c);
        return ds__set_error(DS_K_INVALID,
                             "%s: connector '%s' is not datasystem-backed (streaming edges need "
                             "YuanrongConnector or SharedMemoryConnector)",
                             op, omni_connector_name(c));
    }
    *d = impl;
    st = omni__dsconn_key(*d, request_id, from, to, name);
    if (st == DS_K_OK && (*d)->client == NULL)
        st = ds__set_error(DS_K_NOT_READY, "%s: connector '%s' is closed", op,
                           omni_connector_name(c));
    if (st != DS_K_OK) omni__connector_leave(c);
    return st;
}

ds_status_t omni_chunk_writer_open(omni_connector_t *c, const char *from_stage,
                                   const char *to_stage, const char *request_id,
                                   omni_chunk_writer_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_chunk_writer_open: out is NULL");
    *out = NULL;
    omni__dsconn_t *d;
    omni_chunk_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory opening a chunk writer");
    ds_status_t st =
        edge(c, "omni_chunk_writer_open", from_stage, to_stage, request_id, &d, w->name);
    if (st != DS_K_OK) {
        free(w);
        return st;
    }
    /* Retained until the reader subscribes, so the two ends open in any order. */
    ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
    conf.retain_for_num_consumers = 1;
    conf.delay_flush_time_ms = 0; /* each chunk wakes the reader at once */
    st = ds_stream_create_producer(d->client, w->name, &conf, &w->p);
    omni__connector_leave(c);
    if (st != DS_K_OK) {
        free(w);
        return st;
    }
    *out = w;
    return DS_K_OK;
}

static ds_status_t send_tagged(omni_chunk_writer_t *w, uint8_t tag, const void *bytes, size_t len)
{
    if (len + 1 > w->cap) {
        size_t cap = len + 1 < 4096 ? 4096 : len + 1;
        uint8_t *s = realloc(w->scratch, cap);
        if (s == NULL)
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory sending a %zu-byte chunk", len);
        w->scratch = s;
        w->cap = cap;
    }
    w->scratch[0] = tag;
    if (len > 0) memcpy(w->scratch + 1, bytes, len);
    return ds_producer_send(w->p, w->scratch, len + 1, -1);
}

ds_status_t omni_chunk_writer_send(omni_chunk_writer_t *w, const void *bytes, size_t len)
{
    if (w == NULL || (bytes == NULL && len > 0))
        return ds__set_error(DS_K_INVALID, "omni_chunk_writer_send: writer or bytes is NULL");
    if (w->ended)
        return ds__set_error(DS_K_INVALID, "chunk stream '%s': send after the end marker", w->name);
    if (len == 0 || len >= DS_SC_ELEMENT_MAX)
        return ds__set_error(DS_K_INVALID, "chunk stream '%s': a chunk is 1 to %u bytes, not %zu",
                             w->name, DS_SC_ELEMENT_MAX - 1, len);
    return send_tagged(w, TAG_CHUNK, bytes, len);
}

ds_status_t omni_chunk_writer_end(omni_chunk_writer_t *w)
{
    if (w == NULL) return ds__set_error(DS_K_INVALID, "omni_chunk_writer_end: writer is NULL");
    if (w->ended)
        return ds__set_error(DS_K_INVALID, "chunk stream '%s': the end marker was sent already",
                             w->name);
    ds_status_t st = send_tagged(w, TAG_END, NULL, 0);
    if (st != DS_K_OK) return st;
    w->ended = true;
    st = ds_producer_close(w->p);
    w->p = NULL;
    return st;
}

void omni_chunk_writer_free(omni_chunk_writer_t *w)
{
    if (w == NULL) return;
    if (w->p) ds_producer_close(w->p);
    free(w->scratch);
    free(w);
}

ds_status_t omni_chunk_reader_open(omni_connector_t *c, const char *from_stage,
                                   const char *to_stage, const char *request_id,
                                   omni_chunk_reader_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_chunk_reader_open: out is NULL");
    *out = NULL;
    omni__dsconn_t *d;
    omni_chunk_reader_t *r = calloc(1, sizeof(*r));
    if (r == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory opening a chunk reader");
    ds_status_t st =
        edge(c, "omni_chunk_reader_open", from_stage, to_stage, request_id, &d, r->name);
    if (st != DS_K_OK) {
        free(r);
        return st;
    }
    r->client = d->client;
    st = ds_stream_subscribe(d->client, r->name, SUB_NAME, DS_SUB_STREAM, &r->cs);
    omni__connector_leave(c);
    if (st != DS_K_OK) {
        free(r);
        return st;
    }
    *out = r;
    return DS_K_OK;
}

ds_status_t omni_chunk_reader_next(omni_chunk_reader_t *r, int32_t timeout_ms,
                                   omni_received_t **out, bool *end)
{
    if (r == NULL || out == NULL || end == NULL)
        return ds__set_error(DS_K_INVALID, "omni_chunk_reader_next: reader, out or end is NULL");
    *out = NULL;
    *end = r->ended;
    if (r->ended) return DS_K_OK;
    if (timeout_ms < 0) timeout_ms = 0;
    if (r->next == r->n) {
        /* Every chunk of the last batch was copied out: acknowledged now,
         * before the next receive (a local consumer reads the elements in
         * the stream's pages, valid only until they are acknowledged). */
        if (r->n > 0 && !r->acked) {
            ds_status_t st = ds_consumer_ack(r->cs, r->batch[r->n - 1].id);
            if (st != DS_K_OK) return st;
            r->acked = true;
        }
        ds_elements_free(r->batch);
        r->batch = NULL;
        r->n = r->next = 0;
        ds_status_t st = ds_consumer_receive(r->cs, 0, (uint32_t)timeout_ms, &r->batch, &r->n);
        if (st != DS_K_OK) return st;
        if (r->n == 0)
            return ds__set_error(DS_K_NOT_FOUND, "chunk stream '%s': no chunk within %d ms",
                                 r->name, (int)timeout_ms);
        r->acked = false;
    }
    const ds_element_t *e = &r->batch[r->next++];
    if (e->size == 0 || (e->ptr[0] != TAG_CHUNK && e->ptr[0] != TAG_END))
        return ds__set_error(DS_K_INVALID,
                             "chunk stream '%s': element %llu is not a chunk or end marker",
                             r->name, (unsigned long long)e->id);
    if (e->ptr[0] == TAG_END) {
        r->ended = true;
        *end = true;
        return DS_K_OK;
    }
    return omni_received_copy(OMNI_DATA_BYTES, e->ptr + 1, (size_t)e->size - 1, out);
}

void omni_chunk_reader_free(omni_chunk_reader_t *r)
{
    if (r == NULL) return;
    ds_elements_free(r->batch);
    ds_client_t *c = r->client;
    if (r->cs) ds_consumer_close(r->cs);
    /* The writer closed its producer before the end marker could be read,
     * so the stream has no users left: delete it (best effort). */
    if (r->ended && c != NULL) (void)ds_stream_delete(c, r->name);
    free(r);
}

size_t omni_connector_stream_chunk_size(omni_connector_t *c)
{
    const omni_connector_ops_t *ops;
    void *impl;
    if (omni__connector_enter(c, "stream_chunk_size", &ops, &impl) != DS_K_OK) return 0;
    size_t n = 0;
    if (omni__yuanrong_ops(ops) || omni__shm_ops(ops))
        n = (size_t)((omni__dsconn_t *)impl)->stream_chunk_size;
    omni__connector_leave(c);
    return n;
}

ds_status_t omni_connector_put_chunked(omni_connector_t *c, const char *from_stage,
                                       const char *to_stage, const char *request_id,
                                       const void *bytes, size_t len, size_t chunk_size)
{
    if (chunk_size == 0) chunk_size = omni_connector_stream_chunk_size(c);
    if (chunk_size == 0 || chunk_size >= DS_SC_ELEMENT_MAX)
        return ds__set_error(DS_K_INVALID,
                             "omni_connector_put_chunked: chunk size %zu is not 1 to %u (and "
                             "the connector's stream_chunk_size is off)",
                             chunk_size, DS_SC_ELEMENT_MAX - 1);
    if (bytes == NULL && len > 0)
        return ds__set_error(DS_K_INVALID, "omni_connector_put_chunked: bytes is NULL");
    omni_chunk_writer_t *w;
    ds_status_t st = omni_chunk_writer_open(c, from_stage, to_stage, request_id, &w);
    if (st != DS_K_OK) return st;
    for (size_t off = 0; st == DS_K_OK && off < len; off += chunk_size) {
        size_t n = len - off < chunk_size ? len - off : chunk_size;
        st = omni_chunk_writer_send(w, (const uint8_t *)bytes + off, n);
    }
    if (st == DS_K_OK) st = omni_chunk_writer_end(w);
    omni_chunk_writer_free(w);
    return st;
}

ds_status_t omni_connector_get_chunked(omni_connector_t *c, const char *from_stage,
                                       const char *to_stage, const char *request_id,
                                       int32_t timeout_ms, omni_received_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_connector_get_chunked: out is NULL");
    *out = NULL;
    omni_chunk_reader_t *r;
    ds_status_t st = omni_chunk_reader_open(c, from_stage, to_stage, request_id, &r);
    if (st != DS_K_OK) return st;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        omni_received_t *chunk = NULL;
        bool end = false;
        st = omni_chunk_reader_next(r, timeout_ms, &chunk, &end);
        if (st != DS_K_OK || end) break;
        size_t n = omni_received_size(chunk);
        if (len + n > cap) {
            size_t ncap = cap ? cap * 2 : 64 * 1024;
            while (ncap < len + n)
                ncap *= 2;
            uint8_t *b = realloc(buf, ncap);
            if (b == NULL) {
                omni_received_free(chunk);
                st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory joining chunks");
                break;
            }
            buf = b;
            cap = ncap;
        }
        memcpy(buf + len, omni_received_data(chunk), n);
        len += n;
        omni_received_free(chunk);
    }
    omni_chunk_reader_free(r);
    if (st == DS_K_OK)
        st = omni_received_new(OMNI_DATA_BYTES, buf, len, free, buf, out);
    else
        free(buf);
    return st;
}
