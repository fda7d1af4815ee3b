/* Yuanrong drop-in behaviours against a real worker: L2 write modes are
 * accepted, NX keeps existing values without failing, partial reads move
 * only the range, read latches hold writers back, global reference counts
 * delete an object at zero, and a trace id reaches the worker's log. */
#include "harness.h"
#include "it_hostile_raw.h"

#include "common/clock.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 64, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

static void want_value(ds_client_t *c, const char *key, const char *want)
{
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &v, &len), DS_K_OK);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(v, want, len);
    ds_free(v);
}

static void test_l2_write_modes_accepted(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_write_mode_t modes[3] = {DS_WRITE_THROUGH_L2_CACHE, DS_WRITE_BACK_L2_CACHE,
                                DS_WRITE_BACK_L2_CACHE_EVICT};
    for (int i = 0; i < 3; i++) {
        ds_set_param_t p = DS_SET_PARAM_INIT;
        p.write_mode = modes[i];
        char key[32];
        snprintf(key, sizeof(key), "l2-mode-%d", (int)modes[i]);
        assert_int_equal(ds_kv_set(c, key, "cached", 6, &p), DS_K_OK);
        want_value(c, key, "cached");
    }
    ds_client_close(c);
    /* A mode outside 0..4, sent raw (the client refuses it itself). */
    hr_conn_t rc;
    assert_int_equal(hr_open_hello(&rc, &W, true), 0);
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, 9);
    ds__wbuf_u32(&m, 0);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, 1);
    ds__wbuf_cstr(&m, "mode-9");
    ds__wbuf_u64(&m, 1);
    uint64_t id = hr_add(&rc, DS_OP_SET, &m, "x", 1);
    ds__wbuf_free(&m);
    assert_int_equal(hr_flush(&rc), 0);
    hr_frame_t *f = hr_answer(&rc, id, ds__now_ms() + 3000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_INVALID);
    assert_non_null(strstr(f->err, "not one of 0..4"));
    hr_close(&rc);
}

static void test_nx_keeps_old_value(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.existence = DS_EXISTENCE_NX;
    assert_int_equal(ds_kv_set(c, "nx-a", "old", 3, &p), DS_K_OK);
    /* As in Yuanrong: an existing key is a success that keeps its value. */
    assert_int_equal(ds_kv_set(c, "nx-a", "new", 3, &p), DS_K_OK);
    want_value(c, "nx-a", "old");
    const char *keys[2] = {"nx-a", "nx-b"};
    const void *vals[2] = {"zz", "bb"};
    size_t lens[2] = {2, 2};
    ds_status_t st[2] = {DS_K_RUNTIME_ERROR, DS_K_RUNTIME_ERROR};
    assert_int_equal(ds_kv_mset(c, 2, keys, vals, lens, &p, st), DS_K_OK);
    assert_int_equal(st[0], DS_K_OK);
    assert_int_equal(st[1], DS_K_OK);
    want_value(c, "nx-a", "old");
    want_value(c, "nx-b", "bb");
    /* A large value goes CREATE + PUBLISH on a local client: same rule. */
    static char big[200000];
    memset(big, 'q', sizeof(big));
    assert_int_equal(ds_kv_set(c, "nx-a", big, sizeof(big), &p), DS_K_OK);
    want_value(c, "nx-a", "old");
    ds_client_close(c);
}

static void check_read(ds_transport_t t)
{
    ds_client_t *c = dst_connect(&W, t);
    static char big[300000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    assert_int_equal(ds_kv_set(c, "rd-big", big, sizeof(big), NULL), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "rd-small", "0123456789", 10, NULL), DS_K_OK);
    ds_read_param_t p[5] = {{"rd-big", 100000, 26},
                            {"rd-small", 3, 4},
                            {"rd-small", 7, 0},  /* to the end */
                            {"rd-small", 11, 1}, /* beyond the size */
                            {"rd-missing", 0, 1}};
    ds_buffer_t *out[5];
    ds_status_t st[5];
    assert_int_equal(ds_kv_read(c, 5, p, out, st), DS_K_OK);
    assert_int_equal(st[0], DS_K_OK);
    assert_int_equal(ds_buffer_size(out[0]), 26);
    assert_memory_equal(ds_buffer_data(out[0]), big + 100000, 26);
    assert_int_equal(ds_buffer_size(out[1]), 4);
    assert_memory_equal(ds_buffer_data(out[1]), "3456", 4);
    assert_int_equal(ds_buffer_size(out[2]), 3);
    assert_memory_equal(ds_buffer_data(out[2]), "789", 3);
    assert_int_equal(st[3], DS_K_INVALID);
    assert_null(out[3]);
    assert_int_equal(st[4], DS_K_NOT_FOUND);
    assert_null(out[4]);
    for (int i = 0; i < 5; i++)
        ds_buffer_release(out[i]);
    /* Nothing readable: the first failure's code. */
    ds_read_param_t bad = {"rd-small", 50, 1};
    assert_int_equal(ds_kv_read(c, 1, &bad, out, NULL), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "beyond"));
    ds_client_close(c);
}

static void test_read_ranges_local(void **state)
{
    (void)state;
    check_read(DS_TRANSPORT_LOCAL);
}

static void test_read_ranges_tcp(void **state)
{
    (void)state;
    check_read(DS_TRANSPORT_TCP);
}

typedef struct {
    ds_client_t *c;
    const char *key;
    bool del;
    uint64_t took_ms;
    ds_status_t st;
} writer_t;

static void *writer(void *arg)
{
    writer_t *w = arg;
    uint64_t t0 = ds__now_ms();
    if (w->del)
        w->st = ds_kv_del(w->c, 1, &w->key, NULL);
    else
        w->st = ds_kv_set(w->c, w->key, "new", 3, NULL);
    w->took_ms = ds__now_ms() - t0;
    return NULL;
}

static void run_writer(writer_t *w, pthread_t *th)
{
    assert_int_equal(pthread_create(th, NULL, writer, w), 0);
}

static void test_read_latch_holds_writers(void **state)
{
    (void)state;
    ds_client_t *reader = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_client_t *wr = dst_connect(&W, DS_TRANSPORT_TCP);
    const char *key = "latched";
    assert_int_equal(ds_kv_set(wr, key, "old", 3, NULL), DS_K_OK);
    ds_status_t st;
    assert_int_equal(ds_kv_rlatch(reader, 1, &key, 10000, &st), DS_K_OK);
    /* a set waits until the latch is released */
    writer_t w = {.c = wr, .key = key};
    pthread_t th;
    run_writer(&w, &th);
    usleep(300 * 1000);
    want_value(reader, key, "old");
    assert_int_equal(ds_kv_unrlatch(reader, 1, &key, NULL), DS_K_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DS_K_OK);
    assert_true(w.took_ms >= 250);
    want_value(reader, key, "new");
    /* releasing twice: nothing held */
    assert_int_equal(ds_kv_unrlatch(reader, 1, &key, NULL), DS_K_NOT_FOUND);
    /* a latch that times out lets the writer through after its timeout */
    assert_int_equal(ds_kv_rlatch(reader, 1, &key, 400, NULL), DS_K_OK);
    writer_t w2 = {.c = wr, .key = key, .del = true};
    run_writer(&w2, &th);
    pthread_join(th, NULL);
    assert_int_equal(w2.st, DS_K_OK);
    assert_true(w2.took_ms >= 300 && w2.took_ms < 3000);
    assert_int_equal(ds_kv_get(reader, key, 0, &(void *){NULL}, &(size_t){0}), DS_K_NOT_FOUND);
    /* a missing key cannot be latched */
    assert_int_equal(ds_kv_rlatch(reader, 1, &key, 1000, &st), DS_K_NOT_FOUND);
    assert_int_equal(st, DS_K_NOT_FOUND);
    /* the latches of a client that closes are released */
    assert_int_equal(ds_kv_set(wr, key, "v1", 2, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(reader, 1, &key, 10000, NULL), DS_K_OK);
    writer_t w3 = {.c = wr, .key = key};
    run_writer(&w3, &th);
    usleep(200 * 1000);
    ds_client_close(reader);
    pthread_join(th, NULL);
    assert_int_equal(w3.st, DS_K_OK);
    assert_true(w3.took_ms >= 150 && w3.took_ms < 5000);
    want_value(wr, key, "new");
    ds_client_close(wr);
}

static void test_global_refs(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    const char *keys[2] = {"obj-1", "obj-2"};
    ds_status_t st[2];
    uint32_t n = 99;
    /* referenced before it is put */
    assert_int_equal(ds_object_g_increase_ref(c, 2, keys, st), DS_K_OK);
    assert_int_equal(ds_object_g_increase_ref(c, 1, keys, st), DS_K_OK);
    assert_int_equal(ds_object_query_global_ref_num(c, "obj-1", &n), DS_K_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ds_kv_set(c, "obj-1", "payload", 7, NULL), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "obj-2", "payload", 7, NULL), DS_K_OK);
    assert_int_equal(ds_object_g_decrease_ref(c, 2, keys, st), DS_K_OK);
    /* obj-1 still has one reference; obj-2 had its last: deleted */
    want_value(c, "obj-1", "payload");
    bool ex[2];
    assert_int_equal(ds_kv_exist(c, 2, keys, ex), DS_K_OK);
    assert_true(ex[0]);
    assert_false(ex[1]);
    assert_int_equal(ds_object_g_decrease_ref(c, 2, keys, st), DS_K_OK);
    assert_int_equal(st[0], DS_K_OK);
    assert_int_equal(st[1], DS_K_NOT_FOUND);
    assert_int_equal(ds_kv_exist(c, 1, keys, ex), DS_K_OK);
    assert_false(ex[0]);
    assert_int_equal(ds_object_query_global_ref_num(c, "obj-1", &n), DS_K_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ds_object_g_decrease_ref(c, 1, keys, st), DS_K_NOT_FOUND);
    ds_client_close(c);
}

static bool log_has(const char *needle)
{
    FILE *f = fopen(W.logpath, "r");
    if (f == NULL) return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static void test_trace_id_in_worker_log(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    assert_int_equal(ds_context_set_trace_id("bad id"), DS_K_INVALID);
    assert_int_equal(ds_context_set_trace_id("trace-7f3a.1"), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "traced", "v", 1, NULL), DS_K_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, "traced-missing", 0, &v, &len), DS_K_NOT_FOUND);
    assert_int_equal(ds_context_set_trace_id(NULL), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "untraced", "v", 1, NULL), DS_K_OK);
    ds_client_close(c);
    usleep(100 * 1000);
    assert_true(log_has("[trace-7f3a.1]"));
    assert_true(log_has("[trace-7f3a.1] conn"));
    assert_true(log_has("K_NOT_FOUND: key 'traced-missing' not found"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_l2_write_modes_accepted),  cmocka_unit_test(test_nx_keeps_old_value),
        cmocka_unit_test(test_read_ranges_local),        cmocka_unit_test(test_read_ranges_tcp),
        cmocka_unit_test(test_read_latch_holds_writers), cmocka_unit_test(test_global_refs),
        cmocka_unit_test(test_trace_id_in_worker_log),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
