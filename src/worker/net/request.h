/* The request layer: what a handler (operations, subscribe-waits, the
 * cluster) sees of a client request, and the only calls it has to answer it.
 * Handlers never see a connection: only the connection code (conn.c) changes
 * a connection's state.
 *
 * A request is handled in one of three ways:
 *  - answered at once, from its handler: ds__req_reply / ds__req_error;
 *  - parked: ds__req_park hands back a request object of its own that the
 *    handler keeps (a subscribe-wait, a write waiting for a read latch or
 *    the disk, a cluster operation waiting for peers). The connection reads
 *    nothing more until that request is ended by exactly one ds__req_reply,
 *    ds__req_error or ds__req_drop. Ending it queues the answer and puts the
 *    connection on the ready list; the event loop resumes it (writes, then
 *    reads its pipelined requests) after the current event, never from
 *    inside the handler that ended it (Redis's unblocked-clients queue). If
 *    the connection closes first, the cancel callback given to the last
 *    ds__req_park runs once; the request stays valid until its owner ends
 *    it, and an answer to it is then simply dropped.
 *    An owner that hands its parked request on (resumes the waiting handler
 *    with it) first calls ds__req_unpark, which clears the cancel callback
 *    and its context: the context is usually freed with the owner's waiter,
 *    so a handler that parks the request again must give its own, and one
 *    whose connection closes while nobody holds it parked is only marked
 *    gone (ds__req_gone);
 *  - for SET, the data section: ds__req_recv_data names where each value's
 *    bytes go, and the connection calls back once they have all arrived. */
#ifndef DS_WORKER_NET_REQUEST_H
#define DS_WORKER_NET_REQUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/wire.h"
#include "ds/status.h"
#include "worker/net/session.h"
#include "worker/store/store.h"

typedef struct ds_req ds_req_t;
struct ds_conn;

/* Stack room for building a small answer's metadata (a status list, an
 * error message): ds__wbuf_init_on, so that a typical answer costs no
 * allocation; a larger one moves to the heap. */
#define DS_REPLY_ROOM 512

struct ds_req {
    /* Read-only for handlers. */
    uint64_t conn_id; /* for logs; never reused */
    uint64_t id;      /* the frame's request id, echoed by the answer */
    uint16_t op;
    uint8_t flags; /* header flags: DS_FLAG_PEER, DS_FLAG_NOREPLY, DS_FLAG_TRACE */
    bool is_unix;  /* arrived on the worker's Unix socket */
    /* The client's trace id (DS_FLAG_TRACE, taken off the metadata), "" when
     * none: log lines about the request carry it as "[trace_id]". */
    char trace_id[DS_TRACE_ID_MAX + 1];
    const uint8_t *meta;
    uint32_t meta_len;
    uint64_t data_len;
    /* The connection's session: set after HELLO, NULL once the connection of
     * a deferred request is gone. */
    ds_session_t *session;

    /* The connection layer's own. */
    uint8_t tail_[32]; /* ds__req_set_tail */
    uint8_t tail_len_;
    struct ds_net *net_;
    struct ds_conn *conn_;
    bool deferred_;
    uint64_t start_ns_;
    void (*cancel_)(ds_req_t *r, void *ctx);
    void *cancel_ctx_;
    uint8_t *meta_own_;
};

/* Where a SET value's bytes go: an arena range, or nowhere (p NULL). */
typedef struct {
    uint8_t *p;
    uint64_t len;
} ds_sink_t;

/* Queues the answer: header + w's metadata, then nseg data segments. refs
 * are object references the frame holds until sent (taken over, also when
 * the answer is dropped). fd >= 0 rides along as SCM_RIGHTS. w is not freed.
 * For a deferred request this ends it (r is freed). */
void ds__req_reply(ds_req_t *r, ds_status_t st, const ds_wbuf_t *w, const struct iovec *segs,
                   uint32_t nseg, ds_obj_t **refs, uint32_t nrefs, int fd);
/* Bytes (at most 32) appended to the metadata of r's answer, whichever path
 * builds it (an error answer too): SETR's reservation trailer. */
void ds__req_set_tail(ds_req_t *r, const void *p, uint8_t n);
/* An answer carrying only the error string. */
void ds__req_error(ds_req_t *r, ds_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* r broke one of its client's quotas (a flag's per-client limit) and is
 * about to be answered so: the answer goes out, and r's connection reads
 * on, only after a pause that grows while its session keeps being
 * refused (DS_QUOTA_PAUSE_MIN_MS in common/tuning.h), so that the offender
 * waits, not the others. Call it before answering r; r's metadata stays
 * valid. A request without a session, or one already deferred, is not
 * paused. */
void ds__req_penalize(ds_req_t *r);

/* r's connection proved it is a cluster peer (PEER_AUTH, answered by the
 * cluster): from now on it may send peer operations and DS_FLAG_PEER. */
void ds__req_set_peer(ds_req_t *r);

/* A log line about request r: "[trace_id] " leads it when r has one. */
void ds__req_log(const ds_req_t *r, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef void (*ds_req_cancel_fn)(ds_req_t *d, void *ctx);
/* Parks r with cancel(d, ctx) (cancel may be NULL): the handler's request
 * is deferred (the parked request owns a copy of the metadata), and one
 * parked already (handed on by ds__req_unpark) gets cancel and ctx in place
 * of whatever it had. Returns the request to keep (r itself must not be
 * used after), or NULL when out of memory (r is then still the handler's to
 * answer). */
ds_req_t *ds__req_park(ds_req_t *r, ds_req_cancel_fn cancel, void *ctx);
/* The owner of parked request d hands it on: its cancel callback and
 * context are cleared (see above). d stays deferred. */
void ds__req_unpark(ds_req_t *d);
/* Ends a parked request without an answer (its connection resumes). */
void ds__req_drop(ds_req_t *d);
/* The parked request's connection has closed: answers go nowhere. */
bool ds__req_gone(const ds_req_t *d);
/* r is a parked request (ds__req_park's, or one handed on to a resume). */
bool ds__req_is_deferred(const ds_req_t *r);

/* done(ctx, r) once every sink is full; done(ctx, NULL) if the connection
 * closes first (free what ctx holds; there is nobody to answer). sinks are
 * the caller's and must live until then. Called at most once per SET, from
 * its handler; without it a SET's data is discarded. */
typedef void (*ds_req_data_fn)(void *ctx, ds_req_t *r);
void ds__req_recv_data(ds_req_t *r, ds_sink_t *sinks, uint32_t n, ds_req_data_fn done, void *ctx);

#endif
