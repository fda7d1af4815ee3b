/* Large copies at the faster of memcpy and `rep movsb` (copy.h says why). */
#include "common/copy.h"
#include "common/copy_int.h"

#include "common/clock.h"
#include "common/tsan.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define DS__COPY_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DS__COPY_PLAIN 1
#endif
#endif
/* The sanitizers check memcpy's ranges; they cannot see inside assembly. */
#if defined(DS__TSAN) || !defined(__x86_64__)
#define DS__COPY_PLAIN 1
#endif

enum {
    WAY_TRY = DS__WAY_TRY,
    WAY_MEMCPY = DS__WAY_MEMCPY,
    WAY_MOVSB = DS__WAY_MOVSB,
    WAY_NT = DS__WAY_NT,
    WAYS = DS__WAYS
};

/* A copy by a way already chosen: wide when it is large enough. */
static void copy_chosen(int way, void *dst, const void *src, size_t n)
{
    if (!ds__copy_wide(way, dst, src, n)) ds__copy_by(way, dst, src, n);
}

static _Atomic int forced = -1; /* -1: DS_COPY not read yet */

#ifndef DS__COPY_PLAIN
#include <cpuid.h>
#include <emmintrin.h>

/* DS_COPY=memcpy, movsb or nt forces a way for the whole process
 * (anything else, or nothing: measure). */
static int forced_way(void)
{
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    if (f >= 0) return f;
    const char *e = getenv("DS_COPY");
    f = e && strcmp(e, "memcpy") == 0  ? WAY_MEMCPY
        : e && strcmp(e, "movsb") == 0 ? WAY_MOVSB
        : e && strcmp(e, "nt") == 0    ? WAY_NT
                                       : WAY_TRY;
    int expect = -1;
    atomic_compare_exchange_strong_explicit(&forced, &expect, f, memory_order_relaxed,
                                            memory_order_relaxed);
    return atomic_load_explicit(&forced, memory_order_relaxed);
}

/* Size classes 2^16 (64 KiB) .. 2^47 and up. */
#define CLASS_MIN 16
#define CLASSES 32

typedef struct {
    _Atomic unsigned trials;
    _Atomic int way;
    _Atomic uint64_t best[WAYS]; /* shortest ns seen per way; 0 = none yet */
} klass_t;

static klass_t classes[CLASSES];    /* ds__copy */
static klass_t classes_in[CLASSES]; /* ds__copy_in */
static _Atomic int erms = -1;       /* -1: not asked yet */

/* Enhanced REP MOVSB: CPUID leaf 7, EBX bit 9. */
static bool has_erms(void)
{
    int e = atomic_load_explicit(&erms, memory_order_relaxed);
    if (e < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        e = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 9)) ? 1 : 0;
        atomic_store_explicit(&erms, e, memory_order_relaxed);
    }
    return e == 1;
}

static void movsb(void *dst, const void *src, size_t n)
{
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

/* Non-temporal stores, 64 bytes a step, once the destination is 16-byte
 * aligned (the bytes before and the tail: memcpy); the fence orders them
 * before whatever this thread stores next (the request that publishes the
 * value). */
static void nt_copy(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (16u - ((uintptr_t)d & 15u)) & 15u;
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
    memcpy(d, s, n);
    _mm_sfence();
}

void ds__copy_by(int way, void *dst, const void *src, size_t n)
{
    if (way == WAY_MOVSB)
        movsb(dst, src, n);
    else if (way == WAY_NT)
        nt_copy(dst, src, n);
    else
        memcpy(dst, src, n);
}

static klass_t *class_of(klass_t *table, size_t n)
{
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)n);
    k = k < CLASS_MIN ? 0 : k - CLASS_MIN;
    return &table[k < CLASSES ? k : CLASSES - 1];
}

static void keep_best(_Atomic uint64_t *best, uint64_t ns)
{
    uint64_t b = atomic_load_explicit(best, memory_order_relaxed);
    while ((b == 0 || ns < b) && !atomic_compare_exchange_weak_explicit(
                                     best, &b, ns, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* One timed trial copy, the ways taking turns; the last one decides the
 * class's way: memcpy, unless another had a best time 3% shorter. */
static void trial(klass_t *k, const int *ways, unsigned nways, void *dst, const void *src, size_t n)
{
    unsigned t = atomic_fetch_add_explicit(&k->trials, 1, memory_order_relaxed);
    int w = ways[t % nways];
    uint64_t t0 = ds__now_ns();
    ds__copy_by(w, dst, src, n);
    keep_best(&k->best[w], ds__now_ns() - t0);
    unsigned per = n >= DS_COPY_BIG ? DS_COPY_TRIALS_BIG / 2u : DS_COPY_TRIALS / 2u;
    if (t + 1 != nways * per) return;
    int way = WAY_MEMCPY;
    uint64_t bw = atomic_load_explicit(&k->best[WAY_MEMCPY], memory_order_relaxed);
    for (unsigned i = 0; i < nways; i++) {
        uint64_t b = atomic_load_explicit(&k->best[ways[i]], memory_order_relaxed);
        if (ways[i] != WAY_MEMCPY && b != 0 && bw != 0 && b * 100 < bw * 97) {
            way = ways[i];
            bw = b * 100 / 97;
        }
    }
    atomic_store_explicit(&k->way, way, memory_order_relaxed);
}

/* Copies by the class's way, or as one of its trials. */
static void copy_class(klass_t *k, const int *ways, unsigned nways, void *dst, const void *src,
                       size_t n)
{
    int w = atomic_load_explicit(&k->way, memory_order_relaxed);
    if (w != WAY_TRY)
        copy_chosen(w, dst, src, n);
    else
        trial(k, ways, nways, dst, src, n);
}

static const int ways_out[] = {WAY_MEMCPY, WAY_MOVSB};
static const int ways_in[] = {WAY_MEMCPY, WAY_NT, WAY_MOVSB};

void ds__copy(void *dst, const void *src, size_t n)
{
    if (n < DS_COPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    int f = forced_way();
    if (f == WAY_MEMCPY || !has_erms()) {
        copy_chosen(WAY_MEMCPY, dst, src, n);
        return;
    }
    if (f == WAY_MOVSB) {
        copy_chosen(WAY_MOVSB, dst, src, n);
        return;
    }
    copy_class(class_of(classes, n), ways_out, 2, dst, src, n);
}

void ds__copy_in(void *dst, const void *src, size_t n)
{
    int f = n >= DS_COPY_MIN ? forced_way() : WAY_TRY;
    if (f == WAY_NT) {
        copy_chosen(WAY_NT, dst, src, n);
        return;
    }
    if (n < DS_COPY_BIG || f != WAY_TRY) {
        ds__copy(dst, src, n);
        return;
    }
    /* Without ERMS: memcpy against non-temporal stores. */
    copy_class(class_of(classes_in, n), ways_in, has_erms() ? 3 : 2, dst, src, n);
}

bool ds__copy_movsb_ok(void)
{
    return has_erms();
}

void ds__copy_movsb(void *dst, const void *src, size_t n)
{
    movsb(dst, src, n);
}

static const char *way_name(int w)
{
    return w == WAY_MOVSB    ? "rep movsb"
           : w == WAY_NT     ? "non-temporal"
           : w == WAY_MEMCPY ? "memcpy"
                             : "trying";
}

const char *ds__copy_way(size_t n)
{
    int f = forced_way();
    if (n < DS_COPY_MIN || f == WAY_MEMCPY || !has_erms()) return "memcpy";
    if (f == WAY_MOVSB) return "rep movsb";
    return way_name(atomic_load_explicit(&class_of(classes, n)->way, memory_order_relaxed));
}

const char *ds__copy_in_way(size_t n)
{
    int f = n >= DS_COPY_MIN ? forced_way() : WAY_TRY;
    if (f == WAY_NT) return "non-temporal";
    if (n < DS_COPY_BIG || f != WAY_TRY) return ds__copy_way(n);
    return way_name(atomic_load_explicit(&class_of(classes_in, n)->way, memory_order_relaxed));
}
#else
void ds__copy_by(int way, void *dst, const void *src, size_t n)
{
    (void)way;
    memcpy(dst, src, n);
}

void ds__copy(void *dst, const void *src, size_t n)
{
    copy_chosen(WAY_MEMCPY, dst, src, n);
}

void ds__copy_in(void *dst, const void *src, size_t n)
{
    copy_chosen(WAY_MEMCPY, dst, src, n);
}

bool ds__copy_movsb_ok(void)
{
    return false;
}

void ds__copy_movsb(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

const char *ds__copy_way(size_t n)
{
    (void)n;
    return "memcpy";
}

const char *ds__copy_in_way(size_t n)
{
    (void)n;
    return "memcpy";
}
#endif

void ds__copy_force(int way)
{
    atomic_store_explicit(&forced, way >= WAY_TRY && way <= WAY_NT ? way : WAY_TRY,
                          memory_order_relaxed);
}
