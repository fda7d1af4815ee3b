/* A new owner answers K_TRY_AGAIN while it rebuilds the cluster's holds,
 * against real etcd and workers on 127.0.0.11-14 (leases of 20 s, so that a
 * worker may be paused without leaving the ring):
 *  - a client of worker 0 holds references on keys owned by workers 1 and
 *    2; worker 0 is paused (SIGSTOP) and worker 3 joins, taking some of
 *    those keys. Worker 3 learns their references only from worker 0, so
 *    until worker 0 has sent them (REBUILD_DONE) a count asked through
 *    worker 1 answers K_TRY_AGAIN naming the rebuild, never 0, and a
 *    reference or a latch taken meanwhile is refused the same way;
 *  - the client of worker 0 also holds read latches on those keys: a set of
 *    a moved key through worker 1 or 2, whichever was not its owner (told
 *    of the latch by the owner), waits at worker 3 for the rebuild, and
 *    then for the rebuilt latch;
 *  - worker 0 resumes while a client of worker 1 asks again: the client
 *    library retries within its request timeout and sees the right count,
 *    every moved key shows its reference, and the set goes through once
 *    the latch is released;
 *  - a client of worker 1 holds read latches (60 s) on keys other workers
 *    own; worker 1 is paused and worker 4 joins, taking some of them. A set
 *    of a moved key through its old owner waits behind the old owner's
 *    copy of the latch; once worker 1 resumes and the latch is rebuilt at
 *    worker 4, the old owner lets its copy go and the set waits at worker
 *    4 instead, while the latch is held; it goes through as soon as the
 *    latch is released, long before the latch's deadline. */
#include "cluster_util.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define LEASE "--node_timeout_s 20"
#define NKEYS 64

static ct_cluster_t C;

static int setup(void **state)
{
    (void)state;
    const char *extra[3] = {LEASE, LEASE, LEASE};
    return ct_cluster_start_with(&C, 3, NULL, extra);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < C.n; i++)
        if (C.w[i].pid > 0) kill(C.w[i].pid, SIGCONT);
    ct_cluster_stop(&C);
    return 0;
}

/* Worker stop stalls (SIGSTOP) and worker join starts on addr; every
 * other worker sees the join. */
static void stall_and_join(int stop, int join, const char *addr)
{
    assert_int_equal(kill(C.w[stop].pid, SIGSTOP), 0);
    char flags[512];
    snprintf(flags, sizeof(flags),
             "--etcd_address %s --cluster_name %s --heartbeat_interval_ms %d " LEASE,
             C.etcd.address, C.name, CT_HEARTBEAT_MS);
    assert_int_equal(dst_worker_start_on(&C.w[join], addr, 64, flags), 0);
    C.n = join + 1;
    for (int i = 0; i < C.n; i++)
        if (i != stop) assert_true(dst_wait_members(&C.w[i], C.n, 15000) >= 0);
}

/* A TCP client of worker i whose requests give up after timeout_ms. */
static ds_client_t *client_within(int i, int timeout_ms)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = C.w[i].host;
    o.port = C.w[i].port;
    o.transport = DS_TRANSPORT_TCP;
    o.token = getenv("DS_TEST_TOKEN");
    o.request_timeout_ms = timeout_ms;
    ds_client_t *c = NULL;
    return ds_client_connect(&o, &c) == DS_K_OK ? c : NULL;
}

typedef struct {
    const char *key;
    ds_status_t st;
    uint32_t count;
} query_t;

typedef struct {
    const char *key;
    int node;
    atomic_bool done;
    ds_status_t st;
} writer_t;

static void *write_main(void *arg)
{
    writer_t *w = arg;
    ds_client_t *c = client_within(w->node, 30000);
    w->st = c ? ct_set(c, w->key, 100, 799) : DS_K_RUNTIME_ERROR;
    atomic_store(&w->done, true);
    ds_client_close(c);
    return NULL;
}

/* Waits (bounded) for the writer to finish; true when it did. */
static bool writer_finished(writer_t *w, int ms)
{
    for (int i = 0; i < ms / 20 && !atomic_load(&w->done); i++)
        usleep(20000);
    return atomic_load(&w->done);
}

static void *query_main(void *arg)
{
    query_t *q = arg;
    ds_client_t *c = client_within(1, 20000);
    q->st = c ? ds_object_query_global_ref_num(c, q->key, &q->count) : DS_K_RUNTIME_ERROR;
    ds_client_close(c);
    return NULL;
}

static void test_new_owner_answers_try_again_until_rebuilt(void **state)
{
    (void)state;
    ds_client_t *holder = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(holder);
    /* Keys owned by workers 1 and 2, referenced through worker 0. */
    static char keys[NKEYS][32];
    const char *held[NKEYS];
    int was[NKEYS], nheld = 0;
    for (int i = 0; i < NKEYS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "rbh-%d", i);
        int o = ct_set_find_owner(&C, holder, keys[i], 100, 700 + (uint64_t)i);
        if (o == 1 || o == 2) {
            was[nheld] = o;
            held[nheld++] = keys[i];
        }
    }
    assert_true(nheld >= 8);
    assert_int_equal(ds_object_g_increase_ref(holder, (size_t)nheld, held, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(holder, (size_t)nheld, held, 60000, NULL), DS_K_OK);

    /* Worker 0 stalls; worker 3 joins (the survivors see it). */
    stall_and_join(0, 3, "127.0.0.14");

    /* A key worker 3 took: its count is being rebuilt (never 0). A key
     * whose owner did not change answers at once. */
    ds_client_t *quick = client_within(1, 1000);
    assert_non_null(quick);
    const char *moved = NULL;
    int moved_from = -1;
    for (int i = 0; i < nheld && moved == NULL; i++) {
        uint32_t count = UINT32_MAX;
        ds_status_t st = ds_object_query_global_ref_num(quick, held[i], &count);
        if (st == DS_K_OK) {
            assert_int_equal(count, 1);
            continue;
        }
        assert_int_equal(st, DS_K_TRY_AGAIN);
        assert_non_null(strstr(ds_last_error(), "rebuilding"));
        moved = held[i];
        moved_from = was[i];
    }
    assert_non_null(moved);
    /* Taking a reference meanwhile is refused as well (nothing counted). */
    const char *mk[1] = {moved};
    ds_status_t st1 = DS_K_OK;
    assert_int_equal(ds_object_g_increase_ref(quick, 1, mk, &st1), DS_K_TRY_AGAIN);
    assert_int_equal(st1, DS_K_TRY_AGAIN);
    assert_non_null(strstr(ds_last_error(), "rebuilding"));
    /* So is a latch (retried until its timeout). */
    assert_int_equal(ds_kv_rlatch(quick, 1, mk, 500, NULL), DS_K_TRY_AGAIN);
    assert_non_null(strstr(ds_last_error(), "rebuilding"));

    /* A set through the worker of 1 and 2 that was not the key's owner
     * waits for the rebuild. */
    writer_t w = {.key = moved, .node = 3 - moved_from};
    pthread_t wt;
    assert_int_equal(pthread_create(&wt, NULL, write_main, &w), 0);
    assert_false(writer_finished(&w, 500));

    /* Worker 0 resumes while a client asks: the retried answer is right. */
    query_t q = {.key = moved, .count = UINT32_MAX};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, query_main, &q), 0);
    usleep(300000);
    assert_int_equal(kill(C.w[0].pid, SIGCONT), 0);
    pthread_join(th, NULL);
    assert_int_equal(q.st, DS_K_OK);
    assert_int_equal(q.count, 1);
    ds_client_close(quick);
    /* The set now waits for the rebuilt latch, and goes once it is released. */
    assert_false(writer_finished(&w, 1000));
    assert_int_equal(ds_kv_unrlatch(holder, (size_t)nheld, held, NULL), DS_K_OK);
    assert_true(writer_finished(&w, 15000));
    pthread_join(wt, NULL);
    assert_int_equal(w.st, DS_K_OK);

    /* Every key shows worker 0's reference, through the joined worker too. */
    ds_client_t *c3 = client_within(3, 20000);
    assert_non_null(c3);
    for (int i = 0; i < nheld; i++) {
        uint32_t count = UINT32_MAX;
        assert_int_equal(ds_object_query_global_ref_num(c3, held[i], &count), DS_K_OK);
        assert_int_equal(count, 1);
    }
    ds_client_close(c3);
    assert_int_equal(ds_object_g_decrease_ref(holder, (size_t)nheld, held, NULL), DS_K_OK);
    ds_client_close(holder);
}

/* Whether key moved to a worker rebuilding its holds: its reference count
 * asked through client c answers K_TRY_AGAIN naming the rebuild. */
static bool being_rebuilt(ds_client_t *c, const char *key)
{
    uint32_t count = UINT32_MAX;
    ds_status_t st = ds_object_query_global_ref_num(c, key, &count);
    if (st == DS_K_OK) {
        assert_int_equal(count, 0);
        return false;
    }
    assert_int_equal(st, DS_K_TRY_AGAIN);
    assert_non_null(strstr(ds_last_error(), "rebuilding"));
    return true;
}

static void test_old_owner_lets_moved_latches_go(void **state)
{
    (void)state;
    ds_client_t *holder = client_within(1, 20000);
    assert_non_null(holder);
    /* Keys owned by workers other than 1, latched through worker 1. */
    static char keys[NKEYS][32];
    const char *held[NKEYS];
    int was[NKEYS], nheld = 0;
    for (int i = 0; i < NKEYS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "mvl-%d", i);
        int o = ct_set_find_owner(&C, holder, keys[i], 100, 900 + (uint64_t)i);
        if (o >= 0 && o != 1) {
            was[nheld] = o;
            held[nheld++] = keys[i];
        }
    }
    assert_true(nheld >= 16);
    assert_int_equal(ds_kv_rlatch(holder, (size_t)nheld, held, 60000, NULL), DS_K_OK);

    /* Worker 1 stalls and worker 4 joins, taking some of the keys: their
     * latches reach it only once worker 1 resumes. */
    stall_and_join(1, 4, "127.0.0.15");
    ds_client_t *quick = client_within(4, 1000);
    assert_non_null(quick);
    int moved = -1;
    for (int i = 0; i < nheld && moved < 0; i++)
        if (being_rebuilt(quick, held[i])) moved = i;
    assert_true(moved >= 0);
    int a = was[moved];

    /* A set through the old owner waits behind its copy of the latch... */
    ct_writer_t w = {.c = &C, .node = a, .key = held[moved], .len = 300, .seed = 990};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ct_writer_main, &w), 0);
    assert_false(ct_writer_finished(&w, 1000));
    /* ...and, once worker 1 resumed and sent the latch to worker 4 (which
     * then answers for the key), at worker 4 while the latch is held. */
    assert_int_equal(kill(C.w[1].pid, SIGCONT), 0);
    bool rebuilt = false;
    for (int i = 0; i < 100 && !rebuilt; i++)
        if (!(rebuilt = !being_rebuilt(quick, held[moved]))) usleep(100000);
    assert_true(rebuilt);
    ds_client_close(quick);
    assert_false(ct_writer_finished(&w, 1500));
    /* It goes once the latch is released, not at the latch's deadline. */
    const char *mk[1] = {held[moved]};
    assert_int_equal(ds_kv_unrlatch(holder, 1, mk, NULL), DS_K_OK);
    assert_true(ct_writer_finished(&w, 10000));
    pthread_join(th, NULL);
    assert_int_equal(w.st, DS_K_OK);
    assert_true(ct_read_ok(holder, held[moved], 300, 990, 0));

    /* Every key, once released, is written through its old owner at once. */
    const char *rest[NKEYS];
    int nrest = 0;
    for (int i = 0; i < nheld; i++)
        if (i != moved) rest[nrest++] = held[i];
    assert_int_equal(ds_kv_unrlatch(holder, (size_t)nrest, rest, NULL), DS_K_OK);
    for (int i = 0; i < nheld; i++) {
        ds_client_t *c = client_within(was[i], 10000);
        assert_non_null(c);
        assert_int_equal(ct_set(c, held[i], 200, 991 + (uint64_t)i), DS_K_OK);
        ds_client_close(c);
    }
    ds_client_close(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_owner_answers_try_again_until_rebuilt),
        cmocka_unit_test(test_old_owner_lets_moved_latches_go),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
