/* The request layer (request.h) over the connections of conn.c, and the
 * connection layer's set-up and tear-down. */
#include "worker/net/conn.h"
#include "worker/net/lane.h"

#include "common/clock.h"
#include "common/log.h"
#include "ds/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void observe(ds_req_t *r)
{
    ds_conn_t *c = r->conn_;
    if (r->start_ns_ && c->net->observe)
        c->net->observe(c->net->observe_ctx, r->op, ds__now_ns() - r->start_ns_);
    r->start_ns_ = 0;
}

/* Ends deferred request d: its connection (if any) resumes after the
 * current event. */
static void end_deferred(ds_req_t *d)
{
    ds_conn_t *c = d->conn_;
    if (c) {
        ds__guard_uncharge(c);
        c->deferred = NULL;
        ds__conn_make_ready(c);
    }
    free(d->meta_own_);
    free(d);
}

void ds__req_log(const ds_req_t *r, int level, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->trace_id[0])
        ds__log((ds_log_level_t)level, "[%s] %s", r->trace_id, msg);
    else
        ds__log((ds_log_level_t)level, "%s", msg);
}

void ds__req_reply(ds_req_t *r, ds_status_t st, const ds_wbuf_t *w, const struct iovec *segs,
                   uint32_t nseg, ds_obj_t **refs, uint32_t nrefs, int fd)
{
    ds_conn_t *c = r->conn_;
    /* A traced request says how it ended, so its trace id finds it in the
     * log (untraced ones would flood it). */
    if (r->trace_id[0]) {
        const char *why = "";
        if (st != DS_K_OK && w && w->len >= 4) {
            ds_rbuf_t rb;
            ds__rbuf_init(&rb, w->buf, w->len);
            uint32_t el = ds__rbuf_str(&rb, &why);
            if (rb.err) el = 0;
            ds__req_log(r, DS_LOG_INFO, "conn %llu %s request %llu: %s%s%.*s",
                        (unsigned long long)r->conn_id, ds__opcode_name(r->op),
                        (unsigned long long)r->id, ds_status_name(st), el ? ": " : "", (int)el,
                        why);
        } else {
            ds__req_log(r, DS_LOG_INFO, "conn %llu %s request %llu: %s",
                        (unsigned long long)r->conn_id, ds__opcode_name(r->op),
                        (unsigned long long)r->id, ds_status_name(st));
        }
    }
    if (c == NULL) {
        /* The connection is gone: nobody to answer, the references go. */
        for (uint32_t i = 0; i < nrefs; i++)
            ds__store_unref(r->net_->store, refs[i]);
    } else {
        ds__guard_uncharge(c);
        observe(r);
        ds_wbuf_t tw;
        uint8_t tw_room[DS_REPLY_ROOM];
        if (r->tail_len_) {
            ds__wbuf_init_on(&tw, tw_room, sizeof(tw_room));
            if (w) ds__wbuf_bytes(&tw, w->buf, w->len);
            ds__wbuf_bytes(&tw, r->tail_, r->tail_len_);
            if (!tw.oom) w = &tw;
        }
        /* A deferred request's answer is written when its connection
         * resumes: never from inside another connection's event. */
        ds__conn_queue(c, r->id, r->op, st, w, segs, nseg, refs, nrefs, fd, !r->deferred_);
        if (r->tail_len_) ds__wbuf_free(&tw);
    }
    if (r->deferred_) end_deferred(r);
}

void ds__req_set_tail(ds_req_t *r, const void *p, uint8_t n)
{
    if (n > sizeof(r->tail_)) n = sizeof(r->tail_);
    memcpy(r->tail_, p, n);
    r->tail_len_ = n;
}

void ds__req_error(ds_req_t *r, ds_status_t st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ds_wbuf_t w;
    uint8_t room[DS_REPLY_ROOM];
    ds__wbuf_init_on(&w, room, sizeof(room));
    ds__wbuf_cstr(&w, msg);
    ds__req_reply(r, st, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

ds_req_t *ds__req_park(ds_req_t *r, ds_req_cancel_fn cancel, void *ctx)
{
    if (r->deferred_) {
        r->cancel_ = cancel;
        r->cancel_ctx_ = ctx;
        return r;
    }
    ds_conn_t *c = r->conn_;
    ds_req_t *d = malloc(sizeof(*d));
    if (d == NULL) return NULL;
    *d = *r;
    d->deferred_ = true;
    d->cancel_ = cancel;
    d->cancel_ctx_ = ctx;
    /* The metadata goes with it (a SET's was consumed already). */
    if (r->meta && r->meta == c->meta && c->meta_owned) {
        d->meta_own_ = c->meta;
        c->meta = NULL;
    } else if (r->meta && r->meta == c->meta) {
        /* It lies in the connection's read buffer, which moves on. */
        d->meta_own_ = malloc(r->meta_len ? r->meta_len : 1);
        if (d->meta_own_ == NULL) {
            free(d);
            return NULL;
        }
        memcpy(d->meta_own_, r->meta, r->meta_len);
        d->meta = d->meta_own_;
        c->meta = NULL;
    } else {
        d->meta = NULL;
        d->meta_len = 0;
        d->meta_own_ = NULL;
    }
    c->deferred = d;
    c->state = CONN_PARKED;
    return d;
}

void ds__req_unpark(ds_req_t *d)
{
    d->cancel_ = NULL;
    d->cancel_ctx_ = NULL;
}

void ds__req_drop(ds_req_t *d)
{
    if (d->deferred_) end_deferred(d);
}

bool ds__req_gone(const ds_req_t *d)
{
    return d->conn_ == NULL;
}

bool ds__req_is_deferred(const ds_req_t *r)
{
    return r->deferred_;
}

void ds__req_recv_data(ds_req_t *r, ds_sink_t *sinks, uint32_t n, ds_req_data_fn done, void *ctx)
{
    ds_conn_t *c = r->conn_;
    c->sinks = sinks;
    c->nsinks = n;
    c->sink_idx = 0;
    c->sink_off = 0;
    c->skip = 0;
    c->data_done = done;
    c->data_ctx = ctx;
    while (c->sink_idx < n && sinks[c->sink_idx].len == 0)
        c->sink_idx++;
}

/* ---- the layer's life ---- */

int ds__net_init(ds_net_t *net, char *err, size_t err_cap)
{
    net->bulk = ds__bulk_new(net->loop, err, err_cap);
    if (net->bulk == NULL) return -1;
    net->brecv = ds__brecv_new(net->loop, err, err_cap);
    if (net->brecv == NULL) return -1;
    ds__loop_set_after(net->loop, ds__net_after_event, net);
    ds__net_turn(net);
    return 0;
}

void ds__net_free_dead(ds_net_t *net)
{
    while (net->dead) {
        ds_conn_t *c = net->dead;
        net->dead = c->next;
        free(c);
    }
}

bool ds__net_output_pending(const ds_net_t *net)
{
    for (const ds_conn_t *c = net->conns; c; c = c->next)
        if (c->out_head) return true;
    return false;
}

void ds__net_destroy(ds_net_t *net)
{
    ds__brecv_free(net->brecv); /* hands back every job it held */
    net->brecv = NULL;
    ds__bulk_free(net->bulk); /* hands back every frame it held */
    net->bulk = NULL;
    while (net->conns)
        ds__conn_close(net->conns, "worker shutting down");
    ds__net_after_event(net); /* closed connections on the ready list go to dead */
    ds__net_free_dead(net);
    while (net->sessions)
        ds__session_free(net, net->sessions);
    ds__lanes_destroy(net);
}
