/* SIGTERM of a worker in a cluster is a planned exit, as `dscli stop` is
 * (real etcd, workers on 127.0.0.11-13): three workers, 240 checksummed
 * keys of 1 KiB to 256 KiB set round-robin through them; SIGTERM of worker 0
 * while a reader on worker 2 reads every key over and over: the worker
 * exits cleanly after moving its objects (its log reports what moved), the
 * reader sees no miss, and every key reads back byte-exact through both
 * survivors. Then SIGKILL of worker 1 moves nothing: the keys it held are
 * lost (replica_num 1), which is what the what-survives table says. */
#include "cluster_util.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;

enum { NKEYS = CT_NKEYS };
#define PREFIX "sig"
#define SEED0 620000

static size_t key_len(int i)
{
    return ((size_t)1024 << (i % 9)) - (size_t)(i % 5) * 8; /* 1 KiB .. 256 KiB */
}

static uint64_t key_seed(int i)
{
    return SEED0 + (uint64_t)i;
}

static void key_name(char *out, size_t cap, int i)
{
    ct_key_name(out, cap, PREFIX, i);
}

static int setup(void **state)
{
    (void)state;
    return ct_cluster_start(&C, 3, NULL);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

static int count_ok(int w)
{
    ds_client_t *c = ct_client(&C, w, w % 2 ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
    if (c == NULL) return -1;
    int ok = 0, shown = 0;
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        key_name(key, sizeof(key), i);
        if (ct_read_ok(c, key, key_len(i), key_seed(i), 0))
            ok++;
        else if (shown++ < 5)
            fprintf(stderr, "worker %d: key %s did not read back\n", w, key);
    }
    ds_client_close(c);
    return ok;
}

/* True when the file at path contains s. */
static bool file_has(const char *path, const char *s)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, s) != NULL;
    fclose(f);
    return found;
}

static void test_sigterm_leaves(void **state)
{
    (void)state;
    ds_client_t *cl[3];
    for (int w = 0; w < 3; w++)
        assert_non_null(cl[w] = ct_client(&C, w, w % 2 ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL));
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        key_name(key, sizeof(key), i);
        assert_int_equal(ct_set(cl[i % 3], key, key_len(i), key_seed(i)), DS_K_OK);
    }
    for (int w = 0; w < 3; w++)
        ds_client_close(cl[w]);
    for (int w = 0; w < 3; w++)
        assert_int_equal(count_ok(w), NKEYS);

    /* key_len: this suite's keys stop at 256 KiB. */
    ct_reader_t rd = {.c = &C, .worker = 2, .prefix = PREFIX, .seed0 = SEED0, .key_len = key_len};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ct_reader_main, &rd), 0);
    usleep(200000);
    char log0[sizeof(C.w[0].logpath)];
    snprintf(log0, sizeof(log0), "%s", C.w[0].logpath);
    int ws = dst_worker_stop(&C.w[0]); /* SIGTERM; waits for the exit */
    usleep(300000);
    atomic_store(&rd.stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "reader on worker 2: %ld reads during the exit, %ld misses%s%s\n", rd.reads,
            rd.misses, rd.misses ? ", first " : "", rd.first_miss);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_true(file_has(log0, "left the cluster: moved"));
    assert_true(file_has(log0, "; 0 not moved"));
    assert_int_equal(rd.misses, 0);
    assert_true(rd.reads > 0);
    assert_int_equal(ct_wait_members(&C, 2, 15000) >= 0, 1);
    assert_int_equal(count_ok(1), NKEYS);
    assert_int_equal(count_ok(2), NKEYS);

    /* SIGKILL moves nothing: what worker 1 held is gone. */
    dst_worker_kill(&C.w[1]);
    assert_int_equal(ct_wait_members(&C, 1, 15000) >= 0, 1);
    int left = count_ok(2);
    fprintf(stderr, "after SIGKILL of worker 1: %d of %d keys read back through worker 2\n", left,
            NKEYS);
    assert_true(left < NKEYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigterm_leaves, setup, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
