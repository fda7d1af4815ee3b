/* Streams (Yuanrong's stream cache) on the worker: named streams of
 * elements in arena pages, producers, STREAM subscriptions with cursors and
 * acks, page reclamation and flow control. Design: docs/streams.md. Runs on
 * the event loop only; no locks. stream.c holds the state and its rules,
 * stream_ops.c the opcodes' wire layouts. */
#ifndef DS_WORKER_OPS_STREAM_H
#define DS_WORKER_OPS_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/dict.h"
#include "worker/net/request.h"

typedef struct ds_server ds_server_t;

/* Yuanrong's limits (stream_client_impl.cpp's VerifyProducerConfig). */
#define DS_SC_MIN_PAGE 4096u
#define DS_SC_MAX_PAGE (16u << 20)
#define DS_SC_MIN_STREAM (64u << 10)
#define DS_SC_MAX_RETAIN 16u
/* Most bytes of elements one RECEIVE answer carries (at least one element). */
#define DS_SC_RECV_MAX_BYTES (64u << 20)
#define DS_SC_NAME_MAX 1024u

typedef struct sc_page {
    struct sc_page *next;
    ds_obj_t *space; /* the arena range (a keyless reservation) */
    uint8_t *base;
    uint64_t cap, used;
    uint64_t first_id; /* id of its first element */
    uint32_t n, ncap;
    uint64_t *off; /* off[i]: element i's start in the page; its end is off[i+1] or used */
} sc_page_t;

struct sc_stream;

/* A ROUND_ROBIN / KEY_PARTITIONS element handed to one consumer: its id and
 * its key (the producer it came from). */
typedef struct {
    uint64_t id, key;
} sc_qent_t;

typedef struct {
    uint64_t key;
    struct sc_end *e;
} sc_keymap_t;

typedef struct sc_sub {
    struct sc_sub *next;
    char *name;
    uint32_t name_len;
    uint8_t type;    /* DS_SC_SUB_* */
    uint64_t cursor; /* the next id it delivers (shared types: hands out) */
    uint64_t acked;  /* STREAM: every id <= acked is done with */
    struct sc_end *consumer;
    /* ROUND_ROBIN / KEY_PARTITIONS (stream_sub.c): its consumers in the
     * order they joined, whose turn is next, and each key's consumer. */
    struct sc_end **cons;
    uint32_t ncons, capcons, turn;
    sc_keymap_t *keys;
    uint32_t nkeys, capkeys;
} sc_sub_t;

#define DS_SC_SUB_STREAM 0
#define DS_SC_SUB_ROUND_ROBIN 1
#define DS_SC_SUB_KEY_PARTITIONS 2

/* A producer or a consumer: a client's handle, found by id. */
typedef struct sc_end {
    ds_dict_node_t node;
    uint64_t id;
    bool consumer;
    struct sc_stream *st;
    sc_sub_t *sub; /* a consumer's subscription */
    const void *session;
    uint32_t delay_ms; /* a producer's delay_flush_time_ms */
    /* A consumer of a shared subscription: the elements handed to it,
     * q[0, qdeliv) received and not acknowledged, q[qdeliv, qn) not yet
     * received (ascending ids); the highest id it received. */
    sc_qent_t *q;
    uint32_t qdeliv, qn, qcap;
    uint64_t max_deliv;
} sc_end_t;

typedef struct sc_stream {
    ds_dict_node_t node;
    char *name;
    uint32_t name_len;
    bool configured; /* a producer set page_size etc. (subscribe alone uses defaults) */
    uint64_t page_size, max_size, retain, reserve;
    bool auto_cleanup;
    sc_page_t *head, *tail;
    uint64_t bytes;   /* bytes of its pages */
    uint64_t next_id; /* the id the next element gets (from 1) */
    /* delay_flush_time_ms: elements are received at once by a receive that
     * looks, but parked receives are woken by the flush, due at flush_at
     * (ms, 0 = none). */
    uint64_t flush_at;
    uint32_t producers, consumers;
    uint64_t ever_consumers;
    sc_sub_t *subs;
} sc_stream_t;

/* A parked RECEIVE or SEND. */
typedef struct sc_wait {
    struct sc_wait *prev, *next;
    ds_server_t *srv;
    ds_req_t *req;
    uint64_t end_id;
    bool send;
    bool push;         /* SEND: an SC_PEER_PUSH from another worker (no producer handle) */
    uint32_t expect;   /* RECEIVE: elements wanted (0 = any) */
    bool in_place;     /* RECEIVE: answered with arena offsets (ds__sc_reply_elements) */
    uint32_t done;     /* SEND: elements appended so far */
    uint64_t deadline; /* ms */
    int32_t timeout_ms;
} sc_wait_t;

typedef struct ds_streams {
    ds_dict_t streams; /* name -> sc_stream_t */
    ds_dict_t ends;    /* id -> sc_end_t */
    uint64_t next_end;
    sc_wait_t *waits;
    uint64_t bytes;      /* all streams' pages */
    uint64_t woken;      /* parked receives answered by wakes, ever */
    uint64_t append_key; /* the key of the elements being appended (the producer) */
    bool append_delay;   /* ... and their producer delays its flush */
    uint32_t flushes;    /* streams with a flush_at */
    uint64_t metrics_at; /* when --sc_metrics_log_interval_s next logs (ms) */
} ds_streams_t;

/* Handles SC_* opcodes (stream_ops.c). */
void ds__stream_dispatch(ds_server_t *srv, ds_req_t *r);
/* A client's session ended: its producers and consumers close. */
void ds__stream_session_end(ds_server_t *srv, const void *session);
/* Parked waits past their deadline are answered; returns the next deadline
 * (0 = none). */
uint64_t ds__stream_tick(ds_server_t *srv, uint64_t now);
void ds__stream_destroy(ds_server_t *srv);
struct cJSON;
/* STATS "streams": streams, producers, consumers, pages (bytes), waits. */
void ds__stream_stats(ds_server_t *srv, struct cJSON *root);
/* The same figures as one info log line (--sc_metrics_log_interval_s). */
void ds__stream_log_metrics(ds_server_t *srv);

/* stream.c, for stream_ops.c */
ds_streams_t *ds__sc_get(ds_server_t *srv); /* made on first use; NULL on OOM */
sc_stream_t *ds__sc_find(ds_streams_t *S, const char *name, uint32_t len);
sc_stream_t *ds__sc_make(ds_streams_t *S, const char *name, uint32_t len);
sc_end_t *ds__sc_end(ds_streams_t *S, uint64_t id);
sc_end_t *ds__sc_end_new(ds_streams_t *S, sc_stream_t *st, bool consumer, const void *session);
/* Closes a producer or consumer (its waits fail), reclaims, and removes an
 * auto_cleanup stream left without either. */
void ds__sc_close(ds_server_t *srv, sc_end_t *e);
void ds__sc_delete(ds_server_t *srv, sc_stream_t *st);
/* Appends elements (lens[i] bytes each, back to back in data) from *done
 * on; returns DS_K_OK when all are in, DS_K_TRY_AGAIN when the stream is at
 * its size limit (or the arena full) with *done appended, or an error. */
ds_status_t ds__sc_append(ds_server_t *srv, sc_stream_t *st, const uint8_t *const *els,
                          const uint32_t *lens, uint32_t n, uint32_t *done, const char *origin,
                          uint32_t origin_len);
/* The stream's producer or consumer count changed: its owner hears of it. */
void ds__sc_counts_changed(ds_server_t *srv, sc_stream_t *st);
/* Every local stream's counts go to its owner again (the ring changed). */
void ds__stream_reregister(ds_server_t *srv);
/* Frees pages every subscription has acknowledged; wakes waits. */
void ds__sc_reclaim(ds_server_t *srv, sc_stream_t *st);
/* Wakes the stream's parked receives that can be answered and sends that
 * may go on (st NULL: every stream's). */
void ds__sc_wake(ds_server_t *srv, sc_stream_t *st);
/* Answers a RECEIVE for consumer e with up to max elements (0 = any):
 * their bytes as the answer's data, or, in_place (a client that maps the
 * arena), each element's arena offset instead; the page stays until the
 * subscription's ack passes the element, which is as long as the client
 * may read it there. */
void ds__sc_reply_elements(ds_server_t *srv, ds_req_t *r, sc_end_t *e, uint32_t max, bool in_place);
uint64_t ds__sc_available(const sc_end_t *e);
/* A flush: wakes the stream's parked receives (delay_flush_time_ms). */
void ds__sc_flush(ds_server_t *srv, sc_stream_t *st);

/* stream_sub.c: ROUND_ROBIN and KEY_PARTITIONS subscriptions. */
bool ds__sc_sub_join(sc_stream_t *st, sc_sub_t *s, sc_end_t *e);
/* e leaves s; what it held goes to the others. Returns the consumers left. */
uint32_t ds__sc_sub_leave(sc_sub_t *s, sc_end_t *e);
void ds__sc_sub_free(sc_sub_t *s);
/* Hands element id (of key) to one consumer of every shared subscription. */
void ds__sc_sub_assign(sc_stream_t *st, uint64_t id, uint64_t key);
/* Every id below the returned one is done with by subscription s. */
uint64_t ds__sc_sub_low(const sc_sub_t *s);
uint64_t ds__sc_sub_available(const sc_end_t *e);
void ds__sc_sub_reply(ds_server_t *srv, ds_req_t *r, sc_end_t *e, uint32_t max, bool in_place);
/* Acknowledges e's received elements with ids <= id; false: id is past
 * what e received. */
bool ds__sc_sub_ack(sc_end_t *e, uint64_t id);
/* stream_wait.c: parks r as a wait (false: out of memory, r still the
 * caller's); takes a wait's request back (out of the list, no cancel). */
ds_req_t *ds__sc_wait_take(ds_streams_t *S, sc_wait_t *w);
bool ds__sc_park(ds_server_t *srv, ds_req_t *r, const sc_wait_t *proto);
/* Answers a SEND with OK; when its append answered parked receives
 * (woken moved past woken_before), after them (ds__sc_wake's comment). */
void ds__sc_send_ok(ds_server_t *srv, ds_req_t *r, uint64_t woken_before);
/* Continues a parked or fresh SEND (stream_ops.c): parses r's elements and
 * appends from *done; answers r or leaves it waiting (returns true). */
bool ds__sc_send_step(ds_server_t *srv, ds_req_t *r, sc_stream_t *st, uint32_t *done, bool push);

#endif
