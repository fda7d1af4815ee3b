/* Large copies into and out of the shared-memory arena.
 *
 * Rule: for each power-of-two size class from DS_COPY_MIN up, a process
 * measures which way of copying is faster on the machine it runs on and
 * uses that way; it never trusts glibc's choice alone.
 *
 * Why: glibc's memcpy picks its strategy for large blocks from cache sizes
 * it reads once at start. Under a hypervisor those sizes are often
 * misreported, and glibc may then stop using `rep movsb` at a size where it
 * is the faster way, or use a vector loop where `rep movsb` loses; which
 * way wins differs between CPUs, so it has to be measured, not guessed.
 *
 * Trials: the first DS_COPY_TRIALS copies of a class (DS_COPY_TRIALS_BIG
 * from DS_COPY_BIG, where one copy takes milliseconds and a process that
 * makes few large copies must not spend many of them on trials) are a
 * warm-up block of DS_COPY_BLOCK (DS_COPY_BLOCK_BIG) copies, untimed
 * (a process's first copies into the arena fault its pages into its page
 * tables, many times a copy's cost), then a timed block of as many
 * consecutive copies by memcpy, then one by `rep movsb`. From then on the
 * class uses whichever had the shorter median copy (memcpy unless `rep
 * movsb` wins by 10%). The first copy of a block is not counted, and
 * medians, not best times, decide: a way whose typical copy is slower can
 * still post the best single time. Smaller copies, CPUs without ERMS (fast
 * `rep movsb`), other architectures and sanitizer builds (whose checks
 * cannot see inside assembly) always use memcpy. DS_COPY=memcpy or
 * DS_COPY=movsb in the environment forces one way for the whole process.
 * The copy is the same bytes either way; only its speed differs.
 * Thread-safe: the per-class statistics are relaxed atomics, and a race
 * between two trials costs at most one sample.
 *
 * ds__copy_in is the copy of a value into the arena for some other process
 * to read later (a set). From DS_COPY_BIG up its trials have a third way,
 * non-temporal stores (SSE2 `movntdq`, which every x86-64 has), which write
 * the destination without first reading it into the cache. glibc turns to
 * them only above 3/4 of the shared cache, so below that threshold a plain
 * copy into the arena first reads every destination line from memory,
 * which non-temporal stores avoid; the get that reads the value back later
 * is no slower for it. Smaller classes never try them: a value of a few
 * MiB is often read back while a plain copy has left it in the cache, and
 * a non-temporal copy would not have. The classes of ds__copy_in are their
 * own, so a process's gets, which copy out of the arena into a buffer its
 * caller reads next, never take non-temporal stores. DS_COPY=nt forces them
 * for ds__copy_in from DS_COPY_MIN up (ds__copy then measures as without
 * DS_COPY).
 *
 * Wide copies: from DS_COPY_WIDE_MIN, once the size class has chosen its
 * way, both copy functions can split the copy into chunks that the calling
 * thread and one helper thread of the process copy side by side, because
 * one core does not always saturate memory. Where one core's cache holds
 * the whole copy, though, the helper's half crosses between the cores and
 * waking the helper costs more than it saves. So each size class (of each
 * function) measures this too, once its way is chosen: a block of copies
 * alone, then one wide, timed as above, and the class goes wide only if its
 * median copy alone took at least DS_COPY_WIDE_MIN_NS and the median wide
 * copy was 10% shorter; every 4096 copies it measures again. Blocks matter
 * here: copies taking turns one by one would each find the other's lines
 * in the wrong core. The floor DS_COPY_WIDE_MIN_NS stands for the helper's
 * wake-up, which a block of back-to-back copies does not show in full: in
 * real traffic the helper's CPU has often gone idle between copies, and a
 * copy shorter than the floor can time faster wide in a block yet run
 * slower wide in sets and gets. The helper is started at the first wide
 * copy, sleeps between copies, and is kept off the CPU its caller runs on
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
/* ds__copy_in(dst, src, n) that calls mid(arg) once the first at bytes
 * are copied (at > n: at the end). Its size class, way and timing are the
 * whole copy's: a value copied in two pieces is copied as it would be at
 * once, whichever call copies it. */
void ds__copy_in_mid(void *dst, const void *src, size_t n, size_t at, void (*mid)(void *),
                     void *arg);
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
