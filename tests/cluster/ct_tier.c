/* The L2 cache in a cluster (A and B on 127.0.0.11-12, real etcd, 2 s
 * leases) on one shared sfs directory:
 *  - write-through and write-back SETs on A answer after the owners learned
 *    the new copies (B reads them through the cluster while A lives);
 *  - A is killed with SIGKILL: once its lease lapses, B serves every object
 *    A had acknowledged (write-through, and write-back ones whose write had
 *    been flushed) from the shared directory (--enable_l2_cache_fallback),
 *    checksummed, through TCP and zero-copy; a key nobody wrote still reads
 *    as missing;
 *  - a DEL through either worker deletes A's L2 copy. */
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
static char dir[128];
enum { A = 0, B = 1 };
enum { NWT = 24, NWB = 6 };

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/ds-ct-tier-XXXXXX");
    if (mkdtemp(dir) == NULL) return -1;
    char extra[300];
    snprintf(extra, sizeof(extra), "--l2_cache_type sfs --sfs_path %s/l2", dir);
    const char *const each[2] = {extra, extra};
    return ct_cluster_start_with(&C, 2, NULL, each);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    dst_sh("rm -rf %s", dir);
    return 0;
}

static size_t len_of(int i)
{
    return i % 5 == 4 ? (1u << 20) + (size_t)i : 700 + (size_t)i * 37;
}

static ds_status_t set_mode(ds_client_t *c, const char *key, size_t len, uint64_t seed,
                            ds_write_mode_t mode)
{
    void *v = malloc(len);
    assert_non_null(v);
    dst_fill(v, len, seed);
    ds_set_param_t p = {mode, 0, DS_EXISTENCE_NONE};
    ds_status_t st = ds_kv_set(c, key, v, len, &p);
    free(v);
    return st;
}

static void test_fallback_after_kill(void **state)
{
    (void)state;
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_TCP);
    assert_non_null(a);
    char k[64];
    for (int i = 0; i < NWT; i++) {
        snprintf(k, sizeof(k), "wt-%d", i);
        assert_int_equal(set_mode(a, k, len_of(i), 1000 + (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE),
                         DS_K_OK);
    }
    for (int i = 0; i < NWB; i++) {
        snprintf(k, sizeof(k), "wb-%d", i);
        assert_int_equal(set_mode(a, k, len_of(i), 2000 + (uint64_t)i, DS_WRITE_BACK_L2_CACHE),
                         DS_K_OK);
    }
    /* the write-back writes are flushed */
    for (int i = 0; i < 500 && dst_stat(&C.w[A], "l2.queue_depth") != 0; i++)
        usleep(10000);
    assert_true(dst_stat(&C.w[A], "l2.queue_depth") == 0);
    assert_true(dst_stat(&C.w[A], "l2.writes") >= NWT + NWB);
    ds_client_close(a);
    /* while A lives, B reads them through the cluster (the owners know) */
    ds_client_t *b = ct_client(&C, B, DS_TRANSPORT_TCP);
    assert_non_null(b);
    for (int i = 0; i < NWT; i += 5) {
        snprintf(k, sizeof(k), "wt-%d", i);
        assert_true(ct_read_ok(b, k, len_of(i), 1000 + (uint64_t)i, 0));
    }
    ds_client_close(b);
    /* A dies; B serves A's objects from the shared directory */
    dst_worker_kill(&C.w[A]);
    uint64_t t0 = ds__now_ms();
    assert_true(ct_wait_members(&C, 1, 15000) >= 0);
    printf("B dropped A from the ring after %llu ms\n", (unsigned long long)(ds__now_ms() - t0));
    b = ct_client(&C, B, DS_TRANSPORT_TCP);
    assert_non_null(b);
    for (int i = 0; i < NWT; i++) {
        snprintf(k, sizeof(k), "wt-%d", i);
        if (!ct_read_ok(b, k, len_of(i), 1000 + (uint64_t)i, 0))
            fail_msg("write-through key %s not served by B after A died", k);
    }
    for (int i = 0; i < NWB; i++) {
        snprintf(k, sizeof(k), "wb-%d", i);
        if (!ct_read_ok(b, k, len_of(i), 2000 + (uint64_t)i, 0))
            fail_msg("write-back key %s not served by B after A died", k);
    }
    assert_int_equal(ct_get_status(b, "never-written", 0), DS_K_NOT_FOUND);
    ds_client_close(b);
    ds_client_t *bl = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    assert_non_null(bl);
    for (int i = 0; i < NWT; i += 3) {
        snprintf(k, sizeof(k), "wt-%d", i);
        assert_true(ct_read_buffer_ok(bl, k, len_of(i), 1000 + (uint64_t)i));
    }
    ds_client_close(bl);
    printf("B: %g objects read from the shared L2 directory after A died\n",
           dst_stat(&C.w[B], "l2.fallback_reads"));
    assert_true(dst_stat(&C.w[B], "l2.fallback_reads") + dst_stat(&C.w[B], "l2.reads") > 0);
}

static bool file_gone(const char *key, int timeout_ms)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/l2/%s", dir, key);
    for (int i = 0; i < timeout_ms / 10 && access(path, F_OK) == 0; i++)
        usleep(10000);
    return access(path, F_OK) != 0;
}

/* A DEL through the cluster deletes the L2 copies too: from the worker that
 * holds the key, and from another worker (the owner drops A's copy), so
 * that neither a restart nor the shared-directory fallback brings it back. */
static void test_cluster_del_deletes_l2(void **state)
{
    (void)state;
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_TCP);
    ds_client_t *b = ct_client(&C, B, DS_TRANSPORT_TCP);
    assert_non_null(a);
    assert_non_null(b);
    const char *keys[] = {"del-here", "del-there"};
    char path[256];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(set_mode(a, keys[i], 5000, 3000 + (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE),
                         DS_K_OK);
        snprintf(path, sizeof(path), "%s/l2/%s", dir, keys[i]);
        assert_int_equal(access(path, F_OK), 0); /* durable before the answer */
    }
    assert_true(ct_read_ok(b, keys[1], 5000, 3001, 0));
    assert_int_equal(ds_kv_del(a, 1, &keys[0], NULL), DS_K_OK);
    assert_int_equal(ds_kv_del(b, 1, &keys[1], NULL), DS_K_OK);
    assert_true(file_gone(keys[0], 5000));
    assert_true(file_gone(keys[1], 5000));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ct_get_status(a, keys[i], 0), DS_K_NOT_FOUND);
        assert_int_equal(ct_get_status(b, keys[i], 0), DS_K_NOT_FOUND);
    }
    ds_client_close(a);
    ds_client_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_del_deletes_l2),
        cmocka_unit_test(test_fallback_after_kill),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
