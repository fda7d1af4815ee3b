/* Streams across workers, against real etcd and three workers A, B, C
 * (docs/streams.md): a producer on A and consumers on B and C (two on B)
 * receive every element in order, byte-exact; A forwards each element once
 * per remote worker, not once per consumer; a consumer that closes and
 * subscribes again receives what is sent after it came back; a producer on
 * a worker that is not the stream's owner reaches consumers through the
 * owner; a subscribe returns once the owner counts it, so what is sent
 * next reaches it; counts are the owner's, asked from any worker; a delete
 * goes through the owner and removes every worker's copy; and when a
 * consumer's worker dies, the consumers on the others go on receiving. */
#include "cluster_util.h"

#include "common/clock.h"
#include "ds/stream_client.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static ct_cluster_t C;
enum { A = 0, B = 1, CC = 2 };

/* A stream name whose ring owner is worker want (streams and keys share
 * the ring). */
static void name_owned_by(ds_client_t *cl, int want, const char *prefix, char *out, size_t cap)
{
    for (int i = 0; i < 200; i++) {
        snprintf(out, cap, "%s-%d", prefix, i);
        if (ct_set_find_owner(&C, cl, out, 8, 1) == want) return;
    }
    fail_msg("no stream name owned by worker %d", want);
}

static size_t el_size(int i)
{
    return 1 + (size_t)(i * 997) % 5000;
}

static void send_range(ds_producer_t *p, int from, int to)
{
    uint8_t buf[5000];
    for (int i = from; i < to; i++) {
        dst_fill(buf, el_size(i), 1000 + (uint64_t)i);
        assert_int_equal(ds_producer_send(p, buf, el_size(i), -1), DS_K_OK);
    }
}

/* Receives elements [from, to) of send_range in order, checking bytes. */
static void expect_range(ds_consumer_t *cs, int from, int to, const char *who)
{
    int next = from;
    uint64_t deadline = ds__now_ms() + 30000;
    while (next < to && ds__now_ms() < deadline) {
        ds_element_t *els;
        size_t n;
        assert_int_equal(ds_consumer_receive(cs, 0, 1000, &els, &n), DS_K_OK);
        for (size_t k = 0; k < n; k++, next++) {
            if (next >= to) fail_msg("%s: more elements than sent", who);
            if (els[k].size != el_size(next) ||
                !dst_check(els[k].ptr, els[k].size, 1000 + (uint64_t)next))
                fail_msg("%s: element %d (id %" PRIu64 ") is not what was sent", who, next,
                         els[k].id);
        }
        if (n) assert_int_equal(ds_consumer_ack(cs, els[n - 1].id), DS_K_OK);
        ds_elements_free(els);
    }
    if (next != to) fail_msg("%s: received %d of %d elements", who, next - from, to - from);
}

static void wait_consumers(ds_client_t *cl, const char *stream, uint64_t want)
{
    uint64_t n = 0;
    for (int i = 0; i < 500; i++) {
        assert_int_equal(ds_stream_query_global_consumer_num(cl, stream, &n), DS_K_OK);
        if (n == want) return;
        usleep(20000);
    }
    fail_msg("stream %s: %" PRIu64 " consumers registered, want %" PRIu64, stream, n, want);
}

static ds_consumer_t *sub(ds_client_t *cl, const char *stream, const char *name)
{
    ds_consumer_t *cs = NULL;
    assert_int_equal(ds_stream_subscribe(cl, stream, name, DS_SUB_STREAM, &cs), DS_K_OK);
    return cs;
}

static ds_producer_t *prod(ds_client_t *cl, const char *stream)
{
    ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
    ds_producer_t *p = NULL;
    assert_int_equal(ds_stream_create_producer(cl, stream, &conf, &p), DS_K_OK);
    return p;
}

static void test_a_to_b_and_c(void **state)
{
    (void)state;
    ds_client_t *ca = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *cb = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    ds_client_t *cc = ct_client(&C, CC, DS_TRANSPORT_TCP);
    char s[64];
    name_owned_by(ca, A, "xs", s, sizeof(s));
    ds_consumer_t *b1 = sub(cb, s, "b1"), *b2 = sub(cb, s, "b2"), *c1 = sub(cc, s, "c1");
    wait_consumers(ca, s, 3);
    double before = dst_stat(&C.w[A], "cluster.streams.pushed_elements");
    ds_producer_t *p = prod(ca, s);
    uint64_t np = 0;
    assert_int_equal(ds_stream_query_global_producer_num(cc, s, &np), DS_K_OK);
    assert_int_equal(np, 1);
    send_range(p, 0, 300);
    expect_range(b1, 0, 300, "b1");
    expect_range(b2, 0, 300, "b2");
    expect_range(c1, 0, 300, "c1");
    /* Once per remote worker: B (two consumers) and C. */
    assert_int_equal(dst_stat(&C.w[A], "cluster.streams.pushed_elements") - before, 600);

    /* C's consumer goes and comes back: it gets what is sent after. */
    assert_int_equal(ds_consumer_close(c1), DS_K_OK);
    wait_consumers(ca, s, 2);
    send_range(p, 300, 350);
    c1 = sub(cc, s, "c1");
    send_range(p, 350, 400);
    expect_range(b1, 300, 400, "b1");
    expect_range(c1, 350, 400, "c1 again");
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(c1, 0, 200, &els, &n), DS_K_OK);
    assert_int_equal(n, 0);
    expect_range(b2, 300, 400, "b2");
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(b1), DS_K_OK);
    assert_int_equal(ds_consumer_close(b2), DS_K_OK);
    assert_int_equal(ds_consumer_close(c1), DS_K_OK);
    ds_client_close(ca);
    ds_client_close(cb);
    ds_client_close(cc);
}

static void test_producer_off_the_owner(void **state)
{
    (void)state;
    ds_client_t *ca = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *cc = ct_client(&C, CC, DS_TRANSPORT_LOCAL);
    char s[64];
    name_owned_by(ca, B, "ys", s, sizeof(s));
    ds_consumer_t *c1 = sub(cc, s, "c1");
    ds_consumer_t *a1 = sub(ca, s, "a1");
    /* A subscribe returns once the owner counts it: no wait needed. */
    uint64_t nc = 0;
    assert_int_equal(ds_stream_query_global_consumer_num(cc, s, &nc), DS_K_OK);
    assert_int_equal(nc, 2);
    ds_producer_t *p = prod(ca, s);
    send_range(p, 0, 200);
    expect_range(c1, 0, 200, "c1 through the owner");
    expect_range(a1, 0, 200, "a1 on the producer's worker");
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(c1), DS_K_OK);
    assert_int_equal(ds_consumer_close(a1), DS_K_OK);
    ds_client_close(ca);
    ds_client_close(cc);
}

/* delete_stream goes through the owner: refused (K_SC_STREAM_IN_USE,
 * Yuanrong's master's messages) while any worker has a producer or
 * consumer, asked from any worker; then every worker's copy goes, so a
 * second delete from any worker finds nothing. */
static void test_delete_everywhere(void **state)
{
    (void)state;
    ds_client_t *ca = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *cb = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    ds_client_t *cc = ct_client(&C, CC, DS_TRANSPORT_LOCAL);
    char s[64];
    name_owned_by(ca, B, "ds", s, sizeof(s));
    ds_consumer_t *c1 = sub(cc, s, "c1");
    ds_producer_t *p = prod(ca, s);
    send_range(p, 0, 20);
    expect_range(c1, 0, 20, "c1");
    assert_int_equal(ds_stream_delete(cb, s), DS_K_SC_STREAM_IN_USE);
    assert_non_null(strstr(ds_last_error(), "Has pub node in global scope"));
    assert_int_equal(ds_stream_delete(ca, s), DS_K_SC_STREAM_IN_USE);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    uint64_t np = 1;
    for (int i = 0; i < 500 && np; i++) {
        assert_int_equal(ds_stream_query_global_producer_num(cb, s, &np), DS_K_OK);
        if (np) usleep(20000);
    }
    assert_int_equal(np, 0);
    /* The consumer is on C; the delete is asked at A, which has none. */
    assert_int_equal(ds_stream_delete(ca, s), DS_K_SC_STREAM_IN_USE);
    assert_non_null(strstr(ds_last_error(), "Has sub node in global scope"));
    assert_int_equal(ds_consumer_close(c1), DS_K_OK);
    wait_consumers(ca, s, 0);
    assert_int_equal(ds_stream_delete(ca, s), DS_K_OK);
    assert_int_equal(ds_stream_delete(cc, s), DS_K_SC_STREAM_NOT_FOUND);
    assert_int_equal(ds_stream_delete(cb, s), DS_K_SC_STREAM_NOT_FOUND);
    assert_int_equal(ds_stream_delete(ca, s), DS_K_SC_STREAM_NOT_FOUND);
    ds_client_close(ca);
    ds_client_close(cb);
    ds_client_close(cc);
}

static void test_consumer_worker_dies(void **state)
{
    (void)state;
    ds_client_t *ca = ct_client(&C, A, DS_TRANSPORT_LOCAL);
    ds_client_t *cb = ct_client(&C, B, DS_TRANSPORT_LOCAL);
    ds_client_t *cc = ct_client(&C, CC, DS_TRANSPORT_LOCAL);
    char s[64];
    name_owned_by(ca, A, "zs", s, sizeof(s));
    ds_consumer_t *b1 = sub(cb, s, "b1");
    ds_consumer_t *c1 = sub(cc, s, "c1");
    wait_consumers(ca, s, 2);
    ds_producer_t *p = prod(ca, s);
    send_range(p, 0, 50);
    expect_range(b1, 0, 50, "b1");
    dst_worker_kill(&C.w[CC]);
    /* Its worker is gone: the close fails, and frees the handle. */
    assert_int_not_equal(ds_consumer_close(c1), DS_K_OK);
    ds_client_close(cc);
    send_range(p, 50, 150);
    expect_range(b1, 50, 150, "b1 after C died");
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(b1), DS_K_OK);
    ds_client_close(ca);
    ds_client_close(cb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_to_b_and_c),
        cmocka_unit_test(test_producer_off_the_owner),
        cmocka_unit_test(test_delete_everywhere),
        cmocka_unit_test(test_consumer_worker_dies),
    };
    ct_group_cluster(&C, 3);
    return dst_run_group_tests(tests, ct_group_setup, ct_group_teardown);
}
