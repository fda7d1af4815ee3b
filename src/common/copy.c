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
    WAY_NT = DS__WAY_NT
};

/* Size classes 2^16 (64 KiB) .. 2^47 and up. */
#define CLASS_MIN 16
#define CLASSES 32
/* A class that has decided measures again after RETRY_FIRST copies, then
 * after twice as many each time, up to RETRY_MAX: the first trials may
 * have run while its copies were not what they became (after a larger
 * value's sets, say, into memory out of the cache). */
#define RETRY_FIRST 64u
#define RETRY_MAX 4096u
#define ARMS 3 /* ways a class tries at most: memcpy, non-temporal, rep movsb */

enum { WIDE_TRY = 0, WIDE_ALONE = 1, WIDE_ON = 2 };

/* One round of trials: arms (ways of copying) take turns in blocks of
 * consecutive copies, so that one arm's copies do not pay for the caches
 * another left behind (a wide copy leaves half the destination in the
 * helper's core); the first copy of each block is not counted. */
typedef struct {
    _Atomic unsigned next;                    /* trials started */
    _Atomic uint32_t ns[ARMS][DS_COPY_BLOCK]; /* ns per copy; 0 = none */
} trials_t;

typedef struct {
    trials_t ways;
    _Atomic int way; /* WAY_TRY until the ways' trials decide */
    trials_t wide;
    _Atomic int wide_on;          /* WIDE_TRY, WIDE_ALONE or WIDE_ON */
    _Atomic unsigned uses, round; /* copies since the last decision; rounds of trials */
} klass_t;

static klass_t classes[CLASSES];    /* ds__copy */
static klass_t classes_in[CLASSES]; /* ds__copy_in */

static klass_t *class_of(klass_t *table, size_t n)
{
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)n);
    k = k < CLASS_MIN ? 0 : k - CLASS_MIN;
    return &table[k < CLASSES ? k : CLASSES - 1];
}

/* One copy: n bytes, with mid(arg) called once the first at bytes are
 * copied (at == n, mid NULL: none). Its class, way and timing are the whole
 * copy's, so that a value copied in two pieces (a set that wakes the
 * worker before its last MiB, client/lane.c) is measured and copied as the
 * same value copied at once (ds_buffer_memory_copy): split by size, the
 * pieces fell into a smaller class, which chose its way apart. */
typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    size_t n, at;
    void (*mid)(void *);
    void *arg;
} job_t;

static void job_by(int way, uint8_t *dst, const uint8_t *src, size_t n)
{
    if (n) ds__copy_by(way, dst, src, n);
}

/* Copies the job by way, each piece wide when wide says so and it can;
 * true when a piece went wide. */
static bool job_run(const job_t *j, int way, bool wide)
{
    bool first = wide && j->at >= DS_COPY_WIDE_MIN && ds__copy_wide(way, j->dst, j->src, j->at);
    if (!first) job_by(way, j->dst, j->src, j->at);
    if (j->mid) j->mid(j->arg);
    size_t rest = j->n - j->at;
    bool second = wide && rest >= DS_COPY_WIDE_MIN &&
                  ds__copy_wide(way, j->dst + j->at, j->src + j->at, rest);
    if (!second) job_by(way, j->dst + j->at, j->src + j->at, rest);
    return first || second;
}

static unsigned block_of(size_t n)
{
    return n >= DS_COPY_BIG ? DS_COPY_BLOCK_BIG : DS_COPY_BLOCK;
}

/* The median of an arm's counted copies (0: none). */
static uint32_t arm_median(trials_t *tr, unsigned arm, unsigned block)
{
    uint32_t v[DS_COPY_BLOCK];
    unsigned m = 0;
    for (unsigned i = 1; i < block; i++) {
        uint32_t x = atomic_load_explicit(&tr->ns[arm][i], memory_order_relaxed);
        if (x == 0) continue;
        unsigned j = m++;
        for (; j > 0 && v[j - 1] > x; j--) /* insertion sort */
            v[j] = v[j - 1];
        v[j] = x;
    }
    return m ? v[m / 2] : 0;
}

/* Starts a trial: its arm, and its number among the counted ones in *t;
 * TRIAL_WARM for the warm-up block before them (uncounted: a process's
 * first copies into a mapping fault its pages in, which would be held
 * against whichever arm came first), TRIAL_OVER once the round's trials
 * are all taken (another thread's last one decides). */
enum { TRIAL_WARM = -1, TRIAL_OVER = -2 };
static int trial_begin(trials_t *tr, unsigned arms, unsigned block, bool warm, unsigned *t)
{
    unsigned i = atomic_fetch_add_explicit(&tr->next, 1, memory_order_relaxed);
    unsigned w = warm ? block : 0;
    if (i < w) return TRIAL_WARM;
    *t = i - w;
    return *t < arms * block ? (int)(*t / block) : TRIAL_OVER;
}

/* Records trial t's time (0: the copy did not run that way); true for the
 * round's last trial, which then decides. */
static bool trial_end(trials_t *tr, unsigned block, unsigned t, uint64_t ns, bool ran,
                      unsigned arms)
{
    uint32_t v = !ran ? 0 : ns >= UINT32_MAX ? UINT32_MAX : ns ? (uint32_t)ns : 1;
    atomic_store_explicit(&tr->ns[t / block][t % block], v, memory_order_relaxed);
    return t + 1 == arms * block;
}

/* The arm whose median is shortest, if it beats arm 0's by pct percent;
 * else 0. */
static unsigned trial_winner(trials_t *tr, unsigned arms, unsigned block, unsigned pct)
{
    unsigned win = 0;
    uint64_t bar = arm_median(tr, 0, block);
    for (unsigned a = 1; a < arms && bar != 0; a++) {
        uint64_t m = arm_median(tr, a, block);
        if (m != 0 && m * 100 < bar * (100 - pct)) {
            win = a;
            bar = m * 100 / (100 - pct);
        }
    }
    return win;
}

static void trials_reset(trials_t *tr)
{
    for (unsigned a = 0; a < ARMS; a++)
        for (unsigned i = 0; i < DS_COPY_BLOCK; i++)
            atomic_store_explicit(&tr->ns[a][i], 0, memory_order_relaxed);
    atomic_store_explicit(&tr->next, 0, memory_order_relaxed);
}

/* One timed copy alone (arm 0) or wide (arm 1); the last decides the
 * class: wide only if its median copy was 10% shorter, and a copy alone
 * takes at least DS_COPY_WIDE_MIN_NS. A wide copy that could not run (the
 * helper busy, one CPU) is no sample. */
static void wide_trial(klass_t *k, int way, const job_t *j)
{
    unsigned block = block_of(j->n), t = 0;
    int arm = trial_begin(&k->wide, 2, block, false, &t);
    if (arm < 0) {
        job_run(j, way, false);
        return;
    }
    uint64_t t0 = ds__now_ns();
    bool ran = job_run(j, way, arm == 1) || arm == 0;
    if (!trial_end(&k->wide, block, t, ds__now_ns() - t0, ran, 2)) return;
    bool on = arm_median(&k->wide, 0, block) >= DS_COPY_WIDE_MIN_NS &&
              trial_winner(&k->wide, 2, block, 10) == 1;
    atomic_store_explicit(&k->wide_on, on ? WIDE_ON : WIDE_ALONE, memory_order_relaxed);
}

/* Now and then a class measures again, its way and then wide copies: what
 * is faster can change. */
static void retry(klass_t *k)
{
    trials_reset(&k->ways);
    trials_reset(&k->wide);
    atomic_store_explicit(&k->uses, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->round, 1, memory_order_relaxed);
    atomic_store_explicit(&k->wide_on, WIDE_TRY, memory_order_relaxed);
    atomic_store_explicit(&k->way, WAY_TRY, memory_order_relaxed);
}

/* A copy by a way already chosen: wide when it is large enough and the
 * class found wide copies faster (or DS_COPY_THREADS=2 says always). */
static void copy_chosen(klass_t *k, int way, const job_t *j)
{
    int mode = j->n >= DS_COPY_WIDE_MIN ? ds__copy_wide_mode() : DS__WIDE_OFF;
    int w = mode == DS__WIDE_ALWAYS ? WIDE_ON : WIDE_ALONE;
    if (mode == DS__WIDE_MEASURE) {
        w = atomic_load_explicit(&k->wide_on, memory_order_relaxed);
        if (w == WIDE_TRY) {
            wide_trial(k, way, j);
            return;
        }
    }
    /* (Not under DS_COPY_THREADS=2, which tests use to keep classes as
     * they are.) */
    unsigned r = atomic_load_explicit(&k->round, memory_order_relaxed);
    unsigned every = r < 6 ? RETRY_FIRST << r : RETRY_MAX;
    if (mode != DS__WIDE_ALWAYS &&
        atomic_fetch_add_explicit(&k->uses, 1, memory_order_relaxed) + 1 == every)
        retry(k);
    job_run(j, way, w == WIDE_ON);
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

/* One trial copy: after a warm-up block, the ways take turns in timed
 * blocks; the last one decides the class's way: memcpy, unless another's
 * median copy was 10% shorter. */
static void trial(klass_t *k, const int *ways, unsigned nways, const job_t *j)
{
    unsigned block = block_of(j->n), t = 0;
    bool first = atomic_load_explicit(&k->round, memory_order_relaxed) == 0;
    int arm = trial_begin(&k->ways, nways, block, first, &t);
    if (arm < 0) { /* warming up, or the last trial is running: any way will do */
        job_run(j, WAY_MEMCPY, false);
        return;
    }
    uint64_t t0 = ds__now_ns();
    job_run(j, ways[arm], false);
    if (!trial_end(&k->ways, block, t, ds__now_ns() - t0, true, nways)) return;
    atomic_store_explicit(&k->way, ways[trial_winner(&k->ways, nways, block, 10)],
                          memory_order_relaxed);
}

/* Copies by the class's way, or as one of its trials. */
static void copy_class(klass_t *k, const int *ways, unsigned nways, const job_t *j)
{
    int w = atomic_load_explicit(&k->way, memory_order_relaxed);
    if (w != WAY_TRY)
        copy_chosen(k, w, j);
    else
        trial(k, ways, nways, j);
}

static const int ways_out[] = {WAY_MEMCPY, WAY_MOVSB};
static const int ways_in[] = {WAY_MEMCPY, WAY_NT, WAY_MOVSB};

static void copy_out(const job_t *j)
{
    if (j->n < DS_COPY_MIN) {
        job_run(j, WAY_MEMCPY, false);
        return;
    }
    int f = forced_way();
    klass_t *k = class_of(classes, j->n);
    if (f == WAY_MEMCPY || !has_erms()) {
        copy_chosen(k, WAY_MEMCPY, j);
        return;
    }
    if (f == WAY_MOVSB) {
        copy_chosen(k, WAY_MOVSB, j);
        return;
    }
    copy_class(k, ways_out, 2, j);
}

static void copy_in(const job_t *j)
{
    int f = j->n >= DS_COPY_MIN ? forced_way() : WAY_TRY;
    if (f == WAY_NT) {
        copy_chosen(class_of(classes_in, j->n), WAY_NT, j);
        return;
    }
    if (j->n < DS_COPY_BIG || f != WAY_TRY) {
        copy_out(j);
        return;
    }
    /* Without ERMS: memcpy against non-temporal stores. */
    copy_class(class_of(classes_in, j->n), ways_in, has_erms() ? 3 : 2, j);
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

static void copy_out(const job_t *j)
{
    if (j->n < DS_COPY_WIDE_MIN)
        job_run(j, WAY_MEMCPY, false);
    else
        copy_chosen(class_of(classes, j->n), WAY_MEMCPY, j);
}

static void copy_in(const job_t *j)
{
    if (j->n < DS_COPY_WIDE_MIN)
        job_run(j, WAY_MEMCPY, false);
    else
        copy_chosen(class_of(classes_in, j->n), WAY_MEMCPY, j);
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

void ds__copy(void *dst, const void *src, size_t n)
{
    if (n < DS_COPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    job_t j = {dst, src, n, n, NULL, NULL};
    copy_out(&j);
}

void ds__copy_in(void *dst, const void *src, size_t n)
{
    if (n < DS_COPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    job_t j = {dst, src, n, n, NULL, NULL};
    copy_in(&j);
}

void ds__copy_in_mid(void *dst, const void *src, size_t n, size_t at, void (*mid)(void *),
                     void *arg)
{
    job_t j = {dst, src, n, at < n ? at : n, mid, arg};
    copy_in(&j);
}

const char *ds__copy_wide_choice(size_t n, bool in)
{
    if (n < DS_COPY_WIDE_MIN) return "alone";
    int mode = ds__copy_wide_mode();
    if (mode != DS__WIDE_MEASURE) return mode == DS__WIDE_OFF ? "alone" : "wide";
    int w = atomic_load_explicit(&class_of(in ? classes_in : classes, n)->wide_on,
                                 memory_order_relaxed);
    return w == WIDE_ON ? "wide" : w == WIDE_ALONE ? "alone" : "trying";
}

void ds__copy_force(int way)
{
    atomic_store_explicit(&forced, way >= WAY_TRY && way <= WAY_NT ? way : WAY_TRY,
                          memory_order_relaxed);
}
