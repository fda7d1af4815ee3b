/* Monotonic time helpers. */
#ifndef DS_COMMON_CLOCK_H
#define DS_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t ds__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ds__now_ms(void)
{
    return ds__now_ns() / 1000000ull;
}

#endif
