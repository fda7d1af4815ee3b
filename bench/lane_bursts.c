/* lane_bursts: bursts of local set+get pairs after idle gaps, against a
 * running worker, and where the worker's loop ran meanwhile.
 *
 * Each burst waits --idle-ms (the worker's polling runs out and it sleeps),
 * does 2 untimed pairs, then --pairs timed pairs of a --size value
 * (ds_kv_set, then ds_kv_get_into), and then as many memcpys of the size in
 * this process (the machine's limit, measured in the same burst). Every
 * 10th pair it reads the CPU the worker's main thread last ran on
 * (/proc/PID/stat, field 39) and counts it when that is this thread's CPU:
 * a worker and a client on one vCPU take turns on it instead of both
 * polling (docs/architecture.md section 4, request lanes). One line per
 * burst, then a summary:
 *
 *   lane_bursts --worker_address H:P --worker-pid PID [--bursts 10]
 *               [--pairs 100] [--size 1048576] [--idle-ms 100]
 *               [--dscli PATH]
 *
 * With --dscli (and two CPUs or more), polling rows follow: bursts of 2000
 * small sets, worker and client placed on CPUs, and the share of them the
 * worker caught while polling, from its statistics (`dscli status`) before
 * and after. These shares depend on what else the machine runs, so they are
 * figures here, not assertions of tests/integration/it_busy_poll.c:
 *
 *   polling  apart      client CPU 0, worker CPU 1: polling.hits
 *   polling  parting    client CPU 0, worker moved there, then free:
 *                       lane_parts and polling.hits
 *   polling  watch      client CPU 0, worker CPU 1, each set 3-15 us after
 *                       the last answer: polling.watched
 *
 * bench/lane_bursts.sh starts the worker (or two builds' workers in turn)
 * and runs this against it. */
#include "common/procstat.h"
#include "ds/kv_client.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    return (double)v[n / 2];
}

/* The CPU thread pid last ran on; -1 when unknown. */
static int last_cpu(int pid)
{
    ds_proc_stat_t s;
    return ds__proc_stat(pid, &s) == 0 ? s.processor : -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: lane_bursts --worker_address H:P --worker-pid PID [--bursts N] "
                    "[--pairs N] [--size BYTES] [--idle-ms MS] [--dscli PATH]\n");
    exit(2);
}

/* One counter of the worker's statistics ("polling.hits": a member of an
 * object), read with `dscli status`; -1 when it cannot be read. */
static double worker_stat(const char *dscli, const char *addr, const char *path)
{
    char cmd[1024], buf[65536];
    snprintf(cmd, sizeof(cmd), "'%s' status --worker_address '%s'", dscli, addr);
    FILE *f = popen(cmd, "r");
    if (f == NULL) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    if (pclose(f) != 0) return -1;
    cJSON *root = cJSON_Parse(buf), *node = root;
    char name[128];
    for (const char *p = path; node && *p;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len >= sizeof(name)) len = sizeof(name) - 1;
        memcpy(name, p, len);
        name[len] = '\0';
        node = cJSON_GetObjectItemCaseSensitive(node, name);
        p = dot ? dot + 1 : p + len;
    }
    double v = cJSON_IsNumber(node) ? node->valuedouble : -1;
    cJSON_Delete(root);
    return v;
}

/* Pins pid (0: the calling thread) to CPU cpu, or (cpu < 0) lets it run on
 * every CPU. */
static void place(int pid, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < ncpu && i < CPU_SETSIZE; i++)
        if (cpu < 0 || i == cpu) CPU_SET(i, &set);
    if (pid == 0)
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    else
        sched_setaffinity(pid, sizeof(set), &set);
}

/* n small sets, the i-th gap_min_us + i % (gap_spread_us + 1) microseconds
 * (busy-waited) after the last answer; 0 on an error. */
static int small_sets(ds_client_t *c, int n, int gap_min_us, int gap_spread_us)
{
    for (int i = 0; i < n; i++) {
        if (ds_kv_set(c, "lane-bursts-poll", "abc", 3, NULL) != DS_K_OK) {
            fprintf(stderr, "lane_bursts: %s\n", ds_last_error());
            return 0;
        }
        if (gap_min_us > 0) {
            uint64_t until = now_ns() + (uint64_t)(gap_min_us + i % (gap_spread_us + 1)) * 1000u;
            while (now_ns() < until) {
            }
        }
    }
    return 1;
}

/* The polling rows (see the top of this file); 1 when all ran. */
static int polling_rows(ds_client_t *c, const char *dscli, const char *addr, int wpid)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("polling  one CPU: the polling rows need two\n");
        return 1;
    }
    cpu_set_t old;
    pthread_getaffinity_np(pthread_self(), sizeof(old), &old);
    enum { N = 2000 };
    place(0, 0);

    place(wpid, 1);
    double h0 = worker_stat(dscli, addr, "polling.hits");
    if (!small_sets(c, N, 0, 0)) return 0;
    double h = worker_stat(dscli, addr, "polling.hits") - h0;
    printf("polling  apart    %d back-to-back sets, client CPU 0, worker CPU 1: %.0f caught "
           "while polling (%.3f)\n",
           N, h, h / N);

    place(wpid, 0);
    place(wpid, -1);
    double p0 = worker_stat(dscli, addr, "lane_parts");
    h0 = worker_stat(dscli, addr, "polling.hits");
    if (!small_sets(c, N, 0, 0)) return 0;
    double parts = worker_stat(dscli, addr, "lane_parts") - p0;
    h = worker_stat(dscli, addr, "polling.hits") - h0;
    printf("polling  parting  %d back-to-back sets, client CPU 0, worker free: parted %.0f "
           "times, %.0f caught while polling (%.3f)\n",
           N, parts, h, h / N);

    place(wpid, 1);
    double w0 = worker_stat(dscli, addr, "polling.watched");
    if (!small_sets(c, N, 3, 12)) return 0;
    double w = worker_stat(dscli, addr, "polling.watched") - w0;
    printf("polling  watch    %d sets each 3-15 us after the last answer, client CPU 0, worker "
           "CPU 1: %.0f caught by a watch (%.3f)\n",
           N, w, w / N);

    place(wpid, -1);
    pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
    return 1;
}

int main(int argc, char **argv)
{
    const char *addr = NULL;
    int wpid = 0, bursts = 10, pairs = 100, idle_ms = 100;
    const char *dscli = NULL;
    size_t size = 1u << 20;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        const char *k = argv[i], *v = argv[++i];
        if (strcmp(k, "--worker_address") == 0)
            addr = v;
        else if (strcmp(k, "--worker-pid") == 0)
            wpid = atoi(v);
        else if (strcmp(k, "--bursts") == 0)
            bursts = atoi(v);
        else if (strcmp(k, "--pairs") == 0)
            pairs = atoi(v);
        else if (strcmp(k, "--size") == 0)
            size = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(k, "--idle-ms") == 0)
            idle_ms = atoi(v);
        else if (strcmp(k, "--dscli") == 0)
            dscli = v;
        else
            usage();
    }
    char host[256];
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (colon == NULL || wpid <= 0 || bursts < 1 || pairs < 10 || size == 0 || idle_ms < 0 ||
        (size_t)(colon - addr) >= sizeof(host))
        usage();
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';

    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = atoi(colon + 1);
    o.transport = DS_TRANSPORT_LOCAL;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) {
        fprintf(stderr, "lane_bursts: cannot connect to %s: %s\n", addr, ds_last_error());
        return 1;
    }
    uint8_t *src = malloc(size), *dst = malloc(size);
    uint64_t *set = calloc((size_t)pairs, sizeof(uint64_t));
    uint64_t *pair = calloc((size_t)pairs, sizeof(uint64_t));
    uint64_t *copy = calloc((size_t)pairs, sizeof(uint64_t));
    double *ratios = calloc((size_t)bursts, sizeof(double));
    if (!src || !dst || !set || !pair || !copy || !ratios) {
        fprintf(stderr, "lane_bursts: out of memory\n");
        return 1;
    }
    int same_total = 0, looks_total = 0, under = 0;
    for (int b = 0; b < bursts; b++) {
        usleep((useconds_t)idle_ms * 1000u);
        memset(src, 'A' + b % 26, size);
        size_t len = 0;
        for (int i = 0; i < 2; i++)
            if (ds_kv_set(c, "lane-bursts", src, size, NULL) != DS_K_OK ||
                ds_kv_get_into(c, "lane-bursts", 0, dst, size, &len) != DS_K_OK || len != size) {
                fprintf(stderr, "lane_bursts: %s\n", ds_last_error());
                return 1;
            }
        int same = 0, looks = 0;
        for (int i = 0; i < pairs; i++) {
            uint64_t t0 = now_ns();
            ds_status_t s1 = ds_kv_set(c, "lane-bursts", src, size, NULL);
            uint64_t t1 = now_ns();
            ds_status_t s2 = ds_kv_get_into(c, "lane-bursts", 0, dst, size, &len);
            uint64_t t2 = now_ns();
            if (s1 != DS_K_OK || s2 != DS_K_OK || len != size) {
                fprintf(stderr, "lane_bursts: %s\n", ds_last_error());
                return 1;
            }
            set[i] = t1 - t0;
            pair[i] = t2 - t0;
            if (i % 10 == 0) {
                looks++;
                same += last_cpu(wpid) == sched_getcpu();
            }
        }
        if (memcmp(src, dst, size) != 0) {
            fprintf(stderr, "lane_bursts: the value read back differs from the one set\n");
            return 1;
        }
        for (int i = 0; i < pairs; i++) {
            uint64_t t0 = now_ns();
            memcpy(dst, src, size);
            copy[i] = now_ns() - t0;
        }
        double m = median(copy, pairs), s = median(set, pairs), p = median(pair, pairs);
        ratios[b] = m / s;
        under += ratios[b] < 0.65;
        same_total += same;
        looks_total += looks;
        printf("burst %3d  set %.1f us (%.3f of a memcpy)  set+get %.1f us (%.3f of two)  memcpy "
               "%.1f us  worker on this CPU %d/%d\n",
               b, s / 1e3, m / s, p / 1e3, p / (2 * m), m / 1e3, same, looks);
    }
    qsort(ratios, (size_t)bursts, sizeof(double), cmp_double);
    printf("summary: %d bursts, median set %.3f of a memcpy, %d under 0.65; worker on this CPU "
           "%d/%d\n",
           bursts, ratios[bursts / 2], under, same_total, looks_total);
    if (dscli != NULL && !polling_rows(c, dscli, addr, wpid)) return 1;
    ds_client_close(c);
    free(src);
    free(dst);
    free(set);
    free(pair);
    free(copy);
    free(ratios);
    return 0;
}
