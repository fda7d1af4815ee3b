/* Adaptive polling (common/spin.h) against real workers: with the default
 * settings (the worker's --busy_poll_us 200, clients polling up to 200 us
 * for their replies) and with polling off on either side, every value size
 * reads and writes correctly over shared memory and TCP, including a
 * subscribe-get that outlasts the polling window and sleeps; out-of-range
 * settings are refused with a message naming them; back-to-back requests
 * are caught while polling when worker and client have CPUs of their own,
 * and polling stops when they share one; a worker free to move parts from
 * its lane client's CPU, and one pinned there still polls for a TCP client
 * on another CPU; a lane request a few microseconds after the last answer
 * is caught by a watch of the lanes; a thread that runs for moments on
 * the worker's CPU does not stop its polling; answers to a client whose
 * polling is off wake it (lane_wakes); and the worker stops polling once
 * requests are sparse and sleeps while idle (no CPU burnt).
 *
 * How many requests polling catches depends on what else the machine runs:
 * the worker rightly neither polls long nor parts while more threads are
 * runnable than there are CPUs (common/spin.h). So these tests assert that
 * every answer is right and that each path is taken (at least one request
 * caught) in a burst during which the machine was seen quiet; bursts are
 * retried, and where the machine was busy in every one, only that is
 * printed. The shares caught are figures of bench/lane_bursts (its polling
 * rows). */
#include "harness.h"
#include "it_fault_util.h"

#include "common/clock.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 128, NULL); /* default polling */
}

static int teardown(void **state)
{
    (void)state;
    if (W.pid > 0) assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

static ds_status_t connect_polling(const dst_worker_t *w, ds_transport_t t, int busy_poll_us,
                                   ds_client_t **c)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = w->host;
    o.port = w->port;
    o.transport = t;
    o.unix_socket_dir = w->sockdir[0] ? w->sockdir : NULL;
    o.busy_poll_us = busy_poll_us;
    return ds_client_connect(&o, c);
}

/* Every size, both transports, against worker w, with the client polling
 * up to busy_poll_us (0: the default; -1: off). */
static void round_trips(const dst_worker_t *w, int busy_poll_us)
{
    static const size_t sizes[] = {1, 1024, 65536, 65537, 1u << 20, 8u << 20};
    for (int t = 0; t < 2; t++) {
        ds_client_t *c = NULL;
        assert_int_equal(
            connect_polling(w, t == 0 ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP, busy_poll_us, &c),
            DS_K_OK);
        uint8_t *v = malloc(8u << 20), *out = malloc(8u << 20);
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            /* the large values go through the same paths in a few rounds
             * (and take most of the time under TSan) */
            uint64_t rounds = sizes[s] >= (1u << 20) ? 4 : 20;
            for (uint64_t round = 0; round < rounds; round++) {
                uint64_t seed = s * 100 + round + (uint64_t)t * 10000;
                dst_fill(v, sizes[s], seed);
                assert_int_equal(ds_kv_set(c, "bp-key", v, sizes[s], NULL), DS_K_OK);
                size_t len = 0;
                assert_int_equal(ds_kv_get_into(c, "bp-key", 0, out, 8u << 20, &len), DS_K_OK);
                assert_int_equal(len, sizes[s]);
                assert_true(dst_check(out, len, seed));
            }
        }
        /* A subscribe-get longer than any polling window: the client
         * sleeps on the socket and still gets the timeout answer. */
        uint64_t t0 = ds__now_ms();
        size_t len = 0;
        assert_int_equal(ds_kv_get_into(c, "bp-never", 300, out, 64, &len), DS_K_NOT_FOUND);
        uint64_t dt = ds__now_ms() - t0;
        assert_true(dt >= 290 && dt < 300 + 5000);
        free(v);
        free(out);
        ds_client_close(c);
    }
}

static void test_values_round_trip(void **state)
{
    (void)state;
    round_trips(&W, 0);
    round_trips(&W, 50);
    round_trips(&W, -1);
    /* And against a worker that never polls. */
    dst_worker_t off;
    memset(&off, 0, sizeof(off));
    assert_int_equal(dst_worker_start(&off, 64, "--busy_poll_us 0"), 0);
    round_trips(&off, 0);
    assert_int_equal(dst_stat(&off, "polling.max_us"), 0);
    assert_int_equal(dst_stat(&off, "polling.hits"), 0);
    assert_int_equal(dst_stat(&off, "polling.polled_us"), 0);
    assert_int_equal(dst_worker_stop(&off), 0);
}

static void test_bad_settings_refused(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_TCP, -2, &c), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "busy_poll_us -2"));
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_TCP, 2000000, &c), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "busy_poll_us 2000000"));
    setenv("DS_BUSY_POLL_US", "fast", 1);
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_TCP, 0, &c), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "DS_BUSY_POLL_US='fast'"));
    /* The environment applies when the option is 0 (0 there: off). */
    static const char *const envs[] = {"100", "0"};
    for (int i = 0; i < 2; i++) {
        setenv("DS_BUSY_POLL_US", envs[i], 1);
        assert_int_equal(connect_polling(&W, DS_TRANSPORT_LOCAL, 0, &c), DS_K_OK);
        assert_int_equal(ds_kv_set(c, "bp-env", "x", 1, NULL), DS_K_OK);
        ds_client_close(c);
    }
    unsetenv("DS_BUSY_POLL_US");
    /* The worker refuses an out-of-range flag at start. */
    dst_worker_t bad;
    memset(&bad, 0, sizeof(bad));
    assert_int_not_equal(dst_worker_start(&bad, 64, "--busy_poll_us -5"), 0);
    assert_int_not_equal(dst_worker_start(&bad, 64, "--busy_poll_us 2000000"), 0);
}

/* Pins pid (0: the calling thread) to one CPU. */
static void pin(pid_t pid, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pid == 0)
        assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
    else
        assert_int_equal(sched_setaffinity(pid, sizeof(set), &set), 0);
}

/* Samples of a busy machine (more runnable threads than CPUs, as
 * ds__spin_cpus_wanted sees it) since the current burst began. */
static int busy_seen;

static void sample_machine(void)
{
    char b[128];
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL) return;
    long running = 0;
    if (fgets(b, sizeof(b), f) && sscanf(b, "%*s %*s %*s %ld/", &running) == 1 &&
        running > sysconf(_SC_NPROCESSORS_ONLN))
        busy_seen++;
    fclose(f);
}

/* Begins a burst; ends it with burst_quiet(), true when the machine was not
 * seen busy meanwhile. */
static void burst_begin(void)
{
    busy_seen = 0;
}

static bool burst_quiet(void)
{
    return busy_seen == 0;
}

/* n sets, the machine sampled every 100. */
static void set_burst(ds_client_t *c, int n)
{
    for (int i = 0; i < n; i++) {
        if (i % 100 == 0) sample_machine();
        assert_int_equal(ds_kv_set(c, "bp-adapt", "abc", 3, NULL), DS_K_OK);
    }
}

/* The end of a path's retried bursts: the path was taken (taken), or the
 * machine was busy in every burst (quiet: the bursts that were not). */
static void assert_taken_unless_busy(const char *what, bool taken, int quiet)
{
    if (!taken && quiet == 0) printf("%s: not seen, the machine busy in every burst\n", what);
    if (!taken && quiet > 0) printf("%s: not seen in %d quiet bursts\n", what, quiet);
    assert_true(taken || quiet == 0);
}

/* With the worker and the client on CPUs of their own, back-to-back
 * requests are caught while polling (a burst is retried a few times, since
 * polling rightly stops while other tests keep the machine busy); on one
 * CPU the worker does not poll (the lane client's wait yields to it);
 * requests 3 ms apart (past the 200 us limit) stop the polling within a
 * few windows, where a fixed window would poll 200 us after each; and an
 * idle worker sleeps. */
static void test_polling_adapts(void **state)
{
    (void)state;
    assert_int_equal(dst_stat(&W, "polling.max_us"), 200);
    ds_client_t *c = NULL;
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_LOCAL, 0, &c), DS_K_OK);
    cpu_set_t old;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
        pin(0, 0);
        pin(W.pid, 1);
        double hits = 0;
        int quiet = 0;
        for (int round = 0; round < 10 && hits == 0; round++) {
            double h0 = dst_stat(&W, "polling.hits");
            burst_begin();
            set_burst(c, 2000);
            quiet += burst_quiet();
            hits = dst_stat(&W, "polling.hits") - h0;
            printf("2000 back-to-back sets, separate CPUs: %.0f caught while polling\n", hits);
        }
        assert_taken_unless_busy("polling, separate CPUs", hits >= 1, quiet);

        pin(W.pid, 0);
        double h0 = dst_stat(&W, "polling.hits"), p0 = dst_stat(&W, "polling.polled_us");
        set_burst(c, 2000);
        double h = dst_stat(&W, "polling.hits") - h0, p = dst_stat(&W, "polling.polled_us") - p0;
        printf("2000 back-to-back sets, one CPU: %.0f caught while polling, %.0f us polled\n", h,
               p);
        /* The worker does not poll while it shares its lane client's CPU; a
         * request may still come in during the window of an earlier one, so
         * the bounds are half the requests and a quarter of the 400000 us
         * a fixed 200 us window would poll, not none. A busier machine only
         * lowers both figures. */
        assert_true(h < 1000);
        assert_true(p < 2000 * 200 / 4);
        cpu_set_t all;
        CPU_ZERO(&all);
        for (long i = 0; i < sysconf(_SC_NPROCESSORS_ONLN) && i < CPU_SETSIZE; i++)
            CPU_SET(i, &all);
        assert_int_equal(sched_setaffinity(W.pid, sizeof(all), &all), 0);
        assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
    } else {
        printf("one CPU: the placement checks need two\n");
    }

    double polled0 = dst_stat(&W, "polling.polled_us");
    for (int i = 0; i < 100; i++) {
        usleep(3000);
        assert_int_equal(ds_kv_set(c, "bp-adapt", "abc", 3, NULL), DS_K_OK);
    }
    double polled = dst_stat(&W, "polling.polled_us") - polled0;
    printf("100 sets 3 ms apart: the worker polled %.0f us in all (a fixed 200 us window: "
           "20000)\n",
           polled);
    /* Adaptive, not fixed: well under the 20000 us a fixed window polls
     * (a window the scheduler stretches still counts its wall time). */
    assert_true(polled < 10000);

    usleep(100000);
    polled0 = dst_stat(&W, "polling.polled_us");
    long cpu0 = fu_cpu_ticks(W.pid);
    sleep(1);
    long cpu1 = fu_cpu_ticks(W.pid);
    polled = dst_stat(&W, "polling.polled_us") - polled0;
    long hz = sysconf(_SC_CLK_TCK);
    printf("idle worker: %.2f s CPU in 1 s, polled %.0f us\n", (double)(cpu1 - cpu0) / (double)hz,
           polled);
    assert_true((double)(cpu1 - cpu0) / (double)hz < 0.1);
    /* At most the window after the first STATS (stretched if the scheduler
     * takes the CPU meanwhile), not the whole second. */
    assert_true(polled < 50000);
    ds_client_close(c);
}

static void pin_all(pid_t pid, cpu_set_t *all)
{
    CPU_ZERO(all);
    for (long i = 0; i < sysconf(_SC_NPROCESSORS_ONLN) && i < CPU_SETSIZE; i++)
        CPU_SET(i, all);
    assert_int_equal(sched_setaffinity(pid, sizeof(*all), all), 0);
}

/* Parting (DS_LANE_PART_NS in common/lane.h): a worker that serves a polling
 * local client on the client's own CPU moves to another CPU, leaving the
 * CPUs it may run on as they were, and both then poll; a worker that may
 * run on that CPU only stays, and a client whose polling is off is not
 * parted from. */
static void test_worker_parts(void **state)
{
    (void)state;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("one CPU: parting needs two\n");
        return;
    }
    cpu_set_t old, all, now;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
    ds_client_t *c = NULL, *quiet = NULL;
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_LOCAL, 0, &c), DS_K_OK);
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_LOCAL, -1, &quiet), DS_K_OK);
    pin(0, 0);

    pin(W.pid, 0);
    double p0 = dst_stat(&W, "lane_parts");
    set_burst(c, 500);
    assert_int_equal(dst_stat(&W, "lane_parts"), p0);

    /* Free to move, the worker parts and then polls; retried a few times,
     * since parting rightly waits while other tests keep every CPU busy. */
    pin_all(W.pid, &all);
    double parts = 0, hits = 0;
    int quiet_bursts = 0;
    for (int round = 0; round < 10 && (parts == 0 || hits == 0); round++) {
        pin(W.pid, 0);
        pin_all(W.pid, &all);
        double h0 = dst_stat(&W, "polling.hits");
        burst_begin();
        set_burst(c, 2000);
        quiet_bursts += burst_quiet();
        parts = dst_stat(&W, "lane_parts") - p0;
        hits = dst_stat(&W, "polling.hits") - h0;
        printf("2000 sets from CPU 0, worker free: parted %.0f times, %.0f caught while polling\n",
               parts, hits);
    }
    assert_taken_unless_busy("parting", parts >= 1, quiet_bursts);
    assert_taken_unless_busy("polling after parting", hits >= 1, quiet_bursts);
    assert_int_equal(sched_getaffinity(W.pid, sizeof(now), &now), 0);
    assert_true(CPU_EQUAL(&now, &all));

    /* The lane client's CPU matters only while lane requests come: a TCP
     * client on another CPU is caught while polling by a worker pinned to
     * the CPU where the lane client ran last. */
    ds_client_t *tcp = NULL;
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_TCP, 0, &tcp), DS_K_OK);
    pin(W.pid, 0);
    set_burst(c, 100);
    pin(0, 1);
    hits = 0;
    quiet_bursts = 0;
    for (int round = 0; round < 10 && hits == 0; round++) {
        double h0 = dst_stat(&W, "polling.hits");
        burst_begin();
        set_burst(tcp, 2000);
        quiet_bursts += burst_quiet();
        hits = dst_stat(&W, "polling.hits") - h0;
        printf("2000 TCP sets from CPU 1 after lane sets from CPU 0, worker on CPU 0: %.0f caught "
               "while polling\n",
               hits);
    }
    assert_taken_unless_busy("polling for TCP", hits >= 1, quiet_bursts);
    ds_client_close(tcp);
    pin(0, 0);

    /* Polling off: sharing the CPU costs that client nothing to part for. */
    pin(W.pid, 0);
    pin_all(W.pid, &all);
    p0 = dst_stat(&W, "lane_parts");
    double w0 = dst_stat(&W, "lane_wakes");
    for (int i = 0; i < 500; i++)
        assert_int_equal(ds_kv_set(quiet, "bp-quiet", "abc", 3, NULL), DS_K_OK);
    assert_int_equal(dst_stat(&W, "lane_parts"), p0);
    /* That client sleeps on its lane at once: answers wake it (lane_wakes),
     * except those that come before it has gone to sleep, and never more
     * than one wake an answer. */
    double wakes = dst_stat(&W, "lane_wakes") - w0;
    printf("500 sets with the client's polling off: %.0f answers woke it\n", wakes);
    assert_true(wakes >= 1 && wakes <= 500);

    ds_client_close(quiet);
    ds_client_close(c);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
}

/* A polling local client on CPU 0 and the worker on CPU 1 (*old: this
 * thread's CPUs before); false, with nothing changed, on a one-CPU machine. */
static bool apart_begin(cpu_set_t *old, ds_client_t **c)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("one CPU: a worker and a client that poll need two\n");
        return false;
    }
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(*old), old), 0);
    assert_int_equal(connect_polling(&W, DS_TRANSPORT_LOCAL, 0, c), DS_K_OK);
    pin(0, 0);
    pin(W.pid, 1);
    return true;
}

/* Undoes apart_begin: the worker free to run anywhere, c closed. */
static void apart_end(const cpu_set_t *old, ds_client_t *c)
{
    cpu_set_t all;
    pin_all(W.pid, &all);
    ds_client_close(c);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(*old), old), 0);
}

/* Right after it served a lane request, the worker's poll steps watch the
 * lanes until DS_LANE_WATCH_BACK_NS have passed (common/lane.h) instead of
 * yielding after each DS_LANE_WATCH_NS: a client's next request 3-15 us
 * after its answer (the time its copy of a value of some KiB takes) is
 * caught by a watch (polling.watched), not left waiting in a step's yield
 * and checks. Worker and client on CPUs of their own; retried while other
 * tests keep the machine busy. */
static void test_watch_after_lane_request(void **state)
{
    (void)state;
    cpu_set_t old;
    ds_client_t *c = NULL;
    if (!apart_begin(&old, &c)) return;
    double watched = 0;
    int quiet = 0;
    for (int round = 0; round < 10 && watched == 0; round++) {
        double w0 = dst_stat(&W, "polling.watched");
        burst_begin();
        for (int i = 0; i < 2000; i++) {
            if (i % 100 == 0) sample_machine();
            assert_int_equal(ds_kv_set(c, "bp-watch", "abc", 3, NULL), DS_K_OK);
            uint64_t until = ds__now_ns() + (3u + (uint64_t)(i % 13)) * 1000u;
            while (ds__now_ns() < until) {
            }
        }
        quiet += burst_quiet();
        watched = dst_stat(&W, "polling.watched") - w0;
        printf("2000 sets each 3-15 us after the last answer: %.0f caught by a watch\n", watched);
    }
    assert_taken_unless_busy("watch after a lane request", watched >= 1, quiet);
    apart_end(&old, c);
}

static atomic_bool blip_stop;

/* A thread of this machine that runs for a moment now and then: 20 us of
 * work every 150-200 us, on CPU 1. */
static void *blips(void *arg)
{
    (void)arg;
    pin(0, 1);
    while (!atomic_load(&blip_stop)) {
        uint64_t until = ds__now_ns() + 20000u;
        while (ds__now_ns() < until) {
        }
        usleep(100);
    }
    return NULL;
}

/* A thread that runs for a moment on the worker's CPU while it serves a lane
 * client (here a blip of 20 us every 150-200 us; on a 2-vCPU VM, the
 * client itself woken there, a kernel worker) does not stop the worker's
 * polling: its poll steps yield to it and go on (ds__spin_pause_beside).
 * Sets 40 us apart (as a client's copy of a large value spaces them), so
 * that the worker's steps meet the blips; a poll step that counted each
 * blip as contention would stop polling for DS_SPIN_BACKOFF_NS each time.
 * Worker on CPU 1, client on CPU 0; retried while other tests keep the
 * machine busy; the share caught is a row of bench/lane_bursts. */
static void test_polling_survives_blips(void **state)
{
    (void)state;
    cpu_set_t old;
    ds_client_t *c = NULL;
    if (!apart_begin(&old, &c)) return;
    atomic_store(&blip_stop, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, blips, NULL), 0);
    double hits = 0;
    int quiet = 0;
    for (int round = 0; round < 10 && hits == 0; round++) {
        double h0 = dst_stat(&W, "polling.hits");
        burst_begin();
        for (int i = 0; i < 2000; i++) {
            if (i % 100 == 0) sample_machine();
            assert_int_equal(ds_kv_set(c, "bp-blip", "abc", 3, NULL), DS_K_OK);
            uint64_t until = ds__now_ns() + 40000u;
            while (ds__now_ns() < until) {
            }
        }
        quiet += burst_quiet();
        hits = dst_stat(&W, "polling.hits") - h0;
        printf("2000 sets 40 us apart, blips on the worker's CPU: %.0f caught while polling\n",
               hits);
    }
    atomic_store(&blip_stop, true);
    pthread_join(t, NULL);
    assert_taken_unless_busy("polling beside blips", hits >= 1, quiet);
    apart_end(&old, c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_round_trip),
        cmocka_unit_test(test_bad_settings_refused),
        cmocka_unit_test(test_polling_adapts),
        cmocka_unit_test(test_worker_parts),
        cmocka_unit_test(test_watch_after_lane_request),
        cmocka_unit_test(test_polling_survives_blips),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
