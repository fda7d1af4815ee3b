/* The worker's Prometheus endpoint (--metrics_port), fetched with a raw
 * socket: counters and histograms move by exactly the operations done, the
 * gauges agree with the STATS document, the exposition is well formed
 * (cumulative buckets ending in +Inf = _count), and the HTTP side answers
 * 404/400/405/431 to what is not a scrape, copes with requests trickled byte
 * by byte and with silent connections, and never disturbs the worker. */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;
static int mport;

static int setup(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER") && *getenv("DS_TEST_WORKER")) return 0; /* tests skip */
    for (int attempt = 0; attempt < 5; attempt++) {
        mport = ds__free_tcp_port(NULL);
        char extra[64];
        snprintf(extra, sizeof(extra), "--metrics_port %d", mport);
        if (dst_worker_start(&W, 8, extra) == 0) return 0;
    }
    return -1;
}

static int teardown(void **state)
{
    (void)state;
    if (W.pid > 0) assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

/* Sends req (in pieces of `chunk` bytes when > 0) and reads the answer until
 * the worker closes. Returns the malloc'd answer, NUL-terminated. */
static char *http(const char *req, size_t len, size_t chunk)
{
    char err[256];
    int fd = ds__tcp_connect("127.0.0.1", mport, 2000, err, sizeof(err));
    assert_true(fd >= 0);
    uint64_t dl = ds__now_ms() + 5000;
    if (chunk == 0) chunk = len;
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        assert_int_equal(ds__write_full(fd, req + off, n, dl), 0);
        if (chunk < len) usleep(2000);
    }
    size_t cap = 1 << 16, have = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (have + 1 == cap) buf = realloc(buf, cap *= 2);
        ssize_t r = recv(fd, buf + have, cap - have - 1, 0);
        if (r <= 0) break;
        have += (size_t)r;
        assert_true(ds__now_ms() < dl);
    }
    buf[have] = '\0';
    close(fd);
    return buf;
}

static char *scrape(void)
{
    const char *req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n";
    char *r = http(req, strlen(req), 0);
    assert_true(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0);
    assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
    char *body = strstr(r, "\r\n\r\n");
    assert_non_null(body);
    unsigned long clen = 0;
    const char *cl = strstr(r, "Content-Length: ");
    assert_non_null(cl);
    clen = strtoul(cl + 16, NULL, 10);
    assert_int_equal(clen, strlen(body + 4));
    return r;
}

/* The value of the sample whose name and labels are exactly `series`. */
static double value(const char *text, const char *series)
{
    char pat[200];
    snprintf(pat, sizeof(pat), "\n%s ", series);
    const char *p = strstr(text, pat);
    if (p == NULL) fail_msg("series %s not in the exposition", series);
    return strtod(p + strlen(pat), NULL);
}

static double opv(const char *text, const char *fam, const char *op)
{
    char s[160];
    snprintf(s, sizeof(s), "%s{op=\"%s\"}", fam, op);
    return value(text, s);
}

/* Every histogram: buckets cumulative, +Inf last and equal to _count. */
static void check_histograms(const char *text)
{
    const char *ops[] = {"hello", "set", "get", "del", "exist", "stats", "health_check"};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        char pfx[160];
        snprintf(pfx, sizeof(pfx), "ds_worker_request_duration_seconds_bucket{op=\"%s\",le=\"",
                 ops[i]);
        double prev = 0, last_le = 0;
        int n = 0;
        double inf = -1;
        for (const char *p = strstr(text, pfx); p; p = strstr(p + 1, pfx)) {
            const char *le = p + strlen(pfx);
            const char *sp = strchr(le, ' ');
            double v = strtod(sp + 1, NULL);
            assert_true(v >= prev);
            prev = v;
            if (strncmp(le, "+Inf", 4) == 0) {
                inf = v;
            } else {
                double l = strtod(le, NULL);
                assert_true(l > last_le);
                last_le = l;
            }
            n++;
        }
        assert_true(n >= 10);
        assert_true(inf >= 0);
        assert_true(inf == opv(text, "ds_worker_request_duration_seconds_count", ops[i]));
    }
}

typedef struct {
    ds_client_t *c;
    ds_status_t st;
} waiter_t;

static void *wait_key(void *arg)
{
    waiter_t *w = arg;
    void *v = NULL;
    size_t len = 0;
    w->st = ds_kv_get(w->c, "metrics-late", 5000, &v, &len);
    ds_free(v);
    return NULL;
}

static void test_counters_follow_operations(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(c);
    char *before = scrape();
    const size_t sz = 3000;
    uint8_t v[3000];
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof(key), "metrics-%d", i);
        dst_fill(v, sz, (uint64_t)i);
        assert_int_equal(ds_kv_set(c, key, v, sz, NULL), DS_K_OK);
    }
    for (int i = 0; i < 5; i++) {
        char key[32];
        snprintf(key, sizeof(key), "metrics-%d", i < 3 ? i : 100 + i);
        void *out = NULL;
        size_t len = 0;
        ds_status_t st = ds_kv_get(c, key, 0, &out, &len);
        assert_int_equal(st, i < 3 ? DS_K_OK : DS_K_NOT_FOUND);
        ds_free(out);
    }
    const char *dk = "metrics-9";
    assert_int_equal(ds_kv_del(c, 1, &dk, NULL), DS_K_OK);
    char *after = scrape();

    assert_true(opv(after, "ds_worker_operations_total", "set") -
                    opv(before, "ds_worker_operations_total", "set") ==
                10);
    assert_true(opv(after, "ds_worker_operations_total", "get") -
                    opv(before, "ds_worker_operations_total", "get") ==
                5);
    assert_true(opv(after, "ds_worker_operation_errors_total", "get") -
                    opv(before, "ds_worker_operation_errors_total", "get") ==
                2);
    assert_true(opv(after, "ds_worker_operation_errors_total", "set") ==
                opv(before, "ds_worker_operation_errors_total", "set"));
    assert_true(opv(after, "ds_worker_request_duration_seconds_count", "set") -
                    opv(before, "ds_worker_request_duration_seconds_count", "set") ==
                10);
    double sum = opv(after, "ds_worker_request_duration_seconds_sum", "set");
    assert_true(sum > 0 && sum < 10);
    check_histograms(after);
    assert_true(value(after, "ds_worker_received_bytes_total") -
                    value(before, "ds_worker_received_bytes_total") >=
                10 * sz);
    assert_true(value(after, "ds_worker_sent_bytes_total") -
                    value(before, "ds_worker_sent_bytes_total") >=
                3 * sz);
    /* Gauges agree with the worker's own STATS document. */
    assert_true(value(after, "ds_worker_objects") == 9);
    assert_true(value(after, "ds_worker_arena_used_bytes") >= 9 * sz);
    assert_true(value(after, "ds_worker_arena_used_bytes") == dst_stat(&W, "arena.used_bytes"));
    assert_true(value(after, "ds_worker_arena_used_bytes") +
                    value(after, "ds_worker_arena_free_bytes") ==
                value(after, "ds_worker_arena_total_bytes"));
    assert_true(value(after, "ds_worker_arena_total_bytes") == 8 << 20);
    assert_true(value(after, "ds_worker_clients") >= 1);
    assert_true(value(after, "ds_worker_subscriptions_waiting") == 0);
    assert_non_null(strstr(after, "ds_worker_info{worker_id=\""));
    free(before);
    free(after);

    /* A parked subscribe-get shows up, and goes when it is answered. */
    waiter_t w = {.c = c, .st = -1};
    pthread_t th;
    pthread_create(&th, NULL, wait_key, &w);
    double waiting = 0;
    for (int i = 0; i < 200 && waiting < 1; i++) {
        usleep(10000);
        char *m = scrape();
        waiting = value(m, "ds_worker_subscriptions_waiting");
        free(m);
    }
    assert_true(waiting == 1);
    ds_client_t *c2 = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_int_equal(ds_kv_set(c2, "metrics-late", "x", 1, NULL), DS_K_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DS_K_OK);
    char *m = scrape();
    assert_true(value(m, "ds_worker_subscriptions_waiting") == 0);
    assert_true(value(m, "ds_worker_clients") >= 2);
    double perr = value(m, "ds_worker_protocol_errors_total");
    free(m);

    /* A malformed frame on the worker port counts as a protocol error. */
    char err[256];
    int fd = ds__tcp_connect(W.host, W.port, 2000, err, sizeof(err));
    assert_true(fd >= 0);
    uint8_t junk[DS_WIRE_HEADER_LEN];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(ds__write_full(fd, junk, sizeof(junk), ds__now_ms() + 2000), 0);
    uint8_t buf[256];
    while (recv(fd, buf, sizeof(buf), 0) > 0) {
    }
    close(fd);
    m = scrape();
    assert_true(value(m, "ds_worker_protocol_errors_total") == perr + 1);
    free(m);

    /* Volatile values beyond the arena are evicted; a TTL expires. */
    ds_set_param_t ev = DS_SET_PARAM_INIT;
    ev.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    uint8_t *big = calloc(1, 1 << 20);
    for (int i = 0; i < 16; i++) {
        char key[32];
        snprintf(key, sizeof(key), "metrics-ev-%d", i);
        assert_int_equal(ds_kv_set(c, key, big, 1 << 20, &ev), DS_K_OK);
    }
    free(big);
    ds_set_param_t ttl = DS_SET_PARAM_INIT;
    ttl.ttl_second = 1;
    assert_int_equal(ds_kv_set(c, "metrics-ttl", "t", 1, &ttl), DS_K_OK);
    usleep(1300000);
    void *out = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, "metrics-ttl", 0, &out, &len), DS_K_NOT_FOUND);
    m = scrape();
    assert_true(value(m, "ds_worker_evictions_total") >= 8);
    assert_true(value(m, "ds_worker_evictions_total") == dst_stat(&W, "objects.evictions"));
    assert_true(value(m, "ds_worker_expirations_total") >= 1);
    free(m);
    ds_client_close(c2);
    ds_client_close(c);
}

static void expect_status(const char *req, size_t len, size_t chunk, const char *status)
{
    char *r = http(req, len, chunk);
    char line[64];
    snprintf(line, sizeof(line), "HTTP/1.1 %s\r\n", status);
    if (strncmp(r, line, strlen(line)) != 0) fail_msg("expected %s, got '%.60s'", status, r);
    assert_non_null(strstr(r, "Connection: close\r\n"));
    free(r);
}

static void test_http_edges(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    const char *nf = "GET /other HTTP/1.1\r\n\r\n";
    expect_status(nf, strlen(nf), 0, "404 Not Found");
    const char *root = "GET / HTTP/1.0\r\n\r\n";
    expect_status(root, strlen(root), 0, "404 Not Found");
    const char *bad = "HELLO\r\n\r\n";
    expect_status(bad, strlen(bad), 0, "400 Bad Request");
    const char *bad2 = "GET /metrics SPDY/3\r\n\r\n";
    expect_status(bad2, strlen(bad2), 0, "400 Bad Request");
    const char *post = "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    expect_status(post, strlen(post), 0, "405 Method Not Allowed");
    const char nul[] = "GET /met\0rics HTTP/1.1\r\n\r\n";
    expect_status(nul, sizeof(nul) - 1, 0, "400 Bad Request");
    /* A head that never ends is cut off at the bound. */
    size_t big = 20000;
    char *huge = malloc(big);
    memcpy(huge, "GET /metrics HTTP/1.1\r\nX-Pad: ", 30);
    memset(huge + 30, 'a', big - 30);
    expect_status(huge, big, 0, "431 Request Header Fields Too Large");
    free(huge);
    /* Trickled byte by byte, with a query string and bare LFs: still a scrape. */
    const char *slow = "GET /metrics?x=1 HTTP/1.1\nHost: a\n\n";
    expect_status(slow, strlen(slow), 1, "200 OK");

    /* Silent connections beyond the endpoint's limit push out the oldest;
     * scrapes keep working and the worker keeps serving. */
    char err[256];
    int fds[24];
    for (int i = 0; i < 24; i++) {
        fds[i] = ds__tcp_connect("127.0.0.1", mport, 2000, err, sizeof(err));
        assert_true(fds[i] >= 0);
    }
    usleep(100000);
    char *m = scrape();
    free(m);
    int closed = 0;
    for (int i = 0; i < 24; i++) {
        char b;
        ssize_t r = recv(fds[i], &b, 1, MSG_DONTWAIT);
        if (r == 0) closed++;
        close(fds[i]);
    }
    assert_true(closed >= 8);
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    assert_int_equal(ds_kv_set(c, "after-http", "ok", 2, NULL), DS_K_OK);
    ds_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters_follow_operations),
        cmocka_unit_test(test_http_edges),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
