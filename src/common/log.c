/* Leveled logging (see log.h). One write(2) per line so lines from threads and
 * processes sharing a log file do not interleave. */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Set by the main thread, read by every thread that logs: atomic, and relaxed
 * because nothing else is published through it. */
static atomic_int min_level = DS_LOG_INFO;
static const char *const level_names[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};

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
    if ((int)level < atomic_load_explicit(&min_level, memory_order_relaxed)) return;
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
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
