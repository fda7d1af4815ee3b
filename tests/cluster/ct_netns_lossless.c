/* The lossless cluster across network namespaces: each worker in its own
 * namespace (h1..h4, netns_util.h), etcd in the hub, and the test's clients
 * opened inside the namespace of the worker they talk to (the test thread
 * enters it to connect). Each scenario runs on a fresh cluster (its own
 * cluster name, the same etcd), 240 checksummed keys of 1 KiB to 2 MiB set
 * round-robin (cluster_util.h):
 *  - planned exit and scale-out: `dscli stop` of h1's worker (run inside h1)
 *    while a reader on h3 reads every key over and over (no miss), then a
 *    worker on h4 joins, then h2's worker is stopped: after every step every
 *    key reads back byte-exact through every survivor;
 *  - --replica_num 2: kill -9 of h3's worker loses none of the 240;
 *  - --replica_num 1: the same kill loses exactly the keys written through
 *    h3 (their only copy), as docs/operations.md's table says;
 *  - --enable_memory_rebalance: a worker joins on h4 while a reader on h1
 *    reads every key (no miss); objects move to it, and every key reads back
 *    through all four.
 * Skipped, with a message, when the kernel refuses namespaces. */
#include "cluster_util.h"
#include "netns_util.h"

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

static ct_netns_t N;
static ct_cluster_t C; /* etcd in the hub; worker i in N.hosts[i] */
static int cluster_seq;

#define REBALANCE_ON                                                                               \
    "--enable_memory_rebalance true --rebalance_source_usage_percent 10 "                          \
    "--rebalance_usage_gap_percent 5 --data_migrate_rate_limit_mb 16"

static int setup(void **state)
{
    (void)state;
    return ct_netns_setup(&N, 4, &C.etcd);
}

static int teardown(void **state)
{
    (void)state;
    ct_netns_teardown(&N, &C.etcd, NULL, 0);
    return 0;
}

/* Stops every worker of the scenario at once (no planned exit). */
static int stop_workers(void **state)
{
    (void)state;
    for (int i = 0; i < CT_MAX_WORKERS; i++) {
        if (C.w[i].pid > 0) dst_worker_stop_sig(&C.w[i], SIGINT);
        memset(&C.w[i], 0, sizeof(C.w[i]));
    }
    C.n = 0;
    return 0;
}

#define SKIP_IF_UNAVAILABLE() CT_NETNS_SKIP_IF_UNAVAILABLE(&N)

/* Starts worker i in its namespace, in the current scenario's cluster. */
static int start_worker(int i, int arena_mb, const char *extra)
{
    char flags[768];
    snprintf(flags, sizeof(flags),
             "--etcd_address %s --cluster_name nsl%d-%d --node_timeout_s %d "
             "--heartbeat_interval_ms %d%s%s",
             C.etcd.address, (int)getpid(), cluster_seq, CT_NODE_TIMEOUT_S, CT_HEARTBEAT_MS,
             extra ? " " : "", extra ? extra : "");
    int rc = dst_netns_enter(N.hosts[i]) != 0 ||
             dst_worker_start_on(&C.w[i], N.ip[i], arena_mb, flags) != 0;
    dst_netns_enter(NULL);
    if (rc != 0) fprintf(stderr, "worker %d in %s did not start\n", i, N.hosts[i]);
    if (rc == 0 && i >= C.n) C.n = i + 1;
    return rc ? -1 : 0;
}

/* Waits until every running worker sees n members (asked inside its
 * namespace); false on timeout. */
static bool wait_members(int n, int timeout_ms)
{
    bool ok = true;
    for (int i = 0; i < C.n && ok; i++) {
        if (C.w[i].pid <= 0) continue;
        ok = dst_netns_enter(N.hosts[i]) == 0 && dst_wait_members(&C.w[i], n, timeout_ms) >= 0;
        dst_netns_enter(NULL);
        if (!ok) fprintf(stderr, "worker %d does not see %d members\n", i, n);
    }
    return ok;
}

static int start_cluster(int n, int arena_mb, const char *extra)
{
    cluster_seq++;
    for (int i = 0; i < n; i++)
        if (start_worker(i, arena_mb, extra) != 0) return -1;
    return wait_members(n, 15000) ? 0 : -1;
}

static double stat_of(int i, const char *path)
{
    double v = -1;
    if (dst_netns_enter(N.hosts[i]) == 0) v = dst_stat(&C.w[i], path);
    dst_netns_enter(NULL);
    return v;
}

/* A client of worker i whose connection starts in i's namespace. */
static ds_client_t *client_of(int i, ds_transport_t t)
{
    ds_client_t *c = NULL;
    if (dst_netns_enter(N.hosts[i]) == 0) c = dst_connect(&C.w[i], t);
    dst_netns_enter(NULL);
    return c;
}

static void set_keys(int nworkers, const char *prefix, uint64_t seed0)
{
    ds_client_t *cl[CT_MAX_WORKERS] = {0};
    for (int w = 0; w < nworkers; w++)
        assert_non_null(cl[w] = client_of(w, w % 2 ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL));
    assert_int_equal(ct_set_keys(cl, nworkers, prefix, seed0), CT_NKEYS);
    for (int w = 0; w < nworkers; w++)
        ds_client_close(cl[w]);
}

/* Every key read through worker w: how many read back byte-exact. */
static int count_through(int w, const char *prefix, uint64_t seed0, bool *ok)
{
    char who[96];
    snprintf(who, sizeof(who), "through %s", N.hosts[w]);
    ds_client_t *c = client_of(w, w % 2 ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
    int n = ct_count_keys(c, prefix, seed0, ok, who);
    if (c) ds_client_close(c);
    return n;
}

/* Reads through w until the count stops changing (after a kill the new
 * owners learn the holders' copies within a few hundred ms of the ring
 * change); the last count. */
static int settled_count(int w, const char *prefix, uint64_t seed0, bool *ok)
{
    int last = -1, same = 0;
    for (int round = 0; round < 20 && same < 3; round++) {
        int n = count_through(w, prefix, seed0, ok);
        same = n == last ? same + 1 : 0;
        last = n;
        if (n == CT_NKEYS) break;
        usleep(300 * 1000);
    }
    return last;
}

static void expect_all_through_survivors(const char *prefix, uint64_t seed0, const char *step)
{
    for (int w = 0; w < C.n; w++) {
        if (C.w[w].pid <= 0) continue;
        int n = count_through(w, prefix, seed0, NULL);
        fprintf(stderr, "  %s: %d of %d keys read back through %s\n", step, n, CT_NKEYS,
                N.hosts[w]);
        assert_int_equal(n, CT_NKEYS);
    }
}

/* A reader going over every key until told to stop; its client is opened
 * (inside the worker's namespace) before the thread starts. */
typedef struct {
    ds_client_t *c;
    const char *prefix;
    uint64_t seed0;
    atomic_bool stop;
    long reads, misses;
    char first_miss[64];
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    for (int i = 0; !atomic_load(&r->stop) && r->reads < 2000000; i = (i + 1) % CT_NKEYS) {
        char key[64];
        ct_key_name(key, sizeof(key), r->prefix, i);
        r->reads++;
        if (!ct_read_ok(r->c, key, ct_key_len(i), r->seed0 + (uint64_t)i, 0) && r->misses++ == 0)
            snprintf(r->first_miss, sizeof(r->first_miss), "%s", key);
    }
    return NULL;
}

static void reader_start(reader_t *r, pthread_t *th, int w)
{
    assert_non_null(r->c = client_of(w, DS_TRANSPORT_TCP));
    assert_int_equal(pthread_create(th, NULL, reader_main, r), 0);
    usleep(200000);
}

static void reader_end(reader_t *r, pthread_t th, const char *during)
{
    atomic_store(&r->stop, true);
    pthread_join(th, NULL);
    ds_client_close(r->c);
    fprintf(stderr, "  reader: %ld reads during %s, %ld misses%s%s\n", r->reads, during, r->misses,
            r->misses ? ", first " : "", r->first_miss);
    assert_int_equal(r->misses, 0);
    assert_true(r->reads > 0);
}

static void planned_exit(int w)
{
    char out[4096];
    assert_int_equal(ct_dscli_stop(&C.w[w], N.hosts[w], out, sizeof(out)), 0);
    assert_non_null(strstr(out, "left the cluster: moved"));
    assert_non_null(strstr(out, "; 0 not moved"));
}

static void test_scale_in_out(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    const char *P = "nsm";
    const uint64_t S = 610000;
    assert_int_equal(start_cluster(3, 320, NULL), 0);
    set_keys(3, P, S);
    expect_all_through_survivors(P, S, "set");

    reader_t rd = {.prefix = P, .seed0 = S};
    pthread_t th;
    reader_start(&rd, &th, 2);
    planned_exit(0);
    usleep(300000);
    reader_end(&rd, th, "h1's planned exit");
    assert_true(wait_members(2, 15000));
    expect_all_through_survivors(P, S, "h1 stopped");

    assert_int_equal(start_worker(3, 320, NULL), 0);
    assert_true(wait_members(3, 15000));
    /* Its share of the metadata: the others register it as soon as they see
     * the new member (waited for, up to 10 s, not assumed done already). */
    bool owns = false;
    for (int t = 0; t < 200 && !(owns = stat_of(3, "cluster.owned_keys") > 0); t++)
        usleep(50000);
    assert_true(owns);
    expect_all_through_survivors(P, S, "h4 joined");

    planned_exit(1);
    assert_true(wait_members(2, 15000));
    expect_all_through_survivors(P, S, "h2 stopped");
}

static void test_replica2_sigkill(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    const char *P = "nsr2";
    const uint64_t S = 620000;
    assert_int_equal(start_cluster(3, 320, "--replica_num 2"), 0);
    set_keys(3, P, S);
    dst_worker_kill(&C.w[2]);
    assert_true(wait_members(2, 15000));
    bool ok[CT_NKEYS];
    for (int w = 0; w < 2; w++) {
        int n = settled_count(w, P, S, ok);
        fprintf(stderr, "  replica_num 2, h3 killed: %d of %d keys lost through %s\n", CT_NKEYS - n,
                CT_NKEYS, N.hosts[w]);
        assert_int_equal(n, CT_NKEYS);
    }
}

static void test_replica1_sigkill(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    const char *P = "nsr1";
    const uint64_t S = 630000;
    assert_int_equal(start_cluster(3, 320, NULL), 0);
    set_keys(3, P, S);
    bool ok[CT_NKEYS];
    /* Reads through every worker leave hot copies everywhere first: they
     * are caches, and go with the holder (docs/operations.md). */
    expect_all_through_survivors(P, S, "set");
    dst_worker_kill(&C.w[2]);
    assert_true(wait_members(2, 15000));
    for (int w = 0; w < 2; w++) {
        int n = settled_count(w, P, S, ok);
        for (int i = 0; i < CT_NKEYS; i++)
            if (ok[i] != (i % 3 != 2))
                fail_msg("key %d (written through h%d) read %s through %s", i, i % 3 + 1,
                         ok[i] ? "back" : "as lost", N.hosts[w]);
        fprintf(stderr, "  replica_num 1, h3 killed: %d of %d keys lost through %s\n", CT_NKEYS - n,
                CT_NKEYS, N.hosts[w]);
        assert_int_equal(n, CT_NKEYS - CT_NKEYS / 3);
    }
}

/* Waits until no worker (of n) has a rebalance round pending or under way. */
static bool wait_quiet(int n)
{
    bool quiet = false;
    for (int t = 0; t < 300 && !quiet; t++) {
        quiet = true;
        for (int w = 0; w < n; w++)
            quiet &= stat_of(w, "cluster.rebalance.active") == 0;
        if (!quiet) usleep(100000);
    }
    return quiet;
}

static void test_rebalance_join(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    const char *P = "nsb";
    const uint64_t S = 640000;
    assert_int_equal(start_cluster(3, 192, REBALANCE_ON), 0);
    assert_true(wait_quiet(3));
    set_keys(3, P, S);

    reader_t rd = {.prefix = P, .seed0 = S};
    pthread_t th;
    reader_start(&rd, &th, 0);
    assert_int_equal(start_worker(3, 192, REBALANCE_ON), 0);
    assert_true(wait_members(4, 15000));
    usleep(1500000); /* the rounds start a second after the join */
    bool quiet = wait_quiet(4);
    reader_end(&rd, th, "the join and its rebalance");
    assert_true(quiet);
    double moved = 0;
    for (int w = 0; w < 3; w++)
        moved += stat_of(w, "cluster.rebalance.moved");
    double held = stat_of(3, "objects.count");
    fprintf(stderr, "  rebalance: %.0f objects moved; the new worker holds %.0f\n", moved, held);
    assert_true(moved > 0);
    assert_true(held > 0);
    expect_all_through_survivors(P, S, "after the rebalance");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_scale_in_out, stop_workers),
        cmocka_unit_test_teardown(test_replica2_sigkill, stop_workers),
        cmocka_unit_test_teardown(test_replica1_sigkill, stop_workers),
        cmocka_unit_test_teardown(test_rebalance_join, stop_workers),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
