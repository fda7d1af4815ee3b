/* Memory behaviour against a real worker with a small arena: volatile objects
 * are evicted when space is needed (never while a reader holds them),
 * cache-only objects are never evicted and a full arena says
 * K_OUT_OF_MEMORY, a reader's buffer survives overwrite and delete, TTLs
 * expire, and a reader killed with SIGKILL gives its pins back. */
#include "harness.h"

#include "common/clock.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define ARENA_MB 32
static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, ARENA_MB, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

static void test_eviction_fills_arena_many_times(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_set_param_t ev = DS_SET_PARAM_INIT;
    ev.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    const size_t sz = 512 * 1024;
    const int n = 4 * ARENA_MB * 2; /* four arenas' worth */
    uint8_t *v = malloc(sz);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "evict-%d", i);
        dst_fill(v, sz, (uint64_t)i);
        assert_int_equal(ds_kv_set(c, key, v, sz, &ev), DS_K_OK);
    }
    assert_true(dst_stat(&W, "objects.evictions") >= n - 2 * ARENA_MB);
    int present = 0;
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "evict-%d", i);
        void *out = NULL;
        size_t len = 0;
        ds_status_t st = ds_kv_get(c, key, 0, &out, &len);
        assert_true(st == DS_K_OK || st == DS_K_NOT_FOUND);
        if (st == DS_K_OK) {
            present++;
            assert_int_equal(len, sz);
            assert_true(dst_check(out, len, (uint64_t)i));
        }
        ds_free(out);
    }
    /* the newest ones fit, the oldest were evicted */
    assert_true(present > 0 && present <= 2 * ARENA_MB);
    char last[32];
    snprintf(last, sizeof(last), "evict-%d", n - 1);
    const char *lk = last;
    bool ex = false;
    assert_int_equal(ds_kv_exist(c, 1, &lk, &ex), DS_K_OK);
    assert_true(ex);
    free(v);
    ds_client_close(c);
}

static void test_pinned_never_evicted(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_set_param_t ev = DS_SET_PARAM_INIT;
    ev.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    const size_t sz = 1 << 20;
    uint8_t *v = malloc(sz);
    dst_fill(v, sz, 4242);
    assert_int_equal(ds_kv_set(c, "pinned-one", v, sz, &ev), DS_K_OK);
    const char *k = "pinned-one";
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_get_buffers(c, 1, &k, 0, &b), DS_K_OK);
    for (int i = 0; i < 3 * ARENA_MB; i++) {
        char key[32];
        snprintf(key, sizeof(key), "pushing-%d", i);
        dst_fill(v, sz, (uint64_t)i);
        assert_int_equal(ds_kv_set(c, key, v, sz, &ev), DS_K_OK);
    }
    assert_true(dst_check(ds_buffer_data(b), sz, 4242));
    bool ex = false;
    assert_int_equal(ds_kv_exist(c, 1, &k, &ex), DS_K_OK);
    assert_true(ex);
    ds_buffer_release(b);
    free(v);
    ds_client_close(c);
}

static void test_cache_only_out_of_memory(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    const size_t sz = 1 << 20;
    uint8_t *v = malloc(sz);
    int stored = 0;
    ds_status_t st = DS_K_OK;
    for (int i = 0; i < 2 * ARENA_MB && st == DS_K_OK; i++) {
        char key[32];
        snprintf(key, sizeof(key), "keep-%d", i);
        dst_fill(v, sz, (uint64_t)i + 1000);
        st = ds_kv_set(c, key, v, sz, NULL);
        if (st == DS_K_OK) stored++;
    }
    assert_int_equal(st, DS_K_OUT_OF_MEMORY);
    assert_non_null(strstr(ds_last_error(), "bytes"));
    assert_true(stored >= ARENA_MB / 2);
    /* over TCP too, and with a value larger than the whole arena */
    ds_client_t *r = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_int_equal(ds_kv_set(r, "keep-more", v, sz, NULL), DS_K_OUT_OF_MEMORY);
    size_t huge = (size_t)(ARENA_MB + 1) << 20;
    uint8_t *hv = calloc(1, huge);
    hv[0] = 1;
    assert_int_equal(ds_kv_set(c, "too-big", hv, huge, NULL), DS_K_OUT_OF_MEMORY);
    free(hv);
    /* everything stored is intact, and the worker serves on */
    for (int i = 0; i < stored; i++) {
        char key[32];
        snprintf(key, sizeof(key), "keep-%d", i);
        void *out;
        size_t len;
        assert_int_equal(ds_kv_get(c, key, 0, &out, &len), DS_K_OK);
        assert_true(dst_check(out, len, (uint64_t)i + 1000));
        ds_free(out);
        const char *k = key;
        assert_int_equal(ds_kv_del(c, 1, &k, NULL), DS_K_OK);
    }
    assert_int_equal(ds_kv_set(r, "after-oom", "ok", 2, NULL), DS_K_OK);
    free(v);
    ds_client_close(c);
    ds_client_close(r);
}

static void test_buffer_survives_overwrite_and_delete(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    const size_t sz = 2 << 20;
    uint8_t *v = malloc(sz);
    dst_fill(v, sz, 1);
    assert_int_equal(ds_kv_set(c, "versioned", v, sz, NULL), DS_K_OK);
    const char *k = "versioned";
    ds_buffer_t *b1 = NULL, *b2 = NULL;
    assert_int_equal(ds_kv_get_buffers(c, 1, &k, 0, &b1), DS_K_OK);
    dst_fill(v, sz, 2);
    assert_int_equal(ds_kv_set(c, "versioned", v, sz, NULL), DS_K_OK);
    assert_int_equal(ds_kv_get_buffers(c, 1, &k, 0, &b2), DS_K_OK);
    assert_true(dst_check(ds_buffer_data(b1), sz, 1));
    assert_true(dst_check(ds_buffer_data(b2), sz, 2));
    assert_int_equal(ds_kv_del(c, 1, &k, NULL), DS_K_OK);
    /* reuse the freed space as hard as possible, then check again */
    for (int i = 0; i < 20; i++) {
        dst_fill(v, sz, 100 + (uint64_t)i);
        char key[32];
        snprintf(key, sizeof(key), "churn-%d", i % 4);
        assert_int_equal(ds_kv_set(c, key, v, sz, NULL), DS_K_OK);
    }
    assert_true(dst_check(ds_buffer_data(b1), sz, 1));
    assert_true(dst_check(ds_buffer_data(b2), sz, 2));
    void *out;
    size_t len;
    assert_int_equal(ds_kv_get(c, "versioned", 0, &out, &len), DS_K_NOT_FOUND);
    ds_buffer_release(b1);
    ds_buffer_release(b2);
    assert_int_equal((int)dst_stat(&W, "objects.pinned"), 0);
    const char *ck[] = {"churn-0", "churn-1", "churn-2", "churn-3"};
    ds_kv_del(c, 4, ck, NULL);
    free(v);
    ds_client_close(c);
}

static void test_ttl(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.ttl_second = 1;
    assert_int_equal(ds_kv_set(c, "ttl-short", "v", 1, &p), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "ttl-extended", "v", 1, &p), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "ttl-cleared", "v", 1, &p), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "ttl-none", "v", 1, NULL), DS_K_OK);
    const char *ext = "ttl-extended", *clr = "ttl-cleared";
    assert_int_equal(ds_kv_expire(c, 1, &ext, 3, NULL), DS_K_OK);
    assert_int_equal(ds_kv_expire(c, 1, &clr, 0, NULL), DS_K_OK);
    const char *missing = "ttl-missing";
    ds_status_t st;
    assert_int_equal(ds_kv_expire(c, 1, &missing, 3, &st), DS_K_NOT_FOUND);
    assert_int_equal(st, DS_K_NOT_FOUND);
    const char *keys[] = {"ttl-short", "ttl-extended", "ttl-cleared", "ttl-none"};
    bool ex[4];
    assert_int_equal(ds_kv_exist(c, 4, keys, ex), DS_K_OK);
    assert_true(ex[0] && ex[1] && ex[2] && ex[3]);
    usleep(1600 * 1000);
    assert_int_equal(ds_kv_exist(c, 4, keys, ex), DS_K_OK);
    assert_false(ex[0]);
    assert_true(ex[1] && ex[2] && ex[3]);
    usleep(2000 * 1000);
    assert_int_equal(ds_kv_exist(c, 4, keys, ex), DS_K_OK);
    assert_false(ex[1]);
    assert_true(ex[2] && ex[3]);
    assert_true(dst_stat(&W, "objects.expirations") >= 2);
    ds_client_close(c);
}

static void test_killed_reader_gives_back(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    const size_t sz = 1 << 20;
    uint8_t *v = malloc(sz);
    dst_fill(v, sz, 9);
    assert_int_equal(ds_kv_set(c, "held-a", v, sz, NULL), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "held-b", v, sz, NULL), DS_K_OK);
    double used_before = dst_stat(&W, "arena.used_bytes");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        ds_client_t *k = dst_connect(&W, DS_TRANSPORT_LOCAL);
        const char *keys[] = {"held-a", "held-b"};
        ds_buffer_t *b[2] = {NULL, NULL}, *w = NULL;
        int ok = k && ds_kv_get_buffers(k, 2, keys, 0, b) == DS_K_OK &&
                 ds_kv_create(k, "held-unpublished", 4 << 20, NULL, &w) == DS_K_OK;
        ssize_t wr = write(pfd[1], ok ? "y" : "n", 1);
        (void)wr;
        pause();
        _exit(0);
    }
    char ch = 0;
    assert_int_equal(read(pfd[0], &ch, 1), 1);
    assert_int_equal(ch, 'y');
    assert_true(dst_stat(&W, "objects.pinned") >= 2);
    assert_true(dst_stat(&W, "arena.used_bytes") >= used_before + (4 << 20));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    uint64_t t0 = ds__now_ms();
    while (dst_stat(&W, "objects.pinned") != 0 && ds__now_ms() - t0 < 3000)
        usleep(20000);
    assert_int_equal((int)dst_stat(&W, "objects.pinned"), 0);
    assert_true(dst_stat(&W, "arena.used_bytes") <= used_before);
    bool ex = true;
    const char *u = "held-unpublished";
    assert_int_equal(ds_kv_exist(c, 1, &u, &ex), DS_K_OK);
    assert_false(ex); /* never published: never visible */
    close(pfd[0]);
    close(pfd[1]);
    const char *keys[] = {"held-a", "held-b"};
    ds_kv_del(c, 2, keys, NULL);
    free(v);
    ds_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eviction_fills_arena_many_times),
        cmocka_unit_test(test_pinned_never_evicted),
        cmocka_unit_test(test_cache_only_out_of_memory),
        cmocka_unit_test(test_buffer_survives_overwrite_and_delete),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_killed_reader_gives_back),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
