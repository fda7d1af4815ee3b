/* sbs: the side-by-side benchmark. Starts its own datasystem_worker and
 * redis-server on free loopback ports, runs the phases (a million resident
 * keys, single client at six value sizes with the machine's limits and
 * vLLM-Omni's shared-memory path, the connector, 1-64 concurrent clients, and
 * head-of-line blocking; on request, streams against Redis Streams), stops both servers by PID, and
 * reports a table, the targets as ratios from this run, a JSON file and the plot data.
 * scripts/bench.sh builds it, runs it and plots; with --update-docs it also
 * regenerates docs/performance.md from the results.
 *
 *   sbs [--quick] [--build-dir DIR] [--out-dir DIR] [--python PATH]
 *       [--shm-script PATH] [--redis-server PATH] [--arena-mb N]
 *       [--phases resident,single,connector,pyconn,scale,hol,streams] [--busy-poll-us N]
 *
 * The streams phase runs only when --phases names it (the default list leaves
 * it out); it writes streams_bench.{txt,json} of its own.
 *
 * --busy-poll-us N runs the worker with --busy_poll_us N and every
 * datasystem client with DS_BUSY_POLL_US=N: the longest either polls before
 * it sleeps (0: off, every wait sleeps, and the worker runs a plain epoll
 * loop without any of its latency policy, worker/core/poll_policy.h).
 * Without it both keep their defaults (adaptive polling up to 200 us,
 * common/spin.h).
 *
 * Exit status: 0 when every phase ran (targets missed or not: a benchmark
 * reports, it does not assert), 1 when a phase failed, 2 on bad usage. */
#include "bench/side_by_side/out.h"
#include "bench/side_by_side/sbs.h"

#include "common/clock.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void on_signal(int sig)
{
    sbs_proc_kill_all();
    _exit(128 + sig);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sbs [--quick] [--build-dir DIR] [--out-dir DIR] [--python PATH]\n"
               "           [--shm-script PATH] [--redis-server PATH] [--arena-mb N]\n"
               "           [--busy-poll-us N]\n"
               "           [--phases resident,single,connector,pyconn,scale,hol,streams]\n");
}

static bool want(const char *phases, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = phases; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        p = comma ? comma + 1 : p + len;
    }
    return false;
}

/* Says which phase failed (its rows may be partial); 1 if it did. */
static int phase_failed(const char *name, bool failed)
{
    if (failed) fprintf(stderr, "sbs: phase %s failed\n", name);
    return failed;
}

static uint64_t phase_done(const char *name, uint64_t since)
{
    uint64_t now = ds__now_ns();
    double load[3] = {0, 0, 0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(f);
    }
    printf("sbs: phase %s done in %.1f s (load average %.2f)\n", name, (double)(now - since) / 1e9,
           load[0]);
    return now;
}

static void cleanup_tmp(const sbs_opts_t *o)
{
    const char *files[] = {"worker.log", "redis.log", "redis.sock"};
    char p[400];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", o->tmp_dir, files[i]);
        unlink(p);
    }
    rmdir(o->tmp_dir);
}

int main(int argc, char **argv)
{
    sbs_opts_t o = {.build_dir = "build",
                    .out_dir = "bench/results",
                    .python = "/usr/bin/python3",
                    .shm_script = "bench/side_by_side/shm_bench.py",
                    .redis_bin = "redis-server",
                    .arena_mb = 1536,
                    .busy_poll_us = -1};
    const char *phases = "resident,single,connector,pyconn,scale,hol";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick")) {
            o.quick = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const char **dst = !strcmp(a, "--build-dir")      ? &o.build_dir
                           : !strcmp(a, "--out-dir")      ? &o.out_dir
                           : !strcmp(a, "--python")       ? &o.python
                           : !strcmp(a, "--shm-script")   ? &o.shm_script
                           : !strcmp(a, "--redis-server") ? &o.redis_bin
                           : !strcmp(a, "--phases")       ? &phases
                                                          : NULL;
        bool is_arena = !strcmp(a, "--arena-mb"), is_poll = !strcmp(a, "--busy-poll-us");
        if (dst == NULL && !is_arena && !is_poll) {
            fprintf(stderr, "sbs: unknown flag '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "sbs: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (is_arena)
            o.arena_mb = atoi(v);
        else if (is_poll)
            o.busy_poll_us = atoi(v);
        else
            *dst = v;
    }
    if (o.arena_mb < 1024) {
        fprintf(stderr, "sbs: --arena-mb must be at least 1024 (a million 1 KiB keys)\n");
        return 2;
    }
    if (o.busy_poll_us < -1 || o.busy_poll_us > 1000000) {
        fprintf(stderr, "sbs: --busy-poll-us must be in 0..1000000\n");
        return 2;
    }
    if (o.busy_poll_us >= 0) {
        /* Every datasystem client of the run, in this process and in the
         * children it forks, polls for its replies up to that limit. */
        char v[16];
        snprintf(v, sizeof(v), "%d", o.busy_poll_us);
        setenv("DS_BUSY_POLL_US", v, 1);
    } else {
        unsetenv("DS_BUSY_POLL_US"); /* the clients' own default */
    }
    if (access(o.shm_script, R_OK) != 0) {
        fprintf(stderr, "sbs: cannot read --shm-script %s\n", o.shm_script);
        return 2;
    }
    mkdir(o.out_dir, 0755);
    snprintf(o.tmp_dir, sizeof(o.tmp_dir), "/tmp/sbs-XXXXXX");
    if (mkdtemp(o.tmp_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    atexit(sbs_proc_kill_all);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    uint64_t t0 = ds__now_ns();
    sbs_proc_t worker, redis;
    printf("sbs: %s run; starting datasystem_worker (arena %d MiB, busy polling %d us) and "
           "redis-server\n",
           o.quick ? "quick" : "full", o.arena_mb, o.busy_poll_us);
    if (sbs_worker_start(&o, &worker) != 0) return 1;
    if (sbs_redis_start(&o, &redis) != 0) {
        sbs_proc_stop(&worker);
        return 1;
    }
    printf("sbs: worker pid %d on 127.0.0.1:%d, redis pid %d on 127.0.0.1:%d and %s\n",
           (int)worker.pid, worker.port, (int)redis.pid, redis.port, redis.unix_path);
    sbs_env_t env = {&worker, &redis};
    sbs_limits_t lim;
    memset(&lim, 0, sizeof(lim));
    lim.unix_rtt.p50_us = lim.tcp_rtt.p50_us = NAN;
    for (size_t i = 0; i < 8; i++)
        lim.memcpy_gbps[i] = lim.movsb_gbps[i] = lim.copy2_gbps[i] = lim.copy_gbps[i] =
            lim.tcp_stream_gbps[i] = NAN;

    /* Resident keys first, while both servers' heaps are fresh: memory
     * growth then belongs to the keys, not to reuse of earlier phases' slack. */
    int failed = 0;
    char conn_status[640] = "not run";
    uint64_t tp = ds__now_ns();
    if (want(phases, "resident")) {
        failed += phase_failed("resident", sbs_phase_resident(&o, &env) != 0);
        tp = phase_done("resident", tp);
    }
    if (want(phases, "single")) {
        failed += phase_failed("single", sbs_phase_single(&o, &env, &lim) != 0);
        tp = phase_done("single", tp);
    }
    if (want(phases, "connector")) {
        char why[512] = "";
        int r = sbs_phase_connector(&o, &env, why, sizeof(why));
        if (r < 0) failed += phase_failed("connector", true);
        snprintf(conn_status, sizeof(conn_status), "%s%s", r == 1 ? "skipped: " : "", why);
        printf("  connector: %s\n", conn_status);
        tp = phase_done("connector", tp);
    }
    if (want(phases, "pyconn")) {
        failed += phase_failed("pyconn", sbs_phase_pyconn(&o, &env) != 0);
        tp = phase_done("pyconn", tp);
    }
    if (want(phases, "scale")) {
        failed += phase_failed("scale", sbs_phase_scale(&o, &env) != 0);
        tp = phase_done("scale", tp);
    }
    if (want(phases, "hol")) {
        failed += phase_failed("hol", sbs_phase_hol(&o, &env) != 0);
        tp = phase_done("hol", tp);
    }
    if (want(phases, "streams")) {
        failed += phase_failed("streams", sbs_phase_streams(&o, &env) != 0);
        tp = phase_done("streams", tp);
    }

    sbs_proc_stop(&redis);
    sbs_proc_stop(&worker);
    double wall = (double)(ds__now_ns() - t0) / 1e9;

    sbs_compute_ratios(&lim);
    sbs_compute_targets(&lim);
    if (sbs_row_count() > 0) {
        printf("\n");
        sbs_print_table(stdout);
        printf("\nlimits: unix ping-pong 1 KiB p50 %.1f us, tcp ping-pong 1 KiB p50 %.1f us\n",
               lim.unix_rtt.p50_us, lim.tcp_rtt.p50_us);
        printf("connector rows: %s\n\n", conn_status);
        sbs_print_targets(stdout);
    }

    char json[512], dat[512];
    snprintf(json, sizeof(json), "%s/side_by_side.json", o.out_dir);
    snprintf(dat, sizeof(dat), "%s/side_by_side_throughput.dat", o.out_dir);
    /* A run of phases that add no rows (streams alone) leaves the results
     * of the last full run in place. */
    if (sbs_row_count() == 0)
        printf("\nsbs: no side-by-side rows in this run; %s left as it was (%.0f s)\n", json, wall);
    else if (sbs_write_json(json, &o, &lim, conn_status, wall) != 0 ||
             sbs_write_plot_data(dat) != 0)
        failed++;
    else
        printf("\nsbs: results in %s and %s (%.0f s)\n", json, dat, wall);
    if (failed) {
        printf("sbs: %d phase(s) failed; server logs kept in %s\n", failed, o.tmp_dir);
        return 1;
    }
    cleanup_tmp(&o);
    return 0;
}
