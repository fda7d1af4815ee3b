/* SharedMemoryConnector against a real worker: payloads land in the local
 * worker's arena under {put_key}@{from}_{to}; put hands back vLLM-Omni's
 * {"shm": {"name", "size"}, "size"} metadata; get follows the metadata (or an
 * "inline_bytes" payload), falls back to the deterministic key when the
 * metadata is missing or empty, and consumes what it read; cleanup and close
 * reclaim what nobody consumed; the worker must be reachable through shared
 * memory, and DS_WORKER_ADDRESS locates it for a default edge without extras. */
#include "it_connector_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static dst_worker_t W;
static ds_client_t *KV;

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

static omni_connector_t *open_shm(void)
{
    const char *more[] = {"get_sub_timeout_ms", "200", NULL};
    omni_connector_t *c = itc_open(&W, "SharedMemoryConnector", more);
    assert_non_null(c);
    return c;
}

static void expect_msg(const char *part)
{
    if (strstr(ds_last_error(), part) == NULL) fail_msg("'%s' lacks '%s'", ds_last_error(), part);
}

/* Puts n filled bytes (seed n) and returns the metadata. */
static omni_value_t *put_n(omni_connector_t *c, const char *rid, size_t n, size_t *size)
{
    uint8_t *b = malloc(n);
    dst_fill(b, n, n);
    omni_data_t d = omni_data_bytes(b, n);
    omni_value_t *md = NULL;
    assert_int_equal(omni_connector_put(c, "0", "1", rid, &d, size, &md), DS_K_OK);
    free(b);
    assert_non_null(md);
    return md;
}

static void check_payload(omni_received_t *r, size_t n)
{
    assert_int_equal(omni_received_kind(r), OMNI_DATA_BYTES);
    assert_int_equal(omni_received_size(r), n);
    assert_true(dst_check(omni_received_data(r), n, n));
}

static void test_metadata_handoff(void **state)
{
    (void)state;
    omni_connector_t *prod = open_shm(), *cons = open_shm();
    assert_true(omni_connector_supports_raw_data(prod));
    size_t size = 0, n = 200000;
    omni_value_t *md = put_n(prod, "req-1", n, &size);
    /* {"shm": {"name": "req-1@0_1", "size": N}, "size": N} */
    const char *name;
    size_t len;
    uint64_t u;
    const omni_value_t *shm = omni_map_get(md, "shm");
    assert_int_equal(omni_value_get_str(omni_map_get(shm, "name"), &name, &len), DS_K_OK);
    assert_int_equal(len, strlen("req-1@0_1"));
    assert_memory_equal(name, "req-1@0_1", len);
    assert_int_equal(omni_value_get_uint(omni_map_get(shm, "size"), &u), DS_K_OK);
    assert_int_equal(u, size);
    assert_int_equal(omni_value_get_uint(omni_map_get(md, "size"), &u), DS_K_OK);
    assert_int_equal(u, size);
    assert_true(itc_exists(KV, "req-1@0_1"));

    /* get with the metadata reads it (under any request key) and consumes it. */
    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(cons, "0", "1", "whatever", md, &r), DS_K_OK);
    check_payload(r, n);
    assert_false(itc_exists(KV, "req-1@0_1"));
    assert_true(dst_check(omni_received_data(r), n, n)); /* the view outlives the key */
    omni_received_free(r);
    assert_int_equal(omni_connector_get(cons, "0", "1", "req-1", md, &r), DS_K_NOT_FOUND);
    omni_value_free(md);
    omni_connector_free(prod);
    omni_connector_free(cons);
}

static void test_fallback_key(void **state)
{
    (void)state;
    omni_connector_t *prod = open_shm(), *cons = open_shm();
    omni_value_free(put_n(prod, "req-2", 100, NULL));
    omni_value_free(put_n(prod, "req-3", 70000, NULL));
    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(cons, "0", "1", "req-2", NULL, &r), DS_K_OK);
    check_payload(r, 100);
    omni_received_free(r);
    omni_value_t *empty = omni_value_new_map();
    assert_int_equal(omni_connector_get(cons, "0", "1", "req-3", empty, &r), DS_K_OK);
    check_payload(r, 70000);
    omni_received_free(r);
    omni_value_free(empty);
    /* Nothing under the key: none after the wait, as the Yuanrong connector. */
    uint64_t t0 = ds__now_ns();
    assert_int_equal(omni_connector_get(cons, "0", "1", "req-2", NULL, &r), DS_K_NOT_FOUND);
    double ms = itc_ms_since(t0);
    if (ms < 190 || ms > 5200) fail_msg("a 200 ms get returned after %.1f ms", ms);
    omni_health_t h;
    omni_connector_health(cons, &h);
    assert_int_equal(h.gets, 2);
    assert_int_equal(h.timeouts, 1);
    omni_connector_free(prod);
    omni_connector_free(cons);
}

static void test_inline_and_bad_metadata(void **state)
{
    (void)state;
    omni_connector_t *c = open_shm();
    /* vLLM-Omni inlines small payloads: {"inline_bytes": <document>, "size"}. */
    omni_value_t *doc = omni_value_new_str("hello");
    void *enc;
    size_t enc_len;
    assert_int_equal(omni_value_encode(doc, &enc, &enc_len), DS_K_OK);
    omni_value_t *md = omni_value_new_map();
    assert_int_equal(omni_map_set(md, "inline_bytes", omni_value_new_bin(enc, enc_len)), DS_K_OK);
    assert_int_equal(omni_map_set(md, "size", omni_value_new_uint(enc_len)), DS_K_OK);
    omni_received_t *r = NULL;
    assert_int_equal(omni_connector_get(c, "0", "1", "inl", md, &r), DS_K_OK);
    const omni_value_t *v;
    const char *s;
    size_t len;
    assert_int_equal(omni_received_value(r, &v), DS_K_OK);
    assert_int_equal(omni_value_get_str(v, &s, &len), DS_K_OK);
    assert_memory_equal(s, "hello", 5);
    omni_received_free(r);
    omni_value_free(md);
    omni_free(enc);
    omni_value_free(doc);

    md = omni_value_new_map();
    omni_value_t *shm = omni_value_new_map();
    assert_int_equal(omni_map_set(shm, "name", omni_value_new_int(5)), DS_K_OK);
    assert_int_equal(omni_map_set(md, "shm", shm), DS_K_OK);
    assert_int_equal(omni_connector_get(c, "0", "1", "x", md, &r), DS_K_INVALID);
    expect_msg("no string \"name\"");
    omni_value_free(md);
    omni_health_t h;
    omni_connector_health(c, &h);
    assert_int_equal(h.gets, 1);
    assert_int_equal(h.errors, 1);
    omni_connector_free(c);
}

static void test_cleanup_and_close_reclaim(void **state)
{
    (void)state;
    omni_connector_t *c = open_shm();
    omni_value_free(put_n(c, "req-4", 1000, NULL));
    uint8_t b[10] = {1};
    omni_data_t d = omni_data_bytes(b, sizeof(b));
    assert_int_equal(omni_connector_put(c, "1", "2", "req-4", &d, NULL, NULL), DS_K_OK);
    omni_value_free(put_n(c, "req-5", 1000, NULL));
    omni_value_free(put_n(c, "req-6", 3u << 20, NULL));
    assert_int_equal(omni_connector_cleanup(c, "req-4"), DS_K_OK);
    assert_false(itc_exists(KV, "req-4@0_1"));
    assert_false(itc_exists(KV, "req-4@1_2"));
    assert_true(itc_exists(KV, "req-5@0_1"));
    assert_true(itc_exists(KV, "req-6@0_1"));
    omni_connector_close(c);
    assert_false(itc_exists(KV, "req-5@0_1"));
    assert_false(itc_exists(KV, "req-6@0_1"));
    omni_connector_close(c);
    omni_connector_free(c);
}

static void test_needs_local_worker(void **state)
{
    (void)state;
    itc_spec_t s;
    const omni_connector_spec_t *spec = itc_spec(&s, &W, "SharedMemoryConnector", NULL);
    omni_kv_t kv[4] = {{"host", W.host}, {"port", s.port}, {"unix_socket_dir", "/nonexistent-dir"}};
    omni_connector_spec_t bad = {spec->name, kv, 3};
    omni_connector_t *c = NULL;
    /* A wrong socket directory: the worker tells the client over TCP where
     * its socket is, so shared memory is found anyway. */
    assert_int_equal(omni_factory_create(&bad, &c), DS_K_OK);
    omni_connector_close(c);
    omni_connector_free(c);
    c = NULL;
    if (W.sockdir[0] == '\0') return; /* an external worker: its socket stays put */
    /* The socket out of reach (its directory moved away): the worker still
     * answers over TCP, but not through shared memory, and this connector
     * takes nothing else. */
    char moved[300];
    snprintf(moved, sizeof(moved), "%s.moved", W.sockdir);
    assert_int_equal(rename(W.sockdir, moved), 0);
    ds_status_t st = omni_factory_create(&bad, &c);
    assert_int_equal(rename(moved, W.sockdir), 0);
    assert_int_not_equal(st, DS_K_OK);
    assert_null(c);
    expect_msg("through shared memory");
    expect_msg(s.port);
}

static void test_env_address(void **state)
{
    (void)state;
    char addr[96];
    snprintf(addr, sizeof(addr), "%s:%d", W.host, W.port);
    setenv("DS_WORKER_ADDRESS", addr, 1);
    omni_kv_t kv[] = {{"unix_socket_dir", W.sockdir}};
    omni_connector_spec_t spec = {"SharedMemoryConnector", kv, W.sockdir[0] ? 1 : 0};
    omni_connector_t *c = NULL;
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_OK);
    omni_value_free(put_n(c, "env", 10, NULL));
    omni_connector_free(c); /* close reclaims it */
    assert_false(itc_exists(KV, "env@0_1"));
    setenv("DS_WORKER_ADDRESS", "no-port", 1);
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_INVALID);
    expect_msg("DS_WORKER_ADDRESS 'no-port' is not host:port");
    unsetenv("DS_WORKER_ADDRESS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_handoff),
        cmocka_unit_test(test_fallback_key),
        cmocka_unit_test(test_inline_and_bad_metadata),
        cmocka_unit_test(test_cleanup_and_close_reclaim),
        cmocka_unit_test(test_needs_local_worker),
        cmocka_unit_test(test_env_address),
    };
    return dst_run_group_tests_name("it_connector_shm", tests, setup, teardown);
}
