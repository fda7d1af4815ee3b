/* Memory rebalance toward a worker that joins (--enable_memory_rebalance):
 * worker 0, alone and 60% full (40 keys of 1 MiB in a 64 MiB arena), with a
 * source threshold of 20% and a gap of 10 points; worker 1 joins empty.
 * Worker 0 moves objects whose metadata worker 1 owns to it until both are
 * about equally full, and every key still reads back byte-exact through
 * both workers, and through all three after a third one joins. */
#include "cluster_util.h"

#include "common/clock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;

enum { NKEYS = 40 };
#define REBALANCE_FLAGS                                                                            \
    "--enable_memory_rebalance true --rebalance_source_usage_percent 20 "                          \
    "--rebalance_usage_gap_percent 10 --data_migrate_rate_limit_mb 200"

static int setup(void **state)
{
    (void)state;
    const int arenas[] = {64};
    const char *extra[] = {REBALANCE_FLAGS};
    return ct_cluster_start_with(&C, 1, arenas, extra);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

static int count_ok(int w)
{
    ds_client_t *c = ct_client(&C, w, DS_TRANSPORT_TCP);
    if (c == NULL) return -1;
    int ok = 0;
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "rb-%d", i);
        ok += ct_read_ok(c, key, (1u << 20) + (size_t)i, 5100 + (uint64_t)i, 0);
    }
    ds_client_close(c);
    return ok;
}

static void test_rebalance_to_newcomer(void **state)
{
    (void)state;
    ds_client_t *c = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(c);
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "rb-%d", i);
        assert_int_equal(ct_set(c, key, (1u << 20) + (size_t)i, 5100 + (uint64_t)i), DS_K_OK);
    }
    ds_client_close(c);
    double before = dst_stat(&C.w[0], "objects.count");
    assert_true(before >= NKEYS);
    assert_int_equal(ct_worker_add(&C, REBALANCE_FLAGS), 0);
    /* The move is under way once worker 1 holds objects; it ends when
     * worker 0's count stops falling. */
    double moved = 0;
    for (int t = 0; t < 200 && moved == 0; t++) {
        moved = dst_stat(&C.w[1], "objects.count");
        usleep(50000);
    }
    double last = -1, now = dst_stat(&C.w[0], "objects.count");
    for (int t = 0; t < 100 && now != last; t++) {
        usleep(300000);
        last = now;
        now = dst_stat(&C.w[0], "objects.count");
    }
    fprintf(stderr, "worker 0 holds %.0f objects (was %.0f), worker 1 %.0f\n", now, before,
            dst_stat(&C.w[1], "objects.count"));
    assert_true(moved > 0);
    assert_true(now < before);
    assert_int_equal(count_ok(0), NKEYS);
    assert_int_equal(count_ok(1), NKEYS);
    /* A third worker: worker 0 (about 40% full) moves to it again; every
     * key still reads back through all three while and after it does. */
    assert_int_equal(ct_worker_add(&C, REBALANCE_FLAGS), 0);
    for (int w = 0; w < 3; w++)
        assert_int_equal(count_ok(w), NKEYS);
    usleep(1500000);
    for (int w = 0; w < 3; w++)
        assert_int_equal(count_ok(w), NKEYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rebalance_to_newcomer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
