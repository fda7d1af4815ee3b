/* The connector phase: a YuanrongConnector (libomniconn) put + get against
 * the same worker, at every value size, through both of its paths:
 *  - serializer: the payload is the OmniSerializer map {"hidden": <float32
 *    tensor>} (the tensor borrows the harness's warm buffer, so encoding
 *    copies it once); get decodes it and takes a zero-copy tensor view;
 *  - raw: the payload is raw bytes (supports_raw_data), get returns a view.
 * Each iteration uses a new request id, as a pipeline does, and cleans the
 * request up afterwards (untimed). The phase builds the connector through the
 * factory by name; when no YuanrongConnector is registered it adds no rows
 * and says why, so the rows appear by themselves once the connector lands. */
#include "bench/side_by_side/sbs.h"

#include "common/clock.h"
#include "omni/connector.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FROM "thinker"
#define TO "talker"

enum { P_PUT, P_GET, P_PAIR, NP };
static const char *pnames[NP] = {"put", "get", "put+get"};

/* One put + get + cleanup; the timed parts go into t[P_PUT], t[P_GET]. */
static int one(omni_connector_t *c, const omni_data_t *d, bool raw, size_t size, const char *rid,
               uint64_t t[2])
{
    uint64_t t0 = ds__now_ns();
    size_t sent = 0;
    ds_status_t st = omni_connector_put(c, FROM, TO, rid, d, &sent, NULL);
    uint64_t t1 = ds__now_ns();
    omni_received_t *rcv = NULL;
    if (st == DS_K_OK) st = omni_connector_get(c, FROM, TO, rid, NULL, &rcv);
    const volatile uint8_t *p = NULL;
    size_t n = 0;
    if (st == DS_K_OK && raw) {
        p = omni_received_data(rcv);
        n = omni_received_size(rcv);
    } else if (st == DS_K_OK) {
        const omni_value_t *v = NULL;
        omni_tensor_view_t tv;
        st = omni_received_value(rcv, &v);
        if (st == DS_K_OK) st = omni_value_get_tensor(omni_map_get(v, "hidden"), &tv);
        if (st == DS_K_OK) {
            p = tv.data;
            n = tv.nbytes;
        }
    }
    uint8_t sink = p && n ? (uint8_t)(p[0] ^ p[n - 1]) : 0;
    (void)sink;
    uint64_t t2 = ds__now_ns();
    omni_received_free(rcv);
    if (st == DS_K_OK && n != size) st = DS_K_RUNTIME_ERROR;
    omni_connector_cleanup(c, rid);
    if (st != DS_K_OK) {
        fprintf(stderr, "sbs: connector %s put+get of %zu bytes: %s: %s\n",
                raw ? "raw" : "serializer", size, ds_status_name(st), ds_last_error());
        return -1;
    }
    t[0] = t1 - t0;
    t[1] = t2 - t1;
    return 0;
}

static int run_size(const sbs_opts_t *o, omni_connector_t *c, size_t size, uint8_t *src, bool raw)
{
    int rounds = sbs_rounds(o, size);
    int total = sbs_iters(o, size), warmup = sbs_warmup(o, size);
    int per = (total + rounds - 1) / rounds;
    size_t cap = (size_t)per * (size_t)rounds;
    uint64_t *s[NP];
    for (int i = 0; i < NP; i++)
        s[i] = calloc(cap, sizeof(uint64_t));
    int64_t shape[1] = {(int64_t)(size / 4)};
    omni_value_t *map = omni_value_new_map();
    omni_value_t *tensor =
        omni_value_new_tensor_ref(OMNI_DTYPE_FLOAT32, shape, 1, src, (size / 4) * 4);
    int rc = s[0] && s[1] && s[2] ? 0 : -1;
    if (map == NULL || tensor == NULL) {
        omni_value_free(tensor);
        rc = -1;
    } else if (omni_map_set(map, "hidden", tensor) != DS_K_OK) {
        rc = -1;
    }
    size_t payload = raw ? size : (size / 4) * 4;
    omni_data_t d = raw ? omni_data_bytes(src, size) : omni_data_value(map);
    size_t n = 0;
    uint64_t t[2];
    char rid[64];
    for (int r = 0; r < rounds && rc == 0; r++) {
        sbs_warm(src, size, 0x10 + r);
        for (int i = 0; i < warmup && rc == 0; i++) {
            snprintf(rid, sizeof(rid), "sbs-conn-w%d-%d-%zu", r, i, size);
            rc = one(c, &d, raw, payload, rid, t);
        }
        for (int i = 0; i < per && rc == 0; i++) {
            snprintf(rid, sizeof(rid), "sbs-conn-%d-%d-%zu", r, i, size);
            rc = one(c, &d, raw, payload, rid, t);
            if (rc == 0) {
                s[P_PUT][n] = t[0];
                s[P_GET][n] = t[1];
                s[P_PAIR][n] = t[0] + t[1];
                n++;
            }
        }
    }
    const char *sys = raw ? "connector-raw" : "connector-serializer";
    for (int i = 0; i < NP && rc == 0; i++)
        sbs_row_add(sys, pnames[i], size, 1, s[i], n);
    omni_value_free(map);
    for (int i = 0; i < NP; i++)
        free(s[i]);
    return rc;
}

int sbs_phase_connector(const sbs_opts_t *o, const sbs_env_t *env, char *why, size_t why_cap)
{
    const char *name = "YuanrongConnector";
    if (!omni_factory_is_registered(name)) {
        char list[512];
        size_t n = omni_factory_list(list, sizeof(list));
        snprintf(why, why_cap, "%s is not registered in the omni factory (registered: %s)", name,
                 n ? list : "none");
        return 1;
    }
    char port[16];
    snprintf(port, sizeof(port), "%d", env->worker->port);
    omni_kv_t extra[] = {
        {"host", env->worker->host}, {"port", port}, {"get_sub_timeout_ms", "1000"}};
    omni_connector_spec_t spec = {name, extra, sizeof(extra) / sizeof(extra[0])};
    omni_connector_t *c = NULL;
    if (omni_factory_create(&spec, &c) != DS_K_OK) {
        snprintf(why, why_cap, "creating %s failed: %s", name, ds_last_error());
        return -1;
    }
    bool raw_ok = omni_connector_supports_raw_data(c);
    size_t nsizes = sbs_nsizes_run(o), max = sbs_sizes[nsizes - 1];
    uint8_t *src = malloc(max);
    int rc = src ? 0 : -1;
    for (size_t si = 0; si < nsizes && rc == 0; si++) {
        printf("  connector, %zu bytes ...\n", sbs_sizes[si]);
        fflush(stdout);
        rc = run_size(o, c, sbs_sizes[si], src, false);
        if (rc == 0 && raw_ok) rc = run_size(o, c, sbs_sizes[si], src, true);
    }
    snprintf(why, why_cap, "%s%s", rc == 0 ? "measured" : "failed",
             raw_ok ? "" : "; the connector does not support raw data, raw rows left out");
    free(src);
    omni_connector_free(c);
    return rc;
}
