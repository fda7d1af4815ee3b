/* tier_bench: the storage tiers (docs/design.md section 8) next to the disk's
 * own limits, measured in ONE run on the same file system (a temp dir it
 * creates under --dir, default /tmp, and removes at the end):
 *
 *   limits  write + fsync of a new 64 MiB file (and, for the record, the same
 *           plus rename and directory fsync, as the sfs backend does), and a
 *           read of a freshly written, fsynced 64 MiB file after
 *           posix_fadvise(POSIX_FADV_DONTNEED) has evicted that file from
 *           the page cache (no system-wide cache drop);
 *   wt      write-through SET of 64 MiB through a worker with
 *           --l2_cache_type sfs (local client), and through one with
 *           --l2_cache_type distributed_disk (a new key each time, deleted
 *           after) -> ratios to the write limit;
 *   small   4 KiB write-through SETs from 1, 4 and 16 concurrent clients to
 *           distributed_disk (writes/s, p50, writes per fsync from its
 *           /metrics) and from 16 to sfs, beside the disk's own limit for one
 *           durable small write at a time (append 4 KiB + fdatasync);
 *   spill   GET of a spilled 64 MiB object (worker with a 160 MiB arena and
 *           --spill_directory; its spill file evicted from the page cache
 *           the same way first) -> ratio to the read limit;
 *   wb      write-back SET p50 (1 KiB, 1 MiB) against a memory-only
 *           (NONE_L2_CACHE) SET on the same worker, interleaved.
 *
 * It starts and stops its own workers by PID (SIGTERM, then SIGKILL; they
 * die with it through PR_SET_PDEATHSIG). Prints a table and writes JSON;
 * the targets are reported, never asserted (a benchmark, not a test).
 *
 *   tier_bench [--worker_bin PATH] [--dir DIR] [--reps N] [--json FILE] */
#include "bench/stats.h"
#include "common/hash.h"
#include "common/clock.h"
#include "common/net.h"
#include "ds/kv_client.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024u * 1024u)
#define BIG (64u * MIB)

static char tmpdir[256];
static pid_t workers[3];
static ds_client_options_t wopt[3]; /* how to reach each worker */
static char wsock[3][300];
static pid_t owner;

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void stop_pid(pid_t *pid, int grace_ms)
{
    if (*pid <= 0) return;
    kill(*pid, SIGTERM);
    for (int i = 0; i < grace_ms / 10; i++) {
        if (waitpid(*pid, NULL, WNOHANG) == *pid) {
            *pid = 0;
            return;
        }
        usleep(10000);
    }
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

static void cleanup(void)
{
    if (getpid() != owner) return;
    for (int i = 0; i < 3; i++)
        stop_pid(&workers[i], 3000);
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
    fprintf(stderr, "tier_bench: %s: %s: %s\n", what, ds_status_name(st), ds_last_error());
    exit(1);
}

/* Starts a worker (slot 0 or 1) and connects a local client to it. */
static ds_client_t *start_worker(int slot, const char *bin, int arena_mb, const char *name,
                                 char *const extra[])
{
    char *sock = wsock[slot], log[300], addr[64], mb[16];
    snprintf(sock, sizeof(wsock[slot]), "%s/sock-%s", tmpdir, name);
    snprintf(log, sizeof(log), "%s/worker-%s.log", tmpdir, name);
    mkdir(sock, 0700);
    int port = ds__free_tcp_port(NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    snprintf(mb, sizeof(mb), "%d", arena_mb);
    char *argv[32] = {(char *)bin, "--worker_address",  addr, "--shared_memory_size_mb",
                      mb,          "--unix_socket_dir", sock};
    int argc = 7;
    for (int i = 0; extra[i] && argc < 31; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
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
    workers[slot] = pid;
    ds_client_options_t o;
    ds_client_options_init(&o);
    ds_client_options_t *keep = &wopt[slot];
    o.host = "127.0.0.1";
    o.port = port;
    o.transport = DS_TRANSPORT_LOCAL;
    o.unix_socket_dir = sock;
    o.connect_timeout_ms = 500;
    uint64_t deadline = ds__now_ms() + 20000;
    while (ds__now_ms() < deadline) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            workers[slot] = 0;
            break;
        }
        ds_client_t *c = NULL;
        if (ds_client_connect(&o, &c) == DS_K_OK) {
            if (ds_client_health_check(c) == DS_K_OK) {
                *keep = o;
                return c;
            }
            ds_client_close(c);
        }
        usleep(50000);
    }
    fprintf(stderr, "tier_bench: worker %s did not start; its log:\n", name);
    FILE *f = fopen(log, "r");
    char line[512];
    for (int i = 0; f && i < 30 && fgets(line, sizeof(line), f); i++)
        fputs(line, stderr);
    if (f) fclose(f);
    exit(1);
}

static double med_us(uint64_t *ns, size_t n)
{
    dsb_lat_t l;
    dsb_lat_from(ns, n, &l);
    return l.p50_us;
}

static double median_d(const double *v, int n)
{
    double s[64];
    for (int i = 0; i < n; i++)
        s[i] = v[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
            double x = s[j];
            s[j] = s[j - 1];
            s[j - 1] = x;
        }
    return n ? s[n / 2] : 0;
}

static double spread_pct(const uint64_t *sorted, size_t n)
{
    /* (max - min) / median over the repetitions, after dsb_lat_from sorted them */
    return n ? 100.0 * (double)(sorted[n - 1] - sorted[0]) / (double)sorted[n / 2] : 0;
}

static double gbps(size_t bytes, double us)
{
    return us > 0 ? (double)bytes / (us * 1e3) : 0;
}

static int write_file(const char *path, const uint8_t *buf, size_t n, bool rename_dirsync,
                      int dirfd)
{
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(rename_dirsync ? tmp : path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) return -1;
    if (rename_dirsync && (rename(tmp, path) != 0 || fsync(dirfd) != 0)) return -1;
    return 0;
}

static void evict(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    fdatasync(fd); /* clean pages only can be dropped */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static int read_file(const char *path, uint8_t *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < n) {
        ssize_t r = read(fd, buf + off, n - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)r;
    }
    close(fd);
    return 0;
}

static bool file_exists(const char *dir, const char *name)
{
    char p[400];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static bool has_tmp(const char *dir)
{
    /* the sfs writer's temporaries start with ".tmp-" */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return false;
    DIR *d = fdopendir(fd);
    bool any = false;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (!strncmp(e->d_name, ".tmp-", 5)) any = true;
    if (d) closedir(d);
    return any;
}

/* SET with retries for the transient refusals of a tier that is making room
 * (K_OUT_OF_MEMORY while a spill runs, K_WRITE_BACK_QUEUE_FULL while the
 * queue drains); the attempts are counted into *retries. */
static ds_status_t set_retry(ds_client_t *c, const char *key, const void *v, size_t n,
                             ds_write_mode_t mode, int *retries)
{
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = mode;
    ds_status_t st = DS_K_OK;
    for (int i = 0; i < 20000; i++) {
        st = ds_kv_set(c, key, v, n, &p);
        if (st != DS_K_OUT_OF_MEMORY && st != DS_K_WRITE_BACK_QUEUE_FULL) return st;
        if (retries) (*retries)++;
        usleep(2000);
    }
    return st;
}

/* ---- distributed_disk: small write-through writes from concurrent clients ---- */

/* One figure from a worker's /metrics endpoint (-1 when unreadable). */
static double metric(int port, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    if (write(fd, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1) {
        close(fd);
        return -1;
    }
    static char buf[1 << 17];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    buf[n] = '\0';
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    char *p = strstr(buf, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

#define SMALL 4096u
#define SMALL_TOTAL 960 /* writes per run, split over the writers */

typedef struct {
    int id, n, rep;
    ds_client_t *c;
    pthread_barrier_t *go;
    const uint8_t *val;
    uint64_t *lat;
    ds_status_t st;
} small_t;

static void *small_writer(void *arg)
{
    small_t *w = arg;
    ds_client_t *c = w->c;
    pthread_barrier_wait(w->go);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = DS_WRITE_THROUGH_L2_CACHE;
    for (int i = 0; i < w->n; i++) {
        char k[64];
        snprintf(k, sizeof(k), "s%d-%d-%d", w->rep, w->id, i);
        uint64_t t0 = ds__now_ns();
        w->st = ds_kv_set(c, k, w->val, SMALL, &p);
        w->lat[i] = ds__now_ns() - t0;
        if (w->st != DS_K_OK) break;
    }
    return NULL;
}

/* conc clients (connected first, then released together) write SMALL_TOTAL
 * 4 KiB values through to L2: writes per second; *p50_us the median answer
 * time. */
static double small_run(int slot, int conc, int rep, const uint8_t *val, uint64_t *lat,
                        double *p50_us)
{
    pthread_t th[16];
    small_t w[16];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)conc + 1);
    for (int i = 0; i < conc; i++) {
        ds_client_t *c = NULL;
        ds_status_t st = ds_client_connect(&wopt[slot], &c);
        if (st != DS_K_OK) die("connect", st);
        w[i] = (small_t){
            i, SMALL_TOTAL / conc, rep, c, &go, val, lat + i * (SMALL_TOTAL / conc), DS_K_OK};
        if (pthread_create(&th[i], NULL, small_writer, &w[i]) != 0) die("thread", DS_K_OK);
    }
    pthread_barrier_wait(&go);
    uint64_t t0 = ds__now_ns();
    for (int i = 0; i < conc; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(ds__now_ns() - t0) / 1e9;
    pthread_barrier_destroy(&go);
    for (int i = 0; i < conc; i++) {
        ds_client_close(w[i].c);
        if (w[i].st != DS_K_OK) die("small write-through set", w[i].st);
    }
    *p50_us = med_us(lat, SMALL_TOTAL);
    return SMALL_TOTAL / secs;
}

/* The disk's own limit for one durable small write at a time: append 4 KiB
 * to a file and fdatasync, n times. */
static double disk_small(const char *path, const uint8_t *val, int n, uint64_t *lat, double *p50_us)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return 0;
    uint64_t t0 = ds__now_ns();
    for (int i = 0; i < n; i++) {
        uint64_t t1 = ds__now_ns();
        if (write(fd, val, SMALL) != (ssize_t)SMALL || fdatasync(fd) != 0) {
            close(fd);
            return 0;
        }
        lat[i] = ds__now_ns() - t1;
    }
    double secs = (double)(ds__now_ns() - t0) / 1e9;
    close(fd);
    unlink(path);
    *p50_us = med_us(lat, (size_t)n);
    return n / secs;
}

#define NT 6 /* targets */

typedef struct {
    const char *name;
    double value, target;
    bool higher;
    char limit[96];
} target_t;

int main(int argc, char **argv)
{
    const char *bin = "build/src/worker/datasystem_worker", *base = "/tmp",
               *json = "bench/results/tier_bench.json";
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--worker_bin") && i + 1 < argc)
            bin = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            base = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: tier_bench [--worker_bin PATH] [--dir DIR] [--reps N] "
                            "[--json FILE]\n");
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    if (reps > 50) reps = 50;
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "tier_bench: no worker binary at %s (--worker_bin)\n", bin);
        return 2;
    }
    owner = getpid();
    snprintf(tmpdir, sizeof(tmpdir), "%s/tier-bench-XXXXXX", base);
    if (mkdtemp(tmpdir) == NULL) {
        perror(tmpdir);
        return 1;
    }
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    uint8_t *val = malloc(BIG), *dst = malloc(BIG);
    if (!val || !dst) return 1;
    for (size_t i = 0; i < BIG; i++)
        val[i] = (uint8_t)(i * 2654435761u >> 13);
    memset(dst, 0, BIG);
    uint64_t *ns = calloc(4096, sizeof(*ns));

    printf("tier_bench: %d repetitions, temp dir %s (the /tmp file system)\n\n", reps, tmpdir);
    printf("%-44s %10s %11s %11s %9s\n", "row", "bytes", "p50_us", "spread_%", "GB/s");
#define ROW(name, bytes, us, spr)                                                                  \
    printf("%-44s %10zu %11.1f %11.1f %9.3f\n", name, (size_t)(bytes), us, spr, gbps(bytes, us))

    /* Workers first: the repetitions below interleave each limit with the
     * tier row it is compared with, so both see the same load on a shared
     * machine. */
    char disk[300], path[400], l2dir[300], spdir[300];
    snprintf(disk, sizeof(disk), "%s/disk", tmpdir);
    snprintf(l2dir, sizeof(l2dir), "%s/l2", tmpdir);
    snprintf(spdir, sizeof(spdir), "%s/spill", tmpdir);
    mkdir(disk, 0700);
    int dirfd = open(disk, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(path, sizeof(path), "%s/f", disk);
    char *l2flags[] = {"--l2_cache_type", "sfs", "--sfs_path", l2dir, NULL};
    ds_client_t *a = start_worker(0, bin, 1024, "l2", l2flags);
    /* 160 MiB with arena watermarks of 0.5 / 0.3: past two 64 MiB objects
     * (80%) background spilling takes use down to 30%, so two of the three
     * are spilled and the GET of one finds room without spilling anything
     * itself: the row measures the read back, not a swap. */
    char *spflags[] = {"--spill_directory",
                       spdir,
                       "--eviction_high_watermark_ratio",
                       "0.5",
                       "--eviction_low_watermark_ratio",
                       "0.3",
                       NULL};
    ds_client_t *b = start_worker(1, bin, 160, "spill", spflags);
    /* distributed_disk, with Yuanrong's group-commit defaults (1000 ms, 32 MiB) */
    char dddir[300], mport[16];
    snprintf(dddir, sizeof(dddir), "%s/dd", tmpdir);
    int metrics_port = ds__free_tcp_port(NULL);
    snprintf(mport, sizeof(mport), "%d", metrics_port);
    char *ddflags[] = {"--l2_cache_type",
                       "distributed_disk",
                       "--distributed_disk_path",
                       dddir,
                       "--metrics_port",
                       mport,
                       NULL};
    ds_client_t *dd = start_worker(2, bin, 1024, "dd", ddflags);

    uint64_t *nw = calloc(64, 8), *nwt = calloc(64, 8), *nwr = calloc(64, 8), *nr = calloc(64, 8),
             *nsp = calloc(64, 8), *nwd = calloc(64, 8);
    int retries = 0, sp_retries = 0;
    ds_status_t st;
    for (int r = 0; r <= reps; r++) { /* the first is a warm-up */
        int i = r - 1 < 0 ? 63 : r - 1;
        /* limit: each file replaces the previous one (unlinked), as an sfs
         * write of the same key replaces its file */
        uint64_t t0 = ds__now_ns();
        if (write_file(path, val, BIG, false, dirfd) != 0) {
            perror("disk write");
            return 1;
        }
        nw[i] = ds__now_ns() - t0;
        unlink(path);
        t0 = ds__now_ns();
        if ((st = set_retry(a, "wt64", val, BIG, DS_WRITE_THROUGH_L2_CACHE, &retries)) != DS_K_OK)
            die("write-through set", st);
        nwt[i] = ds__now_ns() - t0;
        /* distributed_disk: a new key each time, deleted after (a tombstone) */
        char kd[32];
        snprintf(kd, sizeof(kd), "wtd64-%d", r);
        t0 = ds__now_ns();
        if ((st = set_retry(dd, kd, val, BIG, DS_WRITE_THROUGH_L2_CACHE, &retries)) != DS_K_OK)
            die("write-through set (distributed_disk)", st);
        nwd[i] = ds__now_ns() - t0;
        const char *kdl[1] = {kd};
        ds_kv_del(dd, 1, kdl, NULL);
        t0 = ds__now_ns();
        if (write_file(path, val, BIG, true, dirfd) != 0) {
            perror("disk write+rename");
            return 1;
        }
        nwr[i] = ds__now_ns() - t0;
        /* limit: the file just written and fsynced, evicted from the page cache */
        evict(path);
        t0 = ds__now_ns();
        if (read_file(path, dst, BIG) != 0) {
            perror("disk read");
            return 1;
        }
        nr[i] = ds__now_ns() - t0;
        unlink(path);

        /* spill: fill so that two objects are spilled, GET one of them */
        char k[3][32];
        for (int j = 0; j < 3; j++) {
            snprintf(k[j], sizeof(k[j]), "sp-%d-%d", r, j);
            if ((st = set_retry(b, k[j], val, BIG, DS_WRITE_NONE_L2_CACHE, &sp_retries)) != DS_K_OK)
                die("spill fill set", st);
        }
        /* wait (bounded) until a spill copy is on disk and none is being written */
        int pick = -1;
        for (int w = 0; w < 1000 && pick < 0; w++) {
            for (int j = 0; j < 2; j++)
                if (file_exists(spdir, k[j]) && !has_tmp(spdir)) pick = j;
            if (pick < 0) usleep(10000);
        }
        if (pick < 0) {
            fprintf(stderr, "tier_bench: nothing was spilled in 10 s\n");
            return 1;
        }
        usleep(50000); /* the copy's completion reaches the worker's loop */
        char p[400];
        snprintf(p, sizeof(p), "%s/%s", spdir, k[pick]);
        evict(p);
        size_t len = 0;
        t0 = ds__now_ns();
        if ((st = ds_kv_get_into(b, k[pick], 0, dst, BIG, &len)) != DS_K_OK) die("spill get", st);
        nsp[i] = ds__now_ns() - t0;
        if (len != BIG || memcmp(dst, val, BIG) != 0) {
            fprintf(stderr, "tier_bench: spilled object came back wrong\n");
            return 1;
        }
        if (file_exists(spdir, k[pick]))
            fprintf(stderr, "tier_bench: note: %s still has a spill copy after its GET\n", k[pick]);
        const char *kk[] = {k[0], k[1], k[2]};
        ds_kv_del(b, 3, kk, NULL);
        for (int w = 0; w < 500 && (file_exists(spdir, k[0]) || file_exists(spdir, k[1])); w++)
            usleep(10000);
    }
    close(dirfd);
    ds_client_close(b);
    stop_pid(&workers[1], 3000);
    size_t n = (size_t)reps;
    double wr_us = med_us(nw, n), wr_spr = spread_pct(nw, n);
    double wt_us = med_us(nwt, n), wt_spr = spread_pct(nwt, n);
    double wd_us = med_us(nwd, n), wd_spr = spread_pct(nwd, n);
    double wrr_us = med_us(nwr, n), wrr_spr = spread_pct(nwr, n);
    double rd_us = med_us(nr, n), rd_spr = spread_pct(nr, n);
    double sp_us = med_us(nsp, n), sp_spr = spread_pct(nsp, n);
    ROW("disk write+fsync (limit)", BIG, wr_us, wr_spr);
    ROW("write-through set (sfs)", BIG, wt_us, wt_spr);
    ROW("write-through set (distributed_disk)", BIG, wd_us, wd_spr);
    ROW("disk write+fsync+rename+dir fsync", BIG, wrr_us, wrr_spr);
    ROW("disk read, evicted (limit)", BIG, rd_us, rd_spr);
    ROW("spill get (copy evicted from page cache)", BIG, sp_us, sp_spr);

    volatile uint64_t sink = 0;
    for (int r = 0; r <= reps; r++) {
        uint64_t t0 = ds__now_ns();
        ds_sum4_t s4; /* the sfs value checksum (format 2) */
        ds__sum4_init(&s4);
        ds__sum4_update(&s4, val, BIG);
        sink ^= ds__sum4_final(&s4);
        if (r > 0) ns[r - 1] = ds__now_ns() - t0;
    }
    double sum_us = med_us(ns, (size_t)reps), sum_spr = spread_pct(ns, (size_t)reps);
    ROW("sfs value checksum pass (cpu, for the record)", BIG, sum_us, sum_spr);
    (void)sink;

    for (int r = 0; r <= reps; r++) {
        uint64_t t0 = ds__now_ns();
        if ((st = set_retry(a, "mem64", val, BIG, DS_WRITE_NONE_L2_CACHE, NULL)) != DS_K_OK)
            die("memory-only set", st);
        if (r > 0) ns[r - 1] = ds__now_ns() - t0;
    }
    double m64_us = med_us(ns, (size_t)reps), m64_spr = spread_pct(ns, (size_t)reps);
    ROW("memory-only set (same worker)", BIG, m64_us, m64_spr);
    const char *k2[] = {"wt64", "mem64"};
    ds_kv_del(a, 2, k2, NULL);

    /* Small write-through writes, 1, 4 and 16 clients at once: group commit
     * lets concurrent writers share an fsync, so distributed_disk passes the
     * disk's one-durable-write-at-a-time limit (interleaved with it; sfs,
     * with two fsyncs and a rename per write, beside it). */
    const int conc[3] = {1, 4, 16};
    int sreps = reps < 5 ? reps : 5;
    uint64_t *slat = calloc(SMALL_TOTAL, sizeof(*slat));
    double lim_ops[64], lim_p50[64], dd_ops[3][64], dd_p50[3][64], dd_wpf[3][64], sfs_ops[64],
        sfs_p50[64];
    for (int r = 0; r < sreps; r++) {
        lim_ops[r] = disk_small(path, val, SMALL_TOTAL / 4, slat, &lim_p50[r]);
        for (int c = 0; c < 3; c++) {
            double f0 = metric(metrics_port, "ds_worker_l2_fsyncs_total");
            dd_ops[c][r] = small_run(2, conc[c], r * 3 + c, val, slat, &dd_p50[c][r]);
            double f1 = metric(metrics_port, "ds_worker_l2_fsyncs_total");
            dd_wpf[c][r] = f1 > f0 ? SMALL_TOTAL / (f1 - f0) : 0;
        }
        sfs_ops[r] = small_run(0, 16, r, val, slat, &sfs_p50[r]);
    }
    free(slat);
    double s_lim = median_d(lim_ops, sreps), s_lim_p50 = median_d(lim_p50, sreps);
    double s_dd[3], s_dd_p50[3], s_dd_wpf[3], s_sfs = median_d(sfs_ops, sreps),
                                              s_sfs_p50 = median_d(sfs_p50, sreps);
    printf("\n%-44s %10s %11s %11s %9s\n", "4 KiB durable writes (median of reps)", "writes/s",
           "p50_us", "per_fsync", "x_limit");
    printf("%-44s %10.0f %11.1f %11s %9s\n", "disk append 4 KiB + fdatasync (limit)", s_lim,
           s_lim_p50, "1", "1.00");
    for (int c = 0; c < 3; c++) {
        s_dd[c] = median_d(dd_ops[c], sreps);
        s_dd_p50[c] = median_d(dd_p50[c], sreps);
        s_dd_wpf[c] = median_d(dd_wpf[c], sreps);
        char name[64];
        snprintf(name, sizeof(name), "write-through distributed_disk, %d client%s", conc[c],
                 conc[c] > 1 ? "s" : "");
        printf("%-44s %10.0f %11.1f %11.1f %9.2f\n", name, s_dd[c], s_dd_p50[c], s_dd_wpf[c],
               s_dd[c] / s_lim);
    }
    printf("%-44s %10.0f %11.1f %11s %9.2f\n", "write-through sfs, 16 clients", s_sfs, s_sfs_p50,
           "0.5", s_sfs / s_lim);
    ds_client_close(dd);
    stop_pid(&workers[2], 3000);

    /* write-back vs memory-only, interleaved (alternating which goes first)
     * so both see the same background I/O; a write-back refused with a full
     * queue is retried, untimed, and counted. */
    const size_t wsz[2] = {1024, MIB};
    const int wn[2] = {2000, 200};
    double wb_us[2], mem_us[2], wb_p99[2], mem_p99[2];
    int wb_full[2] = {0, 0};
    uint64_t *ns2 = calloc(4096, sizeof(*ns2));
    for (int s = 0; s < 2; s++) {
        char kwb[32], kmem[32];
        snprintf(kwb, sizeof(kwb), "wb-%zu", wsz[s]);
        snprintf(kmem, sizeof(kmem), "mem-%zu", wsz[s]);
        ds_set_param_t pwb = DS_SET_PARAM_INIT, pmem = DS_SET_PARAM_INIT;
        pwb.write_mode = DS_WRITE_BACK_L2_CACHE;
        set_retry(a, kwb, val, wsz[s], DS_WRITE_BACK_L2_CACHE, NULL);
        set_retry(a, kmem, val, wsz[s], DS_WRITE_NONE_L2_CACHE, NULL);
        for (int i = 0; i < wn[s]; i++) {
            for (int h = 0; h < 2; h++) {
                bool wb = (h == 0) == (i % 2 == 0);
                for (int tries = 0;; tries++) {
                    uint64_t t0 = ds__now_ns();
                    st = ds_kv_set(a, wb ? kwb : kmem, val, wsz[s], wb ? &pwb : &pmem);
                    uint64_t dt = ds__now_ns() - t0;
                    if (st == DS_K_OK) {
                        (wb ? ns : ns2)[i] = dt;
                        break;
                    }
                    if (st != DS_K_WRITE_BACK_QUEUE_FULL || tries > 20000) die("set", st);
                    wb_full[s]++;
                    usleep(1000);
                }
            }
        }
        dsb_lat_t l;
        dsb_lat_from(ns, (size_t)wn[s], &l);
        wb_us[s] = l.p50_us;
        wb_p99[s] = l.p99_us;
        dsb_lat_from(ns2, (size_t)wn[s], &l);
        mem_us[s] = l.p50_us;
        mem_p99[s] = l.p99_us;
        char name[64];
        snprintf(name, sizeof(name), "write-back set p50 (p99 %.0f us)", wb_p99[s]);
        ROW(name, wsz[s], wb_us[s], 0.0);
        snprintf(name, sizeof(name), "memory-only set p50 (p99 %.0f us)", mem_p99[s]);
        ROW(name, wsz[s], mem_us[s], 0.0);
        const char *kk[] = {kwb, kmem};
        ds_kv_del(a, 2, kk, NULL);
    }
    ds_client_close(a);
    stop_pid(&workers[0], 3000);
    free(nw);
    free(nwt);
    free(nwr);
    free(nr);
    free(nsp);
    free(nwd);

    /* ---- targets ---- */
    double wr_g = gbps(BIG, wr_us), rd_g = gbps(BIG, rd_us);
    target_t t[NT] = {
        {"write-through set 64 MiB / disk write+fsync", gbps(BIG, wt_us) / wr_g, 0.7, true, ""},
        {"write-through 64 MiB (distributed_disk) / disk", gbps(BIG, wd_us) / wr_g, 0.7, true, ""},
        {"dd 4 KiB write-through x16 / disk 4 KiB fsync", s_dd[2] / s_lim, 2.0, true, ""},
        {"spill get 64 MiB / disk read (evicted)", gbps(BIG, sp_us) / rd_g, 0.7, true, ""},
        {"write-back set 1 KiB p50 / memory-only set", wb_us[0] / mem_us[0], 1.2, false, ""},
        {"write-back set 1 MiB p50 / memory-only set", wb_us[1] / mem_us[1], 1.2, false, ""},
    };
    snprintf(t[0].limit, sizeof(t[0].limit), "%.3f GB/s", wr_g);
    snprintf(t[1].limit, sizeof(t[1].limit), "%.3f GB/s", wr_g);
    snprintf(t[2].limit, sizeof(t[2].limit), "%.0f writes/s", s_lim);
    snprintf(t[3].limit, sizeof(t[3].limit), "%.3f GB/s", rd_g);
    snprintf(t[4].limit, sizeof(t[4].limit), "%.1f us", mem_us[0]);
    snprintf(t[5].limit, sizeof(t[5].limit), "%.1f us", mem_us[1]);
    printf("\n%-46s %9s %9s %14s  %s\n", "target", "measured", "target", "limit (same run)", "met");
    int met = 0;
    for (int i = 0; i < NT; i++) {
        bool ok = t[i].higher ? t[i].value >= t[i].target : t[i].value <= t[i].target;
        met += ok;
        printf("%-46s %9.3f %s%7.2f %14s  %s\n", t[i].name, t[i].value,
               t[i].higher ? ">=" : "<=", t[i].target, t[i].limit, ok ? "yes" : "NO");
    }
    printf("\nretries: write-through %d, spill fill (out of memory while spilling) %d, "
           "write-back queue full 1 KiB %d / 1 MiB %d\n",
           retries, sp_retries, wb_full[0], wb_full[1]);

    FILE *f = fopen(json, "w");
    if (f == NULL) {
        perror(json);
        return 1;
    }
    fprintf(f,
            "{\n  \"reps\": %d,\n  \"dir\": \"%s\",\n"
            "  \"limits\": {\"disk_write_fsync_us\": %.1f, \"disk_write_fsync_gbps\": %.4f, "
            "\"disk_write_fsync_spread_pct\": %.1f, \"disk_read_evicted_us\": %.1f, "
            "\"disk_read_evicted_gbps\": %.4f, \"disk_read_spread_pct\": %.1f, "
            "\"disk_write_fsync_rename_dirsync_us\": %.1f, \"disk_write_rename_spread_pct\": "
            "%.1f, \"sfs_checksum_64m_us\": %.1f},\n",
            reps, base, wr_us, wr_g, wr_spr, rd_us, rd_g, rd_spr, wrr_us, wrr_spr, sum_us);
    fprintf(f,
            "  \"rows\": {\"write_through_set_64m_us\": %.1f, \"write_through_spread_pct\": %.1f, "
            "\"memory_set_64m_us\": %.1f, \"memory_set_64m_spread_pct\": %.1f, "
            "\"spill_get_64m_us\": %.1f, \"spill_get_spread_pct\": %.1f, "
            "\"write_back_set_1k_p50_us\": %.2f, \"memory_set_1k_p50_us\": %.2f, "
            "\"write_back_set_1m_p50_us\": %.2f, \"memory_set_1m_p50_us\": %.2f, "
            "\"write_back_set_1k_p99_us\": %.2f, \"memory_set_1k_p99_us\": %.2f, "
            "\"write_back_set_1m_p99_us\": %.2f, \"memory_set_1m_p99_us\": %.2f, "
            "\"write_back_queue_full_1k\": %d, \"write_back_queue_full_1m\": %d, "
            "\"dd_write_through_set_64m_us\": %.1f, \"dd_write_through_spread_pct\": %.1f},\n",
            wt_us, wt_spr, m64_us, m64_spr, sp_us, sp_spr, wb_us[0], mem_us[0], wb_us[1], mem_us[1],
            wb_p99[0], mem_p99[0], wb_p99[1], mem_p99[1], wb_full[0], wb_full[1], wd_us, wd_spr);
    fprintf(f,
            "  \"small_write_through_4k\": {\"reps\": %d, \"writes_per_run\": %d, "
            "\"disk_append_fdatasync_per_s\": %.0f, \"disk_append_fdatasync_p50_us\": %.1f, "
            "\"sfs_16_clients_per_s\": %.0f, \"sfs_16_clients_p50_us\": %.1f, \"dd\": [",
            sreps, SMALL_TOTAL, s_lim, s_lim_p50, s_sfs, s_sfs_p50);
    for (int c = 0; c < 3; c++)
        fprintf(f,
                "%s{\"clients\": %d, \"writes_per_s\": %.0f, \"p50_us\": %.1f, "
                "\"writes_per_fsync\": %.2f}",
                c ? ", " : "", conc[c], s_dd[c], s_dd_p50[c], s_dd_wpf[c]);
    fprintf(f, "]},\n  \"targets\": [\n");
    for (int i = 0; i < NT; i++) {
        bool ok = t[i].higher ? t[i].value >= t[i].target : t[i].value <= t[i].target;
        fprintf(
            f,
            "    {\"name\": \"%s\", \"measured\": %.4f, \"target\": %.2f, \"higher_is_better\": "
            "%s, \"limit\": \"%s\", \"met\": %s}%s\n",
            t[i].name, t[i].value, t[i].target, t[i].higher ? "true" : "false", t[i].limit,
            ok ? "true" : "false", i < NT - 1 ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("%d of %d targets met; results in %s\n", met, NT, json);
    free(ns);
    free(ns2);
    free(val);
    free(dst);
    return 0;
}
