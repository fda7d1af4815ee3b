/* The loop's latency policy: whether a turn polls (waits with timeout 0)
 * instead of sleeping, and what the loop does about where it runs. It
 * gathers every heuristic the loop has - the adaptive polling window
 * (common/spin.h), clients' promises of a request (DS_LANE_AHEAD_MIN),
 * parting from a lane client's CPU (DS_LANE_PART_NS), the machine-load and
 * CPU-neighbour checks, watching the lanes before a poll step yields
 * (DS_LANE_WATCH_NS), and sleeping while the transfer threads move a large
 * value (ds__net_transfers) - behind two calls, one before the wait and one after
 * it. The tuning numbers live in common/tuning.h.
 *
 * One switch turns all of it off: --busy_poll_us 0. The loop is then a
 * plain epoll loop (sleep until an event or the next timer), no hook reads
 * the CPU, the load or the clock, and the hub tells lane clients that the
 * worker neither polls nor keeps promises (hub.worker_cpu DS_LANE_CPU_NONE).
 *
 * Loop thread only; one per loop. */
#ifndef DS_WORKER_CORE_POLL_POLICY_H
#define DS_WORKER_CORE_POLL_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "common/spin.h"
#include "worker/net/net.h"

typedef struct {
    ds_net_t *net;
    bool on; /* --busy_poll_us > 0 */
    ds_spin_t spin;
    /* The turn under way: when its wait began (ns), whether connections
     * were waiting on the ready list, and whether it polls. */
    uint64_t step;
    bool busy, polling;
    /* When the loop last had work (ns); the poll steps since then; whether
     * the last step found the CPU wanted by other work. */
    uint64_t idle_since;
    unsigned steps;
    bool contended;
    /* The loop polls its longest window until then (ns) after parting; it
     * may try to part again from part_next on. */
    uint64_t parted_until, part_next;
} ds_poll_t;

/* max_us: --busy_poll_us (0 = off). */
void ds__poll_init(ds_poll_t *p, ds_net_t *net, uint64_t max_us);
/* Before the loop waits: the timeout to use (ms) given the one its timers
 * and ready list allow (timeout_ms, -1 = none). Off: timeout_ms. */
int ds__poll_timeout(ds_poll_t *p, int timeout_ms);
/* After the wait: events it dispatched, lane requests the loop then served
 * (lanes; lane_at: when it found the first, ns), and whether the loop had
 * told lane clients it sleeps (slept). Off: nothing. */
void ds__poll_after(ds_poll_t *p, int events, int lanes, uint64_t lane_at, bool slept);

#endif
