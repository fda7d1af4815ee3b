/* Latency summaries: sort the samples once, read the percentiles. */
#include "bench/stats.h"

#include <stdlib.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void dsb_lat_from(uint64_t *ns, size_t n, dsb_lat_t *out)
{
    out->n = n;
    if (n == 0) {
        out->p50_us = out->p99_us = out->mean_us = 0;
        return;
    }
    qsort(ns, n, sizeof(*ns), cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)ns[i];
    out->mean_us = sum / (double)n / 1e3;
    out->p50_us = (double)ns[n / 2] / 1e3;
    size_t i99 = (n * 99) / 100;
    if (i99 >= n) i99 = n - 1;
    out->p99_us = (double)ns[i99] / 1e3;
}
