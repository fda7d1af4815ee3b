/* The fields of /proc/PID/stat that the worker, dscli, the tests and the
 * benchmarks read: one parser, since the command name (field 2) may hold
 * spaces and parentheses and every field after it must be counted from its
 * last ')'. */
#ifndef DS_COMMON_PROCSTAT_H
#define DS_COMMON_PROCSTAT_H

#include <stdint.h>
#include <sys/types.h>

typedef struct {
    char state;            /* field 3: R, S, D, Z, X, ... */
    uint64_t minflt;       /* field 10 */
    uint64_t majflt;       /* field 12 */
    uint64_t utime, stime; /* fields 14 and 15, clock ticks */
    uint64_t starttime;    /* field 22, clock ticks after boot */
    int processor;         /* field 39: the CPU it last ran on */
} ds_proc_stat_t;

/* Reads /proc/PID/stat (pid 0: this process) into out. 0, or -1 with errno
 * set when the file cannot be read (ENOENT: no such process) or parsed
 * (EPROTO). */
int ds__proc_stat(pid_t pid, ds_proc_stat_t *out);

#endif
