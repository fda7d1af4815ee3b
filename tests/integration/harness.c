/* Real-worker test harness (see harness.h). */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DS_BUILD_DIR_DEFAULT
#define DS_BUILD_DIR_DEFAULT "build"
#endif

#define MAX_STARTED 32
static pid_t started[MAX_STARTED];
static bool atexit_set;

static void kill_all(void)
{
    for (int i = 0; i < MAX_STARTED; i++)
        if (started[i] > 0) {
            kill(started[i], SIGKILL);
            waitpid(started[i], NULL, 0);
            started[i] = 0;
        }
}

static void track(pid_t pid, bool add)
{
    if (!atexit_set) {
        atexit(kill_all);
        atexit_set = true;
    }
    for (int i = 0; i < MAX_STARTED; i++) {
        if (add && started[i] == 0) {
            started[i] = pid;
            return;
        }
        if (!add && started[i] == pid) {
            started[i] = 0;
            return;
        }
    }
}

const char *dst_build_path(const char *rel, char *out, size_t cap)
{
    const char *dir = getenv("DS_BUILD_DIR");
    snprintf(out, cap, "%s/%s", dir && *dir ? dir : DS_BUILD_DIR_DEFAULT, rel);
    return out;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(sa.sin_port);
}

bool dst_worker_external(const dst_worker_t *w)
{
    return w->pid == 0;
}

static void print_log(const dst_worker_t *w)
{
    FILE *f = fopen(w->logpath, "r");
    if (f == NULL) return;
    char line[512];
    fprintf(stderr, "---- worker log %s ----\n", w->logpath);
    while (fgets(line, sizeof(line), f)) fputs(line, stderr);
    fclose(f);
}

static int spawn(dst_worker_t *w)
{
    char bin[512], addr[128], mb[32];
    dst_build_path("src/worker/datasystem_worker", bin, sizeof(bin));
    snprintf(addr, sizeof(addr), "%s:%d", w->host, w->port);
    snprintf(mb, sizeof(mb), "%d", w->arena_mb);
    char *argv[64] = {bin, "--worker_address", addr, "--shared_memory_size_mb", mb,
                      "--unix_socket_dir", w->sockdir};
    int argc = 7;
    char extra[512];
    snprintf(extra, sizeof(extra), "%s", w->extra);
    for (char *tok = strtok(extra, " "); tok && argc < 62; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(w->logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(bin, argv);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    w->pid = pid;
    track(pid, true);
    uint64_t deadline = ds__now_ms() + 20000;
    while (ds__now_ms() < deadline) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            track(pid, false);
            w->pid = 0;
            fprintf(stderr, "worker exited during start (status %d)\n", status);
            print_log(w);
            return -1;
        }
        ds_client_options_t o;
        ds_client_options_init(&o);
        o.host = w->host;
        o.port = w->port;
        o.transport = DS_TRANSPORT_TCP;
        o.connect_timeout_ms = 500;
        ds_client_t *c = NULL;
        if (ds_client_connect(&o, &c) == DS_K_OK) {
            ds_status_t st = ds_client_health_check(c);
            ds_client_close(c);
            if (st == DS_K_OK) return 0;
        }
        usleep(20000);
    }
    fprintf(stderr, "worker did not answer within 20 s\n");
    print_log(w);
    dst_worker_kill(w);
    return -1;
}

int dst_worker_start(dst_worker_t *w, int arena_mb, const char *extra)
{
    memset(w, 0, sizeof(*w));
    const char *ext = getenv("DS_TEST_WORKER");
    if (ext && *ext) {
        char err[256];
        if (ds__parse_hostport(ext, w->host, sizeof(w->host), &w->port, err, sizeof(err)) != 0) {
            fprintf(stderr, "DS_TEST_WORKER: %s\n", err);
            return -1;
        }
        const char *dir = getenv("DS_UNIX_SOCKET_DIR");
        if (dir) snprintf(w->sockdir, sizeof(w->sockdir), "%s", dir);
        return 0;
    }
    snprintf(w->host, sizeof(w->host), "127.0.0.1");
    w->arena_mb = arena_mb;
    snprintf(w->extra, sizeof(w->extra), "%s", extra ? extra : "");
    snprintf(w->sockdir, sizeof(w->sockdir), "/tmp/dst-XXXXXX");
    if (mkdtemp(w->sockdir) == NULL) return -1;
    snprintf(w->logpath, sizeof(w->logpath), "%s/worker.log", w->sockdir);
    for (int attempt = 0; attempt < 5; attempt++) {
        w->port = free_port();
        if (w->port > 0 && spawn(w) == 0) return 0;
    }
    return -1;
}

int dst_worker_stop(dst_worker_t *w)
{
    if (w->pid <= 0) return -1;
    kill(w->pid, SIGTERM);
    int status = -1;
    uint64_t deadline = ds__now_ms() + 10000;
    while (ds__now_ms() < deadline) {
        if (waitpid(w->pid, &status, WNOHANG) == w->pid) break;
        usleep(10000);
    }
    if (ds__now_ms() >= deadline) {
        kill(w->pid, SIGKILL);
        waitpid(w->pid, &status, 0);
    }
    track(w->pid, false);
    w->pid = 0;
    return status;
}

void dst_worker_kill(dst_worker_t *w)
{
    if (w->pid <= 0) return;
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    track(w->pid, false);
    w->pid = 0;
}

int dst_worker_restart(dst_worker_t *w)
{
    if (w->pid > 0) dst_worker_stop(w);
    for (int attempt = 0; attempt < 50; attempt++) {
        if (spawn(w) == 0) return 0;
        usleep(100000); /* the port may linger briefly */
    }
    return -1;
}

ds_client_t *dst_connect(const dst_worker_t *w, ds_transport_t t)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = w->host;
    o.port = w->port;
    o.transport = t;
    o.unix_socket_dir = w->sockdir[0] ? w->sockdir : NULL;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) {
        fprintf(stderr, "connect %s:%d: %s\n", w->host, w->port, ds_last_error());
        return NULL;
    }
    return c;
}

/* One raw request over TCP: HELLO then STATS, parsed with the wire codec. */
double dst_stat(const dst_worker_t *w, const char *path)
{
    char err[256];
    int fd = ds__tcp_connect(w->host, w->port, 2000, err, sizeof(err));
    if (fd < 0) return -1;
    double result = -1;
    uint64_t dl = ds__now_ms() + 5000;
    for (int step = 0; step < 2; step++) {
        ds_wbuf_t m;
        ds__wbuf_init(&m);
        if (step == 0) {
            ds__wbuf_u32(&m, DS_WIRE_VERSION);
            ds__wbuf_u64(&m, 0);
            ds__wbuf_u8(&m, 0);
            ds__wbuf_cstr(&m, "");
        }
        ds_wire_header_t h = {.magic = DS_WIRE_MAGIC, .version = DS_WIRE_VERSION,
                              .opcode = step == 0 ? DS_OP_HELLO : DS_OP_STATS,
                              .meta_len = (uint32_t)m.len, .req_id = (uint64_t)step + 1};
        uint8_t hb[DS_WIRE_HEADER_LEN];
        ds__wire_header_encode(&h, hb);
        int ok = ds__write_full(fd, hb, sizeof(hb), dl) == 0 &&
                 ds__write_full(fd, m.buf, m.len, dl) == 0 &&
                 ds__read_full(fd, hb, sizeof(hb), dl) == 0 &&
                 ds__wire_header_decode(hb, 1u << 30, &h, err, sizeof(err)) == 0;
        ds__wbuf_free(&m);
        if (!ok) break;
        char *meta = malloc(h.meta_len + 1);
        if (meta == NULL || ds__read_full(fd, meta, h.meta_len, dl) != 0) {
            free(meta);
            break;
        }
        if (step == 1) {
            ds_rbuf_t r;
            ds__rbuf_init(&r, meta, h.meta_len);
            const char *e, *js;
            (void)ds__rbuf_str(&r, &e);
            uint32_t jl = ds__rbuf_str(&r, &js);
            cJSON *root = r.err ? NULL : cJSON_ParseWithLength(js, jl);
            cJSON *node = root;
            char p[256];
            snprintf(p, sizeof(p), "%s", path);
            for (char *tok = strtok(p, "."); node && tok; tok = strtok(NULL, "."))
                node = cJSON_GetObjectItemCaseSensitive(node, tok);
            if (node && cJSON_IsNumber(node)) result = node->valuedouble;
            cJSON_Delete(root);
        }
        free(meta);
    }
    close(fd);
    return result;
}

void dst_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *p = buf;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

bool dst_check(const void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    const uint8_t *p = buf;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        if (p[i] != (uint8_t)(x >> ((i & 7) * 8))) return false;
    }
    return true;
}
