/* The distributed_disk L2 backend (store/l2_dd.c) on its own, in a temp
 * directory: records replayed at open (puts, overwrites, tombstones), group
 * commit (sync only when due or idle, counted), a torn tail cut at open and
 * never served, a corrupt record in the middle skipped, compaction that
 * shrinks the log and keeps every live record (and a leftover compaction
 * file removed at open), one process per log (flock), a foreign file
 * refused rather than overwritten, and an index past its first buckets
 * whose expired records scans and compaction drop. */
#include "worker/store/l2.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char root[128];
static char logp[300];
static const ds_l2_dd_opts_t opts = {1000, 1 << 20, 1 << 20, 50, 0};

static ds_l2_t *open_dd(const ds_l2_dd_opts_t *o)
{
    char err[600];
    ds_l2_t *l2 = ds__l2_dd_open(root, "c1", "127.0.0.1:9", o ? o : &opts, err, sizeof(err));
    if (l2 == NULL) fprintf(stderr, "open: %s\n", err);
    return l2;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/ds-l2dd-XXXXXX");
    if (mkdtemp(root) == NULL) return -1;
    snprintf(logp, sizeof(logp), "%s/c1/127.0.0.1_9/data.log", root);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void fill(uint8_t *v, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)(seed + i * 7);
}

static int put(ds_l2_t *l2, const char *key, size_t n, uint8_t seed)
{
    uint8_t *v = malloc(n ? n : 1);
    fill(v, n, seed);
    ds_l2_meta_t m = {n, seed, 0, 1};
    char err[600];
    int rc = l2->ops->put(l2, key, strlen(key), v, &m, err, sizeof(err));
    free(v);
    return rc;
}

/* 1 intact, 0 missing, -1 rejected */
static int get(ds_l2_t *l2, const char *key, size_t n, uint8_t seed)
{
    uint8_t *v = malloc(n + 1), *want = malloc(n + 1);
    ds_l2_meta_t m;
    char err[600];
    int rc = l2->ops->get(l2, key, strlen(key), v, n, &m, err, sizeof(err));
    fill(want, n, seed);
    int out = rc == 1 ? 0 : rc < 0 ? -1 : (m.size == n && memcmp(v, want, n) == 0) ? 1 : -2;
    free(v);
    free(want);
    return out;
}

static int sync_now(ds_l2_t *l2)
{
    char err[600];
    return l2->ops->sync(l2, true, err, sizeof(err));
}

static void count_one(void *ctx, const char *key, size_t keylen, const ds_l2_meta_t *m)
{
    (void)key;
    (void)keylen;
    (void)m;
    (*(int *)ctx)++;
}

static int count(ds_l2_t *l2)
{
    int n = 0;
    char err[64];
    assert_true(l2->ops->scan(l2, 1, count_one, &n, err, sizeof(err)) >= 0);
    return n;
}

static off_t size_of_log(void)
{
    struct stat st;
    return stat(logp, &st) == 0 ? st.st_size : -1;
}

static void test_replay(void **state)
{
    (void)state;
    ds_l2_t *l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_string_equal(l2->ops->name, "distributed_disk");
    assert_int_equal(put(l2, "a", 1000, 1), DS_L2_PENDING);
    assert_int_equal(put(l2, "b", 0, 2), DS_L2_PENDING); /* empty value */
    assert_int_equal(put(l2, "a", 3000, 3), DS_L2_PENDING);
    assert_int_equal(put(l2, "c", 10, 4), DS_L2_PENDING);
    char err[64];
    assert_int_equal(l2->ops->del(l2, "c", 1, err, sizeof(err)), DS_L2_PENDING);
    assert_int_equal(l2->ops->del(l2, "zz", 2, err, sizeof(err)), 0); /* nothing to delete */
    assert_int_equal(get(l2, "a", 3000, 3), 1);                       /* served before its sync */
    assert_int_equal(sync_now(l2), 1);
    assert_int_equal(get(l2, "c", 10, 4), 0);
    assert_int_equal(count(l2), 2);
    uint64_t dead = atomic_load(&l2->fig.dead_bytes);
    assert_int_equal(dead, (64 + 1 + 1000) + (64 + 1 + 10) + (64 + 1)); /* old a, c, tombstone */
    l2->ops->destroy(l2);
    l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_int_equal(count(l2), 2);
    assert_int_equal(get(l2, "a", 3000, 3), 1);
    assert_int_equal(get(l2, "b", 0, 2), 1);
    assert_int_equal(get(l2, "c", 10, 4), 0);
    assert_int_equal(atomic_load(&l2->fig.dead_bytes), dead);
    assert_int_equal(atomic_load(&l2->fig.torn_bytes), 0);
    l2->ops->destroy(l2);
}

static void test_group_commit(void **state)
{
    (void)state;
    ds_l2_dd_opts_t o = opts;
    o.sync_batch_bytes = 10000;
    o.sync_interval_ms = 60000;
    ds_l2_t *l2 = open_dd(&o);
    assert_non_null(l2);
    char err[600];
    assert_int_equal(l2->ops->sync(l2, false, err, sizeof(err)), 1); /* nothing pending */
    uint64_t f0 = atomic_load(&l2->fig.fsyncs);
    assert_int_equal(put(l2, "g1", 3000, 1), DS_L2_PENDING);
    assert_int_equal(l2->ops->sync(l2, false, err, sizeof(err)), 0); /* not due */
    assert_int_equal(put(l2, "g2", 3000, 2), DS_L2_PENDING);
    assert_int_equal(l2->ops->sync(l2, false, err, sizeof(err)), 0);
    assert_int_equal(atomic_load(&l2->fig.fsyncs), f0);
    assert_int_equal(put(l2, "g3", 5000, 3), DS_L2_PENDING); /* past the batch bytes */
    assert_int_equal(l2->ops->sync(l2, false, err, sizeof(err)), 1);
    assert_int_equal(atomic_load(&l2->fig.fsyncs), f0 + 1);
    assert_int_equal(put(l2, "g4", 10, 4), DS_L2_PENDING);
    assert_int_equal(l2->ops->sync(l2, true, err, sizeof(err)), 1); /* idle: at once */
    assert_int_equal(atomic_load(&l2->fig.fsyncs), f0 + 2);
    l2->ops->destroy(l2);
    /* interval 0: every sync is due */
    o.sync_interval_ms = 0;
    l2 = open_dd(&o);
    assert_non_null(l2);
    assert_int_equal(put(l2, "g5", 10, 5), DS_L2_PENDING);
    assert_int_equal(l2->ops->sync(l2, false, err, sizeof(err)), 1);
    l2->ops->destroy(l2);
}

static void test_torn_tail(void **state)
{
    (void)state;
    ds_l2_t *l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_int_equal(put(l2, "k1", 5000, 1), DS_L2_PENDING);
    assert_int_equal(put(l2, "k2", 5000, 2), DS_L2_PENDING);
    assert_int_equal(put(l2, "k3", 5000, 3), DS_L2_PENDING);
    assert_int_equal(sync_now(l2), 1);
    l2->ops->destroy(l2);
    const off_t rec = 64 + 2 + 5000;
    assert_int_equal(size_of_log(), 64 + 3 * rec);
    /* the middle record's value changed, the last one cut short */
    FILE *f = fopen(logp, "r+b");
    assert_non_null(f);
    assert_int_equal(fseeko(f, 64 + rec + 64 + 2 + 100, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseeko(f, 64 + rec + 64 + 2 + 100, SEEK_SET), 0);
    fputc(c ^ 0x55, f);
    fclose(f);
    assert_int_equal(truncate(logp, 64 + 3 * rec - 10), 0);
    l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_int_equal(atomic_load(&l2->fig.torn_bytes), rec - 10);
    assert_int_equal(size_of_log(), 64 + 2 * rec);
    assert_int_equal(get(l2, "k1", 5000, 1), 1);
    assert_int_equal(get(l2, "k2", 5000, 2), 0); /* skipped, not served */
    assert_int_equal(get(l2, "k3", 5000, 3), 0); /* cut */
    assert_int_equal(count(l2), 1);
    /* appends continue after the cut */
    assert_int_equal(put(l2, "k4", 100, 4), DS_L2_PENDING);
    assert_int_equal(sync_now(l2), 1);
    l2->ops->destroy(l2);
    /* a header torn mid-way, then garbage: both cut */
    f = fopen(logp, "ab");
    fwrite("DSDDREC1\x01", 1, 9, f);
    fclose(f);
    l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_int_equal(atomic_load(&l2->fig.torn_bytes), 9);
    assert_int_equal(get(l2, "k4", 100, 4), 1);
    l2->ops->destroy(l2);
}

/* A damaged header in the middle of the log (a bad sector, a stray write)
 * is passed over: the records after it are kept, the log is not cut. */
static void test_damaged_middle_header(void **state)
{
    (void)state;
    ds_l2_t *l2 = open_dd(NULL);
    assert_non_null(l2);
    for (int i = 1; i <= 4; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        assert_int_equal(put(l2, k, 5000, (uint8_t)i), DS_L2_PENDING);
    }
    assert_int_equal(sync_now(l2), 1);
    l2->ops->destroy(l2);
    const off_t rec = 64 + 2 + 5000;
    /* k2: its magic damaged; k3: its size field (covered by the header
     * checksum) */
    FILE *f = fopen(logp, "r+b");
    assert_non_null(f);
    assert_int_equal(fseeko(f, 64 + rec + 3, SEEK_SET), 0);
    fputc('x', f);
    assert_int_equal(fseeko(f, 64 + 2 * rec + 17, SEEK_SET), 0);
    fputc(0x7f, f);
    fclose(f);
    l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_int_equal(atomic_load(&l2->fig.torn_bytes), 0);
    assert_int_equal(atomic_load(&l2->fig.damaged_bytes), 2 * rec);
    assert_int_equal(size_of_log(), 64 + 4 * rec); /* nothing cut */
    assert_int_equal(get(l2, "k1", 5000, 1), 1);
    assert_int_equal(get(l2, "k2", 5000, 2), 0);
    assert_int_equal(get(l2, "k3", 5000, 3), 0);
    assert_int_equal(get(l2, "k4", 5000, 4), 1);
    assert_int_equal(count(l2), 2);
    /* the damaged bytes are dead: compaction may take them */
    assert_int_equal(atomic_load(&l2->fig.dead_bytes), 2 * rec);
    assert_int_equal(put(l2, "k5", 10, 5), DS_L2_PENDING);
    assert_int_equal(sync_now(l2), 1);
    l2->ops->destroy(l2);
    l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_int_equal(get(l2, "k5", 10, 5), 1);
    assert_int_equal(get(l2, "k4", 5000, 4), 1);
    l2->ops->destroy(l2);
}

static void test_compaction(void **state)
{
    (void)state;
    ds_l2_t *l2 = open_dd(NULL); /* compacts at 1 MiB dead and 50% */
    assert_non_null(l2);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 20; i++) {
            char k[16];
            snprintf(k, sizeof(k), "c%d", i);
            assert_int_equal(put(l2, k, 100000, (uint8_t)(r * 20 + i)), DS_L2_PENDING);
        }
    char err[64];
    assert_int_equal(l2->ops->del(l2, "c0", 2, err, sizeof(err)), DS_L2_PENDING);
    /* nothing happens with records pending */
    l2->ops->maintain(l2);
    assert_int_equal(atomic_load(&l2->fig.compactions), 0);
    assert_int_equal(sync_now(l2), 1);
    off_t before = size_of_log();
    l2->ops->maintain(l2);
    assert_int_equal(atomic_load(&l2->fig.compactions), 1);
    off_t after = size_of_log();
    assert_int_equal(after, 64 + 19 * (64 + 3 + 100000) - 9 * 1); /* keys c1..c9: 2 bytes */
    assert_true(after * 3 < before);
    assert_int_equal(atomic_load(&l2->fig.dead_bytes), 0);
    assert_int_equal(atomic_load(&l2->fig.file_bytes), after);
    for (int i = 0; i < 20; i++) {
        char k[16];
        snprintf(k, sizeof(k), "c%d", i);
        assert_int_equal(get(l2, k, 100000, (uint8_t)(40 + i)), i > 0);
    }
    /* appends go to the new file; it replays */
    assert_int_equal(put(l2, "c0", 10, 7), DS_L2_PENDING);
    assert_int_equal(sync_now(l2), 1);
    l2->ops->maintain(l2); /* too little dead: nothing */
    assert_int_equal(atomic_load(&l2->fig.compactions), 1);
    l2->ops->destroy(l2);
    /* a compaction that died before its rename left its file: removed */
    char tmp[320];
    snprintf(tmp, sizeof(tmp), "%s/c1/127.0.0.1_9/data.compact", root);
    FILE *f = fopen(tmp, "w");
    fputs("partial", f);
    fclose(f);
    l2 = open_dd(NULL);
    assert_non_null(l2);
    assert_int_equal(access(tmp, F_OK), -1);
    assert_int_equal(count(l2), 20);
    assert_int_equal(get(l2, "c0", 10, 7), 1);
    assert_int_equal(get(l2, "c19", 100000, 59), 1);
    l2->ops->destroy(l2);
}

/* A compaction runs in steps: between them the log takes writes, deletes
 * and reads as usual, and the compacted log has all of them. */
static void test_compaction_in_steps(void **state)
{
    (void)state;
    ds_l2_dd_opts_t o = opts;
    o.compact_step_bytes = 300000; /* three 100 KB records a step */
    ds_l2_t *l2 = open_dd(&o);
    assert_non_null(l2);
    char k[16], err[64];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 20; i++) {
            snprintf(k, sizeof(k), "s%d", i);
            assert_int_equal(put(l2, k, 100000, (uint8_t)(r * 20 + i)), DS_L2_PENDING);
        }
    assert_int_equal(sync_now(l2), 1);
    assert_true(l2->ops->maintain(l2)); /* started, more to do */
    assert_true(l2->ops->maintain(l2));
    assert_int_equal(atomic_load(&l2->fig.compactions), 0);
    /* meanwhile: an overwrite of a copied key and of one not yet copied, a
     * delete, a new key; reads see the log as it is */
    assert_int_equal(put(l2, "s0", 500, 100), DS_L2_PENDING);
    assert_int_equal(put(l2, "s19", 600, 101), DS_L2_PENDING);
    assert_int_equal(l2->ops->del(l2, "s5", 2, err, sizeof(err)), DS_L2_PENDING);
    assert_int_equal(put(l2, "new", 700, 102), DS_L2_PENDING);
    assert_false(l2->ops->maintain(l2)); /* nothing runs with records pending */
    assert_int_equal(sync_now(l2), 1);
    assert_int_equal(get(l2, "s0", 500, 100), 1);
    assert_int_equal(get(l2, "s7", 100000, 47), 1);
    int steps = 0;
    while (l2->ops->maintain(l2))
        assert_true(++steps < 20);
    assert_int_equal(atomic_load(&l2->fig.compactions), 1);
    off_t after = size_of_log();
    /* header, the 20 live records of the start (s0..s9: 2-byte keys), the
     * four records appended meanwhile */
    off_t copied = 20 * (64 + 100000) + 10 * 2 + 10 * 3;
    off_t tail = (64 + 2 + 500) + (64 + 3 + 600) + (64 + 2) + (64 + 3 + 700);
    assert_int_equal(after, 64 + copied + tail);
    for (int i = 0; i < 20; i++) {
        snprintf(k, sizeof(k), "s%d", i);
        if (i == 0)
            assert_int_equal(get(l2, k, 500, 100), 1);
        else if (i == 19)
            assert_int_equal(get(l2, k, 600, 101), 1);
        else
            assert_int_equal(get(l2, k, 100000, (uint8_t)(40 + i)), i != 5);
    }
    assert_int_equal(get(l2, "new", 700, 102), 1);
    assert_int_equal(count(l2), 20);
    /* the old copies of s0, s5 and s19 and the tombstone are dead */
    assert_int_equal(atomic_load(&l2->fig.dead_bytes), 3 * (64 + 100000) + 2 + 2 + 3 + (64 + 2));
    l2->ops->destroy(l2);
    /* it replays the same */
    l2 = open_dd(&o);
    assert_non_null(l2);
    assert_int_equal(count(l2), 20);
    assert_int_equal(get(l2, "s0", 500, 100), 1);
    assert_int_equal(get(l2, "s5", 100000, 45), 0);
    assert_int_equal(get(l2, "s19", 600, 101), 1);
    assert_int_equal(get(l2, "new", 700, 102), 1);
    /* a stop in the middle of a compaction leaves the log as it was */
    for (int i = 0; i < 20; i++) {
        snprintf(k, sizeof(k), "s%d", i);
        assert_int_equal(put(l2, k, 100000, (uint8_t)(60 + i)), DS_L2_PENDING);
    }
    assert_int_equal(sync_now(l2), 1);
    assert_true(l2->ops->maintain(l2));
    l2->ops->destroy(l2);
    char tmp[320];
    snprintf(tmp, sizeof(tmp), "%s/c1/127.0.0.1_9/data.compact", root);
    assert_int_equal(access(tmp, F_OK), -1);
    l2 = open_dd(&o);
    assert_non_null(l2);
    assert_int_equal(get(l2, "s3", 100000, 63), 1);
    assert_int_equal(get(l2, "new", 700, 102), 1);
    l2->ops->destroy(l2);
}

static void test_lock_and_foreign(void **state)
{
    (void)state;
    ds_l2_t *l2 = open_dd(NULL);
    assert_non_null(l2);
    char err[600];
    ds_l2_t *again = ds__l2_dd_open(root, "c1", "127.0.0.1:9", &opts, err, sizeof(err));
    assert_null(again);
    assert_non_null(strstr(err, "in use"));
    /* another worker address: its own log */
    ds_l2_t *other = ds__l2_dd_open(root, "c1", "127.0.0.1:10", &opts, err, sizeof(err));
    assert_non_null(other);
    other->ops->destroy(other);
    l2->ops->destroy(l2);
    /* a file that is not a log is refused, and left as it was */
    FILE *f = fopen(logp, "w");
    fputs("this is not a distributed_disk log, but long enough to have a header: 0123456789", f);
    fclose(f);
    off_t size = size_of_log();
    assert_null(ds__l2_dd_open(root, "c1", "127.0.0.1:9", &opts, err, sizeof(err)));
    assert_non_null(strstr(err, "not a distributed_disk log"));
    assert_int_equal(size_of_log(), size);
    assert_null(ds__l2_dd_open("", "c1", "w", &opts, err, sizeof(err)));
    assert_non_null(strstr(err, "--distributed_disk_path"));
}

static int put_ttl(ds_l2_t *l2, const char *key, size_t n, uint8_t seed, uint64_t ttl_wall_ms)
{
    uint8_t v[64];
    fill(v, n, seed);
    ds_l2_meta_t m = {n, seed, ttl_wall_ms, 1};
    char err[600];
    return l2->ops->put(l2, key, strlen(key), v, &m, err, sizeof(err));
}

static void count_live(void *ctx, const char *key, size_t keylen, const ds_l2_meta_t *m)
{
    (void)key;
    (void)keylen;
    assert_int_equal(m->ttl_wall_ms, 0);
    (*(int *)ctx)++;
}

/* More records than the index's first 1024 buckets, a third of them past
 * their deadline: a scan, while the index is still growing, drops the
 * expired ones as it walks and lists the rest once each; the index finds
 * each of the rest; a compaction keeps exactly the rest, and they replay. */
static void test_many_expired(void **state)
{
    (void)state;
    enum { N = 2100 };
    ds_l2_dd_opts_t o = opts;
    o.compact_min_dead_bytes = 1;
    o.compact_dead_pct = 10; /* a third of the log is dead */
    ds_l2_t *l2 = open_dd(&o);
    assert_non_null(l2);
    char k[32], err[64];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "m%d", i);
        assert_int_equal(put_ttl(l2, k, (size_t)(i % 50), (uint8_t)i, i % 3 == 0 ? 5000 : 0),
                         DS_L2_PENDING);
    }
    assert_int_equal(sync_now(l2), 1);
    int live = 0;
    assert_int_equal(l2->ops->scan(l2, 6000, count_live, &live, err, sizeof(err)), N - N / 3);
    assert_int_equal(live, N - N / 3);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "m%d", i);
        assert_int_equal(get(l2, k, (size_t)(i % 50), (uint8_t)i), i % 3 != 0);
    }
    assert_true(atomic_load(&l2->fig.dead_bytes) > 0);
    for (int step = 0; step < 100 && l2->ops->maintain(l2); step++)
        ;
    assert_int_equal(atomic_load(&l2->fig.compactions), 1);
    assert_int_equal(atomic_load(&l2->fig.dead_bytes), 0);
    l2->ops->destroy(l2);
    l2 = open_dd(&o);
    assert_non_null(l2);
    assert_int_equal(count(l2), N - N / 3);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "m%d", i);
        assert_int_equal(get(l2, k, (size_t)(i % 50), (uint8_t)i), i % 3 != 0);
    }
    l2->ops->destroy(l2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_middle_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction_in_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_and_foreign, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_expired, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
