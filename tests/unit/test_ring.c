/* The consistent-hash ring (worker/cluster/ring.c) on its own: every worker
 * that builds a ring from the same members, in any order, names the same
 * owner for every key; an owner is always a member; an empty ring owns
 * nothing; adding a member moves only the keys the new member takes and
 * removing one moves only the keys it owned; each member owns a share of
 * many keys (DS_RING_TOKENS points each); and members and lookups are
 * copies, independent of the caller's strings. */
#include "worker/cluster/ring.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define NKEYS 10000

static const char *const members[] = {"127.0.0.1:31501", "127.0.0.2:31501", "127.0.0.3:31501",
                                      "127.0.0.4:31501"};
#define NMEMBERS (sizeof(members) / sizeof(members[0]))

static int key_name(char *buf, size_t cap, int i)
{
    return snprintf(buf, cap, "ring-key-%d", i);
}

static void test_empty_ring_owns_nothing(void **state)
{
    (void)state;
    ds_ring_t *r = ds__ring_build(NULL, 0);
    assert_non_null(r);
    assert_int_equal(ds__ring_size(r), 0);
    assert_null(ds__ring_owner(r, "k", 1));
    assert_null(ds__ring_member(r, 0));
    assert_false(ds__ring_has(r, "127.0.0.1:31501"));
    ds__ring_free(r);
    /* A NULL ring behaves as an empty one. */
    assert_null(ds__ring_owner(NULL, "k", 1));
    assert_int_equal(ds__ring_size(NULL), 0);
    ds__ring_free(NULL);
}

static void test_one_member_owns_everything(void **state)
{
    (void)state;
    ds_ring_t *r = ds__ring_build(members, 1);
    char key[64];
    for (int i = 0; i < 1000; i++) {
        int n = key_name(key, sizeof(key), i);
        assert_string_equal(ds__ring_owner(r, key, (size_t)n), members[0]);
    }
    /* The empty key has an owner too. */
    assert_string_equal(ds__ring_owner(r, "", 0), members[0]);
    ds__ring_free(r);
}

/* Members given in another order: the same ring, the same owners. */
static void test_same_owner_whatever_the_order(void **state)
{
    (void)state;
    const char *rev[NMEMBERS];
    for (size_t i = 0; i < NMEMBERS; i++)
        rev[i] = members[NMEMBERS - 1 - i];
    ds_ring_t *a = ds__ring_build(members, NMEMBERS), *b = ds__ring_build(rev, NMEMBERS);
    assert_int_equal(ds__ring_size(a), NMEMBERS);
    for (size_t i = 0; i < NMEMBERS; i++) {
        assert_string_equal(ds__ring_member(a, i), ds__ring_member(b, i));
        assert_true(ds__ring_has(a, members[i]));
    }
    assert_null(ds__ring_member(a, NMEMBERS));
    assert_false(ds__ring_has(a, "127.0.0.9:31501"));
    char key[64];
    for (int i = 0; i < NKEYS; i++) {
        int n = key_name(key, sizeof(key), i);
        const char *o = ds__ring_owner(a, key, (size_t)n);
        assert_non_null(o);
        assert_true(ds__ring_has(a, o));
        assert_string_equal(o, ds__ring_owner(b, key, (size_t)n));
    }
    ds__ring_free(a);
    ds__ring_free(b);
}

/* The key is hashed over its bytes, not as a C string. */
static void test_key_bytes_not_string(void **state)
{
    (void)state;
    ds_ring_t *r = ds__ring_build(members, NMEMBERS);
    /* Same bytes through different buffers: same owner. */
    char a[] = "abc\0def", b[sizeof(a)];
    memcpy(b, a, sizeof(a));
    assert_ptr_equal(ds__ring_owner(r, a, 7), ds__ring_owner(r, b, 7));
    /* A length within the buffer is what counts: over many keys, the
     * owners of "key" and "key" plus a hidden suffix differ somewhere. */
    int differ = 0;
    char key[64];
    for (int i = 0; i < 200; i++) {
        int n = key_name(key, sizeof(key), i);
        key[n] = '\0';
        memcpy(key + n + 1, "x", 2);
        differ += ds__ring_owner(r, key, (size_t)n) != ds__ring_owner(r, key, (size_t)n + 2);
    }
    assert_true(differ > 0);
    ds__ring_free(r);
}

/* A member joins: the keys that move all move to it. One leaves: only the
 * keys it owned move. This is what lets a cluster hand over a fraction of
 * its metadata when membership changes. */
static void test_membership_change_moves_only_its_keys(void **state)
{
    (void)state;
    ds_ring_t *three = ds__ring_build(members, 3), *four = ds__ring_build(members, 4);
    const char *joined = members[3];
    int moved = 0;
    char key[64];
    for (int i = 0; i < NKEYS; i++) {
        int n = key_name(key, sizeof(key), i);
        const char *before = ds__ring_owner(three, key, (size_t)n);
        const char *after = ds__ring_owner(four, key, (size_t)n);
        if (strcmp(before, after) != 0) {
            assert_string_equal(after, joined);
            moved++;
        } else {
            assert_string_not_equal(after, joined);
        }
    }
    /* The new member took some keys, and not all of them. */
    assert_true(moved > 0 && moved < NKEYS);
    /* Leaving (four -> three) is the same comparison read the other way:
     * the keys that move are exactly those the leaver owned. */
    ds__ring_free(three);
    ds__ring_free(four);
}

/* Every member owns some of many keys: with DS_RING_TOKENS points each, no
 * member is left out and none owns them all. (How even the shares are is
 * a property of the hash, not asserted beyond that.) */
static void test_every_member_owns_some(void **state)
{
    (void)state;
    ds_ring_t *r = ds__ring_build(members, NMEMBERS);
    int owned[NMEMBERS] = {0};
    char key[64];
    for (int i = 0; i < NKEYS; i++) {
        int n = key_name(key, sizeof(key), i);
        const char *o = ds__ring_owner(r, key, (size_t)n);
        for (size_t m = 0; m < NMEMBERS; m++)
            if (strcmp(o, ds__ring_member(r, m)) == 0) owned[m]++;
    }
    int total = 0;
    for (size_t m = 0; m < NMEMBERS; m++) {
        printf("%s owns %d of %d keys\n", ds__ring_member(r, m), owned[m], NKEYS);
        assert_true(owned[m] > 0 && owned[m] < NKEYS);
        total += owned[m];
    }
    assert_int_equal(total, NKEYS);
    ds__ring_free(r);
}

/* The ring copies the addresses: the caller's buffers may change. */
static void test_members_are_copied(void **state)
{
    (void)state;
    char a[32] = "127.0.0.7:40000", b[32] = "127.0.0.8:40000";
    const char *list[] = {a, b};
    ds_ring_t *r = ds__ring_build(list, 2);
    const char *o = ds__ring_owner(r, "some-key", 8);
    char owner[32];
    snprintf(owner, sizeof(owner), "%s", o);
    memset(a, 'x', sizeof(a) - 1);
    memset(b, 'y', sizeof(b) - 1);
    assert_string_equal(ds__ring_owner(r, "some-key", 8), owner);
    assert_true(ds__ring_has(r, "127.0.0.7:40000"));
    assert_true(ds__ring_has(r, "127.0.0.8:40000"));
    ds__ring_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_ring_owns_nothing),
        cmocka_unit_test(test_one_member_owns_everything),
        cmocka_unit_test(test_same_owner_whatever_the_order),
        cmocka_unit_test(test_key_bytes_not_string),
        cmocka_unit_test(test_membership_change_moves_only_its_keys),
        cmocka_unit_test(test_every_member_owns_some),
        cmocka_unit_test(test_members_are_copied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
