/* The worker with its latency policy off (--busy_poll_us 0: a plain epoll
 * loop, worker/core/poll_policy.h). Clients that poll and clients that do
 * not, over shared memory (request lanes) and TCP, read back every value
 * they wrote, including values large enough for a client to promise the
 * worker its request (DS_LANE_AHEAD_MIN); the loop's timers still drive
 * deadlines (a subscribe-get that times out, a TTL that expires); and the
 * worker's figures show that it never polled, watched its lanes, kept a
 * promise or parted from a client, while lanes still carried requests. */
#include "harness.h"

#include "common/clock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 128, "--busy_poll_us 0");
}

static int teardown(void **state)
{
    (void)state;
    if (W.pid > 0) assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

static ds_client_t *connect_to(ds_transport_t t, int busy_poll_us)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = t;
    o.unix_socket_dir = W.sockdir[0] ? W.sockdir : NULL;
    o.busy_poll_us = busy_poll_us;
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_OK);
    return c;
}

static void test_serves_values(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 1024, 8000, 65536, 512u << 10, 1u << 20, 4u << 20};
    static const int polls[] = {0, -1}; /* the client's default, and off */
    uint8_t *v = malloc(4u << 20), *out = malloc(4u << 20);
    assert_non_null(v);
    assert_non_null(out);
    for (int t = 0; t < 2; t++) {
        for (int p = 0; p < 2; p++) {
            ds_client_t *c = connect_to(t == 0 ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP, polls[p]);
            for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                for (uint64_t round = 0; round < 10; round++) {
                    uint64_t seed = ((uint64_t)t * 2 + (uint64_t)p) * 1000 + s * 10 + round;
                    dst_fill(v, sizes[s], seed);
                    assert_int_equal(ds_kv_set(c, "po-key", v, sizes[s], NULL), DS_K_OK);
                    size_t len = 0;
                    assert_int_equal(ds_kv_get_into(c, "po-key", 0, out, 4u << 20, &len), DS_K_OK);
                    assert_int_equal(len, sizes[s]);
                    assert_true(dst_check(out, len, seed));
                }
            }
            ds_client_close(c);
        }
    }
    free(v);
    free(out);
    /* Lanes carried the local clients' requests; nothing polled. */
    assert_true(dst_stat(&W, "lane_requests") > 0);
    assert_int_equal(dst_stat(&W, "polling.max_us"), 0);
    assert_int_equal(dst_stat(&W, "polling.hits"), 0);
    assert_int_equal(dst_stat(&W, "polling.polled_us"), 0);
    assert_int_equal(dst_stat(&W, "polling.promised"), 0);
    assert_int_equal(dst_stat(&W, "polling.watched"), 0);
    assert_int_equal(dst_stat(&W, "polling.transfer_sleeps"), 0);
    assert_int_equal(dst_stat(&W, "lane_parts"), 0);
}

/* The loop's timers run without the policy: a subscribe-get's deadline
 * (subscription sweep) and a TTL (store expiry sweep). */
static void test_timers_run(void **state)
{
    (void)state;
    ds_client_t *c = connect_to(DS_TRANSPORT_LOCAL, 0);
    uint8_t out[16];
    size_t len = 0;
    uint64_t t0 = ds__now_ms();
    assert_int_equal(ds_kv_get_into(c, "po-never", 300, out, sizeof(out), &len), DS_K_NOT_FOUND);
    uint64_t dt = ds__now_ms() - t0;
    assert_true(dt >= 290 && dt < 300 + 700);

    ds_set_param_t prm = DS_SET_PARAM_INIT;
    prm.ttl_second = 1;
    assert_int_equal(ds_kv_set(c, "po-ttl", "v", 1, &prm), DS_K_OK);
    assert_int_equal(ds_kv_get_into(c, "po-ttl", 0, out, sizeof(out), &len), DS_K_OK);
    double before = dst_stat(&W, "objects.expirations");
    /* No request meanwhile: only the loop's expiry timer can remove it
     * before the next one (STATS) is read. */
    usleep(2500 * 1000);
    assert_true(dst_stat(&W, "objects.expirations") >= before + 1);
    assert_int_equal(ds_kv_get_into(c, "po-ttl", 0, out, sizeof(out), &len), DS_K_NOT_FOUND);
    ds_client_close(c);
    assert_int_equal(dst_stat(&W, "polling.hits"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serves_values),
        cmocka_unit_test(test_timers_run),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
