/* libFuzzer target for the worker's request path: the connection layer
 * (src/worker/net: connections, HELLO, sessions, the request layer and its
 * ready list), the operations (src/worker/ops), subscribe-gets and the store,
 * running in this process on a real worker (ds__server_init with a 4 MiB
 * arena) and fed through up to four real sockets at once, Unix and TCP.
 *
 * Several connections matter: a publish on one connection ends waits parked
 * by others, whose pipelined requests then run; a worker that resumed them
 * from inside the publish freed waits it was still walking. The input
 * interleaves the connections' bytes so the fuzzer can build such orders.
 *
 * Input: three setup bytes, then chunks until the input ends.
 *   byte 0  bits 0-1  connections - 1 (one to four)
 *           bit 2     after the last chunk, fire every subscribe-get
 *                     deadline and TTL
 *   byte 1  bit i     connection i sends a valid HELLO first
 *           bit 4+i   that HELLO asks for the arena (a local client: CREATE,
 *                     pins, SETR reservations)
 *   byte 2  bit i     connection i uses the TCP listener, else the Unix socket
 *           bit 4+i   connection i (i > 0) joins the session connection 0 was
 *                     given, with its key
 *   chunk   u8 control: bits 0-1 the connection (modulo their number);
 *                       bit 2 shut it down and close it after this chunk,
 *                       possibly mid-frame (a later chunk for it reconnects);
 *                       bit 3 fire every deadline after this chunk;
 *                       bit 4 do not run the worker's loop after this chunk
 *                       (nor before closing), so the next chunk's bytes, or
 *                       the hang-up, arrive in the same turn
 *           u16 length (little-endian; cut to what is left), then the bytes
 *
 * Oracles, besides the sanitizers: every frame the worker sends on every
 * connection must decode and match the layout wire.h documents for its
 * opcode (a GET's data section exactly the inline values it announces);
 * after every client hangs up, every connection must be gone within a
 * bounded number of loop turns; and then no session, subscription, wait,
 * pin or unpublished object may be left, and the store's consistency check
 * must pass. The store is recreated between inputs so runs are independent.
 *
 * FUZZ_WORKER_TRACE=1 in the environment prints, after each chunk, the
 * worker's waits and per-opcode request counts and each connection's
 * answers (to see which paths a seed takes). */
#include "layouts.h"

#include "common/net.h"
#include "worker/core/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_worker: check failed: %s (line %d)\n", #cond, __LINE__);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define NCLIENTS 4
/* Stop reading responses after this much; the worker must cope with a
 * client that vanishes with output still queued. */
#define READ_CAP (64u << 20)
/* Loop turns: while pumping after a chunk, and for the hang-up. */
#define PUMP_TURNS 2000
#define HANGUP_TURNS 20000
#define KEY_CAP 64

static ds_server_t srv;
static char sockdir[64];
static bool trace;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Incremental reader of the worker's response stream on one connection. */
typedef struct {
    uint8_t hdr[DS_WIRE_HEADER_LEN];
    uint32_t hdr_got;
    ds_wire_header_t h;
    uint8_t *meta;
    uint32_t meta_got;
    uint64_t data_left;
    uint64_t total;
    bool in_meta, in_data;
    bool closed;
    uint64_t answers[DS_OP__MAX];
    /* From a successful HELLO answer: what joining the session takes. */
    bool have_session;
    uint64_t session;
    char key[KEY_CAP];
    uint32_t key_len;
} reader_t;

/* One client connection and the bytes it has yet to send. */
typedef struct {
    int fd; /* -1: not connected */
    bool tcp, hello, want_shm, join;
    reader_t rd;
    uint8_t *out;
    size_t out_len, out_off, out_cap;
} client_t;

static client_t clients[NCLIENTS];
static uint32_t nclients;

static void cleanup(void)
{
    ds__server_destroy(&srv);
    rmdir(sockdir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ds_worker_config_t cfg;
    char err[512];
    char *args[] = {"fuzz_worker", NULL};
    CHECK(ds__flags_parse(&cfg, 1, args, err, sizeof(err)) == 0);
    snprintf(sockdir, sizeof(sockdir), "/tmp/ds-fuzz-XXXXXX");
    CHECK(mkdtemp(sockdir) != NULL);
    snprintf(cfg.unix_socket_dir, sizeof(cfg.unix_socket_dir), "%s", sockdir);
    snprintf(cfg.log_level, sizeof(cfg.log_level), "error");
    cfg.shared_memory_size_mb = 4;
    cfg.max_frame_mb = 16;
    cfg.inline_max_kb = 4;
    cfg.max_pending_subscriptions = 1000;
    for (int attempt = 0;; attempt++) {
        snprintf(cfg.worker_address, sizeof(cfg.worker_address), "127.0.0.1:%d",
                 ds__free_tcp_port(NULL));
        if (ds__server_init(&srv, &cfg, err, sizeof(err)) == 0) break;
        ds__server_destroy(&srv);
        if (attempt == 5) {
            fprintf(stderr, "fuzz_worker: %s\n", err);
            abort();
        }
    }
    /* The server blocks SIGINT/SIGTERM for its signalfd; give them back to
     * libFuzzer, which stops cleanly on them. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_UNBLOCK, &mask, NULL);
    const char *t = getenv("FUZZ_WORKER_TRACE");
    trace = t != NULL && t[0] == '1';
    atexit(cleanup);
    return 0;
}

/* Keeps what joining the session of a successful HELLO takes. */
static void note_hello(reader_t *rd)
{
    ds_rbuf_t r;
    ds__rbuf_init(&r, rd->meta, rd->h.meta_len);
    const char *s;
    (void)ds__rbuf_str(&r, &s); /* error */
    uint64_t session = ds__rbuf_u64(&r);
    (void)ds__rbuf_u64(&r); /* arena_size */
    (void)ds__rbuf_u32(&r); /* inline_max */
    (void)ds__rbuf_str(&r, &s);
    (void)ds__rbuf_u32(&r); /* pid */
    if (r.pos < r.len) {
        (void)ds__rbuf_u64(&r);
        (void)ds__rbuf_u32(&r);
        (void)ds__rbuf_u32(&r);
    }
    uint32_t n = r.pos < r.len ? ds__rbuf_str(&r, &s) : 0;
    if (r.err || n > KEY_CAP) return;
    rd->have_session = true;
    rd->session = session;
    memcpy(rd->key, s, n);
    rd->key_len = n;
}

static void check_frame(reader_t *rd)
{
    fz_parse_t p;
    fz_parse_response(rd->h.opcode, rd->meta, rd->h.meta_len, NULL, &p);
    bool bare_ok = p.error_only && (rd->h.status != DS_K_OK || fz_response_is_bare(rd->h.opcode));
    if (!p.complete && !bare_ok) {
        fprintf(stderr, "fuzz_worker: %s response (status %u, %u meta bytes) breaks its layout\n",
                ds__opcode_name(rd->h.opcode), rd->h.status, rd->h.meta_len);
        abort();
    }
    if (rd->h.opcode == DS_OP_GET && p.complete) CHECK(rd->h.data_len == p.inline_data);
    if (rd->h.opcode != DS_OP_GET) CHECK(rd->h.data_len == 0);
    rd->answers[rd->h.opcode]++;
    if (rd->h.opcode == DS_OP_HELLO && rd->h.status == DS_K_OK && p.complete) note_hello(rd);
}

static void feed(reader_t *rd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        if (rd->in_data) {
            size_t k = rd->data_left < n ? (size_t)rd->data_left : n;
            rd->data_left -= k;
            p += k;
            n -= k;
            if (rd->data_left == 0) rd->in_data = false;
            continue;
        }
        if (rd->in_meta) {
            size_t k = rd->h.meta_len - rd->meta_got;
            if (k > n) k = n;
            memcpy(rd->meta + rd->meta_got, p, k);
            rd->meta_got += (uint32_t)k;
            p += k;
            n -= k;
            if (rd->meta_got == rd->h.meta_len) {
                rd->in_meta = false;
                check_frame(rd);
                free(rd->meta);
                rd->meta = NULL;
                rd->data_left = rd->h.data_len;
                rd->in_data = rd->data_left > 0;
            }
            continue;
        }
        size_t k = DS_WIRE_HEADER_LEN - rd->hdr_got;
        if (k > n) k = n;
        memcpy(rd->hdr + rd->hdr_got, p, k);
        rd->hdr_got += (uint32_t)k;
        p += k;
        n -= k;
        if (rd->hdr_got < DS_WIRE_HEADER_LEN) continue;
        rd->hdr_got = 0;
        char err[256];
        if (ds__wire_header_decode(rd->hdr, UINT64_MAX, &rd->h, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_worker: worker sent an undecodable header: %s\n", err);
            abort();
        }
        CHECK(rd->h.flags & DS_FLAG_RESPONSE);
        if (rd->h.meta_len == 0) {
            /* Every response carries at least its error string. */
            fprintf(stderr, "fuzz_worker: response without metadata\n");
            abort();
        }
        rd->meta = malloc(rd->h.meta_len);
        CHECK(rd->meta != NULL);
        rd->meta_got = 0;
        rd->in_meta = true;
    }
}

/* Reads what the worker sent on c; closes any arena fd that rode along.
 * Returns the bytes read. */
static size_t drain(client_t *c)
{
    static uint8_t buf[1 << 16];
    reader_t *rd = &c->rd;
    size_t got = 0;
    while (c->fd >= 0 && !rd->closed && rd->total < READ_CAP) {
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t r = recvmsg(c->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); r > 0 && cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                int afd;
                memcpy(&afd, CMSG_DATA(cm), sizeof(afd));
                close(afd);
            }
        }
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            rd->closed = true;
            break;
        }
        if (r < 0) break;
        feed(rd, buf, (size_t)r);
        rd->total += (uint64_t)r;
        got += (size_t)r;
    }
    return got;
}

/* Sends what c has queued, as far as the socket takes it. */
static size_t flush(client_t *c)
{
    if (c->fd < 0 || c->out_off == c->out_len) return 0;
    ssize_t w =
        send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        c->out_off = c->out_len; /* the worker closed the connection */
    if (w <= 0) return 0;
    c->out_off += (size_t)w;
    return (size_t)w;
}

static void queue(client_t *c, const uint8_t *p, size_t n)
{
    if (n == 0) return;
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n)
            cap *= 2;
        c->out = realloc(c->out, cap);
        CHECK(c->out != NULL);
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

/* Runs the loop until neither side makes progress for a few turns. */
static void pump(void)
{
    int idle = 0;
    for (int turn = 0; turn < PUMP_TURNS && idle < 3; turn++) {
        size_t moved = 0;
        for (uint32_t i = 0; i < nclients; i++)
            moved += flush(&clients[i]);
        bool busy = ds__net_busy(&srv.net);
        ds__net_after_event(&srv.net);
        /* Large answers go out from the sender thread: give it a moment. */
        int ev = ds__loop_run_once(srv.net.loop, ds__net_output_pending(&srv.net) ? 1 : 0);
        ds__net_free_dead(&srv.net);
        for (uint32_t i = 0; i < nclients; i++)
            moved += drain(&clients[i]);
        idle = (moved == 0 && ev == 0 && !busy) ? idle + 1 : 0;
    }
}

/* Every subscribe-get deadline and TTL passes now. */
static void fire_deadlines(void)
{
    ds__subs_expire(&srv.subs, UINT64_MAX);
    ds__store_expire_due(srv.store, UINT64_MAX);
    /* The sweeps may have ended deferred requests. */
    ds__net_after_event(&srv.net);
}

static void queue_hello(client_t *c, uint64_t session, const char *key, uint32_t key_len)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u32(&m, DS_WIRE_VERSION);
    ds__wbuf_u64(&m, session);
    ds__wbuf_u8(&m, c->want_shm);
    ds__wbuf_cstr(&m, "");
    ds__wbuf_str(&m, key, key_len);
    CHECK(!m.oom);
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = DS_OP_HELLO,
                          .meta_len = (uint32_t)m.len,
                          .req_id = 1};
    uint8_t hdr[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, hdr);
    queue(c, hdr, sizeof(hdr));
    queue(c, m.buf, m.len);
    ds__wbuf_free(&m);
}

/* Connects client i, sends its HELLO and runs the loop until it is answered. */
static void open_client(uint32_t i)
{
    client_t *c = &clients[i];
    char err[256];
    c->fd = c->tcp ? ds__tcp_connect(srv.host, srv.port, 2000, err, sizeof(err))
                   : ds__unix_connect(srv.sock_path, 2000, err, sizeof(err));
    CHECK(c->fd >= 0);
    free(c->rd.meta);
    memset(&c->rd, 0, sizeof(c->rd));
    c->out_off = c->out_len = 0;
    if (!c->hello) return;
    const reader_t *r0 = &clients[0].rd;
    if (i > 0 && c->join && r0->have_session)
        queue_hello(c, r0->session, r0->key, r0->key_len);
    else
        queue_hello(c, 0, "", 0);
    pump();
}

/* The client hangs up: shutdown and close, whatever it had left to send. */
static void close_client(client_t *c)
{
    if (c->fd < 0) return;
    shutdown(c->fd, SHUT_RDWR);
    close(c->fd);
    c->fd = -1;
    c->out_off = c->out_len = 0;
}

static void print_trace(uint32_t chunk, uint8_t ctl, size_t len)
{
    const ds_net_counters_t *k = &srv.net.ctr;
    fprintf(stderr,
            "fuzz_worker: chunk %u (conn %u, %zu bytes%s): conns %u sessions %u waits %u "
            "subscribed %u; requests get %llu set %llu del %llu\n",
            chunk, (ctl & 3u) % nclients, len, (ctl & 4) ? ", closed" : "", srv.net.nconns,
            srv.net.nsessions, srv.subs.n, srv.subs.count, (unsigned long long)k->ops[DS_OP_GET],
            (unsigned long long)k->ops[DS_OP_SET], (unsigned long long)k->ops[DS_OP_DEL]);
    for (uint32_t i = 0; i < nclients; i++) {
        const reader_t *rd = &clients[i].rd;
        fprintf(
            stderr, "fuzz_worker:   conn %u%s: answers hello %llu get %llu set %llu del %llu\n", i,
            clients[i].fd < 0 ? " (closed)" : "", (unsigned long long)rd->answers[DS_OP_HELLO],
            (unsigned long long)rd->answers[DS_OP_GET], (unsigned long long)rd->answers[DS_OP_SET],
            (unsigned long long)rd->answers[DS_OP_DEL]);
    }
}

/* After every client hung up: nothing of theirs may be left in the worker. */
static void check_hangup(void)
{
    for (int turn = 0; turn < HANGUP_TURNS && srv.net.nconns > 0; turn++) {
        ds__net_after_event(&srv.net);
        ds__loop_run_once(srv.net.loop, 10);
        ds__net_free_dead(&srv.net);
    }
    if (srv.net.nconns != 0) {
        fprintf(stderr, "fuzz_worker: %u connections still open after the clients hung up\n",
                srv.net.nconns);
        abort();
    }
    CHECK(srv.net.conns == NULL);
    CHECK(srv.net.sessions == NULL && srv.net.nsessions == 0);
    CHECK(srv.subs.count == 0 && srv.subs.n == 0);
    CHECK(ds__store_check(srv.store) == 0);
    ds_store_stats_t st;
    ds__store_stats(srv.store, &st);
    /* Pins, and unpublished (CREATING) objects, which count as pinned. */
    CHECK(st.pinned == 0);
    /* Reservations (SETR spaces) go with their session. */
    CHECK(st.reservations == 0 && st.reserved_bytes == 0);
}

/* A fresh store in the same arena: the HELLO information stays valid. */
static void renew_store(void)
{
    uint64_t ix_off = 0, ix_slots = 0;
    (void)ds__store_index(srv.store, &ix_off, &ix_slots);
    ds__store_destroy(srv.store);
    srv.store =
        ds__store_create_indexed(&srv.arena, ix_slots, (uint64_t)srv.cfg.index_value_max_kb << 10);
    CHECK(srv.store != NULL);
    /* Pin tables for local sessions, as ds__server_init sets aside. */
    if (ix_slots) CHECK(ds__store_pins_reserve(srv.store, 16) == DS_K_OK);
    srv.net.store = srv.store;
    uint64_t off2 = 0, slots2 = 0;
    (void)ds__store_index(srv.store, &off2, &slots2);
    CHECK(off2 == ix_off && slots2 == ix_slots);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    nclients = (data[0] & 3u) + 1;
    for (uint32_t i = 0; i < nclients; i++) {
        client_t *c = &clients[i];
        c->hello = (data[1] >> i) & 1u;
        c->want_shm = (data[1] >> (4 + i)) & 1u;
        c->tcp = (data[2] >> i) & 1u;
        c->join = (data[2] >> (4 + i)) & 1u;
        open_client(i);
    }
    bool fire_at_end = (data[0] & 4) != 0;
    const uint8_t *p = data + 3;
    size_t left = size - 3;
    for (uint32_t chunk = 0; left >= 3; chunk++) {
        uint8_t ctl = p[0];
        size_t len = (size_t)p[1] | (size_t)p[2] << 8;
        p += 3;
        left -= 3;
        if (len > left) len = left;
        client_t *c = &clients[(ctl & 3u) % nclients];
        if (c->fd < 0) open_client((uint32_t)(c - clients));
        queue(c, p, len);
        flush(c);
        p += len;
        left -= len;
        bool run = !(ctl & 16);
        if (ctl & 4) {
            /* What the socket took goes; the rest never does. Without a
             * turn first, the worker finds the frames and the hang-up
             * together. */
            if (run) pump();
            close_client(c);
        }
        if (ctl & 8) fire_deadlines();
        if (run || (ctl & 8)) pump();
        if (trace) print_trace(chunk, ctl, len);
    }
    pump();
    if (fire_at_end) {
        fire_deadlines();
        pump();
    }
    for (uint32_t i = 0; i < nclients; i++)
        close_client(&clients[i]);
    check_hangup();
    for (uint32_t i = 0; i < nclients; i++) {
        free(clients[i].rd.meta);
        clients[i].rd.meta = NULL;
    }
    srv.stopping = false; /* a SHUTDOWN only sets the flag */
    renew_store();
    return 0;
}
