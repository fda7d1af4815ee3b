/* Leveled logging (see log.h). One write(2) per line so lines from threads and
 * processes sharing a log file do not interleave. */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Set by the main thread, read by every thread that logs: atomic, and relaxed
 * because nothing else is published through it. */
static atomic_int min_level = DS_LOG_INFO;
static const char *const level_names[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
/* Where lines go (ds__log_set_sink): an fd, stderr by default, and the
 * lowest level also copied to stderr when that fd is another. */
static atomic_int sink_fd = STDERR_FILENO;
static atomic_int stderr_min = DS_LOG_OFF;

void ds__log_set_sink(int fd, int stderr_min_level)
{
    atomic_store_explicit(&stderr_min, stderr_min_level, memory_order_relaxed);
    atomic_store_explicit(&sink_fd, fd, memory_order_relaxed);
}

void ds__log_set_level(ds_log_level_t level)
{
    atomic_store_explicit(&min_level, (int)level, memory_order_relaxed);
}

int ds__log_parse_level(const char *s)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

void ds__log(ds_log_level_t level, const char *fmt, ...)
{
    int fd = atomic_load_explicit(&sink_fd, memory_order_relaxed);
    bool copy = fd != STDERR_FILENO &&
                (int)level >= atomic_load_explicit(&stderr_min, memory_order_relaxed);
    if ((int)level < atomic_load_explicit(&min_level, memory_order_relaxed) && !copy) return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03ldZ %s ", (long)(tv.tv_usec / 1000),
                  level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    n += m;
    if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = 0;
    if ((int)level >= atomic_load_explicit(&min_level, memory_order_relaxed))
        w = write(fd, line, (size_t)n);
    if (copy) w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

int ds__mkdirs(const char *dir)
{
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof(p), "%s", dir) >= sizeof(p)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

int ds__log_path(const char *dir, const char *host, int port, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/worker-%s-%d.log", dir, host, port);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int ds__log_to_dir(const char *dir, const char *host, int port, char *err, size_t err_cap)
{
    char path[PATH_MAX];
    if (ds__log_path(dir, host, port, path, sizeof(path)) != 0) {
        snprintf(err, err_cap, "--log_dir: the log path under %s is too long", dir);
        return -1;
    }
    int fd = -1;
    if (ds__mkdirs(dir) != 0 || (fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600)) < 0) {
        snprintf(err, err_cap, "--log_dir: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    fflush(NULL);
    int ok = dup2(fd, STDOUT_FILENO) >= 0 && dup2(fd, STDERR_FILENO) >= 0;
    int saved = errno;
    close(fd);
    if (!ok) {
        snprintf(err, err_cap, "--log_dir: cannot redirect the log to %s: %s", path,
                 strerror(saved));
        return -1;
    }
    return 0;
}
