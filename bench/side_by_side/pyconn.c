/* The Python connector phase: vLLM-Omni's YuanrongConnector code path as a
 * stage runs it (python/omni_connectors, on our Python binding), a float32
 * tensor put and got back through the one-copy path (serialised straight
 * into an arena buffer, deserialised from a pinned view), against one warm
 * numpy copy of the same size in the same Python process, measured around
 * it. bench/py_bench.py --onecopy-only does the timing against this run's
 * worker; this phase turns its JSON into rows: connector-python put+get and
 * the limit "numpy memcpy" at 1 MiB and 64 MiB. */
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

static int add_rows(const char *text)
{
    cJSON *root = cJSON_Parse(text);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    int n = 0;
    cJSON_ArrayForEach(c, cases)
    {
        double bytes = num_at(c, "bytes", NULL), t = num_at(c, "datasystem", "median_s");
        double m = num_at(c, "memcpy", "median_s"), ratio = num_at(c, "ratio", NULL);
        if (isnan(bytes) || isnan(t) || t <= 0) continue;
        sbs_row_t *r = sbs_row_add_raw("connector-python", "put+get", (size_t)bytes, 1, t * 1e6,
                                       NAN, bytes / t / 1e9);
        sbs_row_t *l = sbs_row_add_raw("limit", "numpy memcpy", (size_t)bytes, 1, m * 1e6, NAN,
                                       bytes / m / 1e9);
        if (r == NULL || l == NULL) continue;
        snprintf(r->note, sizeof(r->note), "median; x%.3f one warm numpy memcpy of the size",
                 ratio);
        snprintf(l->note, sizeof(l->note), "median, in the connector's Python process, around it");
        n++;
    }
    cJSON_Delete(root);
    return n > 0 ? 0 : -1;
}

int sbs_phase_pyconn(const sbs_opts_t *o, const sbs_env_t *env)
{
    char addr[64], json[320], it[16];
    snprintf(addr, sizeof(addr), "%s:%d", env->worker->host, env->worker->port);
    snprintf(json, sizeof(json), "%s/py_onecopy.json", o->tmp_dir);
    snprintf(it, sizeof(it), "%d", o->quick ? 5 : 15);
    char *argv[] = {(char *)o->python,
                    "bench/py_bench.py",
                    "--address",
                    addr,
                    "--build-dir",
                    (char *)o->build_dir,
                    "--onecopy-only",
                    "--iters",
                    it,
                    "--json",
                    json,
                    NULL};
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
    int r = text ? add_rows(text) : -1;
    free(text);
    if (r != 0)
        fprintf(stderr, "sbs: bench/py_bench.py --onecopy-only gave no rows (exit %d)\n", rc);
    return r;
}
