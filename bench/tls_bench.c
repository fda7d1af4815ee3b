/* tls_bench: what TLS costs a remote (TCP) client. Two workers of the same
 * build run side by side, one with --enable_tls and one without
 * (tls_bench.sh starts them); in each round the same client work runs
 * against both, alternately first, so load on a shared machine falls on
 * both alike:
 *   - 1 MiB set+get: ds_kv_set then ds_kv_get_into of one key, p50 latency;
 *   - 64 MiB get: ds_kv_get_into into a warm buffer, p50 throughput.
 * Each is reported as TLS / plain (throughput; latency as plain / TLS, so
 * 1.0 = free and lower = dearer), median over the rounds. Also a 1 KiB
 * set+get, where the record framing rather than the cipher costs. Values
 * are checked byte for byte after each phase.
 *
 * With --pids PLAIN,TLS (the workers' process ids) it then measures CPU
 * time rather than wall time, which the machine's load moves less: the
 * worker's user+system time (/proc/PID/stat, all its threads) and this
 * process's (getrusage) over a loop of 64 MiB gets and one of 1 MiB
 * set+gets, per operation.
 *
 *   tls_bench --plain H:P --tls H:P --ca FILE [--rounds N] [--pids P,T] [--json FILE] */
#include "bench/stats.h"
#include "common/clock.h"
#include "common/procstat.h"
#include "ds/kv_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_ROUNDS 32

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        ds_status_t st_ = (expr);                                                                  \
        if (st_ != DS_K_OK) {                                                                      \
            fprintf(stderr, "tls_bench: %s failed: %s: %s\n", #expr, ds_status_name(st_),          \
                    ds_last_error());                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static ds_client_t *connect_to(const char *addr, const char *ca)
{
    static char hosts[2][256];
    static int nh;
    char *host = hosts[nh++ % 2];
    snprintf(host, sizeof(hosts[0]), "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon == NULL) {
        fprintf(stderr, "tls_bench: '%s' is not host:port\n", addr);
        exit(2);
    }
    *colon = '\0';
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = atoi(colon + 1);
    o.transport = DS_TRANSPORT_TCP;
    o.enable_tls = ca ? 1 : -1;
    o.tls_ca = ca;
    ds_client_t *c = NULL;
    CHECK(ds_client_connect(&o, &c));
    return c;
}

/* p50 of one phase in us: n set+gets (set true) or gets of size bytes. */
static double phase(ds_client_t *c, const char *key, size_t size, int n, bool set, uint8_t *val,
                    uint8_t *dst)
{
    uint64_t ns[4096];
    size_t len;
    if (n > 4096) n = 4096;
    CHECK(ds_kv_set(c, key, val, size, NULL));
    CHECK(ds_kv_get_into(c, key, 0, dst, size, &len)); /* warm-up */
    for (int i = 0; i < n; i++) {
        uint64_t t0 = ds__now_ns();
        if (set) CHECK(ds_kv_set(c, key, val, size, NULL));
        CHECK(ds_kv_get_into(c, key, 0, dst, size, &len));
        ns[i] = ds__now_ns() - t0;
    }
    if (len != size || memcmp(val, dst, size) != 0) {
        fprintf(stderr, "tls_bench: %s: wrong bytes back\n", key);
        exit(1);
    }
    memset(dst, 0, size);
    dsb_lat_t l;
    dsb_lat_from(ns, (size_t)n, &l);
    return l.p50_us;
}

/* User+system CPU ms of process pid (all its threads), or -1. */
static double proc_cpu_ms(long pid)
{
    ds_proc_stat_t s;
    if (ds__proc_stat((pid_t)pid, &s) != 0) return -1;
    return (double)(s.utime + s.stime) * 1e3 / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_ms(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

/* CPU ms per operation of the worker (pid) and of this client over n gets
 * (set false) or set+gets of size bytes. */
static void cpu_phase(ds_client_t *c, long pid, const char *key, size_t size, int n, bool set,
                      uint8_t *val, uint8_t *dst, double *worker_ms, double *client_ms)
{
    size_t len;
    CHECK(ds_kv_set(c, key, val, size, NULL));
    CHECK(ds_kv_get_into(c, key, 0, dst, size, &len)); /* warm-up */
    double w0 = proc_cpu_ms(pid), c0 = self_cpu_ms();
    for (int i = 0; i < n; i++) {
        if (set) CHECK(ds_kv_set(c, key, val, size, NULL));
        CHECK(ds_kv_get_into(c, key, 0, dst, size, &len));
    }
    double w1 = proc_cpu_ms(pid), c1 = self_cpu_ms();
    if (len != size || memcmp(val, dst, size) != 0) {
        fprintf(stderr, "tls_bench: %s: wrong bytes back\n", key);
        exit(1);
    }
    *worker_ms = w0 < 0 || w1 < 0 ? -1 : (w1 - w0) / n;
    *client_ms = (c1 - c0) / n;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    const char *plain = NULL, *tls = NULL, *ca = NULL, *json = NULL;
    int rounds = 5;
    long pids[2] = {0, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plain") && i + 1 < argc)
            plain = argv[++i];
        else if (!strcmp(argv[i], "--tls") && i + 1 < argc)
            tls = argv[++i];
        else if (!strcmp(argv[i], "--ca") && i + 1 < argc)
            ca = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pids") && i + 1 < argc &&
                 sscanf(argv[i + 1], "%ld,%ld", &pids[0], &pids[1]) == 2)
            i++;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else
            plain = NULL, i = argc;
    }
    if (!plain || !tls || !ca || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: tls_bench --plain H:P --tls H:P --ca FILE [--rounds 1..%d] "
                "[--pids PLAIN,TLS] [--json FILE]\n",
                MAX_ROUNDS);
        return 2;
    }
    ds_client_t *c[2] = {connect_to(plain, NULL), connect_to(tls, ca)};
    const size_t big = 64u << 20;
    uint8_t *val = malloc(big), *dst = malloc(big);
    if (!val || !dst) return 1;
    for (size_t i = 0; i < big; i++)
        val[i] = (uint8_t)(i * 131 + (i >> 20));
    memset(dst, 0, big);
    /* [side][round]: side 0 plain, 1 TLS */
    double small_us[2][MAX_ROUNDS], mib_us[2][MAX_ROUNDS], big_gbps[2][MAX_ROUNDS];
    printf("round  side   1KiB set+get p50 us  1MiB set+get p50 us  64MiB get GB/s\n");
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int s = (r + k) % 2; /* alternate which goes first */
            small_us[s][r] = phase(c[s], "tls-bench-1k", 1024, 2000, true, val, dst);
            mib_us[s][r] = phase(c[s], "tls-bench-1m", 1u << 20, 200, true, val, dst);
            double us = phase(c[s], "tls-bench-64m", big, 10, false, val, dst);
            big_gbps[s][r] = (double)big / (us * 1e3);
            printf("%5d  %-5s  %19.1f  %19.1f  %14.2f\n", r + 1, s ? "tls" : "plain",
                   small_us[s][r], mib_us[s][r], big_gbps[s][r]);
        }
    }
    double m[2][3];
    for (int s = 0; s < 2; s++) {
        m[s][0] = median(small_us[s], rounds);
        m[s][1] = median(mib_us[s], rounds);
        m[s][2] = median(big_gbps[s], rounds);
    }
    double r_small = m[0][0] / m[1][0], r_mib = m[0][1] / m[1][1], r_big = m[1][2] / m[0][2];
    printf("\nmedians: plain 1KiB %.1f us, 1MiB %.1f us, 64MiB %.2f GB/s; "
           "tls 1KiB %.1f us, 1MiB %.1f us, 64MiB %.2f GB/s\n",
           m[0][0], m[0][1], m[0][2], m[1][0], m[1][1], m[1][2]);
    printf("TLS / plain (1.0 = free): 1 KiB set+get %.2fx, 1 MiB set+get %.2fx, "
           "64 MiB get %.2fx (target >= 0.70: %s)\n",
           r_small, r_mib, r_big, r_big >= 0.7 ? "met" : "missed");
    /* [side][0 64 MiB get, 1 1 MiB set+get][0 worker, 1 client] */
    double cpu[2][2][2] = {{{-1, -1}, {-1, -1}}, {{-1, -1}, {-1, -1}}};
    if (pids[0] > 0 && pids[1] > 0) {
        printf("\nCPU ms per operation (user+system; worker: /proc/PID/stat, client: getrusage)\n"
               "side   64MiB get worker  client   1MiB set+get worker  client\n");
        for (int s = 0; s < 2; s++) {
            cpu_phase(c[s], pids[s], "tls-bench-64m", big, 20, false, val, dst, &cpu[s][0][0],
                      &cpu[s][0][1]);
            cpu_phase(c[s], pids[s], "tls-bench-1m", 1u << 20, 500, true, val, dst, &cpu[s][1][0],
                      &cpu[s][1][1]);
            printf("%-5s  %16.2f  %6.2f  %19.3f  %6.3f\n", s ? "tls" : "plain", cpu[s][0][0],
                   cpu[s][0][1], cpu[s][1][0], cpu[s][1][1]);
        }
        printf("TLS / plain CPU (all sides): 64 MiB get %.2fx, 1 MiB set+get %.2fx\n",
               (cpu[1][0][0] + cpu[1][0][1]) / (cpu[0][0][0] + cpu[0][0][1]),
               (cpu[1][1][0] + cpu[1][1][1]) / (cpu[0][1][0] + cpu[0][1][1]));
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"rounds\": %d, \"plain\": {\"set_get_1k_p50_us\": %.1f, "
                    "\"set_get_1m_p50_us\": %.1f, \"get_64m_gbps\": %.3f}, \"tls\": "
                    "{\"set_get_1k_p50_us\": %.1f, \"set_get_1m_p50_us\": %.1f, "
                    "\"get_64m_gbps\": %.3f}, \"ratio_set_get_1k\": %.3f, "
                    "\"ratio_set_get_1m\": %.3f, \"ratio_get_64m\": %.3f, \"cpu_ms\": "
                    "{\"plain\": {\"get_64m_worker\": %.2f, \"get_64m_client\": %.2f, "
                    "\"set_get_1m_worker\": %.3f, \"set_get_1m_client\": %.3f}, \"tls\": "
                    "{\"get_64m_worker\": %.2f, \"get_64m_client\": %.2f, "
                    "\"set_get_1m_worker\": %.3f, \"set_get_1m_client\": %.3f}}}\n",
                    rounds, m[0][0], m[0][1], m[0][2], m[1][0], m[1][1], m[1][2], r_small, r_mib,
                    r_big, cpu[0][0][0], cpu[0][0][1], cpu[0][1][0], cpu[0][1][1], cpu[1][0][0],
                    cpu[1][0][1], cpu[1][1][0], cpu[1][1][1]);
            fclose(f);
        }
    }
    ds_client_close(c[0]);
    ds_client_close(c[1]);
    free(val);
    free(dst);
    return 0;
}
