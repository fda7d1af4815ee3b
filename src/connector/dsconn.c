/* The datasystem-backed connector core (see dsconn.h): extras, the worker
 * connection, the write paths (serializer and raw), the single subscribe-get
 * read, deletes and counters. */
#include "connector/dsconn.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/copy.h"
#include "common/error.h"
#include "ds/stream_client.h"

#define ADD(counter) atomic_fetch_add_explicit(&(counter), 1, memory_order_relaxed)
#define LOAD(counter) atomic_load_explicit(&(counter), memory_order_relaxed)

/* Copies the thread's last message out, since formatting a new message from
 * the buffer it is written into would read and write the same bytes. */
static const char *cause(char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ds_last_error());
    return buf;
}

/* ---- construction ---- */

static ds_status_t int_extra(const omni_connector_spec_t *spec, const char *key, int64_t def,
                             int64_t lo, int64_t hi, int64_t *out)
{
    ds_status_t st = omni_spec_get_int(spec, key, def, out);
    if (st != DS_K_OK) return st;
    if (*out < lo || *out > hi)
        return ds__set_error(DS_K_INVALID,
                             "extra '%s' of connector '%s' is %lld, not in %lld..%lld", key,
                             spec->name, (long long)*out, (long long)lo, (long long)hi);
    return DS_K_OK;
}

static ds_status_t transport_extra(const omni_connector_spec_t *spec, ds_transport_t def,
                                   ds_transport_t *out)
{
    const char *v = omni_spec_get(spec, "transport");
    *out = def;
    if (v == NULL) return DS_K_OK;
    if (strcasecmp(v, "auto") == 0)
        *out = DS_TRANSPORT_AUTO;
    else if (strcasecmp(v, "tcp") == 0)
        *out = DS_TRANSPORT_TCP;
    else if (strcasecmp(v, "local") == 0 || strcasecmp(v, "shm") == 0)
        *out = DS_TRANSPORT_LOCAL;
    else
        return ds__set_error(DS_K_INVALID,
                             "extra 'transport' of connector '%s' is '%s', not auto, tcp or local",
                             spec->name, v);
    return DS_K_OK;
}

ds_status_t omni__dsconn_open(const omni_connector_spec_t *spec, const omni__dsconn_cfg_t *cfg,
                              omni__dsconn_t **out)
{
    *out = NULL;
    const char *host = omni_spec_get_string(spec, "host", cfg->host);
    int64_t port, timeout, connect_ms, request_ms, max_reqs, chunk;
    ds_transport_t transport;
    ds_status_t st = DS_K_OK;
    if (host[0] == '\0')
        st = ds__set_error(DS_K_INVALID, "extra 'host' of connector '%s' is empty", spec->name);
    if (st == DS_K_OK) st = int_extra(spec, "port", cfg->port, 1, 65535, &port);
    if (st == DS_K_OK) st = int_extra(spec, "get_sub_timeout_ms", 1000, 0, INT32_MAX, &timeout);
    if (st == DS_K_OK) st = int_extra(spec, "connect_timeout_ms", 0, 0, INT32_MAX, &connect_ms);
    if (st == DS_K_OK) st = int_extra(spec, "request_timeout_ms", 0, 0, INT32_MAX, &request_ms);
    if (st == DS_K_OK)
        st = int_extra(spec, "max_tracked_requests", 100000, 1, INT32_MAX, &max_reqs);
    if (st == DS_K_OK)
        st = int_extra(spec, "stream_chunk_size", 0, 0, DS_SC_ELEMENT_MAX - 1, &chunk);
    if (st == DS_K_OK) st = transport_extra(spec, cfg->transport, &transport);
    if (st != DS_K_OK) return st;
    if (strlen(host) >= sizeof(((omni__dsconn_t *)0)->host))
        return ds__set_error(DS_K_INVALID, "extra 'host' of connector '%s' is too long",
                             spec->name);

    omni__dsconn_t *d = calloc(1, sizeof(*d));
    if (d == NULL || (d->track = omni__keytrack_new((size_t)max_reqs)) == NULL) {
        free(d);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory creating connector '%s'",
                             spec->name);
    }
    snprintf(d->name, sizeof(d->name), "%s", cfg->name);
    snprintf(d->host, sizeof(d->host), "%s", host);
    d->sep = cfg->sep;
    d->port = (int)port;
    d->get_timeout_ms = (int32_t)timeout;
    d->stream_chunk_size = chunk;
    d->param = (ds_set_param_t)DS_SET_PARAM_INIT;
    d->param.write_mode = cfg->mode;

    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = d->host;
    o.port = d->port;
    o.transport = transport;
    if (connect_ms > 0) o.connect_timeout_ms = (int)connect_ms;
    if (request_ms > 0) o.request_timeout_ms = (int)request_ms;
    o.unix_socket_dir = omni_spec_get(spec, "unix_socket_dir");
    o.token = omni_spec_get(spec, "token");
    st = ds_client_connect(&o, &d->client);
    if (st != DS_K_OK) {
        char why[512];
        cause(why, sizeof(why));
        omni__dsconn_free(d);
        return ds__set_error(st, "cannot reach the datasystem worker at %s:%lld%s: %s", host,
                             (long long)port,
                             transport == DS_TRANSPORT_LOCAL ? " through shared memory" : "", why);
    }
    *out = d;
    return DS_K_OK;
}

void omni__dsconn_close(omni__dsconn_t *d)
{
    ds_client_close(d->client);
    d->client = NULL;
}

void omni__dsconn_free(omni__dsconn_t *d)
{
    if (d == NULL) return;
    omni__dsconn_close(d);
    omni__keytrack_free(d->track);
    free(d);
}

ds_status_t omni__dsconn_key(omni__dsconn_t *d, const char *key, const char *from, const char *to,
                             char *buf)
{
    ds_status_t st = omni_connector_make_key(key, from, to, d->sep, buf, OMNI__KEY_CAP);
    if (st == DS_K_OK) st = ds_key_validate(buf, strlen(buf));
    return st;
}

/* ---- counters ---- */

static bool backend_failure(ds_status_t st)
{
    return st != DS_K_INVALID && st != DS_K_NOT_FOUND;
}

/* Counts a failed call that reached for the worker. */
static void count_failure(omni__dsconn_t *d, ds_status_t st)
{
    ADD(d->errors);
    if (backend_failure(st)) {
        ADD(d->transport);
        atomic_store(&d->worker_down, true);
    }
}

void omni__dsconn_count_error(omni__dsconn_t *d)
{
    ADD(d->errors);
}

void omni__dsconn_health(omni__dsconn_t *d, omni_health_t *out)
{
    out->puts = LOAD(d->puts);
    out->gets = LOAD(d->gets);
    out->bytes_transferred = LOAD(d->bytes);
    out->errors = LOAD(d->errors);
    out->timeouts = LOAD(d->timeouts);
    out->not_found = LOAD(d->not_found);
    out->transport_errors = LOAD(d->transport);
    out->decode_errors = LOAD(d->decode);
    if (d->client != NULL && atomic_load(&d->worker_down)) {
        out->healthy = false;
        snprintf(out->status, sizeof(out->status), "worker unreachable");
    }
}

/* ---- writing ---- */

/* A fill writes exactly total bytes at buf, moving the payload's bulk with
 * copy: ds__copy_in into a local client's arena buffer (another process
 * reads it later), else ds__copy. */
typedef void (*copy_fn)(void *dst, const void *src, size_t n);
typedef ds_status_t (*fill_fn)(const omni_data_t *data, uint8_t *buf, size_t total, copy_fn copy);

static size_t bin_header_len(size_t n)
{
    return n <= UINT8_MAX ? 2 : n <= UINT16_MAX ? 3 : 5;
}

static ds_status_t fill_value(const omni_data_t *data, uint8_t *buf, size_t total, copy_fn copy)
{
    (void)copy;
    return omni_value_encode_to(data->value, buf, total, NULL);
}

static ds_status_t fill_bytes(const omni_data_t *data, uint8_t *buf, size_t total, copy_fn copy)
{
    size_t n = data->len, h = bin_header_len(n);
    if (h == 2) {
        buf[0] = 0xc4;
        buf[1] = (uint8_t)n;
    } else if (h == 3) {
        buf[0] = 0xc5;
        buf[1] = (uint8_t)(n >> 8);
        buf[2] = (uint8_t)n;
    } else {
        buf[0] = 0xc6;
        for (int i = 0; i < 4; i++)
            buf[1 + i] = (uint8_t)(n >> (24 - 8 * i));
    }
    copy(buf + h, data->bytes, total - h);
    return DS_K_OK;
}

static ds_status_t fill_tensor(const omni_data_t *data, uint8_t *buf, size_t total, copy_fn copy)
{
    const omni_tensor_view_t *t = &data->tensor;
    size_t h;
    ds_status_t st =
        omni_tensor_encode_header(OMNI_TENSOR, t->dtype, t->shape, t->ndim, NULL, buf, total, &h);
    if (st != DS_K_OK) return st;
    if (h + t->nbytes != total)
        return ds__set_error(DS_K_RUNTIME_ERROR, "tensor header is %zu bytes, expected %zu", h,
                             total - t->nbytes);
    if (t->nbytes > 0) copy(buf + h, t->data, t->nbytes);
    return DS_K_OK;
}

/* The stored size of data and the function that writes it. */
static ds_status_t plan(const omni_data_t *data, size_t *total, fill_fn *fill)
{
    switch (data->kind) {
    case OMNI_DATA_VALUE:
        *fill = fill_value;
        return omni_value_encoded_size(data->value, total);
    case OMNI_DATA_BYTES:
        if (data->len > UINT32_MAX)
            return ds__set_error(DS_K_INVALID, "%zu raw bytes exceed msgpack's 4 GiB bin limit",
                                 data->len);
        *fill = fill_bytes;
        *total = bin_header_len(data->len) + data->len;
        return DS_K_OK;
    case OMNI_DATA_TENSOR: {
        const omni_tensor_view_t *t = &data->tensor;
        size_t h;
        ds_status_t st =
            omni_tensor_header_size(OMNI_TENSOR, t->dtype, t->shape, t->ndim, NULL, &h);
        if (st != DS_K_OK) return st;
        if (t->nbytes > UINT32_MAX)
            return ds__set_error(
                DS_K_INVALID, "tensor of %zu bytes exceeds msgpack's 4 GiB bin limit", t->nbytes);
        *fill = fill_tensor;
        *total = h + t->nbytes;
        return DS_K_OK;
    }
    }
    return ds__set_error(DS_K_INVALID, "unknown payload kind %d", (int)data->kind);
}

/* Small payloads: build privately, one set. */
static ds_status_t write_small(omni__dsconn_t *d, const char *key, const omni_data_t *data,
                               size_t total, fill_fn fill)
{
    uint8_t *buf = malloc(total);
    if (buf == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory encoding %zu bytes", total);
    ds_status_t st = fill(data, buf, total, ds__copy);
    if (st == DS_K_OK) {
        st = ds_kv_set(d->client, key, buf, total, &d->param);
        if (st != DS_K_OK) count_failure(d, st);
    } else {
        ADD(d->errors);
    }
    free(buf);
    return st;
}

/* Large payloads: reserve (in the arena, for a local client), write in place,
 * publish. An unpublished buffer is discarded on release; a published one's
 * pin is dropped with the client's next request (ds_buffer_release_deferred),
 * so the put costs one request and no release frame of its own. */
static ds_status_t write_inplace(omni__dsconn_t *d, const char *key, const omni_data_t *data,
                                 size_t total, fill_fn fill)
{
    ds_buffer_t *b = NULL;
    ds_status_t st = ds_kv_create(d->client, key, total, &d->param, &b);
    if (st != DS_K_OK) {
        count_failure(d, st);
        return st;
    }
    st = fill(data, ds_buffer_mutable_data(b), total,
              ds_client_is_local(d->client) ? ds__copy_in : ds__copy);
    if (st != DS_K_OK) {
        ADD(d->errors);
    } else if ((st = ds_kv_publish(d->client, b)) != DS_K_OK) {
        count_failure(d, st);
    }
    if (st == DS_K_OK)
        ds_buffer_release_deferred(b);
    else
        ds_buffer_release(b);
    return st;
}

ds_status_t omni__dsconn_write(omni__dsconn_t *d, const char *key, const omni_data_t *data,
                               size_t *size)
{
    size_t total = 0;
    fill_fn fill = NULL;
    ds_status_t st = plan(data, &total, &fill);
    if (st != DS_K_OK) {
        ADD(d->errors);
        return st;
    }
    st = total < OMNI__INPLACE_MIN ? write_small(d, key, data, total, fill)
                                   : write_inplace(d, key, data, total, fill);
    if (st != DS_K_OK) {
        char why[512];
        cause(why, sizeof(why));
        return ds__set_error(st, "%s put '%s' (%zu bytes) failed: %s", d->name, key, total, why);
    }
    atomic_store(&d->worker_down, false);
    ADD(d->puts);
    atomic_fetch_add_explicit(&d->bytes, total, memory_order_relaxed);
    *size = total;
    return DS_K_OK;
}

/* ---- reading ---- */

/* The length of a msgpack bin header at p when the document is exactly that
 * one bin, else 0. */
static size_t lone_bin(const uint8_t *p, size_t len)
{
    size_t h, n;
    if (len >= 2 && p[0] == 0xc4) {
        h = 2;
        n = p[1];
    } else if (len >= 3 && p[0] == 0xc5) {
        h = 3;
        n = (size_t)p[1] << 8 | p[2];
    } else if (len >= 5 && p[0] == 0xc6) {
        h = 5;
        n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
    } else {
        return 0;
    }
    return h + n == len ? h : 0;
}

/* A document whose root is the tensor map OmniSerializer writes for a
 * torch.Tensor: a 4-entry map whose first key is "__tensor__". */
static bool lone_tensor(const uint8_t *p, size_t len)
{
    static const uint8_t head[] = {0x84, 0xaa, '_', '_', 't', 'e', 'n', 's', 'o', 'r', '_', '_'};
    return len > sizeof(head) && memcmp(p, head, sizeof(head)) == 0;
}

/* A received payload's pin goes with the client's next request. */
static void release_buffer(void *ctx)
{
    ds_buffer_release_deferred(ctx);
}

/* Wraps len bytes at p (kept alive by release(ctx)) as a received payload,
 * decoding value and tensor documents. */
static ds_status_t wrap(omni__dsconn_t *d, const char *what, const uint8_t *p, size_t len,
                        void (*release)(void *), void *ctx, omni_received_t **out)
{
    size_t h = lone_bin(p, len);
    omni_received_t *r = NULL;
    ds_status_t st;
    if (h > 0) {
        st = omni_received_new(OMNI_DATA_BYTES, p + h, len - h, release, ctx, &r);
    } else {
        omni_data_kind_t kind = lone_tensor(p, len) ? OMNI_DATA_TENSOR : OMNI_DATA_VALUE;
        st = omni_received_new(kind, p, len, release, ctx, &r);
        const omni_value_t *v;
        if (st == DS_K_OK && (st = omni_received_value(r, &v)) != DS_K_OK) {
            char why[512];
            cause(why, sizeof(why));
            omni_received_free(r);
            r = NULL;
            ADD(d->decode);
            ADD(d->errors);
            return ds__set_error(DS_K_INVALID,
                                 "%s get %s: the %zu bytes are not an OmniSerializer document: %s",
                                 d->name, what, len, why);
        }
    }
    if (st != DS_K_OK) {
        ADD(d->errors);
        return st;
    }
    *out = r;
    return DS_K_OK;
}

ds_status_t omni__dsconn_wrap_copy(omni__dsconn_t *d, const char *what, const void *data,
                                   size_t len, omni_received_t **out)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL) {
        ADD(d->errors);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory copying %zu bytes", len);
    }
    if (len > 0) memcpy(copy, data, len);
    ds_status_t st = wrap(d, what, copy, len, free, copy, out);
    if (st != DS_K_OK) return st;
    ADD(d->gets);
    atomic_fetch_add_explicit(&d->bytes, len, memory_order_relaxed);
    return DS_K_OK;
}

ds_status_t omni__dsconn_read(omni__dsconn_t *d, const char *key, int32_t timeout_ms,
                              omni_received_t **out)
{
    const char *keys[1] = {key};
    ds_buffer_t *b = NULL;
    ds_status_t st = ds_kv_get_buffers(d->client, 1, keys, timeout_ms, &b);
    if (st == DS_K_OK && b == NULL) st = DS_K_NOT_FOUND;
    if (st == DS_K_NOT_FOUND) {
        atomic_store(&d->worker_down, false);
        if (timeout_ms > 0) {
            ADD(d->timeouts);
            return ds__set_error(DS_K_NOT_FOUND, "%s get '%s': nothing arrived within %d ms",
                                 d->name, key, (int)timeout_ms);
        }
        ADD(d->not_found);
        return ds__set_error(DS_K_NOT_FOUND, "%s get '%s': not found", d->name, key);
    }
    if (st != DS_K_OK) {
        char why[512];
        cause(why, sizeof(why));
        count_failure(d, st);
        return ds__set_error(st, "%s get '%s' failed: %s", d->name, key, why);
    }
    atomic_store(&d->worker_down, false);
    size_t len = ds_buffer_size(b);
    char what[OMNI__KEY_CAP + 2];
    snprintf(what, sizeof(what), "'%s'", key);
    st = wrap(d, what, ds_buffer_data(b), len, release_buffer, b, out);
    if (st != DS_K_OK) return st;
    ADD(d->gets);
    atomic_fetch_add_explicit(&d->bytes, len, memory_order_relaxed);
    return DS_K_OK;
}

ds_status_t omni__dsconn_delete(omni__dsconn_t *d, char *const *keys, size_t n)
{
    for (size_t off = 0; off < n; off += DS_MAX_BATCH) {
        size_t m = n - off < DS_MAX_BATCH ? n - off : DS_MAX_BATCH;
        ds_status_t st = ds_kv_del(d->client, m, (const char *const *)(keys + off), NULL);
        if (st != DS_K_OK) {
            char why[512];
            cause(why, sizeof(why));
            count_failure(d, st);
            return ds__set_error(st, "%s: deleting %zu keys failed: %s", d->name, m, why);
        }
    }
    return DS_K_OK;
}

ds_status_t omni__dsconn_cleanup(omni__dsconn_t *d, const char *request_id)
{
    char **keys = NULL;
    size_t n = 0;
    ds_status_t st = omni__keytrack_take(d->track, request_id, d->sep, &keys, &n);
    if (st != DS_K_OK) {
        ADD(d->errors);
        return st;
    }
    /* An edge key built from a request id no put could have used (a bad
     * byte, too long) names nothing: leave it out rather than fail the batch. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (ds_key_validate(keys[i], strlen(keys[i])) == DS_K_OK)
            keys[m++] = keys[i];
        else
            free(keys[i]);
    }
    st = m > 0 ? omni__dsconn_delete(d, keys, m) : DS_K_OK;
    omni__keys_free(keys, m);
    return st;
}
