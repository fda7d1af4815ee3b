/* dsbench: set/get latency (p50/p99) and throughput of a running worker for
 * 1 KiB, 1 MiB and 64 MiB values, over shared memory (local) and TCP
 * (remote), copy and zero-copy paths, next to the machine's limits measured in
 * the same run. Prints a table and writes a JSON result file; the targets are
 * checked as ratios and reported, never asserted (a benchmark, not a test).
 *
 *   dsbench --worker_address 127.0.0.1:31501 [--json FILE] [--quick] */
#include "bench/limits.h"
#include "bench/stats.h"
#include "common/clock.h"
#include "ds/kv_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char transport[8];
    char op[24];
    size_t size;
    dsb_lat_t lat;
    double gbps;
} row_t;

static row_t rows[64];
static int nrows;
static FILE *table;

static void add_row(const char *tr, const char *op, size_t size, uint64_t *ns, size_t n)
{
    row_t *r = &rows[nrows++];
    snprintf(r->transport, sizeof(r->transport), "%s", tr);
    snprintf(r->op, sizeof(r->op), "%s", op);
    r->size = size;
    dsb_lat_from(ns, n, &r->lat);
    r->gbps = r->lat.p50_us > 0 ? (double)size / (r->lat.p50_us * 1e3) : 0;
    fprintf(table, "%-7s %-16s %10zu %11.1f %11.1f %9.2f\n", tr, op, size, r->lat.p50_us,
            r->lat.p99_us, r->gbps);
}

static const row_t *find(const char *tr, const char *op, size_t size)
{
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].transport, tr) && !strcmp(rows[i].op, op) && rows[i].size == size)
            return &rows[i];
    return NULL;
}

static int iters_for(size_t size, bool quick)
{
    int n = size <= 4096 ? 20000 : size <= (2u << 20) ? 400 : 20;
    return quick ? (n / 10 > 3 ? n / 10 : 3) : n;
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        ds_status_t st_ = (expr);                                                                  \
        if (st_ != DS_K_OK) {                                                                      \
            fprintf(stderr, "dsbench: %s failed: %s: %s\n", #expr, ds_status_name(st_),            \
                    ds_last_error());                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void bench_transport(ds_client_t *c, const char *tr, size_t size, bool quick)
{
    int n = iters_for(size, quick);
    uint64_t *ns = calloc((size_t)n, sizeof(*ns));
    uint8_t *val = malloc(size), *dst = malloc(size);
    memset(val, 0x5a, size);
    memset(dst, 0, size); /* warm destination, as a reader reusing its buffer has */
    char key[64];
    snprintf(key, sizeof(key), "dsbench-%s-%zu", tr, size);
    size_t len;
    CHECK(ds_kv_set(c, key, val, size, NULL)); /* warm-up */

    for (int i = 0; i < n; i++) {
        uint64_t t0 = ds__now_ns();
        CHECK(ds_kv_set(c, key, val, size, NULL));
        ns[i] = ds__now_ns() - t0;
    }
    add_row(tr, "set", size, ns, (size_t)n);

    for (int i = 0; i < n; i++) {
        uint64_t t0 = ds__now_ns();
        CHECK(ds_kv_get_into(c, key, 0, dst, size, &len));
        ns[i] = ds__now_ns() - t0;
    }
    add_row(tr, "get", size, ns, (size_t)n);
    if (memcmp(val, dst, size) != 0) {
        fprintf(stderr, "dsbench: %s get of %zu bytes returned wrong bytes\n", tr, size);
        exit(1);
    }

    for (int i = 0; i < n; i++) {
        const char *k = key;
        ds_buffer_t *b = NULL;
        uint64_t t0 = ds__now_ns();
        CHECK(ds_kv_get_buffers(c, 1, &k, 0, &b));
        volatile uint8_t first = ((const uint8_t *)ds_buffer_data(b))[0];
        (void)first;
        ds_buffer_release(b);
        ns[i] = ds__now_ns() - t0;
    }
    add_row(tr, "get_zero_copy", size, ns, (size_t)n);

    for (int i = 0; i < n; i++) {
        ds_buffer_t *b = NULL;
        uint64_t t0 = ds__now_ns();
        CHECK(ds_kv_create(c, key, size, NULL, &b));
        memcpy(ds_buffer_mutable_data(b), val, size);
        CHECK(ds_kv_publish(c, b));
        ds_buffer_release(b);
        ns[i] = ds__now_ns() - t0;
    }
    add_row(tr, "set_zero_copy", size, ns, (size_t)n);

    for (int i = 0; i < n; i++) {
        uint64_t t0 = ds__now_ns();
        CHECK(ds_kv_set(c, key, val, size, NULL));
        CHECK(ds_kv_get_into(c, key, 0, dst, size, &len));
        ns[i] = ds__now_ns() - t0;
    }
    add_row(tr, "set+get", size, ns, (size_t)n);
    const char *k = key;
    ds_kv_del(c, 1, &k, NULL);
    free(ns);
    free(val);
    free(dst);
}

typedef struct {
    const char *name;
    double value, target;
    bool higher_is_better;
} target_t;

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1:31501", *json = "dsbench.json";
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--worker_address") && i + 1 < argc)
            addr = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else {
            fprintf(stderr, "usage: dsbench [--worker_address H:P] [--json FILE] [--quick]\n");
            return 2;
        }
    }
    table = stdout;
    char host[256];
    snprintf(host, sizeof(host), "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon == NULL) {
        fprintf(stderr, "dsbench: --worker_address '%s' is not host:port\n", addr);
        return 2;
    }
    *colon = '\0';
    int port = atoi(colon + 1);

    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    ds_client_t *local = NULL, *remote = NULL;
    o.transport = DS_TRANSPORT_LOCAL;
    CHECK(ds_client_connect(&o, &local));
    o.transport = DS_TRANSPORT_TCP;
    CHECK(ds_client_connect(&o, &remote));

    const size_t sizes[] = {1024, 1u << 20, 64u << 20};
    printf("dsbench against %s (%s)\n\n", addr, quick ? "quick" : "full");
    printf("%-7s %-16s %10s %11s %11s %9s\n", "path", "operation", "bytes", "p50_us", "p99_us",
           "GB/s");
    for (size_t i = 0; i < 3; i++)
        bench_transport(local, "local", sizes[i], quick);
    for (size_t i = 0; i < 3; i++)
        bench_transport(remote, "remote", sizes[i], quick);
    ds_client_close(local);
    ds_client_close(remote);

    int it = quick ? 5 : 20;
    double memcpy_gbps = dsb_memcpy_gbps(64u << 20, it);
    dsb_lat_t unix_rtt = {0}, tcp_rtt = {0};
    dsb_unix_rtt(1024, quick ? 2000 : 20000, &unix_rtt);
    dsb_tcp_rtt("127.0.0.1", 1024, quick ? 2000 : 20000, &tcp_rtt);
    double tcp_gbps = dsb_tcp_stream_gbps(64u << 20, it);
    printf("\nlimits: memcpy 64 MiB %.2f GB/s; unix ping-pong 1 KiB p50 %.1f us; tcp ping-pong "
           "1 KiB p50 %.1f us; tcp stream 64 MiB %.2f GB/s\n",
           memcpy_gbps, unix_rtt.p50_us, tcp_rtt.p50_us, tcp_gbps);

    const row_t *lset = find("local", "set", 64u << 20);
    const row_t *lzc = find("local", "get_zero_copy", 64u << 20);
    const row_t *lsg = find("local", "set+get", 1024);
    const row_t *rget = find("remote", "get", 64u << 20);
    double copy_us = (double)(64u << 20) / (memcpy_gbps * 1e3);
    target_t targets[] = {
        {"local set 64 MiB / memcpy bandwidth", lset->gbps / memcpy_gbps, 0.5, true},
        {"zero-copy get 64 MiB time / memcpy time", lzc->lat.p50_us / copy_us, 0.01, false},
        {"local set+get 1 KiB / unix round trip", lsg->lat.p50_us / unix_rtt.p50_us, 2.0, false},
        {"remote get 64 MiB / tcp stream bandwidth", rget->gbps / tcp_gbps, 0.7, true},
    };
    printf("\n%-44s %9s %9s  %s\n", "target", "measured", "target", "met");
    int met = 0;
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        target_t *t = &targets[i];
        bool ok = t->higher_is_better ? t->value >= t->target : t->value <= t->target;
        met += ok;
        printf("%-44s %9.4f %s%8.4f  %s\n", t->name, t->value,
               t->higher_is_better ? ">=" : "<=", t->target, ok ? "yes" : "NO");
    }

    FILE *f = fopen(json, "w");
    if (f == NULL) {
        perror(json);
        return 1;
    }
    fprintf(f,
            "{\n  \"worker_address\": \"%s\",\n  \"limits\": {\"memcpy_gbps\": %.4f, "
            "\"unix_rtt_p50_us\": %.3f, \"tcp_rtt_p50_us\": %.3f, \"tcp_stream_gbps\": %.4f},\n"
            "  \"rows\": [\n",
            addr, memcpy_gbps, unix_rtt.p50_us, tcp_rtt.p50_us, tcp_gbps);
    for (int i = 0; i < nrows; i++)
        fprintf(f,
                "    {\"path\": \"%s\", \"operation\": \"%s\", \"size\": %zu, \"p50_us\": %.3f, "
                "\"p99_us\": %.3f, \"gbps\": %.4f}%s\n",
                rows[i].transport, rows[i].op, rows[i].size, rows[i].lat.p50_us, rows[i].lat.p99_us,
                rows[i].gbps, i + 1 < nrows ? "," : "");
    fprintf(f, "  ],\n  \"targets\": [\n");
    size_t nt = sizeof(targets) / sizeof(targets[0]);
    for (size_t i = 0; i < nt; i++) {
        target_t *t = &targets[i];
        bool ok = t->higher_is_better ? t->value >= t->target : t->value <= t->target;
        fprintf(f, "    {\"name\": \"%s\", \"measured\": %.5f, \"target\": %.5f, \"met\": %s}%s\n",
                t->name, t->value, t->target, ok ? "true" : "false", i + 1 < nt ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("\n%d of %zu targets met; results in %s\n", met, nt, json);
    return 0;
}
