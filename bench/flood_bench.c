/* flood_bench: what a hostile client's quota attacks cost a well-behaved
 * client of the same worker. One worker (flood_bench.sh starts it); this
 * program is the well-behaved client: 1 KiB set+get of its own key, a local
 * (Unix-socket, shared-memory) client and a TCP client taking turns, each
 * value checked byte for byte; p99 under each flood in turn, then under
 * all of them at once, each next to an idle window measured just before it.
 *
 * Each flood runs in its own process (forked before any client exists, so
 * no library state is inherited), starts and stops on a command from this
 * one, is bounded in requests and time, and reports how many of its requests
 * were answered with which status and the first refusal's message, which
 * names the quota's flag:
 *   latches   a client taking read latches up to --max_read_latches_per_client
 *             on 10,000 keys, then 10,000 times on one key, one more each time
 *             (refused), releasing them, over and over;
 *   subs      three threads of one client each subscribe-getting 10,000
 *             never-set keys, past --max_pending_subscriptions_per_client;
 *   silent    hundreds of TCP sockets (from 127.0.0.2) that never say HELLO,
 *             each reopened as
 *             the worker closes it (--max_handshake_conns_per_peer evicts,
 *             --handshake_timeout_ms times out);
 *   bulk      one session on four TCP connections, each pipelining two
 *             256 MiB SETs at a time (the worker's bulk receiver reads them;
 *             past --max_client_inflight_mb they are refused).
 * Reported: p99 under flood / the idle p99 before it, per flood and client kind, against
 * the target ratio 2, and the floods' own outcomes; then the longest loop
 * pass and event the worker saw (STATS loop.*) in each idle window and
 * during each whole flood: what one pass, or one connection's event, held
 * the well-behaved client back at most.
 *
 *   flood_bench --host H --port P --sockdir DIR [--samples N] [--json FILE] */
#include "bench/stats.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"
#include "ds/kv_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TARGET_RATIO 2.0
#define FLOOD_MAX_MS 60000    /* a flood stops by itself after this long */
#define FLOOD_MAX_REQS 200000 /* or after this many requests */
#define NLATCH 10000
#define NSUBKEYS 10000
#define NSUBTHREADS 3
#define NSILENT 300
#define NBULK 4
#define BULK_LEN (256ull << 20)
#define MAX_STATUS 64

enum { F_LATCHES, F_SUBS, F_SILENT, F_BULK, NFLOODS };
static const char *const FLOOD_NAME[NFLOODS] = {"latches", "subs", "silent", "bulk"};

static const char *g_host, *g_sockdir;
static int g_port;

/* What one flood's requests got: a count per status code, the first
 * refusal's message. Written whole through a pipe to the parent. */
typedef struct {
    uint64_t reqs;
    uint64_t by_status[MAX_STATUS];
    char refusal[256];
} outcome_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static outcome_t g_out;
static atomic_int g_stop;
static uint64_t g_deadline;

static bool flood_over(void)
{
    return g_stop || ds__now_ms() > g_deadline || g_out.reqs >= FLOOD_MAX_REQS;
}

static void count(int status, const char *msg)
{
    pthread_mutex_lock(&g_mu);
    g_out.reqs++;
    g_out.by_status[status >= 0 && status < MAX_STATUS ? status : MAX_STATUS - 1]++;
    if (status != DS_K_OK && status != DS_K_NOT_FOUND && !g_out.refusal[0] && msg)
        snprintf(g_out.refusal, sizeof(g_out.refusal), "%s", msg);
    pthread_mutex_unlock(&g_mu);
}

static ds_client_t *connect_kind(ds_transport_t t)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = g_host;
    o.port = g_port;
    o.transport = t;
    o.unix_socket_dir = g_sockdir;
    ds_client_t *c = NULL;
    ds_status_t st = ds_client_connect(&o, &c);
    if (st != DS_K_OK) {
        fprintf(stderr, "flood_bench: connect: %s: %s\n", ds_status_name(st), ds_last_error());
        exit(1);
    }
    return c;
}

/* ---- (a) read latches ---- */

static void flood_latches(void)
{
    ds_client_t *c = connect_kind(DS_TRANSPORT_TCP);
    static char names[NLATCH][24];
    static const char *keys[NLATCH], *one[NLATCH];
    static const void *vals[NLATCH];
    static size_t lens[NLATCH];
    for (int i = 0; i < NLATCH; i++) {
        snprintf(names[i], sizeof(names[i]), "flood-latch-%d", i);
        keys[i] = names[i];
        one[i] = names[0];
        vals[i] = "latched";
        lens[i] = 7;
    }
    if (ds_kv_mset(c, NLATCH, keys, vals, lens, NULL, NULL) != DS_K_OK) {
        fprintf(stderr, "flood_bench: latches: mset: %s\n", ds_last_error());
        exit(1);
    }
    const char *extra = "flood-latch-extra";
    if (ds_kv_set(c, extra, "x", 1, NULL) != DS_K_OK) exit(1);
    while (!flood_over()) {
        const char *const *set = (g_out.reqs / 3) % 2 ? one : keys;
        ds_status_t st = ds_kv_rlatch(c, NLATCH, set, 60000, NULL);
        count(st, ds_last_error());
        st = ds_kv_rlatch(c, 1, &extra, 60000, NULL); /* one past the cap */
        count(st, ds_last_error());
        st = ds_kv_unrlatch(c, NLATCH, set, NULL);
        count(st, ds_last_error());
    }
    ds_client_close(c);
}

/* ---- (b) subscriptions ---- */

static void *sub_thread(void *arg)
{
    ds_client_t *c = arg;
    static int next;
    pthread_mutex_lock(&g_mu);
    int t = next++;
    pthread_mutex_unlock(&g_mu);
    char(*names)[32] = calloc(NSUBKEYS, sizeof(*names));
    const char **keys = calloc(NSUBKEYS, sizeof(*keys));
    ds_value_t *out = calloc(NSUBKEYS, sizeof(*out));
    if (!names || !keys || !out) exit(1);
    for (int i = 0; i < NSUBKEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "flood-never-%d-%d", t, i);
        keys[i] = names[i];
    }
    while (!flood_over()) {
        ds_status_t st = ds_kv_mget(c, NSUBKEYS, keys, 1000, out);
        count(st, ds_last_error());
        for (int i = 0; i < NSUBKEYS; i++)
            if (out[i].status == DS_K_OK) ds_free(out[i].data);
    }
    free(names);
    free(keys);
    free(out);
    return NULL;
}

static void flood_subs(void)
{
    ds_client_t *c = connect_kind(DS_TRANSPORT_TCP);
    pthread_t th[NSUBTHREADS];
    for (int i = 0; i < NSUBTHREADS; i++)
        pthread_create(&th[i], NULL, sub_thread, c);
    for (int i = 0; i < NSUBTHREADS; i++)
        pthread_join(th[i], NULL);
    ds_client_close(c);
}

/* ---- raw frames (silent sockets, bulk SETs) ---- */

static int read_frame(int fd, ds_wire_header_t *h, char *err, size_t cap, uint64_t deadline)
{
    uint8_t hb[DS_WIRE_HEADER_LEN];
    char e[256];
    err[0] = '\0';
    if (ds__read_full(fd, hb, sizeof(hb), deadline) != 0) return -1;
    if (ds__wire_header_decode(hb, UINT64_C(1) << 34, h, e, sizeof(e)) != 0) return -1;
    uint8_t *meta = malloc(h->meta_len + 1);
    if (!meta || ds__read_full(fd, meta, h->meta_len, deadline) != 0) {
        free(meta);
        return -1;
    }
    ds_rbuf_t r;
    ds__rbuf_init(&r, meta, h->meta_len);
    const char *s;
    uint32_t n = ds__rbuf_str(&r, &s);
    if (!r.err) snprintf(err, cap, "%.*s", (int)n, s);
    /* The rest of the answer (a HELLO's fields) stays in meta for the caller. */
    free(meta);
    for (uint64_t left = h->data_len; left > 0;) { /* answers here carry no data */
        uint8_t sink[4096];
        size_t k = left < sizeof(sink) ? (size_t)left : sizeof(sink);
        if (ds__read_full(fd, sink, k, deadline) != 0) return -1;
        left -= k;
    }
    return 0;
}

static void add_frame(ds_wbuf_t *out, uint16_t op, const ds_wbuf_t *m, uint64_t data_len,
                      uint64_t id)
{
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = op,
                          .meta_len = (uint32_t)m->len,
                          .req_id = id,
                          .data_len = data_len};
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, hb);
    ds__wbuf_bytes(out, hb, sizeof(hb));
    ds__wbuf_bytes(out, m->buf, m->len);
}

/* ---- (c) silent connections ---- */

/* A TCP socket from 127.0.0.2, so the attacker is another peer than the
 * well-behaved client (127.0.0.1), as on a network: the per-peer cap falls
 * on it alone. */
static int open_silent(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.2", &src.sin_addr);
    inet_pton(AF_INET, g_host, &dst.sin_addr);
    dst.sin_port = htons((uint16_t)g_port);
    if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0 ||
        connect(fd, (struct sockaddr *)&dst, sizeof(dst)) != 0) {
        count(MAX_STATUS - 1, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static void flood_silent(void)
{
    static struct pollfd p[NSILENT];
    for (int i = 0; i < NSILENT; i++)
        p[i] = (struct pollfd){.fd = open_silent(), .events = POLLIN};
    while (!flood_over()) {
        if (poll(p, NSILENT, 100) <= 0) continue;
        for (int i = 0; i < NSILENT && !flood_over(); i++) {
            if (p[i].fd >= 0 && !p[i].revents) continue;
            if (p[i].fd >= 0) {
                /* Told why (or just closed), then reopened. */
                ds_wire_header_t h;
                char msg[256];
                if (read_frame(p[i].fd, &h, msg, sizeof(msg), ds__now_ms() + 100) == 0)
                    count((int)h.status, msg);
                else
                    count(MAX_STATUS - 1, "closed without a word");
                close(p[i].fd);
            }
            p[i].fd = open_silent();
            p[i].revents = 0;
        }
    }
    for (int i = 0; i < NSILENT; i++)
        if (p[i].fd >= 0) close(p[i].fd);
}

/* ---- (d) bulk SETs ---- */

static uint64_t g_sid;
static char g_skey[128];
static uint8_t *g_bulk;

/* A TCP connection that said HELLO, joining session sid (0: a new one,
 * whose id and key are kept in g_sid, g_skey). */
static int raw_hello(uint64_t sid, const char *skey)
{
    char err[256];
    int fd = ds__tcp_connect(g_host, g_port, 2000, err, sizeof(err));
    if (fd < 0) return -1;
    ds_wbuf_t m, out;
    ds__wbuf_init(&m);
    ds__wbuf_init(&out);
    ds__wbuf_u32(&m, DS_WIRE_VERSION);
    ds__wbuf_u64(&m, sid);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_cstr(&m, "");
    ds__wbuf_cstr(&m, skey);
    add_frame(&out, DS_OP_HELLO, &m, 0, 1);
    int rc = ds__write_full(fd, out.buf, out.len, ds__now_ms() + 2000);
    ds__wbuf_free(&m);
    ds__wbuf_free(&out);
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h;
    if (rc != 0 || ds__read_full(fd, hb, sizeof(hb), ds__now_ms() + 3000) != 0 ||
        ds__wire_header_decode(hb, 1 << 20, &h, err, sizeof(err)) != 0 || h.status != 0) {
        fprintf(stderr, "flood_bench: bulk: HELLO refused\n");
        exit(1);
    }
    uint8_t *meta = malloc(h.meta_len + 1);
    if (!meta || ds__read_full(fd, meta, h.meta_len, ds__now_ms() + 3000) != 0) exit(1);
    if (sid == 0) {
        ds_rbuf_t r;
        ds__rbuf_init(&r, meta, h.meta_len);
        const char *s;
        (void)ds__rbuf_str(&r, &s);
        g_sid = ds__rbuf_u64(&r);
        (void)ds__rbuf_u64(&r);
        (void)ds__rbuf_u32(&r);
        (void)ds__rbuf_str(&r, &s);
        (void)ds__rbuf_u32(&r);
        (void)ds__rbuf_u64(&r);
        (void)ds__rbuf_u32(&r);
        (void)ds__rbuf_u32(&r);
        uint32_t kl = ds__rbuf_str(&r, &s);
        if (!r.err) snprintf(g_skey, sizeof(g_skey), "%.*s", (int)kl, s);
    }
    free(meta);
    return fd;
}

/* The worker's loop.longest_pass_us and loop.longest_event_us: the most
 * one loop pass, and one event in it, held the other clients back since
 * the previous STATS (which starts the window over). On a connection of
 * its own (fd), opened once; -1 each when the worker did not say. */
static void loop_longest(int fd, double *pass_us, double *event_us)
{
    *pass_us = *event_us = -1;
    ds_wbuf_t m, out;
    ds__wbuf_init(&m);
    ds__wbuf_init(&out);
    add_frame(&out, DS_OP_STATS, &m, 0, 2);
    int rc = ds__write_full(fd, out.buf, out.len, ds__now_ms() + 5000);
    ds__wbuf_free(&m);
    ds__wbuf_free(&out);
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h;
    char err[256];
    if (rc != 0 || ds__read_full(fd, hb, sizeof(hb), ds__now_ms() + 5000) != 0 ||
        ds__wire_header_decode(hb, 1 << 24, &h, err, sizeof(err)) != 0)
        return;
    char *meta = malloc(h.meta_len + 1);
    if (!meta || ds__read_full(fd, meta, h.meta_len, ds__now_ms() + 5000) != 0) {
        free(meta);
        return;
    }
    meta[h.meta_len] = '\0';
    /* str err, str json: lengths with zero bytes in them lead, so the JSON
     * is searched from its own start */
    ds_rbuf_t r;
    ds__rbuf_init(&r, (const uint8_t *)meta, h.meta_len);
    const char *s;
    (void)ds__rbuf_str(&r, &s);
    uint32_t jl = ds__rbuf_str(&r, &s);
    if (r.err || jl == 0) {
        free(meta);
        return;
    }
    const char *p = strstr(s, "\"longest_pass_us\":");
    if (p) *pass_us = atof(p + strlen("\"longest_pass_us\":"));
    p = strstr(s, "\"longest_event_us\":");
    if (p) *event_us = atof(p + strlen("\"longest_event_us\":"));
    free(meta);
}

static void *bulk_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char key[32];
    snprintf(key, sizeof(key), "flood-bulk-%d", fd);
    ds_wbuf_t m, out;
    ds__wbuf_init(&m);
    ds__wbuf_init(&out);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, 0);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, 1);
    ds__wbuf_cstr(&m, key);
    ds__wbuf_u64(&m, BULK_LEN);
    uint64_t id = 1;
    while (!flood_over()) {
        /* Two SETs back to back, then their answers. */
        for (int k = 0; k < 2; k++) {
            ds__wbuf_reset(&out);
            add_frame(&out, DS_OP_SET, &m, BULK_LEN, ++id);
            if (ds__write_full(fd, out.buf, out.len, ds__now_ms() + 30000) != 0 ||
                ds__write_full(fd, g_bulk, BULK_LEN, ds__now_ms() + 30000) != 0)
                goto done;
        }
        for (int k = 0; k < 2; k++) {
            ds_wire_header_t h;
            char msg[256];
            if (read_frame(fd, &h, msg, sizeof(msg), ds__now_ms() + 30000) != 0) goto done;
            count((int)h.status, msg);
        }
    }
done:
    ds__wbuf_free(&m);
    ds__wbuf_free(&out);
    close(fd);
    return NULL;
}

static void flood_bulk(void)
{
    if (g_bulk == NULL) {
        g_bulk = malloc(BULK_LEN);
        if (!g_bulk) exit(1);
        memset(g_bulk, 'b', BULK_LEN);
    }
    int fds[NBULK];
    fds[0] = raw_hello(0, "");
    for (int i = 1; i < NBULK; i++)
        fds[i] = raw_hello(g_sid, g_skey);
    pthread_t th[NBULK];
    for (int i = 0; i < NBULK; i++)
        pthread_create(&th[i], NULL, bulk_thread, (void *)(intptr_t)fds[i]);
    for (int i = 0; i < NBULK; i++)
        pthread_join(th[i], NULL);
}

/* ---- the flood processes ---- */

typedef struct {
    pid_t pid;
    int cmd;   /* parent -> child: 'S' start, 'T' stop, 'Q' quit */
    int reply; /* child -> parent: outcome_t after each run */
} flood_proc_t;

static void *stop_watch(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char b;
    if (read(fd, &b, 1) != 1 || b == 'T' || b == 'Q') g_stop = 1;
    return NULL;
}

static void flood_child(int which, int cmd, int reply)
{
    for (;;) {
        char b;
        if (read(cmd, &b, 1) != 1 || b != 'S') _exit(0);
        memset(&g_out, 0, sizeof(g_out));
        g_stop = 0;
        g_deadline = ds__now_ms() + FLOOD_MAX_MS;
        pthread_t w;
        pthread_create(&w, NULL, stop_watch, (void *)(intptr_t)cmd);
        switch (which) {
        case F_LATCHES:
            flood_latches();
            break;
        case F_SUBS:
            flood_subs();
            break;
        case F_SILENT:
            flood_silent();
            break;
        default:
            flood_bulk();
            break;
        }
        pthread_join(w, NULL);
        if (write(reply, &g_out, sizeof(g_out)) != (ssize_t)sizeof(g_out)) _exit(1);
    }
}

static void spawn(flood_proc_t *f, int which)
{
    int c[2], r[2];
    if (pipe(c) != 0 || pipe(r) != 0) exit(1);
    f->pid = fork();
    if (f->pid < 0) exit(1);
    if (f->pid == 0) {
        close(c[1]);
        close(r[0]);
        flood_child(which, c[0], r[1]);
        _exit(0);
    }
    close(c[0]);
    close(r[1]);
    f->cmd = c[1];
    f->reply = r[0];
}

static void send_cmd(flood_proc_t *f, char b)
{
    if (write(f->cmd, &b, 1) != 1) exit(1);
}

static void read_outcome(flood_proc_t *f, outcome_t *o)
{
    size_t got = 0;
    while (got < sizeof(*o)) {
        ssize_t r = read(f->reply, (char *)o + got, sizeof(*o) - got);
        if (r <= 0) {
            fprintf(stderr, "flood_bench: a flood process died\n");
            exit(1);
        }
        got += (size_t)r;
    }
}

/* ---- the well-behaved client ---- */

typedef struct {
    dsb_lat_t local, tcp;
    double pass_us, event_us; /* the worker's longest loop pass and event meanwhile */
} phase_t;

static int g_stats_fd = -1;

static void set_get(ds_client_t *c, const char *key, const uint8_t *val, uint8_t *dst, uint64_t *ns)
{
    size_t len = 0;
    uint64_t t0 = ds__now_ns();
    ds_status_t st = ds_kv_set(c, key, val, 1024, NULL);
    if (st == DS_K_OK) st = ds_kv_get_into(c, key, 0, dst, 1024, &len);
    *ns = ds__now_ns() - t0;
    if (st != DS_K_OK || len != 1024 || memcmp(val, dst, 1024) != 0) {
        fprintf(stderr, "flood_bench: the well-behaved client's %s: %s %s\n", key,
                ds_status_name(st), st == DS_K_OK ? "wrong bytes back" : ds_last_error());
        exit(1);
    }
}

static void measure(ds_client_t *local, ds_client_t *tcp, int n, phase_t *p)
{
    uint64_t *a = malloc(sizeof(uint64_t) * (size_t)n), *b = malloc(sizeof(uint64_t) * (size_t)n);
    uint8_t val[1024], dst[1024];
    if (!a || !b) exit(1);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 1024; k++)
            val[k] = (uint8_t)(i * 7 + k);
        set_get(local, "good-local", val, dst, &a[i]);
        set_get(tcp, "good-tcp", val, dst, &b[i]);
    }
    dsb_lat_from(a, (size_t)n, &p->local);
    dsb_lat_from(b, (size_t)n, &p->tcp);
    free(a);
    free(b);
}

static void describe(const outcome_t *o, char *buf, size_t cap)
{
    size_t off = (size_t)snprintf(buf, cap, "%llu requests:", (unsigned long long)o->reqs);
    for (int s = 0; s < MAX_STATUS && off < cap; s++)
        if (o->by_status[s])
            off += (size_t)snprintf(buf + off, cap - off, " %s %llu",
                                    s == MAX_STATUS - 1 ? "closed/failed" : ds_status_name(s),
                                    (unsigned long long)o->by_status[s]);
    if (o->refusal[0] && off < cap) snprintf(buf + off, cap - off, "; \"%s\"", o->refusal);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fputc(' ', f);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

int main(int argc, char **argv)
{
    const char *json = NULL;
    int samples = 2000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host") && i + 1 < argc)
            g_host = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            g_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sockdir") && i + 1 < argc)
            g_sockdir = argv[++i];
        else if (!strcmp(argv[i], "--samples") && i + 1 < argc)
            samples = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else
            g_host = NULL, i = argc;
    }
    if (!g_host || g_port <= 0 || !g_sockdir || samples < 100 || samples > 1000000) {
        fprintf(stderr, "usage: flood_bench --host H --port P --sockdir DIR [--samples 100..] "
                        "[--json FILE]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* The flood processes first: forked while this process has no threads
     * and no client. */
    flood_proc_t fp[NFLOODS];
    for (int i = 0; i < NFLOODS; i++)
        spawn(&fp[i], i);
    ds_client_t *local = connect_kind(DS_TRANSPORT_LOCAL), *tcp = connect_kind(DS_TRANSPORT_TCP);
    g_stats_fd = raw_hello(0, "");
    /* Each flood is compared with an idle window measured just before it:
     * on a shared machine the load of the moment moves p99 more than slow
     * drift does. */
    phase_t idle[NFLOODS + 1], under[NFLOODS + 1], warm;
    outcome_t out[NFLOODS + 1][NFLOODS];
    measure(local, tcp, samples / 4, &warm);
    printf("%-8s  %11s %11s  %11s %11s  %7s %7s   flood's own outcome\n", "flood", "idle local",
           "flood local", "idle tcp", "flood tcp", "local x", "tcp x");
    printf("%-8s  %11s %11s  %11s %11s\n", "", "p99 us", "p99 us", "p99 us", "p99 us");
    char desc[1024];
    int missed = 0;
    for (int ph = 0; ph <= NFLOODS; ph++) {
        bool all = ph == NFLOODS;
        double ignored;
        loop_longest(g_stats_fd, &ignored, &ignored); /* the idle window starts */
        measure(local, tcp, samples, &idle[ph]);
        loop_longest(g_stats_fd, &idle[ph].pass_us, &idle[ph].event_us);
        for (int i = 0; i < NFLOODS; i++)
            if (all || i == ph) send_cmd(&fp[i], 'S');
        /* Let the flood reach its quota before measuring: the bulk SETs and
         * the latch keys take the longest to get going. */
        usleep(1500 * 1000);
        measure(local, tcp, samples, &under[ph]);
        for (int i = 0; i < NFLOODS; i++)
            if (all || i == ph) send_cmd(&fp[i], 'T');
        for (int i = 0; i < NFLOODS; i++)
            if (all || i == ph) read_outcome(&fp[i], &out[ph][i]);
        /* the whole flood: its start (a latch flood's MSET), its requests
         * and its refusals; its client's end may fall in the next idle
         * window */
        loop_longest(g_stats_fd, &under[ph].pass_us, &under[ph].event_us);
        double rl = under[ph].local.p99_us / idle[ph].local.p99_us;
        double rt = under[ph].tcp.p99_us / idle[ph].tcp.p99_us;
        missed += (rl > TARGET_RATIO) + (rt > TARGET_RATIO);
        printf("%-8s  %11.1f %11.1f  %11.1f %11.1f  %7.2f %7.2f", all ? "all" : FLOOD_NAME[ph],
               idle[ph].local.p99_us, under[ph].local.p99_us, idle[ph].tcp.p99_us,
               under[ph].tcp.p99_us, rl, rt);
        for (int i = 0; i < NFLOODS; i++) {
            if (!all && i != ph) continue;
            describe(&out[ph][i], desc, sizeof(desc));
            if (all)
                printf("\n          %s: %s", FLOOD_NAME[i], desc);
            else
                printf("   %s", desc);
        }
        printf("\n");
        fflush(stdout);
    }
    /* The other side of the same story: the longest the worker's loop was
     * busy in one pass (and one event) during each idle window and each
     * whole flood (wall time: with LOOP_FIFO=1 in flood_bench.sh the loop
     * is not preempted, so it is the loop's own work). */
    printf("%-8s  %11s %11s  %11s %11s   longest loop pass and event (us), idle and whole flood\n",
           "flood", "idle pass", "flood pass", "idle event", "flood event");
    for (int ph = 0; ph <= NFLOODS; ph++)
        printf("%-8s  %11.0f %11.0f  %11.0f %11.0f\n", ph == NFLOODS ? "all" : FLOOD_NAME[ph],
               idle[ph].pass_us, under[ph].pass_us, idle[ph].event_us, under[ph].event_us);
    printf("target: p99 under flood <= %.0fx the idle p99 before it: %s (%d of %d ratios over)\n",
           TARGET_RATIO, missed ? "missed" : "met", missed, 2 * (NFLOODS + 1));
    for (int i = 0; i < NFLOODS; i++) {
        send_cmd(&fp[i], 'Q');
        waitpid(fp[i].pid, NULL, 0);
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) return 1;
        fprintf(f, "{\"samples\": %d, \"target_ratio\": %.1f, \"floods\": [", samples,
                TARGET_RATIO);
        for (int ph = 0; ph <= NFLOODS; ph++) {
            bool all = ph == NFLOODS;
            fprintf(f,
                    "%s\n  {\"flood\": \"%s\", \"idle_local_p99_us\": %.1f, "
                    "\"idle_tcp_p99_us\": %.1f, \"local_p99_us\": %.1f, \"tcp_p99_us\": %.1f, "
                    "\"idle_local_p50_us\": %.1f, \"idle_tcp_p50_us\": %.1f, "
                    "\"local_p50_us\": %.1f, \"tcp_p50_us\": %.1f, \"local_ratio\": %.2f, "
                    "\"tcp_ratio\": %.2f, \"idle_longest_pass_us\": %.0f, "
                    "\"longest_pass_us\": %.0f, \"idle_longest_event_us\": %.0f, "
                    "\"longest_event_us\": %.0f, \"outcome\": {",
                    ph ? "," : "", all ? "all" : FLOOD_NAME[ph], idle[ph].local.p99_us,
                    idle[ph].tcp.p99_us, under[ph].local.p99_us, under[ph].tcp.p99_us,
                    idle[ph].local.p50_us, idle[ph].tcp.p50_us, under[ph].local.p50_us,
                    under[ph].tcp.p50_us, under[ph].local.p99_us / idle[ph].local.p99_us,
                    under[ph].tcp.p99_us / idle[ph].tcp.p99_us, idle[ph].pass_us, under[ph].pass_us,
                    idle[ph].event_us, under[ph].event_us);
            bool first = true;
            for (int i = 0; i < NFLOODS; i++) {
                if (!all && i != ph) continue;
                describe(&out[ph][i], desc, sizeof(desc));
                fprintf(f, "%s\"%s\": ", first ? "" : ", ", FLOOD_NAME[i]);
                json_str(f, desc);
                first = false;
            }
            fprintf(f, "}}");
        }
        fprintf(f, "\n ], \"met\": %s}\n", missed ? "false" : "true");
        fclose(f);
    }
    ds_client_close(local);
    ds_client_close(tcp);
    return 0;
}
