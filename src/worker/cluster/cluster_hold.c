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
 * keys' new owners, which hint them again, and then tells every member it
 * is done (REBUILD_DONE). Until every member did (or --node_timeout_s
 * passed), a new owner answers K_TRY_AGAIN for the holds of the keys that
 * came to it, so nobody sees a count or latch that is still on its way; the
 * client library asks again within its request timeout. A write of such a
 * key through another member (LATCH_WAIT) waits there for the rebuild; one
 * through the new owner itself does not. */
#include "worker/cluster/cluster_hold_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ds_holds_t *holds(ds_server_t *srv)
{
    ds_holds_t **h = ds__cluster_holds(srv);
    if (*h == NULL) *h = calloc(1, sizeof(**h));
    return *h;
}

uint32_t read_sender(ds_rbuf_t *rb, const ds_req_t *r, const char **addr, uint64_t *id)
{
    ds__rbuf_init(rb, r->meta, r->meta_len);
    uint32_t len = ds__rbuf_str(rb, addr);
    *id = ds__rbuf_u64(rb);
    return len;
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
    while (h->done) {
        done_peer_t *x = h->done;
        h->done = x->next;
        free(x);
    }
    ds__ring_free(h->rb_old);
    /* Parked LATCH_WAITs: their connections are gone by now. */
    while (h->rb_waits) {
        struct rb_wait *x = h->rb_waits;
        h->rb_waits = x->next;
        free(x);
    }
    free(h);
}

bool is_self(ds_server_t *srv, const char *addr)
{
    return addr == NULL || strcmp(addr, ds__cluster_self(srv)) == 0;
}

/* ---- holders that are other workers' sessions ---- */

rholder_t *rholder_find(ds_holds_t *h, const char *addr, uint32_t al, uint64_t sid)
{
    for (rholder_t *x = h->holders; x; x = x->next)
        if (x->sid == sid && strlen(x->addr) == al && memcmp(x->addr, addr, al) == 0) return x;
    return NULL;
}

rholder_t *rholder_get(ds_holds_t *h, const char *addr, uint32_t al, uint64_t sid)
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
void holders_end(ds_server_t *srv, const char *addr, uint32_t al, uint64_t sid)
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
    ds_holds_t *h = *ds__cluster_holds(srv);
    for (done_peer_t **pp = h ? &h->done : NULL; pp && *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->addr, addr) == 0) {
            done_peer_t *x = *pp;
            *pp = x->next;
            free(x);
            break;
        }
}

/* ---- hints ---- */

uint32_t hint_bucket(const char *k, uint32_t kl)
{
    return ds__murmur3_32(k, kl, 0x68696e74u) & (HINT_BUCKETS - 1);
}

void hint_put(ds_holds_t *h, const char *k, uint32_t kl, uint64_t until)
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

uint32_t ds__holds_seal_hints(ds_server_t *srv)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    uint64_t soon = ds__now_ms() + UINT32_MAX / 2; /* a latch's hint ends long before */
    uint32_t n = 0;
    for (uint32_t b = 0; h && b < HINT_BUCKETS; b++)
        for (hint_t *x = h->hints[b]; x; x = x->next)
            n += x->until > soon;
    return n;
}

/* Whether k is hinted latched now (an expired hint found goes). */
bool hinted(ds_holds_t *h, const char *k, uint32_t kl, uint64_t now)
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

mirror_t **mirror_find(ds_holds_t *h, uint64_t sid, uint8_t kind, const char *k, uint32_t kl)
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
void mirror_note(ds_holds_t *h, uint64_t sid, uint8_t kind, const char *k, uint32_t kl, int delta,
                 uint64_t until)
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

uint8_t op_kind(uint16_t op)
{
    if (op == DS_OP_GREF) return KIND_REF;
    return op == DS_OP_WLATCH || op == DS_OP_UNWLATCH ? KIND_WRITE : KIND_READ;
}

/* ---- applying holds (origin and owner alike) ---- */

void grant_add(grants_t *g, const char *k, uint32_t kl, uint64_t until)
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

void grants_free(grants_t *g)
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
void hints_send(ds_server_t *srv, ds_pend_t *p, const grants_t *g)
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
ds_status_t apply_one(ds_server_t *srv, const void *holder, uint16_t op, int32_t arg,
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

bool op_ok(uint16_t op)
{
    return op == DS_OP_RLATCH || op == DS_OP_UNRLATCH || op == DS_OP_WLATCH ||
           op == DS_OP_UNWLATCH || op == DS_OP_GREF;
}
