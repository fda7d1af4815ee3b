/* Readers' shared pins against a real worker: a local client's
 * ds_kv_get_buffers of an indexed value is a view held through its session's
 * pin table in the arena, with no request (the worker's operations.get does
 * not move). The view's bytes stay the version it showed through overwrite,
 * delete and a churn that reuses freed ranges; the range is freed once the
 * view is released, or once the reader dies. A client that scribbles over
 * its table only keeps ranges allocated until its session ends. */
#include "harness.h"

#include "client/client_internal.h"

#include <pthread.h>
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

#define MIB (1u << 20)

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

static void put(ds_client_t *c, const char *key, size_t sz, uint64_t seed)
{
    assert_int_equal(dst_set_filled(c, key, sz, seed), DS_K_OK);
}

static ds_buffer_t *view(ds_client_t *c, const char *key)
{
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_get_buffers(c, 1, &key, 0, &b), DS_K_OK);
    assert_non_null(b);
    return b;
}

static void test_views_skip_the_worker(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    assert_true(dst_stat(&W, "objects.pin_tables") >= 1);
    put(c, "sp-a", MIB, 1);
    put(c, "sp-b", 100, 2);
    double gets = dst_ops(&W, "get");
    for (int i = 0; i < 100; i++) {
        const char *keys[2] = {"sp-a", "sp-b"};
        ds_buffer_t *b[2] = {NULL, NULL};
        assert_int_equal(ds_kv_get_buffers(c, 2, keys, 0, b), DS_K_OK);
        assert_int_equal(ds_buffer_size(b[0]), MIB);
        assert_true(dst_check(ds_buffer_data(b[0]), MIB, 1));
        assert_int_equal(ds_buffer_size(b[1]), 100);
        assert_true(dst_check(ds_buffer_data(b[1]), 100, 2));
        /* A read view is not writable, whichever way it was pinned. */
        assert_null(ds_buffer_mutable_data(b[0]));
        ds_buffer_release(b[0]);
        ds_buffer_release_deferred(b[1]);
    }
    assert_true(dst_ops(&W, "get") == gets);
    /* A miss still asks the worker, and says NOT_FOUND. */
    const char *k = "sp-none";
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_get_buffers(c, 1, &k, 0, &b), DS_K_NOT_FOUND);
    assert_null(b);
    assert_true(dst_ops(&W, "get") == gets + 1);
    ds_client_close(c);
}

/* The view keeps its version's bytes while the key is overwritten and
 * deleted and 1 MiB sets that would reuse its range come and go; released,
 * its range goes back to the allocator. */
static void test_view_outlives_its_version(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    put(c, "sp-v", MIB, 10);
    ds_buffer_t *b = view(c, "sp-v");
    for (uint64_t s = 11; s < 20; s++)
        put(c, "sp-v", MIB, s);
    const char *k = "sp-v";
    assert_int_equal(ds_kv_del(c, 1, &k, NULL), DS_K_OK);
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "sp-churn-%d", i % 4);
        put(c, key, MIB, 100 + (uint64_t)i);
    }
    assert_true(dst_check(ds_buffer_data(b), MIB, 10));
    assert_true(dst_stat(&W, "objects.shm_held") == 1);
    double used_held = dst_stat(&W, "arena.used_bytes");
    ds_buffer_release(b);
    /* Swept within the worker's first few ms after the release. */
    assert_true(dst_wait_stat(&W, "objects.shm_held", 0, 2000));
    assert_true(dst_stat(&W, "arena.used_bytes") <= used_held - MIB);
    const char *churn[4] = {"sp-churn-0", "sp-churn-1", "sp-churn-2", "sp-churn-3"};
    assert_int_equal(ds_kv_del(c, 4, churn, NULL), DS_K_OK);
    ds_client_close(c);
}

/* A reader killed while it holds a view: its session ends and with it the
 * table, so the range it kept is freed. */
static void test_killed_reader(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    put(c, "sp-k", MIB, 30);
    double tables = dst_stat(&W, "objects.pin_tables");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        ds_client_t *r = dst_connect(&W, DS_TRANSPORT_LOCAL);
        const char *key = "sp-k";
        ds_buffer_t *b = NULL;
        int ok = r && ds_kv_get_buffers(r, 1, &key, 0, &b) == DS_K_OK &&
                 dst_check(ds_buffer_data(b), MIB, 30);
        (void)!write(pfd[1], ok ? "y" : "n", 1);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    char got = 0;
    assert_int_equal(read(pfd[0], &got, 1), 1);
    close(pfd[0]);
    assert_true(dst_stat(&W, "objects.pin_tables") == tables + 1);
    const char *k = "sp-k";
    assert_int_equal(ds_kv_del(c, 1, &k, NULL), DS_K_OK);
    bool held = dst_stat(&W, "objects.shm_held") == 1;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_int_equal(got, 'y');
    assert_true(held);
    assert_true(dst_wait_stat(&W, "objects.shm_held", 0, 5000));
    assert_true(dst_wait_stat(&W, "objects.pin_tables", tables, 5000));
    ds_client_close(c);
}

/* More views than the table has slots: the rest are pinned with a GET. */
static void test_table_full(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    put(c, "sp-f", 4096, 40);
    double gets = dst_ops(&W, "get");
    ds_buffer_t *b[DS_SHM_PINS_SLOTS + 2];
    for (unsigned i = 0; i < DS_SHM_PINS_SLOTS + 2; i++) {
        b[i] = view(c, "sp-f");
        assert_true(dst_check(ds_buffer_data(b[i]), 4096, 40));
    }
    assert_true(dst_ops(&W, "get") == gets + 2);
    for (unsigned i = 0; i < DS_SHM_PINS_SLOTS + 2; i++)
        ds_buffer_release(b[i]);
    /* All slots free again: no request. */
    ds_buffer_t *again = view(c, "sp-f");
    assert_true(dst_ops(&W, "get") == gets + 2);
    ds_buffer_release(again);
    ds_client_close(c);
}

/* A client that writes garbage over its own table: the worker keeps
 * serving, other clients' values stay intact, and what the garbage kept
 * allocated is freed when that client's session ends. */
static void test_scribbled_table(void **state)
{
    (void)state;
    ds_client_t *bad = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    put(c, "sp-s0", MIB, 50);
    /* Learn the key's offset from a view, then claim it in every slot. */
    ds_buffer_t *b = view(bad, "sp-s0");
    ds_sess_t *s = b->sess;
    assert_non_null(s->pins);
    uint64_t off = (uint64_t)((const uint8_t *)ds_buffer_data(b) - s->base);
    for (unsigned i = 0; i < DS_SHM_PINS_SLOTS; i++)
        atomic_store(&s->pins->slot[i], i % 2 ? off : UINT64_MAX - i);
    atomic_store(&s->pins->held, UINT64_MAX);
    for (uint64_t v = 51; v < 55; v++)
        put(c, "sp-s0", MIB, v);
    assert_true(dst_stat(&W, "objects.shm_held") == 1);
    uint8_t *out = malloc(MIB);
    size_t len = 0;
    assert_int_equal(ds_kv_get_into(c, "sp-s0", 0, out, MIB, &len), DS_K_OK);
    assert_true(len == MIB && dst_check(out, MIB, 54));
    free(out);
    /* The garbage outlives the buffer (its release clears one slot only)... */
    ds_buffer_release(b);
    usleep(50 * 1000);
    assert_true(dst_stat(&W, "objects.shm_held") == 1);
    /* ...and goes with the session. */
    ds_client_close(bad);
    assert_true(dst_wait_stat(&W, "objects.shm_held", 0, 5000));
    ds_client_close(c);
}

typedef struct {
    ds_client_t *c;
    size_t size;
    atomic_bool stop;
    atomic_long views, torn;
} readers_t;

/* Each version's bytes are all one value; a view must show one version
 * throughout, and still show it after the writer has moved on. */
static void *reader(void *arg)
{
    readers_t *r = arg;
    const char *k = "sp-hot";
    while (!atomic_load(&r->stop)) {
        ds_buffer_t *b = NULL;
        if (ds_kv_get_buffers(r->c, 1, &k, 0, &b) != DS_K_OK) continue;
        const uint8_t *p = ds_buffer_data(b);
        size_t n = ds_buffer_size(b);
        bool ok = n == r->size;
        for (int pass = 0; pass < 2 && ok; pass++) {
            for (size_t i = 1; i < n && ok; i++)
                ok = p[i] == p[0];
            if (pass == 0) usleep(200);
        }
        if (!ok) atomic_fetch_add(&r->torn, 1);
        atomic_fetch_add(&r->views, 1);
        ds_buffer_release(b);
    }
    return NULL;
}

static void test_concurrent_overwrite(void **state)
{
    (void)state;
    ds_client_t *w = dst_connect(&W, DS_TRANSPORT_LOCAL);
    readers_t r = {.c = dst_connect(&W, DS_TRANSPORT_LOCAL), .size = 64 * 1024};
    uint8_t *v = malloc(r.size);
    memset(v, 1, r.size);
    assert_int_equal(ds_kv_set(w, "sp-hot", v, r.size, NULL), DS_K_OK);
    double gets = dst_ops(&W, "get");
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader, &r), 0);
    for (int i = 0; i < 2000; i++) {
        memset(v, (i % 250) + 2, r.size);
        assert_int_equal(ds_kv_set(w, "sp-hot", v, r.size, NULL), DS_K_OK);
    }
    atomic_store(&r.stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("concurrent overwrite: %ld views, %ld torn, %.0f went to the worker\n",
           atomic_load(&r.views), atomic_load(&r.torn), dst_ops(&W, "get") - gets);
    assert_int_equal(atomic_load(&r.torn), 0);
    assert_true(atomic_load(&r.views) > 0);
    assert_true(dst_wait_stat(&W, "objects.shm_held", 0, 2000));
    free(v);
    ds_client_close(w);
    ds_client_close(r.c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views_skip_the_worker),
        cmocka_unit_test(test_view_outlives_its_version),
        cmocka_unit_test(test_killed_reader),
        cmocka_unit_test(test_table_full),
        cmocka_unit_test(test_scribbled_table),
        cmocka_unit_test(test_concurrent_overwrite),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
