/* /proc/PID/stat, parsed once for every reader (proc(5)). */
#include "common/procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ds__proc_stat(pid_t pid, ds_proc_stat_t *out)
{
    char path[64], buf[1024];
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/stat");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int saved = errno;
    close(fd);
    if (n <= 0) {
        errno = n < 0 ? saved : EPROTO;
        return -1;
    }
    buf[n] = '\0';
    memset(out, 0, sizeof(*out));
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ' || p[2] == '\0') {
        errno = EPROTO;
        return -1;
    }
    out->state = p[2];
    p += 3; /* the space before field 4 */
    int field = 3;
    for (char *save = NULL, *t = strtok_r(p, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        unsigned long long v = strtoull(t, NULL, 10);
        switch (++field) {
        case 10:
            out->minflt = v;
            break;
        case 12:
            out->majflt = v;
            break;
        case 14:
            out->utime = v;
            break;
        case 15:
            out->stime = v;
            break;
        case 22:
            out->starttime = v;
            break;
        case 39:
            out->processor = (int)v;
            return 0;
        default:
            break;
        }
    }
    /* a line that ends before field 22 is not a process's stat line */
    if (field < 22) {
        errno = EPROTO;
        return -1;
    }
    out->processor = -1;
    return 0;
}
