/* Latches and global references: a write of a hinted key owned elsewhere
 * waits at the owner (LATCH_WAIT) before it goes ahead. The design is in
 * cluster_hold.c. */
#include "worker/cluster/cluster_hold_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A LATCH_WAIT holds a job thread until the owner lets the write go; at
 * most this many do at once, so that the threads stay free for the
 * requests that release latches (OWNED) and the rest. */
#define WAITS_MAX 2u

/* ---- writers ---- */

static void wait_finish(ds_pend_t *p)
{
    /* The owners let the write go; this worker's own latches come next. A
     * key hinted again since the owners were asked may have been latched
     * after their answer, before this write is recorded there: ask again. */
    ds_req_t *d = p->req;
    ds_holds_t *h = *ds__cluster_holds(p->srv);
    bool again = false;
    for (uint32_t i = 0; h && i < p->n && !again; i++)
        for (hint_t *x = h->hints[hint_bucket(p->keys[i], p->keylens[i])]; x; x = x->next)
            if (x->len == p->keylens[i] && memcmp(x->key, p->keys[i], x->len) == 0) {
                again = x->stamp > p->stamp;
                break;
            }
    if (again && ds__holds_latch_wait(p->srv, d, (const char *const *)p->keys, p->keylens, p->n,
                                      p->resume, p->cancel, p->ctx))
        return;
    if (!ds__latch_park_as(p->srv, d, d->session, (const char *const *)p->keys, p->keylens, p->n,
                           p->resume, p->cancel, p->ctx))
        p->resume(p->srv, d, p->ctx);
}

static void wait_gone(ds_pend_t *p)
{
    if (p->cancel) p->cancel(p->ctx);
}

/* Sends a LATCH_WAIT now, or queues it while WAITS_MAX are out. */
static void wait_submit(ds_server_t *srv, ds_holds_t *h, ds_job_t *j)
{
    if (h->waits < WAITS_MAX) {
        h->waits++;
        ds__job_submit(srv, j);
        return;
    }
    j->pend->outstanding++; /* as ds__job_submit would: the pend waits for it */
    j->next = NULL;
    if (h->wait_tail)
        h->wait_tail->next = j;
    else
        h->wait_head = j;
    h->wait_tail = j;
}

static void wait_done(ds_job_t *j)
{
    /* An owner that cannot be asked holds nothing this write can wait for
     * (a new owner rebuilds the latches from their holders). */
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: asking %s for latches failed (the write goes ahead): %s", j->addr,
                    j->err);
    ds_server_t *srv = j->pend->srv;
    /* The owner names the sealed keys (an older owner answers nothing). */
    uint32_t ns = j->transport_failed || j->status != DS_K_OK ? 0 : ds__rbuf_u32(&j->r);
    for (uint32_t e = 0; ns == j->nidx && e < ns && j->idx; e++) {
        uint32_t st = ds__rbuf_u32(&j->r);
        if (j->r.err) break;
        ds_pend_t *p = j->pend;
        ds__seal_told(srv, p->keys[j->idx[e]], p->keylens[j->idx[e]], st == DS_K_OC_ALREADY_SEALED);
    }
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL) return;
    if (h->waits > 0) h->waits--;
    ds_job_t *next = h->wait_head;
    if (next == NULL) return;
    h->wait_head = next->next;
    if (h->wait_head == NULL) h->wait_tail = NULL;
    next->next = NULL;
    next->pend->outstanding--; /* ds__job_submit counts it again */
    h->waits++;
    ds__job_submit(srv, next);
}

bool ds__holds_latch_wait(ds_server_t *srv, ds_req_t *r, const char *const *keys,
                          const uint32_t *lens, uint32_t n, ds_latch_resume_fn resume,
                          ds_latch_cancel_fn cancel, void *ctx)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL || h->nhints == 0) return false;
    uint64_t now = ds__now_ms();
    uint32_t *which = malloc(n * sizeof(*which));
    uint32_t nw = 0;
    for (uint32_t i = 0; which && i < n; i++)
        if (hinted(h, keys[i], lens[i], now) &&
            !is_self(srv, ds__cluster_owner(srv, keys[i], lens[i])))
            which[nw++] = i;
    if (nw == 0) {
        free(which);
        return false;
    }
    ds_pend_t *p = ds__pend_new(srv, r, wait_finish);
    bool ok = p != NULL;
    if (ok) {
        p->keys = calloc(n, sizeof(*p->keys));
        p->keylens = calloc(n, sizeof(*p->keylens));
        ok = p->keys && p->keylens;
    }
    for (uint32_t i = 0; ok && i < n; i++)
        ok = ds__pend_add_key(p, keys[i], lens[i]);
    if (!ok) {
        /* Out of memory: the write goes ahead rather than failing. */
        if (p) ds__pend_free(p);
        free(which);
        return false;
    }
    p->resume = resume;
    p->cancel = cancel;
    p->ctx = ctx;
    p->gone = wait_gone;
    p->stamp = h->hint_stamp;
    uint64_t sid = r->session ? r->session->id : 0;
    bool *taken = calloc(nw, sizeof(*taken));
    for (uint32_t a = 0; taken && a < nw; a++) {
        if (taken[a]) continue;
        const char *owner = ds__cluster_owner(srv, keys[which[a]], lens[which[a]]);
        ds_job_t *j = ds__job_new(p, owner, DS_OP_LATCH_WAIT, wait_done);
        if (j == NULL) break;
        /* A latch lasts --max_read_latch_timeout_ms at most. */
        j->timeout_ms = (uint64_t)srv->cfg.max_read_latch_timeout_ms + 10000u;
        ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
        ds__wbuf_u64(&j->req, sid);
        uint32_t cnt = 0;
        for (uint32_t b = a; b < nw; b++)
            if (!taken[b] &&
                strcmp(ds__cluster_owner(srv, keys[which[b]], lens[which[b]]), owner) == 0)
                cnt++;
        ds__wbuf_u32(&j->req, cnt);
        j->idx = malloc(cnt * sizeof(*j->idx));
        for (uint32_t b = a; b < nw; b++)
            if (!taken[b] &&
                strcmp(ds__cluster_owner(srv, keys[which[b]], lens[which[b]]), owner) == 0) {
                taken[b] = true;
                if (j->idx) j->idx[j->nidx++] = which[b];
                ds__wbuf_str(&j->req, keys[which[b]], lens[which[b]]);
            }
        wait_submit(srv, h, j);
    }
    free(taken);
    free(which);
    ds__pend_start(p);
    return true;
}
