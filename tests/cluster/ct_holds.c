/* Latches and global references are the cluster's, against real etcd and
 * three workers on 127.0.0.11-13 (each key's ring owner holds them):
 *  - a read latch taken through one worker holds back a set through another
 *    (neither of them the key's owner) until it is released, and readers
 *    meanwhile see the old value; a write latch taken through one worker
 *    makes latches through the others answer K_TRY_AGAIN; many writers
 *    waiting through the reader's worker do not hold up its release; a
 *    latch granted while another worker keeps writing the key holds every
 *    version (writes already on their way are recorded before the grant);
 *  - references added through two workers are counted as one count seen
 *    through the third; a client decreases only its own; when the last
 *    holder's client closes, the object is deleted on every worker;
 *  - a seal through one worker refuses writes through every other, with
 *    Yuanrong's message, until the key is deleted;
 *  - a parent's nested keys, whoever owns them, outlive their own
 *    references until the parent's last reference goes through another
 *    worker, and then go with it everywhere;
 *  - the owner is killed: the latch and the reference are rebuilt at the
 *    key's new owner from the workers whose clients hold them, so a write
 *    through the third worker still waits and the count is still seen; a
 *    seal is rebuilt from the worker holding the sealed copy, so writes
 *    through every survivor are still refused; a parent's list of nested
 *    keys is rebuilt from the keys' owners, so a key held only by the
 *    parent stays until the parent's last reference goes, and then goes;
 *    a worker that joins then learns the seal. */
#include "cluster_util.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;

/* Sets a key named prefix-i through worker `via`, for the first i whose
 * owner is not `via` (when not_via) and, if not_other >= 0, not that worker
 * either; the owner's index, the key in key. */
static int key_owned_elsewhere(ds_client_t *c, int via, int not_other, const char *prefix,
                               char *key, size_t cap, size_t len, uint64_t seed)
{
    for (int i = 0; i < 64; i++) {
        snprintf(key, cap, "%s-%d", prefix, i);
        int o = ct_set_find_owner(&C, c, key, len, seed);
        if (o >= 0 && o != via && o != not_other) return o;
    }
    return -1;
}

static void test_latches_across_workers(void **state)
{
    (void)state;
    char key[64];
    ds_client_t *c0 = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(c0);
    int owner = key_owned_elsewhere(c0, 0, -1, "hl-r", key, sizeof(key), 5000, 100);
    assert_true(owner > 0);
    int rnode = 0, wnode = 3 - owner; /* neither is the owner */
    ds_client_t *reader = ct_client(&C, rnode, DS_TRANSPORT_TCP);
    assert_non_null(reader);
    const char *keys[1] = {key};
    assert_int_equal(ds_kv_rlatch(reader, 1, keys, 30000, NULL), DS_K_OK);

    ct_writer_t w = {.c = &C, .node = wnode, .key = key, .len = 7000, .seed = 101};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ct_writer_main, &w), 0);
    /* The set waits while the latch is held; every worker still reads the old value. */
    assert_false(ct_writer_finished(&w, 1500));
    for (int n = 0; n < 3; n++) {
        ds_client_t *c = ct_client(&C, n, DS_TRANSPORT_TCP);
        assert_true(ct_read_ok(c, key, 5000, 100, 0));
        ds_client_close(c);
    }
    assert_false(atomic_load(&w.done));
    assert_int_equal(ds_kv_unrlatch(reader, 1, keys, NULL), DS_K_OK);
    assert_true(ct_writer_finished(&w, 10000));
    pthread_join(th, NULL);
    assert_int_equal(w.st, DS_K_OK);
    assert_true(ct_read_ok(reader, key, 7000, 101, 0));
    /* Released: a second unrlatch of the reader has nothing to release. */
    ds_status_t st1;
    assert_int_equal(ds_kv_unrlatch(reader, 1, keys, &st1), DS_K_NOT_FOUND);

    /* A write latch through one worker excludes latches through the others. */
    ds_client_t *wl = ct_client(&C, wnode, DS_TRANSPORT_TCP);
    assert_non_null(wl);
    assert_int_equal(ds_object_wlatch(wl, 1, keys, 5000, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(reader, 1, keys, 300, NULL), DS_K_TRY_AGAIN);
    ds_client_t *c2 = ct_client(&C, owner, DS_TRANSPORT_TCP);
    assert_int_equal(ds_object_wlatch(c2, 1, keys, 300, NULL), DS_K_TRY_AGAIN);
    /* Its holder may still write the key. */
    assert_int_equal(ct_set(wl, key, 900, 102), DS_K_OK);
    assert_int_equal(ds_object_unwlatch(wl, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(reader, 1, keys, 5000, NULL), DS_K_OK);
    /* A latch ends with its client: the set through another worker then goes. */
    ds_client_close(reader);
    assert_int_equal(ct_set(c2, key, 800, 103), DS_K_OK);
    assert_true(ct_read_ok(wl, key, 800, 103, 0));
    /* A missing key cannot be latched through any worker. */
    const char *none[1] = {"hl-none"};
    assert_int_equal(ds_kv_rlatch(wl, 1, none, 1000, NULL), DS_K_NOT_FOUND);
    ds_client_close(wl);
    ds_client_close(c2);
    ds_client_close(c0);
}

/* Many writers through the reader's own worker wait at the owner; the
 * reader's release, through that worker too, still gets through (waiting
 * writers never take every peer thread) long before the latch's timeout. */
static void test_many_writers_and_the_release_through_one_worker(void **state)
{
    (void)state;
    enum { NW = 6 };
    char key[64];
    ds_client_t *reader = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(reader);
    int owner = key_owned_elsewhere(reader, 0, -1, "hl-m", key, sizeof(key), 2000, 400);
    assert_true(owner > 0);
    const char *keys[1] = {key};
    assert_int_equal(ds_kv_rlatch(reader, 1, keys, 60000, NULL), DS_K_OK);
    ct_writer_t w[NW];
    pthread_t th[NW];
    for (int i = 0; i < NW; i++) {
        w[i] = (ct_writer_t){.c = &C, .node = 0, .key = key, .len = 2000, .seed = 401};
        assert_int_equal(pthread_create(&th[i], NULL, ct_writer_main, &w[i]), 0);
    }
    assert_false(ct_writer_finished(&w[0], 1000));
    assert_int_equal(ds_kv_unrlatch(reader, 1, keys, NULL), DS_K_OK);
    for (int i = 0; i < NW; i++) {
        assert_true(ct_writer_finished(&w[i], 20000));
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].st, DS_K_OK);
    }
    assert_true(ct_read_ok(reader, key, 2000, 401, 0));
    ds_client_close(reader);
}

static int key_with_owner(ds_client_t *c, int want, int avoid, const char *prefix, char *key,
                          size_t cap, size_t len, uint64_t seed);

typedef struct {
    const char *key;
    atomic_bool stop;
    int sets;
} churn_t;

/* Sets the key through worker 1 with a new pattern each time until told
 * to stop (bounded). */
static void *churn(void *arg)
{
    churn_t *ch = arg;
    ds_client_t *c = ct_client(&C, 1, DS_TRANSPORT_TCP);
    for (int i = 0; c && i < 5000 && !atomic_load(&ch->stop); i++)
        if (ct_set(c, ch->key, 3000, 900 + (uint64_t)(i % 50)) == DS_K_OK) ch->sets++;
    ds_client_close(c);
    return NULL;
}

/* The key's value through c (a copy the caller frees), NULL when missing. */
static void *value_of(ds_client_t *c, const char *key, size_t *len)
{
    void *v = NULL;
    *len = 0;
    if (ds_kv_get(c, key, 0, &v, len) != DS_K_OK) return NULL;
    return v;
}

/* Writes that are on their way to the owner when a latch is granted: a
 * read latch taken through worker 0 (not the owner) while worker 1 keeps
 * setting the key holds every version still: two reads through worker 2
 * under the latch see the same one, round after round. */
static void test_latch_waits_for_writes_in_flight(void **state)
{
    (void)state;
    char key[64];
    ds_client_t *a = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(a);
    int owner = key_with_owner(a, 2, -1, "hw", key, sizeof(key), 3000, 900);
    assert_int_equal(owner, 2);
    ds_client_t *r = ct_client(&C, 2, DS_TRANSPORT_TCP);
    assert_non_null(r);
    churn_t ch = {.key = key};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn, &ch), 0);
    const char *keys[1] = {key};
    for (int round = 0; round < 30; round++) {
        assert_int_equal(ds_kv_rlatch(a, 1, keys, 30000, NULL), DS_K_OK);
        size_t l1, l2;
        void *first = value_of(r, key, &l1);
        usleep(2000);
        void *second = value_of(r, key, &l2);
        assert_int_equal(ds_kv_unrlatch(a, 1, keys, NULL), DS_K_OK);
        assert_non_null(first);
        assert_non_null(second);
        assert_int_equal(l1, l2);
        bool same = memcmp(first, second, l1) == 0;
        ds_free(first);
        ds_free(second);
        assert_true(same);
    }
    atomic_store(&ch.stop, true);
    pthread_join(th, NULL);
    ds_client_close(r);
    ds_client_close(a);
}

static uint32_t ref_count(int node, const char *key)
{
    ds_client_t *c = ct_client(&C, node, DS_TRANSPORT_TCP);
    uint32_t count = UINT32_MAX;
    if (c && ds_object_query_global_ref_num(c, key, &count) != DS_K_OK) count = UINT32_MAX;
    ds_client_close(c);
    return count;
}

static void test_references_across_workers(void **state)
{
    (void)state;
    char key[64];
    ds_client_t *c0 = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(c0);
    int owner = key_owned_elsewhere(c0, 0, -1, "hr", key, sizeof(key), 3000, 200);
    assert_true(owner > 0);
    int other = 3 - owner;
    const char *keys[1] = {key};
    ds_client_t *c1 = ct_client(&C, other, DS_TRANSPORT_TCP);
    assert_non_null(c1);
    assert_int_equal(ds_object_g_increase_ref(c0, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(c1, 1, keys, NULL), DS_K_OK);
    for (int n = 0; n < 3; n++)
        assert_int_equal(ref_count(n, key), 2);
    /* A client decreases only its own references, through any worker. */
    ds_client_t *c2 = ct_client(&C, owner, DS_TRANSPORT_TCP);
    ds_status_t st;
    assert_int_equal(ds_object_g_decrease_ref(c2, 1, keys, &st), DS_K_NOT_FOUND);
    assert_int_equal(ds_object_g_decrease_ref(c0, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ref_count(owner, key), 1);
    assert_true(ct_read_ok(c2, key, 3000, 200, 0));
    /* The last holder's client goes: the object goes on every worker. */
    ds_client_close(c1);
    uint32_t left = 1;
    for (int i = 0; i < 100 && left != 0; i++) {
        left = ref_count(0, key);
        if (left != 0) usleep(50000);
    }
    assert_int_equal(left, 0);
    /* The owner drops the copies (on worker 0) after answering the count. */
    for (int n = 0; n < 3; n++) {
        ds_client_t *c = ct_client(&C, n, DS_TRANSPORT_TCP);
        ds_status_t gst = DS_K_OK;
        for (int i = 0; i < 100 && gst != DS_K_NOT_FOUND; i++) {
            gst = ct_get_status(c, key, 0);
            if (gst != DS_K_NOT_FOUND) usleep(50000);
        }
        assert_int_equal(gst, DS_K_NOT_FOUND);
        ds_client_close(c);
    }
    ds_client_close(c2);
    ds_client_close(c0);
}

/* Sets a key named prefix-i through c for the first i whose owner is
 * `want` (want < 0: any owner but `avoid`); the owner's index, or -1. */
static int key_with_owner(ds_client_t *c, int want, int avoid, const char *prefix, char *key,
                          size_t cap, size_t len, uint64_t seed)
{
    for (int i = 0; i < 64; i++) {
        snprintf(key, cap, "%s-%d", prefix, i);
        int o = ct_set_find_owner(&C, c, key, len, seed);
        if (o >= 0 && (want >= 0 ? o == want : o != avoid)) return o;
    }
    return -1;
}

/* A seal through one worker is the cluster's: a set or a publish of the
 * key through any other worker is refused with Yuanrong's message and the
 * sealed value stays, whichever worker holds the copy; a delete still
 * goes, after which the key may be set again. */
static void test_seal_across_workers(void **state)
{
    (void)state;
    char key[64], key2[64];
    ds_client_t *a = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(a);
    int owner = key_owned_elsewhere(a, 0, -1, "hs", key, sizeof(key), 3000, 500);
    assert_true(owner > 0);
    int b_node = 3 - owner; /* neither the holder (0) nor the owner */
    ds_client_t *b = ct_client(&C, b_node, DS_TRANSPORT_TCP);
    ds_client_t *o = ct_client(&C, owner, DS_TRANSPORT_TCP);
    assert_non_null(b);
    assert_non_null(o);
    const char *keys[1] = {key};
    ds_status_t st = DS_K_RUNTIME_ERROR;
    assert_int_equal(ds_object_seal(a, 1, keys, &st), DS_K_OK);
    assert_int_equal(st, DS_K_OK);
    assert_int_equal(ct_set(b, key, 100, 501), DS_K_OC_ALREADY_SEALED);
    assert_non_null(strstr(ds_last_error(), "already be sealed."));
    assert_int_equal(ct_set(o, key, 100, 502), DS_K_OC_ALREADY_SEALED);
    assert_non_null(strstr(ds_last_error(), "already be sealed."));
    ds_buffer_t *buf = NULL;
    assert_int_equal(ds_kv_create(b, key, 3, NULL, &buf), DS_K_OK);
    memcpy(ds_buffer_mutable_data(buf), "new", 3);
    assert_int_equal(ds_kv_publish(b, buf), DS_K_OC_ALREADY_SEALED);
    ds_buffer_release(buf);
    for (int n = 0; n < 3; n++) {
        ds_client_t *c = ct_client(&C, n, DS_TRANSPORT_TCP);
        assert_true(ct_read_ok(c, key, 3000, 500, 0));
        ds_client_close(c);
    }
    /* Sealed through a worker that holds no copy: writes through the
     * holder are refused too. */
    int owner2 = key_owned_elsewhere(a, 0, -1, "hs2", key2, sizeof(key2), 2000, 510);
    assert_true(owner2 > 0);
    const char *keys2[1] = {key2};
    ds_client_t *s2 = ct_client(&C, 3 - owner2, DS_TRANSPORT_TCP);
    assert_int_equal(ds_object_seal(s2, 1, keys2, NULL), DS_K_OK);
    assert_int_equal(ct_set(a, key2, 100, 511), DS_K_OC_ALREADY_SEALED);
    assert_true(ct_read_ok(s2, key2, 2000, 510, 0));
    ds_client_close(s2);
    /* A key no worker holds cannot be sealed through any. */
    const char *none[1] = {"hs-none"};
    assert_int_equal(ds_object_seal(b, 1, none, NULL), DS_K_NOT_FOUND);
    /* A delete goes; the key is then a fresh one, settable anywhere. */
    assert_int_equal(ds_kv_del(b, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ct_set(b, key, 700, 503), DS_K_OK);
    assert_true(ct_read_ok(a, key, 700, 503, 0));
    assert_int_equal(ct_set(o, key, 800, 504), DS_K_OK);
    assert_true(ct_read_ok(b, key, 800, 504, 0));
    ds_client_close(o);
    ds_client_close(b);
    ds_client_close(a);
}

/* Waits (bounded) until a get of key through node answers NOT_FOUND. */
static ds_status_t gone_through(int node, const char *key)
{
    ds_client_t *c = ct_client(&C, node, DS_TRANSPORT_TCP);
    ds_status_t st = DS_K_OK;
    for (int i = 0; c && i < 100 && st != DS_K_NOT_FOUND; i++) {
        st = ct_get_status(c, key, 0);
        if (st != DS_K_NOT_FOUND) usleep(50000);
    }
    ds_client_close(c);
    if (st != DS_K_NOT_FOUND) {
        /* what each worker holds, for the report */
        fprintf(stderr, "'%s' still reads %d through worker %d after 5 s;", key, (int)st, node);
        for (int n = 0; n < C.n; n++)
            fprintf(stderr, " worker %d: %.0f objects, %.0f hot copies, %.0f hot dropped;", n,
                    dst_stat(&C.w[n], "objects.count"),
                    dst_stat(&C.w[n], "cluster.replication.hot_copies"),
                    dst_stat(&C.w[n], "cluster.replication.hot_dropped"));
        fprintf(stderr, "\n");
    }
    return st;
}

/* Nested references are the cluster's: a parent set through worker 0
 * keeps its children (one owned by the parent's owner, one elsewhere)
 * readable through worker 2 after their own references, taken and dropped
 * through worker 0, are gone; the parent's last reference, dropped through
 * worker 1, takes them with it on every worker. */
static void test_nested_across_workers(void **state)
{
    (void)state;
    char parent[64], kid_same[64], kid_other[64];
    ds_client_t *a = ct_client(&C, 0, DS_TRANSPORT_TCP);
    ds_client_t *b = ct_client(&C, 1, DS_TRANSPORT_TCP);
    assert_non_null(a);
    assert_non_null(b);
    int powner = key_with_owner(a, -1, -1, "hn-p", parent, sizeof(parent), 500, 600);
    assert_true(powner >= 0);
    assert_true(key_with_owner(a, powner, -1, "hn-ks", kid_same, sizeof(kid_same), 1500, 601) ==
                powner);
    assert_true(key_with_owner(a, -1, powner, "hn-ko", kid_other, sizeof(kid_other), 2500, 602) >=
                0);
    const char *kids[2] = {kid_same, kid_other};
    const char *pk[1] = {parent};
    assert_int_equal(ds_object_g_increase_ref(a, 2, kids, NULL), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(b, 1, pk, NULL), DS_K_OK);
    assert_int_equal(ds_object_set_nested(a, parent, 2, kids), DS_K_OK);
    /* The children's own references go; the parent holds them. */
    assert_int_equal(ds_object_g_decrease_ref(a, 2, kids, NULL), DS_K_OK);
    assert_int_equal(ref_count(2, kid_other), 0);
    ds_client_t *c = ct_client(&C, 2, DS_TRANSPORT_TCP);
    assert_true(ct_read_ok(c, kid_same, 1500, 601, 0));
    assert_true(ct_read_ok(c, kid_other, 2500, 602, 0));
    assert_true(ct_read_ok(c, parent, 500, 600, 0));
    /* The parent's last reference goes through another worker. */
    assert_int_equal(ds_object_g_decrease_ref(b, 1, pk, NULL), DS_K_OK);
    for (int n = 0; n < 3; n++) {
        assert_int_equal(gone_through(n, parent), DS_K_NOT_FOUND);
        assert_int_equal(gone_through(n, kid_same), DS_K_NOT_FOUND);
        assert_int_equal(gone_through(n, kid_other), DS_K_NOT_FOUND);
    }
    ds_client_close(c);
    ds_client_close(b);
    ds_client_close(a);
}

/* Last: it kills a worker. */
static void test_owner_failover_rebuilds(void **state)
{
    (void)state;
    char key[64];
    ds_client_t *holder = ct_client(&C, 0, DS_TRANSPORT_TCP);
    assert_non_null(holder);
    int owner = key_owned_elsewhere(holder, 0, -1, "hf", key, sizeof(key), 4000, 300);
    assert_true(owner > 0);
    int wnode = 3 - owner;
    const char *keys[1] = {key};
    assert_int_equal(ds_kv_rlatch(holder, 1, keys, 60000, NULL), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(holder, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ref_count(wnode, key), 1);
    /* A key of the same owner sealed through worker 0, which holds it. */
    char sk[64];
    assert_int_equal(key_with_owner(holder, owner, -1, "hfs", sk, sizeof(sk), 1000, 310), owner);
    const char *sks[1] = {sk};
    assert_int_equal(ds_object_seal(holder, 1, sks, NULL), DS_K_OK);
    /* A parent of the same owner referenced through wnode, holding a key
     * owned by wnode and one owned by the parent's owner (both stored on
     * worker 0), whose own references are gone. */
    char pk[64], kk[64], ks[64];
    assert_int_equal(key_with_owner(holder, owner, -1, "hfp", pk, sizeof(pk), 500, 320), owner);
    assert_int_equal(key_with_owner(holder, wnode, -1, "hfk", kk, sizeof(kk), 1500, 321), wnode);
    assert_int_equal(key_with_owner(holder, owner, -1, "hfn", ks, sizeof(ks), 700, 322), owner);
    const char *pks[1] = {pk}, *kks[2] = {kk, ks};
    ds_client_t *pc = ct_client(&C, wnode, DS_TRANSPORT_TCP);
    assert_non_null(pc);
    assert_int_equal(ds_object_g_increase_ref(holder, 2, kks, NULL), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(pc, 1, pks, NULL), DS_K_OK);
    assert_int_equal(ds_object_set_nested(pc, pk, 2, kks), DS_K_OK);
    assert_int_equal(ds_object_g_decrease_ref(holder, 2, kks, NULL), DS_K_OK);

    dst_worker_kill(&C.w[owner]);
    assert_true(ct_wait_members(&C, 2, 15000) >= 0);
    /* The new owner learns the key's location and its holds from worker 0
     * (asynchronously: allow a moment). */
    uint32_t count = UINT32_MAX;
    for (int i = 0; i < 100 && count != 1; i++) {
        count = ref_count(wnode, key);
        if (count != 1) usleep(50000);
    }
    assert_int_equal(count, 1);
    count = UINT32_MAX;
    for (int i = 0; i < 100 && count != 1; i++) {
        count = ref_count(0, pk);
        if (count != 1) usleep(50000);
    }
    assert_int_equal(count, 1);

    /* The seal holds through both survivors; the value stays. */
    ds_client_t *wc = ct_client(&C, wnode, DS_TRANSPORT_TCP);
    assert_non_null(wc);
    assert_int_equal(ct_set(wc, sk, 100, 311), DS_K_OC_ALREADY_SEALED);
    assert_non_null(strstr(ds_last_error(), "already be sealed."));
    assert_int_equal(ct_set(holder, sk, 100, 312), DS_K_OC_ALREADY_SEALED);
    assert_true(ct_read_ok(wc, sk, 1000, 310, 0));
    /* The nested keys stay with their parent, and go with it: the one
     * owned by the parent's dead owner too (its hold kept a second record
     * at the worker that owns it now). */
    assert_true(ct_read_ok(wc, kk, 1500, 321, 0));
    assert_true(ct_read_ok(holder, kk, 1500, 321, 0));
    assert_true(ct_read_ok(wc, ks, 700, 322, 0));
    assert_int_equal(ds_object_g_decrease_ref(pc, 1, pks, NULL), DS_K_OK);
    assert_int_equal(gone_through(0, kk), DS_K_NOT_FOUND);
    assert_int_equal(gone_through(wnode, kk), DS_K_NOT_FOUND);
    assert_int_equal(gone_through(wnode, pk), DS_K_NOT_FOUND);
    assert_int_equal(gone_through(0, ks), DS_K_NOT_FOUND);
    assert_int_equal(gone_through(wnode, ks), DS_K_NOT_FOUND);
    ds_client_close(pc);
    ds_client_close(wc);

    ct_writer_t w = {.c = &C, .node = wnode, .key = key, .len = 600, .seed = 301};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ct_writer_main, &w), 0);
    assert_false(ct_writer_finished(&w, 1500));
    assert_true(ct_read_ok(holder, key, 4000, 300, 0));
    assert_int_equal(ds_kv_unrlatch(holder, 1, keys, NULL), DS_K_OK);
    assert_true(ct_writer_finished(&w, 10000));
    pthread_join(th, NULL);
    assert_int_equal(w.st, DS_K_OK);
    assert_true(ct_read_ok(holder, key, 600, 301, 0));
    assert_int_equal(ds_object_g_decrease_ref(holder, 1, keys, NULL), DS_K_OK);
    assert_int_equal(ref_count(wnode, key), 0);

    /* A worker that joins learns the seal: writes through it are refused
     * whether it now owns the key or asks its owner. */
    assert_int_equal(ct_worker_add(&C, NULL), 0);
    /* It learns them asynchronously: wait until it knows both sealed keys
     * alive (this one and the seal test's second; the first was deleted). */
    double known = 0;
    for (int i = 0; i < 100 && known < 2; i++) {
        known = dst_stat(&C.w[C.n - 1], "cluster.seals_known");
        if (known < 2) usleep(50000);
    }
    assert_true(known >= 2);
    ds_client_t *jc = ct_client(&C, C.n - 1, DS_TRANSPORT_TCP);
    assert_non_null(jc);
    assert_int_equal(ct_set(jc, sk, 100, 313), DS_K_OC_ALREADY_SEALED);
    assert_non_null(strstr(ds_last_error(), "already be sealed."));
    assert_true(ct_read_ok(jc, sk, 1000, 310, 0));
    ds_client_close(jc);
    ds_client_close(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latches_across_workers),
        cmocka_unit_test(test_many_writers_and_the_release_through_one_worker),
        cmocka_unit_test(test_latch_waits_for_writes_in_flight),
        cmocka_unit_test(test_references_across_workers),
        cmocka_unit_test(test_seal_across_workers),
        cmocka_unit_test(test_nested_across_workers),
        cmocka_unit_test(test_owner_failover_rebuilds),
    };
    ct_group_cluster(&C, 3);
    return dst_run_group_tests(tests, ct_group_setup, ct_group_teardown);
}
