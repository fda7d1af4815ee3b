/* READ (a range of a value, Yuanrong's KVClient.Read) and GREF (global
 * reference counts, Yuanrong's ObjectClient.g_increase_ref /
 * g_decrease_ref / query_global_ref_num). Layouts in common/wire.h. In a
 * cluster a key's counts are kept by its ring owner: the cluster forwards
 * GREFs there (cluster_hold.c) and the owner applies them here for holders
 * that are other workers' sessions. */
#include "worker/ops/ops_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- READ ---- */

void ds__ops_read(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    /* each entry is at least a 4-byte length, one key byte and two u64 */
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 21);
    if (rb.err || n == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed READ: %u ranges (allowed 1..%u)", n,
                      DS_MAX_BATCH);
        return;
    }
    bool shm_ok = r->session && r->session->shm;
    struct iovec *segs = malloc(n * sizeof(*segs));
    ds_obj_t **refs = malloc(n * sizeof(*refs));
    if (segs == NULL || refs == NULL) {
        free(segs);
        free(refs);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    uint32_t nseg = 0, found = 0;
    ds_status_t first = DS_K_OK;
    char msg[256], first_msg[256] = "";
    uint64_t now = ds__now_ms();
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint64_t off = ds__rbuf_u64(&rb);
        uint64_t size = ds__rbuf_u64(&rb);
        ds_status_t st = DS_K_OK;
        ds_obj_t *o = NULL;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed READ: range %u truncated", i);
            st = DS_K_INVALID;
        } else if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if ((o = ds__store_lookup(srv->store, k, kl, now)) == NULL) {
            snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)kl, k);
            st = DS_K_NOT_FOUND;
        } else if (off > o->size) {
            snprintf(msg, sizeof(msg),
                     "offset %" PRIu64 " of key '%.*s' is beyond its size %" PRIu64, off, (int)kl,
                     k, o->size);
            st = DS_K_INVALID;
        }
        ds__wbuf_u32(&w, (uint32_t)st);
        if (st != DS_K_OK) {
            if (first == DS_K_OK) {
                first = st;
                snprintf(first_msg, sizeof(first_msg), "%s", msg);
            }
            ds__wbuf_u8(&w, DS_VAL_MISSING);
            ds__wbuf_u64(&w, 0);
            continue;
        }
        /* size 0: to the end; a range past the end is cut there */
        uint64_t len = o->size - off;
        if (size != 0 && size < len) len = size;
        found++;
        ds__store_ref(o);
        if (shm_ok) {
            /* The pin holds the whole value; the client sees the range. */
            uint64_t handle = ds__session_add(r->session, o, 0);
            if (handle != 0) {
                ds__wbuf_u8(&w, DS_VAL_SHM);
                ds__wbuf_u64(&w, len);
                ds__wbuf_u64(&w, ds__store_offset(srv->store, o) + off);
                ds__wbuf_u64(&w, handle);
                continue;
            }
        }
        ds__wbuf_u8(&w, DS_VAL_INLINE);
        ds__wbuf_u64(&w, len);
        segs[nseg].iov_base = ds__store_data(srv->store, o) + off;
        segs[nseg].iov_len = len;
        refs[nseg++] = o;
    }
    ds_status_t overall = found ? DS_K_OK : first;
    if (first != DS_K_OK) ds__ops_lead_error(&w, first_msg);
    ds__ops_reply_values(srv, r, overall, &w, segs, refs, nseg);
    free(segs);
    free(refs);
}

/* ---- GREF: global reference counts ---- */

/* A count per key, in a chained hash the worker owns (the object table
 * holds versions; a count outlives overwrites and may precede the put).
 *
 * Nested references (Yuanrong's publish(nested_object_keys)): a parent
 * holds each of its nested keys, counted in the child's `nested`, apart
 * from the clients' `count` (query_global_ref_num reports only `count`).
 * An entry goes, and its object is deleted, when both reach 0; a parent
 * that goes drops its holds, which may let its children go in turn.
 *
 * References are per client (session), as Yuanrong's: `count` is the sum
 * of the entry's holders' counts; a client decreases only references it
 * added, and when its session ends the worker drops all of them
 * (Yuanrong's ReleaseGRefs), which may delete objects. Sessions that hold
 * references are on a list with how many keys each holds, so a session
 * holding none ends at no cost; one holding some costs a pass over the
 * entries. */
typedef struct gholder {
    struct gholder *next;
    const void *session;
    uint32_t n;
} gholder_t;

typedef struct gref {
    struct gref *next;
    uint32_t count, keylen;
    uint32_t nested;   /* holds of parents */
    uint32_t nparents; /* parents owned elsewhere among them, in parents */
    uint32_t parents_len;
    char *parents;      /* nparents * (u32 length, bytes): a parent's owner holds once */
    uint32_t nkids;     /* keys this one holds, in kids */
    uint32_t kids_len;  /* bytes of kids */
    bool touched;       /* a session's end took references from it */
    char *kids;         /* nkids * (u32 length, bytes), one allocation */
    gholder_t *holders; /* who holds count */
    char key[];
} gref_t;

typedef struct gsess {
    struct gsess *next;
    const void *session;
    uint32_t keys; /* entries it holds references on */
} gsess_t;

struct ds_grefs {
    gref_t **b;
    uint32_t nb, n;
    gsess_t *sessions;
};

static gsess_t **gsess_find(struct ds_grefs *g, const void *session)
{
    gsess_t **pp = &g->sessions;
    while (*pp && (*pp)->session != session)
        pp = &(*pp)->next;
    return pp;
}

static void free_holders(gholder_t *h)
{
    while (h) {
        gholder_t *nx = h->next;
        free(h);
        h = nx;
    }
}

/* The object of a key whose references all went: deleted here, or in a
 * cluster (this worker is the key's owner) on every worker. */
static void gref_delete_obj(ds_server_t *srv, const char *k, uint32_t kl)
{
    if (srv->remote && srv->remote->gref_gone)
        srv->remote->gref_gone(srv, k, kl);
    else
        ds__store_delete(srv->store, k, kl);
}

static gref_t **gref_find(struct ds_grefs *g, const char *k, uint32_t kl)
{
    gref_t **pp = &g->b[ds__murmur3_32(k, kl, 0x9e3779b9u) & (g->nb - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->keylen == kl && memcmp((*pp)->key, k, kl) == 0) return pp;
    return pp;
}

static int gref_grow(struct ds_grefs *g)
{
    uint32_t nb = g->nb ? g->nb * 2 : 64;
    gref_t **b = calloc(nb, sizeof(*b));
    if (b == NULL) return -1;
    for (uint32_t i = 0; i < g->nb; i++)
        for (gref_t *e = g->b[i], *nx; e; e = nx) {
            nx = e->next;
            gref_t **pp = &b[ds__murmur3_32(e->key, e->keylen, 0x9e3779b9u) & (nb - 1)];
            e->next = *pp;
            *pp = e;
        }
    free(g->b);
    g->b = b;
    g->nb = nb;
    return 0;
}

void ds__ops_grefs_free(ds_server_t *srv)
{
    struct ds_grefs *g = srv->grefs;
    if (g == NULL) return;
    for (uint32_t i = 0; i < g->nb; i++)
        for (gref_t *e = g->b[i], *nx; e; e = nx) {
            nx = e->next;
            free_holders(e->holders);
            free(e->kids);
            free(e->parents);
            free(e);
        }
    while (g->sessions) {
        gsess_t *nx = g->sessions->next;
        free(g->sessions);
        g->sessions = nx;
    }
    free(g->b);
    free(g);
    srv->grefs = NULL;
}

/* A new entry for k (count and nested 0), or NULL when out of memory. */
static gref_t *gref_new(struct ds_grefs *g, const char *k, uint32_t kl)
{
    if (g->n >= g->nb && gref_grow(g) != 0) return NULL;
    gref_t *e = calloc(1, sizeof(*e) + kl);
    if (e == NULL) return NULL;
    memcpy(e->key, k, kl);
    e->keylen = kl;
    gref_t **pp = gref_find(g, k, kl);
    e->next = *pp;
    *pp = e;
    g->n++;
    return e;
}

/* In a cluster a key's counts and holds are at its owner: a kid owned
 * elsewhere is held there (kid_hold), with no entry here. */
static bool kid_remote(ds_server_t *srv, const char *k, uint32_t kl)
{
    return srv->remote && srv->remote->owns && srv->remote->kid_hold &&
           !srv->remote->owns(srv, k, kl);
}

/* Whether the kids blob (nkids * (u32 length, bytes)) names k. */
static bool kids_have(const char *q, uint32_t nkids, const char *k, uint32_t kl)
{
    for (uint32_t i = 0; q && i < nkids; i++) {
        uint32_t l;
        memcpy(&l, q, sizeof(l));
        if (l == kl && memcmp(q + sizeof(l), k, kl) == 0) return true;
        q += sizeof(l) + l;
    }
    return false;
}

/* Removes k from the blob (n entries of u32 length, bytes; len bytes in
 * all): true when it was there. */
static bool blob_remove(char *q, uint32_t *n, uint32_t *len, const char *k, uint32_t kl)
{
    char *u = q;
    for (uint32_t i = 0; u && i < *n; i++) {
        uint32_t l;
        memcpy(&l, u, sizeof(l));
        size_t sz = sizeof(l) + l;
        if (l == kl && memcmp(u + sizeof(l), k, kl) == 0) {
            memmove(u, u + sz, (size_t)(q + *len - (u + sz)));
            *len -= (uint32_t)sz;
            (*n)--;
            return true;
        }
        u += sz;
    }
    return false;
}

/* Appends k to the blob; false when out of memory. */
static bool blob_add(char **q, uint32_t *n, uint32_t *len, const char *k, uint32_t kl)
{
    char *nq = realloc(*q, *len + sizeof(uint32_t) + kl);
    if (nq == NULL) return false;
    memcpy(nq + *len, &kl, sizeof(kl));
    memcpy(nq + *len + sizeof(kl), k, kl);
    *q = nq;
    *len += (uint32_t)(sizeof(kl) + kl);
    (*n)++;
    return true;
}

/* Drops the holds of the detached entries on the list todo (linked by
 * next) on their kids and frees them; a kid left with no count and no hold
 * goes too (its object deleted), and so on down, with a work list rather
 * than recursion (chains of parents may be long). Kids owned elsewhere are
 * let go at their owners (batch: kid_hold's). */
static void gref_release_kids(ds_server_t *srv, gref_t *todo, void **batch)
{
    struct ds_grefs *g = srv->grefs;
    while (todo) {
        gref_t *p = todo;
        todo = p->next;
        const char *q = p->kids;
        for (uint32_t i = 0; i < p->nkids; i++) {
            uint32_t kl;
            memcpy(&kl, q, sizeof(kl));
            const char *k = q + sizeof(kl);
            q = k + kl;
            if (kid_remote(srv, k, kl)) {
                srv->remote->kid_hold(srv, batch, p->key, p->keylen, k, kl, -1);
                continue;
            }
            gref_t **cp = gref_find(g, k, kl);
            gref_t *c = *cp;
            if (c == NULL || c->nested == 0 ||
                !blob_remove(c->parents, &c->nparents, &c->parents_len, p->key, p->keylen))
                continue;
            /* A kid owned here too: its second record goes (kid_hold). */
            if (srv->remote && srv->remote->kid_hold)
                srv->remote->kid_hold(srv, batch, p->key, p->keylen, k, kl, -1);
            if (--c->nested > 0 || c->count > 0) continue;
            *cp = c->next;
            g->n--;
            gref_delete_obj(srv, c->key, c->keylen);
            c->next = todo;
            todo = c;
        }
        free_holders(p->holders);
        free(p->kids);
        free(p->parents);
        free(p);
    }
}

/* Removes the entry at *pp (its count and nested are 0), deletes its object
 * and releases its kids. */
static void gref_gone(ds_server_t *srv, gref_t **pp)
{
    struct ds_grefs *g = srv->grefs;
    gref_t *e = *pp;
    *pp = e->next;
    g->n--;
    gref_delete_obj(srv, e->key, e->keylen);
    e->next = NULL;
    gref_release_kids(srv, e, NULL);
}

ds_status_t ds__gref_apply(ds_server_t *srv, const void *session, const char *k, uint32_t kl,
                           int32_t delta, uint32_t *count, char *msg, size_t cap)
{
    *count = 0;
    if (ds__key_check(k, kl, msg, cap) != 0) return DS_K_INVALID;
    struct ds_grefs *g = srv->grefs;
    if (g == NULL && (g = srv->grefs = calloc(1, sizeof(*g))) == NULL) goto oom;
    if (g->nb == 0 && gref_grow(g) != 0) goto oom;
    gref_t **pp = gref_find(g, k, kl);
    gref_t *e = *pp;
    *count = e ? e->count : 0;
    if (delta == 0) return DS_K_OK;
    if (delta < 0) {
        if (e == NULL) {
            snprintf(msg, cap, "key '%.*s' has no global reference", (int)kl, k);
            return DS_K_NOT_FOUND;
        }
        gholder_t **hp = &e->holders;
        while (*hp && (*hp)->session != session)
            hp = &(*hp)->next;
        if (*hp == NULL) {
            snprintf(msg, cap, "key '%.*s' has no global reference of this client", (int)kl, k);
            return DS_K_NOT_FOUND;
        }
        if (--(*hp)->n == 0) {
            gholder_t *h = *hp;
            *hp = h->next;
            free(h);
            gsess_t **sp = gsess_find(g, session);
            if (*sp && --(*sp)->keys == 0) {
                gsess_t *gs = *sp;
                *sp = gs->next;
                free(gs);
            }
        }
        if (--e->count > 0 || e->nested > 0) {
            *count = e->count;
            return DS_K_OK;
        }
        /* The last reference: the object goes with it. */
        *count = 0;
        gref_gone(srv, pp);
        return DS_K_OK;
    }
    if (e && e->count == UINT32_MAX) {
        snprintf(msg, cap, "key '%.*s' has too many global references", (int)kl, k);
        return DS_K_INVALID;
    }
    gholder_t *h = NULL;
    if (e)
        for (h = e->holders; h && h->session != session; h = h->next)
            ;
    if (h == NULL) {
        /* This client's first reference on the key. */
        gsess_t **sp = gsess_find(g, session);
        if (*sp == NULL && (*sp = calloc(1, sizeof(**sp))) != NULL) (*sp)->session = session;
        if (*sp == NULL || (h = calloc(1, sizeof(*h))) == NULL) goto oom;
        if (e == NULL && (e = gref_new(g, k, kl)) == NULL) {
            free(h);
            goto oom;
        }
        (*sp)->keys++;
        h->session = session;
        h->next = e->holders;
        e->holders = h;
    }
    h->n++;
    *count = ++e->count;
    return DS_K_OK;
oom:
    snprintf(msg, cap, "out of memory");
    return DS_K_OUT_OF_MEMORY;
}

/* GREF NEST: keys[0] (the parent) holds keys[1..n-1] instead of the ones it
 * held before. Every key is checked first; the reply has a status per key
 * (the parent's count first). */
static void gref_nest(ds_server_t *srv, ds_req_t *r, ds_rbuf_t *rb, uint32_t n)
{
    const char **ks = calloc(n, sizeof(*ks));
    uint32_t *ls = calloc(n, sizeof(*ls));
    char msg[256] = "";
    ds_status_t st = DS_K_OK;
    size_t blob = 0;
    if (ks == NULL || ls == NULL) {
        st = DS_K_OUT_OF_MEMORY;
        snprintf(msg, sizeof(msg), "out of memory");
    }
    for (uint32_t i = 0; st == DS_K_OK && i < n; i++) {
        ls[i] = ds__rbuf_str(rb, &ks[i]);
        if (rb->err) {
            snprintf(msg, sizeof(msg), "malformed GREF: key %u truncated", i);
            st = DS_K_INVALID;
        } else if (ds__key_check(ks[i], ls[i], msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (i > 0 && ls[i] == ls[0] && memcmp(ks[i], ks[0], ls[0]) == 0) {
            snprintf(msg, sizeof(msg), "key '%.*s' cannot be nested in itself",
                     (int)(ls[0] > 64 ? 64 : ls[0]), ks[0]);
            st = DS_K_INVALID;
        }
        if (i > 0) blob += sizeof(uint32_t) + ls[i];
    }
    struct ds_grefs *g = srv->grefs;
    if (st == DS_K_OK && g == NULL && (g = srv->grefs = calloc(1, sizeof(*g))) == NULL)
        st = DS_K_OUT_OF_MEMORY;
    if (st == DS_K_OK && g->nb == 0 && gref_grow(g) != 0) st = DS_K_OUT_OF_MEMORY;
    char *kids = st == DS_K_OK && n > 1 ? malloc(blob) : NULL;
    if (st == DS_K_OK && n > 1 && kids == NULL) st = DS_K_OUT_OF_MEMORY;
    gref_t *p = NULL;
    if (st == DS_K_OK) {
        p = *gref_find(g, ks[0], ls[0]);
        if (p == NULL && (p = gref_new(g, ks[0], ls[0])) == NULL) st = DS_K_OUT_OF_MEMORY;
    }
    /* Hold the new kids before letting go of the old ones: a kid in both
     * never reaches 0 in between. */
    uint32_t held = 0;
    char *q = kids;
    /* A kid owned here is held once per parent (its parents name it), as
     * at an owner elsewhere; added[i]: the hold is new. */
    bool *added = st == DS_K_OK ? calloc(n, sizeof(*added)) : NULL;
    if (st == DS_K_OK && added == NULL) st = DS_K_OUT_OF_MEMORY;
    for (uint32_t i = 1; st == DS_K_OK && i < n; i++, held++) {
        gref_t *c = kid_remote(srv, ks[i], ls[i]) ? NULL : *gref_find(g, ks[i], ls[i]);
        if (c == NULL && !kid_remote(srv, ks[i], ls[i]) &&
            (c = gref_new(g, ks[i], ls[i])) == NULL) {
            st = DS_K_OUT_OF_MEMORY;
            break;
        }
        if (c && !kids_have(c->parents, c->nparents, ks[0], ls[0])) {
            if (!blob_add(&c->parents, &c->nparents, &c->parents_len, ks[0], ls[0])) {
                st = DS_K_OUT_OF_MEMORY;
                break;
            }
            c->nested++;
            added[i] = true;
        }
        memcpy(q, &ls[i], sizeof(uint32_t));
        memcpy(q + sizeof(uint32_t), ks[i], ls[i]);
        q += sizeof(uint32_t) + ls[i];
    }
    if (st == DS_K_OUT_OF_MEMORY) snprintf(msg, sizeof(msg), "out of memory");
    void *batch = NULL;
    if (st == DS_K_OK) {
        /* The old kids go through a stand-in parent that holds only them.
         * Kids owned elsewhere are held at their owners: those new here
         * are taken, those no longer named let go, the others untouched
         * (their owner never sees a hold and its release out of order). */
        gref_t *old = calloc(1, sizeof(*old) + ls[0]);
        if (old) {
            memcpy(old->key, ks[0], ls[0]);
            old->keylen = ls[0];
        }
        char *gone = old && p->nkids ? malloc(p->kids_len) : NULL;
        if (old != NULL && (p->nkids == 0 || gone != NULL)) {
            const char *u = p->kids;
            char *v = gone;
            for (uint32_t i = 0; i < p->nkids; i++) {
                uint32_t kl;
                memcpy(&kl, u, sizeof(kl));
                if (!kids_have(kids, n - 1, u + sizeof(kl), kl)) {
                    memcpy(v, u, sizeof(kl) + kl);
                    v += sizeof(kl) + kl;
                    old->nkids++;
                }
                u += sizeof(kl) + kl;
            }
            /* Kids owned here are held at their second record's worker too
             * (kid_hold), which owns them should this worker leave. */
            for (uint32_t i = 1; i < n; i++)
                if (kid_remote(srv, ks[i], ls[i])
                        ? !kids_have(p->kids, p->nkids, ks[i], ls[i])
                        : added[i] && srv->remote && srv->remote->kid_hold)
                    srv->remote->kid_hold(srv, &batch, ks[0], ls[0], ks[i], ls[i], 1);
            old->kids = gone;
            free(p->kids);
            p->kids = kids;
            p->nkids = n - 1;
            p->kids_len = (uint32_t)blob;
            kids = NULL;
            gref_release_kids(srv, old, &batch);
        } else {
            free(old);
            st = DS_K_OUT_OF_MEMORY;
            snprintf(msg, sizeof(msg), "out of memory");
        }
    }
    if (st != DS_K_OK) {
        /* Undo the holds taken. */
        for (uint32_t i = 1; added && i <= held && i < n; i++) {
            gref_t *c = added[i] ? *gref_find(g, ks[i], ls[i]) : NULL;
            if (c && blob_remove(c->parents, &c->nparents, &c->parents_len, ks[0], ls[0]))
                c->nested--;
        }
        free(kids);
    }
    free(added);
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    for (uint32_t i = 0; i < n; i++) {
        ds__wbuf_u32(&w, (uint32_t)st);
        ds__wbuf_u32(&w, i == 0 && p ? p->count : 0);
    }
    if (st != DS_K_OK) ds__ops_lead_error(&w, msg);
    if (srv->remote && srv->remote->nest_answer)
        srv->remote->nest_answer(srv, batch, r, st, &w);
    else
        ds__req_reply(r, st, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
    free(ks);
    free(ls);
}

void ds__ops_gref(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    int32_t delta = ds__rbuf_i32(&rb);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH + 1, 5);
    if (delta == DS_GREF_NEST && !rb.err && n >= 1) {
        /* In a cluster the parent's holds are kept by its owner. */
        if (r->session && srv->remote && srv->remote->nest && srv->remote->nest(srv, r)) return;
        gref_nest(srv, r, &rb, n);
        return;
    }
    if (n > DS_MAX_BATCH) n = 0;
    if (rb.err || n == 0 || delta < -1 || delta > 1) {
        ds__req_error(r, DS_K_INVALID, "malformed GREF: delta %d (allowed -1, 0, 1), %u keys",
                      delta, n);
        return;
    }
    /* In a cluster the counts are held by each key's owner. */
    if (r->session && srv->remote && srv->remote->owned && srv->remote->owned(srv, r)) return;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    ds_status_t first = DS_K_OK;
    uint32_t ok = 0;
    char msg[256], first_msg[256] = "";
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint32_t count = 0;
        ds_status_t st;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed GREF: key %u truncated", i);
            st = DS_K_INVALID;
        } else {
            st = ds__gref_apply(srv, r->session, k, kl, delta, &count, msg, sizeof(msg));
        }
        if (st == DS_K_OK) {
            ok++;
        } else if (first == DS_K_OK) {
            first = st;
            snprintf(first_msg, sizeof(first_msg), "%s", msg);
        }
        ds__wbuf_u32(&w, (uint32_t)st);
        ds__wbuf_u32(&w, count);
    }
    if (first != DS_K_OK) ds__ops_lead_error(&w, first_msg);
    ds__req_reply(r, ok ? DS_K_OK : first, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

void ds__gref_forget(ds_server_t *srv, const void *holder, const char *k, uint32_t kl, uint32_t n)
{
    struct ds_grefs *g = srv->grefs;
    if (g == NULL || g->nb == 0) return;
    gref_t **pp = gref_find(g, k, kl);
    gref_t *e = *pp;
    if (e == NULL) return;
    gholder_t **hp = &e->holders;
    while (*hp && (*hp)->session != holder)
        hp = &(*hp)->next;
    if (*hp == NULL) return;
    gholder_t *h = *hp;
    uint32_t take = h->n < n ? h->n : n;
    h->n -= take;
    e->count -= take;
    if (h->n == 0) {
        *hp = h->next;
        free(h);
        gsess_t **sp = gsess_find(g, holder);
        if (*sp && --(*sp)->keys == 0) {
            gsess_t *gs = *sp;
            *sp = gs->next;
            free(gs);
        }
    }
    if (e->count == 0 && e->nested == 0 && e->nkids == 0) {
        *pp = e->next;
        g->n--;
        free(e->kids);
        free(e->parents);
        free(e);
    }
}

void ds__ops_grefs_deleted(ds_server_t *srv, const char *k, uint32_t kl)
{
    struct ds_grefs *g = srv->grefs;
    if (g == NULL || g->nb == 0) return;
    gref_t *p = *gref_find(g, k, kl);
    if (p == NULL || p->nkids == 0) return;
    /* The holds go through a stand-in parent that holds only them; the
     * entry keeps its clients' counts (a key may be referenced before it is
     * put again). */
    gref_t *old = calloc(1, sizeof(*old) + kl);
    if (old == NULL) return;
    memcpy(old->key, k, kl);
    old->keylen = kl;
    old->kids = p->kids;
    old->nkids = p->nkids;
    p->kids = NULL;
    p->nkids = 0;
    p->kids_len = 0;
    gref_release_kids(srv, old, NULL);
    if (p->count == 0 && p->nested == 0) {
        gref_t **pp = gref_find(g, k, kl);
        *pp = p->next;
        g->n--;
        free_holders(p->holders);
        free(p->parents);
        free(p);
    }
}

ds_status_t ds__gref_nested(ds_server_t *srv, const char *k, uint32_t kl, const char *parent,
                            uint32_t pl, int32_t delta, char *msg, size_t cap)
{
    if (ds__key_check(k, kl, msg, cap) != 0) return DS_K_INVALID;
    struct ds_grefs *g = srv->grefs;
    if (g == NULL && (g = srv->grefs = calloc(1, sizeof(*g))) == NULL) goto oom;
    if (g->nb == 0 && gref_grow(g) != 0) goto oom;
    gref_t **pp = gref_find(g, k, kl);
    gref_t *e = *pp;
    /* Each parent holds once: its owner may tell it again after a ring
     * change (or a new owner may let go of a hold it never took). */
    if (delta > 0) {
        if (e == NULL && (e = gref_new(g, k, kl)) == NULL) goto oom;
        if (kids_have(e->parents, e->nparents, parent, pl)) return DS_K_OK;
        if (!blob_add(&e->parents, &e->nparents, &e->parents_len, parent, pl)) goto oom;
        e->nested++;
        return DS_K_OK;
    }
    if (e == NULL || e->nested == 0) return DS_K_OK; /* nothing held: nothing to let go */
    if (!blob_remove(e->parents, &e->nparents, &e->parents_len, parent, pl)) return DS_K_OK;
    if (--e->nested > 0 || e->count > 0) return DS_K_OK;
    if (srv->remote && srv->remote->owns && !srv->remote->owns(srv, k, kl)) {
        /* A second record (the key is owned elsewhere): it goes, the
         * object stays (its owner decides). */
        *pp = e->next;
        g->n--;
        free(e->kids);
        free(e->parents);
        free_holders(e->holders);
        free(e);
        return DS_K_OK;
    }
    gref_gone(srv, pp);
    return DS_K_OK;
oom:
    snprintf(msg, cap, "out of memory");
    return DS_K_OUT_OF_MEMORY;
}

void ds__gref_adopt(ds_server_t *srv, const char *parent, uint32_t pl, const char *kid, uint32_t kl)
{
    char msg[256];
    if (ds__key_check(parent, pl, msg, sizeof(msg)) != 0 ||
        ds__key_check(kid, kl, msg, sizeof(msg)) != 0)
        return;
    struct ds_grefs *g = srv->grefs;
    if (g == NULL && (g = srv->grefs = calloc(1, sizeof(*g))) == NULL) return;
    if (g->nb == 0 && gref_grow(g) != 0) return;
    gref_t *p = *gref_find(g, parent, pl);
    if (p == NULL && (p = gref_new(g, parent, pl)) == NULL) return;
    if (kids_have(p->kids, p->nkids, kid, kl)) return;
    (void)blob_add(&p->kids, &p->nkids, &p->kids_len, kid, kl);
}

void ds__grefs_walk(ds_server_t *srv, ds_gref_edge_fn on_kid, ds_gref_edge_fn on_parent, void *ctx)
{
    struct ds_grefs *g = srv->grefs;
    for (uint32_t i = 0; g && i < g->nb; i++)
        for (gref_t *e = g->b[i]; e; e = e->next) {
            const char *q = e->kids;
            for (uint32_t c = 0; on_kid && c < e->nkids; c++) {
                uint32_t l;
                memcpy(&l, q, sizeof(l));
                on_kid(ctx, e->key, e->keylen, q + sizeof(l), l);
                q += sizeof(l) + l;
            }
            q = e->parents;
            for (uint32_t c = 0; on_parent && c < e->nparents; c++) {
                uint32_t l;
                memcpy(&l, q, sizeof(l));
                on_parent(ctx, q + sizeof(l), l, e->key, e->keylen);
                q += sizeof(l) + l;
            }
        }
}

void ds__ops_grefs_session_end(ds_server_t *srv, const void *session)
{
    struct ds_grefs *g = srv->grefs;
    if (g == NULL) return;
    gsess_t **sp = gsess_find(g, session);
    if (*sp == NULL) return;
    gsess_t *gs = *sp;
    *sp = gs->next;
    free(gs);
    /* First take the session's references off every entry; then delete the
     * entries left with none, which may cascade through nested holds (so
     * each bucket is walked again from its head after a deletion). */
    uint32_t touched = 0;
    for (uint32_t i = 0; i < g->nb; i++)
        for (gref_t *e = g->b[i]; e; e = e->next)
            for (gholder_t **hp = &e->holders; *hp; hp = &(*hp)->next)
                if ((*hp)->session == session) {
                    gholder_t *h = *hp;
                    e->count -= h->n;
                    *hp = h->next;
                    free(h);
                    e->touched = true;
                    touched++;
                    break;
                }
    for (uint32_t i = 0; touched > 0 && i < g->nb; i++) {
        gref_t **pp = &g->b[i];
        while (*pp) {
            gref_t *e = *pp;
            if (!e->touched) {
                pp = &e->next;
                continue;
            }
            e->touched = false;
            touched--;
            if (e->count == 0 && e->nested == 0) {
                gref_gone(srv, pp);
                pp = &g->b[i];
            } else {
                pp = &e->next;
            }
        }
    }
}
