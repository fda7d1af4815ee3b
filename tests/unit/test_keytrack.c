/* The request -> keys table behind the datasystem connectors' cleanup
 * (src/connector/keytrack.c): keys are kept once per request, taking a
 * request returns its keys plus its deterministic key on every known edge,
 * the oldest request is forgotten when the table is full, a consumed key can
 * be dropped, and take_all empties the table (what SharedMemoryConnector's
 * close reclaims). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "connector/keytrack.h"

static bool has(char **keys, size_t n, const char *k)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], k) == 0) return true;
    return false;
}

static void test_take_with_edges(void **state)
{
    (void)state;
    omni__keytrack_t *t = omni__keytrack_new(10);
    assert_non_null(t);
    assert_int_equal(omni__keytrack_add(t, "r1", "r1:0_1", "0", "1"), DS_K_OK);
    assert_int_equal(omni__keytrack_add(t, "r1", "r1:0_1", "0", "1"), DS_K_OK); /* once */
    assert_int_equal(omni__keytrack_add(t, "r1", "r1-hidden:0_1", "0", "1"), DS_K_OK);
    assert_int_equal(omni__keytrack_add(t, "r2", "r2:1_2", "1", "2"), DS_K_OK);
    assert_int_equal(omni__keytrack_count(t), 3);

    char **keys;
    size_t n;
    assert_int_equal(omni__keytrack_take(t, "r1", ':', &keys, &n), DS_K_OK);
    /* r1's two keys, plus r1 on the other known edge (r1:0_1 only once). */
    assert_int_equal(n, 3);
    assert_true(has(keys, n, "r1:0_1"));
    assert_true(has(keys, n, "r1-hidden:0_1"));
    assert_true(has(keys, n, "r1:1_2"));
    omni__keys_free(keys, n);
    assert_int_equal(omni__keytrack_count(t), 1);

    /* An unknown request still gets its edge keys. */
    assert_int_equal(omni__keytrack_take(t, "r9", '@', &keys, &n), DS_K_OK);
    assert_int_equal(n, 2);
    assert_true(has(keys, n, "r9@0_1"));
    assert_true(has(keys, n, "r9@1_2"));
    omni__keys_free(keys, n);
    omni__keytrack_free(t);
}

static void test_nothing_known(void **state)
{
    (void)state;
    omni__keytrack_t *t = omni__keytrack_new(0);
    char **keys = (char **)1;
    size_t n = 7;
    assert_int_equal(omni__keytrack_take(t, "r", ':', &keys, &n), DS_K_OK);
    assert_null(keys);
    assert_int_equal(n, 0);
    assert_int_equal(omni__keytrack_take_all(t, &keys, &n), DS_K_OK);
    assert_int_equal(n, 0);
    omni__keytrack_free(t);
}

static void test_oldest_forgotten(void **state)
{
    (void)state;
    omni__keytrack_t *t = omni__keytrack_new(100);
    char rid[32], key[48];
    for (int i = 0; i < 250; i++) { /* also grows the hash table past 64 buckets */
        snprintf(rid, sizeof(rid), "req-%d", i);
        snprintf(key, sizeof(key), "req-%d@0_1", i);
        assert_int_equal(omni__keytrack_add(t, rid, key, "0", "1"), DS_K_OK);
    }
    assert_int_equal(omni__keytrack_count(t), 100);
    char **keys;
    size_t n;
    /* req-0 was forgotten: only its edge key comes back. */
    assert_int_equal(omni__keytrack_take(t, "req-0", '@', &keys, &n), DS_K_OK);
    assert_int_equal(n, 1);
    omni__keys_free(keys, n);
    assert_int_equal(omni__keytrack_take_all(t, &keys, &n), DS_K_OK);
    assert_int_equal(n, 100);
    assert_true(has(keys, n, "req-150@0_1"));
    assert_true(has(keys, n, "req-249@0_1"));
    assert_false(has(keys, n, "req-149@0_1"));
    omni__keys_free(keys, n);
    assert_int_equal(omni__keytrack_count(t), 0);
    omni__keytrack_free(t);
}

static void test_drop_and_edge_limit(void **state)
{
    (void)state;
    omni__keytrack_t *t = omni__keytrack_new(10);
    assert_int_equal(omni__keytrack_add(t, "r", "r@0_1", "0", "1"), DS_K_OK);
    assert_int_equal(omni__keytrack_add(t, "r", "r@5_6", "5", "6"), DS_K_OK);
    omni__keytrack_drop(t, "r", "r@0_1");
    omni__keytrack_drop(t, "r", "not-there");
    omni__keytrack_drop(t, "nobody", "r@5_6");
    assert_int_equal(omni__keytrack_count(t), 1);
    char name[16];
    for (int i = 0; i < OMNI__MAX_EDGES + 10; i++) {
        snprintf(name, sizeof(name), "%d", 100 + i);
        omni__keytrack_add_edge(t, name, "x");
    }
    char **keys;
    size_t n;
    assert_int_equal(omni__keytrack_take(t, "q", ':', &keys, &n), DS_K_OK);
    assert_int_equal(n, OMNI__MAX_EDGES); /* 2 edges from the adds, then up to the limit */
    omni__keys_free(keys, n);
    omni__keytrack_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_with_edges),
        cmocka_unit_test(test_nothing_known),
        cmocka_unit_test(test_oldest_forgotten),
        cmocka_unit_test(test_drop_and_edge_limit),
    };
    return cmocka_run_group_tests_name("test_keytrack", tests, NULL, NULL);
}
