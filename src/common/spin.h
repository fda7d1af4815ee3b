/* Adaptive polling: how long a thread that waits for something (the
 * worker for its clients' next request, a client for its reply) polls
 * before it sleeps. Sleeping costs a wake-up when the thing arrives, which
 * on a machine whose idle CPUs halt (a VM) can cost more than a round
 * trip's own work; polling costs the CPU it spins on. The numbers are in
 * common/tuning.h; the measurements behind the rules in docs/polling.md.
 *
 * The window adapts the way Linux's haltpoll cpuidle governor does, from
 * how long each wait turned out to last (its idle time):
 * - the wait ended while polling: the window was right, it stays;
 * - it ended after the thread slept, but within max_ns: polling would have
 *   caught it, the window doubles (from DS_SPIN_START_NS), up to max_ns;
 * - it lasted longer than max_ns: the polling was wasted, the window halves
 *   (under DS_SPIN_MIN_NS it is 0: the thread sleeps at once).
 * So a thread polls only while what it waits for keeps arriving within
 * max_ns, and a quiet one costs at most a few halving windows.
 *
 * Polling also stops as soon as a CPU has other work: when another
 * thread ran on this thread's CPU during a step (the yield that ends each
 * step handed it over, or the scheduler preempted the poller: either counts
 * as an involuntary context switch of this thread), or when more threads
 * are runnable on the machine than it has CPUs (pollers included;
 * /proc/loadavg, read every DS_SPIN_LOAD_EVERY steps) at every check for
 * DS_SPIN_OVER_NS. Then the window quarters and no wait of the whole
 * process polls for the next DS_SPIN_BACKOFF_NS, so that a poller never
 * holds a CPU something else could use, nor do many threads pay for
 * checking again on a machine that stays busy. The machine-wide check
 * waits DS_SPIN_OVER_NS because stopping at the first sight of a runnable
 * thread put both sides to sleep, and once they woke each other the
 * scheduler often placed them on one CPU, where polling cannot start again.
 *
 * Waits beside a thread they wait for differ: a client's wait for a reply
 * on its socket (client/conn.c), a client's lane wait while the worker's
 * loop runs on its CPU (client/lane.c), and the worker's poll step while
 * it serves a lane client (ds__spin_pause_beside, which keeps the
 * machine-wide check) go on polling while other threads share the CPU,
 * and stop only for one that then holds it for DS_SPIN_HOG_NS or more
 * (ds__spin_yield): a CPU-bound neighbour, whose time slices polling would
 * wait out where a wake-up would preempt it. The thread that ran there is
 * often the very one waited for, and stopping at it put the waiter to
 * sleep, whereupon its wake-up pulled the two onto one CPU. A lane wait
 * that polls as if apart does not count a step's yield as contention
 * either when the hub then says the worker's loop runs on its CPU: that
 * was the worker, woken there by the wait's own doorbell.
 *
 * A step that merely took long does not count: on a VM that is the
 * hypervisor running something else on the vCPU, or interrupts, neither of
 * which a thread of this machine waits behind; counting it stopped polling
 * often on guests whose vCPUs are preempted often.
 *
 * A ds_spin_t is plain data, no locking: one per waiting thread or
 * connection. */
#ifndef DS_COMMON_SPIN_H
#define DS_COMMON_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/tuning.h"

typedef struct {
    uint64_t max_ns;    /* 0: never poll */
    uint64_t window_ns; /* how long the next wait polls */
} ds_spin_t;

static inline void ds__spin_init(ds_spin_t *s, uint64_t max_ns)
{
    s->max_ns = max_ns;
    s->window_ns = 0;
}

/* How long a wait that begins at now_ns polls; 0: it sleeps at once. */
uint64_t ds__spin_window(const ds_spin_t *s, uint64_t now_ns);

/* One wait is over: it lasted idle_ns until what it waited for arrived;
 * contended when polling stopped because the CPU had other work. */
void ds__spin_done(ds_spin_t *s, uint64_t idle_ns, bool contended);

/* Ends poll step number step (0, 1, ...) of a wait: yields the CPU to any
 * thread that wants it, and says whether a CPU has other work (see above);
 * then polling should stop. *now_ns (unless NULL): the time after it. One
 * thread's steps follow each other: it remembers where the previous one
 * ended. */
bool ds__spin_pause(unsigned step, uint64_t *now_ns);
/* A poll step of a wait for a thread that may run on this thread's CPU:
 * the machine-wide check as in ds__spin_pause, then the yield of
 * ds__spin_yield, which lets that thread run and counts only a neighbour
 * that then holds the CPU for DS_SPIN_HOG_NS or more. */
bool ds__spin_pause_beside(unsigned step, uint64_t *now_ns);
/* A poll step of a wait that tolerates sharing its CPU: yields it, and
 * says whether another thread then held it for DS_SPIN_HOG_NS or more (a
 * CPU-bound neighbour, whose time slices polling would wait out). */
bool ds__spin_yield(uint64_t *now_ns);
/* Whether more threads are runnable on the machine than it has CPUs. */
bool ds__spin_cpus_wanted(void);
/* Moves the calling thread off CPU cpu onto another CPU it may run on,
 * leaving its allowed CPUs as they were (the kernel does not move a thread
 * back to a CPU merely because it may run there). The CPU it then runs
 * on, or -1 when it may run on no other or the kernel refused. */
int ds__spin_move_off(int cpu);

#endif
