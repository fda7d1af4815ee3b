/* The harness's result table: rows added by the phases, then the ratios that
 * need the whole run (to the machine's limit, to Redis), and the three ways
 * the table leaves the harness: a terminal table, a JSON file with one record
 * per row, and a whitespace-separated data file for the gnuplot script
 * (throughput of a producer-to-consumer handoff against value size, one
 * column per system). */
#include "bench/side_by_side/sbs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_ROWS 512
static sbs_row_t rows[MAX_ROWS];
static size_t nrows;

static sbs_row_t *row_new(const char *system, const char *op, size_t size, int clients)
{
    if (nrows >= MAX_ROWS) {
        fprintf(stderr, "sbs: result table full, dropping %s %s\n", system, op);
        return NULL;
    }
    sbs_row_t *r = &rows[nrows++];
    memset(r, 0, sizeof(*r));
    snprintf(r->system, sizeof(r->system), "%s", system);
    snprintf(r->op, sizeof(r->op), "%s", op);
    r->size = size;
    r->clients = clients;
    r->ratio_to_limit = r->ratio_to_redis = r->extra = NAN;
    return r;
}

sbs_row_t *sbs_row_add(const char *system, const char *op, size_t size, int clients, uint64_t *ns,
                       size_t n)
{
    sbs_row_t *r = row_new(system, op, size, clients);
    if (r == NULL) return NULL;
    dsb_lat_t l;
    dsb_lat_from(ns, n, &l);
    r->p50_us = l.p50_us;
    r->p99_us = l.p99_us;
    r->gbps = l.p50_us > 0 ? (double)size / (l.p50_us * 1e3) : 0;
    return r;
}

sbs_row_t *sbs_row_add_raw(const char *system, const char *op, size_t size, int clients,
                           double p50_us, double p99_us, double gbps)
{
    sbs_row_t *r = row_new(system, op, size, clients);
    if (r == NULL) return NULL;
    r->p50_us = p50_us;
    r->p99_us = p99_us;
    r->gbps = gbps;
    return r;
}

sbs_row_t *sbs_row_find(const char *system, const char *op, size_t size, int clients)
{
    for (size_t i = 0; i < nrows; i++)
        if (!strcmp(rows[i].system, system) && !strcmp(rows[i].op, op) && rows[i].size == size &&
            rows[i].clients == clients)
            return &rows[i];
    return NULL;
}

size_t sbs_row_count(void)
{
    return nrows;
}

sbs_row_t *sbs_row_at(size_t i)
{
    return i < nrows ? &rows[i] : NULL;
}

int sbs_size_index(size_t size)
{
    for (size_t i = 0; i < sbs_nsizes; i++)
        if (sbs_sizes[i] == size) return (int)i;
    return -1;
}

double sbs_median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n > 0 ? v[n / 2] : 0;
}
