/* The Python connector phase: vLLM-Omni's YuanrongConnector code path as a
 * stage runs it (python/omni_connectors, on our Python binding), a float32
 * tensor put and got back through the one-copy path (serialised straight
 * into an arena buffer, deserialised from a pinned view), against one warm
 * numpy copy of the same size in the same Python process, measured around
 * it. bench/py_bench.py --onecopy-only does the timing against this run's
 * worker; this phase turns its JSON into rows: connector-python put+get and
 * the limit "numpy memcpy" at 1 MiB and 64 MiB.
 *
 * At 1 MiB the hand-off is two round trips and one copy, and a round trip
 * between two vCPUs of this VM costs more than the copy when each side
 * sleeps on it (a wake-up each way); the default adaptive polling (the
 * worker's --busy_poll_us, the client's DS_BUSY_POLL_US) takes those out.
 * In a run with the default polling the phase runs a second time with
 * polling off on both sides, to show what the wake-ups cost: py_bench
 * starts a worker of its own for that, and its rows are "put+get, polling
 * off". Both stand in the report. */
#include "bench/side_by_side/sbs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double num_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static int add_rows(const char *text, const char *op, const char *how)
{
    cJSON *root = cJSON_Parse(text);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    int n = 0;
    cJSON_ArrayForEach(c, cases)
    {
        double bytes = num_at(c, "bytes", NULL), t = num_at(c, "datasystem", "median_s");
        double m = num_at(c, "memcpy", "median_s"), ratio = num_at(c, "ratio", NULL);
        if (isnan(bytes) || isnan(t) || t <= 0) continue;
        sbs_row_t *r = sbs_row_add_raw("connector-python", op, (size_t)bytes, 1, t * 1e6, NAN,
                                       bytes / t / 1e9);
        sbs_row_t *l =
            sbs_row_add_raw("limit", how[0] ? "numpy memcpy, polling-off run" : "numpy memcpy",
                            (size_t)bytes, 1, m * 1e6, NAN, bytes / m / 1e9);
        if (r == NULL || l == NULL) continue;
        snprintf(r->note, sizeof(r->note), "median; x%.3f one warm numpy memcpy of the size%s",
                 ratio, how);
        n++;
        snprintf(l->note, sizeof(l->note), "median, in the connector's Python process, around it");
    }
    cJSON_Delete(root);
    return n > 0 ? 0 : -1;
}

/* One py_bench run: against this run's worker (addr), or with polling off
 * against a worker py_bench starts itself (addr NULL). */
static int run_once(const sbs_opts_t *o, const char *addr)
{
    char json[320], it[16];
    snprintf(json, sizeof(json), "%s/py_onecopy.json", o->tmp_dir);
    snprintf(it, sizeof(it), "%d", o->quick ? 5 : 15);
    char *argv[16] = {(char *)o->python,
                      "bench/py_bench.py",
                      "--build-dir",
                      (char *)o->build_dir,
                      "--onecopy-only",
                      "--iters",
                      it,
                      "--json",
                      json};
    int k = 9;
    if (addr) {
        argv[k++] = "--address";
        argv[k++] = (char *)addr;
    } else {
        argv[k++] = "--busy-poll-us";
        argv[k++] = "0";
    }
    argv[k] = NULL;
    /* The bindings come from the checkout (the harness runs from the repo root). */
    setenv("PYTHONPATH", "python", 0);
    char *out = NULL;
    int rc = sbs_run_capture(argv, 600, &out);
    free(out);
    /* py_bench exits 1 when a target is missed; the rows still count. */
    FILE *f = fopen(json, "r");
    char *text = NULL;
    long len = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = calloc(1, (size_t)len + 1)) && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    if (f) fclose(f);
    unlink(json);
    const char *how = addr ? "" : ", polling off on both sides (its own worker)";
    int r = text ? add_rows(text, addr ? "put+get" : "put+get, polling off", how) : -1;
    free(text);
    if (r != 0)
        fprintf(stderr, "sbs: bench/py_bench.py --onecopy-only%s gave no rows (exit %d)\n", how,
                rc);
    return r;
}

int sbs_phase_pyconn(const sbs_opts_t *o, const sbs_env_t *env)
{
    char addr[64];
    snprintf(addr, sizeof(addr), "%s:%d", env->worker->host, env->worker->port);
    int r = run_once(o, addr);
    if (o->busy_poll_us < 0 && run_once(o, NULL) != 0) r = -1;
    return r;
}
