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
 * is not left trying, some of its copies the slower way) are trials: a
 * warm-up block of DS_COPY_BLOCK (DS_COPY_BLOCK_BIG) copies, untimed (a
 * process's first copies into the arena fault its pages into its page
 * tables, at 5-25x a copy's time), then a timed block of as many
 * consecutive copies by memcpy, then one by `rep movsb`; from then on the
 * class uses whichever had the shorter median copy (memcpy unless `rep
 * movsb` wins by 10%). The first copy of a block is not counted, and
 * medians, not best times, decide: on the AMD VM of 2026-12-03 `rep movsb`
 * took 37 us to memcpy's 22 at 1 MiB (p50), yet its best time sometimes
 * won. Smaller copies, CPUs
 * without ERMS (fast `rep movsb`), other architectures and sanitizer
 * builds (whose checks cannot see inside assembly) always use memcpy.
 * DS_COPY=memcpy or DS_COPY=movsb in the environment forces one way for
 * the whole process. The copy itself is the same bytes either way; only
 * its speed differs. Thread-safe: the per-class statistics are relaxed
 * atomics, and a race between two trials costs at most one sample.
 *
 * ds__copy_in is the copy of a value into the arena for some other process
 * to read later (a set). From DS_COPY_BIG up its trials have a third way,
 * non-temporal stores (SSE2 `movntdq`, which every x86-64 has), which write
 * the destination without first reading it into the cache. glibc turns to
 * them only above its own threshold (3/4 of the shared cache, 19 MiB on
 * the Intel VM of 2026-12-02), so between 8 MiB and that a copy into the
 * arena read every destination line from memory first: there a 16 MiB set
 * took 3.16-3.49 ms with memcpy and 2.50-3.04 ms with non-temporal stores,
 * a 12 MiB set 2.46-2.72 against 1.94-2.08 ms, and the get that read the
 * value back afterwards was no slower (alternating runs, p50). Smaller
 * classes never try them: a 1 MiB value read back soon is in the cache
 * after a plain copy and not after a non-temporal one (1 MiB get 138
 * against 86 us). The classes of ds__copy_in are their own, so a process's
 * gets, which copy out of the arena into a buffer its caller reads next,
 * never take non-temporal stores. DS_COPY=nt forces them for ds__copy_in
 * from DS_COPY_MIN up (ds__copy then measures as without DS_COPY).
 *
 * Wide copies: from DS_COPY_WIDE_MIN, once the size class has chosen its
 * way, both copy functions can split the copy into chunks that the calling
 * thread and one helper thread of the process copy side by side. One core
 * does not always saturate memory: on the Intel VM of 2026-12-03 two
 * threads copied 1 MiB in 35-37 us against one thread's 67-69 us, 16 MiB
 * in 1.3 against 2.4 ms (warm buffers, the helper polling). But where one
 * core's cache holds the whole copy, the helper's half crosses between the
 * cores and waking it costs more than it saves: on the AMD VM of
 * 2026-12-03 (2 MiB L2 per core) a local 1 MiB set took 48.8 us wide
 * against 38.8 alone, a get 40.0 against 27.0, a 64 MiB get 7.7 against
 * 6.3 ms, while a 64 MiB set took 3.3 against 4.5 ms. So each size class
 * (of each function) measures this too, once its way is chosen: a block
 * of copies alone, then one wide, timed as above, and the class goes wide
 * only if its median copy alone took at least DS_COPY_WIDE_MIN_NS and the
 * median wide copy was 10% shorter; every 4096 copies it measures again.
 * Blocks matter here: copies taking turns one by one would each find the
 * other's lines in the wrong core. The floor is the helper's wake-up,
 * which a copy's own timing does not show in full: on the AMD VM of
 * 2026-12-03 a block of wide 1 MiB copies sometimes timed 10% shorter,
 * yet sets and gets that went wide from then on took twice as long
 * (57-148 us against 26-29 us a set, 44-48 against 24-26 a get), with the
 * worker polling or not: the helper's vCPU had gone idle between copies.
 * There a 1 MiB copy alone takes 24 us; on the Intel VM, where wide copies
 * did pay at 1 MiB, 67. The helper is started at the first wide copy,
 * sleeps between copies, and is kept off the CPU its caller runs on
 * (copy_wide.c says why); one copy at a time uses it, and a thread that
 * finds it busy copies alone, as does a process pinned to one CPU.
 * DS_COPY_THREADS=1 in the environment turns wide copies off, and
 * DS_COPY_THREADS=2 makes every copy that can go wide (no trials). */
#ifndef DS_COMMON_COPY_H
#define DS_COMMON_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DS_COPY_MIN (64u * 1024u)
#define DS_COPY_BIG (8u << 20)
/* Consecutive trial copies of one way (the first not counted), below and
 * from DS_COPY_BIG. */
#define DS_COPY_BLOCK 8u
#define DS_COPY_BLOCK_BIG 3u
/* The trials that choose a class's way, a warm-up block and one per way:
 * ds__copy has two ways, and so ds__copy_in below DS_COPY_BIG; from there
 * it has three. */
#define DS_COPY_TRIALS (3u * DS_COPY_BLOCK)
#define DS_COPY_TRIALS_BIG (3u * DS_COPY_BLOCK_BIG)
#define DS_COPY_TRIALS_IN (4u * DS_COPY_BLOCK_BIG)
/* Then, from DS_COPY_WIDE_MIN, the trials of wide copies (alone, wide). */
#define DS_COPY_WIDE_TRIALS(n) (2u * ((n) >= DS_COPY_BIG ? DS_COPY_BLOCK_BIG : DS_COPY_BLOCK))
/* Wide copies from this size, in chunks of DS_COPY_WIDE_CHUNK (four times
 * that from DS_COPY_BIG). */
#define DS_COPY_WIDE_MIN (512u * 1024u)
/* A class goes wide only where a copy alone takes at least this long. */
#define DS_COPY_WIDE_MIN_NS 40000u
#define DS_COPY_WIDE_CHUNK (64u * 1024u)

/* memcpy(dst, src, n), for non-overlapping ranges, at the faster of the two
 * ways this CPU has for n's size class. */
void ds__copy(void *dst, const void *src, size_t n);

/* The way size class of n uses now: "memcpy", "rep movsb", or "trying"
 * while its trials run (for benchmarks and tests). */
const char *ds__copy_way(size_t n);

/* ds__copy for a value written into the arena for another process to read
 * later: from DS_COPY_BIG its classes also try non-temporal stores. */
void ds__copy_in(void *dst, const void *src, size_t n);
/* The way ds__copy_in's class of n uses now: as ds__copy_way, or
 * "non-temporal". */
const char *ds__copy_in_way(size_t n);

/* Whether this CPU has fast `rep movsb` (and this build uses it). */
bool ds__copy_movsb_ok(void);
/* memcpy(dst, src, n) with `rep movsb`, whatever the size class chose;
 * only when ds__copy_movsb_ok(). For limit measurements. */
void ds__copy_movsb(void *dst, const void *src, size_t n);

/* Forces a way for every size class: 0 = measure (the default), 1 =
 * memcpy, 2 = rep movsb where the CPU has it, 3 = non-temporal stores for
 * ds__copy_in (ds__copy measures). For benchmarks and tests. */
void ds__copy_force(int way);

/* 1: no wide copies, 2: every copy that can goes wide, 0: the size
 * classes measure (the default). For benchmarks and tests; DS_COPY_THREADS
 * sets it for a process. */
void ds__copy_threads_force(int threads);
/* Whether copies of n bytes by ds__copy (in: ds__copy_in) go "wide", copy
 * "alone", or are "trying" both. */
const char *ds__copy_wide_choice(size_t n, bool in);
/* Wide copies made so far, and the chunks of them the helper copied. */
void ds__copy_wide_stats(uint64_t *jobs, uint64_t *helped);

#endif
