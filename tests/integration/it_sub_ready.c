/* Subscribe-waits are completed by the loop after the event that published
 * their keys, never from inside the publishing request's handler (subs.h):
 *
 * - On a raw connection A pipelines SET k=v1, SET k=v2, GET k in one write
 *   while connection B waits on k: A's answers come in request order (OK,
 *   OK, "v2"), and B is answered once, with "v2" - the value k has after
 *   the event, not the "v1" of the publish that made it ready.
 * - A key set and deleted again in one event (SET k, DEL k pipelined) does
 *   not answer B with "not found" before its time: B waits on, as a Redis
 *   client blocked on a key does, and the next SET answers it.
 * - A wait on three keys is answered only when the last is set, with all
 *   three values; until then its keys stay subscribed.
 * - A waiter whose connection closed leaves the worker serving: the next
 *   publish of its key answers the others (the close while on the ready
 *   list itself is covered by test_subs, which can place it there).
 * - A request resumed right after a wait timed out sets its own deadline
 *   after the loop's timers looked at theirs: on a raw connection 20
 *   pipelined 1 ms subscribe-gets of never-set keys are each answered
 *   K_NOT_FOUND, in order, and a 1 ms get pipelined before an RLATCH of
 *   300 keys (served in slices, continued by the latch tick) gets both
 *   answers; 2,000 sequential 1 ms gets through the client library over
 *   TCP are all answered K_NOT_FOUND: the loop must not sleep on deadlines
 *   its timers took before such a request set its own. */
#include "harness.h"
#include "it_hostile_raw.h"

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

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 64, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

static int value_of(const hr_frame_t *f, char *v, size_t cap)
{
    v[0] = '\0';
    if (f == NULL) return -1;
    if (f->h.status == 0 && hr_get_value(f, v, cap, NULL) != DS_VAL_INLINE) return -2;
    return (int)f->h.status;
}

static void test_waiter_after_publisher(void **state)
{
    (void)state;
    hr_conn_t a, b;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    assert_int_equal(hr_open_hello(&b, &W, false), 0);
    uint64_t gb = hr_get(&b, "k", 5000, 0);
    assert_int_equal(hr_flush(&b), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 1, 5000));
    uint64_t ids[3];
    ids[0] = hr_set(&a, "k", "v1");
    ids[1] = hr_set(&a, "k", "v2");
    ids[2] = hr_get(&a, "k", 5000, 0);
    assert_int_equal(hr_flush(&a), 0);
    uint32_t got = hr_collect(&a, 3, ds__now_ms() + 5000);
    hr_frame_t *fb = hr_answer(&b, gb, ds__now_ms() + 5000);
    char v[64], vb[64];
    int stb = value_of(fb, vb, sizeof(vb));
    /* nothing more comes for B: its wait completed once */
    uint32_t extra = hr_collect(&b, 2, ds__now_ms() + 200);
    assert_int_equal(got, 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(a.got[i].h.req_id, ids[i]);
    assert_int_equal(a.got[0].h.status, DS_K_OK);
    assert_int_equal(a.got[1].h.status, DS_K_OK);
    assert_int_equal(value_of(&a.got[2], v, sizeof(v)), DS_K_OK);
    assert_string_equal(v, "v2");
    assert_int_equal(stb, DS_K_OK);
    assert_string_equal(vb, "v2");
    assert_int_equal(extra, 1);
    assert_int_equal((int)dst_stat(&W, "subscriptions_waiting"), 0);
    hr_close(&a);
    hr_close(&b);
}

static void test_deleted_again(void **state)
{
    (void)state;
    hr_conn_t a, b;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    assert_int_equal(hr_open_hello(&b, &W, true), 0);
    uint64_t gb = hr_get(&b, "k", 8000, 0);
    assert_int_equal(hr_flush(&b), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 1, 5000));
    uint64_t ids[2];
    ids[0] = hr_set(&a, "k", "v1");
    ids[1] = hr_del(&a, "k");
    assert_int_equal(hr_flush(&a), 0);
    assert_int_equal(hr_collect(&a, 2, ds__now_ms() + 5000), 2);
    assert_int_equal(a.got[0].h.req_id, ids[0]);
    assert_int_equal(a.got[0].h.status, DS_K_OK);
    assert_int_equal(a.got[1].h.req_id, ids[1]);
    assert_int_equal(a.got[1].h.status, DS_K_OK);
    /* the STATS request is a later event: B waits again on k */
    assert_int_equal((int)dst_stat(&W, "subscriptions_waiting"), 1);
    uint64_t s3 = hr_set(&a, "k", "v3");
    assert_int_equal(hr_flush(&a), 0);
    hr_frame_t *fs = hr_answer(&a, s3, ds__now_ms() + 5000);
    assert_non_null(fs);
    assert_int_equal(fs->h.status, DS_K_OK);
    char vb[64];
    assert_int_equal(value_of(hr_answer(&b, gb, ds__now_ms() + 5000), vb, sizeof(vb)), DS_K_OK);
    assert_string_equal(vb, "v3");
    assert_int_equal(b.ngot, 1);
    hr_close(&a);
    hr_close(&b);
}

typedef struct {
    ds_client_t *c;
    ds_status_t st;
    ds_value_t out[3];
} mget_t;

static void *mget_three(void *arg)
{
    mget_t *g = arg;
    const char *keys[] = {"m1", "m2", "m3"};
    g->st = ds_kv_mget(g->c, 3, keys, 8000, g->out);
    return NULL;
}

static void test_multi_key_waiter(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    ds_client_t *s = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    assert_non_null(s);
    mget_t g = {c, DS_K_OK, {{0}}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, mget_three, &g), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 3, 5000));
    assert_int_equal(dst_set_filled(s, "m1", 100, 1), DS_K_OK);
    assert_int_equal(dst_set_filled(s, "m2", 200, 2), DS_K_OK);
    /* two of three arrived: the wait still holds its three keys */
    assert_int_equal((int)dst_stat(&W, "subscriptions_waiting"), 3);
    assert_int_equal(dst_set_filled(s, "m3", 300, 3), DS_K_OK);
    pthread_join(th, NULL);
    assert_int_equal(g.st, DS_K_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(g.out[i].status, DS_K_OK);
        assert_int_equal(g.out[i].len, 100 * (size_t)(i + 1));
        assert_true(dst_check(g.out[i].data, g.out[i].len, (uint64_t)i + 1));
        ds_free(g.out[i].data);
    }
    assert_int_equal((int)dst_stat(&W, "subscriptions_waiting"), 0);
    ds_client_close(c);
    ds_client_close(s);
}

/* Waiters on one key, one of which hangs up: the publish answers the rest. */
static void test_closed_waiter(void **state)
{
    (void)state;
    enum { N = 4 };
    hr_conn_t w[N], s;
    uint64_t id[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(hr_open_hello(&w[i], &W, i % 2 == 0), 0);
        id[i] = hr_get(&w[i], "gone", 5000, 0);
        assert_int_equal(hr_flush(&w[i]), 0);
    }
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", N, 5000));
    hr_close(&w[1]);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", N - 1, 5000));
    assert_int_equal(hr_open_hello(&s, &W, false), 0);
    uint64_t sid = hr_set(&s, "gone", "here");
    assert_int_equal(hr_flush(&s), 0);
    hr_frame_t *fs = hr_answer(&s, sid, ds__now_ms() + 5000);
    assert_non_null(fs);
    assert_int_equal(fs->h.status, DS_K_OK);
    for (int i = 0; i < N; i++) {
        if (i == 1) continue;
        char v[64];
        assert_int_equal(value_of(hr_answer(&w[i], id[i], ds__now_ms() + 5000), v, sizeof(v)),
                         DS_K_OK);
        assert_string_equal(v, "here");
        hr_close(&w[i]);
    }
    hr_close(&s);
}

/* 20 subscribe-gets of 1 ms in one write: each is read and parked when the
 * one before it timed out, from the hook that ran after the timers. */
static void test_pipelined_short_waits(void **state)
{
    (void)state;
    hr_conn_t a;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    uint64_t ids[20];
    for (int i = 0; i < 20; i++) {
        char k[32];
        snprintf(k, sizeof(k), "never-%d", i);
        ids[i] = hr_get(&a, k, 1, 0);
    }
    assert_int_equal(hr_flush(&a), 0);
    uint32_t got = hr_collect(&a, 20, ds__now_ms() + 5000);
    assert_int_equal(got, 20);
    for (uint32_t i = 0; i < 20; i++) {
        assert_int_equal(a.got[i].h.req_id, ids[i]);
        assert_int_equal(a.got[i].h.status, DS_K_NOT_FOUND);
    }
    assert_int_equal((int)dst_stat(&W, "subscriptions_waiting"), 0);
    hr_close(&a);
}

/* A latch request of more than one slice read after a wait timed out: its
 * later slices come from the latch tick, which must run. */
static void test_latch_slices_after_wait(void **state)
{
    (void)state;
    hr_conn_t a;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    uint64_t g = hr_get(&a, "never", 1, 0);
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u32(&m, 60000);
    ds__wbuf_u32(&m, 300);
    for (int i = 0; i < 300; i++) {
        char k[32];
        snprintf(k, sizeof(k), "latch-%d", i);
        ds__wbuf_cstr(&m, k);
    }
    uint64_t l = hr_add(&a, DS_OP_RLATCH, &m, NULL, 0);
    ds__wbuf_free(&m);
    assert_int_equal(hr_flush(&a), 0);
    uint32_t got = hr_collect(&a, 2, ds__now_ms() + 5000);
    assert_int_equal(got, 2);
    assert_int_equal(a.got[0].h.req_id, g);
    assert_int_equal(a.got[0].h.status, DS_K_NOT_FOUND);
    assert_int_equal(a.got[1].h.req_id, l);
    hr_close(&a);
}

/* Sequential 1 ms gets through the library: the next one often arrives as
 * the previous answer goes out. */
static void test_sequential_short_gets(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(c);
    int bad = -1;
    ds_status_t bad_st = DS_K_NOT_FOUND;
    for (int i = 0; i < 2000 && bad < 0; i++) {
        ds_value_t v;
        const char *k = "never-set";
        ds_status_t st = ds_kv_mget(c, 1, &k, 1, &v);
        if (st != DS_K_NOT_FOUND) {
            bad = i;
            bad_st = st;
        }
    }
    if (bad >= 0) fprintf(stderr, "get %d: status %d: %s\n", bad, (int)bad_st, ds_last_error());
    assert_int_equal(bad, -1);
    ds_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_waiter_after_publisher, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deleted_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_multi_key_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_short_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_latch_slices_after_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequential_short_gets, setup, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
