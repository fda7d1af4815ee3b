/* The processes the side-by-side harness starts: a datasystem_worker and a
 * redis-server on free loopback ports, each waited for until it answers and
 * always stopped by its PID (SIGTERM, then SIGKILL), also when the harness
 * exits early or is interrupted; both die with the harness through
 * PR_SET_PDEATHSIG. Also the readings taken from outside a process: fields of
 * /proc/<pid>/status and the worker's STATS through `dscli status`. */
#include "bench/side_by_side/sbs.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/procstat.h"
#include "ds/kv_client.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS 16
static pid_t procs[MAX_PROCS];
/* The harness process. Children forked for measurements (bench/limits.c,
 * the scale phase) inherit the table, the atexit hook and the signal
 * handlers; only the harness itself may act on the table. */
static pid_t owner;

void sbs_proc_track(pid_t pid, bool add)
{
    if (owner == 0) owner = getpid();
    for (int i = 0; i < MAX_PROCS; i++) {
        if (add && procs[i] == 0) {
            procs[i] = pid;
            return;
        }
        if (!add && procs[i] == pid) {
            procs[i] = 0;
            return;
        }
    }
}

void sbs_proc_kill_all(void)
{
    if (owner != getpid()) return;
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] > 0) {
            kill(procs[i], SIGKILL);
            waitpid(procs[i], NULL, 0);
            procs[i] = 0;
        }
}

static pid_t spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, 0);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    sbs_proc_track(pid, true);
    return pid;
}

static void print_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    char line[512];
    fprintf(stderr, "---- %s ----\n", path);
    for (int i = 0; i < 40 && fgets(line, sizeof(line), f); i++)
        fputs(line, stderr);
    fclose(f);
}

/* Polls ready(p) every 20 ms until it says yes, the process exits, or
 * timeout_ms passes. */
static int wait_ready(sbs_proc_t *p, bool (*ready)(const sbs_proc_t *), int timeout_ms,
                      const char *what)
{
    uint64_t deadline = ds__now_ms() + (uint64_t)timeout_ms;
    while (ds__now_ms() < deadline) {
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            sbs_proc_track(p->pid, false);
            p->pid = 0;
            fprintf(stderr, "sbs: %s exited during start\n", what);
            print_log(p->log);
            return -1;
        }
        if (ready(p)) return 0;
        usleep(20000);
    }
    fprintf(stderr, "sbs: %s did not answer within %d ms\n", what, timeout_ms);
    print_log(p->log);
    sbs_proc_stop(p);
    return -1;
}

static bool worker_ready(const sbs_proc_t *w)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = w->host;
    o.port = w->port;
    o.transport = DS_TRANSPORT_TCP;
    o.connect_timeout_ms = 500;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) return false;
    ds_status_t st = ds_client_health_check(c);
    ds_client_close(c);
    return st == DS_K_OK;
}

int sbs_worker_start(const sbs_opts_t *o, sbs_proc_t *w)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->host, sizeof(w->host), "127.0.0.1");
    snprintf(w->log, sizeof(w->log), "%s/worker.log", o->tmp_dir);
    char bin[512], addr[64], mb[16], poll[16];
    snprintf(bin, sizeof(bin), "%s/src/worker/datasystem_worker", o->build_dir);
    snprintf(mb, sizeof(mb), "%d", o->arena_mb);
    snprintf(poll, sizeof(poll), "%d", o->busy_poll_us);
    for (int attempt = 0; attempt < 3; attempt++) {
        w->port = ds__free_tcp_port(NULL);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", w->port);
        /* The default Unix socket directory: a connector built from a spec
         * (host and port only) finds the socket there, as every client does. */
        char *argv[] = {bin,    "--worker_address",
                        addr,   "--shared_memory_size_mb",
                        mb,     "--log_level",
                        "warn", "--busy_poll_us",
                        poll,   NULL};
        if (o->busy_poll_us < 0) argv[7] = NULL; /* the worker's default */
        w->pid = spawn(argv, w->log);
        if (w->pid < 0) return -1;
        if (wait_ready(w, worker_ready, 60000, "datasystem_worker") == 0) return 0;
    }
    return -1;
}

static bool redis_ready(const sbs_proc_t *r)
{
    struct timeval tv = {0, 500000};
    redisContext *c = redisConnectUnixWithTimeout(r->unix_path, tv);
    bool ok = false;
    if (c != NULL && !c->err) {
        redisReply *rep = redisCommand(c, "PING");
        ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
        if (rep) freeReplyObject(rep);
    }
    if (c) redisFree(c);
    return ok;
}

int sbs_redis_start(const sbs_opts_t *o, sbs_proc_t *r)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->host, sizeof(r->host), "127.0.0.1");
    snprintf(r->log, sizeof(r->log), "%s/redis.log", o->tmp_dir);
    snprintf(r->unix_path, sizeof(r->unix_path), "%s/redis.sock", o->tmp_dir);
    char port[16];
    for (int attempt = 0; attempt < 3; attempt++) {
        r->port = ds__free_tcp_port(NULL);
        snprintf(port, sizeof(port), "%d", r->port);
        /* No persistence, loopback only, a private Unix socket, and limits
         * large enough for 256 MiB values and 64 clients. */
        char *argv[] = {(char *)o->redis_bin,
                        "--port",
                        port,
                        "--bind",
                        "127.0.0.1",
                        "--unixsocket",
                        r->unix_path,
                        "--unixsocketperm",
                        "700",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--dir",
                        (char *)o->tmp_dir,
                        "--daemonize",
                        "no",
                        "--protected-mode",
                        "yes",
                        "--maxclients",
                        "1000",
                        "--proto-max-bulk-len",
                        "512mb",
                        "--client-query-buffer-limit",
                        "1gb",
                        "--loglevel",
                        "warning",
                        NULL};
        r->pid = spawn(argv, r->log);
        if (r->pid < 0) return -1;
        if (wait_ready(r, redis_ready, 20000, "redis-server") == 0) return 0;
    }
    return -1;
}

pid_t sbs_wait_exit(pid_t pid, uint64_t deadline_ms, int *st)
{
    /* A pidfd turns readable when the child exits: poll sleeps until then. */
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    pid_t w;
    uint64_t now;
    while ((w = waitpid(pid, st, WNOHANG)) == 0 && (now = ds__now_ms()) < deadline_ms) {
        uint64_t left = deadline_ms - now;
        if (fd < 0) {
            usleep(5000); /* no pidfds (before Linux 5.3): look now and then */
            continue;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 && errno != EINTR) break;
    }
    if (fd >= 0) close(fd);
    return w;
}

void sbs_proc_stop(sbs_proc_t *p)
{
    if (p->pid <= 0) return;
    kill(p->pid, SIGTERM);
    bool gone = sbs_wait_exit(p->pid, ds__now_ms() + 10000, NULL) == p->pid;
    if (!gone) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
    }
    sbs_proc_track(p->pid, false);
    p->pid = 0;
}

double sbs_proc_status_bytes(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    size_t fl = strlen(field);
    double v = -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
            unsigned long long kb;
            if (sscanf(line + fl + 1, "%llu", &kb) == 1) v = (double)kb * 1024.0;
            break;
        }
    }
    fclose(f);
    return v;
}

int sbs_run_capture(char *const argv[], int timeout_s, char **out)
{
    *out = NULL;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    sbs_proc_track(pid, true);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    uint64_t deadline = ds__now_ms() + (uint64_t)timeout_s * 1000;
    bool eof = false;
    /* Sleeps in poll until the child writes or the deadline: a parent that
     * woke every few milliseconds to look would be a third thread wanting a
     * CPU on a two-vCPU machine, and the child's measured round trips would
     * pay for it (polling sides back off when another thread wants their
     * CPU: common/spin.h). */
    uint64_t now;
    while (buf && !eof && (now = ds__now_ms()) < deadline) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) break;
            buf = nb;
            cap *= 2;
        }
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        uint64_t left = deadline - now;
        int ready = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        ssize_t r = read(fds[0], buf + len, cap - len - 1);
        if (r > 0)
            len += (size_t)r;
        else if (r == 0)
            eof = true;
        else if (errno != EAGAIN && errno != EINTR)
            break;
    }
    close(fds[0]);
    if (!eof) kill(pid, SIGKILL);
    int st = -1;
    waitpid(pid, &st, 0);
    sbs_proc_track(pid, false);
    if (buf == NULL) return -1;
    buf[len] = '\0';
    *out = buf;
    if (!eof) {
        fprintf(stderr, "sbs: %s ran past %d s and was killed\n", argv[0], timeout_s);
        return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

double sbs_worker_stat(const sbs_opts_t *o, const sbs_proc_t *w, const char *path)
{
    char bin[512], addr[64];
    snprintf(bin, sizeof(bin), "%s/src/cli/dscli", o->build_dir);
    snprintf(addr, sizeof(addr), "%s:%d", w->host, w->port);
    char *argv[] = {bin, "status", "--worker_address", addr, NULL};
    char *text = NULL;
    int rc = sbs_run_capture(argv, 20, &text);
    double v = -1;
    cJSON *root = rc == 0 && text ? cJSON_Parse(text) : NULL;
    cJSON *node = root;
    char p[128];
    snprintf(p, sizeof(p), "%s", path);
    char *save = NULL;
    for (char *tok = strtok_r(p, ".", &save); node && tok; tok = strtok_r(NULL, ".", &save))
        node = cJSON_GetObjectItemCaseSensitive(node, tok);
    if (node && cJSON_IsNumber(node)) v = node->valuedouble;
    cJSON_Delete(root);
    free(text);
    return v;
}

double sbs_proc_faults(pid_t pid)
{
    ds_proc_stat_t s;
    if (ds__proc_stat(pid, &s) != 0) return 0;
    return (double)(s.minflt + s.majflt);
}

double sbs_proc_cpu_us(pid_t pid)
{
    char path[64];
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/thread-self/schedstat");
    FILE *f = fopen(path, "r");
    if (f == NULL) return NAN;
    unsigned long long run_ns = 0;
    int n = fscanf(f, "%llu", &run_ns);
    fclose(f);
    return n == 1 ? (double)run_ns / 1e3 : NAN;
}

double sbs_proc_cpu_all_us(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) return NAN;
    double sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[300];
        snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
        FILE *f = fopen(p, "r");
        unsigned long long ns = 0;
        if (f && fscanf(f, "%llu", &ns) == 1) sum += (double)ns / 1e3;
        if (f) fclose(f);
    }
    closedir(d);
    return sum;
}
