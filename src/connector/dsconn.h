/* The part the datasystem-backed connectors (YuanrongConnector in
 * yuanrong.c, SharedMemoryConnector in shm.c) share: reading the common
 * `extra` entries, the worker connection, writing a payload under a key (the
 * serializer path and the raw bytes/tensor path), reading one back with a
 * single subscribe-get into a pinned buffer, deleting keys, and the health
 * counters.
 *
 * Payload encoding. Whatever the path, the stored bytes are one
 * OmniSerializer document, so any consumer (C or vLLM-Omni's Python) decodes
 * them: a value is encoded straight into the destination buffer; raw bytes
 * are a msgpack bin header followed by the bytes; a raw tensor is the
 * serializer's tensor-map header (omni_tensor_encode_header) followed by the
 * data. Payloads from OMNI__INPLACE_MIN bytes up are written in place into a
 * buffer from ds_kv_create (in the worker's arena for a local client) and
 * published; smaller ones are built in a private buffer and sent with one
 * ds_kv_set, which saves a round trip where the copy costs nothing.
 *
 * Reading classifies the bytes: a document that is exactly one bin comes back
 * as OMNI_DATA_BYTES viewing the bin's contents, a tensor map as
 * OMNI_DATA_TENSOR, anything else as OMNI_DATA_VALUE; value and tensor
 * documents are decoded once here, so corrupt bytes are a decode error of
 * get, not a surprise later. The received payload pins the datasystem buffer
 * (a zero-copy view of the arena for a local client) until it is freed.
 *
 * Counters (omni_health_t): puts and gets count successes, bytes_transferred
 * the stored bytes of both. errors counts every failed call except a get that
 * found nothing; transport_errors the failures the datasystem client reported
 * (worker unreachable, out of memory, ...), decode_errors the gets whose bytes
 * were no OmniSerializer document. A get that found nothing is a timeout when
 * it waited (get_sub_timeout_ms > 0) and not_found when it did not: the two
 * causes the spec's coarse `timeouts` mixes are kept apart. */
#ifndef OMNI_CONNECTOR_DSCONN_H
#define OMNI_CONNECTOR_DSCONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "connector/keytrack.h"
#include "ds/kv_client.h"
#include "omni/connector.h"

/* Payloads from this size up are written in place (create + publish): one
 * copy of the data, into the arena. 64 KiB is the worker's default
 * inline_max: below it a ds_kv_set is one round trip carrying the bytes
 * inline, the in-place path two (CREATE, PUBLISH), so set is faster; above it
 * a set is CREATE + copy + PUBLISH itself, after this connector's private
 * encoding, so in place is never slower and saves a copy. The Python
 * connector uses the same threshold (_RAW_INPLACE_MIN). */
#define OMNI__INPLACE_MIN (64u * 1024u)
/* Longest datasystem key plus its NUL. */
#define OMNI__KEY_CAP (DS_MAX_KEY_LEN + 1)

/* What differs between the connectors built on this core. */
typedef struct {
    const char *name;         /* factory name, for messages */
    char sep;                 /* key separator: ':' Yuanrong, '@' OmniConnectorBase */
    ds_write_mode_t mode;     /* write mode of every write */
    ds_transport_t transport; /* unless `extra` transport says otherwise */
    const char *host;         /* defaults for `extra` host and port */
    int port;
} omni__dsconn_cfg_t;

typedef struct {
    char name[32];
    char sep;
    char host[256];
    int port;
    int32_t get_timeout_ms;
    /* extra stream_chunk_size: 0 = off; else put sends a raw-bytes payload
     * as a stream of chunks of this size (omni/stream_edge.h). */
    int64_t stream_chunk_size;
    ds_set_param_t param;
    ds_client_t *client; /* NULL after close */
    omni__keytrack_t *track;
    atomic_uint_fast64_t puts, gets, bytes, errors, timeouts, not_found, transport, decode;
    atomic_bool worker_down; /* the last call that reached for the worker failed */
} omni__dsconn_t;

/* Reads the common extras (host, port, get_sub_timeout_ms, connect_timeout_ms,
 * request_timeout_ms, transport, unix_socket_dir, max_tracked_requests,
 * stream_chunk_size) and
 * connects. DS_K_INVALID names a bad extra; an unreachable worker fails with
 * the client's code and "cannot reach the datasystem worker at host:port". */
ds_status_t omni__dsconn_open(const omni_connector_spec_t *spec, const omni__dsconn_cfg_t *cfg,
                              omni__dsconn_t **out);
/* Drops the worker connection (buffers handed out stay valid). */
void omni__dsconn_close(omni__dsconn_t *d);
void omni__dsconn_free(omni__dsconn_t *d);

/* "{key}{sep}{from}_{to}" into buf (OMNI__KEY_CAP bytes), checked against the
 * datasystem key rules. */
ds_status_t omni__dsconn_key(omni__dsconn_t *d, const char *key, const char *from, const char *to,
                             char *buf);
/* Stores data under key; *size = bytes stored. Counts puts or errors. */
ds_status_t omni__dsconn_write(omni__dsconn_t *d, const char *key, const omni_data_t *data,
                               size_t *size);
/* One subscribe-get of key waiting up to timeout_ms; DS_K_NOT_FOUND when
 * nothing came. Counts gets, timeouts, not_found or errors. */
ds_status_t omni__dsconn_read(omni__dsconn_t *d, const char *key, int32_t timeout_ms,
                              omni_received_t **out);
/* Wraps bytes already in memory (a copy) the way read classifies them. */
ds_status_t omni__dsconn_wrap_copy(omni__dsconn_t *d, const char *what, const void *data,
                                   size_t len, omni_received_t **out);
/* Deletes n keys (a missing key is fine). Counts errors. */
ds_status_t omni__dsconn_delete(omni__dsconn_t *d, char *const *keys, size_t n);
/* Deletes what request_id left: its tracked keys and its deterministic key
 * on every known edge (omni__keytrack_take). */
ds_status_t omni__dsconn_cleanup(omni__dsconn_t *d, const char *request_id);
/* Counts a failure of the caller's own (errors only). */
void omni__dsconn_count_error(omni__dsconn_t *d);
void omni__dsconn_health(omni__dsconn_t *d, omni_health_t *out);

#endif
