/* ROUND_ROBIN and KEY_PARTITIONS subscriptions and delay_flush_time_ms
 * against a real worker (docs/streams.md). Shared subscriptions: every
 * element reaches exactly one of the subscription's consumers, ROUND_ROBIN
 * in turn, KEY_PARTITIONS each producer's elements at one consumer in the
 * order sent; a consumer that dies or closes hands what it had not
 * acknowledged to the others; acknowledged pages are reclaimed.
 * delay_flush_time_ms: a receive that looks sees a send at once, a parked
 * receive is woken by the flush (the delay, a full page, or the producer's
 * close). --sc_metrics_log_interval_s: the stream figures are logged. */
#include "harness.h"

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

static ds_producer_t *producer(ds_client_t *c, const char *stream, int64_t delay)
{
    ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
    conf.delay_flush_time_ms = delay;
    conf.page_size = 4096;
    conf.max_stream_size = 1 << 20;
    ds_producer_t *p = NULL;
    assert_int_equal(ds_stream_create_producer(c, stream, &conf, &p), DS_K_OK);
    return p;
}

static ds_consumer_t *sub(ds_client_t *c, const char *stream, const char *name,
                          ds_subscription_type_t type)
{
    ds_consumer_t *cs = NULL;
    assert_int_equal(ds_stream_subscribe(c, stream, name, type, &cs), DS_K_OK);
    return cs;
}

static void send_str(ds_producer_t *p, const char *s)
{
    assert_int_equal(ds_producer_send(p, s, strlen(s), -1), DS_K_OK);
}

#define MAXG 256
/* What one consumer got: ids and payloads, in the order received. */
typedef struct {
    uint64_t id[MAXG];
    char val[MAXG][16];
    int n;
} got_t;

/* Receives whatever is there (no wait) into g; returns how many came. */
static int drain(ds_consumer_t *cs, got_t *g)
{
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(cs, 0, 0, &els, &n), DS_K_OK);
    for (size_t i = 0; i < n; i++) {
        assert_true(g->n < MAXG);
        g->id[g->n] = els[i].id;
        assert_true(els[i].size < 16);
        memcpy(g->val[g->n], els[i].ptr, els[i].size);
        g->val[g->n][els[i].size] = '\0';
        g->n++;
    }
    ds_elements_free(els);
    return (int)n;
}

static void test_round_robin(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_t *p = producer(c, "s_rr", 0);
    ds_consumer_t *cs[3];
    for (int k = 0; k < 3; k++)
        cs[k] = sub(c, "s_rr", "rr", DS_SUB_ROUND_ROBIN);
    ds_consumer_t *all = sub(c, "s_rr", "all", DS_SUB_STREAM);
    uint64_t nc = 0;
    assert_int_equal(ds_stream_query_global_consumer_num(c, "s_rr", &nc), DS_K_OK);
    assert_int_equal(nc, 4);
    for (int i = 1; i <= 30; i++) {
        char v[16];
        snprintf(v, sizeof(v), "e-%d", i);
        send_str(p, v);
    }
    /* In turn: consumer k gets ids k+1, k+4, ..., ascending, each once. */
    got_t g[3] = {0};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(drain(cs[k], &g[k]), 10);
        for (int i = 0; i < 10; i++) {
            uint64_t want = (uint64_t)(k + 1 + 3 * i);
            char v[16];
            snprintf(v, sizeof(v), "e-%d", (int)want);
            assert_int_equal(g[k].id[i], want);
            assert_string_equal(g[k].val[i], v);
        }
        got_t none = {0};
        assert_int_equal(drain(cs[k], &none), 0);
    }
    /* A STREAM subscription beside it sees every element. */
    got_t ga = {0};
    assert_int_equal(drain(all, &ga), 30);
    assert_int_equal(ds_consumer_ack(all, 30), DS_K_OK);
    /* Acks are per consumer: one past what it received is refused. */
    assert_int_equal(ds_consumer_ack(cs[0], 29), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "has not been received"));
    for (int k = 0; k < 3; k++)
        assert_int_equal(ds_consumer_ack(cs[k], g[k].id[9]), DS_K_OK);
    /* Everyone has acknowledged: the pages go. */
    assert_true(dst_wait_stat(&W, "streams.page_bytes", 0, 10000));
    for (int k = 0; k < 3; k++)
        assert_int_equal(ds_consumer_close(cs[k]), DS_K_OK);
    assert_int_equal(ds_consumer_close(all), DS_K_OK);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    ds_client_close(c);
}

/* A consumer in its own process: subscribes to "rr", receives `want`
 * elements, acknowledges the first `ack` of them (writing their ids to fd),
 * then waits to be killed. */
static pid_t child_consumer(const char *stream, ds_subscription_type_t type, int want, int ack,
                            int ready_fd, int go_fd)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    if (c == NULL) _exit(2);
    ds_consumer_t *cs;
    if (ds_stream_subscribe(c, stream, "shared", type, &cs) != DS_K_OK) _exit(3);
    if (write(ready_fd, "s", 1) != 1) _exit(4);
    char x;
    if (read(go_fd, &x, 1) != 1) _exit(5);
    ds_element_t *els;
    size_t n;
    if (ds_consumer_receive(cs, (uint32_t)want, 10000, &els, &n) != DS_K_OK || n != (size_t)want)
        _exit(6);
    uint64_t ids[64];
    for (int i = 0; i < want && i < 64; i++)
        ids[i] = els[i].id;
    ds_elements_free(els);
    if (ack > 0 && ds_consumer_ack(cs, ids[ack - 1]) != DS_K_OK) _exit(7);
    if (write(ready_fd, ids, sizeof(uint64_t) * (size_t)want) != (ssize_t)(sizeof(uint64_t) * want))
        _exit(8);
    pause(); /* killed by the parent */
    _exit(0);
}

static void test_round_robin_dead_consumer_redelivers(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_t *p = producer(c, "s_rrd", 0);
    ds_consumer_t *mine = sub(c, "s_rrd", "shared", DS_SUB_ROUND_ROBIN);
    int up[2], go[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pid = child_consumer("s_rrd", DS_SUB_ROUND_ROBIN, 5, 2, up[1], go[0]);
    char x;
    assert_int_equal(read(up[0], &x, 1), 1);
    assert_true(dst_wait_stat(&W, "streams.consumers", 2, 10000));
    for (int i = 1; i <= 10; i++) {
        char v[16];
        snprintf(v, sizeof(v), "d-%d", i);
        send_str(p, v);
    }
    /* Mine joined first: odd ids; the child's: even. */
    assert_int_equal(write(go[1], "g", 1), 1);
    uint64_t child_ids[5];
    assert_int_equal(read(up[0], child_ids, sizeof(child_ids)), (ssize_t)sizeof(child_ids));
    for (int i = 0; i < 5; i++)
        assert_int_equal(child_ids[i], (uint64_t)(2 + 2 * i));
    got_t g = {0};
    assert_int_equal(drain(mine, &g), 5);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    /* Its session ends: the three it received and did not acknowledge (ids
     * 6, 8, 10) come to the survivor, once, ascending. */
    assert_true(dst_wait_stat(&W, "streams.consumers", 1, 10000));
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(mine, 3, 10000, &els, &n), DS_K_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        char v[16];
        snprintf(v, sizeof(v), "d-%d", 6 + 2 * i);
        assert_int_equal(els[i].id, (uint64_t)(6 + 2 * i));
        assert_memory_equal(els[i].ptr, v, strlen(v));
    }
    ds_elements_free(els);
    got_t none = {0};
    assert_int_equal(drain(mine, &none), 0);
    /* New elements now all come here. */
    send_str(p, "after");
    assert_int_equal(drain(mine, &none), 1);
    assert_int_equal(none.id[0], 11);
    assert_int_equal(ds_consumer_ack(mine, 11), DS_K_OK);
    assert_true(dst_wait_stat(&W, "streams.page_bytes", 0, 10000));
    assert_int_equal(ds_consumer_close(mine), DS_K_OK);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    for (int i = 0; i < 2; i++) {
        close(up[i]);
        close(go[i]);
    }
    ds_client_close(c);
}

/* Which producer ("a".."c") a payload "a-3" came from, and its number. */
static int key_of(const char *v, int *num)
{
    *num = atoi(v + 2);
    return v[0] - 'a';
}

static void test_key_partitions(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_t *p[3];
    for (int k = 0; k < 3; k++)
        p[k] = producer(c, "s_kp", 0);
    ds_consumer_t *cs[2];
    for (int k = 0; k < 2; k++)
        cs[k] = sub(c, "s_kp", "kp", DS_SUB_KEY_PARTITIONS);
    /* Interleaved: a-1 b-1 c-1 a-2 ... */
    for (int i = 1; i <= 8; i++)
        for (int k = 0; k < 3; k++) {
            char v[16];
            snprintf(v, sizeof(v), "%c-%d", 'a' + k, i);
            send_str(p[k], v);
        }
    got_t g[2] = {0};
    int owner[3] = {-1, -1, -1}, last[3] = {0, 0, 0};
    for (int k = 0; k < 2; k++) {
        drain(cs[k], &g[k]);
        for (int i = 0; i < g[k].n; i++) {
            int num, key = key_of(g[k].val[i], &num);
            /* One consumer per key, each key's elements in the order sent. */
            if (owner[key] < 0) owner[key] = k;
            assert_int_equal(owner[key], k);
            assert_int_equal(num, last[key] + 1);
            last[key] = num;
            if (i > 0) assert_true(g[k].id[i] > g[k].id[i - 1]);
        }
    }
    /* Every element exactly once; keys spread over both consumers (the
     * first key seen goes to the consumer with fewest keys). */
    assert_int_equal(g[0].n + g[1].n, 24);
    for (int k = 0; k < 3; k++)
        assert_int_equal(last[k], 8);
    assert_int_equal(owner[0], 0);
    assert_int_equal(owner[1], 1);
    /* cs[owner of a] acknowledges part, then closes: the rest of its keys'
     * elements go to the other consumer, in order, and so do new ones. */
    int dead = owner[0], live = 1 - dead;
    assert_int_equal(ds_consumer_ack(cs[dead], g[dead].id[1]), DS_K_OK);
    assert_int_equal(ds_consumer_close(cs[dead]), DS_K_OK);
    send_str(p[0], "a-9");
    got_t r = {0};
    drain(cs[live], &r);
    assert_int_equal(r.n, g[dead].n - 2 + 1);
    int lastr[3] = {0, 0, 0};
    for (int i = 0; i < r.n; i++) {
        int num, key = key_of(r.val[i], &num);
        assert_int_not_equal(key, 1); /* b stayed with live and was received */
        if (lastr[key]) assert_int_equal(num, lastr[key] + 1);
        lastr[key] = num;
    }
    assert_int_equal(lastr[0], 9);
    for (int k = 0; k < 3; k++)
        assert_int_equal(ds_producer_close(p[k]), DS_K_OK);
    assert_int_equal(ds_consumer_close(cs[live]), DS_K_OK);
    ds_client_close(c);
}

typedef struct {
    ds_consumer_t *cs;
    uint32_t expect;
    size_t n;
    ds_status_t st;
} recv_t;

static void *recv_thread(void *arg)
{
    recv_t *a = arg;
    ds_element_t *els = NULL;
    a->st = ds_consumer_receive(a->cs, a->expect, 30000, &els, &a->n);
    if (a->st == DS_K_OK) ds_elements_free(els);
    return NULL;
}

/* delay_flush_time_ms: a parked receive is woken by the flush, not by the
 * send; a full page and the producer's close flush. */
static void test_delay_flush(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_client_t *c2 = dst_connect(&W, DS_TRANSPORT_AUTO);
    ds_producer_t *p = producer(c, "s_delay", 600000);
    ds_consumer_t *cs = sub(c2, "s_delay", "parked", DS_SUB_STREAM);
    ds_consumer_t *look = sub(c, "s_delay", "looks", DS_SUB_STREAM);
    recv_t a = {cs, 1, 0, DS_K_OK};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, recv_thread, &a), 0);
    assert_true(dst_wait_stat(&W, "streams.waits", 1, 10000));
    char buf[1000];
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(ds_producer_send(p, buf, sizeof(buf), -1), DS_K_OK);
    /* Sent and readable, but the parked receive sleeps on. */
    ds_element_t *els;
    size_t n;
    assert_int_equal(ds_consumer_receive(look, 1, 0, &els, &n), DS_K_OK);
    assert_int_equal(n, 1);
    ds_elements_free(els);
    assert_int_equal(dst_stat(&W, "streams.waits"), 1);
    /* Three more fill the 4 KiB page; the fifth needs a new one: a flush. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ds_producer_send(p, buf, sizeof(buf), -1), DS_K_OK);
    assert_int_equal(dst_stat(&W, "streams.waits"), 1);
    assert_int_equal(ds_producer_send(p, buf, sizeof(buf), -1), DS_K_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(a.st, DS_K_OK);
    assert_int_equal(a.n, 1);
    /* Four are there; a receive of five waits; the fifth send does not wake
     * it, the producer's close does. */
    recv_t b = {cs, 5, 0, DS_K_OK};
    assert_int_equal(pthread_create(&th, NULL, recv_thread, &b), 0);
    assert_true(dst_wait_stat(&W, "streams.waits", 1, 10000));
    assert_int_equal(ds_producer_send(p, buf, sizeof(buf), -1), DS_K_OK);
    assert_int_equal(dst_stat(&W, "streams.waits"), 1);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(b.st, DS_K_OK);
    assert_int_equal(b.n, 5);
    /* Without a delay the send wakes it. */
    p = producer(c, "s_delay", 0);
    recv_t d = {cs, 1, 0, DS_K_OK};
    assert_int_equal(pthread_create(&th, NULL, recv_thread, &d), 0);
    assert_true(dst_wait_stat(&W, "streams.waits", 1, 10000));
    assert_int_equal(ds_producer_send(p, buf, sizeof(buf), -1), DS_K_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    assert_int_equal(ds_consumer_close(look), DS_K_OK);
    ds_client_close(c);
    ds_client_close(c2);
}

/* --sc_metrics_log_interval_s: the worker logs its stream figures that often. */
static void test_metrics_log_interval(void **state)
{
    (void)state;
    dst_worker_t w2;
    assert_int_equal(dst_worker_start(&w2, 32, "--sc_metrics_log_interval_s 1 --log_level info"),
                     0);
    ds_client_t *c = dst_connect(&w2, DS_TRANSPORT_AUTO);
    ds_producer_t *p = producer(c, "s_metrics", 0);
    ds_consumer_t *cs = sub(c, "s_metrics", "m", DS_SUB_STREAM);
    send_str(p, "m");
    bool seen = false;
    char line[1024];
    for (int i = 0; i < 100 && !seen; i++) {
        FILE *f = fopen(w2.logpath, "r");
        assert_non_null(f);
        while (!seen && fgets(line, sizeof(line), f))
            seen = strstr(line, "streams metrics: streams 1, producers 1, consumers 1") != NULL;
        fclose(f);
        if (!seen) usleep(100000);
    }
    assert_true(seen);
    assert_int_equal(ds_producer_close(p), DS_K_OK);
    assert_int_equal(ds_consumer_close(cs), DS_K_OK);
    ds_client_close(c);
    assert_int_equal(dst_worker_stop(&w2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_robin),
        cmocka_unit_test(test_round_robin_dead_consumer_redelivers),
        cmocka_unit_test(test_key_partitions),
        cmocka_unit_test(test_delay_flush),
        cmocka_unit_test(test_metrics_log_interval),
    };
    dst_group_worker(&W, 64, NULL);
    return dst_run_group_tests(tests, dst_group_setup, dst_group_teardown);
}
