/* Buffers handed to callers: libomniconn's (omni_value_encode's output,
 * copies of received payloads, released with omni_free) and the client
 * library's heap buffers of remote zero-copy gets and creates.
 *
 * A big buffer is written once, right after it is allocated, so the cost of
 * first touching fresh memory decides how fast encoding is: on the virtual
 * machines this runs on, faulting in 64 MiB of 4 KiB pages takes ~50x as long
 * as copying into warm memory. Buffers from BIG_MIN up are therefore
 * their own mappings, 2 MiB-aligned and advised for transparent huge pages
 * (where the kernel offers them), which cuts the faults 512-fold; smaller ones
 * come from malloc. A header just before the data says which kind it is. */
#include "common/bigbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HDR 64u            /* keeps the data 64-byte aligned */
#define HUGE (2u << 20)    /* a transparent huge page */
#define BIG_MIN (4u << 20) /* smaller buffers come from malloc */
#define MAGIC 0x6f6d6e69627566ULL

typedef struct {
    uint64_t magic;
    void *base;     /* mmap base, or the malloc'd block */
    size_t map_len; /* 0 for malloc */
} hdr_t;

void *ds__bigbuf_alloc(size_t size)
{
    if (size >= BIG_MIN && size <= SIZE_MAX - HUGE - HDR) {
        size_t len = size + HUGE + HDR;
        void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base != MAP_FAILED) {
            /* Advice only: without THP the buffer still works, just slower. */
            (void)madvise(base, len, MADV_HUGEPAGE);
            uintptr_t data = ((uintptr_t)base + HDR + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
            hdr_t *h = (hdr_t *)(data - HDR);
            *h = (hdr_t){MAGIC, base, len};
            return (void *)data;
        }
    }
    if (size > SIZE_MAX - HDR) return NULL;
    void *base = NULL;
    if (posix_memalign(&base, HDR, size + HDR) != 0) return NULL; /* malloc only aligns to 16 */
    char *p = base;
    *(hdr_t *)p = (hdr_t){MAGIC, p, 0};
    return p + HDR;
}

void ds__bigbuf_free(void *p)
{
    if (p == NULL) return;
    hdr_t *h = (hdr_t *)((char *)p - HDR);
    if (h->magic != MAGIC)
        return; /* not ours (or freed twice): leave it rather than corrupt the heap */
    h->magic = 0;
    if (h->map_len > 0)
        munmap(h->base, h->map_len);
    else
        free(h->base);
}
