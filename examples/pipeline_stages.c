/* The three stage processes of the pipeline demo (pipeline_demo --stage N),
 * each talking to its neighbours only through the connectors the stage
 * config puts on its edges, as vLLM-Omni stages do:
 *
 *   0 thinker   per request: the hidden states as a raw float32 tensor
 *               ("req-N-hidden") and a header map with the token ids and a
 *               checksum ("req-N"), on edge 0 -> 1
 *   1 talker    gets both, checks them against the model, generates the
 *               audio codes chunk by chunk (pm_decode's arithmetic for
 *               each, as a real talker decodes) and sends them as chunk
 *               maps ("req-N-c0", "-c1", ..., the last one flagged) on
 *               edge 1 -> 2, or with --talker_edge stream as the elements
 *               of one stream per request ("req-N", each map serialized,
 *               then the end marker); cleans its inputs up
 *   2 code2wav  gets the chunks, checks them, renders the waveform and
 *               reports its checksum; cleans its inputs up
 *
 * Every put and get is reported to the orchestrator (pipeline_demo.h). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "omni/stream_edge.h"
#include "omni/transfer_config.h"
#include "pipeline_demo.h"
#include "pipeline_model.h"

const char *const pd_stage_names[PD_STAGES] = {"thinker", "talker", "code2wav"};

static int stage_id;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Reports a fatal error (with the library's message) and exits. */
static void die(const char *what)
{
    report("E %d %s: %s", stage_id, what, ds_last_error());
    exit(1);
}

void pd_request_key(char *buf, size_t cap, int req, const char *suffix)
{
    snprintf(buf, cap, "req-%05d%s", req, suffix);
}

char pd_key_sep(const char *connector_name)
{
    return strcmp(connector_name, "YuanrongConnector") == 0 ? ':' : '@';
}

ds_status_t pd_edge_connector(const pd_opts_t *o, const char *from, const char *to,
                              omni_connector_t **out, char *name, size_t cap)
{
    omni_transfer_config_t *cfg = NULL;
    ds_status_t st = omni_transfer_config_load(o->config, &cfg);
    if (st != DS_K_OK) return st;
    const omni_connector_spec_t *spec = omni_transfer_config_find(cfg, from, to);
    if (spec == NULL) {
        omni_transfer_config_free(cfg);
        fprintf(stderr, "%s has no edge %s -> %s\n", o->config, from, to);
        return DS_K_NOT_FOUND;
    }
    /* The config's extras, with host and port taken from --worker_address. */
    omni_kv_t kv[64];
    size_t n = 0;
    char host[256] = "", *port = NULL;
    if (o->worker_address != NULL) {
        snprintf(host, sizeof(host), "%s", o->worker_address);
        char *colon = strrchr(host, ':');
        if (colon != NULL) {
            *colon = '\0';
            port = colon + 1;
        }
    }
    for (size_t i = 0; i < spec->n_extra && n < 60; i++) {
        bool replaced = port != NULL && (strcmp(spec->extra[i].key, "host") == 0 ||
                                         strcmp(spec->extra[i].key, "port") == 0);
        if (!replaced) kv[n++] = spec->extra[i];
    }
    if (port != NULL) {
        kv[n++] = (omni_kv_t){"host", host};
        kv[n++] = (omni_kv_t){"port", port};
    }
    omni_connector_spec_t s = {spec->name, kv, n};
    snprintf(name, cap, "%s", spec->name);
    st = omni_factory_create(&s, out);
    omni_transfer_config_free(cfg);
    return st;
}

static omni_connector_t *edge(const pd_opts_t *o, const char *from, const char *to)
{
    omni_connector_t *c = NULL;
    char name[64];
    if (pd_edge_connector(o, from, to, &c, name, sizeof(name)) != DS_K_OK) die("connector");
    return c;
}

static void report_health(omni_connector_t *c, int edge_no, const char *role)
{
    omni_health_t h;
    omni_connector_health(c, &h);
    report("H %d %d %s %s %llu %llu %llu %llu %llu %llu %llu %llu", stage_id, edge_no, role,
           omni_connector_name(c), (unsigned long long)h.puts, (unsigned long long)h.gets,
           (unsigned long long)h.bytes_transferred, (unsigned long long)h.errors,
           (unsigned long long)h.timeouts, (unsigned long long)h.not_found,
           (unsigned long long)h.transport_errors, (unsigned long long)h.decode_errors);
}

static void put(omni_connector_t *c, int edge_no, const char *from, const char *to, int req,
                int slot, const char *key, const omni_data_t *d)
{
    size_t size = 0;
    uint64_t t0 = now_ns();
    if (omni_connector_put(c, from, to, key, d, &size, NULL) != DS_K_OK) die(key);
    report("P %d %d %d %llu %llu %zu", edge_no, req, slot, (unsigned long long)t0,
           (unsigned long long)now_ns(), size);
}

/* Gets key, retrying while nothing arrives for up to max_wait_s (each try
 * waits get_sub_timeout_ms inside the connector). */
static omni_received_t *get(omni_connector_t *c, int edge_no, const char *from, const char *to,
                            int req, int slot, const char *key, int max_wait_s)
{
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)max_wait_s * 1000000000ull;
    omni_received_t *r = NULL;
    for (;;) {
        uint64_t t = now_ns();
        ds_status_t st = omni_connector_get(c, from, to, key, NULL, &r);
        if (st == DS_K_OK) break;
        if (st != DS_K_NOT_FOUND || now_ns() >= deadline) die(key);
        if (now_ns() - t < 1000000) { /* a no-wait connector: do not spin */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    report("G %d %d %d %llu %llu %zu", edge_no, req, slot, (unsigned long long)t0,
           (unsigned long long)now_ns(), omni_received_size(r));
    return r;
}

/* Stages live until the orchestrator shuts the pipeline down (EOF on stdin,
 * credits before it are ignored): a producer's connector must stay open
 * until its payloads are consumed, since closing a SharedMemoryConnector
 * reclaims what nobody consumed. Bounded by max_wait_s per silent wait. */
static void await_shutdown(const pd_opts_t *o)
{
    char buf[256];
    for (;;) {
        struct pollfd p = {STDIN_FILENO, POLLIN, 0};
        int n = poll(&p, 1, o->max_wait_s * 1000);
        if (n == 0) die("no shutdown from the orchestrator");
        if (n < 0 && errno == EINTR) continue;
        ssize_t got = n > 0 ? read(STDIN_FILENO, buf, sizeof(buf)) : -1;
        if (got > 0) continue;
        if (got < 0 && errno == EINTR) continue;
        return;
    }
}

static int thinker(const pd_opts_t *o)
{
    omni_connector_t *out = edge(o, "0", "1");
    float *hidden = malloc(PM_MAX_SEQ * PM_HIDDEN * sizeof(float));
    int64_t ids[PM_MAX_SEQ];
    if (hidden == NULL) die("out of memory");
    for (int req = 0; req < o->requests; req++) {
        if (req >= o->window) { /* one credit per request code2wav finished */
            struct pollfd p = {STDIN_FILENO, POLLIN, 0};
            char credit;
            if (poll(&p, 1, o->max_wait_s * 1000) != 1 || read(STDIN_FILENO, &credit, 1) != 1)
                die("no credit from the orchestrator");
        }
        size_t seq = pm_seq_len(req);
        pm_hidden(req, hidden);
        pm_token_ids(req, ids);
        char key[64];
        int64_t shape[] = {(int64_t)seq, PM_HIDDEN};
        size_t nbytes = seq * PM_HIDDEN * sizeof(float);
        omni_tensor_view_t tv = {
            OMNI_DTYPE_FLOAT32, 2, shape, seq * PM_HIDDEN, hidden, nbytes, NULL};
        omni_data_t d = omni_data_tensor(&tv);
        pd_request_key(key, sizeof(key), req, "-hidden");
        put(out, 0, "0", "1", req, 1, key, &d);

        omni_value_t *hdr = omni_value_new_map(), *tok = omni_value_new_array();
        for (size_t t = 0; t < seq; t++)
            omni_array_push(tok, omni_value_new_int(ids[t]));
        pd_request_key(key, sizeof(key), req, "");
        uint64_t sum = pm_fnv(pm_fnv(PM_FNV_INIT, hidden, nbytes), ids, seq * sizeof(ids[0]));
        if (omni_map_set(hdr, "request_id", omni_value_new_str(key)) != DS_K_OK ||
            omni_map_set(hdr, "token_ids", tok) != DS_K_OK ||
            omni_map_set(hdr, "checksum", omni_value_new_uint(sum)) != DS_K_OK)
            die("building the header");
        d = omni_data_value(hdr);
        put(out, 0, "0", "1", req, 0, key, &d);
        omni_value_free(hdr);
        report("S 0 %d", req);
    }
    await_shutdown(o);
    report_health(out, 0, "out");
    free(hidden);
    omni_connector_free(out);
    return 0;
}

/* Copies the received header and hidden states out, checking them against
 * the model; false when anything differs. */
static bool read_thinker_output(int req, omni_received_t *hdr_r, omni_received_t *hid_r,
                                float *hidden, int64_t *ids, size_t *seq_out)
{
    const omni_value_t *hdr;
    omni_tensor_view_t t;
    size_t seq = pm_seq_len(req);
    uint64_t sum = 0;
    *seq_out = seq;
    if (omni_received_value(hdr_r, &hdr) != DS_K_OK || omni_received_tensor(hid_r, &t) != DS_K_OK)
        return false;
    const omni_value_t *tok = omni_map_get(hdr, "token_ids");
    if (omni_value_len(tok) != seq || t.dtype != OMNI_DTYPE_FLOAT32 || t.ndim != 2 ||
        t.shape[0] != (int64_t)seq || t.shape[1] != PM_HIDDEN ||
        omni_value_get_uint(omni_map_get(hdr, "checksum"), &sum) != DS_K_OK)
        return false;
    for (size_t i = 0; i < seq; i++)
        if (omni_value_get_int(omni_array_at(tok, i), &ids[i]) != DS_K_OK) return false;
    memcpy(hidden, t.data, t.nbytes); /* msgpack does not align the data */
    if (pm_fnv(pm_fnv(PM_FNV_INIT, hidden, t.nbytes), ids, seq * sizeof(ids[0])) != sum)
        return false;
    /* And against the model itself, byte for byte. */
    float *want = malloc(t.nbytes);
    int64_t want_ids[PM_MAX_SEQ];
    bool ok = want != NULL;
    if (ok) {
        pm_hidden(req, want);
        pm_token_ids(req, want_ids);
        ok = memcmp(want, hidden, t.nbytes) == 0 && memcmp(want_ids, ids, seq * 8) == 0;
    }
    free(want);
    return ok;
}

/* Streaming edge: one chunk map, serialized, as the next element of the
 * request's stream; reported as a put of slot k. */
static void send_chunk(omni_chunk_writer_t *w, int req, int k, const omni_value_t *m)
{
    void *buf = NULL;
    size_t len = 0;
    uint64_t t0 = now_ns();
    if (omni_value_encode(m, &buf, &len) != DS_K_OK ||
        omni_chunk_writer_send(w, buf, len) != DS_K_OK)
        die("sending a chunk");
    report("P 1 %d %d %llu %llu %zu", req, k, (unsigned long long)t0, (unsigned long long)now_ns(),
           len);
    omni_free(buf);
}

static void free_chunk(void *ctx)
{
    omni_received_free(ctx);
}

/* Streaming edge: the next chunk of the request's stream as a value
 * payload, waiting up to max_wait_s; reported as a get of slot k. */
static omni_received_t *next_chunk(omni_chunk_reader_t *rd, int req, int k, int max_wait_s)
{
    uint64_t t0 = now_ns();
    omni_received_t *c = NULL, *v = NULL;
    bool end = false;
    if (omni_chunk_reader_next(rd, max_wait_s * 1000, &c, &end) != DS_K_OK || end)
        die("receiving a chunk");
    size_t len = omni_received_size(c);
    if (omni_received_new(OMNI_DATA_VALUE, omni_received_data(c), len, free_chunk, c, &v) !=
        DS_K_OK)
        die("wrapping a chunk");
    report("G 1 %d %d %llu %llu %zu", req, k, (unsigned long long)t0, (unsigned long long)now_ns(),
           len);
    return v;
}

static int talker(const pd_opts_t *o)
{
    omni_connector_t *in = edge(o, "0", "1"), *out = edge(o, "1", "2");
    float *hidden = malloc(PM_MAX_SEQ * PM_HIDDEN * sizeof(float));
    int64_t ids[PM_MAX_SEQ];
    int32_t codes[PM_CODEBOOKS * PM_FRAMES];
    if (hidden == NULL) die("out of memory");
    for (int req = 0; req < o->requests; req++) {
        char hkey[64], tkey[64], ckey[64];
        pd_request_key(hkey, sizeof(hkey), req, "");
        pd_request_key(tkey, sizeof(tkey), req, "-hidden");
        omni_received_t *hdr = get(in, 0, "0", "1", req, 0, hkey, o->max_wait_s);
        omni_received_t *hid = get(in, 0, "0", "1", req, 1, tkey, o->max_wait_s);
        size_t seq;
        if (!read_thinker_output(req, hdr, hid, hidden, ids, &seq)) report("X 1 %d hidden", req);
        omni_received_free(hdr);
        omni_received_free(hid);
        omni_connector_cleanup(in, hkey);
        omni_connector_cleanup(in, tkey);

        size_t chunks = pm_num_chunks(seq);
        omni_chunk_writer_t *w = NULL;
        if (o->streaming && omni_chunk_writer_open(out, "1", "2", hkey, &w) != DS_K_OK) die(hkey);
        for (size_t k = 0; k < chunks; k++) {
            uint64_t decoder = pm_decode(hidden, seq, k);
            pm_codes(hidden, ids, seq, k, codes);
            int64_t shape[] = {PM_CODEBOOKS, PM_FRAMES};
            char suffix[24];
            snprintf(suffix, sizeof(suffix), "-c%zu", k);
            pd_request_key(ckey, sizeof(ckey), req, suffix);
            omni_value_t *m = omni_value_new_map();
            if (omni_map_set(m, "request_id", omni_value_new_str(hkey)) != DS_K_OK ||
                omni_map_set(m, "chunk", omni_value_new_int((int64_t)k)) != DS_K_OK ||
                omni_map_set(m, "last", omni_value_new_bool(k + 1 == chunks)) != DS_K_OK ||
                omni_map_set(m, "codes",
                             omni_value_new_tensor_ref(OMNI_DTYPE_INT32, shape, 2, codes,
                                                       sizeof(codes))) != DS_K_OK ||
                omni_map_set(m, "decoder", omni_value_new_uint(decoder)) != DS_K_OK ||
                omni_map_set(m, "checksum",
                             omni_value_new_uint(pm_fnv(PM_FNV_INIT, codes, sizeof(codes)))) !=
                    DS_K_OK)
                die("building a chunk");
            if (w != NULL) {
                send_chunk(w, req, (int)k, m);
            } else {
                omni_data_t d = omni_data_value(m);
                put(out, 1, "1", "2", req, (int)k, ckey, &d);
            }
            omni_value_free(m);
        }
        if (w != NULL && omni_chunk_writer_end(w) != DS_K_OK) die(hkey);
        omni_chunk_writer_free(w);
        report("S 1 %d", req);
    }
    await_shutdown(o);
    report_health(in, 0, "in");
    report_health(out, 1, "out");
    free(hidden);
    omni_connector_free(in);
    omni_connector_free(out);
    return 0;
}

static int code2wav(const pd_opts_t *o)
{
    omni_connector_t *in = edge(o, "1", "2");
    float *hidden = malloc(PM_MAX_SEQ * PM_HIDDEN * sizeof(float));
    static float wave[PM_CHUNK_SAMPLES];
    int64_t ids[PM_MAX_SEQ];
    int32_t codes[PM_CODEBOOKS * PM_FRAMES], want[PM_CODEBOOKS * PM_FRAMES];
    if (hidden == NULL) die("out of memory");
    for (int req = 0; req < o->requests; req++) {
        size_t seq = pm_seq_len(req), samples = 0;
        pm_hidden(req, hidden);
        pm_token_ids(req, ids);
        uint64_t h = PM_FNV_INIT;
        bool last = false;
        char rkey[64];
        pd_request_key(rkey, sizeof(rkey), req, "");
        omni_chunk_reader_t *rd = NULL;
        if (o->streaming && omni_chunk_reader_open(in, "1", "2", rkey, &rd) != DS_K_OK) die(rkey);
        for (size_t k = 0; !last; k++) {
            if (k == PM_MAX_CHUNKS) die("too many chunks");
            char key[64], suffix[24];
            snprintf(suffix, sizeof(suffix), "-c%zu", k);
            pd_request_key(key, sizeof(key), req, suffix);
            omni_received_t *r = rd != NULL ? next_chunk(rd, req, (int)k, o->max_wait_s)
                                            : get(in, 1, "1", "2", req, (int)k, key, o->max_wait_s);
            const omni_value_t *m;
            omni_tensor_view_t t;
            int64_t chunk = -1;
            uint64_t sum = 0;
            bool ok = omni_received_value(r, &m) == DS_K_OK &&
                      omni_value_get_tensor(omni_map_get(m, "codes"), &t) == DS_K_OK &&
                      t.dtype == OMNI_DTYPE_INT32 && t.nbytes == sizeof(codes) &&
                      omni_value_get_int(omni_map_get(m, "chunk"), &chunk) == DS_K_OK &&
                      chunk == (int64_t)k &&
                      omni_value_get_bool(omni_map_get(m, "last"), &last) == DS_K_OK &&
                      omni_value_get_uint(omni_map_get(m, "checksum"), &sum) == DS_K_OK;
            if (ok) {
                memcpy(codes, t.data, sizeof(codes));
                pm_codes(hidden, ids, seq, k, want);
                ok = pm_fnv(PM_FNV_INIT, codes, sizeof(codes)) == sum &&
                     memcmp(codes, want, sizeof(codes)) == 0;
            }
            if (!ok) {
                report("X 2 %d chunk-%zu", req, k);
                last = last || k + 1 >= pm_num_chunks(seq);
                memset(codes, 0, sizeof(codes));
            }
            omni_received_free(r);
            if (rd == NULL) omni_connector_cleanup(in, key);
            pm_waveform(codes, k, wave);
            h = pm_fnv(h, wave, sizeof(wave));
            samples += PM_CHUNK_SAMPLES;
        }
        if (rd != NULL) { /* read the end marker: the reader then deletes the stream */
            omni_received_t *none = NULL;
            bool end = false;
            if (omni_chunk_reader_next(rd, o->max_wait_s * 1000, &none, &end) != DS_K_OK || !end)
                die("the end of a chunk stream");
            omni_chunk_reader_free(rd);
        }
        report("D %d %llu %zu", req, (unsigned long long)h, samples);
        report("S 2 %d", req);
    }
    await_shutdown(o);
    report_health(in, 1, "in");
    free(hidden);
    omni_connector_free(in);
    return 0;
}

int pd_run_stage(const pd_opts_t *o)
{
    stage_id = o->stage;
    switch (o->stage) {
    case 0:
        return thinker(o);
    case 1:
        return talker(o);
    case 2:
        return code2wav(o);
    default:
        fprintf(stderr, "pipeline_demo: no stage %d\n", o->stage);
        return 2;
    }
}
