/* Helpers shared by the storage-tier tests (it_tier.c, run once per L2
 * backend, and it_tier_dd.c, the distributed_disk log's own): a worker with
 * the L2 backend named by tier_backend in a fresh temp directory, values
 * whose bytes tell their seed (dst_fill / dst_check), and waiting for the
 * disk queue to drain.
 *
 * Header-only (static functions and state) so each test stays one program;
 * they use cmocka's asserts, so call them from the test's own thread. */
#ifndef DS_TESTS_IT_TIER_UTIL_H
#define DS_TESTS_IT_TIER_UTIL_H

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dst_worker_t W;
static char dir[256];
static const char *tier_backend = "sfs"; /* or "distributed_disk" */

static inline bool tier_dd(void)
{
    return strcmp(tier_backend, "distributed_disk") == 0;
}

static inline int start(int arena_mb, const char *more)
{
    snprintf(dir, sizeof(dir), "/tmp/ds-it-tier-XXXXXX");
    if (mkdtemp(dir) == NULL) return -1;
    char extra[768];
    snprintf(extra, sizeof(extra), "--l2_cache_type %s --%s %s/l2 %s", tier_backend,
             tier_dd() ? "distributed_disk_path" : "sfs_path", dir, more ? more : "");
    return dst_worker_start(&W, arena_mb, extra);
}

/* The distributed_disk log of the worker W (its address names it). */
static inline void dd_log_path(char *out, size_t cap, const char *file)
{
    snprintf(out, cap, "%s/l2/default/127.0.0.1_%d/%s", dir, W.port, file ? file : "data.log");
}

static inline void finish(void)
{
    /* a clean stop flushes the queue and exits 0 (ASan: no leak) */
    if (W.pid > 0) assert_int_equal(dst_worker_stop(&W), 0);
    memset(&W, 0, sizeof(W));
    dst_sh("rm -rf %s", dir);
}

static inline ds_client_t *conn(ds_transport_t t)
{
    ds_client_t *c = dst_connect(&W, t);
    assert_non_null(c);
    return c;
}

static inline size_t size_of(int i)
{
    static const size_t sizes[] = {1, 100, 4096, 70000, 1 << 20, 3000001};
    return sizes[i % 6];
}

static inline void key_of(char *k, size_t cap, const char *p, int i)
{
    snprintf(k, cap, "%s:%d;(x)", p, i);
}

static inline ds_status_t put(ds_client_t *c, const char *key, size_t len, uint64_t seed,
                              ds_write_mode_t mode, uint32_t ttl, ds_existence_t ex)
{
    void *v = malloc(len);
    assert_non_null(v);
    dst_fill(v, len, seed);
    ds_set_param_t p = {mode, ttl, ex};
    ds_status_t st = ds_kv_set(c, key, v, len, &p);
    free(v);
    return st;
}

/* 1 intact, 0 missing; fails the test on a wrong value. */
static inline int check(ds_client_t *c, const char *key, size_t len, uint64_t seed)
{
    void *v = NULL;
    size_t n = 0;
    ds_status_t st = ds_kv_get(c, key, 0, &v, &n);
    if (st == DS_K_NOT_FOUND) return 0;
    if (st != DS_K_OK) fprintf(stderr, "get %s: %d %s\n", key, st, ds_last_error());
    assert_int_equal(st, DS_K_OK);
    assert_int_equal(n, len);
    assert_true(dst_check(v, n, seed));
    ds_free(v);
    return 1;
}

static inline void wait_drained(void)
{
    for (int i = 0; i < 500 && dst_stat(&W, "l2.queue_depth") != 0; i++)
        usleep(10000);
    assert_true(dst_stat(&W, "l2.queue_depth") == 0);
}

#endif
