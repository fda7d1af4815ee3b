/* Internal types of the client library, shared by its files and nothing else.
 *
 * Layering (hiredis style): conn.c frames requests and responses and does
 * no policy; it hands the frames to the connection's transport (ds_conn_ops_t:
 * sock.c, lane.c, mux.c), whose state lives in a struct of its own;
 * client.c owns the connection pool, the worker session and reconnection;
 * kv.c, setv.c and buffer.c implement the public calls on top of a borrowed
 * connection, and space.c keeps its reserved arena space (SETR).
 *
 * Sessions. The worker ties pins (GET with PIN/WANT_SHM) and CREATE
 * reservations to a session, which lasts while any of its connections is
 * open. A local session therefore owns one extra "anchor" connection that is
 * never used for requests: it keeps the session, and with it every pin the
 * caller's buffers hold, alive even when a request times out and its pool
 * connection is closed. RELEASE frames go out on the anchor as NOREPLY, so a
 * buffer can be released without a pool connection, and even after
 * ds_client_close. A session object (ds_sess_t) is refcounted by the client
 * (while it is current), by every pool connection and by every buffer; the
 * arena mapping and the anchor are dropped with the last reference, so bytes
 * a buffer points at stay mapped until it is released.
 *
 * Joining a session takes the key the worker gave when it created the
 * session (ds_sess_t.key), and a session belongs to one worker identity
 * (ds_sess_t.worker_id): a HELLO that reports another worker_id means the
 * worker restarted, and the session is dropped rather than joined again.
 *
 * Lifetime of the client: ds_client_t.refs counts one reference for the
 * caller (dropped by ds_client_close) and one per public call in progress
 * (ds__client_enter / ds__client_leave). ds_client_close marks the client
 * closed, wakes threads waiting for a connection and shuts down the sockets
 * of borrowed connections, so calls in progress return promptly; the memory
 * (mutexes included) is freed by whoever drops the last reference.
 *
 * Locking: ds_client_t.mu guards the pool (idle list, list of all
 * connections), the current session and every session's nconns; open_mu
 * serializes opening connections so two threads never create two sessions;
 * ds_sess_t.anchor_mu serializes writes on the anchor; ds_sess_t.defer_mu
 * guards the deferred releases. Order: open_mu -> mu; anchor_mu and defer_mu
 * are never held with each other or the others. A function whose name ends in
 * _locked runs with mu held. ds_cucx_t.mu (ucx.c, enable_ucx) serializes
 * every call into the client's UCX worker (thread mode SERIALIZED; its
 * request callbacks run inside those calls) and guards the receives' state;
 * it is taken with no other lock held, and released for every poll.
 * ds_mux_t.mu (mux.c) is taken with no other lock held (mu is released
 * before a shared-connection call), and never held across a read or write.
 *
 * Multiplexing. A remote (TCP) client of a worker that answers plain calls
 * at once (DS_FEATURE_PIPELINE: standalone, without storage tiers) and
 * whose calls overlap in time sends the small ones (a set of at most DS_CLIENT_MUX_MAX bytes, a get
 * into a buffer that small, without a subscribe wait) over one shared connection, pipelined
 * (mux.c), instead of one pool connection each: a turn of the worker then
 * reads and answers many callers with one segment each way, where one
 * connection per caller costs a segment, a wake-up and two system calls on
 * both sides per request. A call with the client to itself keeps a pool
 * connection (and its polling for the reply). DS_CLIENT_MUX=0 turns it off. */
#ifndef DS_CLIENT_INTERNAL_H
#define DS_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "common/lane.h"
#include "common/shm_index.h"
#include "common/spin.h"
#include "common/tls.h"
#include "common/wire.h"
#include "ds/kv_client.h"
#include "ds/service_discovery.h"

/* Connections per client; a thread finding none idle and the cap reached
 * waits for one until its request deadline. */
#define DS_CLIENT_MAX_CONNS 64
/* Values at most this long are copied into the request's own buffer instead
 * of getting an iovec of their own (fewer, larger writes for many small keys). */
#define DS_CLIENT_COALESCE_MAX 4096
/* Calls of at most this many bytes may share a connection (Multiplexing). */
#define DS_CLIENT_MUX_MAX 65536
/* A local set sends values above this size through the arena (SETR) when
 * the worker takes SETR; smaller ones inline. */
#define DS_CLIENT_SPACE_MIN 4096
/* A connection asks to keep up to this much of its space for later sets
 * (the worker keeps spaces this small for smaller sets: ops_space.c), for
 * as long as it made a set that large within the last
 * DS_CLIENT_SPACE_WINDOW to twice that many sets. */
#define DS_CLIENT_SPACE_KEEP (8u << 20)
#define DS_CLIENT_SPACE_WINDOW 8u
/* ds_buffer_release_deferred: at most this many pins, of at most
 * DS_CLIENT_DEFER_TOTAL bytes together, wait for a session's next request;
 * a buffer larger than DS_CLIENT_DEFER_ONE is released at once. */
#define DS_CLIENT_DEFER_MAX 16
#define DS_CLIENT_DEFER_TOTAL (8u << 20)
#define DS_CLIENT_DEFER_ONE (4u << 20)
/* Sanity bound on a response's data section. */
#define DS_CLIENT_MAX_RESP_DATA (UINT64_C(1) << 42)
#define DS_CLIENT_DEFAULT_REQUEST_MS 60000
#define DS_CLIENT_DEFAULT_CONNECT_MS 9000
/* The longest a call polls for its reply by default, us (common/spin.h). */
#define DS_CLIENT_DEFAULT_POLL_US 200
/* Longest session key accepted from a worker (it sends 32 hex characters). */
#define DS_SESSION_KEY_MAX 64

typedef struct ds_sess {
    atomic_int refs;
    uint64_t id;
    uint8_t *base; /* arena mapping; NULL for a remote (TCP) session */
    size_t size;
    uint32_t inline_max;
    bool setr;     /* the worker takes SETR: local sets in one round trip (kv.c) */
    bool pipeline; /* DS_FEATURE_PIPELINE: calls may share a connection (mux.c) */
    uint32_t worker_pid;
    char worker_id[128];              /* the worker's identity when the session was created */
    char key[DS_SESSION_KEY_MAX + 1]; /* proves the right to join; "" from older workers */
    int nconns;                       /* pool connections of this session; under ds_client_t.mu */
    pthread_mutex_t anchor_mu;
    int anchor_fd; /* local sessions only, else -1 */
    uint64_t anchor_req;
    atomic_bool anchor_dead;
    /* Pins dropped with ds_buffer_release_deferred, not yet told to the
     * worker: the next request on a connection of this session carries them
     * in a RELEASE frame ahead of its own (conn.c). ndeferred is read
     * without the lock to skip it when there are none. */
    pthread_mutex_t defer_mu;
    uint64_t deferred[DS_CLIENT_DEFER_MAX];
    uint64_t deferred_bytes;
    _Atomic uint32_t ndeferred;
    ds_shm_index_t ix; /* the worker's GET index in the mapping; ix.hdr NULL = none */
    /* This session's table of readers' shared pins in the mapping (NULL =
     * none) and which of its slots are free (bit i = slot i). */
    ds_shm_pins_t *pins;
    _Atomic uint64_t pins_free;
    _Atomic uint64_t ix_checked_ms; /* when the anchor was last seen open */
    /* The client's UCX address this session registered (UCX_ADDR), as the
     * UCX worker generation + 1 (ds__cucx_begin); 0 = none yet. */
    _Atomic uint64_t ucx_registered;
    /* For a promise made outside any connection (ds_buffer_memory_copy,
     * lane.c): the worker's lane hub and a doorbell of the session's own
     * (a dup of its first lane's, closed with the session; -1 = no lane
     * yet), set once by the first lane that attaches; promise_ok: the
     * client polls for answers (a client that does not makes no promises). */
    _Atomic(ds_lane_hub_t *) lane_hub;
    atomic_int lane_bell;
    atomic_bool promise_ok;
} ds_sess_t;

/* One piece of a request's data section: user memory, or bytes coalesced
 * into the connection's data buffer (an offset, since that buffer grows). */
typedef struct {
    const uint8_t *p;
    size_t off;
    size_t len;
} ds_seg_t;

/* A caller waiting on the shared connection (mux.c) for its answer. */
typedef struct ds_mux ds_mux_t;
typedef struct ds_mux_wait {
    struct ds_mux_wait *next;
    struct ds_conn *conn; /* whose in buffer gets the answer */
    uint64_t req;
    atomic_bool done;      /* the answer is in (read without the lock) */
    bool sleeping;         /* on word, to be woken (under the mux's lock) */
    _Atomic uint32_t wake; /* futex word: bumped to wake it */
} ds_mux_wait_t;

/* Arena space the worker reserved for a connection's next local set (SETR,
 * space.c): a session handle and the range; handle 0 = none. Given back
 * (RELEASE over the anchor) when the connection is freed. */
typedef struct {
    uint64_t handle, off, len;
    /* The last size the worker would not reserve (0 = none): larger sets go
     * straight to CREATE / PUBLISH, asking again every 64th time. */
    uint64_t refused;
    uint32_t refusals;
    /* The largest set of this window of DS_CLIENT_SPACE_WINDOW sets and of
     * the one before, and the sets so far (ds__space_want). */
    uint64_t win[2];
    uint32_t sets;
} ds_space_t;

typedef enum {
    DS_CONN_OK = 0,
    DS_CONN_BROKEN, /* unusable (timeout, protocol error): close it */
    DS_CONN_LOST,   /* the worker closed it: it may be gone altogether */
} ds_conn_state_t;

/* A connection's transport (hiredis's redisContextFuncs): how a request's
 * frames reach the worker and its answer comes back. conn.c frames requests
 * and responses and dispatches to these, one indirect call per round trip
 * (call), another only when the answer's rest must be read (recv).
 * ds__sock_ops: a socket, TCP (plain or TLS) or Unix (sock.c);
 * ds__lane_ops: a local socket with a request lane (lane.c);
 * ds__mux_ops: a call on the shared connection (mux.c). UCX is no request
 * transport: it carries GET values beside a TCP connection (ucx.c). */
typedef struct ds_conn ds_conn_t;
typedef struct {
    /* Sends request req (the frames in iov[0..n), advanced as written) and,
     * unless noreply, waits for its answer: 0 when the answer (or its first
     * bytes) is in conn->in, or recv can read it; -1 with errno (ETIMEDOUT,
     * EPROTO for a malformed answer, ECONNRESET and others when the
     * connection failed). */
    int (*call)(ds_conn_t *conn, struct iovec *iov, size_t n, uint64_t req, bool noreply,
                uint64_t deadline);
    /* Reads at most cap more bytes of the answer into buf, waiting for the
     * first of them until deadline: the count, or -1 with errno (EPROTO when
     * the transport delivers answers whole, so there is nothing more). */
    ssize_t (*recv)(ds_conn_t *conn, void *buf, size_t cap, uint64_t deadline);
    /* From another thread (ds_client_close): a call in progress on the
     * connection returns promptly, failing. */
    void (*shutdown)(ds_conn_t *conn);
    /* Releases the transport's state, with the connection. */
    void (*close)(ds_conn_t *conn);
} ds_conn_ops_t;

/* A socket's state (sock.c). */
typedef struct {
    int fd;
    ds_tls_t *tls;   /* TLS over TCP (enable_tls), else NULL */
    bool is_unix;    /* a Unix socket: replies are polled for, then read */
    int rcvtimeo_ms; /* the socket's SO_RCVTIMEO now; 0 = none set */
} ds_sock_t;

/* A request lane's state (lane.c; l NULL = none): the worker's hub, the
 * doorbell, the lane's generation, and the last request and answer
 * sequence numbers. */
typedef struct {
    ds_lane_t *l;
    ds_lane_hub_t *hub;
    int bell_fd;
    uint32_t gen, req, rep;
    uint32_t idx;     /* its bit in the hub's ready mask */
    int cpu;          /* where this thread ran when it sent the lane request */
    atomic_bool kick; /* ds_client_close: stop waiting on the lane, read the socket */
    uint64_t soon;    /* the hub.soon this connection promised (0 = none) */
} ds_clane_t;

/* A call on the shared connection (mux.c; m NULL = not one): the answer
 * arrives whole in conn->in (in_cap bytes); w is the call's wait. */
typedef struct {
    ds_mux_t *m;
    ds_mux_wait_t w;
    uint32_t in_cap;
} ds_cmux_t;

struct ds_conn {
    struct ds_conn *next;                /* idle list */
    struct ds_conn *all_prev, *all_next; /* every pool connection, idle or borrowed */
    const ds_conn_ops_t *ops;            /* its transport */
    ds_conn_state_t state;
    uint64_t next_req;
    ds_sess_t *sess;
    ds_wbuf_t w; /* header + metadata of the request being built */
    ds_wbuf_t d; /* coalesced small values */
    ds_seg_t *segs;
    size_t nsegs, segcap;
    uint8_t *meta; /* response metadata */
    size_t meta_cap;
    ds_wire_header_t rh; /* response header */
    ds_rbuf_t r;         /* reader over meta, positioned after the err string */
    uint64_t data_left;  /* unread bytes of the response data section */
    /* Responses are read through this buffer: the header, metadata and a
     * small value arrive with one recv. Only one request is outstanding per
     * connection, so it never holds bytes of a later response. */
    uint8_t *in;
    uint32_t in_pos, in_len;
    const char *peer; /* "host:port" of the worker, for messages */
    ds_spin_t spin;   /* how long a call polls for its reply (busy_poll_us) */
    bool traced;      /* the request being built carries DS_FLAG_TRACE */
    bool ucx_get;     /* the GET being answered is a UCX_GET: entries may be kind UCX */
    ds_space_t space; /* SETR space for its next local set (space.c) */
    /* Transport state: sock for socket and lane connections (fd -1 for a
     * shared-connection call), lane for a lane's, mux for a shared one's. */
    ds_sock_t sock;
    ds_clane_t lane;
    ds_cmux_t mux;
};

/* Dials to other workers one failover makes at most (client.c). */
#define DS_CLIENT_FAILOVER_TRIES 4

struct ds_client {
    /* The worker: set at connect, and changed only by a failover (client.c),
     * which holds open_mu and mu while it writes them; so they are read
     * under either lock (the dials run under open_mu). */
    char host[256];
    int port;
    char addr[300]; /* "host:port", for messages */
    /* service_discovery and enable_cross_node_connection (ds/kv_client.h):
     * where a failover finds the next worker; NULL = none. */
    ds_service_discovery_t *sd;
    bool failover;
    int connect_timeout_ms;
    int request_timeout_ms;
    uint32_t busy_poll_us;
    ds_transport_t transport;
    bool require_local;  /* DS_TRANSPORT_LOCAL: a session without the arena is an error */
    atomic_bool local;   /* the current session maps the arena */
    char sock_path[128]; /* the conventional socket path (socket directory + host:port) */
    char sock_dir[128];  /* unix_socket_dir as given; "" = the default */
    /* Where pool connections of the current session dial: the Unix socket at
     * unix_path when use_unix, else TCP. Set when a session is created (see
     * new_session in client.c); under open_mu. */
    bool use_unix;
    char unix_path[128];
    char *token;
    /* enable_tls: the context TCP connections use (common/tls.h); NULL =
     * plain. Those connections never share (no ds_mux_t): one session's
     * reads and writes cannot run on two threads at once. */
    ds_tls_ctx_t *tls;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t open_mu;
    ds_conn_t *idle;
    ds_conn_t *all; /* idle and borrowed connections, for ds_client_close */
    int nconns;
    atomic_bool closed;  /* written under mu; read without it by ds__client_leave */
    atomic_int refs;     /* the caller's + one per call in progress */
    ds_sess_t *sess;     /* current session, or NULL until the next connection makes one */
    struct ds_cucx *ucx; /* enable_ucx / DS_CLIENT_UCX=1: remote gets over UCX (ucx.c) */
    bool mux_off;        /* DS_CLIENT_MUX=0 */
    atomic_int busy;     /* calls holding a connection, pool or shared */
    ds_mux_t *mux;       /* the shared connection; NULL = none yet; under mu */
    bool mux_opening;    /* a thread is opening it; under mu */
    ds_conn_t *vidle;    /* idle call states for it (ds_conn_t with mux set); under mu */
};

typedef enum { DS_BUF_SHM = 0, DS_BUF_HEAP } ds_buf_kind_t;

struct ds_buffer {
    ds_sess_t *sess; /* holds the mapping (and anchor) alive; NULL for heap buffers */
    uint8_t *data;
    size_t size;
    uint64_t handle; /* pin or reservation in sess; 0 = none */
    int pin_slot;    /* the slot of sess's shared pin table holding it; -1 = none */
    ds_buf_kind_t kind;
    bool published;
    /* A local buffer over a space of its own (handle is the space's) that
     * publish turns into the value with one SETR; param says how. */
    bool space;
    /* The promise ds_buffer_memory_copy made the worker (its hub's soon
     * value; 0 = none): publish's request takes it back (lane.c). */
    uint64_t promised;
    ds_set_param_t param; /* remote create and space: how publish will write it */
    char key[];
};

/* Reads for the rest of a response go through conn->in of this size; larger
 * remainders go straight to their destination. */
#define DS_CLIENT_INBUF 16384u

/* ---- conn.c: framing over one socket ---- */

/* Opens a socket to the worker and says HELLO. On success *fd, the response
 * fields and, when the worker sent the arena, *arena_fd (else -1). */
typedef struct {
    const char *unix_path;       /* the Unix socket to dial (asking for the arena); NULL = TCP */
    uint64_t session;            /* the session to join; 0 = a new one */
    const char *session_key;     /* its key; "" for a new one */
    uint64_t proof_session;      /* discovery: the TCP session the worker must prove it holds */
    const char *proof_challenge; /* and the challenge to prove it with; NULL = none */
} ds_dial_t;
typedef struct {
    uint64_t session;
    uint64_t arena_size;
    uint32_t inline_max;
    uint32_t pid;
    char worker_id[128];
    int arena_fd;
    uint64_t index_offset; /* shared GET index; index_slots 0 = none */
    uint32_t index_slots;
    uint32_t index_keymax;
    char session_key[DS_SESSION_KEY_MAX + 1]; /* "" from workers that send none */
    char unix_socket[128];                    /* the worker's Unix socket; "" when it names none */
    char local_proof[96];                     /* its answer to proof_challenge; "" = none */
    uint32_t features;                        /* DS_FEATURE_*; 0 from workers that send none */
    uint64_t pins_offset;                     /* DS_FEATURE_SHM_PINS: the session's pin table */
    ds_tls_t *tls; /* the TCP connection's TLS session (enable_tls), else NULL: the caller's */
} ds_hello_t;
ds_status_t ds__conn_dial(const ds_client_t *c, const ds_dial_t *d, int *fd, ds_hello_t *out);

/* A connection over transport ops, without its transport state (the
 * caller sets it); takes a reference on sess. */
ds_conn_t *ds__conn_new(const ds_conn_ops_t *ops, ds_sess_t *sess, const char *peer);
/* A pool connection over a connected socket and its TLS session (NULL =
 * none; taken over). */
ds_conn_t *ds__conn_new_sock(int fd, ds_tls_t *tls, ds_sess_t *sess, const char *peer);
/* Closes a dialled socket nobody took, with its TLS session. */
void ds__dial_close(int fd, ds_hello_t *h);
void ds__conn_free(ds_conn_t *conn);
/* Starts a request: resets buffers, reserves the header. Metadata then goes
 * into conn->w with the ds__wbuf_* writers. */
void ds__conn_begin(ds_conn_t *conn);
/* Appends a value to the data section (copied when small, else referenced:
 * p must stay valid until the request has been sent). */
void ds__conn_add_data(ds_conn_t *conn, const void *p, size_t len);
/* Sends the request and, unless noreply, reads the response header and
 * metadata. Returns the response's status with ds_last_error set from its
 * message, or a transport status (conn->state says whether it is usable).
 * On DS_K_OK or a worker error, conn->r reads the rest of the metadata. */
ds_status_t ds__conn_call(ds_conn_t *conn, ds_opcode_t op, bool noreply, uint64_t deadline);
/* Reads n bytes of the response data section into dst. */
ds_status_t ds__conn_read_data(ds_conn_t *conn, void *dst, size_t n, uint64_t deadline);
/* Reads and drops the next n bytes of the data section. */
ds_status_t ds__conn_skip(ds_conn_t *conn, uint64_t n, uint64_t deadline);
/* Reads and drops whatever of the data section is left, so the connection can
 * serve the next request. Marks it broken if that fails. */
void ds__conn_drain(ds_conn_t *conn, uint64_t deadline);
/* Asks the worker for a request lane for conn (LANE). DS_K_OK also when
 * the worker has none to give; an error when the connection failed. */
ds_status_t ds__conn_lane_open(ds_conn_t *conn, uint64_t deadline);

/* ---- sock.c: the socket transport ---- */

extern const ds_conn_ops_t ds__sock_ops;
/* The socket transport's call and recv, for transports that fall back to
 * the socket (lane.c). */
int ds__sock_call(ds_conn_t *conn, struct iovec *iov, size_t n, uint64_t req, bool noreply,
                  uint64_t deadline);
ssize_t ds__sock_recv(ds_conn_t *conn, void *buf, size_t cap, uint64_t deadline);
void ds__sock_shutdown(ds_conn_t *conn);
void ds__sock_close(ds_conn_t *conn);
/* Waits until fd is ready for events or deadline passes: 0, or -1 with
 * errno (ETIMEDOUT). */
int ds__wait_fd(int fd, short events, uint64_t deadline);
/* Writes every byte the iovecs describe (advancing them) before deadline,
 * through tls when it is not NULL. */
int ds__send_iov(int fd, ds_tls_t *tls, struct iovec *iov, size_t n, uint64_t deadline);

/* ---- lane.c: requests through the arena (common/lane.h) ---- */

/* False when DS_CLIENT_LANE=0. */
bool ds__lane_wanted(void);
extern const ds_conn_ops_t ds__lane_ops;
/* Sets conn's lane up from LANE's answer (takes bell_fd over) and makes
 * it conn's transport; a protocol error when the answer names no valid
 * lane. */
ds_status_t ds__lane_attach(ds_conn_t *conn, uint64_t hub_off, uint64_t lane_off, uint32_t gen,
                            int bell_fd);
/* The lane transport's halves (ds__lane_ops' call is the two; exported
 * for unit tests). Puts the request (the iovecs) into the lane; false
 * when it cannot go there (too large, the worker closed it): it then
 * takes the socket. */
bool ds__lane_send(ds_conn_t *conn, const struct iovec *iov, size_t n);
/* Waits for the answer to the lane request: polls, then sleeps. 0 with the
 * answer in conn->in, or with nothing there when it comes on the socket;
 * -1 with errno (ETIMEDOUT, EPROTO for a malformed lane, ENOMEM). */
int ds__lane_wait(ds_conn_t *conn, uint64_t deadline, bool *contended);
/* A value's bytes copied into the arena ahead of the request that publishes
 * them, waking the worker ahead of that request (DS_LANE_AHEAD_MIN in
 * common/lane.h): init with the value's total size, then copy each piece. */
typedef struct {
    ds_conn_t *conn;
    uint64_t left; /* bytes still to copy */
    bool armed;    /* the promise is still to be made */
} ds_lane_ahead_t;
void ds__lane_ahead_init(ds_lane_ahead_t *a, ds_conn_t *conn, uint64_t total);
void ds__lane_copy_in(ds_lane_ahead_t *a, uint8_t *dst, const void *src, size_t n);
/* A value copied into the arena outside any request (ds_buffer_memory_copy
 * into a buffer of session s): copied as ds__lane_copy_in copies a set's,
 * promising the worker a request (the publish that follows) before its last
 * DS_LANE_AHEAD_BYTES. The promise's soon value (0 = none made). */
uint64_t ds__lane_copy_in_sess(ds_sess_t *s, uint8_t *dst, const void *src, size_t n);
/* Makes the request conn sends next take back the promise soon (0: none). */
void ds__lane_take_promise(ds_conn_t *conn, uint64_t soon);
/* ---- mux.c: the shared connection (Multiplexing, above) ---- */

/* Wraps a connected socket of sess (takes it over, and a reference on sess). */
ds_mux_t *ds__mux_new(int fd, ds_sess_t *sess);
extern const ds_conn_ops_t ds__mux_ops;
/* A call state on m (a connection with ds__mux_ops, referencing m). */
ds_conn_t *ds__mux_conn_new(ds_mux_t *m, const char *peer);
void ds__mux_ref(ds_mux_t *m);
void ds__mux_unref(ds_mux_t *m);
ds_sess_t *ds__mux_sess(const ds_mux_t *m);
/* Neither broken nor retired: new calls may use it. */
bool ds__mux_usable(ds_mux_t *m);
/* No new calls; those in flight finish. */
void ds__mux_retire(ds_mux_t *m);
/* ds_client_close: fails every call waiting on it now. */
void ds__mux_shutdown(ds_mux_t *m);
uint64_t ds__mux_next_req(ds_mux_t *m);

/* Marks the connection broken after a malformed response and says so. */
ds_status_t ds__conn_protocol_error(ds_conn_t *conn, const char *what);

/* ---- client.c: pool and sessions ---- */

/* Every public call that uses a client brackets its work with these: enter
 * takes a reference (NULL is ignored), leave drops it and returns st, turned
 * into DS_K_INVALID "the client is closed" when the call failed because
 * ds_client_close shut its connection down. Nothing may touch c after leave. */
void ds__client_enter(ds_client_t *c);
ds_status_t ds__client_leave(ds_client_t *c, ds_status_t st);

/* Deadline (monotonic ms) for a request that may wait sub_timeout_ms on top. */
uint64_t ds__client_deadline(const ds_client_t *c, int32_t sub_timeout_ms);
/* Borrows a connection (opening one, or a new session, when needed), waiting
 * for a free one at most until *deadline. Time spent waiting or connecting is
 * added to *deadline: the request timeout covers the request itself, so a
 * busy pool does not eat into a subscribe-get's wait. */
ds_status_t ds__client_acquire(ds_client_t *c, uint64_t *deadline, ds_conn_t **out);
/* The same for a call of at most bytes bytes (DS_CLIENT_MUX_MAX to share)
 * that never waits at the worker: a call state on the shared connection
 * when the client is remote and another call is in progress. */
ds_status_t ds__client_acquire_small(ds_client_t *c, uint64_t *deadline, size_t bytes,
                                     ds_conn_t **out);
/* Returns a borrowed connection; a broken or lost one is closed, and a lost
 * one makes the client check whether the worker went away. */
void ds__client_put(ds_client_t *c, ds_conn_t *conn);
void ds__sess_ref(ds_sess_t *s);
void ds__sess_unref(ds_sess_t *s);
/* buffer.c: releases n buffers as ds_buffer_release would, each
 * session's pins told to the worker in one frame; bufs[i] become NULL. */
void ds__buffers_release(ds_buffer_t **bufs, size_t n);
/* Drops pins / reservations of s (NOREPLY over its anchor). A session whose
 * anchor is gone has nothing left to release. */
void ds__sess_release(ds_sess_t *s, const uint64_t *handles, size_t n);
/* Takes s's deferred releases (up to DS_CLIENT_DEFER_MAX) into out; their
 * count. */
size_t ds__sess_take_deferred(ds_sess_t *s, uint64_t *out);

/* The current session, referenced, when it maps the arena and the worker
 * keeps a GET index in it that can be read now; else NULL. No syscall in the
 * common case: the anchor is polled at most once a millisecond so that
 * values of a worker that died are not served for longer than that. */
ds_sess_t *ds__client_index_session(ds_client_t *c);

/* ---- context.c: per-thread request context ---- */

/* This thread's trace id (ds_context_set_trace_id), "" when none. */
const char *ds__trace_id(void);

/* ---- kv.c: argument checks and GET, shared with buffer.c ---- */

ds_status_t ds__check_keys(size_t n, const char *const *keys, size_t max);
ds_status_t ds__check_param(const ds_set_param_t *param);

/* One SET carrying keys[idx[i]] (idx NULL = 0..n-1) with their values in the
 * data section; per-key results go to sts[idx[i]]. */
void ds__set_values(ds_conn_t *conn, const ds_set_param_t *p, size_t n, const size_t *idx,
                    const char *const *keys, const void *const *vals, const size_t *lens,
                    ds_status_t *sts, uint64_t deadline);
/* The first failed status among sts[0..n), with a message naming its key
 * when the worker gave none; DS_K_OK when every key succeeded. */
ds_status_t ds__first_failure(size_t n, const char *const *keys, const ds_status_t *sts,
                              const char *verb);

/* A SET's parameters on the wire: write mode, TTL, existence. */
void ds__set_param_put(ds_conn_t *conn, const ds_set_param_t *p);

/* One key of a GET response. */
typedef struct {
    uint8_t kind; /* DS_VAL_* */
    uint64_t size;
    uint64_t off;    /* DS_VAL_SHM: where in the arena */
    uint64_t handle; /* DS_VAL_SHM: the pin to release */
} ds_getent_t;
/* Sends GET for n keys and parses the entries. On DS_K_OK the connection's
 * data section holds the inline values in entry order, and every SHM entry
 * is pinned until released; on failure nothing is left pinned or unread. */
ds_status_t ds__get_request(ds_conn_t *conn, size_t n, const char *const *keys,
                            int32_t sub_timeout_ms, uint8_t flags, uint64_t deadline,
                            ds_getent_t *ents);
/* The same as a UCX_GET (common/wire.h) when the client has UCX and the
 * session is remote: entries may then be kind DS_VAL_UCX, each to be
 * received with ds__cucx_recv under *tag + its index; max_size is the
 * largest value to come that way (larger ones come inline). *tag 0: a
 * plain GET (with flags) was sent. */
ds_status_t ds__get_request_ucx(ds_client_t *c, ds_conn_t *conn, size_t n, const char *const *keys,
                                int32_t sub_timeout_ms, uint8_t flags, uint64_t max_size,
                                uint64_t deadline, ds_getent_t *ents, uint64_t *tag);
/* Reads one GET/READ answer entry (kind, size, [offset, handle]) into e:
 * false when the metadata ran out; *bad is set when the entry is not one a
 * worker may send (an arena range outside the mapping, an unknown kind), and
 * *inline_total grows by an inline value's size. */
bool ds__read_entry(ds_conn_t *conn, ds_getent_t *e, uint64_t *inline_total, bool *bad);
/* Releases the pins of the SHM entries among e[0..n) in one frame. */
void ds__release_entries(ds_sess_t *s, const ds_getent_t *e, size_t n);

/* ---- space.c: a connection's reserved arena space (SETR) ---- */

/* Values are copied to 64-byte aligned offsets of the space. */
uint64_t ds__round_up64(uint64_t n);
/* Starts a SETR request: the space (or buffer) handle it writes from, the
 * space to ask for with it, and its flags (DS_SETR_*). */
void ds__space_begin(ds_conn_t *conn, uint64_t handle, uint64_t want, uint8_t flags);
/* The space to ask for with a set of need bytes (rounded up): the largest
 * of the connection's recent sets (DS_CLIENT_SPACE_WINDOW), at most
 * DS_CLIENT_SPACE_KEEP, at least need. Counts the set. */
uint64_t ds__space_want(ds_conn_t *conn, uint64_t need);
/* Asks for a space of at least want bytes (SETR without keys); whether the
 * worker granted it, conn->space.len says. DS_K_OK, or a transport or
 * protocol failure's status (the connection is then broken). */
ds_status_t ds__space_get(ds_conn_t *conn, uint64_t want, uint64_t deadline);
/* Makes sure conn's space holds total bytes, asking for it when it does
 * not, unless the worker lately refused a size that large: 1 when it
 * does, 0 when the set should take CREATE / PUBLISH instead, -1 with *st
 * the failure's status (the connection is then broken). */
int ds__space_reserve(ds_conn_t *conn, uint64_t total, uint64_t deadline, ds_status_t *st);
/* Takes a SETR answer's trailer off conn->r into t: space handle, offset,
 * length and (pin: the request asked for one) the pin. DS_K_OK, or a
 * protocol error when the answer has none or names a range outside the
 * mapping. t is all zeros after a transport failure. */
ds_status_t ds__space_trailer(ds_conn_t *conn, bool pin, uint64_t t[4]);
/* Takes the space trailer off a SETR answer and makes it the connection's
 * space (none after a transport failure: the worker drops it with the
 * session). A protocol error's status, else DS_K_OK. */
ds_status_t ds__space_take(ds_conn_t *conn);
/* Makes the space a trailer t names (t[0] != 0) the connection's, giving
 * back the one it held. */
void ds__space_replace(ds_conn_t *conn, const uint64_t t[4]);
/* The connection's space becomes the caller's (a buffer's): its handle;
 * the connection then holds none. */
uint64_t ds__space_hand_over(ds_conn_t *conn);
/* Gives the space back (RELEASE over the anchor); with the connection. */
void ds__space_drop(ds_conn_t *conn);

/* ---- ucx.c: remote gets over UCX (enable_ucx / DS_CLIENT_UCX=1) ---- */

typedef struct ds_cucx ds_cucx_t;
/* One receive; owned by its caller, touched by UCX until it is over. */
typedef struct {
    void *req;
    uint64_t gen;
    bool posted, done;
    int st; /* ucs_status_t */
    size_t got, want;
} ds_crecv_t;
/* Opens the client's UCX context and worker; an error naming the UCX call,
 * its status and UCX_TLS when UCX cannot start. */
ds_status_t ds__cucx_new(ds_cucx_t **out);
void ds__cucx_free(ds_cucx_t *u);
/* Tags for n values (*tag .. *tag + n - 1), this client's UCX address (hex,
 * into addr of DS_UCX_ADDR_HEX_MAX + 1 bytes) and its generation (it
 * changes when a failed transfer made a new UCX worker). */
ds_status_t ds__cucx_begin(ds_cucx_t *u, size_t n, uint64_t *tag, char *addr, uint64_t *gen);
/* Posts a receive of exactly len bytes into dst. */
ds_status_t ds__cucx_recv(ds_cucx_t *u, ds_crecv_t *rv, uint64_t tag, void *dst, size_t len);
/* Waits until every posted receive of rv[0..n) has all its bytes; a failure
 * (UCX error, conn closing, deadline) ends them all first, so every dst is
 * the caller's again whatever the result. */
ds_status_t ds__cucx_wait(ds_cucx_t *u, ds_crecv_t *rv, size_t n, ds_conn_t *conn,
                          uint64_t deadline);
/* Ends posted receives the caller no longer waits for. */
void ds__cucx_abandon(ds_cucx_t *u, ds_crecv_t *rv, size_t n);

/* ---- discovery.c ---- */

/* A worker per sd's policy, leaving out avoid ("host:port", may be NULL)
 * while another is ready. */
ds_status_t ds__discovery_select(ds_service_discovery_t *sd, const char *avoid, char *ip,
                                 size_t ip_cap, int *port, bool *same_node);

/* ---- env.c ---- */

/* Reads the logging variables, once per process. */
void ds__client_env_init(void);
/* What the options leave unset, from the environment: host ("" / NULL:
 * DATASYSTEM_HOST), port (0: DATASYSTEM_PORT), token (NULL:
 * DATASYSTEM_TOKEN), connect timeout (0: DATASYSTEM_CONNECT_TIME_MS).
 * DS_K_INVALID naming a variable that does not parse. */
ds_status_t ds__client_env_fallbacks(const char **host, int *port, const char **token,
                                     int *connect_timeout_ms);

#endif
