/* ThreadSanitizer annotations for the one synchronisation it cannot see: a
 * client thread fills an arena block and hands it to the worker (PUBLISH, or
 * CREATE then memcpy then PUBLISH); the worker, another process, makes it
 * visible (shm index seqlock, GET replies); another thread of the same client
 * then reads it. TSan sees neither the socket round trip nor the worker's
 * stores, so without these it reports that ordered write and read as a race.
 * The block's address in this process's mapping is the synchronisation
 * object: a write that truly overlaps a read is still reported. No-ops in
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
/* After writing an arena block, before the request that publishes it. */
#define DS__TSAN_PUBLISHED(p) __tsan_release((void *)(p))
/* Before reading an arena block the worker said was published. */
#define DS__TSAN_READING(p) __tsan_acquire((void *)(p))
#else
#define DS__TSAN_PUBLISHED(p) ((void)(p))
#define DS__TSAN_READING(p) ((void)(p))
#endif

#endif
