/* TLS on the worker's TCP port (--enable_tls): certificates made at run time
 * (dst_tls_certs). A TLS client sets and gets byte-exact values up to
 * 64 MiB (the bulk sender's path included) and a batch; a plain TCP client
 * is told the worker wants TLS and the worker keeps serving; a client that
 * does not trust the worker's CA is refused by its own side; garbage where
 * a handshake belongs closes only that connection; Unix-socket clients
 * are untouched; --tls_verify_client refuses clients without a certificate
 * of the CA, and the worker refuses to start with flags that do not fit.
 * A TLS session the worker closes before HELLO (evicted for a newer
 * connection of its peer, or past --handshake_timeout_ms) reads why through
 * TLS, while clients that said HELLO are served on. */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/tls.h"
#include "common/wire.h"
#include "worker/net/refuse.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;
static char D[256];

static char *certp(const char *name)
{
    static char bufs[4][320];
    static int i;
    char *b = bufs[i++ % 4];
    snprintf(b, sizeof(bufs[0]), "%s/%s", D, name);
    return b;
}

static int setup(void **state)
{
    (void)state;
    /* The suite sets TLS up itself: clients here choose it per connection. */
    unsetenv("DS_TEST_TLS");
    if (dst_tls_certs(D, sizeof(D)) != 0) return -1;
    char extra[1024];
    snprintf(extra, sizeof(extra), "--enable_tls --tls_cert %s --tls_key %s --tls_ca %s",
             certp("worker.pem"), certp("worker.key"), certp("ca.pem"));
    /* The harness's readiness probe is a TCP client: TLS through the
     * environment, which the client library reads. */
    setenv("DATASYSTEM_ENABLE_TLS", "1", 1);
    setenv("DATASYSTEM_TLS_CA", certp("ca.pem"), 1);
    int rc = dst_worker_start(&W, 256, extra);
    unsetenv("DATASYSTEM_ENABLE_TLS");
    unsetenv("DATASYSTEM_TLS_CA");
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

/* A TCP client of w with TLS on (tls 1) or off (-1). */
static ds_status_t tls_connect(const dst_worker_t *w, int tls, const char *ca, const char *cert,
                               const char *key, ds_client_t **out)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = w->host;
    o.port = w->port;
    o.transport = DS_TRANSPORT_TCP;
    o.connect_timeout_ms = 3000;
    o.enable_tls = tls;
    o.tls_ca = ca;
    o.tls_cert = cert;
    o.tls_key = key;
    *out = NULL;
    return ds_client_connect(&o, out);
}

static void roundtrip(ds_client_t *c, const char *key, size_t size, uint64_t seed)
{
    assert_int_equal(dst_set_filled(c, key, size, seed), DS_K_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &v, &len), DS_K_OK);
    assert_int_equal(len, size);
    assert_true(dst_check(v, len, seed));
    ds_free(v);
}

static void test_set_get_over_tls(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    assert_int_equal(tls_connect(&W, 1, certp("ca.pem"), NULL, NULL, &c), DS_K_OK);
    assert_false(ds_client_is_local(c));
    roundtrip(c, "tls-small", 100, 1);
    roundtrip(c, "tls-64k", 64 << 10, 2);
    roundtrip(c, "tls-1m", 1 << 20, 3);
    roundtrip(c, "tls-3m", (3 << 20) + 17, 4);
    roundtrip(c, "tls-64m", 64u << 20, 5);
    /* Large values come in through the receiver thread, TLS or not, and
     * what the session held past them is read after. */
    assert_true(dst_stat(&W, "bulk_receives") >= 1);
    /* A batch: many small answers in one write, through one TLS record. */
    const char *keys[40];
    char names[40][24];
    uint8_t vals[40][300];
    const void *vp[40];
    size_t lens[40];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof(names[i]), "tls-b%d", i);
        keys[i] = names[i];
        dst_fill(vals[i], sizeof(vals[i]), 100 + (uint64_t)i);
        vp[i] = vals[i];
        lens[i] = sizeof(vals[i]) - (size_t)i;
    }
    assert_int_equal(ds_kv_mset(c, 40, keys, vp, lens, NULL, NULL), DS_K_OK);
    ds_value_t out[40];
    assert_int_equal(ds_kv_mget(c, 40, keys, 0, out), DS_K_OK);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(out[i].status, DS_K_OK);
        assert_int_equal(out[i].len, lens[i]);
        assert_memory_equal(out[i].data, vals[i], lens[i]);
        ds_free(out[i].data);
    }
    /* The values are the same for a Unix-socket client (no TLS there). */
    ds_client_t *u = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(u);
    assert_true(ds_client_is_local(u));
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(u, "tls-3m", 0, &v, &len), DS_K_OK);
    assert_int_equal(len, (3 << 20) + 17);
    assert_true(dst_check(v, len, 4));
    ds_free(v);
    roundtrip(u, "tls-local", 1 << 20, 6);
    ds_client_close(u);
    void *lv = NULL;
    assert_int_equal(ds_kv_get(c, "tls-local", 0, &lv, &len), DS_K_OK);
    assert_true(dst_check(lv, len, 6));
    ds_free(lv);
    ds_client_close(c);
}

typedef struct {
    ds_client_t *c;
    int id;
    int failures;
} worker_arg_t;

/* One thread's mix of sizes on the shared TLS client: small answers on the
 * loop's direct writes and large ones from the bulk sender, while the loop
 * reads other requests of the same sessions. */
static void *mixed(void *p)
{
    worker_arg_t *a = p;
    static const size_t sizes[] = {100, 5000, 70000, 1u << 20, (3u << 20) + 5};
    for (int i = 0; i < 20; i++) {
        size_t size = sizes[(i + a->id) % 5];
        char key[48];
        snprintf(key, sizeof(key), "tls-mix-%d-%d", a->id, i);
        uint64_t seed = (uint64_t)a->id * 1000 + (uint64_t)i;
        void *v = NULL;
        size_t len = 0;
        if (dst_set_filled(a->c, key, size, seed) != DS_K_OK ||
            ds_kv_get(a->c, key, 0, &v, &len) != DS_K_OK || len != size || !dst_check(v, len, seed))
            a->failures++;
        ds_free(v);
    }
    return NULL;
}

static void test_concurrent_over_tls(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    assert_int_equal(tls_connect(&W, 1, certp("ca.pem"), NULL, NULL, &c), DS_K_OK);
    assert_int_equal(dst_set_filled(c, "tls-mix-big", 64u << 20, 77), DS_K_OK);
    pthread_t th[4];
    worker_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (worker_arg_t){.c = c, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, mixed, &args[i]), 0);
    }
    /* A 64 MiB answer from the bulk sender meanwhile. */
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, "tls-mix-big", 0, &v, &len), DS_K_OK);
    assert_int_equal(len, 64u << 20);
    assert_true(dst_check(v, len, 77));
    ds_free(v);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    ds_client_close(c);
}

static void test_plain_client_refused(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    ds_status_t st = tls_connect(&W, -1, NULL, NULL, NULL, &c);
    assert_null(c);
    assert_int_equal(st, DS_K_NOT_SUPPORTED);
    printf("# plain client: %s\n", ds_last_error());
    assert_non_null(strstr(ds_last_error(), "TLS"));
    /* Garbage where the handshake belongs closes that connection only. */
    char err[256];
    int fd = ds__tcp_connect(W.host, W.port, 2000, err, sizeof(err));
    assert_true(fd >= 0);
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    assert_int_equal(send(fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(junk) - 1);
    char buf[64];
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t r;
    while ((r = recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    assert_true(r == 0 || r < 0);
    close(fd);
    /* The worker still serves TLS clients. */
    assert_int_equal(tls_connect(&W, 1, certp("ca.pem"), NULL, NULL, &c), DS_K_OK);
    roundtrip(c, "tls-after-plain", 4096, 7);
    ds_client_close(c);
    assert_true(dst_stat(&W, "clients.tls_failures") >= 2);
}

static void test_wrong_ca_refused(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    ds_status_t st = tls_connect(&W, 1, certp("other-ca.pem"), NULL, NULL, &c);
    assert_null(c);
    assert_int_equal(st, DS_K_RPC_UNAVAILABLE);
    printf("# wrong CA: %s\n", ds_last_error());
    assert_non_null(strstr(ds_last_error(), "certificate"));
    /* A CA file that is not one is named. */
    st = tls_connect(&W, 1, certp("worker.key"), NULL, NULL, &c);
    assert_int_equal(st, DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "worker.key"));
    /* A TLS client of a plain worker says what may be wrong. */
    dst_worker_t p;
    assert_int_equal(dst_worker_start(&p, 32, NULL), 0);
    st = tls_connect(&p, 1, certp("ca.pem"), NULL, NULL, &c);
    assert_null(c);
    printf("# TLS client, plain worker: %s\n", ds_last_error());
    assert_non_null(strstr(ds_last_error(), "TLS"));
    dst_worker_stop(&p);
}

/* What a worker at its connection limit does at accept (net/refuse.c, the
 * worker's own code): one plain refusal frame, then close, before any TLS
 * byte. */
static void *refuse_one(void *arg)
{
    int lfd = *(int *)arg;
    /* The listener is non-blocking: wait for the client's connection. */
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1) return NULL;
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) ds__net_refuse_at_limit(fd);
    return NULL;
}

/* A TLS client refused that way reports the worker's status and reason,
 * not a TLS error about the bytes. */
static void test_plain_refusal_read_by_tls_client(void **state)
{
    (void)state;
    char err[256];
    int port = ds__free_tcp_port(NULL);
    int lfd = ds__tcp_listen("127.0.0.1", port, err, sizeof(err));
    assert_true(lfd >= 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, refuse_one, &lfd), 0);
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = port;
    o.transport = DS_TRANSPORT_TCP;
    o.connect_timeout_ms = 5000;
    o.enable_tls = 1;
    o.tls_ca = certp("ca.pem");
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_RUNTIME_ERROR);
    printf("# refused: %s\n", ds_last_error());
    assert_null(c);
    assert_non_null(strstr(ds_last_error(), "connection limit"));
    assert_non_null(strstr(ds_last_error(), "sent without TLS"));
    pthread_join(th, NULL);
    close(lfd);
}

/* A TCP listener that never answers: the handshake gives up by the connect
 * timeout instead of blocking in OpenSSL's read. */
static void test_silent_server_times_out(void **state)
{
    (void)state;
    char err[256];
    int port = ds__free_tcp_port(NULL);
    int lfd = ds__tcp_listen("127.0.0.1", port, err, sizeof(err));
    assert_true(lfd >= 0);
    dst_worker_t fake = {.port = port};
    snprintf(fake.host, sizeof(fake.host), "127.0.0.1");
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = fake.host;
    o.port = port;
    o.transport = DS_TRANSPORT_TCP;
    o.connect_timeout_ms = 500;
    o.enable_tls = 1;
    o.tls_ca = certp("ca.pem");
    ds_client_t *c = NULL;
    uint64_t t0 = ds__now_ms();
    assert_int_not_equal(ds_client_connect(&o, &c), DS_K_OK);
    uint64_t took = ds__now_ms() - t0;
    printf("# silent server: %s (after %llu ms)\n", ds_last_error(), (unsigned long long)took);
    assert_null(c);
    assert_non_null(strstr(ds_last_error(), "timed out"));
    assert_true(took < 5000);
    close(lfd);
}

static void test_client_certificate_required(void **state)
{
    (void)state;
    dst_worker_t v;
    char extra[1024];
    snprintf(extra, sizeof(extra),
             "--enable_tls --tls_verify_client --tls_cert %s --tls_key %s --tls_ca %s",
             certp("worker.pem"), certp("worker.key"), certp("ca.pem"));
    setenv("DATASYSTEM_ENABLE_TLS", "1", 1);
    setenv("DATASYSTEM_TLS_CA", certp("ca.pem"), 1);
    setenv("DATASYSTEM_TLS_CERT", certp("client.pem"), 1);
    setenv("DATASYSTEM_TLS_KEY", certp("client.key"), 1);
    int rc = dst_worker_start(&v, 32, extra);
    unsetenv("DATASYSTEM_TLS_CERT");
    unsetenv("DATASYSTEM_TLS_KEY");
    assert_int_equal(rc, 0);
    ds_client_t *c = NULL;
    /* No certificate: the worker ends the handshake. */
    ds_status_t st = tls_connect(&v, 1, certp("ca.pem"), NULL, NULL, &c);
    assert_null(c);
    printf("# no client certificate: %s\n", ds_last_error());
    assert_true(st == DS_K_RPC_UNAVAILABLE || st == DS_K_CLIENT_WORKER_DISCONNECT);
    /* A certificate of a CA the worker does not trust. */
    st = tls_connect(&v, 1, certp("ca.pem"), certp("other-client.pem"), certp("other-client.key"),
                     &c);
    assert_null(c);
    printf("# untrusted client certificate: %s\n", ds_last_error());
    /* The right one, given as options (the environment is off for TLS). */
    unsetenv("DATASYSTEM_ENABLE_TLS");
    assert_int_equal(
        tls_connect(&v, 1, certp("ca.pem"), certp("client.pem"), certp("client.key"), &c), DS_K_OK);
    roundtrip(c, "mtls", 2 << 20, 8);
    ds_client_close(c);
    unsetenv("DATASYSTEM_TLS_CA");
    assert_true(dst_stat(&v, "clients.tls_failures") >= 2);
    dst_worker_stop(&v);
}

/* A raw TLS session to w: handshake done, nothing said. */
typedef struct {
    int fd;
    ds_tls_t *t;
} raw_tls_t;

static void raw_open(raw_tls_t *r, const dst_worker_t *w, ds_tls_ctx_t *ctx)
{
    char err[256];
    r->fd = ds__tcp_connect(w->host, w->port, 3000, err, sizeof(err));
    assert_true(r->fd >= 0);
    r->t = ds__tls_new(ctx, r->fd, err, sizeof(err));
    assert_non_null(r->t);
    if (ds__tls_handshake(r->t, ds__now_ms() + 10000, err, sizeof(err)) != 0)
        fail_msg("TLS handshake: %s", err);
}

static void raw_close(raw_tls_t *r)
{
    ds__tls_free(r->t);
    close(r->fd);
}

/* Reads the worker's one frame through the session: its status, the
 * message in why; then the session's end. */
static ds_status_t raw_refusal(raw_tls_t *r, char *why, size_t cap)
{
    uint64_t deadline = ds__now_ms() + 15000;
    uint8_t hb[DS_WIRE_HEADER_LEN], meta[512];
    char err[128];
    ds_wire_header_t h;
    assert_int_equal(ds__tls_read_full(r->t, r->fd, hb, sizeof(hb), deadline), 0);
    assert_int_equal(ds__wire_header_decode(hb, 0, &h, err, sizeof(err)), 0);
    assert_true(h.flags & DS_FLAG_RESPONSE);
    assert_int_equal(h.opcode, DS_OP_HELLO);
    assert_true(h.meta_len > 0 && h.meta_len <= sizeof(meta));
    assert_int_equal(ds__tls_read_full(r->t, r->fd, meta, h.meta_len, deadline), 0);
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, meta, h.meta_len);
    const char *msg;
    uint32_t ml = ds__rbuf_str(&rb, &msg);
    assert_false(rb.err);
    snprintf(why, cap, "%.*s", (int)ml, msg);
    /* Then the worker closes the connection. */
    uint8_t b;
    assert_int_not_equal(ds__tls_read_full(r->t, r->fd, &b, 1, deadline), 0);
    assert_int_not_equal(errno, ETIMEDOUT);
    return (ds_status_t)h.status;
}

static void test_evicted_session_told_why(void **state)
{
    (void)state;
    dst_worker_t v;
    char extra[1024];
    /* Two waiting for HELLO from one peer at most; silence ends at 3 s (a
     * TLS client under a sanitizer on a busy machine still says HELLO by then). */
    snprintf(extra, sizeof(extra),
             "--enable_tls --tls_cert %s --tls_key %s --tls_ca %s "
             "--max_handshake_conns_per_peer 2 --handshake_timeout_ms 3000",
             certp("worker.pem"), certp("worker.key"), certp("ca.pem"));
    setenv("DATASYSTEM_ENABLE_TLS", "1", 1);
    setenv("DATASYSTEM_TLS_CA", certp("ca.pem"), 1);
    int rc = dst_worker_start(&v, 32, extra);
    unsetenv("DATASYSTEM_ENABLE_TLS");
    unsetenv("DATASYSTEM_TLS_CA");
    assert_int_equal(rc, 0);
    char err[256];
    ds_tls_conf_t conf = {.server = false, .ca = certp("ca.pem")};
    ds_tls_ctx_t *ctx = ds__tls_ctx_new(&conf, err, sizeof(err));
    assert_non_null(ctx);
    ds_client_t *good = NULL;
    assert_int_equal(tls_connect(&v, 1, certp("ca.pem"), NULL, NULL, &good), DS_K_OK);
    roundtrip(good, "evict-before", 1 << 20, 21);

    /* A session that finished its handshake and says nothing, then two
     * silent sockets from the same address: the third waiting connection
     * closes the oldest, the session, which reads why through TLS. */
    raw_tls_t quiet;
    raw_open(&quiet, &v, ctx);
    int silent[2];
    for (int i = 0; i < 2; i++) {
        silent[i] = ds__tcp_connect(v.host, v.port, 3000, err, sizeof(err));
        assert_true(silent[i] >= 0);
    }
    char why[512];
    assert_int_equal(raw_refusal(&quiet, why, sizeof(why)), DS_K_RUNTIME_ERROR);
    printf("# evicted: %s\n", why);
    assert_non_null(strstr(why, "--max_handshake_conns_per_peer"));
    raw_close(&quiet);
    assert_true(dst_stat(&v, "clients.handshake_evictions") >= 1);

    /* The client that said HELLO is served on, and a new one gets in. */
    roundtrip(good, "evict-after", 1 << 20, 22);
    ds_client_t *late = NULL;
    assert_int_equal(tls_connect(&v, 1, certp("ca.pem"), NULL, NULL, &late), DS_K_OK);
    roundtrip(late, "evict-late", 4096, 23);
    for (int i = 0; i < 2; i++)
        close(silent[i]);

    /* A silent session past --handshake_timeout_ms is told so, in TLS. */
    raw_tls_t slow;
    raw_open(&slow, &v, ctx);
    assert_int_equal(raw_refusal(&slow, why, sizeof(why)), DS_K_RPC_DEADLINE_EXCEEDED);
    printf("# timed out: %s\n", why);
    assert_non_null(strstr(why, "--handshake_timeout_ms"));
    raw_close(&slow);
    roundtrip(good, "evict-end", 1 << 20, 24);
    roundtrip(late, "evict-end2", 4096, 25);
    ds_client_close(late);
    ds_client_close(good);
    ds__tls_ctx_free(ctx);
    dst_worker_stop(&v);
}

/* Runs the worker with flags; its exit code, the output's tail in out. */
static int worker_refuses(const char *flags, char *out, size_t cap)
{
    char bin[512], cmd[2048];
    dst_build_path("src/worker/datasystem_worker", bin, sizeof(bin));
    char path[300];
    snprintf(path, sizeof(path), "%s/refuse.out", D);
    int port = ds__free_tcp_port(NULL);
    snprintf(cmd, sizeof(cmd),
             "timeout 10 %s --worker_address 127.0.0.1:%d --unix_socket_dir %s %s >%s 2>&1", bin,
             port, D, flags, path);
    int rc = dst_sh("%s", cmd);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    return rc;
}

static void test_flags_checked(void **state)
{
    (void)state;
    char out[4096], flags[1024];
    assert_int_not_equal(worker_refuses("--enable_tls", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "--enable_tls needs --tls_cert and --tls_key"));
    snprintf(flags, sizeof(flags), "--enable_tls --tls_cert %s --tls_key %s --enable_rdma true",
             certp("worker.pem"), certp("worker.key"));
    assert_int_not_equal(worker_refuses(flags, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "cannot be combined with --enable_rdma"));
    snprintf(flags, sizeof(flags), "--enable_tls --tls_cert %s --tls_key %s", certp("worker.pem"),
             certp("client.key"));
    assert_int_not_equal(worker_refuses(flags, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "does not match"));
    assert_int_not_equal(worker_refuses("--tls_verify_client", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "needs --enable_tls"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_get_over_tls),
        cmocka_unit_test(test_concurrent_over_tls),
        cmocka_unit_test(test_plain_client_refused),
        cmocka_unit_test(test_wrong_ca_refused),
        cmocka_unit_test(test_silent_server_times_out),
        cmocka_unit_test(test_plain_refusal_read_by_tls_client),
        cmocka_unit_test(test_client_certificate_required),
        cmocka_unit_test(test_evicted_session_told_why),
        cmocka_unit_test(test_flags_checked),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
