/* Copies of a write on more than one worker (docs/replication.md), three
 * workers A, B, C on 127.0.0.11-13 over a private etcd with 2 s leases:
 *  - --replica_num 2: 240 checksummed keys of 1 KiB to 2 MiB set round-robin
 *    through A, B and C; kill -9 of C; once C left the ring every key reads
 *    back byte-exact through A and B (0 lost). The copies C held are made
 *    again: every key ends up with a full copy on both A and B, and after
 *    kill -9 of B too, A alone still serves all 240.
 *  - --replica_num 1: the same kill loses exactly the keys written through
 *    C (their only copy) and nothing else, as the docs say; hot copies of
 *    them on A and B go with C.
 *  - hot copies (--enable_data_replication, on by default): the second get
 *    of a key another worker holds is served locally (no peer request), and
 *    the local copy is dropped by an overwrite through a third worker and by
 *    a delete through another, so no stale value is ever read; with the flag
 *    off every get pulls again. */
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
enum { A = 0, B = 1, CC = 2, NKEYS = 240 };

static size_t key_len(int i)
{
    size_t base = (size_t)1024 << (i % 12); /* 1 KiB .. 2 MiB */
    return base == (2u << 20) ? base : base + (size_t)i;
}

static uint64_t key_seed(int i)
{
    return 90000 + (uint64_t)i;
}

static void key_name(char *out, size_t cap, int i)
{
    snprintf(out, cap, "rp-%d", i);
}

static int start(const char *flags)
{
    const int arenas[] = {320, 320, 320};
    const char *extra[] = {flags, flags, flags};
    return ct_cluster_start_with(&C, 3, arenas, extra);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

static void set_all(void)
{
    ds_client_t *w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = ct_client(&C, i, i == B ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
        assert_non_null(w[i]);
    }
    for (int i = 0; i < NKEYS; i++) {
        char key[64];
        key_name(key, sizeof(key), i);
        assert_int_equal(ct_set(w[i % 3], key, key_len(i), key_seed(i)), DS_K_OK);
    }
    for (int i = 0; i < 3; i++)
        ds_client_close(w[i]);
}

/* Reads every key through worker `from`; ok[i] says whether key i read back
 * byte-exact. Returns how many did. */
static int read_all(int from, bool *ok)
{
    ds_client_t *c = ct_client(&C, from, from == B ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
    if (c == NULL) return -1;
    int n = 0;
    for (int i = 0; i < NKEYS; i++) {
        char key[64];
        key_name(key, sizeof(key), i);
        ok[i] = ct_read_ok(c, key, key_len(i), key_seed(i), 0);
        n += ok[i];
    }
    ds_client_close(c);
    return n;
}

/* Reads through each survivor until the count stops changing (the new
 * owners learn the holders' copies within a few hundred ms of the ring
 * change); returns the last count of the worker `from`. */
static int settled_reads(int from, bool *ok)
{
    int last = -1, same = 0;
    for (int round = 0; round < 20 && same < 3; round++) {
        int n = read_all(from, ok);
        same = n == last ? same + 1 : 0;
        last = n;
        if (n == NKEYS) break;
        usleep(300 * 1000);
    }
    return last;
}

static void kill_and_wait(int victim, int members)
{
    dst_worker_kill(&C.w[victim]);
    assert_true(ct_wait_members(&C, members, 15000) >= 0);
}

static void test_replica2_sigkill(void **state)
{
    (void)state;
    assert_int_equal(start("--replica_num 2"), 0);
    set_all();
    /* Each write's second copy went to another worker. */
    double pushes = 0;
    for (int i = 0; i < 3; i++)
        pushes += dst_stat(&C.w[i], "cluster.replication.received");
    assert_true(pushes == NKEYS);

    kill_and_wait(CC, 2);
    bool ok[NKEYS];
    int lost = 0;
    for (int from = A; from <= B; from++) {
        int n = settled_reads(from, ok);
        for (int i = 0; i < NKEYS; i++)
            if (!ok[i])
                fprintf(stderr, "  lost through %d: key %d (%zu bytes)\n", from, i, key_len(i));
        lost += NKEYS - n;
    }
    fprintf(stderr, "  replica_num 2, C killed: %d of %d keys lost (read through A and B)\n", lost,
            NKEYS);
    assert_int_equal(lost, 0);

    /* The copies C held are made again: with two members left, A and B
     * each end up with a full copy of every key (hot copies aside). */
    double full[2] = {0, 0};
    for (int t = 0; t < 600 && (full[0] < NKEYS || full[1] < NKEYS); t++) {
        for (int w = A; w <= B; w++)
            full[w] = dst_stat(&C.w[w], "objects.count") -
                      dst_stat(&C.w[w], "cluster.replication.hot_copies");
        if (full[0] < NKEYS || full[1] < NKEYS) usleep(100 * 1000);
    }
    double repairs = dst_stat(&C.w[A], "cluster.replication.repairs") +
                     dst_stat(&C.w[B], "cluster.replication.repairs");
    fprintf(stderr, "  copies made again after the kill: %.0f; full copies on A %.0f, B %.0f\n",
            repairs, full[0], full[1]);
    assert_true(full[0] == NKEYS && full[1] == NKEYS);
    assert_true(repairs >= NKEYS / 3); /* at least C's own writes */

    /* So losing B as well loses nothing. */
    kill_and_wait(B, 1);
    int n = settled_reads(A, ok);
    fprintf(stderr, "  then B killed too: %d of %d keys read through A\n", n, NKEYS);
    assert_int_equal(n, NKEYS);
}

static void test_replica1_sigkill(void **state)
{
    (void)state;
    assert_int_equal(start(NULL), 0);
    set_all();
    bool ok[NKEYS];
    /* Reads through every worker leave hot copies everywhere first. */
    for (int from = A; from <= CC; from++)
        assert_int_equal(read_all(from, ok), NKEYS);
    kill_and_wait(CC, 2);
    for (int from = A; from <= B; from++) {
        int n = settled_reads(from, ok);
        for (int i = 0; i < NKEYS; i++)
            if (ok[i] != (i % 3 != CC))
                fail_msg("key %d (written through %d) read %s through %d", i, i % 3,
                         ok[i] ? "back" : "as lost", from);
        fprintf(stderr, "  replica_num 1, C killed: %d of %d keys lost through %d\n", NKEYS - n,
                NKEYS, from);
        assert_int_equal(n, NKEYS - NKEYS / 3);
    }
}

static double peer_requests(int w)
{
    return dst_stat(&C.w[w], "cluster.peer_link_requests") +
           dst_stat(&C.w[w], "cluster.peer_job_requests");
}

static void test_hot_copy(void **state)
{
    (void)state;
    assert_int_equal(start(NULL), 0);
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *b = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    ds_client_t *c = ct_client(&C, CC, DS_TRANSPORT_TCP);
    const size_t len = (1u << 20) + 77;
    assert_int_equal(ct_set(a, "hot-1", len, 1), DS_K_OK);

    /* First get through B pulls and keeps the value. */
    assert_true(ct_read_ok(b, "hot-1", len, 1, 0));
    assert_true(dst_wait_stat(&C.w[B], "cluster.replication.hot_kept", 1, 5000));
    double before = peer_requests(B);
    assert_true(ct_read_ok(b, "hot-1", len, 1, 0));
    assert_true(ct_read_buffer_ok(b, "hot-1", len, 1));
    assert_true(peer_requests(B) == before); /* served locally */

    /* An overwrite through C drops B's copy before it is answered. */
    assert_int_equal(ct_set(c, "hot-1", len + 5, 2), DS_K_OK);
    assert_true(dst_stat(&C.w[B], "cluster.replication.hot_dropped") == 1);
    assert_true(ct_read_ok(b, "hot-1", len + 5, 2, 0));
    assert_true(dst_wait_stat(&C.w[B], "cluster.replication.hot_kept", 2, 5000));
    assert_true(ct_read_ok(b, "hot-1", len + 5, 2, 0));

    /* A delete through A drops it too: B reads the key as missing. */
    const char *k = "hot-1";
    assert_int_equal(ds_kv_del(a, 1, &k, NULL), DS_K_OK);
    assert_true(dst_stat(&C.w[B], "cluster.replication.hot_dropped") == 2);
    assert_int_equal(ct_get_status(b, "hot-1", 0), DS_K_NOT_FOUND);

    /* A write through the holder itself replaces its hot copy. */
    assert_int_equal(ct_set(a, "hot-2", 4096, 3), DS_K_OK);
    assert_true(ct_read_ok(b, "hot-2", 4096, 3, 0));
    assert_true(dst_wait_stat(&C.w[B], "cluster.replication.hot_kept", 3, 5000));
    assert_int_equal(ct_set(b, "hot-2", 5000, 4), DS_K_OK);
    assert_true(ct_read_ok(a, "hot-2", 5000, 4, 0));
    assert_true(ct_read_ok(c, "hot-2", 5000, 4, 0));
    assert_true(ct_read_ok(b, "hot-2", 5000, 4, 0));

    ds_client_close(a);
    ds_client_close(b);
    ds_client_close(c);
}

static void test_hot_copy_off(void **state)
{
    (void)state;
    assert_int_equal(start("--enable_data_replication false"), 0);
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *b = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    assert_int_equal(ct_set(a, "cold-1", 300000, 5), DS_K_OK);
    assert_true(ct_read_ok(b, "cold-1", 300000, 5, 0));
    double before = peer_requests(B);
    assert_true(ct_read_ok(b, "cold-1", 300000, 5, 0));
    assert_true(peer_requests(B) > before); /* pulled again */
    assert_true(dst_stat(&C.w[B], "cluster.replication.hot_kept") == 0);
    ds_client_close(a);
    ds_client_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_hot_copy, teardown),
        cmocka_unit_test_teardown(test_hot_copy_off, teardown),
        cmocka_unit_test_teardown(test_replica2_sigkill, teardown),
        cmocka_unit_test_teardown(test_replica1_sigkill, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
