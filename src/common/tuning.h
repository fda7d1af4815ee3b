/* The latency heuristics' tuning numbers, worker and client, in one place.
 * Each states the rule it sets and why; the measurements behind them, with
 * the commands that made them, are in docs/polling.md. The heuristics that
 * use them sit behind one switch per side: the worker's --busy_poll_us 0
 * (worker/core/poll_policy.h) and the client's busy_poll_us -1 or
 * DS_BUSY_POLL_US=0 (client/conn.c, client/lane.c). With both off, neither
 * side reads a CPU number, the load or a window: every wait sleeps. */
#ifndef DS_COMMON_TUNING_H
#define DS_COMMON_TUNING_H

/* ---- The adaptive polling window (common/spin.h) ---- */

/* The first window after a wait that polling would have caught: long
 * enough for a request that follows its answer at once, short enough
 * that a wrong guess costs little; it doubles from there. */
#define DS_SPIN_START_NS 8000u
/* A window that halves below this is 0 (sleep at once): so short a poll
 * catches almost nothing and still costs its checks. */
#define DS_SPIN_MIN_NS 1000u
/* The machine-wide load check (a read of /proc/loadavg) runs every this
 * many poll steps: it costs a system call, more than a step's yield. */
#define DS_SPIN_LOAD_EVERY 8u
/* After a poll stopped because a CPU had other work, no wait of the
 * process polls for this long: a machine that stays busy is not checked
 * again by every thread at every wait. */
#define DS_SPIN_BACKOFF_NS 1000000u
/* A yield counts as contention only when the neighbour it let run then
 * held the CPU this long: a CPU-bound thread, whose time slices polling
 * would wait out. A neighbour that yields back within microseconds (another
 * client, the worker, a kernel worker) does not stop polling. */
#define DS_SPIN_HOG_NS 200000u
/* The machine counts as over-busy only when every load check for this long
 * found more runnable threads than CPUs: a thread runnable for a moment (a
 * timer, a kernel worker, a host agent) must not put both sides to sleep,
 * since sides that wake each other tend to be placed on one CPU. */
#define DS_SPIN_OVER_NS 200000u

/* The loop does not poll while the transfer threads (worker/net/bulk.c,
 * bulk_recv.c) move a value of at least this many bytes: such a copy and
 * its peer keep the CPUs busy for milliseconds, and a polling loop beside
 * them takes a CPU from them and from the local client whose request it
 * waits for. A smaller transfer ends within a few hundred microseconds,
 * and polling catches its end (and the client's next request) sooner than
 * a wake-up would. */
#define DS_POLL_XFER_SLEEP_MIN (8u << 20)

/* The nice value of the transfer threads (worker/net/xfer.c). Below the
 * loop's and the clients' priority, a thread copying a large value is
 * preempted at once when the loop or a client wakes for a small request,
 * instead of keeping the CPU for a time slice (the hol phase of the
 * side-by-side benchmark: bench/results/hol_priority.txt). Beside clients
 * that keep a CPU busy with small requests a large transfer gets what they
 * leave; alone it runs as fast as before. 10 rather than 19: small requests
 * wait no longer, and a large transfer beside them keeps about twice the
 * speed it has at 19. Not behind --busy_poll_us: it reads nothing, and a
 * plain epoll loop gains from it as much. Under autogroup scheduling nice
 * weighs threads of one session against each other only, so the worker's
 * share of the machine against other sessions stays. */
#define DS_XFER_NICE 10

/* ---- Request lanes (common/lane.h) ---- */

/* A poll step of either side first watches the lane this long before it
 * yields: a watch sees the other side's write within a fraction of a
 * microsecond, the yield and checks of a step cost more than that. */
#define DS_LANE_WATCH_NS 2000u
/* Right after the worker served a lane request its steps watch until this
 * long after: a client's next request often follows within microseconds
 * (after its copy of a value of some KiB), and one that arrives while the
 * loop is in a yield waits for it. A TCP request that comes meanwhile waits
 * at most this long. */
#define DS_LANE_WATCH_BACK_NS 20000u
/* Waking ahead: a client copying a value of at least DS_LANE_AHEAD_MIN
 * bytes into the arena promises the worker its request when
 * DS_LANE_AHEAD_BYTES are left to copy, so the worker's wake-up overlaps
 * the end of the copy. A promise reaches at most DS_LANE_AHEAD_MAX_NS
 * ahead (the rest of the copy at 1 GB/s plus DS_LANE_AHEAD_MARGIN_NS); a
 * worker ignores one further ahead, so a lying client costs at most the
 * polling its own requests could cause. */
#define DS_LANE_AHEAD_MIN (256u * 1024u)
#define DS_LANE_AHEAD_BYTES (1024u * 1024u)
#define DS_LANE_AHEAD_MAX_NS 1000000u
#define DS_LANE_AHEAD_MARGIN_NS 50000u
/* Parting: a loop that has just served a polling lane client running on
 * its own CPU moves to another CPU, at most once per DS_LANE_PART_NS:
 * sides that woke each other tend to be kept on one CPU, where neither can
 * poll and each round trip is a pair of context switches. */
#define DS_LANE_PART_NS 2000000u
/* ... but a loop that found the machine busy (more runnable threads than
 * CPUs) looks again after DS_LANE_PART_RETRY_NS: the thread that made it
 * so is usually a kernel worker running for a moment. */
#define DS_LANE_PART_RETRY_NS 250000u
/* A client's lane wait that begins within DS_LANE_PARTED_NS of the
 * worker's parting polls for its longest window, as the loop does after
 * parting: the move takes the worker longer than a window that shrank
 * while the two shared a CPU, and a client asleep when the answer comes is
 * woken onto the worker's new CPU. */
#define DS_LANE_PARTED_NS 1000000u

/* ---- Quotas (worker/net/guard.c) ---- */

/* A request refused for one of its client's quotas (subscriptions, read
 * latches, in-flight SET bytes) is answered only after a pause, during
 * which its connection reads nothing more: a client that retries at once would
 * otherwise make the loop parse and refuse its batches back to back while
 * everyone else waits behind them. The first pause is short, so a client
 * that overstepped once hardly notices; each refusal within
 * DS_QUOTA_PAUSE_RESET_MS of the end of the session's previous pause
 * doubles it, up to DS_QUOTA_PAUSE_MAX_MS (a client's retry of a batch of
 * thousands of keys takes it milliseconds to build, so the window is not
 * a multiple of a short pause). A session's refusals are paused one after
 * the other, so more connections buy it no more refused work. */
#define DS_QUOTA_PAUSE_MIN_MS 2u
#define DS_QUOTA_PAUSE_MAX_MS 1000u
#define DS_QUOTA_PAUSE_RESET_MS 2000u
/* A refused SET's data section still crosses the socket (the worker reads
 * and drops it after the pause, to stay in step with the client): its
 * pause lasts at least as long as dropping it at this rate, so that a
 * client pipelining large SETs past its quota moves them at this pace,
 * not at the speed of the machine's copies. */
#define DS_QUOTA_DROP_MIB_PER_S 64u
/* A peer past --max_handshake_conns_per_peer has its oldest connection
 * without HELLO closed for each new one, but at most this many times its
 * cap per second: a flooder reopens every socket closed on it at once, so
 * closing without a bound made the loop accept and close for it at full
 * speed. Past the bound its new connections wait (unread) for
 * --handshake_timeout_ms like any other. */
#define DS_HS_PEER_EVICT_CAPS_PER_S 4u
/* Peers whose eviction counts are kept (a hash table; peers sharing a slot
 * share the count). */
#define DS_HS_PEER_SLOTS 64u
/* Connections the loop accepts per listener event, and connections it
 * closes for their handshake deadline per turn: each costs the loop tens
 * of microseconds of socket calls (more with an eviction or a refusal to
 * write), so a flood of connections is taken a few at a time, with the
 * other clients' requests served in between (the listener is
 * level-triggered, and the deadline sweep is due again at once). */
#define DS_ACCEPT_BATCH 8
#define DS_HS_CLOSE_BATCH 8u

#endif
