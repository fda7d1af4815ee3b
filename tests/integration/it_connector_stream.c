/* Streaming edges (omni/stream_edge.h) against a real worker: a payload sent
 * as chunks arrives byte-exact and in order, each chunk readable before the
 * writer has finished; the reader may open before or after the writer; the
 * connector's stream_chunk_size option drives put_chunked/get_chunked; bad
 * calls fail with their code and a message naming what was wrong. */
#include "it_connector_util.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "omni/stream_edge.h"

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 128, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

static void expect_msg(const char *part)
{
    if (strstr(ds_last_error(), part) == NULL) fail_msg("'%s' lacks '%s'", ds_last_error(), part);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 31u + seed);
}

/* Reads every chunk of an edge; checks each against fill(seed) at its offset. */
static size_t read_all(omni_connector_t *c, const char *req, size_t chunk, size_t total,
                       unsigned seed)
{
    omni_chunk_reader_t *r = NULL;
    assert_int_equal(omni_chunk_reader_open(c, "talker", "code2wav", req, &r), DS_K_OK);
    uint8_t *want = malloc(total);
    assert_non_null(want);
    fill(want, total, seed);
    size_t off = 0;
    for (int i = 0; i < 100000; i++) {
        omni_received_t *got = NULL;
        bool end = false;
        assert_int_equal(omni_chunk_reader_next(r, 10000, &got, &end), DS_K_OK);
        if (end) {
            assert_null(got);
            break;
        }
        size_t n = omni_received_size(got);
        assert_int_equal(omni_received_kind(got), OMNI_DATA_BYTES);
        assert_true(n == chunk || off + n == total);
        assert_true(off + n <= total);
        assert_memory_equal(omni_received_data(got), want + off, n);
        off += n;
        omni_received_free(got);
    }
    /* After the end marker every call says end again. */
    omni_received_t *got = NULL;
    bool end = false;
    assert_int_equal(omni_chunk_reader_next(r, 0, &got, &end), DS_K_OK);
    assert_true(end);
    assert_null(got);
    omni_chunk_reader_free(r);
    free(want);
    return off;
}

static void test_writer_first(void **state)
{
    (void)state;
    omni_connector_t *c = itc_open(&W, "YuanrongConnector", NULL);
    assert_non_null(c);
    enum { CHUNK = 3000, TOTAL = 3000 * 20 + 123 };
    uint8_t *buf = malloc(TOTAL);
    fill(buf, TOTAL, 7);
    omni_chunk_writer_t *w = NULL;
    assert_int_equal(omni_chunk_writer_open(c, "talker", "code2wav", "req-a", &w), DS_K_OK);
    for (size_t off = 0; off < TOTAL; off += CHUNK)
        assert_int_equal(
            omni_chunk_writer_send(w, buf + off, TOTAL - off < CHUNK ? TOTAL - off : CHUNK),
            DS_K_OK);
    assert_int_equal(omni_chunk_writer_end(w), DS_K_OK);
    /* After the end: refused, naming the stream. */
    assert_int_equal(omni_chunk_writer_send(w, buf, 1), DS_K_INVALID);
    expect_msg("req-a:talker_code2wav");
    expect_msg("after the end marker");
    omni_chunk_writer_free(w);
    assert_int_equal(read_all(c, "req-a", CHUNK, TOTAL, 7), TOTAL);
    free(buf);
    omni_connector_free(c);
}

typedef struct {
    omni_connector_t *c;
    atomic_int sent;    /* chunks sent so far */
    atomic_int release; /* chunks the writer may send */
    int total_chunks;
    size_t chunk;
} feed_t;

/* Sends one chunk each time the reader allows it, then the end marker. */
static void *feeder(void *arg)
{
    feed_t *f = arg;
    uint8_t *buf = malloc(f->chunk * (size_t)f->total_chunks);
    fill(buf, f->chunk * (size_t)f->total_chunks, 3);
    omni_chunk_writer_t *w = NULL;
    if (omni_chunk_writer_open(f->c, "talker", "code2wav", "req-b", &w) != DS_K_OK) goto out;
    for (int i = 0; i < f->total_chunks; i++) {
        for (int k = 0; k < 100000 && atomic_load(&f->release) <= i; k++)
            usleep(100);
        if (omni_chunk_writer_send(w, buf + (size_t)i * f->chunk, f->chunk) != DS_K_OK) goto out;
        atomic_store(&f->sent, i + 1);
    }
    omni_chunk_writer_end(w);
out:
    omni_chunk_writer_free(w);
    free(buf);
    return NULL;
}

/* The reader, opened first, gets each chunk while the writer is still
 * waiting to send the next one: chunks arrive as they are made. */
static void test_reader_first_incremental(void **state)
{
    (void)state;
    omni_connector_t *c = itc_open(&W, "YuanrongConnector", NULL);
    assert_non_null(c);
    omni_chunk_reader_t *r = NULL;
    assert_int_equal(omni_chunk_reader_open(c, "talker", "code2wav", "req-b", &r), DS_K_OK);
    /* Nothing yet: none within the wait. */
    omni_received_t *got = NULL;
    bool end = false;
    assert_int_equal(omni_chunk_reader_next(r, 0, &got, &end), DS_K_NOT_FOUND);
    expect_msg("no chunk within");
    feed_t f = {.c = c, .total_chunks = 5, .chunk = 4096};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, feeder, &f), 0);
    uint8_t *want = malloc(f.chunk * 5);
    fill(want, f.chunk * 5, 3);
    for (int i = 0; i < 5; i++) {
        atomic_store(&f.release, i + 1);
        assert_int_equal(omni_chunk_reader_next(r, 10000, &got, &end), DS_K_OK);
        assert_false(end);
        /* Chunk i arrived while the writer was not yet allowed chunk i + 1. */
        assert_true(atomic_load(&f.sent) <= i + 1);
        assert_int_equal(omni_received_size(got), f.chunk);
        assert_memory_equal(omni_received_data(got), want + (size_t)i * f.chunk, f.chunk);
        omni_received_free(got);
    }
    assert_int_equal(omni_chunk_reader_next(r, 10000, &got, &end), DS_K_OK);
    assert_true(end);
    pthread_join(t, NULL);
    omni_chunk_reader_free(r);
    free(want);
    omni_connector_free(c);
}

static void test_chunk_size_option(void **state)
{
    (void)state;
    const char *more[] = {"stream_chunk_size", "1000", NULL};
    omni_connector_t *c = itc_open(&W, "YuanrongConnector", more);
    assert_non_null(c);
    assert_int_equal(omni_connector_stream_chunk_size(c), 1000);
    enum { TOTAL = 10500 };
    uint8_t buf[TOTAL];
    fill(buf, TOTAL, 9);
    assert_int_equal(omni_connector_put_chunked(c, "talker", "code2wav", "req-c", buf, TOTAL, 0),
                     DS_K_OK);
    omni_received_t *got = NULL;
    assert_int_equal(omni_connector_get_chunked(c, "talker", "code2wav", "req-c", 10000, &got),
                     DS_K_OK);
    assert_int_equal(omni_received_size(got), TOTAL);
    assert_memory_equal(omni_received_data(got), buf, TOTAL);
    omni_received_free(got);
    /* Read chunk by chunk: 1000-byte chunks and the rest. */
    assert_int_equal(omni_connector_put_chunked(c, "talker", "code2wav", "req-d", buf, TOTAL, 0),
                     DS_K_OK);
    omni_connector_t *plain = itc_open(&W, "YuanrongConnector", NULL);
    assert_int_equal(omni_connector_stream_chunk_size(plain), 0);
    assert_int_equal(read_all(plain, "req-d", 1000, TOTAL, 9), TOTAL);
    /* Off: put_chunked needs a chunk size. */
    assert_int_equal(omni_connector_put_chunked(plain, "talker", "code2wav", "req-e", buf, 10, 0),
                     DS_K_INVALID);
    expect_msg("stream_chunk_size");
    omni_connector_free(plain);
    omni_connector_free(c);
}

static void test_bad_input(void **state)
{
    (void)state;
    itc_spec_t s;
    const char *more[] = {"stream_chunk_size", "-1", NULL};
    omni_connector_t *c = NULL;
    assert_int_equal(omni_factory_create(itc_spec(&s, &W, "YuanrongConnector", more), &c),
                     DS_K_INVALID);
    expect_msg("stream_chunk_size");
    c = itc_open(&W, "YuanrongConnector", NULL);
    omni_chunk_writer_t *w = NULL;
    assert_int_equal(omni_chunk_writer_open(c, "talker", NULL, "req-f", &w), DS_K_INVALID);
    expect_msg("from_stage, to_stage and request_id");
    assert_int_equal(omni_chunk_writer_open(c, "talker", "code2wav", "req-f", &w), DS_K_OK);
    assert_int_equal(omni_chunk_writer_send(w, "x", 0), DS_K_INVALID);
    expect_msg("a chunk is 1 to");
    omni_chunk_writer_free(w);
    omni_connector_close(c);
    assert_int_equal(omni_chunk_writer_open(c, "talker", "code2wav", "req-g", &w), DS_K_NOT_READY);
    expect_msg("closed");
    omni_connector_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_first),
        cmocka_unit_test(test_reader_first_incremental),
        cmocka_unit_test(test_chunk_size_option),
        cmocka_unit_test(test_bad_input),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
