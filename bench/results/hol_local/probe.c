/* The hol phase's local half, alone and with set and get latencies apart:
 * a local client's 1 KiB set then get (get_into, served from the shared
 * GET index), in idle windows and while another process gets or sets a
 * 256 MiB value over TCP. Built by hand against a release build:
 *   gcc -O2 -std=gnu11 -Iinclude bench/results/hol_local/probe.c -o /tmp/probe \
 *       -Lbuild/src/client -ldatasystem -Wl,-rpath,$PWD/build/src/client
 *   /tmp/probe PORT ROUNDS IDLE_MS TRANSFERS   (a worker on 127.0.0.1:PORT)
 * DS_X_LOADFILE (optional): a file this probe rewrites at each window, "2/100"
 * runnable in idle windows and "4/100" in loaded ones, for a worker and client
 * built with a temporary hook that reads it instead of /proc/loadavg (see
 * ../hol_local.txt). */
#define _GNU_SOURCE
#include <ds/kv_client.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define BIG (256u << 20)
#define N (1u << 21)
static uint64_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}
static ds_client_t *conn(int port, int local)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = port;
    o.transport = local ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP;
    ds_client_t *c;
    if (ds_client_connect(&o, &c) != DS_K_OK) {
        fprintf(stderr, "connect %s\n", ds_last_error());
        exit(1);
    }
    return c;
}
static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
typedef struct {
    uint64_t *s, *g;
    size_t ns, ng;
    int xfers;
} pool_t;
static void pr(const char *name, uint64_t *v, size_t n)
{
    qsort(v, n, 8, cmp);
    if (!n) return;
    printf("  %-5s n=%7zu p50 %6.1f p90 %6.1f p99 %6.1f p99.9 %7.1f max %8.1f us\n", name, n,
           v[n / 2] / 1e3, v[n * 9 / 10] / 1e3, v[n * 99 / 100] / 1e3, v[n * 999 / 1000] / 1e3,
           v[n - 1] / 1e3);
}
static void report(const char *name, pool_t *p)
{
    printf("%s (%d transfers)\n", name, p->xfers);
    uint64_t *all = malloc((p->ns + p->ng) * 8);
    memcpy(all, p->s, p->ns * 8);
    memcpy(all + p->ns, p->g, p->ng * 8);
    pr("set", p->s, p->ns);
    pr("get", p->g, p->ng);
    pr("all", all, p->ns + p->ng);
    free(all);
}
static void fake(int over)
{
    const char *f = getenv("DS_X_LOADFILE");
    if (!f) return;
    FILE *x = fopen(f, "w");
    fprintf(x, "0.00 0.00 0.00 %d/100 1\n", over ? 4 : 2);
    fclose(x);
}
static void window(ds_client_t *c, pool_t *p, int ms, atomic_int *done, int until)
{
    uint8_t v[1024], d[1024];
    memset(v, 0x21, sizeof v);
    size_t len;
    uint64_t end = now() + ms * 1000000ull;
    int d0 = done ? atomic_load(done) : 0;
    while (now() < end && p->ns < N) {
        if (done && atomic_load(done) - d0 >= until) break;
        uint64_t t0 = now();
        if (ds_kv_set(c, "probe-small", v, 1024, NULL) != DS_K_OK) {
            fprintf(stderr, "set %s\n", ds_last_error());
            exit(1);
        }
        uint64_t t1 = now();
        if (ds_kv_get_into(c, "probe-small", 0, d, 1024, &len) != DS_K_OK) {
            fprintf(stderr, "get %s\n", ds_last_error());
            exit(1);
        }
        uint64_t t2 = now();
        p->s[p->ns++] = t1 - t0;
        p->g[p->ng++] = t2 - t1;
    }
    if (done) p->xfers += atomic_load(done) - d0;
}
int main(int argc, char **argv)
{
    int port = atoi(argv[1]);
    int rounds = argc > 2 ? atoi(argv[2]) : 2;
    int ms = argc > 3 ? atoi(argv[3]) : 2000;
    int until = argc > 4 ? atoi(argv[4]) : 10;
    ds_client_t *bc = conn(port, 0);
    uint8_t *buf = malloc(BIG);
    memset(buf, 0x77, BIG);
    if (ds_kv_set(bc, "probe-big", buf, BIG, NULL) != DS_K_OK) {
        fprintf(stderr, "bigset\n");
        return 1;
    }
    ds_client_t *c = conn(port, 1);
    pool_t idle = {calloc(N, 8), calloc(N, 8), 0, 0, 0},
           busy[2] = {{calloc(N, 8), calloc(N, 8), 0, 0, 0}, {calloc(N, 8), calloc(N, 8), 0, 0, 0}};
    atomic_int *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    {
        uint8_t v[1024] = {0};
        size_t l;
        for (int i = 0; i < 1000; i++) {
            ds_kv_set(c, "probe-small", v, 1024, NULL);
            ds_kv_get_into(c, "probe-small", 0, v, 1024, &l);
        }
    }
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < 2; m++) {
            fake(0);
            window(c, &idle, ms, NULL, 0);
            fake(1);
            atomic_store(&sh[0], 0);
            atomic_store(&sh[1], 0);
            atomic_store(&sh[2], 0);
            pid_t pid = fork();
            if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                ds_client_t *b = conn(port, 0);
                uint8_t *d = malloc(BIG);
                memset(d, m ? 0x55 : 0, BIG);
                atomic_store(&sh[2], 1);
                size_t len;
                for (int i = 0; i < 2000 && !atomic_load(&sh[1]); i++) {
                    ds_status_t st = m ? ds_kv_set(b, "probe-big-set", d, BIG, NULL)
                                       : ds_kv_get_into(b, "probe-big", 0, d, BIG, &len);
                    if (st != DS_K_OK) _exit(1);
                    atomic_fetch_add(&sh[0], 1);
                }
                _exit(0);
            }
            while (!atomic_load(&sh[2]))
                usleep(1000);
            usleep(50000);
            window(c, &busy[m], ms * 5, &sh[0], until);
            atomic_store(&sh[1], 1);
            int st;
            waitpid(pid, &st, 0);
        }
    fake(0);
    report("idle", &idle);
    report("during 256MiB get", &busy[0]);
    report("during 256MiB set", &busy[1]);
    {
        const char *k[] = {"probe-small", "probe-big", "probe-big-set"};
        ds_kv_del(bc, 3, k, NULL);
    }
    ds_client_close(c);
    ds_client_close(bc);
    return 0;
}
