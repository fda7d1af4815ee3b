/* The event loop's timers (src/worker/net/loop.h): a plain timer runs only
 * once its due time has come and not again after saying it has nothing
 * due; a DS_TIMER_EACH_TURN timer runs at every turn; timers run in the
 * order they were added and the turn returns the nearest due time; a
 * deleted timer no longer runs; the after-event hook runs once per turn;
 * the wait the timers allow is bounded, and a wait that long with no event
 * comes back with none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "worker/net/loop.h"

typedef struct {
    int runs;
    uint64_t last_now;
    uint64_t next; /* what the callback returns */
    int *order;    /* appends its id here (may be NULL) */
    int *norder;
    int id;
} tick_t;

static uint64_t tick(void *ctx, uint64_t now_ms)
{
    tick_t *t = ctx;
    t->runs++;
    t->last_now = now_ms;
    if (t->order) t->order[(*t->norder)++] = t->id;
    return t->next;
}

static int afters;
static void after(void *ctx)
{
    (void)ctx;
    afters++;
}

static void test_plain_runs_when_due(void **state)
{
    (void)state;
    ds_loop_t *l = ds__loop_create();
    assert_non_null(l);
    tick_t a = {.next = 150};
    /* First due at 100: not at 50. */
    assert_non_null(ds__loop_timer_add(l, 0, 100, tick, &a));
    assert_int_equal(ds__loop_timers_run(l, 50), 100);
    assert_int_equal(a.runs, 0);
    assert_int_equal(ds__loop_timers_run(l, 100), 150);
    assert_int_equal(a.runs, 1);
    assert_int_equal(a.last_now, 100);
    assert_int_equal(ds__loop_timers_run(l, 120), 150);
    assert_int_equal(a.runs, 1);
    /* Nothing due any more: never runs again. */
    a.next = 0;
    assert_int_equal(ds__loop_timers_run(l, 200), 0);
    assert_int_equal(a.runs, 2);
    assert_int_equal(ds__loop_timers_run(l, 100000), 0);
    assert_int_equal(a.runs, 2);
    ds__loop_destroy(l); /* frees the timer */
}

static void test_each_turn_and_order(void **state)
{
    (void)state;
    ds_loop_t *l = ds__loop_create();
    assert_non_null(l);
    afters = 0;
    ds__loop_set_after(l, after, NULL);
    int order[64], n = 0;
    tick_t a = {.next = 500, .order = order, .norder = &n, .id = 1};
    tick_t b = {.next = 0, .order = order, .norder = &n, .id = 2};
    tick_t c = {.next = 300, .order = order, .norder = &n, .id = 3};
    ds_timer_t *ta = ds__loop_timer_add(l, DS_TIMER_EACH_TURN, 0, tick, &a);
    ds_timer_t *tb = ds__loop_timer_add(l, DS_TIMER_EACH_TURN, 0, tick, &b);
    ds_timer_t *tc = ds__loop_timer_add(l, 0, 0, tick, &c); /* 0: due at the first run */
    assert_non_null(ta);
    assert_non_null(tb);
    assert_non_null(tc);
    /* All three at first, in order; the nearest due time is c's. */
    assert_int_equal(ds__loop_timers_run(l, 10), 300);
    assert_int_equal(n, 3);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 3);
    /* Each-turn timers run again though not due (b said nothing due). */
    assert_int_equal(ds__loop_timers_run(l, 20), 300);
    assert_int_equal(a.runs, 2);
    assert_int_equal(b.runs, 2);
    assert_int_equal(c.runs, 1);
    assert_int_equal(afters, 2);
    /* An each-turn timer's due time bounds the wait like any other. */
    a.next = 250;
    assert_int_equal(ds__loop_timers_run(l, 30), 250);
    /* Deleted, a timer runs no more and bounds nothing. */
    ds__loop_timer_del(l, ta);
    assert_int_equal(ds__loop_timers_run(l, 40), 300);
    assert_int_equal(a.runs, 3);
    ds__loop_timer_del(l, tc);
    assert_int_equal(ds__loop_timers_run(l, 50), 0);
    assert_int_equal(c.runs, 1);
    assert_int_equal(b.runs, 5);
    /* Added after a delete of the tail: still runs, still last. */
    n = 0;
    tick_t d = {.next = 70, .order = order, .norder = &n, .id = 4};
    assert_non_null(ds__loop_timer_add(l, DS_TIMER_EACH_TURN, 0, tick, &d));
    assert_int_equal(ds__loop_timers_run(l, 60), 70);
    assert_int_equal(n, 2);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 4);
    ds__loop_timer_del(l, NULL); /* nothing */
    ds__loop_destroy(l);
}

static void test_timeout(void **state)
{
    (void)state;
    assert_int_equal(ds__loop_timeout(0, 100), -1);
    assert_int_equal(ds__loop_timeout(100, 100), 0);
    assert_int_equal(ds__loop_timeout(90, 100), 0);
    assert_int_equal(ds__loop_timeout(130, 100), 30);
    assert_int_equal(ds__loop_timeout(UINT64_MAX, 1), INT32_MAX);
    /* A wait as long as the timers allow, with nothing registered, ends
     * with no event once the time has passed. */
    ds_loop_t *l = ds__loop_create();
    assert_non_null(l);
    tick_t a = {.next = 0};
    uint64_t now = ds__now_ms();
    a.next = now + 20;
    assert_non_null(ds__loop_timer_add(l, DS_TIMER_EACH_TURN, 0, tick, &a));
    uint64_t due = ds__loop_timers_run(l, now);
    assert_int_equal(due, now + 20);
    int to = ds__loop_timeout(due, ds__now_ms());
    assert_true(to >= 0 && to <= 20);
    assert_int_equal(ds__loop_run_once(l, to), 0);
    assert_true(ds__now_ms() >= now + (uint64_t)to);
    ds__loop_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_runs_when_due),
        cmocka_unit_test(test_each_turn_and_order),
        cmocka_unit_test(test_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
