/* Latches and global references: sessions that end, references that end,
 * the rebuild of holds at new owners when the ring changes, and the wait
 * of a new owner for that rebuild (REBUILD_DONE). The design is in
 * cluster_hold.c. */
#include "worker/cluster/cluster_hold_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A copy of a key whose references all went: every copy goes. A hot copy
 * (version 0) goes by HOT_DROP, which also stops one still on its way to
 * that worker (its HOT_ADD answered before this drop, the answer not yet
 * read there); this worker's own object the caller deleted. */
static void drop_copy(void *ctx, const char *loc, uint64_t version)
{
    const char **kp = ctx;
    ds_server_t *srv = (ds_server_t *)(void *)kp[0];
    const char *key = kp[1];
    uint32_t len = (uint32_t)(uintptr_t)kp[2];
    bool hot = version == 0;
    if (is_self(srv, loc)) {
        if (hot) ds__repl_drop_hot(srv, key, len);
        return;
    }
    ds_job_t *j = ds__job_new(NULL, loc, hot ? DS_OP_HOT_DROP : DS_OP_DROP, quiet_done);
    if (j == NULL) return;
    ds__wbuf_u32(&j->req, 1);
    ds__wbuf_str(&j->req, key, len);
    if (!hot) ds__wbuf_u64(&j->req, UINT64_MAX);
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
                 * the new owner (a reference without deleting anything). A
                 * latch stays hinted here, so the writes it held back here
                 * wait at the new owner next. */
                char msg[256];
                uint64_t until;
                if (x->kind != KIND_REF) hint_put(h, x->key, x->len, x->until);
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
            ds__rebuild_submit(srv, j);
        }
    if (moved) DS_LOG_INFO("cluster: %u latches and references taken again at new owners", moved);
}

/* ---- an old owner's copies of latches that moved ----
 *
 * A member's sessions' latches on keys this worker owned, and owns no
 * more, are at their new owner once that member said it sent its rebuild
 * for this worker's ring (REBUILD_DONE naming it): their releases go there,
 * so this worker's copies go (the new owner's hint of them stays, so a
 * write here asks the new owner, and a client's write parked here behind
 * them goes to wait there). */

typedef struct {
    ds_server_t *srv;
    ds_holds_t *h;
} moved_ctx_t;

static bool moved_away(void *ctx, const char *key, uint32_t len, uint64_t deadline)
{
    moved_ctx_t *m = ctx;
    const char *owner = ds__cluster_owner(m->srv, key, len);
    if (owner == NULL || is_self(m->srv, owner)) return false;
    hint_put(m->h, key, len, deadline);
    return true;
}

static void drop_moved(ds_server_t *srv, ds_holds_t *h, const char *addr)
{
    moved_ctx_t m = {srv, h};
    for (rholder_t *x = h->holders; x; x = x->next)
        if (strcmp(x->addr, addr) == 0) ds__latch_holder_drop_if(srv, x, moved_away, &m);
}

/* Called once this worker's ring is ring_id: the members that said they
 * sent their rebuild for it before this worker saw it. */
static void drop_moved_done(ds_server_t *srv, ds_holds_t *h)
{
    uint64_t id = ds__cluster_ring_id(srv);
    for (done_peer_t *x = h->done; x; x = x->next)
        if (x->ring_id == id) drop_moved(srv, h, x->addr);
}

/* ---- the wait for the rebuild ----
 *
 * A new owner learns a key's holds from every member (each sends what its
 * sessions hold, its sealed copies, its nested holds), asynchronously.
 * Each member, once what it sent for a ring change is answered, tells every
 * other (REBUILD_DONE, naming the members' identity it sent for). Until a
 * new owner has that from every member of its ring, the keys that came to
 * it with the change answer K_TRY_AGAIN; a member that never says so (it
 * stalls, or it is gone and the ring is about to change again) holds them
 * for --node_timeout_s at most, the time it takes its lease to lapse. */

static void done_to(ds_server_t *srv, const char *addr, uint32_t attempt);

/* A REBUILD_DONE that failed is sent again (twice at most) while its
 * member is in the ring and the ring is the one it names. */
static void done_sent(ds_job_t *j)
{
    if (!j->transport_failed && j->status == DS_K_OK) return;
    ds_server_t *srv = j->ctx;
    bool again = j->index < 2 && j->version == ds__cluster_ring_id(srv) &&
                 ds__ring_has(ds__cluster_ring(srv), j->addr);
    DS_LOG_WARN("cluster: telling %s the rebuild is sent failed%s: %s", j->addr,
                again ? " (sending it again)" : "", j->err);
    if (again) done_to(srv, j->addr, j->index + 1);
}

static void done_to(ds_server_t *srv, const char *addr, uint32_t attempt)
{
    ds_job_t *j = ds__job_new(NULL, addr, DS_OP_REBUILD_DONE, done_sent);
    if (j == NULL) return;
    j->ctx = srv;
    j->index = attempt;
    j->version = ds__cluster_ring_id(srv);
    ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
    ds__wbuf_u64(&j->req, j->version);
    ds__job_submit(srv, j);
}

static void done_send(ds_server_t *srv, ds_holds_t *h)
{
    h->rb_due = false;
    const char *peers[DS_MAX_MEMBERS];
    size_t np = ds__cluster_peers(srv, peers, DS_MAX_MEMBERS);
    for (size_t m = 0; m < np; m++)
        done_to(srv, peers[m], 0);
}

static void rebuild_job_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("cluster: %s to %s failed: %s", ds__opcode_name(j->op), j->addr, j->err);
    ds_holds_t *h = *ds__cluster_holds(j->ctx);
    if (h == NULL) return;
    if (h->rb_out > 0) h->rb_out--;
    if (h->rb_out == 0 && h->rb_due) done_send(j->ctx, h);
}

void ds__rebuild_submit(ds_server_t *srv, ds_job_t *j)
{
    ds_holds_t *h = holds(srv);
    if (h) {
        h->rb_out++;
        j->ctx = srv;
        j->done = rebuild_job_done;
    }
    ds__job_submit(srv, j);
}

void ds__rebuild_round(ds_server_t *srv, const ds_ring_t *old_ring)
{
    ds_holds_t *h = holds(srv);
    if (h == NULL) return;
    /* The keys that came here since the last complete rebuild: measured
     * against the ring before the earliest change not rebuilt yet. */
    if (h->rb_old == NULL) {
        /* A ring of this worker alone is the one it starts with (or it was
         * alone): the keys it owns now came with the change. */
        size_t n = old_ring ? ds__ring_size(old_ring) : 0;
        if (n == 1) n = 0;
        const char **addrs = malloc((n ? n : 1) * sizeof(*addrs));
        for (size_t i = 0; addrs && i < n; i++)
            addrs[i] = ds__ring_member(old_ring, i);
        h->rb_old = addrs ? ds__ring_build(addrs, n) : NULL;
        free(addrs);
    }
    h->rb_until = ds__now_ms() + (uint64_t)srv->cfg.node_timeout_s * 1000u;
    h->rb_due = true;
    drop_moved_done(srv, h);
    if (h->rb_out == 0) done_send(srv, h);
}

/* Whether every other member said it sent its rebuild for this ring (or
 * the wait is over); the wait ends then. */
static bool rebuild_settled(ds_server_t *srv, ds_holds_t *h)
{
    if (h->rb_old == NULL) return true;
    const char *peers[DS_MAX_MEMBERS];
    size_t np = ds__cluster_peers(srv, peers, DS_MAX_MEMBERS);
    uint64_t id = ds__cluster_ring_id(srv);
    const char *missing = NULL;
    size_t nmissing = 0;
    for (size_t m = 0; m < np; m++) {
        done_peer_t *x = h->done;
        while (x && strcmp(x->addr, peers[m]) != 0)
            x = x->next;
        if (x == NULL || x->ring_id != id) {
            if (missing == NULL) missing = peers[m];
            nmissing++;
        }
    }
    if (nmissing > 0 && ds__now_ms() < h->rb_until) return false;
    if (nmissing > 0)
        DS_LOG_WARN("cluster: %zu members (%s first) did not send their rebuild within "
                    "--node_timeout_s %lld s: serving the keys that came here without it",
                    nmissing, missing, (long long)srv->cfg.node_timeout_s);
    else
        DS_LOG_INFO("cluster: every member sent its rebuild");
    ds__ring_free(h->rb_old);
    h->rb_old = NULL;
    /* The writes that waited ask again (what they wait for now is there). */
    rb_wait_t *w = h->rb_waits;
    h->rb_waits = NULL;
    while (w) {
        rb_wait_t *x = w;
        w = x->next;
        ds__req_unpark(x->d);
        if (ds__req_gone(x->d))
            ds__req_drop(x->d);
        else
            latch_wait_op(srv, x->d);
        free(x);
    }
    return true;
}

bool rebuild_park(ds_server_t *srv, ds_req_t *r)
{
    ds_holds_t *h = holds(srv);
    rb_wait_t *x = h ? malloc(sizeof(*x)) : NULL;
    ds_req_t *d = x ? ds__req_park(r, NULL, NULL) : NULL;
    if (d == NULL) {
        free(x);
        return false;
    }
    x->d = d;
    x->next = h->rb_waits;
    h->rb_waits = x;
    return true;
}

uint64_t ds__rebuild_tick(ds_server_t *srv, uint64_t now)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL || h->rb_old == NULL || h->rb_waits == NULL) return 0;
    if (now < h->rb_until) return h->rb_until;
    (void)rebuild_settled(srv, h);
    return 0;
}

bool ds__rebuild_pending(ds_server_t *srv, const char *key, uint32_t len, char *msg, size_t cap)
{
    ds_holds_t *h = *ds__cluster_holds(srv);
    if (h == NULL || h->rb_old == NULL) return false;
    const char *owner = ds__cluster_owner(srv, key, len);
    if (owner == NULL || !is_self(srv, owner)) return false;
    const char *was = ds__ring_owner(h->rb_old, key, len);
    if (was && is_self(srv, was)) return false; /* owned here before the change */
    if (ds__key_check(key, len, msg, cap) != 0 || rebuild_settled(srv, h)) return false;
    snprintf(msg, cap,
             "key '%.*s': its owner %s is rebuilding the cluster's holds after a ring change "
             "(recovery is incomplete); try again",
             (int)(len > 64 ? 64 : len), key, owner);
    return true;
}

void rebuild_done_op(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    const char *from;
    uint64_t id;
    uint32_t fl = read_sender(&rb, r, &from, &id);
    ds_holds_t *h = holds(srv);
    if (rb.err || fl == 0 || fl >= sizeof(h->done->addr)) {
        ds__req_error(r, DS_K_INVALID, "malformed REBUILD_DONE");
        return;
    }
    if (h == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    done_peer_t *x = h->done;
    while (x && (strlen(x->addr) != fl || memcmp(x->addr, from, fl) != 0))
        x = x->next;
    if (x == NULL) {
        if ((x = calloc(1, sizeof(*x))) == NULL) {
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
            return;
        }
        memcpy(x->addr, from, fl);
        x->next = h->done;
        h->done = x;
    }
    x->ring_id = id;
    if (id == ds__cluster_ring_id(srv)) drop_moved(srv, h, x->addr);
    (void)rebuild_settled(srv, h);
    ds__req_error(r, DS_K_OK, "%s", "");
}
