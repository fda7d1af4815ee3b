/* The harness's outputs (see out.c): ratios, targets, the terminal table, the
 * JSON result file and the plot data. */
#ifndef DS_BENCH_SBS_OUT_H
#define DS_BENCH_SBS_OUT_H

#include <stdio.h>

#include "bench/side_by_side/sbs.h"

typedef struct {
    char name[160];
    double measured, target;
    bool higher_is_better;
    bool met;
} sbs_target_t;

/* Fills ratio_to_limit and ratio_to_redis of every row. */
void sbs_compute_ratios(const sbs_limits_t *lim);
/* Evaluates the targets from the rows (after sbs_compute_ratios). */
void sbs_compute_targets(const sbs_limits_t *lim);
const sbs_target_t *sbs_targets(int *n);

void sbs_print_table(FILE *f);
void sbs_print_targets(FILE *f);
int sbs_write_json(const char *path, const sbs_opts_t *o, const sbs_limits_t *lim,
                   const char *connector_status, double wall_s);
int sbs_write_plot_data(const char *path);

#endif
