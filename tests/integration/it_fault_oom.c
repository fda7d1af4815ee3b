/* A full arena under concurrent writer processes. Four processes write
 * cache-only (never evicted) values of 1 MiB into a 32 MiB arena - by TCP
 * SET, local SET and zero-copy create - while a fifth writes volatile values:
 * every answer is K_OK or K_OUT_OF_MEMORY with a message saying why, the
 * worker never crashes, what was acknowledged reads back intact, the arena
 * ends up (nearly) full, and freeing it makes room again. */
#include "it_fault_util.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define ARENA_MB 32
#define NPROC 4
#define PER_PROC 40
#define VAL (1u << 20)

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, ARENA_MB, NULL);
}

static int teardown(void **state)
{
    (void)state;
    if (W.pid > 0) assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

typedef struct {
    volatile long ok, oom, other, bad_msg;
    volatile unsigned char acked[PER_PROC];
    volatile long evict_ok, evict_oom, evict_other;
} result_t;

static void fill_writer(result_t *res, int p)
{
    ds_client_t *c = dst_connect(&W, p % 2 ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP);
    if (c == NULL) _exit(3);
    uint8_t *v = malloc(VAL);
    for (int i = 0; i < PER_PROC; i++) {
        char key[32];
        snprintf(key, sizeof(key), "oom-%d-%d", p, i);
        ds_status_t st;
        if (p == 3 && i % 2) {
            ds_buffer_t *b = NULL;
            st = ds_kv_create(c, key, VAL, NULL, &b);
            if (st == DS_K_OK) {
                fu_value(ds_buffer_mutable_data(b), VAL, (uint32_t)(p * PER_PROC + i), 1);
                st = ds_kv_publish(c, b);
                ds_buffer_release(b);
            }
        } else {
            fu_value(v, VAL, (uint32_t)(p * PER_PROC + i), 1);
            st = ds_kv_set(c, key, v, VAL, NULL);
        }
        if (st == DS_K_OK) {
            res->ok++;
            res->acked[i] = 1;
        } else if (st == DS_K_OUT_OF_MEMORY) {
            res->oom++;
            if (strstr(ds_last_error(), "out of shared memory") == NULL) res->bad_msg++;
        } else {
            res->other++;
            fprintf(stderr, "writer %d key %d: status %d: %s\n", p, i, st, ds_last_error());
        }
    }
    free(v);
    ds_client_close(c);
}

/* Volatile values compete for the same space: they may evict each other,
 * and fail only when the cache-only values took everything. */
static void evict_writer(result_t *res)
{
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    if (c == NULL) _exit(3);
    ds_set_param_t ev = DS_SET_PARAM_INIT;
    ev.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    uint8_t *v = malloc(VAL / 2);
    for (int i = 0; i < 3 * PER_PROC; i++) {
        char key[32];
        snprintf(key, sizeof(key), "oom-ev-%d", i);
        fu_value(v, VAL / 2, (uint32_t)(10000 + i), 1);
        ds_status_t st = ds_kv_set(c, key, v, VAL / 2, &ev);
        if (st == DS_K_OK)
            res->evict_ok++;
        else if (st == DS_K_OUT_OF_MEMORY)
            res->evict_oom++;
        else
            res->evict_other++;
    }
    free(v);
    ds_client_close(c);
}

static void test_concurrent_writers_fill_arena(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    result_t *res = mmap(NULL, sizeof(result_t) * (NPROC + 1), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(res != MAP_FAILED);
    memset(res, 0, sizeof(result_t) * (NPROC + 1));
    pid_t kids[NPROC + 1];
    for (int p = 0; p <= NPROC; p++) {
        kids[p] = fork();
        assert_true(kids[p] >= 0);
        if (kids[p] == 0) {
            if (p < NPROC)
                fill_writer(&res[p], p);
            else
                evict_writer(&res[NPROC]);
            _exit(0); /* not exit(): the harness's atexit would kill the worker */
        }
    }
    for (int p = 0; p <= NPROC; p++) {
        int status;
        assert_int_equal(waitpid(kids[p], &status, 0), kids[p]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    long ok = 0, oom = 0, other = 0, bad_msg = 0;
    for (int p = 0; p < NPROC; p++) {
        ok += res[p].ok;
        oom += res[p].oom;
        other += res[p].other;
        bad_msg += res[p].bad_msg;
    }
    printf("fill: %ld cache-only values stored, %ld K_OUT_OF_MEMORY, %ld other; volatile: %ld "
           "stored, %ld out of memory, %ld other; evictions %.0f\n",
           ok, oom, other, res[NPROC].evict_ok, res[NPROC].evict_oom, res[NPROC].evict_other,
           dst_stat(&W, "objects.evictions"));
    assert_int_equal(other, 0);
    assert_int_equal(res[NPROC].evict_other, 0);
    assert_int_equal(bad_msg, 0);
    assert_int_equal(ok + oom, NPROC * PER_PROC);
    /* 32 one-MiB values fit at most; fragmentation may cost a few. */
    /* Not every MiB can hold a cache-only value: the volatile writer's
     * half-size values, and its reservations still receiving bytes, leave
     * holes between cache-only values that cannot be evicted away. */
    assert_true(ok <= ARENA_MB && ok >= ARENA_MB - 8);
    assert_true(oom >= NPROC * PER_PROC - ARENA_MB);

    /* The worker is healthy, and every acknowledged value is intact. */
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_int_equal(ds_client_health_check(c), DS_K_OK);
    long verified = 0;
    for (int p = 0; p < NPROC; p++) {
        for (int i = 0; i < PER_PROC; i++) {
            char key[32];
            snprintf(key, sizeof(key), "oom-%d-%d", p, i);
            void *out = NULL;
            size_t len = 0;
            ds_status_t st = ds_kv_get(c, key, 0, &out, &len);
            if (res[p].acked[i]) {
                assert_int_equal(st, DS_K_OK);
                assert_int_equal(fu_check(out, len, (uint32_t)(p * PER_PROC + i)), 1);
                verified++;
            } else {
                assert_int_equal(st, DS_K_NOT_FOUND);
            }
            ds_free(out);
        }
    }
    assert_int_equal(verified, ok);
    assert_true(dst_stat(&W, "arena.free_bytes") < 8.0 * VAL + 1); /* the holes above */
    assert_true(dst_stat(&W, "objects.pinned") == 0);

    /* Deleting makes room again. */
    for (int p = 0; p < NPROC; p++) {
        for (int i = 0; i < PER_PROC; i++) {
            char key[32];
            snprintf(key, sizeof(key), "oom-%d-%d", p, i);
            const char *kp = key;
            assert_int_equal(ds_kv_del(c, 1, &kp, NULL), DS_K_OK);
        }
    }
    uint8_t *v = malloc(16u << 20);
    fu_value(v, 16u << 20, 1, 1);
    assert_int_equal(ds_kv_set(c, "oom-after", v, 16u << 20, NULL), DS_K_OK);
    free(v);
    ds_client_close(c);
    munmap(res, sizeof(result_t) * (NPROC + 1));
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_writers_fill_arena),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
