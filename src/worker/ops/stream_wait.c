/* Parked RECEIVEs and SENDs (and pushes from other workers) of streams:
 * parking, waking when elements or room arrive, and deadlines
 * (docs/streams.md). Event loop only. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/stream.h"
#include "worker/ops/worker.h"

static void wait_unlink(ds_streams_t *S, sc_wait_t *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        S->waits = w->next;
    if (w->next) w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

static void wait_free(ds_streams_t *S, sc_wait_t *w)
{
    wait_unlink(S, w);
    free(w);
}

/* The request's connection closed: forget the wait. */
static void on_cancel(ds_req_t *d, void *ctx)
{
    sc_wait_t *w = ctx;
    wait_free(w->srv->streams, w);
    ds__req_drop(d);
}

bool ds__sc_park(ds_server_t *srv, ds_req_t *r, const sc_wait_t *proto)
{
    ds_streams_t *S = srv->streams;
    sc_wait_t *w = malloc(sizeof(*w));
    if (w == NULL) return false;
    *w = *proto;
    w->srv = srv;
    ds_req_t *d = ds__req_park(r, on_cancel, w);
    if (d == NULL) {
        free(w);
        return false;
    }
    w->req = d;
    w->prev = NULL;
    w->next = S->waits;
    if (S->waits) S->waits->prev = w;
    S->waits = w;
    return true;
}

/* Hands w's request back to the handler: out of the list, no cancel. */
ds_req_t *ds__sc_wait_take(ds_streams_t *S, sc_wait_t *w)
{
    ds_req_t *d = w->req;
    ds__req_unpark(d);
    wait_free(S, w);
    return d;
}

/* Runs w again (its end still open): a receive with enough elements is
 * answered; a send appends what now fits. timed_out: answer regardless. */
static void wait_run(ds_server_t *srv, sc_wait_t *w, bool timed_out)
{
    ds_streams_t *S = srv->streams;
    sc_end_t *e = w->push ? NULL : ds__sc_end(S, w->end_id);
    if (w->push) {
        ds_req_t *d = w->req;
        ds__req_unpark(d);
        sc_wait_t keep = *w;
        wait_free(S, w);
        ds_rbuf_t rb;
        ds__rbuf_init(&rb, d->meta, d->meta_len);
        const char *name;
        uint32_t nl = ds__rbuf_str(&rb, &name);
        sc_stream_t *st = ds__sc_find(S, name, nl);
        if (st == NULL) { /* deleted meanwhile: nobody to deliver to */
            ds__req_error(d, DS_K_OK, "%s", "");
            return;
        }
        if (timed_out) {
            ds__req_error(d, DS_K_OUT_OF_MEMORY, "stream %.*s on this worker stayed full for %d ms",
                          (int)nl, name, keep.timeout_ms);
            return;
        }
        if (ds__sc_send_step(srv, d, st, &keep.done, true)) {
            keep.req = NULL;
            if (!ds__sc_park(srv, d, &keep))
                ds__req_error(d, DS_K_OUT_OF_MEMORY, "worker out of memory");
        }
        return;
    }
    if (e == NULL) {
        bool send = w->send;
        ds_req_t *d = ds__sc_wait_take(S, w);
        ds__req_error(d, send ? DS_K_SC_PRODUCER_NOT_FOUND : DS_K_SC_CONSUMER_NOT_FOUND,
                      "the %s was closed while it waited", send ? "producer" : "consumer");
        return;
    }
    if (!w->send) {
        uint64_t avail = ds__sc_available(e);
        bool enough = w->expect == 0 ? avail > 0 : avail >= w->expect;
        if (!enough && !timed_out) return;
        uint32_t expect = w->expect;
        bool in_place = w->in_place;
        ds_req_t *d = ds__sc_wait_take(S, w);
        ds__sc_reply_elements(srv, d, e, expect, in_place);
        S->woken++;
        return;
    }
    uint32_t done = w->done;
    ds_req_t *d = w->req;
    ds__req_unpark(d);
    sc_wait_t keep = *w;
    wait_free(S, w);
    if (timed_out) {
        ds__req_error(d, DS_K_OUT_OF_MEMORY,
                      "Producer unable to secure enough memory for the element within %" PRId32
                      " ms",
                      keep.timeout_ms);
        return;
    }
    /* Appends what fits; parks again (a new wait, same deadline) if more is due. */
    keep.done = done;
    if (ds__sc_send_step(srv, d, e->st, &keep.done, false)) {
        keep.req = NULL;
        if (!ds__sc_park(srv, d, &keep))
            ds__req_error(d, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
}

/* The consumers' answers to a SEND's wake are written when their
 * connections resume, after this event; the producer's own answer is
 * deferred behind them, so the consumers, whose wait is the
 * producer-to-consumer latency, are woken first and the producer's wake-up
 * (its answer's write and futex wake) is off that path. */
void ds__sc_send_ok(ds_server_t *srv, ds_req_t *r, uint64_t woken_before)
{
    ds_req_t *d = r;
    if (srv->streams->woken != woken_before && !ds__req_is_deferred(r)) {
        d = ds__req_park(r, NULL, NULL);
        if (d == NULL)
            d = r; /* out of memory: answered now, in the old order */
        else
            ds__req_unpark(d);
    }
    ds__req_error(d, DS_K_OK, "%s", "");
}

void ds__sc_wake(ds_server_t *srv, sc_stream_t *st)
{
    ds_streams_t *S = srv->streams;
    /* A run may end waits and add new ones at the head: walk a snapshot of
     * the ids of this stream's waits, bounded by the list's length now. */
    uint32_t n = 0;
    for (sc_wait_t *w = S->waits; w; w = w->next)
        n++;
    if (n == 0) return;
    sc_wait_t **todo = malloc(n * sizeof(*todo));
    if (todo == NULL) return;
    uint32_t k = 0;
    for (sc_wait_t *w = S->waits; w; w = w->next) {
        sc_end_t *e = ds__sc_end(S, w->end_id);
        if (e == NULL || st == NULL || e->st == st) todo[k++] = w;
    }
    for (uint32_t i = 0; i < k; i++) {
        /* still listed? (an earlier run may have ended it) */
        bool listed = false;
        for (sc_wait_t *w = S->waits; w; w = w->next)
            if (w == todo[i]) {
                listed = true;
                break;
            }
        if (listed) wait_run(srv, todo[i], false);
    }
    free(todo);
}

uint64_t ds__stream_tick(ds_server_t *srv, uint64_t now)
{
    ds_streams_t *S = srv->streams;
    if (S == NULL) return 0;
    uint64_t next = 0, flush_next = 0;
    /* --sc_metrics_log_interval_s */
    uint64_t every = (uint64_t)srv->cfg.sc_metrics_log_interval_s * 1000;
    if (S->metrics_at == 0) {
        S->metrics_at = now + every;
    } else if (now >= S->metrics_at) {
        ds__stream_log_metrics(srv);
        S->metrics_at = now + every;
    }
    flush_next = S->metrics_at;
    /* delay_flush_time_ms: streams whose flush is due. */
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &S->streams);
    for (ds_dict_node_t *nd; S->flushes && (nd = ds__dict_iter_next(&it)) != NULL;) {
        sc_stream_t *st = DS_DICT_ENTRY(nd, sc_stream_t, node);
        if (st->flush_at == 0) continue;
        if (st->flush_at <= now)
            ds__sc_flush(srv, st);
        else if (flush_next == 0 || st->flush_at < flush_next)
            flush_next = st->flush_at;
    }
    for (int guard = 0; guard < 1000000; guard++) {
        sc_wait_t *due = NULL;
        next = 0;
        for (sc_wait_t *w = S->waits; w; w = w->next) {
            if (w->deadline <= now) {
                due = w;
                break;
            }
            if (next == 0 || w->deadline < next) next = w->deadline;
        }
        if (due == NULL) break;
        wait_run(srv, due, true);
    }
    return flush_next && (next == 0 || flush_next < next) ? flush_next : next;
}
