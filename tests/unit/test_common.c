/* Key rules, status names/messages, address parsing, hashing, the polling
 * window, large copies and /proc/PID/stat. */
#include "common/copy.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/net.h"
#include "common/clock.h"
#include "common/procstat.h"
#include "common/spin.h"
#include "ds/kv_client.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "copy_check.h"
#include "machine.h"

static void test_keys(void **state)
{
    (void)state;
    char msg[256];
    const char *ok = "req-1:0_1.a!@#%^*()+=;";
    assert_int_equal(ds__key_check(ok, strlen(ok), msg, sizeof(msg)), 0);
    assert_int_equal(ds__key_check("", 0, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "empty"));
    assert_int_equal(ds__key_check("a b", 3, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "0x20 at offset 1"));
    const char bad[] = {'a', '\0', 'b'};
    assert_int_equal(ds__key_check(bad, 3, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "0x00"));
    char big[1026];
    memset(big, 'k', sizeof(big));
    assert_int_equal(ds__key_check(big, 1024, msg, sizeof(msg)), 0);
    assert_int_equal(ds__key_check(big, 1025, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "1024"));
    const char *rejects = "/ \\\"'`~$&|<>?,[]{}\n\t";
    for (const char *p = rejects; *p; p++)
        assert_int_equal(ds__key_check(p, 1, msg, sizeof(msg)), -1);
    assert_int_equal(ds_key_validate("x y", 3), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "0x20"));
}

static void test_status_table(void **state)
{
    (void)state;
    assert_int_equal(DS_K_OK, 0);
    assert_int_equal(DS_K_NOT_FOUND, 3);
    assert_int_equal(DS_K_OUT_OF_MEMORY, 6);
    assert_int_equal(DS_K_RPC_UNAVAILABLE, 1002);
    assert_int_equal(DS_K_OC_KEY_ALREADY_EXIST, 2004);
    assert_string_equal(ds_status_name(23), "K_CLIENT_WORKER_DISCONNECT");
    assert_string_equal(ds_status_name(12345), "K_UNKNOWN");
    assert_string_equal(ds_status_message(3), "not found");
    assert_int_equal(ds__set_error(DS_K_INVALID, "bad %s", "thing"), DS_K_INVALID);
    assert_string_equal(ds_last_error(), "bad thing");
}

static void test_hostport(void **state)
{
    (void)state;
    char host[64], err[128];
    int port = 0;
    assert_int_equal(
        ds__parse_hostport("127.0.0.2:31501", host, sizeof(host), &port, err, sizeof(err)), 0);
    assert_string_equal(host, "127.0.0.2");
    assert_int_equal(port, 31501);
    assert_int_equal(ds__parse_hostport(":5", host, sizeof(host), &port, err, sizeof(err)), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(ds__parse_hostport("h", host, sizeof(host), &port, err, sizeof(err)), -1);
    assert_int_equal(ds__parse_hostport("h:0", host, sizeof(host), &port, err, sizeof(err)), -1);
    assert_int_equal(ds__parse_hostport("h:70000", host, sizeof(host), &port, err, sizeof(err)),
                     -1);
    assert_int_equal(ds__parse_hostport("h:12x", host, sizeof(host), &port, err, sizeof(err)), -1);
    assert_true(ds__host_is_local("127.0.0.1"));
    assert_true(ds__host_is_local("127.3.4.5"));
    assert_true(ds__host_is_local("localhost"));
    assert_false(ds__host_is_local("192.0.2.1")); /* TEST-NET: never local */
    char path[300];
    assert_int_equal(ds__socket_path("/tmp/x", "127.0.0.1", 31501, path, sizeof(path)), 0);
    assert_string_equal(path, "/tmp/x/worker-127.0.0.1-31501.sock");
}

static void test_murmur3(void **state)
{
    (void)state;
    /* Reference values of MurmurHash3_x86_32. */
    assert_int_equal(ds__murmur3_32("", 0, 0), 0);
    assert_int_equal(ds__murmur3_32("", 0, 1), 0x514E28B7);
    assert_int_equal(ds__murmur3_32("hello", 5, 0), 0x248BFA47);
    assert_int_equal(ds__murmur3_32("The quick brown fox jumps over the lazy dog", 43, 0),
                     0x2E4FF723);
}

/* ds__sum4: streaming in 32-byte multiples equals one pass; every single
 * flipped bit, any length, changes it; it differs from ds__sum64. */
static uint64_t sum4_once(const void *p, size_t n)
{
    ds_sum4_t s;
    ds__sum4_init(&s);
    ds__sum4_update(&s, p, n);
    return ds__sum4_final(&s);
}

static void test_sum4(void **state)
{
    (void)state;
    static uint8_t buf[4099];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 131u + 7u);
    uint64_t whole = sum4_once(buf, sizeof(buf));
    ds_sum4_t s;
    ds__sum4_init(&s);
    ds__sum4_update(&s, buf, 64);
    ds__sum4_update(&s, buf + 64, 1024);
    ds__sum4_update(&s, buf + 1088, sizeof(buf) - 1088);
    assert_true(ds__sum4_final(&s) == whole);
    assert_true(whole != ds__sum64(DS_SUM64_SEED, buf, sizeof(buf)));
    for (size_t n = 0; n < 70; n++) /* lengths around the 32-byte block */
        assert_true(sum4_once(buf, n) != sum4_once(buf, n + 1));
    for (size_t bit = 0; bit < sizeof(buf) * 8; bit += 37) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_true(sum4_once(buf, sizeof(buf)) != whole);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

/* The adaptive polling window: grows while waits end within the limit but
 * after sleeping, stays while polling catches them, halves after a wait past
 * the limit, quarters when the CPU was wanted elsewhere, and is 0 when off. */
static void test_spin_window(void **state)
{
    (void)state;
    ds_spin_t s;
    ds__spin_init(&s, 200000);
    assert_int_equal(s.window_ns, 0);
    /* Waits of 70 us that slept: the window doubles until it covers them. */
    static const uint64_t grows[] = {8000, 16000, 32000, 64000, 128000, 128000};
    for (size_t i = 0; i < sizeof(grows) / sizeof(grows[0]); i++) {
        ds__spin_done(&s, 70000, false);
        assert_int_equal(s.window_ns, grows[i]);
    }
    ds__spin_done(&s, 30000, false); /* caught while polling: unchanged */
    assert_int_equal(s.window_ns, 128000);
    ds__spin_done(&s, 150000, false); /* never past the limit */
    assert_int_equal(s.window_ns, 200000);
    ds__spin_done(&s, 5000000, false); /* a wait past the limit: halves */
    assert_int_equal(s.window_ns, 100000);
    uint64_t t = ds__now_ns();
    ds__spin_done(&s, 1000, true); /* contended: quarters, and no polling for a while */
    assert_int_equal(s.window_ns, 25000);
    assert_int_equal(ds__spin_window(&s, t), 0);
    assert_int_equal(ds__spin_window(&s, ds__now_ns() + DS_SPIN_BACKOFF_NS), 25000);
    int quiet = 0;
    while (s.window_ns) {
        ds__spin_done(&s, 1000000000, false);
        quiet++;
    }
    assert_true(quiet <= 5); /* a quiet thread stops polling within a few waits */
    ds__spin_init(&s, 0);    /* off: never polls */
    for (int i = 0; i < 5; i++)
        ds__spin_done(&s, 1000, false);
    assert_int_equal(s.window_ns, 0);
    ds__spin_init(&s, 5000); /* a limit below the start window */
    ds__spin_done(&s, 3000, false);
    assert_int_equal(s.window_ns, 5000);
}

/* A step that merely took long (here 200 us of this thread's own work; on a
 * VM, the hypervisor holding the vCPU) does not say another thread wants
 * the CPU: polling goes on. Tried a few times, since on a busy machine a
 * step may also have been preempted for another thread, which does count. */
static void test_spin_slow_step_is_not_contention(void **state)
{
    (void)state;
    int calm = 0;
    for (int i = 0; i < 50 && calm == 0; i++) {
        uint64_t now;
        (void)ds__spin_pause(1, &now); /* where this step begins */
        uint64_t t = ds__now_ns();
        while (ds__now_ns() - t < 200000) {
        }
        calm += !ds__spin_pause(1, &now);
        assert_true(now >= t + 200000);
    }
    assert_true(calm > 0);
}

static atomic_bool hog_stop;

static bool pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

/* A busy thread: on CPU 0 when arg is non-NULL, anywhere otherwise. */
static void *hog(void *arg)
{
    if (arg) pin_to(0);
    while (!atomic_load(&hog_stop)) {
    }
    return NULL;
}

/* More busy threads than CPUs: the machine-wide check sees threads
 * waiting for a CPU, and a wait that goes on seeing them stops. */
static void test_spin_sees_busy_machine(void **state)
{
    (void)state;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)cpus + 1;
    pthread_t *t = calloc((size_t)n, sizeof(*t));
    assert_non_null(t);
    atomic_store(&hog_stop, false);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hog, NULL), 0);
    bool wanted = false, stopped = false;
    for (int i = 0; i < 200 && !(wanted && stopped); i++) {
        wanted = wanted || ds__spin_cpus_wanted();
        /* One wait's checking steps, over DS_SPIN_OVER_NS and more. */
        uint64_t now, t0 = ds__now_ns();
        for (unsigned k = 0; !stopped && ds__now_ns() - t0 < 2 * DS_SPIN_OVER_NS; k++)
            stopped = ds__spin_pause(k * DS_SPIN_LOAD_EVERY, &now);
        usleep(1000);
    }
    atomic_store(&hog_stop, true);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    assert_true(wanted);
    assert_true(stopped);
}

/* Starts a neighbour thread (hog or peer) until neighbour_stop. */
static pthread_t neighbour_start(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    atomic_store(&hog_stop, false);
    assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
    return t;
}

static void neighbour_stop(pthread_t t)
{
    atomic_store(&hog_stop, true);
    pthread_join(t, NULL);
}

/* A poll step whose yield hands the CPU to another runnable thread says so:
 * this thread and a busy one pinned to the same CPU. */
static void test_spin_pause_sees_other_work(void **state)
{
    (void)state;
    cpu_set_t old;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
    assert_true(pin_to(0));
    static int on_cpu0;
    pthread_t t = neighbour_start(hog, &on_cpu0);
    int seen = 0;
    for (int i = 0; i < 1000 && seen == 0; i++) {
        uint64_t now; /* step 1: not a machine-wide check, the yield's */
        seen += ds__spin_pause(1, &now);
    }
    neighbour_stop(t);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
    assert_true(seen > 0);
}

/* A thread that, like another poller, works a little (20 us) and yields. */
static void *peer(void *arg)
{
    (void)arg;
    pin_to(0);
    while (!atomic_load(&hog_stop)) {
        uint64_t t = ds__now_ns();
        while (ds__now_ns() - t < 20000) {
        }
        sched_yield();
    }
    return NULL;
}

static bool beside_step(uint64_t *now_ns)
{
    return ds__spin_pause_beside(1, now_ns); /* step 1: not a machine-wide check */
}

/* Steps of one kind beside a CPU-bound thread on this thread's CPU (0)
 * until one says so (at most 1000): whether one did, having lasted
 * DS_SPIN_HOG_NS or more. */
static bool hog_stops(bool (*step)(uint64_t *now_ns))
{
    static int on_cpu0;
    pthread_t t = neighbour_start(hog, &on_cpu0);
    bool hogged = false;
    for (int i = 0; i < 1000 && !hogged; i++) {
        uint64_t t0 = ds__now_ns(), now;
        if ((hogged = step(&now))) assert_true(now - t0 >= DS_SPIN_HOG_NS);
    }
    neighbour_stop(t);
    return hogged;
}

/* A reply wait that tolerates sharing its CPU (ds__spin_yield) stops for a
 * CPU-bound neighbour, which holds the CPU for whole time slices once it
 * has it, but not for a neighbour that yields back within DS_SPIN_HOG_NS:
 * one pinned to this thread's CPU at a time. */
static void test_spin_yield_sees_hog_not_peer(void **state)
{
    (void)state;
    cpu_set_t old;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
    assert_true(pin_to(0));
    assert_true(hog_stops(ds__spin_yield));

    pthread_t t = neighbour_start(peer, NULL);
    bool busy = machine_busy();
    int said = 0, n = 200;
    for (int i = 0; i < n; i++) {
        uint64_t now;
        said += ds__spin_yield(&now);
    }
    busy = busy || machine_busy();
    neighbour_stop(t);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
    printf("yields beside a peer that yields back: %d of %d said hog\n", said, n);
    if (busy)
        printf("# the machine was busy: other work held the CPU too, shares not asserted\n");
    else
        assert_true(said < n / 4);
}

/* The worker's poll step beside a lane client (ds__spin_pause_beside) goes
 * on while a neighbour on its CPU yields back within DS_SPIN_HOG_NS, where
 * the general step (ds__spin_pause) stops at nearly every one of its turns;
 * a CPU-bound neighbour stops both. */
static void test_spin_pause_beside_sees_hog_not_peer(void **state)
{
    (void)state;
    cpu_set_t old;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
    assert_true(pin_to(0));
    pthread_t t = neighbour_start(peer, NULL);
    bool busy = machine_busy();
    int beside = 0, general = 0, n = 200;
    for (int i = 0; i < n; i++) {
        uint64_t now;
        beside += beside_step(&now);
        general += ds__spin_pause(1, &now);
    }
    busy = busy || machine_busy();
    neighbour_stop(t);
    printf("steps beside a peer that yields back: %d of %d stopped (general step: %d)\n", beside, n,
           general);
    if (busy) {
        printf("# the machine was busy: other work held the CPU too, shares not asserted\n");
    } else {
        assert_true(beside < n / 4);
        assert_true(general > n / 2);
    }

    assert_true(hog_stops(beside_step));
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
}

/* ds__spin_move_off moves the thread to another CPU it may run on and leaves
 * its allowed CPUs as they were; a thread that may run on one CPU only, or
 * a CPU out of range, is refused. */
static void test_spin_move_off(void **state)
{
    (void)state;
    cpu_set_t old;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
    assert_int_equal(ds__spin_move_off(-1), -1);
    assert_int_equal(ds__spin_move_off(CPU_SETSIZE), -1);
    assert_true(pin_to(0));
    assert_int_equal(ds__spin_move_off(0), -1); /* nowhere else to go */
    assert_int_equal(sched_getcpu(), 0);
    if (CPU_COUNT(&old) < 2 || !CPU_ISSET(0, &old) || !CPU_ISSET(1, &old)) {
        assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
        printf("fewer than two CPUs: the move is not checked\n");
        return;
    }
    cpu_set_t two;
    CPU_ZERO(&two);
    CPU_SET(0, &two);
    CPU_SET(1, &two);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(two), &two), 0);
    for (int i = 0; i < 20; i++) {
        int from = sched_getcpu();
        int to = ds__spin_move_off(from);
        assert_int_equal(to, 1 - from);
        cpu_set_t now;
        assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(now), &now), 0);
        assert_true(CPU_EQUAL(&now, &two));
    }
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
}

/* Every way of ds__copy moves exactly the bytes asked for, at any alignment
 * and size around the class boundaries, and leaves the bytes around alone. */
/* n's class is still trying; trials copies of n, each exact, decide it. */
static void trial_class(size_t n, unsigned trials)
{
    uint8_t *a = malloc(n), *b = malloc(n);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 5, n);
    const char *w = ds__copy_way(n);
    assert_true(strcmp(w, "trying") == 0 || strcmp(w, "memcpy") == 0); /* memcpy: no ERMS */
    for (unsigned i = 0; i < trials; i++) {
        memset(b, 0, n);
        ds__copy(b, a, n);
        assert_memory_equal(a, b, n);
    }
    w = ds__copy_way(n);
    assert_true(strcmp(w, "memcpy") == 0 || strcmp(w, "rep movsb") == 0);
    free(a);
    free(b);
}

static void check_copies_with(void (*copy)(void *, const void *, size_t))
{
    const size_t sizes[] = {
        1, 63, DS_COPY_MIN - 1, DS_COPY_MIN, DS_COPY_MIN + 1, 100003, (1u << 20) + 7};
    check_copy_sizes(copy, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

static void check_copies(void)
{
    check_copies_with(ds__copy);
    check_copies_with(ds__copy_in);
}

/* ds__copy_in's class of n (from DS_COPY_BIG) tries memcpy, non-temporal
 * stores and rep movsb, each copy exact, and keeps one. */
static void trial_class_in(size_t n)
{
    uint8_t *a = malloc(n + 1), *b = malloc(n + 2);
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < n + 1; i++)
        a[i] = (uint8_t)(i * 7u + 1u);
    const char *w = ds__copy_in_way(n);
    assert_true(strcmp(w, "trying") == 0 || strcmp(w, "memcpy") == 0); /* memcpy: plain build */
    for (unsigned i = 0; i < DS_COPY_TRIALS_IN; i++) {
        memset(b, 0, n + 2);
        ds__copy_in(b + 1, a + (i & 1), n); /* a destination off 16-byte alignment */
        assert_memory_equal(b + 1, a + (i & 1), n);
        assert_int_equal(b[0], 0);
        assert_int_equal(b[n + 1], 0);
    }
    w = ds__copy_in_way(n);
    assert_true(strcmp(w, "memcpy") == 0 || strcmp(w, "rep movsb") == 0 ||
                strcmp(w, "non-temporal") == 0);
    free(a);
    free(b);
}

static void test_copy(void **state)
{
    (void)state;
    for (int way = 1; way <= 3; way++) {
        ds__copy_force(way);
        check_copies();
    }
    /* Non-temporal stores are for ds__copy_in only, and only there forced. */
    ds__copy_force(3);
    assert_true(strcmp(ds__copy_in_way(DS_COPY_MIN), "non-temporal") == 0 ||
                strcmp(ds__copy_in_way(DS_COPY_MIN), "memcpy") == 0); /* memcpy: plain build */
    assert_string_equal(ds__copy_in_way(DS_COPY_MIN - 1), "memcpy");
    assert_string_not_equal(ds__copy_way(DS_COPY_BIG), "non-temporal");
    if (ds__copy_movsb_ok()) { /* the limits' explicit rep movsb */
        char from[100] = "rep movsb, whatever the class chose", to[100] = {0};
        ds__copy_movsb(to, from, sizeof(from));
        assert_memory_equal(to, from, sizeof(from));
    }
    ds__copy_force(1);
    assert_string_equal(ds__copy_way(8u << 20), "memcpy");
    ds__copy_force(0);
    assert_string_equal(ds__copy_way(1000), "memcpy");
    /* Measuring: a size class tries both ways for its first trials, then
     * keeps one (which one is this CPU's business); from DS_COPY_BIG fewer
     * trials decide. Classes no check above touched. */
    trial_class(3u << 20, DS_COPY_TRIALS);
    trial_class(9u << 20, DS_COPY_TRIALS_BIG);
    trial_class_in(17u << 20);
    /* Below DS_COPY_BIG, ds__copy_in is ds__copy. */
    assert_string_equal(ds__copy_in_way(3u << 20), ds__copy_way(3u << 20));
    check_copies();
}

/* ds__copy_in_mid: mid runs once, after exactly the first at bytes are in
 * place and before the rest; every byte arrives. */
typedef struct {
    const uint8_t *src, *dst;
    size_t at, n;
    int calls;
} mid_seen_t;

static void mid_check(void *arg)
{
    mid_seen_t *m = arg;
    m->calls++;
    assert_memory_equal(m->dst, m->src, m->at);
    if (m->at < m->n) assert_int_equal(m->dst[m->at], 0xEE);
}

static void test_copy_in_mid(void **state)
{
    (void)state;
    const size_t n8 = 8u << 20;
    uint8_t *a = malloc(n8), *b = malloc(n8);
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < n8; i++)
        a[i] = (uint8_t)(i * 13u + 5u) == 0xEE ? 1 : (uint8_t)(i * 13u + 5u);
    const size_t sizes[] = {1, DS_COPY_MIN + 3, (1u << 20) + 7};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        const size_t ats[] = {0, 1, n / 2, n - 1, n, n + 9};
        for (size_t j = 0; j < sizeof(ats) / sizeof(ats[0]); j++) {
            memset(b, 0xEE, n + 1);
            mid_seen_t m = {a, b, ats[j] < n ? ats[j] : n, n, 0};
            ds__copy_in_mid(b, a, n, ats[j], mid_check, &m);
            assert_int_equal(m.calls, 1);
            assert_memory_equal(b, a, n);
            assert_int_equal(b[n], 0xEE);
        }
    }
    /* A value copied in two pieces counts for its own size class, not its
     * pieces': 8 MiB split at 7 MiB decides the 8 MiB class (of ds__copy_in)
     * and leaves the 4-8 MiB one (where a 7 MiB copy_in goes, ds__copy's)
     * untouched. Classes no other check touches. */
    const char *w = ds__copy_in_way(n8);
    assert_true(strcmp(w, "trying") == 0 || strcmp(w, "memcpy") == 0); /* memcpy: plain build */
    const char *piece = ds__copy_way(7u << 20);
    for (unsigned i = 0; i < DS_COPY_TRIALS_IN; i++) {
        memset(b, 0xEE, n8);
        mid_seen_t m = {a, b, 7u << 20, n8, 0};
        ds__copy_in_mid(b, a, n8, 7u << 20, mid_check, &m);
        assert_int_equal(m.calls, 1);
        assert_memory_equal(b, a, n8);
    }
    w = ds__copy_in_way(n8);
    assert_true(strcmp(w, "memcpy") == 0 || strcmp(w, "rep movsb") == 0 ||
                strcmp(w, "non-temporal") == 0);
    assert_string_equal(ds__copy_way(7u << 20), piece);
    free(a);
    free(b);
}

/* The fields after a command name that holds spaces and parentheses, of a
 * running child, of the same child as a zombie, and of no process. */
static void test_proc_stat(void **state)
{
    (void)state;
    ds_proc_stat_t me;
    assert_int_equal(ds__proc_stat(0, &me), 0);
    assert_int_equal(me.state, 'R');
    assert_true(me.starttime > 0);
    assert_true(me.minflt > 0);
    assert_true(me.processor >= 0 && me.processor < CPU_SETSIZE);

    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_NAME, "a) b ( 1 2 3");
        char c;
        close(go[1]);
        (void)!read(go[0], &c, 1); /* parked until the parent closes */
        _exit(0);
    }
    close(go[0]);
    ds_proc_stat_t kid;
    for (int i = 0; i < 1000; i++) { /* until the name is set */
        char path[64], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof(comm), f) && strncmp(comm, "a) b (", 6) == 0) {
            fclose(f);
            break;
        }
        if (f) fclose(f);
        usleep(1000);
    }
    assert_int_equal(ds__proc_stat(pid, &kid), 0);
    assert_true(kid.state == 'S' || kid.state == 'R');
    assert_true(kid.starttime >= me.starttime);
    assert_true(kid.processor >= 0);
    close(go[1]);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(ds__proc_stat(pid, &kid), 0);
    assert_int_equal(kid.state, 'Z');
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    errno = 0;
    assert_int_equal(ds__proc_stat(pid, &kid), -1);
    assert_int_equal(errno, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_status_table),
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_murmur3),
        cmocka_unit_test(test_sum4),
        cmocka_unit_test(test_spin_window),
        cmocka_unit_test(test_spin_pause_sees_other_work),
        cmocka_unit_test(test_spin_slow_step_is_not_contention),
        cmocka_unit_test(test_spin_sees_busy_machine),
        cmocka_unit_test(test_spin_yield_sees_hog_not_peer),
        cmocka_unit_test(test_spin_pause_beside_sees_hog_not_peer),
        cmocka_unit_test(test_spin_move_off),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_copy_in_mid),
        cmocka_unit_test(test_proc_stat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
