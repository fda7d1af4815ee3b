/* Subscribe-gets' table (worker/ops/subs.c) on its own, with requests that
 * have no connection behind them: a publish or a deadline only marks waits
 * ready, and ds__subs_run_ready (the loop's after-event hook) completes
 * them, in the order they became ready; a wait completes once every key it
 * names is published (a key published twice counts once, other keys and
 * prefixes not at all, a key it names twice once), every wait on a key
 * completes on one publish, deadlines expire in order and the next one is
 * reported, the subscription limit refuses a wait whole and leaves the
 * table as it was, the table grows past its first buckets, a wait whose
 * connection closes while it is ready is freed without its callback, and
 * destroying the table frees the waits still pending or ready. */
#include "worker/ops/subs.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MAXREQ 6000

static ds_req_t reqs[MAXREQ];
/* What the callback saw, in call order. */
static int ndone;
static ds_req_t *done_req[MAXREQ];
static bool done_timed_out[MAXREQ];
static int ctx_token;

static void on_done(void *ctx, ds_req_t *d, bool timed_out, uint64_t deadline_ms)
{
    (void)deadline_ms;
    assert_ptr_equal(ctx, &ctx_token);
    assert_true(ndone < MAXREQ);
    done_req[ndone] = d;
    done_timed_out[ndone] = timed_out;
    ndone++;
}

/* A request as a handler holds it once deferred; no connection behind it.
 * The wait takes it over (ds__req_rearm) rather than deferring it again. */
static ds_req_t *req(int i)
{
    memset(&reqs[i], 0, sizeof(reqs[i]));
    reqs[i].id = (uint64_t)i;
    reqs[i].deferred_ = true;
    return &reqs[i];
}

static bool wait_keys(ds_subs_t *s, int i, uint64_t deadline, uint32_t n, ...)
{
    const char *keys[8];
    uint32_t lens[8];
    va_list ap;
    va_start(ap, n);
    for (uint32_t k = 0; k < n; k++) {
        keys[k] = va_arg(ap, const char *);
        lens[k] = (uint32_t)strlen(keys[k]);
    }
    va_end(ap);
    return ds__subs_wait(s, req(i), keys, lens, n, deadline, on_done, &ctx_token);
}

/* A publish, then the after-event hook: what one event that sets key does. */
static void publish(ds_subs_t *s, const char *key)
{
    ds__subs_publish(s, key, strlen(key));
    ds__subs_run_ready(s);
}

/* A deadline sweep, then the after-event hook (the loop's timers). */
static uint64_t expire(ds_subs_t *s, uint64_t now)
{
    uint64_t next = ds__subs_expire(s, now);
    ds__subs_run_ready(s);
    return next;
}

static int setup(void **state)
{
    (void)state;
    ndone = 0;
    return 0;
}

/* The requests have no connection: nothing for ds__req_drop to end, so
 * ds__subs_destroy only frees the waits. */
static void destroy(ds_subs_t *s)
{
    for (int i = 0; i < MAXREQ; i++)
        reqs[i].deferred_ = false;
    ds__subs_destroy(s);
}

static void test_one_key(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 0);
    assert_true(wait_keys(&s, 0, 10000, 1, "alpha"));
    assert_int_equal(s.count, 1);
    assert_int_equal(s.n, 1);
    publish(&s, "beta");
    publish(&s, "alph"); /* a prefix is another key */
    publish(&s, "alphabet");
    assert_int_equal(ndone, 0);
    publish(&s, "alpha");
    assert_int_equal(ndone, 1);
    assert_ptr_equal(done_req[0], &reqs[0]);
    assert_false(done_timed_out[0]);
    assert_int_equal(s.count, 0);
    assert_int_equal(s.n, 0);
    /* Done is done: a second publish finds nothing. */
    publish(&s, "alpha");
    assert_int_equal(ndone, 1);
    assert_int_equal(expire(&s, 20000), 0);
    assert_int_equal(ndone, 1);
    destroy(&s);
}

/* Binary keys compare as bytes, NULs included. */
static void test_binary_keys(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 0);
    const char k[] = {'k', '\0', 'x'}, other[] = {'k', '\0', 'y'};
    const char *keys[] = {k};
    const uint32_t lens[] = {sizeof(k)};
    assert_true(ds__subs_wait(&s, req(0), keys, lens, 1, 10000, on_done, &ctx_token));
    ds__subs_publish(&s, other, sizeof(other));
    ds__subs_publish(&s, k, 1);
    ds__subs_run_ready(&s);
    assert_int_equal(ndone, 0);
    ds__subs_publish(&s, k, sizeof(k));
    ds__subs_run_ready(&s);
    assert_int_equal(ndone, 1);
    destroy(&s);
}

static void test_all_keys_needed(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 0);
    assert_true(wait_keys(&s, 0, 10000, 3, "a", "b", "c"));
    assert_int_equal(s.count, 3);
    publish(&s, "a");
    publish(&s, "a"); /* counts once */
    publish(&s, "b");
    assert_int_equal(ndone, 0);
    publish(&s, "c");
    assert_int_equal(ndone, 1);
    assert_false(done_timed_out[0]);
    assert_int_equal(s.count, 0);
    destroy(&s);
}

/* One publish completes every wait on the key; a wait on two keys stays
 * until its second comes. */
static void test_many_waits_one_key(void **state)
{
    (void)state;
    enum { N = 200 };
    ds_subs_t s;
    ds__subs_init(&s, 1000, 0);
    for (int i = 0; i < N; i++)
        assert_true(wait_keys(&s, i, 10000 + (uint64_t)i, 1, "shared"));
    assert_true(wait_keys(&s, N, 10000, 2, "shared", "later"));
    publish(&s, "shared");
    assert_int_equal(ndone, N);
    bool seen[N] = {false};
    for (int i = 0; i < N; i++) {
        int idx = (int)(done_req[i] - reqs);
        assert_true(idx >= 0 && idx < N);
        assert_false(seen[idx]);
        seen[idx] = true;
        assert_false(done_timed_out[i]);
    }
    assert_int_equal(s.n, 1);
    publish(&s, "later");
    assert_int_equal(ndone, N + 1);
    assert_ptr_equal(done_req[N], &reqs[N]);
    destroy(&s);
}

/* Deadlines: expire completes the waits due, earliest first, as timed out,
 * and says when the next is due (0: none left). */
static void test_deadlines(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 0);
    static const uint64_t deadlines[] = {500, 100, 300, 400, 200};
    for (int i = 0; i < 5; i++)
        assert_true(wait_keys(&s, i, deadlines[i], 1, "never"));
    assert_int_equal(expire(&s, 50), 100);
    assert_int_equal(ndone, 0);
    assert_int_equal(expire(&s, 300), 400);
    assert_int_equal(ndone, 3);
    assert_ptr_equal(done_req[0], &reqs[1]); /* 100 */
    assert_ptr_equal(done_req[1], &reqs[4]); /* 200 */
    assert_ptr_equal(done_req[2], &reqs[2]); /* 300 */
    for (int i = 0; i < 3; i++)
        assert_true(done_timed_out[i]);
    /* A publish completes one before its deadline; the heap stays in order. */
    assert_true(wait_keys(&s, 5, 450, 1, "soon"));
    assert_true(wait_keys(&s, 6, 50, 1, "first"));
    assert_int_equal(expire(&s, 0), 50);
    publish(&s, "first");
    assert_int_equal(ndone, 4);
    assert_false(done_timed_out[3]);
    assert_int_equal(expire(&s, 0), 400);
    assert_int_equal(expire(&s, 1000), 0);
    assert_int_equal(ndone, 7);
    assert_ptr_equal(done_req[4], &reqs[3]); /* 400 */
    assert_ptr_equal(done_req[5], &reqs[5]); /* 450 */
    assert_ptr_equal(done_req[6], &reqs[0]); /* 500 */
    assert_int_equal(s.count, 0);
    destroy(&s);
}

/* --max_pending_subscriptions counts keys: a wait that would pass it is
 * refused whole, and the table is as it was. */
static void test_limit(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 3, 0);
    assert_true(wait_keys(&s, 0, 10000, 2, "a", "b"));
    assert_false(wait_keys(&s, 1, 10000, 2, "c", "d"));
    assert_int_equal(s.count, 2);
    assert_int_equal(s.n, 1);
    publish(&s, "c");
    publish(&s, "d");
    assert_int_equal(ndone, 0);
    assert_true(wait_keys(&s, 2, 10000, 1, "c"));
    assert_int_equal(s.count, 3);
    publish(&s, "a");
    publish(&s, "b");
    assert_int_equal(ndone, 1);
    /* Completed waits give their room back. */
    assert_true(wait_keys(&s, 3, 10000, 2, "e", "f"));
    destroy(&s);
}

/* Far more keys than the first 1024 buckets: the table grows and every
 * wait is still found by its key. */
static void test_grows(void **state)
{
    (void)state;
    enum { N = 5000 };
    ds_subs_t s;
    ds__subs_init(&s, 100000, 0);
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "grow-%d", i);
        assert_true(wait_keys(&s, i, 10000, 1, key));
    }
    assert_int_equal(s.count, N);
    assert_int_equal(ds__dict_count(&s.keys), N);
    assert_int_equal(ds__dict_verify(&s.keys), 0);
    for (int i = N - 1; i >= 0; i--) {
        snprintf(key, sizeof(key), "grow-%d", i);
        publish(&s, key);
        assert_int_equal(ndone, N - i);
        assert_ptr_equal(done_req[N - i - 1], &reqs[i]);
    }
    assert_int_equal(s.count, 0);
    assert_int_equal(ds__dict_count(&s.keys), 0);
    destroy(&s);
}

/* A publish runs no callback: the waits it completes are marked ready, out
 * of the table (their keys free for others' limits), and complete only from
 * the after-event hook, in the order they became ready. A key published
 * twice before the hook completes its waits once; a wait on several keys
 * is ready only when the last arrives; a key a wait names twice counts as
 * one. */
static void test_ready_not_inside_publish(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 0);
    assert_true(wait_keys(&s, 0, 10000, 1, "k"));
    assert_true(wait_keys(&s, 1, 10000, 3, "m1", "k", "m2"));
    assert_true(wait_keys(&s, 2, 10000, 3, "k", "x", "k"));
    assert_true(wait_keys(&s, 3, 10000, 1, "k"));
    ds__subs_publish(&s, "k", 1);
    ds__subs_publish(&s, "k", 1); /* the same event sets it again */
    assert_int_equal(ndone, 0);
    assert_true(ds__subs_ready_pending(&s));
    assert_int_equal(s.n, 2); /* waits 1 and 2 still wait */
    assert_int_equal(s.count, 6);
    assert_int_equal(ds__dict_count(&s.keys), 4); /* m1, k, m2, x */
    ds__subs_run_ready(&s);
    assert_int_equal(ndone, 2);
    assert_false(ds__subs_ready_pending(&s));
    /* in the order they became ready: the newest subscription first */
    assert_ptr_equal(done_req[0], &reqs[3]);
    assert_ptr_equal(done_req[1], &reqs[0]);
    /* the multi-key waits, one key at a time */
    ds__subs_publish(&s, "m1", 2);
    ds__subs_publish(&s, "x", 1);
    ds__subs_run_ready(&s);
    assert_int_equal(ndone, 3);
    assert_ptr_equal(done_req[2], &reqs[2]);
    assert_false(done_timed_out[2]);
    ds__subs_publish(&s, "m2", 2);
    assert_int_equal(ndone, 3);
    ds__subs_run_ready(&s);
    assert_int_equal(ndone, 4);
    assert_ptr_equal(done_req[3], &reqs[1]);
    assert_int_equal(s.count, 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(ds__dict_count(&s.keys), 0);
    destroy(&s);
}

/* A wait whose connection closes while it is on the ready list (the cancel
 * callback its park registered runs) leaves the list and is freed (ASan's
 * leak and use checks see to it); the others still complete. */
static void test_cancel_while_ready(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 0);
    for (int i = 0; i < 3; i++)
        assert_true(wait_keys(&s, i, 10000, 1, "k"));
    assert_true(wait_keys(&s, 3, 50, 1, "never"));
    ds__subs_publish(&s, "k", 1);
    assert_int_equal(ds__subs_expire(&s, 0), 50);
    assert_int_equal(ds__subs_expire(&s, 100), 0); /* wait 3: ready, timed out */
    /* The connections of waits 1 and 3 close before the hook runs. */
    for (int i = 1; i <= 3; i += 2) {
        assert_non_null(reqs[i].cancel_);
        reqs[i].deferred_ = false; /* no connection: nothing to end */
        reqs[i].cancel_(&reqs[i], reqs[i].cancel_ctx_);
    }
    assert_int_equal(ndone, 0);
    ds__subs_run_ready(&s);
    assert_int_equal(ndone, 2);
    assert_ptr_equal(done_req[0], &reqs[2]);
    assert_ptr_equal(done_req[1], &reqs[0]);
    /* the completed requests were handed on: no cancel callback left */
    assert_null(reqs[0].cancel_);
    assert_null(reqs[2].cancel_);
    assert_false(ds__subs_ready_pending(&s));
    destroy(&s);
}

/* --max_pending_subscriptions_per_client counts each session's keys (in
 * the owners table): a wait past its share is refused naming the flag,
 * another session still waits, a peer's request counts only toward the
 * table's limit, and a wait made ready gives its session's room back. */
static void test_per_client(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 3);
    ds_session_t s1 = {.id = 1}, s2 = {.id = UINT64_C(1) << 40};
    const char *ab[] = {"a", "b"}, *cd[] = {"c", "d"};
    const uint32_t l2[] = {1, 1};
    ds_req_t *r = req(0);
    r->session = &s1;
    assert_true(ds__subs_wait(&s, r, ab, l2, 2, 10000, on_done, &ctx_token));
    r = req(1);
    r->session = &s1;
    assert_false(ds__subs_wait(&s, r, cd, l2, 2, 10000, on_done, &ctx_token));
    assert_non_null(ds__subs_refusal(&s));
    assert_non_null(strstr(ds__subs_refusal(&s), "--max_pending_subscriptions_per_client 3"));
    r = req(2);
    r->session = &s2;
    assert_true(ds__subs_wait(&s, r, cd, l2, 2, 10000, on_done, &ctx_token));
    r = req(3);
    r->session = &s1;
    r->flags = DS_FLAG_PEER;
    assert_true(ds__subs_wait(&s, r, cd, l2, 2, 10000, on_done, &ctx_token));
    assert_int_equal(ds__dict_count(&s.owners), 2);
    ds__subs_publish(&s, "a", 1);
    ds__subs_publish(&s, "b", 1); /* session 1's wait: ready, its keys free */
    assert_int_equal(ds__dict_count(&s.owners), 1);
    r = req(4);
    r->session = &s1;
    assert_true(ds__subs_wait(&s, r, cd, l2, 2, 10000, on_done, &ctx_token));
    ds__subs_run_ready(&s);
    assert_int_equal(ndone, 1);
    assert_ptr_equal(done_req[0], &reqs[0]);
    assert_int_equal(ds__dict_verify(&s.owners), 0);
    destroy(&s);
    assert_int_equal(ndone, 1);
}

/* Waits still pending when the table is destroyed are freed (ASan's leak
 * check sees to it) without their callbacks. */
static void test_destroy_pending(void **state)
{
    (void)state;
    ds_subs_t s;
    ds__subs_init(&s, 100, 0);
    assert_true(wait_keys(&s, 0, 10000, 2, "x", "y"));
    assert_true(wait_keys(&s, 1, 20000, 1, "x"));
    assert_true(wait_keys(&s, 2, 20000, 1, "z"));
    ds__subs_publish(&s, "z", 1); /* ready, never completed */
    destroy(&s);
    assert_int_equal(ndone, 0);
    assert_int_equal(ds__dict_count(&s.keys), 0);
    assert_int_equal(s.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_one_key, setup),
        cmocka_unit_test_setup(test_binary_keys, setup),
        cmocka_unit_test_setup(test_all_keys_needed, setup),
        cmocka_unit_test_setup(test_many_waits_one_key, setup),
        cmocka_unit_test_setup(test_deadlines, setup),
        cmocka_unit_test_setup(test_limit, setup),
        cmocka_unit_test_setup(test_grows, setup),
        cmocka_unit_test_setup(test_ready_not_inside_publish, setup),
        cmocka_unit_test_setup(test_cancel_while_ready, setup),
        cmocka_unit_test_setup(test_per_client, setup),
        cmocka_unit_test_setup(test_destroy_pending, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
