/* Latches and global references held at each key's ring owner, so that
 * every worker agrees on them.
 *
 * A client's RLATCH, UNRLATCH, WLATCH, UNWLATCH and GREF go to each key's
 * owner (OWNED; keys this worker owns are applied here). The owner keeps
 * them in its ordinary tables (latch.c, ops_read.c) under a holder that
 * stands for (origin worker, session id); the origin tells the owners when
 * the session ends (HOLDER_END), and an owner drops what a member's sessions
 * held when the member leaves the ring.
 *
 * Writers: a key's owner, when it grants a latch, tells every member the key
 * is latched until the latch's deadline (LATCH_HINT) before it answers. A
 * write (SET, PUBLISH, DEL) on a member of a hinted key owned elsewhere
 * first asks the owner (LATCH_WAIT), which answers once no latch blocks
 * the writer; a write of an unhinted key costs nothing extra (a member
 * answers LATCH_HINT only once its writes of the key already past that
 * check are recorded at the owner: cluster_seal.c). A hint outlives
 * an early release (until the latch's deadline at most): later writes of the
 * key then ask the owner, which answers at once.
 *
 * Failover (rebuild): the origin keeps what its sessions hold (the mirror:
 * per session and key, its read latches with their latest deadline, its
 * write latches, its references). When the ring changes (an owner died, or
 * a member joined), every worker takes its sessions' holds again at the
 * keys' new owners, which hint them again. A write that reaches a new owner
 * before the rebuild does not wait. */
#include "worker/cluster/cluster_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HINT_BUCKETS 256u
#define MIRROR_BUCKETS 1024u
/* OWNED's op with this bit: a rebuild (the owner does not check that the
 * key is stored: its location may not be registered with it yet). */
#define OWNED_REBUILD 0x8000u

/* KIND_SEEN (key "") marks a session that took holds at other owners: its
 * end is told to every member even when it released them all (the owners
 * then forget its holder). */
enum { KIND_READ = 0, KIND_WRITE = 1, KIND_REF = 2, KIND_SEEN = 3 };

/* A holder at this owner that is a session of another worker. */
typedef struct rholder {
    struct rholder *next;
    uint64_t sid;
    char addr[300];
} rholder_t;

/* A key some owner said is latched until `until`. */
typedef struct hint {
    struct hint *next;
    uint64_t until;
    uint64_t stamp; /* ds_holds' hint_stamp when last put */
    uint32_t len;
    char key[];
} hint_t;

/* What one of this worker's sessions holds on a key at its owner. */
typedef struct mirror {
    struct mirror *next;
    uint64_t sid;
    uint64_t until; /* latches: the latest deadline */
    uint32_t count;
    uint8_t kind;
    uint32_t len;
    char key[];
} mirror_t;

struct ds_holds {
    rholder_t *holders;
    hint_t *hints[HINT_BUCKETS];
    uint32_t nhints;
    uint64_t hint_stamp; /* counts hint_puts */
    mirror_t *mirror[MIRROR_BUCKETS];
    uint32_t nmirror;
    /* LATCH_WAITs on the job threads, and those queued behind them (FIFO,
     * linked by next, each counted in its pend already) */
    uint32_t waits;
    ds_job_t *wait_head, *wait_tail;
};

/* A LATCH_WAIT holds a job thread until the owner lets the write go; at
 * most this many do at once, so that the threads stay free for the
 * requests that release latches (OWNED) and the rest. */
#define WAITS_MAX 2u

/* Stands for a writer that holds nothing at an owner. */
static const char no_holder;

static ds_holds_t *holds(ds_server_t *srv)
{
    ds_holds_t **h = ds__cluster_holds(srv);
    if (*h == NULL) *h = calloc(1, sizeof(**h));
    return *h;
}

void ds__holds_free(ds_holds_t *h)
{
    if (h == NULL) return;
    /* LATCH_WAITs never sent: their writes' connections are gone by now. */
    while (h->wait_head) {
        ds_job_t *j = h->wait_head;
        h->wait_head = j->next;
        ds__wbuf_free(&j->req);
        free(j->idx);
        free(j);
    }
    while (h->holders) {
        rholder_t *x = h->holders;
        h->holders = x->next;
        free(x);
    }
    for (uint32_t i = 0; i < HINT_BUCKETS; i++)
        while (h->hints[i]) {
            hint_t *x = h->hints[i];
            h->hints[i] = x->next;
            free(x);
        }
    for (uint32_t i = 0; i < MIRROR_BUCKETS; i++)
        while (h->mirror[i]) {
            mirror_t *x = h->mirror[i];
            h->mirror[i] = x->next;
            free(x);
        }
    free(h);
}

static bool is_self(ds_server_t *srv, const char *addr)
{
    return addr == NULL || strcmp(addr, ds__cluster_self(srv)) == 0;
}

/* ---- holders that are other workers' sessions ---- */

static rholder_t *rholder_find(ds_holds_t *h, const char *addr, uint32_t al, uint64_t sid)
{
    for (rholder_t *x = h->holders; x; x = x->next)
        if (x->sid == sid && strlen(x->addr) == al && memcmp(x->addr, addr, al) == 0) return x;
    return NULL;
}

static rholder_t *rholder_get(ds_holds_t *h, const char *addr, uint32_t al, uint64_t sid)
{
    rholder_t *x = rholder_find(h, addr, al, sid);
    if (x || al >= sizeof(x->addr)) return x;
    if ((x = calloc(1, sizeof(*x))) == NULL) return NULL;
    x->sid = sid;
    memcpy(x->addr, addr, al);
    x->next = h->holders;
    h->holders = x;
    return x;
}

/* Drops the holders of addr (sid 0: every session of it): their latches
 * (waking writers) and references (deleting objects left with none). */
static void holders_end(ds_server_t *srv, const char *addr, uint32_t al, uint64_t sid)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL) return;
    for (rholder_t **pp = &h->holders; *pp;) {
        rholder_t *x = *pp;
        if ((sid != 0 && x->sid != sid) || strlen(x->addr) != al || memcmp(x->addr, addr, al)) {
            pp = &x->next;
            continue;
        }
        *pp = x->next;
        ds__latch_holder_end(srv, x);
        ds__ops_grefs_session_end(srv, x);
        free(x);
    }
}

void ds__holds_member_left(ds_server_t *srv, const char *addr)
{
    holders_end(srv, addr, (uint32_t)strlen(addr), 0);
}

/* ---- hints ---- */

static uint32_t hint_bucket(const char *k, uint32_t kl)
{
    return ds__murmur3_32(k, kl, 0x68696e74u) & (HINT_BUCKETS - 1);
}

static void hint_put(ds_holds_t *h, const char *k, uint32_t kl, uint64_t until)
{
    uint64_t now = ds__now_ms();
    hint_t **pp = &h->hints[hint_bucket(k, kl)];
    for (hint_t *x = *pp; x; x = x->next)
        if (x->len == kl && memcmp(x->key, k, kl) == 0) {
            if (until > x->until) x->until = until;
            x->stamp = ++h->hint_stamp;
            return;
        }
    /* Expired hints of this bucket go as a new one comes. */
    for (hint_t **q = pp; *q;) {
        if ((*q)->until <= now) {
            hint_t *x = *q;
            *q = x->next;
            free(x);
            h->nhints--;
        } else {
            q = &(*q)->next;
        }
    }
    hint_t *x = malloc(sizeof(*x) + kl);
    if (x == NULL) return;
    x->until = until;
    x->stamp = ++h->hint_stamp;
    x->len = kl;
    memcpy(x->key, k, kl);
    x->next = *pp;
    *pp = x;
    h->nhints++;
}

/* Whether k is hinted latched now (an expired hint found goes). */
static bool hinted(ds_holds_t *h, const char *k, uint32_t kl, uint64_t now)
{
    for (hint_t **pp = &h->hints[hint_bucket(k, kl)]; *pp; pp = &(*pp)->next) {
        hint_t *x = *pp;
        if (x->len != kl || memcmp(x->key, k, kl) != 0) continue;
        if (x->until > now) return true;
        *pp = x->next;
        free(x);
        h->nhints--;
        return false;
    }
    return false;
}

bool ds__holds_hinted(ds_server_t *srv)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    return h && h->nhints > 0;
}

/* ---- the mirror: what this worker's sessions hold at owners ---- */

static mirror_t **mirror_find(ds_holds_t *h, uint64_t sid, uint8_t kind, const char *k, uint32_t kl)
{
    uint32_t b = (ds__murmur3_32(k, kl, 0x6d697272u) ^ (uint32_t)sid) & (MIRROR_BUCKETS - 1);
    mirror_t **pp = &h->mirror[b];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->sid == sid && (*pp)->kind == kind && (*pp)->len == kl &&
            memcmp((*pp)->key, k, kl) == 0)
            return pp;
    return pp;
}

/* Records a granted (delta 1) or released (-1) hold; until: a latch's deadline. */
static void mirror_note(ds_holds_t *h, uint64_t sid, uint8_t kind, const char *k, uint32_t kl,
                        int delta, uint64_t until)
{
    mirror_t **pp = mirror_find(h, sid, kind, k, kl);
    mirror_t *x = *pp;
    uint64_t now = ds__now_ms();
    if (x && kind != KIND_REF && x->until <= now) x->count = 0; /* its latches expired */
    if (delta < 0) {
        if (x == NULL) return;
        if (x->count > 0) x->count--;
        if (x->count == 0) {
            *pp = x->next;
            free(x);
            h->nmirror--;
        }
        return;
    }
    if (x == NULL) {
        if ((x = calloc(1, sizeof(*x) + kl)) == NULL) return;
        x->sid = sid;
        x->kind = kind;
        x->len = kl;
        memcpy(x->key, k, kl);
        x->next = *pp;
        *pp = x;
        h->nmirror++;
    }
    x->count++;
    if (until > x->until) x->until = until;
}

static uint8_t op_kind(uint16_t op)
{
    if (op == DS_OP_GREF) return KIND_REF;
    return op == DS_OP_WLATCH || op == DS_OP_UNWLATCH ? KIND_WRITE : KIND_READ;
}

/* ---- applying holds (origin and owner alike) ---- */

typedef struct {
    const char **keys;
    uint32_t *lens;
    uint64_t *until;
    uint32_t n, cap;
} grants_t;

static void grant_add(grants_t *g, const char *k, uint32_t kl, uint64_t until)
{
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 8;
        const char **nk = realloc(g->keys, cap * sizeof(*nk));
        if (nk) g->keys = nk;
        uint32_t *nl = realloc(g->lens, cap * sizeof(*nl));
        if (nl) g->lens = nl;
        uint64_t *nu = realloc(g->until, cap * sizeof(*nu));
        if (nu) g->until = nu;
        if (!nk || !nl || !nu) return;
        g->cap = cap;
    }
    g->keys[g->n] = k;
    g->lens[g->n] = kl;
    g->until[g->n++] = until;
}

static void grants_free(grants_t *g)
{
    free(g->keys);
    free(g->lens);
    free(g->until);
}

static void hint_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: telling %s of a latch failed: %s", j->addr, j->err);
}

/* Tells every other member of the latches granted (the jobs count in p, so
 * its answer waits for them; p NULL: nobody waits). */
static void hints_send(ds_server_t *srv, ds_pend_t *p, const grants_t *g)
{
    if (g->n == 0) return;
    const char *peers[DS_MAX_MEMBERS];
    size_t np = ds__cluster_peers(srv, peers, DS_MAX_MEMBERS);
    uint64_t now = ds__now_ms();
    for (size_t m = 0; m < np; m++) {
        ds_job_t *j = ds__job_new(p, peers[m], DS_OP_LATCH_HINT, hint_done);
        if (j == NULL) continue;
        ds__wbuf_u32(&j->req, g->n);
        for (uint32_t i = 0; i < g->n; i++) {
            ds__wbuf_str(&j->req, g->keys[i], g->lens[i]);
            ds__wbuf_u32(&j->req, (uint32_t)(g->until[i] > now ? g->until[i] - now : 1));
        }
        ds__job_submit(srv, j);
    }
}

/* One key of op for holder at this (owning) worker. */
static ds_status_t apply_one(ds_server_t *srv, const void *holder, uint16_t op, int32_t arg,
                             bool check_exists, const char *k, uint32_t kl, uint32_t *count,
                             uint64_t *until, char *msg, size_t cap)
{
    *count = 0;
    *until = 0;
    if (op == DS_OP_GREF) return ds__gref_apply(srv, holder, k, kl, arg, count, msg, cap);
    bool exists = true;
    if (check_exists && (op == DS_OP_RLATCH || op == DS_OP_WLATCH)) {
        const char *loc;
        uint64_t size, version;
        exists = ds__store_lookup(srv->store, k, kl, ds__now_ms()) != NULL ||
                 ds__meta_find(ds__cluster_meta(srv), k, kl, &loc, &size, &version);
    }
    return ds__latch_apply(srv, holder, op, (uint32_t)arg, k, kl, exists, until, msg, cap);
}

static bool op_ok(uint16_t op)
{
    return op == DS_OP_RLATCH || op == DS_OP_UNRLATCH || op == DS_OP_WLATCH ||
           op == DS_OP_UNWLATCH || op == DS_OP_GREF;
}

/* ---- the origin: a client's latch or GREF, forwarded to owners ---- */

static void pend_err(ds_pend_t *p, uint32_t i, const char *msg)
{
    if (i >= p->err_idx) return;
    p->err_idx = i;
    snprintf(p->err, sizeof(p->err), "%.255s", msg);
}

static void owned_finish(ds_pend_t *p)
{
    bool gref = p->op == DS_OP_GREF;
    ds_status_t first = DS_K_OK;
    uint32_t ok = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->status[i] == DS_K_OK)
            ok++;
        else if (first == DS_K_OK)
            first = (ds_status_t)p->status[i];
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, first != DS_K_OK ? p->err : "");
    ds__wbuf_u32(&w, p->n);
    for (uint32_t i = 0; i < p->n; i++) {
        ds__wbuf_u32(&w, p->status[i]);
        if (gref) ds__wbuf_u32(&w, (uint32_t)p->sizes[i]);
    }
    ds_status_t overall = gref && ok ? DS_K_OK : first;
    ds__req_reply(p->req, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void owned_done(ds_job_t *j)
{
    ds_pend_t *p = j->pend;
    ds_holds_t *h = holds(p->srv);
    uint64_t sid = p->sid;
    uint32_t n = 0;
    bool failed = j->transport_failed || j->status == DS_K_INVALID ||
                  (n = ds__rbuf_u32(&j->r)) != j->nidx || j->r.err;
    bool first_err = true;
    uint64_t now = ds__now_ms();
    for (uint32_t e = 0; e < j->nidx; e++) {
        uint32_t i = j->idx[e];
        if (failed) {
            p->status[i] = j->transport_failed ? DS_K_RPC_UNAVAILABLE : DS_K_RUNTIME_ERROR;
            char msg[256];
            snprintf(msg, sizeof(msg), "owner %.64s of key '%.64s': %.100s", j->addr, p->keys[i],
                     j->err[0] ? j->err : "malformed answer");
            pend_err(p, i, msg);
            continue;
        }
        p->status[i] = ds__rbuf_u32(&j->r);
        p->sizes[i] = ds__rbuf_u32(&j->r);
        if (p->status[i] != DS_K_OK) {
            if (first_err) pend_err(p, i, j->err);
            first_err = false;
            continue;
        }
        if (h == NULL || (p->op == DS_OP_GREF && p->arg == 0)) continue;
        bool take =
            p->op == DS_OP_RLATCH || p->op == DS_OP_WLATCH || (p->op == DS_OP_GREF && p->arg > 0);
        uint64_t until = p->op == DS_OP_RLATCH ? now + (uint32_t)p->arg
                         : p->op == DS_OP_WLATCH
                             ? now + (uint64_t)p->srv->cfg.max_read_latch_timeout_ms
                             : 0;
        mirror_note(h, sid, op_kind(p->op), p->keys[i], p->keylens[i], take ? 1 : -1, until);
    }
}

bool ds__holds_owned(ds_server_t *srv, ds_req_t *r)
{
    uint16_t op = r->op;
    if (!op_ok(op) || r->session == NULL) return false;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    int32_t arg = 0;
    if (op == DS_OP_GREF)
        arg = ds__rbuf_i32(&rb);
    else if (op == DS_OP_RLATCH || op == DS_OP_WLATCH)
        arg = (int32_t)ds__rbuf_u32(&rb);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 5);
    if (rb.err || n == 0 || (op == DS_OP_GREF && (arg < -1 || arg > 1))) return false;
    ds_holds_t *h = holds(srv);
    ds_pend_t *p = ds__pend_new(srv, r, owned_finish);
    bool ok = h && p;
    if (ok) {
        p->keys = calloc(n, sizeof(*p->keys));
        p->keylens = calloc(n, sizeof(*p->keylens));
        p->status = calloc(n, sizeof(*p->status));
        p->sizes = calloc(n, sizeof(*p->sizes));
        ok = p->keys && p->keylens && p->status && p->sizes;
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
        if (!ok) {
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
            return true;
        }
        return false; /* malformed: the caller says so */
    }
    p->arg = arg;
    p->err_idx = UINT32_MAX;
    uint64_t sid = p->sid = r->session->id;
    grants_t g = {0};
    bool *remote = calloc(n, sizeof(*remote));
    uint32_t nremote = 0;
    for (uint32_t i = 0; i < n; i++) {
        char msg[256];
        const char *owner = NULL;
        if (ds__key_check(p->keys[i], p->keylens[i], msg, sizeof(msg)) == 0)
            owner = ds__cluster_owner(srv, p->keys[i], p->keylens[i]);
        if (!is_self(srv, owner) && remote) {
            remote[i] = true;
            nremote++;
            continue;
        }
        uint32_t count;
        uint64_t until;
        ds_status_t st = apply_one(srv, r->session, op, arg, true, p->keys[i], p->keylens[i],
                                   &count, &until, msg, sizeof(msg));
        p->status[i] = (uint32_t)st;
        p->sizes[i] = count;
        if (st != DS_K_OK) {
            pend_err(p, i, msg);
            continue;
        }
        if (until) grant_add(&g, p->keys[i], p->keylens[i], until);
        if (op != DS_OP_GREF || arg != 0) {
            bool take = op == DS_OP_RLATCH || op == DS_OP_WLATCH || (op == DS_OP_GREF && arg > 0);
            mirror_note(h, sid, op_kind(op), p->keys[i], p->keylens[i], take ? 1 : -1, until);
        }
    }
    hints_send(srv, p, &g);
    grants_free(&g);
    bool takes = op == DS_OP_RLATCH || op == DS_OP_WLATCH || (op == DS_OP_GREF && arg > 0);
    if (nremote && takes) {
        mirror_t **seen = mirror_find(h, sid, KIND_SEEN, "", 0);
        if (*seen == NULL) mirror_note(h, sid, KIND_SEEN, "", 0, 1, 0);
    }
    /* One OWNED per owner for the keys owned elsewhere. */
    for (uint32_t a = 0; nremote && a < n; a++) {
        if (!remote[a]) continue;
        const char *owner = ds__cluster_owner(srv, p->keys[a], p->keylens[a]);
        ds_job_t *j = owner ? ds__job_new(p, owner, DS_OP_OWNED, owned_done) : NULL;
        if (j) j->idx = malloc(n * sizeof(*j->idx));
        if (j == NULL || j->idx == NULL) {
            /* Counted in p only once submitted: a job not sent is just freed. */
            if (j) {
                ds__wbuf_free(&j->req);
                free(j);
            }
            p->status[a] = DS_K_OUT_OF_MEMORY;
            pend_err(p, a, "out of memory");
            remote[a] = false;
            continue;
        }
        ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
        ds__wbuf_u64(&j->req, sid);
        ds__wbuf_u32(&j->req, op);
        ds__wbuf_i32(&j->req, arg);
        for (uint32_t b = a; b < n; b++) {
            if (!remote[b]) continue;
            const char *o2 = ds__cluster_owner(srv, p->keys[b], p->keylens[b]);
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
    ds__pend_start(p);
    return true;
}

/* ---- the owner's side ---- */

static void statuses_counts_finish(ds_pend_t *p)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, p->err_idx != UINT32_MAX ? p->err : "");
    ds__wbuf_u32(&w, p->n);
    for (uint32_t i = 0; i < p->n; i++) {
        ds__wbuf_u32(&w, p->status[i]);
        ds__wbuf_u32(&w, (uint32_t)p->sizes[i]);
    }
    ds__req_reply(p->req, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_owned(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *origin;
    uint32_t ol = ds__rbuf_str(&rb, &origin);
    uint64_t sid = ds__rbuf_u64(&rb);
    uint32_t op = ds__rbuf_u32(&rb);
    int32_t arg = ds__rbuf_i32(&rb);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 5);
    bool rebuild = (op & OWNED_REBUILD) != 0;
    op &= ~OWNED_REBUILD;
    ds_holds_t *h = holds(srv);
    if (rb.err || ol == 0 || sid == 0 || !op_ok(op)) {
        ds__req_error(r, DS_K_INVALID, "malformed OWNED");
        return;
    }
    /* A holder is made by what takes a hold; the others find it, or stand
     * for nobody. */
    bool takes = op == DS_OP_RLATCH || op == DS_OP_WLATCH || (op == DS_OP_GREF && arg > 0);
    const void *holder = NULL;
    if (h) holder = takes ? rholder_get(h, origin, ol, sid) : rholder_find(h, origin, ol, sid);
    if (h && !takes && holder == NULL) holder = &no_holder;
    ds_pend_t *p = holder ? ds__pend_new(srv, r, statuses_counts_finish) : NULL;
    if (p) {
        p->status = calloc(n ? n : 1, sizeof(*p->status));
        p->sizes = calloc(n ? n : 1, sizeof(*p->sizes));
        p->err_idx = UINT32_MAX;
    }
    if (p == NULL || p->status == NULL || p->sizes == NULL) {
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    p->n = n;
    grants_t g = {0};
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        char msg[256];
        uint32_t count = 0;
        uint64_t until = 0;
        ds_status_t st;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed OWNED: key %u truncated", i);
            st = DS_K_INVALID;
        } else {
            st = apply_one(srv, holder, op, arg, !rebuild, k, kl, &count, &until, msg, sizeof(msg));
        }
        p->status[i] = (uint32_t)st;
        p->sizes[i] = count;
        if (st != DS_K_OK)
            pend_err(p, i, msg);
        else if (until)
            grant_add(&g, k, kl, until); /* k points into r->meta, valid until the answer */
    }
    hints_send(srv, p, &g);
    grants_free(&g);
    ds__pend_start(p);
}

static void latch_wait_resume(ds_server_t *srv, ds_req_t *d, void *ctx)
{
    (void)ctx;
    ds__seal_wait_answer(srv, d);
}

/* Reads "n, n*key" into arrays pointing into the request. */
static bool read_keys(ds_rbuf_t *rb, const char ***keys, uint32_t **lens, uint32_t *n)
{
    *n = ds__rbuf_count(rb, 10 * DS_MAX_BATCH, 5);
    if (rb->err || *n == 0) return false;
    *keys = malloc(*n * sizeof(**keys));
    *lens = malloc(*n * sizeof(**lens));
    if (*keys == NULL || *lens == NULL) return false;
    for (uint32_t i = 0; i < *n; i++)
        (*lens)[i] = ds__rbuf_str(rb, &(*keys)[i]);
    return !rb->err;
}

static void op_latch_wait(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *origin;
    uint32_t ol = ds__rbuf_str(&rb, &origin);
    uint64_t sid = ds__rbuf_u64(&rb);
    const char **keys = NULL;
    uint32_t *lens = NULL, n = 0;
    if (!read_keys(&rb, &keys, &lens, &n) || ol == 0) {
        free(keys);
        free(lens);
        ds__req_error(r, DS_K_INVALID, "malformed LATCH_WAIT");
        return;
    }
    ds_holds_t *h = holds(srv);
    const void *holder = h ? (const void *)rholder_find(h, origin, ol, sid) : NULL;
    if (holder == NULL) holder = &no_holder;
    /* A sealed key refuses the write: no latch to wait for. */
    if (ds__seal_wait_any(srv, keys, lens, n) ||
        !ds__latch_park_as(srv, r, holder, keys, lens, n, latch_wait_resume, NULL, NULL))
        ds__seal_wait_answer(srv, r);
    free(keys);
    free(lens);
}

static void hint_finish(ds_pend_t *p)
{
    ds__req_error(p->req, DS_K_OK, "%s", "");
}

static void op_latch_hint(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 10 * DS_MAX_BATCH, 9);
    ds_holds_t *h = holds(srv);
    uint64_t now = ds__now_ms();
    /* The answer waits for this worker's writes of the keys that passed
     * their hint check before this hint came (cluster_seal.c). */
    ds_pend_t *p = ds__pend_new(srv, r, hint_finish);
    bool waits = false;
    for (uint32_t i = 0; h && i < n && !rb.err; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint32_t ms = ds__rbuf_u32(&rb);
        if (rb.err) break;
        hint_put(h, k, kl, now + ms);
        if (p && ds__inflight_wait(srv, p, k, kl)) waits = true;
    }
    if (waits) { /* the hints taken stand; the waiters hold p */
        ds__pend_start(p);
        return;
    }
    if (p) ds__pend_free(p);
    if (rb.err)
        ds__req_error(r, DS_K_INVALID, "malformed LATCH_HINT");
    else
        ds__req_error(r, h ? DS_K_OK : DS_K_OUT_OF_MEMORY, "%s", h ? "" : "out of memory");
}

static void op_holder_end(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *origin;
    uint32_t ol = ds__rbuf_str(&rb, &origin);
    uint64_t sid = ds__rbuf_u64(&rb);
    if (rb.err || ol == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed HOLDER_END");
        return;
    }
    holders_end(srv, origin, ol, sid);
    ds__req_error(r, DS_K_OK, "%s", "");
}

void ds__holds_peer_op(ds_server_t *srv, ds_req_t *r)
{
    switch (r->op) {
    case DS_OP_OWNED:
        op_owned(srv, r);
        break;
    case DS_OP_LATCH_WAIT:
        op_latch_wait(srv, r);
        break;
    case DS_OP_LATCH_HINT:
        op_latch_hint(srv, r);
        break;
    default:
        op_holder_end(srv, r);
    }
}

/* ---- writers ---- */

static void wait_finish(ds_pend_t *p)
{
    /* The owners let the write go; this worker's own latches come next. A
     * key hinted again since the owners were asked may have been latched
     * after their answer, before this write is recorded there: ask again. */
    ds_req_t *d = p->req;
    ds_holds_t *h = *ds__cluster_holds(p->srv);
    bool again = false;
    for (uint32_t i = 0; h && i < p->n && !again; i++)
        for (hint_t *x = h->hints[hint_bucket(p->keys[i], p->keylens[i])]; x; x = x->next)
            if (x->len == p->keylens[i] && memcmp(x->key, p->keys[i], x->len) == 0) {
                again = x->stamp > p->stamp;
                break;
            }
    if (again && ds__holds_latch_wait(p->srv, d, (const char *const *)p->keys, p->keylens, p->n,
                                      p->resume, p->cancel, p->ctx))
        return;
    if (!ds__latch_park_as(p->srv, d, d->session, (const char *const *)p->keys, p->keylens, p->n,
                           p->resume, p->cancel, p->ctx))
        p->resume(p->srv, d, p->ctx);
}

static void wait_gone(ds_pend_t *p)
{
    if (p->cancel) p->cancel(p->ctx);
}

/* Sends a LATCH_WAIT now, or queues it while WAITS_MAX are out. */
static void wait_submit(ds_server_t *srv, ds_holds_t *h, ds_job_t *j)
{
    if (h->waits < WAITS_MAX) {
        h->waits++;
        ds__job_submit(srv, j);
        return;
    }
    j->pend->outstanding++; /* as ds__job_submit would: the pend waits for it */
    j->next = NULL;
    if (h->wait_tail)
        h->wait_tail->next = j;
    else
        h->wait_head = j;
    h->wait_tail = j;
}

static void wait_done(ds_job_t *j)
{
    /* An owner that cannot be asked holds nothing this write can wait for
     * (a new owner rebuilds the latches from their holders). */
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: asking %s for latches failed (the write goes ahead): %s", j->addr,
                    j->err);
    ds_server_t *srv = j->pend->srv;
    /* The owner names the sealed keys (an older owner answers nothing). */
    uint32_t ns = j->transport_failed || j->status != DS_K_OK ? 0 : ds__rbuf_u32(&j->r);
    for (uint32_t e = 0; ns == j->nidx && e < ns && j->idx; e++) {
        uint32_t st = ds__rbuf_u32(&j->r);
        if (j->r.err) break;
        ds_pend_t *p = j->pend;
        ds__seal_told(srv, p->keys[j->idx[e]], p->keylens[j->idx[e]], st == DS_K_OC_ALREADY_SEALED);
    }
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL) return;
    if (h->waits > 0) h->waits--;
    ds_job_t *next = h->wait_head;
    if (next == NULL) return;
    h->wait_head = next->next;
    if (h->wait_head == NULL) h->wait_tail = NULL;
    next->next = NULL;
    next->pend->outstanding--; /* ds__job_submit counts it again */
    h->waits++;
    ds__job_submit(srv, next);
}

bool ds__holds_latch_wait(ds_server_t *srv, ds_req_t *r, const char *const *keys,
                          const uint32_t *lens, uint32_t n, ds_latch_resume_fn resume,
                          ds_latch_cancel_fn cancel, void *ctx)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL || h->nhints == 0) return false;
    uint64_t now = ds__now_ms();
    uint32_t *which = malloc(n * sizeof(*which));
    uint32_t nw = 0;
    for (uint32_t i = 0; which && i < n; i++)
        if (hinted(h, keys[i], lens[i], now) &&
            !is_self(srv, ds__cluster_owner(srv, keys[i], lens[i])))
            which[nw++] = i;
    if (nw == 0) {
        free(which);
        return false;
    }
    ds_pend_t *p = ds__pend_new(srv, r, wait_finish);
    bool ok = p != NULL;
    if (ok) {
        p->keys = calloc(n, sizeof(*p->keys));
        p->keylens = calloc(n, sizeof(*p->keylens));
        ok = p->keys && p->keylens;
    }
    for (uint32_t i = 0; ok && i < n; i++) {
        if ((p->keys[i] = malloc(lens[i] + 1)) == NULL) {
            ok = false;
            break;
        }
        memcpy(p->keys[i], keys[i], lens[i]);
        p->keys[i][lens[i]] = '\0';
        p->keylens[i] = lens[i];
        p->n = i + 1;
    }
    if (!ok) {
        /* Out of memory: the write goes ahead rather than failing. */
        if (p) ds__pend_free(p);
        free(which);
        return false;
    }
    p->resume = resume;
    p->cancel = cancel;
    p->ctx = ctx;
    p->gone = wait_gone;
    p->stamp = h->hint_stamp;
    uint64_t sid = r->session ? r->session->id : 0;
    bool *taken = calloc(nw, sizeof(*taken));
    for (uint32_t a = 0; taken && a < nw; a++) {
        if (taken[a]) continue;
        const char *owner = ds__cluster_owner(srv, keys[which[a]], lens[which[a]]);
        ds_job_t *j = ds__job_new(p, owner, DS_OP_LATCH_WAIT, wait_done);
        if (j == NULL) break;
        /* A latch lasts --max_read_latch_timeout_ms at most. */
        j->timeout_ms = (uint64_t)srv->cfg.max_read_latch_timeout_ms + 10000u;
        ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
        ds__wbuf_u64(&j->req, sid);
        uint32_t cnt = 0;
        for (uint32_t b = a; b < nw; b++)
            if (!taken[b] &&
                strcmp(ds__cluster_owner(srv, keys[which[b]], lens[which[b]]), owner) == 0)
                cnt++;
        ds__wbuf_u32(&j->req, cnt);
        j->idx = malloc(cnt * sizeof(*j->idx));
        for (uint32_t b = a; b < nw; b++)
            if (!taken[b] &&
                strcmp(ds__cluster_owner(srv, keys[which[b]], lens[which[b]]), owner) == 0) {
                taken[b] = true;
                if (j->idx) j->idx[j->nidx++] = which[b];
                ds__wbuf_str(&j->req, keys[which[b]], lens[which[b]]);
            }
        wait_submit(srv, h, j);
    }
    free(taken);
    free(which);
    ds__pend_start(p);
    return true;
}

/* ---- session ends, references that end, ring changes ---- */

static void quiet_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: %s to %s failed: %s", ds__opcode_name(j->op), j->addr, j->err);
}

void ds__holds_session_end(ds_server_t *srv, ds_session_t *s)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL || h->nmirror == 0) return;
    bool held = false;
    for (uint32_t b = 0; b < MIRROR_BUCKETS; b++)
        for (mirror_t **pp = &h->mirror[b]; *pp;) {
            mirror_t *x = *pp;
            if (x->sid != s->id) {
                pp = &x->next;
                continue;
            }
            held |= x->kind == KIND_SEEN || !is_self(srv, ds__cluster_owner(srv, x->key, x->len));
            *pp = x->next;
            free(x);
            h->nmirror--;
        }
    if (!held) return;
    /* Every member: the session's holds may have moved between owners. */
    const char *peers[DS_MAX_MEMBERS];
    size_t np = ds__cluster_peers(srv, peers, DS_MAX_MEMBERS);
    for (size_t m = 0; m < np; m++) {
        ds_job_t *j = ds__job_new(NULL, peers[m], DS_OP_HOLDER_END, quiet_done);
        if (j == NULL) continue;
        ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
        ds__wbuf_u64(&j->req, s->id);
        ds__job_submit(srv, j);
    }
}

static void drop_copy(void *ctx, const char *loc, uint64_t version)
{
    (void)version;
    const char **kp = ctx;
    ds_server_t *srv = (ds_server_t *)(void *)kp[0];
    if (is_self(srv, loc)) return; /* deleted by the caller */
    ds_job_t *j = ds__job_new(NULL, loc, DS_OP_DROP, quiet_done);
    if (j == NULL) return;
    ds__wbuf_u32(&j->req, 1);
    ds__wbuf_str(&j->req, kp[1], (uint32_t)(uintptr_t)kp[2]);
    ds__wbuf_u64(&j->req, UINT64_MAX);
    ds__job_submit(srv, j);
}

bool ds__holds_owns(ds_server_t *srv, const char *key, uint32_t len)
{
    return is_self(srv, ds__cluster_owner(srv, key, len));
}

void ds__holds_gref_gone(ds_server_t *srv, const char *key, uint32_t len)
{
    ds__store_delete(srv->store, key, len);
    if (srv->tier) ds__tier_del(srv, key, len, DS_TIER_UNWATCHED);
    const void *ctx[3] = {srv, key, (const void *)(uintptr_t)len};
    ds__meta_del(ds__cluster_meta(srv), key, len, NULL, 0, drop_copy, (void *)ctx);
}

void ds__holds_ring_changed(ds_server_t *srv, const ds_ring_t *old_ring)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL || h->nmirror == 0) return;
    uint64_t now = ds__now_ms();
    uint32_t moved = 0;
    for (uint32_t b = 0; b < MIRROR_BUCKETS; b++)
        for (mirror_t **pp = &h->mirror[b]; *pp;) {
            mirror_t *x = *pp;
            if (x->kind == KIND_SEEN) {
                pp = &x->next;
                continue;
            }
            ds_session_t *s = ds__session_find(&srv->net, x->sid);
            bool expired = x->kind != KIND_REF && x->until <= now;
            if (s == NULL || expired || x->count == 0) {
                *pp = x->next;
                free(x);
                h->nmirror--;
                continue;
            }
            pp = &x->next;
            const char *was = old_ring ? ds__ring_owner(old_ring, x->key, x->len) : NULL;
            const char *now_owner = ds__cluster_owner(srv, x->key, x->len);
            if (now_owner == NULL || (was && strcmp(was, now_owner) == 0)) continue;
            uint16_t op = x->kind == KIND_REF     ? DS_OP_GREF
                          : x->kind == KIND_WRITE ? DS_OP_WLATCH
                                                  : DS_OP_RLATCH;
            int32_t arg = x->kind == KIND_REF ? 1 : (int32_t)(x->until - now);
            moved++;
            if (is_self(srv, now_owner)) {
                grants_t g = {0};
                for (uint32_t c = 0; c < x->count; c++) {
                    char msg[256];
                    uint32_t count;
                    uint64_t until;
                    if (apply_one(srv, s, op, arg, false, x->key, x->len, &count, &until, msg,
                                  sizeof(msg)) == DS_K_OK &&
                        until && g.n == 0)
                        grant_add(&g, x->key, x->len, until);
                }
                hints_send(srv, NULL, &g);
                grants_free(&g);
                continue;
            }
            if (is_self(srv, was)) {
                /* This worker owned it: what its session held here moves to
                 * the new owner (a reference without deleting anything). */
                char msg[256];
                uint64_t until;
                if (x->kind == KIND_REF) ds__gref_forget(srv, s, x->key, x->len, x->count);
                for (uint32_t c = 0; x->kind != KIND_REF && c < x->count; c++)
                    (void)ds__latch_apply(srv, s,
                                          op == DS_OP_RLATCH ? DS_OP_UNRLATCH : DS_OP_UNWLATCH, 0,
                                          x->key, x->len, true, &until, msg, sizeof(msg));
            }
            ds_job_t *j = ds__job_new(NULL, now_owner, DS_OP_OWNED, quiet_done);
            if (j == NULL) continue;
            ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
            ds__wbuf_u64(&j->req, x->sid);
            ds__wbuf_u32(&j->req, (uint32_t)op | OWNED_REBUILD);
            ds__wbuf_i32(&j->req, arg);
            ds__wbuf_u32(&j->req, x->count);
            for (uint32_t c = 0; c < x->count; c++)
                ds__wbuf_str(&j->req, x->key, x->len);
            ds__job_submit(srv, j);
        }
    if (moved) DS_LOG_INFO("cluster: %u latches and references taken again at new owners", moved);
}
