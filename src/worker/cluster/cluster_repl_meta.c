/* Copies: a holder receives a replica (REPL_PUT); the key's owner records
 * every holder of a write (REPL_META). The design is in cluster_repl.c. */
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

/* ---- REPL_PUT: a holder receives a copy ---- */

typedef struct {
    ds_server_t *srv;
    ds_obj_t *obj;
    ds_sink_t sink;
    const char *origin;
    uint64_t origin_version;
    uint32_t want;
} recv_t;

static void repl_recv_done(void *ctx, ds_req_t *r)
{
    recv_t *rc = ctx;
    ds_server_t *srv = rc->srv;
    if (r == NULL) { /* the sender went away */
        ds__store_unref(srv->store, rc->obj);
        free(rc);
        return;
    }
    ds_repl_t *rp = ds__cluster_repl(srv);
    ds_status_t st = ds__store_publish(srv->store, rc->obj, DS_EXISTENCE_NONE, ds__now_ms());
    if (st != DS_K_OK) {
        ds__req_error(r, st, "cannot keep the replica of '%.64s'", rc->obj->key);
    } else {
        copy_t *c = ds__repl_copy_set(rp, rc->obj->key, rc->obj->keylen, COPY_WRITE);
        if (c) {
            c->version = rc->obj->version;
            c->origin = rc->origin;
            c->origin_version = rc->origin_version;
            c->want = rc->want;
        }
        rp->received++;
        uint8_t room[DS_REPLY_ROOM];
        ds_wbuf_t w;
        ds__wbuf_init_on(&w, room, sizeof(room));
        ds__wbuf_cstr(&w, "");
        ds__wbuf_u64(&w, rc->obj->version);
        ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
        ds__wbuf_free(&w);
    }
    ds__store_unref(srv->store, rc->obj);
    free(rc);
}

void ds__repl_op_put(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *k, *origin;
    uint32_t kl = ds__rbuf_str(&rb, &k);
    uint8_t mode = ds__rbuf_u8(&rb);
    uint32_t ttl = ds__rbuf_u32(&rb);
    uint32_t ol = ds__rbuf_str(&rb, &origin);
    uint64_t ov = ds__rbuf_u64(&rb);
    uint32_t want = ds__rbuf_u32(&rb);
    char why[160];
    if (rb.err || ol == 0 || r->data_len == 0 ||
        (mode != DS_WRITE_NONE_L2_CACHE && mode != DS_WRITE_NONE_L2_CACHE_EVICT) ||
        ds__key_check(k, kl, why, sizeof(why)) != 0) {
        ds__req_error(r, DS_K_INVALID, "malformed REPL_PUT");
        return;
    }
    recv_t *rc = calloc(1, sizeof(*rc));
    char err[256];
    ds_obj_t *o = NULL;
    if (rc == NULL || ds__store_reserve(srv->store, k, kl, r->data_len, (ds_write_mode_t)mode, ttl,
                                        &o, err, sizeof(err)) != DS_K_OK) {
        free(rc);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "no room for the replica of '%.64s'", k);
        return;
    }
    *rc = (recv_t){srv,
                   o,
                   {ds__store_data(srv->store, o), r->data_len},
                   ds__repl_intern(ds__cluster_repl(srv), origin, ol),
                   ov,
                   want};
    ds__req_recv_data(r, &rc->sink, 1, repl_recv_done, rc);
}

/* ---- REPL_META: the owner records every holder of a write ---- */

void ds__repl_schedule_repair(ds_repl_t *rp, uint64_t delay_ms)
{
    uint64_t due = ds__now_ms() + delay_ms;
    if (rp->repair_due == 0 || due < rp->repair_due) rp->repair_due = due;
}

static void meta_finish(ds_pend_t *p)
{
    ds__cluster_reply_statuses(p->req, p->status, p->n);
}

static void forward_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: forwarding a write's holders to %s, the key's next owner, failed: %s",
                    j->addr, j->err);
}

/* A write's holders recorded here after this worker handed its metadata
 * over (a planned exit) go on to the key's next owner before the write is
 * answered, as META_PUT's do (cluster_owner.c): otherwise the next owner
 * keeps the entry handed over and the holders' re-registration undoes the
 * write. */
static void forward_write(ds_pend_t *p, const char *org, const ds_key_rec_t *kr, uint32_t want,
                          uint32_t nh, char (*addr)[300], const uint64_t *ver)
{
    const char *to = ds__migrate_next_owner(p->srv, kr->key, kr->kl);
    if (to == NULL) return;
    ds_job_t *j = ds__job_new(p, to, DS_OP_REPL_META, forward_done);
    if (j == NULL) return;
    ds__wbuf_cstr(&j->req, org);
    ds__wbuf_u8(&j->req, 0); /* a write, not a re-registration */
    ds__wbuf_u32(&j->req, 1);
    ds__wbuf_str(&j->req, kr->key, kr->kl);
    ds__wbuf_u64(&j->req, kr->size);
    ds__wbuf_u64(&j->req, kr->version);
    ds__wbuf_u32(&j->req, want);
    ds__wbuf_u32(&j->req, nh);
    for (uint32_t h = 0; h < nh; h++) {
        ds__wbuf_cstr(&j->req, addr[h]);
        ds__wbuf_u64(&j->req, ver[h]);
    }
    ds__job_submit(p->srv, j);
}

void ds__repl_op_meta(ds_server_t *srv, ds_req_t *r)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    ds_meta_t *m = ds__cluster_meta(srv);
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *origin;
    uint32_t ol = ds__rbuf_str(&rb, &origin);
    uint8_t rereg = ds__rbuf_u8(&rb);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 30);
    char org[300];
    if (rb.err || ol == 0 || ol >= sizeof(org)) {
        ds__req_error(r, DS_K_INVALID, "malformed REPL_META");
        return;
    }
    snprintf(org, sizeof(org), "%.*s", (int)ol, origin);
    ds_pend_t *p = ds__pend_new_statuses(srv, r, meta_finish, n);
    if (p == NULL) return;
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        ds_key_rec_t kr; /* kr.version: the write's at its origin */
        ds__key_rec_read(&rb, &kr);
        uint32_t want = ds__rbuf_u32(&rb);
        uint32_t nh = ds__rbuf_count(&rb, DS_META_MAX_LOCS, 9);
        char addr[DS_META_MAX_LOCS][300];
        uint64_t ver[DS_META_MAX_LOCS];
        for (uint32_t h = 0; h < nh && !rb.err; h++) {
            const char *a;
            uint32_t al = ds__rbuf_str(&rb, &a);
            ver[h] = ds__rbuf_u64(&rb);
            snprintf(addr[h], sizeof(addr[h]), "%.*s", (int)(al < 299 ? al : 299), a);
        }
        if (rb.err || nh == 0) break;
        const char *cur_origin;
        uint64_t cur_ov;
        uint32_t cur_want;
        bool same = ds__meta_write(m, kr.key, kr.kl, &cur_origin, &cur_ov, &cur_want) &&
                    strcmp(cur_origin, org) == 0 && cur_ov == kr.version;
        const char *loc;
        uint64_t lsize, lver;
        if (rereg == 2 && !same) {
            /* A copy made again of a write no longer current. */
            p->status[i] = DS_K_NOT_FOUND;
            continue;
        }
        if (rereg && !same && ds__meta_find(m, kr.key, kr.kl, &loc, &lsize, &lver)) {
            /* As with META_PUT's re-registrations: a copy registered again
             * never supersedes another write recorded meanwhile. */
            p->status[i] = DS_K_DUPLICATED;
            continue;
        }
        uint32_t first = 0;
        if (!same) {
            ds_drop_ctx_t d = {p, srv, kr.key, kr.kl, addr[0]};
            ds__meta_put_write(m, kr.key, kr.kl, org, kr.version, want, addr[0], kr.size, ver[0],
                               ds__owner_queue_drop, &d);
            first = 1;
        }
        for (uint32_t h = first; h < nh; h++)
            (void)ds__meta_add(m, kr.key, kr.kl, org, kr.version, addr[h], kr.size, ver[h]);
        ds__subs_publish(&srv->locates, kr.key, kr.kl);
        if (!rereg) forward_write(p, org, &kr, want, nh, addr, ver);
        const char *cp[DS_META_MAX_LOCS];
        uint64_t cv[DS_META_MAX_LOCS];
        if (ds__meta_copies(m, kr.key, kr.kl, cp, cv, DS_META_MAX_LOCS, &lsize) < want)
            ds__repl_schedule_repair(rp, rereg ? DS_REPL_REPAIR_DELAY_MS : 200);
    }
    if (rb.err) {
        p->n = 0;
        ds__pend_free(p);
        ds__req_error(r, DS_K_INVALID, "malformed REPL_META");
        return;
    }
    ds__pend_start(p);
}
