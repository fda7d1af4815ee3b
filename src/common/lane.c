/* Futex helpers for request lanes (lane.h). */
#include "common/lane.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int ds__futex_wait(_Atomic uint32_t *word, uint32_t val, uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    /* Not FUTEX_PRIVATE_FLAG: the word is in a mapping shared between
     * processes. */
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val, &ts, NULL, 0);
    if (r == 0 || errno == EAGAIN) return 0;
    return -1;
}

void ds__futex_wake(_Atomic uint32_t *word)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 1, NULL, NULL, 0);
}
