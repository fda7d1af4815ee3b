/* Copies: after a ring change each holder registers its replicas with the
 * keys' new owners as copies of the same write; hot copies whose owner
 * changed are dropped. The design is in cluster_repl.c. */
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

/* ---- re-registration after a ring change ---- */

static void rereg_done(ds_job_t *j)
{
    ds_server_t *srv = j->ctx;
    if (j->transport_failed || j->status != DS_K_OK) {
        DS_LOG_WARN("cluster: owner %s did not record re-registered replicated keys: %s", j->addr,
                    j->err);
        return;
    }
    uint32_t n = ds__rbuf_u32(&j->r);
    ds_rbuf_t q;
    ds__rbuf_init(&q, j->req.buf, j->req.len);
    const char *s;
    (void)ds__rbuf_str(&q, &s);
    (void)ds__rbuf_u8(&q);
    uint32_t nq = ds__rbuf_u32(&q);
    uint64_t now = ds__now_ms();
    for (uint32_t i = 0; i < n && i < nq && !j->r.err && !q.err; i++) {
        uint32_t st = ds__rbuf_u32(&j->r);
        const char *k;
        uint32_t kl = ds__rbuf_str(&q, &k);
        (void)ds__rbuf_u64(&q);
        (void)ds__rbuf_u64(&q);
        (void)ds__rbuf_u32(&q);
        uint32_t nh = ds__rbuf_u32(&q);
        uint64_t version = 0;
        for (uint32_t h = 0; h < nh && !q.err; h++) {
            (void)ds__rbuf_str(&q, &s);
            version = ds__rbuf_u64(&q);
        }
        if (st != DS_K_DUPLICATED || q.err) continue;
        ds_obj_t *o = ds__store_lookup(srv->store, k, kl, now);
        if (o && o->version == version) ds__store_delete(srv->store, k, kl);
    }
}

static void rereg_flush(ds_server_t *srv, ds_repl_t *rp, size_t i)
{
    ds_job_t *j = rp->rereg[i];
    if (j == NULL) return;
    ds__job_set_count(j, rp->rereg_at[i], rp->rereg_count[i]);
    rp->rereg[i] = NULL;
    rp->rereg_count[i] = 0;
    ds__job_submit(srv, j);
}

/* Queues key to be dropped as a hot copy after a walk (rereg_flush). */
void ds__repl_stale_add(ds_repl_t *rp, const char *key, uint32_t len)
{
    if (rp->nstale == rp->cap_stale) {
        size_t cap = rp->cap_stale ? 2 * rp->cap_stale : 64;
        char **ns = realloc(rp->stale, cap * sizeof(*ns));
        if (ns) rp->stale = ns;
        uint32_t *nl = realloc(rp->stale_len, cap * sizeof(*nl));
        if (nl) rp->stale_len = nl;
        if (ns == NULL || nl == NULL) return;
        rp->cap_stale = cap;
    }
    rp->stale[rp->nstale] = strndup(key, len);
    rp->stale_len[rp->nstale] = len;
    if (rp->stale[rp->nstale]) rp->nstale++;
}

bool ds__repl_rereg(ds_server_t *srv, ds_obj_t *o, const char *owner)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    copy_t *c = ds__repl_copy_find(rp, o->key, o->keylen);
    if (c == NULL || c->version != o->version) return false;
    if (c->kind == COPY_HOT) {
        /* A cache the new owner would not know to invalidate: it goes
         * (after the store walk, which must not change the store). */
        ds__repl_stale_add(rp, o->key, o->keylen);
        return true;
    }
    if (c->kind != COPY_WRITE || c->want <= 1) return false;
    size_t nb = sizeof(rp->rereg) / sizeof(rp->rereg[0]), b = nb;
    for (size_t i = 0; i < nb && b == nb; i++)
        if (rp->rereg[i] && strcmp(rp->rereg[i]->addr, owner) == 0) b = i;
    for (size_t i = 0; i < nb && b == nb; i++)
        if (rp->rereg[i] == NULL) b = i;
    if (b == nb) {
        b = 0;
        rereg_flush(srv, rp, 0);
    }
    if (rp->rereg[b] && rp->rereg_count[b] >= 10 * DS_MAX_BATCH) rereg_flush(srv, rp, b);
    if (rp->rereg[b] == NULL) {
        ds_job_t *j = ds__job_new(NULL, owner, DS_OP_REPL_META, rereg_done);
        if (j == NULL) return false;
        j->ctx = srv;
        ds__wbuf_cstr(&j->req, c->origin);
        ds__wbuf_u8(&j->req, 1);
        rp->rereg_at[b] = j->req.len;
        ds__wbuf_u32(&j->req, 0);
        rp->rereg[b] = j;
    }
    holders_t h = {1, {ds__cluster_self(srv)}, {o->version}};
    ds__repl_meta_entry(&rp->rereg[b]->req, o->key, o->keylen, o->size, c->origin_version, c->want,
                        &h);
    rp->rereg_count[b]++;
    return true;
}

void ds__repl_rereg_flush(ds_server_t *srv)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    for (size_t i = 0; i < sizeof(rp->rereg) / sizeof(rp->rereg[0]); i++)
        rereg_flush(srv, rp, i);
    for (size_t i = 0; i < rp->nstale; i++) {
        ds__repl_drop_hot(srv, rp->stale[i], rp->stale_len[i]);
        free(rp->stale[i]);
    }
    rp->nstale = 0;
}
