/* Large transfers over TCP from raw-protocol clients (it_hostile_raw.h), each
 * test against a fresh worker. They cover the large-transfer paths: SET
 * data read straight into the arena (by the loop, DS_IO_SLICE_DATA per turn,
 * or past DS_BRECV_MIN by the receiver thread of bulk_recv.c), the
 * 64 KiB SET that fits the read buffer whole, and large answers that the
 * loop writes itself when one write finishes them (DS_BULK_DIRECT) or hands
 * to the sender thread.
 *
 * - A SET whose value stops arriving half-way does not hold up other
 *   clients' small operations; when the rest arrives it is stored intact,
 *   and a request pipelined behind its data is answered after it.
 * - A SET that announces more than it sends and then half-closes, or closes,
 *   stores nothing and gives its arena space back.
 * - Garbage right behind a large value: the SET is answered and stored, then
 *   the garbage is a protocol error that closes that connection only.
 * - Pipelined GETs of 1 MiB (written by the loop), 3 MiB (the sender
 *   thread) and small values, and pipelined 64 KiB SETs, answer in order
 *   with the right bytes.
 *
 * Each test prints what it measured before asserting. */
#include "harness.h"
#include "it_hostile_raw.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#define MIB (1u << 20)

static dst_worker_t W;

static int start_worker(void **state)
{
    (void)state;
    return dst_worker_start(&W, 256, NULL);
}

static int stop_worker(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

/* A GET answer's single inline value: its bytes and size, or NULL. */
static const uint8_t *inline_value(const hr_frame_t *f, uint64_t *size)
{
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *e;
    (void)ds__rbuf_str(&r, &e);
    uint32_t n = ds__rbuf_u32(&r);
    uint8_t kind = ds__rbuf_u8(&r);
    *size = ds__rbuf_u64(&r);
    if (r.err || n != 1 || kind != DS_VAL_INLINE || *size != f->h.data_len) return NULL;
    return f->data;
}

/* Queues a SET of key announcing len bytes, of which the first sent are
 * queued; the rest the caller queues (or never sends). */
static uint64_t add_set(hr_conn_t *c, const char *key, const uint8_t *val, uint64_t len,
                        size_t sent)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_set(&m, key, len);
    uint64_t id = hr_add_raw(c, DS_OP_SET, 0, &m, len, val, sent);
    ds__wbuf_free(&m);
    return id;
}

/* n small set+get pairs through the client library; the slowest pair's
 * milliseconds, or -1 when one failed. */
static double small_ops(ds_client_t *c, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        char key[32], val[64], got[64];
        snprintf(key, sizeof(key), "small-%d", i % 8);
        snprintf(val, sizeof(val), "value-%d", i);
        size_t len = 0;
        uint64_t t0 = ds__now_ns();
        if (ds_kv_set(c, key, val, strlen(val), NULL) != DS_K_OK ||
            ds_kv_get_into(c, key, 0, got, sizeof(got), &len) != DS_K_OK || len != strlen(val) ||
            memcmp(got, val, len) != 0)
            return -1;
        double ms = (double)(ds__now_ns() - t0) / 1e6;
        if (ms > worst) worst = ms;
    }
    return worst;
}

static void test_set_paused_midway(void **state)
{
    (void)state;
    const uint64_t len = 8 * MIB;
    const size_t first = 3 * MIB + 12345;
    uint8_t *val = malloc(len);
    assert_non_null(val);
    dst_fill(val, len, 7);
    hr_conn_t a;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    uint64_t set_id = add_set(&a, "big", val, len, first);
    assert_int_equal(hr_flush(&a), 0);
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(b);
    /* The SET's data phase is open on a; b's operations go on. */
    double worst = small_ops(b, 200);
    printf("# 200 small set+get pairs while a SET waits for 5 MiB of its data: slowest %.1f ms\n",
           worst);
    assert_true(worst >= 0);
    assert_true(worst < 2000);
    /* The rest of the value, and a GET pipelined right behind it. */
    ds__wbuf_bytes(&a.out, val + first, len - first);
    uint64_t get_id = hr_get(&a, "small-1", 0, 0);
    assert_int_equal(hr_flush(&a), 0);
    hr_frame_t *fs = hr_answer(&a, set_id, ds__now_ms() + 10000);
    hr_frame_t *fg = hr_answer(&a, get_id, ds__now_ms() + 10000);
    assert_non_null(fs);
    assert_non_null(fg);
    printf("# SET status %u, pipelined GET status %u, answers in order: %s\n", fs->h.status,
           fg->h.status, a.got[0].h.req_id == set_id ? "yes" : "no");
    assert_int_equal(fs->h.status, 0);
    assert_int_equal(fg->h.status, 0);
    assert_int_equal(a.got[0].h.req_id, set_id);
    void *out = NULL;
    size_t got = 0;
    assert_int_equal(ds_kv_get(b, "big", 0, &out, &got), DS_K_OK);
    assert_int_equal(got, len);
    assert_true(dst_check(out, got, 7));
    ds_free(out);
    ds_client_close(b);
    hr_close(&a);
    free(val);
}

/* A SET that announces len, sends part, then half-closes (or closes). */
static void short_set(bool half_close)
{
    const uint64_t len = 4 * MIB;
    uint8_t *val = malloc(len);
    assert_non_null(val);
    dst_fill(val, len, 9);
    double used0 = dst_stat(&W, "arena.used_bytes");
    hr_conn_t a;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    add_set(&a, "short", val, len, len / 2 + 777);
    assert_int_equal(hr_flush(&a), 0);
    if (half_close)
        shutdown(a.fd, SHUT_WR);
    else
        hr_close(&a);
    /* The worker sees the end, closes the connection and drops the range. */
    int closed = half_close ? 0 : 1;
    if (half_close) {
        hr_frame_t f;
        int rc = hr_read_frame(&a, &f, ds__now_ms() + 5000);
        if (rc == 0) hr_frame_free(&f);
        closed = rc != 0 && errno == ECONNRESET;
        hr_close(&a);
    }
    double used = -1;
    for (int i = 0; i < 100; i++) {
        used = dst_stat(&W, "arena.used_bytes");
        if (used <= used0) break;
        usleep(20000);
    }
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(b);
    void *out = NULL;
    size_t got = 0;
    ds_status_t st = ds_kv_get(b, "short", 0, &out, &got);
    printf("# %s after %llu of %llu bytes: connection closed by the worker %s, GET %s, arena "
           "used %.0f bytes (before %.0f)\n",
           half_close ? "half-close" : "close", (unsigned long long)(len / 2 + 777),
           (unsigned long long)len, closed ? "yes" : "no", ds_status_name(st), used, used0);
    assert_true(closed);
    assert_int_equal(st, DS_K_NOT_FOUND);
    assert_true(used <= used0);
    assert_true(small_ops(b, 20) >= 0);
    ds_client_close(b);
    free(val);
}

static void test_set_short_half_close(void **state)
{
    (void)state;
    short_set(true);
}

static void test_set_short_close(void **state)
{
    (void)state;
    short_set(false);
}

static void test_garbage_after_value(void **state)
{
    (void)state;
    const uint64_t len = 2 * MIB + 3;
    uint8_t *val = malloc(len);
    assert_non_null(val);
    dst_fill(val, len, 11);
    hr_conn_t a;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    uint64_t id = add_set(&a, "g", val, len, len);
    static const char junk[64] = "this is not a frame header, nor is the rest of it";
    ds__wbuf_bytes(&a.out, junk, sizeof(junk));
    assert_int_equal(hr_flush(&a), 0);
    hr_frame_t *f = hr_answer(&a, id, ds__now_ms() + 10000);
    hr_frame_t err;
    int rc = -1;
    if (f) rc = hr_read_frame(&a, &err, ds__now_ms() + 5000);
    uint32_t est = rc == 0 ? err.h.status : UINT32_MAX;
    hr_frame_t tail;
    int closed = rc == 0 ? hr_read_frame(&a, &tail, ds__now_ms() + 5000) : -1;
    printf("# SET status %d, then an answer of status %d (%s), then the connection %s\n",
           f ? (int)f->h.status : -1, est == UINT32_MAX ? -1 : (int)est, rc == 0 ? err.err : "",
           closed != 0 ? "closed" : "still open");
    assert_non_null(f);
    assert_int_equal(f->h.status, 0);
    assert_int_equal(rc, 0);
    assert_int_equal(est, DS_K_INVALID);
    assert_non_null(strstr(err.err, "bad frame magic"));
    assert_int_not_equal(closed, 0);
    hr_frame_free(&err);
    hr_close(&a);
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(b);
    void *out = NULL;
    size_t got = 0;
    assert_int_equal(ds_kv_get(b, "g", 0, &out, &got), DS_K_OK);
    assert_int_equal(got, len);
    assert_true(dst_check(out, got, 11));
    ds_free(out);
    ds_client_close(b);
    free(val);
}

static void test_large_answers_in_order(void **state)
{
    (void)state;
    ds_client_t *b = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(b);
    const size_t sizes[3] = {MIB, 3 * MIB, 5};
    const char *keys[3] = {"one-mib", "three-mib", "tiny"};
    for (int i = 0; i < 3; i++) {
        uint8_t *v = malloc(sizes[i]);
        assert_non_null(v);
        dst_fill(v, sizes[i], 20 + (uint64_t)i);
        assert_int_equal(ds_kv_set(b, keys[i], v, sizes[i], NULL), DS_K_OK);
        free(v);
    }
    /* 1 MiB answers are the loop's while its turn's budget lasts, then the
     * sender thread's; the 3 MiB one is always the sender thread's. */
    const int order[8] = {0, 0, 0, 1, 2, 0, 1, 2};
    hr_conn_t a;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    uint64_t ids[8];
    for (int i = 0; i < 8; i++)
        ids[i] = hr_get(&a, keys[order[i]], 0, 0);
    assert_int_equal(hr_flush(&a), 0);
    uint32_t n = hr_collect(&a, 8, ds__now_ms() + 20000);
    int good = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t size = 0;
        const uint8_t *p = inline_value(&a.got[i], &size);
        int k = order[i];
        if (a.got[i].h.req_id == ids[i] && a.got[i].h.status == 0 && p && size == sizes[k] &&
            dst_check(p, size, 20 + (uint64_t)k))
            good++;
    }
    printf("# 8 pipelined GETs (1 MiB x4, 3 MiB x2, 5 B x2): %u answered, %d in order and intact\n",
           n, good);
    assert_int_equal(n, 8);
    assert_int_equal(good, 8);
    hr_close(&a);
    ds_client_close(b);
}

static void test_sets_64k_pipelined(void **state)
{
    (void)state;
    const size_t len = 64 * 1024;
    uint8_t *v = malloc(3 * len);
    assert_non_null(v);
    hr_conn_t a;
    assert_int_equal(hr_open_hello(&a, &W, false), 0);
    uint64_t sets[3], gets[3];
    char keys[3][16];
    for (int i = 0; i < 3; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k64-%d", i);
        dst_fill(v + (size_t)i * len, len, 40 + (uint64_t)i);
        sets[i] = add_set(&a, keys[i], v + (size_t)i * len, len, len);
    }
    for (int i = 0; i < 3; i++)
        gets[i] = hr_get(&a, keys[i], 0, 0);
    assert_int_equal(hr_flush(&a), 0);
    int good = 0;
    for (int i = 0; i < 3; i++) {
        hr_frame_t *fs = hr_answer(&a, sets[i], ds__now_ms() + 5000);
        hr_frame_t *fg = hr_answer(&a, gets[i], ds__now_ms() + 5000);
        uint64_t size = 0;
        const uint8_t *p = fg ? inline_value(fg, &size) : NULL;
        if (fs && fs->h.status == 0 && p && size == len && dst_check(p, len, 40 + (uint64_t)i))
            good++;
    }
    printf("# 3 pipelined 64 KiB SETs, then their GETs: %d of 3 stored and read back intact\n",
           good);
    assert_int_equal(good, 3);
    hr_close(&a);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_set_paused_midway, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_set_short_half_close, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_set_short_close, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_garbage_after_value, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_large_answers_in_order, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_sets_64k_pipelined, start_worker, stop_worker),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
