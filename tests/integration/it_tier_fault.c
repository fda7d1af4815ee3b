/* Storage-tier faults against real workers (the "Must show"): the
 * L2 directory becomes read-only mid-run, the L2 or spill file system
 * fills up. Each directory is a small tmpfs mounted in this test's own
 * mount namespace (unshare(CLONE_NEWNS), private propagation: the workers it
 * starts see the mounts, nothing outside does, and they go when it exits).
 * Tests run as root, which permissions do not stop, so a read-only remount
 * stands in for a read-only file system. Without root (or without mount
 * namespaces) the tests are skipped.
 *
 * - Read-only: write-through answers K_IO_ERROR naming the path and errno;
 *   write-back is acknowledged and its failed write counted in l2.errors,
 *   then retried until the file system is writable again; a DEL or a
 *   cache-only overwrite whose L2 copy cannot be deleted answers K_IO_ERROR;
 *   the worker keeps serving memory; after a SIGKILL and restart every
 *   object acknowledged before the fault reads back intact.
 * - L2 full: K_IO_ERROR with ENOSPC and the path, no temporary file left
 *   behind, writes succeed again once a DEL makes room; nothing
 *   acknowledged is lost across a restart.
 * - Spill full (a file system smaller than --spill_size_limit): spilling
 *   plans within what the file system has free; writes that cannot get
 *   room fail with K_OUT_OF_MEMORY naming the figures of both tiers and
 *   the file system's free space, and nothing acknowledged is lost: every
 *   object reads back intact once DELs make room to bring spilled ones back. */
#include "harness.h"

#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_tier_util.h"

static char mnt[300];
static bool can_mount;

static void mount_tmpfs(const char *path, const char *size)
{
    assert_int_equal(mkdir(path, 0755), 0);
    char opt[64];
    snprintf(opt, sizeof(opt), "size=%s", size);
    assert_int_equal(mount("tmpfs", path, "tmpfs", 0, opt), 0);
}

static void setup_dir(const char *size)
{
    snprintf(dir, sizeof(dir), "/tmp/ds-it-tierf-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(mnt, sizeof(mnt), "%s/fs", dir);
    mount_tmpfs(mnt, size);
}

/* cmocka runs it after each test, also one that failed half-way. */
static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (W.pid > 0 && dst_worker_stop(&W) != 0) rc = -1; /* a clean stop exits 0 */
    memset(&W, 0, sizeof(W));
    if (mnt[0] && umount(mnt) != 0) fprintf(stderr, "umount %s: %s\n", mnt, strerror(errno));
    if (dir[0]) dst_sh("rm -rf %s", dir);
    mnt[0] = dir[0] = '\0';
    return rc;
}

static int count_tmp_files(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "ls -A %s | grep -c '^\\.tmp-'", path);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    int n = -1;
    if (fscanf(f, "%d", &n) != 1) n = -1;
    pclose(f);
    return n;
}

static void test_l2_read_only(void **state)
{
    (void)state;
    if (!can_mount) skip();
    setup_dir("64m");
    char extra[512];
    snprintf(extra, sizeof(extra), "--l2_cache_type sfs --sfs_path %s", mnt);
    assert_int_equal(dst_worker_start(&W, 64, extra), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "ro-wt-%d", i);
        assert_int_equal(
            put(c, k, 100000, 10 + (uint64_t)i, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
            DS_K_OK);
    }
    for (int i = 0; i < 5; i++) {
        snprintf(k, sizeof(k), "ro-wb-%d", i);
        assert_int_equal(
            put(c, k, 100000, 30 + (uint64_t)i, DS_WRITE_BACK_L2_CACHE, 0, DS_EXISTENCE_NONE),
            DS_K_OK);
    }
    wait_drained();
    double errors0 = dst_stat(&W, "l2.errors");
    /* the file system turns read-only under the running worker */
    assert_int_equal(mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, "size=64m"), 0);
    ds_status_t st = put(c, "ro-new", 100000, 50, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE);
    printf("write-through on a read-only L2: %s\n", ds_last_error());
    assert_int_equal(st, DS_K_IO_ERROR);
    assert_non_null(strstr(ds_last_error(), mnt));
    assert_non_null(strstr(ds_last_error(), "errno 30"));
    /* write-back is acknowledged (memory), its failed write counted */
    assert_int_equal(put(c, "ro-wb-late", 100000, 51, DS_WRITE_BACK_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    wait_drained();
    printf("l2.errors %g -> %g\n", errors0, dst_stat(&W, "l2.errors"));
    assert_true(dst_stat(&W, "l2.errors") >= errors0 + 2);
    /* the failed write-back waits to be tried again */
    assert_true(dst_stat(&W, "l2.retry_pending") == 1);
    /* one waiting write-back is overwritten, another deleted: only the
     * overwrite's value is retried, the deleted key never comes back */
    assert_int_equal(put(c, "ro-wb-over", 100000, 53, DS_WRITE_BACK_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(put(c, "ro-wb-del", 100000, 54, DS_WRITE_BACK_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    wait_drained();
    assert_int_equal(put(c, "ro-wb-over", 100000, 55, DS_WRITE_BACK_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    const char *del[] = {"ro-wb-del"};
    assert_int_equal(ds_kv_del(c, 1, del, NULL), DS_K_OK);
    wait_drained();
    /* the worker keeps serving memory: old, new and memory-only values */
    assert_int_equal(put(c, "ro-mem", 100000, 52, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(check(c, "ro-mem", 100000, 52), 1);
    assert_int_equal(check(c, "ro-new", 100000, 50), 1);
    assert_int_equal(check(c, "ro-wb-late", 100000, 51), 1);
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "ro-wt-%d", i);
        assert_int_equal(check(c, k, 100000, 10 + (uint64_t)i), 1);
    }
    /* a DEL whose L2 copy cannot go says so, and the key keeps its value
     * (read back from the L2); so does a cache-only overwrite */
    const char *gone[] = {"ro-wt-0", "ro-mem"};
    ds_status_t sts[2];
    assert_int_equal(ds_kv_del(c, 2, gone, sts), DS_K_IO_ERROR);
    printf("DEL on a read-only L2: %s\n", ds_last_error());
    assert_int_equal(sts[0], DS_K_IO_ERROR);
    assert_int_equal(sts[1], DS_K_OK);
    assert_non_null(strstr(ds_last_error(), "L2 delete of 'ro-wt-0' failed"));
    assert_non_null(strstr(ds_last_error(), "errno 30"));
    assert_int_equal(check(c, "ro-wt-0", 100000, 10), 1);
    assert_int_equal(check(c, "ro-mem", 100000, 52), 0);
    assert_int_equal(put(c, "ro-wt-1", 1000, 56, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_IO_ERROR);
    assert_non_null(strstr(ds_last_error(), "L2 delete of 'ro-wt-1' failed"));
    ds_client_close(c);
    /* writable again: the write-back is retried (backoff at most 5 s) and lands */
    double writes0 = dst_stat(&W, "l2.writes");
    assert_int_equal(mount(NULL, mnt, NULL, MS_REMOUNT, "size=64m"), 0);
    for (int i = 0;
         i < 800 && (dst_stat(&W, "l2.retry_pending") != 0 || dst_stat(&W, "l2.queue_depth") != 0);
         i++)
        usleep(10000); /* a retry leaves retry_pending when queued, then runs */
    assert_true(dst_stat(&W, "l2.retry_pending") == 0);
    assert_true(dst_stat(&W, "l2.retries") >= 1);
    assert_true(dst_stat(&W, "l2.writes") == writes0 + 2); /* ro-wb-late, ro-wb-over */
    wait_drained();
    /* nothing acknowledged is lost, the retried write-back included */
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "ro-wt-%d", i);
        assert_int_equal(check(c, k, 100000, 10 + (uint64_t)i), 1);
    }
    for (int i = 0; i < 5; i++) {
        snprintf(k, sizeof(k), "ro-wb-%d", i);
        assert_int_equal(check(c, k, 100000, 30 + (uint64_t)i), 1);
    }
    assert_int_equal(check(c, "ro-wb-late", 100000, 51), 1);
    assert_int_equal(check(c, "ro-wb-over", 100000, 55), 1);
    assert_int_equal(check(c, "ro-wb-del", 100000, 54), 0);
    assert_int_equal(check(c, "ro-new", 100000, 50), 0); /* refused: never durable */
    assert_int_equal(count_tmp_files(mnt), 0);
    ds_client_close(c);
}

static void test_l2_full(void **state)
{
    (void)state;
    if (!can_mount) skip();
    setup_dir("4m");
    char extra[512];
    snprintf(extra, sizeof(extra), "--l2_cache_type sfs --sfs_path %s", mnt);
    assert_int_equal(dst_worker_start(&W, 64, extra), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    int ok = 0;
    ds_status_t st = DS_K_OK;
    for (; ok < 10; ok++) {
        snprintf(k, sizeof(k), "full-%d", ok);
        st = put(c, k, 1 << 20, 70 + (uint64_t)ok, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE);
        if (st != DS_K_OK) break;
    }
    printf("L2 full after %d write-through MiB: %s\n", ok, ds_last_error());
    assert_true(ok >= 2 && ok < 10);
    assert_int_equal(st, DS_K_IO_ERROR);
    assert_non_null(strstr(ds_last_error(), mnt));
    assert_non_null(strstr(ds_last_error(), "errno 28"));
    assert_int_equal(count_tmp_files(mnt), 0); /* the failed write left nothing */
    /* memory keeps serving, the refused value included */
    assert_int_equal(check(c, k, 1 << 20, 70 + (uint64_t)ok), 1);
    assert_int_equal(put(c, "full-mem", 1 << 20, 99, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE),
                     DS_K_OK);
    assert_int_equal(check(c, "full-mem", 1 << 20, 99), 1);
    /* a DEL makes room: write-through works again */
    const char *dk[1] = {"full-0"};
    assert_int_equal(ds_kv_del(c, 1, dk, NULL), DS_K_OK);
    wait_drained();
    assert_int_equal(
        put(c, "full-again", 1 << 20, 98, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
        DS_K_OK);
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn(DS_TRANSPORT_TCP);
    for (int i = 1; i < ok; i++) {
        snprintf(k, sizeof(k), "full-%d", i);
        assert_int_equal(check(c, k, 1 << 20, 70 + (uint64_t)i), 1);
    }
    assert_int_equal(check(c, "full-again", 1 << 20, 98), 1);
    assert_int_equal(check(c, "full-0", 1 << 20, 70), 0);
    ds_client_close(c);
}

static void test_spill_full(void **state)
{
    (void)state;
    if (!can_mount) skip();
    setup_dir("8m"); /* smaller than the limit the worker is told */
    char extra[512];
    snprintf(extra, sizeof(extra), "--spill_directory %s --spill_size_limit 67108864", mnt);
    assert_int_equal(dst_worker_start(&W, 16, extra), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    char k[64];
    int ok = 0;
    ds_status_t st = DS_K_OK;
    for (; ok < 40; ok++) {
        snprintf(k, sizeof(k), "spf-%d", ok);
        st = put(c, k, 1 << 20, 200 + (uint64_t)ok, DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE);
        if (st != DS_K_OK) break;
    }
    printf("spill full after %d MiB: %s\n", ok, ds_last_error());
    assert_int_equal(st, DS_K_OUT_OF_MEMORY);
    assert_true(ok >= 16 && ok < 40);
    /* the message names both tiers' figures and the file system's free space */
    assert_non_null(strstr(ds_last_error(), "memory: "));
    assert_non_null(strstr(ds_last_error(), mnt));
    assert_non_null(strstr(ds_last_error(), "free on its file system"));
    printf("spill errors %g\n", dst_stat(&W, "spill.errors"));
    /* Everything acknowledged is intact, in memory or in the spill files.
     * Those in memory read back now; a spilled one needs room that neither
     * tier has (K_OUT_OF_MEMORY, never K_NOT_FOUND) until DELs of four keys
     * (read first) make some. */
    bool on_disk[40] = {false};
    int in_mem = 0, deleted = 0;
    for (int i = 0; i < ok; i++) {
        snprintf(k, sizeof(k), "spf-%d", i);
        const char *qk[1] = {k};
        uint64_t sz = 0;
        ds_status_t qs;
        ds_kv_query_size(c, 1, qk, &sz, &qs);
        on_disk[i] = qs != DS_K_OK;
        if (on_disk[i]) continue;
        in_mem++;
        assert_int_equal(check(c, k, 1 << 20, 200 + (uint64_t)i), 1);
        if (deleted < 4) {
            assert_int_equal(ds_kv_del(c, 1, qk, NULL), DS_K_OK);
            deleted++;
        }
    }
    printf("%d in memory, %d in the spill directory\n", in_mem, ok - in_mem);
    assert_true(ok - in_mem > 0 && deleted == 4);
    for (int i = 0; i < ok; i++) {
        if (!on_disk[i]) continue;
        snprintf(k, sizeof(k), "spf-%d", i);
        assert_int_equal(check(c, k, 1 << 20, 200 + (uint64_t)i), 1);
    }
    ds_client_close(c);
}

int main(void)
{
    if (getenv("DS_TEST_WORKER")) {
        printf("it_tier_fault restarts workers: skipped with DS_TEST_WORKER\n");
        return 0;
    }
    can_mount = geteuid() == 0 && unshare(CLONE_NEWNS) == 0 &&
                mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
    if (!can_mount)
        printf("it_tier_fault: no private mount namespace (%s): the tests skip\n", strerror(errno));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_l2_read_only, teardown),
        cmocka_unit_test_teardown(test_l2_full, teardown),
        cmocka_unit_test_teardown(test_spill_full, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
