/* L2 directories that a neighbour can write to, against real workers: what
 * sits under an object's name is distrusted.
 *
 * - sfs, a FIFO in place of an object file (swapped in while the worker runs,
 *   and planted before a restart under a key never set): the get answers
 *   not-found at once, later write-through sets succeed, the start-up scan
 *   names the FIFO in the log, and SIGTERM stops the worker cleanly.
 * - sfs, a symbolic link to a sound object file outside the directory: never
 *   followed, never served; a set replaces the link, not its target.
 * - sfs, a directory in place of an object file: the get is a miss, a
 *   write-through set of the key moves the directory aside and succeeds.
 * - distributed_disk, a log cut to 30 bytes (inside its header): the worker
 *   starts, names the file and the offset of the tear in the log.
 * - distributed_disk, a log cut in the middle of its last record: the tear
 *   is logged naming the offset and the key lost, every record before it
 *   reads back. */
#include "harness.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_tier_util.h"

/* A client whose requests give up after 8 s, so a worker whose disk thread
 * is stuck fails the test instead of hanging it. */
static ds_client_t *conn_short(void)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = DS_TRANSPORT_TCP;
    o.unix_socket_dir = W.sockdir[0] ? W.sockdir : NULL;
    o.request_timeout_ms = 8000;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) fprintf(stderr, "connect: %s\n", ds_last_error());
    assert_non_null(c);
    return c;
}

static void wt(ds_client_t *c, const char *key, size_t len, uint64_t seed)
{
    ds_status_t st = put(c, key, len, seed, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE);
    if (st != DS_K_OK) fprintf(stderr, "set %s: %s %s\n", key, ds_status_name(st), ds_last_error());
    assert_int_equal(st, DS_K_OK);
}

/* The get of key answers a miss (whatever the miss's code), not a value, not
 * a timeout. */
static void miss(ds_client_t *c, const char *key)
{
    void *v = NULL;
    size_t n = 0;
    ds_status_t st = ds_kv_get(c, key, 0, &v, &n);
    if (st == DS_K_OK) ds_free(v);
    if (st != DS_K_NOT_FOUND && st != DS_K_NOT_FOUND_IN_L2CACHE)
        fprintf(stderr, "get %s: %s %s\n", key, ds_status_name(st), ds_last_error());
    assert_true(st == DS_K_NOT_FOUND || st == DS_K_NOT_FOUND_IN_L2CACHE);
}

/* Whether the worker's log holds text (fixed string). */
static bool logged(const char *text)
{
    char f[400];
    snprintf(f, sizeof(f), "%s/pattern", dir);
    FILE *p = fopen(f, "w");
    assert_non_null(p);
    fputs(text, p);
    fclose(p);
    bool ok = dst_sh("grep -qF -f %s %s", f, W.logpath) == 0;
    if (!ok) fprintf(stderr, "not in the worker's log: %s\n", text);
    return ok;
}

static void stop_clean(void)
{
    /* SIGTERM drains the disk queue: a stuck disk thread would need SIGKILL */
    assert_int_equal(dst_worker_stop(&W), 0);
}

static void test_sfs_fifo(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn_short();
    wt(c, "hf-a", 10000, 1);
    wt(c, "hf-keep", 10000, 2);
    ds_client_close(c);
    dst_worker_kill(&W);
    /* planted before the start, under a key never set */
    assert_int_equal(dst_sh("mkfifo %s/l2/hf-c", dir), 0);
    assert_int_equal(dst_worker_restart(&W), 0);
    /* swapped in while the worker runs, for an object it has indexed */
    assert_int_equal(dst_sh("rm %s/l2/hf-a && mkfifo %s/l2/hf-a", dir, dir), 0);
    c = conn_short();
    miss(c, "hf-a");
    miss(c, "hf-c");
    wt(c, "hf-b", 10000, 3);
    assert_int_equal(check(c, "hf-keep", 10000, 2), 1);
    wt(c, "hf-a", 20000, 4); /* the rename replaces the FIFO */
    ds_client_close(c);
    stop_clean();
    char msg[600];
    snprintf(msg, sizeof(msg), "%s/l2/hf-c: a FIFO", dir);
    assert_true(logged(msg));
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn_short();
    assert_int_equal(check(c, "hf-a", 20000, 4), 1);
    assert_int_equal(check(c, "hf-b", 10000, 3), 1);
    ds_client_close(c);
    finish();
}

static void test_sfs_symlink(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn_short();
    wt(c, "hs-a", 10000, 5);
    wt(c, "hs-b", 10000, 6);
    ds_client_close(c);
    dst_worker_kill(&W);
    /* sound object files, moved outside and linked back: before the start
     * (hs-b) and, for an object the worker has indexed, while it runs (hs-a) */
    assert_int_equal(dst_sh("mkdir %s/out && mv %s/l2/hs-b %s/out/ && ln -s %s/out/hs-b %s/l2/hs-b",
                            dir, dir, dir, dir, dir),
                     0);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_int_equal(dst_sh("mv %s/l2/hs-a %s/out/ && cp %s/out/hs-a %s/out/hs-a.orig && "
                            "ln -s %s/out/hs-a %s/l2/hs-a",
                            dir, dir, dir, dir, dir, dir),
                     0);
    c = conn_short();
    miss(c, "hs-b");
    miss(c, "hs-a");
    wt(c, "hs-a", 3000, 7);
    assert_int_equal(check(c, "hs-a", 3000, 7), 1);
    ds_client_close(c);
    /* the link was replaced; its target is as it was */
    assert_int_equal(dst_sh("test -f %s/l2/hs-a && ! test -L %s/l2/hs-a && "
                            "cmp -s %s/out/hs-a %s/out/hs-a.orig",
                            dir, dir, dir, dir),
                     0);
    stop_clean();
    char msg[600];
    snprintf(msg, sizeof(msg), "%s/l2/hs-b: a symbolic link", dir);
    assert_true(logged(msg));
    finish();
}

static void test_sfs_directory(void **state)
{
    (void)state;
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn_short();
    wt(c, "hd-a", 10000, 8);
    ds_client_close(c);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_int_equal(
        dst_sh("rm %s/l2/hd-a && mkdir %s/l2/hd-a && touch %s/l2/hd-a/theirs", dir, dir, dir), 0);
    c = conn_short();
    miss(c, "hd-a");
    wt(c, "hd-a", 5000, 9);
    assert_int_equal(check(c, "hd-a", 5000, 9), 1);
    ds_client_close(c);
    /* the neighbour's directory was moved aside, not deleted */
    assert_int_equal(
        dst_sh("test -f %s/l2/hd-a && test -f %s/l2/.rejected-hd-a-*/theirs", dir, dir), 0);
    char msg[600];
    snprintf(msg, sizeof(msg), "%s/l2/hd-a was a directory in place of an object file", dir);
    assert_true(logged(msg));
    stop_clean();
    assert_int_equal(dst_worker_restart(&W), 0);
    c = conn_short();
    assert_int_equal(check(c, "hd-a", 5000, 9), 1);
    ds_client_close(c);
    finish();
}

static void test_dd_log_cut_in_header(void **state)
{
    (void)state;
    tier_backend = "distributed_disk";
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn_short();
    wt(c, "dh-a", 10000, 10);
    wt(c, "dh-b", 10000, 11);
    ds_client_close(c);
    dst_worker_kill(&W);
    char log[400];
    dd_log_path(log, sizeof(log), NULL);
    assert_int_equal(truncate(log, 30), 0);
    assert_int_equal(dst_worker_restart(&W), 0);
    char msg[700];
    snprintf(msg, sizeof(msg), "%s: torn file header: the file ends at offset 30", log);
    assert_true(logged(msg));
    assert_true(dst_stat(&W, "l2.torn_bytes") == 30);
    c = conn_short();
    assert_int_equal(check(c, "dh-a", 10000, 10), 0);
    wt(c, "dh-c", 10000, 12);
    ds_client_close(c);
    stop_clean();
    finish();
    tier_backend = "sfs";
}

static void test_dd_log_cut_mid_record(void **state)
{
    (void)state;
    tier_backend = "distributed_disk";
    assert_int_equal(start(64, NULL), 0);
    ds_client_t *c = conn_short();
    wt(c, "dm-a", 4096, 13);
    wt(c, "dm-b", 70000, 14);
    wt(c, "dm-last", 100000, 15);
    ds_client_close(c);
    dst_worker_kill(&W);
    char log[400];
    struct stat st;
    dd_log_path(log, sizeof(log), NULL);
    assert_int_equal(stat(log, &st), 0);
    off_t cut = st.st_size - 50000; /* in the middle of dm-last's value */
    assert_int_equal(truncate(log, cut), 0);
    assert_int_equal(dst_worker_restart(&W), 0);
    /* the last record starts 64 + 7 + 100000 bytes before the old end */
    char msg[700];
    snprintf(msg, sizeof(msg), "%s: torn tail at offset %lld", log,
             (long long)(st.st_size - 64 - 7 - 100000));
    assert_true(logged(msg));
    assert_true(logged("the record of 'dm-last' lost); the 2 intact records before it kept"));
    c = conn_short();
    assert_int_equal(check(c, "dm-a", 4096, 13), 1);
    assert_int_equal(check(c, "dm-b", 70000, 14), 1);
    assert_int_equal(check(c, "dm-last", 100000, 15), 0);
    wt(c, "dm-next", 1000, 16);
    ds_client_close(c);
    stop_clean();
    finish();
    tier_backend = "sfs";
}

int main(void)
{
    if (getenv("DS_TEST_WORKER")) {
        printf("it_tier_hostile restarts workers: skipped with DS_TEST_WORKER\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sfs_fifo),
        cmocka_unit_test(test_sfs_symlink),
        cmocka_unit_test(test_sfs_directory),
        cmocka_unit_test(test_dd_log_cut_in_header),
        cmocka_unit_test(test_dd_log_cut_mid_record),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
