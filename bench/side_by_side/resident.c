/* The resident-keys phase: load 1,000,000 small keys (100,000 with --quick)
 * of 1 KiB into the worker and into Redis, then measure what each key costs
 * in memory and how fast single sets and gets of random resident keys run:
 * this project's local client (shared memory and its Unix socket) next to
 * Redis over its Unix socket, and this project's TCP client next to Redis
 * over TCP, the four interleaved in rounds with both servers loaded.
 *
 * Memory per key, beyond its key and value bytes:
 *  - worker: growth of the worker's private memory (RssAnon in
 *    /proc/<pid>/status: the object table, allocator blocks, key copies) plus
 *    growth of the arena's used bytes (STATS arena.used_bytes: value bytes
 *    after the allocator's rounding). The arena itself is a pre-faulted
 *    memfd, so its pages count in RSS from the start and do not grow.
 *  - Redis: growth of its VmRSS (everything: dict, robj, sds, jemalloc
 *    rounding); INFO used_memory's growth is given in the note.
 * The load goes in batches of 1000 (datasystem mset, Redis MSET); the keys
 * are removed again at the end. */
#include "bench/side_by_side/sbs.h"

#include "common/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 1000
#define VAL_SIZE 1024
#define KEY_FMT "sbs-res-%07u"
#define KEY_LEN 15

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

typedef struct {
    double load_s;
    uint64_t *batch_ns;
    size_t batches;
} load_t;

static int load(sbs_conn_t *c, size_t n, char (*keys)[16], const uint8_t *val, load_t *out)
{
    const char *kp[BATCH];
    const void *vp[BATCH];
    size_t lens[BATCH];
    for (size_t i = 0; i < BATCH; i++) {
        vp[i] = val;
        lens[i] = VAL_SIZE;
    }
    out->batches = 0;
    uint64_t t0 = ds__now_ns();
    for (size_t b = 0; b < n; b += BATCH) {
        size_t m = n - b < BATCH ? n - b : BATCH;
        for (size_t i = 0; i < m; i++)
            kp[i] = keys[b + i];
        uint64_t t1 = ds__now_ns();
        if (sbs_mset(c, m, kp, vp, lens) != 0) return -1;
        out->batch_ns[out->batches++] = ds__now_ns() - t1;
    }
    out->load_s = (double)(ds__now_ns() - t0) / 1e9;
    return 0;
}

static int unload(sbs_conn_t *c, size_t n, char (*keys)[16])
{
    const char *kp[BATCH];
    for (size_t b = 0; b < n; b += BATCH) {
        size_t m = n - b < BATCH ? n - b : BATCH;
        for (size_t i = 0; i < m; i++)
            kp[i] = keys[b + i];
        if (sbs_mdel(c, m, kp) != 0) return -1;
    }
    return 0;
}

/* Single sets, then single gets, of random resident keys: m of each per
 * system, in ROUNDS rounds that interleave the systems (this project local,
 * Redis Unix, this project over TCP, Redis TCP), so that a machine whose
 * speed drifts (it is shared) moves every system alike. Latencies and rates
 * are over all rounds of a system. The ratio to Redis is the median of the
 * per-round ratios (the same number of operations each, so the ratio of
 * their times): a stall of the shared machine then spoils one round, not
 * the aggregate of one system. */
#define ROUNDS 10
#define NSYS 4

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int random_ops(sbs_conn_t *const conn[NSYS], const char *const sys[NSYS], size_t n,
                      char (*keys)[16], size_t m, uint8_t *val, uint8_t *dst)
{
    uint64_t *ns[NSYS] = {NULL};
    int rc = 0;
    for (int k = 0; k < NSYS && rc == 0; k++)
        if ((ns[k] = calloc(m, sizeof(uint64_t))) == NULL) rc = -1;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    size_t len;
    for (int op = 0; op < 2 && rc == 0; op++) {
        double secs[NSYS] = {0}, round_s[ROUNDS][NSYS];
        for (int k = 0; k < NSYS && rc == 0; k++)
            for (size_t i = 0; i < 100 && rc == 0; i++) {
                const char *key = keys[xorshift(&seed) % n];
                rc = op == 0 ? sbs_set(conn[k], key, val, VAL_SIZE)
                             : sbs_get(conn[k], key, dst, VAL_SIZE, &len);
            }
        for (int round = 0; round < ROUNDS && rc == 0; round++) {
            size_t from = m * (size_t)round / ROUNDS, to = m * (size_t)(round + 1) / ROUNDS;
            for (int k = 0; k < NSYS && rc == 0; k++) {
                uint64_t t0 = ds__now_ns();
                for (size_t i = from; i < to && rc == 0; i++) {
                    const char *key = keys[xorshift(&seed) % n];
                    uint64_t t1 = ds__now_ns();
                    rc = op == 0 ? sbs_set(conn[k], key, val, VAL_SIZE)
                                 : sbs_get(conn[k], key, dst, VAL_SIZE, &len);
                    ns[k][i] = ds__now_ns() - t1;
                }
                round_s[round][k] = (double)(ds__now_ns() - t0) / 1e9;
                secs[k] += round_s[round][k];
            }
        }
        for (int k = 0; k < NSYS && rc == 0; k++) {
            sbs_row_t *r = sbs_row_add(sys[k], op == 0 ? "resident set" : "resident get", VAL_SIZE,
                                       1, ns[k], m);
            if (r == NULL) continue;
            r->ops_per_s = (double)m / secs[k];
            snprintf(r->note, sizeof(r->note),
                     "random keys among %zu resident; %d rounds interleaved with the other systems",
                     n, ROUNDS);
            if (k % 2 != 0) continue;
            /* This project's rows (k 0 and 2) against Redis's next to them. */
            double q[ROUNDS];
            for (int i = 0; i < ROUNDS; i++)
                q[i] = round_s[i][k + 1] / round_s[i][k];
            qsort(q, ROUNDS, sizeof(q[0]), cmp_double);
            r->ratio_to_redis = (q[ROUNDS / 2 - 1] + q[ROUNDS / 2]) / 2;
            size_t len = strlen(r->note);
            snprintf(r->note + len, sizeof(r->note) - len,
                     "; x Redis: median of per-round rate ratios (%.2f-%.2f), aggregate %.2f", q[0],
                     q[ROUNDS - 1], secs[k + 1] / secs[k]);
        }
    }
    for (int k = 0; k < NSYS; k++)
        free(ns[k]);
    return rc;
}

static void load_row(const char *sys, size_t n, load_t *l)
{
    sbs_row_t *r = sbs_row_add(sys, "resident load (mset)", VAL_SIZE, 1, l->batch_ns, l->batches);
    if (r == NULL) return;
    r->ops_per_s = (double)n / l->load_s;
    r->gbps = (double)n * VAL_SIZE / l->load_s / 1e9;
    snprintf(r->note, sizeof(r->note), "%zu keys in batches of %d; latency per batch", n, BATCH);
}

static sbs_row_t *mem_row(const char *sys, double per_key)
{
    sbs_row_t *r = sbs_row_add_raw(sys, "resident memory", VAL_SIZE, 1, NAN, NAN, NAN);
    if (r) r->extra = per_key;
    return r;
}

int sbs_phase_resident(const sbs_opts_t *o, const sbs_env_t *env)
{
    size_t n = o->quick ? 100000 : 1000000, m = o->quick ? 5000 : 20000;
    char(*keys)[16] = malloc(n * sizeof(*keys));
    uint8_t *val = malloc(VAL_SIZE), *dst = malloc(VAL_SIZE);
    load_t l = {0, calloc(n / BATCH + 1, sizeof(uint64_t)), 0};
    sbs_conn_t *ds = sbs_connect(env, SBS_DS_LOCAL), *rd = sbs_connect(env, SBS_REDIS_UNIX);
    sbs_conn_t *ds_tcp = sbs_connect(env, SBS_DS_REMOTE), *rd_tcp = sbs_connect(env, SBS_REDIS_TCP);
    int rc = keys && val && dst && l.batch_ns && ds && rd && ds_tcp && rd_tcp ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++)
        snprintf(keys[i], sizeof(keys[i]), KEY_FMT, (unsigned)(i % 10000000));
    if (rc == 0) {
        memset(val, 0x6b, VAL_SIZE);
        memset(dst, 0, VAL_SIZE);
    }
    double key_val = KEY_LEN + VAL_SIZE;

    /* This project. */
    pid_t wp = env->worker->pid;
    double anon0 = sbs_proc_status_bytes(wp, "RssAnon"), rss0 = sbs_proc_status_bytes(wp, "VmRSS");
    double used0 = sbs_worker_stat(o, env->worker, "arena.used_bytes");
    double cnt0 = sbs_worker_stat(o, env->worker, "objects.count");
    if (rc == 0) {
        printf("  resident, loading %zu keys into the worker ...\n", n);
        fflush(stdout);
        rc = load(ds, n, keys, val, &l);
    }
    if (rc == 0) {
        double anon1 = sbs_proc_status_bytes(wp, "RssAnon");
        double rss1 = sbs_proc_status_bytes(wp, "VmRSS");
        double used1 = sbs_worker_stat(o, env->worker, "arena.used_bytes");
        double cnt1 = sbs_worker_stat(o, env->worker, "objects.count");
        load_row("ds-local", n, &l);
        double heap = (anon1 - anon0) / (double)n, arena = (used1 - used0) / (double)n;
        sbs_row_t *r = mem_row("ds-local", heap + arena - key_val);
        if (r)
            snprintf(r->note, sizeof(r->note),
                     "%.0f objects; private heap %.1f B/key + arena %.1f B/key; VmRSS +%.1f B/key",
                     cnt1 - cnt0, heap, arena, (rss1 - rss0) / (double)n);
        if (cnt1 - cnt0 != (double)n)
            fprintf(stderr, "sbs: the worker holds %.0f new objects, expected %zu\n", cnt1 - cnt0,
                    n);
    }

    /* Redis, loaded while the worker still holds its keys: the random
     * operations then run on both, interleaved. */
    pid_t rp = env->redis->pid;
    /* Hand jemalloc's retained pages back first, so that RSS growth is the
     * keys' own. */
    if (rd) sbs_redis_purge(rd);
    double rss_r0 = sbs_proc_status_bytes(rp, "VmRSS");
    double um0 = rd ? sbs_redis_used_memory(rd) : -1;
    if (rc == 0) {
        printf("  resident, loading %zu keys into Redis ...\n", n);
        fflush(stdout);
        rc = load(rd, n, keys, val, &l);
    }
    if (rc == 0) {
        double rss_r1 = sbs_proc_status_bytes(rp, "VmRSS");
        double um1 = sbs_redis_used_memory(rd);
        load_row("redis-unix", n, &l);
        sbs_row_t *r = mem_row("redis-unix", (rss_r1 - rss_r0) / (double)n - key_val);
        if (r)
            snprintf(r->note, sizeof(r->note), "VmRSS +%.1f B/key; used_memory +%.1f B/key",
                     (rss_r1 - rss_r0) / (double)n, (um1 - um0) / (double)n);
    }
    if (rc == 0) {
        sbs_conn_t *const conn[NSYS] = {ds, rd, ds_tcp, rd_tcp};
        const char *const sys[NSYS] = {"ds-local", "redis-unix", "ds-remote", "redis-tcp"};
        printf("  resident, random sets and gets (%d interleaved rounds) ...\n", ROUNDS);
        fflush(stdout);
        rc = random_ops(conn, sys, n, keys, m, val, dst);
    }
    if (rc == 0) rc = unload(ds, n, keys);
    if (rc == 0) rc = unload(rd, n, keys);

    sbs_close(ds);
    sbs_close(rd);
    sbs_close(ds_tcp);
    sbs_close(rd_tcp);
    free(keys);
    free(val);
    free(dst);
    free(l.batch_ns);
    return rc;
}
