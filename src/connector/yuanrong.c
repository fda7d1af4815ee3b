/* YuanrongConnector: stage payloads through a datasystem worker, as
 * docs/spec/YuanrongConnector.md designs it.
 *
 *   extra            host ("127.0.0.1"), port (35001), get_sub_timeout_ms (1000;
 *                    0 = do not wait); optionally connect_timeout_ms,
 *                    request_timeout_ms, transport (auto/tcp/local),
 *                    unix_socket_dir, token, max_tracked_requests (100000),
 *                    stream_chunk_size (0 = off; the chunk size of
 *                    omni_connector_put_chunked, omni/stream_edge.h)
 *   key              {request_id}:{from_stage}_{to_stage}
 *   put              every write NONE_L2_CACHE_EVICT; returns (ok, size, none)
 *   get              one subscribe-get waiting up to get_sub_timeout_ms (the
 *                    worker parks the request until the key is published);
 *                    DS_K_NOT_FOUND is the spec's None
 *   close            releases the client handle only
 *
 * Beyond the spec (docs/design.md section 7): cleanup(request_id) deletes the
 * request's keys on every edge this connector wrote or read (keytrack.h), so
 * either end may call it; raw bytes and tensors skip the serializer and are
 * written in place into a zero-copy buffer, and a consumer reads every
 * payload as a view of a pinned buffer (dsconn.h); a worker that cannot be
 * reached fails construction with a message naming host:port; health splits
 * failures into not_found / timeout / transport / decode.
 *
 * The metadata a caller passes to get is ignored: the key is the rendezvous. */
#include <stdlib.h>

#include "common/error.h"
#include "connector/builtins.h"
#include "connector/dsconn.h"

static ds_status_t yr_put(void *impl, const char *from_stage, const char *to_stage,
                          const char *put_key, const omni_data_t *data, size_t *size,
                          omni_value_t **metadata)
{
    omni__dsconn_t *d = impl;
    (void)metadata; /* none: the key is the whole contract */
    char key[OMNI__KEY_CAP];
    ds_status_t st = omni__dsconn_key(d, put_key, from_stage, to_stage, key);
    if (st == DS_K_OK && data->kind == OMNI_DATA_BYTES && data->len == 0)
        st = ds__set_error(DS_K_INVALID, "YuanrongConnector put '%s': the payload is empty", key);
    if (st != DS_K_OK) {
        omni__dsconn_count_error(d);
        return st;
    }
    st = omni__dsconn_write(d, key, data, size);
    if (st != DS_K_OK) return st;
    /* The payload is stored either way; a failure here only means cleanup
     * falls back to the edge keys for this request. */
    (void)omni__keytrack_add(d->track, put_key, key, from_stage, to_stage);
    return DS_K_OK;
}

static ds_status_t yr_get(void *impl, const char *from_stage, const char *to_stage,
                          const char *get_key, const omni_value_t *metadata, omni_received_t **out)
{
    omni__dsconn_t *d = impl;
    (void)metadata;
    char key[OMNI__KEY_CAP];
    ds_status_t st = omni__dsconn_key(d, get_key, from_stage, to_stage, key);
    if (st != DS_K_OK) {
        omni__dsconn_count_error(d);
        return st;
    }
    omni__keytrack_add_edge(d->track, from_stage, to_stage);
    st = omni__dsconn_read(d, key, d->get_timeout_ms, out);
    /* A consumer's cleanup deletes what it read. */
    if (st == DS_K_OK) (void)omni__keytrack_add(d->track, get_key, key, from_stage, to_stage);
    return st;
}

static ds_status_t yr_cleanup(void *impl, const char *request_id)
{
    return omni__dsconn_cleanup(impl, request_id);
}

static void yr_health(void *impl, omni_health_t *out)
{
    omni__dsconn_health(impl, out);
}

static void yr_close(void *impl)
{
    omni__dsconn_close(impl);
}

static void yr_destroy(void *impl)
{
    omni__dsconn_free(impl);
}

static const omni_connector_ops_t yr_ops = {
    yr_put, yr_get, yr_cleanup, yr_health, yr_close, yr_destroy,
};

bool omni__yuanrong_ops(const omni_connector_ops_t *ops)
{
    return ops == &yr_ops;
}

ds_status_t omni__yuanrong_create(const omni_connector_spec_t *spec, void *user,
                                  omni_connector_t **out)
{
    (void)user;
    static const omni__dsconn_cfg_t cfg = {
        "YuanrongConnector", ':',         DS_WRITE_NONE_L2_CACHE_EVICT,
        DS_TRANSPORT_AUTO,   "127.0.0.1", 35001,
    };
    omni__dsconn_t *d = NULL;
    ds_status_t st = omni__dsconn_open(spec, &cfg, &d);
    if (st != DS_K_OK) return st;
    st = omni_connector_new(cfg.name, &yr_ops, true, d, out);
    if (st != DS_K_OK) omni__dsconn_free(d);
    return st;
}
