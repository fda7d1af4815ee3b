/* Planned exit (a scale-in): SHUTDOWN of a worker in a cluster (dscli stop),
 * or SIGTERM (a service manager stopping it; no request to answer), first moves
 * every object it holds to the other members, then hands the metadata it
 * owns to their new owners, then leaves etcd, and only then answers and
 * stops.
 *
 * Moving (the leaving worker, "from"): its objects are listed and sent in
 * MIGRATE batches, each to the key's owner on the ring without this worker
 * (its ring successor), at most data_migrate_rate_limit_mb MiB/s and
 * DS_MIG_INFLIGHT batches at once. The receiver pulls each value from
 * `from` with an ordinary peer GET, publishes it (NX: a copy it holds
 * already wins) and asks the key's owner to move the location (META_MOVE).
 * The owner moves it only while its current copy is still from's version,
 * and drops from's copy before answering, so at every moment the owner
 * names a worker that holds the value: a reader that pulled from `from` in
 * between finds the key gone there and asks the owner again (the GET's
 * relocation, --enable_redirect). Objects written or refused meanwhile are
 * picked up by the next pass (at most DS_MIG_PASSES; later passes spread
 * what is left over every member).
 *
 * Metadata: the entries this worker owns go to their owners on the ring
 * without it (META_PUT, only where the new owner knows no other copy), and
 * the holders register their keys again once their rings drop this worker
 * (ds__cluster_ring_changed), which covers what changed in between.
 *
 * Then the worker revokes its etcd lease, keeps serving a grace period
 * while the others adopt the new member list, answers SHUTDOWN with what
 * moved, and stops. Objects pinned by local readers are copied like the
 * others: the readers keep this worker's copy until it exits. */
#include "worker/cluster/cluster_int.h"

#include "common/clock.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS_MIG_BATCH_KEYS 64
#define DS_MIG_BATCH_BYTES (4u << 20)
#define DS_MIG_INFLIGHT 4
#define DS_MIG_PASSES 4
#define DS_MIG_META_BATCH 10000
/* After the lease is revoked: time for the others to see the member list
 * without this worker, during which it still answers their requests. */
#define DS_LEAVE_GRACE_MS 1500
#define DS_LEAVE_WITHDRAW_MAX_MS 5000

/* ---- the receiver: MIGRATE ---- */

typedef struct {
    ds_server_t *srv;
    ds_req_t *req; /* parked */
    char from[300];
    uint32_t n;
    char **keys;
    uint32_t *kl;
    uint64_t *size, *fromv;
    ds_obj_t **objs; /* published here, waiting for the owner's answer */
    bool *had;       /* objs[i] was here before (a replica): never undone */
    uint32_t *status;
    int outstanding;
} recv_t;

static void recv_free(recv_t *rv)
{
    for (uint32_t i = 0; i < rv->n; i++) {
        if (rv->keys) free(rv->keys[i]);
        if (rv->objs && rv->objs[i]) ds__store_unref(rv->srv->store, rv->objs[i]);
    }
    free(rv->keys);
    free(rv->kl);
    free(rv->size);
    free(rv->fromv);
    free(rv->objs);
    free(rv->had);
    free(rv->status);
    free(rv);
}

static void recv_finish(recv_t *rv)
{
    if (rv->req) {
        if (ds__req_gone(rv->req))
            ds__req_drop(rv->req);
        else
            ds__cluster_reply_statuses(rv->req, rv->status, rv->n);
    }
    recv_free(rv);
}

/* Our copy of key i goes again: the owner kept another one. A copy that
 * was here before the move stays. */
static void recv_undo(recv_t *rv, uint32_t i, uint32_t status)
{
    rv->status[i] = status;
    ds_obj_t *o = rv->objs[i];
    if (o == NULL || rv->had[i]) return;
    if (ds__store_lookup(rv->srv->store, rv->keys[i], rv->kl[i], ds__now_ms()) == o)
        ds__store_delete(rv->srv->store, rv->keys[i], rv->kl[i]);
}

static void recv_move_done(ds_job_t *j)
{
    recv_t *rv = j->ctx;
    uint32_t n = j->transport_failed || j->status != DS_K_OK ? 0 : ds__rbuf_u32(&j->r);
    for (uint32_t e = 0; e < j->nidx; e++) {
        uint32_t st = e < n ? ds__rbuf_u32(&j->r) : DS_K_RPC_UNAVAILABLE;
        if (j->r.err) st = DS_K_RPC_UNAVAILABLE;
        if (st == DS_K_RPC_UNAVAILABLE)
            /* No answer: the owner may have moved the key here and dropped
             * the sender's copy, so this copy stays (a spare one at worst). */
            rv->status[j->idx[e]] = st;
        else if (st != DS_K_OK)
            recv_undo(rv, j->idx[e], st);
        else if (rv->had[j->idx[e]])
            /* The owner names this copy now: it is this worker's own, no
             * longer a replica of the leaving worker's write. */
            ds__repl_forget(rv->srv, rv->keys[j->idx[e]], rv->kl[j->idx[e]]);
    }
    if (--rv->outstanding == 0) recv_finish(rv);
}

/* Every pull is done: one META_MOVE per owner for the keys published here. */
static void recv_moves(recv_t *rv)
{
    ds_server_t *srv = rv->srv;
    bool *taken = calloc(rv->n ? rv->n : 1, sizeof(*taken));
    for (uint32_t a = 0; taken && a < rv->n; a++) {
        if (taken[a] || rv->objs[a] == NULL) continue;
        const char *owner = ds__cluster_owner(srv, rv->keys[a], rv->kl[a]);
        ds_job_t *j = owner ? ds__job_new(NULL, owner, DS_OP_META_MOVE, recv_move_done) : NULL;
        if (j == NULL || (j->idx = malloc(rv->n * sizeof(*j->idx))) == NULL) {
            if (j) ds__wbuf_free(&j->req), free(j);
            recv_undo(rv, a, DS_K_OUT_OF_MEMORY);
            continue;
        }
        j->ctx = rv;
        ds__wbuf_cstr(&j->req, rv->from);
        ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
        ds__wbuf_u32(&j->req, 0);
        size_t count_at = j->req.len - 4;
        for (uint32_t b = a; b < rv->n; b++) {
            if (taken[b] || rv->objs[b] == NULL) continue;
            const char *o2 = ds__cluster_owner(srv, rv->keys[b], rv->kl[b]);
            if (o2 == NULL || strcmp(o2, owner) != 0) continue;
            taken[b] = true;
            j->idx[j->nidx++] = b;
            ds__wbuf_str(&j->req, rv->keys[b], rv->kl[b]);
            ds__wbuf_u64(&j->req, rv->size[b]);
            ds__wbuf_u64(&j->req, rv->fromv[b]);
            ds__wbuf_u64(&j->req, rv->objs[b]->version);
        }
        ds__job_set_count(j, count_at, j->nidx);
        rv->outstanding++;
        ds__job_submit(srv, j);
    }
    free(taken);
    if (rv->outstanding == 0) recv_finish(rv);
}

static void recv_pull_done(ds_job_t *j)
{
    recv_t *rv = j->ctx;
    ds_server_t *srv = rv->srv;
    uint32_t i = j->index;
    ds_obj_t *o = j->obj;
    j->obj = NULL;
    /* A hot copy here is a cache of the leaving worker's write, not a copy
     * of its own: it goes with that worker, so the moved value replaces it. */
    ds_existence_t ex = DS_EXISTENCE_NX;
    ds_obj_t *cur = ds__store_lookup(srv->store, rv->keys[i], rv->kl[i], ds__now_ms());
    if (cur != NULL && ds__repl_is_hot(srv, cur)) {
        ds__repl_forget(srv, rv->keys[i], rv->kl[i]);
        ex = DS_EXISTENCE_NONE;
    }
    if (j->transport_failed || j->status != DS_K_OK) {
        rv->status[i] = j->transport_failed ? DS_K_RPC_UNAVAILABLE : j->status;
        ds__store_unref(srv->store, o);
    } else if (ds__store_publish(srv->store, o, ex, ds__now_ms()) != DS_K_OK) {
        rv->status[i] = DS_K_DUPLICATED; /* written here meanwhile: that copy wins */
        ds__store_unref(srv->store, o);
    } else {
        rv->objs[i] = o; /* our reference, until the answer */
        ds__subs_publish(&srv->subs, rv->keys[i], rv->kl[i]);
    }
    if (--rv->outstanding == 0) recv_moves(rv);
}

static void op_migrate(ds_server_t *srv, ds_req_t *r)
{
    if (*ds__cluster_leave_slot(srv)) {
        /* Leaving too: the sender's later passes try the other members. */
        ds__req_error(r, DS_K_SHUTTING_DOWN, "%s is leaving the cluster too",
                      ds__cluster_self(srv));
        return;
    }
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *from;
    uint32_t fl = ds__rbuf_str(&rb, &from);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 25); /* the smallest entry */
    recv_t *rv = calloc(1, sizeof(*rv));
    if (rb.err || fl == 0 || fl >= sizeof(rv->from)) {
        free(rv);
        ds__req_error(r, DS_K_INVALID, "malformed MIGRATE");
        return;
    }
    if (rv == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    rv->srv = srv;
    snprintf(rv->from, sizeof(rv->from), "%.*s", (int)fl, from);
    uint32_t cap = n ? n : 1;
    rv->keys = calloc(cap, sizeof(*rv->keys));
    rv->kl = calloc(cap, sizeof(*rv->kl));
    rv->size = calloc(cap, sizeof(*rv->size));
    rv->fromv = calloc(cap, sizeof(*rv->fromv));
    rv->objs = calloc(cap, sizeof(*rv->objs));
    rv->had = calloc(cap, sizeof(*rv->had));
    rv->status = calloc(cap, sizeof(*rv->status));
    if (!rv->keys || !rv->kl || !rv->size || !rv->fromv || !rv->objs || !rv->had || !rv->status) {
        recv_free(rv);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    rv->n = n;
    uint64_t now = ds__now_ms();
    /* Jobs are submitted after the whole request was read: a malformed
     * one is refused before anything was reserved. */
    uint8_t *mode = calloc(cap, 1);
    uint32_t *ttl = calloc(cap, sizeof(*ttl));
    for (uint32_t i = 0; i < n && !rb.err && mode && ttl; i++) {
        const char *k;
        rv->kl[i] = ds__rbuf_str(&rb, &k);
        rv->size[i] = ds__rbuf_u64(&rb);
        rv->fromv[i] = ds__rbuf_u64(&rb);
        mode[i] = ds__rbuf_u8(&rb);
        ttl[i] = ds__rbuf_u32(&rb);
        if (!rb.err) rv->keys[i] = strndup(k, rv->kl[i]);
        if (rv->keys[i] == NULL) rb.err = true;
    }
    if (rb.err || mode == NULL || ttl == NULL) {
        free(mode);
        free(ttl);
        recv_free(rv);
        ds__req_error(r, DS_K_INVALID, "malformed MIGRATE");
        return;
    }
    ds_req_t *d = ds__req_park(r, NULL, NULL);
    if (d == NULL) {
        free(mode);
        free(ttl);
        recv_free(rv);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    rv->req = d;
    rv->outstanding = 1; /* held while the pulls are submitted */
    for (uint32_t i = 0; i < n; i++) {
        char err[256];
        ds_obj_t *o = NULL;
        ds_obj_t *cur = ds__store_lookup(srv->store, rv->keys[i], rv->kl[i], now);
        if (cur != NULL && ds__repl_is_hot(srv, cur)) {
            /* a cache of the sender's write: it would go with the sender */
            ds__repl_drop_hot(srv, rv->keys[i], rv->kl[i]);
        } else if (cur != NULL) {
            /* A copy here already (a replica, or a newer write): the owner
             * is asked to name it instead of the sender's. */
            ds__store_ref(cur);
            rv->objs[i] = cur;
            rv->had[i] = true;
            continue;
        }
        /* The L2 copy, if any, was written by the sender: here the value
         * is a memory copy, evictable only if it was before. */
        if (mode[i] != DS_WRITE_NONE_L2_CACHE_EVICT) mode[i] = DS_WRITE_NONE_L2_CACHE;
        if (ds__store_reserve(srv->store, rv->keys[i], rv->kl[i], rv->size[i],
                              (ds_write_mode_t)mode[i], ttl[i], &o, err, sizeof(err)) != DS_K_OK) {
            rv->status[i] = DS_K_OUT_OF_MEMORY;
            continue;
        }
        ds_job_t *j = ds__job_new(NULL, rv->from, DS_OP_GET, recv_pull_done);
        if (j == NULL) {
            ds__store_unref(srv->store, o);
            rv->status[i] = DS_K_OUT_OF_MEMORY;
            continue;
        }
        j->ctx = rv;
        j->obj = o;
        j->dst = ds__store_data(srv->store, o);
        j->dst_len = rv->size[i];
        j->index = i;
        j->timeout_ms = 60000;
        ds__wbuf_i32(&j->req, 0);
        ds__wbuf_u8(&j->req, 0);
        ds__wbuf_u32(&j->req, 1);
        ds__wbuf_str(&j->req, rv->keys[i], rv->kl[i]);
        rv->outstanding++;
        ds__job_submit(srv, j);
    }
    free(mode);
    free(ttl);
    if (--rv->outstanding == 0) recv_moves(rv);
}

/* ---- the owner: META_MOVE ---- */

typedef struct {
    ds_pend_t *p;
    const char *key;
    uint32_t kl;
    const char *to;
} move_drop_t;

/* A location the move superseded: its copy goes (no newer than version). */
static void move_drop(void *ctx, const char *loc, uint64_t version)
{
    move_drop_t *d = ctx;
    ds_server_t *srv = d->p->srv;
    if (strcmp(loc, d->to) == 0) return;
    if (strcmp(loc, ds__cluster_self(srv)) == 0) {
        ds_obj_t *o = ds__store_lookup(srv->store, d->key, d->kl, ds__now_ms());
        if (o && o->version <= version) ds__store_delete(srv->store, d->key, d->kl);
        return;
    }
    ds_job_t *j = ds__job_new(d->p, loc, DS_OP_DROP, NULL);
    if (j == NULL) return;
    ds__wbuf_u32(&j->req, 1);
    ds__wbuf_str(&j->req, d->key, d->kl);
    ds__wbuf_u64(&j->req, version);
    ds__job_submit(srv, j);
}

static void move_finish(ds_pend_t *p)
{
    ds__cluster_reply_statuses(p->req, p->status, p->n);
}

static void op_meta_move(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *from, *to;
    uint32_t fl = ds__rbuf_str(&rb, &from);
    uint32_t tl = ds__rbuf_str(&rb, &to);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 28);
    char f[300], t[300];
    if (rb.err || fl == 0 || tl == 0 || fl >= sizeof(f) || tl >= sizeof(t)) {
        ds__req_error(r, DS_K_INVALID, "malformed META_MOVE");
        return;
    }
    snprintf(f, sizeof(f), "%.*s", (int)fl, from);
    snprintf(t, sizeof(t), "%.*s", (int)tl, to);
    ds_pend_t *p = ds__pend_new_statuses(srv, r, move_finish, n);
    if (p == NULL) return;
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        ds_key_rec_t kr; /* kr.version: the one the owner should hold now */
        ds__key_rec_read(&rb, &kr);
        uint64_t tov = ds__rbuf_u64(&rb);
        if (rb.err) break;
        const char *cur;
        uint64_t cur_size, cur_v;
        int known = ds__meta_find(ds__cluster_meta(srv), kr.key, kr.kl, &cur, &cur_size, &cur_v);
        /* Unknown: the owner lost it (it restarted, or took over from a
         * dead owner before the holder registered it): the move records it. */
        if (known && (strcmp(cur, f) != 0 || cur_v != kr.version)) {
            p->status[i] = DS_K_DUPLICATED;
            continue;
        }
        move_drop_t d = {p, kr.key, kr.kl, t};
        ds__meta_put(ds__cluster_meta(srv), kr.key, kr.kl, t, kr.size, tov, move_drop, &d);
        ds__subs_publish(&srv->locates, kr.key, kr.kl);
    }
    if (rb.err) p->err_status = DS_K_INVALID;
    ds__pend_start(p);
}

void ds__migrate_peer_op(ds_server_t *srv, ds_req_t *r)
{
    if (r->op == DS_OP_MIGRATE)
        op_migrate(srv, r);
    else
        op_meta_move(srv, r);
}

/* ---- the sender's MIGRATE batches ---- */

ds_job_t *ds__migrate_job(ds_server_t *srv, const char *to, uint32_t n, uint64_t bytes,
                          void (*done)(ds_job_t *))
{
    ds_job_t *j = ds__job_new(NULL, to, DS_OP_MIGRATE, done);
    if (j == NULL) return NULL;
    j->nidx = n;
    /* The receiver pulls the values: time for that at a slow 10 MiB/s. */
    j->timeout_ms = 30000 + bytes / (10u << 10);
    ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
    ds__wbuf_u32(&j->req, n);
    return j;
}

void ds__migrate_job_item(ds_job_t *j, const char *key, uint32_t kl, uint64_t size,
                          uint64_t version, uint8_t mode, uint32_t ttl_s)
{
    ds__wbuf_str(&j->req, key, kl);
    ds__wbuf_u64(&j->req, size);
    ds__wbuf_u64(&j->req, version);
    ds__wbuf_u8(&j->req, mode);
    ds__wbuf_u32(&j->req, ttl_s);
}

/* ---- the leaving worker ---- */

enum { LV_MOVING, LV_HANDOVER, LV_WITHDRAW, LV_GRACE };

typedef struct {
    char *key;
    uint32_t kl;
    uint64_t size, version;
    uint32_t ttl_s;
    uint8_t mode;
    int target; /* index into others; -1: a hot copy, dropped instead of moved */
} item_t;

typedef struct {
    ds_job_t *job;
    const char *loc; /* interned by the meta table */
    size_t count_at;
} hbatch_t;

struct ds_leave {
    ds_server_t *srv;
    ds_req_t *req; /* the SHUTDOWN, parked; NULL when it could not be */
    int phase;
    char **others;
    size_t nothers;
    ds_ring_t *ring; /* the members but this worker */
    item_t *items;
    size_t nitems, cap, next;
    int inflight, pass;
    uint64_t t0, rate_t0, rate_sent, rate_per_ms, due;
    uint64_t moved, moved_bytes, held, not_moved, handed, handover_jobs;
    uint64_t move_ms, phase_at;
    hbatch_t hb[64];
};

typedef struct ds_leave ds_leave_t;

static void items_free(ds_leave_t *lv)
{
    for (size_t i = 0; i < lv->nitems; i++)
        free(lv->items[i].key);
    lv->nitems = lv->next = 0;
}

static void leave_free(ds_leave_t *lv)
{
    if (lv == NULL) return;
    items_free(lv);
    free(lv->items);
    for (size_t i = 0; i < lv->nothers; i++)
        free(lv->others[i]);
    free(lv->others);
    ds__ring_free(lv->ring);
    free(lv);
}

static int others_index(const ds_leave_t *lv, const char *addr)
{
    for (size_t i = 0; i < lv->nothers; i++)
        if (strcmp(lv->others[i], addr) == 0) return (int)i;
    return 0;
}

static void collect(void *ctx, ds_obj_t *o)
{
    ds_leave_t *lv = ctx;
    uint64_t now = ds__now_ms();
    if (o->ttl_deadline_ms && o->ttl_deadline_ms <= now) return;
    if (lv->nitems == lv->cap) {
        size_t nc = lv->cap ? 2 * lv->cap : 256;
        item_t *ni = realloc(lv->items, nc * sizeof(*ni));
        if (ni == NULL) return;
        lv->items = ni;
        lv->cap = nc;
    }
    item_t *it = &lv->items[lv->nitems];
    it->key = strndup(o->key, o->keylen);
    if (it->key == NULL) return;
    it->kl = o->keylen;
    it->size = o->size;
    it->version = o->version;
    it->mode = o->write_mode;
    it->ttl_s = o->ttl_deadline_ms ? (uint32_t)((o->ttl_deadline_ms - now + 999) / 1000) : 0;
    if (ds__repl_is_hot(lv->srv, o)) {
        it->target = -1; /* a cache of a write held elsewhere */
        lv->nitems++;
        return;
    }
    const char *succ = ds__ring_owner(lv->ring, o->key, o->keylen);
    int t = succ ? others_index(lv, succ) : 0;
    /* Later passes spread what the successors did not take. */
    if (lv->pass >= 2) t = (int)(((size_t)t + (size_t)lv->pass - 1) % lv->nothers);
    it->target = t;
    lv->nitems++;
}

static int cmp_item(const void *a, const void *b)
{
    const item_t *x = a, *y = b;
    return x->target < y->target ? -1 : x->target > y->target;
}

static void leave_pump(ds_leave_t *lv);
static void leave_handover(ds_leave_t *lv);

static void leave_pass(ds_leave_t *lv)
{
    items_free(lv);
    if (lv->pass >= DS_MIG_PASSES) {
        leave_handover(lv);
        return;
    }
    ds__store_foreach(lv->srv->store, collect, lv);
    size_t kept = 0;
    for (size_t i = 0; i < lv->nitems; i++) {
        if (lv->items[i].target >= 0) {
            lv->items[kept++] = lv->items[i];
            continue;
        }
        ds__repl_drop_hot(lv->srv, lv->items[i].key, lv->items[i].kl);
        free(lv->items[i].key);
    }
    lv->nitems = kept;
    lv->pass++;
    if (lv->nitems == 0) {
        leave_handover(lv);
        return;
    }
    qsort(lv->items, lv->nitems, sizeof(*lv->items), cmp_item);
    leave_pump(lv);
}

static void batch_done(ds_job_t *j)
{
    ds_leave_t *lv = j->ctx;
    uint32_t n = j->transport_failed || j->status != DS_K_OK ? 0 : ds__rbuf_u32(&j->r);
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: moving %u objects to %s failed: %s", j->nidx, j->addr, j->err);
    for (uint32_t e = 0; e < n && e < j->nidx && !j->r.err; e++) {
        uint32_t st = ds__rbuf_u32(&j->r);
        const item_t *it = &lv->items[j->index + e];
        if (st == DS_K_OK) {
            lv->moved++;
            lv->moved_bytes += it->size;
        } else if (st == DS_K_DUPLICATED) {
            /* The receiver holds a copy (a replica, or a newer write), or
             * the owner knows a newer one: this copy is no longer needed. */
            ds_obj_t *o = ds__store_lookup(lv->srv->store, it->key, it->kl, ds__now_ms());
            if (o && o->version == it->version) ds__store_delete(lv->srv->store, it->key, it->kl);
            lv->held++;
        } else {
            DS_LOG_INFO("cluster: leaving: %s did not take '%.100s' (%" PRIu64 " bytes): %s",
                        j->addr, it->key, it->size, ds_status_name(st));
        }
    }
    lv->inflight--;
    leave_pump(lv);
}

static void leave_pump(ds_leave_t *lv)
{
    ds_server_t *srv = lv->srv;
    uint64_t now = ds__now_ms();
    lv->due = 0;
    while (lv->inflight < DS_MIG_INFLIGHT && lv->next < lv->nitems) {
        /* The rate limit: a batch goes once the bytes sent before it are
         * paid for at the rate, so the average stays within it and at most
         * one batch runs ahead. */
        if (lv->rate_sent > lv->rate_per_ms * (now - lv->rate_t0)) {
            lv->due = lv->rate_t0 + lv->rate_sent / lv->rate_per_ms + 1;
            return;
        }
        size_t a = lv->next, b = a;
        uint64_t bytes = 0;
        int t = lv->items[a].target;
        while (b < lv->nitems && lv->items[b].target == t && b - a < DS_MIG_BATCH_KEYS &&
               (b == a || bytes + lv->items[b].size <= DS_MIG_BATCH_BYTES))
            bytes += lv->items[b++].size;
        lv->next = b;
        ds_job_t *j = ds__migrate_job(srv, lv->others[t], (uint32_t)(b - a), bytes, batch_done);
        if (j == NULL) continue;
        j->ctx = lv;
        j->index = (uint32_t)a;
        for (size_t i = a; i < b; i++)
            ds__migrate_job_item(j, lv->items[i].key, lv->items[i].kl, lv->items[i].size,
                                 lv->items[i].version, lv->items[i].mode, lv->items[i].ttl_s);
        lv->rate_sent += bytes;
        lv->inflight++;
        ds__job_submit(srv, j);
    }
    if (lv->next == lv->nitems && lv->inflight == 0) leave_pass(lv);
}

/* ---- handing over the metadata this worker owns ---- */

static void handover_done(ds_job_t *j)
{
    ds_leave_t *lv = j->ctx;
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: handing %u metadata entries to %s failed: %s (the holders register "
                    "them again)",
                    j->nidx, j->addr, j->err);
    else
        lv->handed += j->nidx;
    if (--lv->handover_jobs == 0 && lv->phase == LV_HANDOVER) {
        lv->phase = LV_WITHDRAW;
        lv->phase_at = ds__now_ms();
        ds__cluster_withdraw(lv->srv);
    }
}

static void hb_flush(ds_leave_t *lv, hbatch_t *b)
{
    if (b->job == NULL) return;
    ds__job_set_count(b->job, b->count_at, b->job->nidx);
    lv->handover_jobs++;
    ds__job_submit(lv->srv, b->job);
    b->job = NULL;
}

static void handover_one(void *ctx, const char *key, uint32_t kl, const char *loc, uint64_t size,
                         uint64_t version)
{
    ds_leave_t *lv = ctx;
    /* A copy still here leaves with this worker: nobody to name. */
    if (strcmp(loc, ds__cluster_self(lv->srv)) == 0) return;
    const char *owner = ds__ring_owner(lv->ring, key, kl);
    if (owner == NULL) return;
    const size_t nb = sizeof(lv->hb) / sizeof(lv->hb[0]);
    hbatch_t *b = NULL;
    for (size_t i = 0; i < nb && b == NULL; i++)
        if (lv->hb[i].job == NULL ||
            (lv->hb[i].loc == loc && strcmp(lv->hb[i].job->addr, owner) == 0))
            b = &lv->hb[i];
    if (b == NULL) {
        b = &lv->hb[0];
        hb_flush(lv, b);
    }
    if (b->job && b->job->nidx >= DS_MIG_META_BATCH) hb_flush(lv, b);
    if (b->job == NULL) {
        b->job = ds__job_new(NULL, owner, DS_OP_META_PUT, handover_done);
        if (b->job == NULL) return;
        b->job->ctx = lv;
        b->loc = loc;
        ds__wbuf_cstr(&b->job->req, loc);
        ds__wbuf_u8(&b->job->req, 1); /* only where the new owner knows no other copy */
        b->count_at = b->job->req.len;
        ds__wbuf_u32(&b->job->req, 0);
    }
    ds__wbuf_str(&b->job->req, key, kl);
    ds__wbuf_u64(&b->job->req, size);
    ds__wbuf_u64(&b->job->req, version);
    b->job->nidx++;
}

static void leave_handover(ds_leave_t *lv)
{
    uint64_t now = ds__now_ms();
    lv->move_ms = now - lv->t0;
    ds_store_stats_t st;
    ds__store_stats(lv->srv->store, &st);
    lv->not_moved = st.objects;
    DS_LOG_INFO("cluster: leaving: moved %" PRIu64 " objects (%" PRIu64 " bytes) in %" PRIu64
                " ms, %" PRIu64 " not moved; handing over the metadata",
                lv->moved, lv->moved_bytes, lv->move_ms, lv->not_moved);
    lv->phase = LV_HANDOVER;
    lv->phase_at = now;
    lv->handover_jobs = 1; /* held while the batches are built */
    ds__meta_foreach(ds__cluster_meta(lv->srv), ds__cluster_self(lv->srv), handover_one, lv);
    for (size_t i = 0; i < sizeof(lv->hb) / sizeof(lv->hb[0]); i++)
        hb_flush(lv, &lv->hb[i]);
    ds_job_t held = {.ctx = lv, .transport_failed = 0, .status = DS_K_OK, .nidx = 0};
    handover_done(&held);
}

static void leave_finish(ds_leave_t *lv)
{
    ds_server_t *srv = lv->srv;
    char report[512];
    double secs = (double)lv->move_ms / 1000.0;
    snprintf(report, sizeof(report),
             "moved %" PRIu64 " objects (%" PRIu64 " bytes) to %zu workers in %.3f s (%.1f MiB/s, "
             "limit %" PRId64 " MiB/s); %" PRIu64 " already held elsewhere; %" PRIu64
             " not moved; %" PRIu64 " metadata entries handed over",
             lv->moved, lv->moved_bytes, lv->nothers, secs,
             secs > 0 ? (double)lv->moved_bytes / (1 << 20) / secs : 0.0,
             srv->cfg.data_migrate_rate_limit_mb, lv->held, lv->not_moved, lv->handed);
    DS_LOG_INFO("cluster: left the cluster: %s", report);
    if (lv->req) {
        if (ds__req_gone(lv->req)) {
            ds__req_drop(lv->req);
        } else {
            ds_wbuf_t w;
            ds__wbuf_init(&w);
            ds__wbuf_cstr(&w, "");
            ds__wbuf_cstr(&w, report);
            ds__req_reply(lv->req, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
            ds__wbuf_free(&w);
        }
        lv->req = NULL;
    }
    srv->stopping = true;
}

uint64_t ds__migrate_tick(ds_server_t *srv, uint64_t now)
{
    ds_leave_t *lv = *ds__cluster_leave_slot(srv);
    if (lv == NULL) return 0;
    switch (lv->phase) {
    case LV_MOVING:
        if (lv->due && now >= lv->due) leave_pump(lv);
        return lv->phase == LV_MOVING ? lv->due : now + 20;
    case LV_WITHDRAW:
        if (ds__cluster_withdrawn(srv) || now >= lv->phase_at + DS_LEAVE_WITHDRAW_MAX_MS) {
            lv->phase = LV_GRACE;
            lv->phase_at = now;
        }
        return now + 20;
    case LV_GRACE: {
        uint64_t grace = (uint64_t)srv->cfg.heartbeat_interval_ms * 2;
        if (grace < DS_LEAVE_GRACE_MS) grace = DS_LEAVE_GRACE_MS;
        if (now >= lv->phase_at + grace) {
            if (!srv->stopping) leave_finish(lv);
            return now; /* the loop must not sleep: it stops after this turn */
        }
        return lv->phase_at + grace;
    }
    default:
        return now + 20;
    }
}

const char *ds__migrate_next_owner(ds_server_t *srv, const char *key, size_t len)
{
    ds_leave_t *lv = *ds__cluster_leave_slot(srv);
    if (lv == NULL || lv->phase == LV_MOVING || lv->ring == NULL) return NULL;
    return ds__ring_owner(lv->ring, key, len);
}

void ds__migrate_leave(ds_server_t *srv, ds_req_t *r)
{
    ds_leave_t **slot = ds__cluster_leave_slot(srv);
    if (*slot) {
        if (r) ds__req_error(r, DS_K_SHUTTING_DOWN, "this worker is already leaving the cluster");
        return;
    }
    ds_leave_t *lv = calloc(1, sizeof(*lv));
    char members[8192];
    size_t nm = ds__cluster_members(srv, members, sizeof(members));
    if (lv) lv->others = calloc(nm ? nm : 1, sizeof(*lv->others));
    if (lv == NULL || lv->others == NULL) {
        if (lv) free(lv->others);
        free(lv);
        if (r) ds__req_error(r, DS_K_OK, "%s", "");
        srv->stopping = true;
        return;
    }
    lv->srv = srv;
    for (char *save = NULL, *a = strtok_r(members, ",", &save); a; a = strtok_r(NULL, ",", &save))
        if (strcmp(a, ds__cluster_self(srv)) != 0 && lv->nothers < nm)
            lv->others[lv->nothers++] = strdup(a);
    lv->ring = ds__ring_build((const char *const *)lv->others, lv->nothers);
    if (lv->nothers == 0 || lv->ring == NULL) {
        DS_LOG_INFO("cluster: leaving: no other member to move objects to");
        leave_free(lv);
        if (r) {
            ds_wbuf_t w;
            ds__wbuf_init(&w);
            ds__wbuf_cstr(&w, "");
            ds__wbuf_cstr(&w, "no other member: nothing moved");
            ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
            ds__wbuf_free(&w);
        }
        srv->stopping = true;
        return;
    }
    lv->req = r ? ds__req_park(r, NULL, NULL) : NULL;
    if (r && lv->req == NULL) ds__req_error(r, DS_K_OK, "%s", ""); /* answered now; still leaves */
    *slot = lv;
    lv->t0 = lv->rate_t0 = ds__now_ms();
    int64_t mb = srv->cfg.data_migrate_rate_limit_mb > 0 ? srv->cfg.data_migrate_rate_limit_mb : 40;
    lv->rate_per_ms = ((uint64_t)mb << 20) / 1000;
    if (lv->rate_per_ms == 0) lv->rate_per_ms = 1;
    DS_LOG_INFO("cluster: leaving: moving every object to the %zu other members at up to %" PRId64
                " MiB/s",
                lv->nothers, mb);
    lv->phase = LV_MOVING;
    leave_pass(lv);
}

void ds__migrate_destroy(ds_server_t *srv)
{
    ds_leave_t **slot = ds__cluster_leave_slot(srv);
    ds_leave_t *lv = *slot;
    if (lv == NULL) return;
    if (lv->req) ds__req_drop(lv->req);
    for (size_t i = 0; i < sizeof(lv->hb) / sizeof(lv->hb[0]); i++)
        if (lv->hb[i].job) {
            ds__wbuf_free(&lv->hb[i].job->req);
            free(lv->hb[i].job);
        }
    leave_free(lv);
    *slot = NULL;
}
