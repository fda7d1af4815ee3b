/* Real-worker test harness (see harness.h). */
#include "harness.h"

#include "common/clock.h"
#include "common/etcd.h"
#include "common/net.h"
#include "common/tls.h"
#include "common/wire.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h> /* after setjmp.h, stdarg.h and stddef.h */

#ifndef DS_BUILD_DIR_DEFAULT
#define DS_BUILD_DIR_DEFAULT "build"
#endif

#define MAX_STARTED 32
#define MAX_NETNS 16
static pid_t started[MAX_STARTED];
static bool atexit_set;
static char netns_made[MAX_NETNS][64];
static char etcd_dirs[MAX_STARTED][256];
/* Each worker's socket directory (with its log), removed at exit by the
 * process that made it (not by a forked child that exits) unless
 * DS_TEST_KEEP_LOGS is set. */
static char worker_dirs[128][256];
static pid_t worker_dirs_pid;

static void kill_all(void)
{
    for (int i = 0; i < MAX_STARTED; i++)
        if (started[i] > 0) {
            kill(started[i], SIGKILL);
            waitpid(started[i], NULL, 0);
            started[i] = 0;
        }
    /* Namespaces go after their processes, then etcd's data directories. */
    for (int i = 0; i < MAX_NETNS; i++)
        if (netns_made[i][0]) dst_netns_del(netns_made[i]);
    for (int i = 0; i < MAX_STARTED; i++)
        if (etcd_dirs[i][0]) {
            dst_sh("rm -rf '%s'", etcd_dirs[i]);
            etcd_dirs[i][0] = '\0';
        }
    const char *keep = getenv("DS_TEST_KEEP_LOGS");
    for (size_t i = 0;
         getpid() == worker_dirs_pid && i < sizeof(worker_dirs) / sizeof(worker_dirs[0]); i++)
        if (worker_dirs[i][0]) {
            if (!(keep && *keep)) dst_sh("rm -rf '%s'", worker_dirs[i]);
            worker_dirs[i][0] = '\0';
        }
}

void dst_cleanup_all(void)
{
    kill_all();
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

bool dst_worker_external(const dst_worker_t *w)
{
    return w->pid == 0;
}

static void print_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    char line[1024];
    fprintf(stderr, "---- %s ----\n", path);
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

/* Starts argv[0] with stdout and stderr appended to logpath, killed with
 * this process (PR_SET_PDEATHSIG) and tracked for the exit sweep. */
static pid_t spawn_logged(char *const argv[], const char *logpath)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    track(pid, true);
    return pid;
}

/* Waits up to 20 s for ready(ctx) while the process lives. 0 when ready;
 * -1 with its log printed when it exited (*pid is then 0) or never became
 * ready (the caller kills it). */
static int wait_ready(pid_t *pid, const char *what, const char *logpath, bool (*ready)(void *),
                      void *ctx, useconds_t poll_us)
{
    uint64_t deadline = ds__now_ms() + 20000;
    while (ds__now_ms() < deadline) {
        int status;
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
            track(*pid, false);
            *pid = 0;
            fprintf(stderr, "%s exited during start (status %d)\n", what, status);
            print_file(logpath);
            return -1;
        }
        if (ready(ctx)) return 0;
        usleep(poll_us);
    }
    fprintf(stderr, "%s did not answer within 20 s\n", what);
    print_file(logpath);
    return -1;
}

static bool worker_ready(void *ctx)
{
    const dst_worker_t *w = ctx;
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = w->host;
    o.port = w->port;
    o.transport = DS_TRANSPORT_TCP;
    o.connect_timeout_ms = 500;
    o.token = getenv("DS_TEST_TOKEN");
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) return false;
    ds_status_t st = ds_client_health_check(c);
    ds_client_close(c);
    return st == DS_K_OK;
}

static int spawn(dst_worker_t *w)
{
    char bin[512], addr[128], mb[32];
    dst_build_path("src/worker/datasystem_worker", bin, sizeof(bin));
    snprintf(addr, sizeof(addr), "%s:%d", w->host, w->port);
    snprintf(mb, sizeof(mb), "%d", w->arena_mb);
    char *argv[64] = {bin, "--worker_address",  addr,      "--shared_memory_size_mb",
                      mb,  "--unix_socket_dir", w->sockdir};
    int argc = 7;
    char extra[1024];
    snprintf(extra, sizeof(extra), "%s", w->extra);
    for (char *tok = strtok(extra, " "); tok && argc < 62; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    w->pid = spawn_logged(argv, w->logpath);
    if (w->pid < 0) {
        w->pid = 0;
        return -1;
    }
    if (wait_ready(&w->pid, "worker", w->logpath, worker_ready, w, 20000) == 0) return 0;
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
    return dst_worker_start_on(w, "127.0.0.1", arena_mb, extra);
}

static char tls_dir[256];

static void tls_dir_remove(void)
{
    if (tls_dir[0]) dst_sh("rm -rf '%s'", tls_dir);
}

int dst_tls_certs(char *dir, size_t cap)
{
    if (tls_dir[0] == '\0') {
        char d[256] = "/tmp/dst-tls-XXXXXX";
        if (mkdtemp(d) == NULL) {
            fprintf(stderr, "dst_tls_certs: mkdtemp: %s\n", strerror(errno));
            return -1;
        }
        /* Two CAs; a worker and a client certificate from the first, a
         * client certificate from the second. */
        int rc = dst_sh(
            "cd '%s' && for ca in ca other-ca; do "
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout $ca.key -out $ca.pem -days 3 -subj /CN=dst-$ca >/dev/null 2>&1 || exit 1; "
            "done; "
            "for n in ca:worker ca:client other-ca:other-client; do ca=${n%%%%:*}; c=${n#*:}; "
            "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout $c.key -out $c.csr -subj /CN=dst-$c >/dev/null 2>&1 && "
            "openssl x509 -req -in $c.csr -CA $ca.pem -CAkey $ca.key -CAcreateserial "
            "-out $c.pem -days 3 >/dev/null 2>&1 || exit 1; done",
            d);
        if (rc != 0) {
            fprintf(stderr, "dst_tls_certs: openssl failed (%d) in %s\n", rc, d);
            dst_sh("rm -rf '%s'", d);
            return -1;
        }
        snprintf(tls_dir, sizeof(tls_dir), "%s", d);
        atexit(tls_dir_remove);
    }
    snprintf(dir, cap, "%s", tls_dir);
    return 0;
}

const char *dst_tls_worker_flags(void)
{
    static char flags[1200];
    const char *on = getenv("DS_TEST_TLS");
    if (on == NULL || strcmp(on, "1") != 0) return "";
    if (flags[0]) return flags;
    char d[256], p[300];
    if (dst_tls_certs(d, sizeof(d)) != 0) return NULL;
    snprintf(flags, sizeof(flags),
             "--enable_tls --tls_verify_client --tls_ca %s/ca.pem --tls_cert %s/worker.pem "
             "--tls_key %s/worker.key",
             d, d, d);
    setenv("DATASYSTEM_ENABLE_TLS", "1", 1);
    snprintf(p, sizeof(p), "%s/ca.pem", d);
    setenv("DATASYSTEM_TLS_CA", p, 1);
    snprintf(p, sizeof(p), "%s/client.pem", d);
    setenv("DATASYSTEM_TLS_CERT", p, 1);
    snprintf(p, sizeof(p), "%s/client.key", d);
    setenv("DATASYSTEM_TLS_KEY", p, 1);
    return flags;
}

int dst_worker_start_on(dst_worker_t *w, const char *host, int arena_mb, const char *extra)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->host, sizeof(w->host), "%s", host);
    w->arena_mb = arena_mb;
    /* DS_TEST_WORKER_FLAGS: flags every worker a test starts gets too (the
     * cluster suites run again with --enable_rdma true this way); DS_TEST_TLS
     * adds TLS (dst_tls_worker_flags). */
    const char *more = getenv("DS_TEST_WORKER_FLAGS");
    const char *tls = dst_tls_worker_flags();
    if (tls == NULL) return -1;
    snprintf(w->extra, sizeof(w->extra), "%s%s%s%s%s", extra ? extra : "", more && *more ? " " : "",
             more && *more ? more : "", tls[0] ? " " : "", tls);
    snprintf(w->sockdir, sizeof(w->sockdir), "/tmp/dst-XXXXXX");
    if (mkdtemp(w->sockdir) == NULL) return -1;
    if (worker_dirs_pid != getpid()) {
        memset(worker_dirs, 0, sizeof(worker_dirs)); /* a child's copy of its parent's list */
        worker_dirs_pid = getpid();
    }
    for (size_t i = 0; i < sizeof(worker_dirs) / sizeof(worker_dirs[0]); i++)
        if (worker_dirs[i][0] == '\0') {
            snprintf(worker_dirs[i], sizeof(worker_dirs[i]), "%s", w->sockdir);
            break;
        }
    if (!atexit_set) {
        atexit(kill_all);
        atexit_set = true;
    }
    snprintf(w->logpath, sizeof(w->logpath), "%s/worker.log", w->sockdir);
    for (int attempt = 0; attempt < 5; attempt++) {
        w->port = ds__free_tcp_port(w->host);
        if (w->port > 0 && spawn(w) == 0) return 0;
    }
    return -1;
}

int dst_worker_stop(dst_worker_t *w)
{
    return dst_worker_stop_sig(w, SIGTERM);
}

/* Workers stopped by dst_worker_stop_sig that exited other than with 0. */
static int unclean_exits;

int dst_worker_stop_sig(dst_worker_t *w, int sig)
{
    if (w->pid <= 0) return -1;
    kill(w->pid, sig);
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
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        unclean_exits++;
        fprintf(stderr, "harness: worker pid %d (port %d) %s %d; the end of its log (%s):\n",
                (int)w->pid, w->port, WIFSIGNALED(status) ? "was killed by signal" : "exited",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), w->logpath);
        (void)dst_sh("tail -30 %s >&2", w->logpath);
    }
    w->pid = 0;
    return status;
}

/* The worker of dst_group_setup and dst_group_teardown. */
static dst_worker_t *group_worker;
static int group_arena_mb;
static const char *group_extra;

void dst_group_worker(dst_worker_t *w, int arena_mb, const char *extra)
{
    group_worker = w;
    group_arena_mb = arena_mb;
    group_extra = extra;
}

int dst_group_setup(void **state)
{
    (void)state;
    if (group_worker == NULL) {
        fprintf(stderr, "dst_group_setup: no worker named (dst_group_worker)\n");
        return -1;
    }
    return dst_worker_start(group_worker, group_arena_mb, group_extra);
}

int dst_group_teardown(void **state)
{
    (void)state;
    if (group_worker == NULL) return -1;
    return dst_worker_stop(group_worker) == 0 ? 0 : -1; /* the log's tail is printed */
}

static int (*group_setup)(void **);
static int (*group_teardown)(void **);
static int fixture_failures;

static int counted_setup(void **state)
{
    int rc = group_setup ? group_setup(state) : 0;
    if (rc != 0) fixture_failures++;
    return rc;
}

static int counted_teardown(void **state)
{
    int rc = group_teardown ? group_teardown(state) : 0;
    if (rc != 0) fixture_failures++;
    return rc;
}

int dst_run_group_tests_(const char *name, const struct CMUnitTest *tests, size_t n,
                         int (*setup)(void **), int (*teardown)(void **))
{
    group_setup = setup;
    group_teardown = teardown;
    int rc = _cmocka_run_group_tests(name, tests, n, counted_setup, counted_teardown);
    if (rc == 0 && (fixture_failures > 0 || unclean_exits > 0)) {
        fprintf(stderr, "harness: %d group fixture(s) failed and %d worker(s) exited uncleanly\n",
                fixture_failures, unclean_exits);
        rc = 1;
    }
    return rc;
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
    if (w->pid > 0) dst_worker_stop_sig(w, SIGINT);
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
    o.token = getenv("DS_TEST_TOKEN");
    o.unix_socket_dir = w->sockdir[0] ? w->sockdir : NULL;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) {
        fprintf(stderr, "connect %s:%d: %s\n", w->host, w->port, ds_last_error());
        return NULL;
    }
    return c;
}

/* A raw connection's bytes, through TLS when it has a session. */
static int raw_write(int fd, ds_tls_t *t, const void *p, size_t n, uint64_t dl)
{
    return t ? ds__tls_write_full(t, fd, p, n, dl) : ds__write_full(fd, p, n, dl);
}

static int raw_read(int fd, ds_tls_t *t, void *p, size_t n, uint64_t dl)
{
    return t ? ds__tls_read_full(t, fd, p, n, dl) : ds__read_full(fd, p, n, dl);
}

/* A TCP connection of a TLS test run (DATASYSTEM_ENABLE_TLS=1, as
 * dst_tls_worker_flags sets it) gets a TLS session from the files the
 * environment names; NULL otherwise, or when the handshake fails. */
static ds_tls_t *raw_tls(int fd, ds_tls_ctx_t **ctx)
{
    const char *on = getenv("DATASYSTEM_ENABLE_TLS");
    *ctx = NULL;
    if (on == NULL || strcmp(on, "1") != 0) return NULL;
    ds_tls_conf_t tc = {.ca = getenv("DATASYSTEM_TLS_CA"),
                        .cert = getenv("DATASYSTEM_TLS_CERT"),
                        .key = getenv("DATASYSTEM_TLS_KEY")};
    char err[512];
    *ctx = ds__tls_ctx_new(&tc, err, sizeof(err));
    ds_tls_t *t = *ctx ? ds__tls_new(*ctx, fd, err, sizeof(err)) : NULL;
    if (t && ds__tls_handshake(t, ds__now_ms() + 5000, err, sizeof(err)) != 0) {
        ds__tls_free(t);
        t = NULL;
    }
    if (t == NULL) fprintf(stderr, "dst_stat: %s\n", err);
    return t;
}

/* One raw request: HELLO then STATS, parsed with the wire codec. */
double dst_stat(const dst_worker_t *w, const char *path)
{
    char err[256], sock[300];
    /* The Unix socket needs no secret, even on an authenticated worker. */
    int fd = -1;
    ds_tls_ctx_t *tctx = NULL;
    ds_tls_t *tls = NULL;
    if (w->sockdir[0] && ds__socket_path(w->sockdir, w->host, w->port, sock, sizeof(sock)) == 0)
        fd = ds__unix_connect(sock, 2000, err, sizeof(err));
    if (fd < 0) {
        fd = ds__tcp_connect(w->host, w->port, 2000, err, sizeof(err));
        if (fd >= 0) tls = raw_tls(fd, &tctx);
        if (fd >= 0 && tctx && tls == NULL) {
            ds__tls_ctx_free(tctx);
            close(fd);
            return -1;
        }
    }
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
        ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                              .version = DS_WIRE_VERSION,
                              .opcode = step == 0 ? DS_OP_HELLO : DS_OP_STATS,
                              .meta_len = (uint32_t)m.len,
                              .req_id = (uint64_t)step + 1};
        uint8_t hb[DS_WIRE_HEADER_LEN];
        ds__wire_header_encode(&h, hb);
        int ok = raw_write(fd, tls, hb, sizeof(hb), dl) == 0 &&
                 raw_write(fd, tls, m.buf, m.len, dl) == 0 &&
                 raw_read(fd, tls, hb, sizeof(hb), dl) == 0 &&
                 ds__wire_header_decode(hb, 1u << 30, &h, err, sizeof(err)) == 0;
        ds__wbuf_free(&m);
        if (!ok) break;
        char *meta = malloc(h.meta_len + 1);
        if (meta == NULL || raw_read(fd, tls, meta, h.meta_len, dl) != 0) {
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
    ds__tls_free(tls);
    ds__tls_ctx_free(tctx);
    close(fd);
    return result;
}

double dst_ops(const dst_worker_t *w, const char *name)
{
    char path[64];
    snprintf(path, sizeof(path), "operations.%s", name);
    return dst_stat(w, path);
}

bool dst_wait_stat(const dst_worker_t *w, const char *path, double want, int timeout_ms)
{
    uint64_t end = ds__now_ms() + (uint64_t)timeout_ms;
    do {
        if (dst_stat(w, path) == want) return true;
        usleep(20 * 1000);
    } while (ds__now_ms() < end);
    return false;
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

ds_status_t dst_set_filled(ds_client_t *c, const char *key, size_t size, uint64_t seed)
{
    uint8_t *v = malloc(size ? size : 1);
    if (v == NULL) return DS_K_OUT_OF_MEMORY;
    dst_fill(v, size, seed);
    ds_status_t st = ds_kv_set(c, key, v, size, NULL);
    free(v);
    return st;
}

/* ---- clusters ---- */

int dst_wait_members(const dst_worker_t *w, int n, int timeout_ms)
{
    uint64_t t0 = ds__now_ms();
    do {
        if ((int)dst_stat(w, "cluster.members") == n) return (int)(ds__now_ms() - t0);
        usleep(50000);
    } while (ds__now_ms() - t0 < (uint64_t)timeout_ms);
    return -1;
}

int dst_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

int dst_etcd_count(const dst_etcd_t *e, const char *prefix)
{
    char err[256];
    ds_etcd_t *c = ds__etcd_new(e->address, err, sizeof(err));
    if (c == NULL) return -1;
    ds_etcd_kv_t *kvs = NULL;
    size_t n = 0;
    int rc = ds__etcd_range_prefix(c, prefix, &kvs, &n, err, sizeof(err));
    ds__etcd_kvs_free(kvs, n);
    ds__etcd_free(c);
    return rc == 0 ? (int)n : -1;
}

static bool etcd_ready(void *ctx)
{
    return dst_etcd_count(ctx, "/") >= 0;
}

static int etcd_spawn(dst_etcd_t *e)
{
    char name[32], data[300], client[128], peer[128], initial[160];
    snprintf(name, sizeof(name), "dst%d", (int)getpid());
    snprintf(data, sizeof(data), "%s/data", e->dir);
    snprintf(client, sizeof(client), "http://%s:%d", e->host, e->client_port);
    snprintf(peer, sizeof(peer), "http://%s:%d", e->host, e->peer_port);
    snprintf(initial, sizeof(initial), "%s=%s", name, peer);
    char *const flags[][2] = {
        {"--name", name},
        {"--data-dir", data},
        {"--listen-client-urls", client},
        {"--advertise-client-urls", client},
        {"--listen-peer-urls", peer},
        {"--initial-advertise-peer-urls", peer},
        {"--initial-cluster", initial},
        {"--initial-cluster-state", "new"},
    };
    char *argv[2 * sizeof(flags) / sizeof(flags[0]) + 2] = {"/usr/bin/etcd"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        argv[1 + 2 * i] = flags[i][0];
        argv[2 + 2 * i] = flags[i][1];
    }
    e->pid = spawn_logged(argv, e->logpath);
    if (e->pid < 0) {
        e->pid = 0;
        return -1;
    }
    if (wait_ready(&e->pid, "etcd", e->logpath, etcd_ready, e, 50000) == 0) return 0;
    dst_etcd_kill(e);
    return -1;
}

/* Removes the data directories of etcds whose test process died unseen
 * (SIGKILL: no atexit), found by the pid in their name. */
static void sweep_etcd_dirs(void)
{
    glob_t g;
    if (glob("/tmp/dst-etcd-*-*", 0, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        int pid = 0;
        if (sscanf(g.gl_pathv[i], "/tmp/dst-etcd-%d-", &pid) != 1 || pid <= 0) continue;
        if (pid != (int)getpid() && kill(pid, 0) != 0 && errno == ESRCH)
            dst_sh("rm -rf '%s'", g.gl_pathv[i]);
    }
    globfree(&g);
}

int dst_etcd_start(dst_etcd_t *e, const char *host)
{
    memset(e, 0, sizeof(*e));
    sweep_etcd_dirs();
    snprintf(e->host, sizeof(e->host), "%s", host ? host : "127.0.0.1");
    snprintf(e->dir, sizeof(e->dir), "/tmp/dst-etcd-%d-XXXXXX", (int)getpid());
    if (mkdtemp(e->dir) == NULL) return -1;
    for (int i = 0; i < MAX_STARTED; i++)
        if (etcd_dirs[i][0] == '\0') {
            snprintf(etcd_dirs[i], sizeof(etcd_dirs[i]), "%s", e->dir);
            break;
        }
    snprintf(e->logpath, sizeof(e->logpath), "%s/etcd.log", e->dir);
    for (int attempt = 0; attempt < 5; attempt++) {
        e->client_port = ds__free_tcp_port(e->host);
        e->peer_port = ds__free_tcp_port(e->host);
        for (int i = 0; i < 10 && e->peer_port == e->client_port; i++)
            e->peer_port = ds__free_tcp_port(e->host);
        snprintf(e->address, sizeof(e->address), "%s:%d", e->host, e->client_port);
        if (e->client_port > 0 && e->peer_port > 0 && etcd_spawn(e) == 0) return 0;
        dst_sh("rm -rf '%s/data'", e->dir);
    }
    return -1;
}

void dst_etcd_stop(dst_etcd_t *e)
{
    if (e->pid <= 0) return;
    kill(e->pid, SIGTERM);
    uint64_t deadline = ds__now_ms() + 10000;
    while (ds__now_ms() < deadline && waitpid(e->pid, NULL, WNOHANG) != e->pid)
        usleep(10000);
    if (ds__now_ms() >= deadline) {
        kill(e->pid, SIGKILL);
        waitpid(e->pid, NULL, 0);
    }
    track(e->pid, false);
    e->pid = 0;
}

void dst_etcd_kill(dst_etcd_t *e)
{
    if (e->pid <= 0) return;
    kill(e->pid, SIGKILL);
    waitpid(e->pid, NULL, 0);
    track(e->pid, false);
    e->pid = 0;
}

int dst_etcd_restart(dst_etcd_t *e, bool wipe)
{
    if (e->pid > 0) dst_etcd_stop(e);
    if (wipe) dst_sh("rm -rf '%s/data'", e->dir);
    for (int attempt = 0; attempt < 20; attempt++) {
        if (etcd_spawn(e) == 0) return 0;
        usleep(200000); /* the ports may linger briefly */
    }
    return -1;
}

void dst_etcd_destroy(dst_etcd_t *e)
{
    dst_etcd_stop(e);
    if (e->dir[0] == '\0') return;
    dst_sh("rm -rf '%s'", e->dir);
    for (int i = 0; i < MAX_STARTED; i++)
        if (strcmp(etcd_dirs[i], e->dir) == 0) etcd_dirs[i][0] = '\0';
    e->dir[0] = '\0';
}

/* ---- network namespaces ---- */

static int netns_home = -1; /* the namespace the process started in */

int dst_netns_add(const char *name)
{
    if (!atexit_set) {
        atexit(kill_all);
        atexit_set = true;
    }
    if (dst_sh("ip netns add '%s' 2>/dev/null", name) != 0) return -1;
    for (int i = 0; i < MAX_NETNS; i++)
        if (netns_made[i][0] == '\0') {
            snprintf(netns_made[i], sizeof(netns_made[i]), "%s", name);
            break;
        }
    return dst_sh("ip -n '%s' link set lo up", name) == 0 ? 0 : -1;
}

void dst_netns_del(const char *name)
{
    /* Delete before forgetting: name may be one of netns_made's own entries. */
    dst_sh("ip netns del '%s' 2>/dev/null", name);
    for (int i = 0; i < MAX_NETNS; i++)
        if (strcmp(netns_made[i], name) == 0) {
            netns_made[i][0] = '\0';
            break;
        }
}

int dst_netns_enter(const char *name)
{
    if (netns_home < 0) {
        netns_home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (netns_home < 0) return -1;
    }
    int fd = netns_home;
    if (name) {
        char path[128];
        snprintf(path, sizeof(path), "/run/netns/%s", name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
    }
    int rc = setns(fd, CLONE_NEWNET);
    if (fd != netns_home) close(fd);
    return rc;
}
