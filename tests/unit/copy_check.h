/* Shared by the copy tests (test_common.c, test_copy_wide.c): include after
 * cmocka.h. */
#ifndef DS_TESTS_COPY_CHECK_H
#define DS_TESTS_COPY_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* copy(dst + 1 + d, src + so, n) for each size n and source and
 * destination offsets 0-2: exact, and the bytes on either side untouched. */
static void check_copy_sizes(void (*copy)(void *, const void *, size_t), const size_t *sizes,
                             size_t nsizes)
{
    size_t cap = 0;
    for (size_t k = 0; k < nsizes; k++)
        if (sizes[k] > cap) cap = sizes[k];
    cap += 64;
    uint8_t *src = malloc(cap), *dst = malloc(cap + 2);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < cap; i++)
        src[i] = (uint8_t)(i * 131u + 7u + (i >> 16));
    for (size_t k = 0; k < nsizes; k++)
        for (size_t so = 0; so < 3; so++)
            for (size_t d = 0; d < 3; d++) {
                size_t n = sizes[k];
                memset(dst, 0xEE, cap + 2);
                copy(dst + 1 + d, src + so, n);
                assert_memory_equal(dst + 1 + d, src + so, n);
                assert_int_equal(dst[d], 0xEE);
                assert_int_equal(dst[1 + d + n], 0xEE);
            }
    free(src);
    free(dst);
}

#endif
