/* The TLSF arena allocator: sizes and alignment, exhaustion, coalescing, the
 * exactness of "largest_free", and a long seeded random workload with the
 * invariant checker run after every step plus fragmentation bounds. */
#include "worker/store/alloc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t rnd_range(uint64_t lo, uint64_t hi)
{
    return lo + rnd() % (hi - lo + 1);
}

static void test_basic(void **state)
{
    (void)state;
    ds_alloc_t *a = ds__alloc_create(1 << 20);
    assert_non_null(a);
    ds_block_t *b1 = ds__alloc_alloc(a, 100);
    ds_block_t *b2 = ds__alloc_alloc(a, 1);
    ds_block_t *b3 = ds__alloc_alloc(a, 0);
    ds_block_t *b4 = ds__alloc_alloc(a, 4096);
    assert_non_null(b1);
    assert_non_null(b2);
    assert_non_null(b3);
    assert_non_null(b4);
    assert_int_equal(ds__block_size(b1), 128);
    assert_int_equal(ds__block_size(b2), 64);
    assert_int_equal(ds__block_size(b3), 64);
    assert_int_equal(ds__block_size(b4), 4096);
    ds_block_t *all[] = {b1, b2, b3, b4};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ds__block_offset(all[i]) % DS_ALLOC_ALIGN, 0);
        for (int j = 0; j < i; j++) {
            uint64_t oi = ds__block_offset(all[i]), oj = ds__block_offset(all[j]);
            assert_true(oi + ds__block_size(all[i]) <= oj || oj + ds__block_size(all[j]) <= oi);
        }
    }
    ds_alloc_stats_t st;
    ds__alloc_stats(a, &st);
    assert_int_equal(st.total, 1 << 20);
    assert_int_equal(st.used, 128 + 64 + 64 + 4096);
    assert_int_equal(st.free, st.total - st.used);
    assert_int_equal(st.used_blocks, 4);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_free(a, b2);
    ds__alloc_free(a, b4);
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_free(a, b1);
    ds__alloc_free(a, b3);
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.largest_free, 1 << 20);
    ds__alloc_destroy(a);
}

static void test_limits(void **state)
{
    (void)state;
    assert_null(ds__alloc_create(0));
    assert_null(ds__alloc_create(63));
    ds_alloc_t *a = ds__alloc_create(100); /* usable: one 64-byte unit */
    assert_non_null(a);
    assert_null(ds__alloc_alloc(a, 65));
    ds_block_t *b = ds__alloc_alloc(a, 64);
    assert_non_null(b);
    assert_int_equal(ds__block_offset(b), 0);
    assert_null(ds__alloc_alloc(a, 1));
    ds__alloc_free(a, b);
    assert_null(ds__alloc_alloc(a, UINT64_MAX));
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_destroy(a);
}

static void test_exhaustion(void **state)
{
    (void)state;
    ds_alloc_t *a = ds__alloc_create(64 * 1024);
    ds_block_t *blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = ds__alloc_alloc(a, 1024);
        assert_non_null(blocks[i]);
    }
    assert_null(ds__alloc_alloc(a, 1));
    ds_alloc_stats_t st;
    ds__alloc_stats(a, &st);
    assert_int_equal(st.free, 0);
    assert_int_equal(st.largest_free, 0);
    uint64_t off = ds__block_offset(blocks[17]);
    ds__alloc_free(a, blocks[17]);
    assert_null(ds__alloc_alloc(a, 1025));
    blocks[17] = ds__alloc_alloc(a, 1000);
    assert_non_null(blocks[17]);
    assert_int_equal(ds__block_offset(blocks[17]), off);
    for (int i = 0; i < 64; i++)
        ds__alloc_free(a, blocks[i]);
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_destroy(a);
}

/* A region that is not a list boundary must still hand out its full size:
 * that needs the fallback scan of the request's own size class. */
static void test_exact_fit(void **state)
{
    (void)state;
    const uint64_t sizes[] = {64 * 37, 64 * 1000, 64 * 100003, (1ull << 30) - 64};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        ds_alloc_t *a = ds__alloc_create(sizes[i]);
        assert_null(ds__alloc_alloc(a, sizes[i] + 1));
        ds_block_t *b = ds__alloc_alloc(a, sizes[i]);
        assert_non_null(b);
        assert_int_equal(ds__block_size(b), sizes[i]);
        ds__alloc_free(a, b);
        ds__alloc_destroy(a);
    }
}

static void test_coalescing(void **state)
{
    (void)state;
    const int n = 256;
    ds_alloc_t *a = ds__alloc_create((uint64_t)n * 4096);
    ds_block_t **b = calloc(n, sizeof(*b));
    for (int i = 0; i < n; i++)
        b[i] = ds__alloc_alloc(a, 4096);
    assert_null(ds__alloc_alloc(a, 1));
    /* Free A and C, then B: the three must merge into one hole. */
    uint64_t off = ds__block_offset(b[10]);
    ds__alloc_free(a, b[10]);
    ds__alloc_free(a, b[12]);
    assert_null(ds__alloc_alloc(a, 8192));
    ds__alloc_free(a, b[11]);
    assert_int_equal(ds__alloc_check(a), 0);
    ds_alloc_stats_t st;
    ds__alloc_stats(a, &st);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.largest_free, 3 * 4096);
    ds_block_t *big = ds__alloc_alloc(a, 3 * 4096);
    assert_non_null(big);
    assert_int_equal(ds__block_offset(big), off);
    ds__alloc_free(a, big);
    b[10] = b[11] = b[12] = NULL;
    /* Odd ones, then even ones: everything must end in one block. */
    for (int i = 1; i < n; i += 2)
        ds__alloc_free(a, b[i]);
    assert_int_equal(ds__alloc_check(a), 0);
    for (int i = 0; i < n; i += 2)
        if (b[i] != NULL) ds__alloc_free(a, b[i]);
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_stats(a, &st);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.used_blocks, 0);
    assert_int_equal(st.largest_free, st.total);
    free(b);
    ds__alloc_destroy(a);
}

/* Mixed sizes, mostly small, some large, so that splits and merges happen
 * across many size classes. */
static uint64_t random_size(void)
{
    uint64_t r = rnd() % 100;
    if (r < 70) return rnd_range(1, 4096);
    if (r < 95) return rnd_range(4097, 256 * 1024);
    return rnd_range(256 * 1024, 4 * 1024 * 1024);
}

static void test_random_workload(void **state)
{
    (void)state;
    rng_state = 42;
    enum { SLOTS = 512, OPS = 20000 };
    ds_alloc_t *a = ds__alloc_create(24ull << 20);
    ds_block_t *slot[SLOTS] = {0};
    uint64_t live = 0, failures = 0;
    for (int op = 0; op < OPS; op++) {
        int i = (int)(rnd() % SLOTS);
        if (slot[i] != NULL) {
            live -= ds__block_size(slot[i]);
            ds__alloc_free(a, slot[i]);
            slot[i] = NULL;
        } else {
            uint64_t size = random_size();
            slot[i] = ds__alloc_alloc(a, size);
            if (slot[i] == NULL) {
                ds_alloc_stats_t st;
                ds__alloc_stats(a, &st);
                assert_true(st.largest_free < size);
                failures++;
            } else {
                assert_true(ds__block_size(slot[i]) >= size);
                assert_true(ds__block_size(slot[i]) - size < DS_ALLOC_ALIGN);
                assert_int_equal(ds__block_offset(slot[i]) % DS_ALLOC_ALIGN, 0);
                live += ds__block_size(slot[i]);
            }
        }
        assert_int_equal(ds__alloc_check(a), 0);
        ds_alloc_stats_t st;
        ds__alloc_stats(a, &st);
        assert_int_equal(st.used, live);
        /* largest_free is exact: it succeeds, one more unit does not. */
        if (op % 97 == 0 && st.largest_free > 0) {
            assert_null(ds__alloc_alloc(a, st.largest_free + 1));
            ds_block_t *b = ds__alloc_alloc(a, st.largest_free);
            assert_non_null(b);
            ds__alloc_free(a, b);
        }
    }
    print_message("random workload: %d ops, %llu allocation failures\n", OPS,
                  (unsigned long long)failures);
    for (int i = 0; i < SLOTS; i++)
        if (slot[i] != NULL) ds__alloc_free(a, slot[i]);
    ds_alloc_stats_t st;
    ds__alloc_stats(a, &st);
    assert_int_equal(ds__alloc_check(a), 0);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.largest_free, st.total);
    ds__alloc_destroy(a);
}

/* Fill, free a random half, refill with mid-sized blocks: coalescing must keep
 * every freed hole usable, so the refill recovers nearly all free space. */
static void test_fragmentation(void **state)
{
    (void)state;
    rng_state = 7;
    const uint64_t total = 32ull << 20;
    ds_alloc_t *a = ds__alloc_create(total);
    size_t cap = 4096, n = 0;
    ds_block_t **b = malloc(cap * sizeof(*b));
    for (;;) {
        ds_block_t *x = ds__alloc_alloc(a, rnd_range(1, 64 * 1024));
        if (x == NULL) break;
        if (n == cap) b = realloc(b, (cap *= 2) * sizeof(*b));
        b[n++] = x;
    }
    ds_alloc_stats_t st;
    ds__alloc_stats(a, &st);
    assert_true(st.free < 64 * 1024);
    uint64_t freed_max = 0, freed = 0;
    for (size_t i = 0; i < n; i++) {
        if (rnd() & 1) {
            uint64_t sz = ds__block_size(b[i]);
            freed_max = sz > freed_max ? sz : freed_max;
            freed++;
            ds__alloc_free(a, b[i]);
            b[i] = NULL;
        }
    }
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_stats(a, &st);
    assert_true(st.largest_free >= freed_max);
    assert_true(st.free_blocks <= freed + 1);
    assert_true(st.free >= total / 3);
    print_message("after freeing half: free %llu in %llu holes, largest %llu\n",
                  (unsigned long long)st.free, (unsigned long long)st.free_blocks,
                  (unsigned long long)st.largest_free);
    size_t refill = 0;
    ds_block_t **r = malloc((total / 4096) * sizeof(*r));
    while ((r[refill] = ds__alloc_alloc(a, 4096)) != NULL)
        refill++;
    ds__alloc_stats(a, &st);
    assert_int_equal(ds__alloc_check(a), 0);
    /* Only holes under 4 KiB stay unused. */
    assert_true(st.free < total / 20);
    print_message("after refilling with 4 KiB blocks: %zu blocks, %llu bytes left\n", refill,
                  (unsigned long long)st.free);
    for (size_t i = 0; i < refill; i++)
        ds__alloc_free(a, r[i]);
    for (size_t i = 0; i < n; i++)
        if (b[i] != NULL) ds__alloc_free(a, b[i]);
    ds__alloc_stats(a, &st);
    assert_int_equal(ds__alloc_check(a), 0);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.largest_free, total);
    free(r);
    free(b);
    ds__alloc_destroy(a);
}

/* Splitting an allocation hands its parts to different owners: each part is
 * freed on its own, a gap freed between two live parts stays free, and
 * everything coalesces back once all parts are gone. Bad splits change
 * nothing. */
static void test_split(void **state)
{
    (void)state;
    ds_alloc_t *a = ds__alloc_create(1 << 20);
    ds_block_t *b = ds__alloc_alloc(a, 64 * 100);
    ds_block_t *after = ds__alloc_alloc(a, 64);
    assert_non_null(b);
    uint64_t off = ds__block_offset(b);
    assert_null(ds__alloc_split(a, b, 0));
    assert_null(ds__alloc_split(a, b, 100));
    assert_null(ds__alloc_split(a, b, 64 * 100));
    assert_int_equal(ds__block_size(b), 64 * 100);
    ds_block_t *c = ds__alloc_split(a, b, 64 * 10);
    assert_non_null(c);
    assert_int_equal(ds__block_size(b), 64 * 10);
    assert_int_equal(ds__block_offset(c), off + 64 * 10);
    assert_int_equal(ds__block_size(c), 64 * 90);
    ds_block_t *d = ds__alloc_split(a, c, 64 * 30);
    assert_non_null(d);
    assert_int_equal(ds__alloc_check(a), 0);
    ds_alloc_stats_t st;
    ds__alloc_stats(a, &st);
    assert_int_equal(st.used, 64 * 101);
    assert_int_equal(st.used_blocks, 4);
    ds__alloc_free(a, c); /* the middle part: a gap between b and d */
    assert_int_equal(ds__alloc_check(a), 0);
    ds_block_t *e = ds__alloc_alloc(a, 64 * 30);
    assert_int_equal(ds__block_offset(e), off + 64 * 10);
    ds__alloc_free(a, e);
    ds__alloc_free(a, b);
    ds__alloc_free(a, d);
    ds__alloc_free(a, after);
    assert_int_equal(ds__alloc_check(a), 0);
    ds__alloc_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.free_blocks, 1);
    ds__alloc_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),         cmocka_unit_test(test_limits),
        cmocka_unit_test(test_exhaustion),    cmocka_unit_test(test_exact_fit),
        cmocka_unit_test(test_coalescing),    cmocka_unit_test(test_random_workload),
        cmocka_unit_test(test_fragmentation), cmocka_unit_test(test_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
