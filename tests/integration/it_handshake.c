/* Hostile clients that never finish HELLO, and one that pipelines SETs past
 * its in-flight quota (src/worker/net/guard.c):
 *  - silent sockets past the worker's connection limit (--max_client_num
 *    times DS_CONNS_PER_CLIENT) never lock out a client that says HELLO,
 *    with its token, over TCP or the Unix socket;
 *  - silent sockets are closed after --handshake_timeout_ms, told why, while
 *    a connection that said HELLO stays open;
 *  - a peer past --max_handshake_conns_per_peer has its old silent sockets
 *    closed for new ones at most DS_HS_PEER_EVICT_CAPS_PER_S times its cap a
 *    second; past that its new ones wait, and a client still gets in;
 *  - a SET past --max_client_inflight_mb is refused with K_OUT_OF_MEMORY
 *    naming the flag, its data is discarded, and the connection and the
 *    client's other SETs go on. */
#include "common/tuning.h"
#include "it_hostile_raw.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

static dst_worker_t W;
static char secret_path[300];
static const char *SECRET = "silent sockets are nobody";

static int start_with(const char *flags, int arena_mb, bool token)
{
    char extra[512];
    snprintf(extra, sizeof(extra), "%s", flags);
    if (token) {
        snprintf(secret_path, sizeof(secret_path), "/tmp/dst-hs-%d", (int)getpid());
        FILE *f = fopen(secret_path, "w");
        if (f == NULL) return -1;
        fprintf(f, "%s\n", SECRET);
        fclose(f);
        chmod(secret_path, 0600);
        snprintf(extra, sizeof(extra), "%s --auth_token_file %s", flags, secret_path);
        setenv("DS_TEST_TOKEN", SECRET, 1);
    } else {
        unsetenv("DS_TEST_TOKEN");
    }
    return dst_worker_start(&W, arena_mb, extra);
}

static int start_limits(void **state)
{
    (void)state;
    /* A limit of 3 * 70 = 210 connections, caps on waiting connections
     * above it and a deadline the test never reaches: only the limit's own
     * rule can make room. */
    return start_with("--max_client_num 3 --max_handshake_conns 100000 "
                      "--max_handshake_conns_per_peer 100000 --handshake_timeout_ms 600000",
                      32, true);
}

static int start_caps(void **state)
{
    (void)state;
    return start_with("--max_handshake_conns_per_peer 16 --max_handshake_conns 24 "
                      "--handshake_timeout_ms 600000",
                      32, false);
}

static int start_churn(void **state)
{
    (void)state;
    return start_with("--max_handshake_conns_per_peer 4 --max_handshake_conns 100000 "
                      "--handshake_timeout_ms 600000",
                      32, false);
}

static int start_deadline(void **state)
{
    (void)state;
    return start_with("--handshake_timeout_ms 400", 32, false);
}

static int start_quota(void **state)
{
    (void)state;
    return start_with("--max_client_inflight_mb 2", 64, false);
}

static int stop_worker(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    if (secret_path[0]) unlink(secret_path);
    secret_path[0] = '\0';
    return 0;
}

static ds_status_t connect_token(ds_transport_t t, const char *token, ds_client_t **out)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = t;
    o.token = token;
    o.unix_socket_dir = W.sockdir;
    return ds_client_connect(&o, out);
}

static void set_get(ds_client_t *c, const char *key)
{
    assert_int_equal(ds_kv_set(c, key, "works", 5, NULL), DS_K_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &v, &len), DS_K_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(v, "works", 5);
    ds_free(v);
}

/* n silent sockets to the worker, TCP or Unix, into fds. */
static void open_silent(int *fds, int n, bool unix_sock)
{
    char err[256], path[300];
    ds__socket_path(W.sockdir, W.host, W.port, path, sizeof(path));
    for (int i = 0; i < n; i++) {
        fds[i] = unix_sock ? ds__unix_connect(path, 2000, err, sizeof(err))
                           : ds__tcp_connect(W.host, W.port, 2000, err, sizeof(err));
        assert_true(fds[i] >= 0);
    }
}

/* Whether one of the silent sockets was told, before it was closed, that
 * it was closed to make room (why is part of the message). */
static bool told_why(const int *fds, int n, const char *why)
{
    for (int i = 0; i < n; i++) {
        hr_conn_t h = {.fd = fds[i]};
        hr_frame_t f;
        if (hr_read_frame(&h, &f, ds__now_ms() + 50) != 0) continue;
        bool ok = f.h.status == DS_K_RUNTIME_ERROR && strstr(f.err, why) != NULL;
        hr_frame_free(&f);
        if (ok) return true;
    }
    return false;
}

static void test_silent_sockets_do_not_lock_out(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    /* More silent sockets than the worker's whole connection limit (210),
     * TCP and Unix. */
    enum { TCP = 230, LOCAL = 8 };
    static int fds[TCP + LOCAL];
    open_silent(fds, TCP, false);
    open_silent(fds + TCP, LOCAL, true);
    /* A client with the token gets in and works, over TCP and locally. */
    ds_client_t *tcp = NULL, *local = NULL;
    assert_int_equal(connect_token(DS_TRANSPORT_TCP, SECRET, &tcp), DS_K_OK);
    set_get(tcp, "hs-tcp");
    assert_int_equal(connect_token(DS_TRANSPORT_LOCAL, NULL, &local), DS_K_OK);
    set_get(local, "hs-unix");
    /* The silent ones gave way, not the clients. */
    assert_true(dst_stat(&W, "clients.connections") <= 210);
    assert_true(dst_stat(&W, "clients.handshake_evictions") >= TCP + LOCAL - 210);
    assert_true(told_why(fds, TCP, "connection limit"));
    ds_client_close(tcp);
    ds_client_close(local);
    for (int i = 0; i < TCP + LOCAL; i++)
        close(fds[i]);
}

static void test_silent_sockets_capped(void **state)
{
    (void)state;
    /* Per peer: 40 from 127.0.0.1 keep at most 16 waiting. */
    enum { TCP = 40, LOCAL = 20 };
    static int fds[TCP + LOCAL];
    open_silent(fds, TCP, false);
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(c);
    set_get(c, "caps-tcp");
    double waiting = dst_stat(&W, "clients.awaiting_hello");
    assert_true(waiting >= 0 && waiting <= 16);
    assert_true(told_why(fds, TCP, "from this peer"));
    /* And all together: 20 more from this uid over the Unix socket keep at
     * most 24 waiting in all. */
    open_silent(fds + TCP, LOCAL, true);
    waiting = dst_stat(&W, "clients.awaiting_hello");
    assert_true(waiting >= 0 && waiting <= 24);
    set_get(c, "caps-tcp2");
    ds_client_t *l = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(l);
    set_get(l, "caps-local");
    ds_client_close(l);
    ds_client_close(c);
    for (int i = 0; i < TCP + LOCAL; i++)
        close(fds[i]);
}

static void test_peer_churn_bounded(void **state)
{
    (void)state;
    enum { N = 80, CAP = 4 };
    static int fds[N];
    uint64_t t0 = ds__now_ms();
    open_silent(fds, N, false);
    /* Every one accepted: waiting, or closed to make room. */
    double evicted = 0, waiting = 0;
    for (uint64_t end = ds__now_ms() + 10000; ds__now_ms() < end; usleep(20 * 1000)) {
        evicted = dst_stat(&W, "clients.handshake_evictions");
        waiting = dst_stat(&W, "clients.awaiting_hello");
        if (evicted + waiting >= N) break;
    }
    assert_true(evicted + waiting >= N);
    uint64_t seconds = (ds__now_ms() - t0) / 1000 + 2; /* windows the opening can span */
    /* The cap applied, within its bound, and the rest wait. */
    assert_true(evicted >= CAP);
    assert_true(evicted <= (double)(CAP * DS_HS_PEER_EVICT_CAPS_PER_S * seconds));
    assert_true(told_why(fds, N, "from this peer"));
    /* A client still gets in and is served. */
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(c);
    set_get(c, "churn-tcp");
    ds_client_close(c);
    for (int i = 0; i < N; i++)
        close(fds[i]);
}

static void test_deadline_closes_silent(void **state)
{
    (void)state;
    /* One that said HELLO, then silent ones, TCP and Unix. */
    hr_conn_t hello;
    assert_int_equal(hr_open_hello(&hello, &W, false), 0);
    hr_conn_t silent[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(hr_open(&silent[i], &W, i % 2 == 1), 0);
    /* One that sent half a HELLO header: no better than silence. */
    hr_conn_t slow;
    assert_int_equal(hr_open(&slow, &W, false), 0);
    uint8_t half[DS_WIRE_HEADER_LEN / 2];
    memset(half, 0, sizeof(half));
    assert_int_equal(ds__write_full(slow.fd, half, sizeof(half), ds__now_ms() + 1000), 0);

    /* Each is told why and closed, well within the test's allowance. */
    uint64_t deadline = ds__now_ms() + 10000;
    for (int i = 0; i < 4; i++) {
        hr_frame_t f;
        assert_int_equal(hr_read_frame(&silent[i], &f, deadline), 0);
        assert_int_equal(f.h.status, DS_K_RPC_DEADLINE_EXCEEDED);
        assert_non_null(strstr(f.err, "--handshake_timeout_ms"));
        hr_frame_free(&f);
        assert_int_not_equal(hr_read_frame(&silent[i], &f, deadline), 0);
        assert_int_equal(errno, ECONNRESET);
    }
    uint8_t b;
    struct pollfd p = {.fd = slow.fd, .events = POLLIN};
    bool closed = false;
    while (!closed && ds__now_ms() < deadline) {
        if (poll(&p, 1, 100) > 0) {
            ssize_t r = read(slow.fd, &b, 1);
            closed = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
        }
    }
    assert_true(closed);
    assert_true(dst_stat(&W, "clients.handshake_timeouts") >= 5);

    /* The connection that said HELLO is still served. */
    uint64_t id = hr_health(&hello);
    assert_int_equal(hr_flush(&hello), 0);
    hr_frame_t *f = hr_answer(&hello, id, ds__now_ms() + 3000);
    assert_non_null(f);
    assert_int_equal(f->h.status, 0);
    hr_close(&hello);
    hr_close(&slow);
    for (int i = 0; i < 4; i++)
        hr_close(&silent[i]);
}

/* Queues a SET of one key whose data section is len bytes, sending only
 * sent of them. */
static uint64_t set_partial(hr_conn_t *c, const char *key, uint64_t len, uint64_t sent)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_set(&m, key, len);
    uint8_t *data = malloc(sent ? sent : 1);
    memset(data, 'q', sent);
    uint64_t id = hr_add_raw(c, DS_OP_SET, 0, &m, len, data, sent);
    free(data);
    ds__wbuf_free(&m);
    return id;
}

static void test_inflight_quota(void **state)
{
    (void)state;
    /* Two connections of one session. */
    hr_conn_t a, b;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    assert_int_equal(hr_open(&b, &W, false), 0);
    assert_int_equal(hr_hello(&b, a.sid, false, a.skey, 3000), 0);
    assert_int_equal(b.hello_status, 0);

    /* a's SET of 1.5 MiB is in flight: its data has not all arrived. */
    enum { A_LEN = 3 << 19, B_LEN = 3 << 20 };
    double sets0 = dst_ops(&W, "set");
    uint64_t aid = set_partial(&a, "quota-a", A_LEN, 4096);
    assert_int_equal(hr_flush(&a), 0);
    assert_true(dst_wait_stat(&W, "operations.set", sets0 + 1, 5000));

    /* b's SET of 3 MiB would take the session past 2 MiB: refused, with
     * the flag named; its data is discarded and b goes on. */
    uint64_t bid = set_partial(&b, "quota-b", B_LEN, B_LEN);
    uint64_t hid = hr_health(&b);
    assert_int_equal(hr_flush(&b), 0);
    hr_frame_t *fb = hr_answer(&b, bid, ds__now_ms() + 5000);
    assert_non_null(fb);
    assert_int_equal(fb->h.status, DS_K_OUT_OF_MEMORY);
    assert_non_null(strstr(fb->err, "--max_client_inflight_mb"));
    assert_non_null(strstr(fb->err, "in flight"));
    hr_frame_t *fh = hr_answer(&b, hid, ds__now_ms() + 5000);
    assert_non_null(fh);
    assert_int_equal(fh->h.status, 0);
    assert_int_equal(dst_stat(&W, "clients.inflight_refusals"), 1);
    /* and b was paused before it read on (the offender waits) */
    assert_int_equal(dst_stat(&W, "clients.quota_pauses"), 1);

    /* a's data completes: its SET succeeds, and then b's fits. */
    uint8_t *rest = malloc(A_LEN - 4096);
    memset(rest, 'q', A_LEN - 4096);
    assert_int_equal(ds__write_full(a.fd, rest, A_LEN - 4096, ds__now_ms() + 5000), 0);
    free(rest);
    hr_frame_t *fa = hr_answer(&a, aid, ds__now_ms() + 5000);
    assert_non_null(fa);
    assert_int_equal(fa->h.status, 0);
    bid = set_partial(&b, "quota-b", B_LEN, B_LEN);
    uint64_t gid = hr_get(&b, "quota-b", 0, 0);
    assert_int_equal(hr_flush(&b), 0);
    fb = hr_answer(&b, bid, ds__now_ms() + 5000);
    assert_non_null(fb);
    assert_int_equal(fb->h.status, 0);
    hr_frame_t *fg = hr_answer(&b, gid, ds__now_ms() + 5000);
    assert_non_null(fg);
    assert_int_equal(fg->h.status, 0);

    /* One SET larger than the quota alone still goes through. */
    hr_conn_t c;
    assert_int_equal(hr_open_hello(&c, &W, false), 0);
    uint64_t cid = set_partial(&c, "quota-big", 3 << 20, 3 << 20);
    assert_int_equal(hr_flush(&c), 0);
    hr_frame_t *fc = hr_answer(&c, cid, ds__now_ms() + 5000);
    assert_non_null(fc);
    assert_int_equal(fc->h.status, 0);
    hr_close(&a);
    hr_close(&b);
    hr_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_silent_sockets_do_not_lock_out, start_limits,
                                        stop_worker),
        cmocka_unit_test_setup_teardown(test_silent_sockets_capped, start_caps, stop_worker),
        cmocka_unit_test_setup_teardown(test_peer_churn_bounded, start_churn, stop_worker),
        cmocka_unit_test_setup_teardown(test_deadline_closes_silent, start_deadline, stop_worker),
        cmocka_unit_test_setup_teardown(test_inflight_quota, start_quota, stop_worker),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
