/* Subscription quotas, with two clients (two sessions) against one worker:
 *
 * - Per client: with the default share (a quarter of
 *   --max_pending_subscriptions), a client waiting on 2 x 10,000 never-set
 *   keys is refused a third get of 10,000 with K_TRY_AGAIN naming
 *   --max_pending_subscriptions_per_client, while the other client's
 *   subscribe-get is still taken and woken by the publish.
 * - The worker's pool: when one client (allowed the whole pool) holds every
 *   slot, the other's subscribe-get is refused with K_TRY_AGAIN naming
 *   --max_pending_subscriptions, not a "not found within N ms" it never
 *   waited for.
 * - The offender waits: each refusal is answered after a pause
 *   (ds__req_penalize) that grows while the refusals go on, so ten refusals
 *   in a row take the offender over a second, while the other client is
 *   served all along; the refused client works again once its share is
 *   free.
 * - Many keys: a subscribe-get of 10,000 never-set keys answers the one key
 *   set meanwhile with its value and every other key with K_NOT_FOUND, each
 *   in its place; a raw client that sends such gets and leaves without its
 *   answers leaves no subscription behind.
 * - Slices: such a get registers its wait a slice per loop turn; requests
 *   pipelined behind it are answered after it, in order, its keys set
 *   meanwhile complete it, and connections closed mid-registration, mid-wait
 *   or while its answer is read leave nothing subscribed or reserved. */
#include "harness.h"
#include "it_hostile_raw.h"

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

static dst_worker_t W;

#define NKEYS 10000
#define WAIT_MS 8000

typedef struct {
    ds_client_t *c;
    const char *prefix;
    int nkeys;
    ds_status_t st;
} getter_t;

/* A subscribe-get of nkeys never-set keys (no cmocka asserts here). */
static void *get_never_set(void *arg)
{
    getter_t *g = arg;
    char **keys = calloc((size_t)g->nkeys, sizeof(*keys));
    ds_value_t *out = calloc((size_t)g->nkeys, sizeof(*out));
    g->st = DS_K_OUT_OF_MEMORY;
    if (keys && out) {
        for (int i = 0; i < g->nkeys; i++) {
            keys[i] = malloc(32);
            if (keys[i]) snprintf(keys[i], 32, "%s:%d", g->prefix, i);
        }
        g->st = ds_kv_mget(g->c, (size_t)g->nkeys, (const char *const *)keys, WAIT_MS, out);
        for (int i = 0; i < g->nkeys; i++)
            if (out[i].status == DS_K_OK) ds_free(out[i].data);
    }
    for (int i = 0; keys && i < g->nkeys; i++)
        free(keys[i]);
    free(keys);
    free(out);
    return NULL;
}

/* Publishes the nkeys keys "prefix:i" in one MSET, ending a get_never_set
 * wait on them (its answer then K_OK) rather than letting it run its course. */
static void publish_all(ds_client_t *c, const char *prefix, int nkeys)
{
    char **keys = calloc((size_t)nkeys, sizeof(*keys));
    const void **vals = calloc((size_t)nkeys, sizeof(*vals));
    size_t *lens = calloc((size_t)nkeys, sizeof(*lens));
    assert_non_null(keys);
    assert_non_null(vals);
    assert_non_null(lens);
    for (int i = 0; i < nkeys; i++) {
        keys[i] = malloc(32);
        assert_non_null(keys[i]);
        snprintf(keys[i], 32, "%s:%d", prefix, i);
        vals[i] = "v";
        lens[i] = 1;
    }
    assert_int_equal(
        ds_kv_mset(c, (size_t)nkeys, (const char *const *)keys, vals, lens, NULL, NULL), DS_K_OK);
    for (int i = 0; i < nkeys; i++)
        free(keys[i]);
    free(keys);
    free(vals);
    free(lens);
}

typedef struct {
    ds_client_t *c;
    ds_status_t st;
    size_t len;
    bool intact;
} waiter_t;

static void *get_one(void *arg)
{
    waiter_t *w = arg;
    void *v = NULL;
    w->st = ds_kv_get(w->c, "quota-b", WAIT_MS, &v, &w->len);
    if (w->st == DS_K_OK) {
        w->intact = dst_check(v, w->len, 77);
        ds_free(v);
    }
    return NULL;
}

static bool said(const char *text)
{
    const char *e = ds_last_error();
    if (e && strstr(e, text)) return true;
    fprintf(stderr, "error message '%s' lacks '%s'\n", e ? e : "(none)", text);
    return false;
}

static void test_per_client_share(void **state)
{
    (void)state;
    assert_int_equal(dst_worker_start(&W, 64, "--max_pending_subscriptions 100000"), 0);
    ds_client_t *a = dst_connect(&W, DS_TRANSPORT_TCP);
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(a);
    assert_non_null(b);
    /* client A waits on two gets of 10,000 keys: 20,000 of its 25,000 */
    getter_t g[2] = {{a, "qa0", NKEYS, DS_K_OK}, {a, "qa1", NKEYS, DS_K_OK}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, get_never_set, &g[i]), 0);
        assert_true(dst_wait_stat(&W, "subscriptions_waiting", (double)(NKEYS * (i + 1)), 5000));
    }
    /* a third is past its share: refused at once, naming the limit */
    getter_t third = {a, "qa2", NKEYS, DS_K_OK};
    get_never_set(&third);
    assert_int_equal(third.st, DS_K_TRY_AGAIN);
    assert_true(said("--max_pending_subscriptions_per_client 25000"));
    /* client B still subscribes, and the publish wakes it */
    waiter_t w = {b, DS_K_OK, 0, false};
    pthread_t tb;
    assert_int_equal(pthread_create(&tb, NULL, get_one, &w), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", (double)(2 * NKEYS + 1), 5000));
    assert_int_equal(dst_set_filled(b, "quota-b", 1000, 77), DS_K_OK);
    pthread_join(tb, NULL);
    assert_int_equal(w.st, DS_K_OK);
    assert_int_equal(w.len, 1000);
    assert_true(w.intact);
    /* A's own waits end when their keys come */
    for (int i = 0; i < 2; i++) {
        publish_all(b, g[i].prefix, NKEYS);
        pthread_join(th[i], NULL);
        assert_int_equal(g[i].st, DS_K_OK);
    }
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 0, 5000));
    /* its share is free again */
    getter_t again = {a, "qa3", 10, DS_K_OK};
    pthread_t ta;
    assert_int_equal(pthread_create(&ta, NULL, get_never_set, &again), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 10, 5000));
    for (int i = 0; i < 10; i++) {
        char k[32];
        snprintf(k, sizeof(k), "qa3:%d", i);
        assert_int_equal(dst_set_filled(b, k, 10, 1), DS_K_OK);
    }
    pthread_join(ta, NULL);
    assert_int_equal(again.st, DS_K_OK);
    ds_client_close(a);
    ds_client_close(b);
    assert_int_equal(dst_worker_stop(&W), 0);
}

static void test_pool_full_message(void **state)
{
    (void)state;
    assert_int_equal(dst_worker_start(&W, 64,
                                      "--max_pending_subscriptions 10000 "
                                      "--max_pending_subscriptions_per_client 10000"),
                     0);
    ds_client_t *a = dst_connect(&W, DS_TRANSPORT_TCP);
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(a);
    assert_non_null(b);
    getter_t g = {a, "pa", NKEYS, DS_K_OK};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, get_never_set, &g), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", NKEYS, 5000));
    void *v = NULL;
    size_t n = 0;
    assert_int_equal(ds_kv_get(b, "pool-b", 5000, &v, &n), DS_K_TRY_AGAIN);
    assert_true(said("--max_pending_subscriptions 10000"));
    assert_null(strstr(ds_last_error(), "not found within"));
    /* a get that does not wait is served as before */
    assert_int_equal(dst_set_filled(b, "pool-c", 100, 3), DS_K_OK);
    assert_int_equal(ds_kv_get(b, "pool-c", 0, &v, &n), DS_K_OK);
    assert_true(dst_check(v, n, 3));
    ds_free(v);
    publish_all(b, g.prefix, NKEYS);
    pthread_join(th, NULL);
    assert_int_equal(g.st, DS_K_OK);
    ds_client_close(a);
    ds_client_close(b);
    assert_int_equal(dst_worker_stop(&W), 0);
}

static void test_refusals_pause_offender(void **state)
{
    (void)state;
    assert_int_equal(dst_worker_start(&W, 64, "--max_pending_subscriptions 100000"), 0);
    ds_client_t *a = dst_connect(&W, DS_TRANSPORT_TCP);
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(a);
    assert_non_null(b);
    getter_t g[2] = {{a, "pz0", NKEYS, DS_K_OK}, {a, "pz1", NKEYS, DS_K_OK}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, get_never_set, &g[i]), 0);
        assert_true(dst_wait_stat(&W, "subscriptions_waiting", (double)(NKEYS * (i + 1)), 5000));
    }
    double pauses0 = dst_stat(&W, "clients.quota_pauses");
    /* Ten refusals in a row: each answered, each next one read only after
     * a pause that doubles from DS_QUOTA_PAUSE_MIN_MS (2 + 4 + ... + 512 ms
     * before the tenth). */
    uint64_t t0 = ds__now_ms();
    for (int i = 0; i < 10; i++) {
        getter_t third = {a, "pz2", NKEYS, DS_K_OK};
        get_never_set(&third);
        assert_int_equal(third.st, DS_K_TRY_AGAIN);
        assert_true(said("--max_pending_subscriptions_per_client"));
        /* the other client is served meanwhile */
        char k[32];
        snprintf(k, sizeof(k), "pz-b%d", i);
        assert_int_equal(dst_set_filled(b, k, 1024, (uint8_t)i), DS_K_OK);
        void *v = NULL;
        size_t n = 0;
        assert_int_equal(ds_kv_get(b, k, 0, &v, &n), DS_K_OK);
        assert_true(dst_check(v, n, (uint8_t)i));
        ds_free(v);
    }
    assert_true(ds__now_ms() - t0 >= 1000);
    assert_true(dst_stat(&W, "clients.quota_pauses") >= pauses0 + 10);
    for (int i = 0; i < 2; i++) {
        publish_all(b, g[i].prefix, NKEYS);
        pthread_join(th[i], NULL);
        assert_int_equal(g[i].st, DS_K_OK);
    }
    /* its share free again, A is served as before */
    assert_int_equal(dst_set_filled(a, "pz-a", 100, 5), DS_K_OK);
    ds_client_close(a);
    ds_client_close(b);
    assert_int_equal(dst_worker_stop(&W), 0);
}

/* ---- many keys in one get ---- */

typedef struct {
    ds_client_t *c;
    const char *const *keys;
    ds_value_t *out;
    ds_status_t st;
} many_t;

static void *get_many(void *arg)
{
    many_t *m = arg;
    m->st = ds_kv_mget(m->c, NKEYS, m->keys, WAIT_MS, m->out);
    return NULL;
}

static void test_many_keys_in_place(void **state)
{
    (void)state;
    enum { SET = 7777 };
    assert_int_equal(dst_worker_start(&W, 64, "--max_pending_subscriptions 100000"), 0);
    ds_client_t *a = dst_connect(&W, DS_TRANSPORT_TCP);
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(a);
    assert_non_null(b);
    static char names[NKEYS][24];
    static const char *keys[NKEYS];
    static ds_value_t out[NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "many:%d", i);
        keys[i] = names[i];
    }
    many_t m = {a, keys, out, DS_K_RUNTIME_ERROR};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, get_many, &m), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", NKEYS, 5000));
    assert_int_equal(dst_set_filled(b, names[SET], 100, 9), DS_K_OK);
    /* the other keys never come: the wait runs its course */
    pthread_join(t, NULL);
    assert_int_equal(m.st, DS_K_OK);
    for (int i = 0; i < NKEYS; i++) {
        if (i == SET) continue;
        if (out[i].status != DS_K_NOT_FOUND)
            fprintf(stderr, "key %d: status %d\n", i, out[i].status);
        assert_int_equal(out[i].status, DS_K_NOT_FOUND);
    }
    assert_int_equal(out[SET].status, DS_K_OK);
    assert_int_equal(out[SET].len, 100);
    assert_true(dst_check(out[SET].data, out[SET].len, 9));
    ds_free(out[SET].data);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 0, 5000));

    /* Raw clients send the same get and leave without the answer, some
     * before the worker has read all of it: no subscription stays. */
    ds_wbuf_t g;
    ds__wbuf_init(&g);
    ds__wbuf_i32(&g, 60000);
    ds__wbuf_u8(&g, 0);
    ds__wbuf_u32(&g, NKEYS);
    for (int i = 0; i < NKEYS; i++)
        ds__wbuf_cstr(&g, names[i]);
    for (int round = 0; round < 3; round++) {
        hr_conn_t r;
        assert_int_equal(hr_open_hello(&r, &W, false), 0);
        hr_add(&r, DS_OP_GET, &g, NULL, 0);
        assert_int_equal(hr_flush(&r), 0);
        if (round == 0) assert_true(dst_wait_stat(&W, "subscriptions_waiting", NKEYS - 1, 5000));
        hr_close(&r);
    }
    ds__wbuf_free(&g);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 0, 5000));
    /* the worker serves on */
    assert_int_equal(dst_set_filled(b, "many-after", 10, 3), DS_K_OK);
    ds_client_close(a);
    ds_client_close(b);
    assert_int_equal(dst_worker_stop(&W), 0);
}

/* ---- a wait of many keys registered in slices ---- */

/* The values of a GET answer of n keys, each inline: 0 when key i holds
 * "sl:i" for every i. */
static int check_all_inline(const hr_frame_t *f, uint32_t n)
{
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *e;
    (void)ds__rbuf_str(&r, &e);
    if (ds__rbuf_u32(&r) != n) return -1;
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t kind = ds__rbuf_u8(&r);
        uint64_t size = ds__rbuf_u64(&r);
        char want[32];
        int wl = snprintf(want, sizeof(want), "sl:%u", i);
        if (r.err || kind != DS_VAL_INLINE || size != (uint64_t)wl || off + size > f->h.data_len ||
            memcmp(f->data + off, want, (size_t)wl) != 0) {
            fprintf(stderr, "key %u: kind %u size %llu\n", i, kind, (unsigned long long)size);
            return -1;
        }
        off += size;
    }
    return 0;
}

/* A subscribe-get of 10,000 keys, a tenth of them set before, registers
 * its wait a slice per loop turn: requests pipelined behind it on its
 * connection are answered after it, in order; the keys set once it waits
 * complete it with every value in its place; nothing stays subscribed. */
/* A GET of the NKEYS never-set keys "sl-never:i", waiting wait_ms, into g. */
static void never_get(ds_wbuf_t *g, int32_t wait_ms)
{
    ds__wbuf_init(g);
    ds__wbuf_i32(g, wait_ms);
    ds__wbuf_u8(g, 0);
    ds__wbuf_u32(g, NKEYS);
    for (int i = 0; i < NKEYS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "sl-never:%d", i);
        ds__wbuf_cstr(g, k);
    }
}

static void test_sliced_wait_in_order(void **state)
{
    (void)state;
    assert_int_equal(dst_worker_start(&W, 64, "--max_pending_subscriptions 100000"), 0);
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(b);
    static char names[NKEYS][16];
    static const char *keys[NKEYS], *rest[NKEYS];
    static const void *vals[NKEYS], *rvals[NKEYS];
    static size_t lens[NKEYS], rlens[NKEYS];
    uint32_t nset = 0, nrest = 0;
    for (int i = 0; i < NKEYS; i++) {
        lens[i] = (size_t)snprintf(names[i], sizeof(names[i]), "sl:%d", i);
        keys[i] = names[i];
        vals[i] = names[i];
        if (i % 10 == 0) {
            keys[nset] = names[i];
            vals[nset] = names[i];
            lens[nset++] = strlen(names[i]);
        } else {
            rest[nrest] = names[i];
            rvals[nrest] = names[i];
            rlens[nrest++] = strlen(names[i]);
        }
    }
    assert_int_equal(ds_kv_mset(b, nset, keys, vals, lens, NULL, NULL), DS_K_OK);
    hr_conn_t r;
    assert_int_equal(hr_open_hello(&r, &W, false), 0);
    ds_wbuf_t g;
    ds__wbuf_init(&g);
    ds__wbuf_i32(&g, WAIT_MS);
    ds__wbuf_u8(&g, 0);
    ds__wbuf_u32(&g, NKEYS);
    for (int i = 0; i < NKEYS; i++)
        ds__wbuf_cstr(&g, names[i]);
    uint64_t gid = hr_add(&r, DS_OP_GET, &g, NULL, 0);
    ds__wbuf_free(&g);
    uint64_t sid = hr_set(&r, "sl-next", "after");
    uint64_t nid = hr_get(&r, "sl-next", 0, 0);
    assert_int_equal(hr_flush(&r), 0);
    /* every key missing is subscribed to, once registration is over */
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", (double)nrest, 5000));
    assert_int_equal(ds_kv_mset(b, nrest, rest, rvals, rlens, NULL, NULL), DS_K_OK);
    assert_int_equal(hr_collect(&r, 3, ds__now_ms() + 10000), 3);
    assert_int_equal(r.got[0].h.req_id, gid);
    assert_int_equal(r.got[0].h.status, DS_K_OK);
    assert_int_equal(check_all_inline(&r.got[0], NKEYS), 0);
    assert_int_equal(r.got[1].h.req_id, sid);
    assert_int_equal(r.got[1].h.status, DS_K_OK);
    assert_int_equal(r.got[2].h.req_id, nid);
    char v[32];
    assert_int_equal(hr_get_value(&r.got[2], v, sizeof(v), NULL), DS_VAL_INLINE);
    assert_string_equal(v, "after");
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 0, 5000));
    hr_close(&r);

    /* Gets of many never-set keys whose connections close while their
     * waits register, right after sending (with a request pipelined
     * behind), or once they wait: nothing stays subscribed or reserved,
     * and the share is whole again for a client that waits next. */
    never_get(&g, 60000);
    for (int round = 0; round < 6; round++) {
        hr_conn_t c;
        assert_int_equal(hr_open_hello(&c, &W, false), 0);
        hr_add(&c, DS_OP_GET, &g, NULL, 0);
        hr_health(&c);
        assert_int_equal(hr_flush(&c), 0);
        if (round == 5) assert_true(dst_wait_stat(&W, "subscriptions_waiting", NKEYS, 5000));
        hr_close(&c);
    }
    ds__wbuf_free(&g);
    /* The same with a wait of 20 ms, the connection closing at different
     * points of registration, wait, leaving the table and answer. */
    never_get(&g, 20);
    for (int round = 0; round < 8; round++) {
        hr_conn_t c;
        assert_int_equal(hr_open_hello(&c, &W, false), 0);
        hr_add(&c, DS_OP_GET, &g, NULL, 0);
        assert_int_equal(hr_flush(&c), 0);
        usleep((useconds_t)(round * 5000));
        hr_close(&c);
    }
    ds__wbuf_free(&g);
    /* keys of those waits published while their subscriptions may still be
     * leaving the table */
    for (int i = 0; i < 100; i++) {
        char k[32];
        snprintf(k, sizeof(k), "sl-never:%d", i * 97);
        assert_int_equal(dst_set_filled(b, k, 8, 1), DS_K_OK);
    }
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 0, 5000));
    getter_t g1 = {b, "sl-again0", NKEYS, DS_K_OK}, g2 = {b, "sl-again1", NKEYS, DS_K_OK};
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, get_never_set, &g1), 0);
    assert_int_equal(pthread_create(&t2, NULL, get_never_set, &g2), 0);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 2 * NKEYS, 5000));
    /* a third get of b's past its share: refused at once */
    getter_t third = {b, "sl-again2", NKEYS, DS_K_OK};
    get_never_set(&third);
    assert_int_equal(third.st, DS_K_TRY_AGAIN);
    assert_true(said("--max_pending_subscriptions_per_client 25000"));
    publish_all(b, g1.prefix, NKEYS);
    publish_all(b, g2.prefix, NKEYS);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(g1.st, DS_K_OK);
    assert_int_equal(g2.st, DS_K_OK);
    assert_true(dst_wait_stat(&W, "subscriptions_waiting", 0, 5000));
    ds_client_close(b);
    assert_int_equal(dst_worker_stop(&W), 0);
}

int main(void)
{
    if (getenv("DS_TEST_WORKER")) {
        printf("it_sub_quota starts workers with its own flags: skipped with DS_TEST_WORKER\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_client_share),        cmocka_unit_test(test_pool_full_message),
        cmocka_unit_test(test_refusals_pause_offender), cmocka_unit_test(test_many_keys_in_place),
        cmocka_unit_test(test_sliced_wait_in_order),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
