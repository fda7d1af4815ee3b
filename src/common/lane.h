/* Request lanes: a local connection's requests and answers through the
 * arena instead of its socket.
 *
 * Why: a local round trip over the Unix socket costs two socket writes and
 * reads, and each wake-up it causes is a "sync" wake-up, which makes the
 * kernel run the woken side on the waker's CPU. On a VM whose idle vCPUs
 * halt, the two sides then share one vCPU after every pause, and every
 * round trip is a socket ping-pong between them there (~10 us here against
 * ~7 us on two vCPUs). A lane carries the same frames through shared
 * memory: while the other side polls, a round trip costs no system call at
 * all; while it sleeps, the wake-up is an eventfd write (to the worker) or
 * a futex wake (to the client), neither of which asks the kernel to pull
 * the woken side over. (It may still: on the Intel VM of 2026-12-02, kernel
 * 6.18, `perf` saw the worker's futex wake move a client that had slept
 * for microseconds onto the worker's CPU, so two sides that have slept
 * and woken each other tend to stay on one CPU, and their polling backs
 * off there; that guest boots with sched_vcpu_pack=15, a non-mainline
 * option that packs tasks onto fewer vCPUs. See the README's Performance
 * section.)
 *
 * A lane is one request and its answer at a time, for one connection (the
 * client library sends one request per connection at a time anyway):
 *  - client: writes the whole request (header, metadata, data: at most
 *    DS_LANE_REQ_MAX bytes, else it uses the socket) and req_len, then bumps
 *    req_seq and sets its lane's bit in the hub's ready mask; if the hub
 *    says the worker sleeps, it writes the doorbell eventfd the worker gave
 *    it (LANE);
 *  - worker: its loop takes the ready mask (polling) or is woken by the
 *    doorbell (sleeping), copies the frame out of each lane whose bit was
 *    set and whose req_seq moved, and handles it exactly as
 *    if it had come over the socket; the answer goes into rep (rep_len) when
 *    it fits and carries no descriptor, else rep_len says DS_LANE_ON_SOCKET
 *    and the answer follows on the socket; then it bumps rep_seq and, when
 *    the client said it sleeps (waiting), wakes it with FUTEX_WAKE on
 *    rep_seq;
 *  - client: polls rep_seq, then sleeps on it (FUTEX_WAIT, in slices so
 *    that a worker that died is noticed on the socket).
 * Both sleep protocols are Dekker pairs of sequentially consistent
 * operations (a flag store, then a load of the other side's word), so a
 * request or an answer is never left unnoticed by a side that went to sleep.
 *
 * Lanes live in a region of the arena the worker carves out at start (like
 * the pin tables): the hub, then DS_LANE_SIZE bytes per lane. Local clients
 * can write the whole arena, so the worker treats everything in a lane as
 * input: it copies the request out before parsing it, checks its length
 * and the lane's generation, and a lane in a state the protocol does not
 * allow closes that connection only. */
#ifndef DS_COMMON_LANE_H
#define DS_COMMON_LANE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define DS_LANE_MAX 256u /* lanes per worker: a multiple of 64, at most 512 */
#define DS_LANE_SIZE 16384u
#define DS_LANE_HDR 128u
#define DS_LANE_REQ_MAX 8128u
#define DS_LANE_REP_MAX (DS_LANE_SIZE - DS_LANE_HDR - DS_LANE_REQ_MAX)
/* hub.worker_cpu: the worker does not say where it runs. */
#define DS_LANE_CPU_NONE UINT32_MAX
/* rep_len: the answer comes on the socket. */
#define DS_LANE_ON_SOCKET UINT32_MAX
/* A poll step of either side first watches the lane this long: the yield
 * and the checks of a step (common/spin.h) cost ~1.5 us here, a watch
 * sees the other side's write within ~0.1 us. */
#define DS_LANE_WATCH_NS 2000u
/* ... except in the first DS_LANE_WATCH_BACK_NS after the worker served a
 * lane request, when the worker's steps watch until then: a client's next
 * request often comes within microseconds (after its copy of a value of
 * some KiB), and one that comes while the loop is in a step's yield and
 * checks and its next turn's epoll_wait waits those out. 64 KiB sets with
 * a 64 KiB get between them took 6.4-7.5 us against 2.2-2.5 back to back;
 * 2.2-3.7 with this. A TCP request that comes meanwhile waits at most
 * this long. */
#define DS_LANE_WATCH_BACK_NS 20000u
/* How long one futex sleep of a waiting client lasts before it looks at
 * its socket and deadline again. */
#define DS_LANE_SLEEP_SLICE_MS 50u
/* Waking ahead: a client that copies a value of at least
 * DS_LANE_AHEAD_MIN bytes into the arena before the request that publishes
 * it tells the worker, when DS_LANE_AHEAD_BYTES are left to copy, that a
 * request is coming (hub.soon: by when, on CLOCK_MONOTONIC) and rings the
 * doorbell if the worker sleeps. The worker's wake-up (tens of us on a VM
 * whose idle vCPUs halt) then overlaps the end of the copy, and the worker
 * polls the lanes until the request comes or the time passes. The client
 * promises at most DS_LANE_AHEAD_MAX_NS ahead (the rest of the copy at
 * 1 GB/s, plus a margin) and clears its promise when it sends; a worker
 * ignores a promise further ahead than that, and the next client's promise
 * replaces it, so a client that lies costs at most the polling it could
 * cause with requests of its own. Not made from the worker's CPU (hub.
 * worker_cpu), nor by a client whose polling is off. */
#define DS_LANE_AHEAD_MIN (256u * 1024u)
#define DS_LANE_AHEAD_BYTES (1024u * 1024u)
#define DS_LANE_AHEAD_MAX_NS 1000000u
/* Parting: a worker loop that has just served a request from a client
 * running on its own vCPU, a client that polls for its answers and sent it
 * within the loop's polling limit of the previous request, moves to another
 * vCPU (at most once per DS_LANE_PART_NS, and not while the machine has
 * more runnable threads than CPUs). Once two sides have woken
 * each other, the kernel tends to keep them on one vCPU (see above), where
 * neither can poll and each round trip is a pair of context switches; on
 * two vCPUs both poll and a round trip costs no system call. */
#define DS_LANE_PART_NS 2000000u
/* ... but a loop that found the machine busy (more runnable threads than
 * CPUs) looks again after DS_LANE_PART_RETRY_NS: in a trace the thread
 * that made it so was a kernel worker running for a moment, and waiting a
 * whole DS_LANE_PART_NS left the two sides on one vCPU for 28 set+gets of
 * 1 MiB. */
#define DS_LANE_PART_RETRY_NS 250000u
/* A client's lane wait that begins within DS_LANE_PARTED_NS of the
 * worker's parting (hub.parted) polls for its longest window, whatever its
 * window says, as the worker's loop does after parting. The move takes the
 * worker ~100 us here (the halted vCPU it goes to must wake first), longer
 * than a window that shrank while the two shared a vCPU; a client asleep
 * when the answer comes is woken from the worker's new vCPU, and the
 * kernel then moves it there too: in traces of bursts of 1 MiB set+gets
 * the two were back on one vCPU within a request of most parts. A local
 * client that writes a false hub.parted costs the others no more than
 * polling their longest window, which their own requests could cause. */
#define DS_LANE_PARTED_NS 1000000u

typedef struct {
    /* Written by the client. */
    _Atomic uint32_t req_seq;
    _Atomic uint32_t req_len;
    _Atomic uint32_t req_gen;    /* the generation LANE gave: a stale client's writes are ignored */
    _Atomic uint32_t client_cpu; /* where the client ran when it sent (see hub.worker_cpu) */
    _Atomic uint32_t client_polls; /* 1: the client polls for its answers (see DS_LANE_PART_NS) */
    uint8_t pad0[44];
    /* Written by the worker (waiting: by the client). */
    _Atomic uint32_t rep_seq;
    _Atomic uint32_t rep_len;
    _Atomic uint32_t waiting; /* 1 while the client sleeps (or is about to) on rep_seq */
    _Atomic uint32_t closed;  /* the worker closed the connection */
    uint8_t pad1[48];
    uint8_t req[DS_LANE_REQ_MAX];
    uint8_t rep[DS_LANE_REP_MAX];
} ds_lane_t;

typedef struct {
    _Atomic uint32_t sleeping; /* 1 while the worker's loop may sleep */
    /* Where the worker's loop runs. Watching the lane (DS_LANE_WATCH_NS)
     * only delays a side that shares the CPU with the watcher, so neither
     * watches when they last ran on the same one. DS_LANE_CPU_NONE: the
     * worker's polling is off (--busy_poll_us 0): it neither polls nor
     * keeps promises, so no client makes one. */
    _Atomic uint32_t worker_cpu;
    /* Written by clients: a request is due by then (ns, CLOCK_MONOTONIC;
     * 0 = none), see DS_LANE_AHEAD_MIN. */
    _Atomic uint64_t soon;
    /* Written by the worker: when its loop last began to part from a lane
     * client (ns, CLOCK_MONOTONIC; 0 = never), see DS_LANE_PARTED_NS. */
    _Atomic uint64_t parted;
    uint8_t pad0[40];
    /* Bit i set by the client of lane i after each request it wrote. */
    _Atomic uint64_t ready[DS_LANE_MAX / 64];
    uint8_t pad1[64 - 8 * (DS_LANE_MAX / 64)];
} ds_lane_hub_t;

_Static_assert(sizeof(ds_lane_t) == DS_LANE_SIZE, "lane layout");
_Static_assert(sizeof(ds_lane_hub_t) <= DS_LANE_SIZE, "hub layout");

/* Region of n lanes: the hub, padded to one lane, then the lanes. */
static inline uint64_t ds__lane_region_size(uint32_t n)
{
    return (uint64_t)(n + 1) * DS_LANE_SIZE;
}

static inline void ds__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* FUTEX_WAIT on a shared-memory word while it holds val, up to ms; 0 when
 * woken (or the word differs), -1 with errno (ETIMEDOUT, EINTR). */
int ds__futex_wait(_Atomic uint32_t *word, uint32_t val, uint32_t ms);
/* Wakes one waiter on the word. */
void ds__futex_wake(_Atomic uint32_t *word);

#endif
