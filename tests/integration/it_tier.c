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

#include "common/clock.h"
#include "common/hash.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
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
    assert_int_equal(start(8, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    /* 80 MiB of write-back-evict values through a 32 MiB arena: a write
     * that finds the arena full waits for queued write-backs to make their
     * objects evictable (no retries) */
    for (int i = 0; i < 80; i++) {
        key_of(k, sizeof(k), "ev", i);
        ds_status_t st = put(c, k, 1 << 20, 300 + (uint64_t)i, DS_WRITE_BACK_L2_CACHE_EVICT, 0,
                             DS_EXISTENCE_NONE);
        if (st != DS_K_OK) fprintf(stderr, "write %d: %d %s\n", i, st, ds_last_error());
        assert_int_equal(st, DS_K_OK);
    }
    wait_drained();
    printf("write-back-evict through a small arena: %g writes waited for room, %g evictions\n",
           dst_stat(&W, "l2.room_waits"), dst_stat(&W, "objects.evictions"));
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

/* A file in the first sfs format (magic DSSFS01, ds__sum64 over the
 * value), as an earlier build wrote it. */
static void write_v1_file(const char *path, const char *key, const void *val, uint64_t size)
{
    uint8_t h[64];
    memset(h, 0, sizeof(h));
    memcpy(h, "DSSFS01\n", 8);
    uint32_t hl = 64, kl = (uint32_t)strlen(key);
    uint64_t version = 1, ttl = 0, vs = ds__sum64(DS_SUM64_SEED, val, size);
    memcpy(h + 8, &hl, 4);
    memcpy(h + 12, &kl, 4);
    memcpy(h + 16, &size, 8);
    memcpy(h + 24, &version, 8);
    memcpy(h + 32, &ttl, 8);
    h[40] = DS_WRITE_THROUGH_L2_CACHE;
    memcpy(h + 48, &vs, 8);
    uint64_t hs = ds__sum64(ds__sum64(DS_SUM64_SEED, h, 56), key, kl);
    memcpy(h + 56, &hs, 8);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(h, 1, 64, f), 64);
    assert_int_equal(fwrite(key, 1, kl, f), kl);
    assert_int_equal(fwrite(val, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
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
    /* a file of the first format is still served */
    void *v1 = malloc(100003);
    assert_non_null(v1);
    dst_fill(v1, 100003, 24);
    snprintf(path, sizeof(path), "%s/l2/v1key", dir);
    write_v1_file(path, "v1key", v1, 100003);
    free(v1);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(check(c, "torn1", 100000, 21), 0);
    /* its header is intact, so the scan listed it; the read finds the damage */
    void *fv = NULL;
    size_t fn = 0;
    assert_int_equal(ds_kv_get(c, "flip1", 0, &fv, &fn), DS_K_NOT_FOUND_IN_L2CACHE);
    assert_int_equal(check(c, "foreign1", 7, 0), 0);
    assert_int_equal(check(c, "good1", 100000, 23), 1);
    assert_int_equal(check(c, "v1key", 100003, 24), 1);
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

/* A copy the index lists but the disk no longer holds intact (the sfs file
 * removed, or the distributed_disk record's value damaged, after the
 * worker indexed it): the get answers K_NOT_FOUND_IN_L2CACHE naming the key
 * (Yuanrong's code for an object its metadata lists but its L2 lacks), the
 * entry is dropped (the next get: K_NOT_FOUND), other keys are served. */
static void test_l2_copy_lost(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(put(c, "kept1", 100000, 41, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(put(c, "lost1", 100000, 42, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    char path[512];
    if (tier_dd()) { /* lost1 was written last: the log's last byte is its value's */
        dd_log_path(path, sizeof(path), NULL);
        assert_int_equal(dst_sh("printf 'Z' | dd of=%s bs=1 seek=$(($(stat -c %%s %s) - 1)) "
                                "conv=notrunc status=none",
                                path, path),
                         0);
    } else {
        assert_int_equal(dst_sh("rm %s/l2/lost1", dir), 0);
    }
    c = conn(DS_TRANSPORT_TCP);
    void *v = NULL;
    size_t n = 0;
    assert_int_equal(ds_kv_get(c, "lost1", 0, &v, &n), DS_K_NOT_FOUND_IN_L2CACHE);
    printf("get of a lost L2 copy: %s\n", ds_last_error());
    assert_non_null(strstr(ds_last_error(), "'lost1'"));
    assert_non_null(strstr(ds_last_error(), "cannot be read"));
    assert_int_equal(ds_kv_get(c, "lost1", 0, &v, &n), DS_K_NOT_FOUND);
    assert_int_equal(check(c, "kept1", 100000, 41), 1);
    ds_client_close(c);
    finish();
}

/* Objects only on disk (after a restart): EXPIRE sets their deadline (the
 * L2 file is rewritten with it, so a restart honours it too), and a GET
 * that loads one still waits, as asked, for a key not yet written. */
static void *write_later(void *arg)
{
    ds_client_t *c = arg;
    usleep(300000);
    ds_status_t st = put(c, "later1", 3000, 77, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE);
    return (void *)(intptr_t)st;
}

static void test_disk_only(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    const char *names[] = {"do-ttl", "do-ttl-restart", "do-keep", "do-wait"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(put(c, names[i], 5000, 50 + (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE, 0,
                             DS_EXISTENCE_NONE),
                         DS_K_OK);
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_true(dst_stat(&W, "objects.count") == 0); /* memory is empty, L2 holds all four */
    c = conn(DS_TRANSPORT_TCP);
    /* EXPIRE of keys only on disk */
    const char *ek[2] = {"do-ttl", "do-ttl-restart"};
    ds_status_t sts[2];
    assert_int_equal(ds_kv_expire(c, 2, ek, 1, sts), DS_K_OK);
    assert_int_equal(sts[0], DS_K_OK);
    assert_int_equal(sts[1], DS_K_OK);
    const char *missing[1] = {"do-never-written"};
    assert_int_equal(ds_kv_expire(c, 1, missing, 1, sts), DS_K_NOT_FOUND);
    wait_drained();                                    /* the file is rewritten with its deadline */
    assert_int_equal(check(c, "do-ttl", 5000, 50), 1); /* still there for now */
    usleep(1300000);
    assert_int_equal(check(c, "do-ttl", 5000, 50), 0);
    /* "do-ttl-restart" was never loaded: only its file knows the deadline */
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(check(c, "do-ttl-restart", 5000, 51), 0);
    assert_int_equal(check(c, "do-keep", 5000, 52), 1);
    /* A GET of a key on disk and one not yet written waits for the second. */
    ds_client_t *c2 = conn(DS_TRANSPORT_TCP);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, write_later, c2), 0);
    const char *gk[2] = {"do-wait", "later1"};
    ds_value_t out[2];
    memset(out, 0, sizeof(out));
    uint64_t t0 = ds__now_ms();
    assert_int_equal(ds_kv_mget(c, 2, gk, 5000, out), DS_K_OK);
    uint64_t took = ds__now_ms() - t0;
    void *rv;
    pthread_join(th, &rv);
    assert_int_equal((intptr_t)rv, DS_K_OK);
    printf("GET of a disk-only key and a later one: answered after %llu ms\n",
           (unsigned long long)took);
    assert_true(took >= 250 && took < 4000);
    assert_int_equal(out[0].len, 5000);
    assert_true(dst_check(out[0].data, 5000, 53));
    assert_int_equal(out[1].len, 3000);
    assert_true(dst_check(out[1].data, 3000, 77));
    ds_free(out[0].data);
    ds_free(out[1].data);
    ds_client_close(c2);
    ds_client_close(c);
    finish();
}

/* Write-back coalescing: a key written back many times in a row is
 * persisted as its latest value, older queued writes skipped; after a
 * SIGKILL and restart the last acknowledged value is what reads back. */
static void test_write_back_coalesced(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    const int n = 300;
    for (int i = 0; i < n; i++) {
        ds_status_t st;
        while ((st = put(c, "hot", 4096, 5000 + (uint64_t)i, DS_WRITE_BACK_L2_CACHE, 0,
                         DS_EXISTENCE_NONE)) == DS_K_WRITE_BACK_QUEUE_FULL)
            usleep(1000);
        assert_int_equal(st, DS_K_OK);
    }
    wait_drained();
    double coalesced = dst_stat(&W, "l2.coalesced"), writes = dst_stat(&W, "l2.writes");
    printf("write-back of one key %d times: %g files written, %g queued writes skipped\n", n,
           writes, coalesced);
    assert_true(coalesced > 0);
    assert_true(writes + coalesced == n);
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    assert_int_equal(check(c, "hot", 4096, 5000 + (uint64_t)n - 1), 1);
    ds_client_close(c);
    finish();
}

/* What du counts for a directory, in bytes (allocated blocks). */
static double du_bytes(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "du -s -B1 %s", path);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    double v = -1;
    assert_int_equal(fscanf(f, "%lf", &v), 1);
    pclose(f);
    return v;
}

/* Spill (the "Must show"): a 32 MiB arena takes four times its size
 * in NONE_L2_CACHE objects, which cannot be evicted. No write fails: each
 * that finds the arena full waits while spills make room. du of the spill
 * directory stays under --spill_size_limit throughout; K_OUT_OF_MEMORY comes
 * only once both tiers are full, naming both figures; every object reads
 * back intact (every byte checked), through TCP and zero-copy. */
#define SPILL_LIMIT 117440512.0 /* 112 MiB */
static void test_spill(void **state)
{
    (void)state;
    if (tier_dd()) skip(); /* no L2 involved: run once, with sfs */
    snprintf(dir, sizeof(dir), "/tmp/ds-it-tier-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char extra[512], sdir[300];
    snprintf(sdir, sizeof(sdir), "%s/spill", dir);
    snprintf(extra, sizeof(extra), "--spill_directory %s --spill_size_limit %.0f", sdir,
             SPILL_LIMIT);
    assert_int_equal(dst_worker_start(&W, 32, extra), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    double du_max = 0;
    const int n = 128; /* 4 x 32 MiB */
    for (int i = 0; i < n; i++) {
        key_of(k, sizeof(k), "sp", i);
        ds_status_t st =
            put(c, k, 1 << 20, 600 + (uint64_t)i, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE);
        if (st != DS_K_OK) fprintf(stderr, "write %d: %d %s\n", i, st, ds_last_error());
        assert_int_equal(st, DS_K_OK);
        if (i % 8 == 7) {
            double du = du_bytes(sdir);
            if (du > du_max) du_max = du;
            assert_true(du <= SPILL_LIMIT);
        }
    }
    printf("spill: %d MiB through a 32 MiB arena: %g writes waited for room, %g objects "
           "spilled, du peak %.0f of %.0f\n",
           n, dst_stat(&W, "spill.waits"), dst_stat(&W, "spill.objects"), du_max, SPILL_LIMIT);
    assert_true(dst_stat(&W, "spill.writes") >= n - 32);
    /* Past both tiers: K_OUT_OF_MEMORY, naming the arena's and the spill's figures. */
    int more = 0;
    ds_status_t st = DS_K_OK;
    for (; more < 64 && st == DS_K_OK; more++) {
        key_of(k, sizeof(k), "over", more);
        st = put(c, k, 1 << 20, 900 + (uint64_t)more, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE);
        assert_true(du_bytes(sdir) <= SPILL_LIMIT);
    }
    assert_int_equal(st, DS_K_OUT_OF_MEMORY);
    printf("after %d more: %s\n", more - 1, ds_last_error());
    assert_non_null(strstr(ds_last_error(), "memory: "));
    assert_non_null(strstr(ds_last_error(), "of 33554432 bytes used"));
    assert_non_null(strstr(ds_last_error(), sdir));
    assert_non_null(strstr(ds_last_error(), "of 117440512 bytes used"));
    /* both really are full: another object fits neither */
    assert_true(dst_stat(&W, "spill.disk_bytes") + (1 << 20) + 4096 > SPILL_LIMIT - 65536);
    assert_true(dst_stat(&W, "arena.used_bytes") + (1 << 20) > dst_stat(&W, "arena.total_bytes"));
    /* the extra keys go (room to swap), and everything acknowledged reads back */
    for (int i = 0; i < more - 1; i++) {
        key_of(k, sizeof(k), "over", i);
        const char *keys[1] = {k};
        assert_int_equal(ds_kv_del(c, 1, keys, NULL), DS_K_OK);
    }
    for (int i = 0; i < n; i++) {
        key_of(k, sizeof(k), "sp", i);
        assert_int_equal(check(c, k, 1 << 20, 600 + (uint64_t)i), 1);
    }
    assert_true(dst_stat(&W, "spill.reads") > 0);
    assert_true(du_bytes(sdir) <= SPILL_LIMIT);
    ds_client_close(c);
    c = conn(DS_TRANSPORT_LOCAL);
    for (int i = 0; i < n; i += 7) {
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

/* Background eviction: volatile objects written past
 * --eviction_high_watermark_ratio are evicted between requests down to
 * --eviction_low_watermark_ratio, with no write failing. */
static void test_background_eviction(void **state)
{
    (void)state;
    if (tier_dd()) skip(); /* its own worker, independent of the L2 backend: run once */
    dst_worker_t w;
    memset(&w, 0, sizeof(w));
    assert_int_equal(dst_worker_start(&w, 32,
                                      "--eviction_high_watermark_ratio 0.5 "
                                      "--eviction_low_watermark_ratio 0.3"),
                     0);
    ds_client_t *c = dst_connect(&w, DS_TRANSPORT_TCP);
    assert_non_null(c);
    char k[64];
    for (int i = 0; i < 24; i++) {
        key_of(k, sizeof(k), "ev", i);
        assert_int_equal(
            put(c, k, 1 << 20, (uint64_t)i, DS_WRITE_NONE_L2_CACHE_EVICT, 0, DS_EXISTENCE_NONE),
            DS_K_OK);
    }
    double total = dst_stat(&w, "arena.total_bytes");
    double used = dst_stat(&w, "arena.used_bytes");
    printf("background eviction: arena %.0f of %.0f used, %g evicted in the background\n", used,
           total, dst_stat(&w, "objects.background_evictions"));
    assert_true(dst_stat(&w, "objects.background_evictions") > 0);
    assert_true(used <= 0.5 * total);
    /* the newest survive */
    key_of(k, sizeof(k), "ev", 23);
    assert_int_equal(check(c, k, 1 << 20, 23), 1);
    ds_client_close(c);
    assert_int_equal(dst_worker_stop(&w), 0);
}

/* `dscli status` shows each tier: objects, bytes, reads, writes, queue
 * depth and errors, for the L2 and the spill directory. */
static void test_dscli_status(void **state)
{
    (void)state;
    if (tier_dd()) skip(); /* its own worker, independent of the L2 backend: run once */
    snprintf(dir, sizeof(dir), "/tmp/ds-it-tier-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char extra[800];
    snprintf(extra, sizeof(extra),
             "--l2_cache_type sfs --sfs_path %s/l2 --spill_directory %s/spill "
             "--spill_size_limit 268435456",
             dir, dir);
    assert_int_equal(dst_worker_start(&W, 32, extra), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    for (int i = 0; i < 3; i++) {
        key_of(k, sizeof(k), "st", i);
        assert_int_equal(
            put(c, k, 5000, (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE), DS_K_OK);
    }
    for (int i = 0; i < 40; i++) { /* past the arena: some spill */
        key_of(k, sizeof(k), "sts", i);
        assert_int_equal(
            put(c, k, 1 << 20, (uint64_t)i, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE), DS_K_OK);
    }
    for (int i = 0; i < 40; i++) {
        key_of(k, sizeof(k), "sts", i);
        assert_int_equal(check(c, k, 1 << 20, (uint64_t)i), 1);
    }
    ds_client_close(c);
    wait_drained();
    char bin[512], cmd[1024], out[300];
    dst_build_path("src/cli/dscli", bin, sizeof(bin));
    snprintf(out, sizeof(out), "%s/status.json", dir);
    snprintf(cmd, sizeof(cmd), "%s status --worker_address %s:%d > %s", bin, W.host, W.port, out);
    assert_int_equal(dst_sh("%s", cmd), 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *root = cJSON_Parse(buf);
    assert_non_null(root);
    cJSON *l2 = cJSON_GetObjectItem(root, "l2"), *sp = cJSON_GetObjectItem(root, "spill");
    assert_non_null(l2);
    assert_non_null(sp);
    const char *l2_fields[] = {"objects", "bytes", "reads", "writes", "queue_depth", "errors"};
    const char *sp_fields[] = {"objects", "bytes", "reads",      "writes",
                               "errors",  "waits", "queue_depth"};
    for (size_t i = 0; i < sizeof(l2_fields) / sizeof(l2_fields[0]); i++)
        assert_true(cJSON_IsNumber(cJSON_GetObjectItem(l2, l2_fields[i])));
    for (size_t i = 0; i < sizeof(sp_fields) / sizeof(sp_fields[0]); i++)
        assert_true(cJSON_IsNumber(cJSON_GetObjectItem(sp, sp_fields[i])));
    assert_int_equal(cJSON_GetObjectItem(l2, "objects")->valuedouble, 3);
    assert_int_equal(cJSON_GetObjectItem(l2, "bytes")->valuedouble, 15000);
    assert_int_equal(cJSON_GetObjectItem(l2, "writes")->valuedouble, 3);
    assert_true(cJSON_GetObjectItem(sp, "writes")->valuedouble > 0);
    assert_true(cJSON_GetObjectItem(sp, "reads")->valuedouble > 0);
    assert_int_equal(cJSON_GetObjectItem(l2, "queue_depth")->valuedouble, 0);
    assert_int_equal(cJSON_GetObjectItem(l2, "errors")->valuedouble, 0);
    printf("dscli status: l2 %g objects %g bytes, spill %g objects, %g writes, %g reads\n",
           cJSON_GetObjectItem(l2, "objects")->valuedouble,
           cJSON_GetObjectItem(l2, "bytes")->valuedouble,
           cJSON_GetObjectItem(sp, "objects")->valuedouble,
           cJSON_GetObjectItem(sp, "writes")->valuedouble,
           cJSON_GetObjectItem(sp, "reads")->valuedouble);
    cJSON_Delete(root);
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
    memset(&w, 0, sizeof(w));
    assert_int_equal(dst_worker_start(&w, 16,
                                      "--eviction_high_watermark_ratio 0.5 "
                                      "--eviction_low_watermark_ratio 0.6"),
                     -1);
    memset(&w, 0, sizeof(w));
    assert_int_equal(dst_worker_start(&w, 16, "--spill_low_watermark_ratio 1.5"), -1);
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
        cmocka_unit_test(test_write_through_kill),
        cmocka_unit_test(test_write_back),
        cmocka_unit_test(test_evict_and_reload),
        cmocka_unit_test(test_nx_ttl),
        cmocka_unit_test(test_dir_gone),
        cmocka_unit_test(test_torn_file),
        cmocka_unit_test(test_torn_record),
        cmocka_unit_test(test_l2_copy_lost),
        cmocka_unit_test(test_disk_only),
        cmocka_unit_test(test_write_back_coalesced),
        cmocka_unit_test(test_spill),
        cmocka_unit_test(test_background_eviction),
        cmocka_unit_test(test_dscli_status),
        cmocka_unit_test(test_bad_flags),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
