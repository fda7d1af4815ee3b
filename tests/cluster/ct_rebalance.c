/* Scale-out with --enable_memory_rebalance (real etcd, workers on
 * 127.0.0.11-14): three workers hold 240 checksummed keys of 1 KiB to
 * 2 MiB set round-robin through them; a fourth joins while a reader on each
 * of the three reads every key over and over.
 *  - rebalance on (low percentages, so that the test's data counts as
 *    high use): the three move objects to the newcomer (it holds some
 *    before anything was read through it), the readers see no miss at any
 *    moment, and afterwards every key reads back byte-exact through all
 *    four workers;
 *  - rebalance off: nothing moves (the newcomer holds nothing), and every
 *    key still reads back through all four. */
#include "cluster_util.h"

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

static ct_cluster_t C;

enum { NKEYS = CT_NKEYS, ARENA_MB = 192 };
#define PREFIX "reb"
#define SEED0 510000

#define REBALANCE_ON                                                                               \
    "--enable_memory_rebalance true --rebalance_source_usage_percent 10 "                          \
    "--rebalance_usage_gap_percent 5 --data_migrate_rate_limit_mb 16"

static int start(const char *extra)
{
    const int arenas[] = {ARENA_MB, ARENA_MB, ARENA_MB};
    const char *ex[] = {extra, extra, extra};
    if (ct_cluster_start_with(&C, 3, arenas, ex) != 0) return -1;
    C.arena_mb[3] = ARENA_MB;
    return 0;
}

static int setup_on(void **state)
{
    (void)state;
    return start(REBALANCE_ON);
}

static int setup_off(void **state)
{
    (void)state;
    return start(NULL);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

/* Reads every key through worker w; how many read back right (the first
 * few that did not are printed). */
static int count_ok(int w)
{
    return ct_count_on(&C, w, PREFIX, SEED0);
}

/* Waits until no worker (of n) has a rebalance round pending or under way. */
static bool wait_quiet(int n)
{
    bool quiet = false;
    for (int t = 0; t < 300 && !quiet; t++) {
        quiet = true;
        for (int w = 0; w < n; w++)
            quiet &= dst_stat(&C.w[w], "cluster.rebalance.active") == 0;
        if (!quiet) usleep(100000);
    }
    return quiet;
}

/* Sets the keys, checks them through the three, and adds the fourth
 * worker (with extra) while readers on the three read every key; returns
 * once no worker has a rebalance round pending or under way. */
static void join_with_readers(const char *extra)
{
    /* The three joined one another at the start: their rounds (with
     * nothing stored) end before the keys are set. */
    assert_true(wait_quiet(3));
    ds_client_t *cl[3];
    for (int w = 0; w < 3; w++)
        assert_non_null(cl[w] = ct_client(&C, w, w % 2 ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL));
    assert_int_equal(ct_set_keys(cl, 3, PREFIX, SEED0), NKEYS);
    for (int w = 0; w < 3; w++)
        ds_client_close(cl[w]);
    for (int w = 0; w < 3; w++)
        assert_int_equal(count_ok(w), NKEYS);

    ct_reader_t rd[3];
    for (int w = 0; w < 3; w++)
        rd[w] = (ct_reader_t){.c = &C, .worker = w, .prefix = PREFIX, .seed0 = SEED0};
    pthread_t th[3];
    for (int w = 0; w < 3; w++)
        assert_int_equal(pthread_create(&th[w], NULL, ct_reader_main, &rd[w]), 0);
    usleep(200000);
    assert_int_equal(ct_worker_add(&C, extra), 0);
    /* The rounds start a second after the join and end within seconds. */
    usleep(1500000);
    bool quiet = wait_quiet(4);
    usleep(300000);
    for (int w = 0; w < 3; w++)
        atomic_store(&rd[w].stop, true);
    for (int w = 0; w < 3; w++) {
        pthread_join(th[w], NULL);
        fprintf(stderr, "reader on worker %d: %ld reads during the join, %ld misses%s%s\n", w,
                rd[w].reads, rd[w].misses, rd[w].misses ? ", first " : "", rd[w].first_miss);
    }
    assert_true(quiet);
    for (int w = 0; w < 3; w++) {
        assert_int_equal(rd[w].misses, 0);
        assert_true(rd[w].reads > 0);
    }
}

static void test_rebalance_on(void **state)
{
    (void)state;
    join_with_readers(REBALANCE_ON);
    double moved = 0, bytes = 0;
    for (int w = 0; w < 3; w++) {
        fprintf(stderr, "worker %d: %.0f moved in %.0f rounds, %.0f kept\n", w,
                dst_stat(&C.w[w], "cluster.rebalance.moved"),
                dst_stat(&C.w[w], "cluster.rebalance.rounds"),
                dst_stat(&C.w[w], "cluster.rebalance.kept"));
        moved += dst_stat(&C.w[w], "cluster.rebalance.moved");
        bytes += dst_stat(&C.w[w], "cluster.rebalance.moved_bytes");
    }
    double held = dst_stat(&C.w[3], "objects.count");
    fprintf(stderr, "rebalance: %.0f objects (%.0f bytes) moved; the new worker holds %.0f\n",
            moved, bytes, held);
    assert_true(moved > 0);
    assert_true(held > 0);
    assert_true(dst_stat(&C.w[3], "cluster.rebalance.moved") == 0); /* it was the target */
    for (int w = 0; w < 4; w++)
        assert_int_equal(count_ok(w), NKEYS);
}

static void test_rebalance_off(void **state)
{
    (void)state;
    join_with_readers(NULL);
    for (int w = 0; w < 4; w++) {
        assert_true(dst_stat(&C.w[w], "cluster.rebalance.moved") == 0);
        assert_true(dst_stat(&C.w[w], "cluster.rebalance.rounds") == 0);
    }
    assert_true(dst_stat(&C.w[3], "objects.count") == 0);
    for (int w = 0; w < 4; w++)
        assert_int_equal(count_ok(w), NKEYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rebalance_on, setup_on, teardown),
        cmocka_unit_test_setup_teardown(test_rebalance_off, setup_off, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
