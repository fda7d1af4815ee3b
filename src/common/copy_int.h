/* Private to copy.c and copy_wide.c: the ways a large copy can take. */
#ifndef DS_COMMON_COPY_INT_H
#define DS_COMMON_COPY_INT_H

#include <stdbool.h>
#include <stddef.h>

enum { DS__WAY_TRY = 0, DS__WAY_MEMCPY = 1, DS__WAY_MOVSB = 2, DS__WAY_NT = 3 };

/* DS_COPY_THREADS: 1 = no wide copies, 2 = every copy that can go wide,
 * unset = each size class measures (copy.h, "Wide copies"). */
enum { DS__WIDE_OFF = 1, DS__WIDE_ALWAYS = 2, DS__WIDE_MEASURE = 3 };
int ds__copy_wide_mode(void);

/* memcpy(dst, src, n) by one way (not DS__WAY_TRY); memcpy in builds
 * without the others. */
void ds__copy_by(int way, void *dst, const void *src, size_t n);

/* The copy of n bytes by way, by the calling thread and the process's
 * helper thread (copy.h, "Wide copies"); false when it cannot run (one
 * CPU, off, the helper busy with another thread's copy or not started),
 * and then it copied nothing. */
bool ds__copy_wide(int way, void *dst, const void *src, size_t n);

#endif
