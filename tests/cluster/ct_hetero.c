/* The heterogeneous client in a cluster, against real etcd and two workers
 * (A, B), on the host device backend (DS_DEVICE_BACKEND=host):
 *  - pages written on A (by a KV set, or by mset_d2h from device memory)
 *    are read into device memory on B by mget_h2d, byte-exact, through
 *    local and TCP clients, with enable_remote_h2d on and off: a key held
 *    by another worker is pulled by the client's worker and then copied to
 *    the device either way (Yuanrong's remote H2D is a faster path to the
 *    same result, not a different answer);
 *  - a key set on A while B's mget_h2d waits (sub_timeout_ms) is received;
 *  - a key held nowhere fails alone, DS_K_NOT_FOUND;
 *  - pages written with mset_d2h on B are read on A by a plain KV get;
 *  - dev_publish through A, dev_subscribe through B: device to device from
 *    the publisher's memory (one machine), and from the worker's copy
 *    pulled from A when that path is off (DS_DEVICE_IPC=0), over local and
 *    TCP clients; the key is gone from both workers and the publisher's
 *    wait for its receipt ends. */
#include "cluster_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ds/hetero_client.h"

static ct_cluster_t C;
enum { A = 0, B = 1 };
#define PAGE (64 * 1024)
#define NPAGES 4

static int setup(void **state)
{
    (void)state;
    const char *extra[] = {"--enable_data_replication false", "--enable_data_replication false"};
    return ct_cluster_start_with(&C, 2, NULL, extra);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

static ds_hetero_t *hetero_on(int i, ds_transport_t t, bool remote_h2d)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = C.w[i].host;
    o.port = C.w[i].port;
    o.transport = t;
    o.token = getenv("DS_TEST_TOKEN");
    o.unix_socket_dir = C.w[i].sockdir[0] ? C.w[i].sockdir : NULL;
    ds_hetero_t *h = NULL;
    if (ds_hetero_connect(&o, remote_h2d, &h) != DS_K_OK)
        fprintf(stderr, "hetero connect %s:%d: %s\n", o.host, o.port, ds_last_error());
    return h;
}

static const ds_transport_t transports[] = {DS_TRANSPORT_LOCAL, DS_TRANSPORT_TCP};

static void test_remote_pages_reach_the_device(void **state)
{
    (void)state;
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    assert_non_null(a);
    static uint8_t dev[NPAGES][PAGE];
    for (int remote = 0; remote < 2; remote++) {
        for (int t = 0; t < 2; t++) {
            ds_hetero_t *h = hetero_on(B, transports[t], remote == 1);
            assert_non_null(h);
            char names[NPAGES][64];
            const char *keys[NPAGES];
            ds_blob_t blobs[NPAGES];
            ds_device_blob_list_t lists[NPAGES];
            for (int k = 0; k < NPAGES; k++) {
                snprintf(names[k], sizeof names[k], "ct.hetero.%d.%d.%d", remote, t, k);
                keys[k] = names[k];
                assert_int_equal(ct_set(a, keys[k], PAGE, 1000u + 10u * remote + 3u * t + k),
                                 DS_K_OK);
                memset(dev[k], 0, PAGE);
                blobs[k] = (ds_blob_t){(uint64_t)(uintptr_t)dev[k], PAGE};
                lists[k] = (ds_device_blob_list_t){&blobs[k], 1, 0, 0};
            }
            ds_status_t st[NPAGES];
            assert_int_equal(ds_hetero_mget_h2d(h, NPAGES, keys, lists, 5000, st), DS_K_OK);
            for (int k = 0; k < NPAGES; k++) {
                assert_int_equal(st[k], DS_K_OK);
                assert_true(dst_check(dev[k], PAGE, 1000u + 10u * remote + 3u * t + k));
            }
            /* Held nowhere: that key alone fails. */
            const char *two[2] = {keys[0], "ct.hetero.nowhere"};
            ds_status_t st2[2];
            assert_int_equal(ds_hetero_mget_h2d(h, 2, two, lists, 0, st2), DS_K_OK);
            assert_int_equal(st2[0], DS_K_OK);
            assert_int_equal(st2[1], DS_K_NOT_FOUND);
            ds_hetero_close(h);
        }
    }
    ds_client_close(a);
}

static void test_waiting_get_receives_a_remote_set(void **state)
{
    (void)state;
    ds_hetero_t *h = hetero_on(B, DS_TRANSPORT_LOCAL, true);
    assert_non_null(h);
    static uint8_t dev[PAGE];
    ds_blob_t blob = {(uint64_t)(uintptr_t)dev, PAGE};
    ds_device_blob_list_t list = {&blob, 1, 0, 0};
    const char *key = "ct.hetero.late";
    ds_future_t *f = NULL;
    assert_int_equal(ds_hetero_async_mget_h2d(h, 1, &key, &list, 10000, &f), DS_K_OK);
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    assert_non_null(a);
    assert_int_equal(ct_set(a, key, PAGE, 77), DS_K_OK);
    ds_status_t st = DS_K_RUNTIME_ERROR;
    assert_int_equal(ds_future_get(f, 15000, &st), DS_K_OK);
    assert_int_equal(st, DS_K_OK);
    assert_true(dst_check(dev, PAGE, 77));
    ds_future_release(f);
    ds_client_close(a);
    ds_hetero_close(h);
}

static void test_device_pages_written_on_b_read_on_a(void **state)
{
    (void)state;
    ds_hetero_t *h = hetero_on(B, DS_TRANSPORT_LOCAL, false);
    assert_non_null(h);
    static uint8_t dev[2][PAGE];
    dst_fill(dev[0], PAGE, 501);
    dst_fill(dev[1], PAGE, 502);
    /* One key of two blobs: the value is the pages joined. */
    ds_blob_t blobs[2] = {{(uint64_t)(uintptr_t)dev[0], PAGE}, {(uint64_t)(uintptr_t)dev[1], PAGE}};
    ds_device_blob_list_t list = {blobs, 2, 0, 0};
    const char *key = "ct.hetero.d2h";
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &key, &list, &p, NULL), DS_K_OK);
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_TCP);
    assert_non_null(a);
    void *v = NULL;
    size_t n = 0;
    assert_int_equal(ds_kv_get(a, key, 5000, &v, &n), DS_K_OK);
    assert_int_equal(n, 2 * PAGE);
    assert_memory_equal(v, dev[0], PAGE);
    assert_memory_equal((uint8_t *)v + PAGE, dev[1], PAGE);
    ds_free(v);
    ds_client_close(a);
    ds_hetero_close(h);
}

static void test_dev_publish_on_a_subscribe_on_b(void **state)
{
    (void)state;
    ds_hetero_t *pub = hetero_on(A, DS_TRANSPORT_LOCAL, false);
    assert_non_null(pub);
    uint64_t src = 0, dst = 0;
    assert_int_equal(ds_device_malloc(0, 2 * PAGE, &src), DS_K_OK);
    assert_int_equal(ds_device_malloc(0, 2 * PAGE, &dst), DS_K_OK);
    for (int round = 0; round < 4; round++) {
        ds_transport_t t = transports[round % 2];
        bool ipc_off = round >= 2;
        ds_hetero_t *sub = hetero_on(B, t, false);
        assert_non_null(sub);
        char key[64];
        snprintf(key, sizeof key, "ct.hetero.pub.%d", round);
        const char *k = key;
        dst_fill((uint8_t *)(uintptr_t)src, 2 * PAGE, 600 + (uint64_t)round);
        ds_blob_t in[2] = {{src, PAGE}, {src + PAGE, PAGE}};
        ds_device_blob_list_t il = {in, 2, 0, 0};
        assert_int_equal(ds_hetero_dev_publish(pub, 1, &k, &il, NULL), DS_K_OK);
        if (ipc_off) setenv("DS_DEVICE_IPC", "0", 1);
        memset((void *)(uintptr_t)dst, 0, 2 * PAGE);
        ds_blob_t out[1] = {{dst, 2 * PAGE}};
        ds_device_blob_list_t ol = {out, 1, 0, 0};
        ds_status_t st[1];
        assert_int_equal(ds_hetero_dev_subscribe(sub, 1, &k, &ol, 5000, st), DS_K_OK);
        unsetenv("DS_DEVICE_IPC");
        assert_memory_equal((void *)(uintptr_t)dst, (void *)(uintptr_t)src, 2 * PAGE);
        ds_hetero_dev_stats_t s;
        ds_hetero_dev_stats(sub, &s);
        assert_int_equal(s.d2d_keys, ipc_off ? 0 : 1);
        assert_int_equal(s.arena_keys, ipc_off ? 1 : 0);
        assert_int_equal(ds_hetero_dev_wait_received(pub, 1, &k, 10000, st), DS_K_OK);
        bool ex = true;
        assert_int_equal(ds_kv_exist(ds_hetero_kv(sub), 1, &k, &ex), DS_K_OK);
        assert_false(ex);
        ds_hetero_close(sub);
    }
    ds_device_free(src);
    ds_device_free(dst);
    ds_hetero_close(pub);
}

int main(void)
{
    /* Host memory stands in for device memory (chosen once per process). */
    setenv("DS_DEVICE_BACKEND", "host", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_pages_reach_the_device),
        cmocka_unit_test(test_waiting_get_receives_a_remote_set),
        cmocka_unit_test(test_device_pages_written_on_b_read_on_a),
        cmocka_unit_test(test_dev_publish_on_a_subscribe_on_b),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
