/* ds_client_close while other threads are inside calls on the same client.
 *
 * Several threads share one client: each runs a bounded loop of sets and
 * gets (small values and arena-sized ones, copying and zero-copy), then parks
 * in a subscribe-get on a key nobody writes, next to threads that only wait.
 * Once the worker reports every one of them waiting, the main thread closes
 * the client. Each blocked call must come back promptly (long before its
 * subscribe timeout) with DS_K_INVALID "the client is closed", every earlier
 * call must have succeeded, and under ASan nothing may touch freed memory:
 * the client's memory lives until the last call has left. A zero-copy buffer
 * taken before the close stays readable after it. The worker is checked to
 * have dropped the waits and to serve a new client afterwards. */
#include "harness.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define NLOOP 4 /* threads that run set/get loops, then wait */
#define NWAIT 3 /* threads that only wait */
#define ITERS 60
#define SUB_MS 30000    /* the parked subscribe-gets would wait this long */
#define BIG (300 << 10) /* above the worker's inline limit: the arena path */

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

typedef struct {
    ds_client_t *c;
    int id;
    ds_transport_t t;
    int loop_failures; /* loop calls that did not return DS_K_OK */
    char first_error[256];
    ds_status_t parked; /* what the parked subscribe-get returned */
    char parked_msg[256];
    uint64_t parked_done_ms;
} th_t;

static void loop_fail(th_t *a, const char *what, ds_status_t st)
{
    if (a->loop_failures++ == 0)
        snprintf(a->first_error, sizeof(a->first_error), "%s: %s: %s", what, ds_status_name(st),
                 ds_last_error());
}

/* One call that waits on a key nobody writes; the API used varies by id so
 * every blocking entry point is cut short by the close at least once. */
static void park(th_t *a)
{
    char key[64];
    snprintf(key, sizeof(key), "cc.never.%d.%d", (int)a->t, a->id);
    const char *keys[1] = {key};
    switch (a->id % 4) {
    case 0: {
        void *v = NULL;
        size_t len = 0;
        a->parked = ds_kv_get(a->c, key, SUB_MS, &v, &len);
        ds_free(v);
        break;
    }
    case 1: {
        char buf[16];
        size_t len = 0;
        a->parked = ds_kv_get_into(a->c, key, SUB_MS, buf, sizeof(buf), &len);
        break;
    }
    case 2: {
        ds_buffer_t *b[1] = {NULL};
        a->parked = ds_kv_get_buffers(a->c, 1, keys, SUB_MS, b);
        ds_buffer_release(b[0]);
        break;
    }
    default: {
        ds_value_t out[1];
        a->parked = ds_kv_mget(a->c, 1, keys, SUB_MS, out);
        if (a->parked == DS_K_OK) ds_free(out[0].data);
        break;
    }
    }
    snprintf(a->parked_msg, sizeof(a->parked_msg), "%s", ds_last_error());
    a->parked_done_ms = ds__now_ms();
}

static void *loop_thread(void *arg)
{
    th_t *a = arg;
    uint8_t *big = malloc(BIG), *got = malloc(BIG);
    char key[64];
    for (int i = 0; i < ITERS; i++) {
        size_t len = i % 3 == 0 ? BIG : (size_t)(16 + i);
        uint64_t seed = (uint64_t)a->id * 1000003u + (uint64_t)i;
        snprintf(key, sizeof(key), "cc.%d.%d.%d", (int)a->t, a->id, i % 5);
        dst_fill(big, len, seed);
        ds_status_t st = ds_kv_set(a->c, key, big, len, NULL);
        if (st != DS_K_OK) loop_fail(a, "set", st);
        size_t n = 0;
        st = ds_kv_get_into(a->c, key, 0, got, BIG, &n);
        if (st != DS_K_OK || n != len || !dst_check(got, n, seed))
            loop_fail(a, "get_into", st == DS_K_OK ? DS_K_RUNTIME_ERROR : st);
        if (i % 4 == 1) {
            const char *keys[1] = {key};
            ds_buffer_t *b[1] = {NULL};
            st = ds_kv_get_buffers(a->c, 1, keys, 0, b);
            if (st != DS_K_OK || ds_buffer_size(b[0]) != len ||
                !dst_check(ds_buffer_data(b[0]), len, seed))
                loop_fail(a, "get_buffers", st == DS_K_OK ? DS_K_RUNTIME_ERROR : st);
            ds_buffer_release(b[0]);
        }
        if (i % 7 == 2) {
            bool ex = false;
            const char *keys[1] = {key};
            st = ds_kv_exist(a->c, 1, keys, &ex);
            if (st != DS_K_OK || !ex) loop_fail(a, "exist", st == DS_K_OK ? DS_K_NOT_FOUND : st);
        }
    }
    free(big);
    free(got);
    park(a);
    return NULL;
}

static void *wait_thread(void *arg)
{
    park(arg);
    return NULL;
}

/* Polls the worker until n subscribe-gets are waiting there; false after 20 s. */
static bool wait_for_waiters(int n)
{
    uint64_t end = ds__now_ms() + 20000;
    while (ds__now_ms() < end) {
        if (dst_stat(&W, "subscriptions_waiting") >= n) return true;
        usleep(20000);
    }
    return false;
}

static void close_during_calls(ds_transport_t t)
{
    ds_client_t *c = dst_connect(&W, t);
    assert_non_null(c);
    double base = dst_stat(&W, "subscriptions_waiting");
    assert_true(base >= 0);

    /* A zero-copy buffer taken before the close must outlive it. */
    uint8_t *v = malloc(BIG);
    dst_fill(v, BIG, 77);
    assert_int_equal(ds_kv_set(c, "cc.keep", v, BIG, NULL), DS_K_OK);
    const char *keep[1] = {"cc.keep"};
    ds_buffer_t *kb[1] = {NULL};
    assert_int_equal(ds_kv_get_buffers(c, 1, keep, 0, kb), DS_K_OK);

    th_t a[NLOOP + NWAIT];
    pthread_t th[NLOOP + NWAIT];
    memset(a, 0, sizeof(a));
    for (int i = 0; i < NLOOP + NWAIT; i++) {
        a[i] = (th_t){.c = c, .id = i, .t = t, .parked = DS_K_OK};
        assert_int_equal(pthread_create(&th[i], NULL, i < NLOOP ? loop_thread : wait_thread, &a[i]),
                         0);
    }
    /* Every thread is inside a call when the worker holds all their waits:
     * the close below races nothing but calls already in progress. */
    assert_true(wait_for_waiters((int)base + NLOOP + NWAIT));
    uint64_t t0 = ds__now_ms();
    ds_client_close(c);
    uint64_t close_ms = ds__now_ms() - t0;
    for (int i = 0; i < NLOOP + NWAIT; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    uint64_t joined_ms = ds__now_ms() - t0;

    for (int i = 0; i < NLOOP + NWAIT; i++) {
        if (a[i].loop_failures) fprintf(stderr, "thread %d: %s\n", i, a[i].first_error);
        assert_int_equal(a[i].loop_failures, 0);
        if (a[i].parked != DS_K_INVALID) fprintf(stderr, "thread %d: %s\n", i, a[i].parked_msg);
        assert_int_equal(a[i].parked, DS_K_INVALID);
        assert_non_null(strstr(a[i].parked_msg, "the client is closed"));
        /* cut short by the close, not by the 30 s subscribe timeout */
        assert_true(a[i].parked_done_ms - t0 < 5000);
    }
    /* close does not wait for the calls it interrupts */
    assert_true(close_ms < 2000);
    assert_true(joined_ms < 5000);

    assert_true(dst_check(ds_buffer_data(kb[0]), BIG, 77));
    ds_buffer_release(kb[0]);
    free(v);

    /* The worker dropped the waits with the connections and serves others. */
    uint64_t end = ds__now_ms() + 5000;
    while (dst_stat(&W, "subscriptions_waiting") > base && ds__now_ms() < end)
        usleep(20000);
    assert_true(dst_stat(&W, "subscriptions_waiting") <= base);
    ds_client_t *c2 = dst_connect(&W, t);
    assert_non_null(c2);
    assert_int_equal(ds_kv_set(c2, "cc.after", "x", 1, NULL), DS_K_OK);
    assert_int_equal(ds_client_health_check(c2), DS_K_OK);
    ds_client_close(c2);
}

static void test_close_during_calls_local(void **state)
{
    (void)state;
    close_during_calls(DS_TRANSPORT_AUTO);
}

static void test_close_during_calls_tcp(void **state)
{
    (void)state;
    close_during_calls(DS_TRANSPORT_TCP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_close_during_calls_local),
        cmocka_unit_test(test_close_during_calls_tcp),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
