/* Hand-off costs between two processes on this machine, no server involved:
 * one round trip = A signals B, B signals back. Modes:
 *   0: both sleep on futexes;  1: both spin;  2: A rings an eventfd that B
 *   sleeps on in epoll, B wakes A's futex (the lane protocol while both sleep);
 *   3: both spin with sched_yield;  4: as 2, A yield-spins instead of sleeping;
 *   5: as 2, A spins.
 *   gcc -O2 bench/results/hol_local/pp.c -o /tmp/pp && chrt -f 10 /tmp/pp MODE CPU_A CPU_B */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static uint64_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}
static void fw(_Atomic uint32_t *w, uint32_t v)
{
    syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0);
}
static void fk(_Atomic uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}
static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static void pin(int c)
{
    if (c < 0) return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(c, &s);
    sched_setaffinity(0, sizeof s, &s);
}
#define N 20000
int main(int argc, char **argv)
{
    int mode = atoi(argv[1]);
    int ca = atoi(argv[2]), cb = atoi(argv[3]);
    /* mode 0: futex both sleep; 1: spin both; 2: client eventfd->server epoll, server futex
     * wake->client futex (lane protocol, both sleeping); 3: yield-spin both */
    _Atomic uint32_t *sh =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int efd = eventfd(0, EFD_NONBLOCK);
    pid_t p = fork();
    if (p == 0) {
        pin(cb);
        int ep = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLIN};
        epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
        uint32_t seen = 0;
        for (int i = 0; i < N; i++) {
            if (mode == 2 || mode >= 4) {
                for (;;) {
                    if (atomic_load(&sh[0]) != seen) break;
                    struct epoll_event e;
                    epoll_wait(ep, &e, 1, 100);
                    uint64_t x;
                    read(efd, &x, 8);
                }
            } else
                while (atomic_load(&sh[0]) == seen) {
                    if (mode == 0)
                        fw(&sh[0], seen);
                    else if (mode == 3)
                        sched_yield();
                }
            seen = atomic_load(&sh[0]);
            atomic_store(&sh[1], seen);
            if (mode == 0 || mode == 2) fk(&sh[1]);
        }
        _exit(0);
    }
    pin(ca);
    uint64_t *v = malloc(N * 8);
    usleep(10000);
    for (int i = 0; i < N; i++) {
        uint64_t t0 = now();
        atomic_store(&sh[0], i + 1);
        if (mode == 0) fk(&sh[0]);
        if (mode == 2 || mode >= 4) {
            uint64_t one = 1;
            write(efd, &one, 8);
        }
        while (atomic_load(&sh[1]) != (uint32_t)i + 1) {
            if (mode == 0 || mode == 2)
                fw(&sh[1], i);
            else if (mode == 3 || mode == 4)
                sched_yield();
        }
        v[i] = now() - t0;
    }
    waitpid(p, NULL, 0);
    qsort(v, N, 8, cmp);
    printf("mode %d cpus %d/%d: p50 %.2f p90 %.2f p99 %.2f us\n", mode, ca, cb, v[N / 2] / 1e3,
           v[N * 9 / 10] / 1e3, v[N * 99 / 100] / 1e3);
    return 0;
}
