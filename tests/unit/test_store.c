/* The object store over a real memfd arena: publish and lookup, versions,
 * readers keeping superseded bytes, NX, delete, clock eviction (and what it
 * must never evict), TTL expiry, a million keys with the measured per-key
 * memory overhead, and the arena's pre-faulting. */
#include "worker/store/store.h"

#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/shm_index.h"

/* The sanitizers replace malloc, so heap figures measure them, not the store;
 * TSan also faults in shadow pages for every arena page written. GCC names
 * them with __SANITIZE_*__, clang through __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

typedef struct {
    ds_arena_t arena;
    ds_store_t *store;
} fixture_t;

static fixture_t *fixture(uint64_t arena_bytes)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char err[256];
    assert_int_equal(ds__arena_create(&f->arena, arena_bytes, err, sizeof(err)), 0);
    f->store = ds__store_create(&f->arena);
    assert_non_null(f->store);
    return f;
}

static void fixture_free(fixture_t *f)
{
    ds__store_destroy(f->store);
    ds__arena_destroy(&f->arena);
    free(f);
}

/* Reserves, fills with `fill` and publishes; returns the caller's reference
 * already dropped, so only the table holds the object. */
static ds_status_t put(ds_store_t *s, const char *key, uint64_t size, ds_write_mode_t mode,
                       uint32_t ttl, uint8_t fill, uint64_t now)
{
    ds_obj_t *o;
    char err[256];
    ds_status_t st = ds__store_reserve(s, key, strlen(key), size, mode, ttl, &o, err, sizeof(err));
    if (st != DS_K_OK) return st;
    memset(ds__store_data(s, o), fill, size);
    st = ds__store_publish(s, o, DS_EXISTENCE_NONE, now);
    ds__store_unref(s, o);
    return st;
}

static bool has(ds_store_t *s, const char *key, uint64_t now)
{
    return ds__store_lookup(s, key, strlen(key), now) != NULL;
}

static void test_publish_lookup(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    ds_obj_t *o;
    char err[256];
    assert_int_equal(
        ds__store_reserve(s, "k1", 2, 100, DS_WRITE_NONE_L2_CACHE, 0, &o, err, sizeof(err)),
        DS_K_OK);
    assert_int_equal(o->state, DS_OBJ_CREATING);
    assert_int_equal(o->refcnt, 1);
    assert_string_equal(o->key, "k1");
    assert_int_equal(ds__store_offset(s, o) % DS_ALLOC_ALIGN, 0);
    memcpy(ds__store_data(s, o), "hello", 5);
    assert_false(has(s, "k1", 0)); /* invisible until published */
    assert_int_equal(ds__store_publish(s, o, DS_EXISTENCE_NONE, 0), DS_K_OK);
    assert_int_equal(o->refcnt, 2);
    assert_int_equal(o->version, 1);
    assert_int_equal(ds__store_publish(s, o, DS_EXISTENCE_NONE, 0), DS_K_INVALID);
    ds__store_unref(s, o);
    ds_obj_t *got = ds__store_lookup(s, "k1", 2, 0);
    assert_ptr_equal(got, o);
    assert_int_equal(got->size, 100);
    assert_memory_equal(ds__store_data(s, got), "hello", 5);
    assert_int_equal(put(s, "k2", 10, DS_WRITE_NONE_L2_CACHE, 0, 1, 0), DS_K_OK);
    assert_int_equal(ds__store_lookup(s, "k2", 2, 0)->version, 2);
    assert_int_equal(put(s, "k1", 10, DS_WRITE_NONE_L2_CACHE, 0, 1, 0), DS_K_OK);
    assert_int_equal(ds__store_lookup(s, "k1", 2, 0)->version, 3);
    assert_int_equal(
        ds__store_reserve(s, "k3", 2, 0, DS_WRITE_NONE_L2_CACHE, 0, &o, err, sizeof(err)),
        DS_K_INVALID);
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    assert_int_equal(st.objects, 2);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.arena.used_blocks, 2);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_overwrite_keeps_reader_bytes(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    assert_int_equal(put(s, "k", 4096, DS_WRITE_NONE_L2_CACHE, 0, 'A', 0), DS_K_OK);
    ds_obj_t *old = ds__store_lookup(s, "k", 1, 0);
    ds__store_ref(old); /* a reader pins version 1 */
    assert_int_equal(put(s, "k", 4096, DS_WRITE_NONE_L2_CACHE, 0, 'B', 0), DS_K_OK);
    ds_obj_t *cur = ds__store_lookup(s, "k", 1, 0);
    assert_ptr_not_equal(cur, old);
    assert_true(cur->version > old->version);
    assert_int_equal(old->in_table, 0);
    assert_int_equal(old->refcnt, 1);
    const uint8_t *a = ds__store_data(s, old), *b = ds__store_data(s, cur);
    for (int i = 0; i < 4096; i++) {
        assert_int_equal(a[i], 'A');
        assert_int_equal(b[i], 'B');
    }
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    assert_int_equal(st.objects, 1);
    assert_int_equal(st.pinned, 1);
    assert_int_equal(st.arena.used, 2 * 4096);
    ds__store_unref(s, old); /* the last reference frees version 1 */
    ds__store_stats(s, &st);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.arena.used, 4096);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_nx_and_delete(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    ds_obj_t *o;
    char err[256];
    assert_int_equal(put(s, "k", 100, DS_WRITE_NONE_L2_CACHE, 0, 'A', 0), DS_K_OK);
    assert_int_equal(
        ds__store_reserve(s, "k", 1, 200, DS_WRITE_NONE_L2_CACHE, 0, &o, err, sizeof(err)),
        DS_K_OK);
    assert_int_equal(ds__store_publish(s, o, DS_EXISTENCE_NX, 0), DS_K_OC_KEY_ALREADY_EXIST);
    ds__store_unref(s, o); /* the failed version is freed with the caller's reference */
    ds_obj_t *cur = ds__store_lookup(s, "k", 1, 0);
    assert_int_equal(cur->size, 100);
    assert_int_equal(ds__store_data(s, cur)[0], 'A');
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    assert_int_equal(st.arena.used_blocks, 1);
    /* NX on a missing key publishes. */
    assert_int_equal(
        ds__store_reserve(s, "n", 1, 1, DS_WRITE_NONE_L2_CACHE, 0, &o, err, sizeof(err)), DS_K_OK);
    assert_int_equal(ds__store_publish(s, o, DS_EXISTENCE_NX, 0), DS_K_OK);
    ds__store_unref(s, o);
    assert_true(ds__store_delete(s, "k", 1));
    assert_false(has(s, "k", 0));
    assert_false(ds__store_delete(s, "k", 1));
    assert_true(ds__store_delete(s, "n", 1));
    ds__store_stats(s, &st);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.arena.used, 0);
    assert_int_equal(st.arena.free_blocks, 1);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

/* An unpublished (CREATING) object that is never published is freed by its
 * creator's unref, and destroy frees pinned superseded versions too. */
static void test_abandoned_and_destroy(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    ds_obj_t *o;
    char err[256];
    assert_int_equal(
        ds__store_reserve(s, "c", 1, 1000, DS_WRITE_NONE_L2_CACHE_EVICT, 0, &o, err, sizeof(err)),
        DS_K_OK);
    ds__store_unref(s, o);
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    assert_int_equal(st.arena.used, 0);
    assert_int_equal(put(s, "k", 100, DS_WRITE_NONE_L2_CACHE, 0, 'A', 0), DS_K_OK);
    ds__store_ref(ds__store_lookup(s, "k", 1, 0));
    assert_int_equal(put(s, "k", 100, DS_WRITE_NONE_L2_CACHE, 0, 'B', 0), DS_K_OK);
    assert_int_equal(
        ds__store_reserve(s, "c", 1, 1000, DS_WRITE_NONE_L2_CACHE, 0, &o, err, sizeof(err)),
        DS_K_OK);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f); /* the sanitizer build checks that nothing leaks */
}

static void test_eviction_cycles(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    enum { N = 10000 };
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "e%d", i);
        assert_int_equal(put(s, key, 1000, DS_WRITE_NONE_L2_CACHE_EVICT, 0, (uint8_t)i, 0),
                         DS_K_OK);
    }
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    print_message("10 x the arena: %llu objects left, %llu evictions\n",
                  (unsigned long long)st.objects, (unsigned long long)st.evictions);
    assert_int_equal(st.objects + st.evictions, N);
    assert_true(st.objects >= 1000 && st.objects <= 1024);
    /* Without lookups the clock is FIFO: the newest survive, the oldest go. */
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "e%d", i);
        ds_obj_t *o = ds__store_lookup(s, key, strlen(key), 0);
        if (i < N - 1024) assert_null(o);
        if (i >= N - 1000) {
            assert_non_null(o);
            assert_int_equal(ds__store_data(s, o)[999], (uint8_t)i);
        }
    }
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_clock_second_chance(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    char key[32];
    /* "hot", written first and read every 100 writes, outlives the 5000
     * writes through a ring of about 1000 objects (sampled LRU: store.c) */
    assert_int_equal(put(s, "hot", 1000, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 'h', 0), DS_K_OK);
    for (int i = 0; i < 5000; i++) {
        if (i % 100 == 0) assert_true(has(s, "hot", 0));
        snprintf(key, sizeof(key), "c%d", i);
        assert_int_equal(put(s, key, 1000, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0, 0), DS_K_OK);
    }
    assert_true(has(s, "hot", 0));
    assert_false(has(s, "c0", 0));
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

/* Every older object was read since it was written: eviction still takes
 * the oldest, never the object just written (background eviction runs
 * right after a publish, before its writer can read it back). */
static void test_evict_not_newest(void **state)
{
    (void)state;
    fixture_t *f = fixture(64 * 1024);
    ds_store_t *s = f->store;
    char key[32];
    for (int i = 0; i < 15; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        assert_int_equal(put(s, key, 4000, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0, 0), DS_K_OK);
        if (i < 14) assert_true(has(s, key, 0)); /* the last one is not read */
    }
    assert_int_equal(ds__store_evict_to(s, 0, 1), 1);
    assert_false(has(s, "r0", 0));
    assert_true(has(s, "r14", 0));
    for (int i = 1; i < 15; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        assert_true(has(s, key, 0));
    }
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_never_evict_pinned(void **state)
{
    (void)state;
    fixture_t *f = fixture(64 * 1024);
    ds_store_t *s = f->store;
    char key[32], err[256];
    ds_obj_t *pins[16], *o;
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(put(s, key, 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0, 0), DS_K_OK);
        pins[i] = ds__store_lookup(s, key, strlen(key), 0);
        ds__store_ref(pins[i]);
    }
    assert_int_equal(
        ds__store_reserve(s, "x", 1, 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, &o, err, sizeof(err)),
        DS_K_OUT_OF_MEMORY);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "asked 4096 bytes"));
    assert_non_null(strstr(err, "0 free"));
    assert_non_null(strstr(err, "65536 held by pinned"));
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.pinned, 16);
    ds__store_unref(s, pins[5]);
    assert_int_equal(
        ds__store_reserve(s, "x", 1, 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, &o, err, sizeof(err)),
        DS_K_OK);
    assert_false(has(s, "p5", 0));
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        if (i != 5) assert_true(has(s, key, 0));
        if (i != 5) ds__store_unref(s, pins[i]);
    }
    ds__store_unref(s, o);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_never_evict_none_l2(void **state)
{
    (void)state;
    fixture_t *f = fixture(256 * 1024);
    ds_store_t *s = f->store;
    char key[32], err[256];
    ds_obj_t *o;
    int kept = 0;
    /* Half the arena in cache-only objects, then volatile ones cycling. */
    for (; kept < 32; kept++) {
        snprintf(key, sizeof(key), "keep%d", kept);
        assert_int_equal(put(s, key, 4096, DS_WRITE_NONE_L2_CACHE, 0, 'k', 0), DS_K_OK);
    }
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof(key), "vol%d", i);
        assert_int_equal(put(s, key, 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 'v', 0), DS_K_OK);
    }
    for (int i = 0; i < kept; i++) {
        snprintf(key, sizeof(key), "keep%d", i);
        assert_true(has(s, key, 0));
    }
    /* More cache-only objects push out the volatile ones, then fail. */
    ds_status_t st;
    while ((st = put(s, (snprintf(key, sizeof(key), "keep%d", kept), key), 4096,
                     DS_WRITE_NONE_L2_CACHE, 0, 'k', 0)) == DS_K_OK)
        kept++;
    assert_int_equal(st, DS_K_OUT_OF_MEMORY);
    assert_int_equal(kept, 64);
    assert_int_equal(
        ds__store_reserve(s, "y", 1, 100, DS_WRITE_NONE_L2_CACHE_EVICT, 0, &o, err, sizeof(err)),
        DS_K_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "asked 100 bytes"));
    assert_non_null(strstr(err, "262144 held by pinned or non-evictable"));
    for (int i = 0; i < kept; i++) {
        snprintf(key, sizeof(key), "keep%d", i);
        assert_true(has(s, key, 0));
    }
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_too_big(void **state)
{
    (void)state;
    fixture_t *f = fixture(256 * 1024);
    ds_store_t *s = f->store;
    char err[256];
    ds_obj_t *o;
    assert_int_equal(put(s, "v", 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0, 0), DS_K_OK);
    assert_int_equal(ds__store_reserve(s, "big", 3, 256 * 1024 + 1, DS_WRITE_NONE_L2_CACHE_EVICT, 0,
                                       &o, err, sizeof(err)),
                     DS_K_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "exceeds the whole shared-memory arena"));
    assert_int_equal(ds__store_reserve(s, "big", 3, UINT64_MAX, DS_WRITE_NONE_L2_CACHE_EVICT, 0, &o,
                                       err, sizeof(err)),
                     DS_K_OUT_OF_MEMORY);
    assert_true(has(s, "v", 0)); /* nothing evicted for a hopeless request */
    /* Exactly the arena evicts everything and fits. */
    assert_int_equal(ds__store_reserve(s, "all", 3, 256 * 1024, DS_WRITE_NONE_L2_CACHE_EVICT, 0, &o,
                                       err, sizeof(err)),
                     DS_K_OK);
    assert_false(has(s, "v", 0));
    ds__store_unref(s, o);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_ttl(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    assert_int_equal(ds__store_expire_due(s, 0), 0);
    assert_int_equal(put(s, "t1", 10, DS_WRITE_NONE_L2_CACHE, 1, 0, 1000), DS_K_OK);
    assert_int_equal(put(s, "t3", 10, DS_WRITE_NONE_L2_CACHE, 3, 0, 1000), DS_K_OK);
    assert_int_equal(put(s, "t2", 10, DS_WRITE_NONE_L2_CACHE_EVICT, 2, 0, 1000), DS_K_OK);
    assert_int_equal(put(s, "forever", 10, DS_WRITE_NONE_L2_CACHE, 0, 0, 1000), DS_K_OK);
    assert_int_equal(ds__store_lookup(s, "t1", 2, 1000)->ttl_deadline_ms, 2000);
    assert_int_equal(ds__store_expire_due(s, 1999), 2000);
    assert_true(has(s, "t1", 1999));
    assert_int_equal(ds__store_expire_due(s, 2000), 3000);
    assert_false(has(s, "t1", 2000));
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    assert_int_equal(st.expirations, 1);
    /* Lazy expiry on lookup, before the timer runs. */
    assert_false(has(s, "t2", 3000));
    ds__store_stats(s, &st);
    assert_int_equal(st.expirations, 2);
    assert_int_equal(ds__store_expire_due(s, 3500), 4000);
    assert_int_equal(ds__store_expire_due(s, 100000), 0);
    assert_true(has(s, "forever", 100000));
    ds__store_stats(s, &st);
    assert_int_equal(st.expirations, 3);
    assert_int_equal(st.objects, 1);
    /* Overwriting restarts the TTL from the new publish. */
    assert_int_equal(put(s, "r", 10, DS_WRITE_NONE_L2_CACHE, 1, 0, 0), DS_K_OK);
    assert_int_equal(put(s, "r", 10, DS_WRITE_NONE_L2_CACHE, 0, 0, 500), DS_K_OK);
    assert_true(has(s, "r", 5000));
    /* A reader's pin survives expiry of its version. */
    assert_int_equal(put(s, "p", 10, DS_WRITE_NONE_L2_CACHE, 1, 'p', 0), DS_K_OK);
    ds_obj_t *o = ds__store_lookup(s, "p", 1, 0);
    ds__store_ref(o);
    ds__store_expire_due(s, 1000);
    assert_false(has(s, "p", 1000));
    assert_int_equal(ds__store_data(s, o)[9], 'p');
    ds__store_unref(s, o);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_ttl_many(void **state)
{
    (void)state;
    fixture_t *f = fixture(4 << 20);
    ds_store_t *s = f->store;
    char key[32];
    uint64_t seed = 99;
    enum { N = 2000 };
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        snprintf(key, sizeof(key), "m%d", i);
        assert_int_equal(
            put(s, key, 8, DS_WRITE_NONE_L2_CACHE, 1 + (uint32_t)(seed >> 33) % 100, 0, 0),
            DS_K_OK);
    }
    /* Every fifth key gets its TTL cleared, every seventh one deleted. */
    for (int i = 0; i < N; i += 5) {
        snprintf(key, sizeof(key), "m%d", i);
        assert_int_equal(ds__store_expire(s, key, strlen(key), 0, 0), DS_K_OK);
    }
    for (int i = 1; i < N; i += 7) {
        snprintf(key, sizeof(key), "m%d", i);
        ds__store_delete(s, key, strlen(key));
    }
    uint64_t prev = 0;
    for (uint64_t now = 0; now <= 101000; now += 1000) {
        uint64_t next = ds__store_expire_due(s, now);
        assert_true(next == 0 || next > now);
        assert_true(next == 0 || next >= prev);
        prev = next;
    }
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    uint64_t expect = 0;
    for (int i = 0; i < N; i++)
        expect += i % 5 == 0 && i % 7 != 1;
    assert_int_equal(st.objects, expect);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_expire_changes(void **state)
{
    (void)state;
    fixture_t *f = fixture(1 << 20);
    ds_store_t *s = f->store;
    assert_int_equal(put(s, "k", 10, DS_WRITE_NONE_L2_CACHE, 0, 0, 0), DS_K_OK);
    assert_int_equal(ds__store_expire(s, "missing", 7, 5, 0), DS_K_NOT_FOUND);
    assert_int_equal(ds__store_expire(s, "k", 1, 10, 1000), DS_K_OK);
    assert_int_equal(ds__store_expire_due(s, 1000), 11000);
    assert_int_equal(ds__store_expire(s, "k", 1, 2, 2000), DS_K_OK); /* shorter */
    assert_int_equal(ds__store_expire_due(s, 2000), 4000);
    assert_int_equal(ds__store_expire(s, "k", 1, 60, 3000), DS_K_OK); /* longer */
    assert_int_equal(ds__store_expire_due(s, 5000), 63000);
    assert_true(has(s, "k", 62999));
    assert_int_equal(ds__store_expire(s, "k", 1, 0, 4000), DS_K_OK); /* cleared */
    assert_int_equal(ds__store_expire_due(s, UINT64_MAX), 0);
    assert_true(has(s, "k", UINT64_MAX));
    assert_int_equal(ds__store_expire(s, "k", 1, 1, 0), DS_K_OK);
    assert_int_equal(ds__store_expire(s, "k", 1, 5, 1000), DS_K_NOT_FOUND); /* already expired */
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void count_fn(void *ctx, ds_obj_t *o)
{
    (void)o;
    (*(uint64_t *)ctx)++;
}

static void test_million_keys(void **state)
{
    (void)state;
    enum { N = 1000000 };
    fixture_t *f = fixture(72ull << 20);
    ds_store_t *s = f->store;
    char key[32], err[256];
    struct mallinfo2 before = mallinfo2();
    uint64_t t0 = ds__now_ns(), key_bytes = 0;
    for (int i = 0; i < N; i++) {
        int kl = snprintf(key, sizeof(key), "obj-%07d", i);
        ds_obj_t *o;
        assert_int_equal(ds__store_reserve(s, key, (size_t)kl, 8, DS_WRITE_NONE_L2_CACHE, 0, &o,
                                           err, sizeof(err)),
                         DS_K_OK);
        memcpy(ds__store_data(s, o), &i, sizeof(i));
        assert_int_equal(ds__store_publish(s, o, DS_EXISTENCE_NONE, 0), DS_K_OK);
        ds__store_unref(s, o);
        key_bytes += (uint64_t)kl + 1;
    }
    uint64_t t1 = ds__now_ns();
    struct mallinfo2 after = mallinfo2();
    for (int i = 0; i < N; i++) {
        int kl = snprintf(key, sizeof(key), "obj-%07d", i);
        ds_obj_t *o = ds__store_lookup(s, key, (size_t)kl, 0);
        assert_non_null(o);
        int v;
        memcpy(&v, ds__store_data(s, o), sizeof(v));
        assert_int_equal(v, i);
    }
    uint64_t t2 = ds__now_ns();
    uint64_t seen = 0;
    ds__store_foreach(s, count_fn, &seen);
    assert_int_equal(seen, N);
    for (int i = 0; i < N; i += 2) {
        int kl = snprintf(key, sizeof(key), "obj-%07d", i);
        assert_true(ds__store_delete(s, key, (size_t)kl));
    }
    assert_false(has(s, "obj-0000000", 0));
    assert_true(has(s, "obj-0000001", 0));
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    assert_int_equal(st.objects, N / 2);
    double heap =
        (double)(after.uordblks + after.hblkhd) - (double)(before.uordblks + before.hblkhd);
    double per_key = (heap - (double)key_bytes) / N;
    print_message("1M keys: insert %.0f ms, lookup %.0f ms\n", (double)(t1 - t0) / 1e6,
                  (double)(t2 - t1) / 1e6);
#if defined(UNDER_ASAN) || defined(UNDER_TSAN)
    (void)per_key;
    print_message("per-key overhead: not measurable under a sanitizer\n");
#else
    print_message("per-key overhead: private heap %.1f MB for 1M keys, %.1f bytes/key beyond "
                  "the key bytes (sizeof(ds_obj_t) = %zu)\n",
                  heap / 1e6, per_key, sizeof(ds_obj_t));
    assert_true(per_key > 0 && per_key < 200);
#endif
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

static void test_arena(void **state)
{
    (void)state;
    ds_arena_t a;
    char err[256];
    assert_int_equal(ds__arena_create(&a, 1ull << 50, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not enough memory"));
    assert_int_equal(a.fd, -1);
    ds__arena_destroy(&a);
    const uint64_t size = 32ull << 20;
    assert_int_equal(ds__arena_create(&a, size, err, sizeof(err)), 0);
    assert_true(a.fd >= 0);
    assert_int_equal(a.size, size);
    /* Pre-faulted: writing every page takes no page faults. */
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    memset(a.base, 0x5a, size);
    getrusage(RUSAGE_SELF, &r1);
    print_message("page faults writing a pre-faulted 32 MiB arena: %ld (of %llu pages)\n",
                  r1.ru_minflt - r0.ru_minflt, (unsigned long long)(size / 4096));
#ifndef UNDER_TSAN
    assert_true(r1.ru_minflt - r0.ru_minflt < 64);
#endif
    ds__arena_destroy(&a);
    assert_int_equal(a.fd, -1);
}

/* The shared GET index follows the key's current version: an overwrite
 * takes over the old version's slot (one rewrite, the old range still
 * allocated until after it), a version with a TTL leaves the index, one
 * without comes back, delete removes it; the slot count need not be a
 * power of two. */
static void test_index_follows_versions(void **state)
{
    (void)state;
    fixture_t *f = calloc(1, sizeof(*f));
    char err[256];
    assert_int_equal(ds__arena_create(&f->arena, 64u << 20, err, sizeof(err)), 0);
    uint64_t slots = 3 * DS_SHM_INDEX_GRAIN;
    f->store = ds__store_create_indexed(&f->arena, slots, 4096);
    assert_non_null(f->store);
    uint64_t off, n;
    assert_true(ds__store_index(f->store, &off, &n));
    ds_shm_index_t rd;
    assert_true(
        ds__shm_index_attach(&rd, f->arena.base, f->arena.size, off, n, DS_SHM_INDEX_KEYMAX));
    ds_store_t *s = f->store;
    uint8_t buf[4096];
    uint64_t sz = 0;
#define IXGET(k)                                                                                   \
    ds__shm_index_get(&rd, f->arena.base, f->arena.size, k, strlen(k), buf, sizeof(buf), &sz)
    assert_int_equal(put(s, "k", 100, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x11, 1), DS_K_OK);
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_HIT);
    assert_int_equal(sz, 100);
    assert_int_equal(buf[99], 0x11);
    /* Overwrite while a reader pins the old version: both stay sound. */
    ds_obj_t *old = ds__store_lookup(s, "k", 1, 1);
    ds__store_ref(old);
    assert_int_equal(put(s, "k", 200, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x22, 2), DS_K_OK);
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_HIT);
    assert_int_equal(sz, 200);
    assert_int_equal(buf[0], 0x22);
    assert_int_equal(ds__store_data(s, old)[0], 0x11);
    ds__store_unref(s, old);
    assert_int_equal(ds__store_check(s), 0);
    /* Many overwrites leave one entry, always the newest. */
    for (int i = 0; i < 100; i++)
        assert_int_equal(
            put(s, "k", 64 + (uint64_t)i, DS_WRITE_NONE_L2_CACHE_EVICT, 0, (uint8_t)i, 3), DS_K_OK);
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_HIT);
    assert_int_equal(sz, 64 + 99);
    assert_int_equal(buf[0], 99);
    /* A TTL version is not indexed, and the old entry is gone with it. */
    assert_int_equal(put(s, "k", 300, DS_WRITE_NONE_L2_CACHE_EVICT, 60, 0x33, 4), DS_K_OK);
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_MISS);
    assert_int_equal(put(s, "k", 400, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x44, 5), DS_K_OK);
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_HIT);
    assert_int_equal(sz, 400);
    /* Too large for the index: out, the old entry too. */
    assert_int_equal(put(s, "k", 8192, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x55, 6), DS_K_OK);
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_MISS);
    assert_int_equal(put(s, "k", 10, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x66, 7), DS_K_OK);
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_HIT);
    assert_true(ds__store_delete(s, "k", 1));
    assert_int_equal(IXGET("k"), DS_SHM_INDEX_MISS);
#undef IXGET
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

/* Readers' shared pins: a range a pin table names outlives its version's
 * last reference (held) and is freed once no table names it, by the
 * timer's sweep, by an allocation or by the table's close. */
static void test_shm_pins_hold(void **state)
{
    (void)state;
    fixture_t *f = calloc(1, sizeof(*f));
    char err[256];
    assert_int_equal(ds__arena_create(&f->arena, 64u << 20, err, sizeof(err)), 0);
    f->store = ds__store_create_indexed(&f->arena, DS_SHM_INDEX_GRAIN, 1u << 20);
    ds_store_t *s = f->store;
    uint64_t off, n, t1, t2;
    assert_true(ds__store_index(s, &off, &n));
    ds_shm_index_t rd;
    assert_true(
        ds__shm_index_attach(&rd, f->arena.base, f->arena.size, off, n, DS_SHM_INDEX_KEYMAX));
    /* No tables before pins_reserve; then exactly as many as reserved. */
    assert_int_equal(ds__store_pins_open(s, &t1), DS_K_OUT_OF_MEMORY);
    ds_store_stats_t st;
    ds__store_stats(s, &st);
    uint64_t used0 = st.arena.used;
    assert_int_equal(ds__store_pins_reserve(s, 2), DS_K_OK);
    assert_int_equal(ds__store_pins_open(s, &t1), DS_K_OK);
    assert_int_equal(ds__store_pins_open(s, &t2), DS_K_OK);
    assert_int_equal(ds__store_pins_open(s, &n), DS_K_OUT_OF_MEMORY);
    ds__store_stats(s, &st);
    assert_int_equal(st.arena.used, used0 + 2 * sizeof(ds_shm_pins_t));
    assert_int_equal(st.pin_tables, 2);
    ds_shm_pins_t *p1 = (ds_shm_pins_t *)(void *)(f->arena.base + t1);
    ds_shm_pins_t *p2 = (ds_shm_pins_t *)(void *)(f->arena.base + t2);

    assert_int_equal(put(s, "k", 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x11, 1), DS_K_OK);
    uint64_t voff = 0, vsz = 0;
    assert_int_equal(ds__shm_index_pin(&rd, f->arena.size, "k", 1, p1, 5, &voff, &vsz),
                     DS_SHM_INDEX_HIT);
    assert_int_equal(vsz, 4096);
    assert_int_equal(atomic_load(&p1->held), 1);
    /* Overwritten and deleted: the first version is held, its bytes intact. */
    assert_int_equal(put(s, "k", 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x22, 2), DS_K_OK);
    assert_true(ds__store_delete(s, "k", 1));
    ds__store_stats(s, &st);
    assert_int_equal(st.shm_held, 1);
    assert_int_equal(st.pinned, 1);
    assert_int_equal(ds__store_check(s), 0);
    assert_int_equal(put(s, "j", 4096, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x33, 3), DS_K_OK);
    assert_int_equal(f->arena.base[voff], 0x11);
    assert_int_equal(f->arena.base[voff + 4095], 0x11);
    /* The timer: due while something is held, frees once the pin is gone. */
    assert_true(ds__store_held_due(s, 10) > 0);
    ds__shm_pins_clear(p1, 5);
    assert_int_equal(atomic_load(&p1->held), 0);
    assert_true(ds__store_held_due(s, 1000) == 0);
    ds__store_stats(s, &st);
    assert_int_equal(st.shm_held, 0);

    /* A key the index does not list: MISS, the slot left free. */
    assert_int_equal(ds__shm_index_pin(&rd, f->arena.size, "nokey", 5, p2, 0, &voff, &vsz),
                     DS_SHM_INDEX_MISS);
    assert_int_equal(atomic_load(&p2->held), 0);

    /* An allocation sweeps; a scribbled table holds only until closed. */
    assert_int_equal(ds__shm_index_pin(&rd, f->arena.size, "j", 1, p2, 0, &voff, &vsz),
                     DS_SHM_INDEX_HIT);
    atomic_store(&p2->held, UINT64_MAX);
    for (unsigned i = 1; i < DS_SHM_PINS_SLOTS; i++)
        atomic_store(&p2->slot[i], voff);
    assert_true(ds__store_delete(s, "j", 1));
    ds__shm_pins_clear(p2, 0);
    assert_int_equal(put(s, "x", 100, DS_WRITE_NONE_L2_CACHE_EVICT, 0, 0x44, 4), DS_K_OK);
    ds__store_stats(s, &st);
    assert_int_equal(st.shm_held, 1);
    ds__store_pins_close(s, t2);
    ds__store_stats(s, &st);
    assert_int_equal(st.shm_held, 0);
    assert_int_equal(st.pin_tables, 1);
    /* The closed table is the one handed out next. */
    assert_int_equal(ds__store_pins_open(s, &n), DS_K_OK);
    assert_int_equal(n, t2);
    assert_int_equal(atomic_load(&p2->held), 0);
    assert_int_equal(ds__store_check(s), 0);
    fixture_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_lookup),
        cmocka_unit_test(test_index_follows_versions),
        cmocka_unit_test(test_shm_pins_hold),
        cmocka_unit_test(test_overwrite_keeps_reader_bytes),
        cmocka_unit_test(test_nx_and_delete),
        cmocka_unit_test(test_abandoned_and_destroy),
        cmocka_unit_test(test_eviction_cycles),
        cmocka_unit_test(test_clock_second_chance),
        cmocka_unit_test(test_evict_not_newest),
        cmocka_unit_test(test_never_evict_pinned),
        cmocka_unit_test(test_never_evict_none_l2),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_ttl_many),
        cmocka_unit_test(test_expire_changes),
        cmocka_unit_test(test_million_keys),
        cmocka_unit_test(test_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
