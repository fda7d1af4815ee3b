/* ucx_client_bench: a remote client's get over UCX (enable_ucx) against the
 * same client's get over TCP, 1 MiB and 64 MiB values, from a worker started
 * with --enable_rdma true (bench/ucx_client_bench.sh starts one with UCX over
 * TCP on loopback). Rounds interleave the two paths, alternating which goes
 * first, so that a noisy machine loads both alike; each round reports the
 * median get of each path, and the summary the round whose UCX/TCP ratio is
 * the median. Gets go into a buffer touched beforehand (ds_kv_get_into), so
 * page faults of a fresh allocation are in neither figure.
 *
 *   ucx_client_bench --worker_address H:P [--rounds N] [--json FILE] */
#include "bench/stats.h"
#include "common/clock.h"
#include "ds/kv_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 64

static ds_client_t *connect_to(const char *host, int port, int ucx)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    o.transport = DS_TRANSPORT_TCP;
    o.enable_ucx = ucx;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) {
        fprintf(stderr, "ucx_client_bench: connect (%s): %s\n", ucx > 0 ? "UCX" : "TCP",
                ds_last_error());
        exit(1);
    }
    return c;
}

/* Median of n gets of key into buf, in microseconds. */
static double median_get_us(ds_client_t *c, const char *key, void *buf, size_t len, int n)
{
    uint64_t ns[64];
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        uint64_t t0 = ds__now_ns();
        if (ds_kv_get_into(c, key, 0, buf, len, &got) != DS_K_OK || got != len) {
            fprintf(stderr, "ucx_client_bench: get %s: %s\n", key, ds_last_error());
            exit(1);
        }
        ns[i] = ds__now_ns() - t0;
    }
    dsb_lat_t lat;
    dsb_lat_from(ns, (size_t)n, &lat);
    return lat.p50_us;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1:31501", *json = NULL;
    int rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--worker_address") && i + 1 < argc)
            addr = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: ucx_client_bench [--worker_address H:P] [--rounds N] "
                            "[--json FILE]\n");
            return 2;
        }
    }
    char host[256];
    int port = 0;
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon - addr >= (long)sizeof(host) || (port = atoi(colon + 1)) <= 0 ||
        rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "ucx_client_bench: bad --worker_address '%s' or --rounds (1..%d)\n", addr,
                MAX_ROUNDS);
        return 2;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    ds_client_t *tcp = connect_to(host, port, -1), *ucx = connect_to(host, port, 1);
    static const size_t sizes[] = {1u << 20, 64u << 20};
    static const int gets[] = {31, 9};
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (jf) fprintf(jf, "{\"worker\": \"%s\", \"sizes\": [", addr);
    for (size_t s = 0; s < 2; s++) {
        size_t len = sizes[s];
        char key[32];
        snprintf(key, sizeof(key), "ucxbench-%zu", len);
        char *buf = malloc(len);
        if (buf == NULL) return 1;
        memset(buf, 0x5a, len);
        if (ds_kv_set(tcp, key, buf, len, NULL) != DS_K_OK) {
            fprintf(stderr, "ucx_client_bench: set: %s\n", ds_last_error());
            return 1;
        }
        /* Warm both paths (connections, UCX endpoints, the worker's pages). */
        median_get_us(tcp, key, buf, len, 2);
        median_get_us(ucx, key, buf, len, 2);
        double t_us[MAX_ROUNDS], u_us[MAX_ROUNDS], ratio[MAX_ROUNDS], sorted[MAX_ROUNDS];
        printf("%s value, %d gets per path per round:\n", s ? "64 MiB" : "1 MiB", gets[s]);
        for (int r = 0; r < rounds; r++) {
            if (r % 2 == 0) {
                t_us[r] = median_get_us(tcp, key, buf, len, gets[s]);
                u_us[r] = median_get_us(ucx, key, buf, len, gets[s]);
            } else {
                u_us[r] = median_get_us(ucx, key, buf, len, gets[s]);
                t_us[r] = median_get_us(tcp, key, buf, len, gets[s]);
            }
            ratio[r] = t_us[r] / u_us[r]; /* > 1: UCX faster */
            sorted[r] = ratio[r];
            printf("  round %d: TCP %8.0f us (%5.2f GB/s)  UCX %8.0f us (%5.2f GB/s)  UCX/TCP "
                   "throughput %.2fx\n",
                   r, t_us[r], (double)len / t_us[r] / 1e3, u_us[r], (double)len / u_us[r] / 1e3,
                   ratio[r]);
        }
        qsort(sorted, (size_t)rounds, sizeof(double), cmp_double);
        int med = 0;
        for (int r = 0; r < rounds; r++)
            if (ratio[r] == sorted[rounds / 2]) med = r;
        printf(
            "  median round %d: TCP %.2f GB/s, UCX %.2f GB/s, UCX/TCP %.2fx (range %.2f-%.2fx)\n",
            med, (double)len / t_us[med] / 1e3, (double)len / u_us[med] / 1e3, ratio[med],
            sorted[0], sorted[rounds - 1]);
        if (jf) {
            fprintf(jf, "%s{\"bytes\": %zu, \"rounds\": [", s ? ", " : "", len);
            for (int r = 0; r < rounds; r++)
                fprintf(jf, "%s{\"tcp_us\": %.1f, \"ucx_us\": %.1f}", r ? ", " : "", t_us[r],
                        u_us[r]);
            fprintf(jf, "], \"median_round\": %d}", med);
        }
        free(buf);
    }
    if (jf) {
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    ds_client_close(tcp);
    ds_client_close(ucx);
    return 0;
}
