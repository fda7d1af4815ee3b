/* Unit tests of the shared GET index (common/shm_index.h) on a private
 * buffer standing in for the arena: insert, update, remove, tombstones that
 * keep later entries reachable, full probe runs that leave a key unindexed,
 * the seqlock reader's bounds checks, and a writer thread rewriting a slot
 * while a reader checks that every hit is one consistent version. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/shm_index.h"

#define SLOTS 64u
#define MAP (1u << 20)

typedef struct {
    uint8_t *map; /* index at offset 0, values after it */
    ds_shm_index_t w, r;
} fx_t;

static fx_t *fx_new(void)
{
    fx_t *f = calloc(1, sizeof(*f));
    f->map = aligned_alloc(64, MAP);
    memset(f->map, 0, MAP);
    ds__shm_index_init(&f->w, f->map, SLOTS);
    assert_true(ds__shm_index_attach(&f->r, f->map, MAP, 0, SLOTS, DS_SHM_INDEX_KEYMAX));
    return f;
}

static void fx_free(fx_t *f)
{
    free(f->map);
    free(f);
}

/* Stores a value at off and indexes key -> it. */
static bool put(fx_t *f, const char *key, uint64_t off, const char *val)
{
    memcpy(f->map + off, val, strlen(val));
    return ds__shm_index_put(&f->w, key, strlen(key), off, strlen(val), 1);
}

static ds_shm_index_res_t get(fx_t *f, const char *key, char *buf, size_t cap, uint64_t *sz)
{
    return ds__shm_index_get(&f->r, f->map, MAP, key, strlen(key), buf, cap, sz);
}

static void expect(fx_t *f, const char *key, const char *val)
{
    char buf[256];
    uint64_t sz = 0;
    assert_int_equal(get(f, key, buf, sizeof(buf), &sz), DS_SHM_INDEX_HIT);
    assert_int_equal(sz, strlen(val));
    assert_memory_equal(buf, val, sz);
}

static void expect_miss(fx_t *f, const char *key)
{
    char buf[256];
    uint64_t sz = 0;
    assert_int_equal(get(f, key, buf, sizeof(buf), &sz), DS_SHM_INDEX_MISS);
}

/* n distinct keys with the same home slot. */
static void colliding(char keys[][32], int n)
{
    uint32_t home = ds__shm_index_hash("c0", 2) % (SLOTS - 1);
    int found = 0;
    for (int i = 0; found < n; i++) {
        char k[32];
        snprintf(k, sizeof(k), "c%d", i);
        if (ds__shm_index_hash(k, strlen(k)) % (SLOTS - 1) == home) strcpy(keys[found++], k);
    }
}

static void test_insert_update_remove(void **state)
{
    (void)state;
    fx_t *f = fx_new();
    expect_miss(f, "a");
    assert_true(put(f, "a", 64 * 1024, "hello"));
    expect(f, "a", "hello");
    assert_true(put(f, "a", 65 * 1024, "world!"));
    expect(f, "a", "world!");
    char small[2];
    uint64_t sz = 0;
    assert_int_equal(get(f, "a", small, sizeof(small), &sz), DS_SHM_INDEX_SMALL);
    assert_int_equal(sz, 6);
    ds__shm_index_remove(&f->w, "a", 1);
    expect_miss(f, "a");
    ds__shm_index_remove(&f->w, "a", 1); /* absent: nothing happens */
    char longkey[DS_SHM_INDEX_KEYMAX + 2];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_false(put(f, longkey, 64 * 1024, "x"));
    expect_miss(f, longkey);
    /* A stopped worker's index serves nothing. */
    assert_true(put(f, "b", 64 * 1024, "bee"));
    ds__shm_index_set_live(&f->w, false);
    expect_miss(f, "b");
    ds__shm_index_set_live(&f->w, true);
    expect(f, "b", "bee");
    fx_free(f);
}

static void test_tombstones_and_full_runs(void **state)
{
    (void)state;
    fx_t *f = fx_new();
    char keys[DS_SHM_INDEX_PROBE + 1][32];
    colliding(keys, DS_SHM_INDEX_PROBE + 1);
    for (unsigned i = 0; i < DS_SHM_INDEX_PROBE; i++) {
        char v[32];
        snprintf(v, sizeof(v), "v%u", i);
        assert_true(put(f, keys[i], 64 * 1024 + i * 64, v));
    }
    /* The run is full: the next colliding key is not indexed. */
    assert_false(put(f, keys[DS_SHM_INDEX_PROBE], 80 * 1024, "late"));
    expect_miss(f, keys[DS_SHM_INDEX_PROBE]);
    /* Removing an early key leaves a tombstone the later ones are found past. */
    ds__shm_index_remove(&f->w, keys[1], strlen(keys[1]));
    expect_miss(f, keys[1]);
    expect(f, keys[5], "v5");
    expect(f, keys[DS_SHM_INDEX_PROBE - 1], "v15");
    /* Updating a key behind the tombstone keeps one entry, not two. */
    assert_true(put(f, keys[5], 90 * 1024, "new5"));
    expect(f, keys[5], "new5");
    ds__shm_index_remove(&f->w, keys[5], strlen(keys[5]));
    expect_miss(f, keys[5]);
    /* The tombstone's slot is reused. */
    assert_true(put(f, keys[DS_SHM_INDEX_PROBE], 80 * 1024, "late"));
    expect(f, keys[DS_SHM_INDEX_PROBE], "late");
    /* Removing everything leaves the region all empty again (tombstones at
     * the end of a run are cleared), so the home slot takes a new key. */
    for (unsigned i = 0; i <= DS_SHM_INDEX_PROBE; i++)
        ds__shm_index_remove(&f->w, keys[i], strlen(keys[i]));
    for (unsigned i = 0; i < SLOTS - 1; i++)
        assert_int_equal(atomic_load(&f->w.slot[i].hash), DS_SHM_INDEX_EMPTY);
    fx_free(f);
}

static void test_reader_validates(void **state)
{
    (void)state;
    fx_t *f = fx_new();
    ds_shm_index_t bad;
    assert_false(ds__shm_index_attach(&bad, f->map, MAP, 0, SLOTS, DS_SHM_INDEX_KEYMAX + 1));
    assert_false(ds__shm_index_attach(&bad, f->map, MAP, 0, SLOTS + 1, DS_SHM_INDEX_KEYMAX));
    assert_false(ds__shm_index_attach(&bad, f->map, MAP, 0, SLOTS * 2, DS_SHM_INDEX_KEYMAX));
    assert_false(ds__shm_index_attach(&bad, f->map, 4096, 0, SLOTS, DS_SHM_INDEX_KEYMAX));
    assert_false(ds__shm_index_attach(&bad, f->map, MAP, 64, SLOTS, DS_SHM_INDEX_KEYMAX));
    /* A slot pointing outside the mapping (a scribbling client) is a miss. */
    assert_true(ds__shm_index_put(&f->w, "far", 3, MAP - 4, 8, 1));
    expect_miss(f, "far");
    /* An odd seq (a writer mid-update) never yields a hit. */
    assert_true(put(f, "mid", 64 * 1024, "abc"));
    uint32_t h = ds__shm_index_hash("mid", 3);
    ds_shm_slot_t *sl = &f->w.slot[h % (SLOTS - 1)];
    atomic_fetch_add(&sl->seq, 1);
    expect_miss(f, "mid");
    atomic_fetch_add(&sl->seq, 1);
    expect(f, "mid", "abc");
    assert_int_equal(ds__shm_index_slots_for(64u << 20), 0);
    assert_int_equal(ds__shm_index_slots_for(128u << 20), (4u << 20) / DS_SHM_INDEX_SLOT);
    assert_int_equal(ds__shm_index_slots_for(1024u << 20), (32u << 20) / DS_SHM_INDEX_SLOT);
    assert_int_equal(ds__shm_index_slots_for(1536u << 20), (48u << 20) / DS_SHM_INDEX_SLOT);
    /* Not a power of two: a region of whole 2 MiB pages. */
    assert_int_equal(ds__shm_index_slots_for(1300u << 20), 20u * DS_SHM_INDEX_GRAIN);
    fx_free(f);
}

/* The writer alternates the key between two ranges and rewrites the old
 * one while it is not indexed, as the worker frees and reuses blocks; a
 * reader must only ever see a whole, self-consistent value. */
#define VLEN 1024
typedef struct {
    fx_t *f;
    atomic_bool stop;
    atomic_long reads; /* reader attempts finished */
} race_t;

static void *writer(void *arg)
{
    race_t *r = arg;
    for (uint32_t gen = 1; !atomic_load(&r->stop); gen++) {
        uint64_t off = (gen & 1) ? 64 * 1024 : 128 * 1024;
        ds__shm_index_remove(&r->f->w, "hot", 3);
        uint8_t *p = r->f->map + off;
        for (int i = 0; i < VLEN; i++)
            __atomic_store_n(&p[i], (uint8_t)(gen + (uint32_t)i), __ATOMIC_RELAXED);
        ds__shm_index_put(&r->f->w, "hot", 3, off, VLEN, gen);
        /* Leave the version up until the reader has made two whole
         * attempts, the second begun after the put, so hits must happen. */
        long seen = atomic_load(&r->reads);
        while (atomic_load(&r->reads) < seen + 2 && !atomic_load(&r->stop))
            sched_yield();
    }
    return NULL;
}

static void test_seqlock_race(void **state)
{
    (void)state;
    race_t r = {.f = fx_new()};
    atomic_init(&r.stop, false);
    atomic_init(&r.reads, 0);
    pthread_t t;
    pthread_create(&t, NULL, writer, &r);
    uint8_t buf[VLEN];
    long hits = 0;
    for (long n = 0; n < 100000000 && hits < 20000; n++) {
        uint64_t sz = 0;
        ds_shm_index_res_t res = get(r.f, "hot", (char *)buf, sizeof(buf), &sz);
        atomic_fetch_add(&r.reads, 1);
        if (res != DS_SHM_INDEX_HIT) continue;
        hits++;
        assert_int_equal(sz, VLEN);
        for (int i = 1; i < VLEN; i++)
            assert_int_equal((uint8_t)(buf[i] - buf[0]), (uint8_t)i);
    }
    atomic_store(&r.stop, true);
    pthread_join(t, NULL);
    assert_true(hits > 0);
    fx_free(r.f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_update_remove),
        cmocka_unit_test(test_tombstones_and_full_runs),
        cmocka_unit_test(test_reader_validates),
        cmocka_unit_test(test_seqlock_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
