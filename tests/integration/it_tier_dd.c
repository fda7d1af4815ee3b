/* The distributed_disk L2 backend's own tests, against real workers
 * (--l2_cache_type distributed_disk; it_tier runs the common ones on it too):
 *
 * - Group commit: concurrent write-through writers are all acknowledged with
 *   far fewer fsyncs than writes, and every acknowledged value survives a
 *   SIGKILL.
 * - SIGKILL during write-through traffic of mixed sizes: every acknowledged
 *   object reads back intact after a restart; the one in flight is there
 *   intact or not at all (a torn tail is cut, never served).
 * - Compaction: overwrite and delete churn shrinks the log, every live key
 *   reads back from it after a restart and deleted keys stay deleted.
 * - SIGKILL during compaction (the moment its new file appears): nothing
 *   acknowledged is lost, the leftover file is removed at restart. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_tier_util.h"

static off_t file_size(const char *file)
{
    char p[400];
    struct stat st;
    dd_log_path(p, sizeof(p), file);
    return stat(p, &st) == 0 ? st.st_size : -1;
}

/* ---- concurrent writers (no cmocka asserts off the test's thread) ---- */

#define MAX_WRITES 4000

typedef struct {
    int id;
    int nwrites;         /* 0: until stop or the first failure */
    const size_t *sizes; /* cycled */
    int nsizes;
    atomic_bool *stop;
    int acked;  /* writes 0 .. acked-1 were acknowledged */
    int failed; /* the write that failed (in flight at a kill), or -1 */
    ds_status_t st;
} writer_t;

static void wkey(char *k, size_t cap, int id, int i)
{
    snprintf(k, cap, "w%d:%d", id, i);
}

static uint64_t wseed(int id, int i)
{
    return 1000000u * (uint64_t)(id + 1) + (uint64_t)i;
}

static void *writer(void *arg)
{
    writer_t *w = arg;
    w->failed = -1;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    size_t max = 0;
    for (int i = 0; i < w->nsizes; i++)
        if (w->sizes[i] > max) max = w->sizes[i];
    uint8_t *v = malloc(max);
    if (c == NULL || v == NULL) {
        w->st = DS_K_RUNTIME_ERROR;
        free(v);
        if (c) ds_client_close(c);
        return NULL;
    }
    ds_set_param_t p = {DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE};
    for (int i = 0; i < MAX_WRITES && (w->nwrites == 0 || i < w->nwrites); i++) {
        if (w->stop && atomic_load(w->stop)) break;
        char k[64];
        wkey(k, sizeof(k), w->id, i);
        size_t n = w->sizes[i % w->nsizes];
        dst_fill(v, n, wseed(w->id, i));
        w->st = ds_kv_set(c, k, v, n, &p);
        if (w->st != DS_K_OK) {
            w->failed = i;
            break;
        }
        w->acked = i + 1;
    }
    free(v);
    ds_client_close(c);
    return NULL;
}

/* Every acknowledged write of ws reads back intact; a failed one (in flight
 * at a kill) is intact or absent. Returns how many of those were present. */
static int verify_writers(const writer_t *ws, int n)
{
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    int inflight = 0;
    for (int t = 0; t < n; t++) {
        char k[64];
        for (int i = 0; i < ws[t].acked; i++) {
            wkey(k, sizeof(k), ws[t].id, i);
            int ok = check(c, k, ws[t].sizes[i % ws[t].nsizes], wseed(ws[t].id, i));
            if (!ok) fprintf(stderr, "acknowledged %s is missing\n", k);
            assert_int_equal(ok, 1);
        }
        if (ws[t].failed >= 0) {
            int i = ws[t].failed;
            wkey(k, sizeof(k), ws[t].id, i);
            inflight += check(c, k, ws[t].sizes[i % ws[t].nsizes], wseed(ws[t].id, i));
        }
    }
    ds_client_close(c);
    return inflight;
}

static void test_group_commit(void **state)
{
    (void)state;
    assert_int_equal(start(128, NULL), 0);
    const size_t sz[1] = {4096};
    enum { THREADS = 8, EACH = 100 };
    writer_t ws[THREADS];
    pthread_t th[THREADS];
    double w0 = dst_stat(&W, "l2.writes"), f0 = dst_stat(&W, "l2.fsyncs");
    for (int t = 0; t < THREADS; t++) {
        ws[t] = (writer_t){.id = t, .nwrites = EACH, .sizes = sz, .nsizes = 1};
        assert_int_equal(pthread_create(&th[t], NULL, writer, &ws[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(ws[t].st, DS_K_OK);
        assert_int_equal(ws[t].acked, EACH);
    }
    double writes = dst_stat(&W, "l2.writes") - w0, fsyncs = dst_stat(&W, "l2.fsyncs") - f0;
    printf("group commit: %d write-through writers x %d x 4 KiB: %.0f writes, %.0f fsyncs "
           "(%.1f writes per fsync)\n",
           THREADS, EACH, writes, fsyncs, writes / (fsyncs > 0 ? fsyncs : 1));
    assert_true(writes == THREADS * EACH);
    /* Each answer waited for an fsync, shared by the writes queued with it;
     * how many were queued together is the scheduler's (test_l2_dd checks
     * the group commit itself), so only never more fsyncs than writes. */
    assert_true(fsyncs >= 1);
    assert_true(fsyncs <= writes);
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_true(dst_stat(&W, "l2.objects") == THREADS * EACH);
    verify_writers(ws, THREADS);
    finish();
}

static void test_kill_under_traffic(void **state)
{
    (void)state;
    /* write-through objects stay in memory: the arena holds all of them */
    assert_int_equal(start(1024, NULL), 0);
    const size_t sz[5] = {4096, 70000, 1 << 20, 100, 300001};
    enum { THREADS = 4 };
    writer_t ws[THREADS];
    pthread_t th[THREADS];
    atomic_bool stop = false;
    for (int t = 0; t < THREADS; t++) {
        ws[t] = (writer_t){.id = t, .sizes = sz, .nsizes = 5, .stop = &stop};
        assert_int_equal(pthread_create(&th[t], NULL, writer, &ws[t]), 0);
    }
    usleep(1000000);
    dst_worker_kill(&W);
    atomic_store(&stop, true);
    int acked = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        acked += ws[t].acked;
        /* each was still writing when the worker died */
        if (ws[t].failed < 0 || ws[t].st == DS_K_OUT_OF_MEMORY)
            fprintf(stderr, "writer %d: stopped at %d with %s\n", t, ws[t].acked,
                    ds_status_name(ws[t].st));
        assert_true(ws[t].failed >= 0 && ws[t].st != DS_K_OUT_OF_MEMORY);
    }
    assert_true(acked > 0);
    assert_int_equal(dst_worker_restart(&W), 0);
    double torn = dst_stat(&W, "l2.torn_bytes");
    int inflight = verify_writers(ws, THREADS);
    printf("SIGKILL under write-through traffic: %d acknowledged, all intact; %d of the writes in "
           "flight present (intact); torn tail cut at restart: %.0f bytes\n",
           acked, inflight, torn);
    finish();
}

static void test_compaction(void **state)
{
    (void)state;
    assert_int_equal(start(128, "--distributed_disk_compact_min_dead_mb 1"), 0);
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    enum { N = 32, PASSES = 4, DELETED = 8 };
    char k[64];
    for (int p = 0; p < PASSES; p++)
        for (int i = 0; i < N; i++) {
            key_of(k, sizeof(k), "cp", i);
            assert_int_equal(put(c, k, 1 << 20, 100 * (uint64_t)p + (uint64_t)i,
                                 DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE),
                             DS_K_OK);
        }
    for (int i = 0; i < DELETED; i++) {
        key_of(k, sizeof(k), "cp", i);
        const char *keys[1] = {k};
        assert_int_equal(ds_kv_del(c, 1, keys, NULL), DS_K_OK);
    }
    wait_drained();
    /* the deletes left more than half of the log dead: a compaction follows */
    for (int i = 0; i < 500 && dst_stat(&W, "l2.dead_bytes") * 2 > dst_stat(&W, "l2.file_bytes");
         i++)
        usleep(10000);
    double compactions = dst_stat(&W, "l2.compactions");
    off_t size = file_size(NULL);
    const double written = (double)PASSES * N * (1 << 20), live = (double)(N - DELETED) * (1 << 20);
    printf("compaction: %.0f MiB written, %.0f MiB live; log %.1f MiB after %.0f compactions, "
           "dead %.1f MiB\n",
           written / (1 << 20), live / (1 << 20), (double)size / (1 << 20), compactions,
           dst_stat(&W, "l2.dead_bytes") / (1 << 20));
    assert_true(compactions >= 1);
    assert_true((double)size < 2.0 * live + (1 << 20)); /* at most half of it dead */
    assert_true(dst_stat(&W, "l2.file_bytes") == (double)size);
    ds_client_close(c);
    /* the L2's copies, read after a restart (memory starts empty) */
    dst_worker_kill(&W);
    assert_int_equal(dst_worker_restart(&W), 0);
    assert_true(dst_stat(&W, "l2.objects") == N - DELETED);
    c = conn(DS_TRANSPORT_TCP);
    for (int i = 0; i < N; i++) {
        key_of(k, sizeof(k), "cp", i);
        assert_int_equal(check(c, k, 1 << 20, 100 * (PASSES - 1) + (uint64_t)i), i >= DELETED);
    }
    ds_client_close(c);
    finish();
}

/* Kills the worker the moment the compaction's new file appears. */
typedef struct {
    atomic_bool stop, fired;
    char path[400];
    pid_t pid;
} poller_t;

static void *poll_compaction(void *arg)
{
    poller_t *p = arg;
    while (!atomic_load(&p->stop)) {
        if (access(p->path, F_OK) == 0) {
            kill(p->pid, SIGKILL);
            atomic_store(&p->fired, true);
            return NULL;
        }
        usleep(100);
    }
    return NULL;
}

static void test_kill_during_compaction(void **state)
{
    (void)state;
    assert_int_equal(start(256, "--distributed_disk_compact_min_dead_mb 1"), 0);
    enum { N = 48, ROUNDS = 3 };
    uint64_t acked[N]; /* the last acknowledged seed of each key */
    char k[64];
    ds_client_t *c = conn(DS_TRANSPORT_TCP);
    for (int i = 0; i < N; i++) {
        key_of(k, sizeof(k), "kc", i);
        acked[i] = (uint64_t)i;
        assert_int_equal(
            put(c, k, 1 << 20, acked[i], DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE), DS_K_OK);
    }
    ds_client_close(c);
    int fired = 0;
    uint64_t seed = 1000;
    for (int r = 0; r < ROUNDS; r++) {
        poller_t p = {.pid = W.pid};
        dd_log_path(p.path, sizeof(p.path), "data.compact");
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, poll_compaction, &p), 0);
        c = conn(DS_TRANSPORT_TCP);
        /* overwrite round robin until the worker is gone (or enough churn) */
        int inflight = -1;
        uint64_t inflight_seed = 0;
        for (int n = 0; n < 6 * N; n++) {
            int i = n % N;
            key_of(k, sizeof(k), "kc", i);
            ds_status_t st =
                put(c, k, 1 << 20, ++seed, DS_WRITE_THROUGH_L2_CACHE, 0, DS_EXISTENCE_NONE);
            if (st != DS_K_OK) {
                inflight = i;
                inflight_seed = seed;
                break;
            }
            acked[i] = seed;
        }
        ds_client_close(c);
        atomic_store(&p.stop, true);
        pthread_join(th, NULL);
        fired += atomic_load(&p.fired);
        dst_worker_kill(&W);
        assert_int_equal(dst_worker_restart(&W), 0);
        assert_int_equal(file_size("data.compact"), -1); /* removed at open */
        c = conn(DS_TRANSPORT_TCP);
        for (int i = 0; i < N; i++) {
            key_of(k, sizeof(k), "kc", i);
            void *v = NULL;
            size_t len = 0;
            assert_int_equal(ds_kv_get(c, k, 0, &v, &len), DS_K_OK);
            assert_int_equal(len, 1 << 20);
            bool ok = dst_check(v, len, acked[i]);
            if (!ok && i == inflight && dst_check(v, len, inflight_seed)) {
                acked[i] = inflight_seed; /* written and synced, answer lost */
                ok = true;
            }
            ds_free(v);
            assert_true(ok);
        }
        ds_client_close(c);
        printf("round %d: %s\n", r,
               atomic_load(&p.fired) ? "killed while compacting (data.compact present)"
                                     : "no compaction seen, killed after the churn");
    }
    printf("kill during compaction: %d of %d rounds killed mid-compaction, nothing acknowledged "
           "lost\n",
           fired, ROUNDS);
    assert_true(fired >= 1);
    finish();
}

int main(void)
{
    if (getenv("DS_TEST_WORKER")) {
        printf("it_tier_dd restarts workers: skipped with DS_TEST_WORKER\n");
        return 0;
    }
    tier_backend = "distributed_disk";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_commit),
        cmocka_unit_test(test_kill_under_traffic),
        cmocka_unit_test(test_compaction),
        cmocka_unit_test(test_kill_during_compaction),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
