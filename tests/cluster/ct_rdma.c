/* The UCX data plane (--enable_rdma true) against real etcd and three workers
 * on 127.0.0.11-13: A and B with UCX, C without. UCX_TLS is left as it is
 * (unset: UCX picks shared memory between these co-located workers; the
 * cluster.ct_*.rdma entries run the other suites over UCX's TCP).
 *  - values above the inline limit pulled by B from A come over UCX (A's
 *    ucx_sends and B's ucx_pulls count them), checksummed, by copy and
 *    zero-copy, from 64 KiB + 1 to 64 MiB; small values keep the inline path;
 *  - a worker without UCX and one with it still exchange values (over TCP);
 *  - a worker that cannot start UCX (UCX_TLS=bogus) says why and refuses to
 *    start. (The owner killed mid-pull under UCX: cluster.ct_failover.rdma.)
 *  - UCX_PULL's TCP fall-back: an owner that knows no UCX address for the
 *    requester answers with the value on the peer connection (via_ucx 0),
 *    and a real requester (B, its member record rewritten without its UCX
 *    address) reads the value from there and drops the receive it posted;
 *  - a remote client over UCX (enable_ucx) reading from B a key A owns: B
 *    pulls it from A over UCX, then sends it to the client over UCX;
 *  - a requester that stops (SIGSTOP) mid-pull cannot hold the owner's pin:
 *    A ends its send at the pull's deadline (B's 30 s job wait + 1 s),
 *    and B's get, once it runs again, fails K_RPC_UNAVAILABLE (the key is
 *    still there: not K_NOT_FOUND). */
#include "cluster_util.h"
#include "ct_peer_raw.h"

#include "common/clock.h"
#include "common/etcd.h"

#include <cjson/cJSON.h>

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

static ct_cluster_t C;
enum { A = 0, B = 1, CC = 2 };

/* The cluster secret, so that a test can speak as a peer (PEER_AUTH). */
#define SECRET "ct-rdma-secret"
static char secret_dir[64], secret_file[128];

static int setup(void **state)
{
    (void)state;
    snprintf(secret_dir, sizeof(secret_dir), "/tmp/ct_rdma.XXXXXX");
    if (mkdtemp(secret_dir) == NULL) return -1;
    snprintf(secret_file, sizeof(secret_file), "%s/secret", secret_dir);
    if (ct_write_secret(secret_file, SECRET "\n") != 0) return -1;
    static char ea[256], eb[256], ec[256];
    /* Hot copies off: every remote get is a pull, which the tests count. */
    snprintf(ea, sizeof(ea),
             "--enable_rdma true --enable_data_replication false --cluster_secret_file %s",
             secret_file);
    snprintf(eb, sizeof(eb),
             "--enable_rdma=true --enable_data_replication false --cluster_secret_file %s",
             secret_file);
    snprintf(ec, sizeof(ec), "--enable_data_replication false --cluster_secret_file %s",
             secret_file);
    const int arenas[] = {200, 200, 128};
    const char *const extra[] = {ea, eb, ec};
    return ct_cluster_start_with(&C, 3, arenas, extra);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    unlink(secret_file);
    rmdir(secret_dir);
    return 0;
}

static void test_large_pulls_use_ucx(void **state)
{
    (void)state;
    assert_true(dst_stat(&C.w[A], "cluster.rdma") == 1);
    assert_true(dst_stat(&C.w[B], "cluster.rdma") == 1);
    assert_true(dst_stat(&C.w[CC], "cluster.rdma") == 0);
    static const size_t sizes[] = {(64u << 10) + 1, 3u << 20, 64u << 20};
    ds_client_t *wa = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *rb = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    ds_client_t *rbt = ct_client(&C, B, DS_TRANSPORT_TCP);
    assert_non_null(wa);
    assert_non_null(rb);
    assert_non_null(rbt);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        char key[32];
        snprintf(key, sizeof(key), "rdma-%zu", s);
        assert_int_equal(ct_set(wa, key, sizes[s], 500 + s), DS_K_OK);
        double sends0 = dst_stat(&C.w[A], "cluster.ucx_sends");
        double pulls0 = dst_stat(&C.w[B], "cluster.ucx_pulls");
        uint64_t t0 = ds__now_ms();
        assert_true(ct_read_ok(rb, key, sizes[s], 500 + s, 0));
        uint64_t ms = ds__now_ms() - t0;
        assert_true(ct_read_buffer_ok(rb, key, sizes[s], 500 + s));
        assert_true(ct_read_ok(rbt, key, sizes[s], 500 + s, 0));
        fprintf(stderr, "  %zu bytes A -> B over UCX: first read %llu ms\n", sizes[s],
                (unsigned long long)ms);
        /* Every read pulls (B keeps no copy): three pulls, all over UCX. */
        assert_true(dst_stat(&C.w[B], "cluster.ucx_pulls") == pulls0 + 3);
        assert_true(dst_stat(&C.w[A], "cluster.ucx_sends") == sends0 + 3);
    }
    /* Small values keep the inline path (LOCATE answer or the peer link). */
    double pulls0 = dst_stat(&C.w[B], "cluster.ucx_pulls");
    for (int i = 0; i < 8; i++) {
        char key[32];
        snprintf(key, sizeof(key), "rdma-small-%d", i);
        size_t len = i % 2 ? 1024 : 64u << 10;
        assert_int_equal(ct_set(wa, key, len, 600 + (uint64_t)i), DS_K_OK);
        assert_true(ct_read_ok(rb, key, len, 600 + (uint64_t)i, 0));
    }
    assert_true(dst_stat(&C.w[B], "cluster.ucx_pulls") == pulls0);
    /* Nothing pinned or reserved is left behind on B. */
    assert_true(dst_stat(&C.w[B], "arena.used_bytes") - dst_stat(&C.w[B], "arena.lane_bytes") <
                (1u << 20));
    ds_client_close(wa);
    ds_client_close(rb);
    ds_client_close(rbt);
}

static void test_mixed_cluster(void **state)
{
    (void)state;
    ds_client_t *wa = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *wc = ct_client(&C, CC, DS_TRANSPORT_LOCAL);
    ds_client_t *rb = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    ds_client_t *rc = ct_client(&C, CC, DS_TRANSPORT_LOCAL);
    assert_int_equal(ct_set(wa, "mixed-a", 5u << 20, 700), DS_K_OK);
    assert_int_equal(ct_set(wc, "mixed-c", 5u << 20, 701), DS_K_OK);
    double sends0 = dst_stat(&C.w[A], "cluster.ucx_sends");
    double pulls0 = dst_stat(&C.w[B], "cluster.ucx_pulls");
    /* C has no UCX: it pulls A's value over TCP, and B pulls C's over TCP. */
    assert_true(ct_read_ok(rc, "mixed-a", 5u << 20, 700, 0));
    assert_true(ct_read_ok(rb, "mixed-c", 5u << 20, 701, 0));
    assert_true(dst_stat(&C.w[A], "cluster.ucx_sends") == sends0);
    assert_true(dst_stat(&C.w[B], "cluster.ucx_pulls") == pulls0);
    assert_true(dst_stat(&C.w[CC], "cluster.ucx_pulls") == 0);
    /* And B still takes A's over UCX. */
    assert_true(ct_read_ok(rb, "mixed-a", 5u << 20, 700, 0));
    assert_true(dst_stat(&C.w[B], "cluster.ucx_pulls") == pulls0 + 1);
    ds_client_close(wa);
    ds_client_close(wc);
    ds_client_close(rb);
    ds_client_close(rc);
}

static void test_refuses_to_start_without_ucx(void **state)
{
    (void)state;
    char bin[512], cmd[2048], out[8192];
    dst_build_path("src/worker/datasystem_worker", bin, sizeof(bin));
    char dir[] = "/tmp/ct-rdma-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "UCX_TLS=bogus timeout 20 %s --worker_address 127.0.0.19:%d --etcd_address %s "
             "--cluster_name %s --unix_socket_dir %s --shared_memory_size_mb 16 --enable_rdma "
             "true 2>&1",
             bin, 20000 + (int)(getpid() % 20000), C.etcd.address, C.name, dir);
    uint64_t t0 = ds__now_ms();
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    uint64_t ms = ds__now_ms() - t0;
    fprintf(stderr, "  UCX_TLS=bogus: exit %d after %llu ms; says:\n%s", WEXITSTATUS(st),
            (unsigned long long)ms, out);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 124);
    assert_non_null(strstr(out, "cannot start UCX for --enable_rdma"));
    assert_non_null(strstr(out, "UCX_TLS=bogus"));
    assert_true(ms < 10000);
    /* It never joined: the cluster still has its three members. */
    assert_true(dst_stat(&C.w[A], "cluster.members") == 3);
    rmdir(dir);
}

static void test_pull_tcp_fallback(void **state)
{
    (void)state;
    ds_client_t *wa = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    const size_t len = 1u << 20;
    assert_int_equal(ct_set(wa, "fallback-a", len, 800), DS_K_OK);
    double sends0 = dst_stat(&C.w[A], "cluster.ucx_sends");
    hr_conn_t h;
    assert_int_equal(hr_open_hello(&h, &C.w[A], false), 0);
    /* UCX_PULL is for peers: this connection proves it is one, as B. */
    char a[96], b[96];
    snprintf(a, sizeof(a), "%s:%d", C.w[A].host, C.w[A].port);
    snprintf(b, sizeof(b), "%s:%d", C.w[B].host, C.w[B].port);
    ct_pa_result_t pa;
    assert_int_equal(ct_peer_auth(&h, b, a, SECRET, NULL, NULL, &pa), 0);
    assert_int_equal(pa.st2, DS_K_OK);
    /* A requester A has no UCX address for (no such member): the bytes
     * come on this connection. */
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_cstr(&m, "fallback-a");
    ds__wbuf_u64(&m, len);
    ds__wbuf_u64(&m, 4242);
    ds__wbuf_cstr(&m, "127.0.0.99:1");
    ds__wbuf_u32(&m, 2000);
    uint64_t id = hr_add(&h, DS_OP_UCX_PULL, &m, NULL, 0);
    ds__wbuf_reset(&m);
    ds__wbuf_cstr(&m, "fallback-a");
    ds__wbuf_u64(&m, len + 1); /* not the size A holds */
    ds__wbuf_u64(&m, 4243);
    ds__wbuf_cstr(&m, "127.0.0.99:1");
    uint64_t id2 = hr_add(&h, DS_OP_UCX_PULL, &m, NULL, 0);
    ds__wbuf_free(&m);
    assert_int_equal(hr_flush(&h), 0);
    hr_frame_t *f = hr_answer(&h, id, ds__now_ms() + 5000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_OK);
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, f->meta, f->h.meta_len);
    const char *e;
    (void)ds__rbuf_str(&rb, &e);
    assert_int_equal(ds__rbuf_u8(&rb), 0); /* via_ucx */
    assert_false(rb.err);
    assert_int_equal(f->h.data_len, len);
    assert_true(dst_check(f->data, len, 800));
    f = hr_answer(&h, id2, ds__now_ms() + 5000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_NOT_FOUND);
    hr_close(&h);
    assert_true(dst_stat(&C.w[A], "cluster.ucx_sends") == sends0);
    assert_true(dst_stat(&C.w[A], "objects.pinned") == 0);
    ds_client_close(wa);
}

static void test_remote_client_over_ucx(void **state)
{
    (void)state;
    ds_client_t *wa = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    const size_t len = 8u << 20;
    assert_int_equal(ct_set(wa, "client-ucx-a", len, 801), DS_K_OK);
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = C.w[B].host;
    o.port = C.w[B].port;
    o.transport = DS_TRANSPORT_TCP;
    o.enable_ucx = 1;
    ds_client_t *rb = NULL;
    assert_int_equal(ds_client_connect(&o, &rb), DS_K_OK);
    double pulls0 = dst_stat(&C.w[B], "cluster.ucx_pulls");
    double csends0 = dst_stat(&C.w[B], "ucx.client_sends");
    assert_true(ct_read_ok(rb, "client-ucx-a", len, 801, 0));
    void *buf = malloc(len);
    assert_non_null(buf);
    size_t got = 0;
    assert_int_equal(ds_kv_get_into(rb, "client-ucx-a", 0, buf, len, &got), DS_K_OK);
    assert_int_equal(got, len);
    assert_true(dst_check(buf, len, 801));
    free(buf);
    /* Each read: A -> B over UCX (a pull), B -> the client over UCX. */
    assert_true(dst_stat(&C.w[B], "cluster.ucx_pulls") == pulls0 + 2);
    assert_true(dst_stat(&C.w[B], "ucx.client_sends") == csends0 + 2);
    ds_client_close(rb);
    ds_client_close(wa);
}

/* Deletes key once B, just back (a new worker id), holds the metadata it
 * owns again: the keys are registered with it anew shortly after it joins. */
static ds_status_t del_after_rejoin(ds_client_t *c, const char *key)
{
    ds_status_t st = DS_K_RUNTIME_ERROR;
    for (int i = 0; i < 50 && st != DS_K_OK; i++, usleep(100000))
        st = ds_kv_del(c, 1, &key, NULL);
    return st;
}

/* B's member record in etcd rewritten without its UCX address (with
 * drop_ucx) or as it was (record given): what every other member sees of B. */
static void rewrite_b_record(char *record, size_t cap, bool drop_ucx)
{
    char err[256], key[256];
    snprintf(key, sizeof(key), "/datasystem/%s/cluster/%s:%d", C.name, C.w[B].host, C.w[B].port);
    ds_etcd_t *e = ds__etcd_new(C.etcd.address, err, sizeof(err));
    assert_non_null(e);
    if (drop_ucx) {
        ds_etcd_kv_t *kvs = NULL;
        size_t n = 0;
        assert_int_equal(ds__etcd_range_prefix(e, key, &kvs, &n, err, sizeof(err)), 0);
        assert_int_equal(n, 1);
        snprintf(record, cap, "%s", kvs[0].value);
        ds__etcd_kvs_free(kvs, n);
        cJSON *j = cJSON_Parse(record);
        assert_non_null(cJSON_GetObjectItemCaseSensitive(j, "ucx_address"));
        cJSON_DeleteItemFromObjectCaseSensitive(j, "ucx_address");
        char *v = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        assert_int_equal(ds__etcd_put(e, key, v, 0, err, sizeof(err)), 0);
        free(v);
    } else {
        assert_int_equal(ds__etcd_put(e, key, record, 0, err, sizeof(err)), 0);
    }
    ds__etcd_free(e);
}

/* Waits (5 s at most) for worker i to see `want` UCX peers. */
static bool wait_ucx_peers(int i, double want)
{
    for (uint64_t t0 = ds__now_ms(); ds__now_ms() - t0 < 5000; usleep(20000))
        if (dst_stat(&C.w[i], "cluster.ucx_peers") == want) return true;
    return false;
}

/* The requester's side of the fall-back: B knows A's UCX address but A does
 * not know B's (as while a member list is in flight), so B's UCX_PULL is
 * answered with the value on the peer connection; B drops the receive it
 * posted and reads the bytes from the connection, exact. With B's record
 * back, pulls take UCX again. */
static void test_requester_tcp_fallback(void **state)
{
    (void)state;
    ds_client_t *wa = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *rb = ct_client(&C, B, DS_TRANSPORT_TCP);
    assert_non_null(wa);
    assert_non_null(rb);
    const size_t len = 4u << 20;
    assert_int_equal(ct_set(wa, "rfb-1", len, 804), DS_K_OK);
    assert_int_equal(ct_set(wa, "rfb-2", len, 805), DS_K_OK);
    /* B is among A's UCX peers (C, without UCX, is not). */
    double peers = dst_stat(&C.w[A], "cluster.ucx_peers"),
           b_peers = dst_stat(&C.w[B], "cluster.ucx_peers");
    assert_true(peers >= 1 && b_peers >= 1);
    char record[2048];
    rewrite_b_record(record, sizeof(record), true);
    assert_true(wait_ucx_peers(A, peers - 1));
    assert_true(dst_stat(&C.w[B], "cluster.ucx_peers") == b_peers); /* B still sees A's */
    double a_sends = dst_stat(&C.w[A], "cluster.ucx_sends");
    double b_pulls = dst_stat(&C.w[B], "cluster.ucx_pulls");
    double b_fb = dst_stat(&C.w[B], "cluster.ucx_pull_fallbacks");
    bool ok = ct_read_ok(rb, "rfb-1", len, 804, 0);
    double a_sends1 = dst_stat(&C.w[A], "cluster.ucx_sends");
    double b_pulls1 = dst_stat(&C.w[B], "cluster.ucx_pulls");
    double b_fb1 = dst_stat(&C.w[B], "cluster.ucx_pull_fallbacks");
    rewrite_b_record(record, sizeof(record), false);
    bool back = wait_ucx_peers(A, peers);
    bool ok2 = ct_read_ok(rb, "rfb-2", len, 805, 0);
    double a_sends2 = a_sends1;
    for (uint64_t t0 = ds__now_ms(); a_sends2 == a_sends1 && ds__now_ms() - t0 < 2000;
         usleep(10000))
        a_sends2 = dst_stat(&C.w[A], "cluster.ucx_sends"); /* counted as the send ends */
    fprintf(stderr,
            "  without B's UCX address: read %s, A's UCX sends +%.0f, B's UCX pulls +%.0f, "
            "answered on the connection +%.0f; "
            "record back: %s, read %s, A's UCX sends +%.0f\n",
            ok ? "exact" : "WRONG", a_sends1 - a_sends, b_pulls1 - b_pulls, b_fb1 - b_fb,
            back ? "seen" : "NOT seen", ok2 ? "exact" : "WRONG", a_sends2 - a_sends1);
    assert_true(ok);
    assert_true(a_sends1 == a_sends);
    assert_true(b_pulls1 == b_pulls);
    assert_true(b_fb1 == b_fb + 1); /* B asked with UCX_PULL, the bytes came on TCP */
    assert_true(back);
    assert_true(ok2);
    assert_true(a_sends2 == a_sends1 + 1);
    /* The record put back has no lease: B registers itself again. */
    assert_int_equal(ct_worker_restart(&C, B), 0);
    assert_true(ct_wait_members(&C, 3, 60000) >= 0);
    assert_int_equal(del_after_rejoin(wa, "rfb-1"), DS_K_OK);
    assert_int_equal(del_after_rejoin(wa, "rfb-2"), DS_K_OK);
    ds_client_close(rb);
    ds_client_close(wa);
}

typedef struct {
    ds_client_t *c;
    const char *key;
    ds_status_t st;
} pull_get_t;

static void *pull_getter(void *arg)
{
    pull_get_t *g = arg;
    void *v = NULL;
    size_t len = 0;
    g->st = ds_kv_get(g->c, g->key, 0, &v, &len);
    ds_free(v);
    return NULL;
}

/* Starts g's get on its own thread and waits (10 s at most) for A's UCX
 * send of the pull to be under way; false when the pull ended first. */
static bool pull_in_flight(pull_get_t *g, pthread_t *t, long *after_ms)
{
    assert_int_equal(pthread_create(t, NULL, pull_getter, g), 0);
    uint64_t t0 = ds__now_ms();
    while (ds__now_ms() - t0 < 10000) {
        if (dst_stat(&C.w[A], "ucx.sends_in_flight") >= 1) {
            *after_ms = (long)(ds__now_ms() - t0);
            return true;
        }
        usleep(200);
    }
    return false;
}

static void test_stopped_requester_pin_deadline(void **state)
{
    (void)state;
    ds_client_t *wa = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    const size_t len = 96u << 20;
    assert_int_equal(ct_set(wa, "stopped-b", len, 802), DS_K_OK);
    double to0 = dst_stat(&C.w[A], "ucx.send_timeouts");
    pull_get_t g = {.c = ct_client(&C, B, DS_TRANSPORT_TCP), .key = "stopped-b"};
    assert_non_null(g.c);
    pthread_t t;
    long seen = -1;
    if (!pull_in_flight(&g, &t, &seen)) {
        pthread_join(t, NULL);
        fprintf(stderr, "  the pull finished before it was seen in flight; skipped\n");
        ds_client_close(g.c);
        ds_client_close(wa);
        skip();
    }
    kill(C.w[B].pid, SIGSTOP);
    uint64_t s0 = ds__now_ms();
    long gone = -1;
    while (ds__now_ms() - s0 < 45000 && gone < 0) {
        if (dst_stat(&C.w[A], "ucx.sends_in_flight") == 0) gone = (long)(ds__now_ms() - s0);
        usleep(20000);
    }
    double timeouts = dst_stat(&C.w[A], "ucx.send_timeouts") - to0;
    double pinned = dst_stat(&C.w[A], "objects.pinned");
    kill(C.w[B].pid, SIGCONT);
    pthread_join(t, NULL);
    fprintf(stderr,
            "  pull seen after %ld ms; A's send ended %ld ms after B stopped; send_timeouts +%.0f; "
            "A pinned %.0f; B's get: %d\n",
            seen, gone, timeouts, pinned, (int)g.st);
    assert_true(gone >= 0);
    assert_true(gone <= 30000 + 1000 + 5000);
    assert_true(pinned == 0);
    assert_true(timeouts >= 1);
    /* The key is still on A: B's get says the transfer failed, not that the
     * key is missing. */
    assert_int_equal(g.st, DS_K_RPC_UNAVAILABLE);
    ds_client_close(g.c);
    /* B's lease may have lapsed while it was stopped: it comes back. */
    assert_true(ct_wait_members(&C, 3, 60000) >= 0);
    assert_int_equal(del_after_rejoin(wa, "stopped-b"), DS_K_OK);
    ds_client_close(wa);
}

/* B killed while A's UCX send of a pull into it is under way: B's peer
 * connection closes (the pull's request is gone) and then the send fails.
 * A ends the request once, drops its pin and serves on. */
static void test_killed_requester(void **state)
{
    (void)state;
    ds_client_t *wa = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    const size_t len = 96u << 20;
    assert_int_equal(ct_set(wa, "killed-b", len, 803), DS_K_OK);
    double sends0 = dst_stat(&C.w[A], "ucx.sends_in_flight");
    assert_true(sends0 == 0);
    pull_get_t g = {.c = ct_client(&C, B, DS_TRANSPORT_TCP), .key = "killed-b"};
    assert_non_null(g.c);
    pthread_t t;
    long after = -1;
    bool seen = pull_in_flight(&g, &t, &after);
    if (seen) dst_worker_kill(&C.w[B]);
    pthread_join(t, NULL);
    ds_client_close(g.c);
    if (!seen) {
        fprintf(stderr, "  the pull finished before it was seen in flight; skipped\n");
        ds_client_close(wa);
        skip();
    }
    /* B's client saw its worker go. */
    assert_int_not_equal(g.st, DS_K_OK);
    long gone = -1;
    uint64_t s0 = ds__now_ms();
    while (ds__now_ms() - s0 < 40000 && gone < 0) {
        if (dst_stat(&C.w[A], "ucx.sends_in_flight") == 0 &&
            dst_stat(&C.w[A], "objects.pinned") == 0)
            gone = (long)(ds__now_ms() - s0);
        usleep(20000);
    }
    fprintf(stderr, "  pull seen after %ld ms; A's send and pin ended %ld ms after B was killed\n",
            after, gone);
    assert_true(gone >= 0);
    /* A is alive and its copy intact. */
    assert_true(ct_read_ok(wa, "killed-b", len, 803, 0));
    assert_int_equal(ct_worker_restart(&C, B), 0);
    assert_true(ct_wait_members(&C, 3, 60000) >= 0);
    assert_int_equal(del_after_rejoin(wa, "killed-b"), DS_K_OK);
    ds_client_close(wa);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_pulls_use_ucx),
        cmocka_unit_test(test_mixed_cluster),
        cmocka_unit_test(test_pull_tcp_fallback),
        cmocka_unit_test(test_requester_tcp_fallback),
        cmocka_unit_test(test_remote_client_over_ucx),
        cmocka_unit_test(test_stopped_requester_pin_deadline),
        cmocka_unit_test(test_killed_requester),
        cmocka_unit_test(test_refuses_to_start_without_ucx),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
