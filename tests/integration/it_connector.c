/* YuanrongConnector against a real worker: the spec's contract (key format,
 * put returning no metadata, byte-exact OmniSerializer payloads, one
 * subscribe-get bounded by get_sub_timeout_ms, 0 = no wait), what goes beyond
 * it (raw bytes and tensors written in place and read as pinned zero-copy
 * views, cleanup deleting a request's keys on every edge from either end),
 * and every error path with its code, message and health counter: unknown
 * connector name, bad extras, unreachable worker, empty payload, corrupt
 * bytes, closed connector, lost worker. */
#include "it_connector_util.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static dst_worker_t W;
static ds_client_t *KV; /* the store as the tests see it, beside the connector */

static int setup(void **state)
{
    (void)state;
    if (dst_worker_start(&W, 128, NULL) != 0) return -1;
    KV = dst_connect(&W, DS_TRANSPORT_AUTO);
    return KV != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ds_client_close(KV);
    dst_worker_stop(&W);
    return 0;
}

static omni_connector_t *open_yr(const char *timeout_ms)
{
    const char *more[] = {"get_sub_timeout_ms", timeout_ms, NULL};
    omni_connector_t *c = itc_open(&W, "YuanrongConnector", more);
    assert_non_null(c);
    return c;
}

static void expect_msg(const char *part)
{
    if (strstr(ds_last_error(), part) == NULL) fail_msg("'%s' lacks '%s'", ds_last_error(), part);
}

/* ---- construction ---- */

static void test_unknown_name(void **state)
{
    (void)state;
    omni_connector_spec_t spec = {"YuanrongConector", NULL, 0};
    omni_connector_t *c = NULL;
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_NOT_FOUND);
    assert_null(c);
    expect_msg("unknown connector 'YuanrongConector'");
    expect_msg("YuanrongConnector");
    expect_msg("SharedMemoryConnector");
}

static void bad_extra(const char *key, const char *value, const char *part)
{
    itc_spec_t s;
    const char *more[] = {key, value, NULL};
    omni_connector_t *c = NULL;
    assert_int_equal(omni_factory_create(itc_spec(&s, &W, "YuanrongConnector", more), &c),
                     DS_K_INVALID);
    assert_null(c);
    expect_msg("failed to create connector YuanrongConnector");
    expect_msg(part);
}

static void test_bad_extras(void **state)
{
    (void)state;
    bad_extra("port", "abc", "extra 'port' of connector 'YuanrongConnector' is 'abc'");
    bad_extra("port", "0", "is 0, not in 1..65535");
    bad_extra("port", "65536", "not in 1..65535");
    bad_extra("get_sub_timeout_ms", "-5", "extra 'get_sub_timeout_ms'");
    bad_extra("get_sub_timeout_ms", "1.5", "not an integer");
    bad_extra("get_sub_timeout_ms", "99999999999", "not in 0..2147483647");
    bad_extra("transport", "pigeon", "not auto, tcp or local");
    bad_extra("host", "", "extra 'host' of connector 'YuanrongConnector' is empty");
}

static void test_unreachable_worker(void **state)
{
    (void)state;
    int port = ds__free_tcp_port(NULL);
    assert_true(port > 0);
    char p[16], want[64];
    snprintf(p, sizeof(p), "%d", port);
    snprintf(want, sizeof(want), "cannot reach the datasystem worker at 127.0.0.1:%d", port);
    omni_kv_t extra[] = {{"host", "127.0.0.1"}, {"port", p}};
    omni_connector_spec_t spec = {"YuanrongConnector", extra, 2};
    omni_connector_t *c = NULL;
    uint64_t t0 = ds__now_ns();
    ds_status_t st = omni_factory_create(&spec, &c);
    assert_int_not_equal(st, DS_K_OK);
    assert_null(c);
    expect_msg(want);
    assert_true(itc_ms_since(t0) < 3000); /* refused at once, not after the connect timeout */
}

/* With no extras the connector aims at the spec's 127.0.0.1:35001. */
static void test_default_address(void **state)
{
    (void)state;
    omni_connector_spec_t spec = {"YuanrongConnector", NULL, 0};
    omni_connector_t *c = NULL;
    if (omni_factory_create(&spec, &c) == DS_K_OK) {
        omni_connector_free(c); /* someone runs a worker there: the default worked */
        return;
    }
    expect_msg("127.0.0.1:35001");
}

/* ---- the spec's put/get ---- */

static omni_value_t *sample_value(float *hidden, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hidden[i] = (float)i * 0.5f - 3.0f;
    int64_t shape[] = {(int64_t)(n / 8), 8};
    omni_value_t *m = omni_value_new_map(), *ids = omni_value_new_array();
    assert_int_equal(omni_array_push(ids, omni_value_new_int(151644)), DS_K_OK);
    assert_int_equal(omni_array_push(ids, omni_value_new_int(-1)), DS_K_OK);
    assert_int_equal(omni_map_set(m, "request_id", omni_value_new_str("req-1")), DS_K_OK);
    assert_int_equal(omni_map_set(m, "token_ids", ids), DS_K_OK);
    assert_int_equal(omni_map_set(m, "hidden",
                                  omni_value_new_tensor_ref(OMNI_DTYPE_FLOAT32, shape, 2, hidden,
                                                            n * sizeof(float))),
                     DS_K_OK);
    return m;
}

/* Stored bytes under key, as the KV client sees them. */
static void *stored(const char *key, size_t *len)
{
    void *v = NULL;
    assert_int_equal(ds_kv_get(KV, key, 0, &v, len), DS_K_OK);
    return v;
}

static void check_value_roundtrip(size_t nfloats, const char *rid)
{
    omni_connector_t *c = open_yr("1000");
    float *hidden = malloc(nfloats * sizeof(float));
    omni_value_t *m = sample_value(hidden, nfloats);
    void *enc;
    size_t enc_len;
    assert_int_equal(omni_value_encode(m, &enc, &enc_len), DS_K_OK);

    omni_data_t d = omni_data_value(m);
    size_t size = 0;
    omni_value_t *md = (omni_value_t *)1;
    assert_int_equal(omni_connector_put(c, "0", "1", rid, &d, &size, &md), DS_K_OK);
    assert_null(md); /* the spec's (True, size, None) */
    assert_int_equal(size, enc_len);

    /* Key {request_id}:{from}_{to}, bytes exactly what OmniSerializer writes. */
    char key[128];
    snprintf(key, sizeof(key), "%s:0_1", rid);
    size_t len;
    void *raw = stored(key, &len);
    assert_int_equal(len, enc_len);
    assert_memory_equal(raw, enc, len);
    ds_free(raw);

    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(c, "0", "1", rid, NULL, &r), DS_K_OK);
    assert_int_equal(omni_received_kind(r), OMNI_DATA_VALUE);
    assert_int_equal(omni_received_size(r), enc_len);
    const omni_value_t *v;
    assert_int_equal(omni_received_value(r, &v), DS_K_OK);
    omni_tensor_view_t t;
    assert_int_equal(omni_value_get_tensor(omni_map_get(v, "hidden"), &t), DS_K_OK);
    assert_int_equal(t.dtype, OMNI_DTYPE_FLOAT32);
    assert_int_equal(t.nbytes, nfloats * sizeof(float));
    assert_memory_equal(t.data, hidden, t.nbytes);
    assert_int_equal(omni_value_len(omni_map_get(v, "token_ids")), 2);
    omni_received_free(r);

    omni_free(enc);
    omni_value_free(m);
    free(hidden);
    omni_connector_free(c);
}

static void test_value_roundtrip(void **state)
{
    (void)state;
    check_value_roundtrip(64, "req-small");       /* one set */
    check_value_roundtrip(1u << 20, "req-large"); /* 4 MiB: written in place */
}

static void check_raw_bytes(size_t n, const char *rid)
{
    omni_connector_t *c = open_yr("1000");
    assert_true(omni_connector_supports_raw_data(c));
    uint8_t *buf = malloc(n);
    dst_fill(buf, n, n);
    omni_data_t d = omni_data_bytes(buf, n);
    size_t size = 0;
    assert_int_equal(omni_connector_put(c, "1", "2", rid, &d, &size, NULL), DS_K_OK);
    size_t h = n <= 255 ? 2 : n <= 65535 ? 3 : 5;
    assert_int_equal(size, n + h); /* a lone msgpack bin, so Python decodes it too */

    omni_value_t *bin = omni_value_new_bin_ref(buf, n);
    void *enc;
    size_t enc_len;
    assert_int_equal(omni_value_encode(bin, &enc, &enc_len), DS_K_OK);
    char key[128];
    snprintf(key, sizeof(key), "%s:1_2", rid);
    size_t len;
    void *raw = stored(key, &len);
    assert_int_equal(len, enc_len);
    assert_memory_equal(raw, enc, len);
    ds_free(raw);
    omni_free(enc);
    omni_value_free(bin);

    omni_received_t *r1 = NULL, *r2 = NULL;
    assert_int_equal(omni_connector_get(c, "1", "2", rid, NULL, &r1), DS_K_OK);
    assert_int_equal(omni_received_kind(r1), OMNI_DATA_BYTES);
    assert_int_equal(omni_received_size(r1), n);
    assert_true(dst_check(omni_received_data(r1), n, n));
    assert_int_equal(omni_connector_get(c, "1", "2", rid, NULL, &r2), DS_K_OK);
    if (n >= 65536 && ds_client_is_local(KV)) {
        /* Both views pin the same arena bytes: no copy was made. */
        assert_ptr_equal(omni_received_data(r1), omni_received_data(r2));
    }
    /* The view is pinned: overwriting and deleting the key leaves it intact. */
    uint8_t other[16] = {0};
    const char *k = key;
    assert_int_equal(ds_kv_set(KV, key, other, sizeof(other), NULL), DS_K_OK);
    assert_int_equal(ds_kv_del(KV, 1, &k, NULL), DS_K_OK);
    assert_true(dst_check(omni_received_data(r1), n, n));
    omni_received_free(r1);
    omni_received_free(r2);
    free(buf);
    omni_connector_free(c);
}

static void test_raw_bytes(void **state)
{
    (void)state;
    check_raw_bytes(1, "raw-b1");
    check_raw_bytes(300, "raw-b300");
    check_raw_bytes(70000, "raw-b70k");
    check_raw_bytes(3u << 20, "raw-b3m");
}

static void check_raw_tensor(size_t rows, const char *rid)
{
    omni_connector_t *c = open_yr("1000");
    size_t n = rows * 16;
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)i / 7.0f;
    int64_t shape[] = {(int64_t)rows, 16};
    omni_tensor_view_t tv = {OMNI_DTYPE_FLOAT32, 2, shape, n, x, n * sizeof(float), NULL};
    omni_data_t d = omni_data_tensor(&tv);
    size_t size = 0;
    assert_int_equal(omni_connector_put(c, "0", "1", rid, &d, &size, NULL), DS_K_OK);

    /* Stored as OmniSerializer's tensor map, byte for byte. */
    omni_value_t *ref = omni_value_new_tensor_ref(OMNI_DTYPE_FLOAT32, shape, 2, x, tv.nbytes);
    void *enc;
    size_t enc_len;
    assert_int_equal(omni_value_encode(ref, &enc, &enc_len), DS_K_OK);
    assert_int_equal(size, enc_len);
    char key[128];
    snprintf(key, sizeof(key), "%s:0_1", rid);
    size_t len;
    void *raw = stored(key, &len);
    assert_int_equal(len, enc_len);
    assert_memory_equal(raw, enc, len);
    ds_free(raw);
    omni_free(enc);
    omni_value_free(ref);

    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(c, "0", "1", rid, NULL, &r), DS_K_OK);
    assert_int_equal(omni_received_kind(r), OMNI_DATA_TENSOR);
    omni_tensor_view_t got;
    assert_int_equal(omni_received_tensor(r, &got), DS_K_OK);
    assert_int_equal(got.dtype, OMNI_DTYPE_FLOAT32);
    assert_int_equal(got.ndim, 2);
    assert_int_equal(got.shape[0], (int64_t)rows);
    assert_int_equal(got.shape[1], 16);
    assert_memory_equal(got.data, x, tv.nbytes);
    omni_received_free(r);
    free(x);
    omni_connector_free(c);
}

static void test_raw_tensor(void **state)
{
    (void)state;
    check_raw_tensor(2, "raw-t2");
    check_raw_tensor(65536, "raw-t4m"); /* 4 MiB */
}

/* A remote (TCP) client takes the same paths with heap buffers. */
static void test_tcp_transport(void **state)
{
    (void)state;
    const char *more[] = {"transport", "tcp", NULL};
    omni_connector_t *c = itc_open(&W, "YuanrongConnector", more);
    assert_non_null(c);
    size_t n = 5u << 20;
    uint8_t *buf = malloc(n);
    dst_fill(buf, n, 77);
    omni_data_t d = omni_data_bytes(buf, n);
    assert_int_equal(omni_connector_put(c, "0", "1", "tcp-1", &d, NULL, NULL), DS_K_OK);
    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(c, "0", "1", "tcp-1", NULL, &r), DS_K_OK);
    assert_int_equal(omni_received_size(r), n);
    assert_true(dst_check(omni_received_data(r), n, 77));
    omni_received_free(r);
    assert_int_equal(omni_connector_cleanup(c, "tcp-1"), DS_K_OK);
    assert_false(itc_exists(KV, "tcp-1:0_1"));
    free(buf);
    omni_connector_free(c);
}

/* ---- error paths ---- */

static void test_put_empty(void **state)
{
    (void)state;
    omni_connector_t *c = open_yr("0");
    omni_data_t d = omni_data_bytes("", 0);
    assert_int_equal(omni_connector_put(c, "0", "1", "empty", &d, NULL, NULL), DS_K_INVALID);
    expect_msg("payload is empty");
    assert_false(itc_exists(KV, "empty:0_1"));
    /* An invalid key byte is the store's rule, reported before any write. */
    uint8_t b = 1;
    d = omni_data_bytes(&b, 1);
    assert_int_equal(omni_connector_put(c, "0", "1", "bad key", &d, NULL, NULL), DS_K_INVALID);
    expect_msg("0x20");
    omni_health_t h;
    assert_int_equal(omni_connector_health(c, &h), DS_K_OK);
    assert_int_equal(h.errors, 2);
    assert_int_equal(h.puts, 0);
    assert_int_equal(h.transport_errors, 0);
    omni_connector_free(c);
}

static void test_decode_error(void **state)
{
    (void)state;
    omni_connector_t *c = open_yr("0");
    static const char junk[] = "\xc1 not msgpack at all";
    assert_int_equal(ds_kv_set(KV, "corrupt:0_1", junk, sizeof(junk) - 1, NULL), DS_K_OK);
    /* A truncated document is just as bad: a map header promising more. */
    static const char cut[] = "\x82\xa1"
                              "a";
    assert_int_equal(ds_kv_set(KV, "cut:0_1", cut, sizeof(cut) - 1, NULL), DS_K_OK);
    omni_received_t *r = (omni_received_t *)1;
    assert_int_equal(omni_connector_get(c, "0", "1", "corrupt", NULL, &r), DS_K_INVALID);
    assert_null(r);
    expect_msg("not an OmniSerializer document");
    expect_msg("corrupt:0_1");
    assert_int_equal(omni_connector_get(c, "0", "1", "cut", NULL, &r), DS_K_INVALID);
    omni_health_t h;
    assert_int_equal(omni_connector_health(c, &h), DS_K_OK);
    assert_int_equal(h.decode_errors, 2);
    assert_int_equal(h.errors, 2);
    assert_int_equal(h.gets, 0);
    assert_int_equal(h.timeouts + h.not_found + h.transport_errors, 0);
    assert_true(h.healthy);
    omni_connector_free(c);
}

static void test_get_timeout(void **state)
{
    (void)state;
    omni_connector_t *c = open_yr("400");
    omni_received_t *r = NULL;
    uint64_t t0 = ds__now_ns();
    assert_int_equal(omni_connector_get(c, "0", "1", "never-put", NULL, &r), DS_K_NOT_FOUND);
    double ms = itc_ms_since(t0);
    assert_null(r);
    expect_msg("nothing arrived within 400 ms");
    if (ms < 390 || ms > 400 + 300) fail_msg("a 400 ms get returned after %.1f ms", ms);
    omni_health_t h;
    omni_connector_health(c, &h);
    assert_int_equal(h.timeouts, 1);
    assert_int_equal(h.not_found, 0);
    assert_int_equal(h.errors, 0);
    omni_connector_free(c);
}

static void test_get_no_wait(void **state)
{
    (void)state;
    omni_connector_t *c = open_yr("0");
    omni_received_t *r = NULL;
    uint64_t t0 = ds__now_ns();
    assert_int_equal(omni_connector_get(c, "0", "1", "never-put", NULL, &r), DS_K_NOT_FOUND);
    double ms = itc_ms_since(t0);
    if (ms > 2000) fail_msg("a no-wait get took %.1f ms", ms);
    expect_msg("not found");
    omni_health_t h;
    omni_connector_health(c, &h);
    assert_int_equal(h.not_found, 1);
    assert_int_equal(h.timeouts, 0);
    omni_connector_free(c);
}

typedef struct {
    omni_connector_t *c;
    ds_status_t st;
    double ms;
    size_t size;
} waiter_t;

static void *wait_get(void *arg)
{
    waiter_t *w = arg;
    omni_received_t *r = NULL;
    uint64_t t0 = ds__now_ns();
    w->st = omni_connector_get(w->c, "0", "1", "late", NULL, &r);
    w->ms = itc_ms_since(t0);
    w->size = r != NULL ? omni_received_size(r) : 0;
    omni_received_free(r);
    return NULL;
}

/* The get is woken by the publish, long before its timeout. */
static void test_get_waits_for_put(void **state)
{
    (void)state;
    omni_connector_t *prod = open_yr("0"), *cons = open_yr("3000");
    waiter_t w = {cons, DS_K_RUNTIME_ERROR, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_get, &w), 0);
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
    uint8_t b[100];
    dst_fill(b, sizeof(b), 3);
    omni_data_t d = omni_data_bytes(b, sizeof(b));
    assert_int_equal(omni_connector_put(prod, "0", "1", "late", &d, NULL, NULL), DS_K_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DS_K_OK);
    assert_int_equal(w.size, sizeof(b));
    if (w.ms < 150 || w.ms > 1500) fail_msg("the waiting get returned after %.1f ms", w.ms);
    omni_connector_free(prod);
    omni_connector_free(cons);
}

/* ---- cleanup, health, close ---- */

static void put_bytes(omni_connector_t *c, const char *from, const char *to, const char *rid)
{
    uint8_t b[64];
    dst_fill(b, sizeof(b), 9);
    omni_data_t d = omni_data_bytes(b, sizeof(b));
    assert_int_equal(omni_connector_put(c, from, to, rid, &d, NULL, NULL), DS_K_OK);
}

static void test_cleanup(void **state)
{
    (void)state;
    omni_connector_t *prod = open_yr("0");
    put_bytes(prod, "0", "1", "req-7");
    put_bytes(prod, "1", "2", "req-7");
    put_bytes(prod, "0", "1", "req-8");
    assert_true(itc_exists(KV, "req-7:0_1") && itc_exists(KV, "req-7:1_2"));
    assert_int_equal(omni_connector_cleanup(prod, "req-7"), DS_K_OK);
    assert_false(itc_exists(KV, "req-7:0_1"));
    assert_false(itc_exists(KV, "req-7:1_2"));
    assert_true(itc_exists(KV, "req-8:0_1"));

    /* The consumer's cleanup deletes what it read. */
    omni_connector_t *cons = open_yr("0");
    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(cons, "0", "1", "req-8", NULL, &r), DS_K_OK);
    omni_received_free(r);
    assert_int_equal(omni_connector_cleanup(cons, "req-8"), DS_K_OK);
    assert_false(itc_exists(KV, "req-8:0_1"));

    /* A request it never got (its get came too early) is found by edge. */
    assert_int_equal(omni_connector_get(cons, "2", "3", "req-9", NULL, &r), DS_K_NOT_FOUND);
    put_bytes(prod, "2", "3", "req-9");
    assert_int_equal(omni_connector_cleanup(cons, "req-9"), DS_K_OK);
    assert_false(itc_exists(KV, "req-9:2_3"));

    /* Nothing known, nothing to do; an id no key could hold is no error. */
    assert_int_equal(omni_connector_cleanup(prod, "req-unknown"), DS_K_OK);
    assert_int_equal(omni_connector_cleanup(prod, "no such/id"), DS_K_OK);
    omni_health_t h;
    omni_connector_health(prod, &h);
    assert_int_equal(h.errors, 0);
    omni_connector_free(prod);
    omni_connector_free(cons);
}

static void test_health_exact(void **state)
{
    (void)state;
    omni_connector_t *c = open_yr("50");
    uint64_t bytes = 0;
    const size_t sizes[] = {10, 1000, 100000};
    for (int i = 0; i < 3; i++) {
        uint8_t *b = malloc(sizes[i]);
        dst_fill(b, sizes[i], (uint64_t)i);
        char rid[16];
        snprintf(rid, sizeof(rid), "h-%d", i);
        omni_data_t d = omni_data_bytes(b, sizes[i]);
        size_t size = 0;
        assert_int_equal(omni_connector_put(c, "0", "1", rid, &d, &size, NULL), DS_K_OK);
        bytes += size;
        free(b);
    }
    for (int i = 0; i < 2; i++) {
        char rid[16];
        snprintf(rid, sizeof(rid), "h-%d", i);
        omni_received_t *r = NULL;
        assert_int_equal(omni_connector_get(c, "0", "1", rid, NULL, &r), DS_K_OK);
        bytes += sizes[i] + (i == 0 ? 2 : 3);
        omni_received_free(r);
    }
    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(c, "0", "1", "h-missing", NULL, &r), DS_K_NOT_FOUND);
    assert_int_equal(ds_kv_set(KV, "h-bad:0_1", "\xc1", 1, NULL), DS_K_OK);
    assert_int_equal(omni_connector_get(c, "0", "1", "h-bad", NULL, &r), DS_K_INVALID);
    omni_data_t empty = omni_data_bytes("", 0);
    assert_int_equal(omni_connector_put(c, "0", "1", "h-e", &empty, NULL, NULL), DS_K_INVALID);

    omni_health_t h;
    assert_int_equal(omni_connector_health(c, &h), DS_K_OK);
    assert_true(h.healthy);
    assert_string_equal(h.status, "healthy");
    assert_int_equal(h.puts, 3);
    assert_int_equal(h.gets, 2);
    assert_int_equal(h.bytes_transferred, bytes);
    assert_int_equal(h.errors, 2); /* the decode failure and the empty put */
    assert_int_equal(h.timeouts, 1);
    assert_int_equal(h.not_found, 0);
    assert_int_equal(h.transport_errors, 0);
    assert_int_equal(h.decode_errors, 1);
    for (int i = 0; i < 3; i++) {
        char rid[16];
        snprintf(rid, sizeof(rid), "h-%d", i);
        assert_int_equal(omni_connector_cleanup(c, rid), DS_K_OK);
    }
    omni_connector_free(c);
}

static void test_close_idempotent(void **state)
{
    (void)state;
    omni_connector_t *c = open_yr("0");
    put_bytes(c, "0", "1", "closing");
    omni_connector_close(c);
    omni_connector_close(c);
    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(c, "0", "1", "closing", NULL, &r), DS_K_NOT_READY);
    expect_msg("connector 'YuanrongConnector' is closed");
    uint8_t b = 1;
    omni_data_t d = omni_data_bytes(&b, 1);
    assert_int_equal(omni_connector_put(c, "0", "1", "closing", &d, NULL, NULL), DS_K_NOT_READY);
    assert_int_equal(omni_connector_cleanup(c, "closing"), DS_K_NOT_READY);
    omni_health_t h;
    assert_int_equal(omni_connector_health(c, &h), DS_K_OK);
    assert_false(h.healthy);
    assert_string_equal(h.status, "closed");
    assert_int_equal(h.puts, 1);
    /* close releases the handle only (spec 11.2): the payload stays. */
    assert_true(itc_exists(KV, "closing:0_1"));
    omni_connector_close(c);
    omni_connector_free(c);
    omni_connector_close(NULL);
    omni_connector_free(NULL);
}

/* Last: the worker goes away under a connector and comes back. */
static void test_worker_lost(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    omni_connector_t *c = open_yr("100");
    put_bytes(c, "0", "1", "lost");
    ds_client_close(KV);
    KV = NULL;
    assert_true(dst_worker_stop(&W) >= 0);
    uint8_t b = 1;
    omni_data_t d = omni_data_bytes(&b, 1);
    ds_status_t st = omni_connector_put(c, "0", "1", "lost-2", &d, NULL, NULL);
    assert_int_not_equal(st, DS_K_OK);
    expect_msg("YuanrongConnector put 'lost-2:0_1'");
    omni_received_t *r = NULL;
    st = omni_connector_get(c, "0", "1", "lost", NULL, &r);
    assert_int_not_equal(st, DS_K_OK);
    assert_int_not_equal(st, DS_K_NOT_FOUND);
    omni_health_t h;
    omni_connector_health(c, &h);
    assert_int_equal(h.transport_errors, 2);
    assert_int_equal(h.errors, 2);
    assert_false(h.healthy);
    assert_string_equal(h.status, "worker unreachable");

    assert_int_equal(dst_worker_restart(&W), 0);
    KV = dst_connect(&W, DS_TRANSPORT_AUTO);
    assert_non_null(KV);
    assert_int_equal(omni_connector_put(c, "0", "1", "back", &d, NULL, NULL), DS_K_OK);
    omni_connector_health(c, &h);
    assert_true(h.healthy);
    omni_connector_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_name),       cmocka_unit_test(test_bad_extras),
        cmocka_unit_test(test_unreachable_worker), cmocka_unit_test(test_default_address),
        cmocka_unit_test(test_value_roundtrip),    cmocka_unit_test(test_raw_bytes),
        cmocka_unit_test(test_raw_tensor),         cmocka_unit_test(test_tcp_transport),
        cmocka_unit_test(test_put_empty),          cmocka_unit_test(test_decode_error),
        cmocka_unit_test(test_get_timeout),        cmocka_unit_test(test_get_no_wait),
        cmocka_unit_test(test_get_waits_for_put),  cmocka_unit_test(test_cleanup),
        cmocka_unit_test(test_health_exact),       cmocka_unit_test(test_close_idempotent),
        cmocka_unit_test(test_worker_lost),
    };
    return dst_run_group_tests_name("it_connector", tests, setup, teardown);
}
