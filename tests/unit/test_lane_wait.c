/* Unit tests of a client's wait for its answer on a request lane
 * (ds__lane_wait in client/lane.c) against a scripted peer thread that
 * plays the worker's side of the lane protocol (common/lane.h) in plain
 * memory of this process: when a thread that took the waiting thread's CPU
 * counts as contention, and how long the wait polls right after the worker
 * parted from its client (DS_LANE_PARTED_NS). Each case pins the client
 * thread and the peer to the CPUs it needs, so the scheduling it tests
 * happens the same way each time; cases that need two CPUs say so and pass
 * on a machine with one. Other processes still take those CPUs now and
 * then, and then the wait rightly counts contention: each case asserts what
 * a wait does (never or at least once, as the rule says), not the share of
 * waits, and looks only at waits during which the machine was quiet where
 * a busy one would change the answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "client/client_internal.h"
#include "common/clock.h"
#include "common/lane.h"
#include "common/spin.h"
#include "common/wire.h"
#include "machine.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define REPS 40

typedef struct {
    ds_lane_hub_t *hub;
    ds_lane_t *lane;
    int cpu;           /* the CPU it runs on */
    bool shares;       /* on the client's CPU: yields between looks at the lane */
    bool says_cpu;     /* writes hub.worker_cpu before answering, as a worker loop that woke */
    uint64_t delay_ns; /* answers this long after it saw the request */
    atomic_bool stop;
    atomic_int woke; /* answers that found the client asleep on the lane */
} peer_t;

static void pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
}

static void *peer_main(void *arg)
{
    peer_t *p = arg;
    pin_self(p->cpu);
    uint32_t seen = 0;
    while (!atomic_load(&p->stop)) {
        uint32_t seq = atomic_load_explicit(&p->lane->req_seq, memory_order_acquire);
        if (seq == seen) {
            if (p->shares) sched_yield();
            continue;
        }
        seen = seq;
        uint64_t until = ds__now_ns() + p->delay_ns;
        while (ds__now_ns() < until)
            if (p->shares) sched_yield();
        if (p->says_cpu)
            atomic_store_explicit(&p->hub->worker_cpu, (uint32_t)sched_getcpu(),
                                  memory_order_relaxed);
        /* An answer of a bare header: the wait copies it, nothing parses it. */
        memset(p->lane->rep, 0, DS_WIRE_HEADER_LEN);
        atomic_store_explicit(&p->lane->rep_len, DS_WIRE_HEADER_LEN, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->lane->rep_seq, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&p->lane->waiting, memory_order_seq_cst)) {
            ds__futex_wake(&p->lane->rep_seq);
            atomic_fetch_add(&p->woke, 1);
        }
    }
    return NULL;
}

typedef struct {
    void *region; /* the hub, then one lane */
    ds_conn_t conn;
    peer_t peer;
    pthread_t thread;
    cpu_set_t old;
} fixture_t;

/* A connection with a lane, polling up to 200 us, its worker last seen on
 * CPU worker_cpu; the peer on CPU peer_cpu. */
static void begin(fixture_t *f, int peer_cpu, uint32_t worker_cpu, bool says_cpu, uint64_t delay_ns)
{
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(f->old), &f->old), 0);
    pin_self(0);
    f->region = aligned_alloc(64, 2 * DS_LANE_SIZE);
    assert_non_null(f->region);
    memset(f->region, 0, 2 * DS_LANE_SIZE);
    ds_conn_t *c = &f->conn;
    memset(c, 0, sizeof(*c));
    c->sock.fd = -1;
    c->lane.bell_fd = -1; /* the peer never sleeps: no doorbell is rung */
    c->lane.hub = f->region;
    c->lane.l = (ds_lane_t *)(void *)((uint8_t *)f->region + DS_LANE_SIZE);
    c->lane.gen = 1;
    c->lane.cpu = -1;
    ds__spin_init(&c->spin, 200000u);
    atomic_store(&c->lane.hub->worker_cpu, worker_cpu);
    peer_t *p = &f->peer;
    memset(p, 0, sizeof(*p));
    p->hub = c->lane.hub;
    p->lane = c->lane.l;
    p->cpu = peer_cpu;
    p->shares = peer_cpu == 0;
    p->says_cpu = says_cpu;
    p->delay_ns = delay_ns;
    assert_int_equal(pthread_create(&f->thread, NULL, peer_main, p), 0);
}

static void end(fixture_t *f)
{
    atomic_store(&f->peer.stop, true);
    pthread_join(f->thread, NULL);
    free(f->conn.in);
    free(f->region);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(f->old), &f->old), 0);
    /* A wait that counted contention keeps the whole process from polling
     * for DS_SPIN_BACKOFF_NS: the next case starts after it. */
    usleep(2 * DS_SPIN_BACKOFF_NS / 1000);
}

/* One request through the lane and the wait for its answer; whether the
 * wait counted contention. */
static bool round_trip(fixture_t *f)
{
    uint8_t req[DS_WIRE_HEADER_LEN] = {0};
    struct iovec iov = {.iov_base = req, .iov_len = sizeof(req)};
    bool sent = ds__lane_send(&f->conn, &iov, 1), contended = false;
    int rc = sent ? ds__lane_wait(&f->conn, ds__now_ms() + 5000, &contended) : -1;
    if (rc != 0 || f->conn.in_len != DS_WIRE_HEADER_LEN) {
        end(f); /* the peer must not outlive the fixture */
        fail_msg("lane round trip: sent %d, wait %d, answer of %u bytes", sent, rc, f->conn.in_len);
    }
    return contended;
}

/* The worker woken onto the client's CPU (by the client's doorbell: here a
 * peer on CPU 0 that says so in the hub when it runs) takes that CPU in the
 * client's poll step: what the wait waits for, not contention. Counted as
 * contention, it stopped the process's polling for DS_SPIN_BACKOFF_NS. */
static void test_worker_beside_is_no_contention(void **state)
{
    (void)state;
    fixture_t f;
    begin(&f, 0, 1, true, 0);
    int contended = 0, backoff = 0, quiet = 0;
    for (int i = 0; i < REPS; i++) {
        atomic_store(&f.conn.lane.hub->worker_cpu, 1); /* where it ran before it slept */
        f.conn.spin.window_ns = f.conn.spin.max_ns;
        bool busy = machine_busy();
        int c = round_trip(&f);
        /* Whether the next wait would not poll: a backoff began. */
        int b = ds__spin_window(&f.conn.spin, ds__now_ns()) == 0;
        if (busy || machine_busy()) continue;
        quiet++;
        contended += c;
        backoff += b;
    }
    end(&f);
    printf("%d of %d waits on a quiet machine counted the worker woken onto their CPU as "
           "contention, %d began a backoff\n",
           contended, quiet, backoff);
    /* A kernel thread may come first now and then; a wait that counted the
     * worker itself would count it every time. */
    if (quiet > 0) {
        assert_true(contended < quiet);
        assert_true(backoff < quiet);
    }
}

/* Another thread that takes the client's CPU (the hub says the worker runs
 * elsewhere) still counts: polling stops for it. */
static void test_other_thread_is_contention(void **state)
{
    (void)state;
    fixture_t f;
    begin(&f, 0, 1, false, 50000u);
    int contended = 0;
    for (int i = 0; i < REPS; i++) {
        f.conn.spin.window_ns = f.conn.spin.max_ns;
        contended += round_trip(&f);
        usleep(2 * DS_SPIN_BACKOFF_NS / 1000);
    }
    end(&f);
    printf("%d of %d waits counted another thread on their CPU as contention\n", contended, REPS);
    assert_true(contended >= 1);
}

/* A wait that begins within DS_LANE_PARTED_NS of the worker's parting
 * polls for its longest window even when its own has shrunk to nothing, so
 * a worker that takes 80 us to arrive on its new CPU finds the client
 * awake; without a parting such a wait sleeps and its answer wakes it. */
static void test_polls_after_parting(void **state)
{
    (void)state;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("one CPU: a worker that parts needs two\n");
        return;
    }
    fixture_t f;
    begin(&f, 1, 1, false, 80000u);
    /* A wait that found a CPU busy (the machine-wide check of
     * common/spin.h) rightly stops polling: only the others count. */
    int polled[2] = {0, 0}, woke[2] = {0, 0};
    for (int parted = 0; parted < 2; parted++) {
        for (int i = 0; i < REPS; i++) {
            f.conn.spin.window_ns = 0;
            atomic_store(&f.conn.lane.hub->parted, parted ? ds__now_ns() : 0);
            int w0 = atomic_load(&f.peer.woke);
            if (round_trip(&f)) continue;
            polled[parted]++;
            woke[parted] += atomic_load(&f.peer.woke) - w0;
        }
        printf("%s: %d of %d answers to waits not stopped by a busy CPU woke the client\n",
               parted ? "right after a parting" : "no parting", woke[parted], polled[parted]);
    }
    end(&f);
    /* Without a parting a wait sleeps and is woken (unless the answer
     * beat it to sleep); right after one, waits poll and find their answers
     * (all of them but those a busy moment of the machine put to sleep). So
     * the waits right after a parting are woken less often, which is the
     * rule; the exact counts are the scheduler's. */
    assert_true(woke[0] > 0);
    if (polled[1] > 0) assert_true(woke[1] * polled[0] < woke[0] * polled[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_beside_is_no_contention),
        cmocka_unit_test(test_other_thread_is_contention),
        cmocka_unit_test(test_polls_after_parting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
