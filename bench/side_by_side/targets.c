/* The targets of a side-by-side run, each a ratio between figures of this
 * same run (issue 14's set): local set against memcpy, local set+get against
 * two memcpys and against Redis over its Unix socket, remote set, get and
 * concurrent set+get against Redis over TCP, random operations among the
 * resident keys, head-of-line blocking and memory per key.
 *
 * Every target also carries the ratio of the same row of ours to the
 * machine's own limit (memcpy or the loopback TCP stream from 64 KiB, the
 * ping-pong round trip below), so that a headline ratio against a peer is
 * never read without the figure that does not move with the peer's costs:
 * a ratio to Redis or to the shared-memory path moves with this VM's
 * page-fault and syscall costs from day to day, a ratio to the machine's
 * limit much less (docs/performance.md, "Which ratios are stable"). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/side_by_side/out.h"

#define MAX_TARGETS 64

static int ntargets;
static sbs_target_t targets[MAX_TARGETS];

/* Adds a target. limit_row: the row of ours whose ratio_to_limit stands
 * beside it (NULL: none). stable: the measured ratio is itself one to the
 * machine's limit. */
static void target(const char *name, double measured, double goal, bool higher_is_better,
                   const sbs_row_t *limit_row, bool stable)
{
    if (ntargets >= MAX_TARGETS) return;
    sbs_target_t *t = &targets[ntargets++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->measured = measured;
    t->target = goal;
    t->higher_is_better = higher_is_better;
    t->met = !isnan(measured) && (higher_is_better ? measured >= goal : measured <= goal);
    t->limit_ratio = limit_row ? limit_row->ratio_to_limit : NAN;
    t->stable = stable;
    t->limit[0] = '\0';
    if (limit_row == NULL) return;
    bool tcp = !strcmp(limit_row->system, "ds-remote");
    bool pair = strchr(limit_row->op, '+') != NULL;
    if (limit_row->size >= 64 * SBS_KIB)
        snprintf(t->limit, sizeof(t->limit), "%s%s",
                 tcp ? "loopback TCP stream" : "fastest copy (memcpy, rep movsb or 2 threads)",
                 pair ? ", halved for a pair" : "");
    else
        snprintf(t->limit, sizeof(t->limit), "%s 1 KiB ping-pong%s", tcp ? "TCP" : "Unix socket",
                 pair ? ", two for a pair" : "");
}

static double p99_of(const char *sys, const char *op, size_t size, int clients)
{
    const sbs_row_t *r = sbs_row_find(sys, op, size, clients);
    return r ? r->p99_us : NAN;
}

static double redis_ratio(const sbs_row_t *r)
{
    return r ? r->ratio_to_redis : NAN;
}

static void local_targets(const sbs_limits_t *lim)
{
    char name[160], h[32];
    for (size_t i = 0; i < sbs_nsizes; i++) {
        size_t s = sbs_sizes[i];
        if (s != SBS_KIB && s < SBS_MIB) continue;
        const sbs_row_t *r = sbs_row_find("ds-local", "set+get", s, 1);
        snprintf(name, sizeof(name), "local set+get vs Redis (Unix socket), %s, x faster",
                 sbs_human(s, h, sizeof(h)));
        double goal = s == SBS_KIB ? 1.5 : s == SBS_MIB ? 3.0 : 5.0;
        target(name, redis_ratio(r), goal, true, r, false);
    }
    int mi = sbs_size_index(SBS_MIB);
    const sbs_row_t *sg = sbs_row_find("ds-local", "set+get", SBS_MIB, 1);
    double two =
        mi >= 0 && lim->memcpy_gbps[mi] > 0 ? 2.0 * SBS_MIB / (lim->memcpy_gbps[mi] * 1e3) : NAN;
    target("local set+get time / two memcpys of the size, 1 MiB, at most",
           sg && sg->p50_us > 0 ? sg->p50_us / two : NAN, 1.5, false, sg, true);
    const sbs_row_t *big = sbs_row_find("ds-local", "set+get", 64 * SBS_MIB, 1);
    const sbs_row_t *shm = sbs_row_find("vllm-omni-shm", "put+get", 64 * SBS_MIB, 1);
    target("local set+get vs vLLM-Omni shared-memory path, 64 MiB, x faster",
           big && shm && big->p50_us > 0 ? shm->p50_us / big->p50_us : NAN, 30.0, true, big, false);
    for (size_t i = 0; i < sbs_nsizes; i++) {
        size_t s = sbs_sizes[i];
        if (s < SBS_MIB) continue;
        const sbs_row_t *r = sbs_row_find("ds-local", "set", s, 1);
        snprintf(name, sizeof(name), "local set vs memcpy bandwidth, %s, fraction",
                 sbs_human(s, h, sizeof(h)));
        target(name, r && lim->memcpy_gbps[i] > 0 ? r->gbps / lim->memcpy_gbps[i] : NAN,
               s == SBS_MIB ? 0.6 : 0.8, true, r, true);
    }
}

static void remote_targets(void)
{
    char name[160], h[32];
    const char *ops[2] = {"set", "get"};
    for (int o = 0; o < 2; o++)
        for (size_t i = 0; i < sbs_nsizes; i++) {
            size_t s = sbs_sizes[i];
            const sbs_row_t *r = sbs_row_find("ds-remote", ops[o], s, 1);
            snprintf(name, sizeof(name), "remote %s vs Redis (TCP), %s, x faster", ops[o],
                     sbs_human(s, h, sizeof(h)));
            target(name, redis_ratio(r), 1.0, true, r, false);
        }
    const int clients[] = {1, 4, 16, 64};
    const size_t sizes[] = {SBS_KIB, SBS_MIB};
    for (int si = 0; si < 2; si++)
        for (int ci = 0; ci < 4; ci++) {
            const sbs_row_t *r =
                sbs_row_find("ds-remote", "concurrent set+get", sizes[si], clients[ci]);
            snprintf(name, sizeof(name),
                     "remote concurrent set+get vs Redis (TCP), %s, %d clients, x rate",
                     sbs_human(sizes[si], h, sizeof(h)), clients[ci]);
            target(name, redis_ratio(r), 1.0, true, r, false);
        }
}

static void resident_targets(void)
{
    const char *ops[2] = {"resident get", "resident set"};
    const char *sys[2] = {"ds-local", "ds-remote"};
    char name[160];
    for (int s = 0; s < 2; s++)
        for (int o = 0; o < 2; o++) {
            const sbs_row_t *r = sbs_row_find(sys[s], ops[o], SBS_KIB, 1);
            snprintf(name, sizeof(name), "random 1 KiB %s among the resident keys vs Redis (%s)",
                     ops[o] + strlen("resident "), s == 0 ? "Unix socket" : "TCP");
            target(name, redis_ratio(r), s == 0 ? 1.2 : 1.0, true, r, false);
        }
}

static void pyconn_targets(void)
{
    const size_t sizes[2] = {64 * SBS_MIB, SBS_MIB};
    const double goals[2] = {0.5, 0.3};
    char name[160], h[32];
    for (int i = 0; i < 2; i++) {
        const sbs_row_t *r = sbs_row_find("connector-python", "put+get", sizes[i], 1);
        const sbs_row_t *m = sbs_row_find("limit", "numpy memcpy", sizes[i], 1);
        snprintf(name, sizeof(name),
                 "Python connector put+get of a tensor vs one warm memcpy, %s, fraction",
                 sbs_human(sizes[i], h, sizeof(h)));
        target(name, r && m && r->p50_us > 0 ? m->p50_us / r->p50_us : NAN, goals[i], true, r,
               true);
    }
}

void sbs_compute_targets(const sbs_limits_t *lim)
{
    ntargets = 0;
    local_targets(lim);
    pyconn_targets();
    remote_targets();
    resident_targets();
    const char *hol_sys[2] = {"ds-local", "ds-remote"};
    char name[160];
    for (int i = 0; i < 2; i++) {
        double idle = p99_of(hol_sys[i], "1KiB set/get idle", SBS_KIB, 1);
        double busy = p99_of(hol_sys[i], "1KiB set/get during 256MiB get", SBS_KIB, 2);
        snprintf(name, sizeof(name), "%s 1 KiB p99 during a 256 MiB transfer / idle p99",
                 hol_sys[i]);
        /* Both directions are moved by the transfer threads (bulk.c,
         * bulk_recv.c), beside which the loop sleeps rather than polls
         * (core/poll_policy.c): it serves small requests at about their
         * idle pace meanwhile. */
        target(name, busy / idle, 2.0, false, NULL, false);
        busy = p99_of(hol_sys[i], "1KiB set/get during 256MiB set", SBS_KIB, 2);
        snprintf(name, sizeof(name), "%s 1 KiB p99 during a 256 MiB set / idle p99", hol_sys[i]);
        target(name, busy / idle, 2.0, false, NULL, false);
    }
    const sbs_row_t *m = sbs_row_find("ds-local", "resident memory", SBS_KIB, 1);
    target("bytes per resident 1 KiB key beyond key and value", m ? m->extra : NAN, 200.0, false,
           NULL, true);
}

const sbs_target_t *sbs_targets(int *n)
{
    *n = ntargets;
    return targets;
}

void sbs_print_targets(FILE *f)
{
    int met = 0, measured = 0;
    fprintf(f, "%-72s %10s %10s %8s  %s\n", "target", "measured", "target", "x_limit", "met");
    for (int i = 0; i < ntargets; i++) {
        const sbs_target_t *t = &targets[i];
        char m[32], l[32];
        sbs_fmt_num(m, sizeof(m), t->measured, "%.3f");
        sbs_fmt_num(l, sizeof(l), t->limit_ratio, "%.2f");
        fprintf(f, "%-72s %10s %2s%8.2f %8s  %s\n", t->name, m,
                t->higher_is_better ? ">=" : "<=", t->target, l,
                isnan(t->measured) ? "not measured"
                : t->met           ? "met"
                                   : "NOT MET");
        met += t->met;
        measured += !isnan(t->measured);
    }
    fprintf(f, "%d of %d targets met (%d measured in this run)\n", met, ntargets, measured);
    double idle = p99_of("limit", "unix_rtt idle", SBS_KIB, 1);
    double busy = p99_of("limit", "unix_rtt during 256MiB tcp stream", SBS_KIB, 2);
    if (!isnan(idle) && idle > 0)
        fprintf(f,
                "context: with no server at all, a 1 KiB Unix ping-pong's p99 goes from %.1f us to "
                "%.1f us (x%.1f) while a loopback TCP stream runs\n",
                idle, busy, busy / idle);
}
