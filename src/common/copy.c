/* Large copies at the faster of memcpy and `rep movsb` (copy.h says why). */
#include "common/copy.h"

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

enum { WAY_TRY = 0, WAY_MEMCPY = 1, WAY_MOVSB = 2 };

static _Atomic int forced = -1; /* -1: DS_COPY not read yet */

#ifndef DS__COPY_PLAIN
#include <cpuid.h>

/* DS_COPY=memcpy or DS_COPY=movsb forces a way for the whole process
 * (anything else, or nothing: measure). */
static int forced_way(void)
{
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    if (f >= 0) return f;
    const char *e = getenv("DS_COPY");
    f = e && strcmp(e, "memcpy") == 0  ? WAY_MEMCPY
        : e && strcmp(e, "movsb") == 0 ? WAY_MOVSB
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
    _Atomic uint64_t best[2]; /* shortest ns seen: memcpy, rep movsb; 0 = none yet */
} klass_t;

static klass_t classes[CLASSES];
static _Atomic int erms = -1; /* -1: not asked yet */

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

static klass_t *class_of(size_t n)
{
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)n);
    k = k < CLASS_MIN ? 0 : k - CLASS_MIN;
    return &classes[k < CLASSES ? k : CLASSES - 1];
}

static void keep_best(_Atomic uint64_t *best, uint64_t ns)
{
    uint64_t b = atomic_load_explicit(best, memory_order_relaxed);
    while ((b == 0 || ns < b) && !atomic_compare_exchange_weak_explicit(
                                     best, &b, ns, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* One timed trial copy; the last one decides the class's way. */
static void trial(klass_t *k, void *dst, const void *src, size_t n)
{
    unsigned t = atomic_fetch_add_explicit(&k->trials, 1, memory_order_relaxed);
    int m = (int)(t & 1u);
    uint64_t t0 = ds__now_ns();
    if (m)
        movsb(dst, src, n);
    else
        memcpy(dst, src, n);
    keep_best(&k->best[m], ds__now_ns() - t0);
    if (t + 1 != (n >= DS_COPY_BIG ? DS_COPY_TRIALS_BIG : DS_COPY_TRIALS)) return;
    uint64_t bm = atomic_load_explicit(&k->best[0], memory_order_relaxed);
    uint64_t bs = atomic_load_explicit(&k->best[1], memory_order_relaxed);
    int way = bs != 0 && bm != 0 && bs * 100 < bm * 97 ? WAY_MOVSB : WAY_MEMCPY;
    atomic_store_explicit(&k->way, way, memory_order_relaxed);
}

void ds__copy(void *dst, const void *src, size_t n)
{
    if (n < DS_COPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    int f = forced_way();
    if (f == WAY_MEMCPY || !has_erms()) {
        memcpy(dst, src, n);
        return;
    }
    if (f == WAY_MOVSB) {
        movsb(dst, src, n);
        return;
    }
    klass_t *k = class_of(n);
    switch (atomic_load_explicit(&k->way, memory_order_relaxed)) {
    case WAY_MOVSB:
        movsb(dst, src, n);
        return;
    case WAY_MEMCPY:
        memcpy(dst, src, n);
        return;
    default:
        trial(k, dst, src, n);
    }
}

bool ds__copy_movsb_ok(void)
{
    return has_erms();
}

void ds__copy_movsb(void *dst, const void *src, size_t n)
{
    movsb(dst, src, n);
}

const char *ds__copy_way(size_t n)
{
    int f = forced_way();
    if (n < DS_COPY_MIN || f == WAY_MEMCPY || !has_erms()) return "memcpy";
    if (f == WAY_MOVSB) return "rep movsb";
    int w = atomic_load_explicit(&class_of(n)->way, memory_order_relaxed);
    return w == WAY_MOVSB ? "rep movsb" : w == WAY_MEMCPY ? "memcpy" : "trying";
}
#else
void ds__copy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
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
#endif

void ds__copy_force(int way)
{
    atomic_store_explicit(&forced, way >= WAY_TRY && way <= WAY_MOVSB ? way : WAY_TRY,
                          memory_order_relaxed);
}
