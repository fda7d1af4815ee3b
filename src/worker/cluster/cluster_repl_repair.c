/* Copies: an owner makes the replicas its keys lost with a member again
 * (REPL_COPY asks a surviving holder to push one). The design is in
 * cluster_repl.c. */
#include "worker/cluster/cluster_repl_int.h"

#include "cJSON.h"
#include "common/clock.h"
#include "common/dict.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"
#include "worker/ops/subs.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- repair: copies lost with a member are made again ---- */

typedef struct {
    char **keys;
    uint32_t *lens;
    uint32_t n, cap;
} keylist_t;

static void collect_short(void *ctx, const char *key, uint32_t len, uint32_t want, uint32_t have)
{
    (void)want;
    (void)have;
    keylist_t *l = ctx;
    if (l->n >= DS_REPL_REPAIR_BATCH) return;
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 64;
        char **nk = realloc(l->keys, cap * sizeof(*nk));
        if (nk) l->keys = nk;
        uint32_t *nl = realloc(l->lens, cap * sizeof(*nl));
        if (nl) l->lens = nl;
        if (nk == NULL || nl == NULL) return;
        l->cap = cap;
    }
    if ((l->keys[l->n] = strndup(key, len)) == NULL) return;
    l->lens[l->n++] = len;
}

/* Holder-added (REPL_META mode 2) answered: a copy the owner did not take
 * (the write was superseded or deleted meanwhile) is dropped again. */
static void holder_added_done(ds_job_t *j)
{
    ds_server_t *srv = j->ctx;
    if (j->transport_failed || j->status != DS_K_OK) return;
    uint32_t n = ds__rbuf_u32(&j->r);
    uint32_t st = n == 1 ? ds__rbuf_u32(&j->r) : DS_K_OK;
    if (j->r.err || st == DS_K_OK) return;
    ds_rbuf_t q;
    ds__rbuf_init(&q, j->req.buf, j->req.len);
    const char *s, *k, *t;
    (void)ds__rbuf_str(&q, &s);
    (void)ds__rbuf_u8(&q);
    (void)ds__rbuf_u32(&q);
    uint32_t kl = ds__rbuf_str(&q, &k);
    (void)ds__rbuf_u64(&q);
    (void)ds__rbuf_u64(&q);
    (void)ds__rbuf_u32(&q);
    (void)ds__rbuf_u32(&q);
    uint32_t tl = ds__rbuf_str(&q, &t);
    uint64_t ver = ds__rbuf_u64(&q);
    if (q.err) return;
    char target[300];
    snprintf(target, sizeof(target), "%.*s", (int)tl, t);
    ds_job_t *d = ds__job_new(NULL, target, DS_OP_DROP, NULL);
    if (d == NULL) return;
    ds__wbuf_u32(&d->req, 1);
    ds__wbuf_str(&d->req, k, kl);
    ds__wbuf_u64(&d->req, ver);
    ds__job_submit(srv, d);
}

/* A copy made again reached its target (ver there): the key's owner adds
 * the target to the write's holders, or, when the write is no longer
 * current, the copy is dropped. */
static void repair_push_done(ds_job_t *j)
{
    ds_server_t *srv = j->ctx;
    ds_repl_t *rp = ds__cluster_repl(srv);
    ds_obj_t *o = j->obj;
    j->obj = NULL;
    if (j->index) rp->repairs_out--; /* a repair the owner started itself */
    uint64_t ver = ds__rbuf_u64(&j->r);
    if (j->transport_failed || j->status != DS_K_OK || j->r.err) {
        DS_LOG_WARN("cluster: making a copy of '%.64s' again on %s failed: %s", o->key, j->addr,
                    j->err);
        ds__repl_schedule_repair(rp, DS_REPL_REPAIR_DELAY_MS);
        ds__store_unref(srv->store, o);
        return;
    }
    ds_rbuf_t q;
    ds__rbuf_init(&q, j->req.buf, j->req.len);
    const char *k, *origin;
    uint32_t kl = ds__rbuf_str(&q, &k);
    (void)ds__rbuf_u8(&q);
    (void)ds__rbuf_u32(&q);
    uint32_t ol = ds__rbuf_str(&q, &origin);
    uint64_t ov = ds__rbuf_u64(&q);
    uint32_t want = ds__rbuf_u32(&q);
    char org[300];
    snprintf(org, sizeof(org), "%.*s", (int)(ol < 299 ? ol : 299), origin);
    rp->repairs++;
    const char *owner = ds__cluster_owner(srv, k, kl);
    if (owner && strcmp(owner, ds__cluster_self(srv)) == 0) {
        if (!ds__meta_add(ds__cluster_meta(srv), k, kl, org, ov, j->addr, o->size, ver)) {
            ds_job_t *d = ds__job_new(NULL, j->addr, DS_OP_DROP, NULL);
            if (d) {
                ds__wbuf_u32(&d->req, 1);
                ds__wbuf_str(&d->req, k, kl);
                ds__wbuf_u64(&d->req, ver);
                ds__job_submit(srv, d);
            }
        }
    } else if (owner) {
        ds_job_t *m = ds__job_new(NULL, owner, DS_OP_REPL_META, holder_added_done);
        if (m) {
            m->ctx = srv;
            ds__wbuf_cstr(&m->req, org);
            ds__wbuf_u8(&m->req, 2);
            ds__wbuf_u32(&m->req, 1);
            holders_t h = {1, {j->addr}, {ver}};
            ds__repl_meta_entry(&m->req, k, kl, o->size, ov, want, &h);
            ds__job_submit(srv, m);
        }
    }
    ds__store_unref(srv->store, o);
}

/* The owner's REPL_COPY came back: the holder has started the push (it
 * reports the new holder itself). */
static void repair_done(ds_job_t *j)
{
    ds_server_t *srv = j->ctx;
    ds_repl_t *rp = ds__cluster_repl(srv);
    rp->repairs_out--;
    if (j->transport_failed || j->status != DS_K_OK) {
        DS_LOG_WARN("cluster: making a copy again through %s failed: %s", j->addr, j->err);
        ds__repl_schedule_repair(rp, DS_REPL_REPAIR_DELAY_MS);
    }
}

static void repair_key(ds_server_t *srv, ds_repl_t *rp, const char *k, uint32_t kl)
{
    ds_meta_t *m = ds__cluster_meta(srv);
    const char *origin;
    uint64_t ov, size = 0;
    uint32_t want;
    const char *cp[DS_META_MAX_LOCS];
    uint64_t cv[DS_META_MAX_LOCS];
    if (!ds__meta_write(m, k, kl, &origin, &ov, &want)) return;
    uint32_t have = ds__meta_copies(m, k, kl, cp, cv, DS_META_MAX_LOCS, &size);
    if (have == 0 || have >= want) return;
    const char *self = ds__cluster_self(srv);
    uint32_t src = 0;
    for (uint32_t i = 0; i < have; i++)
        if (strcmp(cp[i], self) == 0) src = i;
    const char *targets[DS_META_MAX_LOCS];
    uint32_t nt = ds__repl_pick_targets(srv, k, kl, cp, have, targets, want - have);
    bool self_holds = strcmp(cp[src], self) == 0;
    for (uint32_t t = 0; t < nt; t++) {
        ds_job_t *j;
        if (self_holds) {
            ds_obj_t *o = ds__store_lookup(srv->store, k, kl, ds__now_ms());
            if (o == NULL || o->version != cv[src]) return;
            j = ds__repl_push_job(srv, NULL, targets[t], o, origin, ov, want, repair_push_done);
            if (j) j->index = 1; /* counted in repairs_out */
        } else {
            j = ds__job_new(NULL, cp[src], DS_OP_REPL_COPY, repair_done);
            if (j) {
                ds__wbuf_str(&j->req, k, kl);
                ds__wbuf_u64(&j->req, cv[src]);
                ds__wbuf_cstr(&j->req, targets[t]);
                ds__wbuf_cstr(&j->req, origin);
                ds__wbuf_u64(&j->req, ov);
                ds__wbuf_u32(&j->req, want);
                j->timeout_ms = 60000 + size / 1000;
            }
        }
        if (j == NULL) return;
        j->ctx = srv;
        rp->repairs_out++;
        ds__job_submit(srv, j);
    }
}

static void run_repairs(ds_server_t *srv, ds_repl_t *rp)
{
    keylist_t l = {0};
    ds__meta_foreach_short(ds__cluster_meta(srv), collect_short, &l);
    for (uint32_t i = 0; i < l.n; i++) {
        repair_key(srv, rp, l.keys[i], l.lens[i]);
        free(l.keys[i]);
    }
    if (l.n) DS_LOG_INFO("cluster: making copies of %u keys again", l.n);
    /* Look again later: a copy made through another holder is reported by
     * that holder, and one that failed there is tried again from here. */
    if (l.n)
        ds__repl_schedule_repair(rp,
                                 l.n >= DS_REPL_REPAIR_BATCH ? 100 : 3 * DS_REPL_REPAIR_DELAY_MS);
    free(l.keys);
    free(l.lens);
}

void ds__repl_member_left(ds_server_t *srv, const char *addr)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    ds__repl_schedule_repair(rp, DS_REPL_REPAIR_DELAY_MS);
    /* Hot copies pulled from the member that left go: when it held the
     * write's last full copy, the key is lost everywhere alike (a hot copy
     * is a cache, never a replica); when other copies remain, the next get
     * pulls again. */
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &rp->copies);
    for (ds_dict_node_t *n; (n = ds__dict_iter_next(&it)) != NULL;) {
        copy_t *c = DS_DICT_ENTRY(n, copy_t, node);
        if ((c->kind == COPY_HOT || c->kind == COPY_HOT_PENDING) && c->src &&
            strcmp(c->src, addr) == 0)
            ds__repl_stale_add(rp, c->key, c->keylen);
    }
    ds__repl_rereg_flush(srv);
}

uint64_t ds__repl_tick(ds_server_t *srv, uint64_t now)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    if (rp == NULL || rp->repair_due == 0) return 0;
    if (now < rp->repair_due) return rp->repair_due;
    if (rp->repairs_out > 0) { /* one round at a time */
        rp->repair_due = now + 100;
        return rp->repair_due;
    }
    rp->repair_due = 0;
    run_repairs(srv, rp);
    return rp->repair_due;
}

/* REPL_COPY at a holder: push my copy (that version) to the target, then
 * tell the owner (repair_push_done). Answered at once: the owner's job
 * thread must not wait on this worker's job threads, which may be waiting
 * on the owner's. */
void ds__repl_op_copy(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *k, *target, *origin;
    uint32_t kl = ds__rbuf_str(&rb, &k);
    uint64_t version = ds__rbuf_u64(&rb);
    uint32_t tl = ds__rbuf_str(&rb, &target);
    uint32_t ol = ds__rbuf_str(&rb, &origin);
    uint64_t ov = ds__rbuf_u64(&rb);
    uint32_t want = ds__rbuf_u32(&rb);
    char t[300], o[300];
    if (rb.err || tl == 0 || tl >= sizeof(t) || ol == 0 || ol >= sizeof(o)) {
        ds__req_error(r, DS_K_INVALID, "malformed REPL_COPY");
        return;
    }
    snprintf(t, sizeof(t), "%.*s", (int)tl, target);
    snprintf(o, sizeof(o), "%.*s", (int)ol, origin);
    ds_obj_t *obj = ds__store_lookup(srv->store, k, kl, ds__now_ms());
    if (obj == NULL || obj->version != version) {
        ds__req_error(r, DS_K_NOT_FOUND, "no copy of '%.64s' at that version here", k);
        return;
    }
    ds_job_t *j = ds__repl_push_job(srv, NULL, t, obj, o, ov, want, repair_push_done);
    if (j == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    j->ctx = srv;
    ds__job_submit(srv, j);
    ds__req_error(r, DS_K_OK, "%s", "");
}
