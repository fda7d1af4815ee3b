/* Wide copies (common/copy.h): a large copy split between the calling
 * thread and the process's helper thread moves exactly the bytes asked
 * for, whichever way its chunks take, whoever copies them, with several
 * threads copying at once and in a child of fork; the helper really takes
 * chunks; DS_COPY_THREADS=1 and a process pinned to one CPU copy alone;
 * by default each size class measures whether to go wide. */
#include "common/clock.h"
#include "common/copy.h"
#include "common/tsan.h"

#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "copy_check.h"

static bool two_cpus(void)
{
    cpu_set_t s;
    return sched_getaffinity(0, sizeof(s), &s) == 0 && CPU_COUNT(&s) >= 2;
}

static uint64_t jobs_now(void)
{
    uint64_t j, h;
    ds__copy_wide_stats(&j, &h);
    return j;
}

static uint64_t helped_now(void)
{
    uint64_t j, h;
    ds__copy_wide_stats(&j, &h);
    return h;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed + (i >> 16));
}

static const size_t wide_sizes[] = {DS_COPY_WIDE_MIN - 1,
                                    DS_COPY_WIDE_MIN,
                                    DS_COPY_WIDE_MIN + 1,
                                    (1u << 20) + 7,
                                    3u * DS_COPY_WIDE_CHUNK * 5u + 13,
                                    (3u << 20) + 1};
#define NWIDE (sizeof(wide_sizes) / sizeof(wide_sizes[0]))

static void test_wide_exact(void **state)
{
    (void)state;
    ds__copy_threads_force(2);
    uint64_t before = jobs_now();
    for (int way = 1; way <= 3; way++) {
        ds__copy_force(way);
        check_copy_sizes(ds__copy, wide_sizes, NWIDE);
        check_copy_sizes(ds__copy_in, wide_sizes, NWIDE);
    }
    ds__copy_force(0);
    /* Sizes from DS_COPY_WIDE_MIN went wide (trials aside: forced ways
     * have none) wherever the process may use two CPUs. */
    if (two_cpus())
        assert_true(jobs_now() - before >= 200u); /* of 270: ds__copy measures under way 3 */
    else
        assert_int_equal(jobs_now(), before);
}

/* From DS_COPY_BIG the chunks are larger (and the non-temporal way's
 * heads and tails fall elsewhere): exact too. */
static void test_wide_big_chunks(void **state)
{
    (void)state;
    ds__copy_threads_force(2);
    const size_t big[] = {DS_COPY_BIG + 4u * DS_COPY_WIDE_CHUNK + 13};
    for (int way = 1; way <= 3; way++) {
        ds__copy_force(way);
        check_copy_sizes(ds__copy, big, 1);
        check_copy_sizes(ds__copy_in, big, 1);
    }
    ds__copy_force(0);
}

/* The helper takes chunks: within two seconds of 4 MiB copies it has
 * copied some (on a machine whose other CPUs stay busy that long it may
 * not). */
static void test_wide_helper_copies(void **state)
{
    (void)state;
    if (!two_cpus()) skip();
    ds__copy_threads_force(2);
    ds__copy_force(1);
    size_t n = 4u << 20;
    uint8_t *a = malloc(n), *b = malloc(n);
    assert_non_null(a);
    assert_non_null(b);
    fill(a, n, 3);
    uint64_t h0 = helped_now(), until = ds__now_ms() + 2000;
    unsigned copies = 0;
    while (helped_now() == h0 && ds__now_ms() < until) {
        memset(b, 0, n);
        ds__copy(b, a, n);
        assert_memory_equal(a, b, n);
        copies++;
        usleep(200); /* so that the helper sleeps and is woken */
    }
    assert_true(helped_now() > h0);
    ds__copy_force(0);
    free(a);
    free(b);
}

/* Many threads copy at once: one of them at a time has the helper, the
 * others copy alone, and every copy is exact. */
typedef struct {
    unsigned seed;
    int bad;
} job_t;

static void *copier(void *arg)
{
    job_t *j = arg;
    size_t n = (1u << 20) + j->seed;
    uint8_t *a = malloc(n), *b = malloc(n);
    if (a == NULL || b == NULL) {
        j->bad = 1;
    } else {
        fill(a, n, j->seed);
        for (int i = 0; i < 60 && !j->bad; i++) {
            memset(b, 0, n);
            (i % 2 ? ds__copy_in : ds__copy)(b, a, n);
            j->bad = memcmp(a, b, n) != 0;
        }
    }
    free(a);
    free(b);
    return NULL;
}

static void test_wide_threads(void **state)
{
    (void)state;
    ds__copy_threads_force(2);
    pthread_t t[6];
    job_t j[6];
    for (unsigned i = 0; i < 6; i++) {
        j[i] = (job_t){.seed = i * 17u + 1u};
        assert_int_equal(pthread_create(&t[i], NULL, copier, &j[i]), 0);
    }
    for (unsigned i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(j[i].bad, 0);
    }
}

/* Waits for a child of fork, which must exit with 0. */
static void expect_child_ok(pid_t pid)
{
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A child of fork has no helper thread: it starts its own, and its copies
 * are exact. */
static void test_wide_after_fork(void **state)
{
    (void)state;
#ifdef DS__TSAN
    skip(); /* TSan cannot start threads in a child of a multi-threaded fork */
#endif
    ds__copy_threads_force(2);
    size_t n = 2u << 20;
    uint8_t *a = malloc(n), *b = malloc(n);
    assert_non_null(a);
    assert_non_null(b);
    fill(a, n, 11);
    ds__copy_force(1); /* no trials: every copy goes wide */
    ds__copy(b, a, n); /* the parent's helper is running */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint64_t j0 = jobs_now();
        for (int i = 0; i < 20; i++) {
            memset(b, 0, n);
            ds__copy(b, a, n);
            if (memcmp(a, b, n) != 0) _exit(2);
        }
        _exit(two_cpus() && jobs_now() - j0 != 20 ? 3 : 0);
    }
    expect_child_ok(pid);
    ds__copy_force(0);
    free(a);
    free(b);
}

/* DS_COPY_THREADS=1 (here: its switch), and a process pinned to one CPU
 * (a child of fork, which starts its helper afresh), copy alone. */
static void test_wide_off(void **state)
{
    (void)state;
    size_t n = 1u << 20;
    uint8_t *a = malloc(n), *b = malloc(n);
    assert_non_null(a);
    assert_non_null(b);
    fill(a, n, 5);
    ds__copy_force(1);
    ds__copy_threads_force(1);
    uint64_t j0 = jobs_now();
    ds__copy(b, a, n);
    assert_memory_equal(a, b, n);
    assert_int_equal(jobs_now(), j0);
    ds__copy_threads_force(2);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(4);
        uint64_t c0 = jobs_now();
        memset(b, 0, n);
        ds__copy(b, a, n);
        if (memcmp(a, b, n) != 0) _exit(2);
        _exit(jobs_now() != c0 ? 3 : 0);
    }
    expect_child_ok(pid);
    ds__copy_force(0);
    free(a);
    free(b);
}

/* A class's wide trials, each copy exact; returns what the class decided. */
static const char *run_wide_trials(const uint8_t *a, uint8_t *b, size_t n)
{
    for (unsigned i = 0; i < DS_COPY_WIDE_TRIALS(n); i++) {
        memset(b, 0, n);
        ds__copy(b, a, n);
        assert_memory_equal(a, b, n);
    }
    const char *c = ds__copy_wide_choice(n, false);
    assert_true(strcmp(c, "wide") == 0 || strcmp(c, "alone") == 0);
    return c;
}

/* Measuring (the default): a class's first copies are its trials, each
 * exact; then it copies wide or alone, and after 64 more copies it
 * measures again, then after 128, and so on. */
static void test_wide_measured(void **state)
{
    (void)state;
    ds__copy_threads_force(0);
    ds__copy_force(1);                  /* memcpy: the ways' trials are not this test's */
    size_t n = DS_COPY_WIDE_MIN + 4096; /* a class no other test uses */
    uint8_t *a = malloc(n), *b = malloc(n);
    assert_non_null(a);
    assert_non_null(b);
    fill(a, n, 9);
    assert_string_equal(ds__copy_wide_choice(n, false), "trying");
    assert_string_equal(ds__copy_wide_choice(DS_COPY_WIDE_MIN - 1, false), "alone");
    const char *c = run_wide_trials(a, b, n);
    if (!two_cpus()) assert_string_equal(c, "alone");
    /* ds__copy_in's classes are their own. */
    assert_string_equal(ds__copy_wide_choice(n, true), "trying");
    /* It measures again after 64 copies, then after 128, ... */
    for (unsigned r = 0; r < 2; r++) {
        for (unsigned i = 0; i + 1 < (64u << r); i++)
            ds__copy(b, a, n);
        assert_string_equal(ds__copy_wide_choice(n, false), c);
        ds__copy(b, a, n);
        assert_string_equal(ds__copy_wide_choice(n, false), "trying");
        c = run_wide_trials(a, b, n);
    }
    /* The switches override the classes. */
    ds__copy_threads_force(1);
    assert_string_equal(ds__copy_wide_choice(n, false), "alone");
    ds__copy_threads_force(2);
    assert_string_equal(ds__copy_wide_choice(n, false), "wide");
    ds__copy_force(0);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wide_exact),         cmocka_unit_test(test_wide_big_chunks),
        cmocka_unit_test(test_wide_helper_copies), cmocka_unit_test(test_wide_threads),
        cmocka_unit_test(test_wide_after_fork),    cmocka_unit_test(test_wide_off),
        cmocka_unit_test(test_wide_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
