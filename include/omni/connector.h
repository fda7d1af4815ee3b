/* The OmniConnector contract in C (libomniconn).
 *
 * A connector moves one payload from a producing stage to a consuming stage of
 * an inference pipeline under a key the consumer can rebuild: put(from_stage,
 * to_stage, put_key, payload) -> (ok, size, metadata or none) on one side,
 * get(from_stage, to_stage, get_key, metadata) -> payload and size, or none, on
 * the other, as vLLM-Omni's OmniConnectorBase defines it. Concrete connectors
 * (YuanrongConnector, SharedMemoryConnector, test doubles) implement the
 * omni_connector_ops_t vtable; callers only see the opaque omni_connector_t and
 * the omni_connector_* calls, and build connectors by name through the factory
 * from an omni_connector_spec_t, usually one from the transfer config
 * (omni/transfer_config.h).
 *
 * Payloads: an omni_data_t names what to send: an omni_value_t (encoded in
 * OmniSerializer's format, omni/serializer.h), raw bytes, or a raw tensor. A
 * connector that does not set supports_raw_data only ever sees values: raw
 * bytes and tensors are wrapped for it (as a msgpack bin, or a tensor map)
 * without copying. What get returns is an omni_received_t that owns the bytes
 * (a private copy, or a buffer the connector pins, such as a datasystem arena
 * buffer) and decodes them on demand with zero-copy views.
 *
 * Metadata is a small omni_value_t map (or none, NULL), e.g. {"source_host":
 * ..., "data_size": ...}; a connector that needs no side channel returns none.
 *
 * Threads: the omni_connector_* calls may be made from many threads at once;
 * close waits for calls in flight to finish and later calls fail with
 * DS_K_NOT_READY. The factory's registry is shared by all threads.
 *
 * Errors: every call returns a ds_status_t; ds_last_error() gives the message. */
#ifndef OMNI_CONNECTOR_H
#define OMNI_CONNECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/status.h"
#include "omni/export.h"
#include "omni/serializer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- connector specs ---- */

/* One `extra` entry. value is the YAML/JSON scalar's text ("35000" for both
 * `port: 35000` and `port: "35000"`), a compact JSON text for a nested list or
 * map, or NULL for null. */
typedef struct {
    const char *key;
    const char *value;
} omni_kv_t;

/* ConnectorSpec{name, extra}. The strings belong to whoever filled the struct
 * (the transfer config, or the caller); a connector copies what it keeps. */
typedef struct {
    const char *name; /* "YuanrongConnector" */
    const omni_kv_t *extra;
    size_t n_extra;
} omni_connector_spec_t;

/* The text of extra[key] (the last entry with that key), or NULL when absent
 * or null. */
OMNI_EXPORT const char *omni_spec_get(const omni_connector_spec_t *spec, const char *key);
/* omni_spec_get, or def when absent or null. */
OMNI_EXPORT const char *omni_spec_get_string(const omni_connector_spec_t *spec, const char *key,
                                             const char *def);
/* Typed getters: *out = the parsed value, or def when the key is absent or
 * null. DS_K_INVALID (naming connector, key and text) when the text is not a
 * decimal integer in int64 range / a number / a boolean (true/false, yes/no,
 * on/off, 1/0, any case). */
OMNI_EXPORT ds_status_t omni_spec_get_int(const omni_connector_spec_t *spec, const char *key,
                                          int64_t def, int64_t *out);
OMNI_EXPORT ds_status_t omni_spec_get_double(const omni_connector_spec_t *spec, const char *key,
                                             double def, double *out);
OMNI_EXPORT ds_status_t omni_spec_get_bool(const omni_connector_spec_t *spec, const char *key,
                                           bool def, bool *out);

/* ---- payloads ---- */

typedef enum {
    OMNI_DATA_VALUE = 0,  /* an omni_value_t, sent in OmniSerializer's format */
    OMNI_DATA_BYTES = 1,  /* raw bytes */
    OMNI_DATA_TENSOR = 2, /* a raw tensor: dtype, shape, contiguous data */
} omni_data_kind_t;

/* What put sends. Only the fields of the chosen kind are read, and only during
 * the call. A tensor view's mode must be NULL. */
typedef struct {
    omni_data_kind_t kind;
    const omni_value_t *value;
    const void *bytes;
    size_t len;
    omni_tensor_view_t tensor;
} omni_data_t;

static inline omni_data_t omni_data_value(const omni_value_t *value)
{
    omni_data_t d = {
        OMNI_DATA_VALUE, value, NULL, 0, {OMNI_DTYPE_INVALID, 0, NULL, 0, NULL, 0, NULL}};
    return d;
}

static inline omni_data_t omni_data_bytes(const void *bytes, size_t len)
{
    omni_data_t d = {
        OMNI_DATA_BYTES, NULL, bytes, len, {OMNI_DTYPE_INVALID, 0, NULL, 0, NULL, 0, NULL}};
    return d;
}

static inline omni_data_t omni_data_tensor(const omni_tensor_view_t *tensor)
{
    omni_data_t d = {OMNI_DATA_TENSOR, NULL, NULL, 0, *tensor};
    return d;
}

/* A payload get handed back. It owns its bytes until omni_received_free. */
typedef struct omni_received omni_received_t;

/* For connector implementations: wraps len bytes at data without copying.
 * kind says what the bytes are: an OmniSerializer document (VALUE), raw bytes
 * (BYTES) or a lone tensor in the tensor-map encoding (TENSOR). release(ctx)
 * runs once, from omni_received_free, or on failure here (release may be
 * NULL when the bytes need no release). */
OMNI_EXPORT ds_status_t omni_received_new(omni_data_kind_t kind, const void *data, size_t len,
                                          void (*release)(void *ctx), void *ctx,
                                          omni_received_t **out);
/* Same, with a private copy of the bytes. */
OMNI_EXPORT ds_status_t omni_received_copy(omni_data_kind_t kind, const void *data, size_t len,
                                           omni_received_t **out);
OMNI_EXPORT omni_data_kind_t omni_received_kind(const omni_received_t *r);
/* The received bytes; valid until omni_received_free. */
OMNI_EXPORT const void *omni_received_data(const omni_received_t *r);
/* The payload size get reports (the serialized or raw byte count). */
OMNI_EXPORT size_t omni_received_size(const omni_received_t *r);
/* Decodes a VALUE or TENSOR payload (once; later calls return the same tree)
 * into a read-only tree viewing the received bytes; it lives until
 * omni_received_free. DS_K_INVALID for a BYTES payload or malformed bytes. */
OMNI_EXPORT ds_status_t omni_received_value(omni_received_t *r, const omni_value_t **out);
/* The tensor of a TENSOR payload, or of a VALUE payload whose root is a
 * tensor, ndarray or image. */
OMNI_EXPORT ds_status_t omni_received_tensor(omni_received_t *r, omni_tensor_view_t *out);
/* Releases the bytes and any decoded tree. NULL is fine. */
OMNI_EXPORT void omni_received_free(omni_received_t *r);

/* ---- health ---- */

/* Counters since the connector was created; the first five are the ones the
 * Python connectors report, the rest split errors by cause. */
typedef struct {
    bool healthy;
    char status[32]; /* "healthy", "closed", or the connector's own word */
    uint64_t puts;
    uint64_t gets;
    uint64_t bytes_transferred;
    uint64_t errors;
    uint64_t timeouts;
    uint64_t not_found;
    uint64_t transport_errors;
    uint64_t decode_errors;
} omni_health_t;

/* ---- the connector interface ---- */

typedef struct omni_connector omni_connector_t;

/* What a connector implements. impl is the pointer given to
 * omni_connector_new. The wrapper has already checked the arguments (non-NULL
 * stages and keys, a well-formed omni_data_t) and the connector's state, so a
 * connector only does its work. Every entry except close and destroy is
 * required. */
typedef struct {
    /* Store data under a key built from put_key and the stages. Set *size to
     * the bytes sent and *metadata to a new map or leave it NULL (none). */
    ds_status_t (*put)(void *impl, const char *from_stage, const char *to_stage,
                       const char *put_key, const omni_data_t *data, size_t *size,
                       omni_value_t **metadata);
    /* Fetch what put stored; DS_K_NOT_FOUND (out NULL) is "none": nothing
     * there within the connector's wait. metadata is what put returned, or
     * NULL. */
    ds_status_t (*get)(void *impl, const char *from_stage, const char *to_stage,
                       const char *get_key, const omni_value_t *metadata, omni_received_t **out);
    /* Release what a request left behind. */
    ds_status_t (*cleanup)(void *impl, const char *request_id);
    /* Fill counters; out arrives zeroed with healthy true and status "healthy". */
    void (*health)(void *impl, omni_health_t *out);
    /* Drop backend resources (connections, mappings). Called once. */
    void (*close)(void *impl);
    /* Free impl. Called once, by omni_connector_free, after close. */
    void (*destroy)(void *impl);
} omni_connector_ops_t;

/* For connector implementations: wraps impl in a handle. name is copied; ops
 * must outlive the handle (a static table). If this fails, impl is not
 * destroyed: the caller still owns it. */
OMNI_EXPORT ds_status_t omni_connector_new(const char *name, const omni_connector_ops_t *ops,
                                           bool supports_raw_data, void *impl,
                                           omni_connector_t **out);

/* put: DS_K_OK with *size = serialized bytes and *metadata = a map (free with
 * omni_value_free) or NULL. size and metadata may be NULL when not wanted. */
OMNI_EXPORT ds_status_t omni_connector_put(omni_connector_t *c, const char *from_stage,
                                           const char *to_stage, const char *put_key,
                                           const omni_data_t *data, size_t *size,
                                           omni_value_t **metadata);
/* get: DS_K_OK with *out (free with omni_received_free), DS_K_NOT_FOUND for
 * none, or another error. metadata may be NULL. */
OMNI_EXPORT ds_status_t omni_connector_get(omni_connector_t *c, const char *from_stage,
                                           const char *to_stage, const char *get_key,
                                           const omni_value_t *metadata, omni_received_t **out);
OMNI_EXPORT ds_status_t omni_connector_cleanup(omni_connector_t *c, const char *request_id);
/* Works after close too (status "closed", healthy false). */
OMNI_EXPORT ds_status_t omni_connector_health(omni_connector_t *c, omni_health_t *out);
/* Releases backend resources; idempotent. The handle stays valid (calls on it
 * fail with DS_K_NOT_READY) until omni_connector_free. NULL is fine. */
OMNI_EXPORT void omni_connector_close(omni_connector_t *c);
/* Closes if needed and frees the handle. NULL is fine. */
OMNI_EXPORT void omni_connector_free(omni_connector_t *c);
OMNI_EXPORT const char *omni_connector_name(const omni_connector_t *c);
/* True when put accepts raw bytes and tensors without serialization. */
OMNI_EXPORT bool omni_connector_supports_raw_data(const omni_connector_t *c);

/* Builds "{key}{sep}{from_stage}_{to_stage}" into buf: sep '@' is
 * OmniConnectorBase's default, ':' YuanrongConnector's. DS_K_INVALID when it
 * does not fit in cap bytes (with the NUL). */
OMNI_EXPORT ds_status_t omni_connector_make_key(const char *key, const char *from_stage,
                                                const char *to_stage, char sep, char *buf,
                                                size_t cap);

/* ---- factory ---- */

/* Builds a connector from a spec (valid only during the call). user is the
 * pointer given at registration. On failure the constructor returns its code,
 * leaves *out untouched and sets its message through the usual error path. */
typedef ds_status_t (*omni_connector_ctor_t)(const omni_connector_spec_t *spec, void *user,
                                             omni_connector_t **out);

/* Registers a constructor under a name (copied). DS_K_DUPLICATED when the name
 * is taken, the built-in connectors' names included. */
OMNI_EXPORT ds_status_t omni_factory_register(const char *name, omni_connector_ctor_t ctor,
                                              void *user);
/* DS_K_NOT_FOUND when nothing is registered under name. */
OMNI_EXPORT ds_status_t omni_factory_unregister(const char *name);
OMNI_EXPORT bool omni_factory_is_registered(const char *name);
/* Writes the registered names, in registration order, ", "-separated, into
 * buf (truncated to cap) and returns how many there are. */
OMNI_EXPORT size_t omni_factory_list(char *buf, size_t cap);
/* Creates the connector spec->name names. DS_K_NOT_FOUND for an unknown name,
 * with a message listing the registered names; a constructor's failure comes
 * back with its code and "failed to create connector NAME: ..." */
OMNI_EXPORT ds_status_t omni_factory_create(const omni_connector_spec_t *spec,
                                            omni_connector_t **out);

#ifdef __cplusplus
}
#endif
#endif
