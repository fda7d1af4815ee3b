/* Cluster data path and cross-node subscriptions, against real etcd and three
 * workers on 127.0.0.11-13 (A, B, C):
 *  - a key set on A (copy set or zero-copy create/publish, over the Unix
 *    socket or TCP) is read on B and C, small and multi-MiB, by copy and by
 *    zero-copy buffers, through local and TCP clients, checksummed;
 *  - small remote values (up to 64 KiB) come with the owner's LOCATE answer
 *    or over the loop's link to the peer, larger ones by a job thread;
 *  - mget and multi-key get_buffers across keys living on every node and
 *    owned by several owners, with missing keys among them;
 *  - a consumer waiting on B (sub_timeout_ms) is woken promptly by a publish
 *    on A (a local consumer through its request lane), and times out
 *    promptly when nothing comes.
 * Hot copies are off (--enable_data_replication false), so every remote get
 * takes the pull path this suite is about. */
#include "cluster_util.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;
enum { A = 0, B = 1, CC = 2 };

static int setup(void **state)
{
    (void)state;
    const int arenas[] = {160, 128, 128};
    /* Every remote get pulls here: hot copies (which would serve the
     * repeated reads locally) are ct_replica's and ct_consistency's. */
    const char *extra[] = {"--enable_data_replication false", "--enable_data_replication false",
                           "--enable_data_replication false"};
    return ct_cluster_start_with(&C, 3, arenas, extra);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

static const ds_transport_t transports[] = {DS_TRANSPORT_LOCAL, DS_TRANSPORT_TCP};

static void test_set_on_a_read_everywhere(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 1000, 70000, 3u << 20, 24u << 20};
    for (int wt = 0; wt < 2; wt++) {
        ds_client_t *w = ct_client(&C, A, transports[wt]);
        assert_non_null(w);
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            char key[64];
            snprintf(key, sizeof(key), "data-%d-%zu", wt, sizes[s]);
            uint64_t seed = 100 + wt * 10 + s;
            assert_int_equal(ct_set(w, key, sizes[s], seed), DS_K_OK);
            for (int node = 0; node < 3; node++)
                for (int rt = 0; rt < 2; rt++) {
                    ds_client_t *r = ct_client(&C, node, transports[rt]);
                    assert_non_null(r);
                    assert_true(ct_read_ok(r, key, sizes[s], seed, 0));
                    assert_true(ct_read_buffer_ok(r, key, sizes[s], seed));
                    ds_client_close(r);
                }
        }
        ds_client_close(w);
    }
    /* The pulled copies are scratch: B and C hold none of A's objects. */
    assert_int_equal((int)dst_stat(&C.w[B], "objects.count"), 0);
    assert_int_equal((int)dst_stat(&C.w[CC], "objects.count"), 0);
}

static void test_zero_copy_publish_read_remote(void **state)
{
    (void)state;
    static const size_t sizes[] = {512, 5u << 20};
    for (int wt = 0; wt < 2; wt++)
        for (size_t s = 0; s < 2; s++) {
            ds_client_t *w = ct_client(&C, A, transports[wt]);
            char key[64];
            snprintf(key, sizeof(key), "zc-%d-%zu", wt, s);
            uint64_t seed = 500 + wt * 10 + s;
            ds_buffer_t *b = NULL;
            assert_int_equal(ds_kv_create(w, key, sizes[s], NULL, &b), DS_K_OK);
            dst_fill(ds_buffer_mutable_data(b), sizes[s], seed);
            assert_int_equal(ds_kv_publish(w, b), DS_K_OK);
            ds_buffer_release(b);
            for (int node = B; node <= CC; node++) {
                ds_client_t *r = ct_client(&C, node, transports[(wt + s + node) % 2]);
                assert_true(ct_read_buffer_ok(r, key, sizes[s], seed));
                assert_true(ct_read_ok(r, key, sizes[s], seed, 0));
                ds_client_close(r);
            }
            ds_client_close(w);
        }
}

static void test_mget_across_owners(void **state)
{
    (void)state;
    enum { N = 30, NMISS = 3 };
    ds_client_t *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = ct_client(&C, i, transports[i % 2]);
    double owned0 = 0;
    for (int i = 0; i < 3; i++)
        owned0 += dst_stat(&C.w[i], "cluster.owned_keys");
    const char *keys[N + NMISS];
    char names[N + NMISS][32];
    size_t lens[N + NMISS];
    for (int i = 0; i < N + NMISS; i++) {
        snprintf(names[i], sizeof(names[i]), "%s-%d", i < N ? "mget" : "mget-missing", i);
        keys[i] = names[i];
        lens[i] = i % 10 == 9 ? (2u << 20) + (size_t)i : 100 + (size_t)i * 37;
        if (i < N) assert_int_equal(ct_set(w[i % 3], keys[i], lens[i], 1000 + i), DS_K_OK);
    }
    /* The keys' metadata is spread over more than one owner. */
    int owners = 0;
    double owned = 0;
    for (int i = 0; i < 3; i++) {
        double k = dst_stat(&C.w[i], "cluster.owned_keys");
        owned += k;
        owners += k > 0;
    }
    assert_true(owned - owned0 >= N);
    assert_true(owners >= 2);
    for (int node = 0; node < 3; node++)
        for (int t = 0; t < 2; t++) {
            ds_client_t *r = ct_client(&C, node, transports[t]);
            ds_value_t out[N + NMISS];
            assert_int_equal(ds_kv_mget(r, N + NMISS, keys, 0, out), DS_K_OK);
            for (int i = 0; i < N + NMISS; i++) {
                if (i >= N) {
                    assert_int_equal(out[i].status, DS_K_NOT_FOUND);
                    assert_null(out[i].data);
                    continue;
                }
                assert_int_equal(out[i].status, DS_K_OK);
                assert_int_equal(out[i].len, lens[i]);
                assert_true(dst_check(out[i].data, lens[i], 1000 + i));
                ds_free(out[i].data);
            }
            ds_buffer_t *bufs[N + NMISS];
            assert_int_equal(ds_kv_get_buffers(r, N + NMISS, keys, 0, bufs), DS_K_OK);
            for (int i = 0; i < N + NMISS; i++) {
                if (i >= N) {
                    assert_null(bufs[i]);
                    continue;
                }
                assert_non_null(bufs[i]);
                assert_int_equal(ds_buffer_size(bufs[i]), lens[i]);
                assert_true(dst_check(ds_buffer_data(bufs[i]), lens[i], 1000 + i));
                ds_buffer_release(bufs[i]);
            }
            ds_client_close(r);
        }
    /* Only missing keys: NOT_FOUND overall. */
    ds_value_t out[NMISS];
    assert_int_equal(ds_kv_mget(w[B], NMISS, keys + N, 0, out), DS_K_NOT_FOUND);
    for (int i = 0; i < 3; i++)
        ds_client_close(w[i]);
}

/* ---- subscriptions across nodes ---- */

typedef struct {
    int node;
    ds_transport_t t;
    const char *key;
    size_t len;
    uint64_t seed;
    int delay_ms;
    ds_status_t st;
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    ds_client_t *c = ct_client(&C, p->node, p->t);
    usleep((useconds_t)p->delay_ms * 1000);
    p->st = c ? ct_set(c, p->key, p->len, p->seed) : DS_K_RUNTIME_ERROR;
    ds_client_close(c);
    return NULL;
}

static void woken(int reader, ds_transport_t rt, int writer, ds_transport_t wt, size_t len)
{
    static int round;
    char key[64];
    snprintf(key, sizeof(key), "sub-%d-%d", reader, round++);
    ds_client_t *r = ct_client(&C, reader, rt);
    producer_t p = {writer, wt, key, len, 7000 + (uint64_t)round, 300, DS_K_RUNTIME_ERROR};
    pthread_t th;
    pthread_create(&th, NULL, produce, &p);
    uint64_t t0 = ds__now_ms();
    assert_true(ct_read_ok(r, key, len, p.seed, 10000));
    uint64_t dt = ds__now_ms() - t0;
    pthread_join(th, NULL);
    assert_int_equal(p.st, DS_K_OK);
    /* Woken by the publish at ~300 ms, not by the 10 s timeout. */
    fprintf(stderr, "  woken on node %d by a publish on node %d (%zu bytes) after %llu ms\n",
            reader, writer, len, (unsigned long long)dt);
    assert_true(dt >= 250);
    assert_true(dt < 2000);
    ds_client_close(r);
}

static void test_consumer_on_b_woken_by_a(void **state)
{
    (void)state;
    double lanes_b = dst_stat(&C.w[B], "lane_requests");
    woken(B, DS_TRANSPORT_LOCAL, A, DS_TRANSPORT_LOCAL, 1000);
    /* Cluster workers give local clients request lanes too: the consumer's
     * get on B waited for the cluster through its lane. */
    assert_true(dst_stat(&C.w[B], "lane_requests") > lanes_b);
    woken(B, DS_TRANSPORT_TCP, A, DS_TRANSPORT_LOCAL, 4u << 20);
    woken(B, DS_TRANSPORT_LOCAL, A, DS_TRANSPORT_TCP, 70000);
    woken(CC, DS_TRANSPORT_TCP, A, DS_TRANSPORT_TCP, 10);
    woken(A, DS_TRANSPORT_LOCAL, CC, DS_TRANSPORT_LOCAL, 2u << 20);
    woken(B, DS_TRANSPORT_LOCAL, B, DS_TRANSPORT_TCP, 100); /* same node, cluster path */
}

/* The consumer on B waits for a key whose metadata owner is A (the
 * producer's own worker: its local publish comes before its META_PUT), B
 * (the consumer's) or C (a third). */
static void test_woken_whoever_owns_the_key(void **state)
{
    (void)state;
    ds_client_t *a = ct_client(&C, A, DS_TRANSPORT_TCP);
    char owned_by[3][32] = {"", "", ""};
    for (int i = 0; i < 200; i++) {
        char key[32];
        snprintf(key, sizeof(key), "sub-owner-%d", i);
        int o = ct_set_find_owner(&C, a, key, 10, 1);
        assert_true(o >= 0);
        const char *k = key;
        assert_int_equal(ds_kv_del(a, 1, &k, NULL), DS_K_OK);
        if (owned_by[o][0] == '\0') snprintf(owned_by[o], sizeof(owned_by[o]), "%s", key);
        if (owned_by[0][0] && owned_by[1][0] && owned_by[2][0]) break;
    }
    ds_client_close(a);
    for (int o = 0; o < 3; o++) {
        assert_true(owned_by[o][0] != '\0');
        for (int t = 0; t < 2; t++) {
            ds_client_t *r = ct_client(&C, B, transports[t]);
            const char *key = owned_by[o];
            producer_t p = {A,   transports[1 - t], key, 2000, 8100 + (uint64_t)(o * 2 + t),
                            300, DS_K_RUNTIME_ERROR};
            pthread_t th;
            pthread_create(&th, NULL, produce, &p);
            uint64_t t0 = ds__now_ms();
            assert_true(ct_read_ok(r, key, 2000, p.seed, 10000));
            uint64_t dt = ds__now_ms() - t0;
            pthread_join(th, NULL);
            assert_int_equal(p.st, DS_K_OK);
            fprintf(stderr, "  owner node %d: woken after %llu ms\n", o, (unsigned long long)dt);
            assert_true(dt >= 250 && dt < 2000);
            const char *k = key;
            assert_int_equal(ds_kv_del(r, 1, &k, NULL), DS_K_OK);
            ds_client_close(r);
        }
    }
}

static void test_mget_waits_for_two_producers(void **state)
{
    (void)state;
    ds_client_t *r = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    producer_t p1 = {A, DS_TRANSPORT_LOCAL, "sub-two-a", 3000, 8001, 100, DS_K_RUNTIME_ERROR};
    producer_t p2 = {CC, DS_TRANSPORT_TCP, "sub-two-c", 1u << 20, 8002, 500, DS_K_RUNTIME_ERROR};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, produce, &p1);
    pthread_create(&t2, NULL, produce, &p2);
    const char *keys[] = {"sub-two-a", "sub-two-c"};
    ds_value_t out[2];
    uint64_t t0 = ds__now_ms();
    assert_int_equal(ds_kv_mget(r, 2, keys, 10000, out), DS_K_OK);
    uint64_t dt = ds__now_ms() - t0;
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_true(dt >= 450 && dt < 2500);
    assert_int_equal(out[0].status, DS_K_OK);
    assert_int_equal(out[1].status, DS_K_OK);
    assert_true(out[0].len == 3000 && dst_check(out[0].data, 3000, 8001));
    assert_true(out[1].len == (1u << 20) && dst_check(out[1].data, 1u << 20, 8002));
    ds_free(out[0].data);
    ds_free(out[1].data);
    ds_client_close(r);
}

static void test_wait_times_out_promptly(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        ds_client_t *r = ct_client(&C, B, transports[t]);
        uint64_t t0 = ds__now_ms();
        assert_int_equal(ct_get_status(r, "sub-never-comes", 500), DS_K_NOT_FOUND);
        uint64_t dt = ds__now_ms() - t0;
        fprintf(stderr, "  a 500 ms wait for a missing key returned after %llu ms\n",
                (unsigned long long)dt);
        assert_true(dt >= 490);
        assert_true(dt < 500 + 5000);
        t0 = ds__now_ms();
        assert_int_equal(ct_get_status(r, "sub-never-comes", 0), DS_K_NOT_FOUND);
        assert_true(ds__now_ms() - t0 < 2000); /* no wait; nothing to time out */
        /* One key exists on A, one never comes: the timeout returns the first. */
        ds_client_t *w = ct_client(&C, A, transports[t]);
        assert_int_equal(ct_set(w, "sub-exists", 64, 9001), DS_K_OK);
        const char *keys[] = {"sub-exists", "sub-never-comes"};
        ds_value_t out[2];
        t0 = ds__now_ms();
        assert_int_equal(ds_kv_mget(r, 2, keys, 400, out), DS_K_OK);
        dt = ds__now_ms() - t0;
        assert_true(dt >= 390 && dt < 400 + 5000);
        assert_int_equal(out[0].status, DS_K_OK);
        assert_true(dst_check(out[0].data, 64, 9001));
        assert_int_equal(out[1].status, DS_K_NOT_FOUND);
        ds_free(out[0].data);
        ds_client_close(w);
        ds_client_close(r);
    }
    /* No subscription is left behind anywhere. */
    for (int i = 0; i < 3; i++)
        assert_int_equal((int)dst_stat(&C.w[i], "subscriptions_waiting"), 0);
}

/* Small remote values skip the job threads: with the owner holding the key,
 * its LOCATE answer carries the value (one round trip); otherwise the pull
 * goes over B's link to A. Values above 64 KiB are pulled by a job thread.
 * Every read is checksummed; the counters say which path it took. */
static void test_small_remote_gets_take_the_link(void **state)
{
    (void)state;
    ds_client_t *w = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    static const size_t sizes[] = {1, 1024, 65536, 65537};
    for (size_t s = 0; s < 4; s++) {
        /* One key whose metadata A owns and one B owns, both living on A. */
        char by_a[64] = "", by_b[64] = "";
        for (int i = 0; i < 64 && (!by_a[0] || !by_b[0]); i++) {
            char key[64];
            snprintf(key, sizeof(key), "link-%zu-%d", sizes[s], i);
            int owner = ct_set_find_owner(&C, w, key, sizes[s], 500 + s);
            if (owner == A && !by_a[0]) snprintf(by_a, sizeof(by_a), "%s", key);
            if (owner == B && !by_b[0]) snprintf(by_b, sizeof(by_b), "%s", key);
        }
        assert_true(by_a[0] && by_b[0]);
        for (size_t t = 0; t < 2; t++) {
            ds_client_t *r = ct_client(&C, B, transports[t]);
            /* The link comes up in the background after the first request.
             * Every size's read of A's key sends a LOCATE to A (B's own key
             * over 64 KiB never takes the link). */
            uint64_t dl = ds__now_ms() + 5000;
            double before = dst_stat(&C.w[B], "cluster.peer_link_requests");
            while (ds__now_ms() < dl) {
                assert_true(ct_read_ok(r, by_a, sizes[s], 500 + s, 0));
                if (dst_stat(&C.w[B], "cluster.peer_link_requests") > before) break;
                usleep(20000);
            }
            double link0 = dst_stat(&C.w[B], "cluster.peer_link_requests");
            double job0 = dst_stat(&C.w[B], "cluster.peer_job_requests");
            double inl0 = dst_stat(&C.w[A], "cluster.locate_inline_values");
            enum { READS = 10 };
            for (int k = 0; k < READS; k++) {
                assert_true(ct_read_ok(r, by_a, sizes[s], 500 + s, 0));
                assert_true(ct_read_ok(r, by_b, sizes[s], 500 + s, 0));
            }
            double link = dst_stat(&C.w[B], "cluster.peer_link_requests") - link0;
            double job = dst_stat(&C.w[B], "cluster.peer_job_requests") - job0;
            double inl = dst_stat(&C.w[A], "cluster.locate_inline_values") - inl0;
            if (sizes[s] <= 65536) {
                /* A-owned: one LOCATE with the value; B-owned: one pull. */
                assert_true(link == 2 * READS);
                assert_true(job == 0);
                assert_true(inl == READS);
            } else {
                /* LOCATEs still take the link; every pull a job thread. */
                assert_true(link == READS);
                assert_true(job == 2 * READS);
                assert_true(inl == 0);
            }
            ds_client_close(r);
        }
    }
    ds_client_close(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_on_a_read_everywhere),
        cmocka_unit_test(test_zero_copy_publish_read_remote),
        cmocka_unit_test(test_mget_across_owners),
        cmocka_unit_test(test_small_remote_gets_take_the_link),
        cmocka_unit_test(test_consumer_on_b_woken_by_a),
        cmocka_unit_test(test_woken_whoever_owns_the_key),
        cmocka_unit_test(test_mget_waits_for_two_producers),
        cmocka_unit_test(test_wait_times_out_promptly),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
