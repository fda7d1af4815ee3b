/* Malformed and hostile stream requests over the raw protocol: each is
 * answered K_INVALID (or the stream code that applies) naming what was
 * wrong, and the worker keeps serving: the same connection's next request
 * and other clients. Handles are the session's own: another session's
 * producer or consumer id is not found. */
#include "it_hostile_raw.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

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
    assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

/* Sends op with metadata m; returns the answer's status, its message in err. */
static uint32_t ask(hr_conn_t *c, uint16_t op, const ds_wbuf_t *m, char *err, size_t cap,
                    hr_frame_t **out)
{
    uint64_t id = hr_add(c, op, m, NULL, 0);
    assert_int_equal(hr_flush(c), 0);
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + 5000);
    assert_non_null(f);
    snprintf(err, cap, "%s", f->err);
    if (out) *out = f;
    return f->h.status;
}

static void m_producer(ds_wbuf_t *m, const char *stream, uint64_t page, uint64_t max)
{
    ds__wbuf_reset(m);
    ds__wbuf_cstr(m, stream);
    ds__wbuf_u64(m, page);
    ds__wbuf_u64(m, max);
    ds__wbuf_u8(m, 0);
    ds__wbuf_u64(m, 0);
    ds__wbuf_u64(m, 0);
    ds__wbuf_u8(m, 0);
}

static uint64_t handle_of(const hr_frame_t *f)
{
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *e;
    ds__rbuf_str(&r, &e);
    uint64_t h = ds__rbuf_u64(&r);
    assert_true(ds__rbuf_done(&r));
    return h;
}

static void test_malformed_requests(void **state)
{
    (void)state;
    hr_conn_t c;
    assert_int_equal(hr_open_hello(&c, &W, true), 0);
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    char err[256];
    /* Truncated: no name at all. */
    assert_int_equal(ask(&c, DS_OP_SC_CREATE_PRODUCER, &m, err, sizeof(err), NULL), DS_K_INVALID);
    assert_non_null(strstr(err, "streamName"));
    /* A name with a byte keys may not have. */
    m_producer(&m, "a b", 4096, 65536);
    assert_int_equal(ask(&c, DS_OP_SC_CREATE_PRODUCER, &m, err, sizeof(err), NULL), DS_K_INVALID);
    /* Trailing bytes. */
    m_producer(&m, "hs", 4096, 65536);
    ds__wbuf_u8(&m, 9);
    assert_int_equal(ask(&c, DS_OP_SC_CREATE_PRODUCER, &m, err, sizeof(err), NULL), DS_K_INVALID);
    assert_non_null(strstr(err, "malformed"));
    /* A send whose element count promises more than the frame holds. */
    ds__wbuf_reset(&m);
    ds__wbuf_u64(&m, 1);
    ds__wbuf_i32(&m, 0);
    ds__wbuf_u32(&m, 1000000);
    assert_int_equal(ask(&c, DS_OP_SC_SEND, &m, err, sizeof(err), NULL),
                     DS_K_SC_PRODUCER_NOT_FOUND);
    /* A real producer, then a send whose count lies. */
    hr_frame_t *f;
    m_producer(&m, "hs", 4096, 65536);
    assert_int_equal(ask(&c, DS_OP_SC_CREATE_PRODUCER, &m, err, sizeof(err), &f), DS_K_OK);
    uint64_t prod = handle_of(f);
    ds__wbuf_reset(&m);
    ds__wbuf_u64(&m, prod);
    ds__wbuf_i32(&m, 0);
    ds__wbuf_u32(&m, 1000000);
    ds__wbuf_cstr(&m, "x");
    assert_int_equal(ask(&c, DS_OP_SC_SEND, &m, err, sizeof(err), NULL), DS_K_INVALID);
    assert_non_null(strstr(err, "malformed"));
    /* A receive with a producer's handle, an ack with garbage. */
    ds__wbuf_reset(&m);
    ds__wbuf_u64(&m, prod);
    ds__wbuf_u32(&m, 1);
    ds__wbuf_u32(&m, 0);
    assert_int_equal(ask(&c, DS_OP_SC_RECEIVE, &m, err, sizeof(err), NULL),
                     DS_K_SC_CONSUMER_NOT_FOUND);
    ds__wbuf_reset(&m);
    ds__wbuf_u8(&m, 1);
    assert_int_equal(ask(&c, DS_OP_SC_ACK, &m, err, sizeof(err), NULL), DS_K_INVALID);
    /* An unknown subscription type. */
    ds__wbuf_reset(&m);
    ds__wbuf_cstr(&m, "hs");
    ds__wbuf_cstr(&m, "sub");
    ds__wbuf_u8(&m, 200);
    assert_int_equal(ask(&c, DS_OP_SC_SUBSCRIBE, &m, err, sizeof(err), NULL), DS_K_INVALID);
    /* Receive in place (arena offsets) from a session that does not map the
     * arena, and an in-place byte that is neither 0 nor 1. */
    ds__wbuf_reset(&m);
    ds__wbuf_cstr(&m, "hs");
    ds__wbuf_cstr(&m, "sub");
    ds__wbuf_u8(&m, 0);
    assert_int_equal(ask(&c, DS_OP_SC_SUBSCRIBE, &m, err, sizeof(err), &f), DS_K_OK);
    uint64_t cons = handle_of(f);
    for (uint8_t flag = 1; flag <= 2; flag++) {
        ds__wbuf_reset(&m);
        ds__wbuf_u64(&m, cons);
        ds__wbuf_u32(&m, 1);
        ds__wbuf_u32(&m, 0);
        ds__wbuf_u8(&m, flag);
        assert_int_equal(ask(&c, DS_OP_SC_RECEIVE, &m, err, sizeof(err), NULL), DS_K_INVALID);
        assert_non_null(strstr(err, flag == 1 ? "maps the arena" : "malformed"));
    }
    /* The connection still serves. */
    uint64_t id = hr_health(&c);
    assert_int_equal(hr_flush(&c), 0);
    f = hr_answer(&c, id, ds__now_ms() + 5000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_OK);

    /* Another session cannot use this one's producer. */
    hr_conn_t o;
    assert_int_equal(hr_open_hello(&o, &W, false), 0);
    ds__wbuf_reset(&m);
    ds__wbuf_u64(&m, prod);
    ds__wbuf_i32(&m, 0);
    ds__wbuf_u32(&m, 1);
    ds__wbuf_cstr(&m, "x");
    assert_int_equal(ask(&o, DS_OP_SC_SEND, &m, err, sizeof(err), NULL),
                     DS_K_SC_PRODUCER_NOT_FOUND);
    ds__wbuf_reset(&m);
    ds__wbuf_u64(&m, prod);
    assert_int_equal(ask(&o, DS_OP_SC_CLOSE_PRODUCER, &m, err, sizeof(err), NULL),
                     DS_K_SC_PRODUCER_NOT_FOUND);
    /* Its own still works. */
    assert_int_equal(ask(&c, DS_OP_SC_CLOSE_PRODUCER, &m, err, sizeof(err), NULL), DS_K_OK);
    hr_close(&o);
    hr_close(&c);
    ds__wbuf_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_malformed_requests)};
    return dst_run_group_tests(tests, setup, teardown);
}
