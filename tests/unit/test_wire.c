/* The wire codec: header round trip and validation, metadata writer/reader
 * round trip, and the reader's bounds checks on truncated or hostile input. */
#include "common/wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

static void test_header_roundtrip(void **state)
{
    (void)state;
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = DS_FLAG_RESPONSE | DS_FLAG_NOREPLY,
                          .opcode = DS_OP_GET,
                          .status = 2004,
                          .meta_len = 77,
                          .req_id = 0x0102030405060708ull,
                          .data_len = 1ull << 33};
    uint8_t b[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, b);
    assert_int_equal(b[0], 0x59); /* little-endian magic "YRDS" */
    ds_wire_header_t g;
    char err[128];
    assert_int_equal(ds__wire_header_decode(b, 1ull << 34, &g, err, sizeof(err)), 0);
    assert_int_equal(g.opcode, DS_OP_GET);
    assert_int_equal(g.flags, h.flags);
    assert_int_equal(g.status, 2004);
    assert_int_equal(g.meta_len, 77);
    assert_int_equal(g.req_id, h.req_id);
    assert_int_equal(g.data_len, h.data_len);
}

static void test_header_rejects(void **state)
{
    (void)state;
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = DS_OP_SET,
                          .meta_len = 10,
                          .data_len = 100};
    uint8_t b[DS_WIRE_HEADER_LEN];
    ds_wire_header_t g;
    char err[128];
    ds__wire_header_encode(&h, b);
    assert_int_equal(ds__wire_header_decode(b, 99, &g, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "exceeds"));
    b[0] ^= 1;
    assert_int_equal(ds__wire_header_decode(b, 1000, &g, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "magic"));
    h.opcode = 0;
    ds__wire_header_encode(&h, b);
    assert_int_equal(ds__wire_header_decode(b, 1000, &g, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "opcode"));
    h.opcode = DS_OP_GET;
    h.version = 9;
    ds__wire_header_encode(&h, b);
    assert_int_equal(ds__wire_header_decode(b, 1000, &g, err, sizeof(err)), -1);
    h.version = DS_WIRE_VERSION;
    h.meta_len = DS_WIRE_MAX_META + 1;
    ds__wire_header_encode(&h, b);
    assert_int_equal(ds__wire_header_decode(b, 1000, &g, err, sizeof(err)), -1);
    assert_string_equal(ds__opcode_name(DS_OP_QSIZE), "query_size");
    assert_null(ds__opcode_name(4242));
}

static void test_meta_roundtrip(void **state)
{
    (void)state;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_u8(&w, 3);
    ds__wbuf_u32(&w, 0xdeadbeef);
    ds__wbuf_i32(&w, -5);
    ds__wbuf_u64(&w, 1ull << 60);
    ds__wbuf_cstr(&w, "hello");
    ds__wbuf_str(&w, "", 0);
    for (int i = 0; i < 1000; i++)
        ds__wbuf_u32(&w, (uint32_t)i); /* forces growth */
    assert_false(w.oom);
    ds_rbuf_t r;
    ds__rbuf_init(&r, w.buf, w.len);
    assert_int_equal(ds__rbuf_u8(&r), 3);
    assert_int_equal(ds__rbuf_u32(&r), 0xdeadbeef);
    assert_int_equal(ds__rbuf_i32(&r), -5);
    assert_int_equal(ds__rbuf_u64(&r), 1ull << 60);
    const char *s;
    assert_int_equal(ds__rbuf_str(&r, &s), 5);
    assert_memory_equal(s, "hello", 5);
    assert_int_equal(ds__rbuf_str(&r, &s), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ds__rbuf_u32(&r), (uint32_t)i);
    assert_true(ds__rbuf_done(&r));
    ds__wbuf_free(&w);
}

static void test_reader_bounds(void **state)
{
    (void)state;
    uint8_t b[6] = {0xff, 0xff, 0xff, 0x7f, 'a', 'b'}; /* a string claiming 2 GiB */
    ds_rbuf_t r;
    ds__rbuf_init(&r, b, sizeof(b));
    const char *s;
    assert_int_equal(ds__rbuf_str(&r, &s), 0);
    assert_true(r.err);
    assert_int_equal(ds__rbuf_u64(&r), 0); /* stays in error, yields zeros */
    assert_false(ds__rbuf_done(&r));
    /* a count larger than the remaining bytes could hold */
    uint8_t c[8] = {100, 0, 0, 0, 1, 2, 3, 4};
    ds__rbuf_init(&r, c, sizeof(c));
    assert_int_equal(ds__rbuf_count(&r, 1000, 8), 0);
    assert_true(r.err);
    ds__rbuf_init(&r, c, sizeof(c));
    assert_int_equal(ds__rbuf_count(&r, 50, 0), 0); /* above max */
    assert_true(r.err);
    uint8_t d[5] = {1, 0, 0, 0, 9};
    ds__rbuf_init(&r, d, sizeof(d));
    assert_int_equal(ds__rbuf_count(&r, 10, 1), 1);
    assert_false(r.err);
}

/* A buffer on the caller's storage writes there until it outgrows it, then
 * moves to the heap with every byte written so far; the storage is never
 * freed (ASan would see it) and stays as it was written. */
static void test_wbuf_on_storage(void **state)
{
    (void)state;
    uint8_t room[16];
    memset(room, 0xee, sizeof(room));
    ds_wbuf_t w;
    ds__wbuf_init_on(&w, room, sizeof(room));
    ds__wbuf_u64(&w, 0x0102030405060708ull);
    ds__wbuf_u32(&w, 7);
    assert_ptr_equal(w.buf, room);
    assert_int_equal(w.len, 12);
    ds__wbuf_u64(&w, 9); /* 20 bytes: past the storage */
    assert_ptr_not_equal(w.buf, room);
    assert_false(w.oom);
    assert_int_equal(w.len, 20);
    assert_true(w.cap >= 20);
    assert_memory_equal(w.buf, room, 12);
    ds_rbuf_t r;
    ds__rbuf_init(&r, w.buf, w.len);
    assert_int_equal(ds__rbuf_u64(&r), 0x0102030405060708ull);
    assert_int_equal(ds__rbuf_u32(&r), 7);
    assert_int_equal(ds__rbuf_u64(&r), 9);
    assert_true(ds__rbuf_done(&r));
    ds__wbuf_free(&w);
    /* One that fits stays on the storage; free leaves it alone. */
    ds__wbuf_init_on(&w, room, sizeof(room));
    ds__wbuf_cstr(&w, "abc");
    assert_ptr_equal(w.buf, room);
    ds__wbuf_reset(&w);
    assert_int_equal(w.len, 0);
    ds__wbuf_free(&w);
    assert_null(w.buf);
    assert_memory_equal(room + 4, "abc", 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_roundtrip), cmocka_unit_test(test_header_rejects),
        cmocka_unit_test(test_meta_roundtrip),   cmocka_unit_test(test_reader_bounds),
        cmocka_unit_test(test_wbuf_on_storage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
