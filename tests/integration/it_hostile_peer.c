/* Hostile clients speaking as peers, against a standalone worker (the
 * cluster side is tests/cluster/ct_peers.c), in the raw protocol
 * (it_hostile_raw.h):
 *
 * - the peer flag from a client: a DEL carrying DS_FLAG_PEER would skip the
 *   read latches another session holds (and in a cluster act on this worker
 *   alone). It is refused K_NOT_AUTHORIZED, naming the operation; the latched
 *   key stays, and the connection keeps serving. A SET carrying the flag is
 *   refused too, its data skipped, the stored value unchanged.
 * - header flags a request may not set: an unknown bit is refused K_INVALID
 *   (not ignored), on a connection that keeps working.
 * - peer operations from a client: LOCATE, META_PUT, META_DEL, DROP and
 *   UCX_PULL are refused K_NOT_AUTHORIZED on the Unix socket and over TCP;
 *   PEER_AUTH on a standalone worker is K_NOT_SUPPORTED.
 *
 * Each test prints what it saw before asserting. */
#include "harness.h"
#include "it_hostile_raw.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static dst_worker_t W;

static int start_worker(void **state)
{
    (void)state;
    return dst_worker_start(&W, 64, NULL);
}

static int stop_worker(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

static uint64_t add_keys_op(hr_conn_t *c, uint16_t op, uint8_t flags, const char *key)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_keys(&m, key);
    uint64_t id = hr_add_raw(c, op, flags, &m, 0, NULL, 0);
    ds__wbuf_free(&m);
    return id;
}

static uint32_t status_of(hr_conn_t *c, uint64_t id, int timeout_ms, const char *what)
{
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + (uint64_t)timeout_ms);
    char d[512];
    printf("# %s: %s\n", what, hr_describe(f, d, sizeof(d)));
    return f ? f->h.status : UINT32_MAX;
}

static const char *err_of(hr_conn_t *c, uint64_t id)
{
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + 100);
    return f ? f->err : "";
}

static void test_peer_flag_del_skips_no_latch(void **state)
{
    (void)state;
    ds_client_t *owner = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(owner);
    const char *key = "latched";
    assert_int_equal(ds_kv_set(owner, key, "value", 5, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(owner, 1, &key, 60000, NULL), DS_K_OK);

    for (int tcp = 0; tcp < 2; tcp++) {
        hr_conn_t c;
        assert_int_equal(hr_open_hello(&c, &W, !tcp), 0);
        uint64_t del = add_keys_op(&c, DS_OP_DEL, DS_FLAG_PEER, key);
        uint64_t health = hr_health(&c);
        assert_int_equal(hr_flush(&c), 0);
        /* Refused at once: not parked behind the latch, not run past it. */
        assert_int_equal(status_of(&c, del, 3000, "DEL with the peer flag"), DS_K_NOT_AUTHORIZED);
        assert_non_null(strstr(err_of(&c, del), "del"));
        assert_non_null(strstr(err_of(&c, del), "peer"));
        assert_int_equal(status_of(&c, health, 3000, "HEALTH after it"), DS_K_OK);
        hr_close(&c);
    }
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(owner, key, 0, &v, &len), DS_K_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(v, "value", 5);
    ds_free(v);
    assert_true(dst_stat(&W, "clients.requests_refused") >= 2);
    ds_client_close(owner);
}

static void test_peer_flag_set_refused(void **state)
{
    (void)state;
    ds_client_t *cl = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(cl);
    assert_int_equal(ds_kv_set(cl, "kept", "original", 8, NULL), DS_K_OK);
    hr_conn_t c;
    assert_int_equal(hr_open_hello(&c, &W, false), 0);
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_set(&m, "kept", 7);
    uint64_t set = hr_add_raw(&c, DS_OP_SET, DS_FLAG_PEER, &m, 7, "forged!", 7);
    ds__wbuf_free(&m);
    uint64_t get = hr_get(&c, "kept", 0, 0);
    assert_int_equal(hr_flush(&c), 0);
    assert_int_equal(status_of(&c, set, 3000, "SET with the peer flag"), DS_K_NOT_AUTHORIZED);
    assert_int_equal(status_of(&c, get, 3000, "GET after it"), DS_K_OK);
    char val[32];
    assert_int_equal(hr_get_value(hr_answer(&c, get, ds__now_ms() + 100), val, sizeof(val), NULL),
                     DS_VAL_INLINE);
    assert_string_equal(val, "original");
    hr_close(&c);
    ds_client_close(cl);
}

static void test_unknown_flags_refused(void **state)
{
    (void)state;
    static const uint8_t bad[] = {0x10, 0x20, 0x40, 0x80, 0x10 | DS_FLAG_NOREPLY};
    hr_conn_t c;
    assert_int_equal(hr_open_hello(&c, &W, false), 0);
    uint64_t ids[sizeof(bad)];
    for (size_t i = 0; i < sizeof(bad); i++)
        ids[i] = hr_add_raw(&c, DS_OP_HEALTH, bad[i], NULL, 0, NULL, 0);
    uint64_t ok = hr_health(&c);
    assert_int_equal(hr_flush(&c), 0);
    for (size_t i = 0; i < sizeof(bad); i++) {
        char what[64];
        snprintf(what, sizeof(what), "HEALTH with flags 0x%02x", bad[i]);
        /* Refused even when it asks for no answer: the refusal is the answer. */
        assert_int_equal(status_of(&c, ids[i], 3000, what), DS_K_INVALID);
        assert_non_null(strstr(err_of(&c, ids[i]), "flags"));
    }
    assert_int_equal(status_of(&c, ok, 3000, "plain HEALTH"), DS_K_OK);
    hr_close(&c);
}

static void test_peer_ops_refused(void **state)
{
    (void)state;
    static const uint16_t ops[] = {DS_OP_LOCATE, DS_OP_META_PUT, DS_OP_META_DEL, DS_OP_DROP,
                                   DS_OP_UCX_PULL};
    for (int tcp = 0; tcp < 2; tcp++) {
        hr_conn_t c;
        assert_int_equal(hr_open_hello(&c, &W, !tcp), 0);
        uint64_t ids[5];
        for (int i = 0; i < 5; i++) {
            ds_wbuf_t m;
            ds__wbuf_init(&m);
            ds__wbuf_u32(&m, 0);
            ids[i] = hr_add(&c, ops[i], &m, NULL, 0);
            ds__wbuf_free(&m);
        }
        ds_wbuf_t m;
        ds__wbuf_init(&m);
        ds__wbuf_u8(&m, 1);
        ds__wbuf_cstr(&m, "127.0.0.1:9");
        ds__wbuf_cstr(&m, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
        uint64_t pa = hr_add(&c, DS_OP_PEER_AUTH, &m, NULL, 0);
        ds__wbuf_free(&m);
        uint64_t health = hr_health(&c);
        assert_int_equal(hr_flush(&c), 0);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(status_of(&c, ids[i], 3000, ds__opcode_name(ops[i])),
                             DS_K_NOT_AUTHORIZED);
            assert_non_null(strstr(err_of(&c, ids[i]), ds__opcode_name(ops[i])));
        }
        assert_int_equal(status_of(&c, pa, 3000, "PEER_AUTH standalone"), DS_K_NOT_SUPPORTED);
        assert_int_equal(status_of(&c, health, 3000, "HEALTH after them"), DS_K_OK);
        hr_close(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_peer_flag_del_skips_no_latch, start_worker,
                                        stop_worker),
        cmocka_unit_test_setup_teardown(test_peer_flag_set_refused, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_unknown_flags_refused, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_peer_ops_refused, start_worker, stop_worker),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
