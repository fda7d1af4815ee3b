/* The intrusive hash table (common/dict.h): find, add and remove across an
 * incremental rehash, the ownership hook on clear, iteration that removes
 * as it walks, and a table whose hashes all collide. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/dict.h"
#include "common/hash.h"

typedef struct {
    ds_dict_node_t node;
    int value;
    char key[24];
} ent_t;

static int destroyed;

static bool ent_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const ent_t *e = DS_DICT_ENTRY(n, ent_t, node);
    return strlen(e->key) == len && memcmp(e->key, key, len) == 0;
}

static void ent_destroy(ds_dict_node_t *n, void *ctx)
{
    (*(int *)ctx)++;
    free(DS_DICT_ENTRY(n, ent_t, node));
}

static const ds_dict_type_t ent_type = {ent_eq, ent_destroy};

static uint32_t (*hash_fn)(const char *key, size_t len);

static uint32_t murmur(const char *key, size_t len)
{
    return ds__murmur3_32(key, len, 7);
}

static uint32_t collide(const char *key, size_t len)
{
    (void)key;
    (void)len;
    return 42;
}

static ent_t *add(ds_dict_t *d, int i)
{
    ent_t *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    e->value = i;
    snprintf(e->key, sizeof(e->key), "key-%d", i);
    size_t len = strlen(e->key);
    assert_null(ds__dict_find(d, e->key, len, hash_fn(e->key, len)));
    ds__dict_add(d, &e->node, hash_fn(e->key, len));
    return e;
}

static ent_t *find(ds_dict_t *d, int i)
{
    char key[24];
    int len = snprintf(key, sizeof(key), "key-%d", i);
    ds_dict_node_t *n = ds__dict_find(d, key, (size_t)len, hash_fn(key, (size_t)len));
    return n ? DS_DICT_ENTRY(n, ent_t, node) : NULL;
}

/* Adds n entries, removes every third (some of them mid-rehash), and checks
 * each lookup and the table's invariants along the way. */
static void grow_and_shrink(int n)
{
    ds_dict_t d;
    destroyed = 0;
    assert_int_equal(ds__dict_init(&d, &ent_type, &destroyed, 4), 0);
    for (int i = 0; i < n; i++) {
        add(&d, i);
        if (i % 97 == 0) assert_int_equal(ds__dict_verify(&d), 0);
    }
    assert_int_equal(ds__dict_count(&d), (uint64_t)n);
    for (int i = 0; i < n; i += 3) {
        char key[24];
        int len = snprintf(key, sizeof(key), "key-%d", i);
        ds_dict_node_t *p = ds__dict_pop(&d, key, (size_t)len, hash_fn(key, (size_t)len));
        assert_non_null(p);
        free(DS_DICT_ENTRY(p, ent_t, node));
    }
    for (int i = 0; i < n; i++) {
        ent_t *e = find(&d, i);
        if (i % 3 == 0) {
            assert_null(e);
        } else {
            assert_non_null(e);
            assert_int_equal(e->value, i);
        }
    }
    assert_int_equal(ds__dict_verify(&d), 0);
    uint64_t left = ds__dict_count(&d);
    assert_int_equal(left, (uint64_t)(n - (n + 2) / 3));
    ds__dict_clear(&d);
    assert_int_equal(destroyed, (int)left);
}

static void test_grow_and_shrink(void **state)
{
    (void)state;
    hash_fn = murmur;
    grow_and_shrink(20000);
}

static void test_all_collide(void **state)
{
    (void)state;
    hash_fn = collide;
    grow_and_shrink(300);
}

/* A walk sees every entry once, even while the table is mid-rehash, and may
 * remove the entry it was just given. */
static void test_iterate_and_remove(void **state)
{
    (void)state;
    hash_fn = murmur;
    ds_dict_t d;
    destroyed = 0;
    assert_int_equal(ds__dict_init(&d, &ent_type, &destroyed, 4), 0);
    const int n = 1000;
    for (int i = 0; i < n; i++)
        add(&d, i);
    char *seen = calloc((size_t)n, 1);
    assert_non_null(seen);
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &d);
    int walked = 0;
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        ent_t *e = DS_DICT_ENTRY(nd, ent_t, node);
        assert_int_equal(seen[e->value], 0);
        seen[e->value] = 1;
        walked++;
        if (e->value % 2 == 0) {
            assert_true(ds__dict_remove(&d, nd));
            free(e);
        }
    }
    assert_int_equal(walked, n);
    assert_int_equal(ds__dict_count(&d), (uint64_t)(n / 2));
    assert_int_equal(ds__dict_verify(&d), 0);
    free(seen);
    ds__dict_clear(&d);
    assert_int_equal(destroyed, n / 2);
}

/* Removing a node that is not in the table says so and changes nothing. */
static void test_remove_absent(void **state)
{
    (void)state;
    hash_fn = murmur;
    ds_dict_t d;
    destroyed = 0;
    assert_int_equal(ds__dict_init(&d, &ent_type, &destroyed, 16), 0);
    ent_t *a = add(&d, 1);
    ent_t stray = {.value = 2};
    strcpy(stray.key, "key-2");
    stray.node.hash = murmur(stray.key, 5);
    assert_false(ds__dict_remove(&d, &stray.node));
    assert_int_equal(ds__dict_count(&d), 1);
    assert_ptr_equal(find(&d, 1), a);
    ds__dict_clear(&d);
    assert_int_equal(destroyed, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_and_shrink),
        cmocka_unit_test(test_all_collide),
        cmocka_unit_test(test_iterate_and_remove),
        cmocka_unit_test(test_remove_absent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
