/* UCX_ADDR: a remote client registers its UCX worker address for its session
 * (see common/wire.h). UCX parses an address with assertions, not checks: a
 * malformed one aborts the process that hands it to ucp_ep_create. So the
 * worker never parses a client's address itself until a throwaway helper,
 * ds_ucx_check (src/worker/ucx_check.c, next to the worker's binary), has
 * created an endpoint to it with the same UCX and UCX_* settings and exited
 * cleanly. The request waits (deferred) while the helper runs; the loop
 * watches the helper's output pipe and reaps it at EOF. Once vetted, the
 * address is kept in the session, and UCX_GET only ever uses that one. */
#include "worker/ops/ops_int.h"

#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Checks running at once; more are refused with K_TRY_AGAIN. */
#define DS_UCX_CHECKS_MAX 8

struct ds_ucx_check {
    struct ds_ucx_check *next;
    ds_server_t *srv;
    ds_req_t *req; /* deferred */
    pid_t pid;
    int fd; /* the helper's stdout and stderr */
    ds_io_t io;
    char out[256];
    size_t outlen;
    char *addr;
};

int ds__ops_ucx_addr_init(ds_server_t *srv, char *err, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        snprintf(err, cap, "cannot start UCX for --enable_rdma: /proc/self/exe: %s",
                 strerror(errno));
        return -1;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    int w = snprintf(srv->ucx_check_path, sizeof(srv->ucx_check_path), "%s/ds_ucx_check", exe);
    if (w < 0 || (size_t)w >= sizeof(srv->ucx_check_path) ||
        access(srv->ucx_check_path, X_OK) != 0) {
        snprintf(err, cap,
                 "cannot start UCX for --enable_rdma: the address checker %s is missing or not "
                 "executable (it is built next to datasystem_worker)",
                 srv->ucx_check_path);
        return -1;
    }
    return 0;
}

static void unlink_check(ds_server_t *srv, struct ds_ucx_check *k)
{
    for (struct ds_ucx_check **pp = &srv->ucx_checks; *pp; pp = &(*pp)->next) {
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    }
    srv->ucx_nchecks--;
    ds__loop_del(srv->net.loop, &k->io);
    close(k->fd);
}

static void check_done(struct ds_ucx_check *k)
{
    ds_server_t *srv = k->srv;
    unlink_check(srv, k);
    int status = 0;
    pid_t r;
    do
        r = waitpid(k->pid, &status, 0); /* its output ended: it is exiting */
    while (r < 0 && errno == EINTR);
    bool ok = r == k->pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    while (k->outlen && (k->out[k->outlen - 1] == '\n' || k->out[k->outlen - 1] == '\r'))
        k->outlen--;
    k->out[k->outlen] = '\0';
    ds_session_t *s = k->req->session;
    if (ds__req_gone(k->req)) {
        ds__req_drop(k->req);
    } else if (ok && s) {
        free(s->ucx_addr);
        s->ucx_addr = k->addr;
        k->addr = NULL;
        ds__req_error(k->req, DS_K_OK, "%s", "");
    } else {
        srv->uctr.addr_rejected++;
        char why[320];
        if (r == k->pid && WIFSIGNALED(status))
            snprintf(why, sizeof(why), "UCX aborted parsing it (signal %d)", WTERMSIG(status));
        else
            snprintf(why, sizeof(why), "%s", k->outlen ? k->out : "the check failed");
        DS_LOG_WARN("rdma: refused a client's UCX address (%zu characters): %s", strlen(k->addr),
                    why);
        ds__req_error(k->req, DS_K_INVALID,
                      "the UCX address (%zu characters) is not one this worker's UCX can reach: "
                      "%.200s",
                      strlen(k->addr), why);
    }
    free(k->addr);
    free(k);
}

static void on_output(void *ctx, uint32_t events)
{
    struct ds_ucx_check *k = ctx;
    (void)events;
    for (int i = 0; i < 64; i++) {
        char buf[512];
        ssize_t n = read(k->fd, buf, sizeof(buf));
        if (n > 0) {
            size_t take = (size_t)n;
            if (take > sizeof(k->out) - 1 - k->outlen) take = sizeof(k->out) - 1 - k->outlen;
            memcpy(k->out + k->outlen, buf, take);
            k->outlen += take;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        check_done(k); /* EOF or an error: the helper is done */
        return;
    }
}

void ds__ops_ucx_addr(ds_server_t *srv, ds_req_t *r)
{
    if (srv->ucx == NULL) {
        ds__req_error(r, DS_K_NOT_SUPPORTED,
                      "this worker does not send values over UCX: start it with --enable_rdma "
                      "true for clients with enable_ucx / DS_CLIENT_UCX=1");
        return;
    }
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *a;
    uint32_t al = ds__rbuf_str(&rb, &a);
    uint8_t bin[DS_UCX_ADDR_HEX_MAX / 2];
    if (!ds__rbuf_done(&rb) || al < 2 || al > DS_UCX_ADDR_HEX_MAX ||
        ds__ucx_from_hex(a, al, bin, sizeof(bin)) <= 0 || r->session == NULL) {
        ds__req_error(r, DS_K_INVALID,
                      "malformed UCX_ADDR: the address must be lowercase hex of 2..%d characters",
                      DS_UCX_ADDR_HEX_MAX);
        return;
    }
    if (r->session->ucx_addr && strlen(r->session->ucx_addr) == al &&
        memcmp(r->session->ucx_addr, a, al) == 0) {
        ds__req_error(r, DS_K_OK, "%s", ""); /* vetted already */
        return;
    }
    if (srv->ucx_nchecks >= DS_UCX_CHECKS_MAX) {
        ds__req_error(r, DS_K_TRY_AGAIN, "%d UCX address checks are under way; try again",
                      DS_UCX_CHECKS_MAX);
        return;
    }
    struct ds_ucx_check *k = calloc(1, sizeof(*k));
    char *addr = malloc(al + 1);
    int p[2] = {-1, -1};
    if (k == NULL || addr == NULL || pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
        free(k);
        free(addr);
        ds__req_error(r, DS_K_RUNTIME_ERROR, "cannot check the UCX address: %s", strerror(errno));
        return;
    }
    memcpy(addr, a, al);
    addr[al] = '\0';
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    char *argv[] = {srv->ucx_check_path, addr, NULL};
    int rc = posix_spawn(&k->pid, srv->ucx_check_path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    k->fd = p[0];
    k->srv = srv;
    k->addr = addr;
    if (rc != 0 || ds__loop_add(srv->net.loop, &k->io, k->fd, EPOLLIN, on_output, k) != 0) {
        if (rc == 0) {
            kill(k->pid, SIGKILL);
            waitpid(k->pid, NULL, 0);
        }
        close(k->fd);
        free(addr);
        free(k);
        ds__req_error(r, DS_K_RUNTIME_ERROR, "cannot run %s: %s", srv->ucx_check_path,
                      strerror(rc ? rc : errno));
        return;
    }
    k->req = ds__req_park(r, NULL, NULL);
    if (k->req == NULL) {
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
        ds__loop_del(srv->net.loop, &k->io);
        close(k->fd);
        free(addr);
        free(k);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    k->next = srv->ucx_checks;
    srv->ucx_checks = k;
    srv->ucx_nchecks++;
    srv->uctr.addr_checks++;
}

void ds__ops_ucx_addr_destroy(ds_server_t *srv)
{
    while (srv->ucx_checks) {
        struct ds_ucx_check *k = srv->ucx_checks;
        kill(k->pid, SIGKILL);
        check_done(k); /* reaps it; the answer goes nowhere now */
    }
}
