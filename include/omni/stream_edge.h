/* Streaming edges: one request's payload sent as a stream of chunks.
 *
 * On a datasystem-backed connector (YuanrongConnector, SharedMemoryConnector)
 * a producing stage may send a payload piece by piece while it is still being
 * made, and the consuming stage may start on the first piece instead of the
 * last. The edge is a datasystem stream (docs/streams.md) named by the
 * request's usual key, {request_id}{sep}{from_stage}_{to_stage}; each chunk is
 * one element; a last element marks the end, so the consumer never needs to
 * know how many chunks come. Each element starts with one tag byte ('C' a
 * chunk, 'E' the end) followed by the chunk's bytes.
 *
 * The writer's producer retains its elements until one consumer has
 * subscribed, so the reader may open before or after the writer; a reader
 * that subscribes first sees everything too. After the end marker the
 * writer's producer is closed; the reader deletes the stream once it has
 * read the end marker (connector cleanup does not touch streams).
 *
 * The connector option `stream_chunk_size` (extra; bytes, 0 = off, the
 * default) makes plain put/get use this path for raw-bytes payloads:
 * omni_connector_put_chunked / omni_connector_get_chunked below.
 *
 * Threads: a writer or reader is used by one thread at a time.
 * Errors: DS_K_INVALID for a connector that is not datasystem-backed, an
 * empty chunk, or a call after the end; the stream client's codes otherwise;
 * ds_last_error() names what was wrong. */
#ifndef OMNI_STREAM_EDGE_H
#define OMNI_STREAM_EDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/status.h"
#include "omni/connector.h"
#include "omni/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct omni_chunk_writer omni_chunk_writer_t;
typedef struct omni_chunk_reader omni_chunk_reader_t;

/* Opens the sending end of request_id's edge from_stage -> to_stage. */
OMNI_EXPORT ds_status_t omni_chunk_writer_open(omni_connector_t *c, const char *from_stage,
                                               const char *to_stage, const char *request_id,
                                               omni_chunk_writer_t **out);
/* Sends one chunk (1 byte .. DS_SC_ELEMENT_MAX - 1 bytes), visible to the
 * reader at once; waits for room up to the worker's default when the
 * stream is full. */
OMNI_EXPORT ds_status_t omni_chunk_writer_send(omni_chunk_writer_t *w, const void *bytes,
                                               size_t len);
/* Sends the end marker and closes the producer. */
OMNI_EXPORT ds_status_t omni_chunk_writer_end(omni_chunk_writer_t *w);
/* Frees the writer (closing its producer without an end marker if end was
 * not called). NULL is fine. */
OMNI_EXPORT void omni_chunk_writer_free(omni_chunk_writer_t *w);

/* Opens the receiving end of request_id's edge from_stage -> to_stage. */
OMNI_EXPORT ds_status_t omni_chunk_reader_open(omni_connector_t *c, const char *from_stage,
                                               const char *to_stage, const char *request_id,
                                               omni_chunk_reader_t **out);
/* The next chunk, as soon as it is there, waiting up to timeout_ms:
 * DS_K_OK with *out (raw bytes; omni_received_free) and *end false; DS_K_OK
 * with *out NULL and *end true at the end marker (and on every later call);
 * DS_K_NOT_FOUND when nothing came within timeout_ms. */
OMNI_EXPORT ds_status_t omni_chunk_reader_next(omni_chunk_reader_t *r, int32_t timeout_ms,
                                               omni_received_t **out, bool *end);
/* Frees the reader, deleting the stream when the end marker was read. NULL
 * is fine. */
OMNI_EXPORT void omni_chunk_reader_free(omni_chunk_reader_t *r);

/* The chunk size the connector's `stream_chunk_size` extra set (0 = off, or
 * not a datasystem-backed connector). */
OMNI_EXPORT size_t omni_connector_stream_chunk_size(omni_connector_t *c);
/* Sends len bytes as chunks of chunk_size (0: the connector's
 * stream_chunk_size) and the end marker. */
OMNI_EXPORT ds_status_t omni_connector_put_chunked(omni_connector_t *c, const char *from_stage,
                                                   const char *to_stage, const char *request_id,
                                                   const void *bytes, size_t len,
                                                   size_t chunk_size);
/* Receives every chunk up to the end marker and returns them joined as one
 * raw-bytes payload; each wait for a chunk lasts up to timeout_ms
 * (DS_K_NOT_FOUND when one does not come). */
OMNI_EXPORT ds_status_t omni_connector_get_chunked(omni_connector_t *c, const char *from_stage,
                                                   const char *to_stage, const char *request_id,
                                                   int32_t timeout_ms, omni_received_t **out);

#ifdef __cplusplus
}
#endif
#endif
