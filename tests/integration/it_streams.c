/* Streams against a real worker (docs/streams.md): elements come back in
 * order with their ids and bytes; receive waits for what it expects or its
 * timeout; acks free pages; bad input is K_INVALID naming what was wrong and
 * Yuanrong's stream codes come back where Yuanrong gives them. Failures: a
 * consumer whose process dies releases its cursor (the pages it held go and
 * a full stream takes sends again); a producer whose process dies leaves
 * its elements readable; a consumer that does not ack bounds the stream at
 * max_stream_size (sends fail K_OUT_OF_MEMORY at their timeout, and a
 * blocked send goes on once the consumer acks). */
#include "harness.h"

#include "common/clock.h"
#include "ds/stream_client.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static ds_producer_t *producer(ds_client_t *c, const char *stream, int64_t page, uint64_t max)
{
    ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
    conf.page_size = page;
    conf.max_stream_size = max;
    ds_producer_t *p = NULL;
    assert_int_equal(ds_stream_create_producer(c, stream, &conf, &p), DS_K_OK);
    return p;
}

static ds_consumer_t *consumer(ds_client_t *c, const char *stream, const char *sub)
{
    ds_consumer_t *cs = NULL;
    assert_int_equal(ds_stream_subscribe(c, stream, sub, DS_SUB_STREAM, &cs), DS_K_OK);
    return cs;
}

static void test_send_receive_ack(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_t *p = producer(c, "s_basic", 4096, 64 << 10);
    ds_consumer_t *cs = consumer(c, "s_basic", "sub");
    const char *vals[] = {"a", "bb", "ccc"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(ds_producer_send(p, vals[i], strlen(vals[i]), -1), DS_K_OK);
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(cs, 5, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(els[i].id, (uint64_t)i + 1);
        assert_int_equal(els[i].size, strlen(vals[i]));
        assert_memory_equal(els[i].ptr, vals[i], els[i].size);
    }
    ds_elements_free(els);
    /* Nothing more; an ack past what was received is refused. */
    assert_int_equal(ds_consumer_receive(cs, 1, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ds_consumer_ack(cs, 4), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "has not been received"));
    assert_int_equal(ds_consumer_ack(cs, 3), DS_K_OK);
    uint64_t np = 9, nc = 9;
    assert_int_equal(ds_stream_query_global_producer_num(c, "s_basic", &np), DS_K_OK);
    assert_int_equal(ds_stream_query_global_consumer_num(c, "s_basic", &nc), DS_K_OK);
    assert_int_equal(np, 1);
    assert_int_equal(nc, 1);
    /* In use: no delete. */
    assert_int_equal(ds_stream_delete(c, "s_basic"), DS_K_SC_STREAM_IN_USE);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    assert_int_equal(ds_stream_delete(c, "s_basic"), DS_K_OK);
    assert_int_equal(ds_stream_delete(c, "s_basic"), DS_K_SC_STREAM_NOT_FOUND);
    assert_int_equal(ds_stream_query_global_consumer_num(c, "s_basic", &nc), DS_K_OK);
    assert_int_equal(nc, 0);
    ds_client_close(c);
}

/* A local consumer reads the elements in the stream's pages (the answer
 * carries their places, no bytes); a TCP consumer gets copies in the
 * array's block, right after the array. Both read the same bytes, and the
 * local one's stay put while the producer fills further pages, until it
 * acknowledges them. */
static void test_local_reads_in_place(void **state)
{
    (void)state;
    ds_client_t *lc = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_client_t *tc = dst_connect(&W, DS_TRANSPORT_TCP);
    ds_producer_t *p = producer(lc, "s_place", 4096, 1 << 20);
    ds_consumer_t *local = consumer(lc, "s_place", "local");
    ds_consumer_t *remote = consumer(tc, "s_place", "remote");
    char val[1000];
    for (int i = 0; i < 3; i++) {
        memset(val, 'a' + i, sizeof(val));
        assert_int_equal(ds_producer_send(p, val, sizeof(val), -1), DS_K_OK);
    }
    ds_element_t *le, *re;
    size_t ln, rn;
    assert_int_equal(ds_consumer_receive(local, 3, 1000, &le, &ln), DS_K_OK);
    assert_int_equal(ds_consumer_receive(remote, 3, 1000, &re, &rn), DS_K_OK);
    assert_int_equal(ln, 3);
    assert_int_equal(rn, 3);
    assert_ptr_equal(re[0].ptr, (const uint8_t *)(re + rn));
    for (size_t i = 0; i < 3; i++) {
        const uint8_t *copies = (const uint8_t *)(le + ln);
        assert_true(le[i].ptr < (const uint8_t *)le || le[i].ptr >= copies + 3 * sizeof(val));
        memset(val, 'a' + (int)i, sizeof(val));
        assert_int_equal(le[i].size, sizeof(val));
        assert_memory_equal(le[i].ptr, val, sizeof(val));
        assert_memory_equal(re[i].ptr, val, sizeof(val));
    }
    /* More pages while the first are held: the held bytes do not move. */
    memset(val, 'z', sizeof(val));
    for (int i = 0; i < 12; i++)
        assert_int_equal(ds_producer_send(p, val, sizeof(val), -1), DS_K_OK);
    for (size_t i = 0; i < 3; i++) {
        char want[1000];
        memset(want, 'a' + (int)i, sizeof(want));
        assert_memory_equal(le[i].ptr, want, sizeof(want));
    }
    assert_int_equal(ds_consumer_ack(local, le[2].id), DS_K_OK);
    assert_int_equal(ds_consumer_ack(remote, re[2].id), DS_K_OK);
    ds_elements_free(le);
    ds_elements_free(re);
    assert_int_equal(ds_consumer_close(local), DS_K_OK);
    assert_int_equal(ds_consumer_close(remote), DS_K_OK);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_stream_delete(lc, "s_place"), DS_K_OK);
    ds_client_close(lc);
    ds_client_close(tc);
}

static void test_bad_input(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
    ds_producer_t *p = NULL;
    conf.page_size = 5000;
    assert_int_equal(ds_stream_create_producer(c, "s_bad", &conf, &p), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "Page size not multiple of 4096"));
    conf.page_size = 8192;
    conf.reserve_size = 12288;
    assert_int_equal(ds_stream_create_producer(c, "s_bad", &conf, &p), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "Reserve size not a multiple of page size"));
    conf.reserve_size = 0;
    conf.max_stream_size = 8192;
    assert_int_equal(ds_stream_create_producer(c, "s_bad", &conf, &p), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "at least the minimum size"));
    conf = (ds_producer_conf_t)DS_PRODUCER_CONF_INIT;
    conf.retain_for_num_consumers = 17;
    assert_int_equal(ds_stream_create_producer(c, "s_bad", &conf, &p), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "retainForNumConsumers"));
    assert_int_equal(ds_stream_create_producer(c, "bad name", NULL, &p), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "streamName"));
    ds_consumer_t *cs = NULL;
    /* A subscription keeps its type. */
    assert_int_equal(ds_stream_subscribe(c, "s_bad", "rr", DS_SUB_ROUND_ROBIN, &cs), DS_K_OK);
    ds_consumer_t *kp = NULL;
    assert_int_equal(ds_stream_subscribe(c, "s_bad", "rr", DS_SUB_KEY_PARTITIONS, &kp),
                     DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "exists with type 1, asked 2"));
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    cs = consumer(c, "s_bad", "one");
    ds_consumer_t *cs2 = NULL;
    assert_int_equal(ds_stream_subscribe(c, "s_bad", "one", DS_SUB_STREAM, &cs2), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "already has its consumer"));
    p = producer(c, "s_bad", 4096, 64 << 10);
    assert_int_equal(ds_producer_send(p, "", 0, -1), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "Element size should be greater than 0"));
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(cs, (uint32_t)INT32_MAX + 1, 0, &els, &n), DS_K_INVALID);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    ds_client_close(c);
}

typedef struct {
    ds_client_t *c;
    const char *stream;
    int delay_ms;
    ds_status_t st;
} sender_t;

static void *send_later(void *arg)
{
    sender_t *s = arg;
    usleep((useconds_t)s->delay_ms * 1000);
    ds_producer_t *p = producer(s->c, s->stream, 4096, 64 << 10);
    s->st = ds_producer_send(p, "late", 4, -1);
    ds_producer_close(p);
    return NULL;
}

static void test_receive_waits(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_consumer_t *cs = consumer(c, "s_wait", "sub");
    /* Nothing comes: the timeout passes and the answer is empty. */
    uint64_t t0 = ds__now_ms();
    ds_element_t *els;
    size_t n = 9;
    assert_int_equal(ds_consumer_receive(cs, 1, 300, &els, &n), DS_K_OK);
    uint64_t dt = ds__now_ms() - t0;
    assert_int_equal(n, 0);
    assert_true(dt >= 290 && dt < 300 + 5000);
    /* An element sent while it waits wakes it long before its timeout. */
    sender_t s = {c, "s_wait", 100, DS_K_RUNTIME_ERROR};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, send_later, &s), 0);
    t0 = ds__now_ms();
    assert_int_equal(ds_consumer_receive(cs, 0, 20000, &els, &n), DS_K_OK);
    dt = ds__now_ms() - t0;
    pthread_join(th, NULL);
    assert_int_equal(s.st, DS_K_OK);
    assert_int_equal(n, 1);
    assert_memory_equal(els[0].ptr, "late", 4);
    assert_true(dt < 15000);
    ds_elements_free(els);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    ds_client_close(c);
}

/* Sends 1000-byte elements with timeout 0 until the stream is full; the count. */
static int fill(ds_producer_t *p, int max)
{
    char buf[1000];
    int sent = 0;
    for (; sent < max; sent++) {
        memset(buf, 'a' + sent % 26, sizeof(buf));
        ds_status_t st = ds_producer_send(p, buf, sizeof(buf), 0);
        if (st == DS_K_OUT_OF_MEMORY) {
            assert_non_null(strstr(ds_last_error(), "Producer unable to secure enough memory"));
            break;
        }
        assert_int_equal(st, DS_K_OK);
    }
    return sent;
}

typedef struct {
    ds_producer_t *p;
    ds_status_t st;
} blocked_t;

static void *send_blocking(void *arg)
{
    blocked_t *b = arg;
    char buf[1000];
    memset(buf, 'z', sizeof(buf));
    b->st = ds_producer_send(b->p, buf, sizeof(buf), 20000);
    return NULL;
}

static void test_slow_consumer_bounds_memory(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_t *p = producer(c, "s_slow", 4096, 64 << 10);
    ds_consumer_t *cs = consumer(c, "s_slow", "slow");
    /* 4 elements a page, 16 pages at most: 64 elements, whatever we try. */
    int sent = fill(p, 10000);
    assert_int_equal(sent, 64);
    assert_true(dst_stat(&W, "streams.page_bytes") <= 64 << 10);
    /* A send with a timeout waits, and fails at it. */
    char buf[1000] = {0};
    uint64_t t0 = ds__now_ms();
    assert_int_equal(ds_producer_send(p, buf, sizeof(buf), 300), DS_K_OUT_OF_MEMORY);
    assert_true(ds__now_ms() - t0 >= 290);
    /* A blocked send goes on once the consumer acks a page. */
    blocked_t b = {p, DS_K_RUNTIME_ERROR};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, send_blocking, &b), 0);
    assert_true(dst_wait_stat(&W, "streams.waits", 1, 10000));
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(cs, 8, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 8);
    assert_int_equal(els[7].id, 8);
    assert_int_equal(els[7].ptr[0], 'a' + 7);
    assert_int_equal(ds_consumer_ack(cs, els[7].id), DS_K_OK);
    ds_elements_free(els);
    pthread_join(th, NULL);
    assert_int_equal(b.st, DS_K_OK);
    /* Everything else arrives in order, the blocked one last. */
    assert_int_equal(ds_consumer_receive(cs, 100, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 57);
    for (size_t i = 0; i < n - 1; i++)
        assert_int_equal(els[i].ptr[0], 'a' + (int)(8 + i) % 26);
    assert_int_equal(els[n - 1].ptr[0], 'z');
    assert_int_equal(els[n - 1].id, 65);
    ds_consumer_ack(cs, els[n - 1].id);
    ds_elements_free(els);
    assert_int_equal(dst_stat(&W, "streams.page_bytes"), 0);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    ds_client_close(c);
}

/* In a child process: connects, opens a consumer (or a producer that sends
 * n elements), says so on the pipe, and dies without closing anything. */
static pid_t child(const char *stream, bool is_consumer, int n, int fd)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0) return pid;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    if (c == NULL) _exit(2);
    if (is_consumer) {
        ds_consumer_t *cs;
        if (ds_stream_subscribe(c, stream, "dies", DS_SUB_STREAM, &cs) != DS_K_OK) _exit(3);
    } else {
        ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
        conf.page_size = 4096;
        conf.max_stream_size = 64 << 10;
        ds_producer_t *p;
        if (ds_stream_create_producer(c, stream, &conf, &p) != DS_K_OK) _exit(3);
        for (int i = 0; i < n; i++) {
            char v[16];
            int len = snprintf(v, sizeof(v), "el-%d", i);
            if (ds_producer_send(p, v, (size_t)len, -1) != DS_K_OK) _exit(4);
        }
    }
    if (write(fd, "x", 1) != 1) _exit(5);
    pause(); /* killed by the parent */
    _exit(0);
}

static void test_dead_consumer_releases_cursor(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_t *p = producer(c, "s_deadc", 4096, 64 << 10);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = child("s_deadc", true, 0, fds[1]);
    char x;
    assert_int_equal(read(fds[0], &x, 1), 1);
    assert_int_equal(dst_stat(&W, "streams.consumers"), 1);
    /* Its subscription holds every page: the stream fills. */
    assert_int_equal(fill(p, 10000), 64);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    /* Its session ends: cursor and pages go, the stream takes sends again. */
    assert_true(dst_wait_stat(&W, "streams.consumers", 0, 10000));
    assert_true(dst_wait_stat(&W, "streams.page_bytes", 0, 10000));
    char buf[1000] = {0};
    assert_int_equal(ds_producer_send(p, buf, sizeof(buf), 0), DS_K_OK);
    uint64_t nc = 9;
    assert_int_equal(ds_stream_query_global_consumer_num(c, "s_deadc", &nc), DS_K_OK);
    assert_int_equal(nc, 0);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    close(fds[0]);
    close(fds[1]);
    ds_client_close(c);
}

static void test_dead_producer_leaves_stream_readable(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_consumer_t *cs = consumer(c, "s_deadp", "reader");
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = child("s_deadp", false, 20, fds[1]);
    char x;
    assert_int_equal(read(fds[0], &x, 1), 1);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(dst_wait_stat(&W, "streams.producers", 0, 10000));
    uint64_t np = 9;
    assert_int_equal(ds_stream_query_global_producer_num(c, "s_deadp", &np), DS_K_OK);
    assert_int_equal(np, 0);
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(cs, 20, 1000, &els, &n), DS_K_OK);
    assert_int_equal(n, 20);
    for (size_t i = 0; i < n; i++) {
        char v[16];
        int len = snprintf(v, sizeof(v), "el-%zu", i);
        assert_int_equal(els[i].size, (uint64_t)len);
        assert_memory_equal(els[i].ptr, v, (size_t)len);
        assert_int_equal(els[i].id, i + 1);
    }
    assert_int_equal(ds_consumer_ack(cs, els[n - 1].id), DS_K_OK);
    ds_elements_free(els);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    assert_int_equal(ds_stream_delete(c, "s_deadp"), DS_K_OK);
    close(fds[0]);
    close(fds[1]);
    ds_client_close(c);
}

static void test_retain_and_big_elements(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
    conf.page_size = 4096;
    conf.max_stream_size = 1 << 20;
    conf.retain_for_num_consumers = 1;
    ds_producer_t *p = NULL;
    assert_int_equal(ds_stream_create_producer(c, "s_retain", &conf, &p), DS_K_OK);
    /* Sent before anyone subscribed, kept for the first consumer; one
     * element larger than a page gets a page of its own. */
    size_t big = 100000;
    uint8_t *v = malloc(big);
    dst_fill(v, big, 41);
    assert_int_equal(ds_producer_send(p, "first", 5, -1), DS_K_OK);
    assert_int_equal(ds_producer_send(p, v, big, -1), DS_K_OK);
    ds_consumer_t *cs = consumer(c, "s_retain", "a");
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(cs, 2, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 2);
    assert_memory_equal(els[0].ptr, "first", 5);
    assert_int_equal(els[1].size, big);
    assert_true(dst_check(els[1].ptr, big, 41));
    ds_elements_free(els);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    /* Retention was for one consumer: the next starts at the tail. */
    cs = consumer(c, "s_retain", "b");
    assert_int_equal(ds_consumer_receive(cs, 0, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_stream_delete(c, "s_retain"), DS_K_OK);
    free(v);
    ds_client_close(c);
}

/* --sc_shm_threshold_percentage bounds all streams together: with one
 * stream holding the streams' share, another stream's send waits, and goes
 * on once the first is acknowledged. */
static void test_threshold_spans_streams(void **state)
{
    (void)state;
    dst_worker_t w2;
    assert_int_equal(dst_worker_start(&w2, 64, "--sc_shm_threshold_percentage 1"), 0);
    ds_client_t *c = dst_connect(&w2, DS_TRANSPORT_AUTO);
    ds_producer_t *pa = producer(c, "s_ta", 4096, 1 << 20);
    ds_producer_t *pb = producer(c, "s_tb", 4096, 1 << 20);
    ds_consumer_t *ca = consumer(c, "s_ta", "a");
    ds_consumer_t *cb = consumer(c, "s_tb", "b");
    /* 1% of 64 MiB: 163 pages of 4 KiB, 4 elements each. */
    int sent = fill(pa, 10000);
    assert_int_equal(sent, (int)((64u << 20) / 100 / 4096 * 4));
    char buf[1000] = {0};
    assert_int_equal(ds_producer_send(pb, buf, sizeof(buf), 0), DS_K_OUT_OF_MEMORY);
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(ca, 8, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 8);
    assert_int_equal(ds_consumer_ack(ca, els[7].id), DS_K_OK);
    ds_elements_free(els);
    assert_int_equal(ds_producer_send(pb, buf, sizeof(buf), 0), DS_K_OK);
    assert_int_equal(ds_consumer_receive(cb, 1, 1000, &els, &n), DS_K_OK);
    assert_int_equal(n, 1);
    ds_elements_free(els);
    assert_int_equal(ds_producer_close(pa), DS_K_OK);
    assert_int_equal(ds_producer_close(pb), DS_K_OK);
    assert_int_equal(ds_consumer_close(ca), DS_K_OK);
    assert_int_equal(ds_consumer_close(cb), DS_K_OK);
    ds_client_close(c);
    assert_int_equal(dst_worker_stop(&w2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_receive_ack),
        cmocka_unit_test(test_local_reads_in_place),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_receive_waits),
        cmocka_unit_test(test_slow_consumer_bounds_memory),
        cmocka_unit_test(test_dead_consumer_releases_cursor),
        cmocka_unit_test(test_dead_producer_leaves_stream_readable),
        cmocka_unit_test(test_retain_and_big_elements),
        cmocka_unit_test(test_threshold_spans_streams),
    };
    dst_group_worker(&W, 128, NULL);
    return dst_run_group_tests(tests, dst_group_setup, dst_group_teardown);
}
