/* Streams: Yuanrong's stream cache over a ds_client_t (docs/streams.md).
 *
 * A producer appends elements (non-empty byte strings) to a named stream; a
 * consumer, through its subscription, receives them in order, each with the
 * id the worker gave it (from 1), and acknowledges them; the worker frees a
 * page once every subscription has acknowledged it. A stream holds at most
 * max_stream_size bytes of pages: a send past that waits for acks, up to its
 * timeout, then fails DS_K_OUT_OF_MEMORY.
 *
 * Ownership: ds_stream_create_producer and ds_stream_subscribe hand out a
 * handle that ds_producer_close / ds_consumer_close release (always, also
 * when they report an error). A handle keeps a reference on its client: the
 * client's memory lives until its handles are closed, but once
 * ds_client_close has run, calls on them fail. ds_consumer_receive hands out
 * an array of elements, released with ds_elements_free. A local consumer
 * (one whose client maps the worker's shared memory) reads the elements in
 * place, in the stream's pages, zero copy: their bytes stay valid until
 * the consumer acknowledges them (ds_consumer_ack of their id or a later
 * one) or closes, whichever comes first, so acknowledge only what has been
 * read. A remote consumer's bytes are copies that live in the array until
 * ds_elements_free (DS_STREAM_IN_PLACE=0 gives local consumers copies too).
 * Names and element bytes passed in are only read during the call.
 *
 * Thread safety: a handle is used by one thread at a time; different
 * handles of one client may be used from different threads at once.
 *
 * Errors: every call returns a ds_status_t; ds_last_error() names what was
 * wrong. Codes are Yuanrong's: DS_K_SC_PRODUCER_NOT_FOUND and
 * DS_K_SC_CONSUMER_NOT_FOUND for a handle the worker no longer has (the
 * client reconnected to a new session), DS_K_SC_STREAM_IN_USE for a delete
 * while producers or consumers are open, DS_K_SC_STREAM_NOT_FOUND. */
#ifndef DATASYSTEM_STREAM_CLIENT_H
#define DATASYSTEM_STREAM_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/export.h"
#include "ds/kv_client.h"
#include "ds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest element, and largest sum of one batch's elements: a send travels
 * in one frame's metadata. */
#define DS_SC_ELEMENT_MAX (64u << 20)

typedef struct ds_producer ds_producer_t;
typedef struct ds_consumer ds_consumer_t;

/* Yuanrong's ProducerConf; defaults from DS_PRODUCER_CONF_INIT. */
typedef struct {
    int64_t delay_flush_time_ms; /* 5; sends are received within this long (0: at once) */
    int64_t page_size;           /* 1 MiB; a multiple of 4 KiB, at most 16 MiB */
    uint64_t max_stream_size;    /* 100 MiB; >= 64 KiB and >= twice page_size */
    bool auto_cleanup;           /* delete the stream when its last producer and consumer close */
    uint64_t
        retain_for_num_consumers; /* keep elements until this many consumers subscribed (<= 16) */
    bool encrypt_stream;          /* accepted; nothing leaves this worker */
    uint64_t reserve_size;        /* 0 = page_size; a multiple of page_size <= max_stream_size */
} ds_producer_conf_t;

#define DS_PRODUCER_CONF_INIT                                                                      \
    {                                                                                              \
        5, 1 << 20, 100u << 20, false, 0, false, 0                                                 \
    }

typedef enum {
    DS_SUB_STREAM = 0,
    DS_SUB_ROUND_ROBIN = 1,   /* consumers share it: each element to one, in turn */
    DS_SUB_KEY_PARTITIONS = 2 /* consumers share it: each producer's elements to one */
} ds_subscription_type_t;

typedef struct {
    const uint8_t *ptr;
    uint64_t size;
    uint64_t id;
} ds_element_t;

/* conf NULL: the defaults. */
DS_EXPORT ds_status_t ds_stream_create_producer(ds_client_t *c, const char *stream_name,
                                                const ds_producer_conf_t *conf,
                                                ds_producer_t **out);
/* Appends one element. timeout_ms < 0: wait for room up to the worker's
 * default (60 s); 0: fail at once when the stream is full. */
DS_EXPORT ds_status_t ds_producer_send(ds_producer_t *p, const void *data, size_t len,
                                       int64_t timeout_ms);
/* Appends n elements in order in one request (all or, on error, a prefix). */
DS_EXPORT ds_status_t ds_producer_send_batch(ds_producer_t *p, size_t n, const void *const *data,
                                             const size_t *lens, int64_t timeout_ms);
/* Closes and frees the handle (also on error). */
DS_EXPORT ds_status_t ds_producer_close(ds_producer_t *p);

DS_EXPORT ds_status_t ds_stream_subscribe(ds_client_t *c, const char *stream_name,
                                          const char *subscription_name,
                                          ds_subscription_type_t type, ds_consumer_t **out);
/* Receives up to expect_num elements (0 = any number, as receive_any),
 * waiting up to timeout_ms for expect_num (or, with 0, for one) to be
 * there; then returns what there is, possibly none (*n = 0, *out NULL).
 * expect_num and timeout_ms at most INT32_MAX. *out: ds_elements_free. */
DS_EXPORT ds_status_t ds_consumer_receive(ds_consumer_t *cs, uint32_t expect_num,
                                          uint32_t timeout_ms, ds_element_t **out, size_t *n);
DS_EXPORT void ds_elements_free(ds_element_t *elements);
/* Done with every element up to element_id. */
DS_EXPORT ds_status_t ds_consumer_ack(ds_consumer_t *cs, uint64_t element_id);
/* Closes and frees the handle (also on error). */
DS_EXPORT ds_status_t ds_consumer_close(ds_consumer_t *cs);

DS_EXPORT ds_status_t ds_stream_delete(ds_client_t *c, const char *stream_name);
/* Workers with a producer on the stream (Yuanrong counts per worker). */
DS_EXPORT ds_status_t ds_stream_query_global_producer_num(ds_client_t *c, const char *stream_name,
                                                          uint64_t *out);
DS_EXPORT ds_status_t ds_stream_query_global_consumer_num(ds_client_t *c, const char *stream_name,
                                                          uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif
