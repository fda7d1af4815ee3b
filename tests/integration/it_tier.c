/* Storage tiers against real workers, once per L2 backend: `it_tier` runs
 * them on sfs (--l2_cache_type sfs --sfs_path DIR), `it_tier distributed_disk`
 * on the log (--distributed_disk_path DIR); it_tier_dd.c has the log's own
 * tests (group commit, compaction, kills).
 *
 * - Write-through survives SIGKILL: every acknowledged object reads back
 *   intact from a worker restarted on the same directory (TCP and zero-copy).
 * - Write-back: after the queue drains, a killed worker loses nothing; under
 *   write-back traffic, a kill loses at most the queue's depth (printed).
 * - WRITE_BACK_L2_CACHE_EVICT objects leave memory once written and come
 *   back on get; DEL, NX and TTL act on the L2 copy too.
 * - A directory that disappears mid-run: write-through answers K_IO_ERROR
 *   naming the path and errno, the worker keeps serving memory.
 * - A torn or corrupted file (sfs) or record (distributed_disk) is never
 *   served.
 * - Spill (sfs format in its own directory), and refused flags. */
#include "harness.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_tier_util.h"

static void test_write_through_kill(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    for (int i = 0; i < 30; i++) {
        key_of(k, sizeof(k), "wt", i);
        assert_int_equal(put(c, k, size_of(i), 100 + (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE, 0,
                             DS_EXISTENCE_NONE),
                         DS_K_OK);
    }
    /* an overwrite: the newer value is what comes back */
    key_of(k, sizeof(k), "wt", 3);
    assert_int_equal(put(c, k, 777, 9003, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    ds_client_close(c);
    /* a local client writes through the arena (CREATE / PUBLISH for large values) */
    c = conn(DS_TRANSPORT_LOCAL);
    for (int i = 0; i < 12; i++) {
        key_of(k, sizeof(k), "wtl", i);
        assert_int_equal(put(c, k, size_of(i), 400 + (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE, 0,
                             DS_EXISTENCE_NONE),
                         DS_K_OK);
    }
    assert_true(dst_stat(&W, "l2.writes") >= 43);
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_true(dst_stat(&W, "l2.objects") == 42);
    c = conn(DS_TRANSPORT_TCP);
    for (int i = 0; i < 12; i++) {
        key_of(k, sizeof(k), "wtl", i);
        assert_int_equal(check(c, k, size_of(i), 400 + (uint64_t)i), 1);
    }
    for (int i = 0; i < 30; i++) {
        key_of(k, sizeof(k), "wt", i);
        if (i == 3)
            assert_int_equal(check(c, k, 777, 9003), 1);
        else
            assert_int_equal(check(c, k, size_of(i), 100 + (uint64_t)i), 1);
    }
    ds_client_close(c);
    /* zero-copy: a local client reads a value brought back from L2 */
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_LOCAL);
    key_of(k, sizeof(k), "wt", 4);
    const char *keys[1] = {k};
    ds_buffer_t *b[1] = {NULL};
    assert_int_equal(ds_kv_get_buffers(c, 1, keys, 0, b), DS_K_OK);
    assert_non_null(b[0]);
    assert_int_equal(ds_buffer_size(b[0]), size_of(4));
    assert_true(dst_check(ds_buffer_data(b[0]), size_of(4), 104));
    ds_buffer_release(b[0]);
    ds_client_close(c);
    finish();
}

static void test_write_back(void **state)
{
    (void)state;
    assert_int_equal(start(64, "--l2_cache_async_write_queue_size 16"), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    int acked = 0;
    for (int i = 0; i < 40; i++) {
        key_of(k, sizeof(k), "wb", i);
        ds_status_t st = put(c, k, 1000 + (size_t)i, 200 + (uint64_t)i, DS_WRITE_BACK_L2_CACHE, 0,
                             DS_EXISTENCE_NONE);
        assert_true(st == DS_K_OK || st == DS_K_WRITE_BACK_QUEUE_FULL);
        if (st == DS_K_OK) acked++;
        if (st == DS_K_WRITE_BACK_QUEUE_FULL) {
            assert_non_null(strstr(ds_last_error(), "queue full"));
            wait_drained();
            i--;
        }
    }
    assert_int_equal(acked, 40);
    wait_drained();
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    for (int i = 0; i < 40; i++) {
        key_of(k, sizeof(k), "wb", i);
        assert_int_equal(check(c, k, 1000 + (size_t)i, 200 + (uint64_t)i), 1);
    }
    /* write-back traffic, then SIGKILL: only what was still queued is lost */
    int n = 0;
    for (int i = 0; i < 300; i++) {
        key_of(k, sizeof(k), "wbk", i);
        if (put(c, k, 100000, 5000 + (uint64_t)i, DS_WRITE_BACK_L2_CACHE, 0, DS_EXISTENCE_NONE) ==
            DS_K_OK)
            n = i + 1;
        else
            break;
    }
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    int lost = 0;
    for (int i = 0; i < n; i++) {
        key_of(k, sizeof(k), "wbk", i);
        lost += check(c, k, 100000, 5000 + (uint64_t)i) == 0;
    }
    printf("write-back under SIGKILL: %d acknowledged, %d lost (queue cap 16)\n", n, lost);
    assert_true(lost <= 16);
    ds_client_close(c);
    finish();
}

static void test_evict_and_reload(void **state)
{
    (void)state;
    assert_int_equal(start(32, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    /* 80 MiB of write-back-evict values through a 32 MiB arena */
    for (int i = 0; i < 80; i++) {
        key_of(k, sizeof(k), "ev", i);
        ds_status_t st = DS_K_OUT_OF_MEMORY;
        for (int tries = 0; tries < 200 && st == DS_K_OUT_OF_MEMORY; tries++) {
            st = put(c, k, 1 << 20, 300 + (uint64_t)i, DS_WRITE_BACK_L2_CACHE_EVICT, 0,
                     DS_EXISTENCE_NONE);
            if (st != DS_K_OK) usleep(10000);
        }
        assert_int_equal(st, DS_K_OK);
    }
    wait_drained();
    assert_true(dst_stat(&W, "objects.evictions") > 0);
    for (int i = 0; i < 80; i++) {
        key_of(k, sizeof(k), "ev", i);
        assert_int_equal(check(c, k, 1 << 20, 300 + (uint64_t)i), 1);
    }
    assert_true(dst_stat(&W, "l2.reads") > 0);
    /* DEL removes the L2 copy too */
    key_of(k, sizeof(k), "ev", 0);
    const char *keys[1] = {k};
    assert_int_equal(ds_kv_del(c, 1, keys, NULL), DS_K_OK);
    assert_int_equal(check(c, k, 1 << 20, 300), 0);
    wait_drained();
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(check(c, k, 1 << 20, 300), 0);
    key_of(k, sizeof(k), "ev", 1);
    assert_int_equal(check(c, k, 1 << 20, 301), 1);
    ds_client_close(c);
    finish();
}

static void test_nx_ttl(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(put(c, "nx1", 500, 1, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(put(c, "ttl1", 500, 2, DS_WRITE_THROUGH_L2_CACHE, 1, DS_EXISTENCE_NONE),
                     DS_K_OK);
    /* a cache-only overwrite drops the stale L2 copy */
    assert_int_equal(put(c, "ow1", 500, 3, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(put(c, "ow1", 600, 4, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE), DS_K_OK);
    /* EXPIRE reaches the L2 copy: a TTL set later, and one cleared */
    assert_int_equal(put(c, "exp1", 500, 5, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(put(c, "exp2", 500, 6, DS_WRITE_BACK_L2_CACHE, 1, DS_EXISTENCE_NONE), DS_K_OK);
    const char *e1[1] = {"exp1"}, *e2[1] = {"exp2"};
    assert_int_equal(ds_kv_expire(c, 1, e1, 1, NULL), DS_K_OK);
    assert_int_equal(ds_kv_expire(c, 1, e2, 0, NULL), DS_K_OK);
    wait_drained();
    ds_client_close(c);
    dst_worker_kill(&W);
    usleep(1200000);
    assert_int_equal(dst_worker_restart(&W), 0);
    /* nx1 and exp2 are left: ttl1 and exp1 expired, ow1 deleted */
    assert_true(dst_stat(&W, "l2.objects") == 2);
    c = conn(DS_TRANSPORT_TCP);
    /* NX sees the L2 copy: success, old value kept */
    assert_int_equal(put(c, "nx1", 900, 9, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NX), DS_K_OK);
    assert_int_equal(check(c, "nx1", 500, 1), 1);
    bool ex[2] = {false, false};
    const char *keys[2] = {"nx1", "ttl1"};
    assert_int_equal(ds_kv_exist(c, 2, keys, ex), DS_K_OK);
    assert_true(ex[0]);
    assert_false(ex[1]);
    assert_int_equal(check(c, "ttl1", 500, 2), 0);
    assert_int_equal(check(c, "ow1", 600, 4), 0);
    assert_int_equal(check(c, "exp1", 500, 5), 0);
    assert_int_equal(check(c, "exp2", 500, 6), 1);
    if (!tier_dd()) { /* the start-up scan deleted the expired file */
        char path[400];
        snprintf(path, sizeof(path), "%s/l2/ttl1", dir);
        assert_int_equal(access(path, F_OK), -1);
    }
    ds_client_close(c);
    finish();
}

static void test_dir_gone(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(put(c, "keep1", 4000, 11, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    /* the directory disappears (root ignores permissions, so this stands in
     * for a read-only or unmounted file system) */
    assert_int_equal(dst_sh("rm -rf %s/l2", dir), 0);
    ds_status_t st = put(c, "new1", 4000, 12, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE);
    assert_int_equal(st, DS_K_IO_ERROR);
    printf("write-through with the directory gone: %s\n", ds_last_error());
    assert_non_null(strstr(ds_last_error(), dir));
    assert_non_null(strstr(ds_last_error(), "errno"));
    assert_int_equal(check(c, "keep1", 4000, 11), 1);
    assert_int_equal(put(c, "mem1", 4000, 13, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(check(c, "mem1", 4000, 13), 1);
    assert_true(dst_stat(&W, "l2.errors") >= 1);
    ds_client_close(c);
    finish();
}

static void test_torn_file(void **state)
{
    (void)state;
    if (tier_dd()) skip();
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(put(c, "torn1", 100000, 21, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(put(c, "flip1", 100000, 22, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(put(c, "good1", 100000, 23, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    ds_client_close(c);
    dst_worker_kill(&W);
    char path[400];
    snprintf(path, sizeof(path), "%s/l2/torn1", dir);
    assert_int_equal(truncate(path, 50000), 0);
    /* same size, one value byte changed: only the checksum can tell */
    assert_int_equal(dst_sh("printf 'Z' | dd of=%s/l2/flip1 bs=1 seek=70000 conv=notrunc "
                            "status=none",
                            dir),
                     0);
    assert_int_equal(dst_sh("echo foreign > %s/l2/foreign1", dir), 0);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(check(c, "torn1", 100000, 21), 0);
    assert_int_equal(check(c, "flip1", 100000, 22), 0);
    assert_int_equal(check(c, "foreign1", 7, 0), 0);
    assert_int_equal(check(c, "good1", 100000, 23), 1);
    assert_true(dst_stat(&W, "l2.errors") >= 1);
    ds_client_close(c);
    finish();
}

/* distributed_disk: a record cut short at the end of the log (a crash
 * mid-append) is truncated at restart, and so is garbage after the last
 * record; a record whose value changed in the middle of the log is skipped;
 * the records around them are served. */
static void test_torn_record(void **state)
{
    (void)state;
    if (!tier_dd()) skip();
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    const char *keys[4] = {"good1", "flip1", "good2", "torn1"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(put(c, keys[i], 100000, 30 + (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE, 0,
                             DS_EXISTENCE_NONE),
                         DS_K_OK);
    ds_client_close(c);
    dst_worker_kill(&W);
    char path[400];
    dd_log_path(path, sizeof(path), NULL);
    struct stat st;
    const off_t rec = 64 + 5 + 100000; /* header, key, value */
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 64 + 4 * rec);
    /* one value byte of the second record: only its checksum can tell */
    assert_int_equal(dst_sh("printf 'Z' | dd of=%s bs=1 seek=%lld conv=notrunc status=none", path,
                            (long long)(64 + rec + 64 + 5 + 70000)),
                     0);
    assert_int_equal(truncate(path, 64 + 4 * rec - 50000), 0);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_true(dst_stat(&W, "l2.torn_bytes") == (double)(rec - 50000));
    assert_true(dst_stat(&W, "l2.objects") == 2);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 64 + 3 * rec);
    c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(check(c, "good1", 100000, 30), 1);
    assert_int_equal(check(c, "flip1", 100000, 31), 0);
    assert_int_equal(check(c, "good2", 100000, 32), 1);
    assert_int_equal(check(c, "torn1", 100000, 33), 0);
    /* a later write lands after the cut, and survives a kill; then garbage */
    assert_int_equal(put(c, "after1", 5000, 34, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_sh("printf 'garbage' >> %s", path), 0);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_true(dst_stat(&W, "l2.torn_bytes") == 7);
    c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(check(c, "after1", 5000, 34), 1);
    assert_int_equal(check(c, "good2", 100000, 32), 1);
    ds_client_close(c);
    finish();
}

/* Spill: a 32 MiB arena takes 80 MiB of objects that cannot be evicted;
 * every one reads back intact, through TCP and zero-copy. */
static void test_spill(void **state)
{
    (void)state;
    if (tier_dd()) skip(); /* no L2 involved: run once, with sfs */
    snprintf(dir, sizeof(dir), "/tmp/ds-it-tier-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char extra[512];
    snprintf(extra, sizeof(extra), "--spill_directory %s/spill --spill_size_limit 268435456", dir);
    assert_int_equal(dst_worker_start(&W, 32, extra), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    int retries = 0;
    for (int i = 0; i < 80; i++) {
        key_of(k, sizeof(k), "sp", i);
        ds_status_t st = DS_K_OUT_OF_MEMORY;
        for (int tries = 0; tries < 300 && st == DS_K_OUT_OF_MEMORY; tries++) {
            st =
                put(c, k, 1 << 20, 600 + (uint64_t)i, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE);
            if (st == DS_K_OUT_OF_MEMORY) {
                assert_non_null(strstr(ds_last_error(), "spill"));
                retries++;
                usleep(10000);
            }
        }
        assert_int_equal(st, DS_K_OK);
    }
    printf("spill: 80 MiB through a 32 MiB arena, %d writes retried, %g objects spilled\n", retries,
           dst_stat(&W, "spill.objects"));
    assert_true(dst_stat(&W, "spill.writes") > 0);
    for (int i = 0; i < 80; i++) {
        key_of(k, sizeof(k), "sp", i);
        assert_int_equal(check(c, k, 1 << 20, 600 + (uint64_t)i), 1);
    }
    assert_true(dst_stat(&W, "spill.reads") > 0);
    ds_client_close(c);
    c = conn(DS_TRANSPORT_LOCAL);
    for (int i = 0; i < 80; i += 7) {
        key_of(k, sizeof(k), "sp", i);
        const char *keys[1] = {k};
        ds_buffer_t *b[1] = {NULL};
        assert_int_equal(ds_kv_get_buffers(c, 1, keys, 0, b), DS_K_OK);
        assert_true(dst_check(ds_buffer_data(b[0]), 1 << 20, 600 + (uint64_t)i));
        ds_buffer_release(b[0]);
    }
    /* DEL reaches a spilled copy */
    key_of(k, sizeof(k), "sp", 1);
    const char *keys[1] = {k};
    assert_int_equal(ds_kv_del(c, 1, keys, NULL), DS_K_OK);
    assert_int_equal(check(c, k, 1 << 20, 601), 0);
    ds_client_close(c);
    finish();
}

static void test_bad_flags(void **state)
{
    (void)state;
    dst_worker_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(dst_worker_start(&w, 16, "--l2_cache_type obs"), -1);
    memset(&w, 0, sizeof(w));
    assert_int_equal(dst_worker_start(&w, 16, "--l2_cache_type sfs"), -1); /* no --sfs_path */
    memset(&w, 0, sizeof(w));
    assert_int_equal(dst_worker_start(&w, 16, "--l2_cache_type distributed_disk"), -1);
    memset(&w, 0, sizeof(w));
    assert_int_equal(dst_worker_start(&w, 16,
                                      "--l2_cache_type distributed_disk --distributed_disk_path "
                                      "/tmp/x --distributed_disk_sync_batch_bytes 0"),
                     -1);
}

/* it_tier [sfs|distributed_disk]: the L2 backend the tests run on. */
int main(int argc, char **argv)
{
    if (argc > 1) tier_backend = argv[1];
    if (strcmp(tier_backend, "sfs") != 0 && !tier_dd()) {
        fprintf(stderr, "usage: it_tier [sfs|distributed_disk]\n");
        return 2;
    }
    printf("it_tier: L2 backend %s\n", tier_backend);
    if (getenv("DS_TEST_WORKER")) {
        printf("it_tier restarts workers: skipped with DS_TEST_WORKER\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_through_kill), cmocka_unit_test(test_write_back),
        cmocka_unit_test(test_evict_and_reload),   cmocka_unit_test(test_nx_ttl),
        cmocka_unit_test(test_dir_gone),           cmocka_unit_test(test_torn_file),
        cmocka_unit_test(test_torn_record),        cmocka_unit_test(test_spill),
        cmocka_unit_test(test_bad_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
