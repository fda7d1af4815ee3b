/* Private to the connection layer (conn.c, request.c, hello.c, guard.c,
 * bulk.c, bulk_recv.c): one client connection and its state machine.
 * Nothing outside src/worker/net includes this header. */
#ifndef DS_WORKER_NET_CONN_H
#define DS_WORKER_NET_CONN_H

#include "worker/net/net.h"

#include "common/tls.h"

#include <sys/types.h>
#include <sys/uio.h>

typedef enum {
    CONN_READ_HEADER = 0,
    CONN_READ_META,
    CONN_READ_DATA,
    CONN_PARKED, /* a deferred request is pending; reads resume once it has ended */
    CONN_CLOSED,
} ds_conn_state_t;

typedef struct ds_out ds_out_t;

struct ds_conn {
    ds_io_t io;
    ds_net_t *net;
    ds_conn_t *prev, *next;
    ds_conn_t *ready_next;
    bool queued; /* on the ready list */
    ds_conn_state_t state;
    bool is_unix;
    bool hello_done;
    bool authed; /* Unix socket, no secret configured, or the challenge answered */
    bool peer;   /* completed PEER_AUTH: a proven cluster member (docs/security.md) */
    uint8_t auth_failures;
    char challenge[68]; /* outstanding auth challenge, "" = none */
    bool close_after_write;
    /* guard.c: paused after a quota refusal, its answers are held (neither
     * written nor put in its lane) until the pause ends */
    bool out_held;
    ds_session_t *session;
    uint64_t id;

    uint8_t hdr[DS_WIRE_HEADER_LEN];
    uint32_t hdr_got;
    ds_wire_header_t h;
    uint8_t *meta; /* malloc'd (meta_owned) or in the read buffer */
    bool meta_owned;
    uint32_t meta_got;
    ds_req_t cur; /* the request being read or handled */

    /* data phase of a SET */
    ds_sink_t *sinks;
    uint32_t nsinks, sink_idx;
    uint64_t sink_off;
    uint64_t skip; /* data bytes nobody asked for: discarded */
    ds_req_data_fn data_done;
    void *data_ctx;

    ds_req_t *deferred; /* pending, until its owner ends it */

    ds_out_t *out_head, *out_tail;
    uint64_t out_bytes;
    /* While its input is processed, the connection's own small answers are
     * queued and written together once the input is (a pipelining client's
     * answers in one write, not one each). */
    bool in_input, flush_after_input;
    /* The head frame while the sender thread writes it; nothing else is
     * written meanwhile, and a closed connection is freed only once it is
     * back. */
    ds_out_t *bulk_out;
    /* guard.c: while HELLO is not complete the connection is on the net's
     * handshake list (hs_on), since hs_since_ms; origin names where it comes from, for
     * the per-peer cap (TCP address or Unix uid). charged: data bytes of
     * its SET counted in the session's in-flight bytes until answered. */
    ds_conn_t *hs_prev, *hs_next;
    bool hs_on;
    uint64_t hs_since_ms;
    uint8_t origin[17];
    uint64_t charged;
    /* The bulk receiver thread (bulk_recv.c) is reading the rest of its
     * SET's data section: the loop reads nothing on it meanwhile, and a
     * closed connection is freed (and the SET's sinks let go) only once the
     * job is back. */
    bool bulk_in;
    bool io_off; /* out of the loop's epoll set while bulk_in (a hang-up) */
    /* Its request lane (lane.c): lane index + 1, 0 = none; the last request
     * sequence number seen there and the lane's generation; lane_wait while
     * the answer to a lane request is due (it goes into the lane). */
    uint32_t lane, lane_seen, lane_gen;
    bool lane_wait;
    /* TLS (conn_tls.c): the session of a TCP connection when the worker has
     * --enable_tls; tls_hs 1 before the handshake's first byte, 2 during
     * it, 0 after. */
    ds_tls_t *tls;
    uint8_t tls_hs;
    bool tls_failed; /* no session could be made: closed at its first event */
};

/* Queues a frame on c; flushes at once when flush is set. */
void ds__conn_queue(ds_conn_t *c, uint64_t req_id, uint16_t op, ds_status_t st, const ds_wbuf_t *w,
                    const struct iovec *segs, uint32_t nseg, ds_obj_t **refs, uint32_t nrefs,
                    int fd, bool flush);
void ds__conn_close(ds_conn_t *c, const char *why);
/* Puts c on the ready list: resumed after the current event. */
void ds__conn_make_ready(ds_conn_t *c);
/* Handles the bytes of a lane request (n <= the read buffer) as if they
 * had come over the socket: 1. Touching nothing: 0 when the connection is
 * about to resume after a deferred request whose answer is out (the
 * request is for after that), -1 when it is not between requests (lane.c
 * then closes it). */
int ds__conn_feed(ds_conn_t *c, const uint8_t *p, uint32_t n);
/* conn_tls.c: a new TCP connection's session (when the worker has TLS);
 * one handshake step for an event (true: the event is used up, or the
 * connection closed; false: the handshake is over, read on); reads and
 * writes through the session when there is one, else the socket; bytes
 * waiting inside the session; freeing it. */
void ds__conn_tls_start(ds_conn_t *c);
bool ds__conn_tls_handshake(ds_conn_t *c);
ssize_t ds__conn_recv(ds_conn_t *c, void *buf, size_t len);
ssize_t ds__conn_sendv(ds_conn_t *c, const struct iovec *iov, int n);
bool ds__conn_tls_pending(ds_conn_t *c);
/* A refusal frame (header and message) to a connection about to close
 * before HELLO, plain or through its session as the client can read it
 * (conn_tls.c); best effort. */
void ds__conn_send_refusal(ds_conn_t *c, const struct iovec *iov, int n);
void ds__conn_tls_free(ds_conn_t *c);
/* HELLO (hello.c). */
void ds__hello(ds_conn_t *c);
/* Whether c may send its current request (header c->h): DS_K_OK, or the
 * refusal with its reason in why (hello.c). */
ds_status_t ds__conn_rights(ds_conn_t *c, char *why, size_t cap);

/* The sender thread is done with c's head frame o: sent bytes, errno or 0. */
void ds__conn_bulk_done(ds_conn_t *c, ds_out_t *o, uint64_t sent, int err);
/* The unsent part of a frame as up to max iovecs (0 when all is sent), and
 * marking n more bytes sent (true once all are). For the sender thread. */
int ds__out_iov(const ds_out_t *o, struct iovec *iov, int max);
/* Bytes of the frame still to send. */
uint64_t ds__out_left(const ds_out_t *o);
bool ds__out_advance(ds_out_t *o, uint64_t n);

/* bulk.c: the sender thread for large response frames */
ds_bulk_t *ds__bulk_new(ds_loop_t *loop, char *err, size_t err_cap);
/* Stops the thread; every frame it held comes back through
 * ds__conn_bulk_done (failed when unsent). */
void ds__bulk_free(ds_bulk_t *b);
/* Hands c's head frame o to the thread; false when it cannot take it. */
bool ds__bulk_send(ds_bulk_t *b, ds_conn_t *c, ds_out_t *o);

/* guard.c: limits on connections that have not said HELLO, and on a
 * session's in-flight SET bytes. */
/* Makes room for a connection being accepted from peer (closing the oldest
 * connections waiting for HELLO as the caps say); false when the worker
 * is at its connection limit with no such connection to close. */
bool ds__guard_admit(ds_net_t *net, const uint8_t peer[17]);
/* The peer key of an accepted socket. */
void ds__guard_peer(int fd, bool is_unix, uint8_t peer[17]);
/* c was accepted: it waits for HELLO from now on. */
void ds__guard_track(ds_conn_t *c);
/* c completed HELLO, or is closing: off the handshake list. */
void ds__guard_untrack(ds_conn_t *c);
/* Closes connections past the handshake deadline; the next deadline or 0. */
uint64_t ds__guard_tick(ds_net_t *net, uint64_t now_ms);
/* Resumes the connections whose pause after a refusal is over; the next
 * end of a pause or 0. */
uint64_t ds__guard_pause_tick(ds_net_t *net, uint64_t now_ms);
/* A SET with a data section is about to run on c: counts its bytes in the
 * session's in-flight bytes, or answers it with the quota error and
 * returns false (its data section is then skipped). */
bool ds__guard_set_admit(ds_conn_t *c);
/* c's charged request was answered or ended, or c is closing. */
void ds__guard_uncharge(ds_conn_t *c);

/* bulk_recv.c: the receiver thread for large SET data sections */
ds_brecv_t *ds__brecv_new(ds_loop_t *loop, char *err, size_t err_cap);
/* Stops the thread; every job it held comes back through
 * ds__conn_brecv_done (failed when unfinished). */
void ds__brecv_free(ds_brecv_t *b);
/* Hands the rest of c's data section (its sinks from the current one on,
 * or its bytes to skip) to the thread; false when it cannot take it (the
 * loop reads on). */
bool ds__brecv_take(ds_brecv_t *b, ds_conn_t *c);
/* Loop only: receives handed to b and not back yet (0 for NULL). */
uint32_t ds__brecv_jobs(const ds_brecv_t *b);
/* The thread is done with c's data section: err is 0 when all of it
 * arrived, else an errno (EPIPE when the peer closed first). */
void ds__conn_brecv_done(ds_conn_t *c, uint64_t got, int err);

#endif
