/* Latency summaries for the benchmarks. */
#ifndef DS_BENCH_STATS_H
#define DS_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double p50_us, p99_us, mean_us;
    size_t n;
} dsb_lat_t;

/* Sorts ns[0..n) in place and fills out. */
void dsb_lat_from(uint64_t *ns, size_t n, dsb_lat_t *out);

#endif
