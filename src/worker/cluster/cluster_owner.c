/* The owner's side of the cluster protocol, and DROP: LOCATE answers where
 * keys live (waiting, like a subscribe-get, until every key is known or the
 * time is up), META_PUT records a new copy and drops the superseded ones
 * before answering (a re-registration only records a copy of a key with no
 * other known copy), META_DEL forgets copies (and for a delete drops them
 * everywhere), DROP deletes a local copy no newer than the owner says. */
#include "worker/cluster/cluster_int.h"

#include "common/clock.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads "n, n*key" (LOCATE) into arrays pointing into the metadata. */
static int read_key_list(ds_rbuf_t *r, const char ***keys, uint32_t **lens, uint32_t *n)
{
    *n = ds__rbuf_count(r, DS_MAX_EXIST_BATCH, 5);
    if (r->err || *n == 0) return -1;
    *keys = malloc(*n * sizeof(**keys));
    *lens = malloc(*n * sizeof(**lens));
    if (*keys == NULL || *lens == NULL) return -1;
    for (uint32_t i = 0; i < *n; i++)
        (*lens)[i] = ds__rbuf_str(r, &(*keys)[i]);
    return r->err ? -1 : 0;
}

static void locate_answer(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    (void)ds__rbuf_i32(&rb);
    uint32_t inline_left = ds__rbuf_u32(&rb);
    if (inline_left > DS_LOCATE_INLINE_MAX) inline_left = DS_LOCATE_INLINE_MAX;
    const char **keys = NULL;
    uint32_t *lens = NULL, n = 0;
    if (read_key_list(&rb, &keys, &lens, &n) != 0) {
        free(keys);
        free(lens);
        ds__req_error(r, DS_K_INVALID, "malformed LOCATE");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    for (uint32_t i = 0; i < n; i++) {
        const char *loc = "";
        uint64_t size = 0, version = 0;
        int found = ds__meta_find(ds__cluster_meta(srv), keys[i], lens[i], &loc, &size, &version);
        /* Any full copy may serve the read: this worker's own, when it holds
         * one, saves the reader a pull from a third worker. */
        const char *cp[DS_META_MAX_LOCS];
        uint64_t cv[DS_META_MAX_LOCS], csize;
        uint32_t nc = found ? ds__meta_copies(ds__cluster_meta(srv), keys[i], lens[i], cp, cv,
                                              DS_META_MAX_LOCS, &csize)
                            : 0;
        for (uint32_t c = 0; c < nc && c < DS_META_MAX_LOCS; c++)
            if (strcmp(cp[c], ds__cluster_self(srv)) == 0) {
                loc = cp[c];
                version = cv[c];
            }
        ds__wbuf_u8(&w, (uint8_t)found);
        ds__wbuf_u64(&w, size);
        ds__wbuf_u64(&w, version);
        ds__wbuf_cstr(&w, found ? loc : "");
        /* The value itself, when it is small and this worker holds the
         * version the table names. */
        ds_obj_t *o = found && size <= inline_left && strcmp(loc, ds__cluster_self(srv)) == 0
                          ? ds__store_lookup(srv->store, keys[i], lens[i], ds__now_ms())
                          : NULL;
        if (o && o->version == version && o->size == size) {
            ds__wbuf_str(&w, ds__store_data(srv->store, o), size);
            inline_left -= (uint32_t)size;
            srv->cctr.locate_inline_values++;
        } else {
            ds__wbuf_str(&w, "", 0);
        }
    }
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
    free(keys);
    free(lens);
}

/* A LOCATE waits for the owner to learn a key's location, which is when a
 * META_PUT records it - not when the key is published on this worker (its
 * own META_PUT is still on the way then). So LOCATEs wait on a table of
 * their own (srv->locates), which only META_PUT publishes to. */
static void wake_locates(ds_server_t *srv, const char *key, uint32_t len)
{
    ds__subs_publish(&srv->locates, key, len);
}

static void locate_wait_done(void *ctx, ds_req_t *d, bool timed_out, uint64_t deadline_ms)
{
    (void)timed_out;
    (void)deadline_ms;
    locate_answer(ctx, d);
}

static void op_locate(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    int32_t wait = ds__rbuf_i32(&rb);
    (void)ds__rbuf_u32(&rb); /* how many value bytes to send along: for the answer */
    const char **keys = NULL;
    uint32_t *lens = NULL, n = 0;
    if (read_key_list(&rb, &keys, &lens, &n) != 0 || wait < 0) {
        free(keys);
        free(lens);
        ds__req_error(r, DS_K_INVALID, "malformed LOCATE");
        return;
    }
    /* The keys whose location is unknown yet. */
    uint32_t nm = 0;
    for (uint32_t i = 0; wait > 0 && i < n; i++) {
        const char *loc;
        uint64_t size, version;
        if (ds__meta_find(ds__cluster_meta(srv), keys[i], lens[i], &loc, &size, &version)) continue;
        keys[nm] = keys[i];
        lens[nm++] = lens[i];
    }
    bool waiting = nm > 0 && ds__subs_wait(&srv->locates, r, keys, lens, nm,
                                           ds__now_ms() + (uint64_t)wait, locate_wait_done, srv);
    if (!waiting) locate_answer(srv, r);
    free(keys);
    free(lens);
}

/* ---- dropping superseded copies ---- */

static void drop_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: dropping a superseded copy on %s failed: %s", j->addr, j->err);
}

/* This worker's copy of key goes if it is no newer than version (a DROP, or
 * a drop the owner queues for itself), its L2 copy with it. */
static void drop_local(ds_server_t *srv, const char *key, uint32_t keylen, uint64_t version)
{
    ds__repl_cancel_pending_hot(srv, key, keylen);
    ds_obj_t *o = ds__store_lookup(srv->store, key, keylen, ds__now_ms());
    if (o == NULL || o->version > version) return;
    ds__store_delete(srv->store, key, keylen);
    if (srv->tier) ds__tier_del(srv, key, keylen, DS_TIER_UNWATCHED);
}

void ds__owner_queue_drop(void *ctx, const char *loc, uint64_t version)
{
    ds_drop_ctx_t *d = ctx;
    if (d->except && strcmp(loc, d->except) == 0) return;
    ds_server_t *srv = d->p ? d->p->srv : d->srv;
    bool hot = version == 0; /* a hot copy (cluster_repl.c) */
    if (strcmp(loc, ds__cluster_self(srv)) == 0) {
        if (hot)
            ds__repl_drop_hot(srv, d->key, d->keylen);
        else
            drop_local(srv, d->key, d->keylen, version);
        return;
    }
    ds_job_t *j = ds__job_new(d->p, loc, hot ? DS_OP_HOT_DROP : DS_OP_DROP, drop_done);
    if (j == NULL) return;
    ds__wbuf_u32(&j->req, 1);
    ds__wbuf_str(&j->req, d->key, d->keylen);
    if (!hot) ds__wbuf_u64(&j->req, version);
    ds__job_submit(srv, j);
}

static void forward_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: forwarding a metadata update to %s, the key's next owner, failed: %s",
                    j->addr, j->err);
}

/* An update that reaches this worker after it handed its metadata over
 * (a planned exit) from a worker whose ring still names it as the key's
 * owner goes on to the key's next owner before it is answered: otherwise
 * the next owner keeps the entry handed over, and when the holders
 * register their keys with it the write would be undone. */
static void forward_update(ds_pend_t *p, uint16_t op, const char *where, uint8_t everywhere,
                           const char *key, uint32_t kl, uint64_t size, uint64_t version)
{
    const char *to = ds__migrate_next_owner(p->srv, key, kl);
    if (to == NULL) return;
    ds_job_t *j = ds__job_new(p, to, op, forward_done);
    if (j == NULL) return;
    ds__wbuf_cstr(&j->req, where);
    if (op == DS_OP_META_PUT) {
        ds__wbuf_u8(&j->req, 0); /* a write: it supersedes what the next owner knows */
        ds__wbuf_u32(&j->req, 1);
        ds__wbuf_str(&j->req, key, kl);
        ds__wbuf_u64(&j->req, size);
    } else {
        ds__wbuf_u8(&j->req, everywhere);
        ds__wbuf_u32(&j->req, 1);
        ds__wbuf_str(&j->req, key, kl);
    }
    ds__wbuf_u64(&j->req, version);
    ds__job_submit(p->srv, j);
}

static void statuses_finish(ds_pend_t *p)
{
    ds__cluster_reply_statuses(p->req, p->status, p->n);
}

/* META_PUT and META_DEL share their shape: location, [everywhere], entries. */
static void meta_update(ds_server_t *srv, ds_req_t *r, bool put)
{
    uint16_t op = r->op;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *loc;
    uint32_t ll = ds__rbuf_str(&rb, &loc);
    /* META_PUT: only_if_unknown (a re-registration); META_DEL: everywhere */
    uint8_t everywhere = put ? 0 : ds__rbuf_u8(&rb);
    uint8_t only_if_unknown = put ? ds__rbuf_u8(&rb) : 0;
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 13);
    char where[300];
    if (rb.err || ll == 0 || ll >= sizeof(where)) {
        ds__req_error(r, DS_K_INVALID, "malformed %s", ds__opcode_name(op));
        return;
    }
    snprintf(where, sizeof(where), "%.*s", (int)ll, loc);
    ds_pend_t *p = ds__pend_new(srv, r, statuses_finish);
    if (p == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    p->n = n;
    p->status = calloc(n ? n : 1, sizeof(*p->status)); /* DS_K_OK is 0 */
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint64_t size = put ? ds__rbuf_u64(&rb) : 0;
        uint64_t version = ds__rbuf_u64(&rb);
        if (rb.err) break;
        ds_drop_ctx_t d = {p, srv, k, kl, where};
        const char *cur;
        uint64_t cur_size, cur_version;
        if (only_if_unknown &&
            ds__meta_find(ds__cluster_meta(srv), k, kl, &cur, &cur_size, &cur_version) &&
            strcmp(cur, where) != 0) {
            /* A copy registered again (after a ring change or a lost lease)
             * never supersedes one published elsewhere meanwhile: the
             * sender drops its older copy instead. */
            if (p->status) p->status[i] = DS_K_DUPLICATED;
            continue;
        }
        if (put) {
            ds__meta_put(ds__cluster_meta(srv), k, kl, where, size, version, ds__owner_queue_drop,
                         &d);
            wake_locates(srv, k, kl); /* the LOCATEs waiting for this key */
        } else if (everywhere) {
            ds__meta_del(ds__cluster_meta(srv), k, kl, NULL, 0, ds__owner_queue_drop, &d);
            /* A deleted parent's nested holds are kept here: they go. */
            ds__ops_grefs_deleted(srv, k, kl);
        } else {
            /* the hot copies of a write whose last full copy left go too */
            ds__meta_del(ds__cluster_meta(srv), k, kl, where, version, ds__owner_queue_drop, &d);
        }
        if (!only_if_unknown) forward_update(p, op, where, everywhere, k, kl, size, version);
    }
    ds__pend_start(p);
}

static void op_drop(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 13);
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint64_t maxv = ds__rbuf_u64(&rb);
        if (rb.err) break;
        drop_local(srv, k, kl, maxv);
        ds__wbuf_u32(&w, DS_K_OK);
    }
    if (rb.err)
        ds__req_error(r, DS_K_INVALID, "malformed DROP");
    else
        ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

void ds__cluster_peer_op(ds_server_t *srv, ds_req_t *r)
{
    switch (r->op) {
    case DS_OP_LOCATE:
        op_locate(srv, r);
        break;
    case DS_OP_META_PUT:
    case DS_OP_META_DEL:
        meta_update(srv, r, r->op == DS_OP_META_PUT);
        break;
    case DS_OP_UCX_PULL:
        ds__cluster_ucx_pull(srv, r);
        break;
    case DS_OP_PEER_AUTH:
        ds__cluster_peer_auth(srv, r);
        break;
    case DS_OP_OWNED:
    case DS_OP_LATCH_WAIT:
    case DS_OP_LATCH_HINT:
    case DS_OP_HOLDER_END:
    case DS_OP_REBUILD_DONE:
        ds__holds_peer_op(srv, r);
        break;
    case DS_OP_SEAL_OWNED:
    case DS_OP_NEST_OWNED:
    case DS_OP_NEST_HOLD:
    case DS_OP_OWNER_REBUILD:
        ds__seal_peer_op(srv, r);
        break;
    case DS_OP_SC_PEER_REG:
    case DS_OP_SC_PEER_QUERY:
    case DS_OP_SC_PEER_DELETE:
    case DS_OP_SC_PEER_DROP:
        ds__cluster_stream_peer_op(srv, r);
        break;
    case DS_OP_REPL_PUT:
    case DS_OP_REPL_META:
    case DS_OP_REPL_COPY:
    case DS_OP_HOT_ADD:
    case DS_OP_HOT_DROP:
        ds__repl_peer_op(srv, r);
        break;
    case DS_OP_MIGRATE:
    case DS_OP_META_MOVE:
        ds__migrate_peer_op(srv, r);
        break;
    case DS_OP_USAGE:
        ds__rebal_peer_op(srv, r);
        break;
    default:
        op_drop(srv, r);
    }
}
