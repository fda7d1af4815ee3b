/* `dscli stop` and `dscli status`: administrative requests the client API
 * does not offer (SHUTDOWN, STATS), spoken directly in the wire protocol over
 * one plain connection. Both find the worker by its address: the Unix socket
 * where the naming convention puts it, else TCP (with --auth_token_file's
 * secret when the worker has one), whose HELLO names the worker's socket,
 * used when this process can reach it and the process there proves it is
 * that worker. SHUTDOWN is only accepted on the Unix socket, which is what
 * limits stopping a worker to its own host and to users who can reach the
 * socket: stop never falls back to signalling a pid a TCP peer reported,
 * since that pid may name another host's, another namespace's or a reused
 * process. */
#include "cli/cli.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/procstat.h"
#include "common/tls.h"
#include "common/wire.h"
#include "ds/status.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    ds_tls_ctx_t *tls_ctx; /* TCP to a worker with --enable_tls; NULL otherwise */
    ds_tls_t *tls;
    uint64_t req;
    uint32_t pid;
    ds_wire_header_t rh;
    uint8_t *meta;
    ds_rbuf_t r;
    char transport[8]; /* "unix" or "tcp" */
    char socket[PATH_MAX];
    char why[512]; /* tcp: why not the Unix socket */
} ctl_conn_t;

static int ctl_write(ctl_conn_t *c, const void *buf, size_t len, uint64_t deadline)
{
    return c->tls ? ds__tls_write_full(c->tls, c->fd, buf, len, deadline)
                  : ds__write_full(c->fd, buf, len, deadline);
}

static int ctl_read(ctl_conn_t *c, void *buf, size_t len, uint64_t deadline)
{
    return c->tls ? ds__tls_read_full(c->tls, c->fd, buf, len, deadline)
                  : ds__read_full(c->fd, buf, len, deadline);
}

/* Sends one request and reads its response; 0, or -1 with a message. A
 * worker-side failure is returned in *st with its message in err. */
static int ctl_call(ctl_conn_t *c, ds_opcode_t op, const ds_wbuf_t *meta, uint64_t deadline,
                    ds_status_t *st, char *err, size_t cap)
{
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = (uint16_t)op,
                          .meta_len = meta ? (uint32_t)meta->len : 0,
                          .req_id = ++c->req};
    ds__wire_header_encode(&h, hb);
    if (ctl_write(c, hb, sizeof(hb), deadline) != 0 ||
        (meta && ctl_write(c, meta->buf, meta->len, deadline) != 0) ||
        ctl_read(c, hb, sizeof(hb), deadline) != 0) {
        snprintf(err, cap, "%s failed: %s", ds__opcode_name(op),
                 errno == ETIMEDOUT ? "the worker did not answer in time" : strerror(errno));
        return -1;
    }
    char e[160];
    if (ds__wire_header_decode(hb, 1u << 20, &c->rh, e, sizeof(e)) != 0 ||
        !(c->rh.flags & DS_FLAG_RESPONSE)) {
        snprintf(err, cap, "malformed %s response", ds__opcode_name(op));
        return -1;
    }
    free(c->meta);
    c->meta = malloc(c->rh.meta_len + c->rh.data_len + 1);
    if (c->meta == NULL || ctl_read(c, c->meta, c->rh.meta_len + c->rh.data_len, deadline) != 0) {
        snprintf(err, cap, "%s failed: %s", ds__opcode_name(op),
                 c->meta ? strerror(errno) : "out of memory");
        return -1;
    }
    ds__rbuf_init(&c->r, c->meta, c->rh.meta_len);
    const char *m;
    uint32_t ml = ds__rbuf_str(&c->r, &m);
    *st = (ds_status_t)c->rh.status;
    if (*st != DS_K_OK && ml)
        snprintf(err, cap, "%.*s (%s)", (int)ml, m, ds_status_name(*st));
    else if (*st != DS_K_OK)
        snprintf(err, cap, "%s (%s)", ds_status_message(*st), ds_status_name(*st));
    return 0;
}

static void ctl_close(ctl_conn_t *c)
{
    ds__tls_free(c->tls);
    ds__tls_ctx_free(c->tls_ctx);
    c->tls = NULL;
    c->tls_ctx = NULL;
    if (c->fd >= 0) close(c->fd);
    free(c->meta);
    c->fd = -1;
    c->meta = NULL;
}

/* What a HELLO answered (the fields dscli needs). */
typedef struct {
    uint64_t session;
    char worker_id[64];
    uint32_t pid;
    char session_key[80];
    char unix_socket[128];
    char proof[96];
} ctl_hello_t;

static void rd_cstr(ds_rbuf_t *r, char *out, size_t cap)
{
    const char *p;
    uint32_t l = ds__rbuf_str(r, &p);
    if (l >= cap) r->err = true;
    snprintf(out, cap, "%.*s", r->err ? 0 : (int)l, r->err ? "" : p);
}

/* HELLO on c->fd, answering the worker's challenge with token when it asks
 * (TCP to a worker with a secret; common/auth.h); chal non-NULL asks the
 * worker to prove it holds TCP session proof_sid (discovery, wire.h). */
static int ctl_hello(ctl_conn_t *c, const char *token, uint64_t proof_sid, const char *chal,
                     uint64_t deadline, ctl_hello_t *out, char *err, size_t cap)
{
    char proof[DS_AUTH_HEX_LEN + 1] = "";
    for (int round = 0; round < 2; round++) {
        ds_wbuf_t w;
        ds__wbuf_init(&w);
        ds__wbuf_u32(&w, DS_WIRE_VERSION);
        ds__wbuf_u64(&w, 0);
        ds__wbuf_u8(&w, 0);
        ds__wbuf_cstr(&w, proof);
        ds__wbuf_cstr(&w, "");
        if (chal) {
            ds__wbuf_u64(&w, proof_sid);
            ds__wbuf_cstr(&w, chal);
        }
        ds_status_t st;
        int r = ctl_call(c, DS_OP_HELLO, &w, deadline, &st, err, cap);
        ds__wbuf_free(&w);
        if (r != 0) return -1;
        if (st == DS_K_NOT_AUTHORIZED && round == 0 && token[0]) {
            char ch[DS_AUTH_HEX_LEN + 1];
            rd_cstr(&c->r, ch, sizeof(ch));
            ds__auth_prove(token, ch, proof);
            continue;
        }
        if (st != DS_K_OK) {
            if (st == DS_K_NOT_AUTHORIZED && !token[0])
                snprintf(err + strlen(err), cap - strlen(err),
                         "; the worker needs its secret: pass --auth_token_file");
            return -1;
        }
        break;
    }
    memset(out, 0, sizeof(*out));
    out->session = ds__rbuf_u64(&c->r);
    (void)ds__rbuf_u64(&c->r);
    (void)ds__rbuf_u32(&c->r);
    rd_cstr(&c->r, out->worker_id, sizeof(out->worker_id));
    out->pid = ds__rbuf_u32(&c->r);
    if (!c->r.err && c->r.pos < c->r.len) {
        (void)ds__rbuf_u64(&c->r);
        (void)ds__rbuf_u32(&c->r);
        (void)ds__rbuf_u32(&c->r);
    }
    if (!c->r.err && c->r.pos < c->r.len)
        rd_cstr(&c->r, out->session_key, sizeof(out->session_key));
    if (!c->r.err && c->r.pos < c->r.len)
        rd_cstr(&c->r, out->unix_socket, sizeof(out->unix_socket));
    if (!c->r.err && c->r.pos < c->r.len) rd_cstr(&c->r, out->proof, sizeof(out->proof));
    if (c->r.err) {
        snprintf(err, cap, "malformed hello response");
        return -1;
    }
    c->pid = out->pid;
    return 0;
}

/* --enable_tls: given as a switch, or (from -f FILE) a true value. */
static bool tls_wanted(const cli_cmd_t *cmd, const cli_args_t *a)
{
    const char *v = cli_value(cmd, a, "enable_tls");
    if (v == NULL) return false;
    static const char *const yes[] = {"", "true", "t", "yes", "y", "1"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcasecmp(v, yes[i]) == 0) return true;
    return false;
}

/* Reaches the worker at --worker_address and says HELLO, on its Unix
 * socket when this process can reach it, else over TCP (only when tcp_ok).
 * The socket is tried where the naming convention puts it (--unix_socket_dir
 * or the default directory), then where the worker says it is: the path
 * its HELLO over TCP names, accepted only when the process there proves it
 * is that worker (the same worker_id, and an HMAC of our challenge under the
 * TCP session's key; see wire.h, HELLO). c->transport says what was used.
 * TCP speaks TLS with --enable_tls (the worker's flag of that name), checking
 * the worker's certificate against --tls_ca and presenting --tls_cert and
 * --tls_key when given (a worker with --tls_verify_client asks for one). */
static int ctl_open(const cli_cmd_t *cmd, const cli_args_t *a, bool tcp_ok, uint64_t deadline,
                    ctl_conn_t *c, char *err, size_t cap)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    char host[256], path[PATH_MAX], e[256], token[1024] = "";
    int port;
    const char *addr = cli_value(cmd, a, "worker_address");
    if (ds__parse_hostport(addr, host, sizeof(host), &port, e, sizeof(e)) != 0) {
        snprintf(err, cap, "--worker_address: %s", e);
        return CLI_EXIT_USAGE;
    }
    const char *tf = cli_value(cmd, a, "auth_token_file");
    if (tf && ds__auth_read_secret(tf, token, sizeof(token), e, sizeof(e)) != 0) {
        snprintf(err, cap, "--auth_token_file: %s", e);
        return CLI_EXIT_USAGE;
    }
    if (ds__socket_path(cli_value(cmd, a, "unix_socket_dir"), host, port, path, sizeof(path)) !=
        0) {
        snprintf(err, cap, "the socket path for %s:%d is too long", host, port);
        return CLI_EXIT_USAGE;
    }
    int timeout = (int)(deadline - ds__now_ms());
    ctl_hello_t h;
    c->fd = ds__unix_connect(path, timeout, e, sizeof(e));
    if (c->fd >= 0) {
        snprintf(c->transport, sizeof(c->transport), "unix");
        snprintf(c->socket, sizeof(c->socket), "%s", path);
        return ctl_hello(c, "", 0, NULL, deadline, &h, err, cap) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    }
    c->fd = ds__tcp_connect(host, port, timeout, e, sizeof(e));
    if (c->fd < 0) {
        snprintf(err, cap, "no worker is running at %.100s:%d (%.200s)", host, port, e);
        return CLI_EXIT_FAIL;
    }
    if (tls_wanted(cmd, a)) {
        ds_tls_conf_t tc = {.ca = cli_value(cmd, a, "tls_ca"),
                            .cert = cli_value(cmd, a, "tls_cert"),
                            .key = cli_value(cmd, a, "tls_key"),
                            .passphrase_path = cli_value(cmd, a, "tls_passphrase_path")};
        char te[384];
        if ((c->tls_ctx = ds__tls_ctx_new(&tc, te, sizeof(te))) == NULL ||
            (c->tls = ds__tls_new(c->tls_ctx, c->fd, te, sizeof(te))) == NULL ||
            ds__tls_handshake(c->tls, deadline, te, sizeof(te)) != 0) {
            snprintf(err, cap, "TLS to %.100s:%d: %.380s", host, port, te);
            return CLI_EXIT_FAIL;
        }
    }
    if (ctl_hello(c, token, 0, NULL, deadline, &h, err, cap) != 0) {
        /* A TLS worker refuses a plain client, or just drops it. */
        if (c->tls == NULL && strstr(err, "TLS") == NULL)
            snprintf(err + strlen(err), cap - strlen(err),
                     "; a worker with --enable_tls needs --enable_tls and --tls_ca here");
        return CLI_EXIT_FAIL;
    }
    char chal[DS_AUTH_HEX_LEN + 1];
    if (h.unix_socket[0] == '\0')
        snprintf(c->why, sizeof(c->why), "the worker names no Unix socket");
    else if (h.session_key[0] == '\0' || ds__auth_challenge(chal) != 0)
        snprintf(c->why, sizeof(c->why), "cannot check who listens at %s", h.unix_socket);
    else {
        ctl_conn_t u;
        memset(&u, 0, sizeof(u));
        u.fd = ds__unix_connect(h.unix_socket, (int)(deadline - ds__now_ms()), e, sizeof(e));
        ctl_hello_t uh;
        char expect[DS_AUTH_HEX_LEN + 1], ue[256];
        ds__auth_prove(h.session_key, chal, expect);
        if (u.fd < 0)
            snprintf(c->why, sizeof(c->why), "cannot reach %s: %s", h.unix_socket, e);
        else if (ctl_hello(&u, "", h.session, chal, deadline, &uh, ue, sizeof(ue)) != 0)
            snprintf(c->why, sizeof(c->why), "%s: %s", h.unix_socket, ue);
        else if (strcmp(uh.worker_id, h.worker_id) != 0)
            snprintf(c->why, sizeof(c->why), "another worker (id %s) answers at %s", uh.worker_id,
                     h.unix_socket);
        else if (strlen(uh.proof) != DS_AUTH_HEX_LEN ||
                 !ds__auth_equal(uh.proof, expect, DS_AUTH_HEX_LEN))
            snprintf(c->why, sizeof(c->why), "the process at %s could not prove it is the worker",
                     h.unix_socket);
        else {
            /* The TCP connection stayed open until now: the proof needed
             * its session. */
            ctl_close(c);
            *c = u;
            snprintf(c->transport, sizeof(c->transport), "unix");
            snprintf(c->socket, sizeof(c->socket), "%s", h.unix_socket);
            return CLI_EXIT_OK;
        }
        ctl_close(&u);
    }
    snprintf(c->transport, sizeof(c->transport), "tcp");
    if (tcp_ok) return CLI_EXIT_OK;
    snprintf(err, cap,
             "the worker at %.100s:%d (pid %u) accepts SHUTDOWN only on its Unix socket, and "
             "this process cannot use it: %.200s; run dscli stop on the worker's host as a user "
             "who can reach its socket",
             host, port, h.pid, c->why);
    return CLI_EXIT_FAIL;
}

/* Gone, or a zombie waiting for its parent to reap it. */
static bool pid_alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    ds_proc_stat_t s;
    if (ds__proc_stat(pid, &s) != 0) return errno != ENOENT;
    return s.state != 'Z' && s.state != 'X';
}

static bool timeout_arg(const cli_cmd_t *cmd, const cli_args_t *a, const char *verb, long *ms)
{
    char err[256];
    if (cli_parse_seconds(cli_value(cmd, a, "timeout"), ms, err, sizeof(err)) == 0) return true;
    fprintf(stderr, "dscli %s: -t: %s\n", verb, err);
    return false;
}

static void set_value(const cli_cmd_t *cmd, cli_args_t *a, const char *name, const char *v)
{
    for (size_t i = 0; i < cmd->nflags; i++)
        if (strcmp(cmd->flags[i].name, name) == 0 && a->values[i] == NULL) a->values[i] = v;
}

/* A positive integer entry of the configuration file, else def. */
static long file_long(const char *path, const char *name, long def)
{
    char v[64], e[256];
    if (path == NULL || cli_config_get(path, name, v, sizeof(v), e, sizeof(e)) != 1) return def;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end != v && *end == '\0' && n > 0 ? n : def;
}

int cli_cmd_stop(const cli_cmd_t *cmd, const cli_args_t *given)
{
    /* -f FILE: the worker the file describes; flags given on the command
     * line win over the file's entries. */
    cli_args_t args = *given;
    cli_args_t *a = &args;
    const char *config = cli_value(cmd, a, "config_path");
    if (config == NULL) config = cli_value(cmd, a, "worker_config_path");
    static char f_addr[256], f_sock[PATH_MAX], f_token[PATH_MAX], f_tls[5][PATH_MAX];
    char err[512];
    if (config != NULL) {
        int r = cli_config_get(config, "worker_address", f_addr, sizeof(f_addr), err, sizeof(err));
        if (r < 0) {
            fprintf(stderr, "[ERROR] Stop failed: %s\n", err);
            return CLI_EXIT_FAIL;
        }
        if (r == 0) {
            fprintf(stderr,
                    "[ERROR] Stop failed: The configuration file is missing worker_address\n");
            return CLI_EXIT_FAIL;
        }
        set_value(cmd, a, "worker_address", f_addr);
        if (cli_config_get(config, "unix_socket_dir", f_sock, sizeof(f_sock), err, sizeof(err)) ==
                1 ||
            cli_config_get(config, "unix_domain_socket_dir", f_sock, sizeof(f_sock), err,
                           sizeof(err)) == 1)
            set_value(cmd, a, "unix_socket_dir", f_sock);
        if (cli_config_get(config, "auth_token_file", f_token, sizeof(f_token), err, sizeof(err)) ==
            1)
            set_value(cmd, a, "auth_token_file", f_token);
        /* The worker's own TLS files: its certificate is one its CA signed,
         * as its peers present it. */
        static const char *const tls_names[] = {"enable_tls", "tls_ca", "tls_cert", "tls_key",
                                                "tls_passphrase_path"};
        for (int i = 0; i < 5; i++)
            if (cli_config_get(config, tls_names[i], f_tls[i], sizeof(f_tls[i]), err,
                               sizeof(err)) == 1)
                set_value(cmd, a, tls_names[i], f_tls[i]);
    }
    const char *addr = cli_value(cmd, a, "worker_address");
    if (addr == NULL) {
        fprintf(stderr, "[ERROR] Stop failed: worker_address (-w) or config_path (-f) must be "
                        "specified\n");
        return CLI_EXIT_USAGE;
    }
    long timeout_ms;
    if (cli_value(cmd, a, "timeout") != NULL) {
        if (!timeout_arg(cmd, a, "stop", &timeout_ms)) return CLI_EXIT_USAGE;
    } else {
        /* Yuanrong's: time to migrate the arena at the migration rate. */
        long shm = file_long(config, "shared_memory_size_mb", CLI_DEFAULT_SHM_MB);
        long rate = file_long(config, "data_migrate_rate_limit_mb", CLI_DEFAULT_MIGRATE_MB);
        timeout_ms = (CLI_STOP_BASE_TIMEOUT_S * 1000L) + shm * 1000L / rate;
    }
    uint64_t deadline = ds__now_ms() + (uint64_t)timeout_ms;
    ctl_conn_t c;
    int rc = ctl_open(cmd, a, false, deadline, &c, err, sizeof(err));
    if (rc != CLI_EXIT_OK) {
        fprintf(stderr, "[ERROR] Stop failed: %s\n", err);
        ctl_close(&c);
        return rc;
    }
    ds_status_t st = DS_K_OK;
    /* The worker may close the connection as soon as it took the request;
     * whether the process exits is what counts, checked below. A worker in
     * a cluster answers once it moved its objects to the others, saying
     * what moved. */
    int called = ctl_call(&c, DS_OP_SHUTDOWN, NULL, deadline, &st, err, sizeof(err));
    if (called == 0 && st != DS_K_OK) {
        fprintf(stderr, "[ERROR] Stop failed: the worker at %s refused to shut down: %s\n", addr,
                err);
        ctl_close(&c);
        return CLI_EXIT_FAIL;
    }
    if (called == 0) {
        const char *report;
        uint32_t rl = ds__rbuf_str(&c.r, &report);
        if (!c.r.err && rl > 0)
            printf("[INFO] The worker @ %s left the cluster: %.*s\n", addr, (int)rl, report);
    }
    ctl_close(&c);
    pid_t pid = (pid_t)c.pid;
    while (pid > 0 && pid_alive(pid)) {
        if (ds__now_ms() >= deadline) {
            fprintf(stderr,
                    "[ERROR] Stop failed: [  FAILED  ] the worker service @ %s (PID: %d) is still "
                    "running after %.1f s\n",
                    addr, (int)pid, timeout_ms / 1000.0);
            return CLI_EXIT_FAIL;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("[INFO] [  OK  ] Stop worker service @ %s normally, PID: %d\n", addr, (int)pid);
    return CLI_EXIT_OK;
}

int cli_cmd_status(const cli_cmd_t *cmd, const cli_args_t *a)
{
    long timeout_ms;
    if (!timeout_arg(cmd, a, "status", &timeout_ms)) return CLI_EXIT_USAGE;
    uint64_t deadline = ds__now_ms() + (uint64_t)timeout_ms;
    ctl_conn_t c;
    char err[512];
    int rc = ctl_open(cmd, a, true, deadline, &c, err, sizeof(err));
    ds_status_t st = DS_K_OK;
    if (rc == CLI_EXIT_OK && ctl_call(&c, DS_OP_STATS, NULL, deadline, &st, err, sizeof(err)) != 0)
        rc = CLI_EXIT_FAIL;
    if (rc == CLI_EXIT_OK && st != DS_K_OK) rc = CLI_EXIT_FAIL;
    if (rc != CLI_EXIT_OK) {
        fprintf(stderr, "dscli status: %s\n", err);
        ctl_close(&c);
        return rc;
    }
    const char *json;
    uint32_t jl = ds__rbuf_str(&c.r, &json);
    char *copy = strndup(json, jl);
    cJSON *doc = copy ? cJSON_Parse(copy) : NULL;
    /* How dscli reached the worker, beside what the worker says. */
    cJSON *tr = doc ? cJSON_AddObjectToObject(doc, "dscli_transport") : NULL;
    if (tr) {
        cJSON_AddStringToObject(tr, "used", c.transport);
        if (c.socket[0]) cJSON_AddStringToObject(tr, "socket", c.socket);
        if (c.why[0]) cJSON_AddStringToObject(tr, "why_not_unix", c.why);
    }
    char *pretty = doc ? cJSON_Print(doc) : NULL;
    if (pretty)
        printf("%s\n", pretty);
    else
        printf("%.*s\n", (int)jl, json);
    free(pretty);
    cJSON_Delete(doc);
    free(copy);
    ctl_close(&c);
    return CLI_EXIT_OK;
}
