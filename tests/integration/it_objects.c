/* Object-cache semantics against a real worker: write latches
 * (ds_object_wlatch / ds_object_unwlatch) against other clients' latches and
 * writes, and against the holder's own; latches released with their client;
 * nested references (ds_object_set_nested): held keys outlive their own
 * references and go with their parent, down a long chain at once; global
 * references are per client and go when the client does; a KV delete of a
 * parent lets its held keys go; a sealed object (ds_object_seal) is not
 * replaced by any client's set or publish until it is deleted; object
 * metadata (ds_object_get_meta_info); ds_buffer_memory_copy (Yuanrong's
 * MemoryCopy) fills a buffer through a local and a TCP client and refuses
 * what Yuanrong's refuses, with its messages. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int group_setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 32, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return dst_worker_stop(&W) == 0 ? 0 : -1;
}

static ds_client_t *client(void)
{
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(c);
    return c;
}

static void put(ds_client_t *c, const char *key, const char *val)
{
    ds_status_t st = ds_kv_set(c, key, val, strlen(val), NULL);
    if (st != DS_K_OK) fprintf(stderr, "set %s: %s\n", key, ds_last_error());
    assert_int_equal(st, DS_K_OK);
}

static bool exists(ds_client_t *c, const char *key)
{
    bool e = false;
    assert_int_equal(ds_kv_exist(c, 1, &key, &e), DS_K_OK);
    return e;
}

static void want_value(ds_client_t *c, const char *key, const char *want)
{
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &v, &len), DS_K_OK);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(v, want, len);
    ds_free(v);
}

static void test_write_latch_excludes_others_not_the_holder(void **state)
{
    (void)state;
    ds_client_t *a = client(), *b = client();
    const char *k = "wl.k", *missing = "wl.missing";
    put(a, k, "v1");
    assert_int_equal(ds_object_wlatch(a, 1, &k, 0, NULL), DS_K_INVALID);
    assert_int_equal(ds_object_wlatch(a, 1, &missing, 100, NULL), DS_K_NOT_FOUND);
    assert_int_equal(ds_object_wlatch(a, 1, &k, 100, NULL), DS_K_OK);
    ds_status_t st = DS_K_OK;
    assert_int_equal(ds_object_wlatch(b, 1, &k, 50, &st), DS_K_TRY_AGAIN);
    assert_int_equal(st, DS_K_TRY_AGAIN);
    assert_non_null(strstr(ds_last_error(), "still latched by another client"));
    assert_int_equal(ds_kv_rlatch(b, 1, &k, 50, NULL), DS_K_TRY_AGAIN);
    assert_int_equal(ds_object_unwlatch(b, 1, &k, NULL), DS_K_NOT_FOUND);
    /* The holder reads with a latch, latches again and writes. */
    assert_int_equal(ds_kv_rlatch(a, 1, &k, 100, NULL), DS_K_OK);
    assert_int_equal(ds_kv_unrlatch(a, 1, &k, NULL), DS_K_OK);
    assert_int_equal(ds_object_wlatch(a, 1, &k, 100, NULL), DS_K_OK);
    put(a, k, "v2");
    assert_int_equal(ds_object_unwlatch(a, 1, &k, NULL), DS_K_OK);
    assert_int_equal(ds_object_unwlatch(a, 1, &k, NULL), DS_K_OK);
    assert_int_equal(ds_object_unwlatch(a, 1, &k, NULL), DS_K_NOT_FOUND);
    /* Now b may; and a may not write-latch past b's read latch. */
    assert_int_equal(ds_kv_rlatch(b, 1, &k, 10000, NULL), DS_K_OK);
    assert_int_equal(ds_object_wlatch(a, 1, &k, 50, NULL), DS_K_TRY_AGAIN);
    assert_int_equal(ds_kv_unrlatch(b, 1, &k, NULL), DS_K_OK);
    assert_int_equal(ds_object_wlatch(b, 1, &k, 100, NULL), DS_K_OK);
    /* b's latch goes with b. */
    ds_client_close(b);
    assert_int_equal(ds_object_wlatch(a, 1, &k, 10000, NULL), DS_K_OK);
    assert_int_equal(ds_object_unwlatch(a, 1, &k, NULL), DS_K_OK);
    want_value(a, k, "v2");
    ds_client_close(a);
}

struct setter {
    ds_client_t *c;
    const char *key, *val;
    ds_status_t st;
};

static void *do_set(void *arg)
{
    struct setter *s = arg;
    s->st = ds_kv_set(s->c, s->key, s->val, strlen(s->val), NULL);
    return NULL;
}

static void test_writer_waits_for_write_latch_until_holder_leaves(void **state)
{
    (void)state;
    ds_client_t *a = client(), *b = client();
    const char *k = "wl.wait";
    put(a, k, "old");
    assert_int_equal(ds_object_wlatch(a, 1, &k, 100, NULL), DS_K_OK);
    struct setter s = {.c = b, .key = k, .val = "new", .st = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, do_set, &s), 0);
    assert_true(dst_wait_stat(&W, "latches.waiting", 1, 10000));
    want_value(a, k, "old");
    assert_true(dst_stat(&W, "latches.write_held") == 1);
    ds_client_close(a); /* the holder goes without unwlatch */
    pthread_join(t, NULL);
    assert_int_equal(s.st, DS_K_OK);
    want_value(b, k, "new");
    assert_true(dst_wait_stat(&W, "latches.write_held", 0, 10000));
    ds_client_close(b);
}

static void test_nested_references(void **state)
{
    (void)state;
    ds_client_t *c = client();
    const char *p = "nest.p", *kids[2] = {"nest.a", "nest.b"};
    const char *all[3] = {"nest.p", "nest.a", "nest.b"};
    assert_int_equal(ds_object_g_increase_ref(c, 3, all, NULL), DS_K_OK);
    for (int i = 0; i < 3; i++)
        put(c, all[i], "v");
    assert_int_equal(ds_object_set_nested(c, p, 2, kids), DS_K_OK);
    assert_int_equal(ds_object_g_decrease_ref(c, 2, kids, NULL), DS_K_OK);
    uint32_t n = 9;
    assert_int_equal(ds_object_query_global_ref_num(c, kids[0], &n), DS_K_OK);
    assert_int_equal(n, 0);
    assert_true(exists(c, kids[0]) && exists(c, kids[1]));
    /* A key without references of its own: decreasing it fails. */
    assert_int_equal(ds_object_g_decrease_ref(c, 1, kids, NULL), DS_K_NOT_FOUND);
    /* Re-nesting drops a, keeps b. */
    assert_int_equal(ds_object_set_nested(c, p, 1, &kids[1]), DS_K_OK);
    assert_false(exists(c, kids[0]));
    assert_true(exists(c, kids[1]));
    assert_int_equal(ds_object_g_decrease_ref(c, 1, &p, NULL), DS_K_OK);
    assert_false(exists(c, p) || exists(c, kids[1]));
    /* Bad calls. */
    assert_int_equal(ds_object_set_nested(c, p, 1, &p), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "cannot be nested in itself"));
    assert_int_equal(ds_object_set_nested(c, NULL, 0, NULL), DS_K_INVALID);
    assert_int_equal(ds_object_set_nested(c, p, 1, NULL), DS_K_INVALID);
    ds_client_close(c);
}

static void test_delete_of_parent_releases_holds(void **state)
{
    (void)state;
    ds_client_t *c = client();
    const char *p = "dnest.p", *kids[2] = {"dnest.a", "dnest.b"};
    put(c, p, "p");
    put(c, kids[0], "a");
    put(c, kids[1], "b");
    /* b keeps a reference of its own; a has only the parent's hold. */
    assert_int_equal(ds_object_g_increase_ref(c, 1, &kids[1], NULL), DS_K_OK);
    assert_int_equal(ds_object_set_nested(c, p, 2, kids), DS_K_OK);
    assert_int_equal(ds_kv_del(c, 1, &p, NULL), DS_K_OK);
    assert_false(exists(c, p));
    assert_false(exists(c, kids[0]));
    assert_true(exists(c, kids[1]));
    uint32_t n = 9;
    assert_int_equal(ds_object_query_global_ref_num(c, kids[1], &n), DS_K_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ds_object_g_decrease_ref(c, 1, &kids[1], NULL), DS_K_OK);
    assert_false(exists(c, kids[1]));
    ds_client_close(c);
}

static void test_sealed_object_is_final_for_every_client(void **state)
{
    (void)state;
    ds_client_t *a = client(), *b = client();
    const char *k = "sealed.k";
    put(a, k, "final");
    ds_status_t st = DS_K_RUNTIME_ERROR;
    assert_int_equal(ds_object_seal(a, 1, &k, &st), DS_K_OK);
    assert_int_equal(st, DS_K_OK);
    assert_int_equal(ds_kv_set(b, k, "again", 5, NULL), DS_K_OC_ALREADY_SEALED);
    assert_non_null(strstr(ds_last_error(), "sealed"));
    assert_int_equal(ds_kv_set(a, k, "again", 5, NULL), DS_K_OC_ALREADY_SEALED);
    want_value(b, k, "final");
    /* A buffer published over it is refused the same way. */
    ds_buffer_t *buf = NULL;
    assert_int_equal(ds_kv_create(b, k, 3, NULL, &buf), DS_K_OK);
    memcpy(ds_buffer_mutable_data(buf), "new", 3);
    assert_int_equal(ds_kv_publish(b, buf), DS_K_OC_ALREADY_SEALED);
    ds_buffer_release(buf);
    want_value(a, k, "final");
    /* A missing key cannot be sealed; a deleted sealed key can be set again. */
    const char *none = "sealed.none";
    assert_int_equal(ds_object_seal(a, 1, &none, NULL), DS_K_NOT_FOUND);
    assert_int_equal(ds_kv_del(b, 1, &k, NULL), DS_K_OK);
    put(b, k, "fresh");
    want_value(a, k, "fresh");
    ds_client_close(a);
    ds_client_close(b);
}

static void test_long_chain_goes_with_its_head(void **state)
{
    (void)state;
    enum { N = 2000 };
    ds_client_t *c = client();
    char key[N][32];
    for (int i = 0; i < N; i++)
        snprintf(key[i], sizeof(key[i]), "chain.%d", i);
    for (int i = 0; i < N; i++) {
        put(c, key[i], "x");
        if (i > 0) {
            const char *kid = key[i];
            assert_int_equal(ds_object_set_nested(c, key[i - 1], 1, &kid), DS_K_OK);
        }
    }
    const char *head = key[0];
    assert_int_equal(ds_object_g_increase_ref(c, 1, &head, NULL), DS_K_OK);
    assert_true(exists(c, key[N - 1]));
    assert_int_equal(ds_object_g_decrease_ref(c, 1, &head, NULL), DS_K_OK);
    assert_false(exists(c, key[0]));
    assert_false(exists(c, key[N / 2]));
    assert_false(exists(c, key[N - 1]));
    ds_client_close(c);
}

static void test_references_are_per_client_and_go_with_it(void **state)
{
    (void)state;
    ds_client_t *a = client(), *b = client(), *q = client();
    const char *k = "ref.k", *kid = "ref.kid", *both[2] = {"ref.k", "ref.shared"};
    put(a, k, "v");
    put(a, kid, "v");
    put(a, both[1], "v");
    assert_int_equal(ds_object_g_increase_ref(a, 2, both, NULL), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(a, 1, &k, NULL), DS_K_OK);
    assert_int_equal(ds_object_set_nested(a, k, 1, &kid), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(b, 1, &both[1], NULL), DS_K_OK);
    uint32_t n = 0;
    assert_int_equal(ds_object_query_global_ref_num(q, both[1], &n), DS_K_OK);
    assert_int_equal(n, 2);
    /* b cannot drop a's references. */
    assert_int_equal(ds_object_g_decrease_ref(b, 1, &k, NULL), DS_K_NOT_FOUND);
    assert_non_null(strstr(ds_last_error(), "no global reference of this client"));
    /* a goes without decreasing: its references go, k (and the kid it holds)
     * with them; the shared key stays for b. */
    ds_client_close(a);
    for (int i = 0; i < 500 && exists(q, k); i++)
        usleep(10000);
    assert_false(exists(q, k));
    assert_false(exists(q, kid));
    assert_true(exists(q, both[1]));
    assert_int_equal(ds_object_query_global_ref_num(q, both[1], &n), DS_K_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ds_object_g_decrease_ref(b, 1, &both[1], NULL), DS_K_OK);
    assert_false(exists(q, both[1]));
    ds_client_close(b);
    ds_client_close(q);
}

static void test_get_meta_info(void **state)
{
    (void)state;
    ds_client_t *c = client();
    put(c, "meta.k", "12345");
    const char *keys[2] = {"meta.k", "meta.missing"};
    ds_obj_meta_t m[2];
    ds_status_t st[2];
    assert_int_equal(ds_object_get_meta_info(c, "", 2, keys, m, st), DS_K_OK);
    assert_int_equal(st[0], DS_K_OK);
    assert_int_equal(st[1], DS_K_NOT_FOUND);
    assert_int_equal(m[0].size, 5);
    char want[300];
    snprintf(want, sizeof(want), "%s:%d", W.host, W.port);
    assert_string_equal(m[0].location, want);
    assert_int_equal(m[1].size, 0);
    assert_string_equal(m[1].location, "");
    assert_int_equal(ds_object_get_meta_info(c, NULL, 1, &keys[1], m, NULL), DS_K_NOT_FOUND);
    assert_int_equal(ds_object_get_meta_info(c, "t1", 1, keys, m, NULL), DS_K_NOT_AUTHORIZED);
    assert_int_equal(ds_object_get_meta_info(c, NULL, 1, keys, NULL, NULL), DS_K_INVALID);
    ds_client_close(c);
}

static void test_memory_copy(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        ds_client_t *c = dst_connect(&W, t ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
        assert_non_null(c);
        char key[32], val[300000];
        snprintf(key, sizeof(key), "mc-%d", t);
        for (size_t i = 0; i < sizeof(val); i++)
            val[i] = (char)('a' + i % 23);
        ds_buffer_t *b = NULL;
        assert_int_equal(ds_kv_create(c, key, sizeof(val), NULL, &b), DS_K_OK);
        assert_int_equal(ds_buffer_memory_copy(b, val, 0), DS_K_INVALID);
        assert_string_equal(ds_last_error(), "Data length must be in (0, buffer_size].");
        assert_int_equal(ds_buffer_memory_copy(b, val, sizeof(val) + 1), DS_K_INVALID);
        assert_int_equal(ds_buffer_memory_copy(b, NULL, 10), DS_K_INVALID);
        assert_string_equal(ds_last_error(), "Can't put null pointer.");
        assert_int_equal(ds_buffer_memory_copy(NULL, val, 10), DS_K_INVALID);
        assert_non_null(strstr(ds_last_error(), "Buffer is not initialized."));
        assert_int_equal(ds_buffer_memory_copy(b, val, sizeof(val)), DS_K_OK);
        assert_int_equal(ds_kv_publish(c, b), DS_K_OK);
        assert_int_equal(ds_buffer_memory_copy(b, val, 10), DS_K_INVALID);
        ds_buffer_release(b);
        void *v = NULL;
        size_t len = 0;
        assert_int_equal(ds_kv_get(c, key, 0, &v, &len), DS_K_OK);
        assert_int_equal(len, sizeof(val));
        assert_memory_equal(v, val, sizeof(val));
        ds_free(v);
        ds_client_close(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_latch_excludes_others_not_the_holder),
        cmocka_unit_test(test_writer_waits_for_write_latch_until_holder_leaves),
        cmocka_unit_test(test_nested_references),
        cmocka_unit_test(test_delete_of_parent_releases_holds),
        cmocka_unit_test(test_sealed_object_is_final_for_every_client),
        cmocka_unit_test(test_long_chain_goes_with_its_head),
        cmocka_unit_test(test_references_are_per_client_and_go_with_it),
        cmocka_unit_test(test_get_meta_info),
        cmocka_unit_test(test_memory_copy),
    };
    return dst_run_group_tests(tests, group_setup, group_teardown);
}
