/* Large copies into and out of the shared-memory arena.
 *
 * glibc's memcpy chooses how to move a large block from cache sizes it reads
 * once at start, and under a hypervisor those are often wrong. On the
 * development VM (AMD EPYC, glibc 2.36) it reports a 384 MiB L3 and stops
 * using `rep movsb` at the 1 MiB L2 size, so every copy of 1 MiB and more
 * runs a vector loop that is slower there: measured (warm buffers, p50)
 * 22.0 against 18.3 us at 1 MiB, 822 against 506 us at 16 MiB, 18.6 against
 * 15.7 ms at 256 MiB. On other CPUs (AMD Zen 3, glibc's reason for that
 * limit) the vector loop wins instead.
 *
 * So ds__copy does not guess: for each power-of-two size class from 64 KiB
 * up, its first DS_COPY_TRIALS copies (DS_COPY_TRIALS_BIG from 8 MiB, where
 * one copy takes milliseconds, so that a process making few large copies
 * is not left alternating, half its copies the slower way) alternate
 * between memcpy and `rep movsb` and are timed, and from then on the class
 * uses whichever had the shorter best time (memcpy unless `rep movsb` wins
 * by 3%). Smaller copies, CPUs without ERMS (fast `rep movsb`), other
 * architectures and sanitizer builds (whose checks cannot see inside
 * assembly) always use memcpy. DS_COPY=memcpy or DS_COPY=movsb in the
 * environment forces one way for the whole process. The copy itself is the
 * same bytes either way; only its speed differs. Thread-safe: the per-class statistics are relaxed
 * atomics, and a race between two trials costs at most one sample. */
#ifndef DS_COMMON_COPY_H
#define DS_COMMON_COPY_H

#include <stdbool.h>
#include <stddef.h>

#define DS_COPY_MIN (64u * 1024u)
#define DS_COPY_TRIALS 16u
#define DS_COPY_TRIALS_BIG 4u
#define DS_COPY_BIG (8u << 20)

/* memcpy(dst, src, n), for non-overlapping ranges, at the faster of the two
 * ways this CPU has for n's size class. */
void ds__copy(void *dst, const void *src, size_t n);

/* The way size class of n uses now: "memcpy", "rep movsb", or "trying"
 * while its trials run (for benchmarks and tests). */
const char *ds__copy_way(size_t n);

/* Whether this CPU has fast `rep movsb` (and this build uses it). */
bool ds__copy_movsb_ok(void);
/* memcpy(dst, src, n) with `rep movsb`, whatever the size class chose;
 * only when ds__copy_movsb_ok(). For limit measurements. */
void ds__copy_movsb(void *dst, const void *src, size_t n);

/* Forces a way for every size class: 0 = measure (the default), 1 =
 * memcpy, 2 = rep movsb where the CPU has it. For benchmarks and tests. */
void ds__copy_force(int way);

#endif
