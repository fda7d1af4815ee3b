/* Busy polling against a real worker started with --busy_poll_us: clients
 * that poll for their replies (the option, or DS_BUSY_POLL_US) read and
 * write every value size correctly over shared memory and TCP, including a
 * subscribe-get that outlasts the polling window and sleeps; out-of-range
 * settings are refused with a message naming them; and the worker goes back
 * to sleeping once its clients are quiet (no CPU burnt while idle). */
#include "harness.h"
#include "it_fault_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 128, "--busy_poll_us 200");
}

static int teardown(void **state)
{
    (void)state;
    if (W.pid > 0) assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

static ds_status_t connect_polling(ds_transport_t t, int busy_poll_us, ds_client_t **c)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = t;
    o.unix_socket_dir = W.sockdir[0] ? W.sockdir : NULL;
    o.busy_poll_us = busy_poll_us;
    return ds_client_connect(&o, c);
}

static void test_values_round_trip(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 1024, 65536, 65537, 1u << 20, 8u << 20};
    for (int t = 0; t < 2; t++) {
        ds_client_t *c = NULL;
        assert_int_equal(connect_polling(t == 0 ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP, 200, &c),
                         DS_K_OK);
        uint8_t *v = malloc(8u << 20), *out = malloc(8u << 20);
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            for (uint64_t round = 0; round < 20; round++) {
                uint64_t seed = s * 100 + round + (uint64_t)t * 10000;
                dst_fill(v, sizes[s], seed);
                assert_int_equal(ds_kv_set(c, "bp-key", v, sizes[s], NULL), DS_K_OK);
                size_t len = 0;
                assert_int_equal(ds_kv_get_into(c, "bp-key", 0, out, 8u << 20, &len), DS_K_OK);
                assert_int_equal(len, sizes[s]);
                assert_true(dst_check(out, len, seed));
            }
        }
        /* A subscribe-get longer than the polling window: the client sleeps
         * on the socket after 200 us and still gets the timeout answer. */
        uint64_t t0 = ds__now_ms();
        size_t len = 0;
        assert_int_equal(ds_kv_get_into(c, "bp-never", 300, out, 64, &len), DS_K_NOT_FOUND);
        uint64_t dt = ds__now_ms() - t0;
        assert_true(dt >= 290 && dt < 300 + 700);
        free(v);
        free(out);
        ds_client_close(c);
    }
}

static void test_bad_settings_refused(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    assert_int_equal(connect_polling(DS_TRANSPORT_TCP, -1, &c), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "busy_poll_us"));
    assert_int_equal(connect_polling(DS_TRANSPORT_TCP, 2000000, &c), DS_K_INVALID);
    setenv("DS_BUSY_POLL_US", "fast", 1);
    assert_int_equal(connect_polling(DS_TRANSPORT_TCP, 0, &c), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "DS_BUSY_POLL_US"));
    /* The environment applies when the option is 0. */
    setenv("DS_BUSY_POLL_US", "100", 1);
    assert_int_equal(connect_polling(DS_TRANSPORT_LOCAL, 0, &c), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "bp-env", "x", 1, NULL), DS_K_OK);
    ds_client_close(c);
    unsetenv("DS_BUSY_POLL_US");
    /* The worker refuses an out-of-range flag at start. */
    dst_worker_t bad;
    memset(&bad, 0, sizeof(bad));
    assert_int_not_equal(dst_worker_start(&bad, 64, "--busy_poll_us -5"), 0);
}

/* Polling stops once nothing arrives for --busy_poll_us: an idle worker
 * sleeps in epoll again. */
static void test_idle_worker_sleeps(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    assert_int_equal(connect_polling(DS_TRANSPORT_LOCAL, 200, &c), DS_K_OK);
    for (int i = 0; i < 200; i++)
        assert_int_equal(ds_kv_set(c, "bp-idle", "abc", 3, NULL), DS_K_OK);
    usleep(100000);
    long cpu0 = fu_cpu_ticks(W.pid);
    sleep(1);
    long cpu1 = fu_cpu_ticks(W.pid);
    long hz = sysconf(_SC_CLK_TCK);
    printf("idle worker with --busy_poll_us 200: %.2f s CPU in 1 s\n",
           (double)(cpu1 - cpu0) / (double)hz);
    assert_true((double)(cpu1 - cpu0) / (double)hz < 0.1);
    ds_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_round_trip),
        cmocka_unit_test(test_bad_settings_refused),
        cmocka_unit_test(test_idle_worker_sleeps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
