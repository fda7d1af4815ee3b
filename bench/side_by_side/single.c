/* The single-client phase: for each value size, every system and operation
 * one client at a time, next to the machine's limits measured in the same
 * size block.
 *
 * Fairness on a shared, noisy VM whose memory goes cold within seconds:
 *  - A size block runs in rounds (3 in a full run up to 16 MiB; one
 *    iteration of a larger size lasts long enough to spread over noise by
 *    itself). In each round every system takes its turn (the starting system
 *    rotates) and the limits are measured again; samples from all rounds are
 *    pooled and the limits are the median of the rounds. Noise that lasts a
 *    few seconds then spreads over all systems instead of hitting one.
 *  - Right before its timed loops a system gets its source and destination
 *    buffers re-touched and the same number of warm-up iterations as every
 *    other system; the harness's buffers are the same memory for all.
 *  - vLLM-Omni's path runs as its own Python process per round (what a stage
 *    process does), with the same iteration and warm-up counts. */
#include "bench/side_by_side/sbs.h"

#include "bench/limits.h"
#include "common/clock.h"
#include "common/copy.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const size_t sbs_sizes[] = {SBS_KIB,      64 * SBS_KIB, SBS_MIB,
                            16 * SBS_MIB, 64 * SBS_MIB, 256 * SBS_MIB};
const size_t sbs_nsizes = sizeof(sbs_sizes) / sizeof(sbs_sizes[0]);

int sbs_iters(const sbs_opts_t *o, size_t size)
{
    if (o->quick)
        return size <= SBS_KIB        ? 500
               : size <= 64 * SBS_KIB ? 150
               : size <= SBS_MIB      ? 60
               : size <= 16 * SBS_MIB ? 6
                                      : 2;
    return size <= SBS_KIB        ? 3000
           : size <= 64 * SBS_KIB ? 900
           : size <= SBS_MIB      ? 300
           : size <= 16 * SBS_MIB ? 30
           : size <= 64 * SBS_MIB ? 6
                                  : 4;
}

int sbs_warmup(const sbs_opts_t *o, size_t size)
{
    (void)o;
    /* From 16 MiB up, at least two: overwriting a key allocates the new
     * version before the old one is freed, so a value cycles between two
     * arena ranges, and both must have been written once; and at least
     * DS_COPY_TRIALS_IN plus DS_COPY_WIDE_TRIALS: a process's first copies
     * of a size class time memcpy against `rep movsb` (and a set's,
     * non-temporal stores), then copies alone against wide ones
     * (common/copy.h), some of them the slower way (2x at 256 MiB on an
     * Intel VM), once per process. Those belong in the warm-up, not in a
     * p50 of four samples. Up to 1 MiB a set and its get share one class:
     * 24 pairs are 48 of its copies, past its 40 trials. */
    return size <= SBS_KIB   ? 100
           : size <= SBS_MIB ? 24
                             : (int)(DS_COPY_TRIALS_IN + DS_COPY_WIDE_TRIALS(size));
}

int sbs_rounds(const sbs_opts_t *o, size_t size)
{
    return o->quick || size > 16 * SBS_MIB ? 1 : 3;
}

size_t sbs_nsizes_run(const sbs_opts_t *o)
{
    return o->quick ? sbs_nsizes - 1 : sbs_nsizes;
}

void sbs_warm(void *buf, size_t len, int byte)
{
    memset(buf, byte, len);
}

enum { OP_SET, OP_GET, OP_GETZC, OP_SETGET, OP_SETGETZC, OP_SETZC, NOPS };
static const char *op_names[NOPS] = {
    "set", "get", "get_zero_copy", "set+get", "set+get_zero_copy", "set_zero_copy"};
#define PY 4 /* the system index after the four client kinds */
#define NSYS 5

typedef struct {
    uint64_t *ns;
    size_t n, cap;
} samples_t;

/* Page faults during the timed set+get loop, of the server and of this
 * process: on this VM they are what separates a warm path from a cold one;
 * and the CPU time of the server's main thread and of this thread, which
 * shows what polling (ours) costs against sleeping (Redis's). */
typedef struct {
    double server, client;
    double server_cpu_us, client_cpu_us;
    int pairs;
} faults_t;

static int push(samples_t *s, uint64_t v)
{
    if (s->n >= s->cap) return -1;
    s->ns[s->n++] = v;
    return 0;
}

/* One system's turn in a round: warm the buffers, warm up, then n timed
 * set-then-get handoffs (the set, the get and the pair are each a sample),
 * and for the local client n more with the zero-copy get and n zero-copy
 * sets (create, copy in, publish). */
static int run_kind(sbs_conn_t *c, sbs_kind_t kind, size_t size, int n, int warmup, uint8_t *src,
                    uint8_t *dst, samples_t *s, int round, pid_t server, faults_t *f)
{
    char key[64];
    snprintf(key, sizeof(key), "sbs-%s-%zu", sbs_kind_name(kind), size);
    int byte = 0x41 + round;
    size_t len = 0;
    bool zc = kind == SBS_DS_LOCAL;
    sbs_warm(src, size, byte);
    sbs_warm(dst, size, 0);
    for (int i = 0; i < warmup; i++) {
        if (sbs_set(c, key, src, size) != 0 || sbs_get(c, key, dst, size, &len) != 0) return -1;
        if (zc && sbs_get_zc(c, key, &len) != 0) return -1;
    }
    double srv0 = sbs_proc_faults(server), cli0 = sbs_proc_faults(0);
    double scpu0 = sbs_proc_cpu_us(server), ccpu0 = sbs_proc_cpu_us(0);
    for (int i = 0; i < n; i++) {
        uint64_t t0 = ds__now_ns();
        if (sbs_set(c, key, src, size) != 0) return -1;
        uint64_t t1 = ds__now_ns();
        if (sbs_get(c, key, dst, size, &len) != 0) return -1;
        uint64_t t2 = ds__now_ns();
        push(&s[OP_SET], t1 - t0);
        push(&s[OP_GET], t2 - t1);
        push(&s[OP_SETGET], t2 - t0);
    }
    f->server += sbs_proc_faults(server) - srv0;
    f->client += sbs_proc_faults(0) - cli0;
    f->server_cpu_us += sbs_proc_cpu_us(server) - scpu0;
    f->client_cpu_us += sbs_proc_cpu_us(0) - ccpu0;
    f->pairs += n;
    if (len != size || memcmp(src, dst, size) != 0) {
        fprintf(stderr, "sbs: %s get of %zu bytes returned wrong bytes\n", sbs_kind_name(kind),
                size);
        return -1;
    }
    for (int i = 0; zc && i < n; i++) {
        uint64_t t0 = ds__now_ns();
        if (sbs_set(c, key, src, size) != 0) return -1;
        uint64_t t1 = ds__now_ns();
        if (sbs_get_zc(c, key, &len) != 0) return -1;
        uint64_t t2 = ds__now_ns();
        push(&s[OP_GETZC], t2 - t1);
        push(&s[OP_SETGETZC], t2 - t0);
    }
    /* The zero-copy write (create, copy in, publish) of the local client. */
    for (int i = 0; zc && i < n; i++) {
        uint64_t t0 = ds__now_ns();
        if (sbs_set_zc(c, key, src, size) != 0) return -1;
        push(&s[OP_SETZC], ds__now_ns() - t0);
    }
    if (zc &&
        (sbs_get(c, key, dst, size, &len) != 0 || len != size || memcmp(src, dst, size) != 0)) {
        fprintf(stderr, "sbs: %s zero-copy set of %zu bytes stored wrong bytes\n",
                sbs_kind_name(kind), size);
        return -1;
    }
    return sbs_del(c, key);
}

static int json_samples(const cJSON *root, const char *name, samples_t *s)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!cJSON_IsArray(a)) return -1;
    const cJSON *v;
    cJSON_ArrayForEach(v, a)
    {
        if (!cJSON_IsNumber(v) || push(s, (uint64_t)v->valuedouble) != 0) return -1;
    }
    return 0;
}

/* vLLM-Omni's same-node path in its own Python process: put = create +
 * copy + close, get = attach + copy out + close + unlink (what its
 * SharedMemoryConnector does through shm_write_bytes / shm_read_bytes). */
static int run_python(const sbs_opts_t *o, size_t size, int n, int warmup, samples_t *s)
{
    char sz[32], it[16], wu[16];
    snprintf(sz, sizeof(sz), "%zu", size);
    snprintf(it, sizeof(it), "%d", n);
    snprintf(wu, sizeof(wu), "%d", warmup);
    char *argv[] = {(char *)o->python,
                    (char *)o->shm_script,
                    "--size",
                    sz,
                    "--iters",
                    it,
                    "--warmup",
                    wu,
                    NULL};
    char *out = NULL;
    int rc = sbs_run_capture(argv, 300, &out);
    cJSON *root = rc == 0 && out ? cJSON_Parse(out) : NULL;
    int r = root ? 0 : -1;
    if (root && (json_samples(root, "put_ns", &s[OP_SET]) != 0 ||
                 json_samples(root, "get_ns", &s[OP_GET]) != 0 ||
                 json_samples(root, "pair_ns", &s[OP_SETGET]) != 0))
        r = -1;
    if (r != 0)
        fprintf(stderr, "sbs: %s failed (exit %d) for %zu bytes\n", o->shm_script, rc, size);
    cJSON_Delete(root);
    free(out);
    return r;
}

static const char *py_ops[NOPS] = {"put", "get", NULL, "put+get", NULL, NULL};

static int size_block(const sbs_opts_t *o, const sbs_env_t *env, sbs_conn_t **conns, size_t si,
                      uint8_t *src, uint8_t *dst, sbs_limits_t *lim)
{
    faults_t faults[SBS_NKINDS];
    memset(faults, 0, sizeof(faults));
    size_t size = sbs_sizes[si];
    int rounds = sbs_rounds(o, size);
    int total = sbs_iters(o, size), warmup = sbs_warmup(o, size);
    int per = (total + rounds - 1) / rounds;
    samples_t s[NSYS][NOPS];
    memset(s, 0, sizeof(s));
    int rc = 0;
    for (int k = 0; k < NSYS && rc == 0; k++)
        for (int op = 0; op < NOPS; op++) {
            s[k][op].cap = (size_t)per * (size_t)rounds;
            s[k][op].ns = calloc(s[k][op].cap, sizeof(uint64_t));
            if (s[k][op].ns == NULL) rc = -1;
        }
    double mc[3] = {0}, mv[3] = {0}, m2[3] = {0}, ts[3] = {0}, urtt[3] = {0}, trtt[3] = {0};
    int lim_iters = per < 3 ? 3 : per;
    for (int r = 0; r < rounds && rc == 0; r++) {
        mc[r] = dsb_memcpy_gbps(size, lim_iters);
        mv[r] = dsb_movsb_gbps(size, lim_iters);
        m2[r] = dsb_copy2_gbps(size, lim_iters);
        ts[r] = dsb_tcp_stream_gbps(size, lim_iters);
        if (size == SBS_KIB) {
            dsb_lat_t u = {0}, t = {0};
            dsb_unix_rtt(1024, per, &u);
            dsb_tcp_rtt("127.0.0.1", 1024, per, &t);
            urtt[r] = u.p50_us;
            trtt[r] = t.p50_us;
        }
        for (int j = 0; j < NSYS && rc == 0; j++) {
            int k = (j + r) % NSYS;
            if (k == PY)
                rc = run_python(o, size, per, warmup, s[PY]);
            else
                rc = run_kind(conns[k], (sbs_kind_t)k, size, per, warmup, src, dst, s[k], r,
                              sbs_kind_is_ds((sbs_kind_t)k) ? env->worker->pid : env->redis->pid,
                              &faults[k]);
        }
    }
    if (rc != 0) goto out;
    lim->memcpy_gbps[si] = sbs_median(mc, rounds);
    lim->movsb_gbps[si] = sbs_median(mv, rounds);
    lim->copy2_gbps[si] = sbs_median(m2, rounds);
    lim->copy_gbps[si] = lim->memcpy_gbps[si];
    if (lim->movsb_gbps[si] > lim->copy_gbps[si]) lim->copy_gbps[si] = lim->movsb_gbps[si];
    if (lim->copy2_gbps[si] > lim->copy_gbps[si]) lim->copy_gbps[si] = lim->copy2_gbps[si];
    lim->tcp_stream_gbps[si] = sbs_median(ts, rounds);
    sbs_row_add_raw("limit", "memcpy", size, 1, (double)size / (lim->memcpy_gbps[si] * 1e3), NAN,
                    lim->memcpy_gbps[si]);
    if (lim->movsb_gbps[si] > 0)
        sbs_row_add_raw("limit", "rep movsb", size, 1, (double)size / (lim->movsb_gbps[si] * 1e3),
                        NAN, lim->movsb_gbps[si]);
    if (lim->copy2_gbps[si] > 0)
        sbs_row_add_raw("limit", "memcpy, 2 threads", size, 1,
                        (double)size / (lim->copy2_gbps[si] * 1e3), NAN, lim->copy2_gbps[si]);
    sbs_row_add_raw("limit", "tcp_stream", size, 1, (double)size / (lim->tcp_stream_gbps[si] * 1e3),
                    NAN, lim->tcp_stream_gbps[si]);
    if (size == SBS_KIB) {
        lim->unix_rtt.p50_us = sbs_median(urtt, rounds);
        lim->tcp_rtt.p50_us = sbs_median(trtt, rounds);
        sbs_row_add_raw("limit", "unix_rtt", size, 1, lim->unix_rtt.p50_us, NAN, NAN);
        sbs_row_add_raw("limit", "tcp_rtt", size, 1, lim->tcp_rtt.p50_us, NAN, NAN);
    }
    for (int k = 0; k < NSYS; k++)
        for (int op = 0; op < NOPS; op++) {
            if (s[k][op].n == 0) continue;
            const char *sys = k == PY ? "vllm-omni-shm" : sbs_kind_name((sbs_kind_t)k);
            const char *name = k == PY ? py_ops[op] : op_names[op];
            sbs_row_t *row = name ? sbs_row_add(sys, name, size, 1, s[k][op].ns, s[k][op].n) : NULL;
            if (row && k != PY && op == OP_SETGET && faults[k].pairs > 0)
                snprintf(row->note, sizeof(row->note),
                         "per set+get: page faults server %.1f, client %.1f; CPU us server "
                         "%.1f, client %.1f",
                         faults[k].server / faults[k].pairs, faults[k].client / faults[k].pairs,
                         faults[k].server_cpu_us / faults[k].pairs,
                         faults[k].client_cpu_us / faults[k].pairs);
        }
out:
    for (int k = 0; k < NSYS; k++)
        for (int op = 0; op < NOPS; op++)
            free(s[k][op].ns);
    return rc;
}

int sbs_phase_single(const sbs_opts_t *o, const sbs_env_t *env, sbs_limits_t *lim)
{
    size_t nsizes = sbs_nsizes_run(o), max = sbs_sizes[nsizes - 1];
    uint8_t *src = malloc(max), *dst = malloc(max);
    sbs_conn_t *conns[SBS_NKINDS] = {0};
    int rc = src && dst ? 0 : -1;
    for (int k = 0; k < SBS_NKINDS && rc == 0; k++)
        if ((conns[k] = sbs_connect(env, (sbs_kind_t)k)) == NULL) rc = -1;
    for (size_t si = 0; si < nsizes && rc == 0; si++) {
        printf("  single client, %zu bytes ...\n", sbs_sizes[si]);
        fflush(stdout);
        rc = size_block(o, env, conns, si, src, dst, lim);
    }
    for (int k = 0; k < SBS_NKINDS; k++)
        sbs_close(conns[k]);
    free(src);
    free(dst);
    return rc;
}
