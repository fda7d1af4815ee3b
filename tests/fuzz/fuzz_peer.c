/* libFuzzer target for the peer protocol: who may speak as a peer
 * (net/hello.c: ds__conn_rights), PEER_AUTH (cluster/cluster_auth.c,
 * peer_auth.c) and the peer operations behind it (cluster/cluster_owner.c:
 * LOCATE, META_PUT, META_DEL, DROP; UCX_PULL), on a real worker in cluster
 * mode running in this process: --cluster_secret_file names a temporary
 * file, and --etcd_address a loopback port nobody listens on (the cluster's
 * threads retry it in the background; the worker is alone on its ring, so
 * every peer job it makes is for a non-member and fails without contact).
 *
 * Input: one setup byte, then the bytes one connection sends.
 *   byte 0  bit 0  before the bytes, the harness completes PEER_AUTH with
 *                  the right secret, claiming the worker's own address (its
 *                  only member), so the bytes reach the peer operations
 *           bit 1  use the Unix socket, else TCP
 *           bit 2  after the bytes, fire every wait deadline
 *           bit 3  send no HELLO first
 *   rest    frames, sent in pieces of up to 4 KiB with a loop turn between
 *
 * Oracles, besides the sanitizers: every frame the worker answers decodes and
 * matches its opcode's layout (tests/fuzz/layouts.c); on a connection that
 * did not complete PEER_AUTH, no request that is peer-only or carries
 * DS_FLAG_PEER or an unknown flag bit is answered K_OK (requests are matched
 * by id among the frames of the input the harness could walk); PEER_AUTH
 * step 2 from the input never succeeds (it cannot know the nonce's proof);
 * and once the client hangs up, its connection and session are gone. (The
 * worker sends peer jobs for its own keys to itself, over pooled connections
 * of its job threads that stay open between inputs: those, proven peers with
 * sessions of their own, are not the client's.) */
#include "layouts.h"

#include "common/auth.h"
#include "common/net.h"
#include "worker/core/server.h"
#include "worker/net/conn.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_peer: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define SECRET "fuzz-cluster-secret"
#define PIECE 4096
#define PUMP_TURNS 2000
#define HANGUP_TURNS 20000
#define READ_CAP (16u << 20)
#define MAX_SENT 512
/* Request ids the harness uses for its own HELLO and PEER_AUTH. */
#define OWN_ID_BASE (UINT64_C(1) << 62)

static ds_server_t srv;
static char dir[64], secret_path[128];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the input asked, by request id: whether any frame with that id was
 * one only a proven peer may send, and whether any was not. */
typedef struct {
    uint64_t id;
    bool forbidden, allowed;
    uint16_t op;
} sent_t;

static sent_t sent[MAX_SENT];
static uint32_t nsent;

static struct {
    int fd;
    bool peer;
    uint8_t hdr[DS_WIRE_HEADER_LEN];
    uint32_t hdr_got;
    ds_wire_header_t h;
    uint8_t *meta;
    uint32_t meta_got;
    uint64_t data_left;
    bool in_meta, in_data, closed;
    uint64_t total;
    /* The harness's own PEER_AUTH: the answer to step 1, then step 2's. */
    char nonce_b[DS_AUTH_HEX_LEN + 1];
    uint32_t own_status;
    bool own_answered;
    uint64_t sid; /* the client's session, 0 = none */
} cl;

/* Connections open before the client connected: the worker's own. */
#define MAX_OLD 64
static uint64_t old_ids[MAX_OLD];
static uint32_t nold;

static void note_old_conns(void)
{
    nold = 0;
    for (ds_conn_t *c = srv.net.conns; c && nold < MAX_OLD; c = c->next)
        old_ids[nold++] = c->id;
}

/* Whether a connection that may be the client's is still open: one that
 * is new since the client connected and either not a proven peer or in the
 * client's session. */
static bool client_conn_left(void)
{
    for (ds_conn_t *c = srv.net.conns; c; c = c->next) {
        bool old = false;
        for (uint32_t i = 0; i < nold && !old; i++)
            old = old_ids[i] == c->id;
        if (old) continue;
        if (!c->peer || (cl.sid && c->session && c->session->id == cl.sid)) return true;
    }
    return false;
}

static void cleanup(void)
{
    char sock[sizeof(srv.sock_path)];
    snprintf(sock, sizeof(sock), "%s", srv.sock_path);
    ds__server_destroy(&srv);
    if (sock[0]) unlink(sock);
    unlink(secret_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(dir, sizeof(dir), "/tmp/ds-fuzz-peer-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(secret_path, sizeof(secret_path), "%s/secret", dir);
    FILE *f = fopen(secret_path, "w");
    CHECK(f != NULL);
    fputs(SECRET "\n", f);
    fclose(f);
    ds_worker_config_t cfg;
    char err[512];
    char *args[] = {"fuzz_peer", NULL};
    CHECK(ds__flags_parse(&cfg, 1, args, err, sizeof(err)) == 0);
    snprintf(cfg.unix_socket_dir, sizeof(cfg.unix_socket_dir), "%s", dir);
    snprintf(cfg.log_level, sizeof(cfg.log_level), "error");
    snprintf(cfg.cluster_secret_file, sizeof(cfg.cluster_secret_file), "%s", secret_path);
    snprintf(cfg.etcd_address, sizeof(cfg.etcd_address), "127.0.0.1:%d", ds__free_tcp_port(NULL));
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
            fprintf(stderr, "fuzz_peer: %s\n", err);
            abort();
        }
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_UNBLOCK, &mask, NULL);
    atexit(cleanup);
    return 0;
}

static const sent_t *find_sent(uint64_t id)
{
    for (uint32_t i = 0; i < nsent; i++)
        if (sent[i].id == id) return &sent[i];
    return NULL;
}

/* Walks the input's frames (as far as their headers decode) and notes which
 * request ids only a proven peer may send. */
static void note_sent(const uint8_t *p, size_t n)
{
    nsent = 0;
    size_t pos = 0;
    while (n - pos >= DS_WIRE_HEADER_LEN && nsent < MAX_SENT) {
        ds_wire_header_t h;
        char err[256];
        if (ds__wire_header_decode(p + pos, (uint64_t)srv.cfg.max_frame_mb << 20, &h, err,
                                   sizeof(err)) != 0)
            break;
        bool forbidden = ds__opcode_peer_only(h.opcode) || (h.flags & DS_FLAG_PEER) ||
                         (h.flags & ~(DS_FLAG_REQUEST_MASK | DS_FLAG_RESPONSE));
        sent_t *s = (sent_t *)find_sent(h.req_id);
        if (s == NULL) {
            s = &sent[nsent++];
            *s = (sent_t){.id = h.req_id, .op = h.opcode};
        }
        if (forbidden)
            s->forbidden = true;
        else
            s->allowed = true;
        uint64_t len = (uint64_t)h.meta_len + h.data_len;
        if (len > n - pos - DS_WIRE_HEADER_LEN) break;
        pos += DS_WIRE_HEADER_LEN + (size_t)len;
    }
}

static void check_frame(void)
{
    fz_parse_t p;
    fz_parse_response(cl.h.opcode, cl.meta, cl.h.meta_len, NULL, &p);
    bool bare_ok = p.error_only && (cl.h.status != DS_K_OK || fz_response_is_bare(cl.h.opcode));
    if (!p.complete && !bare_ok) {
        fprintf(stderr, "fuzz_peer: %s response (status %u, %u meta bytes) breaks its layout\n",
                ds__opcode_name(cl.h.opcode), cl.h.status, cl.h.meta_len);
        abort();
    }
    if (cl.h.opcode != DS_OP_GET) CHECK(cl.h.data_len == 0);
    if (cl.h.req_id >= OWN_ID_BASE) {
        cl.own_answered = true;
        cl.own_status = cl.h.status;
        if (cl.h.opcode == DS_OP_HELLO && cl.h.status == DS_K_OK) {
            ds_rbuf_t r;
            ds__rbuf_init(&r, cl.meta, cl.h.meta_len);
            const char *e;
            (void)ds__rbuf_str(&r, &e);
            uint64_t sid = ds__rbuf_u64(&r);
            if (!r.err) cl.sid = sid;
        }
        if (cl.h.opcode == DS_OP_PEER_AUTH && cl.h.status == DS_K_OK && p.complete &&
            !p.error_only) {
            ds_rbuf_t r;
            ds__rbuf_init(&r, cl.meta, cl.h.meta_len);
            const char *s;
            (void)ds__rbuf_str(&r, &s);
            uint32_t nl = ds__rbuf_str(&r, &s);
            if (!r.err && nl == DS_AUTH_HEX_LEN) {
                memcpy(cl.nonce_b, s, nl);
                cl.nonce_b[nl] = '\0';
            }
        }
        return;
    }
    if (cl.h.status != DS_K_OK || cl.peer) return;
    const sent_t *s = find_sent(cl.h.req_id);
    if (s && s->forbidden && !s->allowed) {
        fprintf(stderr, "fuzz_peer: %s request %llu only a peer may send was answered K_OK\n",
                ds__opcode_name(s->op), (unsigned long long)s->id);
        abort();
    }
    /* The input cannot prove it is a peer: it knows neither the secret nor
     * the member key. */
    CHECK(!(cl.h.opcode == DS_OP_PEER_AUTH && p.error_only));
}

static void feed(const uint8_t *p, size_t n)
{
    while (n > 0) {
        if (cl.in_data) {
            size_t k = cl.data_left < n ? (size_t)cl.data_left : n;
            cl.data_left -= k;
            p += k;
            n -= k;
            if (cl.data_left == 0) cl.in_data = false;
            continue;
        }
        if (cl.in_meta) {
            size_t k = cl.h.meta_len - cl.meta_got;
            if (k > n) k = n;
            memcpy(cl.meta + cl.meta_got, p, k);
            cl.meta_got += (uint32_t)k;
            p += k;
            n -= k;
            if (cl.meta_got == cl.h.meta_len) {
                cl.in_meta = false;
                check_frame();
                free(cl.meta);
                cl.meta = NULL;
                cl.data_left = cl.h.data_len;
                cl.in_data = cl.data_left > 0;
            }
            continue;
        }
        size_t k = DS_WIRE_HEADER_LEN - cl.hdr_got;
        if (k > n) k = n;
        memcpy(cl.hdr + cl.hdr_got, p, k);
        cl.hdr_got += (uint32_t)k;
        p += k;
        n -= k;
        if (cl.hdr_got < DS_WIRE_HEADER_LEN) continue;
        cl.hdr_got = 0;
        char err[256];
        if (ds__wire_header_decode(cl.hdr, UINT64_MAX, &cl.h, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_peer: worker sent an undecodable header: %s\n", err);
            abort();
        }
        CHECK(cl.h.flags & DS_FLAG_RESPONSE);
        CHECK(cl.h.meta_len > 0);
        cl.meta = malloc(cl.h.meta_len);
        CHECK(cl.meta != NULL);
        cl.meta_got = 0;
        cl.in_meta = true;
    }
}

static void drain(void)
{
    static uint8_t buf[1 << 16];
    while (cl.fd >= 0 && !cl.closed && cl.total < READ_CAP) {
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t r = recvmsg(cl.fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); r > 0 && cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                int afd;
                memcpy(&afd, CMSG_DATA(cm), sizeof(afd));
                close(afd);
            }
        }
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            cl.closed = true;
            break;
        }
        if (r < 0) break;
        feed(buf, (size_t)r);
        cl.total += (uint64_t)r;
    }
}

static void pump(void)
{
    int idle = 0;
    for (int turn = 0; turn < PUMP_TURNS && idle < 3; turn++) {
        bool busy = ds__net_busy(&srv.net);
        ds__net_after_event(&srv.net);
        int ev = ds__loop_run_once(srv.net.loop, ds__net_output_pending(&srv.net) ? 1 : 0);
        ds__net_free_dead(&srv.net);
        uint64_t before = cl.total;
        drain();
        idle = (cl.total == before && ev == 0 && !busy) ? idle + 1 : 0;
    }
}

static void send_all(const uint8_t *p, size_t n)
{
    while (n > 0 && cl.fd >= 0 && !cl.closed) {
        size_t k = n < PIECE ? n : PIECE;
        ssize_t w = send(cl.fd, p, k, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        }
        pump();
    }
}

static void send_own(uint16_t op, const ds_wbuf_t *m, uint64_t id)
{
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = op,
                          .meta_len = (uint32_t)m->len,
                          .req_id = id};
    uint8_t hdr[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, hdr);
    cl.own_answered = false;
    send_all(hdr, sizeof(hdr));
    send_all(m->buf, m->len);
    for (int i = 0; i < 100 && !cl.own_answered && !cl.closed; i++)
        pump();
    CHECK(cl.own_answered);
}

/* The harness proves it is a peer (it knows the secret): claims the
 * worker's own address, its one member. */
static void own_peer_auth(void)
{
    char self[300], na[DS_AUTH_HEX_LEN + 1], t[1024], proof[DS_AUTH_HEX_LEN + 1];
    snprintf(self, sizeof(self), "%s:%d", srv.host, srv.port);
    CHECK(ds__auth_challenge(na) == 0);
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, 1);
    ds__wbuf_cstr(&m, self);
    ds__wbuf_cstr(&m, na);
    cl.nonce_b[0] = '\0';
    send_own(DS_OP_PEER_AUTH, &m, OWN_ID_BASE + 1);
    CHECK(cl.own_status == DS_K_OK && cl.nonce_b[0]);
    snprintf(t, sizeof(t), "ds-peer-auth-v1\ninitiator\n%s\n%s\n%s\n%s", self, self, na,
             cl.nonce_b);
    ds__auth_hmac_hex(SECRET, t, strlen(t), proof);
    ds__wbuf_reset(&m);
    ds__wbuf_u8(&m, 2);
    ds__wbuf_cstr(&m, self);
    ds__wbuf_cstr(&m, na);
    ds__wbuf_cstr(&m, cl.nonce_b);
    ds__wbuf_cstr(&m, proof);
    send_own(DS_OP_PEER_AUTH, &m, OWN_ID_BASE + 2);
    CHECK(cl.own_status == DS_K_OK);
    ds__wbuf_free(&m);
    cl.peer = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t setup = data[0];
    free(cl.meta);
    memset(&cl, 0, sizeof(cl));
    cl.fd = -1;
    char err[256];
    bool unix_sock = setup & 2;
    pump(); /* what the last input left the job threads to finish */
    note_old_conns();
    cl.fd = unix_sock ? ds__unix_connect(srv.sock_path, 2000, err, sizeof(err))
                      : ds__tcp_connect(srv.host, srv.port, 2000, err, sizeof(err));
    CHECK(cl.fd >= 0);
    if (!(setup & 8)) {
        ds_wbuf_t m;
        ds__wbuf_init(&m);
        ds__wbuf_u32(&m, DS_WIRE_VERSION);
        ds__wbuf_u64(&m, 0);
        ds__wbuf_u8(&m, 0);
        ds__wbuf_cstr(&m, "");
        ds__wbuf_cstr(&m, "");
        send_own(DS_OP_HELLO, &m, OWN_ID_BASE);
        ds__wbuf_free(&m);
        CHECK(cl.own_status == DS_K_OK);
        if (setup & 1) own_peer_auth();
    }
    note_sent(data + 1, size - 1);
    send_all(data + 1, size - 1);
    pump();
    if (setup & 4) {
        ds__subs_expire(&srv.subs, UINT64_MAX);
        ds__net_after_event(&srv.net);
        pump();
    }
    shutdown(cl.fd, SHUT_RDWR);
    close(cl.fd);
    cl.fd = -1;
    for (int turn = 0; turn < HANGUP_TURNS && client_conn_left(); turn++) {
        ds__net_after_event(&srv.net);
        ds__loop_run_once(srv.net.loop, 10);
        ds__net_free_dead(&srv.net);
    }
    if (client_conn_left()) {
        fprintf(stderr, "fuzz_peer: the client's connection is still open after it hung up\n");
        abort();
    }
    CHECK(cl.sid == 0 || ds__session_find(&srv.net, cl.sid) == NULL);
    free(cl.meta);
    cl.meta = NULL;
    srv.stopping = false;
    return 0;
}
