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
 * through the owner checks its own mark. Marks are rebuilt at a new owner
 * after a ring change, and hinted again to members that joined (below,
 * "after a ring change").
 *
 * Nested references: a client's GREF NEST goes to the parent's owner
 * (NEST_OWNED), which keeps the parent's list of nested keys with the
 * parent's own counts (ops_read.c). A nested key owned elsewhere is held at
 * its owner (NEST_HOLD, delta 1): the parent's owner answers the NEST once
 * those owners have the holds, so a later decrease of the key's own
 * references through any worker finds it held. When the parent goes (its
 * last reference, through any worker, or a delete) its owner lets go of
 * them (NEST_HOLD, delta -1), and a key left with no reference and no hold
 * is deleted everywhere by its owner, and so on down. The parent's list
 * and the holds are rebuilt at new owners after a ring change (below). */
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
    /* No copy known: deleted, or its location not registered again yet
     * after a ring change; the mark stays until another version is seen. */
    if (!current(srv, k, kl, &loc, &version)) return false;
    if (version == (*pp)->version && strcmp(loc, (*pp)->loc) == 0) return true;
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
        p->status = calloc(n, sizeof(*p->status));
        ok = p->status && ds__pend_read_keys(p, &rb, n);
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
        } else if (ds__rebuild_pending(srv, k, kl, msg, sizeof(msg))) {
            st = DS_K_TRY_AGAIN;
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
        ds_job_t *j = ds__job_new_indexed(p, owner, DS_OP_SEAL_OWNED, seal_owned_done, n);
        if (j == NULL) {
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
        ds_status_t st = ds__rebuild_pending(srv, p->keys[i], p->keylens[i], msg, sizeof(msg))
                             ? DS_K_TRY_AGAIN
                             : owner_mark(srv, p->keys[i], p->keylens[i], msg, sizeof(msg));
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
    if (ds__rebuild_pending(srv, parent, pl, msg, sizeof(msg))) {
        ds__req_error(r, DS_K_TRY_AGAIN, "%s", msg);
        return true;
    }
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

/* Holds collected while a NEST is applied: (key, delta, parent) entries,
 * each key's allocation followed by its parent's bytes. */
typedef struct {
    uint32_t n, cap;
    char **keys;
    uint32_t *lens, *plens;
    int32_t *deltas;
} kids_t;

static void kids_free(kids_t *b)
{
    if (b == NULL) return;
    for (uint32_t i = 0; i < b->n; i++)
        free(b->keys[i]);
    free(b->keys);
    free(b->lens);
    free(b->plens);
    free(b->deltas);
    free(b);
}

static void nest_hold_send(ds_server_t *srv, ds_pend_t *p, const char *owner, kids_t *b,
                           const bool *take, uint32_t cnt, bool rebuild)
{
    ds_job_t *j = ds__job_new(p, owner, DS_OP_NEST_HOLD, quiet_done);
    if (j == NULL) return;
    ds__wbuf_u32(&j->req, cnt);
    for (uint32_t i = 0; i < b->n; i++)
        if (take[i]) {
            ds__wbuf_str(&j->req, b->keys[i], b->lens[i]);
            ds__wbuf_i32(&j->req, b->deltas[i]);
            ds__wbuf_str(&j->req, b->keys[i] + b->lens[i], b->plens[i]);
        }
    if (rebuild)
        ds__rebuild_submit(srv, j);
    else
        ds__job_submit(srv, j);
}

/* Where a parent's hold on key is told: the key's owner, or, for a key
 * owned here (as its parent is), the worker that owns it should this one
 * leave, which keeps it as a second record (NULL: none). */
static const char *hold_at(ds_server_t *srv, const char *k, uint32_t kl)
{
    const char *owner = ds__cluster_owner(srv, k, kl);
    if (owner == NULL || strcmp(owner, ds__cluster_self(srv)) != 0) return owner;
    return ds__cluster_backup(srv, k, kl);
}

/* Sends each entry of b where its hold is kept (hold_at), one NEST_HOLD
 * per worker, counted in p (NULL: nobody waits); rebuild: the entries are
 * a ring change's rebuild. */
static void kids_send(ds_server_t *srv, ds_pend_t *p, kids_t *b, bool rebuild)
{
    bool *done = calloc(b->n ? b->n : 1, sizeof(*done));
    bool *take = calloc(b->n ? b->n : 1, sizeof(*take));
    for (uint32_t a = 0; done && take && a < b->n; a++) {
        if (done[a]) continue;
        const char *owner = hold_at(srv, b->keys[a], b->lens[a]);
        if (owner == NULL) continue;
        uint32_t cnt = 0;
        for (uint32_t c = a; c < b->n; c++) {
            const char *o2 = done[c] ? NULL : hold_at(srv, b->keys[c], b->lens[c]);
            take[c] = o2 && strcmp(o2, owner) == 0;
            if (take[c]) {
                done[c] = true;
                cnt++;
            }
        }
        for (uint32_t c = 0; c < a; c++)
            take[c] = false;
        nest_hold_send(srv, p, owner, b, take, cnt, rebuild);
    }
    free(done);
    free(take);
}

void ds__nest_kid_hold(ds_server_t *srv, void **batch, const char *parent, uint32_t pl,
                       const char *key, uint32_t len, int32_t delta)
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
        uint32_t *np = realloc(b->plens, cap * sizeof(*np));
        if (np) b->plens = np;
        int32_t *nd = realloc(b->deltas, cap * sizeof(*nd));
        if (nd) b->deltas = nd;
        if (nk && nl && np && nd) b->cap = cap;
    }
    char *k = b->n < b->cap ? malloc(len + pl ? len + pl : 1) : NULL;
    if (k == NULL) {
        DS_LOG_WARN("cluster: out of memory holding nested key '%.*s'", (int)len, key);
    } else {
        memcpy(k, key, len);
        memcpy(k + len, parent, pl);
        b->keys[b->n] = k;
        b->lens[b->n] = len;
        b->plens[b->n] = pl;
        b->deltas[b->n++] = delta;
    }
    if (b != &one) return;
    kids_send(srv, NULL, &one, false);
    for (uint32_t i = 0; i < one.n; i++)
        free(one.keys[i]);
    free(one.keys);
    free(one.lens);
    free(one.plens);
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
        kids_send(srv, p, b, false);
        ds__pend_start(p);
    } else {
        /* Nothing to wait for (or out of memory: the holds go unawaited). */
        free(a);
        if (p) ds__pend_free(p);
        if (b) kids_send(srv, NULL, b, false);
        ds__req_reply(r, st, w, NULL, 0, NULL, 0, -1);
    }
    kids_free(b);
}

static void op_nest_hold(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 13);
    ds_status_t first = DS_K_OK;
    char msg[256] = "", first_msg[256] = "";
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k, *parent;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        int32_t delta = ds__rbuf_i32(&rb);
        uint32_t pl = ds__rbuf_str(&rb, &parent);
        if (rb.err) break;
        ds_status_t st = delta == 1 || delta == -1
                             ? ds__gref_nested(srv, k, kl, parent, pl, delta, msg, sizeof(msg))
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

/* ---- seals and nested holds after a ring change ----
 *
 * A seal mark lives at the key's owner; it is rebuilt from the workers that
 * know it when the owner changes (OWNER_REBUILD to the new owner): each
 * worker holding a sealed copy (its object's sealed flag, set by a SEAL
 * through it or by the owner's seal hint) and the old owner while it is
 * alive (its mark). The new owner records the mark and hints the key to
 * every member; an owner that keeps a mark hints it again on every ring
 * change, so a worker that joined learns it.
 *
 * A parent's list of nested keys lives at the parent's owner, and each
 * hold on a key owned elsewhere at that key's owner, naming the parent. So
 * when the parent's owner changes, each key's owner tells the new one that
 * the parent holds it (OWNER_REBUILD), and the list is rebuilt without
 * taking the holds again; when a key's owner changes, the parent's owner
 * takes the hold again there (NEST_HOLD, once per parent). A key owned by
 * the same worker as its parent has no second record: when that worker
 * dies the key is no longer held (it stays until deleted). */

enum { REBUILD_SEAL = 0, REBUILD_NEST = 1, REBUILD_HINT = 2 };

typedef struct {
    ds_server_t *srv;
    const ds_ring_t *old;
    uint8_t what;
    ds_job_t *jobs[DS_MAX_MEMBERS];
    uint32_t counts[DS_MAX_MEMBERS];
    size_t count_at[DS_MAX_MEMBERS];
    uint32_t total;
} rebuild_t;

static void rebuild_flush(rebuild_t *rb, size_t i)
{
    ds_job_t *j = rb->jobs[i];
    if (j == NULL) return;
    uint32_t c = rb->counts[i];
    memcpy(j->req.buf + rb->count_at[i], &c, sizeof(c)); /* wire fields are little-endian */
    ds__rebuild_submit(rb->srv, j);
    rb->jobs[i] = NULL;
    rb->counts[i] = 0;
}

/* Adds an entry for `to`: (k, b, version) as rb->what has it (b: the
 * sealed copy's location, the nested key, unused for a hint). */
static void rebuild_add(rebuild_t *rb, const char *to, const char *k, uint32_t kl, const char *b,
                        uint32_t bl, uint64_t version)
{
    size_t i = 0;
    while (i < DS_MAX_MEMBERS && rb->jobs[i] && strcmp(rb->jobs[i]->addr, to) != 0)
        i++;
    if (i == DS_MAX_MEMBERS) { /* more owners than jobs: send one and reuse it */
        rebuild_flush(rb, 0);
        i = 0;
    }
    if (rb->jobs[i] && rb->counts[i] >= DS_MAX_BATCH) rebuild_flush(rb, i);
    if (rb->jobs[i] == NULL) {
        uint16_t op = rb->what == REBUILD_HINT ? DS_OP_LATCH_HINT : DS_OP_OWNER_REBUILD;
        ds_job_t *j = ds__job_new(NULL, to, op, quiet_done);
        if (j == NULL) return;
        if (op == DS_OP_OWNER_REBUILD) ds__wbuf_u8(&j->req, rb->what);
        rb->count_at[i] = j->req.len;
        ds__wbuf_u32(&j->req, 0);
        rb->jobs[i] = j;
    }
    ds_job_t *j = rb->jobs[i];
    ds__wbuf_str(&j->req, k, kl);
    if (rb->what == REBUILD_HINT) {
        ds__wbuf_u32(&j->req, SEAL_HINT_MS);
    } else {
        ds__wbuf_str(&j->req, b, bl);
        if (rb->what == REBUILD_SEAL) ds__wbuf_u64(&j->req, version);
    }
    rb->counts[i]++;
    rb->total++;
}

static void rebuild_done(rebuild_t *rb)
{
    for (size_t i = 0; i < DS_MAX_MEMBERS; i++)
        rebuild_flush(rb, i);
}

static bool is_self_addr(ds_server_t *srv, const char *addr)
{
    return strcmp(addr, ds__cluster_self(srv)) == 0;
}

/* The key's owner now, when it changed with the ring (NULL: unchanged). */
static const char *owner_moved(ds_server_t *srv, const ds_ring_t *old, const char *k, uint32_t kl)
{
    const char *owner = ds__cluster_owner(srv, k, kl);
    const char *was = old ? ds__ring_owner(old, k, kl) : NULL;
    return owner == NULL || (was && strcmp(was, owner) == 0) ? NULL : owner;
}

/* Records the mark (loc, version) of a key owned here, unless a mark is
 * there already; true when it is new. */
static bool mark_put(ds_server_t *srv, const char *k, uint32_t kl, const char *loc,
                     uint64_t version)
{
    ds_seals_t *s = seals(srv);
    if (s == NULL || *seal_find(s, SEAL_MARK, k, kl) != NULL) return false;
    seal_t *x = seal_put(s, SEAL_MARK, k, kl);
    if (x == NULL) return false;
    x->version = version;
    snprintf(x->loc, sizeof(x->loc), "%s", loc);
    return true;
}

/* Hints each key of the list (marks owned here) to every other member. */
static void marks_hint(ds_server_t *srv, const char *const *keys, const uint32_t *lens, uint32_t n)
{
    if (n == 0) return;
    const char *peers[DS_MAX_MEMBERS];
    size_t np = ds__cluster_peers(srv, peers, DS_MAX_MEMBERS);
    rebuild_t *rb = calloc(1, sizeof(*rb));
    if (rb == NULL) return;
    rb->srv = srv;
    rb->what = REBUILD_HINT;
    for (size_t m = 0; m < np; m++) {
        for (uint32_t i = 0; i < n; i++)
            rebuild_add(rb, peers[m], keys[i], lens[i], NULL, 0, 0);
        rebuild_done(rb);
    }
    free(rb);
}

static void sealed_copy(void *ctx, ds_obj_t *o)
{
    rebuild_t *rb = ctx;
    if (!o->sealed) return;
    const char *owner = owner_moved(rb->srv, rb->old, o->key, o->keylen);
    if (owner == NULL) return;
    const char *self = ds__cluster_self(rb->srv);
    if (is_self_addr(rb->srv, owner)) {
        if (mark_put(rb->srv, o->key, o->keylen, self, o->version)) {
            const char *k = o->key;
            uint32_t kl = (uint32_t)o->keylen;
            marks_hint(rb->srv, &k, &kl, 1);
        }
        return;
    }
    rebuild_add(rb, owner, o->key, o->keylen, self, (uint32_t)strlen(self), o->version);
}

static void seals_ring_changed(ds_server_t *srv, rebuild_t *rb)
{
    rb->what = REBUILD_SEAL;
    ds__store_foreach(srv->store, sealed_copy, rb);
    ds_seals_t *s = *ds__cluster_seals(srv);
    uint32_t cap = s ? s->n : 0, nkept = 0;
    const char **keys = cap ? calloc(cap, sizeof(*keys)) : NULL;
    uint32_t *lens = cap ? calloc(cap, sizeof(*lens)) : NULL;
    for (uint32_t b = 0; s && b < SEAL_BUCKETS; b++)
        for (seal_t **pp = &s->b[b]; *pp;) {
            seal_t *x = *pp;
            if (x->kind != SEAL_MARK) {
                pp = &x->next;
                continue;
            }
            const char *owner = ds__cluster_owner(srv, x->key, x->len);
            if (owner != NULL && !is_self_addr(srv, owner)) {
                /* Owned elsewhere now: the mark moves there. */
                rebuild_add(rb, owner, x->key, x->len, x->loc, (uint32_t)strlen(x->loc),
                            x->version);
                seal_drop(s, pp);
                continue;
            }
            if (keys && lens && nkept < cap) {
                keys[nkept] = x->key;
                lens[nkept++] = x->len;
            }
            pp = &x->next;
        }
    rebuild_done(rb);
    marks_hint(srv, keys, lens, nkept);
    free(keys);
    free(lens);
}

/* Nested holds seen in a walk of the reference table; what is done here
 * waits for the walk's end (it changes the table). */
typedef struct {
    ds_server_t *srv;
    const ds_ring_t *old;
    ds_ring_t *old_others; /* the old ring without this worker */
    rebuild_t *rb;
    void *remote; /* NEST_HOLDs to send (kid_hold's batch) */
    void *local;  /* (kid, delta, parent): delta 1 hold here, 0 adopt here */
    uint32_t moved;
} nest_walk_t;

/* A kid that was owned here: where its second record was kept (the old
 * ring's owner without this worker), when that is still a member and not
 * `except`; the record is let go there. */
static void second_drop(nest_walk_t *w, const char *parent, uint32_t pl, const char *kid,
                        uint32_t kl, const char *except)
{
    const char *was = w->old_others ? ds__ring_owner(w->old_others, kid, kl) : NULL;
    if (was == NULL || (except && strcmp(was, except) == 0) ||
        !ds__ring_has(ds__cluster_ring(w->srv), was))
        return;
    kids_t one = {0};
    char *k = malloc(kl + pl ? kl + pl : 1);
    char *keys[1] = {k};
    uint32_t lens[1] = {kl}, plens[1] = {pl};
    int32_t deltas[1] = {-1};
    bool take[1] = {true};
    if (k == NULL) return;
    memcpy(k, kid, kl);
    memcpy(k + kl, parent, pl);
    one.n = one.cap = 1;
    one.keys = keys;
    one.lens = lens;
    one.plens = plens;
    one.deltas = deltas;
    nest_hold_send(w->srv, NULL, was, &one, take, 1, true);
    free(k);
}

/* A parent owned here lists kid: a kid whose owner changed is held again
 * at its new owner; a kid owned here, as its parent is, keeps its second
 * record at the worker that would own it should this one leave. */
static void walk_kid(void *ctx, const char *parent, uint32_t pl, const char *kid, uint32_t kl)
{
    nest_walk_t *w = ctx;
    if (!ds__holds_owns(w->srv, parent, pl)) return;
    const char *owner = owner_moved(w->srv, w->old, kid, kl);
    bool mine = ds__holds_owns(w->srv, kid, kl);
    const char *was_own = w->old ? ds__ring_owner(w->old, kid, kl) : NULL;
    bool was_mine = was_own && is_self_addr(w->srv, was_own);
    if (owner == NULL) {
        if (!mine) return;
        const char *now2 = ds__cluster_backup(w->srv, kid, kl);
        const char *was2 = w->old_others ? ds__ring_owner(w->old_others, kid, kl) : NULL;
        if (now2 == NULL || (was2 && strcmp(now2, was2) == 0)) return;
        w->moved++;
        ds__nest_kid_hold(w->srv, &w->remote, parent, pl, kid, kl, 1);
        second_drop(w, parent, pl, kid, kl, now2);
        return;
    }
    w->moved++;
    ds__nest_kid_hold(w->srv, mine ? &w->local : &w->remote, parent, pl, kid, kl, 1);
    if (mine) ds__nest_kid_hold(w->srv, &w->remote, parent, pl, kid, kl, 1); /* its second record */
    if (was_mine) second_drop(w, parent, pl, kid, kl, owner);
}

/* A parent owned elsewhere holds kid here: a parent whose owner changed
 * learns it again at its new owner. */
static void walk_parent(void *ctx, const char *parent, uint32_t pl, const char *kid, uint32_t kl)
{
    nest_walk_t *w = ctx;
    const char *owner = owner_moved(w->srv, w->old, parent, pl);
    if (owner == NULL) return;
    w->moved++;
    bool kid_mine = ds__holds_owns(w->srv, kid, kl);
    if (is_self_addr(w->srv, owner)) {
        ds__nest_kid_hold(w->srv, &w->local, parent, pl, kid, kl, 0);
        /* Parent and kid owned here now: the kid's second record. */
        if (kid_mine) ds__nest_kid_hold(w->srv, &w->remote, parent, pl, kid, kl, 1);
        return;
    }
    rebuild_add(w->rb, owner, parent, pl, kid, kl, 0);
    /* The parent went elsewhere: the kid owned here needs no second record. */
    const char *was = w->old ? ds__ring_owner(w->old, parent, pl) : NULL;
    if (kid_mine && was && is_self_addr(w->srv, was)) second_drop(w, parent, pl, kid, kl, NULL);
}

static void nests_ring_changed(ds_server_t *srv, rebuild_t *rb)
{
    nest_walk_t w = {.srv = srv, .old = rb->old, .rb = rb};
    size_t no = rb->old ? ds__ring_size(rb->old) : 0, nk = 0;
    const char **others = malloc((no ? no : 1) * sizeof(*others));
    for (size_t i = 0; others && i < no; i++)
        if (!is_self_addr(srv, ds__ring_member(rb->old, i)))
            others[nk++] = ds__ring_member(rb->old, i);
    w.old_others = others ? ds__ring_build(others, nk) : NULL;
    free(others);
    rb->what = REBUILD_NEST;
    ds__grefs_walk(srv, walk_kid, walk_parent, &w);
    rebuild_done(rb);
    kids_t *loc = w.local;
    for (uint32_t i = 0; loc && i < loc->n; i++) {
        const char *kid = loc->keys[i], *parent = kid + loc->lens[i];
        char msg[256];
        if (loc->deltas[i] == 0)
            ds__gref_adopt(srv, parent, loc->plens[i], kid, loc->lens[i]);
        else
            (void)ds__gref_nested(srv, kid, loc->lens[i], parent, loc->plens[i], 1, msg,
                                  sizeof(msg));
    }
    kids_free(loc);
    if (w.remote) kids_send(srv, NULL, w.remote, true);
    kids_free(w.remote);
    ds__ring_free(w.old_others);
    if (w.moved) DS_LOG_INFO("cluster: %u nested holds told to new owners", w.moved);
}

void ds__seal_ring_changed(ds_server_t *srv, const ds_ring_t *old_ring)
{
    rebuild_t *rb = calloc(1, sizeof(*rb));
    if (rb == NULL) return;
    rb->srv = srv;
    rb->old = old_ring;
    seals_ring_changed(srv, rb);
    uint32_t sealed = rb->total;
    nests_ring_changed(srv, rb);
    if (sealed) DS_LOG_INFO("cluster: %u seals handed to their new owners", sealed);
    free(rb);
}

uint32_t ds__seal_marks(ds_server_t *srv)
{
    ds_seals_t *s = *ds__cluster_seals(srv);
    uint32_t n = 0;
    for (uint32_t b = 0; s && b < SEAL_BUCKETS; b++)
        for (seal_t *x = s->b[b]; x; x = x->next)
            n += x->kind == SEAL_MARK;
    return n;
}

void ds__seal_hinted(ds_server_t *srv, const char *key, uint32_t len)
{
    ds_obj_t *o = ds__store_lookup(srv->store, key, len, ds__now_ms());
    if (o) o->sealed = 1;
}

/* The new owner's side: seal marks recorded and hinted to every member;
 * parents' nested keys listed. */
static void op_owner_rebuild(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint8_t what = ds__rbuf_u8(&rb);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 8);
    if (!rb.err && what != REBUILD_SEAL && what != REBUILD_NEST) {
        ds__req_error(r, DS_K_INVALID, "malformed OWNER_REBUILD: unknown kind %u", what);
        return;
    }
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    uint32_t *lens = calloc(n ? n : 1, sizeof(*lens));
    uint32_t nnew = 0;
    for (uint32_t i = 0; i < n && !rb.err; i++) {
        const char *k, *b;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint32_t bl = ds__rbuf_str(&rb, &b);
        uint64_t version = what == REBUILD_SEAL ? ds__rbuf_u64(&rb) : 0;
        char msg[256], at[300];
        /* Not checked against the ring: the sender may have seen the ring
         * change first (a mark of a key owned elsewhere moves on with the
         * next change). */
        if (rb.err || ds__key_check(k, kl, msg, sizeof(msg)) != 0) continue;
        if (what == REBUILD_NEST) {
            ds__gref_adopt(srv, k, kl, b, bl);
            continue;
        }
        if (bl == 0 || bl >= sizeof(at)) continue;
        memcpy(at, b, bl);
        at[bl] = '\0';
        if (mark_put(srv, k, kl, at, version) && keys && lens) {
            keys[nnew] = k;
            lens[nnew++] = kl;
        }
    }
    if (!rb.err) marks_hint(srv, keys, lens, nnew);
    free(keys);
    free(lens);
    if (rb.err)
        ds__req_error(r, DS_K_INVALID, "malformed OWNER_REBUILD");
    else
        ds__req_error(r, DS_K_OK, "%s", "");
}

void ds__seal_peer_op(ds_server_t *srv, ds_req_t *r)
{
    switch (r->op) {
    case DS_OP_SEAL_OWNED:
        op_seal_owned(srv, r);
        break;
    case DS_OP_OWNER_REBUILD:
        op_owner_rebuild(srv, r);
        break;
    case DS_OP_NEST_OWNED: {
        ds_rbuf_t rb;
        ds__rbuf_init(&rb, r->meta, r->meta_len);
        if (ds__rbuf_i32(&rb) != DS_GREF_NEST || rb.err) {
            ds__req_error(r, DS_K_INVALID, "malformed NEST_OWNED: not a NEST");
            break;
        }
        (void)ds__rbuf_u32(&rb);
        const char *parent;
        uint32_t pl = ds__rbuf_str(&rb, &parent);
        char msg[256];
        if (!rb.err && ds__rebuild_pending(srv, parent, pl, msg, sizeof(msg))) {
            ds__req_error(r, DS_K_TRY_AGAIN, "%s", msg);
            break;
        }
        ds__ops_gref(srv, r);
        break;
    }
    default:
        op_nest_hold(srv, r);
    }
}
