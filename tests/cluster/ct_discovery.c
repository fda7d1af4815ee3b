/* Service discovery and client failover through the C API, in a cluster of
 * three (127.0.0.11-13, real etcd, 2 s leases). Worker 0 publishes host ID
 * "hA" (--host_id_env_name DS_CT_HOST_A), workers 1 and 2 "hB"; the
 * discovery reads DS_CT_HOST_A, so worker 0 is on its node.
 *  - selection: the lists split by host, per policy; PREFERRED and REQUIRED
 *    pick worker 0; RANDOM lists everyone as another node's; bad arguments
 *    and an unknown cluster answer the codes ds/service_discovery.h names.
 *  - failover: a client connected through the discovery with
 *    enable_cross_node_connection works on worker 0; worker 0 is killed
 *    (SIGKILL); after at most one failed call the client serves from
 *    another worker, the key worker 1 holds still reads, new keys are
 *    written and read, and the key only worker 0 held is gone.
 *  - the same with four threads sharing the client through the kill (worker
 *    0 restarted first): each completes a run of calls afterwards. */
#include "cluster_util.h"

#include "common/clock.h"
#include "ds/service_discovery.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;
static char addr[3][96];

static int setup(void **state)
{
    (void)state;
    setenv("DS_CT_HOST_A", "hA", 1);
    setenv("DS_CT_HOST_B", "hB", 1);
    const char *extra[] = {"--host_id_env_name DS_CT_HOST_A", "--host_id_env_name DS_CT_HOST_B",
                           "--host_id_env_name DS_CT_HOST_B"};
    if (ct_cluster_start_with(&C, 3, NULL, extra) != 0) return -1;
    for (int i = 0; i < 3; i++)
        snprintf(addr[i], sizeof(addr[i]), "%s:%d", C.w[i].host, C.w[i].port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

static ds_service_discovery_t *discovery(ds_service_affinity_policy_t policy, const char *env)
{
    ds_service_discovery_options_t o;
    ds_service_discovery_options_init(&o);
    o.etcd_address = C.etcd.address;
    o.cluster_name = C.name;
    o.host_id_env_name = env;
    o.affinity_policy = policy;
    ds_service_discovery_t *sd = NULL;
    assert_int_equal(ds_service_discovery_new(&o, &sd), DS_K_OK);
    assert_int_equal(ds_service_discovery_init(sd), DS_K_OK);
    return sd;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_selection(void **state)
{
    (void)state;
    ds_service_discovery_t *sd = discovery(DS_AFFINITY_PREFERRED_SAME_NODE, "DS_CT_HOST_A");
    assert_true(ds_service_discovery_has_host_affinity(sd));
    assert_string_equal(ds_service_discovery_host_id(sd), "hA");
    char **same, **other;
    size_t ns, no;
    assert_int_equal(ds_service_discovery_get_all_workers(sd, &same, &ns, &other, &no), DS_K_OK);
    assert_int_equal(ns, 1);
    assert_int_equal(no, 2);
    assert_string_equal(same[0], addr[0]);
    qsort(other, no, sizeof(*other), cmp);
    char *want[2] = {addr[1], addr[2]};
    qsort(want, 2, sizeof(*want), cmp);
    assert_string_equal(other[0], want[0]);
    assert_string_equal(other[1], want[1]);
    ds_strings_free(same, ns);
    ds_strings_free(other, no);

    char ip[64];
    int port = 0;
    bool here = false;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ds_service_discovery_select_worker(sd, ip, sizeof(ip), &port, &here),
                         DS_K_OK);
        assert_string_equal(ip, C.w[0].host);
        assert_int_equal(port, C.w[0].port);
        assert_true(here);
    }
    assert_int_equal(ds_service_discovery_select_same_node_worker(sd, ip, sizeof(ip), &port),
                     DS_K_OK);
    assert_int_equal(port, C.w[0].port);
    assert_int_equal(ds_service_discovery_select_worker(sd, ip, 4, &port, NULL), DS_K_INVALID);
    ds_service_discovery_free(sd);

    sd = discovery(DS_AFFINITY_RANDOM, "DS_CT_HOST_A");
    assert_false(ds_service_discovery_has_host_affinity(sd));
    assert_int_equal(ds_service_discovery_get_all_workers(sd, &same, &ns, &other, &no), DS_K_OK);
    assert_int_equal(ns, 0);
    assert_int_equal(no, 3);
    ds_strings_free(same, ns);
    ds_strings_free(other, no);
    ds_service_discovery_free(sd);

    /* No host ID: REQUIRED cannot choose. */
    sd = discovery(DS_AFFINITY_REQUIRED_SAME_NODE, "DS_CT_NO_SUCH_VARIABLE");
    assert_int_equal(ds_service_discovery_select_worker(sd, ip, sizeof(ip), &port, NULL),
                     DS_K_INVALID);
    assert_int_equal(ds_service_discovery_select_same_node_worker(sd, ip, sizeof(ip), &port),
                     DS_K_INVALID);
    ds_service_discovery_free(sd);

    /* Bad options, and a cluster nobody is in. */
    ds_service_discovery_options_t o;
    ds_service_discovery_options_init(&o);
    assert_int_equal(ds_service_discovery_new(&o, &sd), DS_K_INVALID);
    o.etcd_address = C.etcd.address;
    o.cluster_name = "no/slash";
    assert_int_equal(ds_service_discovery_new(&o, &sd), DS_K_INVALID);
    o.cluster_name = "nobody_here";
    assert_int_equal(ds_service_discovery_new(&o, &sd), DS_K_OK);
    assert_int_equal(ds_service_discovery_select_worker(sd, ip, sizeof(ip), &port, NULL),
                     DS_K_TRY_AGAIN);
    ds_service_discovery_free(sd);
}

static void test_failover(void **state)
{
    (void)state;
    ds_service_discovery_t *sd = discovery(DS_AFFINITY_PREFERRED_SAME_NODE, "DS_CT_HOST_A");
    ds_client_t *w1 = ct_client(&C, 1, DS_TRANSPORT_TCP);
    assert_non_null(w1);
    assert_int_equal(ct_set(w1, "disc-far", 4000, 11), DS_K_OK);

    ds_client_options_t o;
    ds_client_options_init(&o);
    o.service_discovery = sd;
    o.enable_cross_node_connection = 1;
    o.token = getenv("DS_TEST_TOKEN");
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_OK);
    assert_int_equal(ct_set(c, "disc-near", 3000, 12), DS_K_OK);
    assert_true(ct_read_ok(c, "disc-near", 3000, 12, 0));
    assert_true(ct_read_ok(c, "disc-far", 4000, 11, 0));

    dst_worker_kill(&C.w[0]);
    /* The call that finds the worker gone may fail; the next fails over. */
    ds_status_t st = ds_client_health_check(c);
    if (st != DS_K_OK) {
        assert_true(st == DS_K_CLIENT_WORKER_DISCONNECT || st == DS_K_RPC_UNAVAILABLE ||
                    st == DS_K_RPC_DEADLINE_EXCEEDED);
        st = ds_client_health_check(c);
    }
    assert_int_equal(st, DS_K_OK);

    /* Once worker 0's lease is out the survivors have re-registered their
     * keys with its successors: worker 1's key reads from anywhere. */
    assert_true(dst_wait_members(&C.w[1], 2, 20000) >= 0);
    assert_true(dst_wait_members(&C.w[2], 2, 20000) >= 0);
    bool far = false;
    for (int i = 0; i < 200 && !far; i++) {
        void *v = NULL;
        size_t len = 0;
        far = ds_kv_get(c, "disc-far", 0, &v, &len) == DS_K_OK && len == 4000 &&
              dst_check(v, len, 11);
        ds_free(v);
        if (!far) usleep(100 * 1000);
    }
    assert_true(far);
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof(key), "disc-after-%d", i);
        assert_int_equal(ct_set(c, key, 100 + (size_t)i, 100 + (uint64_t)i), DS_K_OK);
        assert_true(ct_read_ok(c, key, 100 + (size_t)i, 100 + (uint64_t)i, 0));
        assert_true(ct_read_ok(w1, key, 100 + (size_t)i, 100 + (uint64_t)i, 0));
    }
    /* What only worker 0 held is gone. */
    assert_int_not_equal(ct_get_status(c, "disc-near", 0), DS_K_OK);

    ds_client_close(c);
    ds_client_close(w1);
    ds_service_discovery_free(sd);
}

/* Threads sharing one client while its worker is killed: each keeps
 * writing and reading its own keys; calls may fail around the kill, and
 * then every thread completes a run of calls on the new worker. */
enum { NTHREADS = 4, RUN = 20, LIMIT_MS = 30000 };

typedef struct {
    ds_client_t *c;
    int id;
    atomic_int *phase; /* 1 once the worker is dead */
    bool done;         /* RUN calls in a row succeeded after the kill */
    int fails;         /* failed rounds after the kill */
    char last[256];    /* the last failure's message */
} worker_arg_t;

static void *hammer(void *p)
{
    worker_arg_t *a = p;
    int streak = 0;
    uint64_t deadline = ds__now_ms() + LIMIT_MS;
    for (int i = 0; ds__now_ms() < deadline && streak < RUN; i++) {
        char key[48];
        snprintf(key, sizeof(key), "disc-t%d-%d", a->id, i % 8);
        ds_status_t st = ct_set(a->c, key, 200, (uint64_t)(a->id * 1000 + i));
        const char *what = "set";
        void *v = NULL;
        size_t len = 0;
        if (st == DS_K_OK) {
            what = "get";
            st = ds_kv_get(a->c, key, 0, &v, &len);
        }
        bool ok = st == DS_K_OK && len == 200 && dst_check(v, len, (uint64_t)(a->id * 1000 + i));
        ds_free(v);
        if (!ok && atomic_load(a->phase) == 1) {
            a->fails++;
            snprintf(a->last, sizeof(a->last), "%s of %s: status %d: %s", what, key, (int)st,
                     st == DS_K_OK ? "wrong value" : ds_last_error());
        }
        if (atomic_load(a->phase) == 1) streak = ok ? streak + 1 : 0;
        if (!ok) usleep(2000);
    }
    a->done = streak >= RUN;
    return NULL;
}

static void test_failover_under_threads(void **state)
{
    (void)state;
    assert_int_equal(ct_worker_restart(&C, 0), 0);
    assert_true(ct_wait_members(&C, 3, 20000) >= 0);
    snprintf(addr[0], sizeof(addr[0]), "%s:%d", C.w[0].host, C.w[0].port);
    ds_service_discovery_t *sd = discovery(DS_AFFINITY_PREFERRED_SAME_NODE, "DS_CT_HOST_A");
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.service_discovery = sd;
    o.enable_cross_node_connection = 1;
    o.token = getenv("DS_TEST_TOKEN");
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_OK);

    atomic_int phase = 0;
    worker_arg_t args[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        args[i] = (worker_arg_t){.c = c, .id = i, .phase = &phase, .done = false};
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &args[i]), 0);
    }
    usleep(200 * 1000);
    dst_worker_kill(&C.w[0]);
    atomic_store(&phase, 1);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; i++)
        if (!args[i].done)
            fprintf(stderr,
                    "thread %d: no %d calls in a row within %d ms; %d failed, the last: %s\n", i,
                    RUN, LIMIT_MS, args[i].fails, args[i].last);
    for (int i = 0; i < NTHREADS; i++)
        assert_true(args[i].done);
    ds_client_close(c);
    ds_service_discovery_free(sd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_failover_under_threads),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
