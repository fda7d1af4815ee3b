/* The connector handle around an implementation's vtable, and received
 * payloads. The handle checks arguments and state once for every connector,
 * turns raw payloads into values for connectors without a raw path, and makes
 * close idempotent and safe against calls in flight (a writer-preferring
 * read-write lock: calls hold it shared, close takes it exclusively). */
#include "omni/connector.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/bigbuf.h"
#include "connector/value.h"

/* ---- received payloads ---- */

struct omni_received {
    omni_data_kind_t kind;
    const void *data;
    size_t len;
    void (*release)(void *ctx);
    void *ctx;
    omni_value_t *value; /* decoded on first request */
};

static void free_ctx(void *ctx)
{
    ds__bigbuf_free(ctx);
}

ds_status_t omni_received_new(omni_data_kind_t kind, const void *data, size_t len,
                              void (*release)(void *ctx), void *ctx, omni_received_t **out)
{
    ds_status_t st = DS_K_OK;
    if (out == NULL || (data == NULL && len > 0))
        st = ds__set_error(DS_K_INVALID, "omni_received_new: NULL argument");
    else if (kind != OMNI_DATA_VALUE && kind != OMNI_DATA_BYTES && kind != OMNI_DATA_TENSOR)
        st = ds__set_error(DS_K_INVALID, "omni_received_new: unknown payload kind %d", kind);
    omni_received_t *r = NULL;
    if (st == DS_K_OK && (r = calloc(1, sizeof(*r))) == NULL)
        st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a received payload");
    if (st != DS_K_OK) {
        if (release != NULL) release(ctx);
        if (out != NULL) *out = NULL;
        return st;
    }
    r->kind = kind;
    r->data = len > 0 ? data : "";
    r->len = len;
    r->release = release;
    r->ctx = ctx;
    *out = r;
    return DS_K_OK;
}

ds_status_t omni_received_copy(omni_data_kind_t kind, const void *data, size_t len,
                               omni_received_t **out)
{
    if (data == NULL && len > 0)
        return ds__set_error(DS_K_INVALID, "omni_received_copy: data is NULL");
    void *copy = ds__bigbuf_alloc(len);
    if (copy == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory copying %zu received bytes", len);
    if (len > 0) memcpy(copy, data, len);
    return omni_received_new(kind, copy, len, free_ctx, copy, out);
}

omni_data_kind_t omni_received_kind(const omni_received_t *r)
{
    return r->kind;
}

const void *omni_received_data(const omni_received_t *r)
{
    return r->data;
}

size_t omni_received_size(const omni_received_t *r)
{
    return r->len;
}

ds_status_t omni_received_value(omni_received_t *r, const omni_value_t **out)
{
    if (r == NULL || out == NULL)
        return ds__set_error(DS_K_INVALID, "omni_received_value: NULL argument");
    if (r->kind == OMNI_DATA_BYTES)
        return ds__set_error(DS_K_INVALID, "received payload is raw bytes, not a value");
    if (r->value == NULL) {
        ds_status_t st = omni_decode(r->data, r->len, &r->value);
        if (st != DS_K_OK) return st;
    }
    *out = r->value;
    return DS_K_OK;
}

ds_status_t omni_received_tensor(omni_received_t *r, omni_tensor_view_t *out)
{
    const omni_value_t *v;
    ds_status_t st = omni_received_value(r, &v);
    if (st != DS_K_OK) return st;
    return omni_value_get_tensor(v, out);
}

void omni_received_free(omni_received_t *r)
{
    if (r == NULL) return;
    omni_value_free(r->value);
    if (r->release != NULL) r->release(r->ctx);
    free(r);
}

/* ---- the connector handle ---- */

struct omni_connector {
    char *name;
    const omni_connector_ops_t *ops;
    void *impl;
    bool raw;
    bool closed;
    pthread_rwlock_t lock;
};

ds_status_t omni_connector_new(const char *name, const omni_connector_ops_t *ops,
                               bool supports_raw_data, void *impl, omni_connector_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_connector_new: out is NULL");
    *out = NULL;
    if (name == NULL || name[0] == '\0' || ops == NULL)
        return ds__set_error(DS_K_INVALID, "omni_connector_new: a name and ops are required");
    if (ops->put == NULL || ops->get == NULL || ops->cleanup == NULL || ops->health == NULL)
        return ds__set_error(DS_K_INVALID, "connector '%s' lacks put, get, cleanup or health",
                             name);
    omni_connector_t *c = calloc(1, sizeof(*c));
    char *n = strdup(name);
    if (c == NULL || n == NULL) {
        free(c);
        free(n);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory creating connector '%s'", name);
    }
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&c->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        free(c);
        free(n);
        return ds__set_error(DS_K_RUNTIME_ERROR, "cannot create connector '%s' lock", name);
    }
    c->name = n;
    c->ops = ops;
    c->impl = impl;
    c->raw = supports_raw_data;
    *out = c;
    return DS_K_OK;
}

/* Takes the shared lock and checks the connector is open. */
static ds_status_t enter(omni_connector_t *c, const char *op)
{
    if (c == NULL) return ds__set_error(DS_K_INVALID, "omni_connector_%s: connector is NULL", op);
    pthread_rwlock_rdlock(&c->lock);
    if (c->closed) {
        pthread_rwlock_unlock(&c->lock);
        return ds__set_error(DS_K_NOT_READY, "connector '%s' is closed", c->name);
    }
    return DS_K_OK;
}

static void leave(omni_connector_t *c)
{
    pthread_rwlock_unlock(&c->lock);
}

ds_status_t omni__connector_enter(omni_connector_t *c, const char *op,
                                  const omni_connector_ops_t **ops, void **impl)
{
    ds_status_t st = enter(c, op);
    if (st != DS_K_OK) return st;
    *ops = c->ops;
    *impl = c->impl;
    return DS_K_OK;
}

void omni__connector_leave(omni_connector_t *c)
{
    leave(c);
}

static ds_status_t check_route(const omni_connector_t *c, const char *op, const char *from,
                               const char *to, const char *key)
{
    if (from == NULL || to == NULL || key == NULL)
        return ds__set_error(DS_K_INVALID, "%s on connector '%s': %s is NULL", op, c->name,
                             from == NULL ? "from_stage"
                             : to == NULL ? "to_stage"
                                          : "key");
    if (key[0] == '\0')
        return ds__set_error(DS_K_INVALID, "%s on connector '%s': key is empty", op, c->name);
    return DS_K_OK;
}

/* A raw payload for a connector without a raw path becomes a value that
 * borrows its bytes: a bin for bytes, a tensor map for a tensor. */
static ds_status_t wrap_raw(const omni_connector_t *c, const omni_data_t *data,
                            omni_value_t **wrapped)
{
    *wrapped = NULL;
    switch (data->kind) {
    case OMNI_DATA_VALUE:
        if (data->value == NULL)
            return ds__set_error(DS_K_INVALID, "put on connector '%s': value is NULL", c->name);
        return DS_K_OK;
    case OMNI_DATA_BYTES:
        if (data->bytes == NULL && data->len > 0)
            return ds__set_error(DS_K_INVALID, "put on connector '%s': bytes are NULL", c->name);
        if (c->raw) return DS_K_OK;
        *wrapped = omni_value_new_bin_ref(data->bytes, data->len);
        break;
    case OMNI_DATA_TENSOR: {
        const omni_tensor_view_t *t = &data->tensor;
        size_t numel;
        if (t->mode != NULL)
            return ds__set_error(DS_K_INVALID, "put on connector '%s': a raw tensor has no mode",
                                 c->name);
        if (t->data == NULL && t->nbytes > 0)
            return ds__set_error(DS_K_INVALID, "put on connector '%s': tensor data is NULL",
                                 c->name);
        if (omni__check_tensor(OMNI_TENSOR, t->dtype, t->shape, t->ndim, NULL, t->nbytes, &numel) !=
            DS_K_OK)
            return DS_K_INVALID;
        if (c->raw) return DS_K_OK;
        *wrapped = omni_value_new_tensor_ref(t->dtype, t->shape, t->ndim, t->data, t->nbytes);
        break;
    }
    default:
        return ds__set_error(DS_K_INVALID, "put on connector '%s': unknown payload kind %d",
                             c->name, data->kind);
    }
    return *wrapped != NULL ? DS_K_OK : DS_K_INVALID;
}

ds_status_t omni_connector_put(omni_connector_t *c, const char *from_stage, const char *to_stage,
                               const char *put_key, const omni_data_t *data, size_t *size,
                               omni_value_t **metadata)
{
    if (size != NULL) *size = 0;
    if (metadata != NULL) *metadata = NULL;
    ds_status_t st = enter(c, "put");
    if (st != DS_K_OK) return st;
    omni_value_t *wrapped = NULL;
    st = check_route(c, "put", from_stage, to_stage, put_key);
    if (st == DS_K_OK && data == NULL)
        st = ds__set_error(DS_K_INVALID, "put on connector '%s': data is NULL", c->name);
    if (st == DS_K_OK) st = wrap_raw(c, data, &wrapped);
    if (st == DS_K_OK) {
        omni_data_t as_value = omni_data_value(wrapped);
        size_t sz = 0;
        omni_value_t *md = NULL;
        st = c->ops->put(c->impl, from_stage, to_stage, put_key, wrapped != NULL ? &as_value : data,
                         &sz, &md);
        if (st == DS_K_OK) {
            if (size != NULL) *size = sz;
            if (metadata != NULL)
                *metadata = md;
            else
                omni_value_free(md);
        } else {
            omni_value_free(md);
        }
    }
    omni_value_free(wrapped);
    leave(c);
    return st;
}

ds_status_t omni_connector_get(omni_connector_t *c, const char *from_stage, const char *to_stage,
                               const char *get_key, const omni_value_t *metadata,
                               omni_received_t **out)
{
    if (out != NULL) *out = NULL;
    ds_status_t st = enter(c, "get");
    if (st != DS_K_OK) return st;
    st = check_route(c, "get", from_stage, to_stage, get_key);
    if (st == DS_K_OK && out == NULL)
        st = ds__set_error(DS_K_INVALID, "get on connector '%s': out is NULL", c->name);
    if (st == DS_K_OK && metadata != NULL && omni_value_type(metadata) != OMNI_MAP)
        st = ds__set_error(DS_K_INVALID, "get on connector '%s': metadata must be a map", c->name);
    if (st == DS_K_OK) {
        omni_received_t *r = NULL;
        st = c->ops->get(c->impl, from_stage, to_stage, get_key, metadata, &r);
        if (st == DS_K_OK && r == NULL)
            st = ds__set_error(DS_K_RUNTIME_ERROR, "connector '%s' returned no payload", c->name);
        if (st == DS_K_OK)
            *out = r;
        else
            omni_received_free(r);
    }
    leave(c);
    return st;
}

ds_status_t omni_connector_cleanup(omni_connector_t *c, const char *request_id)
{
    ds_status_t st = enter(c, "cleanup");
    if (st != DS_K_OK) return st;
    if (request_id == NULL || request_id[0] == '\0')
        st = ds__set_error(DS_K_INVALID, "cleanup on connector '%s': request id is empty", c->name);
    else
        st = c->ops->cleanup(c->impl, request_id);
    leave(c);
    return st;
}

ds_status_t omni_connector_health(omni_connector_t *c, omni_health_t *out)
{
    if (c == NULL || out == NULL)
        return ds__set_error(DS_K_INVALID, "omni_connector_health: NULL argument");
    memset(out, 0, sizeof(*out));
    pthread_rwlock_rdlock(&c->lock);
    out->healthy = !c->closed;
    snprintf(out->status, sizeof(out->status), "%s", c->closed ? "closed" : "healthy");
    c->ops->health(c->impl, out);
    if (c->closed) {
        out->healthy = false;
        snprintf(out->status, sizeof(out->status), "closed");
    }
    pthread_rwlock_unlock(&c->lock);
    return DS_K_OK;
}

void omni_connector_close(omni_connector_t *c)
{
    if (c == NULL) return;
    pthread_rwlock_wrlock(&c->lock);
    if (!c->closed) {
        c->closed = true;
        if (c->ops->close != NULL) c->ops->close(c->impl);
    }
    pthread_rwlock_unlock(&c->lock);
}

void omni_connector_free(omni_connector_t *c)
{
    if (c == NULL) return;
    omni_connector_close(c);
    if (c->ops->destroy != NULL) c->ops->destroy(c->impl);
    pthread_rwlock_destroy(&c->lock);
    free(c->name);
    free(c);
}

const char *omni_connector_name(const omni_connector_t *c)
{
    return c == NULL ? NULL : c->name;
}

bool omni_connector_supports_raw_data(const omni_connector_t *c)
{
    return c != NULL && c->raw;
}

ds_status_t omni_connector_make_key(const char *key, const char *from_stage, const char *to_stage,
                                    char sep, char *buf, size_t cap)
{
    if (key == NULL || from_stage == NULL || to_stage == NULL || buf == NULL)
        return ds__set_error(DS_K_INVALID, "omni_connector_make_key: NULL argument");
    int n = snprintf(buf, cap, "%s%c%s_%s", key, sep, from_stage, to_stage);
    if (n < 0 || (size_t)n >= cap)
        return ds__set_error(DS_K_INVALID, "key '%s%c%s_%s' does not fit in %zu bytes", key, sep,
                             from_stage, to_stage, cap);
    return DS_K_OK;
}
