/* The read-latch table (src/worker/ops/latch_tab.h) on its own: counts per
 * key and per holder, releases of the latest latch, expiry in deadline
 * order, dropping a holder, retiring one and dropping its latches in
 * slices, both limits, and a large table checked against a plain list as
 * the model. */
#include "worker/ops/latch_tab.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const int A, B, C; /* holders: their addresses */

static bool held(const ds_latch_tab_t *t, const char *k)
{
    return ds__latch_tab_held(t, k, (uint32_t)strlen(k));
}

static ds_latch_add_t add(ds_latch_tab_t *t, const void *h, const char *k, uint64_t deadline)
{
    return ds__latch_tab_add(t, h, k, (uint32_t)strlen(k), deadline);
}

static bool release(ds_latch_tab_t *t, const void *h, const char *k)
{
    return ds__latch_tab_release(t, h, k, (uint32_t)strlen(k));
}

static void test_counts_and_release(void **state)
{
    (void)state;
    ds_latch_tab_t t;
    ds__latch_tab_init(&t, 100, 1000);
    assert_false(held(&t, "k"));
    assert_int_equal(ds__latch_tab_next(&t), 0);
    assert_int_equal(add(&t, &A, "k", 500), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &A, "k", 300), DS_LATCH_ADDED); /* twice: counts twice */
    assert_int_equal(add(&t, &B, "k", 900), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &B, "other", 100), DS_LATCH_ADDED);
    assert_int_equal(ds__latch_tab_count(&t), 4);
    assert_int_equal(ds__latch_tab_keys(&t), 2);
    assert_int_equal(ds__latch_tab_holder_count(&t, &A), 2);
    assert_int_equal(ds__latch_tab_holder_count(&t, &B), 2);
    assert_int_equal(ds__latch_tab_holder_count(&t, &C), 0);
    assert_true(held(&t, "k"));
    assert_false(held(&t, "kk"));
    assert_false(ds__latch_tab_held(&t, "k", 0));
    assert_int_equal(ds__latch_tab_next(&t), 100);
    /* a holder releases only its own; the latest first (deadline 300) */
    assert_false(release(&t, &C, "k"));
    assert_false(release(&t, &A, "other"));
    assert_true(release(&t, &A, "k"));
    assert_int_equal(ds__latch_tab_holder_count(&t, &A), 1);
    assert_true(release(&t, &B, "k"));
    assert_true(held(&t, "k")); /* A's first latch is left */
    assert_true(release(&t, &A, "k"));
    assert_false(held(&t, "k"));
    assert_false(release(&t, &A, "k"));
    assert_int_equal(ds__latch_tab_holder_count(&t, &A), 0);
    assert_int_equal(ds__latch_tab_count(&t), 1);
    assert_int_equal(ds__latch_tab_keys(&t), 1);
    ds__latch_tab_destroy(&t);
}

static void test_expire_in_deadline_order(void **state)
{
    (void)state;
    ds_latch_tab_t t;
    ds__latch_tab_init(&t, 100, 1000);
    assert_int_equal(add(&t, &A, "a", 30), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &B, "a", 10), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &A, "b", 20), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &C, "c", 20), DS_LATCH_ADDED);
    assert_int_equal(ds__latch_tab_expire(&t, 9), 0);
    assert_int_equal(ds__latch_tab_next(&t), 10);
    assert_int_equal(ds__latch_tab_expire(&t, 10), 1);
    assert_true(held(&t, "a")); /* A's latch on it lasts to 30 */
    assert_int_equal(ds__latch_tab_holder_count(&t, &B), 0);
    assert_int_equal(ds__latch_tab_next(&t), 20);
    assert_int_equal(ds__latch_tab_expire(&t, 25), 2);
    assert_false(held(&t, "b"));
    assert_false(held(&t, "c"));
    assert_int_equal(ds__latch_tab_next(&t), 30);
    assert_int_equal(ds__latch_tab_expire(&t, 1000), 1);
    assert_int_equal(ds__latch_tab_count(&t), 0);
    assert_int_equal(ds__latch_tab_keys(&t), 0);
    assert_int_equal(ds__latch_tab_next(&t), 0);
    ds__latch_tab_destroy(&t);
}

/* A table where A holds 20 latches on k0..k6 (key i % 7), the one of i
 * until 100 + i. */
static void init_a20(ds_latch_tab_t *t)
{
    ds__latch_tab_init(t, 100, 1000);
    char k[16];
    for (int i = 0; i < 20; i++) {
        snprintf(k, sizeof(k), "k%d", i % 7);
        assert_int_equal(add(t, &A, k, 100 + (uint64_t)i), DS_LATCH_ADDED);
    }
}

static void test_drop_holder(void **state)
{
    (void)state;
    ds_latch_tab_t t;
    init_a20(&t);
    assert_int_equal(add(&t, &B, "k3", 50), DS_LATCH_ADDED);
    assert_int_equal(ds__latch_tab_drop_holder(&t, &C), 0);
    assert_int_equal(ds__latch_tab_drop_holder(&t, &A), 20);
    assert_int_equal(ds__latch_tab_count(&t), 1);
    assert_int_equal(ds__latch_tab_keys(&t), 1);
    assert_true(held(&t, "k3"));
    assert_false(held(&t, "k0"));
    assert_int_equal(ds__latch_tab_next(&t), 50);
    /* A may latch again from nothing */
    assert_int_equal(add(&t, &A, "k0", 70), DS_LATCH_ADDED);
    assert_int_equal(ds__latch_tab_holder_count(&t, &A), 1);
    ds__latch_tab_destroy(&t);
}

/* Drops the latches on keys whose name starts with "k1" (and k0 until 105). */
static bool drop_some(void *ctx, const char *key, uint32_t len, uint64_t deadline)
{
    (*(int *)ctx)++;
    return (len >= 2 && memcmp(key, "k1", 2) == 0) ||
           (len == 2 && memcmp(key, "k0", 2) == 0 && deadline < 105);
}

static void test_drop_holder_if(void **state)
{
    (void)state;
    ds_latch_tab_t t;
    init_a20(&t);
    assert_int_equal(add(&t, &B, "k1", 50), DS_LATCH_ADDED);
    int asked = 0;
    assert_int_equal(ds__latch_tab_drop_holder_if(&t, &C, drop_some, &asked), 0);
    assert_int_equal(asked, 0);
    /* k1: i = 1, 8, 15; k0 before 105: i = 0 (k0 at 107 and 114 stay) */
    assert_int_equal(ds__latch_tab_drop_holder_if(&t, &A, drop_some, &asked), 4);
    assert_int_equal(asked, 20);
    assert_int_equal(ds__latch_tab_holder_count(&t, &A), 16);
    assert_int_equal(ds__latch_tab_count(&t), 17);
    assert_true(held(&t, "k1")); /* B's */
    assert_true(held(&t, "k0"));
    assert_int_equal(ds__latch_tab_drop_holder_if(&t, &B, drop_some, &asked), 1);
    assert_false(held(&t, "k1"));
    assert_int_equal(ds__latch_tab_next(&t), 102);
    assert_int_equal(ds__latch_tab_drop_holder(&t, &A), 16);
    assert_int_equal(ds__latch_tab_count(&t), 0);
    ds__latch_tab_destroy(&t);
}

/* A retired holder's latches still latch their keys and count, but its old
 * name owns none of them: a new holder of that name starts empty, cannot
 * release them and sees them as another's. They go a slice at a time, or
 * by expiry, and the name then finds nothing. */
static void test_retire_holder(void **state)
{
    (void)state;
    ds_latch_tab_t t;
    ds__latch_tab_init(&t, 1000, 10000);
    char k[32];
    for (int i = 0; i < 700; i++) {
        snprintf(k, sizeof(k), "r%d", i);
        assert_int_equal(add(&t, &A, k, 1000 + (uint64_t)i), DS_LATCH_ADDED);
    }
    assert_int_equal(add(&t, &A, "r0", 5000), DS_LATCH_ADDED); /* r0 twice */
    assert_int_equal(add(&t, &B, "r1", 5000), DS_LATCH_ADDED);
    assert_null(ds__latch_tab_retire_holder(&t, &C)); /* no latches: no name */
    const void *name = ds__latch_tab_retire_holder(&t, &A);
    assert_non_null(name);
    assert_ptr_not_equal(name, &A);
    assert_int_equal(ds__latch_tab_count(&t), 702);
    assert_int_equal(ds__latch_tab_holder_count(&t, &A), 0);
    assert_int_equal(ds__latch_tab_holder_count(&t, name), 701);
    assert_true(held(&t, "r5"));
    assert_false(release(&t, &A, "r5"));
    assert_true(ds__latch_tab_held_by_other(&t, &A, "r5", 2));
    /* A's name serves a new holder, whose latches are its own */
    assert_int_equal(add(&t, &A, "r5", 9000), DS_LATCH_ADDED);
    assert_int_equal(ds__latch_tab_holder_count(&t, &A), 1);
    assert_true(ds__latch_tab_held_by_other(&t, &A, "r5", 2));
    assert_true(release(&t, &A, "r5"));
    assert_true(held(&t, "r5")); /* the retired latch is left */
    /* expiry takes the retired latches due first (r0..r9) */
    assert_int_equal(ds__latch_tab_expire(&t, 1009), 10);
    assert_int_equal(ds__latch_tab_holder_count(&t, name), 691);
    /* slices of 256 */
    uint32_t gone = 0;
    assert_false(ds__latch_tab_drop_retired(&t, name, 256, &gone));
    assert_int_equal(gone, 256);
    assert_false(ds__latch_tab_drop_retired(&t, name, 256, &gone));
    assert_int_equal(gone, 256);
    assert_true(ds__latch_tab_drop_retired(&t, name, 256, &gone));
    assert_int_equal(gone, 179);
    assert_true(ds__latch_tab_drop_retired(&t, name, 256, &gone));
    assert_int_equal(gone, 0);
    /* only B's latch is left, and the heap is whole */
    assert_int_equal(ds__latch_tab_count(&t), 1);
    assert_int_equal(ds__latch_tab_keys(&t), 1);
    assert_true(held(&t, "r1"));
    assert_false(held(&t, "r0"));
    assert_int_equal(ds__latch_tab_next(&t), 5000);
    assert_int_equal(ds__latch_tab_expire(&t, 5000), 1);
    assert_int_equal(ds__latch_tab_count(&t), 0);
    ds__latch_tab_destroy(&t);
}

static void test_limits(void **state)
{
    (void)state;
    ds_latch_tab_t t;
    ds__latch_tab_init(&t, 3, 5);
    for (int i = 0; i < 3; i++)
        assert_int_equal(add(&t, &A, "k", 100), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &A, "other", 100), DS_LATCH_HOLDER_FULL);
    assert_int_equal(add(&t, &B, "k", 100), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &B, "k", 100), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &C, "k", 100), DS_LATCH_FULL);
    assert_int_equal(add(&t, &A, "k", 100), DS_LATCH_HOLDER_FULL);
    assert_int_equal(ds__latch_tab_count(&t), 5);
    /* a release, an expiry and a dropped holder each free a share */
    assert_true(release(&t, &B, "k"));
    assert_int_equal(add(&t, &C, "k", 10), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &C, "k", 100), DS_LATCH_FULL);
    assert_int_equal(ds__latch_tab_expire(&t, 10), 1);
    assert_int_equal(add(&t, &C, "k", 100), DS_LATCH_ADDED);
    assert_int_equal(ds__latch_tab_drop_holder(&t, &A), 3);
    assert_int_equal(add(&t, &C, "x", 100), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &C, "y", 100), DS_LATCH_ADDED);
    assert_int_equal(add(&t, &C, "z", 100), DS_LATCH_HOLDER_FULL);
    ds__latch_tab_destroy(&t);
}

/* A model: every latch as (holder, key, deadline) in order of taking. */
typedef struct {
    int holder;
    int key;
    uint64_t deadline;
    bool live;
} mlatch_t;

static bool model_held(const mlatch_t *m, int n, int key)
{
    for (int i = 0; i < n; i++)
        if (m[i].live && m[i].key == key) return true;
    return false;
}

/* Thousands of random operations over 8 holders and 50 keys, the table
 * against the model after each. */
static void test_against_model(void **state)
{
    (void)state;
    enum { OPS = 6000, HOLDERS = 8, KEYS = 50 };
    static char holders[HOLDERS];
    mlatch_t *m = calloc(OPS, sizeof(*m));
    assert_non_null(m);
    int n = 0;
    ds_latch_tab_t t;
    ds__latch_tab_init(&t, 200, 1000);
    uint64_t now = 0;
    srand(7);
    for (int op = 0; op < OPS; op++) {
        int h = rand() % HOLDERS, k = rand() % KEYS, what = rand() % 100;
        char key[16];
        snprintf(key, sizeof(key), "key-%d", k);
        if (what < 55) {
            uint64_t dl = now + 1 + (uint64_t)(rand() % 5000) * 1000;
            int live = 0, mine = 0;
            for (int i = 0; i < n; i++)
                if (m[i].live) {
                    live++;
                    mine += m[i].holder == h;
                }
            ds_latch_add_t want = mine >= 200    ? DS_LATCH_HOLDER_FULL
                                  : live >= 1000 ? DS_LATCH_FULL
                                                 : DS_LATCH_ADDED;
            assert_int_equal(add(&t, &holders[h], key, dl), want);
            if (want == DS_LATCH_ADDED) m[n++] = (mlatch_t){h, k, dl, true};
        } else if (what < 85) {
            int found = -1;
            for (int i = n - 1; i >= 0 && found < 0; i--)
                if (m[i].live && m[i].holder == h && m[i].key == k) found = i;
            assert_int_equal(release(&t, &holders[h], key), found >= 0);
            if (found >= 0) m[found].live = false;
        } else if (what < 97) {
            now += 200000;
            uint32_t want = 0;
            for (int i = 0; i < n; i++)
                if (m[i].live && m[i].deadline <= now) {
                    m[i].live = false;
                    want++;
                }
            assert_int_equal(ds__latch_tab_expire(&t, now), want);
        } else {
            uint32_t want = 0;
            for (int i = 0; i < n; i++)
                if (m[i].live && m[i].holder == h) {
                    m[i].live = false;
                    want++;
                }
            assert_int_equal(ds__latch_tab_drop_holder(&t, &holders[h]), want);
        }
        uint32_t live = 0;
        uint64_t next = 0;
        for (int i = 0; i < n; i++)
            if (m[i].live) {
                live++;
                if (next == 0 || m[i].deadline < next) next = m[i].deadline;
            }
        assert_int_equal(ds__latch_tab_count(&t), live);
        assert_int_equal(ds__latch_tab_next(&t), next);
        snprintf(key, sizeof(key), "key-%d", k);
        assert_int_equal(held(&t, key), model_held(m, n, k));
    }
    for (int k = 0; k < KEYS; k++) {
        char key[16];
        snprintf(key, sizeof(key), "key-%d", k);
        assert_int_equal(held(&t, key), model_held(m, n, k));
    }
    ds__latch_tab_destroy(&t);
    assert_int_equal(ds__latch_tab_count(&t), 0);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_and_release), cmocka_unit_test(test_expire_in_deadline_order),
        cmocka_unit_test(test_drop_holder),        cmocka_unit_test(test_drop_holder_if),
        cmocka_unit_test(test_retire_holder),      cmocka_unit_test(test_limits),
        cmocka_unit_test(test_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
