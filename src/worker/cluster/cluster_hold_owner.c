/* Latches and global references: the owner's side (OWNED, LATCH_WAIT,
 * LATCH_HINT, HOLDER_END from other workers). The design is in
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

/* Stands for a writer that holds nothing at an owner. */
static const char no_holder;

/* ---- the owner's side ---- */

static void statuses_counts_finish(ds_pend_t *p)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, p->err_idx != UINT32_MAX ? p->err : "");
    ds__wbuf_u32(&w, p->n);
    for (uint32_t i = 0; i < p->n; i++) {
        ds__wbuf_u32(&w, p->status[i]);
        ds__wbuf_u32(&w, (uint32_t)p->sizes[i]);
    }
    ds__req_reply(p->req, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_owned(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    const char *origin;
    uint64_t sid;
    uint32_t ol = read_sender(&rb, r, &origin, &sid);
    uint32_t op = ds__rbuf_u32(&rb);
    int32_t arg = ds__rbuf_i32(&rb);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 5);
    bool rebuild = (op & OWNED_REBUILD) != 0;
    op &= ~OWNED_REBUILD;
    ds_holds_t *h = holds(srv);
    if (rb.err || ol == 0 || sid == 0 || !op_ok(op)) {
        ds__req_error(r, DS_K_INVALID, "malformed OWNED");
        return;
    }
    /* A holder is made by what takes a hold; the others find it, or stand
     * for nobody. */
    bool takes = op == DS_OP_RLATCH || op == DS_OP_WLATCH || (op == DS_OP_GREF && arg > 0);
    const void *holder = NULL;
    if (h) holder = takes ? rholder_get(h, origin, ol, sid) : rholder_find(h, origin, ol, sid);
    if (h && !takes && holder == NULL) holder = &no_holder;
    ds_pend_t *p = holder ? ds__pend_new(srv, r, statuses_counts_finish) : NULL;
    if (p) {
        p->status = calloc(n ? n : 1, sizeof(*p->status));
        p->sizes = calloc(n ? n : 1, sizeof(*p->sizes));
        p->err_idx = UINT32_MAX;
    }
    if (p == NULL || p->status == NULL || p->sizes == NULL) {
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    p->n = n;
    grants_t g = {0};
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        char msg[256];
        uint32_t count = 0;
        uint64_t until = 0;
        ds_status_t st;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed OWNED: key %u truncated", i);
            st = DS_K_INVALID;
        } else if (!rebuild && ds__rebuild_pending(srv, k, kl, msg, sizeof(msg))) {
            st = DS_K_TRY_AGAIN;
        } else {
            st = apply_one(srv, holder, op, arg, !rebuild, k, kl, &count, &until, msg, sizeof(msg));
        }
        p->status[i] = (uint32_t)st;
        p->sizes[i] = count;
        if (st != DS_K_OK)
            pend_err(p, i, msg);
        else if (until)
            grant_add(&g, k, kl, until); /* k points into r->meta, valid until the answer */
    }
    hints_send(srv, p, &g);
    grants_free(&g);
    ds__pend_start(p);
}

static void latch_wait_resume(ds_server_t *srv, ds_req_t *d, void *ctx)
{
    (void)ctx;
    ds__seal_wait_answer(srv, d);
}

/* Reads "n, n*key" into arrays pointing into the request. */
static bool read_keys(ds_rbuf_t *rb, const char ***keys, uint32_t **lens, uint32_t *n)
{
    *n = ds__rbuf_count(rb, 10 * DS_MAX_BATCH, 5);
    if (rb->err || *n == 0) return false;
    *keys = malloc(*n * sizeof(**keys));
    *lens = malloc(*n * sizeof(**lens));
    if (*keys == NULL || *lens == NULL) return false;
    for (uint32_t i = 0; i < *n; i++)
        (*lens)[i] = ds__rbuf_str(rb, &(*keys)[i]);
    return !rb->err;
}

void latch_wait_op(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    const char *origin;
    uint64_t sid;
    uint32_t ol = read_sender(&rb, r, &origin, &sid);
    const char **keys = NULL;
    uint32_t *lens = NULL, n = 0;
    if (!read_keys(&rb, &keys, &lens, &n) || ol == 0) {
        free(keys);
        free(lens);
        ds__req_error(r, DS_K_INVALID, "malformed LATCH_WAIT");
        return;
    }
    /* A key being rebuilt here may have latches still on their way: the
     * write waits for the rebuild first. */
    char msg[256];
    for (uint32_t i = 0; i < n; i++)
        if (ds__rebuild_pending(srv, keys[i], lens[i], msg, sizeof(msg)) && rebuild_park(srv, r)) {
            free(keys);
            free(lens);
            return;
        }
    ds_holds_t *h = holds(srv);
    const void *holder = h ? (const void *)rholder_find(h, origin, ol, sid) : NULL;
    if (holder == NULL) holder = &no_holder;
    /* A sealed key refuses the write: no latch to wait for. */
    if (ds__seal_wait_any(srv, keys, lens, n) ||
        !ds__latch_park_as(srv, r, holder, keys, lens, n, latch_wait_resume, NULL, NULL))
        ds__seal_wait_answer(srv, r);
    free(keys);
    free(lens);
}

static void hint_finish(ds_pend_t *p)
{
    ds__req_error(p->req, DS_K_OK, "%s", "");
}

static void op_latch_hint(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 9);
    ds_holds_t *h = holds(srv);
    uint64_t now = ds__now_ms();
    /* The answer waits for this worker's writes of the keys that passed
     * their hint check before this hint came (cluster_seal.c). */
    ds_pend_t *p = ds__pend_new(srv, r, hint_finish);
    bool waits = false;
    for (uint32_t i = 0; h && i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint32_t ms = ds__rbuf_u32(&rb);
        if (rb.err) break;
        hint_put(h, k, kl, now + ms);
        if (ms == UINT32_MAX) ds__seal_hinted(srv, k, kl);
        if (p && ds__inflight_wait(srv, p, k, kl)) waits = true;
    }
    if (waits) { /* the hints taken stand; the waiters hold p */
        ds__pend_start(p);
        return;
    }
    if (p) ds__pend_free(p);
    if (rb.err)
        ds__req_error(r, DS_K_INVALID, "malformed LATCH_HINT");
    else
        ds__req_error(r, h ? DS_K_OK : DS_K_OUT_OF_MEMORY, "%s", h ? "" : "out of memory");
}

static void op_holder_end(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    const char *origin;
    uint64_t sid;
    uint32_t ol = read_sender(&rb, r, &origin, &sid);
    if (rb.err || ol == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed HOLDER_END");
        return;
    }
    holders_end(srv, origin, ol, sid);
    ds__req_error(r, DS_K_OK, "%s", "");
}

void ds__holds_peer_op(ds_server_t *srv, ds_req_t *r)
{
    switch (r->op) {
    case DS_OP_OWNED:
        op_owned(srv, r);
        break;
    case DS_OP_LATCH_WAIT:
        latch_wait_op(srv, r);
        break;
    case DS_OP_LATCH_HINT:
        op_latch_hint(srv, r);
        break;
    case DS_OP_REBUILD_DONE:
        rebuild_done_op(srv, r);
        break;
    default:
        op_holder_end(srv, r);
    }
}
