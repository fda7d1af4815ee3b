/* Request lanes: a local connection's requests and answers through the
 * arena instead of its socket.
 *
 * Why: a local round trip over the Unix socket costs two socket writes and
 * reads, and each wake-up it causes is a "sync" wake-up, which makes the
 * kernel run the woken side on the waker's CPU. On a VM whose idle vCPUs
 * halt, the two sides then share one vCPU after every pause, and every
 * round trip is a socket ping-pong between them there. A lane carries the same frames through
 * shared memory: while the other side polls, a round trip costs no system call at all; while it
 * sleeps, the wake-up is an eventfd write (to the worker) or a futex wake (to the client), neither
 * of which asks the kernel to pull the woken side over (it may still: docs/polling.md).
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

#include "common/tuning.h"

#define DS_LANE_MAX 256u /* lanes per worker: a multiple of 64, at most 512 */
#define DS_LANE_SIZE 16384u
#define DS_LANE_HDR 128u
#define DS_LANE_REQ_MAX 8128u
#define DS_LANE_REP_MAX (DS_LANE_SIZE - DS_LANE_HDR - DS_LANE_REQ_MAX)
/* hub.worker_cpu: the worker does not say where it runs. */
#define DS_LANE_CPU_NONE UINT32_MAX
/* rep_len: the answer comes on the socket. */
#define DS_LANE_ON_SOCKET UINT32_MAX
/* How long one futex sleep of a waiting client lasts before it looks at
 * its socket and deadline again. */
#define DS_LANE_SLEEP_SLICE_MS 50u
/* The tuning numbers (DS_LANE_WATCH_NS, DS_LANE_AHEAD_*, DS_LANE_PART*_NS)
 * are in common/tuning.h. */

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
