/* The cluster without etcd, and workers coming back: three workers A, B, C on
 * 127.0.0.11-13, a bounded load loop of set on one node and checksummed gets
 * on the two others running throughout:
 *  - etcd stopped under load: every operation still succeeds on the last
 *    ring and no worker drops a member; etcd restarted (same data): the
 *    registrations are all there again, members stay 3, the load goes on;
 *  - etcd killed and restarted empty (every lease and registration lost):
 *    the workers register again (members back to 3, three keys in etcd) and
 *    every key written before is still readable from every node;
 *  - a worker killed and restarted at once on its address (before its lease
 *    ran out) and one stopped and restarted gracefully: each rejoins with a
 *    new identity, keys written on it after the rejoin are readable
 *    everywhere, its old keys read as missing, the others' keys stay served. */
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
enum { A = 0, B = 1, CC = 2 };
static ds_client_t *cl[3][2]; /* [node][LOCAL, TCP] */
static char prefix[160];

static void connect_all(void)
{
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 2; t++) {
            ds_client_close(cl[i][t]);
            cl[i][t] = ct_client(&C, i, t ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
        }
}

static int setup(void **state)
{
    (void)state;
    if (ct_cluster_start(&C, 3, NULL) != 0) return -1;
    snprintf(prefix, sizeof(prefix), "/datasystem/%s/cluster/", C.name);
    connect_all();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 2; t++)
            ds_client_close(cl[i][t]);
    ct_cluster_stop(&C);
    return 0;
}

/* ---- the load: round i writes "ld-i" on node i % 3 and reads it on the others ---- */

enum { MAX_ROUNDS = 4000 };
static int rounds; /* written so far */
static int failures;

static size_t load_len(int i)
{
    return i % 10 == 9 ? (256u << 10) + (size_t)i : 64 + (size_t)(i % 500);
}

static void load_round(void)
{
    int i = rounds++;
    char key[32];
    snprintf(key, sizeof(key), "ld-%d", i);
    int w = i % 3;
    if (ct_set(cl[w][i % 2], key, load_len(i), 90000 + (uint64_t)i) != DS_K_OK) {
        fprintf(stderr, "  load: set %s on node %d failed: %s\n", key, w, ds_last_error());
        failures++;
        return;
    }
    for (int k = 1; k <= 2; k++) {
        int r = (w + k) % 3;
        if (!ct_read_ok(cl[r][(i + k) % 2], key, load_len(i), 90000 + (uint64_t)i, 0)) {
            fprintf(stderr, "  load: %s (on node %d) not read on node %d\n", key, w, r);
            failures++;
        }
    }
}

/* Runs n load rounds paced evenly over ms milliseconds (fewer if a round is
 * slow: never past ms, never past MAX_ROUNDS in all). */
static void load_for(int ms, int n)
{
    uint64_t t0 = ds__now_ms(), until = t0 + (uint64_t)ms;
    for (int k = 0; k < n && rounds < MAX_ROUNDS && ds__now_ms() < until; k++) {
        load_round();
        uint64_t next = t0 + (uint64_t)ms * (uint64_t)(k + 1) / (uint64_t)n, now = ds__now_ms();
        if (next > now) usleep((useconds_t)(next - now) * 1000);
    }
}

/* Every key written so far (a stride of them) read on every node. */
static int unreadable_keys(int stride)
{
    int bad = 0;
    for (int i = 0; i < rounds; i += stride) {
        char key[32];
        snprintf(key, sizeof(key), "ld-%d", i);
        for (int node = 0; node < 3; node++) {
            void *v = NULL;
            size_t len = 0;
            if (ds_kv_get(cl[node][node % 2], key, 0, &v, &len) != DS_K_OK || len != load_len(i) ||
                !dst_check(v, len, 90000 + (uint64_t)i))
                bad++;
            ds_free(v);
        }
    }
    return bad;
}

static int members_min(void)
{
    int m = 1000;
    for (int i = 0; i < 3; i++) {
        int k = (int)dst_stat(&C.w[i], "cluster.members");
        if (k < m) m = k;
    }
    return m;
}

/* Runs the load until etcd holds 3 registrations and every worker sees 3
 * members; ms taken, or -1 after timeout_ms. */
static int load_until_registered(int timeout_ms)
{
    uint64_t t0 = ds__now_ms();
    while (ds__now_ms() - t0 < (uint64_t)timeout_ms) {
        if (dst_etcd_count(&C.etcd, prefix) == 3 && members_min() == 3)
            return (int)(ds__now_ms() - t0);
        load_for(100, 10);
    }
    return -1;
}

static void test_etcd_stopped_under_load(void **state)
{
    (void)state;
    failures = 0;
    load_for(600, 30);
    assert_int_equal(failures, 0);
    assert_int_equal(dst_etcd_count(&C.etcd, prefix), 3);
    int before = rounds;
    dst_etcd_stop(&C.etcd);
    /* Longer than a lease: nobody may drop anybody while etcd is away. */
    uint64_t t0 = ds__now_ms();
    int min_members = 3;
    for (int slice = 0; slice < (CT_NODE_TIMEOUT_S + 2) * 4; slice++) {
        load_for(250, 25);
        int m = members_min();
        if (m < min_members) min_members = m;
    }
    fprintf(stderr, "  etcd down %llu ms: %d rounds, %d failures, fewest members seen %d\n",
            (unsigned long long)(ds__now_ms() - t0), rounds - before, failures, min_members);
    assert_int_equal(failures, 0);
    assert_int_equal(min_members, 3);
    assert_true(rounds - before >= 20);
    assert_int_equal(unreadable_keys(7), 0);
    /* etcd comes back with its data: the workers keep (or renew) their leases. */
    assert_int_equal(dst_etcd_restart(&C.etcd, false), 0);
    int ms = load_until_registered(15000);
    fprintf(stderr, "  etcd back: 3 registrations and 3 members after %d ms\n", ms);
    assert_true(ms >= 0);
    load_for(600, 30);
    assert_int_equal(failures, 0);
    assert_int_equal(unreadable_keys(3), 0);
}

static void test_etcd_restarted_empty(void **state)
{
    (void)state;
    failures = 0;
    load_for(500, 25);
    dst_etcd_kill(&C.etcd);
    load_for(1000, 50);
    assert_int_equal(dst_etcd_restart(&C.etcd, true), 0);
    assert_int_equal(failures, 0);
    /* Every lease is gone: each worker has to register again. Until they
     * all have, the workers' rings differ for a moment (one sees itself
     * alone, another all three), and a read may ask an owner the writer did
     * not tell: those transient misses are counted, not failed. */
    int ms = load_until_registered(20000);
    fprintf(stderr,
            "  etcd restarted empty: all registered again after %d ms (%d transient misses)\n", ms,
            failures);
    assert_true(ms >= 0);
    failures = 0;
    /* Memberships may have flapped while the workers came back one by one;
     * give the owners a moment to hear about every key again. */
    int bad = -1;
    for (int i = 0; i < 30 && bad != 0; i++) {
        bad = unreadable_keys(1);
        if (bad) usleep(100000);
    }
    fprintf(stderr, "  %d (key, node) reads failed after the re-registration\n", bad);
    assert_int_equal(bad, 0);
    load_for(500, 25);
    assert_int_equal(failures, 0);
}

static void rejoin(int who, bool kill9)
{
    failures = 0;
    int first = rounds;
    load_for(500, 24);
    assert_int_equal(failures, 0);
    if (kill9) {
        dst_worker_kill(&C.w[who]);
        assert_int_equal(ct_worker_restart(&C, who), 0);
    } else {
        assert_int_equal(ct_worker_restart(&C, who), 0); /* SIGTERM, then start */
    }
    connect_all();
    assert_true(ct_wait_members(&C, 3, 10000) >= 0);
    /* Its old keys are gone everywhere; everybody else's are served from all
     * nodes, the rejoined one included (allow the owners a moment). */
    int bad = -1;
    uint64_t t0 = ds__now_ms();
    while (bad != 0 && ds__now_ms() - t0 < 8000) {
        bad = 0;
        for (int i = first; i < rounds; i++) {
            char key[32];
            snprintf(key, sizeof(key), "ld-%d", i);
            for (int node = 0; node < 3; node++) {
                if (i % 3 == who)
                    bad += ct_get_status(cl[node][1], key, 0) != DS_K_NOT_FOUND;
                else
                    bad += !ct_read_ok(cl[node][0], key, load_len(i), 90000 + (uint64_t)i, 0);
            }
        }
        if (bad) usleep(200000);
    }
    fprintf(stderr, "  node %d %s and restarted: settled after %llu ms\n", who,
            kill9 ? "killed" : "stopped", (unsigned long long)(ds__now_ms() - t0));
    assert_int_equal(bad, 0);
    /* Keys written on it after the rejoin are readable everywhere. */
    for (int k = 0; k < 6; k++) {
        char key[32];
        snprintf(key, sizeof(key), "rejoin-%d-%d", who, k);
        assert_int_equal(ct_set(cl[who][k % 2], key, 1000 + (size_t)k * 50000, 95000 + (uint64_t)k),
                         DS_K_OK);
        for (int node = 0; node < 3; node++)
            assert_true(ct_read_ok(cl[node][(k + node) % 2], key, 1000 + (size_t)k * 50000,
                                   95000 + (uint64_t)k, 0));
    }
    /* Rounds written before it went away on the other nodes stay readable.
     * (From here on the rounds on `who` are lost: restart the count.) */
    rounds = 0;
    load_for(500, 24);
    assert_int_equal(failures, 0);
}

static void test_worker_killed_and_restarted_at_once(void **state)
{
    (void)state;
    rejoin(B, true);
}

static void test_worker_stopped_and_restarted(void **state)
{
    (void)state;
    rejoin(CC, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_etcd_stopped_under_load),
        cmocka_unit_test(test_etcd_restarted_empty),
        cmocka_unit_test(test_worker_killed_and_restarted_at_once),
        cmocka_unit_test(test_worker_stopped_and_restarted),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
