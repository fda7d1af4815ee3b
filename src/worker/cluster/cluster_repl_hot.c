/* Copies: hot copies (--enable_data_replication), kept after a remote GET
 * once the owner recorded them (HOT_ADD), dropped on overwrite or delete
 * (HOT_DROP). The design is in cluster_repl.c. */
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

/* ---- hot copies ---- */

static void hot_publish(ds_server_t *srv, ds_repl_t *rp, copy_t *c)
{
    ds_obj_t *o = c->obj;
    c->obj = NULL;
    /* A write made here meanwhile is newer than the pulled value: keep it. */
    if (c->cancelled || ds__store_lookup(srv->store, c->key, c->keylen, ds__now_ms()) != NULL) {
        ds__repl_copy_remove(rp, c);
        ds__store_unref(srv->store, o);
        return;
    }
    if (ds__store_publish(srv->store, o, DS_EXISTENCE_NONE, ds__now_ms()) == DS_K_OK) {
        c->kind = COPY_HOT;
        c->version = o->version;
        c->size = o->size;
        rp->hot_kept++;
        rp->nhot++;
        rp->hot_bytes += o->size;
    } else {
        ds__repl_copy_remove(rp, c);
    }
    ds__store_unref(srv->store, o);
}

static void hot_add_done(ds_job_t *j)
{
    ds_server_t *srv = j->ctx;
    ds_repl_t *rp = ds__cluster_repl(srv);
    ds_rbuf_t q;
    ds__rbuf_init(&q, j->req.buf, j->req.len);
    const char *k;
    uint32_t kl = ds__rbuf_str(&q, &k);
    copy_t *c = ds__repl_copy_find(rp, k, kl);
    if (c == NULL || c->kind != COPY_HOT_PENDING || c->obj != j->obj) {
        if (j->obj) ds__store_unref(srv->store, j->obj);
        j->obj = NULL;
        return;
    }
    ds__store_unref(srv->store, j->obj); /* the entry holds its own */
    j->obj = NULL;
    if (j->transport_failed || j->status != DS_K_OK) {
        rp->hot_refused++;
        ds__repl_copy_remove(rp, c);
        return;
    }
    hot_publish(srv, rp, c);
}

void ds__repl_keep_hot(ds_server_t *srv, const char *key, uint32_t keylen, ds_obj_t *obj,
                       const char *src, uint64_t src_version)
{
    if (!srv->cfg.enable_data_replication || src_version == 0) return;
    ds_repl_t *rp = ds__cluster_repl(srv);
    const char *owner = ds__cluster_owner(srv, key, keylen);
    if (owner == NULL) return;
    /* Gets that overlap keep the first copy: one already kept (or written
     * here) serves them, and one on its way is not replaced, so the entry
     * always names what the store holds. */
    copy_t *cur = ds__repl_copy_find(rp, key, keylen);
    if (cur && cur->kind == COPY_HOT_PENDING) return;
    if (ds__store_lookup(srv->store, key, keylen, ds__now_ms()) != NULL) return;
    copy_t *c = ds__repl_copy_set(rp, key, keylen, COPY_HOT_PENDING);
    if (c == NULL) return;
    ds__store_ref(obj);
    c->obj = obj;
    c->src = ds__repl_intern(rp, src, strlen(src));
    const char *self = ds__cluster_self(srv);
    if (strcmp(owner, self) == 0) {
        if (ds__meta_add_hot(ds__cluster_meta(srv), key, keylen, src, src_version, self))
            hot_publish(srv, rp, c);
        else {
            rp->hot_refused++;
            ds__repl_copy_remove(rp, c);
        }
        return;
    }
    ds_job_t *j = ds__job_new(NULL, owner, DS_OP_HOT_ADD, hot_add_done);
    if (j == NULL) {
        ds__repl_copy_remove(rp, c);
        return;
    }
    j->ctx = srv;
    ds__wbuf_str(&j->req, key, keylen);
    ds__wbuf_cstr(&j->req, src);
    ds__wbuf_u64(&j->req, src_version);
    ds__wbuf_cstr(&j->req, self);
    ds__store_ref(obj);
    j->obj = obj; /* names the attempt: a later GET's attempt replaces the entry */
    ds__job_submit(srv, j);
}

void ds__repl_op_hot_add(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *k, *src, *holder;
    uint32_t kl = ds__rbuf_str(&rb, &k);
    uint32_t sl = ds__rbuf_str(&rb, &src);
    uint64_t sv = ds__rbuf_u64(&rb);
    uint32_t hl = ds__rbuf_str(&rb, &holder);
    char s[300], h[300];
    if (rb.err || sl == 0 || sl >= sizeof(s) || hl == 0 || hl >= sizeof(h)) {
        ds__req_error(r, DS_K_INVALID, "malformed HOT_ADD");
        return;
    }
    snprintf(s, sizeof(s), "%.*s", (int)sl, src);
    snprintf(h, sizeof(h), "%.*s", (int)hl, holder);
    if (!ds__meta_add_hot(ds__cluster_meta(srv), k, kl, s, sv, h)) {
        ds__req_error(r, DS_K_NOT_FOUND, "'%.64s' was written again or deleted", k);
        return;
    }
    ds__req_error(r, DS_K_OK, "%s", "");
}

void ds__repl_drop_hot(ds_server_t *srv, const char *key, uint32_t keylen)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    copy_t *c = ds__repl_copy_find(rp, key, keylen);
    if (c == NULL) return;
    if (c->kind == COPY_HOT_PENDING) {
        c->cancelled = true;
        return;
    }
    if (c->kind != COPY_HOT) return;
    ds_obj_t *o = ds__store_lookup(srv->store, key, keylen, ds__now_ms());
    if (o && o->version == c->version) {
        ds__store_delete(srv->store, key, keylen);
        rp->hot_dropped++;
    }
    ds__repl_copy_remove(rp, c);
}

void ds__repl_cancel_pending_hot(ds_server_t *srv, const char *key, uint32_t keylen)
{
    copy_t *c = ds__repl_copy_find(ds__cluster_repl(srv), key, keylen);
    if (c && c->kind == COPY_HOT_PENDING) c->cancelled = true;
}

void ds__repl_op_hot_drop(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 5);
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        if (!rb.err) ds__repl_drop_hot(srv, k, kl);
    }
    if (rb.err)
        ds__req_error(r, DS_K_INVALID, "malformed HOT_DROP");
    else
        ds__req_error(r, DS_K_OK, "%s", "");
}
