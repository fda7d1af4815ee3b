/* The shared GET index against a real worker: a local client's get of a
 * value up to --index_value_max_kb (4 MiB) is answered from the arena without a request (the
 * worker's operations.get count does not move), and never with anything but the key's current
 * value: overwrite, delete, TTL expiry and eviction all show at once, and a writer overwriting a
 * key while readers loop on it yields no torn or stale-mixed value. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static double gets(void)
{
    return dst_stat(&W, "operations.get");
}

static void test_hits_skip_the_worker(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    uint8_t v[1024], out[2048];
    dst_fill(v, sizeof(v), 7);
    assert_int_equal(ds_kv_set(c, "ix-a", v, sizeof(v), NULL), DS_K_OK);
    double before = gets();
    size_t len = 0;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(ds_kv_get_into(c, "ix-a", 0, out, sizeof(out), &len), DS_K_OK);
        assert_int_equal(len, sizeof(v));
        assert_memory_equal(out, v, sizeof(v));
        void *p = NULL;
        assert_int_equal(ds_kv_get(c, "ix-a", 0, &p, &len), DS_K_OK);
        assert_int_equal(len, sizeof(v));
        assert_memory_equal(p, v, sizeof(v));
        ds_free(p);
    }
    assert_true(gets() == before);
    /* Overwrite: the new value, never the old one. */
    dst_fill(v, 100, 8);
    assert_int_equal(ds_kv_set(c, "ix-a", v, 100, NULL), DS_K_OK);
    assert_int_equal(ds_kv_get_into(c, "ix-a", 0, out, sizeof(out), &len), DS_K_OK);
    assert_int_equal(len, 100);
    assert_true(dst_check(out, len, 8));
    /* Too small a buffer still says how much is needed (from the worker). */
    assert_int_equal(ds_kv_get_into(c, "ix-a", 0, out, 10, &len), DS_K_INVALID);
    assert_int_equal(len, 100);
    /* Delete: NOT_FOUND at once. */
    const char *k = "ix-a";
    assert_int_equal(ds_kv_del(c, 1, &k, NULL), DS_K_OK);
    assert_int_equal(ds_kv_get_into(c, "ix-a", 0, out, sizeof(out), &len), DS_K_NOT_FOUND);
    /* Values past inline_max (written through the arena) up to
     * --index_value_max_kb (4 MiB) are index hits too; larger ones go to
     * the worker. */
    size_t big = 5u << 20;
    uint8_t *bv = malloc(big), *bo = malloc(big);
    const size_t sizes[] = {100 * 1024, 4u << 20, (4u << 20) + 1, 5u << 20};
    for (int s = 0; s < 4; s++) {
        dst_fill(bv, sizes[s], 9 + (uint64_t)s);
        assert_int_equal(ds_kv_set(c, "ix-big", bv, sizes[s], NULL), DS_K_OK);
        before = gets();
        memset(bo, 0, big);
        assert_int_equal(ds_kv_get_into(c, "ix-big", 0, bo, big, &len), DS_K_OK);
        assert_int_equal(len, sizes[s]);
        assert_true(dst_check(bo, len, 9 + (uint64_t)s));
        assert_true(gets() == before + (sizes[s] > (4u << 20) ? 1 : 0));
    }
    free(bv);
    free(bo);
    /* mget: all hits from the index. */
    dst_fill(v, 50, 10);
    assert_int_equal(ds_kv_set(c, "ix-m1", v, 50, NULL), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "ix-m2", v, 50, NULL), DS_K_OK);
    const char *mk[] = {"ix-m1", "ix-m2"};
    ds_value_t mv[2];
    before = gets();
    assert_int_equal(ds_kv_mget(c, 2, mk, 0, mv), DS_K_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(mv[i].len, 50);
        assert_true(dst_check(mv[i].data, 50, 10));
        ds_free(mv[i].data);
    }
    assert_true(gets() == before);
    ds_client_close(c);
}

static void test_ttl_still_expires(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.ttl_second = 1;
    assert_int_equal(ds_kv_set(c, "ix-ttl", "abc", 3, &p), DS_K_OK);
    char out[8];
    size_t len = 0;
    assert_int_equal(ds_kv_get_into(c, "ix-ttl", 0, out, sizeof(out), &len), DS_K_OK);
    /* A key that gains a TTL leaves the index too. */
    assert_int_equal(ds_kv_set(c, "ix-ttl2", "xyz", 3, NULL), DS_K_OK);
    const char *k = "ix-ttl2";
    assert_int_equal(ds_kv_expire(c, 1, &k, 1, NULL), DS_K_OK);
    usleep(1300 * 1000);
    assert_int_equal(ds_kv_get_into(c, "ix-ttl", 0, out, sizeof(out), &len), DS_K_NOT_FOUND);
    assert_int_equal(ds_kv_get_into(c, "ix-ttl2", 0, out, sizeof(out), &len), DS_K_NOT_FOUND);
    ds_client_close(c);
}

static void test_eviction_is_seen(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    assert_int_equal(ds_kv_set(c, "ix-ev", "first", 5, &p), DS_K_OK);
    char out[8];
    size_t len = 0;
    assert_int_equal(ds_kv_get_into(c, "ix-ev", 0, out, sizeof(out), &len), DS_K_OK);
    /* Fill the arena with volatile values until the first one is evicted. */
    size_t sz = 4 << 20;
    uint8_t *v = calloc(1, sz);
    double ev0 = dst_stat(&W, "objects.evictions");
    for (int i = 0; i < 80 && dst_stat(&W, "objects.evictions") == ev0; i++) {
        char key[32];
        snprintf(key, sizeof(key), "ix-fill-%d", i);
        assert_int_equal(ds_kv_set(c, key, v, sz, &p), DS_K_OK);
    }
    assert_true(dst_stat(&W, "objects.evictions") > ev0);
    assert_int_equal(ds_kv_get_into(c, "ix-ev", 0, out, sizeof(out), &len), DS_K_NOT_FOUND);
    free(v);
    ds_client_close(c);
}

typedef struct {
    ds_client_t *c;
    size_t payload;
    atomic_bool stop;
    long torn, hits;
} race_t;

/* Every payload is seed-derived, so any mix of two versions fails its check. */
static void *reader(void *arg)
{
    race_t *r = arg;
    uint8_t *out = malloc(r->payload);
    while (out && !atomic_load(&r->stop)) {
        size_t len = 0;
        if (ds_kv_get_into(r->c, "ix-hot", 0, out, r->payload, &len) != DS_K_OK) continue;
        uint64_t seed;
        memcpy(&seed, out, sizeof(seed));
        if (len != r->payload || !dst_check(out + 8, r->payload - 8, seed))
            __atomic_fetch_add(&r->torn, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&r->hits, 1, __ATOMIC_RELAXED);
    }
    free(out);
    return NULL;
}

/* A writer overwrites one key while three readers loop on it: payload bytes
 * and `versions` overwrites. A 1 MiB copy out of the index takes long enough
 * for overwrites to land during it, which the seqlock must catch. */
static void concurrent_overwrite(size_t payload, uint64_t versions)
{
    race_t r = {.c = dst_connect(&W, DS_TRANSPORT_LOCAL), .payload = payload};
    assert_non_null(r.c);
    atomic_init(&r.stop, false);
    ds_client_t *w = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(w);
    uint8_t *v = malloc(payload);
    uint64_t seed = 1;
    memcpy(v, &seed, 8);
    dst_fill(v + 8, payload - 8, seed);
    assert_int_equal(ds_kv_set(w, "ix-hot", v, payload, NULL), DS_K_OK);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, reader, &r);
    double before = gets();
    for (seed = 2; seed < versions; seed++) {
        memcpy(v, &seed, 8);
        dst_fill(v + 8, payload - 8, seed);
        assert_int_equal(ds_kv_set(w, "ix-hot", v, payload, NULL), DS_K_OK);
    }
    atomic_store(&r.stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("concurrent overwrite of %zu bytes: %ld reads, %ld torn, %.0f went to the worker\n",
           payload, r.hits, r.torn, gets() - before);
    assert_int_equal(r.torn, 0);
    assert_true(r.hits > 0);
    /* Most reads were answered from the index. */
    assert_true(gets() - before < (double)r.hits);
    free(v);
    ds_client_close(w);
    ds_client_close(r.c);
}

static void test_concurrent_overwrite(void **state)
{
    (void)state;
    concurrent_overwrite(1024, 3000);
}

static void test_concurrent_overwrite_1mib(void **state)
{
    (void)state;
    concurrent_overwrite(1u << 20, 300);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hits_skip_the_worker),
        cmocka_unit_test(test_ttl_still_expires),
        cmocka_unit_test(test_eviction_is_seen),
        cmocka_unit_test(test_concurrent_overwrite),
        cmocka_unit_test(test_concurrent_overwrite_1mib),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
