/* The heterogeneous client on the host device backend, against a real
 * worker, local (arena) and remote (TCP): pages set from several blobs come
 * back byte-exact into blobs split another way and from an offset; a key
 * missing or too short for its blobs fails alone while the others succeed;
 * async calls give the same bytes and statuses as the synchronous ones;
 * bad arguments are DS_K_INVALID naming what was wrong; a get that waits
 * returns once another client publishes the key. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ds/hetero_client.h"

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    setenv("DS_DEVICE_BACKEND", "host", 1);
    return dst_worker_start(&W, 128, NULL);
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

static ds_hetero_t *connect_h(ds_transport_t t)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = t;
    o.unix_socket_dir = W.sockdir[0] ? W.sockdir : NULL;
    ds_hetero_t *h = NULL;
    assert_int_equal(ds_hetero_connect(&o, false, &h), DS_K_OK);
    assert_non_null(h);
    return h;
}

#define NPAGES 8
#define PAGE 65536

static void pages_roundtrip(ds_transport_t t, const char *tag)
{
    ds_hetero_t *h = connect_h(t);
    assert_string_equal(ds_device_backend_name(), "host");
    /* Each key: two blobs (a K and a V page), from "device" memory. */
    uint8_t *src = malloc((size_t)NPAGES * 2 * PAGE), *dst = calloc((size_t)NPAGES * 2, PAGE);
    assert_non_null(src);
    assert_non_null(dst);
    dst_fill(src, (size_t)NPAGES * 2 * PAGE, 43);
    char names[NPAGES][64];
    const char *keys[NPAGES];
    ds_blob_t blobs[NPAGES][2], oblobs[NPAGES][3];
    ds_device_blob_list_t lists[NPAGES], olists[NPAGES];
    for (int i = 0; i < NPAGES; i++) {
        snprintf(names[i], sizeof names[i], "hetero-%s-%d", tag, i);
        keys[i] = names[i];
        blobs[i][0] = (ds_blob_t){(uint64_t)(uintptr_t)(src + (size_t)i * PAGE), PAGE};
        blobs[i][1] = (ds_blob_t){(uint64_t)(uintptr_t)(src + (size_t)(NPAGES + i) * PAGE), PAGE};
        lists[i] = (ds_device_blob_list_t){blobs[i], 2, 0, 0};
        /* Read back split three ways: 100 bytes, the rest of page 1, page 2. */
        uint8_t *d = dst + (size_t)i * 2 * PAGE;
        oblobs[i][0] = (ds_blob_t){(uint64_t)(uintptr_t)d, 100};
        oblobs[i][1] = (ds_blob_t){(uint64_t)(uintptr_t)(d + 100), PAGE - 100};
        oblobs[i][2] = (ds_blob_t){(uint64_t)(uintptr_t)(d + PAGE), PAGE};
        olists[i] = (ds_device_blob_list_t){oblobs[i], 3, -1, 0};
    }
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    ds_status_t st[NPAGES];
    assert_int_equal(ds_hetero_mset_d2h(h, NPAGES, keys, lists, &p, st), DS_K_OK);
    for (int i = 0; i < NPAGES; i++)
        assert_int_equal(st[i], DS_K_OK);
    assert_int_equal(ds_hetero_mget_h2d(h, NPAGES, keys, olists, 0, st), DS_K_OK);
    for (int i = 0; i < NPAGES; i++) {
        assert_int_equal(st[i], DS_K_OK);
        assert_memory_equal(dst + (size_t)i * 2 * PAGE, src + (size_t)i * PAGE, PAGE);
        assert_memory_equal(dst + (size_t)i * 2 * PAGE + PAGE, src + (size_t)(NPAGES + i) * PAGE,
                            PAGE);
    }
    /* The value is the blobs' concatenation for a plain KV reader too. */
    void *val = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(ds_hetero_kv(h), keys[3], 0, &val, &len), DS_K_OK);
    assert_int_equal(len, 2 * PAGE);
    assert_memory_equal(val, src + 3 * PAGE, PAGE);
    ds_free(val);

    /* src_offset: the second page alone. */
    uint8_t one[PAGE];
    ds_blob_t ob = {(uint64_t)(uintptr_t)one, PAGE};
    ds_device_blob_list_t ol = {&ob, 1, 0, PAGE};
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &keys[5], &ol, 0, st), DS_K_OK);
    assert_memory_equal(one, src + (size_t)(NPAGES + 5) * PAGE, PAGE);

    /* One key missing and one too short fail alone. */
    const char *mixed[3] = {keys[0], "hetero-missing", keys[1]};
    ds_device_blob_list_t ml[3] = {olists[0], olists[1], olists[2]};
    ml[2].src_offset = 1; /* 1 byte short */
    memset(dst, 0, (size_t)NPAGES * 2 * PAGE);
    assert_int_equal(ds_hetero_mget_h2d(h, 3, mixed, ml, 0, st), DS_K_OK);
    assert_int_equal(st[0], DS_K_OK);
    assert_int_equal(st[1], DS_K_NOT_FOUND);
    assert_int_equal(st[2], DS_K_INVALID);
    assert_memory_equal(dst, src, PAGE);
    /* All failing: the first failure's code and message. */
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &mixed[1], &ml[1], 0, st), DS_K_NOT_FOUND);
    assert_non_null(strstr(ds_last_error(), "hetero-missing"));

    /* Async: the same bytes and statuses. */
    memset(dst, 0, (size_t)NPAGES * 2 * PAGE);
    ds_future_t *f = NULL;
    assert_int_equal(ds_hetero_async_mget_h2d(h, NPAGES, keys, olists, 0, &f), DS_K_OK);
    assert_int_equal(ds_future_count(f), NPAGES);
    assert_int_equal(ds_future_get(f, 60000, st), DS_K_OK);
    for (int i = 0; i < NPAGES; i++)
        assert_int_equal(st[i], DS_K_OK);
    assert_memory_equal(dst, src, PAGE);
    ds_future_release(f);
    ds_future_t *fs = NULL;
    dst_fill(src, PAGE, 44);
    assert_int_equal(ds_hetero_async_mset_d2h(h, 1, keys, lists, &p, &fs), DS_K_OK);
    assert_int_equal(ds_future_get(fs, -1, st), DS_K_OK);
    ds_future_release(fs);
    assert_int_equal(ds_hetero_mget_h2d(h, 1, keys, olists, 0, st), DS_K_OK);
    assert_memory_equal(dst, src, PAGE);
    ds_future_t *fm = NULL;
    assert_int_equal(ds_hetero_async_mget_h2d(h, 1, &mixed[1], &ml[1], 0, &fm), DS_K_OK);
    assert_int_equal(ds_future_get(fm, 60000, st), DS_K_NOT_FOUND);
    assert_int_equal(st[0], DS_K_NOT_FOUND);
    ds_future_release(fm);

    assert_int_equal(ds_kv_del(ds_hetero_kv(h), NPAGES, keys, NULL), DS_K_OK);
    ds_hetero_close(h);
    free(src);
    free(dst);
}

static void test_pages_local(void **state)
{
    (void)state;
    pages_roundtrip(DS_TRANSPORT_LOCAL, "l");
}

static void test_pages_tcp(void **state)
{
    (void)state;
    pages_roundtrip(DS_TRANSPORT_TCP, "r");
}

static void test_bad_arguments(void **state)
{
    (void)state;
    ds_hetero_t *h = connect_h(DS_TRANSPORT_AUTO);
    uint8_t page[64];
    ds_blob_t b = {(uint64_t)(uintptr_t)page, sizeof page};
    ds_blob_t zero = {(uint64_t)(uintptr_t)page, 0}, null = {0, 64};
    const char *k = "hetero-bad";
    ds_device_blob_list_t l = {&b, 1, 0, 0};
    ds_status_t st[1];
    assert_int_equal(ds_hetero_mset_d2h(h, 0, &k, &l, NULL, st), DS_K_INVALID);
    ds_device_blob_list_t empty = {&b, 0, 0, 0};
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &k, &empty, NULL, st), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "hetero-bad"));
    ds_device_blob_list_t lz = {&zero, 1, 0, 0}, ln = {&null, 1, 0, 0};
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &k, &lz, NULL, st), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "size of 0"));
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &k, &ln, 0, st), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "NULL pointer"));
    ds_device_blob_list_t l7 = {&b, 1, 7, 0};
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &k, &l7, NULL, st), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "device index 7"));
    bool ex = true;
    assert_int_equal(ds_kv_exist(ds_hetero_kv(h), 1, &k, &ex), DS_K_OK);
    assert_false(ex);
    const char *badkey = "bad key";
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &badkey, &l, NULL, st), DS_K_INVALID);
    uint64_t ptr = (uint64_t)(uintptr_t)page, sz = 0;
    assert_int_equal(ds_hetero_pre_register_device_memory(h, 1, &ptr, &sz), DS_K_INVALID);
    sz = sizeof page;
    assert_int_equal(ds_hetero_pre_register_device_memory(h, 1, &ptr, &sz), DS_K_OK);
    ds_hetero_close(h);
}

typedef struct {
    const char *key;
    const uint8_t *bytes;
} later_t;

static void *set_later(void *arg)
{
    later_t *l = arg;
    usleep(200 * 1000);
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    if (c) {
        ds_kv_set(c, l->key, l->bytes, 4096, NULL);
        ds_client_close(c);
    }
    return NULL;
}

static void test_get_waits_for_publish(void **state)
{
    (void)state;
    ds_hetero_t *h = connect_h(DS_TRANSPORT_AUTO);
    uint8_t want[4096], got[4096] = {0};
    dst_fill(want, sizeof want, 7);
    later_t l = {"hetero-later", want};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, set_later, &l), 0);
    ds_blob_t b = {(uint64_t)(uintptr_t)got, sizeof got};
    ds_device_blob_list_t bl = {&b, 1, 0, 0};
    ds_status_t st[1];
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &l.key, &bl, 30000, st), DS_K_OK);
    assert_memory_equal(got, want, sizeof want);
    pthread_join(th, NULL);
    /* The device helpers copy through the same backend. */
    uint64_t d = 0;
    assert_int_equal(ds_device_malloc(0, sizeof want, &d), DS_K_OK);
    assert_int_equal(ds_device_memcpy(d, (uint64_t)(uintptr_t)want, sizeof want, DS_COPY_H2D),
                     DS_K_OK);
    memset(got, 0, sizeof got);
    assert_int_equal(ds_device_memcpy((uint64_t)(uintptr_t)got, d, sizeof got, DS_COPY_D2H),
                     DS_K_OK);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(ds_device_free(d), DS_K_OK);
    ds_hetero_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pages_local),
        cmocka_unit_test(test_pages_tcp),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_get_waits_for_publish),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
