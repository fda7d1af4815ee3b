/* ThreadSanitizer annotations for the synchronisation it cannot see, the
 * worker's (another process), in both directions:
 * - a client thread fills an arena block and hands it to the worker
 *   (PUBLISH, or CREATE then memcpy then PUBLISH); the worker makes it
 *   visible (shm index seqlock, GET replies); another thread of the same
 *   client then reads it. The block's address in this process's mapping is
 *   the synchronisation object, and a write not yet published when another
 *   thread reads the range is still reported. The reader also acquires the
 *   mapping's base, which every publisher of this process releases: the
 *   block it reads may have been written by another process over a range
 *   that a thread of this process wrote and published earlier at another
 *   start;
 * - a client thread reads a pinned block and gives the pin back, or writes
 *   and publishes one that is later replaced or deleted; the worker frees
 *   the range and hands it, as arena space or a created buffer, to another
 *   thread of the same client, which writes it. The object here is the
 *   session's mapping (the new range need not start where the old block
 *   did). Both sides are needed: without the release when a block is
 *   published, a set's copy into space that another thread of the client
 *   later gets as a created buffer is reported as a race; and the creating
 *   thread's acquire must come after the CREATE answer, not before the
 *   request, or the same false race shows now and then.
 * TSan sees neither the socket round trips nor the worker's bookkeeping, so
 * without these it reports those ordered accesses as races. No-ops in
 * builds without TSan. */
#ifndef DS_COMMON_TSAN_H
#define DS_COMMON_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define DS__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DS__TSAN 1
#endif
#endif

#ifdef DS__TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
/* After writing an arena block at p of the mapping at base, before the
 * request that publishes it: for its readers, and for the writers of the
 * range once the worker hands it out again. */
#define DS__TSAN_PUBLISHED(base, p) (__tsan_release((void *)(p)), __tsan_release((void *)(base)))
/* Before reading an arena block at p of the mapping at base that the worker
 * said was published. */
#define DS__TSAN_READING(base, p) (__tsan_acquire((void *)(p)), __tsan_acquire((void *)(base)))
/* After the last read of a pinned block, before its pin goes back. */
#define DS__TSAN_READ_DONE(base) __tsan_release((void *)(base))
/* Before writing arena space or a created buffer the worker handed out,
 * after the answer that handed it out. */
#define DS__TSAN_WRITING(base) __tsan_acquire((void *)(base))
#else
#define DS__TSAN_PUBLISHED(base, p) ((void)(base), (void)(p))
#define DS__TSAN_READING(base, p) ((void)(base), (void)(p))
#define DS__TSAN_READ_DONE(base) ((void)(base))
#define DS__TSAN_WRITING(base) ((void)(base))
#endif

#endif
