/* hetero_bench: the heterogeneous client's page copies against the machine's
 * own copies, measured in ONE run with the rows interleaved:
 *
 *   pages    ds_hetero_mset_d2h of 32 keys of one 64 KiB page each, then
 *            ds_hetero_mget_h2d of them into other pages (local client, the
 *            worker's arena), against two memcpys of the same 2 MiB (pages
 *            into a staging buffer and out of it to other pages): the
 *            least a device -> host store -> device round trip can copy.
 *            Target: within 1.5x.
 *   pagelist 4 keys of 8 pages each, the same bytes as page lists.
 *   perkey   one key of one 64 KiB page through the hetero calls against a
 *            plain ds_kv_set + ds_kv_get_into of the same bytes: what the
 *            page-list path costs per key. Also the batched per-key cost.
 *
 * The device backend is the process's (DS_DEVICE_BACKEND; the bench sets
 * host when it is unset), so on a GPU machine (tests/device/run.sh) the same
 * rows time real H2D and D2H copies, against cuMemcpy of the same bytes
 * through the device helpers. It starts its own worker (the build's, or
 * --worker_bin) and stops it by PID. Targets are reported, never asserted.
 *
 *   hetero_bench [--worker_bin PATH] [--reps N] [--json FILE] */
#include "bench/stats.h"
#include "common/clock.h"
#include "ds/hetero_client.h"
#include "ds/kv_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE (64u * 1024u)
#define NPAGES 32

static pid_t worker_pid;
static char sockdir[64];

static void stop_worker(void)
{
    if (worker_pid > 0) {
        kill(worker_pid, SIGTERM);
        for (int i = 0; i < 100; i++) {
            if (waitpid(worker_pid, NULL, WNOHANG) == worker_pid) {
                worker_pid = 0;
                break;
            }
            usleep(50 * 1000);
        }
        if (worker_pid > 0) {
            kill(worker_pid, SIGKILL);
            waitpid(worker_pid, NULL, 0);
        }
    }
    if (sockdir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", sockdir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sockdir);
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int start_worker(const char *bin, int port)
{
    snprintf(sockdir, sizeof sockdir, "/tmp/hbench-XXXXXX");
    if (mkdtemp(sockdir) == NULL) return -1;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    pid_t parent = getpid();
    worker_pid = fork();
    if (worker_pid < 0) return -1;
    if (worker_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        char log[128];
        snprintf(log, sizeof log, "%s/worker.log", sockdir);
        if (freopen(log, "w", stderr) == NULL || freopen(log, "a", stdout) == NULL) _exit(1);
        execl(bin, bin, "--worker_address", addr, "--shared_memory_size_mb", "256",
              "--unix_socket_dir", sockdir, (char *)NULL);
        _exit(127);
    }
    return 0;
}

static ds_hetero_t *connect_worker(int port)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = port;
    o.transport = DS_TRANSPORT_LOCAL;
    o.unix_socket_dir = sockdir;
    o.connect_timeout_ms = 500;
    for (int i = 0; i < 100; i++) {
        ds_hetero_t *h = NULL;
        if (ds_hetero_connect(&o, false, &h) == DS_K_OK) return h;
        usleep(100 * 1000);
    }
    fprintf(stderr, "cannot connect to the worker: %s\n", ds_last_error());
    return NULL;
}

static int die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, ds_last_error());
    stop_worker();
    return 1;
}

int main(int argc, char **argv)
{
    const char *bin = DS_BUILD_DIR_DEFAULT "/src/worker/datasystem_worker";
    const char *json = NULL;
    int reps = 300;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--worker_bin") == 0)
            bin = argv[i + 1];
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--json") == 0)
            json = argv[i + 1];
    }
    if (reps < 10) reps = 10;
    setenv("DS_DEVICE_BACKEND", "host", 0);
    const char *backend = ds_device_backend_name();
    if (backend == NULL) {
        fprintf(stderr, "%s\n", ds_last_error());
        return 1;
    }
    int port = free_port();
    if (port < 0 || start_worker(bin, port) != 0) return die("start worker");
    ds_hetero_t *h = connect_worker(port);
    if (h == NULL) return die("connect");
    ds_client_t *kv = ds_hetero_kv(h);

    /* "Device" pages (device memory on a GPU backend) and host pages. */
    uint64_t dsrc = 0, ddst = 0;
    if (ds_device_malloc(0, (size_t)NPAGES * PAGE, &dsrc) != DS_K_OK ||
        ds_device_malloc(0, (size_t)NPAGES * PAGE, &ddst) != DS_K_OK)
        return die("device malloc");
    uint8_t *hsrc = malloc((size_t)NPAGES * PAGE), *stage = malloc((size_t)NPAGES * PAGE),
            *hdst = malloc((size_t)NPAGES * PAGE);
    for (size_t i = 0; i < (size_t)NPAGES * PAGE; i++)
        hsrc[i] = (uint8_t)(i * 131 + 7);
    memset(stage, 0, (size_t)NPAGES * PAGE);
    memset(hdst, 0, (size_t)NPAGES * PAGE);
    if (ds_device_memcpy(dsrc, (uint64_t)(uintptr_t)hsrc, (size_t)NPAGES * PAGE, DS_COPY_H2D) !=
        DS_K_OK)
        return die("fill");

    char names[NPAGES][32], names8[4][32];
    const char *keys[NPAGES], *keys8[4];
    ds_blob_t sb[NPAGES], db[NPAGES];
    ds_device_blob_list_t sl[NPAGES], dl[NPAGES], sl8[4], dl8[4];
    for (int i = 0; i < NPAGES; i++) {
        snprintf(names[i], sizeof names[i], "hb-%d", i);
        keys[i] = names[i];
        sb[i] = (ds_blob_t){dsrc + (uint64_t)i * PAGE, PAGE};
        db[i] = (ds_blob_t){ddst + (uint64_t)i * PAGE, PAGE};
        sl[i] = (ds_device_blob_list_t){&sb[i], 1, 0, 0};
        dl[i] = (ds_device_blob_list_t){&db[i], 1, 0, 0};
    }
    for (int i = 0; i < 4; i++) {
        snprintf(names8[i], sizeof names8[i], "hb8-%d", i);
        keys8[i] = names8[i];
        sl8[i] = (ds_device_blob_list_t){&sb[i * 8], 8, 0, 0};
        dl8[i] = (ds_device_blob_list_t){&db[i * 8], 8, 0, 0};
    }
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = DS_WRITE_NONE_L2_CACHE_EVICT;
    const char *pkey = "hb-plain";

    enum { R_PAGES, R_COPY, R_PAGELIST, R_ONE, R_PLAIN, R_N };
    uint64_t *t[R_N];
    for (int r = 0; r < R_N; r++)
        t[r] = calloc((size_t)reps, sizeof(uint64_t));
    const bool host = strcmp(backend, "host") == 0;
    size_t got = 0;
    for (int rep = -20; rep < reps; rep++) { /* 20 warm-up rounds */
        uint64_t t0 = ds__now_ns();
        if (ds_hetero_mset_d2h(h, NPAGES, keys, sl, &p, NULL) != DS_K_OK ||
            ds_hetero_mget_h2d(h, NPAGES, keys, dl, 0, NULL) != DS_K_OK)
            return die("pages");
        uint64_t t1 = ds__now_ns();
        if (host) {
            for (int i = 0; i < NPAGES; i++)
                memcpy(stage + (size_t)i * PAGE, (const void *)(uintptr_t)sb[i].dev_ptr, PAGE);
            for (int i = 0; i < NPAGES; i++)
                memcpy((void *)(uintptr_t)db[i].dev_ptr, stage + (size_t)i * PAGE, PAGE);
        } else {
            ds_device_memcpy((uint64_t)(uintptr_t)stage, dsrc, (size_t)NPAGES * PAGE, DS_COPY_D2H);
            ds_device_memcpy(ddst, (uint64_t)(uintptr_t)stage, (size_t)NPAGES * PAGE, DS_COPY_H2D);
        }
        uint64_t t2 = ds__now_ns();
        if (ds_hetero_mset_d2h(h, 4, keys8, sl8, &p, NULL) != DS_K_OK ||
            ds_hetero_mget_h2d(h, 4, keys8, dl8, 0, NULL) != DS_K_OK)
            return die("pagelist");
        uint64_t t3 = ds__now_ns();
        if (ds_hetero_mset_d2h(h, 1, keys, sl, &p, NULL) != DS_K_OK ||
            ds_hetero_mget_h2d(h, 1, keys, dl, 0, NULL) != DS_K_OK)
            return die("one key");
        uint64_t t4 = ds__now_ns();
        if (ds_kv_set(kv, pkey, hsrc, PAGE, &p) != DS_K_OK ||
            ds_kv_get_into(kv, pkey, 0, hdst, PAGE, &got) != DS_K_OK)
            return die("plain");
        uint64_t t5 = ds__now_ns();
        if (rep >= 0) {
            t[R_PAGES][rep] = t1 - t0;
            t[R_COPY][rep] = t2 - t1;
            t[R_PAGELIST][rep] = t3 - t2;
            t[R_ONE][rep] = t4 - t3;
            t[R_PLAIN][rep] = t5 - t4;
        }
    }
    /* The bytes went through whole. */
    ds_hetero_mset_d2h(h, NPAGES, keys, sl, &p, NULL);
    memset(hdst, 0, (size_t)NPAGES * PAGE);
    ds_device_memcpy(ddst, (uint64_t)(uintptr_t)hdst, (size_t)NPAGES * PAGE, DS_COPY_H2D);
    ds_hetero_mget_h2d(h, NPAGES, keys, dl, 0, NULL);
    ds_device_memcpy((uint64_t)(uintptr_t)hdst, ddst, (size_t)NPAGES * PAGE, DS_COPY_D2H);
    bool exact = memcmp(hdst, hsrc, (size_t)NPAGES * PAGE) == 0;

    dsb_lat_t l[R_N];
    for (int r = 0; r < R_N; r++)
        dsb_lat_from(t[r], (size_t)reps, &l[r]);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    double ratio = l[R_PAGES].p50_us / l[R_COPY].p50_us;
    double ratio8 = l[R_PAGELIST].p50_us / l[R_COPY].p50_us;
    double per_key_batched = l[R_PAGES].p50_us / NPAGES;
    printf("hetero_bench: backend %s, %d reps (medians), load average %.2f, bytes exact: %s\n",
           backend, reps, load[0], exact ? "yes" : "NO");
    printf("  pages    mset_d2h+mget_h2d 32 keys x 64 KiB  %9.1f us  (p99 %.1f)\n",
           l[R_PAGES].p50_us, l[R_PAGES].p99_us);
    printf("           two memcpys of the same 2 MiB       %9.1f us  -> %.2fx (target <= 1.5x)\n",
           l[R_COPY].p50_us, ratio);
    printf("  pagelist 4 keys x 8 pages                    %9.1f us  -> %.2fx the two memcpys\n",
           l[R_PAGELIST].p50_us, ratio8);
    printf("  perkey   one key, one page (hetero)          %9.1f us\n", l[R_ONE].p50_us);
    printf("           ds_kv_set + ds_kv_get_into 64 KiB   %9.1f us  -> overhead %+.1f us/key "
           "(%.2fx)\n",
           l[R_PLAIN].p50_us, l[R_ONE].p50_us - l[R_PLAIN].p50_us,
           l[R_ONE].p50_us / l[R_PLAIN].p50_us);
    printf("           batched (32 keys) per key           %9.1f us  -> %+.1f us/key against "
           "set+get\n",
           per_key_batched, per_key_batched - l[R_PLAIN].p50_us);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\n  \"command\": \"hetero_bench --reps %d\",\n  \"backend\": \"%s\",\n"
                    "  \"load_average\": %.2f,\n  \"bytes_exact\": %s,\n"
                    "  \"pages_us\": %.1f,\n  \"two_memcpy_us\": %.1f,\n"
                    "  \"pages_over_memcpy\": %.3f,\n  \"target_pages_over_memcpy\": 1.5,\n"
                    "  \"pagelist_4x8_us\": %.1f,\n  \"pagelist_over_memcpy\": %.3f,\n"
                    "  \"one_key_hetero_us\": %.1f,\n  \"one_key_set_get_us\": %.1f,\n"
                    "  \"page_list_overhead_us_per_key\": %.1f,\n"
                    "  \"batched_hetero_us_per_key\": %.1f\n}\n",
                    reps, backend, load[0], exact ? "true" : "false", l[R_PAGES].p50_us,
                    l[R_COPY].p50_us, ratio, l[R_PAGELIST].p50_us, ratio8, l[R_ONE].p50_us,
                    l[R_PLAIN].p50_us, l[R_ONE].p50_us - l[R_PLAIN].p50_us, per_key_batched);
            fclose(f);
        }
    }
    ds_device_free(dsrc);
    ds_device_free(ddst);
    free(hsrc);
    free(stage);
    free(hdst);
    for (int r = 0; r < R_N; r++)
        free(t[r]);
    ds_hetero_close(h);
    stop_worker();
    return exact ? 0 : 1;
}
