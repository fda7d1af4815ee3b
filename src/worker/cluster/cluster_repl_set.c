/* Copies: a SET with --replica_num above 1 pushes the value to the key's
 * ring successors (REPL_PUT) and tells the owner every holder (REPL_META)
 * before it answers. The design is in cluster_repl.c. */
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

/* ---- SET with replicas ---- */

typedef struct {
    uint32_t want;
    uint32_t pushes_left;
    holders_t *h; /* per pend key */
} repl_set_t;

static void repl_set_free(ds_server_t *srv, void *ext)
{
    (void)srv;
    repl_set_t *x = ext;
    free(x->h);
    free(x);
}

/* One REPL_META entry: key, size, origin version, want, then its holders. */
void ds__repl_meta_entry(ds_wbuf_t *w, const char *key, uint32_t kl, uint64_t size,
                         uint64_t origin_version, uint32_t want, const holders_t *h)
{
    ds__wbuf_str(w, key, kl);
    ds__wbuf_u64(w, size);
    ds__wbuf_u64(w, origin_version);
    ds__wbuf_u32(w, want);
    ds__wbuf_u32(w, h->nrep);
    for (uint32_t i = 0; i < h->nrep; i++) {
        ds__wbuf_cstr(w, h->addr[i]);
        ds__wbuf_u64(w, h->version[i]);
    }
}

static void repl_meta_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK) {
        DS_LOG_WARN("cluster: owner %s did not record %u replicated keys: %s (they are "
                    "registered again when the ring changes)",
                    j->addr, j->nidx, j->err);
        ds_pend_t *p = j->pend;
        for (uint32_t i = 0; p && i < j->nidx; i++) {
            uint32_t o = p->orig_idx[j->idx[i]];
            p->orig_status[o] = j->transport_failed ? DS_K_RPC_UNAVAILABLE : j->status;
            snprintf(p->err, sizeof(p->err), "owner %.64s: %.180s", j->addr, j->err);
        }
    }
}

/* Every push is back: tell each owner its keys' holders. */
static void send_metas(ds_pend_t *p)
{
    ds_server_t *srv = p->srv;
    repl_set_t *x = p->ext;
    bool *taken = calloc(p->n ? p->n : 1, sizeof(*taken));
    for (uint32_t a = 0; taken && a < p->n; a++) {
        if (taken[a] || p->objs[a] == NULL) continue;
        const char *owner = ds__cluster_owner(srv, p->keys[a], p->keylens[a]);
        if (owner == NULL) continue;
        ds_job_t *j = ds__job_new(p, owner, DS_OP_REPL_META, repl_meta_done);
        if (j == NULL) continue;
        j->idx = malloc(p->n * sizeof(*j->idx));
        ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
        ds__wbuf_u8(&j->req, 0); /* a new write: it supersedes every other copy */
        size_t count_at = j->req.len;
        ds__wbuf_u32(&j->req, 0);
        for (uint32_t b = a; j->idx && b < p->n; b++) {
            const char *o2 = ds__cluster_owner(srv, p->keys[b], p->keylens[b]);
            if (taken[b] || p->objs[b] == NULL || o2 == NULL || strcmp(o2, owner) != 0) continue;
            taken[b] = true;
            j->idx[j->nidx++] = b;
            ds__repl_meta_entry(&j->req, p->keys[b], p->keylens[b], p->sizes[b],
                                p->objs[b]->version, x->want, &x->h[b]);
        }
        ds__job_set_count(j, count_at, j->nidx);
        ds__job_submit(srv, j);
    }
    free(taken);
}

static void set_push_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    ds_server_t *srv = p->srv;
    repl_set_t *x = p->ext;
    ds_repl_t *rp = ds__cluster_repl(srv);
    uint64_t ver = ds__rbuf_u64(&j->r);
    if (!j->transport_failed && j->status == DS_K_OK && !j->r.err) {
        holders_t *h = &x->h[j->index];
        const char *a = ds__repl_intern(rp, j->addr, strlen(j->addr));
        if (a && h->nrep < DS_META_MAX_LOCS) {
            h->addr[h->nrep] = a;
            h->version[h->nrep++] = ver;
        }
        rp->pushes++;
    } else {
        /* The write stands with fewer copies; the owner makes the missing
         * ones when it sees fewer holders than the write asked for. */
        rp->push_failures++;
        DS_LOG_WARN("cluster: replica of '%.64s' to %s failed: %s", p->keys[j->index], j->addr,
                    j->err[0] ? j->err : ds_status_name(j->status));
    }
    ds__store_unref(srv->store, j->obj);
    j->obj = NULL;
    if (--x->pushes_left == 0) send_metas(p);
}

void ds__repl_published(ds_server_t *srv, ds_req_t *r, ds_obj_t **objs, const uint32_t *status,
                        uint32_t n, bool nx, const char *first_err, uint32_t want)
{
    (void)nx;
    ds_repl_t *rp = ds__cluster_repl(srv);
    ds_pend_t *p = ds__pend_new(srv, r, ds__cluster_published_finish);
    repl_set_t *x = calloc(1, sizeof(*x));
    uint32_t np = 0;
    for (uint32_t i = 0; i < n; i++)
        np += objs[i] != NULL;
    bool ok = p && x;
    if (ok) {
        p->ext = x;
        p->ext_free = repl_set_free;
        x->want = want;
        x->h = calloc(np ? np : 1, sizeof(*x->h));
        p->orig_status = calloc(n ? n : 1, sizeof(*p->orig_status));
        p->orig_idx = calloc(np ? np : 1, sizeof(*p->orig_idx));
        p->keys = calloc(np ? np : 1, sizeof(*p->keys));
        p->keylens = calloc(np ? np : 1, sizeof(*p->keylens));
        p->objs = calloc(np ? np : 1, sizeof(*p->objs));
        p->sizes = calloc(np ? np : 1, sizeof(*p->sizes));
        ok = x->h && p->orig_status && p->orig_idx && p->keys && p->keylens && p->objs && p->sizes;
    }
    if (!ok) {
        if (p)
            ds__pend_free(p);
        else
            free(x);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    memcpy(p->orig_status, status, n * sizeof(*status));
    p->norig = n;
    snprintf(p->err, sizeof(p->err), "%s", first_err ? first_err : "");
    const char *self = ds__cluster_self(srv);
    for (uint32_t i = 0; i < n; i++) {
        if (objs[i] == NULL) continue;
        uint32_t k = p->n;
        p->keys[k] = strndup(objs[i]->key, objs[i]->keylen);
        if (p->keys[k] == NULL) continue;
        p->keylens[k] = objs[i]->keylen;
        ds__store_ref(objs[i]);
        p->objs[k] = objs[i];
        p->sizes[k] = objs[i]->size;
        p->orig_idx[k] = i;
        p->n++;
        /* This worker's own copy is the write's first holder. */
        copy_t *c = ds__repl_copy_set(rp, objs[i]->key, objs[i]->keylen, COPY_WRITE);
        if (c) {
            c->version = objs[i]->version;
            c->origin = ds__repl_intern(rp, self, strlen(self));
            c->origin_version = objs[i]->version;
            c->want = want;
        }
        x->h[k].addr[0] = ds__repl_intern(rp, self, strlen(self));
        x->h[k].version[0] = objs[i]->version;
        x->h[k].nrep = x->h[k].addr[0] ? 1 : 0;
    }
    /* Count the pushes first: a push that fails at once completes later,
     * on the loop, like every job. */
    const char *targets[DS_META_MAX_LOCS];
    for (uint32_t k = 0; k < p->n; k++)
        x->pushes_left +=
            ds__repl_pick_targets(srv, p->keys[k], p->keylens[k], &self, 1, targets, want - 1);
    if (x->pushes_left == 0) {
        send_metas(p);
    } else {
        for (uint32_t k = 0; k < p->n; k++) {
            uint32_t t =
                ds__repl_pick_targets(srv, p->keys[k], p->keylens[k], &self, 1, targets, want - 1);
            for (uint32_t i = 0; i < t; i++) {
                ds_job_t *j = ds__repl_push_job(srv, p, targets[i], p->objs[k], self,
                                                p->objs[k]->version, want, set_push_done);
                if (j == NULL) {
                    x->pushes_left--;
                    continue;
                }
                j->index = k;
                ds__job_submit(srv, j);
            }
        }
        if (x->pushes_left == 0 && p->outstanding == 0) send_metas(p);
    }
    ds__pend_start(p);
}
