/* What the pipeline demo's orchestrator makes of the stages' reports: per
 * edge the payload count and bytes, latency percentiles and throughput, and
 * whether the store is clean afterwards.
 *
 * Two latencies per payload, both from the producer's put call to the
 * consumer's get returning (one monotonic clock for every process):
 *   transfer  excludes queueing: the put call plus the part of the get after
 *             the payload was published (put_end), so a consumer still busy
 *             with an earlier request does not count against the connector
 *   handoff   put start to get end, queueing included: what a request waits */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds/kv_client.h"
#include "pipeline_demo.h"
#include "pipeline_model.h"

int pd_run_init(pd_run_t *r, int requests)
{
    memset(r, 0, sizeof(*r));
    r->requests = requests;
    r->recs = calloc((size_t)PD_EDGES * (size_t)requests * PD_SLOTS, sizeof(*r->recs));
    return r->recs != NULL ? 0 : -1;
}

void pd_run_free(pd_run_t *r)
{
    free(r->recs);
    r->recs = NULL;
}

pd_rec_t *pd_rec(pd_run_t *r, int edge, int req, int slot)
{
    if (edge < 0 || edge >= PD_EDGES || req < 0 || req >= r->requests || slot < 0 ||
        slot >= PD_SLOTS)
        return NULL;
    return &r->recs[((size_t)edge * (size_t)r->requests + (size_t)req) * PD_SLOTS + (size_t)slot];
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, int p)
{
    if (n == 0) return 0;
    size_t i = n * (size_t)p / 100;
    return v[i < n ? i : n - 1];
}

void pd_print_report(pd_run_t *r)
{
    size_t cap = (size_t)r->requests * PD_SLOTS;
    double *xfer = malloc(cap * sizeof(double)), *hand = malloc(cap * sizeof(double));
    if (xfer == NULL || hand == NULL) {
        free(xfer);
        free(hand);
        return;
    }
    printf("\n%-5s %-22s %8s %9s %21s %21s %9s %10s\n", "edge", "connector", "payloads", "MiB",
           "transfer p50/p99 ms", "handoff p50/p99 ms", "MiB/s", "payloads/s");
    for (int e = 0; e < PD_EDGES; e++) {
        size_t n = 0;
        double bytes = 0;
        uint64_t first = UINT64_MAX, last = 0;
        for (int q = 0; q < r->requests; q++) {
            for (int s = 0; s < PD_SLOTS; s++) {
                const pd_rec_t *x = pd_rec(r, e, q, s);
                if (x->put_start == 0 || x->get_end == 0) continue;
                uint64_t avail = x->get_start > x->put_end ? x->get_start : x->put_end;
                uint64_t after = x->get_end > avail ? x->get_end - avail : 0;
                xfer[n] = (double)(x->put_end - x->put_start + after) / 1e6;
                hand[n] = (double)(x->get_end - x->put_start) / 1e6;
                n++;
                bytes += (double)x->bytes;
                if (x->put_start < first) first = x->put_start;
                if (x->get_end > last) last = x->get_end;
            }
        }
        qsort(xfer, n, sizeof(double), cmp_double);
        qsort(hand, n, sizeof(double), cmp_double);
        double secs = n > 0 && last > first ? (double)(last - first) / 1e9 : 0;
        char edge[32], x[32], h[32];
        snprintf(edge, sizeof(edge), "%d->%d", e, e + 1);
        snprintf(x, sizeof(x), "%.3f / %.3f", pct(xfer, n, 50), pct(xfer, n, 99));
        snprintf(h, sizeof(h), "%.3f / %.3f", pct(hand, n, 50), pct(hand, n, 99));
        printf("%-5s %-22s %8zu %9.1f %21s %21s %9.1f %10.0f\n", edge, r->connector[e], n,
               bytes / 1048576.0, x, h, secs > 0 ? bytes / 1048576.0 / secs : 0,
               secs > 0 ? (double)n / secs : 0);
    }
    printf("(transfer = put call + the get after the payload was published; handoff = put "
           "start to get end, queueing included)\n");
    /* Per request on the talker -> code2wav edge: from the talker's first
     * chunk put starting to code2wav holding the first chunk, and the last. */
    size_t n = 0;
    for (int q = 0; q < r->requests; q++) {
        const pd_rec_t *c0 = pd_rec(r, 1, q, 0);
        uint64_t last = 0;
        for (int s = 0; s < PD_SLOTS; s++) {
            const pd_rec_t *x = pd_rec(r, 1, q, s);
            if (x->get_end > last) last = x->get_end;
        }
        if (c0->put_start == 0 || c0->get_end < c0->put_start || last < c0->put_start) continue;
        xfer[n] = (double)(c0->get_end - c0->put_start) / 1e6;
        hand[n] = (double)(last - c0->put_start) / 1e6;
        n++;
    }
    qsort(xfer, n, sizeof(double), cmp_double);
    qsort(hand, n, sizeof(double), cmp_double);
    printf("talker -> code2wav, per request from the first chunk's put: time to first chunk "
           "p50 %.3f ms (p99 %.3f), time to last chunk p50 %.3f ms (p99 %.3f), %zu requests\n",
           pct(xfer, n, 50), pct(xfer, n, 99), pct(hand, n, 50), pct(hand, n, 99), n);
    free(xfer);
    free(hand);
    if (r->nhealth > 0) printf("\nconnector health at the end of each stage:\n");
    for (int s = 0; s < PD_STAGES; s++) { /* in stage order, whatever order they came in */
        size_t len = strlen(pd_stage_names[s]);
        for (int i = 0; i < r->nhealth; i++)
            if (strncmp(r->health[i], pd_stage_names[s], len) == 0 && r->health[i][len] == ' ')
                printf("  %s\n", r->health[i]);
    }
}

/* Appends the run's keys of edge e into keys[*n]. */
static int edge_keys(const pd_run_t *r, int e, char (*keys)[64], size_t *n)
{
    char sep = pd_key_sep(r->connector[e]);
    for (int q = 0; q < r->requests; q++) {
        char id[32];
        size_t slots = e == 0 ? 2 : pm_num_chunks(pm_seq_len(q));
        for (size_t s = 0; s < slots; s++) {
            char suffix[24] = "";
            if (e == 0 && s == 1) snprintf(suffix, sizeof(suffix), "-hidden");
            if (e == 1) snprintf(suffix, sizeof(suffix), "-c%zu", s);
            pd_request_key(id, sizeof(id), q, suffix);
            snprintf(keys[(*n)++], sizeof(keys[0]), "%s%c%d_%d", id, sep, e, e + 1);
        }
    }
    return 0;
}

int pd_count_leftovers(pd_run_t *r, const char *host, int port, size_t *left, size_t *total)
{
    size_t cap = (size_t)r->requests * (2 + PM_MAX_CHUNKS), n = 0;
    char(*keys)[64] = malloc(cap * sizeof(*keys));
    const char **kp = malloc(cap * sizeof(*kp));
    bool *exists = malloc(cap * sizeof(*exists));
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    ds_client_t *c = NULL;
    int rc = -1;
    *left = *total = 0;
    if (keys != NULL && kp != NULL && exists != NULL && ds_client_connect(&o, &c) == DS_K_OK) {
        for (int e = 0; e < PD_EDGES; e++)
            edge_keys(r, e, keys, &n);
        for (size_t i = 0; i < n; i++)
            kp[i] = keys[i];
        rc = 0;
        for (size_t off = 0; off < n && rc == 0; off += DS_MAX_BATCH) {
            size_t m = n - off < DS_MAX_BATCH ? n - off : DS_MAX_BATCH;
            if (ds_kv_exist(c, m, kp + off, exists + off) != DS_K_OK) rc = -1;
        }
        for (size_t i = 0; rc == 0 && i < n; i++)
            *left += exists[i];
        *total = n;
    }
    ds_client_close(c);
    free(keys);
    free(kp);
    free(exists);
    return rc;
}
