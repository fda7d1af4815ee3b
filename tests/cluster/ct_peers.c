/* Who may speak as a peer, against real etcd and workers on 127.0.0.11-14
 * (A, B, C, D), with raw-protocol clients (it_hostile_raw.h):
 *
 * - a plain client's META_PUT pointing 8 keys at 127.0.0.1:9 with a higher
 *   version, and its LOCATE, META_DEL, DROP, and GET / DEL carrying the peer
 *   flag, are refused K_NOT_AUTHORIZED on both workers; its connection keeps
 *   serving, and every worker still reads the 8 keys' right values;
 * - PEER_AUTH without the proof: claiming a non-member address is
 *   K_TRY_AGAIN; claiming a member's address with a made-up proof, a changed
 *   nonce, or the worker's own proof sent back (reflection) is
 *   K_NOT_AUTHORIZED, and peer operations stay refused on that connection;
 * - a cluster with --cluster_secret_file: the workers serve each other; a
 *   client that knows the secret completes PEER_AUTH and may LOCATE, one
 *   with another secret is refused, and a worker started with another secret
 *   cannot read the others' keys;
 * - rotation without a restart: two workers on secret "old" read a file of
 *   "old" then "new"; a worker proving "new" joins; then every file says
 *   only "new" and a worker with only "new" joins; all read each other's keys
 *   at every step, and "old" is refused at the end. */
#include "cluster_util.h"
#include "ct_peer_raw.h"

#include "common/clock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;
static char dir[64];
enum { A = 0, B = 1, CC = 2, D = 3 };
#define NKEYS 8
#define VLEN 3000

/* ---- fixtures ---- */

static void secret_path(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static void write_secret(const char *name, const char *text)
{
    char path[128];
    secret_path(name, path, sizeof(path));
    assert_int_equal(ct_write_secret(path, text), 0);
}

static int make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/ct_peers.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int setup_plain(void **state)
{
    (void)state;
    return make_dir() == 0 ? ct_cluster_start(&C, 2, NULL) : -1;
}

static char extra_a[256], extra_b[256];

static int setup_secret(void **state)
{
    (void)state;
    if (make_dir() != 0) return -1;
    write_secret("a", "s3cret-one\n");
    write_secret("b", "s3cret-one\n");
    char pa[128], pb[128];
    secret_path("a", pa, sizeof(pa));
    secret_path("b", pb, sizeof(pb));
    snprintf(extra_a, sizeof(extra_a), "--cluster_secret_file %s", pa);
    snprintf(extra_b, sizeof(extra_b), "--cluster_secret_file %s", pb);
    const char *extra[] = {extra_a, extra_b};
    return ct_cluster_start_with(&C, 2, NULL, extra);
}

static int setup_rotation(void **state)
{
    (void)state;
    if (make_dir() != 0) return -1;
    write_secret("a", "old\n");
    write_secret("b", "old\n");
    char pa[128], pb[128];
    secret_path("a", pa, sizeof(pa));
    secret_path("b", pb, sizeof(pb));
    snprintf(extra_a, sizeof(extra_a), "--cluster_secret_file %s", pa);
    snprintf(extra_b, sizeof(extra_b), "--cluster_secret_file %s", pb);
    const char *extra[] = {extra_a, extra_b};
    return ct_cluster_start_with(&C, 2, NULL, extra);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    static const char *names[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++) {
        char p[128];
        secret_path(names[i], p, sizeof(p));
        unlink(p);
    }
    rmdir(dir);
    return 0;
}

/* ---- helpers ---- */

static void set_keys(int node, const char *prefix, uint64_t seed)
{
    ds_client_t *cl = ct_client(&C, node, DS_TRANSPORT_TCP);
    assert_non_null(cl);
    for (int i = 0; i < NKEYS; i++) {
        char key[64];
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        assert_int_equal(ct_set(cl, key, VLEN, seed + (uint64_t)i), DS_K_OK);
    }
    ds_client_close(cl);
}

/* Every running worker reads every key's right value, locally and over TCP. */
static void check_keys(const char *prefix, uint64_t seed)
{
    for (int node = 0; node < C.n; node++) {
        for (int t = 0; t < 2; t++) {
            ds_client_t *cl = ct_client(&C, node, t ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
            assert_non_null(cl);
            for (int i = 0; i < NKEYS; i++) {
                char key[64];
                snprintf(key, sizeof(key), "%s-%d", prefix, i);
                if (!ct_read_ok(cl, key, VLEN, seed + (uint64_t)i, 0))
                    fail_msg("worker %d cannot read %s", node, key);
            }
            ds_client_close(cl);
        }
    }
}

static const char *addr_of(int node, char *out, size_t cap)
{
    snprintf(out, cap, "%s:%d", C.w[node].host, C.w[node].port);
    return out;
}

static uint32_t answer(hr_conn_t *c, uint64_t id, const char *what, hr_frame_t **fp)
{
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + 5000);
    char d[512];
    printf("# %s: %s\n", what, hr_describe(f, d, sizeof(d)));
    if (fp) *fp = f;
    return f ? f->h.status : UINT32_MAX;
}

static void peer_auth_ok(hr_conn_t *c, const char *from, const char *to, const char *secret,
                         const char *proof2, const char *nb2, ct_pa_result_t *res)
{
    assert_int_equal(ct_peer_auth(c, from, to, secret, proof2, nb2, res), 0);
}

/* LOCATE of one key (no wait): its status. */
static uint32_t locate(hr_conn_t *c, const char *key)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_i32(&m, 0);
    ds__wbuf_u32(&m, 0);
    ds__wbuf_u32(&m, 1);
    ds__wbuf_cstr(&m, key);
    uint64_t id = hr_add(c, DS_OP_LOCATE, &m, NULL, 0);
    ds__wbuf_free(&m);
    assert_int_equal(hr_flush(c), 0);
    return answer(c, id, "LOCATE", NULL);
}

/* ---- tests ---- */

static void test_client_peer_ops_refused(void **state)
{
    (void)state;
    set_keys(A, "victim", 500);
    check_keys("victim", 500);
    for (int node = 0; node < 2; node++) {
        for (int t = 0; t < 2; t++) {
            hr_conn_t c;
            assert_int_equal(hr_open(&c, &C.w[node], t == 0), 0);
            assert_int_equal(hr_hello(&c, 0, false, "", 3000), 0);
            assert_int_equal(c.hello_status, DS_K_OK);
            /* Point every key at a port nobody serves, with a newer version. */
            ds_wbuf_t m;
            ds__wbuf_init(&m);
            ds__wbuf_cstr(&m, "127.0.0.1:9");
            ds__wbuf_u8(&m, 0);
            ds__wbuf_u32(&m, NKEYS);
            for (int i = 0; i < NKEYS; i++) {
                char key[64];
                snprintf(key, sizeof(key), "victim-%d", i);
                ds__wbuf_cstr(&m, key);
                ds__wbuf_u64(&m, VLEN);
                ds__wbuf_u64(&m, UINT64_C(1) << 40);
            }
            uint64_t put = hr_add(&c, DS_OP_META_PUT, &m, NULL, 0);
            ds__wbuf_reset(&m);
            ds__wbuf_cstr(&m, "127.0.0.1:9");
            ds__wbuf_u8(&m, 1);
            ds__wbuf_u32(&m, 1);
            ds__wbuf_cstr(&m, "victim-0");
            ds__wbuf_u64(&m, UINT64_C(1) << 40);
            uint64_t mdel = hr_add(&c, DS_OP_META_DEL, &m, NULL, 0);
            ds__wbuf_reset(&m);
            ds__wbuf_u32(&m, 1);
            ds__wbuf_cstr(&m, "victim-1");
            ds__wbuf_u64(&m, UINT64_C(1) << 40);
            uint64_t drop = hr_add(&c, DS_OP_DROP, &m, NULL, 0);
            ds__wbuf_reset(&m);
            hr_m_keys(&m, "victim-2");
            uint64_t del = hr_add_raw(&c, DS_OP_DEL, DS_FLAG_PEER, &m, 0, NULL, 0);
            ds__wbuf_reset(&m);
            hr_m_get(&m, "victim-3", 0, 0);
            uint64_t get = hr_add_raw(&c, DS_OP_GET, DS_FLAG_PEER, &m, 0, NULL, 0);
            ds__wbuf_free(&m);
            uint64_t health = hr_health(&c);
            assert_int_equal(hr_flush(&c), 0);
            assert_int_equal(answer(&c, put, "META_PUT", NULL), DS_K_NOT_AUTHORIZED);
            assert_int_equal(answer(&c, mdel, "META_DEL", NULL), DS_K_NOT_AUTHORIZED);
            assert_int_equal(answer(&c, drop, "DROP", NULL), DS_K_NOT_AUTHORIZED);
            assert_int_equal(answer(&c, del, "DEL with the peer flag", NULL), DS_K_NOT_AUTHORIZED);
            assert_int_equal(answer(&c, get, "GET with the peer flag", NULL), DS_K_NOT_AUTHORIZED);
            assert_int_equal(answer(&c, health, "HEALTH", NULL), DS_K_OK);
            assert_int_equal(locate(&c, "victim-4"), DS_K_NOT_AUTHORIZED);
            hr_close(&c);
        }
    }
    /* Nothing changed: both workers still serve the right values. */
    check_keys("victim", 500);
    /* The workers did prove themselves to each other. */
    assert_true(
        dst_stat(&C.w[A], "cluster.peers_proven") + dst_stat(&C.w[B], "cluster.peers_proven") >= 1);
}

static void test_fake_peer_refused(void **state)
{
    (void)state;
    set_keys(A, "fake", 900);
    char a[96], b[96];
    addr_of(A, a, sizeof(a));
    addr_of(B, b, sizeof(b));
    hr_conn_t c;
    assert_int_equal(hr_open(&c, &C.w[A], false), 0);
    assert_int_equal(hr_hello(&c, 0, false, "", 3000), 0);
    ct_pa_result_t r;
    /* Not a member. */
    peer_auth_ok(&c, "127.0.0.1:9", a, NULL, NULL, NULL, &r);
    assert_int_equal(r.st1, DS_K_TRY_AGAIN);
    /* A member's address, without its key: a made-up signature. */
    char junk[DS_AUTH_SIG_HEX + 1];
    memset(junk, 'a', DS_AUTH_SIG_HEX);
    junk[DS_AUTH_SIG_HEX] = '\0';
    peer_auth_ok(&c, b, a, NULL, junk, NULL, &r);
    assert_int_equal(r.st1, DS_K_OK);
    assert_int_equal(r.st2, DS_K_NOT_AUTHORIZED);
    /* The worker's own proof sent back as ours. */
    ct_pa_result_t r2;
    peer_auth_ok(&c, b, a, NULL, NULL, NULL, &r2);
    assert_int_equal(r2.st1, DS_K_OK);
    peer_auth_ok(&c, b, a, NULL, r2.proof_b, NULL, &r);
    assert_int_equal(r.st2, DS_K_NOT_AUTHORIZED);
    /* A nonce of another handshake. */
    peer_auth_ok(&c, b, a, NULL, junk, r2.nb, &r);
    assert_int_equal(r.st2, DS_K_NOT_AUTHORIZED);
    assert_int_equal(locate(&c, "fake-0"), DS_K_NOT_AUTHORIZED);
    hr_close(&c);
    assert_true(dst_stat(&C.w[A], "cluster.peer_auth_failures") >= 4);
    check_keys("fake", 900);
}

static void test_secret_cluster(void **state)
{
    (void)state;
    set_keys(A, "sec", 1300);
    check_keys("sec", 1300);
    char a[96], b[96];
    addr_of(A, a, sizeof(a));
    addr_of(B, b, sizeof(b));
    /* Knowing the secret is what makes a peer. */
    hr_conn_t c;
    assert_int_equal(hr_open(&c, &C.w[A], false), 0);
    assert_int_equal(hr_hello(&c, 0, false, "", 3000), 0);
    assert_int_equal(locate(&c, "sec-0"), DS_K_NOT_AUTHORIZED);
    ct_pa_result_t r;
    peer_auth_ok(&c, b, a, "wrong-secret", NULL, NULL, &r);
    assert_int_equal(r.st1, DS_K_OK);
    assert_false(r.proof_b_ok);
    assert_int_equal(r.st2, DS_K_NOT_AUTHORIZED);
    assert_int_equal(locate(&c, "sec-0"), DS_K_NOT_AUTHORIZED);
    peer_auth_ok(&c, b, a, "s3cret-one", NULL, NULL, &r);
    assert_true(r.proof_b_ok);
    assert_int_equal(r.st2, DS_K_OK);
    assert_int_equal(locate(&c, "sec-0"), DS_K_OK);
    hr_close(&c);

    /* A worker with another secret gets nothing from the others. */
    write_secret("c", "another-secret\n");
    char pc[128], ec[192];
    secret_path("c", pc, sizeof(pc));
    snprintf(ec, sizeof(ec), "--cluster_secret_file %s", pc);
    assert_int_equal(ct_worker_add(&C, ec), 0);
    ds_client_t *cl = ct_client(&C, CC, DS_TRANSPORT_TCP);
    assert_non_null(cl);
    int read = 0;
    for (int i = 0; i < NKEYS; i++) {
        char key[64];
        snprintf(key, sizeof(key), "sec-%d", i);
        ds_status_t st = ct_get_status(cl, key, 0);
        printf("# worker with another secret reads %s: status %d (%s)\n", key, (int)st,
               st == DS_K_OK ? "" : ds_last_error());
        read += st == DS_K_OK;
    }
    ds_client_close(cl);
    for (int i = 0; i < C.n; i++)
        printf("# worker %d: peer_auth_failures %.0f, peers_proven %.0f\n", i,
               dst_stat(&C.w[i], "cluster.peer_auth_failures"),
               dst_stat(&C.w[i], "cluster.peers_proven"));
    assert_int_equal(read, 0);
    assert_true(dst_stat(&C.w[CC], "cluster.peer_auth_failures") >= 1);
}

static void test_rotation(void **state)
{
    (void)state;
    set_keys(A, "rot0", 1700);
    /* Step 1: every worker learns the new secret as its second. */
    write_secret("a", "old\nnew\n");
    write_secret("b", "old\nnew\n");
    usleep(1300 * 1000);
    /* A worker proving the new one joins (it still accepts the old). */
    write_secret("c", "new\nold\n");
    char p[128], e[192];
    secret_path("c", p, sizeof(p));
    snprintf(e, sizeof(e), "--cluster_secret_file %s", p);
    assert_int_equal(ct_worker_add(&C, e), 0);
    check_keys("rot0", 1700);
    set_keys(CC, "rot1", 1800);
    check_keys("rot1", 1800);
    /* Step 2 (new first everywhere) and 3 (old dropped). */
    write_secret("a", "new\nold\n");
    write_secret("b", "new\nold\n");
    usleep(1300 * 1000);
    write_secret("a", "new\n");
    write_secret("b", "new\n");
    write_secret("c", "new\n");
    usleep(1300 * 1000);
    write_secret("d", "new\n");
    secret_path("d", p, sizeof(p));
    snprintf(e, sizeof(e), "--cluster_secret_file %s", p);
    assert_int_equal(ct_worker_add(&C, e), 0);
    check_keys("rot0", 1700);
    check_keys("rot1", 1800);
    set_keys(D, "rot2", 1900);
    check_keys("rot2", 1900);
    /* The old secret no longer makes a peer. */
    char a[96], b[96];
    addr_of(A, a, sizeof(a));
    addr_of(B, b, sizeof(b));
    hr_conn_t c;
    assert_int_equal(hr_open(&c, &C.w[A], false), 0);
    assert_int_equal(hr_hello(&c, 0, false, "", 3000), 0);
    ct_pa_result_t r;
    peer_auth_ok(&c, b, a, "old", NULL, NULL, &r);
    assert_int_equal(r.st1, DS_K_OK);
    assert_false(r.proof_b_ok);
    assert_int_equal(r.st2, DS_K_NOT_AUTHORIZED);
    peer_auth_ok(&c, b, a, "new", NULL, NULL, &r);
    assert_true(r.proof_b_ok);
    assert_int_equal(r.st2, DS_K_OK);
    hr_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_client_peer_ops_refused, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_fake_peer_refused, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_secret_cluster, setup_secret, teardown),
        cmocka_unit_test_setup_teardown(test_rotation, setup_rotation, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
