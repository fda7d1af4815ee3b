/* The shared connection (src/client/mux.c): threads of one remote (TCP)
 * client whose calls overlap send small sets and gets pipelined over one
 * connection. Checked against a real worker:
 *  - every value read back is exactly the one its thread wrote, at sizes on
 *    both sides of the sharing limit, misses and too-small buffers included;
 *    the worker sees a handful of connections from 16 busy threads, against
 *    one per thread with DS_CLIENT_MUX=0;
 *  - a worker that stops answering (SIGSTOP) fails every waiting call at its
 *    deadline, none later, and the calls after SIGCONT succeed (answers that
 *    arrive for calls that gave up are dropped, not handed to others);
 *  - a worker killed under load fails the calls in flight promptly, and
 *    calls succeed again once it is back;
 *  - a worker that may hold a plain call's answer (here: with a spill
 *    directory, whose gets may wait for the disk) is never shared;
 *  - DS_CLIENT_MUX takes only 0 or 1. */
#include "harness.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define T 16
#define CAP (96u << 10)

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

static ds_client_t *connect_tcp(int request_timeout_ms)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = DS_TRANSPORT_TCP;
    o.token = getenv("DS_TEST_TOKEN");
    if (request_timeout_ms) o.request_timeout_ms = request_timeout_ms;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) {
        fprintf(stderr, "connect: %s\n", ds_last_error());
        return NULL;
    }
    return c;
}

typedef struct {
    ds_client_t *c;
    int id, iters;
    atomic_bool *stop; /* NULL = run iters */
    bool small_only;   /* only sizes calls may share */
    int wrong, errors, ok;
    ds_status_t first_error;
    uint64_t max_call_ms;
} arg_t;

/* Sizes around the limits: coalesced, referenced, shared, not shared. */
static const size_t sizes[] = {1, 100, 1024, 4096, 4097, 30000, 65000, 70000};

/* One set and one get of the thread's key, checked; false on an error. */
static bool pair(arg_t *a, int i, uint8_t *src, uint8_t *dst)
{
    char key[64];
    snprintf(key, sizeof(key), "mux-%d-%d", a->id, i % 5);
    size_t nsizes = sizeof(sizes) / sizeof(sizes[0]) - (a->small_only ? 1 : 0);
    size_t len = sizes[(size_t)(i + a->id) % nsizes];
    uint64_t seed = ((uint64_t)a->id << 32) | (uint64_t)i;
    dst_fill(src, len, seed);
    uint64_t t0 = ds__now_ms();
    ds_status_t st = ds_kv_set(a->c, key, src, len, NULL);
    size_t got = 0;
    /* The buffer's size decides whether a get may share: both kinds. */
    if (st == DS_K_OK) st = ds_kv_get_into(a->c, key, 0, dst, len <= 65536 ? 65536 : CAP, &got);
    uint64_t took = ds__now_ms() - t0;
    if (took > a->max_call_ms) a->max_call_ms = took;
    if (st != DS_K_OK) {
        if (a->errors++ == 0) a->first_error = st;
        return false;
    }
    if (got != len || !dst_check(dst, len, seed)) {
        if (a->wrong++ == 0)
            fprintf(stderr, "thread %d: %s: %zu bytes, got %zu%s\n", a->id, key, len, got,
                    got == len ? ", other bytes" : "");
    }
    a->ok++;
    return true;
}

/* The statuses of a worker that stopped answering or went away. */
static bool transport(ds_status_t st)
{
    return st == DS_K_RPC_DEADLINE_EXCEEDED || st == DS_K_CLIENT_WORKER_DISCONNECT ||
           st == DS_K_RPC_UNAVAILABLE;
}

static void *run(void *p)
{
    arg_t *a = p;
    uint8_t *src = malloc(CAP), *dst = malloc(CAP);
    for (int i = 0; src && dst && (a->stop ? !atomic_load(a->stop) : i < a->iters); i++) {
        pair(a, i, src, dst);
        if (a->id % 4 == 0 && i % 16 == 0) {
            /* A miss and a buffer too small, on the same path. */
            size_t got = 0;
            char key[64];
            snprintf(key, sizeof(key), "mux-none-%d-%d", a->id, i);
            ds_status_t st = ds_kv_get_into(a->c, key, 0, dst, 65536, &got);
            if (st != DS_K_NOT_FOUND && !transport(st) && a->wrong++ == 0)
                fprintf(stderr, "miss: %s %s\n", ds_status_name(st), ds_last_error());
            snprintf(key, sizeof(key), "mux-%d-%d", a->id, i % 5);
            st = ds_kv_get_into(a->c, key, 0, dst, 0, &got);
            if (st != DS_K_INVALID && !transport(st) && a->wrong++ == 0)
                fprintf(stderr, "small: %s %s\n", ds_status_name(st), ds_last_error());
        }
    }
    if (src && dst && a->id % 4 == 1 && !a->small_only) {
        /* A 1 MiB value asked for into a small buffer: answered whole on
         * the shared path, reported as too large, and nothing after it
         * goes astray. */
        char key[64];
        snprintf(key, sizeof(key), "mux-big-%d", a->id);
        uint8_t *big = calloc(1, 1u << 20);
        size_t got = 0;
        ds_status_t st = big ? ds_kv_set(a->c, key, big, 1u << 20, NULL) : DS_K_OUT_OF_MEMORY;
        if (st == DS_K_OK) st = ds_kv_get_into(a->c, key, 0, dst, 16, &got);
        if (st != DS_K_INVALID && !transport(st)) a->wrong++;
        if (st == DS_K_INVALID && got != (1u << 20)) a->wrong++;
        free(big);
    }
    free(src);
    free(dst);
    return NULL;
}

static void run_threads(arg_t *args, int n)
{
    pthread_t th[T];
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&th[i], NULL, run, &args[i]), 0);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* The worker's connections while c is open and idle after 16 threads ran,
 * with only sizes calls may share when small_only. */
static int connections_after_load(ds_client_t *c, bool small_only, int *wrong, int *errors)
{
    arg_t args[T];
    for (int i = 0; i < T; i++)
        args[i] = (arg_t){.c = c, .id = i, .iters = 150, .small_only = small_only};
    run_threads(args, T);
    *wrong = *errors = 0;
    for (int i = 0; i < T; i++) {
        *wrong += args[i].wrong;
        *errors += args[i].errors;
        if (args[i].errors)
            fprintf(stderr, "thread %d: %s\n", i, ds_status_name(args[i].first_error));
    }
    return (int)dst_stat(&W, "clients.connections");
}

static void test_values_and_sharing(void **state)
{
    (void)state;
    int base = (int)dst_stat(&W, "clients.connections");
    int wrong, errors;

    ds_client_t *c = connect_tcp(0);
    assert_non_null(c);
    int shared = connections_after_load(c, true, &wrong, &errors) - base;
    assert_int_equal(wrong, 0);
    assert_int_equal(errors, 0);
    /* Every size, the unshared ones and a 1 MiB value into a small buffer
     * included (those take pool connections: not counted). */
    connections_after_load(c, false, &wrong, &errors);
    assert_int_equal(wrong, 0);
    assert_int_equal(errors, 0);
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "clients.connections", base, 5000));

    setenv("DS_CLIENT_MUX", "0", 1);
    c = connect_tcp(0);
    unsetenv("DS_CLIENT_MUX");
    assert_non_null(c);
    int own = connections_after_load(c, true, &wrong, &errors) - base;
    assert_int_equal(wrong, 0);
    assert_int_equal(errors, 0);
    ds_client_close(c);
    printf("16 threads: %d connections shared, %d with DS_CLIENT_MUX=0\n", shared, own);
    /* The shared one and the pool connection of a lone caller (the first
     * call, or one while all others were between calls): a call counts as
     * in progress until its connection is back, so a caller that finds
     * none in progress finds that connection idle. */
    assert_true(shared <= 2);
    /* Without sharing, callers whose calls overlap (each waits on the
     * network, so they do on any machine) get connections of their own; how
     * many overlap is the scheduler's, so only more than the shared case. */
    assert_true(own > 2);
}

static void test_not_with_tiers(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    char dir[] = "/tmp/it_mux_spill_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char extra[128];
    snprintf(extra, sizeof(extra), "--spill_directory %s", dir);
    dst_worker_t main_w = W;
    assert_int_equal(dst_worker_start(&W, 64, extra), 0);
    int base = (int)dst_stat(&W, "clients.connections");
    ds_client_t *c = connect_tcp(0);
    assert_non_null(c);
    int wrong, errors;
    int n = connections_after_load(c, true, &wrong, &errors) - base;
    ds_client_close(c);
    dst_worker_stop(&W);
    W = main_w;
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    printf("16 threads, worker with a spill directory: %d connections\n", n);
    assert_int_equal(wrong, 0);
    assert_int_equal(errors, 0);
    assert_true(n >= 8);
}

/* Threads run until told to stop; returns when they have. */
typedef struct {
    arg_t args[T];
    pthread_t th[T];
    atomic_bool stop;
} load_t;

static void load_start(load_t *l, ds_client_t *c, int n)
{
    atomic_init(&l->stop, false);
    for (int i = 0; i < n; i++) {
        l->args[i] = (arg_t){.c = c, .id = 100 + i, .stop = &l->stop};
        assert_int_equal(pthread_create(&l->th[i], NULL, run, &l->args[i]), 0);
    }
}

static void load_stop(load_t *l, int n)
{
    atomic_store(&l->stop, true);
    for (int i = 0; i < n; i++)
        pthread_join(l->th[i], NULL);
}

static void test_stopped_worker(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    enum { N = 8, TIMEOUT_MS = 400, STOP_MS = 1200 };
    ds_client_t *c = connect_tcp(TIMEOUT_MS);
    assert_non_null(c);
    load_t l;
    load_start(&l, c, N);
    usleep(200 * 1000);
    assert_int_equal(kill(W.pid, SIGSTOP), 0);
    usleep(STOP_MS * 1000);
    assert_int_equal(kill(W.pid, SIGCONT), 0);
    usleep(300 * 1000);
    load_stop(&l, N);
    int errors = 0;
    for (int i = 0; i < N; i++) {
        arg_t *a = &l.args[i];
        printf("thread %d: %d pairs, %d errors (first %s), longest pair %llu ms\n", i, a->ok,
               a->errors, ds_status_name(a->first_error), (unsigned long long)a->max_call_ms);
        assert_int_equal(a->wrong, 0);
        /* A thread whose next call dialled a new connection during the stop
         * waits in the dial (HELLO) and may see no error at all. */
        errors += a->errors;
        if (a->errors) assert_int_equal(a->first_error, DS_K_RPC_DEADLINE_EXCEEDED);
        /* A call gives up at its deadline; one after it may wait for a new
         * connection, whose HELLO the stopped worker answers once it runs
         * again. Nothing waits much past the stop. */
        assert_true(a->max_call_ms < STOP_MS + 2 * TIMEOUT_MS + 5000);
    }
    assert_true(errors >= N / 2);
    /* After the stop: every pair right again, on the same client. */
    arg_t after[N];
    for (int i = 0; i < N; i++)
        after[i] = (arg_t){.c = c, .id = 200 + i, .iters = 40};
    run_threads(after, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(after[i].errors, 0);
        assert_int_equal(after[i].wrong, 0);
        assert_int_equal(after[i].ok, 40);
    }
    ds_client_close(c);
}

static void test_killed_worker(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    enum { N = 8 };
    ds_client_t *c = connect_tcp(3000);
    assert_non_null(c);
    load_t l;
    load_start(&l, c, N);
    usleep(200 * 1000);
    dst_worker_kill(&W);
    usleep(200 * 1000);
    load_stop(&l, N);
    for (int i = 0; i < N; i++) {
        arg_t *a = &l.args[i];
        assert_int_equal(a->wrong, 0);
        assert_true(a->errors >= 1);
        assert_true(a->first_error == DS_K_CLIENT_WORKER_DISCONNECT ||
                    a->first_error == DS_K_RPC_UNAVAILABLE);
        assert_true(a->max_call_ms < 2500); /* failed, not timed out */
    }
    assert_int_equal(dst_worker_restart(&W), 0);
    arg_t after[N];
    for (int i = 0; i < N; i++)
        after[i] = (arg_t){.c = c, .id = 300 + i, .iters = 40};
    run_threads(after, N);
    int ok = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(after[i].wrong, 0);
        ok += after[i].ok;
    }
    /* The first call of a thread may still meet the old session's end. */
    assert_true(ok >= N * 40 - N);
    ds_client_close(c);
}

static void test_env_checked(void **state)
{
    (void)state;
    setenv("DS_CLIENT_MUX", "yes", 1);
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    ds_client_t *c = NULL;
    ds_status_t st = ds_client_connect(&o, &c);
    unsetenv("DS_CLIENT_MUX");
    assert_int_equal(st, DS_K_INVALID);
    assert_null(c);
    assert_non_null(strstr(ds_last_error(), "DS_CLIENT_MUX='yes'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_sharing), cmocka_unit_test(test_not_with_tiers),
        cmocka_unit_test(test_stopped_worker),     cmocka_unit_test(test_killed_worker),
        cmocka_unit_test(test_env_checked),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
