/* Latches and global references: the origin forwards a client's RLATCH,
 * UNRLATCH, WLATCH, UNWLATCH or GREF to each key's owner (OWNED) and notes
 * what its sessions hold (the mirror). The design is in cluster_hold.c. */
#include "worker/cluster/cluster_hold_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the origin: a client's latch or GREF, forwarded to owners ---- */

void pend_err(ds_pend_t *p, uint32_t i, const char *msg)
{
    if (i >= p->err_idx) return;
    p->err_idx = i;
    snprintf(p->err, sizeof(p->err), "%.255s", msg);
}

static void owned_finish(ds_pend_t *p)
{
    bool gref = p->op == DS_OP_GREF;
    ds_status_t first = DS_K_OK;
    uint32_t ok = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->status[i] == DS_K_OK)
            ok++;
        else if (first == DS_K_OK)
            first = (ds_status_t)p->status[i];
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, first != DS_K_OK ? p->err : "");
    ds__wbuf_u32(&w, p->n);
    for (uint32_t i = 0; i < p->n; i++) {
        ds__wbuf_u32(&w, p->status[i]);
        if (gref) ds__wbuf_u32(&w, (uint32_t)p->sizes[i]);
    }
    ds_status_t overall = gref && ok ? DS_K_OK : first;
    ds__req_reply(p->req, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void owned_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    ds_holds_t *h = holds(p->srv);
    uint64_t sid = p->sid;
    uint32_t n = 0;
    bool failed = j->transport_failed || j->status == DS_K_INVALID ||
                  (n = ds__rbuf_u32(&j->r)) != j->nidx || j->r.err;
    bool first_err = true;
    uint64_t now = ds__now_ms();
    for (uint32_t e = 0; e < j->nidx; e++) {
        uint32_t i = j->idx[e];
        if (failed) {
            p->status[i] = j->transport_failed ? DS_K_RPC_UNAVAILABLE : DS_K_RUNTIME_ERROR;
            char msg[256];
            snprintf(msg, sizeof(msg), "owner %.64s of key '%.64s': %.100s", j->addr, p->keys[i],
                     j->err[0] ? j->err : "malformed answer");
            pend_err(p, i, msg);
            continue;
        }
        p->status[i] = ds__rbuf_u32(&j->r);
        p->sizes[i] = ds__rbuf_u32(&j->r);
        if (p->status[i] != DS_K_OK) {
            if (first_err) pend_err(p, i, j->err);
            first_err = false;
            continue;
        }
        if (h == NULL || (p->op == DS_OP_GREF && p->arg == 0)) continue;
        bool take =
            p->op == DS_OP_RLATCH || p->op == DS_OP_WLATCH || (p->op == DS_OP_GREF && p->arg > 0);
        uint64_t until = p->op == DS_OP_RLATCH ? now + (uint32_t)p->arg
                         : p->op == DS_OP_WLATCH
                             ? now + (uint64_t)p->srv->cfg.max_read_latch_timeout_ms
                             : 0;
        mirror_note(h, sid, op_kind(p->op), p->keys[i], p->keylens[i], take ? 1 : -1, until);
    }
}

bool ds__holds_owned(ds_server_t *srv, ds_req_t *r)
{
    uint16_t op = r->op;
    if (!op_ok(op) || r->session == NULL) return false;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    int32_t arg = 0;
    if (op == DS_OP_GREF)
        arg = ds__rbuf_i32(&rb);
    else if (op == DS_OP_RLATCH || op == DS_OP_WLATCH)
        arg = (int32_t)ds__rbuf_u32(&rb);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 5);
    if (rb.err || n == 0 || (op == DS_OP_GREF && (arg < -1 || arg > 1))) return false;
    ds_holds_t *h = holds(srv);
    ds_pend_t *p = ds__pend_new(srv, r, owned_finish);
    bool ok = h && p;
    if (ok) {
        p->status = calloc(n, sizeof(*p->status));
        p->sizes = calloc(n, sizeof(*p->sizes));
        ok = p->status && p->sizes && ds__pend_read_keys(p, &rb, n);
    }
    if (!ok || rb.err) {
        if (p) ds__pend_free(p);
        if (!ok) {
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
            return true;
        }
        return false; /* malformed: the caller says so */
    }
    p->arg = arg;
    p->err_idx = UINT32_MAX;
    uint64_t sid = p->sid = r->session->id;
    grants_t g = {0};
    bool *remote = calloc(n, sizeof(*remote));
    uint32_t nremote = 0;
    for (uint32_t i = 0; i < n; i++) {
        char msg[256];
        const char *owner = NULL;
        if (ds__key_check(p->keys[i], p->keylens[i], msg, sizeof(msg)) == 0)
            owner = ds__cluster_owner(srv, p->keys[i], p->keylens[i]);
        if (!is_self(srv, owner) && remote) {
            remote[i] = true;
            nremote++;
            continue;
        }
        uint32_t count = 0;
        uint64_t until = 0;
        ds_status_t st = DS_K_TRY_AGAIN;
        if (!ds__rebuild_pending(srv, p->keys[i], p->keylens[i], msg, sizeof(msg)))
            st = apply_one(srv, r->session, op, arg, true, p->keys[i], p->keylens[i], &count,
                           &until, msg, sizeof(msg));
        p->status[i] = (uint32_t)st;
        p->sizes[i] = count;
        if (st != DS_K_OK) {
            pend_err(p, i, msg);
            continue;
        }
        if (until) grant_add(&g, p->keys[i], p->keylens[i], until);
        if (op != DS_OP_GREF || arg != 0) {
            bool take = op == DS_OP_RLATCH || op == DS_OP_WLATCH || (op == DS_OP_GREF && arg > 0);
            mirror_note(h, sid, op_kind(op), p->keys[i], p->keylens[i], take ? 1 : -1, until);
        }
    }
    hints_send(srv, p, &g);
    grants_free(&g);
    bool takes = op == DS_OP_RLATCH || op == DS_OP_WLATCH || (op == DS_OP_GREF && arg > 0);
    if (nremote && takes) {
        mirror_t **seen = mirror_find(h, sid, KIND_SEEN, "", 0);
        if (*seen == NULL) mirror_note(h, sid, KIND_SEEN, "", 0, 1, 0);
    }
    /* One OWNED per owner for the keys owned elsewhere. */
    for (uint32_t a = 0; nremote && a < n; a++) {
        if (!remote[a]) continue;
        const char *owner = ds__cluster_owner(srv, p->keys[a], p->keylens[a]);
        ds_job_t *j = ds__job_new_indexed(p, owner, DS_OP_OWNED, owned_done, n);
        if (j == NULL) {
            p->status[a] = DS_K_OUT_OF_MEMORY;
            pend_err(p, a, "out of memory");
            remote[a] = false;
            continue;
        }
        ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
        ds__wbuf_u64(&j->req, sid);
        ds__wbuf_u32(&j->req, op);
        ds__wbuf_i32(&j->req, arg);
        for (uint32_t b = a; b < n; b++) {
            if (!remote[b]) continue;
            const char *o2 = ds__cluster_owner(srv, p->keys[b], p->keylens[b]);
            if (o2 && strcmp(o2, owner) == 0) {
                j->idx[j->nidx++] = b;
                remote[b] = false;
            }
        }
        ds__wbuf_u32(&j->req, j->nidx);
        for (uint32_t e = 0; e < j->nidx; e++)
            ds__wbuf_str(&j->req, p->keys[j->idx[e]], p->keylens[j->idx[e]]);
        ds__job_submit(srv, j);
    }
    free(remote);
    ds__pend_start(p);
    return true;
}
