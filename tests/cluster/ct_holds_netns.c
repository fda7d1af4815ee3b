/* Latches and global references across network namespaces: three workers,
 * each in its own namespace (netns_util.h), etcd in the hub; the test's
 * clients connect from inside the namespace of the worker they use:
 *  - a read latch taken through h1 holds back a set through h2 until it is
 *    released, and a read through h3 meanwhile sees the old value;
 *  - a write latch taken through h2 makes a read latch through h1 answer
 *    K_TRY_AGAIN;
 *  - references added through h1 and h2 are one count seen through h3; a
 *    client decreases only its own; when the last holder's client closes
 *    the object is deleted on every worker.
 * Skipped, with a message, when the kernel refuses namespaces. */
#include "cluster_util.h"
#include "netns_util.h"

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

static ct_netns_t NET;
static dst_etcd_t E;
static dst_worker_t W[3];

static int setup(void **state)
{
    (void)state;
    if (ct_netns_setup(&NET, 3, &E) != 0) return -1;
    if (NET.unavailable[0]) return 0; /* every test skips */
    char flags[512];
    snprintf(flags, sizeof(flags),
             "--etcd_address %s --cluster_name hn%d --node_timeout_s %d --heartbeat_interval_ms %d",
             E.address, (int)getpid(), CT_NODE_TIMEOUT_S, CT_HEARTBEAT_MS);
    return ct_netns_start_workers(&NET, W, 3, flags);
}

static int teardown(void **state)
{
    (void)state;
    ct_netns_teardown(&NET, &E, W, 3);
    return 0;
}

#define SKIP_IF_UNAVAILABLE() CT_NETNS_SKIP_IF_UNAVAILABLE(&NET)

/* The calling thread moves into host i's namespace (i < 0: back home):
 * the clients' connections are made, and their requests sent, from there. */
static void in(int i)
{
    assert_int_equal(dst_netns_enter(i < 0 ? NULL : NET.hosts[i]), 0);
}

static ds_client_t *client_of(int i)
{
    if (dst_netns_enter(NET.hosts[i]) != 0) return NULL;
    return dst_connect(&W[i], DS_TRANSPORT_TCP);
}

/* Waits until every worker sees the three members (bounded). */
static void wait_members(void)
{
    for (int i = 0; i < 3; i++) {
        in(i);
        assert_true(dst_wait_members(&W[i], 3, 15000) >= 0);
    }
    in(-1);
}

static void test_latches_across_namespaces(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    wait_members();
    const char *key = "hn-latch";
    const char *keys[1] = {key};
    ds_client_t *reader = client_of(0);
    assert_non_null(reader);
    assert_int_equal(ct_set(reader, key, 5000, 100), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(reader, 1, keys, 30000, NULL), DS_K_OK);

    ct_writer_t w = {.connect = client_of, .node = 1, .key = key, .len = 7000, .seed = 101};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ct_writer_main, &w), 0);
    /* The set on h2 waits while h1's reader holds the latch. */
    assert_false(ct_writer_finished(&w, 1500));
    ds_client_t *c3 = client_of(2);
    assert_non_null(c3);
    assert_true(ct_read_ok(c3, key, 5000, 100, 0));
    assert_false(atomic_load(&w.done));
    in(0);
    assert_int_equal(ds_kv_unrlatch(reader, 1, keys, NULL), DS_K_OK);
    assert_true(ct_writer_finished(&w, 10000));
    pthread_join(th, NULL);
    assert_int_equal(w.st, DS_K_OK);
    in(2);
    assert_true(ct_read_ok(c3, key, 7000, 101, 0));

    /* A write latch through h2 excludes a read latch through h1. */
    ds_client_t *wl = client_of(1);
    assert_non_null(wl);
    assert_int_equal(ds_object_wlatch(wl, 1, keys, 5000, NULL), DS_K_OK);
    in(0);
    assert_int_equal(ds_kv_rlatch(reader, 1, keys, 300, NULL), DS_K_TRY_AGAIN);
    in(1);
    assert_int_equal(ds_object_unwlatch(wl, 1, keys, NULL), DS_K_OK);
    in(0);
    assert_int_equal(ds_kv_rlatch(reader, 1, keys, 5000, NULL), DS_K_OK);
    assert_int_equal(ds_kv_unrlatch(reader, 1, keys, NULL), DS_K_OK);
    in(-1);
    ds_client_close(wl);
    ds_client_close(c3);
    ds_client_close(reader);
}

static uint32_t ref_count(int node, const char *key)
{
    ds_client_t *c = client_of(node);
    uint32_t count = UINT32_MAX;
    if (c && ds_object_query_global_ref_num(c, key, &count) != DS_K_OK) count = UINT32_MAX;
    ds_client_close(c);
    in(-1);
    return count;
}

static void test_references_across_namespaces(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    const char *key = "hn-ref";
    const char *keys[1] = {key};
    ds_client_t *c1 = client_of(0);
    assert_non_null(c1);
    assert_int_equal(ct_set(c1, key, 3000, 200), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(c1, 1, keys, NULL), DS_K_OK);
    ds_client_t *c2 = client_of(1);
    assert_non_null(c2);
    assert_int_equal(ds_object_g_increase_ref(c2, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ref_count(2, key), 2);
    /* A client decreases only its own references. */
    ds_client_t *c3 = client_of(2);
    assert_non_null(c3);
    ds_status_t st;
    assert_int_equal(ds_object_g_decrease_ref(c3, 1, keys, &st), DS_K_NOT_FOUND);
    in(0);
    assert_int_equal(ds_object_g_decrease_ref(c1, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ref_count(2, key), 1);
    /* The last holder's client goes: the object goes on every worker. */
    ds_client_close(c2);
    uint32_t left = 1;
    for (int i = 0; i < 100 && left != 0; i++) {
        left = ref_count(2, key);
        if (left != 0) usleep(50000);
    }
    assert_int_equal(left, 0);
    in(2);
    ds_status_t gst = DS_K_OK;
    for (int i = 0; i < 100 && gst != DS_K_NOT_FOUND; i++) {
        gst = ct_get_status(c3, key, 0);
        if (gst != DS_K_NOT_FOUND) usleep(50000);
    }
    assert_int_equal(gst, DS_K_NOT_FOUND);
    in(-1);
    ds_client_close(c3);
    ds_client_close(c1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latches_across_namespaces),
        cmocka_unit_test(test_references_across_namespaces),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
