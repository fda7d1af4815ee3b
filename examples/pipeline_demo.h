/* The pipeline demo's parts: the orchestrator (pipeline_demo.c) starts the
 * three stage processes (pipeline_stages.c, the same binary run with
 * --stage N), feeds the thinker credits on its stdin (one byte per request
 * code2wav finished), closes every stage's stdin to shut the pipeline down,
 * and reads what the stages report on their stdout, one line per event, all
 * times CLOCK_MONOTONIC nanoseconds (shared by every process on the host):
 *
 *   P edge req slot t_start t_end bytes   a put (edge 0 = 0->1, 1 = 1->2)
 *   G edge req slot t_start t_end bytes   the matching get
 *   X stage req what                      a payload that failed its check
 *   S stage req                           the stage finished a request
 *   D req checksum samples                code2wav's waveform of a request
 *   H stage edge role name puts gets bytes errors timeouts not_found
 *     transport decode                    a connector's health at the end
 *   E stage message                       a fatal error (the stage exits 1)
 *
 * Slots: on edge 0, 0 is the request header (a serialized map) and 1 the
 * hidden states (a raw tensor); on edge 1, slot k is audio-code chunk k
 * (its own key, or element k of the request's stream with --talker_edge
 * stream). */
#ifndef PIPELINE_DEMO_H
#define PIPELINE_DEMO_H

#include <stddef.h>

#include "omni/connector.h"

#define PD_STAGES 3
#define PD_EDGES 2
#define PD_SLOTS 8

typedef struct {
    const char *config;         /* stage config YAML (vLLM-Omni format) */
    const char *worker_address; /* host:port overriding the config's, or NULL */
    int requests;
    int window; /* requests the thinker may have in flight */
    int stage;  /* -1: orchestrator */
    int max_wait_s;
    /* --stage_workers A,B,C: stage i talks to worker i of a cluster (so
     * every edge crosses workers); NULL entries fall back to worker_address. */
    const char *stage_workers[PD_STAGES];
    /* --talker_edge stream: the talker sends a request's audio-code chunks
     * as one stream (omni/stream_edge.h) instead of one key per chunk. */
    int streaming;
} pd_opts_t;

/* The stage names, by stage id. */
extern const char *const pd_stage_names[PD_STAGES];

/* Creates the connector of edge from -> to as the config defines it, with
 * host and port replaced by o->worker_address when given. name receives the
 * connector's name. */
ds_status_t pd_edge_connector(const pd_opts_t *o, const char *from, const char *to,
                              omni_connector_t **out, char *name, size_t cap);
/* "req-00042" plus suffix ("" / "-hidden" / "-c3") into buf. */
void pd_request_key(char *buf, size_t cap, int req, const char *suffix);
/* The key separator of a connector (its key is {id}{sep}{from}_{to}). */
char pd_key_sep(const char *connector_name);

/* Runs stage o->stage; the process's exit status. */
int pd_run_stage(const pd_opts_t *o);

/* ---- what the orchestrator collects (pipeline_report.c) ---- */

/* One payload: its put and its get (0 = not seen). */
typedef struct {
    uint64_t put_start, put_end, get_start, get_end;
    size_t bytes;
} pd_rec_t;

typedef struct {
    int requests;
    pd_rec_t *recs; /* [PD_EDGES][requests][PD_SLOTS] */
    int done[PD_STAGES];
    int verified, mismatched, corrupt;
    char connector[PD_EDGES][64];
    char health[8][192]; /* the stages' H lines, made readable */
    int nhealth;
    uint64_t t_start, t_end;
} pd_run_t;

int pd_run_init(pd_run_t *r, int requests);
void pd_run_free(pd_run_t *r);
pd_rec_t *pd_rec(pd_run_t *r, int edge, int req, int slot);
/* Per-edge payloads, bytes, latency percentiles and throughput. */
void pd_print_report(pd_run_t *r);
/* Counts the run's keys still in the store at host:port (they should all
 * have been cleaned up): 0, or -1 when the store could not be asked. */
int pd_count_leftovers(pd_run_t *r, const char *host, int port, size_t *left, size_t *total);

#endif
