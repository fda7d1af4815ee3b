/* The connection layer: listeners, connections and their frames, client
 * sessions and HELLO, and the request layer (request.h) through which
 * everything above answers. It knows nothing of operations: each complete
 * request goes to the dispatch callback the worker registers.
 *
 * Threading: the event loop's thread only, except the sender thread of
 * bulk.c and the receiver thread of bulk_recv.c (see ../THREADS.md). */
#ifndef DS_WORKER_NET_NET_H
#define DS_WORKER_NET_NET_H

#include <stdbool.h>
#include <stdint.h>

#include "common/tuning.h"
#include "common/wire.h"
#include "worker/net/limits.h"
#include "worker/net/loop.h"
#include "worker/net/request.h"
#include "worker/net/session.h"
#include "worker/store/store.h"

/* Bytes moved per connection per loop turn before yielding to others. */
#define DS_IO_SLICE (128u << 10)
/* ... except SET data received straight into the arena: with one recv per
 * DS_IO_SLICE a 1 MiB set would cost the loop eight turns, each another
 * epoll_wait, where Redis reads a big argument as far as it goes. A larger
 * slice keeps that to a turn or two while one turn's copy stays short
 * enough (a fraction of a millisecond) not to hold other connections up;
 * requests through the read buffer keep DS_IO_SLICE, so pipelining
 * clients still take turns. */
#define DS_IO_SLICE_DATA (512u << 10)
/* Response frames with at least this many bytes left go to the sender thread,
 * after the loop's one direct write of up to DS_BULK_DIRECT of them. */
#define DS_BULK_MIN (1u << 20)
/* The direct write: a 1 MiB value's whole answer (header and metadata
 * included), so that answer costs no hand-off to the sender thread and back:
 * two thread wake-ups, which can cost more than the copy itself. */
#define DS_BULK_DIRECT (DS_BULK_MIN + (64u << 10))
/* A SET's data section with at least this many bytes still to come, once
 * the read buffer holds none of it, is received by the receiver thread
 * (bulk_recv.c): the loop's first read (with the frame's header) and a
 * value of up to about this size stay on the loop, where the hand-off
 * would cost more than the copy. */
#define DS_BRECV_MIN DS_BULK_MIN
/* The most a loop turn writes directly of large frames, all connections
 * together; past it they go to the sender thread at once, so many
 * concurrent large answers do not hold the loop up either. */
#define DS_BULK_DIRECT_TURN (2u * DS_BULK_DIRECT)
#define DS_WORKER_ID_HEX 16

typedef struct ds_conn ds_conn_t;
typedef struct ds_bulk ds_bulk_t;
typedef struct ds_lanes ds_lanes_t;
typedef struct ds_brecv ds_brecv_t;

typedef struct {
    uint64_t ops[DS_OP__MAX];
    uint64_t errors[DS_OP__MAX];
    /* requests refused for what their connection had not proved (a peer
     * operation or flag without PEER_AUTH) or for unknown header flags */
    uint64_t requests_refused;
    uint64_t bytes_in, bytes_out;
    uint64_t socket_writes; /* the loop's writes of answers to client sockets */
    uint64_t bulk_receives; /* SET data sections handed to the receiver thread */
    /* --busy_poll_us: events the loop caught while polling, and the time it
     * spent polling. */
    uint64_t poll_hits, poll_ns;
    /* Loop turns that polled because a client promised a request
     * (DS_LANE_AHEAD_MIN in common/lane.h). */
    uint64_t poll_promised;
    /* Lane requests a poll step's watch of the lanes caught (ds__lanes_watch). */
    uint64_t poll_watched;
    /* Loop turns that did not poll because the transfer threads moved a
     * large value (ds__net_transfers). */
    uint64_t poll_transfer_sleeps;
    uint64_t lane_requests; /* requests that came through a lane (common/lane.h) */
    uint64_t lane_parts;    /* moves of the loop off a lane client's CPU (DS_LANE_PART_NS) */
    uint64_t lane_wakes;    /* lane answers whose client slept: woken with a futex wake */
    uint64_t conns_accepted, conns_rejected, protocol_errors, auth_failures, accept_errors;
    /* guard.c: connections closed for not completing HELLO in time, closed to
     * make room for a newer one while waiting for HELLO, and SETs refused
     * for their session's in-flight bytes. */
    uint64_t handshake_timeouts, handshake_evictions, inflight_refusals;
    /* guard.c: connections paused after a quota refusal (ds__req_penalize) */
    uint64_t quota_pauses;
    uint64_t tls_failures; /* TCP connections refused in or before the TLS handshake */
} ds_net_counters_t;

/* What HELLO tells a client about this worker. */
typedef struct {
    char worker_id[DS_WORKER_ID_HEX + 1]; /* random per start: the worker's identity */
    int arena_fd;
    uint64_t arena_size;
    uint32_t inline_max;
    uint64_t index_offset;
    uint32_t index_slots, index_keymax;
    char sock_path[300]; /* absolute path of the Unix socket, for discovery; "" = none */
    bool pipeline;       /* DS_FEATURE_PIPELINE */
} ds_hello_info_t;

typedef struct {
    ds_io_t io;
    ds_net_t *net;
    int fd;
    bool is_unix;
    bool paused; /* out of descriptors: not polled until one is free */
} ds_listener_t;

struct ds_net {
    ds_loop_t *loop;
    ds_store_t *store; /* answers hold object references */
    ds_bulk_t *bulk;
    ds_brecv_t *brecv; /* the bulk receiver thread (bulk_recv.c) */
    ds_lanes_t *lanes; /* request lanes (lane.h); NULL = none */
    /* The last request handled came through a lane: the loop's placement
     * beside that lane's client matters only then (ds__lanes_shared_cpu). */
    bool lane_last;
    /* the worker's handler for every complete request but HELLO */
    void (*dispatch)(void *ctx, ds_req_t *r);
    void *dispatch_ctx;
    /* latency of each answered request (may be NULL) */
    void (*observe)(void *ctx, uint16_t op, uint64_t ns);
    void *observe_ctx;
    /* a session is about to be freed (may be NULL): what the worker keeps
     * per session (read latches) goes with it */
    void (*session_end)(void *ctx, ds_session_t *s);
    void *session_end_ctx;
    /* runs first in every after-event hook (may be NULL): the worker
     * completes there the waits the event made ready (subscribe-waits), so
     * their answers are queued before the connections resume */
    void (*before_resume)(void *ctx);
    void *before_resume_ctx;

    uint64_t max_data;
    uint32_t max_clients;
    /* guard.c: connections that have not completed HELLO are closed after
     * handshake_ms (0 = never); at most hs_max of them wait at once, at most
     * hs_max_peer from one peer (TCP address, Unix uid), the oldest making
     * room for a new one. A session's SETs being received or not yet
     * answered hold at most inflight_max data bytes (0 = no cap), beyond
     * its first. */
    uint64_t handshake_ms;
    uint32_t hs_max, hs_max_peer;
    uint64_t inflight_max;
    ds_conn_t *hs_head, *hs_tail; /* waiting for HELLO, oldest first */
    struct ds_pause *pauses;      /* guard.c: connections paused after a refusal */
    /* guard.c: each peer's evictions under its cap in the current second */
    struct ds_hs_peer {
        uint8_t peer[17];
        uint64_t since_ms;
        uint32_t evicted;
    } hs_peers[DS_HS_PEER_SLOTS];
    uint32_t nhs;
    char auth_token[256]; /* empty = none */
    /* --enable_tls: every TCP connection is TLS (conn_tls.c); NULL = plain */
    struct ds_tls_ctx *tls;
    ds_hello_info_t hello;

    ds_listener_t tcp, unix_;
    uint64_t accept_retry_ms; /* when paused listeners try again; 0 = none */

    ds_conn_t *conns;
    uint32_t nconns;
    uint64_t next_conn_id;
    ds_conn_t *dead; /* closed, freed after the current loop turn */
    ds_conn_t *ready_head, *ready_tail;
    /* Counts the after-event hook's runs that had work (waits to complete,
     * connections to resume): handlers ran then, after the timers looked at
     * their deadlines (see ds__server_run). */
    uint64_t resumed;
    uint64_t direct_left; /* of DS_BULK_DIRECT_TURN, this loop turn */
    ds_session_t *sessions;
    uint32_t nsessions;
    ds_net_counters_t ctr;
};

/* Sets up what the fields above do not: the sender thread. The caller fills
 * loop, store, dispatch, limits and hello first. 0, or -1 with a message. */
int ds__net_init(ds_net_t *net, char *err, size_t err_cap);
/* Starts accepting on a listening socket. 0 or -1 with errno. */
int ds__net_listen(ds_net_t *net, ds_listener_t *l, int fd, bool is_unix);
/* Resumes connections whose deferred request ended (the loop's after-event
 * hook). */
void ds__net_after_event(void *net);
/* A new loop turn begins (before the loop waits for events): resets the
 * turn's budget of direct large writes. */
void ds__net_turn(ds_net_t *net);
/* True while connections wait on the ready list (the loop must not sleep). */
bool ds__net_busy(const ds_net_t *net);
/* Frames the bulk sender and SET data sections the bulk receiver have in
 * hand (bulk.c) of at least DS_POLL_XFER_SLEEP_MIN bytes (common/tuning.h):
 * long transfers under way on their threads. */
uint32_t ds__net_transfers(const ds_net_t *net);
/* Retries paused listeners when due; the next deadline or 0. */
uint64_t ds__net_tick(ds_net_t *net, uint64_t now_ms);
/* Frees connections closed during the turn. */
void ds__net_free_dead(ds_net_t *net);
/* True while any connection has answers queued. */
bool ds__net_output_pending(const ds_net_t *net);
/* Closes every connection and session, stops the sender thread. */
void ds__net_destroy(ds_net_t *net);

#endif
