/* Machine limits measured by dsbench in the same run (see limits.c). GB/s
 * figures are bytes per nanosecond at the median iteration. */
#ifndef DS_BENCH_LIMITS_H
#define DS_BENCH_LIMITS_H

#include <stddef.h>

#include "bench/stats.h"

double dsb_memcpy_gbps(size_t size, int iters);
/* The same copies made with `rep movsb` (what the client's ds__copy uses
 * where that wins, common/copy.h); 0 on a CPU without fast `rep movsb`. */
double dsb_movsb_gbps(size_t size, int iters);
/* The same copy by two threads, half each (the client's wide copies,
 * common/copy.h); 0 on a machine with one CPU. */
double dsb_copy2_gbps(size_t size, int iters);
int dsb_unix_rtt(size_t msg, int iters, dsb_lat_t *out);
int dsb_tcp_rtt(const char *bind_host, size_t msg, int iters, dsb_lat_t *out);
double dsb_tcp_stream_gbps(size_t size, int iters);

#endif
