/* Seal marks and nested references held at each key's ring owner, so that
 * every worker agrees on them (as latches and global references,
 * cluster_hold.c).
 *
 * Seal: a client's SEAL marks the keys' local copies (store.h: sealed) and
 * goes to each key's owner (SEAL_OWNED; keys this worker owns are marked
 * here). The owner records the sealed version (location and version: a
 * later version, after a delete, is not sealed) and hints the key to every
 * member as latched for good (LATCH_HINT) before it answers. So every later
 * write of the key on any member asks the owner first (LATCH_WAIT), whose
 * answer names the sealed keys; the member remembers the answer and refuses
 * the write (K_OC_ALREADY_SEALED) before publishing anything. A write
 * through the owner checks its own mark. A member that joins after the
 * seal has no hint and is not held back; an owner failover loses the mark
 * (the worker holding the sealed version still refuses writes through it).
 *
 * Nested references: a client's GREF NEST goes to the parent's owner
 * (NEST_OWNED), which keeps the parent's list of nested keys with the
 * parent's own counts (ops_read.c). A nested key owned elsewhere is held at
 * its owner (NEST_HOLD, delta 1): the parent's owner answers the NEST once
 * those owners have the holds, so a later decrease of the key's own
 * references through any worker finds it held. When the parent goes (its
 * last reference, through any worker, or a delete) its owner lets go of
 * them (NEST_HOLD, delta -1), and a key left with no reference and no hold
 * is deleted everywhere by its owner, and so on down. Holds are not rebuilt
 * at a new owner after a failover. */
#include "worker/cluster/cluster_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEAL_BUCKETS 256u
/* A seal's hint: a latch that does not end (LATCH_HINT's ms). */
#define SEAL_HINT_MS UINT32_MAX

/* MARK: this worker owns the key and sealed (loc, version); TOLD: the
 * key's owner answered a LATCH_WAIT of this worker that it is sealed. */
enum { SEAL_MARK = 0, SEAL_TOLD = 1 };

typedef struct seal {
    struct seal *next;
    uint64_t version;
    uint8_t kind;
    char loc[300];
    uint32_t len;
    char key[];
} seal_t;

/* A key this worker published and whose owner has not yet recorded the
 * new copy (META_PUT in flight), with the LATCH_HINTs that wait for it. */
typedef struct waiter {
    struct waiter *next;
    ds_pend_t *p;
} waiter_t;

typedef struct inflight {
    struct inflight *next;
    uint32_t count;
    waiter_t *waiters;
    uint32_t len;
    char key[];
} inflight_t;

struct ds_seals {
    seal_t *b[SEAL_BUCKETS];
    uint32_t n;
    inflight_t *fl[SEAL_BUCKETS];
    uint32_t nfl;
};

static ds_seals_t *seals(ds_server_t *srv)
{
    ds_seals_t **s = ds__cluster_seals(srv);
    if (*s == NULL) *s = calloc(1, sizeof(**s));
    return *s;
}

void ds__seals_free(ds_seals_t *s)
{
    if (s == NULL) return;
    for (uint32_t i = 0; i < SEAL_BUCKETS; i++) {
        while (s->b[i]) {
            seal_t *x = s->b[i];
            s->b[i] = x->next;
            free(x);
        }
        /* The pends waiting here are freed with the cluster's. */
        while (s->fl[i]) {
            inflight_t *x = s->fl[i];
            s->fl[i] = x->next;
            while (x->waiters) {
                waiter_t *w = x->waiters;
                x->waiters = w->next;
                free(w);
            }
            free(x);
        }
    }
    free(s);
}

/* ---- writes in flight to their owners ----
 *
 * A write on a member checks its latch hints, publishes here and then tells
 * the key's owner (META_PUT), all without waiting when the key is not
 * hinted. A latch granted at the owner in between would not hold that
 * write back. So the owner grants a latch only once every member has its
 * LATCH_HINT, and a member answers a hint only once its writes of the key
 * already past the check are recorded at the owner: the latch then comes
 * after them, and every later write of the key asks the owner. */

static inflight_t **inflight_find(ds_seals_t *s, const char *k, uint32_t kl)
{
    inflight_t **pp = &s->fl[ds__murmur3_32(k, kl, 0x666c6967u) & (SEAL_BUCKETS - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->len == kl && memcmp((*pp)->key, k, kl) == 0) break;
    return pp;
}

void ds__inflight_begin(ds_server_t *srv, const char *k, uint32_t kl)
{
    ds_seals_t *s = seals(srv);
    if (s == NULL || k == NULL) return;
    inflight_t **pp = inflight_find(s, k, kl);
    if (*pp == NULL) {
        inflight_t *x = calloc(1, sizeof(*x) + kl);
        if (x == NULL) return; /* out of memory: a hint will not wait for it */
        x->len = kl;
        memcpy(x->key, k, kl);
        *pp = x;
        s->nfl++;
    }
    (*pp)->count++;
}

void ds__inflight_end(ds_server_t *srv, const char *k, uint32_t kl)
{
    ds_seals_t *s = *ds__cluster_seals(srv);
    if (s == NULL || s->nfl == 0 || k == NULL) return;
    inflight_t **pp = inflight_find(s, k, kl);
    inflight_t *x = *pp;
    if (x == NULL || --x->count > 0) return;
    *pp = x->next;
    s->nfl--;
    while (x->waiters) {
        waiter_t *w = x->waiters;
        x->waiters = w->next;
        ds__pend_unhold(w->p);
        free(w);
    }
    free(x);
}

bool ds__inflight_wait(ds_server_t *srv, ds_pend_t *p, const char *k, uint32_t kl)
{
    ds_seals_t *s = *ds__cluster_seals(srv);
    if (s == NULL || s->nfl == 0) return false;
    inflight_t *x = *inflight_find(s, k, kl);
    waiter_t *w = x ? malloc(sizeof(*w)) : NULL;
    if (w == NULL) return false;
    w->p = p;
    w->next = x->waiters;
    x->waiters = w;
    ds__pend_hold(p);
    return true;
}

static seal_t **seal_find(ds_seals_t *s, uint8_t kind, const char *k, uint32_t kl)
{
    seal_t **pp = &s->b[ds__murmur3_32(k, kl, 0x7365616cu) & (SEAL_BUCKETS - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->kind == kind && (*pp)->len == kl && memcmp((*pp)->key, k, kl) == 0) break;
    return pp;
}

static void seal_drop(ds_seals_t *s, seal_t **pp)
{
    seal_t *x = *pp;
    *pp = x->next;
    free(x);
    s->n--;
}

static seal_t *seal_put(ds_seals_t *s, uint8_t kind, const char *k, uint32_t kl)
{
    seal_t **pp = seal_find(s, kind, k, kl);
    if (*pp) return *pp;
    seal_t *x = calloc(1, sizeof(*x) + kl);
    if (x == NULL) return NULL;
    x->kind = kind;
    x->len = kl;
    memcpy(x->key, k, kl);
    *pp = x;
    s->n++;
    return x;
}

/* The key's current copy as its owner knows it: false when none. */
static bool current(ds_server_t *srv, const char *k, uint32_t kl, const char **loc,
                    uint64_t *version)
{
    uint64_t size;
    if (ds__meta_find(ds__cluster_meta(srv), k, kl, loc, &size, version)) return true;
    const ds_obj_t *o = ds__store_lookup(srv->store, k, kl, ds__now_ms());
    if (o == NULL) return false;
    *loc = ds__cluster_self(srv);
    *version = o->version;
    return true;
}

/* At the owner: whether the key's current version is the one sealed (a
 * mark of a version gone goes). */
static bool owner_sealed(ds_server_t *srv, ds_seals_t *s, const char *k, uint32_t kl)
{
    seal_t **pp = seal_find(s, SEAL_MARK, k, kl);
    if (*pp == NULL) return false;
    const char *loc;
    uint64_t version;
    if (current(srv, k, kl, &loc, &version) && version == (*pp)->version &&
        strcmp(loc, (*pp)->loc) == 0)
        return true;
    seal_drop(s, pp);
    return false;
}

/* At the owner: seals the key's current version. */
static ds_status_t owner_mark(ds_server_t *srv, const char *k, uint32_t kl, char *msg, size_t cap)
{
    if (ds__key_check(k, kl, msg, cap) != 0) return DS_K_INVALID;
    const char *loc;
    uint64_t version;
    ds_seals_t *s = seals(srv);
    if (!current(srv, k, kl, &loc, &version)) {
        snprintf(msg, cap, "key '%.*s' not found", (int)(kl > 200 ? 200 : kl), k);
        return DS_K_NOT_FOUND;
    }
    seal_t *x = s ? seal_put(s, SEAL_MARK, k, kl) : NULL;
    if (x == NULL) {
        snprintf(msg, cap, "out of memory");
        return DS_K_OUT_OF_MEMORY;
    }
    x->version = version;
    snprintf(x->loc, sizeof(x->loc), "%s", loc);
    ds_obj_t *o = ds__store_lookup(srv->store, k, kl, ds__now_ms());
    if (o) o->sealed = 1;
    return DS_K_OK;
}

bool ds__seal_refused(ds_server_t *srv, const char *key, uint32_t len)
{
    ds_seals_t *s = *ds__cluster_seals(srv);
    if (s == NULL || s->n == 0) return false;
    if (ds__holds_owns(srv, key, len)) return owner_sealed(srv, s, key, len);
    return *seal_find(s, SEAL_TOLD, key, len) != NULL;
}

ds_status_t ds__seal_status(ds_server_t *srv, const char *key, uint32_t len)
{
    ds_seals_t *s = *ds__cluster_seals(srv);
    if (s == NULL || s->n == 0) return DS_K_OK;
    return owner_sealed(srv, s, key, len) ? DS_K_OC_ALREADY_SEALED : DS_K_OK;
}

void ds__seal_told(ds_server_t *srv, const char *key, uint32_t len, bool sealed)
{
    ds_seals_t *s = sealed ? seals(srv) : *ds__cluster_seals(srv);
    if (s == NULL) return;
    if (sealed) {
        (void)seal_put(s, SEAL_TOLD, key, len);
        return;
    }
    seal_t **pp = seal_find(s, SEAL_TOLD, key, len);
    if (*pp) seal_drop(s, pp);
}

/* LATCH_WAIT's answer: a status per key of the request. */
void ds__seal_wait_answer(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *origin;
    (void)ds__rbuf_str(&rb, &origin);
    (void)ds__rbuf_u64(&rb);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 5);
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, rb.err ? 0 : n);
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        ds__wbuf_u32(&w, rb.err ? DS_K_OK : (uint32_t)ds__seal_status(srv, k, kl));
    }
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

bool ds__seal_wait_any(ds_server_t *srv, const char *const *keys, const uint32_t *lens, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (ds__seal_status(srv, keys[i], lens[i]) != DS_K_OK) return true;
    return false;
}

/* ---- SEAL ---- */

static void quiet_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: %s to %s failed: %s", ds__opcode_name(j->op), j->addr, j->err);
}

/* Hints the sealed keys (idx into p->keys, n of them) to every other member,
 * counted in p. */
static void seal_hints(ds_server_t *srv, ds_pend_t *p, const uint32_t *idx, uint32_t n)
{
    if (n == 0) return;
    const char *peers[DS_MAX_MEMBERS];
    size_t np = ds__cluster_peers(srv, peers, DS_MAX_MEMBERS);
    for (size_t m = 0; m < np; m++) {
        ds_job_t *j = ds__job_new(p, peers[m], DS_OP_LATCH_HINT, quiet_done);
        if (j == NULL) continue;
        ds__wbuf_u32(&j->req, n);
        for (uint32_t i = 0; i < n; i++) {
            ds__wbuf_str(&j->req, p->keys[idx[i]], p->keylens[idx[i]]);
            ds__wbuf_u32(&j->req, SEAL_HINT_MS);
        }
        ds__job_submit(srv, j);
    }
}

static void seal_finish(ds_pend_t *p)
{
    ds_status_t first = DS_K_OK;
    for (uint32_t i = 0; i < p->n && first == DS_K_OK; i++)
        first = (ds_status_t)p->status[i];
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, first != DS_K_OK ? p->err : "");
    ds__wbuf_u32(&w, p->n);
    for (uint32_t i = 0; i < p->n; i++)
        ds__wbuf_u32(&w, p->status[i]);
    ds__req_reply(p->req, first, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void seal_err(ds_pend_t *p, uint32_t i, const char *msg)
{
    if (i >= p->err_idx) return;
    p->err_idx = i;
    snprintf(p->err, sizeof(p->err), "%.255s", msg);
}

static void seal_owned_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    uint32_t n = 0;
    bool failed = j->transport_failed || (n = ds__rbuf_u32(&j->r)) != j->nidx || j->r.err;
    for (uint32_t e = 0; e < j->nidx; e++) {
        uint32_t i = j->idx[e];
        uint32_t st = failed ? 0 : ds__rbuf_u32(&j->r);
        if (failed || j->r.err) {
            p->status[i] = j->transport_failed ? DS_K_RPC_UNAVAILABLE : DS_K_RUNTIME_ERROR;
            char msg[256];
            snprintf(msg, sizeof(msg), "owner %.64s of key '%.64s': %.100s", j->addr, p->keys[i],
                     j->err[0] ? j->err : "malformed answer");
            seal_err(p, i, msg);
            continue;
        }
        p->status[i] = st;
        if (st != DS_K_OK) seal_err(p, i, j->err);
    }
}

/* Reads SEAL's (or SEAL_OWNED's) keys into a new pend; NULL after answering r. */
static ds_pend_t *seal_pend(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 5);
    if (rb.err || n == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed %s: %u keys (allowed 1..%u)",
                      ds__opcode_name(r->op), n, DS_MAX_BATCH);
        return NULL;
    }
    ds_pend_t *p = ds__pend_new(srv, r, seal_finish);
    bool ok = p != NULL;
    if (ok) {
        p->keys = calloc(n, sizeof(*p->keys));
        p->keylens = calloc(n, sizeof(*p->keylens));
        p->status = calloc(n, sizeof(*p->status));
        ok = p->keys && p->keylens && p->status;
    }
    for (uint32_t i = 0; ok && i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        if (rb.err) break;
        if ((p->keys[i] = malloc(kl + 1)) == NULL) {
            ok = false;
            break;
        }
        memcpy(p->keys[i], k, kl);
        p->keys[i][kl] = '\0';
        p->keylens[i] = kl;
        p->n = i + 1;
    }
    if (!ok || rb.err) {
        if (p) ds__pend_free(p);
        if (ok)
            ds__req_error(r, DS_K_INVALID, "malformed %s: key truncated", ds__opcode_name(r->op));
        else
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    p->err_idx = UINT32_MAX;
    return p;
}

void ds__seal_client(ds_server_t *srv, ds_req_t *r)
{
    ds_pend_t *p = seal_pend(srv, r);
    if (p == NULL) return;
    uint32_t n = p->n;
    uint32_t *mine = calloc(n, sizeof(*mine)), nmine = 0;
    bool *remote = calloc(n, sizeof(*remote));
    for (uint32_t i = 0; i < n; i++) {
        char msg[256];
        const char *k = p->keys[i];
        uint32_t kl = p->keylens[i];
        ds_status_t st = DS_K_OK;
        if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (ds__holds_owns(srv, k, kl)) {
            st = owner_mark(srv, k, kl, msg, sizeof(msg));
            if (st == DS_K_OK && mine) mine[nmine++] = i;
        } else if (remote) {
            /* This worker's copy refuses writes through it at once; the
             * owner decides for the others. */
            ds_obj_t *o = ds__store_lookup(srv->store, k, kl, ds__now_ms());
            if (o) o->sealed = 1;
            remote[i] = true;
            continue;
        } else {
            st = DS_K_OUT_OF_MEMORY;
            snprintf(msg, sizeof(msg), "out of memory");
        }
        p->status[i] = (uint32_t)st;
        if (st != DS_K_OK) seal_err(p, i, msg);
    }
    seal_hints(srv, p, mine, nmine);
    for (uint32_t a = 0; remote && a < n; a++) {
        if (!remote[a]) continue;
        const char *owner = ds__cluster_owner(srv, p->keys[a], p->keylens[a]);
        ds_job_t *j = owner ? ds__job_new(p, owner, DS_OP_SEAL_OWNED, seal_owned_done) : NULL;
        if (j) j->idx = malloc(n * sizeof(*j->idx));
        if (j == NULL || j->idx == NULL) {
            if (j) {
                ds__wbuf_free(&j->req);
                free(j);
            }
            p->status[a] = DS_K_OUT_OF_MEMORY;
            seal_err(p, a, "out of memory");
            remote[a] = false;
            continue;
        }
        for (uint32_t b = a; b < n; b++) {
            const char *o2 = remote[b] ? ds__cluster_owner(srv, p->keys[b], p->keylens[b]) : NULL;
            if (o2 && strcmp(o2, owner) == 0) {
                j->idx[j->nidx++] = b;
                remote[b] = false;
            }
        }
        ds__wbuf_u32(&j->req, j->nidx);
        for (uint32_t e = 0; e < j->nidx; e++)
            ds__wbuf_str(&j->req, p->keys[j->idx[e]], p->keylens[j->idx[e]]);
        ds__job_submit(srv, j);
    }
    free(remote);
    free(mine);
    ds__pend_start(p);
}

/* The owner's side: marks, hints every member, then answers statuses. */
static void op_seal_owned(ds_server_t *srv, ds_req_t *r)
{
    ds_pend_t *p = seal_pend(srv, r);
    if (p == NULL) return;
    uint32_t *ok = calloc(p->n, sizeof(*ok)), nok = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        char msg[256];
        ds_status_t st = owner_mark(srv, p->keys[i], p->keylens[i], msg, sizeof(msg));
        p->status[i] = (uint32_t)st;
        if (st != DS_K_OK)
            seal_err(p, i, msg);
        else if (ok)
            ok[nok++] = i;
    }
    seal_hints(srv, p, ok, nok);
    free(ok);
    p->finish = seal_finish;
    ds__pend_start(p);
}

/* ---- nested references ---- */

/* A client's NEST whose parent is owned elsewhere: the owner's answer is
 * relayed (its body after the error string, in ext). */
typedef struct {
    uint8_t *body;
    uint32_t len;
} relay_t;

static void relay_free(ds_server_t *srv, void *ext)
{
    (void)srv;
    relay_t *x = ext;
    free(x->body);
    free(x);
}

static void nest_owned_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    relay_t *x = p->ext;
    if (j->transport_failed) {
        p->err_status = DS_K_RPC_UNAVAILABLE;
        snprintf(p->err, sizeof(p->err), "owner %.64s of key '%.64s': %.100s", j->addr, p->keys[0],
                 j->err);
        return;
    }
    p->err_status = (ds_status_t)j->status;
    snprintf(p->err, sizeof(p->err), "%s", j->err);
    size_t left = j->r.len > j->r.pos ? j->r.len - j->r.pos : 0;
    if (left && (x->body = malloc(left)) != NULL) {
        memcpy(x->body, j->r.p + j->r.pos, left);
        x->len = (uint32_t)left;
    }
}

static void nest_relay_finish(ds_pend_t *p)
{
    relay_t *x = p->ext;
    if (x->body == NULL) {
        ds__req_error(p->req, p->err_status != DS_K_OK ? p->err_status : DS_K_RUNTIME_ERROR, "%s",
                      p->err[0] ? p->err : "malformed answer of the parent's owner");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, p->err);
    ds__wbuf_bytes(&w, x->body, x->len);
    ds__req_reply(p->req, p->err_status, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

bool ds__nest_client(ds_server_t *srv, ds_req_t *r)
{
    if (r->op != DS_OP_GREF) return false;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    (void)ds__rbuf_i32(&rb);
    (void)ds__rbuf_u32(&rb);
    const char *parent;
    uint32_t pl = ds__rbuf_str(&rb, &parent);
    char msg[256];
    if (rb.err || ds__key_check(parent, pl, msg, sizeof(msg)) != 0) return false;
    const char *owner = ds__cluster_owner(srv, parent, pl);
    if (owner == NULL || ds__holds_owns(srv, parent, pl)) return false;
    ds_pend_t *p = ds__pend_new(srv, r, nest_relay_finish);
    relay_t *x = p ? calloc(1, sizeof(*x)) : NULL;
    ds_job_t *j = NULL;
    if (x) {
        p->ext = x;
        p->ext_free = relay_free;
        p->keys = calloc(1, sizeof(*p->keys));
        p->keylens = calloc(1, sizeof(*p->keylens));
        if (p->keys && p->keylens && (p->keys[0] = malloc(pl + 1)) != NULL) {
            memcpy(p->keys[0], parent, pl);
            p->keys[0][pl] = '\0';
            p->keylens[0] = pl;
            p->n = 1;
            j = ds__job_new(p, owner, DS_OP_NEST_OWNED, nest_owned_done);
        }
    }
    if (j == NULL) {
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return true;
    }
    ds__wbuf_bytes(&j->req, r->meta, r->meta_len);
    ds__job_submit(srv, j);
    ds__pend_start(p);
    return true;
}

/* Holds collected while a NEST is applied: (key, delta) entries. */
typedef struct {
    uint32_t n, cap;
    char **keys;
    uint32_t *lens;
    int32_t *deltas;
} kids_t;

static void kids_free(kids_t *b)
{
    if (b == NULL) return;
    for (uint32_t i = 0; i < b->n; i++)
        free(b->keys[i]);
    free(b->keys);
    free(b->lens);
    free(b->deltas);
    free(b);
}

static void nest_hold_send(ds_server_t *srv, ds_pend_t *p, const char *owner, kids_t *b,
                           const bool *take, uint32_t cnt)
{
    ds_job_t *j = ds__job_new(p, owner, DS_OP_NEST_HOLD, quiet_done);
    if (j == NULL) return;
    ds__wbuf_u32(&j->req, cnt);
    for (uint32_t i = 0; i < b->n; i++)
        if (take[i]) {
            ds__wbuf_str(&j->req, b->keys[i], b->lens[i]);
            ds__wbuf_i32(&j->req, b->deltas[i]);
        }
    ds__job_submit(srv, j);
}

/* Sends each entry of b to its key's owner, one NEST_HOLD per owner,
 * counted in p (NULL: nobody waits). */
static void kids_send(ds_server_t *srv, ds_pend_t *p, kids_t *b)
{
    bool *done = calloc(b->n ? b->n : 1, sizeof(*done));
    bool *take = calloc(b->n ? b->n : 1, sizeof(*take));
    for (uint32_t a = 0; done && take && a < b->n; a++) {
        if (done[a]) continue;
        const char *owner = ds__cluster_owner(srv, b->keys[a], b->lens[a]);
        if (owner == NULL) continue;
        uint32_t cnt = 0;
        for (uint32_t c = a; c < b->n; c++) {
            const char *o2 = done[c] ? NULL : ds__cluster_owner(srv, b->keys[c], b->lens[c]);
            take[c] = o2 && strcmp(o2, owner) == 0;
            if (take[c]) {
                done[c] = true;
                cnt++;
            }
        }
        for (uint32_t c = 0; c < a; c++)
            take[c] = false;
        nest_hold_send(srv, p, owner, b, take, cnt);
    }
    free(done);
    free(take);
}

void ds__nest_kid_hold(ds_server_t *srv, void **batch, const char *key, uint32_t len, int32_t delta)
{
    kids_t one = {0}, *b = batch ? *batch : NULL;
    if (batch && b == NULL && (b = *batch = calloc(1, sizeof(*b))) == NULL) return;
    if (b == NULL) b = &one;
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 8;
        char **nk = realloc(b->keys, cap * sizeof(*nk));
        if (nk) b->keys = nk;
        uint32_t *nl = realloc(b->lens, cap * sizeof(*nl));
        if (nl) b->lens = nl;
        int32_t *nd = realloc(b->deltas, cap * sizeof(*nd));
        if (nd) b->deltas = nd;
        if (nk && nl && nd) b->cap = cap;
    }
    char *k = b->n < b->cap ? malloc(len ? len : 1) : NULL;
    if (k == NULL) {
        DS_LOG_WARN("cluster: out of memory holding nested key '%.*s'", (int)len, key);
    } else {
        memcpy(k, key, len);
        b->keys[b->n] = k;
        b->lens[b->n] = len;
        b->deltas[b->n++] = delta;
    }
    if (b != &one) return;
    kids_send(srv, NULL, &one);
    for (uint32_t i = 0; i < one.n; i++)
        free(one.keys[i]);
    free(one.keys);
    free(one.lens);
    free(one.deltas);
}

/* The NEST's answer, kept until the holds are at their owners. */
typedef struct {
    ds_status_t st;
    uint8_t *body;
    size_t len;
} answer_t;

static void answer_free(ds_server_t *srv, void *ext)
{
    (void)srv;
    answer_t *a = ext;
    free(a->body);
    free(a);
}

static void answer_finish(ds_pend_t *p)
{
    answer_t *a = p->ext;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_bytes(&w, a->body, a->len);
    ds__req_reply(p->req, a->st, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

void ds__nest_answer(ds_server_t *srv, void *batch, ds_req_t *r, ds_status_t st, ds_wbuf_t *w)
{
    kids_t *b = batch;
    ds_pend_t *p = b && b->n ? ds__pend_new(srv, r, answer_finish) : NULL;
    answer_t *a = p ? calloc(1, sizeof(*a)) : NULL;
    if (a && (a->body = malloc(w->len ? w->len : 1)) != NULL) {
        memcpy(a->body, w->buf, w->len);
        a->len = w->len;
        a->st = st;
        p->ext = a;
        p->ext_free = answer_free;
        kids_send(srv, p, b);
        ds__pend_start(p);
    } else {
        /* Nothing to wait for (or out of memory: the holds go unawaited). */
        free(a);
        if (p) ds__pend_free(p);
        if (b) kids_send(srv, NULL, b);
        ds__req_reply(r, st, w, NULL, 0, NULL, 0, -1);
    }
    kids_free(b);
}

static void op_nest_hold(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 9);
    ds_status_t first = DS_K_OK;
    char msg[256] = "", first_msg[256] = "";
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        int32_t delta = ds__rbuf_i32(&rb);
        if (rb.err) break;
        ds_status_t st = delta == 1 || delta == -1
                             ? ds__gref_nested(srv, k, kl, delta, msg, sizeof(msg))
                             : DS_K_INVALID;
        if (st != DS_K_OK && first == DS_K_OK) {
            first = st;
            snprintf(first_msg, sizeof(first_msg), "%s",
                     delta == 1 || delta == -1 ? msg : "malformed NEST_HOLD: delta not 1 or -1");
        }
    }
    if (rb.err)
        ds__req_error(r, DS_K_INVALID, "malformed NEST_HOLD");
    else
        ds__req_error(r, first, "%s", first_msg);
}

void ds__seal_peer_op(ds_server_t *srv, ds_req_t *r)
{
    switch (r->op) {
    case DS_OP_SEAL_OWNED:
        op_seal_owned(srv, r);
        break;
    case DS_OP_NEST_OWNED: {
        ds_rbuf_t rb;
        ds__rbuf_init(&rb, r->meta, r->meta_len);
        if (ds__rbuf_i32(&rb) != DS_GREF_NEST || rb.err) {
            ds__req_error(r, DS_K_INVALID, "malformed NEST_OWNED: not a NEST");
            break;
        }
        ds__ops_gref(srv, r);
        break;
    }
    default:
        op_nest_hold(srv, r);
    }
}
