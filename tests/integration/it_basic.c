/* Every KV operation against a real worker, over shared memory and over TCP,
 * with its values and status codes checked, plus the bad-input rules: invalid
 * keys, empty values and oversized batches get K_INVALID with a message naming
 * what was wrong, and nothing already stored is lost. */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 128, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

static void roundtrip(ds_transport_t t)
{
    ds_client_t *c = dst_connect(&W, t);
    assert_non_null(c);
    assert_int_equal(ds_client_is_local(c), t == DS_TRANSPORT_LOCAL);
    const char *tag = t == DS_TRANSPORT_LOCAL ? "l" : "r";
    const size_t sizes[] = {1, 100, 4096, 65536, 65537, 1 << 20, 5 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char key[64];
        snprintf(key, sizeof(key), "basic-%s-%zu", tag, sizes[i]);
        uint8_t *v = malloc(sizes[i]);
        dst_fill(v, sizes[i], i + 1);
        assert_int_equal(ds_kv_set(c, key, v, sizes[i], NULL), DS_K_OK);
        void *out = NULL;
        size_t len = 0;
        assert_int_equal(ds_kv_get(c, key, 0, &out, &len), DS_K_OK);
        assert_int_equal(len, sizes[i]);
        assert_true(dst_check(out, len, i + 1));
        ds_free(out);
        /* get_into: exact fit works, one byte short says how much is needed */
        uint8_t *dst = malloc(sizes[i]);
        assert_int_equal(ds_kv_get_into(c, key, 0, dst, sizes[i], &len), DS_K_OK);
        assert_true(dst_check(dst, sizes[i], i + 1));
        if (sizes[i] > 1) {
            assert_int_equal(ds_kv_get_into(c, key, 0, dst, sizes[i] - 1, &len), DS_K_INVALID);
            assert_int_equal(len, sizes[i]);
        }
        /* zero-copy read */
        const char *k = key;
        ds_buffer_t *b = NULL;
        assert_int_equal(ds_kv_get_buffers(c, 1, &k, 0, &b), DS_K_OK);
        assert_non_null(b);
        assert_int_equal(ds_buffer_size(b), sizes[i]);
        assert_true(dst_check(ds_buffer_data(b), sizes[i], i + 1));
        ds_buffer_release(b);
        /* zero-copy write */
        ds_buffer_t *wb = NULL;
        assert_int_equal(ds_kv_create(c, key, sizes[i], NULL, &wb), DS_K_OK);
        dst_fill(ds_buffer_mutable_data(wb), sizes[i], i + 100);
        assert_int_equal(ds_kv_publish(c, wb), DS_K_OK);
        ds_buffer_release(wb);
        assert_int_equal(ds_kv_get_into(c, key, 0, dst, sizes[i], &len), DS_K_OK);
        assert_true(dst_check(dst, sizes[i], i + 100));
        uint64_t qs = 0;
        ds_status_t qst;
        assert_int_equal(ds_kv_query_size(c, 1, &k, &qs, &qst), DS_K_OK);
        assert_int_equal(qs, sizes[i]);
        free(dst);
        free(v);
    }
    ds_client_close(c);
}

static void test_roundtrip_local(void **state)
{
    (void)state;
    roundtrip(DS_TRANSPORT_LOCAL);
}

static void test_roundtrip_tcp(void **state)
{
    (void)state;
    roundtrip(DS_TRANSPORT_TCP);
}

static void test_batch_ops(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        ds_client_t *c = dst_connect(&W, t ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
        assert_non_null(c);
        enum { N = 300 };
        char *keys[N];
        void *vals[N];
        size_t lens[N];
        for (int i = 0; i < N; i++) {
            keys[i] = malloc(32);
            snprintf(keys[i], 32, "batch-%d-%d", t, i);
            lens[i] = (size_t)(i * 997 % 200000) + 1;
            vals[i] = malloc(lens[i]);
            dst_fill(vals[i], lens[i], (uint64_t)i * 7 + (uint64_t)t);
        }
        ds_status_t st[N];
        assert_int_equal(
            ds_kv_mset(c, N, (const char *const *)keys, (const void *const *)vals, lens, NULL, st),
            DS_K_OK);
        for (int i = 0; i < N; i++)
            assert_int_equal(st[i], DS_K_OK);
        ds_value_t out[N];
        assert_int_equal(ds_kv_mget(c, N, (const char *const *)keys, 0, out), DS_K_OK);
        for (int i = 0; i < N; i++) {
            assert_int_equal(out[i].status, DS_K_OK);
            assert_int_equal(out[i].len, lens[i]);
            assert_true(dst_check(out[i].data, lens[i], (uint64_t)i * 7 + (uint64_t)t));
            ds_free(out[i].data);
        }
        bool ex[N];
        assert_int_equal(ds_kv_exist(c, N, (const char *const *)keys, ex), DS_K_OK);
        for (int i = 0; i < N; i++)
            assert_true(ex[i]);
        /* delete every other key, including one that never existed */
        const char *dk[N / 2 + 1];
        for (int i = 0; i < N / 2; i++)
            dk[i] = keys[2 * i];
        dk[N / 2] = "batch-never-existed";
        assert_int_equal(ds_kv_del(c, N / 2 + 1, dk, NULL), DS_K_OK);
        assert_int_equal(ds_kv_exist(c, N, (const char *const *)keys, ex), DS_K_OK);
        for (int i = 0; i < N; i++)
            assert_int_equal(ex[i], i % 2 == 1);
        /* mget with some missing: found ones come back, missing are NOT_FOUND */
        assert_int_equal(ds_kv_mget(c, 4, (const char *const *)keys, 0, out), DS_K_OK);
        assert_int_equal(out[0].status, DS_K_NOT_FOUND);
        assert_null(out[0].data);
        assert_int_equal(out[1].status, DS_K_OK);
        for (int i = 0; i < 4; i++)
            ds_free(out[i].data);
        /* all missing */
        assert_int_equal(ds_kv_mget(c, 1, dk, 0, out), DS_K_NOT_FOUND);
        for (int i = 0; i < N; i++) {
            free(keys[i]);
            free(vals[i]);
        }
        ds_client_close(c);
    }
}

static void test_nx_and_generate_key(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.existence = DS_EXISTENCE_NX;
    assert_int_equal(ds_kv_set(c, "nx-key", "first", 5, &p), DS_K_OK);
    /* As in Yuanrong: NX on an existing key succeeds and keeps the old value. */
    assert_int_equal(ds_kv_set(c, "nx-key", "second", 6, &p), DS_K_OK);
    void *v;
    size_t len;
    assert_int_equal(ds_kv_get(c, "nx-key", 0, &v, &len), DS_K_OK);
    assert_memory_equal(v, "first", 5);
    ds_free(v);
    char *k1 = NULL, *k2 = NULL;
    assert_int_equal(ds_kv_generate_key(c, "pre_", &k1), DS_K_OK);
    assert_int_equal(ds_kv_generate_key(c, "pre_", &k2), DS_K_OK);
    assert_int_equal(strncmp(k1, "pre_", 4), 0);
    assert_string_not_equal(k1, k2);
    assert_int_equal(ds_key_validate(k1, strlen(k1)), DS_K_OK);
    ds_free(k1);
    ds_free(k2);
    assert_int_equal(ds_client_health_check(c), DS_K_OK);
    ds_client_close(c);
}

static void test_bad_input(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        ds_client_t *c = dst_connect(&W, t ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
        assert_int_equal(ds_kv_set(c, "keep-me", "precious", 8, NULL), DS_K_OK);
        /* invalid keys: a space, a slash, empty, too long */
        assert_int_equal(ds_kv_set(c, "bad key", "x", 1, NULL), DS_K_INVALID);
        assert_non_null(strstr(ds_last_error(), "0x20"));
        assert_int_equal(ds_kv_set(c, "a/b", "x", 1, NULL), DS_K_INVALID);
        assert_int_equal(ds_kv_set(c, "", "x", 1, NULL), DS_K_INVALID);
        char longkey[1100];
        memset(longkey, 'k', sizeof(longkey) - 1);
        longkey[sizeof(longkey) - 1] = '\0';
        assert_int_equal(ds_kv_set(c, longkey, "x", 1, NULL), DS_K_INVALID);
        longkey[1024] = '\0';
        assert_int_equal(ds_kv_set(c, longkey, "x", 1, NULL), DS_K_OK); /* exactly 1024 */
        void *v;
        size_t len;
        assert_int_equal(ds_kv_get(c, "bad key", 0, &v, &len), DS_K_INVALID);
        /* empty value */
        assert_int_equal(ds_kv_set(c, "empty-val", "", 0, NULL), DS_K_INVALID);
        assert_non_null(strstr(ds_last_error(), "empty"));
        /* L2 write modes without an L2 backend: accepted, simply cached */
        ds_set_param_t p = DS_SET_PARAM_INIT;
        p.write_mode = DS_WRITE_THROUGH_L2_CACHE;
        assert_int_equal(ds_kv_set(c, "l2-key", "x", 1, &p), DS_K_OK);
        /* A write mode outside 0..4 is refused by the client for every key
         * (the worker's refusal of a raw one: it_compat.c) */
        const char *mk[3] = {"l2-a", "l2-b", "l2-c"};
        const void *mv[3] = {"1", "22", "333"};
        size_t ml[3] = {1, 2, 3};
        ds_status_t mst[3] = {DS_K_OK, DS_K_OK, DS_K_OK};
        p.write_mode = (ds_write_mode_t)9;
        assert_int_equal(ds_kv_mset(c, 3, mk, mv, ml, &p, mst), DS_K_INVALID);
        assert_null(strstr(ds_last_error(), "malformed"));
        assert_int_equal(ds_kv_mset(c, 3, mk, mv, ml, NULL, mst), DS_K_OK);
        /* oversized batches */
        size_t n = DS_MAX_BATCH + 1;
        const char **keys = malloc(n * sizeof(*keys));
        for (size_t i = 0; i < n; i++)
            keys[i] = "keep-me";
        ds_value_t *out = calloc(n, sizeof(*out));
        assert_int_equal(ds_kv_mget(c, n, keys, 0, out), DS_K_INVALID);
        assert_int_equal(ds_kv_del(c, n, keys, NULL), DS_K_INVALID);
        bool *ex = calloc(DS_MAX_EXIST_BATCH + 1, sizeof(*ex));
        const char **ek = malloc((DS_MAX_EXIST_BATCH + 1) * sizeof(*ek));
        for (size_t i = 0; i <= DS_MAX_EXIST_BATCH; i++)
            ek[i] = "keep-me";
        assert_int_equal(ds_kv_exist(c, DS_MAX_EXIST_BATCH + 1, ek, ex), DS_K_INVALID);
        assert_int_equal(ds_kv_exist(c, DS_MAX_EXIST_BATCH, ek, ex), DS_K_OK);
        assert_true(ex[0] && ex[DS_MAX_EXIST_BATCH - 1]);
        free(ek);
        free(ex);
        free(out);
        free(keys);
        /* nothing stored was lost */
        assert_int_equal(ds_kv_get(c, "keep-me", 0, &v, &len), DS_K_OK);
        assert_int_equal(len, 8);
        assert_memory_equal(v, "precious", 8);
        ds_free(v);
        ds_client_close(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_local), cmocka_unit_test(test_roundtrip_tcp),
        cmocka_unit_test(test_batch_ops),       cmocka_unit_test(test_nx_and_generate_key),
        cmocka_unit_test(test_bad_input),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
