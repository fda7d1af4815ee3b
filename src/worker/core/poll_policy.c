/* The loop's latency policy (poll_policy.h). The rules behind each number
 * are in common/tuning.h; the adaptive window is common/spin.c. */
#include "worker/core/poll_policy.h"

#include "common/clock.h"
#include "common/lane.h"
#include "worker/net/lane.h"

#include <sched.h>

/* Tells lane clients where the loop runs (they read it to decide whether
 * to watch their lane or yield to the loop, and whether to promise). */
static void tell_cpu(ds_lanes_t *L, uint32_t cpu)
{
    if (atomic_load_explicit(&L->hub->worker_cpu, memory_order_relaxed) != cpu)
        atomic_store_explicit(&L->hub->worker_cpu, cpu, memory_order_relaxed);
}

static bool lanes_active(const ds_net_t *net)
{
    return net->lanes != NULL && net->lanes->nactive != 0;
}

/* Whether the last request handled came through a lane from a client that
 * ran on the loop's CPU: polling would only keep that client off it. */
static bool shared_cpu(ds_net_t *net)
{
    ds_lanes_t *L = net->lanes;
    if (!lanes_active(net) || !net->lane_last) return false;
    int cpu = sched_getcpu();
    if (cpu < 0) return false;
    tell_cpu(L, (uint32_t)cpu);
    return (uint32_t)cpu == L->client_cpu;
}

/* Whether a client has promised a lane request soon (DS_LANE_AHEAD_MIN). */
static bool expected(ds_net_t *net, uint64_t now_ns)
{
    if (!lanes_active(net)) return false;
    uint64_t soon = atomic_load_explicit(&net->lanes->hub->soon, memory_order_relaxed);
    /* A promise further ahead than any client makes is a lie: ignored. */
    return soon > now_ns && soon - now_ns <= DS_LANE_AHEAD_MAX_NS;
}

/* Parting (DS_LANE_PART_NS): when the last lane request served came from a
 * polling client on the loop's own CPU, moves the loop to another; true
 * when it did. */
static bool part(ds_poll_t *p)
{
    ds_net_t *net = p->net;
    ds_lanes_t *L = net->lanes;
    if (L == NULL || !L->served) return false;
    L->served = false;
    if (!L->client_polls) return false;
    int cpu = sched_getcpu();
    if (cpu < 0 || (uint32_t)cpu != L->client_cpu) return false;
    uint64_t now = ds__now_ns();
    if (now < p->part_next) return false;
    /* Another CPU has other work: the client's would only wait there.
     * Often that is a kernel worker running for a moment: looked at again
     * soon, not after a whole DS_LANE_PART_NS. */
    if (ds__spin_cpus_wanted()) {
        p->part_next = now + DS_LANE_PART_RETRY_NS;
        return false;
    }
    p->part_next = now + DS_LANE_PART_NS;
    /* Said before the move: the client's next request may come meanwhile. */
    atomic_store_explicit(&L->hub->parted, now, memory_order_relaxed);
    int to = ds__spin_move_off(cpu);
    if (to < 0) {
        atomic_store_explicit(&L->hub->parted, 0, memory_order_relaxed);
        return false;
    }
    atomic_store_explicit(&L->hub->worker_cpu, (uint32_t)to, memory_order_relaxed);
    net->ctr.lane_parts++;
    return true;
}

/* Watches the hub for DS_LANE_WATCH_NS, or, when the last request came
 * through a lane, until DS_LANE_WATCH_BACK_NS after the loop last had work
 * if that is later: true as soon as a lane request came in. Not while
 * sharing the CPU with the last client. */
static bool watch(ds_poll_t *p)
{
    ds_net_t *net = p->net;
    if (!lanes_active(net) || shared_cpu(net)) return false;
    uint64_t until = ds__now_ns() + DS_LANE_WATCH_NS;
    if (net->lane_last && p->idle_since + DS_LANE_WATCH_BACK_NS > until)
        until = p->idle_since + DS_LANE_WATCH_BACK_NS;
    for (unsigned k = 1;; k++) {
        if (ds__lanes_any_ready(net->lanes, memory_order_relaxed)) {
            net->ctr.poll_watched++;
            return true;
        }
        ds__cpu_relax();
        if (k % 16 == 0 && ds__now_ns() >= until) return false;
    }
}

void ds__poll_init(ds_poll_t *p, ds_net_t *net, uint64_t max_us)
{
    *p = (ds_poll_t){.net = net, .on = max_us > 0};
    ds__spin_init(&p->spin, max_us * 1000u);
    p->idle_since = p->on ? ds__now_ns() : 0;
    /* Off, the loop never says where it runs: clients then neither yield
     * to it nor promise it requests it would not poll for. */
    if (!p->on && net->lanes) tell_cpu(net->lanes, DS_LANE_CPU_NONE);
}

int ds__poll_timeout(ds_poll_t *p, int timeout_ms)
{
    if (!p->on) return timeout_ms;
    ds_net_t *net = p->net;
    p->step = ds__now_ns();
    p->busy = ds__net_busy(net);
    /* While the transfer threads move a value of DS_POLL_XFER_SLEEP_MIN
     * bytes or more, the loop sleeps between events: the copy (with its
     * peer at the other end of the socket) keeps CPUs busy, and a loop
     * polling beside it takes a CPU from the copy and from the local
     * clients whose requests it waits for, so their requests queue behind
     * time slices instead. Polling resumes once the transfers are back. */
    if (ds__net_transfers(net)) {
        p->polling = false;
        net->ctr.poll_transfer_sleeps++;
        return p->busy ? 0 : timeout_ms;
    }
    bool calm = !p->contended && !p->busy;
    /* A client's promise of a request (a set copying a large value) keeps
     * the loop polling whatever the window says. */
    bool promised = calm && expected(net, p->step);
    /* Not on the CPU of the lane client served last: polling would only
     * keep it off (the window adapts as if apart, for when the loop parts
     * from it). Right after parting, the loop polls for its longest window
     * whatever the window says: asleep, it would be woken onto the
     * client's CPU again. */
    uint64_t window =
        p->step < p->parted_until ? p->spin.max_ns : ds__spin_window(&p->spin, p->step);
    p->polling = promised || (calm && p->step - p->idle_since < window && !shared_cpu(net));
    if (promised) net->ctr.poll_promised++;
    return p->polling || p->busy ? 0 : timeout_ms;
}

void ds__poll_after(ds_poll_t *p, int events, int lanes, uint64_t lane_at, bool slept)
{
    if (!p->on) return;
    ds_net_t *net = p->net;
    /* A sleep may have moved the loop to another CPU (clients read it, see
     * DS_LANE_AHEAD_MIN). */
    if (slept) {
        int cpu = sched_getcpu();
        if (cpu >= 0) tell_cpu(net->lanes, (uint32_t)cpu);
    }
    /* A poll step that found nothing watches the lanes for a moment before
     * it yields (longer right after a lane request, DS_LANE_WATCH_BACK_NS). */
    if (events == 0 && lanes == 0 && p->polling && watch(p)) lanes = ds__lanes_poll(net, &lane_at);
    if (events > 0 || lanes > 0) {
        uint64_t woke = events > 0 ? ds__loop_woke_ns(net->loop) : lane_at;
        if (p->polling) {
            net->ctr.poll_hits++;
            net->ctr.poll_ns += woke - p->step;
        }
        ds__spin_done(&p->spin, woke - p->idle_since, p->contended);
        /* Off the CPU of a polling client whose requests come back to back
         * (within the polling limit), so that both can poll. */
        if (woke - p->idle_since <= p->spin.max_ns && part(p))
            p->parted_until = ds__now_ns() + p->spin.max_ns;
        p->contended = false;
        p->steps = 0;
        p->idle_since = ds__now_ns();
    } else if (p->busy) {
        p->steps = 0;
        p->idle_since = ds__now_ns();
    } else if (p->polling) {
        /* A client sharing this CPU gets to send its request; a step that
         * ran another thread meanwhile was not spent polling. While it
         * serves a lane client, the step yields the way that client's wait
         * yields to the worker (client/lane.c): the client, which may be
         * woken onto this CPU at any moment, running here is what the step
         * waits for, and only a thread that then holds the CPU for
         * DS_SPIN_HOG_NS (or a machine over-busy) stops the polling.
         * Stopping at anything that ran here put the worker to sleep for
         * the request it was promised, kept the process from polling for
         * DS_SPIN_BACKOFF_NS, and the client's doorbell then woke the
         * worker onto the client's own CPU (docs/design.md, Request
         * lanes). Such a step's time counts as polled even when its yield
         * let that client run. */
        uint64_t t;
        p->contended =
            net->lane_last ? ds__spin_pause_beside(p->steps++, &t) : ds__spin_pause(p->steps++, &t);
        if (!p->contended) net->ctr.poll_ns += t - p->step;
    }
}
