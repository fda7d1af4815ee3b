/* Copies of a write on more than one worker.
 *
 * Memory replicas (--replica_num N): a SET on worker A publishes locally,
 * pushes the value to N - 1 other members (REPL_PUT, the ring successors of
 * the key that are not A), and only then tells the owner every holder at
 * once (REPL_META); the client hears back after the owner recorded them. A
 * write is named by its origin and the origin's version (each holder's own
 * version differs: versions are per worker), which every holder keeps in
 * its copies table, so that after a ring change each holder can register
 * its copy with the key's new owner as a copy of the same write. When a
 * member leaves, each owner makes the copies its keys lost again elsewhere
 * (REPL_COPY asks a holder to push one), after a short delay that lets the
 * re-registrations arrive first.
 *
 * Hot copies (--enable_data_replication): a GET that pulled a value from
 * another worker keeps it as a local, evictable copy once the key's owner
 * recorded it (HOT_ADD); an overwrite or delete anywhere then drops it
 * (HOT_DROP) before it is answered, as with every other copy. The copy
 * stays invisible until the owner's answer, and a HOT_DROP that arrives
 * before that answer cancels it, so nothing stale is served after a write
 * or delete returned. A hot copy whose owner changes is dropped (it is a
 * cache: the new owner would not know to invalidate it).
 *
 * Loop thread only, like the rest of the cluster's state. */
#include "worker/cluster/cluster_int.h"

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

/* How long after a member left the owners wait for re-registrations before
 * they make lost copies again. */
#define DS_REPL_REPAIR_DELAY_MS 1500
/* Copies made again per round; the rest wait for the next round. */
#define DS_REPL_REPAIR_BATCH 512

typedef enum { COPY_WRITE = 1, COPY_HOT_PENDING, COPY_HOT } copy_kind_t;

/* What this worker knows about one of its copies. */
typedef struct copy {
    ds_dict_node_t node;
    uint8_t kind;
    bool cancelled;          /* HOT_PENDING: dropped before the owner answered */
    uint64_t version;        /* the local object's version (WRITE, HOT) */
    const char *origin;      /* WRITE: the write (interned) */
    uint64_t origin_version; /* WRITE */
    uint32_t want;           /* WRITE: copies it asked for */
    ds_obj_t *obj;           /* HOT_PENDING: the pulled object (a reference) */
    const char *src;         /* HOT, HOT_PENDING: the worker it was pulled from (interned) */
    uint32_t keylen;
    char key[];
} copy_t;

struct ds_repl {
    ds_server_t *srv;
    ds_dict_t copies;
    char **names; /* interned addresses */
    size_t nnames;
    uint64_t repair_due; /* 0 = none */
    uint32_t repairs_out;
    /* hot copies whose owner changed, dropped after the store walk */
    char **stale;
    uint32_t *stale_len;
    size_t nstale, cap_stale;
    /* re-registrations being batched, one job per new owner */
    ds_job_t *rereg[16];
    uint32_t rereg_count[16];
    size_t rereg_at[16]; /* where each batch's count goes */
    /* counters */
    uint64_t pushes, received, push_failures, repairs, hot_kept, hot_refused, hot_dropped;
    uint64_t nhot; /* COPY_HOT entries */
};

static bool copy_key_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const copy_t *c = DS_DICT_ENTRY(n, copy_t, node);
    return c->keylen == len && memcmp(c->key, key, len) == 0;
}

static void copy_destroy(ds_dict_node_t *n, void *ctx)
{
    ds_repl_t *rp = ctx;
    copy_t *c = DS_DICT_ENTRY(n, copy_t, node);
    if (c->kind == COPY_HOT) rp->nhot--;
    if (c->obj) ds__store_unref(rp->srv->store, c->obj);
    free(c);
}

static const ds_dict_type_t copy_type = {copy_key_eq, copy_destroy};

ds_repl_t *ds__repl_new(ds_server_t *srv)
{
    ds_repl_t *rp = calloc(1, sizeof(*rp));
    if (rp == NULL) return NULL;
    rp->srv = srv;
    if (ds__dict_init(&rp->copies, &copy_type, rp, 1024) != 0) {
        free(rp);
        return NULL;
    }
    return rp;
}

void ds__repl_free(ds_repl_t *rp)
{
    if (rp == NULL) return;
    ds__dict_clear(&rp->copies);
    for (size_t i = 0; i < rp->nnames; i++)
        free(rp->names[i]);
    free(rp->names);
    for (size_t i = 0; i < rp->nstale; i++)
        free(rp->stale[i]);
    free(rp->stale);
    free(rp->stale_len);
    for (size_t i = 0; i < sizeof(rp->rereg) / sizeof(rp->rereg[0]); i++)
        if (rp->rereg[i]) {
            ds__wbuf_free(&rp->rereg[i]->req);
            free(rp->rereg[i]);
        }
    free(rp);
}

static const char *intern(ds_repl_t *rp, const char *s, size_t len)
{
    for (size_t i = 0; i < rp->nnames; i++)
        if (strlen(rp->names[i]) == len && memcmp(rp->names[i], s, len) == 0) return rp->names[i];
    char **nn = realloc(rp->names, (rp->nnames + 1) * sizeof(*nn));
    if (nn == NULL) return NULL;
    rp->names = nn;
    rp->names[rp->nnames] = strndup(s, len);
    return rp->names[rp->nnames] ? rp->names[rp->nnames++] : NULL;
}

static copy_t *copy_find(ds_repl_t *rp, const char *key, size_t len)
{
    ds_dict_node_t *n = ds__dict_find(&rp->copies, key, len, ds__murmur3_32(key, len, 0));
    return n ? DS_DICT_ENTRY(n, copy_t, node) : NULL;
}

static void copy_remove(ds_repl_t *rp, copy_t *c)
{
    ds__dict_remove(&rp->copies, &c->node);
    copy_destroy(&c->node, rp);
}

/* A fresh entry for key (replacing what was there). */
static copy_t *copy_set(ds_repl_t *rp, const char *key, size_t len, copy_kind_t kind)
{
    copy_t *old = copy_find(rp, key, len);
    if (old) copy_remove(rp, old);
    copy_t *c = calloc(1, sizeof(*c) + len + 1);
    if (c == NULL) return NULL;
    c->kind = (uint8_t)kind;
    c->keylen = (uint32_t)len;
    memcpy(c->key, key, len);
    ds__dict_add(&rp->copies, &c->node, ds__murmur3_32(key, len, 0));
    return c;
}

uint32_t ds__repl_want(ds_server_t *srv)
{
    uint32_t want = (uint32_t)srv->cfg.replica_num;
    uint32_t members = (uint32_t)ds__ring_size(ds__cluster_ring(srv));
    if (want > members) want = members;
    return want ? want : 1;
}

/* Up to max members other than the holders named in skip (nskip), in the
 * order of the ring's points from the key's hash: where its copies go. */
static uint32_t pick_targets(ds_server_t *srv, const char *key, size_t len, const char **skip,
                             uint32_t nskip, const char **out, uint32_t max)
{
    const ds_ring_t *ring = ds__cluster_ring(srv);
    size_t np = ds__ring_npoints(ring);
    uint32_t h = ds__murmur3_32(key, len, 0), k = 0;
    size_t start = 0;
    const char *m;
    while (start < np && ds__ring_point(ring, start, &m) < h)
        start++;
    for (size_t s = 0; s < np && k < max; s++) {
        (void)ds__ring_point(ring, (start + s) % np, &m);
        bool taken = false;
        for (uint32_t i = 0; i < nskip && !taken; i++)
            taken = strcmp(skip[i], m) == 0;
        for (uint32_t i = 0; i < k && !taken; i++)
            taken = strcmp(out[i], m) == 0;
        if (!taken) out[k++] = m;
    }
    return k;
}

/* The REPL_PUT of obj (a published object; the job takes a reference). */
static ds_job_t *push_job(ds_server_t *srv, ds_pend_t *p, const char *target, ds_obj_t *o,
                          const char *origin, uint64_t origin_version, uint32_t want,
                          void (*done)(ds_job_t *))
{
    ds_job_t *j = ds__job_new(p, target, DS_OP_REPL_PUT, done);
    if (j == NULL) return NULL;
    ds__wbuf_str(&j->req, o->key, o->keylen);
    /* A replica is memory only: it is evictable when the write is. */
    ds__wbuf_u8(&j->req, o->write_mode == DS_WRITE_NONE_L2_CACHE_EVICT ||
                                 o->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT
                             ? DS_WRITE_NONE_L2_CACHE_EVICT
                             : DS_WRITE_NONE_L2_CACHE);
    ds__wbuf_u32(&j->req, o->ttl_second);
    ds__wbuf_cstr(&j->req, origin);
    ds__wbuf_u64(&j->req, origin_version);
    ds__wbuf_u32(&j->req, want);
    ds__store_ref(o);
    j->obj = o;
    j->src = ds__store_data(srv->store, o);
    j->src_len = o->size;
    j->timeout_ms = 30000 + o->size / 1000; /* at least 1 GB/s... or a minute per 30 GB */
    return j;
}

/* ---- SET with replicas ---- */

typedef struct {
    uint32_t nrep;
    const char *addr[DS_META_MAX_LOCS]; /* interned */
    uint64_t version[DS_META_MAX_LOCS];
} holders_t;

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

static void set_finish(ds_pend_t *p)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds_status_t overall = DS_K_OK;
    for (uint32_t i = 0; i < p->norig; i++)
        if (p->orig_status[i] != DS_K_OK) {
            overall = (ds_status_t)p->orig_status[i];
            break;
        }
    ds__wbuf_cstr(&w, overall == DS_K_OK ? "" : p->err);
    ds__wbuf_u32(&w, p->norig);
    for (uint32_t i = 0; i < p->norig; i++)
        ds__wbuf_u32(&w, p->orig_status[i]);
    ds__req_reply(p->req, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

/* One REPL_META entry: key, size, origin version, want, then its holders. */
static void meta_entry(ds_wbuf_t *w, const char *key, uint32_t kl, uint64_t size,
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
            meta_entry(&j->req, p->keys[b], p->keylens[b], p->sizes[b], p->objs[b]->version,
                       x->want, &x->h[b]);
        }
        for (int i = 0; i < 4; i++)
            j->req.buf[count_at + (size_t)i] = (uint8_t)(j->nidx >> (8 * i));
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
        const char *a = intern(rp, j->addr, strlen(j->addr));
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
    ds_pend_t *p = ds__pend_new(srv, r, set_finish);
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
        copy_t *c = copy_set(rp, objs[i]->key, objs[i]->keylen, COPY_WRITE);
        if (c) {
            c->version = objs[i]->version;
            c->origin = intern(rp, self, strlen(self));
            c->origin_version = objs[i]->version;
            c->want = want;
        }
        x->h[k].addr[0] = intern(rp, self, strlen(self));
        x->h[k].version[0] = objs[i]->version;
        x->h[k].nrep = x->h[k].addr[0] ? 1 : 0;
    }
    /* Count the pushes first: a push that fails at once completes later,
     * on the loop, like every job. */
    const char *targets[DS_META_MAX_LOCS];
    for (uint32_t k = 0; k < p->n; k++)
        x->pushes_left += pick_targets(srv, p->keys[k], p->keylens[k], &self, 1, targets, want - 1);
    if (x->pushes_left == 0) {
        send_metas(p);
    } else {
        for (uint32_t k = 0; k < p->n; k++) {
            uint32_t t = pick_targets(srv, p->keys[k], p->keylens[k], &self, 1, targets, want - 1);
            for (uint32_t i = 0; i < t; i++) {
                ds_job_t *j = push_job(srv, p, targets[i], p->objs[k], self, p->objs[k]->version,
                                       want, set_push_done);
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
        copy_t *c = copy_set(rp, rc->obj->key, rc->obj->keylen, COPY_WRITE);
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

static void op_repl_put(ds_server_t *srv, ds_req_t *r)
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
                   intern(ds__cluster_repl(srv), origin, ol),
                   ov,
                   want};
    ds__req_recv_data(r, &rc->sink, 1, repl_recv_done, rc);
}

/* ---- REPL_META: the owner records every holder of a write ---- */

static void schedule_repair(ds_repl_t *rp, uint64_t delay_ms)
{
    uint64_t due = ds__now_ms() + delay_ms;
    if (rp->repair_due == 0 || due < rp->repair_due) rp->repair_due = due;
}

static void meta_finish(ds_pend_t *p)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, p->n);
    for (uint32_t i = 0; i < p->n; i++)
        ds__wbuf_u32(&w, p->status[i]);
    ds__req_reply(p->req, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_repl_meta(ds_server_t *srv, ds_req_t *r)
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
    ds_pend_t *p = ds__pend_new(srv, r, meta_finish);
    if (p == NULL || (p->status = calloc(n ? n : 1, sizeof(*p->status))) == NULL) {
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    p->n = n;
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint64_t size = ds__rbuf_u64(&rb);
        uint64_t ov = ds__rbuf_u64(&rb);
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
        bool same = ds__meta_write(m, k, kl, &cur_origin, &cur_ov, &cur_want) &&
                    strcmp(cur_origin, org) == 0 && cur_ov == ov;
        const char *loc;
        uint64_t lsize, lver;
        if (rereg == 2 && !same) {
            /* A copy made again of a write no longer current. */
            p->status[i] = DS_K_NOT_FOUND;
            continue;
        }
        if (rereg && !same && ds__meta_find(m, k, kl, &loc, &lsize, &lver)) {
            /* As with META_PUT's re-registrations: a copy registered again
             * never supersedes another write recorded meanwhile. */
            p->status[i] = DS_K_DUPLICATED;
            continue;
        }
        uint32_t first = 0;
        if (!same) {
            ds_drop_ctx_t d = {p, srv, k, kl, addr[0]};
            ds__meta_put_write(m, k, kl, org, ov, want, addr[0], size, ver[0], ds__owner_queue_drop,
                               &d);
            first = 1;
        }
        for (uint32_t h = first; h < nh; h++)
            (void)ds__meta_add(m, k, kl, org, ov, addr[h], size, ver[h]);
        ds__subs_publish(&srv->locates, k, kl);
        const char *cp[DS_META_MAX_LOCS];
        uint64_t cv[DS_META_MAX_LOCS];
        if (ds__meta_copies(m, k, kl, cp, cv, DS_META_MAX_LOCS, &lsize) < want)
            schedule_repair(rp, rereg ? DS_REPL_REPAIR_DELAY_MS : 200);
    }
    if (rb.err) {
        p->n = 0;
        ds__pend_free(p);
        ds__req_error(r, DS_K_INVALID, "malformed REPL_META");
        return;
    }
    ds__pend_start(p);
}

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
    size_t at = rp->rereg_at[i];
    for (int b = 0; b < 4; b++)
        j->req.buf[at + (size_t)b] = (uint8_t)(rp->rereg_count[i] >> (8 * b));
    rp->rereg[i] = NULL;
    rp->rereg_count[i] = 0;
    ds__job_submit(srv, j);
}

/* Queues key to be dropped as a hot copy after a walk (rereg_flush). */
static void stale_add(ds_repl_t *rp, const char *key, uint32_t len)
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
    copy_t *c = copy_find(rp, o->key, o->keylen);
    if (c == NULL || c->version != o->version) return false;
    if (c->kind == COPY_HOT) {
        /* A cache the new owner would not know to invalidate: it goes
         * (after the store walk, which must not change the store). */
        stale_add(rp, o->key, o->keylen);
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
    meta_entry(&rp->rereg[b]->req, o->key, o->keylen, o->size, c->origin_version, c->want, &h);
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
        schedule_repair(rp, DS_REPL_REPAIR_DELAY_MS);
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
            meta_entry(&m->req, k, kl, o->size, ov, want, &h);
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
        schedule_repair(rp, DS_REPL_REPAIR_DELAY_MS);
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
    uint32_t nt = pick_targets(srv, k, kl, cp, have, targets, want - have);
    bool self_holds = strcmp(cp[src], self) == 0;
    for (uint32_t t = 0; t < nt; t++) {
        ds_job_t *j;
        if (self_holds) {
            ds_obj_t *o = ds__store_lookup(srv->store, k, kl, ds__now_ms());
            if (o == NULL || o->version != cv[src]) return;
            j = push_job(srv, NULL, targets[t], o, origin, ov, want, repair_push_done);
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
    if (l.n) schedule_repair(rp, l.n >= DS_REPL_REPAIR_BATCH ? 100 : 3 * DS_REPL_REPAIR_DELAY_MS);
    free(l.keys);
    free(l.lens);
}

void ds__repl_member_left(ds_server_t *srv, const char *addr)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    schedule_repair(rp, DS_REPL_REPAIR_DELAY_MS);
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
            stale_add(rp, c->key, c->keylen);
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
static void op_repl_copy(ds_server_t *srv, ds_req_t *r)
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
    ds_job_t *j = push_job(srv, NULL, t, obj, o, ov, want, repair_push_done);
    if (j == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    j->ctx = srv;
    ds__job_submit(srv, j);
    ds__req_error(r, DS_K_OK, "%s", "");
}

/* ---- hot copies ---- */

static void hot_publish(ds_server_t *srv, ds_repl_t *rp, copy_t *c)
{
    ds_obj_t *o = c->obj;
    c->obj = NULL;
    /* A write made here meanwhile is newer than the pulled value: keep it. */
    if (c->cancelled || ds__store_lookup(srv->store, c->key, c->keylen, ds__now_ms()) != NULL) {
        copy_remove(rp, c);
        ds__store_unref(srv->store, o);
        return;
    }
    if (ds__store_publish(srv->store, o, DS_EXISTENCE_NONE, ds__now_ms()) == DS_K_OK) {
        c->kind = COPY_HOT;
        c->version = o->version;
        rp->hot_kept++;
        rp->nhot++;
    } else {
        copy_remove(rp, c);
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
    copy_t *c = copy_find(rp, k, kl);
    if (c == NULL || c->kind != COPY_HOT_PENDING || c->obj != j->obj) {
        if (j->obj) ds__store_unref(srv->store, j->obj);
        j->obj = NULL;
        return;
    }
    ds__store_unref(srv->store, j->obj); /* the entry holds its own */
    j->obj = NULL;
    if (j->transport_failed || j->status != DS_K_OK) {
        rp->hot_refused++;
        copy_remove(rp, c);
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
    copy_t *cur = copy_find(rp, key, keylen);
    if (cur && cur->kind == COPY_HOT_PENDING) return;
    if (ds__store_lookup(srv->store, key, keylen, ds__now_ms()) != NULL) return;
    copy_t *c = copy_set(rp, key, keylen, COPY_HOT_PENDING);
    if (c == NULL) return;
    ds__store_ref(obj);
    c->obj = obj;
    c->src = intern(rp, src, strlen(src));
    const char *self = ds__cluster_self(srv);
    if (strcmp(owner, self) == 0) {
        if (ds__meta_add_hot(ds__cluster_meta(srv), key, keylen, src, src_version, self))
            hot_publish(srv, rp, c);
        else {
            rp->hot_refused++;
            copy_remove(rp, c);
        }
        return;
    }
    ds_job_t *j = ds__job_new(NULL, owner, DS_OP_HOT_ADD, hot_add_done);
    if (j == NULL) {
        copy_remove(rp, c);
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

static void op_hot_add(ds_server_t *srv, ds_req_t *r)
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
    copy_t *c = copy_find(rp, key, keylen);
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
    copy_remove(rp, c);
}

static void op_hot_drop(ds_server_t *srv, ds_req_t *r)
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

void ds__repl_peer_op(ds_server_t *srv, ds_req_t *r)
{
    switch (r->op) {
    case DS_OP_REPL_PUT:
        op_repl_put(srv, r);
        break;
    case DS_OP_REPL_META:
        op_repl_meta(srv, r);
        break;
    case DS_OP_REPL_COPY:
        op_repl_copy(srv, r);
        break;
    case DS_OP_HOT_ADD:
        op_hot_add(srv, r);
        break;
    default:
        op_hot_drop(srv, r);
    }
}

void ds__repl_forget(ds_server_t *srv, const char *key, uint32_t keylen)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    copy_t *c = copy_find(rp, key, keylen);
    if (c && c->kind == COPY_HOT_PENDING)
        c->cancelled = true; /* what it pulled is older than this */
    else if (c)
        copy_remove(rp, c);
}

bool ds__repl_is_hot(ds_server_t *srv, const ds_obj_t *o)
{
    copy_t *c = copy_find(ds__cluster_repl(srv), o->key, o->keylen);
    return c && c->kind == COPY_HOT && c->version == o->version;
}

void ds__repl_stats(ds_server_t *srv, struct cJSON *cl)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    cJSON *o = cJSON_AddObjectToObject(cl, "replication");
    cJSON_AddNumberToObject(o, "replica_num", (double)srv->cfg.replica_num);
    cJSON_AddNumberToObject(o, "enable_data_replication", srv->cfg.enable_data_replication);
    cJSON_AddNumberToObject(o, "pushes", (double)rp->pushes);
    cJSON_AddNumberToObject(o, "push_failures", (double)rp->push_failures);
    cJSON_AddNumberToObject(o, "received", (double)rp->received);
    cJSON_AddNumberToObject(o, "repairs", (double)rp->repairs);
    cJSON_AddNumberToObject(o, "hot_kept", (double)rp->hot_kept);
    cJSON_AddNumberToObject(o, "hot_refused", (double)rp->hot_refused);
    cJSON_AddNumberToObject(o, "hot_dropped", (double)rp->hot_dropped);
    cJSON_AddNumberToObject(o, "hot_copies", (double)rp->nhot);
    cJSON_AddNumberToObject(o, "copies_tracked", (double)ds__dict_count(&rp->copies));
}
