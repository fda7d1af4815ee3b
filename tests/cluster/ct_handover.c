/* A write in the window right after a planned exit's metadata handover
 * (real etcd, workers A, B, C on 127.0.0.11-13): key K is held by B and its
 * metadata owned by A. etcd is paused (SIGSTOP) so that no worker's ring
 * drops A while A leaves: A hands K's entry to K's next owner and waits to
 * revoke its lease; meanwhile K is written again through C, whose ring
 * still names A as K's owner. Once etcd runs again and A is gone, K reads
 * back as the new value through B and C: the write is not undone when the
 * holders register their keys with the new owners. Once with one copy of
 * each write, once with two (--replica_num 2). */
#include "cluster_util.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;
enum { A = 0, B = 1, CC = 2 };

static int teardown(void **state)
{
    (void)state;
    if (C.etcd.pid > 0) kill(C.etcd.pid, SIGCONT);
    ct_cluster_stop(&C);
    return 0;
}

typedef struct {
    char out[4096];
    int rc;
} stop_t;

static void *stop_main(void *arg)
{
    stop_t *s = arg;
    s->rc = ct_dscli_stop(&C.w[A], NULL, s->out, sizeof(s->out));
    return NULL;
}

/* Whether the worker's log has the line. */
static bool log_has(const dst_worker_t *w, const char *what)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "grep -q '%s' %s", what, w->logpath);
    return system(cmd) == 0;
}

static void write_after_handover(const char *flags)
{
    const char *extra[] = {flags, flags, flags};
    assert_int_equal(ct_cluster_start_with(&C, 3, NULL, extra), 0);
    ds_client_t *b = ct_client(&C, B, DS_TRANSPORT_TCP);
    ds_client_t *c = ct_client(&C, CC, DS_TRANSPORT_TCP);
    assert_non_null(b);
    assert_non_null(c);
    /* A key A owns, written through B (so B holds it). */
    char key[32] = "";
    for (int k = 0; k < 64 && key[0] == '\0'; k++) {
        char name[32];
        snprintf(name, sizeof(name), "ho-%d", k);
        if (ct_set_find_owner(&C, b, name, 4096, 1) == A) {
            snprintf(key, sizeof(key), "%s", name);
        } else {
            const char *kp = name;
            ds_kv_del(b, 1, &kp, NULL);
        }
    }
    assert_true(key[0] != '\0');

    assert_int_equal(kill(C.etcd.pid, SIGSTOP), 0);
    stop_t st = {.rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stop_main, &st), 0);
    bool handed = false;
    for (int t = 0; t < 200 && !handed; t++) {
        handed = log_has(&C.w[A], "handing over the metadata");
        if (!handed) usleep(20000);
    }
    usleep(200000); /* the entries reach their new owners */
    /* C's ring still names A as the key's owner. */
    assert_int_equal(ct_set(c, key, 5000, 2), DS_K_OK);
    assert_int_equal(kill(C.etcd.pid, SIGCONT), 0);
    pthread_join(th, NULL);
    assert_true(handed);
    assert_int_equal(st.rc, 0);
    assert_true(ct_wait_members(&C, 2, 15000) >= 0);
    usleep(1000000); /* the holders register their keys with the new owners */
    bool ok_b = ct_read_ok(b, key, 5000, 2, 0), ok_c = ct_read_ok(c, key, 5000, 2, 0);
    fprintf(stderr, "  %s written through C after A handed it over: %s through B, %s through C\n",
            key, ok_b ? "new value" : "NOT the new value",
            ok_c ? "new value" : "NOT the new value");
    assert_true(ok_b);
    assert_true(ok_c);
    ds_client_close(b);
    ds_client_close(c);
}

static void test_write_after_handover(void **state)
{
    (void)state;
    write_after_handover(NULL);
}

/* The same with two copies of each write: the write names its holders at
 * the owner in one REPL_META, forwarded the same way. */
static void test_write_after_handover_replicas(void **state)
{
    (void)state;
    write_after_handover("--replica_num 2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_write_after_handover, teardown),
        cmocka_unit_test_teardown(test_write_after_handover_replicas, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
