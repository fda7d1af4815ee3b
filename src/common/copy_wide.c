/* Wide copies: one large copy by the calling thread and a helper thread
 * (copy.h says when and why).
 *
 * A copy is a job of equal chunks. Its ticket, one 64-bit word, holds the
 * job's generation, how many chunks it has and the next chunk nobody has
 * taken; the caller and the helper each take the next chunk with a
 * compare-and-swap and copy it, until none is left, and count the chunks
 * copied in done. The caller returns once done says every chunk is copied,
 * so nothing writes the destination after that. A helper that comes late
 * finds no chunk left, or a newer ticket, and its compare-and-swap fails:
 * a chunk belongs to exactly one job and one thread. The job's addresses
 * are written before its ticket (release) and read after a successful
 * claim (which reads from the ticket's release sequence), and stay as they
 * are until the job's last chunk is done. One job at a time per process:
 * a thread that finds the helper busy copies alone.
 *
 * The helper sleeps on a futex between jobs (it does not poll: on a
 * machine with few CPUs a polling helper would keep the CPU from the
 * worker the copy is for). Woken, a thread may be placed on its waker's
 * CPU (schedulers that pack tasks onto few CPUs do exactly that), which
 * would make the two halves take turns there, so the helper's affinity is
 * the process's CPUs without the one its caller runs on, set again (one
 * system call) whenever the caller is seen on another CPU. */
#include "common/copy.h"
#include "common/copy_int.h"

#include "common/lane.h" /* ds__cpu_relax (inline: nothing to link) */

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { OFF = -1, IDLE = 0, STARTING = 1, RUNNING = 2 };

/* Ticket: generation (32 bits) | chunks (16) | next chunk (16). */
#define TK(gen, chunks, next)                                                                      \
    (((uint64_t)(gen) << 32) | ((uint64_t)(chunks) << 16) | (uint64_t)(next))
#define TK_CHUNKS(t) ((uint32_t)((t) >> 16) & 0xFFFFu)
#define TK_NEXT(t) ((uint32_t)(t)&0xFFFFu)
#define MAX_CHUNKS 0xFFFFu

static struct {
    _Atomic uint64_t ticket;
    _Atomic uint32_t done;     /* chunks of the current job copied */
    _Atomic uint32_t bell;     /* futex word: bumped for each job */
    _Atomic uint32_t sleeping; /* the helper sleeps, or is about to */
    _Atomic uint32_t busy;     /* a thread runs a job */
    _Atomic int state;
    _Atomic int threads; /* ds__copy_wide_mode; 0 = DS_COPY_THREADS not read yet */
    /* The job, written by its caller before its ticket. */
    _Atomic(uint8_t *) dst;
    _Atomic(const uint8_t *) src;
    _Atomic size_t n, chunk;
    _Atomic int way;
    /* Owned by the thread that holds busy. */
    uint32_t gen;
    int away_from; /* the CPU the helper's affinity leaves out; -1: none yet */
    pthread_t tid;
    cpu_set_t cpus; /* the CPUs the first wide copy's thread could run on */
    _Atomic uint64_t jobs, helped;
} W = {.away_from = -1};

static void futex_wait(_Atomic uint32_t *word, uint32_t val)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Takes the chunks left of the job whose ticket reads t (or of a newer
 * job, for the helper) one at a time and copies them; returns how many. */
static uint32_t take_chunks(uint64_t t)
{
    uint32_t copied = 0;
    while (TK_NEXT(t) < TK_CHUNKS(t)) {
        if (!atomic_compare_exchange_weak_explicit(&W.ticket, &t, t + 1, memory_order_acquire,
                                                   memory_order_acquire)) {
            continue; /* t now holds the ticket as it is: another chunk, or another job */
        }
        size_t n = atomic_load_explicit(&W.n, memory_order_relaxed);
        size_t chunk = atomic_load_explicit(&W.chunk, memory_order_relaxed);
        size_t off = (size_t)TK_NEXT(t) * chunk;
        size_t len = n - off < chunk ? n - off : chunk;
        ds__copy_by(atomic_load_explicit(&W.way, memory_order_relaxed),
                    atomic_load_explicit(&W.dst, memory_order_relaxed) + off,
                    atomic_load_explicit(&W.src, memory_order_relaxed) + off, len);
        atomic_fetch_add_explicit(&W.done, 1, memory_order_release);
        copied++;
        t++;
    }
    return copied;
}

static void *helper_main(void *arg)
{
    (void)arg;
    uint32_t seen = atomic_load(&W.bell);
    for (;;) {
        atomic_store(&W.sleeping, 1);
        if (atomic_load(&W.bell) == seen) futex_wait(&W.bell, seen);
        atomic_store_explicit(&W.sleeping, 0, memory_order_relaxed);
        seen = atomic_load(&W.bell);
        uint32_t n = take_chunks(atomic_load_explicit(&W.ticket, memory_order_acquire));
        if (n) atomic_fetch_add_explicit(&W.helped, n, memory_order_relaxed);
    }
    return NULL;
}

/* In a child of fork the helper is gone (and a job in flight with it). */
static void after_fork(void)
{
    atomic_store(&W.state, IDLE);
    atomic_store(&W.busy, 0);
    atomic_store(&W.sleeping, 0);
    atomic_store(&W.ticket, 0);
    W.away_from = -1;
}

int ds__copy_wide_mode(void)
{
    int t = atomic_load_explicit(&W.threads, memory_order_relaxed);
    if (t == 0) {
        const char *e = getenv("DS_COPY_THREADS");
        t = e && strcmp(e, "1") == 0   ? DS__WIDE_OFF
            : e && strcmp(e, "2") == 0 ? DS__WIDE_ALWAYS
                                       : DS__WIDE_MEASURE;
        atomic_store_explicit(&W.threads, t, memory_order_relaxed);
    }
    return t;
}

/* Starts the helper once (again in a child of fork); false while it is
 * not running. */
static bool helper_running(void)
{
    int s = atomic_load_explicit(&W.state, memory_order_acquire);
    if (s == RUNNING) return true;
    if (s != IDLE || !atomic_compare_exchange_strong(&W.state, &s, STARTING)) return false;
    static _Atomic int atfork;
    if (!atomic_exchange(&atfork, 1)) (void)pthread_atfork(NULL, NULL, after_fork);
    /* A process its user pinned to one CPU (taskset) stays there. */
    if (sched_getaffinity(0, sizeof(W.cpus), &W.cpus) != 0 || CPU_COUNT(&W.cpus) < 2) {
        atomic_store(&W.state, OFF);
        return false;
    }
    /* Signals go to the application's threads, never the helper. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64u * 1024u);
    bool ok = pthread_create(&W.tid, &a, helper_main, NULL) == 0;
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    atomic_store_explicit(&W.state, ok ? RUNNING : OFF, memory_order_release);
    return ok;
}

/* Keeps the helper off the CPU the caller runs on. */
static bool helper_away(void)
{
    int cpu = sched_getcpu();
    if (cpu < 0) return true; /* unknown: leave the helper where it may run */
    if (cpu == W.away_from) return true;
    cpu_set_t set = W.cpus;
    if (cpu < CPU_SETSIZE) CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) == 0) return false; /* the caller runs where the helper may not: rare */
    if (pthread_setaffinity_np(W.tid, sizeof(set), &set) != 0) return false;
    W.away_from = cpu;
    return true;
}

bool ds__copy_wide(int way, void *dst, const void *src, size_t n)
{
    if (n < DS_COPY_WIDE_MIN || ds__copy_wide_mode() == DS__WIDE_OFF || !helper_running())
        return false;
    uint32_t free_ = 0;
    if (!atomic_compare_exchange_strong_explicit(&W.busy, &free_, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        return false;
    if (!helper_away()) {
        atomic_store_explicit(&W.busy, 0, memory_order_release);
        return false;
    }
    size_t chunk = n >= DS_COPY_BIG ? DS_COPY_WIDE_CHUNK * 4u : DS_COPY_WIDE_CHUNK;
    while ((n + chunk - 1) / chunk > MAX_CHUNKS)
        chunk *= 2;
    uint32_t chunks = (uint32_t)((n + chunk - 1) / chunk);
    atomic_store_explicit(&W.dst, (uint8_t *)dst, memory_order_relaxed);
    atomic_store_explicit(&W.src, (const uint8_t *)src, memory_order_relaxed);
    atomic_store_explicit(&W.n, n, memory_order_relaxed);
    atomic_store_explicit(&W.chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&W.way, way, memory_order_relaxed);
    atomic_store_explicit(&W.done, 0, memory_order_relaxed);
    if (++W.gen == 0) W.gen = 1;
    uint64_t t = TK(W.gen, chunks, 0);
    atomic_store_explicit(&W.ticket, t, memory_order_release);
    /* Dekker pair with the helper's sleeping flag, then its bell. */
    atomic_fetch_add(&W.bell, 1);
    if (atomic_load(&W.sleeping)) futex_wake(&W.bell);
    take_chunks(t);
    /* The helper's chunks in flight: at most one, a chunk's copy long. */
    for (unsigned i = 1; atomic_load_explicit(&W.done, memory_order_acquire) != chunks; i++) {
        ds__cpu_relax();
        if (i % 4096 == 0) sched_yield(); /* the helper was switched out */
    }
    atomic_fetch_add_explicit(&W.jobs, 1, memory_order_relaxed);
    atomic_store_explicit(&W.busy, 0, memory_order_release);
    return true;
}

void ds__copy_threads_force(int threads)
{
    atomic_store_explicit(&W.threads,
                          threads == 1   ? DS__WIDE_OFF
                          : threads == 2 ? DS__WIDE_ALWAYS
                                         : DS__WIDE_MEASURE,
                          memory_order_relaxed);
}

void ds__copy_wide_stats(uint64_t *jobs, uint64_t *helped)
{
    *jobs = atomic_load_explicit(&W.jobs, memory_order_relaxed);
    *helped = atomic_load_explicit(&W.helped, memory_order_relaxed);
}
