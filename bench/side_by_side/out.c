/* What the harness makes of the rows once every phase has run: the ratios
 * to the machine's limits and to Redis, the targets (each a ratio from this
 * run, met or not), and the outputs: a terminal table, the JSON file (one
 * record per row, plus limits and targets) and the plot data.
 *
 * ratio_to_limit is the fraction of the machine's limit a row reaches
 * (higher is better, 1 = at the limit). From 64 KiB up it is GB/s over the
 * single-thread memcpy of that size (same-host paths) or over the loopback
 * TCP stream (TCP paths); a set+get style pair moves the value twice, so its
 * limit is half of that. At 1 KiB it is the 1 KiB ping-pong round trip
 * (Unix socket or TCP; two for a pair) over the row's p50. ratio_to_redis is
 * how many times faster than Redis on the matching path (Unix socket for
 * same-host rows, TCP for remote rows): Redis p50 over the row's p50, or the
 * row's rate over Redis's rate for concurrent rows, the median of per-round
 * rate ratios for resident rows (set by that phase), or Redis's bytes per
 * key over ours for memory. */
#include "bench/side_by_side/out.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool is_tcp(const char *system)
{
    return !strcmp(system, "ds-remote") || !strcmp(system, "redis-tcp");
}

static bool is_pair(const char *op)
{
    return strchr(op, '+') != NULL;
}

/* The Redis operation a row compares with. */
static const char *redis_op(const char *op)
{
    if (!strcmp(op, "get_zero_copy")) return "get";
    if (!strcmp(op, "set+get_zero_copy") || !strcmp(op, "put+get")) return "set+get";
    if (!strcmp(op, "put")) return "set";
    return op;
}

static bool is_rate_row(const sbs_row_t *r)
{
    return !strncmp(r->op, "concurrent", 10) || !strncmp(r->op, "resident", 8);
}

void sbs_compute_ratios(const sbs_limits_t *lim)
{
    for (size_t i = 0; i < sbs_row_count(); i++) {
        sbs_row_t *r = sbs_row_at(i);
        if (!strcmp(r->system, "limit") || !strncmp(r->system, "redis", 5)) continue;
        int si = sbs_size_index(r->size);
        bool tcp = is_tcp(r->system), pair = is_pair(r->op);
        /* Rate rows too: a concurrent pair's aggregate GB/s over the limit,
         * a resident operation's p50 over the round trip. */
        bool no_limit = !strcmp(r->op, "resident memory") || !strncmp(r->op, "resident load", 13);
        if (!no_limit && strncmp(r->op, "1KiB", 4) != 0 && si >= 0 && r->p50_us > 0) {
            if (r->size >= 64 * SBS_KIB) {
                /* Same-host paths: the fastest of memcpy, rep movsb and two threads. */
                double l = tcp ? lim->tcp_stream_gbps[si] : lim->copy_gbps[si];
                if (!tcp && !(l > 0)) l = lim->memcpy_gbps[si];
                if (pair) l /= 2;
                if (l > 0) r->ratio_to_limit = r->gbps / l;
            } else {
                double l = tcp ? lim->tcp_rtt.p50_us : lim->unix_rtt.p50_us;
                if (pair) l *= 2;
                if (l > 0) r->ratio_to_limit = l / r->p50_us;
            }
        }
        /* Set by its phase (the resident rows: a median of per-round ratios). */
        if (!isnan(r->ratio_to_redis)) continue;
        const char *peer_sys = tcp ? "redis-tcp" : "redis-unix";
        const sbs_row_t *p = sbs_row_find(peer_sys, redis_op(r->op), r->size, r->clients);
        if (p == NULL) continue;
        if (!strcmp(r->op, "resident memory")) {
            if (r->extra > 0 && p->extra > 0) r->ratio_to_redis = p->extra / r->extra;
        } else if (is_rate_row(r)) {
            if (p->ops_per_s > 0) r->ratio_to_redis = r->ops_per_s / p->ops_per_s;
        } else if (r->p50_us > 0) {
            r->ratio_to_redis = p->p50_us / r->p50_us;
        }
    }
}

const char *sbs_human(size_t size, char *buf, size_t cap)
{
    if (size >= SBS_MIB && size % SBS_MIB == 0)
        snprintf(buf, cap, "%zu MiB", size / SBS_MIB);
    else if (size >= SBS_KIB && size % SBS_KIB == 0)
        snprintf(buf, cap, "%zu KiB", size / SBS_KIB);
    else
        snprintf(buf, cap, "%zu B", size);
    return buf;
}

void sbs_fmt_num(char *buf, size_t cap, double v, const char *f)
{
    if (isnan(v))
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, f, v);
}

void sbs_print_table(FILE *f)
{
    fprintf(f, "%-20s %-32s %8s %4s %11s %11s %8s %8s %8s  %s\n", "system", "operation", "size",
            "cli", "p50_us", "p99_us", "GB/s", "x_limit", "x_redis", "rate / note");
    for (size_t i = 0; i < sbs_row_count(); i++) {
        const sbs_row_t *r = sbs_row_at(i);
        char h[32], p50[32], p99[32], g[32], rl[32], rr[32], extra[256];
        sbs_fmt_num(p50, sizeof(p50), r->p50_us, "%.1f");
        sbs_fmt_num(p99, sizeof(p99), r->p99_us, "%.1f");
        sbs_fmt_num(g, sizeof(g), r->gbps, "%.3f");
        sbs_fmt_num(rl, sizeof(rl), r->ratio_to_limit, "%.2f");
        sbs_fmt_num(rr, sizeof(rr), r->ratio_to_redis, "%.2f");
        extra[0] = '\0';
        if (r->ops_per_s > 0)
            snprintf(extra, sizeof(extra), "%.0f ops/s%s%s", r->ops_per_s, r->note[0] ? "; " : "",
                     r->note);
        else if (!isnan(r->extra))
            snprintf(extra, sizeof(extra), "%.1f B/key overhead; %s", r->extra, r->note);
        else
            snprintf(extra, sizeof(extra), "%s", r->note);
        fprintf(f, "%-20s %-32s %8s %4d %11s %11s %8s %8s %8s  %s\n", r->system, r->op,
                sbs_human(r->size, h, sizeof(h)), r->clients, p50, p99, g, rl, rr, extra);
    }
}

static void json_num(FILE *f, double v, const char *fmt)
{
    if (isnan(v) || isinf(v))
        fputs("null", f);
    else
        fprintf(f, fmt, v);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

int sbs_write_json(const char *path, const sbs_opts_t *o, const sbs_limits_t *lim,
                   const char *connector_status, double wall_s)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    fprintf(f, "{\n  \"generated_by\": \"bench/side_by_side/sbs\",\n  \"quick\": %s,\n",
            o->quick ? "true" : "false");
    fprintf(f,
            "  \"wall_s\": %.1f,\n  \"arena_mb\": %d,\n  \"busy_poll_us\": %d,\n  \"connector\": ",
            wall_s, o->arena_mb, o->busy_poll_us);
    json_str(f, connector_status);
    fprintf(f, ",\n  \"limits\": {\"unix_rtt_1k_p50_us\": ");
    json_num(f, lim->unix_rtt.p50_us, "%.3f");
    fprintf(f, ", \"tcp_rtt_1k_p50_us\": ");
    json_num(f, lim->tcp_rtt.p50_us, "%.3f");
    fprintf(f, ", \"by_size\": [");
    for (size_t i = 0; i < sbs_nsizes; i++) {
        fprintf(f, "%s{\"size\": %zu, \"memcpy_gbps\": ", i ? ", " : "", sbs_sizes[i]);
        json_num(f, lim->memcpy_gbps[i], "%.4f");
        fprintf(f, ", \"movsb_gbps\": ");
        json_num(f, lim->movsb_gbps[i], "%.4f");
        fprintf(f, ", \"copy2_gbps\": ");
        json_num(f, lim->copy2_gbps[i], "%.4f");
        fprintf(f, ", \"copy_gbps\": ");
        json_num(f, lim->copy_gbps[i], "%.4f");
        fprintf(f, ", \"tcp_stream_gbps\": ");
        json_num(f, lim->tcp_stream_gbps[i], "%.4f");
        fputc('}', f);
    }
    fprintf(f, "]},\n  \"rows\": [\n");
    for (size_t i = 0; i < sbs_row_count(); i++) {
        const sbs_row_t *r = sbs_row_at(i);
        fprintf(f, "    {\"system\": ");
        json_str(f, r->system);
        fprintf(f, ", \"operation\": ");
        json_str(f, r->op);
        fprintf(f, ", \"size\": %zu, \"clients\": %d, \"p50_us\": ", r->size, r->clients);
        json_num(f, r->p50_us, "%.3f");
        fprintf(f, ", \"p99_us\": ");
        json_num(f, r->p99_us, "%.3f");
        fprintf(f, ", \"gbps\": ");
        json_num(f, r->gbps, "%.4f");
        fprintf(f, ", \"ratio_to_limit\": ");
        json_num(f, r->ratio_to_limit, "%.4f");
        fprintf(f, ", \"ratio_to_redis\": ");
        json_num(f, r->ratio_to_redis, "%.4f");
        fprintf(f, ", \"ops_per_s\": ");
        json_num(f, r->ops_per_s > 0 ? r->ops_per_s : NAN, "%.1f");
        fprintf(f, ", \"bytes_per_key\": ");
        json_num(f, r->extra, "%.1f");
        fprintf(f, ", \"note\": ");
        json_str(f, r->note);
        fprintf(f, "}%s\n", i + 1 < sbs_row_count() ? "," : "");
    }
    fprintf(f, "  ],\n  \"targets\": [\n");
    int ntargets;
    const sbs_target_t *targets = sbs_targets(&ntargets);
    for (int i = 0; i < ntargets; i++) {
        const sbs_target_t *t = &targets[i];
        fprintf(f, "    {\"name\": ");
        json_str(f, t->name);
        fprintf(f, ", \"measured\": ");
        json_num(f, t->measured, "%.4f");
        fprintf(f, ", \"comparison\": \"%s\", \"target\": %.4f, \"met\": %s",
                t->higher_is_better ? ">=" : "<=", t->target, t->met ? "true" : "false");
        fprintf(f, ", \"ratio_to_limit\": ");
        json_num(f, t->limit_ratio, "%.4f");
        fprintf(f, ", \"limit\": ");
        json_str(f, t->limit);
        fprintf(f, ", \"stable\": %s}%s\n", t->stable ? "true" : "false",
                i + 1 < ntargets ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* Columns of the plot data: a handoff (one value from a producer to a
 * consumer) per system, then the limits. */
static const struct {
    const char *title, *system, *op;
} columns[] = {
    {"this project, local (set + get copy)", "ds-local", "set+get"},
    {"this project, local (set + zero-copy get)", "ds-local", "set+get_zero_copy"},
    {"this project, remote TCP (set + get)", "ds-remote", "set+get"},
    {"YuanrongConnector raw (put + get)", "connector-raw", "put+get"},
    {"Redis 7, Unix socket (SET + GET)", "redis-unix", "set+get"},
    {"Redis 7, TCP (SET + GET)", "redis-tcp", "set+get"},
    {"vLLM-Omni shared memory (put + get)", "vllm-omni-shm", "put+get"},
    {"limit: memcpy, one copy", "limit", "memcpy"},
    {"limit: loopback TCP stream", "limit", "tcp_stream"},
};

int sbs_write_plot_data(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    size_t nc = sizeof(columns) / sizeof(columns[0]);
    fprintf(f, "# GB/s of one producer-to-consumer handoff by value size; ? = not measured\n");
    fprintf(f, "size_bytes");
    for (size_t c = 0; c < nc; c++)
        fprintf(f, "\t\"%s\"", columns[c].title);
    fputc('\n', f);
    for (size_t i = 0; i < sbs_nsizes; i++) {
        fprintf(f, "%zu", sbs_sizes[i]);
        for (size_t c = 0; c < nc; c++) {
            const sbs_row_t *r = sbs_row_find(columns[c].system, columns[c].op, sbs_sizes[i], 1);
            if (r && r->gbps > 0)
                fprintf(f, "\t%.4f", r->gbps);
            else
                fprintf(f, "\t?");
        }
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -1;
}
