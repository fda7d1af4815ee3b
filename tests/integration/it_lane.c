/* Request lanes (common/lane.h) against a real worker.
 *
 * The client library: local sets and gets of every size are answered
 * through the lane (the worker's lane_requests counter moves by the number
 * of requests), values come back intact, a subscribe-get that waits longer
 * than the client polls sleeps on the lane and is woken by the publish; a
 * request after the worker fell asleep goes through the doorbell;
 * DS_CLIENT_LANE=0 keeps every request on the socket; many threads on
 * their own lanes interleave correctly; ds_client_close ends a call that
 * sleeps on its lane at once; a worker killed while a client waits on its
 * lane is noticed within a second, not at the deadline; large sets that
 * wake the worker ahead of their request store their bytes intact, and a
 * promise of a request keeps the worker polling only within its limit.
 *
 * A hostile client with a lane of its own (raw protocol, the arena
 * mapped): a request length out of range, a garbage frame, and a lane
 * request while its socket request is parked each close that connection
 * only, with the reason; a request sent as soon as the answer to a
 * subscribe-get arrived waits for the connection to resume (it is not such
 * a request); a request under a wrong generation is ignored; a
 * well-formed lane request is answered in the lane; LANE twice, over TCP
 * or without the arena is refused with a message. Other clients and the
 * values already stored are untouched throughout. */
#include "harness.h"
#include "it_hostile_raw.h"

#include "common/lane.h"

#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 256, NULL);
}

static int teardown(void **state)
{
    (void)state;
    /* A clean exit: no sanitizer report, no leak. */
    if (W.pid > 0) assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

static double lane_requests(void)
{
    return dst_stat(&W, "lane_requests");
}

static void test_client_uses_lanes(void **state)
{
    (void)state;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    static const size_t sizes[] = {1, 1000, 4096, 4097, 65536, 1u << 20, 5u << 20};
    uint8_t *out = malloc(5u << 20);
    assert_non_null(out);
    /* Warm: the connection and its lane exist. */
    assert_int_equal(dst_set_filled(c, "lane-warm", 10, 1), DS_K_OK);
    double before = lane_requests();
    int sets = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (uint64_t round = 0; round < 10; round++) {
            uint64_t seed = s * 1000 + round;
            assert_int_equal(dst_set_filled(c, "lane-k", sizes[s], seed), DS_K_OK);
            sets++;
            size_t len = 0;
            assert_int_equal(ds_kv_get_into(c, "lane-k", 0, out, 5u << 20, &len), DS_K_OK);
            assert_int_equal(len, sizes[s]);
            assert_true(dst_check(out, len, seed));
        }
    /* Every set went through the lane (gets of small values are read from
     * the shared index without a request). */
    assert_true(lane_requests() - before >= sets);

    /* A subscribe-get outlasting the polling window: the client sleeps on
     * its lane and the publish from another client wakes it. */
    ds_client_t *p = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(p);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        usleep(300000);
        _exit(dst_set_filled(p, "lane-later", 3000, 77) == DS_K_OK ? 0 : 1);
    }
    uint64_t t0 = ds__now_ms();
    size_t len = 0;
    assert_int_equal(ds_kv_get_into(c, "lane-later", 5000, out, 5u << 20, &len), DS_K_OK);
    uint64_t dt = ds__now_ms() - t0;
    assert_int_equal(len, 3000);
    assert_true(dst_check(out, len, 77));
    assert_true(dt >= 250 && dt < 2500);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);

    /* After a second of quiet the worker sleeps: the next request rings
     * the doorbell and is answered at once. */
    usleep(1000000);
    before = lane_requests();
    t0 = ds__now_ms();
    assert_int_equal(dst_set_filled(c, "lane-bell", 100, 5), DS_K_OK);
    assert_true(ds__now_ms() - t0 < 2000);
    assert_true(lane_requests() - before >= 1);
    ds_client_close(p);
    ds_client_close(c);
    free(out);
}

static void test_lanes_off(void **state)
{
    (void)state;
    setenv("DS_CLIENT_LANE", "0", 1);
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    unsetenv("DS_CLIENT_LANE");
    assert_non_null(c);
    double before = lane_requests();
    for (int i = 0; i < 50; i++)
        assert_int_equal(dst_set_filled(c, "lane-off", 2000, (uint64_t)i), DS_K_OK);
    assert_true(lane_requests() == before);
    ds_client_close(c);
}

typedef struct {
    int id;
    int failures;
} worker_arg_t;

static void *hammer(void *p)
{
    worker_arg_t *a = p;
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    if (c == NULL) {
        a->failures++;
        return NULL;
    }
    char key[32];
    uint8_t out[8192];
    for (int i = 0; i < 400; i++) {
        snprintf(key, sizeof(key), "lane-t%d-%d", a->id, i % 7);
        size_t sz = 1 + (size_t)((i * 131 + a->id * 17) % 8000);
        uint64_t seed = (uint64_t)(a->id * 100000 + i);
        size_t len = 0;
        if (dst_set_filled(c, key, sz, seed) != DS_K_OK ||
            ds_kv_get_into(c, key, 0, out, sizeof(out), &len) != DS_K_OK || len != sz ||
            !dst_check(out, len, seed))
            a->failures++;
    }
    ds_client_close(c);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    enum { N = 8 };
    pthread_t t[N];
    worker_arg_t a[N];
    double before = lane_requests();
    for (int i = 0; i < N; i++) {
        a[i] = (worker_arg_t){.id = i};
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &a[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].failures, 0);
    }
    assert_true(lane_requests() - before >= N * 400);
}

typedef struct {
    ds_client_t *c;
    ds_status_t st;
    uint64_t done_ms;
} waiter_t;

static void *wait_long(void *p)
{
    waiter_t *w = p;
    uint8_t out[64];
    size_t len = 0;
    w->st = ds_kv_get_into(w->c, "lane-never-close", 20000, out, sizeof(out), &len);
    w->done_ms = ds__now_ms();
    return NULL;
}

/* How long after ds_client_close a call asleep on its lane returns; with
 * stop, the worker is stopped meanwhile (it cannot answer the hang-up). */
static uint64_t close_while_waiting(bool stop)
{
    waiter_t w = {.c = dst_connect(&W, DS_TRANSPORT_LOCAL)};
    assert_non_null(w.c);
    assert_int_equal(dst_set_filled(w.c, "lane-y", 10, 1), DS_K_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_long, &w), 0);
    /* Early in one of the waiter's sleeps (DS_LANE_SLEEP_SLICE_MS, from
     * the request on): without the kick the wait would last ~45 ms more. */
    usleep(305000);
    if (stop) assert_int_equal(kill(W.pid, SIGSTOP), 0);
    uint64_t t0 = ds__now_ms();
    ds_client_close(w.c);
    pthread_join(t, NULL);
    if (stop) assert_int_equal(kill(W.pid, SIGCONT), 0);
    assert_int_not_equal(w.st, DS_K_OK);
    return w.done_ms - t0;
}

/* ds_client_close ends a call that sleeps on its lane at once, not at the
 * next look at the socket, even when the worker cannot react. The
 * reference is the same close with the worker running, which wakes the
 * client through the lane itself: both then spend the same time failing
 * the call (unmapping the arena, ~15 ms here, more under TSan). A missed
 * kick costs every stopped close the rest of a sleep slice (~45 ms), while
 * a busy machine delays some closes of either kind: so the quickest of
 * three stopped closes is compared with the slowest of three running ones. */
static void test_close_during_wait(void **state)
{
    (void)state;
    uint64_t running = 0, stopped = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        uint64_t r = close_while_waiting(false), s = close_while_waiting(true);
        print_message("close ended the call after %llu ms (worker stopped), %llu ms (running)\n",
                      (unsigned long long)s, (unsigned long long)r);
        if (r > running) running = r;
        if (s < stopped) stopped = s;
    }
    assert_true(stopped < running + 25);
}

/* ---- a raw client with a lane of its own ---- */

typedef struct {
    hr_conn_t c;
    uint8_t *base;
    size_t size;
    ds_lane_t *lane;
    ds_lane_hub_t *hub;
    uint32_t gen;
    uint32_t idx; /* the lane's bit in the hub's ready mask */
    int bell;
} raw_lane_t;

/* HELLO with the arena, then LANE; the status of LANE's answer. */
static uint32_t raw_open(raw_lane_t *r, bool unix_sock, bool want_shm)
{
    memset(r, 0, sizeof(*r));
    r->bell = -1;
    assert_int_equal(hr_open(&r->c, &W, unix_sock), 0);
    r->c.keep_fds = true;
    assert_int_equal(hr_hello(&r->c, 0, want_shm, "", 3000), 0);
    assert_int_equal(r->c.hello_status, 0);
    uint64_t id = hr_add(&r->c, DS_OP_LANE, NULL, NULL, 0);
    assert_int_equal(hr_flush(&r->c), 0);
    hr_frame_t *f = hr_answer(&r->c, id, ds__now_ms() + 3000);
    assert_non_null(f);
    if (f->h.status != 0) {
        print_message("LANE refused: %s\n", f->err);
        return f->h.status;
    }
    assert_int_equal(r->c.nfds, 2); /* the arena, then the doorbell */
    struct stat st;
    assert_int_equal(fstat(r->c.fds[0], &st), 0);
    r->size = (size_t)st.st_size;
    r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->c.fds[0], 0);
    assert_true(r->base != MAP_FAILED);
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, f->meta, f->h.meta_len);
    const char *s;
    (void)ds__rbuf_str(&rb, &s);
    uint64_t hub = ds__rbuf_u64(&rb), lane = ds__rbuf_u64(&rb);
    r->gen = ds__rbuf_u32(&rb);
    assert_false(rb.err);
    assert_true(lane + DS_LANE_SIZE <= r->size && hub + DS_LANE_SIZE <= r->size);
    r->hub = (ds_lane_hub_t *)(void *)(r->base + hub);
    r->lane = (ds_lane_t *)(void *)(r->base + lane);
    assert_true(lane > hub && (lane - hub) % DS_LANE_SIZE == 0);
    r->idx = (uint32_t)((lane - hub) / DS_LANE_SIZE - 1);
    r->bell = r->c.fds[1];
    return 0;
}

static void raw_close(raw_lane_t *r)
{
    if (r->base) munmap(r->base, r->size);
    hr_close(&r->c);
}

/* Puts len bytes into the lane as a request under gen (claiming claim
 * bytes); with ring, tells the worker (ready mask, doorbell). */
static void raw_put(raw_lane_t *r, const void *p, uint32_t len, uint32_t gen, uint32_t claim,
                    bool ring)
{
    memcpy(r->lane->req, p, len < DS_LANE_REQ_MAX ? len : DS_LANE_REQ_MAX);
    atomic_store(&r->lane->req_len, claim);
    atomic_store(&r->lane->req_gen, gen);
    atomic_fetch_add(&r->lane->req_seq, 1);
    if (!ring) return;
    atomic_fetch_or(&r->hub->ready[r->idx / 64], UINT64_C(1) << (r->idx % 64));
    uint64_t one = 1;
    assert_int_equal(write(r->bell, &one, sizeof(one)), sizeof(one));
}

static void raw_send(raw_lane_t *r, const void *p, uint32_t len, uint32_t gen, uint32_t claim)
{
    raw_put(r, p, len, gen, claim, true);
}

/* Builds one request frame (as the raw client would send it) into the
 * lane and sends it; its request id. */
static uint64_t raw_request(raw_lane_t *r, uint16_t op, const ds_wbuf_t *m, const void *data,
                            size_t dlen, bool ring)
{
    uint64_t id = hr_add(&r->c, op, m, data, dlen);
    assert_true(r->c.out.len <= DS_LANE_REQ_MAX);
    raw_put(r, r->c.out.buf, (uint32_t)r->c.out.len, r->gen, (uint32_t)r->c.out.len, ring);
    ds__wbuf_reset(&r->c.out);
    return id;
}

/* A HEALTH request frame into buf; its length. */
static uint32_t health_frame(uint8_t *buf, uint64_t id)
{
    ds_wire_header_t h = {
        .magic = DS_WIRE_MAGIC, .version = DS_WIRE_VERSION, .opcode = DS_OP_HEALTH, .req_id = id};
    ds__wire_header_encode(&h, buf);
    return DS_WIRE_HEADER_LEN;
}

/* Waits up to ms for rep_seq to move past seen. */
static bool rep_moved(raw_lane_t *r, uint32_t seen, int ms)
{
    uint64_t until = ds__now_ms() + (uint64_t)ms;
    while (ds__now_ms() < until) {
        if (atomic_load(&r->lane->rep_seq) != seen) return true;
        usleep(1000);
    }
    return false;
}

/* The worker closed the raw connection (EOF after any answers). */
static bool closed_by_worker(raw_lane_t *r)
{
    hr_frame_t f;
    uint64_t until = ds__now_ms() + 3000;
    for (;;) {
        if (hr_read_frame(&r->c, &f, until) != 0) return errno == ECONNRESET;
        hr_frame_free(&f);
    }
}

static void test_hostile_lane(void **state)
{
    (void)state;
    ds_client_t *good = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(good);
    assert_int_equal(dst_set_filled(good, "lane-kept", 50000, 9), DS_K_OK);
    double perr = dst_stat(&W, "clients.protocol_errors");
    uint8_t frame[DS_LANE_REQ_MAX];

    /* A well-formed request is answered in the lane; one under another
     * generation is not looked at. */
    raw_lane_t r;
    assert_int_equal(raw_open(&r, true, true), 0);
    uint32_t n = health_frame(frame, 1000);
    raw_send(&r, frame, n, r.gen + 1, n);
    assert_false(rep_moved(&r, 0, 300));
    raw_send(&r, frame, n, r.gen, n);
    assert_true(rep_moved(&r, 0, 3000));
    uint32_t len = atomic_load(&r.lane->rep_len);
    assert_true(len >= DS_WIRE_HEADER_LEN && len <= DS_LANE_REP_MAX);
    ds_wire_header_t h;
    char err[128];
    assert_int_equal(ds__wire_header_decode(r.lane->rep, 0, &h, err, sizeof(err)), 0);
    assert_int_equal(h.opcode, DS_OP_HEALTH);
    assert_int_equal(h.req_id, 1000);
    assert_int_equal(h.status, DS_K_OK);
    /* LANE twice. */
    uint64_t id = hr_add(&r.c, DS_OP_LANE, NULL, NULL, 0);
    assert_int_equal(hr_flush(&r.c), 0);
    hr_frame_t *f = hr_answer(&r.c, id, ds__now_ms() + 3000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_INVALID);
    assert_non_null(strstr(f->err, "LANE asked twice"));
    /* A length beyond the lane closes the connection. */
    raw_send(&r, frame, n, r.gen, DS_LANE_REQ_MAX + 1);
    assert_true(closed_by_worker(&r));
    assert_int_equal(atomic_load(&r.lane->closed), 1);
    raw_close(&r);

    /* A frame that does not decode: the error answer comes on the socket
     * (the lane says so), then the connection closes. */
    assert_int_equal(raw_open(&r, true, true), 0);
    memset(frame, 0xAB, 64);
    raw_send(&r, frame, 64, r.gen, 64);
    assert_true(rep_moved(&r, 0, 3000));
    assert_int_equal(atomic_load(&r.lane->rep_len), DS_LANE_ON_SOCKET);
    hr_frame_t e;
    assert_int_equal(hr_read_frame(&r.c, &e, ds__now_ms() + 3000), 0);
    assert_int_equal(e.h.status, DS_K_INVALID);
    assert_non_null(strstr(e.err, "protocol error"));
    hr_frame_free(&e);
    assert_true(closed_by_worker(&r));
    raw_close(&r);

    /* A lane request while a socket request is parked. */
    assert_int_equal(raw_open(&r, true, true), 0);
    (void)hr_get(&r.c, "lane-never", 5000, 0);
    assert_int_equal(hr_flush(&r.c), 0);
    usleep(100000);
    raw_send(&r, frame, health_frame(frame, 2000), r.gen, DS_WIRE_HEADER_LEN);
    assert_true(closed_by_worker(&r));
    raw_close(&r);

    /* A length too short for a header. */
    assert_int_equal(raw_open(&r, true, true), 0);
    raw_send(&r, frame, 5, r.gen, 5);
    assert_true(closed_by_worker(&r));
    raw_close(&r);

    assert_true(dst_stat(&W, "clients.protocol_errors") >= perr + 4);

    /* No lane over TCP, nor without the arena. */
    assert_int_equal(raw_open(&r, false, false), DS_K_NOT_SUPPORTED);
    raw_close(&r);
    assert_int_equal(raw_open(&r, true, false), DS_K_NOT_SUPPORTED);
    raw_close(&r);

    /* The others were not touched. */
    uint8_t *out = malloc(50000);
    size_t got = 0;
    assert_int_equal(ds_kv_get_into(good, "lane-kept", 0, out, 50000, &got), DS_K_OK);
    assert_int_equal(got, 50000);
    assert_true(dst_check(out, got, 9));
    assert_int_equal(ds_client_health_check(good), DS_K_OK);
    free(out);
    ds_client_close(good);
}

/* A client's next request can reach its lane as soon as the answer to its
 * subscribe-get is there, perhaps before the worker has resumed the
 * connection (the loop completes the wait after the event of the publish,
 * which came from another lane): it is served, not taken for a request sent
 * while the get was still waiting. */
static void test_request_right_after_a_wait(void **state)
{
    (void)state;
    raw_lane_t x, y;
    assert_int_equal(raw_open(&x, true, true), 0);
    assert_int_equal(raw_open(&y, true, true), 0);
    raw_lane_t *a = &x, *b = &y;
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_get(&m, "lane-early", 5000, 0);
    uint64_t get_id = raw_request(a, DS_OP_GET, &m, NULL, 0, true);
    ds__wbuf_reset(&m);
    usleep(100000); /* parked */
    assert_int_equal(atomic_load(&a->lane->rep_seq), 0);
    hr_m_set(&m, "lane-early", 5);
    (void)raw_request(b, DS_OP_SET, &m, "hello", 5, true);
    ds__wbuf_free(&m);
    assert_true(rep_moved(b, 0, 3000));
    /* a's get answered (rep_seq 1): its HEALTH goes in at once, then is
     * answered (2) on the same lane. */
    assert_true(rep_moved(a, 0, 3000));
    uint8_t health[DS_WIRE_HEADER_LEN];
    uint64_t health_id = a->c.next_id++;
    health_frame(health, health_id);
    raw_put(a, health, sizeof(health), a->gen, sizeof(health), true);
    uint64_t until = ds__now_ms() + 3000;
    while (atomic_load(&a->lane->rep_seq) < 2 && ds__now_ms() < until)
        usleep(1000);
    assert_int_equal(atomic_load(&a->lane->rep_seq), 2);
    ds_wire_header_t h;
    char err[128];
    assert_int_equal(ds__wire_header_decode(a->lane->rep, 0, &h, err, sizeof(err)), 0);
    assert_int_equal(h.opcode, DS_OP_HEALTH);
    assert_int_equal(h.req_id, health_id);
    assert_int_equal(h.status, DS_K_OK);
    assert_true(get_id != health_id);
    assert_int_equal(atomic_load(&a->lane->closed), 0);
    raw_close(&x);
    raw_close(&y);
}

/* Waking ahead (DS_LANE_AHEAD_MIN): large local sets, whose copy the
 * client splits where it promises the worker a request, store every byte
 * in place, with the split inside a piece, on a piece boundary, and in
 * multi-key sets, and a buffer filled by ds_buffer_memory_copy; each
 * promise is taken back by the request it announced.
 * A promise from a raw client within the limit keeps the worker polling;
 * one further ahead than any client makes is ignored. */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 131u + seed * 7u) ^ (i >> 12));
}

static double polled_us(void)
{
    return dst_stat(&W, "polling.polled_us");
}

static double promised(void)
{
    return dst_stat(&W, "polling.promised");
}

static void test_wake_ahead(void **state)
{
    (void)state;
    raw_lane_t r;
    assert_int_equal(raw_open(&r, true, true), 0);
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    enum { BIG = 3u << 20 };
    uint8_t *src = malloc(BIG + 64), *out = malloc(BIG); /* a value starts up to 3 bytes in */
    assert_non_null(src);
    assert_non_null(out);
    fill(src, BIG + 64, 9);
    /* Piece layouts: {lens}, the promise falling inside one piece, on a
     * boundary, before the first byte (a value under DS_LANE_AHEAD_BYTES). */
    static const size_t layouts[][3] = {{DS_LANE_AHEAD_MIN, 0, 0},
                                        {1, DS_LANE_AHEAD_BYTES, 0},
                                        {600u << 10, 600u << 10, 0},
                                        {100, DS_LANE_AHEAD_BYTES + 4096, 77},
                                        {BIG, 0, 0}};
    double before = lane_requests();
    int requests = 0;
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++)
        for (int round = 0; round < 4; round++) {
            const void *pieces[3];
            size_t lens[3], n = 0, total = 0;
            for (size_t i = 0; i < 3 && layouts[l][i]; i++) {
                pieces[n] = src + total + (size_t)round;
                lens[n] = layouts[l][i];
                total += lens[n++];
            }
            assert_int_equal(ds_kv_setv(c, "ahead-k", n, pieces, lens, NULL), DS_K_OK);
            requests++;
            assert_int_equal(atomic_load(&r.hub->soon), 0);
            size_t len = 0;
            assert_int_equal(ds_kv_get_into(c, "ahead-k", 0, out, BIG, &len), DS_K_OK);
            assert_int_equal(len, total);
            assert_memory_equal(out, src + round, total);
        }
    /* Two keys in one set, the promise inside the second. */
    const char *keys[2] = {"ahead-a", "ahead-b"};
    const void *vals[2] = {src, src + (700u << 10)};
    size_t lens[2] = {700u << 10, 700u << 10};
    assert_int_equal(ds_kv_mset(c, 2, keys, vals, lens, NULL, NULL), DS_K_OK);
    assert_int_equal(atomic_load(&r.hub->soon), 0);
    for (int k = 0; k < 2; k++) {
        size_t len = 0;
        assert_int_equal(ds_kv_get_into(c, keys[k], 0, out, BIG, &len), DS_K_OK);
        assert_int_equal(len, lens[k]);
        assert_memory_equal(out, vals[k], len);
    }
    assert_true(lane_requests() - before >= requests);

    /* A promise within the limit keeps the worker polling (polling.promised
     * counts the loop turns it kept; how long they last depends on whether
     * the machine has other work) ... */
    double p0 = promised();
    uint64_t one = 1;
    /* (A loaded machine may take the worker longer than the promise to
     * wake: a few tries.) */
    for (int t = 0; t < 20 && promised() == p0; t++) {
        atomic_store(&r.hub->soon, ds__now_ns() + DS_LANE_AHEAD_MAX_NS - 50000);
        assert_int_equal(write(r.bell, &one, sizeof(one)), sizeof(one));
        usleep(20000);
    }
    assert_true(promised() - p0 >= 1);
    /* ... lies do not: due later than any client promises, or never. */
    static const uint64_t lies[] = {10000000000ull, UINT64_MAX};
    for (size_t i = 0; i < 2; i++) {
        p0 = promised();
        double polled0 = polled_us();
        uint64_t now = ds__now_ns();
        atomic_store(&r.hub->soon, lies[i] == UINT64_MAX ? UINT64_MAX : now + lies[i]);
        assert_int_equal(write(r.bell, &one, sizeof(one)), sizeof(one));
        usleep(300000);
        print_message("a promise %s ahead: the worker polled %.0f us in 300 ms\n",
                      i ? "forever" : "10 s", polled_us() - polled0);
        assert_true(promised() == p0);
    }
    /* A client's promise replaces a lie (else the lie would cost it its own
     * promise), and its request takes it back. No promise is made from the
     * worker's CPU: the worker on CPU 0, this thread on CPU 1. */
    cpu_set_t all, one_cpu;
    CPU_ZERO(&one_cpu);
    CPU_SET(0, &one_cpu);
    bool pinned = sysconf(_SC_NPROCESSORS_ONLN) >= 2 &&
                  sched_getaffinity(0, sizeof(all), &all) == 0 &&
                  sched_setaffinity(W.pid, sizeof(one_cpu), &one_cpu) == 0;
    if (pinned) {
        CPU_ZERO(&one_cpu);
        CPU_SET(1, &one_cpu);
        pinned = sched_setaffinity(0, sizeof(one_cpu), &one_cpu) == 0;
    }
    atomic_store(&r.hub->soon, UINT64_MAX);
    for (int round = 0; round < 4; round++) {
        usleep(20000); /* the worker sleeps, wakes on CPU 0 and says so */
        assert_int_equal(dst_set_filled(c, "ahead-k", 2u << 20, (uint64_t)round), DS_K_OK);
    }
    uint64_t left = atomic_load(&r.hub->soon);
    /* The object path alike: a buffer filled by ds_buffer_memory_copy
     * promises the publish that follows, which takes the promise back, and
     * the value is stored whole. */
    atomic_store(&r.hub->soon, UINT64_MAX);
    for (int round = 0; round < 4; round++) {
        usleep(20000);
        ds_buffer_t *b = NULL;
        assert_int_equal(ds_kv_create(c, "ahead-o", 2u << 20, NULL, &b), DS_K_OK);
        assert_int_equal(ds_buffer_memory_copy(b, src + round, 2u << 20), DS_K_OK);
        assert_int_equal(ds_kv_publish(c, b), DS_K_OK);
        ds_buffer_release(b);
        size_t len = 0;
        assert_int_equal(ds_kv_get_into(c, "ahead-o", 0, out, BIG, &len), DS_K_OK);
        assert_int_equal(len, 2u << 20);
        assert_memory_equal(out, src + round, len);
    }
    uint64_t left_obj = atomic_load(&r.hub->soon);
    if (pinned) {
        assert_int_equal(left, 0);
        assert_int_equal(left_obj, 0);
        sched_setaffinity(0, sizeof(all), &all);
        sched_setaffinity(W.pid, sizeof(all), &all);
    } else {
        print_message("fewer than 2 CPUs: the lie may stand (no promise was due)\n");
        assert_true(left == 0 || left == UINT64_MAX);
        assert_true(left_obj == 0 || left_obj == UINT64_MAX);
    }
    atomic_store(&r.hub->soon, 0);
    /* Values stored meanwhile are intact; the client goes on. */
    size_t len = 0;
    assert_int_equal(ds_kv_get_into(c, "ahead-b", 0, out, BIG, &len), DS_K_OK);
    assert_memory_equal(out, vals[1], lens[1]);
    assert_int_equal(dst_set_filled(c, "ahead-after", 5000, 3), DS_K_OK);
    raw_close(&r);
    ds_client_close(c);
    free(src);
    free(out);
}

/* A worker of its own, killed while a client waits on its lane. */
static void test_worker_dies_during_wait(void **state)
{
    (void)state;
    dst_worker_t K;
    assert_int_equal(dst_worker_start(&K, 256, NULL), 0);
    ds_client_t *c = dst_connect(&K, DS_TRANSPORT_LOCAL);
    assert_non_null(c);
    assert_int_equal(dst_set_filled(c, "lane-x", 10, 1), DS_K_OK);
    pid_t wpid = K.pid;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        usleep(300000);
        kill(wpid, SIGKILL);
        _exit(0);
    }
    uint64_t t0 = ds__now_ms();
    uint8_t out[64];
    size_t len = 0;
    ds_status_t st = ds_kv_get_into(c, "lane-never-set", 20000, out, sizeof(out), &len);
    uint64_t dt = ds__now_ms() - t0;
    print_message("get during the kill: %s after %llu ms\n", ds_last_error(),
                  (unsigned long long)dt);
    assert_int_not_equal(st, DS_K_OK);
    assert_true(dt < 10000); /* the kill, not the 20 s timeout */
    int ws;
    waitpid(pid, &ws, 0);
    dst_worker_kill(&K);
    ds_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_uses_lanes), cmocka_unit_test(test_lanes_off),
        cmocka_unit_test(test_threads),           cmocka_unit_test(test_close_during_wait),
        cmocka_unit_test(test_hostile_lane),      cmocka_unit_test(test_request_right_after_a_wait),
        cmocka_unit_test(test_wake_ahead),        cmocka_unit_test(test_worker_dies_during_wait),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
