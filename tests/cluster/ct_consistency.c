/* Cluster-wide effect of overwrite, delete, exist, query_size and expire,
 * against real etcd and three workers A, B, C on 127.0.0.11-13:
 *  - after an overwrite on another node returns, every node reads the new
 *    value, never the old one (rounds rotating the writer and the size), and
 *    readers running alongside never see a version older than the last
 *    overwrite that had returned before their read began, nor torn bytes;
 *  - after a delete returns (issued on any node) every node reads missing and
 *    exist says false; the key can be set again elsewhere;
 *  - exist and query_size on B and C see keys living on A;
 *  - expire set on C applies to a key living on A; a ttl set on A shows on B;
 *  - NX on B does not replace a key living on A (the owner decides). */
#include "cluster_util.h"

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

static ct_cluster_t C;
enum { A = 0, B = 1, CC = 2 };
static ds_client_t *cl[3][2]; /* [node][LOCAL, TCP] */

static int setup(void **state)
{
    (void)state;
    if (ct_cluster_start(&C, 3, NULL) != 0) return -1;
    for (int i = 0; i < 3; i++) {
        cl[i][0] = ct_client(&C, i, DS_TRANSPORT_LOCAL);
        cl[i][1] = ct_client(&C, i, DS_TRANSPORT_TCP);
        if (!cl[i][0] || !cl[i][1]) return -1;
    }
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

/* Round r of the overwrite test: its value's size and seed. */
static size_t round_len(int r)
{
    static const size_t base[] = {100, 300000, 2u << 20, 7};
    return base[r % 4] + (size_t)r;
}

static uint64_t round_seed(int r)
{
    return 20000 + (uint64_t)r;
}

typedef struct {
    int node;
    atomic_int *done_round; /* last round whose overwrite returned */
    atomic_bool *stop;
    int reads, misses, bad, stale;
} reader_t;

/* Which round's value v is, or -1. */
static int which_round(const void *v, size_t len, int max_round)
{
    for (int r = 0; r <= max_round; r++)
        if (round_len(r) == len && dst_check(v, len, round_seed(r))) return r;
    return -1;
}

static void *read_loop(void *arg)
{
    reader_t *rd = arg;
    ds_client_t *c = ct_client(&C, rd->node, DS_TRANSPORT_TCP);
    uint64_t until = ds__now_ms() + 30000; /* bounded even if the writer stalls */
    for (int i = 0; i < 5000 && c && !atomic_load(rd->stop) && ds__now_ms() < until; i++) {
        int floor = atomic_load(rd->done_round);
        void *v = NULL;
        size_t len = 0;
        ds_status_t st = ds_kv_get(c, "ow-key", 0, &v, &len);
        rd->reads++;
        if (st == DS_K_NOT_FOUND) {
            rd->misses++;
        } else if (st != DS_K_OK) {
            rd->bad++;
        } else {
            int r = which_round(v, len, atomic_load(rd->done_round) + 1);
            if (r < 0)
                rd->bad++;
            else if (r < floor)
                rd->stale++;
        }
        ds_free(v);
    }
    ds_client_close(c);
    return NULL;
}

static void test_overwrite_visible_everywhere(void **state)
{
    (void)state;
    enum { ROUNDS = 24 };
    atomic_int done_round = -1;
    atomic_bool stop = false;
    reader_t rd[2] = {{B, &done_round, &stop, 0, 0, 0, 0}, {CC, &done_round, &stop, 0, 0, 0, 0}};
    /* Round 0 is written on A; the readers start once the key exists. */
    assert_int_equal(ct_set(cl[A][0], "ow-key", round_len(0), round_seed(0)), DS_K_OK);
    atomic_store(&done_round, 0);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, read_loop, &rd[i]);
    for (int r = 0; r < ROUNDS; r++) {
        int writer = r % 3;
        if (r > 0) {
            assert_int_equal(ct_set(cl[writer][r % 2], "ow-key", round_len(r), round_seed(r)),
                             DS_K_OK);
            atomic_store(&done_round, r);
        }
        for (int node = 0; node < 3; node++) {
            assert_true(
                ct_read_ok(cl[node][(r + node) % 2], "ow-key", round_len(r), round_seed(r), 0));
            assert_true(ct_read_buffer_ok(cl[node][(r + node + 1) % 2], "ow-key", round_len(r),
                                          round_seed(r)));
        }
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        fprintf(stderr, "  concurrent reader on node %d: %d reads, %d missing, %d stale, %d bad\n",
                rd[i].node, rd[i].reads, rd[i].misses, rd[i].stale, rd[i].bad);
        assert_int_equal(rd[i].bad, 0);
        assert_int_equal(rd[i].stale, 0);
        assert_int_equal(rd[i].misses, 0); /* the key always exists: old or new, never missing */
        assert_true(rd[i].reads > 0);
    }
    /* Only the last writer holds a copy, besides the readers' hot copies
     * (caches the next overwrite drops, docs/replication.md). */
    int copies = 0;
    for (int node = 0; node < 3; node++) {
        bool ex = false;
        const char *k = "ow-key";
        assert_int_equal(ds_kv_exist(cl[node][1], 1, &k, &ex), DS_K_OK);
        assert_true(ex);
        copies += (int)dst_stat(&C.w[node], "objects.count") -
                  (int)dst_stat(&C.w[node], "cluster.replication.hot_copies");
    }
    assert_int_equal(copies, 1);
}

static void expect_missing_everywhere(const char *key)
{
    for (int node = 0; node < 3; node++)
        for (int t = 0; t < 2; t++) {
            assert_int_equal(ct_get_status(cl[node][t], key, 0), DS_K_NOT_FOUND);
            ds_buffer_t *b = NULL;
            assert_int_equal(ds_kv_get_buffers(cl[node][t], 1, &key, 0, &b), DS_K_NOT_FOUND);
            assert_null(b);
            bool ex = true;
            assert_int_equal(ds_kv_exist(cl[node][t], 1, &key, &ex), DS_K_OK);
            assert_false(ex);
        }
}

static void test_delete_everywhere(void **state)
{
    (void)state;
    for (int r = 0; r < 9; r++) {
        int writer = r % 3, deleter = (r / 3 + writer) % 3; /* every pair, self included */
        char key[32];
        snprintf(key, sizeof(key), "del-%d", r);
        size_t len = r % 2 ? 1500000 : 200;
        assert_int_equal(ct_set(cl[writer][0], key, len, 30000 + r), DS_K_OK);
        for (int node = 0; node < 3; node++)
            assert_true(ct_read_ok(cl[node][1], key, len, 30000 + r, 0));
        const char *k = key;
        ds_status_t st = DS_K_RUNTIME_ERROR;
        assert_int_equal(ds_kv_del(cl[deleter][r % 2], 1, &k, &st), DS_K_OK);
        assert_int_equal(st, DS_K_OK);
        expect_missing_everywhere(key);
        /* It can live again, elsewhere. */
        int again = (writer + 1) % 3;
        assert_int_equal(ct_set(cl[again][1], key, 99, 31000 + r), DS_K_OK);
        for (int node = 0; node < 3; node++)
            assert_true(ct_read_ok(cl[node][0], key, 99, 31000 + r, 0));
        assert_int_equal(ds_kv_del(cl[writer][0], 1, &k, NULL), DS_K_OK);
        expect_missing_everywhere(key);
    }
    /* Deleting a missing key is not an error. */
    const char *k = "del-never-existed";
    assert_int_equal(ds_kv_del(cl[B][0], 1, &k, NULL), DS_K_OK);
    /* Nothing is left behind: only the overwrite test's key remains (and
     * hot copies of it). */
    int objects = 0;
    for (int node = 0; node < 3; node++)
        objects += (int)dst_stat(&C.w[node], "objects.count") -
                   (int)dst_stat(&C.w[node], "cluster.replication.hot_copies");
    assert_int_equal(objects, 1);
}

static void test_exist_and_size_across_nodes(void **state)
{
    (void)state;
    const char *keys[] = {"ex-a", "ex-c", "ex-missing"};
    assert_int_equal(ct_set(cl[A][0], "ex-a", 1234, 1), DS_K_OK);
    assert_int_equal(ct_set(cl[CC][1], "ex-c", 3u << 20, 2), DS_K_OK);
    for (int node = 0; node < 3; node++)
        for (int t = 0; t < 2; t++) {
            bool ex[3] = {false, false, true};
            assert_int_equal(ds_kv_exist(cl[node][t], 3, keys, ex), DS_K_OK);
            assert_true(ex[0] && ex[1] && !ex[2]);
            uint64_t sizes[3];
            ds_status_t st[3];
            ds_kv_query_size(cl[node][t], 3, keys, sizes, st);
            assert_int_equal(st[0], DS_K_OK);
            assert_int_equal(sizes[0], 1234);
            assert_int_equal(st[1], DS_K_OK);
            assert_int_equal(sizes[1], 3u << 20);
            assert_int_equal(st[2], DS_K_NOT_FOUND);
        }
}

/* Polls key on every node until all read missing; ms taken, or -1. */
static int gone_everywhere_within(const char *key, int timeout_ms)
{
    uint64_t t0 = ds__now_ms();
    while (ds__now_ms() - t0 < (uint64_t)timeout_ms) {
        int gone = 0;
        for (int node = 0; node < 3; node++)
            gone += ct_get_status(cl[node][node % 2], key, 0) == DS_K_NOT_FOUND;
        if (gone == 3) return (int)(ds__now_ms() - t0);
        usleep(50000);
    }
    return -1;
}

static void test_expire_from_another_node(void **state)
{
    (void)state;
    /* A key on A without a ttl; expire(1 s) issued on C. */
    assert_int_equal(ct_set(cl[A][0], "exp-a", 4096, 40), DS_K_OK);
    const char *k = "exp-a";
    ds_status_t st = DS_K_RUNTIME_ERROR;
    uint64_t t0 = ds__now_ms();
    assert_int_equal(ds_kv_expire(cl[CC][1], 1, &k, 1, &st), DS_K_OK);
    assert_int_equal(st, DS_K_OK);
    for (int node = 0; node < 3; node++)
        assert_true(ct_read_ok(cl[node][0], k, 4096, 40, 0));
    int gone = gone_everywhere_within(k, 4000);
    int since = (int)(ds__now_ms() - t0);
    fprintf(stderr, "  expire(1 s) set on C: the key on A gone everywhere %d ms after\n", since);
    assert_true(gone >= 0);
    assert_true(since >= 900 && since < 3500);
    /* expire on a missing key names it */
    assert_int_equal(ds_kv_expire(cl[B][0], 1, &k, 1, &st), DS_K_NOT_FOUND);
    assert_int_equal(st, DS_K_NOT_FOUND);
    /* expire(0) from B removes the ttl of a key on A that had one */
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.ttl_second = 1;
    uint8_t v[256];
    dst_fill(v, sizeof(v), 41);
    assert_int_equal(ds_kv_set(cl[A][1], "exp-keep", v, sizeof(v), &p), DS_K_OK);
    k = "exp-keep";
    assert_int_equal(ds_kv_expire(cl[B][0], 1, &k, 0, &st), DS_K_OK);
    usleep(1600000);
    for (int node = 0; node < 3; node++)
        assert_true(ct_read_ok(cl[node][1], k, 256, 41, 0));
    /* a ttl set with the value on A applies on B and C as well */
    assert_int_equal(ds_kv_set(cl[A][0], "exp-ttl", v, sizeof(v), &p), DS_K_OK);
    assert_true(ct_read_ok(cl[B][0], "exp-ttl", 256, 41, 0));
    assert_true(gone_everywhere_within("exp-ttl", 4000) >= 0);
}

static void test_nx_across_nodes(void **state)
{
    (void)state;
    assert_int_equal(ct_set(cl[A][0], "nx-key", 500, 50), DS_K_OK);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.existence = DS_EXISTENCE_NX;
    uint8_t v[600];
    dst_fill(v, sizeof(v), 51);
    ds_status_t st = ds_kv_set(cl[B][0], "nx-key", v, sizeof(v), &p);
    /* The key's owner decides NX for the whole cluster; B rolls back, and
     * as in Yuanrong the existing key is a success that keeps its value. */
    assert_int_equal(st, DS_K_OK);
    for (int node = 0; node < 3; node++)
        assert_true(ct_read_ok(cl[node][1], "nx-key", 500, 50, 0));
    /* NX of a key that exists nowhere succeeds */
    assert_int_equal(ds_kv_set(cl[CC][1], "nx-new", v, sizeof(v), &p), DS_K_OK);
    for (int node = 0; node < 3; node++)
        assert_true(ct_read_ok(cl[node][0], "nx-new", 600, 51, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overwrite_visible_everywhere),
        cmocka_unit_test(test_delete_everywhere),
        cmocka_unit_test(test_exist_and_size_across_nodes),
        cmocka_unit_test(test_expire_from_another_node),
        cmocka_unit_test(test_nx_across_nodes),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
