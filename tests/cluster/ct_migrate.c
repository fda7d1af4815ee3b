/* Planned exit and scale-out lose nothing (real etcd, workers on
 * 127.0.0.11-14): three workers, 240 checksummed keys of 1 KiB to 2 MiB set
 * round-robin through them; then
 *  1. `dscli stop` of worker 0 while a reader on worker 2 reads every key
 *     over and over: the reader sees no miss at any moment, dscli reports
 *     what moved, and afterwards every key reads back byte-exact through
 *     both survivors;
 *  2. a fourth worker joins while a reader on worker 1 reads every key over
 *     and over: no miss at any moment (a key its new owner does not know yet
 *     is asked of the previous owner, --enable_redirect); the new worker
 *     owns part of the metadata at once and every key reads back through
 *     all three;
 *  3. `dscli stop` of worker 1: every key reads back through worker 2 and
 *     the new one.
 * Then a subscribe-get on worker 2 waits for a key whose owner, worker 3,
 * is killed: the wait moves to the new owner and ends when the key is set.
 * It also measures the move (bytes over seconds, from the dscli report)
 * against the data plane's stream rate in the same run (one 64 MiB value
 * pulled from another worker) and, with DS_MIGRATE_BENCH_OUT set, writes
 * both to that file as JSON (bench/migrate_bench.sh). */
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

enum { NKEYS = CT_NKEYS, ARENA_MB = 320 };
#define PREFIX "mig"
#define SEED0 420000

static const char *extra_rate(void)
{
    static char rate[64];
    snprintf(rate, sizeof(rate), "--data_migrate_rate_limit_mb %d",
             atoi(getenv("DS_MIGRATE_RATE")));
    return rate;
}

static int setup(void **state)
{
    (void)state;
    const int arenas[] = {ARENA_MB, ARENA_MB, ARENA_MB};
    /* DS_MIGRATE_RATE: --data_migrate_rate_limit_mb (the bench's). */
    static char rate[64] = "";
    if (getenv("DS_MIGRATE_RATE"))
        snprintf(rate, sizeof(rate), "--data_migrate_rate_limit_mb %d",
                 atoi(getenv("DS_MIGRATE_RATE")));
    const char *extra[] = {rate, rate, rate};
    if (ct_cluster_start_with(&C, 3, arenas, extra) != 0) return -1;
    C.arena_mb[3] = ARENA_MB; /* the worker added later */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

/* Reads every key through worker w; returns how many read back right and
 * prints the first few that did not. */
static int count_ok(int w)
{
    return ct_count_on(&C, w, PREFIX, SEED0);
}

static int dscli_stop(int i, char *out, size_t cap)
{
    return ct_dscli_stop(&C.w[i], NULL, out, cap);
}

/* moved N objects (B bytes) to K workers in S s */
static bool parse_report(const char *out, double *bytes, double *secs)
{
    const char *m = strstr(out, "moved ");
    unsigned long long objs = 0, b = 0;
    int k = 0;
    return m &&
           sscanf(m, "moved %llu objects (%llu bytes) to %d workers in %lf s", &objs, &b, &k,
                  secs) == 4 &&
           (*bytes = (double)b, true);
}

/* The data plane's stream rate: a 64 MiB value set on worker `from`, read
 * through worker `to`, MiB/s (best of three). */
static double stream_rate(int from, int to)
{
    const size_t len = 64u << 20;
    ds_client_t *w = ct_client(&C, from, DS_TRANSPORT_TCP);
    ds_client_t *r = ct_client(&C, to, DS_TRANSPORT_TCP);
    double best = 0;
    if (w && r && ct_set(w, "mig-stream", len, 77) == DS_K_OK) {
        for (int t = 0; t < 3; t++) {
            uint64_t t0 = (ds__now_ns() / 1000);
            void *v = NULL;
            size_t got = 0;
            ds_status_t st = ds_kv_get(r, "mig-stream", 0, &v, &got);
            double s = (double)((ds__now_ns() / 1000) - t0) / 1e6;
            ds_free(v);
            if (st == DS_K_OK && got == len && s > 0 && len / s / (1 << 20) > best)
                best = (double)len / s / (1 << 20);
        }
        const char *k = "mig-stream";
        ds_kv_del(w, 1, &k, NULL);
    }
    if (w) ds_client_close(w);
    if (r) ds_client_close(r);
    return best;
}

static void test_scale_in_out(void **state)
{
    (void)state;
    ds_client_t *cl[3];
    for (int w = 0; w < 3; w++)
        assert_non_null(cl[w] = ct_client(&C, w, w % 2 ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL));
    assert_int_equal(ct_set_keys(cl, 3, PREFIX, SEED0), NKEYS);
    for (int w = 0; w < 3; w++)
        ds_client_close(cl[w]);
    for (int w = 0; w < 3; w++)
        assert_int_equal(count_ok(w), NKEYS);
    double stream = stream_rate(1, 2);

    /* 1. Worker 0 leaves while worker 2's client keeps reading. */
    ct_reader_t rd = {.c = &C, .worker = 2, .prefix = PREFIX, .seed0 = SEED0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ct_reader_main, &rd), 0);
    usleep(200000);
    char out[4096];
    int rc = dscli_stop(0, out, sizeof(out));
    usleep(300000);
    atomic_store(&rd.stop, true);
    pthread_join(th, NULL);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "left the cluster: moved"));
    double bytes = 0, secs = 0;
    assert_true(parse_report(out, &bytes, &secs));
    assert_non_null(strstr(out, "; 0 not moved"));
    fprintf(stderr, "reader on worker 2: %ld reads during the exit, %ld misses%s%s\n", rd.reads,
            rd.misses, rd.misses ? ", first " : "", rd.first_miss);
    assert_int_equal(rd.misses, 0);
    assert_true(rd.reads > 0);
    assert_int_equal(ct_wait_members(&C, 2, 15000) >= 0, 1);
    assert_int_equal(count_ok(1), NKEYS);
    assert_int_equal(count_ok(2), NKEYS);

    /* 2. A fourth worker joins: it owns its share of the metadata at once. */
    ct_reader_t rj = {.c = &C, .worker = 1, .prefix = PREFIX, .seed0 = SEED0};
    assert_int_equal(pthread_create(&th, NULL, ct_reader_main, &rj), 0);
    usleep(200000);
    assert_int_equal(ct_worker_add(&C, getenv("DS_MIGRATE_RATE") ? extra_rate() : NULL), 0);
    usleep(500000);
    atomic_store(&rj.stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "reader on worker 1: %ld reads during the join, %ld misses%s%s\n", rj.reads,
            rj.misses, rj.misses ? ", first " : "", rj.first_miss);
    assert_int_equal(rj.misses, 0);
    /* Its share of the metadata, registered by the others as they see it. */
    bool owns = false;
    for (int t = 0; t < 200 && !(owns = dst_stat(&C.w[3], "cluster.owned_keys") > 0); t++)
        usleep(50000);
    assert_true(owns);
    assert_int_equal(count_ok(3), NKEYS);
    assert_int_equal(count_ok(1), NKEYS);
    assert_int_equal(count_ok(2), NKEYS);

    /* 3. Worker 1 leaves: its objects go to worker 2 and the new one. */
    rc = dscli_stop(1, out, sizeof(out));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "; 0 not moved"));
    double bytes3 = 0, secs3 = 0;
    assert_true(parse_report(out, &bytes3, &secs3));
    assert_int_equal(ct_wait_members(&C, 2, 15000) >= 0, 1);
    assert_int_equal(count_ok(2), NKEYS);
    assert_int_equal(count_ok(3), NKEYS);

    /* The figures: both moves together, against the stream rate. */
    bytes += bytes3;
    secs += secs3;
    double rate = secs > 0 ? bytes / secs / (1 << 20) : 0;
    const char *limit = getenv("DS_MIGRATE_RATE") ? getenv("DS_MIGRATE_RATE") : "40";
    fprintf(stderr,
            "migration: %.0f bytes in %.3f s = %.1f MiB/s (limit %s); data plane stream rate "
            "%.1f MiB/s\n",
            bytes, secs, rate, limit, stream);
    const char *path = getenv("DS_MIGRATE_BENCH_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f,
                "{\"keys\": %d, \"moved_bytes\": %.0f, \"move_seconds\": %.3f, "
                "\"migration_mib_s\": %.1f, \"rate_limit_mb\": %s, \"stream_mib_s\": %.1f, "
                "\"migration_over_stream\": %.3f}\n",
                NKEYS, bytes, secs, rate, limit, stream, stream > 0 ? rate / stream : 0);
        fclose(f);
    }
}

/* A GET waiting (a subscribe-get) on worker 2 for a key whose owner is
 * worker 3: worker 3 is killed; once the ring drops it the wait goes to the
 * key's new owner and ends when the key is set there. */
typedef struct {
    char key[32];
    ds_status_t st;
    bool ok;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    ds_client_t *c = ct_client(&C, 2, DS_TRANSPORT_TCP);
    if (c == NULL) return NULL;
    void *v = NULL;
    size_t len = 0;
    w->st = ds_kv_get(c, w->key, 15000, &v, &len);
    w->ok = w->st == DS_K_OK && len == 5000 && dst_check(v, len, 909);
    ds_free(v);
    ds_client_close(c);
    return NULL;
}

static void test_subscribe_owner_dies(void **state)
{
    (void)state;
    assert_true(C.w[2].pid > 0 && C.w[3].pid > 0);
    ds_client_t *c2 = ct_client(&C, 2, DS_TRANSPORT_TCP);
    assert_non_null(c2);
    /* A key worker 3 owns (found by setting and deleting candidates). */
    waiter_t w = {.st = DS_K_RUNTIME_ERROR};
    for (int k = 0; k < 64 && w.key[0] == '\0'; k++) {
        char name[32];
        snprintf(name, sizeof(name), "sub-%d", k);
        int owner = ct_set_find_owner(&C, c2, name, 10, 1);
        const char *kp = name;
        ds_kv_del(c2, 1, &kp, NULL);
        if (owner == 3) snprintf(w.key, sizeof(w.key), "%s", name);
    }
    assert_true(w.key[0] != '\0');
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    usleep(500000); /* the wait is at worker 3 now */
    dst_worker_kill(&C.w[3]);
    assert_true(ct_wait_members(&C, 1, 15000) >= 0);
    usleep(300000);
    assert_int_equal(ct_set(c2, w.key, 5000, 909), DS_K_OK);
    pthread_join(th, NULL);
    fprintf(stderr, "subscribe-get of %s across its owner's death: status %d\n", w.key, (int)w.st);
    assert_int_equal(w.st, DS_K_OK);
    assert_true(w.ok);
    ds_client_close(c2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_in_out),
        cmocka_unit_test(test_subscribe_owner_dies),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
