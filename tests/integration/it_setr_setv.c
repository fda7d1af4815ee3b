/* Gather sets (ds_kv_setv) and deferred releases (ds_buffer_release_deferred),
 * the two calls that make a connector hand-off one copy and two requests.
 * Against a real worker:
 *
 * - setv stores exactly the concatenation of its pieces, for pieces empty,
 *   many, small (inline) and large, over the Unix socket and over TCP; after
 *   a connection's first large set every local setv is one SETR (no CREATE,
 *   PUBLISH, SET or RELEASE); NX keeps an existing value; every bad argument
 *   is DS_K_INVALID with a message, and nothing is stored.
 * - A deferred release reaches the worker with the client's next request
 *   (the worker's pinned count and RELEASE count move only then), never
 *   later than the sixteenth waiting pin or 8 MiB of them; a large buffer, an
 *   unpublished one and a remote one are released at once.
 * - A client killed while pins wait for release leaves none behind; threads
 *   of one client setting, pinning and deferring at once leave none either.
 * - A hostile raw client's RELEASE frame of forged handles, written ahead
 *   of a GET in the same write, releases nothing of anyone else's and the
 *   GET is answered. */
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

static dst_worker_t W;

/* No value is indexed: the deferred-release tests are about pins taken
 * with a GET (an indexed value's view is held through the shared pin
 * table instead, it_shm_pins.c). */
static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 128, "--index_value_max_kb=0");
}

static int teardown(void **state)
{
    (void)state;
    int rc = dst_worker_stop(&W);
    if (rc != 0) fprintf(stderr, "worker exited %d (log %s)\n", rc, W.logpath);
    return rc == 0 ? 0 : -1;
}

/* The value of key equals want[0..len). */
static void check_bytes(ds_client_t *c, const char *key, const uint8_t *want, size_t len)
{
    void *out = NULL;
    size_t got = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &out, &got), DS_K_OK);
    assert_int_equal(got, len);
    assert_memory_equal(out, want, len);
    free(out);
}

/* Sets key from pieces cut out of v at the given lengths, then checks the
 * stored value is v[0..sum). */
static void setv_cut(ds_client_t *c, const char *key, const uint8_t *v, const size_t *lens,
                     size_t n)
{
    const void *p[64];
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        p[i] = lens[i] ? v + off : NULL;
        off += lens[i];
    }
    assert_int_equal(ds_kv_setv(c, key, n, p, lens, NULL), DS_K_OK);
    check_bytes(c, key, v, off);
}

static void values_over(ds_transport_t t)
{
    ds_client_t *c = dst_connect(&W, t);
    assert_non_null(c);
    uint8_t *v = malloc(4 << 20);
    dst_fill(v, 4 << 20, 7);
    const size_t two[2] = {29, 1 << 20};
    const size_t empty_in[4] = {0, 100, 0, 3 * (1 << 20) + 17};
    const size_t small[3] = {1, 2, 3000};
    size_t many[64];
    for (int i = 0; i < 64; i++)
        many[i] = 1000 + (size_t)i * 37;
    setv_cut(c, "sv-two", v, two, 2);
    setv_cut(c, "sv-empty", v, empty_in, 4);
    setv_cut(c, "sv-small", v, small, 3);
    setv_cut(c, "sv-many", v, many, 64);
    const size_t one[1] = {1 << 20};
    setv_cut(c, "sv-one", v + 5, one, 1);
    check_bytes(c, "sv-one", v + 5, 1 << 20);
    free(v);
    ds_client_close(c);
}

static void test_values(void **state)
{
    (void)state;
    values_over(DS_TRANSPORT_LOCAL);
    values_over(DS_TRANSPORT_TCP);
    assert_true(dst_wait_stat(&W, "arena.reservations", 0, 3000));
}

/* After the first large setv of a connection, each is exactly one SETR. */
static void test_one_request(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    const size_t lens[2] = {40, 1 << 20};
    uint8_t *v = malloc((1 << 20) + 40);
    dst_fill(v, (1 << 20) + 40, 1);
    const void *p[2] = {v, v + 40};
    assert_int_equal(ds_kv_setv(c, "sv-rt", 2, p, lens, NULL), DS_K_OK); /* may ask first */
    double setr0 = dst_ops(&W, "set_reserved"), cr0 = dst_ops(&W, "create"),
           pub0 = dst_ops(&W, "publish"), set0 = dst_ops(&W, "set"), rel0 = dst_ops(&W, "release");
    for (int i = 0; i < 10; i++) {
        dst_fill(v, (1 << 20) + 40, 100 + (uint64_t)i);
        assert_int_equal(ds_kv_setv(c, "sv-rt", 2, p, lens, NULL), DS_K_OK);
    }
    printf("10 setv: %.0f SETR, %.0f CREATE, %.0f PUBLISH, %.0f SET, %.0f RELEASE\n",
           dst_ops(&W, "set_reserved") - setr0, dst_ops(&W, "create") - cr0,
           dst_ops(&W, "publish") - pub0, dst_ops(&W, "set") - set0, dst_ops(&W, "release") - rel0);
    assert_true(dst_ops(&W, "set_reserved") - setr0 == 10);
    assert_true(dst_ops(&W, "create") == cr0 && dst_ops(&W, "publish") == pub0 &&
                dst_ops(&W, "set") == set0);
    assert_true(dst_ops(&W, "release") == rel0);
    check_bytes(c, "sv-rt", v, (1 << 20) + 40);
    /* NX of an existing key: success, the old value stays. */
    ds_set_param_t nx = DS_SET_PARAM_INIT;
    nx.existence = DS_EXISTENCE_NX;
    uint8_t *w = malloc((1 << 20) + 40);
    dst_fill(w, (1 << 20) + 40, 999);
    const void *q[2] = {w, w + 40};
    assert_int_equal(ds_kv_setv(c, "sv-rt", 2, q, lens, &nx), DS_K_OK);
    check_bytes(c, "sv-rt", v, (1 << 20) + 40);
    free(w);
    free(v);
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "arena.reservations", 0, 3000));
}

static void test_bad_arguments(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    uint8_t v[16] = {1};
    const void *p[2] = {v, v};
    size_t lens[2] = {8, 8};
    const size_t zero[2] = {0, 0};
    const void *nulls[2] = {v, NULL};
    ds_set_param_t bad = DS_SET_PARAM_INIT;
    bad.write_mode = (ds_write_mode_t)99;
    struct {
        ds_status_t st;
        const char *what;
    } r[] = {
        {ds_kv_setv(NULL, "sv-bad", 2, p, lens, NULL), "client NULL"},
        {ds_kv_setv(c, "sv-bad", 0, p, lens, NULL), "no pieces"},
        {ds_kv_setv(c, "sv-bad", DS_MAX_SETV_PIECES + 1, p, lens, NULL), "too many pieces"},
        {ds_kv_setv(c, "sv-bad", 2, NULL, lens, NULL), "pieces NULL"},
        {ds_kv_setv(c, "sv-bad", 2, p, NULL, NULL), "lens NULL"},
        {ds_kv_setv(c, "sv-bad", 2, nulls, lens, NULL), "a NULL piece"},
        {ds_kv_setv(c, "sv-bad", 2, p, zero, NULL), "empty total"},
        {ds_kv_setv(c, "sv bad", 2, p, lens, NULL), "bad key"},
        {ds_kv_setv(c, "", 2, p, lens, NULL), "empty key"},
        {ds_kv_setv(c, "sv-bad", 2, p, lens, &bad), "bad write mode"},
    };
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
        printf("%-16s -> %d\n", r[i].what, (int)r[i].st);
        assert_int_equal(r[i].st, DS_K_INVALID);
    }
    assert_int_equal(ds_kv_setv(c, "sv-bad", 2, nulls, lens, NULL), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "piece #1 is NULL"));
    const char *k = "sv-bad";
    bool ex = true;
    assert_int_equal(ds_kv_exist(c, 1, &k, &ex), DS_K_OK);
    assert_false(ex);
    /* A NULL piece of length 0 is fine. */
    const void *okp[2] = {NULL, v};
    const size_t okl[2] = {0, 16};
    assert_int_equal(ds_kv_setv(c, "sv-bad", 2, okp, okl, NULL), DS_K_OK);
    check_bytes(c, "sv-bad", v, 16);
    ds_client_close(c);
}

/* A pinned 1 MiB buffer: set, then get_buffers. */
static ds_buffer_t *pin(ds_client_t *c, const char *key, size_t sz, uint64_t seed)
{
    assert_int_equal(dst_set_filled(c, key, sz, seed), DS_K_OK);
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_get_buffers(c, 1, &key, 0, &b), DS_K_OK);
    assert_non_null(b);
    return b;
}

static void test_deferred_release(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    const char *k = "dr-a";
    ds_buffer_t *b = pin(c, k, 1 << 20, 3);
    double pinned = dst_stat(&W, "objects.pinned"), rel0 = dst_ops(&W, "release");
    assert_true(pinned >= 1);
    ds_buffer_release_deferred(b);
    usleep(100 * 1000);
    /* Not told yet: the pin stays until this client's next request... */
    assert_true(dst_stat(&W, "objects.pinned") == pinned);
    assert_true(dst_ops(&W, "release") == rel0);
    bool ex = false;
    assert_int_equal(ds_kv_exist(c, 1, &k, &ex), DS_K_OK);
    assert_true(ex);
    /* ...which carried it, ahead of itself. */
    assert_true(dst_ops(&W, "release") == rel0 + 1);
    assert_true(dst_stat(&W, "objects.pinned") == pinned - 1);

    /* At most 16 wait: the 17th sends all 17 at once. */
    ds_buffer_t *bs[17];
    char keys[17][16];
    for (int i = 0; i < 17; i++) {
        snprintf(keys[i], sizeof(keys[i]), "dr-%d", i);
        bs[i] = pin(c, keys[i], 64 * 1024, 10 + (uint64_t)i);
    }
    rel0 = dst_ops(&W, "release");
    double p17 = dst_stat(&W, "objects.pinned");
    for (int i = 0; i < 16; i++)
        ds_buffer_release_deferred(bs[i]);
    usleep(50 * 1000);
    assert_true(dst_stat(&W, "objects.pinned") == p17);
    ds_buffer_release_deferred(bs[16]);
    assert_true(dst_wait_stat(&W, "objects.pinned", p17 - 17, 3000));
    assert_true(dst_ops(&W, "release") == rel0 + 1); /* one frame */

    /* At most 8 MiB wait: three 3 MiB pins, the third sends them. */
    ds_buffer_t *m[3];
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof(key), "dr-m%d", i);
        m[i] = pin(c, key, 3 << 20, 50 + (uint64_t)i);
    }
    double p3 = dst_stat(&W, "objects.pinned");
    ds_buffer_release_deferred(m[0]);
    ds_buffer_release_deferred(m[1]);
    usleep(50 * 1000);
    assert_true(dst_stat(&W, "objects.pinned") == p3);
    ds_buffer_release_deferred(m[2]);
    assert_true(dst_wait_stat(&W, "objects.pinned", p3 - 3, 3000));

    /* Over 4 MiB: released at once. */
    ds_buffer_t *big = pin(c, "dr-big", 5 << 20, 60);
    double pb = dst_stat(&W, "objects.pinned");
    ds_buffer_release_deferred(big);
    assert_true(dst_wait_stat(&W, "objects.pinned", pb - 1, 3000));

    /* Unpublished: discarded at once, its reservation given back. */
    ds_buffer_t *u = NULL;
    assert_int_equal(ds_kv_create(c, "dr-unpub", 2 << 20, NULL, &u), DS_K_OK);
    double held = dst_stat(&W, "arena.reserved_bytes");
    ds_buffer_release_deferred(u);
    assert_true(dst_wait_stat(&W, "arena.reserved_bytes", 0, 3000) ||
                dst_stat(&W, "arena.reserved_bytes") < held);
    const char *uk = "dr-unpub";
    assert_int_equal(ds_kv_exist(c, 1, &uk, &ex), DS_K_OK);
    assert_false(ex);
    ds_buffer_release_deferred(NULL);

    /* The pinned version stays intact until the release reaches the
     * worker; after it, the overwritten version's memory is reused. */
    ds_buffer_t *v1 = pin(c, "dr-ow", 1 << 20, 70);
    uint8_t *w = malloc(1 << 20);
    dst_fill(w, 1 << 20, 71);
    assert_int_equal(ds_kv_set(c, "dr-ow", w, 1 << 20, NULL), DS_K_OK);
    assert_true(dst_check(ds_buffer_data(v1), 1 << 20, 70));
    ds_buffer_release_deferred(v1);
    assert_int_equal(ds_kv_set(c, "dr-ow", w, 1 << 20, NULL), DS_K_OK);
    free(w);
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "objects.pinned", 0, 3000));
}

/* A remote buffer has no pin: released (freed) at once, nothing sent. */
static void test_deferred_remote(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    uint8_t v[100000];
    dst_fill(v, sizeof(v), 5);
    assert_int_equal(ds_kv_set(c, "dr-tcp", v, sizeof(v), NULL), DS_K_OK);
    const char *k = "dr-tcp";
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_get_buffers(c, 1, &k, 0, &b), DS_K_OK);
    assert_memory_equal(ds_buffer_data(b), v, sizeof(v));
    double rel0 = dst_ops(&W, "release");
    ds_buffer_release_deferred(b);
    bool ex = false;
    assert_int_equal(ds_kv_exist(c, 1, &k, &ex), DS_K_OK);
    assert_true(ex && dst_ops(&W, "release") == rel0);
    ds_client_close(c);
}

/* A client killed with pins waiting for release leaves no pin behind. */
static void test_deferred_sigkill(void **state)
{
    (void)state;
    double pinned0 = dst_stat(&W, "objects.pinned");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        ds_client_t *k = dst_connect(&W, DS_TRANSPORT_LOCAL);
        size_t sz = 1 << 20;
        uint8_t *v = malloc(sz);
        dst_fill(v, sz, 9);
        const char *key = "dr-killed";
        ds_buffer_t *b = NULL;
        int ok = k && ds_kv_set(k, key, v, sz, NULL) == DS_K_OK &&
                 ds_kv_get_buffers(k, 1, &key, 0, &b) == DS_K_OK;
        if (ok) ds_buffer_release_deferred(b);
        (void)!write(pfd[1], ok ? "y" : "n", 1);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    char r = 0;
    assert_int_equal(read(pfd[0], &r, 1), 1);
    close(pfd[0]);
    assert_int_equal(r, 'y');
    assert_true(dst_stat(&W, "objects.pinned") == pinned0 + 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_true(dst_wait_stat(&W, "objects.pinned", pinned0, 5000));
}

/* A raw client writes RELEASE (NOREPLY) of forged handles and a GET in one
 * write, as the library does with deferred pins: another client's pin
 * stays, and the GET is answered with the value. */
static void test_hostile_piggyback(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_buffer_t *b = pin(c, "dr-victim", 1 << 20, 80);
    assert_int_equal(ds_kv_set(c, "dr-small", "hello", 5, NULL), DS_K_OK);
    double pinned = dst_stat(&W, "objects.pinned");
    hr_conn_t h;
    assert_int_equal(hr_open_hello(&h, &W, true), 0);
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u32(&m, 3);
    ds__wbuf_u64(&m, 1);
    ds__wbuf_u64(&m, UINT64_MAX);
    ds__wbuf_u64(&m, (uint64_t)1 << 32 | 1);
    hr_add_raw(&h, DS_OP_RELEASE, DS_FLAG_NOREPLY, &m, 0, NULL, 0);
    ds__wbuf_free(&m);
    uint64_t id = hr_get(&h, "dr-small", 0, 0);
    assert_int_equal(hr_flush(&h), 0);
    hr_frame_t *f = hr_answer(&h, id, ds__now_ms() + 5000);
    assert_non_null(f);
    char out[16];
    assert_int_equal(f->h.status, DS_K_OK);
    assert_int_equal(hr_get_value(f, out, sizeof(out), NULL), DS_VAL_INLINE);
    assert_string_equal(out, "hello");
    hr_close(&h);
    assert_true(dst_stat(&W, "objects.pinned") == pinned);
    assert_true(dst_check(ds_buffer_data(b), 1 << 20, 80));
    ds_buffer_release(b);
    ds_client_close(c);
}

/* Threads of one client take pins, release them deferred and set at once:
 * every value reads back intact and no pin is left once the client sent a
 * request after the last release. */
#define DR_THREADS 4
#define DR_ROUNDS 60

typedef struct {
    ds_client_t *c;
    int id;
    int bad;
} dr_arg_t;

static void *dr_thread(void *arg)
{
    dr_arg_t *a = arg;
    char key[32];
    snprintf(key, sizeof(key), "dr-thr-%d", a->id);
    const char *k = key;
    size_t sz = 256 * 1024;
    uint8_t *v = malloc(sz);
    for (int i = 0; i < DR_ROUNDS && v; i++) {
        uint64_t seed = (uint64_t)a->id * 1000 + (uint64_t)i;
        dst_fill(v, sz, seed);
        const void *p[2] = {v, v + 100};
        const size_t l[2] = {100, sz - 100};
        ds_buffer_t *b = NULL;
        if (ds_kv_setv(a->c, key, 2, p, l, NULL) != DS_K_OK ||
            ds_kv_get_buffers(a->c, 1, &k, 0, &b) != DS_K_OK || b == NULL ||
            !dst_check(ds_buffer_data(b), sz, seed))
            a->bad++;
        ds_buffer_release_deferred(b);
    }
    free(v);
    return NULL;
}

static void test_deferred_threads(void **state)
{
    (void)state;
    double base = dst_stat(&W, "objects.pinned");
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    pthread_t t[DR_THREADS];
    dr_arg_t a[DR_THREADS];
    for (int i = 0; i < DR_THREADS; i++) {
        a[i] = (dr_arg_t){.c = c, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, dr_thread, &a[i]), 0);
    }
    for (int i = 0; i < DR_THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(a[i].bad, 0);
    }
    /* The waiting pins are the session's: one request takes all of them. */
    const char *k = "dr-thr-0";
    bool ex = false;
    assert_int_equal(ds_kv_exist(c, 1, &k, &ex), DS_K_OK);
    assert_true(ex);
    assert_true(dst_wait_stat(&W, "objects.pinned", base, 3000));
    ds_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),           cmocka_unit_test(test_one_request),
        cmocka_unit_test(test_bad_arguments),    cmocka_unit_test(test_deferred_release),
        cmocka_unit_test(test_deferred_remote),  cmocka_unit_test(test_deferred_sigkill),
        cmocka_unit_test(test_deferred_threads), cmocka_unit_test(test_hostile_piggyback),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
