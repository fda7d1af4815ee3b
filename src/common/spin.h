/* Adaptive polling: how long a thread that waits for something (the
 * worker for its clients' next request, a client for its reply) polls
 * before it sleeps. Sleeping costs a wake-up when the thing arrives, which
 * on a VM whose idle vCPUs halt is tens of microseconds, more than a round
 * trip's own work; polling costs the CPU it spins on.
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
 * checking again on a machine that stays busy.
 *
 * Why the machine-wide check waits: on a machine with few CPUs, a third
 * runnable thread shows up many times a second for a moment only (most
 * such episodes are over within a hundred microseconds). Stopping at the
 * first sight of one puts both sides to sleep, and once they wake each
 * other the scheduler often places them on one CPU, where each round trip
 * is a pair of context switches and polling cannot start again; a whole
 * stream of round trips then runs at several times its usual latency for
 * a while. Requiring the overload to last DS_SPIN_OVER_NS lets such
 * moments pass and still stops for real contention.
 *
 * One wait differs: a client's wait for a reply on its socket
 * (client/conn.c) goes on polling while other threads share its CPU, and
 * stops only for one that then holds the CPU for DS_SPIN_HOG_NS or more
 * (ds__spin_yield): a CPU-bound neighbour, whose time slices polling would
 * wait out where a wake-up would preempt it. Several client processes
 * sharing a CPU (each yields back within microseconds) keep polling; each
 * of them asleep instead would cost the worker a wake-up per reply, and
 * under the general rule nearly every one of their polls would stop.
 * A client's wait on its request lane does the same while the worker's loop
 * runs on its CPU (client/lane.c): the worker taking the CPU is what that
 * wait waits for, and awake the client sees the answer without a wake-up
 * when the worker moves away (DS_LANE_PART_NS in common/lane.h). So does
 * the worker's poll step while it serves a lane client
 * (ds__spin_pause_beside, which keeps the machine-wide check): the thread
 * that ran on its CPU is often that client, or a kernel worker for a
 * moment, and stopping at it would put the worker to sleep, whereupon the
 * client's doorbell wakes it onto the client's CPU. A lane wait that polls
 * as if apart does not count a step's yield as contention either when the
 * hub then says the worker's loop runs on its CPU: that was the worker,
 * woken there by the wait's own doorbell.
 *
 * A step that merely took long does not count: on a VM that is the
 * hypervisor running something else on the vCPU, or interrupts, neither of
 * which a thread of this machine waits behind. Counting it would stop
 * polling for DS_SPIN_BACKOFF_NS every time a vCPU is preempted, and every
 * request in such a pause would ring a sleeping worker awake, a cost the
 * ringing client pays.
 *
 * A ds_spin_t is plain data, no locking: one per waiting thread or
 * connection. */
#ifndef DS_COMMON_SPIN_H
#define DS_COMMON_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define DS_SPIN_START_NS 8000u
#define DS_SPIN_MIN_NS 1000u
#define DS_SPIN_LOAD_EVERY 8u
#define DS_SPIN_BACKOFF_NS 1000000u
#define DS_SPIN_HOG_NS 200000u
#define DS_SPIN_OVER_NS 200000u

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
