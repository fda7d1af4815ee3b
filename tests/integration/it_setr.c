/* Local sets in one round trip (SETR, common/wire.h): a local client copies
 * values into arena space the worker reserved for its connection and names
 * them in one request. Against real workers:
 *
 * - Round trips: after the first set of a size, every local set of a large
 *   value is exactly one SETR (no CREATE, PUBLISH or SET), read back intact,
 *   mixed batches too; NX keeps the old value; the reservation shows in the
 *   arena stats and is gone when the client closes; after a larger value it
 *   shrinks back to the size of the sets that follow.
 * - Zero-copy create / publish: one SETR per create+publish, the buffer's
 *   pin outlives overwrites and is the session's shared pin table's (its
 *   release sends no RELEASE), an unpublished buffer's space goes back.
 * - Hostile raw clients: a range outside the reservation, unaligned, running
 *   past its end, empty, overlapping another, a replayed (already used)
 *   handle, another session's handle, a pin's handle, a SETR over TCP: each
 *   refused with K_INVALID (K_NOT_SUPPORTED over TCP) and a message, nothing
 *   published, stored values intact, and the reservation still usable.
 * - SIGKILL: a client killed while holding a reservation gives it back
 *   (arena reserved_bytes and used_bytes return to what they were).
 * - Concurrency: threads and processes setting large values at once, each
 *   value read back intact, no reservation left afterwards.
 * - Eviction: volatile sets through reservations in a small arena evict old
 *   values, never a reservation: the newest values stay intact. */
#include "harness.h"
#include "it_hostile_raw.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define ARENA_MB 128
static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, ARENA_MB, NULL);
}

/* A worker that exits unclean (a sanitizer report, a leak) fails the test. */
static int teardown(void **state)
{
    (void)state;
    int rc = dst_worker_stop(&W);
    if (rc != 0) fprintf(stderr, "worker exited %d (log %s)\n", rc, W.logpath);
    return rc == 0 ? 0 : -1;
}

static void check_value(ds_client_t *c, const char *key, size_t len, uint64_t seed)
{
    void *out = NULL;
    size_t got = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &out, &got), DS_K_OK);
    assert_int_equal(got, len);
    assert_true(dst_check(out, len, seed));
    free(out);
}

static void test_one_round_trip(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    const size_t sizes[] = {100 * 1024, 1 << 20, 3 * (1 << 20) + 17};
    uint8_t *v = malloc(4 << 20);
    for (size_t s = 0; s < 3; s++) {
        dst_fill(v, sizes[s], 1000 + s);
        assert_int_equal(ds_kv_set(c, "rt", v, sizes[s], NULL), DS_K_OK); /* may ask first */
        double setr0 = dst_ops(&W, "set_reserved"), cr0 = dst_ops(&W, "create"),
               pub0 = dst_ops(&W, "publish"), set0 = dst_ops(&W, "set");
        for (int i = 0; i < 10; i++) {
            dst_fill(v, sizes[s], 2000 + s * 100 + (size_t)i);
            assert_int_equal(ds_kv_set(c, "rt", v, sizes[s], NULL), DS_K_OK);
            check_value(c, "rt", sizes[s], 2000 + s * 100 + (size_t)i);
        }
        double setr = dst_ops(&W, "set_reserved") - setr0;
        printf("size %zu: 10 sets took %.0f SETR, %.0f CREATE, %.0f PUBLISH, %.0f SET\n", sizes[s],
               setr, dst_ops(&W, "create") - cr0, dst_ops(&W, "publish") - pub0,
               dst_ops(&W, "set") - set0);
        assert_true(setr == 10);
        assert_true(dst_ops(&W, "create") == cr0 && dst_ops(&W, "publish") == pub0 &&
                    dst_ops(&W, "set") == set0);
    }
    /* A batch mixing small (inline) and large values. */
    const char *keys[4] = {"mix-a", "mix-b", "mix-c", "mix-d"};
    const size_t lens[4] = {10, 200 * 1024, 5, 700 * 1024};
    uint8_t *vals[4];
    for (int i = 0; i < 4; i++) {
        vals[i] = malloc(lens[i]);
        dst_fill(vals[i], lens[i], 300 + (uint64_t)i);
    }
    ds_status_t sts[4];
    assert_int_equal(ds_kv_mset(c, 4, keys, (const void *const *)vals, lens, NULL, sts), DS_K_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sts[i], DS_K_OK);
        check_value(c, keys[i], lens[i], 300 + (uint64_t)i);
    }
    /* More large values than the worker keeps on its stack (SETR_SMALL,
     * ops_space.c): one SETR for all twelve, every value as written. */
    enum { MANY = 12 };
    char many_names[MANY][24];
    const char *many_keys[MANY];
    size_t many_lens[MANY];
    uint8_t *many_vals[MANY];
    for (int i = 0; i < MANY; i++) {
        snprintf(many_names[i], sizeof(many_names[i]), "many-%d", i);
        many_keys[i] = many_names[i];
        many_lens[i] = 64 * 1024 + (size_t)i * 4099;
        many_vals[i] = malloc(many_lens[i]);
        dst_fill(many_vals[i], many_lens[i], 500 + (uint64_t)i);
    }
    ds_status_t many_sts[MANY];
    /* The first may ask for a space large enough; the second is one SETR. */
    assert_int_equal(
        ds_kv_mset(c, MANY, many_keys, (const void *const *)many_vals, many_lens, NULL, many_sts),
        DS_K_OK);
    double many0 = dst_ops(&W, "set_reserved");
    assert_int_equal(
        ds_kv_mset(c, MANY, many_keys, (const void *const *)many_vals, many_lens, NULL, many_sts),
        DS_K_OK);
    assert_true(dst_ops(&W, "set_reserved") - many0 == 1);
    for (int i = 0; i < MANY; i++) {
        assert_int_equal(many_sts[i], DS_K_OK);
        check_value(c, many_keys[i], many_lens[i], 500 + (uint64_t)i);
        free(many_vals[i]);
    }
    /* NX of an existing key: success, the old value stays. */
    ds_set_param_t nx = DS_SET_PARAM_INIT;
    nx.existence = DS_EXISTENCE_NX;
    dst_fill(v, 1 << 20, 9999);
    assert_int_equal(ds_kv_set(c, "mix-d", v, 1 << 20, &nx), DS_K_OK);
    check_value(c, "mix-d", lens[3], 303);
    double reserved = dst_stat(&W, "arena.reserved_bytes");
    printf("held by this client: %.0f reservations, %.0f bytes\n",
           dst_stat(&W, "arena.reservations"), reserved);
    assert_true(dst_stat(&W, "arena.reservations") >= 1);
    assert_true(reserved >= 1 << 20);
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "arena.reservations", 0, 3000));
    assert_true(dst_wait_stat(&W, "arena.reserved_bytes", 0, 3000));
    for (int i = 0; i < 4; i++)
        free(vals[i]);
    free(v);
}

/* The space follows the connection's recent sets: after a 16 MiB value,
 * 1 MiB sets ask for 8 MiB only for a while (ds__space_want), then the
 * reservation shrinks back to about their size, so that each set lands in
 * the range the version it replaced held, not in fresh memory. Every set
 * stays one SETR and reads back intact. */
static void test_space_follows_sets(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    size_t big = 16u << 20, mib = 1u << 20;
    uint8_t *v = malloc(big);
    assert_non_null(v);
    dst_fill(v, big, 77);
    assert_int_equal(ds_kv_set(c, "grow", v, big, NULL), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "grow", v, big, NULL), DS_K_OK);
    assert_true(dst_stat(&W, "arena.reserved_bytes") >= (double)big);
    double setr0 = dst_ops(&W, "set_reserved"), cr0 = dst_ops(&W, "create");
    for (int i = 0; i < 40; i++) {
        dst_fill(v, mib, 100 + (uint64_t)i);
        assert_int_equal(ds_kv_set(c, "grow", v, mib, NULL), DS_K_OK);
        if (i % 8 == 0) check_value(c, "grow", mib, 100 + (uint64_t)i);
    }
    double held = dst_stat(&W, "arena.reserved_bytes");
    printf("after 40 sets of 1 MiB: %.0f bytes reserved, %.0f SETR, %.0f CREATE\n", held,
           dst_ops(&W, "set_reserved") - setr0, dst_ops(&W, "create") - cr0);
    assert_true(held <= 2.0 * (double)mib);
    assert_true(dst_ops(&W, "set_reserved") - setr0 == 40);
    assert_true(dst_ops(&W, "create") == cr0);
    check_value(c, "grow", mib, 139);
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "arena.reserved_bytes", 0, 3000));
    free(v);
}

/* Zero-copy create / publish: a single create takes the connection's space
 * with no request, its publish is one SETR, and the buffer keeps a pin: its
 * bytes stay readable after the key is overwritten. Releasing an unpublished
 * buffer gives its space back. */
static void test_create_publish(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    const size_t sz = 1 << 20;
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_create(c, "zc", sz, NULL, &b), DS_K_OK); /* may ask first */
    dst_fill(ds_buffer_mutable_data(b), sz, 1);
    assert_int_equal(ds_kv_publish(c, b), DS_K_OK);
    ds_buffer_release(b);
    double setr0 = dst_ops(&W, "set_reserved"), cr0 = dst_ops(&W, "create"),
           pub0 = dst_ops(&W, "publish"), rel0 = dst_ops(&W, "release");
    ds_buffer_t *kept = NULL;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(ds_kv_create(c, "zc", sz, NULL, &b), DS_K_OK);
        dst_fill(ds_buffer_mutable_data(b), sz, 10 + (uint64_t)i);
        assert_int_equal(ds_kv_publish(c, b), DS_K_OK);
        assert_null(ds_buffer_mutable_data(b));
        check_value(c, "zc", sz, 10 + (uint64_t)i);
        if (i == 0)
            kept = b;
        else
            ds_buffer_release(b);
    }
    printf("10 create+publish: %.0f SETR, %.0f CREATE, %.0f PUBLISH\n",
           dst_ops(&W, "set_reserved") - setr0, dst_ops(&W, "create") - cr0,
           dst_ops(&W, "publish") - pub0);
    assert_true(dst_ops(&W, "set_reserved") - setr0 == 10);
    assert_true(dst_ops(&W, "create") == cr0 && dst_ops(&W, "publish") == pub0);
    /* The first buffer's pin kept its version intact through 9 overwrites. */
    assert_true(dst_check(ds_buffer_data(kept), sz, 10));
    ds_buffer_release(kept);
    /* The views were held in the session's shared pin table: releasing
     * them sent nothing. */
    printf("11 published views released: %.0f RELEASE\n", dst_ops(&W, "release") - rel0);
    assert_true(dst_ops(&W, "release") == rel0);
    /* An unpublished buffer's space goes back when it is released. */
    assert_int_equal(ds_kv_create(c, "zc-drop", 3 << 20, NULL, &b), DS_K_OK);
    double held = dst_stat(&W, "arena.reserved_bytes");
    assert_true(held >= 3 << 20);
    ds_buffer_release(b);
    assert_true(dst_wait_stat(&W, "arena.reserved_bytes", 0, 3000) ||
                dst_stat(&W, "arena.reserved_bytes") < held);
    const char *k = "zc-drop";
    bool ex = true;
    assert_int_equal(ds_kv_exist(c, 1, &k, &ex), DS_K_OK);
    assert_false(ex);
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "arena.reservations", 0, 3000));
}

/* ---- hostile raw clients ---- */

typedef struct {
    uint64_t h, off, len;
} space_t;

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

typedef struct {
    const char *key;
    uint64_t off, len;
} ent_t;

/* Sends one SETR and waits for its answer: status, message in err, and the
 * space trailer in *sp. */
static uint32_t setr(hr_conn_t *c, uint64_t handle, uint64_t want, const ent_t *e, uint32_t n,
                     space_t *sp, char *err, size_t cap)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u64(&m, handle);
    ds__wbuf_u64(&m, want);
    ds__wbuf_u8(&m, 0); /* flags */
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, 0);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, n);
    for (uint32_t i = 0; i < n; i++) {
        ds__wbuf_cstr(&m, e[i].key);
        ds__wbuf_u64(&m, e[i].off);
        ds__wbuf_u64(&m, e[i].len);
    }
    uint64_t id = hr_add(c, DS_OP_SETR, &m, NULL, 0);
    ds__wbuf_free(&m);
    assert_int_equal(hr_flush(c), 0);
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + 5000);
    assert_non_null(f);
    snprintf(err, cap, "%s", f->err);
    memset(sp, 0, sizeof(*sp));
    if (f->h.meta_len >= 24 + 4) {
        const uint8_t *t = f->meta + f->h.meta_len - 24;
        sp->h = rd64(t);
        sp->off = rd64(t + 8);
        sp->len = rd64(t + 16);
    }
    return f->h.status;
}

/* The value of key over the raw connection (inline GET) into out: its
 * size, or -1 when missing. */
static int raw_get(hr_conn_t *c, const char *key, char *out, size_t cap)
{
    uint64_t id = hr_get(c, key, 0, 0);
    assert_int_equal(hr_flush(c), 0);
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + 5000);
    assert_non_null(f);
    memset(out, 0, cap);
    if (f->h.status != DS_K_OK) return -1;
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *e;
    (void)ds__rbuf_str(&r, &e);
    (void)ds__rbuf_u32(&r);
    uint8_t kind = ds__rbuf_u8(&r);
    uint64_t size = ds__rbuf_u64(&r);
    assert_false(r.err);
    assert_int_equal(kind, DS_VAL_INLINE);
    assert_true(size < cap && size <= f->h.data_len);
    memcpy(out, f->data, size);
    return (int)size;
}

static void expect_refused(uint32_t st, uint32_t want, const char *err, const char *what)
{
    printf("%-40s -> status %u: %s\n", what, st, err);
    assert_int_equal(st, want);
    assert_true(err[0] != '\0');
}

static void test_hostile(void **state)
{
    (void)state;
    hr_conn_t a, b, t;
    assert_int_equal(hr_open(&a, &W, true), 0);
    assert_int_equal(hr_hello(&a, 0, true, "", 3000), 0);
    assert_int_equal(a.hello_status, 0);
    char err[512], val[64];
    space_t sp, sp2;
    /* A value that must survive everything below. */
    uint64_t id = hr_set(&a, "keep", "precious");
    assert_int_equal(hr_flush(&a), 0);
    assert_non_null(hr_answer(&a, id, ds__now_ms() + 5000));

    assert_int_equal(setr(&a, 0, 1 << 20, NULL, 0, &sp, err, sizeof(err)), DS_K_OK);
    printf("granted space %llx at %llu, %llu bytes\n", (unsigned long long)sp.h,
           (unsigned long long)sp.off, (unsigned long long)sp.len);
    assert_true(sp.h != 0 && sp.len >= 1 << 20 && sp.off % 64 == 0);
    assert_int_equal(dst_stat(&W, "arena.reservations"), 1);

    ent_t e[2] = {{"keep", sp.off + sp.len, 8}, {"other", 0, 0}};
    expect_refused(setr(&a, sp.h, 1 << 20, e, 1, &sp, err, sizeof(err)), DS_K_INVALID, err,
                   "range past the reservation");
    e[0] = (ent_t){"keep", sp.off - 64, 8};
    expect_refused(setr(&a, sp.h, 1 << 20, e, 1, &sp, err, sizeof(err)), DS_K_INVALID, err,
                   "range before the reservation");
    e[0] = (ent_t){"keep", sp.off + 8, 8};
    expect_refused(setr(&a, sp.h, 1 << 20, e, 1, &sp, err, sizeof(err)), DS_K_INVALID, err,
                   "unaligned range");
    e[0] = (ent_t){"keep", sp.off + sp.len - 64, 65};
    expect_refused(setr(&a, sp.h, 1 << 20, e, 1, &sp, err, sizeof(err)), DS_K_INVALID, err,
                   "range running past the end");
    e[0] = (ent_t){"keep", sp.off, 0};
    expect_refused(setr(&a, sp.h, 1 << 20, e, 1, &sp, err, sizeof(err)), DS_K_INVALID, err,
                   "empty range");
    e[0] = (ent_t){"keep", sp.off, 100};
    e[1] = (ent_t){"other", sp.off + 64, 100};
    expect_refused(setr(&a, sp.h, 1 << 20, e, 2, &sp, err, sizeof(err)), DS_K_INVALID, err,
                   "overlapping ranges");
    e[0] = (ent_t){"keep", sp.off, 8};
    expect_refused(setr(&a, 0, 1 << 20, e, 1, &sp2, err, sizeof(err)), DS_K_INVALID, err,
                   "keys without a reservation");
    raw_get(&a, "keep", val, sizeof(val));
    assert_string_equal(val, "precious");
    assert_int_equal(raw_get(&a, "other", val, sizeof(val)), -1);

    /* Another session's handle, and a SETR over TCP. */
    assert_int_equal(hr_open(&b, &W, true), 0);
    assert_int_equal(hr_hello(&b, 0, true, "", 3000), 0);
    expect_refused(setr(&b, sp.h, 1 << 20, e, 1, &sp2, err, sizeof(err)), DS_K_INVALID, err,
                   "another session's reservation");
    assert_int_equal(sp2.h, 0);
    assert_int_equal(hr_open_hello(&t, &W, false), 0);
    expect_refused(setr(&t, sp.h, 1 << 20, e, 1, &sp2, err, sizeof(err)), DS_K_NOT_SUPPORTED, err,
                   "SETR over TCP");
    hr_close(&t);

    /* A pin's handle is not a reservation. */
    uint64_t pin = 0;
    id = hr_get(&a, "keep", 0, DS_GET_PIN);
    assert_int_equal(hr_flush(&a), 0);
    hr_frame_t *f = hr_answer(&a, id, ds__now_ms() + 5000);
    assert_non_null(f);
    assert_int_equal(hr_get_value(f, val, sizeof(val), &pin), DS_VAL_SHM);
    space_t ps;
    expect_refused(setr(&a, pin, 1 << 20, e, 1, &ps, err, sizeof(err)), DS_K_INVALID, err,
                   "a pin's handle");

    /* The reservation still works after all that; a replay of the request
     * that used it is refused and changes nothing. */
    uint64_t used = sp.h;
    e[0] = (ent_t){"fresh", sp.off, 5};
    uint32_t st = setr(&a, used, 1 << 20, e, 1, &sp, err, sizeof(err));
    printf("a valid SETR -> status %u %s\n", st, err);
    assert_int_equal(st, DS_K_OK);
    assert_true(sp.h != used);
    assert_int_equal(raw_get(&a, "fresh", val, sizeof(val)), 5); /* whatever the space held */
    char fresh[64];
    memcpy(fresh, val, sizeof(fresh));
    e[0] = (ent_t){"keep", e[0].off, 8};
    expect_refused(setr(&a, used, 1 << 20, e, 1, &sp2, err, sizeof(err)), DS_K_INVALID, err,
                   "replayed (already used) reservation");
    raw_get(&a, "keep", val, sizeof(val));
    assert_string_equal(val, "precious");
    assert_int_equal(raw_get(&a, "fresh", val, sizeof(val)), 5);
    assert_memory_equal(val, fresh, 5);
    assert_int_equal(dst_stat(&W, "arena.reservations"), 1);

    /* want 0 gives the space back; closing the session drops the rest. */
    assert_int_equal(setr(&b, 0, 4096, NULL, 0, &sp2, err, sizeof(err)), DS_K_OK);
    assert_true(sp2.h != 0);
    assert_int_equal(dst_stat(&W, "arena.reservations"), 2);
    assert_int_equal(setr(&b, sp2.h, 0, NULL, 0, &sp2, err, sizeof(err)), DS_K_OK);
    assert_int_equal(sp2.h, 0);
    assert_int_equal(dst_stat(&W, "arena.reservations"), 1);
    hr_close(&b);
    hr_close(&a);
    assert_true(dst_wait_stat(&W, "arena.reservations", 0, 3000));
    assert_true(dst_wait_stat(&W, "arena.reserved_bytes", 0, 3000));
}

/* ---- a client killed holding a reservation ---- */

static void test_sigkill(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    const char *killed = "killed";
    (void)ds_kv_del(c, 1, &killed, NULL);
    double used0 = dst_stat(&W, "arena.used_bytes");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        ds_client_t *k = dst_connect(&W, DS_TRANSPORT_LOCAL);
        size_t sz = 4 << 20;
        uint8_t *v = malloc(sz);
        dst_fill(v, sz, 77);
        int ok = k && ds_kv_set(k, "killed", v, sz, NULL) == DS_K_OK;
        (void)!write(pfd[1], ok ? "y" : "n", 1);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    char r = 0;
    assert_int_equal(read(pfd[0], &r, 1), 1);
    close(pfd[0]);
    assert_int_equal(r, 'y');
    double reserved = dst_stat(&W, "arena.reserved_bytes");
    printf("child holds %.0f reserved bytes; used %.0f -> %.0f\n", reserved, used0,
           dst_stat(&W, "arena.used_bytes"));
    assert_true(reserved >= 4 << 20);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_true(dst_wait_stat(&W, "arena.reservations", 0, 5000));
    assert_true(dst_wait_stat(&W, "arena.reserved_bytes", 0, 5000));
    check_value(c, "killed", 4 << 20, 77);
    assert_int_equal(ds_kv_del(c, 1, &killed, NULL), DS_K_OK);
    assert_true(dst_wait_stat(&W, "arena.used_bytes", used0, 3000));
    ds_client_close(c);
}

/* ---- concurrency ---- */

#define NTHREADS 6
#define NSETS 40

static void *setter(void *arg)
{
    ds_client_t *c = arg;
    static _Atomic int next_id;
    int me = next_id++;
    size_t cap = 1 << 20;
    uint8_t *v = malloc(cap);
    void *out = NULL;
    intptr_t bad = 0;
    for (int i = 0; i < NSETS && !bad; i++) {
        char key[48];
        /* own keys and one shared key every thread writes */
        if (i % 5 == 4)
            snprintf(key, sizeof(key), "conc-shared");
        else
            snprintf(key, sizeof(key), "conc-%d-%d-%d", (int)getpid(), me, i % 3);
        size_t len = 65 * 1024 + ((size_t)(me * 7919 + i * 104729) % (cap - 65 * 1024));
        uint64_t seed = (uint64_t)me * 1000 + (uint64_t)i;
        dst_fill(v, len, seed);
        if (ds_kv_set(c, key, v, len, NULL) != DS_K_OK) {
            printf("set of %s (%zu bytes) failed: %s\n", key, len, ds_last_error());
            bad = 1;
        }
        size_t got = 0;
        if (!bad && i % 5 != 4) {
            if (ds_kv_get(c, key, 0, &out, &got) != DS_K_OK || got != len ||
                !dst_check(out, len, seed))
                bad = 2;
            free(out);
            out = NULL;
        }
    }
    free(v);
    return (void *)bad;
}

static void test_concurrency(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    pid_t kids[2];
    for (int p = 0; p < 2; p++) {
        kids[p] = fork();
        assert_true(kids[p] >= 0);
        if (kids[p] == 0) {
            ds_client_t *k = dst_connect(&W, DS_TRANSPORT_LOCAL);
            pthread_t th[3];
            for (int i = 0; i < 3; i++)
                pthread_create(&th[i], NULL, setter, k);
            int bad = 0;
            for (int i = 0; i < 3; i++) {
                void *r;
                pthread_join(th[i], &r);
                bad |= r != NULL;
            }
            ds_client_close(k);
            _exit(bad);
        }
    }
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, setter, c);
    int bad = 0;
    for (int i = 0; i < NTHREADS; i++) {
        void *r;
        pthread_join(th[i], &r);
        if (r != NULL)
            printf("thread %d failed (%ld): %s\n", i, (long)(intptr_t)r, ds_last_error());
        bad |= r != NULL;
    }
    for (int p = 0; p < 2; p++) {
        int ws = 0;
        waitpid(kids[p], &ws, 0);
        printf("process %d exited %d\n", p, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
        bad |= !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    assert_int_equal(bad, 0);
    /* The shared key holds one whole value of one of the writers. */
    void *out = NULL;
    size_t got = 0;
    assert_int_equal(ds_kv_get(c, "conc-shared", 0, &out, &got), DS_K_OK);
    bool whole = false;
    for (int me = 0; me < NTHREADS + 6 && !whole; me++)
        for (int i = 4; i < NSETS && !whole; i += 5)
            whole = dst_check(out, got, (uint64_t)me * 1000 + (uint64_t)i);
    free(out);
    assert_true(whole);
    printf("reservations while the client is open: %.0f\n", dst_stat(&W, "arena.reservations"));
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "arena.reservations", 0, 5000));
    assert_true(dst_wait_stat(&W, "arena.reserved_bytes", 0, 5000));
}

/* ---- eviction ---- */

static void test_eviction(void **state)
{
    (void)state;
    dst_worker_t w;
    assert_int_equal(dst_worker_start(&w, 32, NULL), 0);
    ds_client_t *c = dst_connect(&w, DS_TRANSPORT_LOCAL);
    ds_set_param_t ev = DS_SET_PARAM_INIT;
    ev.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    const size_t sz = 1 << 20;
    uint8_t *v = malloc(sz);
    const int n = 4 * 32;
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "ev-%d", i);
        dst_fill(v, sz, 500 + (uint64_t)i);
        assert_int_equal(ds_kv_set(c, key, v, sz, &ev), DS_K_OK);
        /* The value just set and the one before it are intact. */
        for (int j = i > 0 ? i - 1 : 0; j <= i; j++) {
            snprintf(key, sizeof(key), "ev-%d", j);
            void *out = NULL;
            size_t got = 0;
            assert_int_equal(ds_kv_get(c, key, 0, &out, &got), DS_K_OK);
            assert_true(got == sz && dst_check(out, sz, 500 + (uint64_t)j));
            free(out);
        }
    }
    printf("evictions %.0f, reserved %.0f bytes\n", dst_stat(&w, "objects.evictions"),
           dst_stat(&w, "arena.reserved_bytes"));
    assert_true(dst_stat(&w, "objects.evictions") >= n - 32);
    assert_true(dst_stat(&w, "arena.reserved_bytes") >= sz);
    free(v);
    ds_client_close(c);
    assert_int_equal(dst_worker_stop(&w), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_space_follows_sets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrency, setup, teardown),
        cmocka_unit_test(test_eviction),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
