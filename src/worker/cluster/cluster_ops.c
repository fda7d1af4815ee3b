/* Operations that consult peers (see cluster.h). Each client request that
 * needs another worker becomes a ds_pend_t; its jobs run on the job threads
 * and their done-handlers (here, on the loop) may queue further jobs - a GET
 * first LOCATEs its keys at their owners (or, for keys this worker owns, looks
 * in its own table), then pulls each from where it lives into an arena range
 * reserved for it. The pend answers when its last
 * job is done. The owner side (LOCATE, META_PUT, META_DEL) and DROP are
 * ordinary request handlers. */
#include "worker/cluster/cluster_int.h"
#include "worker/ops/stream.h"

#include "common/clock.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS_META_BATCH 10000

/* Copies the request's keys into the pend. */
static bool pend_keys(ds_pend_t *p, const char *const *keys, const uint32_t *lens, uint32_t n)
{
    p->keys = calloc(n, sizeof(*p->keys));
    p->keylens = calloc(n, sizeof(*p->keylens));
    p->objs = calloc(n, sizeof(*p->objs));
    p->status = calloc(n, sizeof(*p->status));
    p->sizes = calloc(n, sizeof(*p->sizes));
    if (!p->keys || !p->keylens || !p->objs || !p->status || !p->sizes) return false;
    p->n = n;
    for (uint32_t i = 0; i < n; i++) {
        p->keys[i] = strndup(keys[i], lens[i]);
        if (p->keys[i] == NULL) return false;
        p->keylens[i] = lens[i];
    }
    return true;
}

/* Groups keys (indices into the pend) by their owner and submits one job
 * per owner, built by `build` for that owner's keys. */
static void per_owner(ds_pend_t *p, const uint32_t *which, uint32_t nw, uint16_t op,
                      void (*build)(ds_pend_t *p, ds_job_t *j), void (*done)(ds_job_t *))
{
    ds_server_t *srv = p->srv;
    bool *taken = calloc(nw ? nw : 1, sizeof(*taken));
    for (uint32_t a = 0; taken && a < nw; a++) {
        if (taken[a]) continue;
        const char *owner = ds__cluster_owner(srv, p->keys[which[a]], p->keylens[which[a]]);
        if (owner == NULL) continue;
        ds_job_t *j = ds__job_new(p, owner, op, done);
        if (j == NULL) continue;
        j->idx = malloc(nw * sizeof(*j->idx));
        for (uint32_t b = a; j->idx && b < nw; b++) {
            if (taken[b]) continue;
            const char *o2 = ds__cluster_owner(srv, p->keys[which[b]], p->keylens[which[b]]);
            if (o2 && strcmp(o2, owner) == 0) {
                taken[b] = true;
                j->idx[j->nidx++] = which[b];
            }
        }
        build(p, j);
        ds__job_submit(srv, j);
    }
    free(taken);
}

static uint32_t *missing_indices(ds_pend_t *p, uint32_t *nm)
{
    uint32_t *m = malloc((p->n ? p->n : 1) * sizeof(*m));
    *nm = 0;
    for (uint32_t i = 0; m && i < p->n; i++)
        if (p->objs[i] == NULL) m[(*nm)++] = i;
    return m;
}

static void build_locate(ds_pend_t *p, ds_job_t *j)
{
    ds__wbuf_i32(&j->req, (int32_t)p->ttl); /* the GET's wait, or 0 */
    ds__wbuf_u32(&j->req, p->op == DS_OP_GET ? DS_LOCATE_INLINE_MAX : 0);
    ds__wbuf_u32(&j->req, j->nidx);
    for (uint32_t i = 0; i < j->nidx; i++)
        ds__wbuf_str(&j->req, p->keys[j->idx[i]], p->keylens[j->idx[i]]);
    j->timeout_ms = p->ttl + 10000u;
    j->waits = p->ttl > 0;
}

/* ---- GET ---- */

static void locate_done(ds_job_t *j);
static void locate_keys(ds_pend_t *p, uint32_t *which, uint32_t n);

static void pull_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    if (j->status == DS_K_OK && !j->transport_failed) {
        if (j->op == DS_OP_UCX_PULL && j->ucx_tag) p->srv->cctr.ucx_pulls++;
        if (j->op == DS_OP_UCX_PULL && !j->ucx_tag) p->srv->cctr.ucx_pull_fallbacks++;
        p->objs[j->index] = j->obj; /* the pend keeps the reference */
        ds__repl_keep_hot(p->srv, p->keys[j->index], p->keylens[j->index], j->obj, j->addr,
                          j->version);
        j->obj = NULL;
        return;
    }
    ds__store_unref(p->srv->store, j->obj);
    j->obj = NULL;
    DS_LOG_DEBUG("cluster: pull of '%.64s' from %s failed: status %u%s: %s", p->keys[j->index],
                 j->addr, j->status, j->transport_failed ? " (transport)" : "", j->err);
    if (j->transport_failed) {
        p->err_status = DS_K_RPC_UNAVAILABLE;
        snprintf(p->err, sizeof(p->err), "key '%.64s': %.180s", p->keys[j->index], j->err);
    } else if (j->status == DS_K_NOT_FOUND && p->relocates < 2 * p->n + 2) {
        /* Overwritten elsewhere (or deleted) between LOCATE and the pull:
         * ask the owner again rather than report a key that exists as
         * missing. Without waiting: the key was published. */
        uint32_t i = j->index, wait = p->ttl;
        p->relocates++;
        p->ttl = 0;
        locate_keys(p, &i, 1);
        p->ttl = wait;
    } else if (j->status != DS_K_NOT_FOUND) {
        /* The owner has the key but could not send it (a UCX send it gave
         * up, no memory): say so, rather than report the key as missing. */
        p->err_status = (ds_status_t)j->status;
        snprintf(p->err, sizeof(p->err), "key '%.64s' from worker %.48s: %.100s", p->keys[j->index],
                 j->addr, j->err[0] ? j->err : ds_status_name(j->status));
    }
}

/* Key i of the GET lives at `where` (size bytes): take it from the local
 * store, or reserve room for it and copy in the bytes the owner sent along
 * (val, when it holds the key itself) or pull them. */
static void located(ds_pend_t *p, uint32_t i, uint64_t size, uint64_t version, const char *where,
                    const uint8_t *val)
{
    ds_server_t *srv = p->srv;
    if (strcmp(where, ds__cluster_self(srv)) == 0) {
        ds_obj_t *o = ds__store_lookup(srv->store, p->keys[i], p->keylens[i], ds__now_ms());
        if (o) {
            ds__store_ref(o);
            p->objs[i] = o;
        }
        return;
    }
    ds_obj_t *o = NULL;
    char err[256];
    if (ds__store_reserve(srv->store, p->keys[i], p->keylens[i], size, DS_WRITE_NONE_L2_CACHE_EVICT,
                          0, &o, err, sizeof(err)) != DS_K_OK) {
        p->err_status = DS_K_OUT_OF_MEMORY;
        snprintf(p->err, sizeof(p->err), "no room to receive key '%.64s': %.150s", p->keys[i], err);
        return;
    }
    if (val) {
        memcpy(ds__store_data(srv->store, o), val, size);
        p->objs[i] = o; /* the pend keeps the reference */
        if (p->op == DS_OP_GET)
            ds__repl_keep_hot(srv, p->keys[i], p->keylens[i], o, where, version);
        return;
    }
    ds_job_t *pull = ds__job_new(p, where, DS_OP_GET, pull_done);
    if (pull == NULL) {
        ds__store_unref(srv->store, o);
        return;
    }
    pull->obj = o;
    pull->dst = ds__store_data(srv->store, o);
    pull->dst_len = size;
    pull->index = i;
    pull->version = p->op == DS_OP_GET ? version : 0; /* 0: keep no hot copy */
    if (!ds__cluster_ucx_job(srv, pull, p->keys[i], p->keylens[i])) {
        ds__wbuf_i32(&pull->req, 0);
        ds__wbuf_u8(&pull->req, 0);
        ds__wbuf_u32(&pull->req, 1);
        ds__wbuf_str(&pull->req, p->keys[i], p->keylens[i]);
    }
    ds__job_submit(srv, pull);
}

/* Keys their new owner does not know yet, shortly after a ring change
 * (a worker joined or left): asked once of their previous owner, which may
 * still know them (--enable_redirect); the others stay missing. */
static void redirect_keys(ds_pend_t *p, const uint32_t *which, uint32_t n)
{
    ds_server_t *srv = p->srv;
    uint32_t wait = p->ttl;
    p->ttl = 0;
    for (uint32_t a = 0; a < n; a++) {
        uint32_t i = which[a];
        const char *prev = ds__cluster_prev_owner(srv, p->keys[i], p->keylens[i]);
        if (prev == NULL || p->objs[i]) continue;
        const char *loc;
        uint64_t size, version;
        if (strcmp(prev, ds__cluster_self(srv)) == 0) {
            if (ds__meta_find(ds__cluster_meta(srv), p->keys[i], p->keylens[i], &loc, &size,
                              &version)) {
                char where[300];
                snprintf(where, sizeof(where), "%s", loc);
                located(p, i, size, version, where, NULL);
            }
            continue;
        }
        ds_job_t *j = ds__job_new(p, prev, DS_OP_LOCATE, locate_done);
        if (j == NULL || (j->idx = malloc(sizeof(*j->idx))) == NULL) {
            if (j) ds__wbuf_free(&j->req), free(j);
            continue;
        }
        j->idx[j->nidx++] = i;
        build_locate(p, j);
        ds__job_submit(srv, j);
    }
    p->ttl = wait;
}

/* Finds where the keys `which` of the GET live: keys this worker owns are
 * looked up in its own table (no round trip; only a wait for a key it does
 * not know yet goes through a LOCATE to itself), the others are LOCATEd at
 * their owners. which[] is reused. */
static void locate_keys(ds_pend_t *p, uint32_t *which, uint32_t n)
{
    ds_server_t *srv = p->srv;
    uint32_t k = 0;
    for (uint32_t a = 0; a < n; a++) {
        uint32_t i = which[a];
        const char *owner = ds__cluster_owner(srv, p->keys[i], p->keylens[i]);
        if (owner && strcmp(owner, ds__cluster_self(srv)) == 0) {
            const char *loc;
            uint64_t size, version;
            if (ds__meta_find(ds__cluster_meta(srv), p->keys[i], p->keylens[i], &loc, &size,
                              &version)) {
                char where[300];
                snprintf(where, sizeof(where), "%s", loc);
                located(p, i, size, version, where, NULL);
                continue;
            }
            if (p->ttl == 0) { /* unknown to its owner: missing, unless it moved */
                redirect_keys(p, &i, 1);
                continue;
            }
        }
        which[k++] = i;
    }
    if (k) per_owner(p, which, k, DS_OP_LOCATE, build_locate, locate_done);
}

/* One entry of a LOCATE answer: found, size, version, location, inline
 * value. true when the key was found (where: its location); false when it
 * was not or the answer is malformed (r->err). */
static bool locate_entry(ds_rbuf_t *r, char *where, size_t cap, uint64_t *size, uint64_t *version,
                         const char **val, uint32_t *vl)
{
    uint8_t found = ds__rbuf_u8(r);
    *size = ds__rbuf_u64(r);
    *version = ds__rbuf_u64(r);
    const char *loc;
    uint32_t ll = ds__rbuf_str(r, &loc);
    *vl = ds__rbuf_str(r, val);
    if (!found || r->err) return false;
    snprintf(where, cap, "%.*s", (int)ll, loc);
    return true;
}

/* ---- subscribe-waits whose owner died ---- */

struct ds_rewait {
    struct ds_rewait *next;
    ds_pend_t *p; /* held (ds__pend_hold) */
    uint32_t *idx, n;
    char dead[300];
    uint64_t next_try;
};

#define DS_REWAIT_RETRY_MS 100

static void rewait_add(ds_pend_t *p, const uint32_t *idx, uint32_t n, const char *dead)
{
    struct ds_rewait *w = calloc(1, sizeof(*w));
    if (w == NULL || (w->idx = malloc((n ? n : 1) * sizeof(*w->idx))) == NULL) {
        free(w);
        return;
    }
    memcpy(w->idx, idx, n * sizeof(*idx));
    w->n = n;
    w->p = p;
    snprintf(w->dead, sizeof(w->dead), "%s", dead);
    w->next_try = ds__now_ms() + DS_REWAIT_RETRY_MS;
    ds__pend_hold(p);
    struct ds_rewait **slot = ds__cluster_rewait_slot(p->srv);
    w->next = *slot;
    *slot = w;
}

static void rewait_end(struct ds_rewait *w)
{
    ds_pend_t *p = w->p;
    free(w->idx);
    free(w);
    ds__pend_unhold(p);
}

uint64_t ds__cluster_rewait_tick(ds_server_t *srv, uint64_t now)
{
    struct ds_rewait **pw = ds__cluster_rewait_slot(srv);
    uint64_t due = 0;
    while (*pw) {
        struct ds_rewait *w = *pw;
        ds_pend_t *p = w->p;
        uint64_t end = p->started_ms + p->ttl;
        if (now < w->next_try && now < end) {
            due = due == 0 || w->next_try < due ? w->next_try : due;
            pw = &w->next;
            continue;
        }
        /* Still owned by the dead member (the ring has not dropped it yet):
         * try again a little later, while the wait lasts. */
        uint32_t k = 0;
        bool still = false;
        for (uint32_t a = 0; a < w->n; a++) {
            uint32_t i = w->idx[a];
            if (p->objs[i]) continue;
            const char *owner = ds__cluster_owner(srv, p->keys[i], p->keylens[i]);
            still |= owner && strcmp(owner, w->dead) == 0;
            w->idx[k++] = i;
        }
        if (still && now + DS_REWAIT_RETRY_MS < end) {
            w->next_try = now + DS_REWAIT_RETRY_MS;
            due = due == 0 || w->next_try < due ? w->next_try : due;
            pw = &w->next;
            continue;
        }
        *pw = w->next;
        if (k && now < end && !still) {
            DS_LOG_INFO("cluster: %u subscribe-waits whose owner %s is gone are sent again to "
                        "their new owners",
                        k, w->dead);
            uint32_t wait = p->ttl;
            p->ttl = (uint32_t)(end - now);
            locate_keys(p, w->idx, k);
            p->ttl = wait;
        }
        rewait_end(w);
    }
    return due;
}

void ds__cluster_rewait_destroy(ds_server_t *srv)
{
    struct ds_rewait **pw = ds__cluster_rewait_slot(srv);
    while (*pw) {
        struct ds_rewait *w = *pw;
        *pw = w->next;
        rewait_end(w);
    }
}

static void locate_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    if (j->transport_failed || j->status != DS_K_OK) {
        /* An unreachable owner (dead, not yet dropped from the ring) means
         * the keys read as missing rather than hanging the reader; a
         * subscribe-wait is sent again to the new owner once the ring
         * drops the dead one. */
        DS_LOG_DEBUG("cluster: locate at %s: %s", j->addr, j->err);
        if (j->transport_failed && j->waits && p->ttl > 0 && p->op != DS_OP_EXIST)
            rewait_add(p, j->idx, j->nidx, j->addr);
        return;
    }
    uint32_t n = ds__rbuf_u32(&j->r);
    /* Asked of the key's current owner, a key it does not know may have
     * moved with a ring change: ask the previous owner. */
    uint32_t *unknown = malloc((j->nidx ? j->nidx : 1) * sizeof(*unknown)), nu = 0;
    for (uint32_t e = 0; e < n && e < j->nidx && !j->r.err; e++) {
        uint32_t i = j->idx[e];
        char where[300];
        uint64_t size, version;
        const char *val;
        uint32_t vl;
        bool found = locate_entry(&j->r, where, sizeof(where), &size, &version, &val, &vl);
        if (p->objs[i] || j->r.err) continue;
        if (!found) {
            const char *owner = ds__cluster_owner(p->srv, p->keys[i], p->keylens[i]);
            if (unknown && owner && strcmp(owner, j->addr) == 0) unknown[nu++] = i;
            continue;
        }
        located(p, i, size, version, where, vl > 0 && vl == size ? (const uint8_t *)val : NULL);
    }
    if (nu) redirect_keys(p, unknown, nu);
    free(unknown);
}

/* Keys no live worker served may be on disk: in this worker's L2 or spill
 * directory (its own objects left memory), or, on a shared sfs directory,
 * written by another worker that may be dead (--enable_l2_cache_fallback).
 * The GET's keys and objects move into the tier's wait. */
typedef struct {
    uint32_t n;
    uint8_t flags;
    char **keys;
    uint32_t *keylens;
    ds_obj_t **objs;
} fallback_t;

static void fallback_done(ds_server_t *srv, ds_req_t *d, void *ctx)
{
    fallback_t *f = ctx;
    if (ds__req_gone(d)) {
        ds__req_drop(d);
    } else {
        uint64_t now = ds__now_ms();
        for (uint32_t i = 0; i < f->n; i++)
            if (f->objs[i] == NULL &&
                (f->objs[i] = ds__store_lookup(srv->store, f->keys[i], f->keylens[i], now)))
                ds__store_ref(f->objs[i]);
        ds__ops_get_reply(srv, d, f->flags, (const char *const *)f->keys, f->keylens, f->n,
                          f->objs);
    }
    for (uint32_t i = 0; i < f->n; i++) {
        free(f->keys[i]);
        if (f->objs[i]) ds__store_unref(srv->store, f->objs[i]);
    }
    free(f->keys);
    free(f->keylens);
    free(f->objs);
    free(f);
}

static bool get_fallback(ds_pend_t *p)
{
    ds_server_t *srv = p->srv;
    if (srv->tier == NULL || p->n == 0) return false;
    const char **mk = malloc(p->n * sizeof(*mk));
    uint32_t *ml = malloc(p->n * sizeof(*ml));
    fallback_t *f = calloc(1, sizeof(*f));
    uint32_t nm = 0;
    for (uint32_t i = 0; mk && ml && i < p->n; i++)
        if (p->objs[i] == NULL) {
            mk[nm] = p->keys[i];
            ml[nm++] = p->keylens[i];
        }
    bool held = false;
    if (f && nm > 0) {
        *f = (fallback_t){p->n, p->flags, p->keys, p->keylens, p->objs};
        held = ds__tier_get_ctx(srv, p->req, mk, ml, nm, fallback_done, f);
    }
    free(mk);
    free(ml);
    if (!held) {
        free(f);
        return false;
    }
    p->keys = NULL; /* the tier's wait has them now */
    p->keylens = NULL;
    p->objs = NULL;
    p->n = 0;
    return true;
}

static void get_finish(ds_pend_t *p)
{
    if (p->err_status != DS_K_OK) {
        ds__req_error(p->req, p->err_status, "%s", p->err);
        return;
    }
    if (get_fallback(p)) return;
    ds__ops_get_reply(p->srv, p->req, p->flags, (const char *const *)p->keys, p->keylens, p->n,
                      p->objs);
}

void ds__cluster_get(ds_server_t *srv, ds_req_t *r, int32_t wait_ms, uint8_t flags,
                     const char *const *keys, const uint32_t *lens, uint32_t n)
{
    ds_pend_t *p = ds__pend_new(srv, r, get_finish);
    if (p == NULL || !pend_keys(p, keys, lens, n)) {
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    p->flags = flags; /* the GET's own flags (shm, pin), not the header's */
    p->ttl = (uint32_t)wait_ms;
    p->started_ms = ds__now_ms();
    uint64_t now = ds__now_ms();
    for (uint32_t i = 0; i < n; i++) {
        ds_obj_t *o = ds__store_lookup(srv->store, keys[i], lens[i], now);
        if (o) {
            ds__store_ref(o);
            p->objs[i] = o;
        }
    }
    uint32_t nm;
    uint32_t *m = missing_indices(p, &nm);
    if (m && nm) locate_keys(p, m, nm);
    free(m);
    ds__pend_start(p);
}

/* ---- after a local publish: tell the owners ---- */

static void build_meta_put(ds_pend_t *p, ds_job_t *j)
{
    ds__wbuf_cstr(&j->req, ds__cluster_self(p->srv));
    /* A fresh publish supersedes every other copy, unless it is NX. */
    ds__wbuf_u8(&j->req, p->nx ? 1 : 0);
    ds__wbuf_u32(&j->req, j->nidx);
    for (uint32_t i = 0; i < j->nidx; i++) {
        uint32_t k = j->idx[i];
        ds__wbuf_str(&j->req, p->keys[k], p->keylens[k]);
        ds__wbuf_u64(&j->req, p->sizes[k]);
        ds__wbuf_u64(&j->req, p->objs[k] ? p->objs[k]->version : 0);
    }
}

static void meta_put_done(ds_job_t *j)
{
    if (j->transport_failed || (j->status != DS_K_OK && j->status != DS_K_DUPLICATED)) {
        DS_LOG_WARN("cluster: owner %s did not record %u keys: %s (they are registered again "
                    "when the ring changes)",
                    j->addr, j->nidx, j->err);
        return;
    }
    ds_pend_t *p = j->pend;
    if (p == NULL || !p->nx) return;
    /* NX: the owner refused keys that already live elsewhere. Our copy is
     * rolled back and, as in Yuanrong, the key counts as a success: the old
     * value stays. */
    ds_server_t *srv = p->srv;
    uint32_t n = ds__rbuf_u32(&j->r);
    for (uint32_t e = 0; e < n && e < j->nidx; e++) {
        uint32_t st = ds__rbuf_u32(&j->r);
        if (j->r.err) break;
        if (st != DS_K_DUPLICATED) continue;
        uint32_t k = j->idx[e];
        ds_obj_t *mine = p->objs[k];
        if (ds__store_lookup(srv->store, p->keys[k], p->keylens[k], ds__now_ms()) == mine)
            ds__store_delete(srv->store, p->keys[k], p->keylens[k]);
        DS_LOG_DEBUG("cluster: NX set of '%.200s' kept the copy on another worker", p->keys[k]);
    }
}

void ds__job_set_count(ds_job_t *j, size_t at, uint32_t n)
{
    for (int i = 0; i < 4; i++)
        j->req.buf[at + (size_t)i] = (uint8_t)(n >> (8 * i));
}

void ds__cluster_reply_statuses(ds_req_t *r, const uint32_t *st, uint32_t n)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    for (uint32_t i = 0; i < n; i++)
        ds__wbuf_u32(&w, st ? st[i] : DS_K_OK);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

/* The owners have the copies (or failed): latch hints waiting for these
 * writes may be answered (cluster_seal.c). */
static void published_end(ds_pend_t *p)
{
    for (uint32_t i = 0; p->keys && i < p->n; i++)
        if (p->keys[i]) ds__inflight_end(p->srv, p->keys[i], p->keylens[i]);
}

void ds__cluster_published_finish(ds_pend_t *p)
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

/* A write tracked for latch hints (not the replicated path, which does not
 * register its keys as in flight). */
static void published_finish(ds_pend_t *p)
{
    published_end(p);
    ds__cluster_published_finish(p);
}

void ds__cluster_published(ds_server_t *srv, ds_req_t *r, ds_obj_t **objs, const uint32_t *status,
                           uint32_t n, bool nx, const char *first_err)
{
    /* Memory replicas (cluster_repl.c); an NX write keeps one copy: the
     * owner decides it alone. */
    uint32_t want = ds__repl_want(srv);
    for (uint32_t i = 0; want <= 1 && i < n; i++)
        if (objs[i]) ds__repl_forget(srv, objs[i]->key, objs[i]->keylen);
    if (want > 1 && !nx) {
        ds__repl_published(srv, r, objs, status, n, nx, first_err, want);
        return;
    }
    ds_pend_t *p = ds__pend_new(srv, r, published_finish);
    uint32_t np = 0;
    for (uint32_t i = 0; i < n; i++)
        np += objs[i] != NULL;
    const char **kp = calloc(np ? np : 1, sizeof(*kp));
    uint32_t *kl = calloc(np ? np : 1, sizeof(*kl));
    uint32_t *orig = p ? calloc(n ? n : 1, sizeof(*orig)) : NULL;
    uint32_t *idx = p ? calloc(np ? np : 1, sizeof(*idx)) : NULL;
    if (p == NULL || kp == NULL || kl == NULL || orig == NULL || idx == NULL) {
        free(kp);
        free(kl);
        free(orig);
        free(idx);
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    memcpy(orig, status, n * sizeof(*orig));
    p->orig_status = orig;
    p->orig_idx = idx;
    p->norig = n;
    p->nx = nx;
    snprintf(p->err, sizeof(p->err), "%s", first_err ? first_err : "");
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (objs[i]) {
            kp[k] = objs[i]->key;
            kl[k] = objs[i]->keylen;
            idx[k++] = i;
        }
    if (pend_keys(p, kp, kl, np)) {
        uint32_t *all = malloc((np ? np : 1) * sizeof(*all));
        k = 0;
        for (uint32_t i = 0; i < n; i++)
            if (objs[i]) {
                ds__store_ref(objs[i]);
                p->objs[k] = objs[i];
                p->sizes[k] = objs[i]->size;
                if (all) all[k] = k;
                k++;
            }
        for (uint32_t i = 0; i < np; i++)
            ds__inflight_begin(srv, p->keys[i], p->keylens[i]);
        p->gone = published_end;
        if (all && np) per_owner(p, all, np, DS_OP_META_PUT, build_meta_put, meta_put_done);
        free(all);
    }
    free(kp);
    free(kl);
    ds__pend_start(p);
}

/* ---- DEL, EXIST, EXPIRE, QSIZE ---- */

static void build_meta_del(ds_pend_t *p, ds_job_t *j)
{
    ds__wbuf_cstr(&j->req, ds__cluster_self(p->srv));
    ds__wbuf_u8(&j->req, 1);
    ds__wbuf_u32(&j->req, j->nidx);
    for (uint32_t i = 0; i < j->nidx; i++) {
        ds__wbuf_str(&j->req, p->keys[j->idx[i]], p->keylens[j->idx[i]]);
        ds__wbuf_u64(&j->req, UINT64_MAX);
    }
}

static void owner_failed(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    if (!j->transport_failed && j->status == DS_K_OK) return;
    p->err_status = j->transport_failed ? DS_K_RPC_UNAVAILABLE : (ds_status_t)j->status;
    snprintf(p->err, sizeof(p->err), "owner %.64s: %.180s", j->addr, j->err);
}

static void expire_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    uint32_t n = ds__rbuf_u32(&j->r);
    uint32_t st = n == 1 ? ds__rbuf_u32(&j->r) : DS_K_NOT_FOUND;
    p->status[j->index] = j->transport_failed ? DS_K_RPC_UNAVAILABLE : st;
}

/* EXIST/QSIZE/EXPIRE: what the owners know about the keys missing here. */
static void keys_locate_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    if (j->transport_failed || j->status != DS_K_OK) return; /* unknown: missing */
    uint32_t n = ds__rbuf_u32(&j->r);
    for (uint32_t e = 0; e < n && e < j->nidx && !j->r.err; e++) {
        uint32_t i = j->idx[e];
        char where[300];
        uint64_t size, version;
        const char *val; /* none: this LOCATE asked for no values */
        uint32_t vl;
        if (!locate_entry(&j->r, where, sizeof(where), &size, &version, &val, &vl)) continue;
        p->status[i] = DS_K_OK;
        p->sizes[i] = size;
        if (p->op != DS_OP_EXPIRE) continue;
        ds_job_t *x = ds__job_new(p, where, DS_OP_EXPIRE, expire_done);
        if (x == NULL) continue;
        ds__wbuf_u32(&x->req, p->ttl);
        ds__wbuf_u32(&x->req, 1);
        ds__wbuf_str(&x->req, p->keys[i], p->keylens[i]);
        x->index = i;
        ds__job_submit(p->srv, x);
    }
}

static void keys_finish(ds_pend_t *p)
{
    if (p->err_status != DS_K_OK) {
        ds__req_error(p->req, p->err_status, "%s", p->err);
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds_status_t overall = DS_K_OK;
    uint32_t first = 0;
    for (uint32_t i = 0; i < p->n && p->op == DS_OP_EXPIRE; i++)
        if (p->status[i] != DS_K_OK && overall == DS_K_OK) {
            overall = (ds_status_t)p->status[i];
            first = i;
        }
    char msg[300] = "";
    if (overall != DS_K_OK) snprintf(msg, sizeof(msg), "key '%s' not found", p->keys[first]);
    ds__wbuf_cstr(&w, msg);
    ds__wbuf_u32(&w, p->n);
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->op == DS_OP_EXIST) {
            ds__wbuf_u8(&w, p->status[i] == DS_K_OK);
        } else if (p->op == DS_OP_QSIZE) {
            ds__wbuf_u32(&w, p->status[i]);
            ds__wbuf_u64(&w, p->status[i] == DS_K_OK ? p->sizes[i] : 0);
        } else {
            ds__wbuf_u32(&w, p->status[i]);
        }
    }
    ds__req_reply(p->req, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

void ds__cluster_keys_op(ds_server_t *srv, ds_req_t *r, const char *const *keys,
                         const uint32_t *lens, uint32_t n, uint32_t ttl)
{
    uint16_t op = r->op;
    ds_pend_t *p = ds__pend_new(srv, r, keys_finish);
    if (p == NULL || !pend_keys(p, keys, lens, n)) {
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    p->ttl = ttl;
    uint64_t now = ds__now_ms();
    uint32_t *m = malloc(n * sizeof(*m));
    uint32_t nm = 0;
    for (uint32_t i = 0; i < n; i++) {
        p->status[i] = DS_K_NOT_FOUND;
        if (op == DS_OP_DEL) {
            /* Deleted here at once, the L2 copy too; the owner drops
             * every other copy. */
            ds__store_delete(srv->store, keys[i], lens[i]);
            ds__repl_forget(srv, keys[i], lens[i]);
            if (srv->tier) ds__tier_del(srv, keys[i], lens[i], DS_TIER_UNWATCHED);
            p->status[i] = DS_K_OK;
            if (m) m[nm++] = i;
            continue;
        }
        ds_obj_t *o = ds__store_lookup(srv->store, keys[i], lens[i], now);
        /* A hot copy is a cache: an expiry goes to where the write lives
         * (whose expiry then drops the hot copies). */
        if (o == NULL || (op == DS_OP_EXPIRE && ds__repl_is_hot(srv, o))) {
            if (m) m[nm++] = i;
            continue;
        }
        p->sizes[i] = o->size;
        p->status[i] =
            op == DS_OP_EXPIRE ? ds__store_expire(srv->store, keys[i], lens[i], ttl, now) : DS_K_OK;
    }
    if (m && nm) {
        if (op == DS_OP_DEL)
            per_owner(p, m, nm, DS_OP_META_DEL, build_meta_del, owner_failed);
        else {
            p->ttl = 0; /* LOCATE without waiting */
            per_owner(p, m, nm, DS_OP_LOCATE, build_locate, keys_locate_done);
            p->ttl = ttl;
        }
    }
    free(m);
    ds__pend_start(p);
}

/* ---- eviction, expiry and ring changes: keep the owners' tables right ---- */

void ds__cluster_gone(ds_server_t *srv, const ds_obj_t *o)
{
    ds__repl_forget(srv, o->key, o->keylen);
    const char *owner = ds__cluster_owner(srv, o->key, o->keylen);
    if (owner == NULL) return;
    if (strcmp(owner, ds__cluster_self(srv)) == 0) {
        ds_drop_ctx_t d = {NULL, srv, o->key, o->keylen, ds__cluster_self(srv)};
        ds__meta_del(ds__cluster_meta(srv), o->key, o->keylen, ds__cluster_self(srv), o->version,
                     ds__owner_queue_drop, &d);
        return;
    }
    ds_job_t *j = ds__job_new(NULL, owner, DS_OP_META_DEL, NULL);
    if (j == NULL) return;
    ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
    ds__wbuf_u8(&j->req, 0);
    ds__wbuf_u32(&j->req, 1);
    ds__wbuf_str(&j->req, o->key, o->keylen);
    ds__wbuf_u64(&j->req, o->version);
    ds__job_submit(srv, j);
}

/* One META_PUT batch per new owner; the entry count is patched in at the end. */
typedef struct {
    ds_job_t *job;
    uint32_t count;
    size_t count_at;
} batch_t;

typedef struct {
    ds_server_t *srv;
    const ds_ring_t *old;
    batch_t batch[64];
    uint32_t total;
} rereg_t;

static void batch_flush(ds_server_t *srv, batch_t *b)
{
    if (b->job == NULL) return;
    ds__job_set_count(b->job, b->count_at, b->count);
    ds__job_submit(srv, b->job);
    b->job = NULL;
    b->count = 0;
}

/* The owner refused some re-registered copies (K_DUPLICATED): the key was
 * published elsewhere meanwhile, so the copy here is older. Drop it unless
 * it was replaced here since. The request names the keys and versions. */
static void rereg_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK) {
        meta_put_done(j);
        return;
    }
    ds_server_t *srv = j->ctx;
    uint32_t n = ds__rbuf_u32(&j->r);
    ds_rbuf_t q;
    ds__rbuf_init(&q, j->req.buf, j->req.len);
    const char *loc;
    (void)ds__rbuf_str(&q, &loc);
    (void)ds__rbuf_u8(&q);
    uint32_t nq = ds__rbuf_u32(&q);
    uint64_t now = ds__now_ms();
    uint32_t dropped = 0;
    for (uint32_t i = 0; i < n && i < nq && !j->r.err && !q.err; i++) {
        uint32_t st = ds__rbuf_u32(&j->r);
        const char *k;
        uint32_t kl = ds__rbuf_str(&q, &k);
        (void)ds__rbuf_u64(&q);
        uint64_t version = ds__rbuf_u64(&q);
        if (st != DS_K_DUPLICATED || q.err) continue;
        ds_obj_t *o = ds__store_lookup(srv->store, k, kl, now);
        if (o && o->version == version) {
            ds__store_delete(srv->store, k, kl);
            dropped++;
        }
    }
    if (dropped)
        DS_LOG_INFO("cluster: dropped %u copies superseded on other workers meanwhile", dropped);
}

static void rereg_one(void *ctx, ds_obj_t *o)
{
    rereg_t *r = ctx;
    const char *now_owner = ds__cluster_owner(r->srv, o->key, o->keylen);
    const char *was = r->old ? ds__ring_owner(r->old, o->key, o->keylen) : NULL;
    if (now_owner == NULL || (was && strcmp(was, now_owner) == 0)) return;
    if (ds__repl_rereg(r->srv, o, now_owner)) return; /* a replicated write's copy, a hot copy */
    batch_t *b = NULL;
    for (size_t i = 0; i < sizeof(r->batch) / sizeof(r->batch[0]) && b == NULL; i++)
        if (r->batch[i].job == NULL || strcmp(r->batch[i].job->addr, now_owner) == 0)
            b = &r->batch[i];
    if (b == NULL) { /* more owners than batches: flush one and reuse it */
        b = &r->batch[0];
        batch_flush(r->srv, b);
    }
    if (b->job && b->count >= DS_META_BATCH) batch_flush(r->srv, b);
    if (b->job == NULL) {
        b->job = ds__job_new(NULL, now_owner, DS_OP_META_PUT, rereg_done);
        if (b->job == NULL) return;
        b->job->ctx = r->srv;
        ds__wbuf_cstr(&b->job->req, ds__cluster_self(r->srv));
        ds__wbuf_u8(&b->job->req, 1); /* only where no other copy is known */
        b->count_at = b->job->req.len;
        ds__wbuf_u32(&b->job->req, 0);
    }
    ds__wbuf_str(&b->job->req, o->key, o->keylen);
    ds__wbuf_u64(&b->job->req, o->size);
    ds__wbuf_u64(&b->job->req, o->version);
    b->count++;
    r->total++;
}

void ds__cluster_ring_changed(ds_server_t *srv, const ds_ring_t *old_ring)
{
    rereg_t r = {.srv = srv, .old = old_ring};
    ds__store_foreach(srv->store, rereg_one, &r);
    for (size_t i = 0; i < sizeof(r.batch) / sizeof(r.batch[0]); i++)
        batch_flush(srv, &r.batch[i]);
    ds__repl_rereg_flush(srv);
    if (r.total) DS_LOG_INFO("cluster: registered %u keys with their new owners", r.total);
    ds__stream_reregister(srv); /* streams' counts, with their new owners too */
}
