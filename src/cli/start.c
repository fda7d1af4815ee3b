/* `dscli start`: find datasystem_worker, run it detached (its own session,
 * output to a log file) with the given flags, and wait until it is ready (its
 * --ready_check_path file exists, as Yuanrong's dscli waits, and it answers a
 * health check through the client library), exits, or runs out of time.
 * Output lines are Yuanrong's ("[INFO] [  OK  ] Start worker service @ H:P
 * success, PID: N").
 *
 * Probe files: the worker's flags default to "" (no file), as Yuanrong's
 * gflags do; dscli start fills --health_check_path and --ready_check_path
 * when neither the configuration file nor the command line names them:
 * with -d DIR, Yuanrong's file values under DIR (DIR/datasystem/probe/
 * healthy and .../ready); without, <log dir>/worker-<host>-<port>/probe/
 * healthy and .../ready, so workers started side by side never share one.
 *
 * The health check goes over TCP on purpose: a local client would map the
 * whole arena just to say hello, which for a large --shared_memory_size_mb is
 * the slowest part of starting. */
#include "cli/cli.h"

#include "common/log.h"
#include "common/net.h"
#include "ds/kv_client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WORKER_BIN "datasystem_worker"

static bool executable(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

int cli_find_worker(const char *self, char *out, size_t cap, char *err, size_t err_cap)
{
    const char *env = getenv("DS_WORKER_BIN");
    if (env && *env) {
        if (executable(env)) {
            snprintf(out, cap, "%s", env);
            return 0;
        }
        snprintf(err, err_cap, "DS_WORKER_BIN=%s is not an executable file", env);
        return -1;
    }
    char dir[PATH_MAX] = "";
    if (self && strrchr(self, '/')) {
        snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(self, '/') - self), self);
        const char *rel[] = {"/" WORKER_BIN, "/../worker/" WORKER_BIN};
        for (size_t i = 0; i < 2; i++) {
            if ((size_t)snprintf(out, cap, "%s%s", dir, rel[i]) < cap && executable(out)) return 0;
        }
    }
    const char *path = getenv("PATH");
    for (const char *p = path; p && *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n > 0 && (size_t)snprintf(out, cap, "%.*s/%s", (int)n, p, WORKER_BIN) < cap &&
            executable(out))
            return 0;
        p = colon ? colon + 1 : p + n;
    }
    snprintf(err, err_cap,
             "cannot find %s: set DS_WORKER_BIN, or put it next to dscli (%s), in %s/../worker/, "
             "or on PATH",
             WORKER_BIN, dir[0] ? dir : "?", dir[0] ? dir : "?");
    return -1;
}

void cli_log_tail(const char *path, long from, int max_lines, char *out, size_t cap)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t start = end - (off_t)(cap - 1);
    if (start < from) start = from;
    if (start < 0) start = 0;
    ssize_t n = end > start ? pread(fd, out, (size_t)(end - start), start) : 0;
    close(fd);
    if (n <= 0) return;
    out[n] = '\0';
    /* Keep the last max_lines lines (ignoring a trailing newline). */
    char *p = out + n;
    if (p > out && p[-1] == '\n') *--p = '\0';
    int lines = 0;
    while (p > out) {
        if (p[-1] == '\n' && ++lines == max_lines) break;
        p--;
    }
    memmove(out, p, strlen(p) + 1);
}

/* How the health check reaches the worker's TCP port: its token and, for a
 * worker with --enable_tls, TLS with the worker's own CA and (when it asks
 * clients for a certificate, --tls_verify_client) the worker's own
 * certificate, as its peers present it. */
typedef struct {
    const char *token;
    bool tls;
    const char *tls_ca, *tls_cert, *tls_key;
} probe_conf_t;

/* NULL for an empty value: the client library's default (its environment). */
static const char *nonempty(const char *s)
{
    return s != NULL && *s != '\0' ? s : NULL;
}

/* True when a worker answers HELLO and HEALTH at host:port over TCP. */
static bool worker_answers(const char *host, int port, const probe_conf_t *pc)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    o.transport = DS_TRANSPORT_TCP;
    o.connect_timeout_ms = 500;
    o.request_timeout_ms = 1000;
    o.token = pc->token;
    o.enable_tls = pc->tls ? 1 : -1;
    o.tls_ca = pc->tls_ca;
    o.tls_cert = pc->tls_cert;
    o.tls_key = pc->tls_key;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) return false;
    bool ok = ds_client_health_check(c) == DS_K_OK;
    ds_client_close(c);
    return ok;
}

static int read_token(const char *file, char *out, size_t cap)
{
    FILE *f = fopen(file, "r");
    if (f == NULL) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
        n--;
    out[n] = '\0';
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* The flag's value as the worker will see it: "~/" is $HOME. false when
 * it does not fit in cap. */
static bool expand_home(const char *p, char *out, size_t cap)
{
    const char *home = getenv("HOME");
    int n;
    if (strncmp(p, "~/", 2) == 0 && home && *home)
        n = snprintf(out, cap, "%s/%s", home, p + 2);
    else
        n = snprintf(out, cap, "%s", p);
    return n >= 0 && (size_t)n < cap;
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends --name=value to the worker's flags (storage lives until exit). */
static int add_flag(cli_args_t *a, const char *name, const char *value)
{
    size_t len = strlen(name) + strlen(value) + 4;
    char *arg = malloc(len);
    if (arg == NULL || a->nfwd >= CLI_MAX_FWD) {
        free(arg);
        return -1;
    }
    snprintf(arg, len, "--%s=%s", name, value);
    a->fwd[a->nfwd++] = arg;
    return 0;
}

static void stop_child(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 40; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int cli_cmd_start(const cli_cmd_t *cmd, const cli_args_t *a)
{
    char host[256], err[512];
    int port;
    const char *config = cli_value(cmd, a, "config_path");
    if (config == NULL) config = cli_value(cmd, a, "worker_config_path");
    const char *home_dir = cli_value(cmd, a, "datasystem_home_dir");
    static cli_args_t merged;
    if (config != NULL) {
        if (cli_config_merge(cmd, a, config, home_dir, &merged, err, sizeof(err)) != 0) {
            fprintf(stderr, "[ERROR] Start failed: -f: %s\n", err);
            return CLI_EXIT_USAGE;
        }
    } else {
        merged = *a;
    }
    a = &merged;
    const char *addr = cli_value(cmd, a, "worker_address");
    if (ds__parse_hostport(addr, host, sizeof(host), &port, err, sizeof(err)) != 0) {
        fprintf(stderr, "[ERROR] Start failed: --worker_address: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    long timeout_ms;
    if (cli_parse_seconds(cli_value(cmd, a, "timeout"), &timeout_ms, err, sizeof(err)) != 0) {
        fprintf(stderr, "[ERROR] Start failed: -t: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    char token[1024] = "";
    const char *token_file = cli_value(cmd, a, "auth_token_file");
    if (token_file && read_token(token_file, token, sizeof(token)) != 0) {
        fprintf(stderr, "[ERROR] Start failed: cannot read --auth_token_file %s: %s\n", token_file,
                strerror(errno));
        return CLI_EXIT_FAIL;
    }
    probe_conf_t pc = {.token = token, .tls = cli_fwd_bool(a, "enable_tls")};
    if (pc.tls) {
        pc.tls_ca = nonempty(cli_fwd_value(a, "tls_ca"));
        /* An encrypted key is left out: the client library takes no
         * passphrase, and OpenSSL would ask for it on the terminal. */
        if (cli_fwd_bool(a, "tls_verify_client") &&
            nonempty(cli_fwd_value(a, "tls_passphrase_path")) == NULL) {
            pc.tls_cert = nonempty(cli_fwd_value(a, "tls_cert"));
            pc.tls_key = nonempty(cli_fwd_value(a, "tls_key"));
        }
    }

    char self[PATH_MAX], bin[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[sl > 0 ? sl : 0] = '\0';
    if (cli_find_worker(self, bin, sizeof(bin), err, sizeof(err)) != 0) {
        fprintf(stderr, "[ERROR] Start failed: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    if (worker_answers(host, port, &pc)) {
        fprintf(stderr, "[ERROR] Start failed: a worker is already running at %s:%d\n", host, port);
        return CLI_EXIT_FAIL;
    }

    char logdir[PATH_MAX], logfile[PATH_MAX + 64];
    if (cli_given(cmd, a, "log_dir")) {
        snprintf(logdir, sizeof(logdir), "%s", cli_value(cmd, a, "log_dir"));
    } else {
        char sock[PATH_MAX - 8];
        ds__default_socket_dir(sock, sizeof(sock));
        snprintf(logdir, sizeof(logdir), "%s/logs", sock);
    }
    if (ds__log_path(logdir, host, port, logfile, sizeof(logfile)) != 0) {
        fprintf(stderr, "[ERROR] Start failed: the log path under %s is too long\n", logdir);
        return CLI_EXIT_USAGE;
    }
    int logfd = -1;
    if (ds__mkdirs(logdir) != 0 ||
        (logfd = open(logfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0) {
        fprintf(stderr, "[ERROR] Start failed: cannot open the log %s: %s\n", logfile,
                strerror(errno));
        return CLI_EXIT_FAIL;
    }
    long log_from = (long)lseek(logfd, 0, SEEK_END);

    const char *probe_names[] = {"health_check_path", "ready_check_path"};
    const char *probe_leaf[] = {"healthy", "ready"};
    char ready[PATH_MAX] = "";
    for (int i = 0; i < 2; i++) {
        const char *given = cli_fwd_value(a, probe_names[i]);
        char path[PATH_MAX + 320];
        if (given == NULL) {
            int pl;
            if (home_dir)
                pl = snprintf(path, sizeof(path), "%s/%s", home_dir,
                              cli_file_default(probe_names[i]) + 2);
            else
                pl = snprintf(path, sizeof(path), "%s/worker-%s-%d/probe/%s", logdir, host, port,
                              probe_leaf[i]);
            if (pl < 0 || pl >= PATH_MAX || add_flag(&merged, probe_names[i], path) != 0) {
                fprintf(stderr, "[ERROR] Start failed: the --%s path is too long\n",
                        probe_names[i]);
                close(logfd);
                return CLI_EXIT_USAGE;
            }
            given = path;
        }
        if (i == 1 && given[0] && !expand_home(given, ready, sizeof(ready))) {
            fprintf(stderr, "[ERROR] Start failed: the --%s path is too long\n", probe_names[i]);
            close(logfd);
            return CLI_EXIT_USAGE;
        }
    }
    /* A ready file an earlier run left must not pass for this one's. */
    if (ready[0] && file_exists(ready)) unlink(ready);

    const char *wargv[CLI_MAX_FWD + 2];
    wargv[0] = bin;
    for (int i = 0; i < a->nfwd; i++)
        wargv[i + 1] = a->fwd[i];
    wargv[a->nfwd + 1] = NULL;

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "[ERROR] Start failed: fork: %s\n", strerror(errno));
        close(logfd);
        return CLI_EXIT_FAIL;
    }
    if (pid == 0) {
        /* The worker outlives dscli and the terminal: its own session, no
         * stdin, output to the log. */
        setsid();
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, STDIN_FILENO);
        dup2(logfd, STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        execv(bin, (char *const *)wargv);
        dprintf(STDERR_FILENO, "dscli: cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(logfd);
    if (cli_given(cmd, a, "log_dir")) printf("[INFO] Log directory configured at: %s\n", logdir);
    printf("[INFO] Starting worker service with PID: %d\n", (int)pid);
    fflush(stdout);

    long deadline = now_ms() + timeout_ms;
    char tail[4096];
    for (;;) {
        int wst;
        if (waitpid(pid, &wst, WNOHANG) == pid) {
            cli_log_tail(logfile, log_from, 20, tail, sizeof(tail));
            if (WIFEXITED(wst))
                fprintf(stderr, "[ERROR] [  FAILED  ] Worker exited with code %d before serving",
                        WEXITSTATUS(wst));
            else
                fprintf(stderr,
                        "[ERROR] [  FAILED  ] Worker was killed by signal %d before serving",
                        WTERMSIG(wst));
            fprintf(stderr, "; last lines of %s:\n%s\n", logfile, tail[0] ? tail : "(empty)");
            fprintf(stderr, "[ERROR] Start failed: The worker service exited abnormally\n");
            return CLI_EXIT_FAIL;
        }
        if ((ready[0] == '\0' || file_exists(ready)) && worker_answers(host, port, &pc)) {
            printf("[INFO] [  OK  ] Start worker service @ %s:%d success, PID: %d\n", host, port,
                   (int)pid);
            return CLI_EXIT_OK;
        }
        if (now_ms() >= deadline) {
            stop_child(pid);
            cli_log_tail(logfile, log_from, 20, tail, sizeof(tail));
            fprintf(
                stderr,
                "[ERROR] [  FAILED  ] Worker service is not ready within %.1f seconds (%s:%d%s%s) "
                "and was stopped; last lines of %s:\n%s\n",
                timeout_ms / 1000.0, host, port, ready[0] ? ", ready file " : "", ready, logfile,
                tail[0] ? tail : "(empty)");
            fprintf(stderr, "[ERROR] Start failed: Worker service startup timeout\n");
            return CLI_EXIT_FAIL;
        }
        sleep_ms(50);
    }
}
