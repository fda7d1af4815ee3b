/* Subscribe-gets: a get with sub_timeout_ms waits for keys that are not yet
 * published and is woken by the publish (from another process, over either
 * transport); timeouts come back promptly with what exists. Timings are
 * asserted with margins. */
#include "harness.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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
    return dst_worker_start(&W, 64, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

/* Forks a process that sets key to a payload of len bytes after delay_ms. */
static pid_t set_later(const char *key, size_t len, int delay_ms, ds_transport_t t)
{
    pid_t pid = fork();
    if (pid == 0) {
        usleep((useconds_t)delay_ms * 1000);
        ds_client_t *c = dst_connect(&W, t);
        uint8_t *v = malloc(len);
        dst_fill(v, len, len);
        int rc = c && ds_kv_set(c, key, v, len, NULL) == DS_K_OK ? 0 : 1;
        ds_client_close(c);
        free(v);
        _exit(rc);
    }
    return pid;
}

static void expect_child_ok(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void woken(ds_transport_t reader, ds_transport_t writer, size_t len)
{
    ds_client_t *c = dst_connect(&W, reader);
    char key[64];
    snprintf(key, sizeof(key), "sub-%d-%d-%zu", reader, writer, len);
    pid_t pid = set_later(key, len, 300, writer);
    uint64_t t0 = ds__now_ms();
    void *v = NULL;
    size_t got = 0;
    assert_int_equal(ds_kv_get(c, key, 10000, &v, &got), DS_K_OK);
    uint64_t dt = ds__now_ms() - t0;
    assert_int_equal(got, len);
    assert_true(dst_check(v, got, len));
    ds_free(v);
    /* woken by the publish (~300 ms), not by the 10 s timeout */
    assert_true(dt >= 250);
    assert_true(dt < 3000);
    expect_child_ok(pid);
    ds_client_close(c);
}

static void test_woken_local_by_local(void **state)
{
    (void)state;
    woken(DS_TRANSPORT_LOCAL, DS_TRANSPORT_LOCAL, 1000);
    woken(DS_TRANSPORT_LOCAL, DS_TRANSPORT_LOCAL, 3 << 20);
}

static void test_woken_across_transports(void **state)
{
    (void)state;
    woken(DS_TRANSPORT_TCP, DS_TRANSPORT_LOCAL, 2000);
    woken(DS_TRANSPORT_LOCAL, DS_TRANSPORT_TCP, 2 << 20);
    woken(DS_TRANSPORT_TCP, DS_TRANSPORT_TCP, 100);
}

static void test_timeouts_prompt(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        ds_client_t *c = dst_connect(&W, t ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
        void *v = NULL;
        size_t len;
        uint64_t t0 = ds__now_ms();
        assert_int_equal(ds_kv_get(c, "never-set", 400, &v, &len), DS_K_NOT_FOUND);
        uint64_t dt = ds__now_ms() - t0;
        assert_true(dt >= 390);
        assert_true(dt < 400 + 5000);
        assert_non_null(strstr(ds_last_error(), "never-set"));
        t0 = ds__now_ms();
        assert_int_equal(ds_kv_get(c, "never-set", 0, &v, &len), DS_K_NOT_FOUND);
        assert_true(ds__now_ms() - t0 < 2000); /* no wait; nothing to time out */
        ds_client_close(c);
    }
}

static void test_mget_waits_for_all(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    pid_t a = set_later("all-a", 10, 100, DS_TRANSPORT_LOCAL);
    pid_t b = set_later("all-b", 20, 400, DS_TRANSPORT_TCP);
    const char *keys[] = {"all-a", "all-b"};
    ds_value_t out[2];
    uint64_t t0 = ds__now_ms();
    assert_int_equal(ds_kv_mget(c, 2, keys, 5000, out), DS_K_OK);
    uint64_t dt = ds__now_ms() - t0;
    assert_true(dt >= 350 && dt < 3000);
    assert_int_equal(out[0].status, DS_K_OK);
    assert_int_equal(out[1].status, DS_K_OK);
    assert_int_equal(out[1].len, 20);
    ds_free(out[0].data);
    ds_free(out[1].data);
    expect_child_ok(a);
    expect_child_ok(b);
    /* one key never comes: the timeout returns the one that exists */
    const char *k2[] = {"all-a", "all-never"};
    t0 = ds__now_ms();
    assert_int_equal(ds_kv_mget(c, 2, k2, 300, out), DS_K_OK);
    dt = ds__now_ms() - t0;
    assert_true(dt >= 290 && dt < 300 + 5000);
    assert_int_equal(out[0].status, DS_K_OK);
    assert_int_equal(out[1].status, DS_K_NOT_FOUND);
    ds_free(out[0].data);
    ds_client_close(c);
}

typedef struct {
    ds_client_t *c;
    int ok;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    const char *k = "fanout-key";
    ds_buffer_t *b = NULL;
    if (ds_kv_get_buffers(w->c, 1, &k, 10000, &b) == DS_K_OK && b && ds_buffer_size(b) == 4096 &&
        dst_check(ds_buffer_data(b), 4096, 4096))
        w->ok = 1;
    ds_buffer_release(b);
    return NULL;
}

static void test_many_waiters_one_publish(void **state)
{
    (void)state;
    enum { N = 24 };
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_client_t *r = dst_connect(&W, DS_TRANSPORT_TCP);
    pthread_t th[N];
    waiter_t ws[N];
    for (int i = 0; i < N; i++) {
        ws[i].c = i % 2 ? c : r;
        ws[i].ok = 0;
        pthread_create(&th[i], NULL, wait_thread, &ws[i]);
    }
    usleep(200000);
    assert_true(dst_stat(&W, "subscriptions_waiting") >= 1);
    pid_t p = set_later("fanout-key", 4096, 0, DS_TRANSPORT_LOCAL);
    uint64_t t0 = ds__now_ms();
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    assert_true(ds__now_ms() - t0 < 5000);
    for (int i = 0; i < N; i++)
        assert_int_equal(ws[i].ok, 1);
    expect_child_ok(p);
    assert_int_equal((int)dst_stat(&W, "subscriptions_waiting"), 0);
    ds_client_close(c);
    ds_client_close(r);
}

static void test_waiter_dies(void **state)
{
    (void)state;
    /* A client killed while waiting leaves no subscription behind. */
    pid_t pid = fork();
    if (pid == 0) {
        ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
        void *v;
        size_t len;
        ds_kv_get(c, "dies-waiting", 60000, &v, &len);
        _exit(0);
    }
    usleep(300000);
    assert_true(dst_stat(&W, "subscriptions_waiting") >= 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    uint64_t t0 = ds__now_ms();
    while (dst_stat(&W, "subscriptions_waiting") != 0 && ds__now_ms() - t0 < 3000)
        usleep(20000);
    assert_int_equal((int)dst_stat(&W, "subscriptions_waiting"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_woken_local_by_local),
        cmocka_unit_test(test_woken_across_transports),
        cmocka_unit_test(test_timeouts_prompt),
        cmocka_unit_test(test_mget_waits_for_all),
        cmocka_unit_test(test_many_waiters_one_publish),
        cmocka_unit_test(test_waiter_dies),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
