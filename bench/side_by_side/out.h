/* The harness's outputs (see out.c): ratios, targets, the terminal table, the
 * JSON result file and the plot data. */
#ifndef DS_BENCH_SBS_OUT_H
#define DS_BENCH_SBS_OUT_H

#include <stdio.h>

#include "bench/side_by_side/sbs.h"

/* A target is a ratio from this run. Beside it, for an honest headline:
 * the ratio of the same row of ours to the machine's own limit (limit_ratio,
 * NAN when none applies; the limit named in limit), and whether the measured
 * ratio itself is stable from day to day on this VM (a ratio to the machine's
 * limit, or to a peer bound by the same costs) or moves with it (a ratio to a
 * peer bound by page faults or syscalls, see docs/performance.md). */
typedef struct {
    char name[160];
    double measured, target;
    bool higher_is_better;
    bool met;
    double limit_ratio;
    char limit[96];
    bool stable;
} sbs_target_t;

/* Fills ratio_to_limit and ratio_to_redis of every row. */
void sbs_compute_ratios(const sbs_limits_t *lim);
/* Evaluates the targets from the rows (after sbs_compute_ratios; targets.c). */
void sbs_compute_targets(const sbs_limits_t *lim);
const sbs_target_t *sbs_targets(int *n);
void sbs_print_targets(FILE *f);

/* "1 KiB", "64 MiB", ... */
const char *sbs_human(size_t size, char *buf, size_t cap);
/* A number, or "-" for NAN. */
void sbs_fmt_num(char *buf, size_t cap, double v, const char *f);

void sbs_print_table(FILE *f);
int sbs_write_json(const char *path, const sbs_opts_t *o, const sbs_limits_t *lim,
                   const char *connector_status, double wall_s);
int sbs_write_plot_data(const char *path);

#endif
