/* The client's environment variables (Yuanrong's client_env_guide): the
 * logging ones, read once per process, and the connection fallbacks
 * ds_client_connect uses for what its options leave unset.
 *
 * Logging. The library writes a line only for rare events (a worker that
 * restarted, a failover). By default to stderr; DATASYSTEM_CLIENT_LOG_DIR
 * sends the lines to <dir>/ds_client.log (ds_client_<pid>.log with
 * DATASYSTEM_CLIENT_LOG_WITHOUT_PID=false), DATASYSTEM_LOG_TO_STDERR=true
 * keeps them on stderr regardless, DATASYSTEM_ALSO_LOG_TO_STDERR=true copies
 * every line to stderr as well and DATASYSTEM_STD_THRESHOLD (0 INFO,
 * 1 WARNING, 2 ERROR, 3 FATAL: none here) those from that level on.
 * DATASYSTEM_MIN_LOG_LEVEL (same scale) drops lines below it;
 * DATASYSTEM_LOG_V above 0 adds the debug lines (Yuanrong's VLOG). A value
 * that cannot be read is reported on stderr and ignored: logging never
 * stops a client from connecting. */
#include "client/client_internal.h"
#include "common/error.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* -1 when unset, -2 when unreadable (reported), else the value. */
static long env_long(const char *name, long lo, long hi)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end != '\0' || x < lo || x > hi) {
        DS_LOG_WARN("client: %s='%.32s' is not a number in %ld..%ld; ignored", name, v, lo, hi);
        return -2;
    }
    return x;
}

/* -1 unset or unreadable, else 0 / 1. */
static int env_bool(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') return -1;
    if (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0) return 1;
    if (strcasecmp(v, "false") == 0 || strcmp(v, "0") == 0) return 0;
    DS_LOG_WARN("client: %s='%.32s' is not true or false; ignored", name, v);
    return -1;
}

/* Yuanrong's 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL (never written here). */
static int glog_level(long v)
{
    static const int map[] = {DS_LOG_INFO, DS_LOG_WARN, DS_LOG_ERROR, DS_LOG_OFF};
    return map[v];
}

static void log_env(void)
{
    long min = env_long("DATASYSTEM_MIN_LOG_LEVEL", 0, 3);
    long v = env_long("DATASYSTEM_LOG_V", 0, INT_MAX);
    int level = min >= 0 ? glog_level(min) : DS_LOG_INFO;
    if (v > 0 && level <= DS_LOG_INFO) level = DS_LOG_DEBUG;
    ds__log_set_level((ds_log_level_t)level);

    const char *dir = getenv("DATASYSTEM_CLIENT_LOG_DIR");
    if (dir == NULL || dir[0] == '\0' || env_bool("DATASYSTEM_LOG_TO_STDERR") == 1) return;
    char path[PATH_MAX];
    int n = env_bool("DATASYSTEM_CLIENT_LOG_WITHOUT_PID") == 0
                ? snprintf(path, sizeof(path), "%s/ds_client_%d.log", dir, (int)getpid())
                : snprintf(path, sizeof(path), "%s/ds_client.log", dir);
    int fd = -1;
    if (n < 0 || (size_t)n >= sizeof(path) || ds__mkdirs(dir) != 0 ||
        (fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0) {
        DS_LOG_WARN("client: DATASYSTEM_CLIENT_LOG_DIR: cannot open a log file in %.200s: %s; "
                    "logging to stderr",
                    dir, strerror(errno));
        return;
    }
    long thr = env_long("DATASYSTEM_STD_THRESHOLD", 0, 3);
    int to_stderr = env_bool("DATASYSTEM_ALSO_LOG_TO_STDERR") == 1 ? DS_LOG_DEBUG
                    : thr >= 0                                     ? glog_level(thr)
                                                                   : DS_LOG_OFF;
    /* The fd stays open for the process's life: lines may come from any
     * client until exit. */
    ds__log_set_sink(fd, to_stderr);
}

static pthread_once_t log_once = PTHREAD_ONCE_INIT;

void ds__client_env_init(void)
{
    pthread_once(&log_once, log_env);
}

ds_status_t ds__client_env_fallbacks(const char **host, int *port, const char **token,
                                     int *connect_timeout_ms)
{
    if ((*host == NULL || (*host)[0] == '\0') && getenv("DATASYSTEM_HOST"))
        *host = getenv("DATASYSTEM_HOST");
    if (*port == 0) {
        const char *v = getenv("DATASYSTEM_PORT");
        if (v && v[0]) {
            char *end;
            long p = strtol(v, &end, 10);
            if (*end != '\0' || p < 1 || p > 65535)
                return ds__set_error(DS_K_INVALID, "DATASYSTEM_PORT='%.32s' is not a port", v);
            *port = (int)p;
        }
    }
    if (*token == NULL && getenv("DATASYSTEM_TOKEN") && getenv("DATASYSTEM_TOKEN")[0])
        *token = getenv("DATASYSTEM_TOKEN");
    if (*connect_timeout_ms == 0) {
        const char *v = getenv("DATASYSTEM_CONNECT_TIME_MS");
        if (v && v[0]) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end != '\0' || t < 0 || t > INT_MAX)
                return ds__set_error(DS_K_INVALID,
                                     "DATASYSTEM_CONNECT_TIME_MS='%.32s' is not a timeout in ms "
                                     "(0..%d)",
                                     v, INT_MAX);
            *connect_timeout_ms = (int)t;
        }
    }
    return DS_K_OK;
}
