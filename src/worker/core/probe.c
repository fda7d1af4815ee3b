/* Probe files for orchestrators, as Yuanrong Datasystem's deployments use
 * them: --health_check_path and --ready_check_path hold "health check
 * success" (the text Yuanrong's harness and Helm probe scripts grep for) and
 * are created once the worker serves; --liveness_check_path holds "liveness
 * check success" and is rewritten every --liveness_interval_s by the event
 * loop, so its mtime says the loop is alive (Yuanrong's liveness probe script
 * checks both the text and that the mtime is recent).
 *
 * As in Yuanrong: an empty flag writes no file; a leading "~/" is the user's
 * home directory; missing directories are created with mode 0700 and the
 * files are mode 0600; a file left by an earlier run is removed before the
 * worker starts serving, and a clean stop removes all three, so a stopped
 * worker never looks healthy. Files are written to a temporary name and
 * renamed, so a probe never reads a half-written file. */
#include "worker/core/server.h"

#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIVENESS_TEXT "liveness check success\n"
#define HEALTH_TEXT "health check success\n"

/* Creates the parent directories of path. */
static int make_parent(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) return 0;
    *slash = '\0';
    struct stat st;
    if (stat(dir, &st) == 0) return 0;
    if (ds__mkdirs(dir) != 0) return -1;
    return chmod(dir, 0700);
}

/* "~/x" becomes "$HOME/x" in place (Yuanrong's NormalizePathWithUserHomeDir). */
static int expand_home(char *path, size_t cap)
{
    if (strncmp(path, "~/", 2) != 0) return 0;
    const char *home = getenv("HOME");
    if (home == NULL || home[0] == '\0') {
        errno = ENOENT;
        return -1;
    }
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s/%s", home, path + 2) >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(path, cap, "%s", tmp);
    return 0;
}

static int write_file(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* The directory may be writable by others: a FIFO at the temporary name
     * must not block the event loop (O_NONBLOCK: ENXIO with no reader), a
     * symbolic link must not redirect the write, and only a regular file is
     * written. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    size_t len = strlen(text);
    bool ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int ds__probe_start(ds_server_t *srv, char *err, size_t err_cap)
{
    ds_worker_config_t *c = &srv->cfg;
    char *paths[] = {c->health_check_path, c->ready_check_path, c->liveness_check_path};
    const size_t caps[] = {sizeof(c->health_check_path), sizeof(c->ready_check_path),
                           sizeof(c->liveness_check_path)};
    const char *names[] = {"health_check_path", "ready_check_path", "liveness_check_path"};
    for (int i = 0; i < 3; i++) {
        if (paths[i][0] == '\0') continue;
        if (expand_home(paths[i], caps[i]) != 0) {
            snprintf(err, err_cap, "--%s: cannot resolve %s: %s", names[i], paths[i],
                     strerror(errno));
            return -1;
        }
        /* A file an earlier run left must not say this one is up. */
        if (unlink(paths[i]) != 0 && errno != ENOENT)
            DS_LOG_WARN("cannot remove the old probe file %s: %s", paths[i], strerror(errno));
    }
    for (int i = 0; i < 3; i++) {
        if (paths[i][0] == '\0') continue;
        if (make_parent(paths[i]) != 0 ||
            write_file(paths[i], i == 2 ? LIVENESS_TEXT : HEALTH_TEXT)) {
            snprintf(err, err_cap, "--%s: cannot write %s: %s", names[i], paths[i],
                     strerror(errno));
            return -1;
        }
        srv->probes_written = true;
    }
    if (c->liveness_check_path[0])
        srv->liveness_due_ms = ds__now_ms() + (uint64_t)c->liveness_interval_s * 1000u;
    return 0;
}

uint64_t ds__probe_tick(ds_server_t *srv, uint64_t now)
{
    if (srv->liveness_due_ms == 0) return 0;
    if (now >= srv->liveness_due_ms) {
        if (write_file(srv->cfg.liveness_check_path, LIVENESS_TEXT) != 0)
            DS_LOG_WARN("cannot refresh the liveness file %s: %s", srv->cfg.liveness_check_path,
                        strerror(errno));
        srv->liveness_due_ms = now + (uint64_t)srv->cfg.liveness_interval_s * 1000u;
    }
    return srv->liveness_due_ms;
}

void ds__probe_stop(ds_server_t *srv)
{
    if (!srv->probes_written) return;
    const ds_worker_config_t *c = &srv->cfg;
    const char *paths[] = {c->liveness_check_path, c->ready_check_path, c->health_check_path};
    for (int i = 0; i < 3; i++)
        if (paths[i][0]) unlink(paths[i]);
    srv->probes_written = false;
    srv->liveness_due_ms = 0;
}
