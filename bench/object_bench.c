/* object_bench: the object cache's paths next to the KV path, measured in
 * ONE run against one worker it starts (local client: Unix socket and the
 * shared arena), rounds interleaved so that load on the machine falls on
 * both sides alike:
 *
 *   object  create + copy in (ds_buffer_memory_copy, Yuanrong's MemoryCopy) +
 *           publish of a 1 MiB and a 64 MiB value, then a
 *           zero-copy get of it (ds_kv_get_buffers) and its release, against
 *           the KV path: set of the same bytes, then a copying get
 *           (ds_kv_get) -> ratio object / KV (target 1.1 at most); and
 *           against a set followed by the object path's own zero-copy get,
 *           which isolates create+publish against set, also by this
 *           process's CPU time (which the machine's load moves less);
 *   latch   a read latch's round trip (rlatch + unrlatch of one key) against
 *           an uncontended local get of a 1 KiB value (served from the
 *           shared GET index, no request) and against one request to the
 *           worker (exist of the key) -> ratios.
 *
 * It stops its worker by PID (SIGTERM, then SIGKILL; the worker dies with it
 * through PR_SET_PDEATHSIG). Prints a table and writes JSON; the targets
 * are reported, never asserted (a benchmark, not a test).
 *
 *   object_bench [--worker_bin PATH] [--reps N] [--json FILE] */
#include "bench/stats.h"
#include "common/clock.h"
#include "common/copy.h"
#include "common/net.h"
#include "ds/kv_client.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024u * 1024u)

static char tmpdir[256];
static pid_t worker, owner;

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void cleanup(void)
{
    if (getpid() != owner) return;
    if (worker > 0) {
        kill(worker, SIGTERM);
        for (int i = 0; i < 300 && waitpid(worker, NULL, WNOHANG) != worker; i++)
            usleep(10000);
        kill(worker, SIGKILL);
        waitpid(worker, NULL, 0);
        worker = 0;
    }
    if (tmpdir[0]) nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    tmpdir[0] = '\0';
}

static void on_signal(int sig)
{
    (void)sig;
    exit(130); /* runs cleanup */
}

static void die(const char *what, ds_status_t st)
{
    fprintf(stderr, "object_bench: %s: %s: %s\n", what, ds_status_name(st), ds_last_error());
    exit(1);
}

static ds_client_t *start_worker(const char *bin, int arena_mb)
{
    char sock[300], log[300], addr[64], mb[16];
    snprintf(sock, sizeof(sock), "%s/sock", tmpdir);
    snprintf(log, sizeof(log), "%s/worker.log", tmpdir);
    mkdir(sock, 0700);
    int port = ds__free_tcp_port(NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    snprintf(mb, sizeof(mb), "%d", arena_mb);
    char *argv[] = {(char *)bin, "--worker_address",  addr, "--shared_memory_size_mb",
                    mb,          "--unix_socket_dir", sock, NULL};
    pid_t pid = fork();
    if (pid < 0) return NULL;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(bin, argv);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    worker = pid;
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = port;
    o.transport = DS_TRANSPORT_LOCAL;
    o.unix_socket_dir = strdup(sock);
    o.connect_timeout_ms = 500;
    uint64_t deadline = ds__now_ms() + 20000;
    while (ds__now_ms() < deadline && waitpid(pid, NULL, WNOHANG) != pid) {
        ds_client_t *c = NULL;
        if (ds_client_connect(&o, &c) == DS_K_OK) {
            if (ds_client_health_check(c) == DS_K_OK) return c;
            ds_client_close(c);
        }
        usleep(50000);
    }
    fprintf(stderr, "object_bench: the worker did not start (log: %s)\n", log);
    exit(1);
}

/* This process's CPU time, ns: the caller's thread and the copy's helper
 * thread (common/copy_wide.c). The machine's load moves it less than the
 * wall time; the worker's part of a round is a few requests' handling. */
static uint64_t cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The client CPU time of the last round (object_round, kv_buf_round). */
static uint64_t round_cpu;

/* One object round: create, copy in, publish, zero-copy get, release. */
static uint64_t object_round(ds_client_t *c, const char *key, const uint8_t *src, size_t n)
{
    uint64_t c0 = cpu_ns();
    uint64_t t0 = ds__now_ns();
    ds_buffer_t *b = NULL;
    ds_status_t st = ds_kv_create(c, key, n, NULL, &b);
    if (st != DS_K_OK) die("create", st);
    if ((st = ds_buffer_memory_copy(b, src, n)) != DS_K_OK) die("memory_copy", st);
    if ((st = ds_kv_publish(c, b)) != DS_K_OK) die("publish", st);
    ds_buffer_release(b);
    ds_buffer_t *g = NULL;
    if ((st = ds_kv_get_buffers(c, 1, &key, 0, &g)) != DS_K_OK || g == NULL) die("get", st);
    volatile uint8_t sink = ((const uint8_t *)ds_buffer_data(g))[n - 1];
    (void)sink;
    ds_buffer_release(g);
    uint64_t t = ds__now_ns() - t0;
    round_cpu = cpu_ns() - c0;
    return t;
}

/* One KV round: set, copying get. */
static uint64_t kv_round(ds_client_t *c, const char *key, const uint8_t *src, size_t n)
{
    uint64_t t0 = ds__now_ns();
    ds_status_t st = ds_kv_set(c, key, src, n, NULL);
    if (st != DS_K_OK) die("set", st);
    void *v = NULL;
    size_t len = 0;
    if ((st = ds_kv_get(c, key, 0, &v, &len)) != DS_K_OK || len != n) die("kv get", st);
    ds_free(v);
    return ds__now_ns() - t0;
}

/* One KV round with the object path's get: set, zero-copy get, release. */
static uint64_t kv_buf_round(ds_client_t *c, const char *key, const uint8_t *src, size_t n)
{
    uint64_t c0 = cpu_ns();
    uint64_t t0 = ds__now_ns();
    ds_status_t st = ds_kv_set(c, key, src, n, NULL);
    if (st != DS_K_OK) die("set", st);
    ds_buffer_t *g = NULL;
    if ((st = ds_kv_get_buffers(c, 1, &key, 0, &g)) != DS_K_OK || g == NULL) die("get", st);
    volatile uint8_t sink = ((const uint8_t *)ds_buffer_data(g))[n - 1];
    (void)sink;
    ds_buffer_release(g);
    uint64_t t = ds__now_ns() - t0;
    round_cpu = cpu_ns() - c0;
    return t;
}

typedef struct {
    const char *name;
    double a_us, b_us, ratio, target;
} row_t;

int main(int argc, char **argv)
{
    const char *bin = NULL, *json = NULL;
    int reps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--worker_bin") && i + 1 < argc)
            bin = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: object_bench [--worker_bin PATH] [--reps N] [--json FILE]\n");
            return 2;
        }
    }
    if (bin == NULL) bin = "build/src/worker/datasystem_worker";
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "object_bench: no worker binary at %s (--worker_bin)\n", bin);
        return 2;
    }
    owner = getpid();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/object_bench.XXXXXX");
    if (mkdtemp(tmpdir) == NULL) return 1;
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    ds_client_t *c = start_worker(bin, 640);

    row_t rows[8];
    int nrows = 0;
    const size_t sizes[2] = {1 * MIB, 64 * MIB};
    for (int s = 0; s < 2; s++) {
        size_t n = sizes[s];
        int r = reps > 0 ? reps : (s == 0 ? 200 : 20);
        uint8_t *src = malloc(n);
        uint64_t *a = malloc(r * sizeof(*a)), *b = malloc(r * sizeof(*b));
        uint64_t *kb = malloc(r * sizeof(*kb));
        uint64_t *ac = malloc(r * sizeof(*ac)), *kc = malloc(r * sizeof(*kc));
        if (!src || !a || !b || !kb || !ac || !kc) return 1;
        for (size_t i = 0; i < n; i++)
            src[i] = (uint8_t)(i * 131u + 7u);
        /* Warm every path alike, with as many copies as the copy's size
         * class takes to choose its way (common/copy.h): the three paths
         * copy their values through that one class, and trial copies by a
         * slower way would otherwise fall into the timed rounds. */
        int warm = n >= DS_COPY_BIG ? (int)(DS_COPY_TRIALS_IN + DS_COPY_WIDE_TRIALS(n)) / 3 + 1 : 3;
        for (int w = 0; w < warm; w++) {
            object_round(c, "ob.obj", src, n);
            kv_round(c, "ob.kv", src, n);
            kv_buf_round(c, "ob.kvb", src, n);
        }
        for (int i = 0; i < r; i++) {
            if (i % 2) {
                a[i] = object_round(c, "ob.obj", src, n);
                ac[i] = round_cpu;
                b[i] = kv_round(c, "ob.kv", src, n);
                kb[i] = kv_buf_round(c, "ob.kvb", src, n);
                kc[i] = round_cpu;
            } else {
                kb[i] = kv_buf_round(c, "ob.kvb", src, n);
                kc[i] = round_cpu;
                b[i] = kv_round(c, "ob.kv", src, n);
                a[i] = object_round(c, "ob.obj", src, n);
                ac[i] = round_cpu;
            }
        }
        dsb_lat_t la, lb;
        dsb_lat_from(a, (size_t)r, &la);
        dsb_lat_from(b, (size_t)r, &lb);
        rows[nrows++] = (row_t){s == 0 ? "object create+publish+get 1 MiB vs KV set+get"
                                       : "object create+publish+get 64 MiB vs KV set+get",
                                la.p50_us, lb.p50_us, la.p50_us / lb.p50_us, 1.1};
        /* The same get on both sides: what create+publish costs against set. */
        dsb_lat_t lk;
        dsb_lat_from(kb, (size_t)r, &lk);
        rows[nrows++] = (row_t){s == 0 ? "object create+publish+get 1 MiB vs KV set+get_buffers"
                                       : "object create+publish+get 64 MiB vs KV set+get_buffers",
                                la.p50_us, lk.p50_us, la.p50_us / lk.p50_us, 1.1};
        /* The same two paths by the client's CPU time (no target). */
        dsb_lat_t lac, lkc;
        dsb_lat_from(ac, (size_t)r, &lac);
        dsb_lat_from(kc, (size_t)r, &lkc);
        rows[nrows++] =
            (row_t){s == 0 ? "object create+publish+get 1 MiB vs KV set+get_buffers, client CPU"
                           : "object create+publish+get 64 MiB vs KV set+get_buffers, client CPU",
                    lac.p50_us, lkc.p50_us, lac.p50_us / lkc.p50_us, 0};
        free(kb);
        free(ac);
        free(kc);
        const char *keys[3] = {"ob.obj", "ob.kv", "ob.kvb"};
        ds_kv_del(c, 3, keys, NULL);
        free(src);
        free(a);
        free(b);
    }
    {
        int r = reps > 0 ? reps * 10 : 2000;
        uint8_t small[1024];
        memset(small, 'l', sizeof(small));
        const char *key = "ob.latch";
        ds_status_t st = ds_kv_set(c, key, small, sizeof(small), NULL);
        if (st != DS_K_OK) die("set", st);
        uint64_t *a = malloc(r * sizeof(*a)), *b = malloc(r * sizeof(*b));
        uint64_t *e = malloc(r * sizeof(*e));
        if (!a || !b || !e) return 1;
        for (int i = 0; i < r; i++) {
            bool ex = false;
            uint64_t t0 = ds__now_ns();
            if ((st = ds_kv_exist(c, 1, &key, &ex)) != DS_K_OK || !ex) die("exist", st);
            e[i] = ds__now_ns() - t0;
            t0 = ds__now_ns();
            if ((st = ds_kv_rlatch(c, 1, &key, 10000, NULL)) != DS_K_OK) die("rlatch", st);
            if ((st = ds_kv_unrlatch(c, 1, &key, NULL)) != DS_K_OK) die("unrlatch", st);
            a[i] = ds__now_ns() - t0;
            t0 = ds__now_ns();
            void *v = NULL;
            size_t len = 0;
            if ((st = ds_kv_get(c, key, 0, &v, &len)) != DS_K_OK) die("get", st);
            ds_free(v);
            b[i] = ds__now_ns() - t0;
        }
        dsb_lat_t la, lb;
        dsb_lat_from(a, (size_t)r, &la);
        dsb_lat_from(b, (size_t)r, &lb);
        rows[nrows++] = (row_t){"latch round trip (rlatch+unrlatch) vs local get 1 KiB", la.p50_us,
                                lb.p50_us, la.p50_us / lb.p50_us, 0};
        /* A local get of a small value is read from the shared GET index
         * without a request; a latch takes two requests to the worker: the
         * cost of one such request, measured alike, is the floor. */
        dsb_lat_t le;
        dsb_lat_from(e, (size_t)r, &le);
        rows[nrows++] = (row_t){"latch round trip (rlatch+unrlatch) vs one request (exist)",
                                la.p50_us, le.p50_us, la.p50_us / le.p50_us, 0};
        free(e);
        free(a);
        free(b);
    }
    ds_client_close(c);

    double load[3] = {0, 0, 0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(la);
    }
    printf("%-68s %12s %12s %8s %8s\n", "row", "this p50 us", "base p50 us", "ratio", "target");
    for (int i = 0; i < nrows; i++) {
        char tgt[16] = "-";
        if (rows[i].target > 0) snprintf(tgt, sizeof(tgt), "<=%.2f", rows[i].target);
        printf("%-68s %12.1f %12.1f %8.3f %8s\n", rows[i].name, rows[i].a_us, rows[i].b_us,
               rows[i].ratio, tgt);
    }
    printf("load average: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f == NULL) return 1;
        fprintf(f, "{\n  \"load_average\": [%.2f, %.2f, %.2f],\n  \"rows\": [\n", load[0], load[1],
                load[2]);
        for (int i = 0; i < nrows; i++)
            fprintf(f,
                    "    {\"name\": \"%s\", \"p50_us\": %.2f, \"baseline_p50_us\": %.2f, "
                    "\"ratio\": %.4f, \"target_max_ratio\": %s}%s\n",
                    rows[i].name, rows[i].a_us, rows[i].b_us, rows[i].ratio,
                    rows[i].target > 0 ? "1.1" : "null", i + 1 < nrows ? "," : "");
        fprintf(f, "  ]\n}\n");
        fclose(f);
    }
    return 0;
}
