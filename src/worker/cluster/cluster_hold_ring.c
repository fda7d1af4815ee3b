/* Latches and global references: sessions that end, references that end,
 * and the rebuild of holds at new owners when the ring changes. The design
 * is in cluster_hold.c. */
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
