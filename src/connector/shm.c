/* SharedMemoryConnector: the connector of a pipeline edge whose stages share
 * a host (the transfer config's default edge), with vLLM-Omni's metadata
 * handoff.
 *
 * vLLM-Omni's SharedMemoryConnector puts each payload in a POSIX shared
 * memory segment of its own and hands the consumer {"shm": {"name", "size"},
 * "size"} as metadata. Here the payload goes into the local datasystem
 * worker's arena instead, through the client's shared-memory path (the client
 * must reach the worker through its Unix socket and map the arena; there is
 * no segment per object): the producer writes in place, the consumer reads a
 * view of the arena. The handoff keeps vLLM-Omni's shape, with the datasystem
 * key as the segment name:
 *
 *   put  -> (ok, size, {"shm": {"name": key, "size": size}, "size": size})
 *   get(metadata) reads metadata["shm"]["name"]; an "inline_bytes" bin (what
 *        vLLM-Omni sends for small payloads) is decoded directly; missing or
 *        empty metadata falls back to the deterministic key
 *        {put_key}@{from_stage}_{to_stage} (OmniConnectorBase's), waiting up to
 *        get_sub_timeout_ms for it
 *
 * As a segment is unlinked once read, a payload is consumed by its get (the
 * key is deleted; the reader's pinned view stays valid). Writes use
 * NONE_L2_CACHE, so nothing unconsumed is ever evicted; instead the producer
 * remembers the keys it put, and cleanup(request_id) and close delete any
 * that were not consumed.
 *
 *   extra  host, port: the worker; when absent, the DS_WORKER_ADDRESS
 *          environment variable (host:port), else 127.0.0.1:35001. Also
 *          get_sub_timeout_ms (1000) and the other extras of dsconn.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "connector/builtins.h"
#include "connector/dsconn.h"

static ds_status_t shm_put(void *impl, const char *from_stage, const char *to_stage,
                           const char *put_key, const omni_data_t *data, size_t *size,
                           omni_value_t **metadata)
{
    omni__dsconn_t *d = impl;
    char key[OMNI__KEY_CAP];
    ds_status_t st = omni__dsconn_key(d, put_key, from_stage, to_stage, key);
    if (st == DS_K_OK && data->kind == OMNI_DATA_BYTES && data->len == 0)
        st = ds__set_error(DS_K_INVALID, "SharedMemoryConnector put '%s': the payload is empty",
                           key);
    if (st != DS_K_OK) {
        omni__dsconn_count_error(d);
        return st;
    }
    omni_value_t *md = omni_value_new_map(), *shm = omni_value_new_map();
    if (md == NULL || shm == NULL) {
        omni_value_free(md);
        omni_value_free(shm);
        omni__dsconn_count_error(d);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for the metadata of '%s'", key);
    }
    st = omni__dsconn_write(d, key, data, size);
    if (st == DS_K_OK) st = omni__keytrack_add(d->track, put_key, key, from_stage, to_stage);
    if (st == DS_K_OK) st = omni_map_set(shm, "name", omni_value_new_str(key));
    if (st == DS_K_OK) st = omni_map_set(shm, "size", omni_value_new_uint(*size));
    if (st == DS_K_OK) {
        st = omni_map_set(md, "shm", shm);
        shm = NULL;
    }
    if (st == DS_K_OK) st = omni_map_set(md, "size", omni_value_new_uint(*size));
    omni_value_free(shm);
    if (st != DS_K_OK) {
        omni_value_free(md);
        return st;
    }
    *metadata = md;
    return DS_K_OK;
}

/* The key metadata names, or "" when the metadata names none. */
static ds_status_t key_from_metadata(const omni_value_t *metadata, char *key)
{
    key[0] = '\0';
    const omni_value_t *shm = omni_map_get(metadata, "shm");
    if (shm == NULL || omni_value_type(shm) == OMNI_NIL) return DS_K_OK;
    const char *name;
    size_t len;
    if (omni_value_get_str(omni_map_get(shm, "name"), &name, &len) != DS_K_OK)
        return ds__set_error(DS_K_INVALID,
                             "SharedMemoryConnector get: metadata \"shm\" has no string \"name\"");
    if (len >= OMNI__KEY_CAP || ds_key_validate(name, len) != DS_K_OK)
        return ds__set_error(DS_K_INVALID,
                             "SharedMemoryConnector get: metadata names '%.*s', not a key",
                             (int)(len < 64 ? len : 64), name);
    memcpy(key, name, len);
    key[len] = '\0';
    return DS_K_OK;
}

static ds_status_t shm_get(void *impl, const char *from_stage, const char *to_stage,
                           const char *get_key, const omni_value_t *metadata, omni_received_t **out)
{
    omni__dsconn_t *d = impl;
    char key[OMNI__KEY_CAP] = "";
    ds_status_t st = DS_K_OK;
    if (metadata != NULL) {
        const void *bytes;
        size_t len;
        if (omni_value_get_bin(omni_map_get(metadata, "inline_bytes"), &bytes, &len) == DS_K_OK)
            return omni__dsconn_wrap_copy(d, "inline_bytes", bytes, len, out);
        st = key_from_metadata(metadata, key);
    }
    if (st == DS_K_OK && key[0] == '\0')
        st = omni__dsconn_key(d, get_key, from_stage, to_stage, key);
    if (st != DS_K_OK) {
        omni__dsconn_count_error(d);
        return st;
    }
    omni__keytrack_add_edge(d->track, from_stage, to_stage);
    st = omni__dsconn_read(d, key, d->get_timeout_ms, out);
    if (st != DS_K_OK) return st;
    /* Consumed: the view stays valid (the buffer pins this version). A
     * failed delete is left to the producer's cleanup or close. */
    const char *keys[1] = {key};
    (void)ds_kv_del(d->client, 1, keys, NULL);
    omni__keytrack_drop(d->track, get_key, key);
    return DS_K_OK;
}

static ds_status_t shm_cleanup(void *impl, const char *request_id)
{
    return omni__dsconn_cleanup(impl, request_id);
}

static void shm_health(void *impl, omni_health_t *out)
{
    omni__dsconn_health(impl, out);
}

/* Reclaims every payload put here that nobody consumed, then disconnects. */
static void shm_close(void *impl)
{
    omni__dsconn_t *d = impl;
    char **keys = NULL;
    size_t n = 0;
    if (omni__keytrack_take_all(d->track, &keys, &n) == DS_K_OK && n > 0)
        (void)omni__dsconn_delete(d, keys, n);
    omni__keys_free(keys, n);
    omni__dsconn_close(d);
}

static void shm_destroy(void *impl)
{
    omni__dsconn_free(impl);
}

static const omni_connector_ops_t shm_ops = {
    shm_put, shm_get, shm_cleanup, shm_health, shm_close, shm_destroy,
};

bool omni__shm_ops(const omni_connector_ops_t *ops)
{
    return ops == &shm_ops;
}

ds_status_t omni__shm_create(const omni_connector_spec_t *spec, void *user, omni_connector_t **out)
{
    (void)user;
    omni__dsconn_cfg_t cfg = {
        "SharedMemoryConnector", '@',         DS_WRITE_NONE_L2_CACHE,
        DS_TRANSPORT_LOCAL,      "127.0.0.1", 35001,
    };
    /* A default edge carries no extra: the environment says where the local
     * worker is. */
    char host[256];
    const char *env = getenv("DS_WORKER_ADDRESS");
    const char *colon = env != NULL ? strrchr(env, ':') : NULL;
    if (colon != NULL && colon > env && (size_t)(colon - env) < sizeof(host)) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end != '\0' || port < 1 || port > 65535)
            return ds__set_error(DS_K_INVALID, "DS_WORKER_ADDRESS '%s' is not host:port", env);
        snprintf(host, sizeof(host), "%.*s", (int)(colon - env), env);
        cfg.host = host;
        cfg.port = (int)port;
    } else if (env != NULL && env[0] != '\0') {
        return ds__set_error(DS_K_INVALID, "DS_WORKER_ADDRESS '%s' is not host:port", env);
    }
    omni__dsconn_t *d = NULL;
    ds_status_t st = omni__dsconn_open(spec, &cfg, &d);
    if (st != DS_K_OK) return st;
    st = omni_connector_new(cfg.name, &shm_ops, true, d, out);
    if (st != DS_K_OK) omni__dsconn_free(d);
    return st;
}
