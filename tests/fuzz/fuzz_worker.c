/* libFuzzer target for the worker's request path: connection state machine
 * (src/worker/conn.c), operations (ops.c), sessions, subscribe-gets and the
 * store, running in this process on a real server (ds__server_init with a
 * 4 MiB arena) and fed through a real socket.
 *
 * Input: byte 0 is a control byte, the rest goes to the worker as is.
 *   bit 0  send a valid HELLO first (so most inputs reach the operations)
 *   bit 1  that HELLO asks for the arena (a local client: CREATE, pins)
 *   bit 2  use the TCP listener instead of the Unix socket
 *   bit 3  after the input, fire every subscribe-get deadline and TTL
 *
 * Oracles, besides the sanitizers: every frame the worker sends must decode
 * and match the layout wire.h documents for its opcode (a GET's data section
 * exactly the inline values it announces); after the client hangs up the
 * connection must be gone within a bounded number of loop turns; and then no
 * session, subscription, pin or unpublished object may be left, and the
 * store's internal consistency check must pass. The store is recreated
 * between inputs so runs are independent. */
#include "layouts.h"

#include "common/net.h"
#include "worker/server.h"

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

/* Stop reading responses after this much; the worker must cope with a
 * client that vanishes with output still queued. */
#define READ_CAP (64u << 20)
#define MAX_TURNS 20000

static ds_server_t srv;
static char sockdir[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
          getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
    close(fd);
    return ntohs(sa.sin_port);
}

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
        snprintf(cfg.worker_address, sizeof(cfg.worker_address), "127.0.0.1:%d", free_port());
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
    atexit(cleanup);
    return 0;
}

/* Incremental reader of the worker's response stream. */
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
} reader_t;

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
        rd->meta = malloc(rd->h.meta_len ? rd->h.meta_len : 1);
        CHECK(rd->meta != NULL);
        rd->meta_got = 0;
        rd->in_meta = true;
        if (rd->h.meta_len == 0) {
            /* Every response carries at least its error string. */
            fprintf(stderr, "fuzz_worker: response without metadata\n");
            abort();
        }
    }
}

/* Reads what the worker sent; closes any arena fd that rode along. Returns
 * the bytes read. */
static size_t drain(int fd, reader_t *rd)
{
    static uint8_t buf[1 << 16];
    size_t got = 0;
    while (!rd->closed && rd->total < READ_CAP) {
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t r = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); r > 0 && c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int afd;
                memcpy(&afd, CMSG_DATA(c), sizeof(afd));
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

static void free_dead(void)
{
    while (srv.dead) {
        ds_conn_t *c = srv.dead;
        srv.dead = c->next;
        free(c);
    }
}

/* Runs the loop until neither side makes progress for a few turns. */
static void pump(int fd, reader_t *rd, const uint8_t **in, size_t *in_left)
{
    int idle = 0;
    for (int turn = 0; turn < MAX_TURNS && idle < 3; turn++) {
        size_t moved = 0;
        if (*in_left > 0) {
            ssize_t w = send(fd, *in, *in_left, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0) {
                *in += w;
                *in_left -= (size_t)w;
                moved += (size_t)w;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                *in_left = 0; /* the worker closed the connection */
            }
        }
        int ev = ds__loop_run_once(srv.loop, 0);
        free_dead();
        moved += drain(fd, rd);
        idle = (moved == 0 && ev == 0) ? idle + 1 : 0;
    }
}

static void put_hello(uint8_t *out, size_t *len, bool want_shm)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u32(&m, DS_WIRE_VERSION);
    ds__wbuf_u64(&m, 0);
    ds__wbuf_u8(&m, want_shm);
    ds__wbuf_cstr(&m, "");
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = DS_OP_HELLO,
                          .meta_len = (uint32_t)m.len,
                          .req_id = 1};
    ds__wire_header_encode(&h, out);
    memcpy(out + DS_WIRE_HEADER_LEN, m.buf, m.len);
    *len = DS_WIRE_HEADER_LEN + m.len;
    ds__wbuf_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    data++;
    size--;
    char err[256];
    int fd = (ctl & 4) ? ds__tcp_connect(srv.host, srv.port, 2000, err, sizeof(err))
                       : ds__unix_connect(srv.sock_path, 2000, err, sizeof(err));
    CHECK(fd >= 0);
    reader_t rd = {0};
    if (ctl & 1) {
        uint8_t hello[128];
        size_t hl;
        put_hello(hello, &hl, (ctl & 2) != 0);
        const uint8_t *hp = hello;
        size_t hleft = hl;
        while (hleft > 0)
            pump(fd, &rd, &hp, &hleft);
    }
    const uint8_t *in = data;
    size_t left = size;
    pump(fd, &rd, &in, &left);
    if (ctl & 8) {
        ds__subs_expire(&srv, UINT64_MAX);
        ds__store_expire_due(srv.store, UINT64_MAX);
        pump(fd, &rd, &in, &left);
    }
    close(fd);
    for (int turn = 0; turn < MAX_TURNS && srv.nconns > 0; turn++) {
        ds__loop_run_once(srv.loop, 10);
        free_dead();
    }
    free(rd.meta);
    if (srv.nconns != 0) {
        fprintf(stderr, "fuzz_worker: connection still open after the client hung up\n");
        abort();
    }
    CHECK(srv.conns == NULL);
    CHECK(srv.sessions == NULL);
    CHECK(srv.sub_count == 0 && srv.wait_n == 0);
    CHECK(ds__store_check(srv.store) == 0);
    ds_store_stats_t st;
    ds__store_stats(srv.store, &st);
    CHECK(st.pinned == 0);
    srv.stopping = false; /* a SHUTDOWN only sets the flag */
    ds__store_destroy(srv.store);
    srv.store = ds__store_create(&srv.arena);
    CHECK(srv.store != NULL);
    return 0;
}
