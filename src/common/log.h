/* Leveled logging to stderr (the worker redirects stderr to its log file).
 * Lines look like: <UTC time, ISO 8601 with milliseconds> INFO  worker: listening on ...
 * (the time as YYYY-MM-DDTHH:MM:SS.mmmZ). */
#ifndef DS_COMMON_LOG_H
#define DS_COMMON_LOG_H

#include <stddef.h>

typedef enum { DS_LOG_DEBUG = 0, DS_LOG_INFO, DS_LOG_WARN, DS_LOG_ERROR } ds_log_level_t;
/* A level above every other: as a minimum, nothing is written. */
#define DS_LOG_OFF 4

/* Lines below the level are dropped; DS_LOG_OFF drops all. */
void ds__log_set_level(ds_log_level_t level);
/* Sends lines to fd instead of stderr (the client library's log file) and
 * copies those at stderr_min_level and above to stderr too (DS_LOG_OFF:
 * none). Lines below ds__log_set_level's level go to stderr only when they
 * are at stderr_min_level. */
void ds__log_set_sink(int fd, int stderr_min_level);
/* Parses "debug", "info", "warn", "error"; -1 when unknown. */
int ds__log_parse_level(const char *s);
void ds__log(ds_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Creates dir and its missing parents (mode 0700). 0, or -1 with errno set. */
int ds__mkdirs(const char *dir);
/* The worker's log file in dir: <dir>/worker-<host>-<port>.log (dscli start
 * and the worker's --log_dir agree on it). 0, or -1 when it does not fit. */
int ds__log_path(const char *dir, const char *host, int port, char *out, size_t cap);
/* Sends stdout and stderr, and so every log line, to that file (appending).
 * 0, or -1 with a message. */
int ds__log_to_dir(const char *dir, const char *host, int port, char *err, size_t err_cap);

#define DS_LOG_DEBUG(...) ds__log(DS_LOG_DEBUG, __VA_ARGS__)
#define DS_LOG_INFO(...) ds__log(DS_LOG_INFO, __VA_ARGS__)
#define DS_LOG_WARN(...) ds__log(DS_LOG_WARN, __VA_ARGS__)
#define DS_LOG_ERROR(...) ds__log(DS_LOG_ERROR, __VA_ARGS__)

#endif
