/* Many concurrent clients and threads against one worker, over both
 * transports, reading and writing shared and private keys with self-checking
 * payloads: every value read must be exactly one complete version that some
 * writer wrote (no torn or corrupt bytes). Bounded: a fixed number of
 * operations per thread and process. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 256, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

/* Payload: u64 seed, then dst_fill(seed) bytes. Self-describing, so a reader
 * can verify a value written by anyone. */
static void make(uint8_t *p, size_t len, uint64_t seed)
{
    memcpy(p, &seed, 8);
    dst_fill(p + 8, len - 8, seed);
}

static bool verify(const uint8_t *p, size_t len)
{
    if (len < 8) return false;
    uint64_t seed;
    memcpy(&seed, p, 8);
    return dst_check(p + 8, len - 8, seed);
}

typedef struct {
    ds_client_t *c;
    int id;
    int ops;
    int corrupt;
    int errors;
} worker_arg_t;

static size_t pick_size(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = *x >> 33;
    if (r % 50 == 0) return 2u << 20;
    return 16 + (size_t)(r % (256 * 1024));
}

static void *run(void *argp)
{
    worker_arg_t *a = argp;
    uint64_t x = (uint64_t)a->id * 7919 + 1;
    uint8_t *buf = malloc(3u << 20);
    for (int i = 0; i < a->ops; i++) {
        char key[48];
        bool shared = i % 3 == 0;
        if (shared)
            snprintf(key, sizeof(key), "shared-%d", i % 7);
        else
            snprintf(key, sizeof(key), "own-%d-%d", a->id, i % 11);
        size_t len = pick_size(&x);
        uint64_t seed = ((uint64_t)a->id << 32) | (uint64_t)i;
        switch (i % 4) {
        case 0:
        case 1: {
            make(buf, len, seed);
            if (ds_kv_set(a->c, key, buf, len, NULL) != DS_K_OK) a->errors++;
            break;
        }
        case 2: {
            void *v = NULL;
            size_t got = 0;
            ds_status_t st = ds_kv_get(a->c, key, 0, &v, &got);
            if (st == DS_K_OK && !verify(v, got)) a->corrupt++;
            if (st != DS_K_OK && st != DS_K_NOT_FOUND) a->errors++;
            ds_free(v);
            break;
        }
        default: {
            const char *k = key;
            ds_buffer_t *b = NULL;
            ds_status_t st = ds_kv_get_buffers(a->c, 1, &k, 0, &b);
            if (st == DS_K_OK && !verify(ds_buffer_data(b), ds_buffer_size(b))) a->corrupt++;
            if (st != DS_K_OK && st != DS_K_NOT_FOUND) a->errors++;
            ds_buffer_release(b);
        }
        }
    }
    free(buf);
    return NULL;
}

static void test_threads_share_clients(void **state)
{
    (void)state;
    enum { T = 12 };
    ds_client_t *local = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_client_t *tcp = dst_connect(&W, DS_TRANSPORT_TCP);
    pthread_t th[T];
    worker_arg_t args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (worker_arg_t){.c = i % 2 ? local : tcp, .id = i, .ops = 400};
        pthread_create(&th[i], NULL, run, &args[i]);
    }
    int corrupt = 0, errors = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        corrupt += args[i].corrupt;
        errors += args[i].errors;
    }
    printf("threads: %d ops, %d errors, %d corrupt reads\n", T * 400, errors, corrupt);
    assert_int_equal(corrupt, 0);
    assert_int_equal(errors, 0);
    ds_client_close(local);
    ds_client_close(tcp);
}

static void test_processes(void **state)
{
    (void)state;
    enum { P = 6 };
    pid_t pids[P];
    for (int p = 0; p < P; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            worker_arg_t a = {.id = 100 + p, .ops = 300};
            a.c = dst_connect(&W, p % 2 ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP);
            if (a.c == NULL) _exit(3);
            run(&a);
            ds_client_close(a.c);
            _exit(a.corrupt ? 1 : a.errors ? 2 : 0);
        }
    }
    for (int p = 0; p < P; p++) {
        int status;
        assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal((int)dst_stat(&W, "objects.pinned"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_clients),
        cmocka_unit_test(test_processes),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
