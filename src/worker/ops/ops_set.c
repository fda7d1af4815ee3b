/* The writing operations: SET (values in the frame's data section, received
 * straight into arena ranges reserved from the metadata), CREATE / PUBLISH
 * (a local client writes the reserved range itself) and RELEASE. A value is
 * invisible until published; a client that lies about lengths or vanishes
 * mid-value leaves nothing behind but the unpublished reservations, which
 * are dropped. */
#include "worker/ops/ops_int.h"

#include "common/clock.h"
#include "common/keys.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every write mode of Yuanrong's table is accepted. Without an L2 backend
 * the L2 modes (WRITE_THROUGH_L2_CACHE, WRITE_BACK_L2_CACHE,
 * WRITE_BACK_L2_CACHE_EVICT) simply cache the object, and are never evicted:
 * no L2 copy exists to fall back on (docs/design.md section 3). */
static bool mode_ok(uint8_t mode, char *msg, size_t cap)
{
    if (mode <= DS_WRITE_BACK_L2_CACHE_EVICT) return true;
    snprintf(msg, cap, "write mode %u is not one of 0..4", mode);
    return false;
}

/* The head SET and CREATE share: write mode, TTL, existence, key count. */
typedef struct {
    uint8_t mode, existence;
    uint32_t ttl, n;
} write_head_t;

static int read_write_head(ds_rbuf_t *r, const char *what, write_head_t *h, char *msg, size_t cap)
{
    /* each entry is at least a 4-byte length, one key byte and a u64 */
    return ds__ops_write_head(r, what, false, 13, &h->mode, &h->ttl, &h->existence, &h->n, msg,
                              cap);
}

int ds__ops_write_head(ds_rbuf_t *r, const char *what, bool may_be_empty, size_t min_entry,
                       uint8_t *mode, uint32_t *ttl, uint8_t *existence, uint32_t *n, char *msg,
                       size_t cap)
{
    write_head_t hd, *h = &hd;
    h->mode = *mode = ds__rbuf_u8(r);
    *ttl = ds__rbuf_u32(r);
    h->existence = *existence = ds__rbuf_u8(r);
    h->n = *n = ds__rbuf_u32(r);
    if (r->err || (h->n == 0 && !may_be_empty) || h->n > DS_MAX_BATCH ||
        (r->len - r->pos) / min_entry < h->n) {
        snprintf(msg, cap, "malformed %s: %u keys (allowed %u..%u) or metadata too short", what,
                 h->n, may_be_empty ? 0 : 1, DS_MAX_BATCH);
        return -1;
    }
    if (!mode_ok(h->mode, msg, cap)) return -1;
    if (h->existence > DS_EXISTENCE_NX) {
        snprintf(msg, cap, "existence option %u is not NONE(0) or NX(1)", h->existence);
        return -1;
    }
    return 0;
}

void ds__ops_reply_statuses(ds_req_t *r, const uint32_t *st, uint32_t n, const char *first_err)
{
    ds_status_t overall = DS_K_OK;
    for (uint32_t i = 0; i < n; i++)
        if (st[i] != DS_K_OK) {
            overall = (ds_status_t)st[i];
            break;
        }
    ds_wbuf_t w;
    uint8_t room[DS_REPLY_ROOM];
    ds__wbuf_init_on(&w, room, sizeof(room));
    ds__wbuf_cstr(&w, overall == DS_K_OK ? "" : first_err);
    ds__wbuf_u32(&w, n);
    for (uint32_t i = 0; i < n; i++)
        ds__wbuf_u32(&w, st[i]);
    ds__req_reply(r, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

void ds__ops_answer_published(ds_server_t *srv, ds_req_t *r, ds_obj_t **published,
                              const uint32_t *st, uint32_t n, bool nx, const char *first_err)
{
    if (srv->tier && ds__tier_hold_answer(srv, r, published, st, n, nx, first_err)) return;
    ds__ops_answer_durable(srv, r, published, st, n, nx, first_err);
}

void ds__ops_answer_durable(ds_server_t *srv, ds_req_t *r, ds_obj_t **published, const uint32_t *st,
                            uint32_t n, bool nx, const char *first_err)
{
    if (srv->remote == NULL || (r->flags & DS_FLAG_PEER) || published == NULL)
        ds__ops_reply_statuses(r, st, n, first_err);
    else
        srv->remote->published(srv, r, published, st, n, nx, first_err);
}

/* ---- SET ---- */

/* The whole SET fails: an answer with only the message, which the client
 * applies to every key of the request (a status list would have to match
 * the request's key count, which a malformed request may not say). */
static void refuse(ds_req_t *r, ds_status_t st, const char *msg)
{
    ds__req_error(r, st, "%s", msg);
}

/* A SET between its metadata and its last data byte. It is one allocation
 * with its per-key arrays after it (set_new): a small SET was five. */
typedef struct {
    ds_server_t *srv;
    uint32_t n;
    uint8_t existence;
    ds_obj_t **pend;       /* reserved objects, one per key (NULL where it failed) */
    ds_obj_t **published;  /* set_publish's list of what it published */
    uint32_t *status;      /* per key */
    ds_sink_t *sinks;      /* where each value's bytes go */
    ds_published_fn after; /* see ds__ops_publish_written */
    uint64_t after_arg[3];
    char *err; /* the first failure's message (NULL: none yet), allocated only then */
} set_t;

static set_t *set_new(uint32_t n)
{
    size_t arrays = (size_t)n * (2 * sizeof(ds_obj_t *) + sizeof(ds_sink_t) + sizeof(uint32_t));
    set_t *s = malloc(sizeof(*s) + arrays);
    if (s == NULL) return NULL;
    memset(s, 0, sizeof(*s));
    uint8_t *p = (uint8_t *)(s + 1);
    memset(p, 0, arrays);
    s->pend = (ds_obj_t **)(void *)p;
    s->published = s->pend + n;
    s->sinks = (ds_sink_t *)(void *)(s->published + n);
    s->status = (uint32_t *)(void *)(s->sinks + n);
    return s;
}

static void set_free(set_t *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->pend[i]) ds__store_unref(s->srv->store, s->pend[i]);
    free(s->err);
    free(s);
}

/* Keeps the first failure's message (a failure to copy it loses only the
 * text: every key's status still says what happened). */
static void set_err(set_t *s, const char *msg)
{
    if (s->err == NULL && msg && msg[0]) s->err = strdup(msg);
}

static void set_publish(ds_server_t *srv, ds_req_t *r, void *ctx);

static void set_cancel(void *ctx)
{
    set_free(ctx);
}

/* Every value has arrived (r), or the connection closed (r NULL). A key
 * under a read latch holds the publish back until the latch goes. */
static void set_finish(void *ctx, ds_req_t *r)
{
    set_t *s = ctx;
    ds_server_t *srv = s->srv;
    if (r == NULL) {
        set_free(s);
        return;
    }
    if (ds__latch_any(srv)) {
        const char **kp = malloc(s->n * sizeof(*kp));
        uint32_t *kl = malloc(s->n * sizeof(*kl));
        uint32_t k = 0;
        for (uint32_t i = 0; kp && kl && i < s->n; i++)
            if (s->pend[i]) {
                kp[k] = s->pend[i]->key;
                kl[k++] = s->pend[i]->keylen;
            }
        bool parked =
            kp && kl && k && ds__latch_park(srv, r, kp, kl, k, set_publish, set_cancel, s);
        free(kp);
        free(kl);
        if (parked) return;
    }
    set_publish(srv, r, s);
}

/* Whether o (not NX) would replace a sealed version (SEAL): msg then says
 * so. ds__store_publish refuses it anyway; with a storage tier this is
 * checked before the tier is asked, so nothing of a refused version is
 * written to L2 (without one, the write costs no extra lookup). */
static bool sealed_key(ds_server_t *srv, const ds_obj_t *o, uint8_t existence, ds_status_t st,
                       uint64_t now, char *msg, size_t cap)
{
    if (existence == DS_EXISTENCE_NX) return false;
    if (st != DS_K_OC_ALREADY_SEALED && srv->remote && srv->remote->sealed &&
        srv->remote->sealed(srv, o->key, o->keylen))
        st = DS_K_OC_ALREADY_SEALED; /* sealed at the key's owner */
    if (st != DS_K_OC_ALREADY_SEALED) {
        if (srv->tier == NULL) return false;
        const ds_obj_t *cur = ds__store_lookup(srv->store, o->key, o->keylen, now);
        if (cur == NULL || !cur->sealed) return false;
    }
    snprintf(msg, cap, "object '%.200s' already be sealed.", o->key);
    return true;
}

static void set_publish(ds_server_t *srv, ds_req_t *r, void *ctx)
{
    set_t *s = ctx;
    uint64_t now = ds__now_ms();
    ds_obj_t **published = s->published;
    for (uint32_t i = 0; i < s->n; i++) {
        ds_obj_t *o = s->pend[i];
        if (o == NULL) continue;
        ds_status_t st = DS_K_OK;
        char sealed_msg[256];
        if (sealed_key(srv, o, s->existence, st, now, sealed_msg, sizeof(sealed_msg))) {
            s->status[i] = DS_K_OC_ALREADY_SEALED;
            set_err(s, sealed_msg);
            continue;
        }
        if (srv->tier) {
            char msg[256];
            st = ds__tier_admit(srv, o, s->existence == DS_EXISTENCE_NX, msg, sizeof(msg));
            if (st == DS_K_WRITE_BACK_QUEUE_FULL) {
                s->status[i] = (uint32_t)st;
                set_err(s, msg);
                continue;
            }
        }
        if (st == DS_K_OK) st = ds__store_publish(srv->store, o, (ds_existence_t)s->existence, now);
        if (st == DS_K_OC_ALREADY_SEALED &&
            sealed_key(srv, o, s->existence, st, now, sealed_msg, sizeof(sealed_msg))) {
            s->status[i] = (uint32_t)st;
            set_err(s, sealed_msg);
            continue;
        }
        /* NX of an existing key keeps the old value and is a success (as in
         * Yuanrong): the reservation is dropped with the SET. */
        s->status[i] = DS_K_OK;
        if (st == DS_K_OK) {
            ds__subs_publish(&srv->subs, o->key, o->keylen);
            published[i] = o;
            if (srv->tier) ds__tier_published(srv, o, i);
        }
    }
    if (s->after) s->after(srv, r, s->after_arg, s->pend, s->n);
    ds__ops_answer_published(srv, r, published, s->status, s->n, s->existence == DS_EXISTENCE_NX,
                             s->err ? s->err : "");
    set_free(s);
}

void ds__ops_publish_written(ds_server_t *srv, ds_req_t *r, ds_obj_t **pend, uint32_t *status,
                             uint32_t n, uint8_t existence, const char *first_err,
                             ds_published_fn after, const uint64_t after_arg[3])
{
    set_t *s = set_new(n);
    if (s == NULL) {
        for (uint32_t i = 0; i < n; i++)
            if (pend[i]) ds__store_unref(srv->store, pend[i]);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    s->srv = srv;
    s->n = n;
    s->existence = existence;
    memcpy(s->pend, pend, n * sizeof(*pend));
    memcpy(s->status, status, n * sizeof(*status));
    set_err(s, first_err);
    s->after = after;
    memcpy(s->after_arg, after_arg, sizeof(s->after_arg));
    set_finish(s, r);
}

void ds__ops_set(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    write_head_t wh;
    char msg[1024];
    if (read_write_head(&rb, "SET", &wh, msg, sizeof(msg)) != 0) {
        refuse(r, DS_K_INVALID, msg); /* the data section is skipped */
        return;
    }
    uint32_t n = wh.n;
    set_t *s = set_new(n);
    /* A small batch's keys are listed on the stack. */
    const char *kp_small[16];
    uint32_t kl_small[16];
    bool small = n <= 16;
    const char **kp = small ? kp_small : malloc(n * sizeof(*kp));
    uint32_t *kl = small ? kl_small : malloc(n * sizeof(*kl));
    if (s) {
        s->srv = srv;
        s->existence = wh.existence;
    }
    if (!s || !kp || !kl) {
        if (s) set_free(s);
        if (!small) {
            free(kp);
            free(kl);
        }
        refuse(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    s->n = n;
    /* Every length is checked against what is left of the data section
     * before it is added, so no sum can wrap around. */
    uint64_t left = r->data_len;
    bool lengths_ok = true;
    for (uint32_t i = 0; i < n; i++) {
        kl[i] = ds__rbuf_str(&rb, &kp[i]);
        s->sinks[i].len = ds__rbuf_u64(&rb);
        if (s->sinks[i].len > left) lengths_ok = false;
        if (lengths_ok) left -= s->sinks[i].len;
    }
    if (!ds__rbuf_done(&rb) || !lengths_ok || left != 0) {
        snprintf(msg, sizeof(msg),
                 "malformed SET: the %u value sizes do not add up to the data section's "
                 "%" PRIu64 " bytes",
                 n, r->data_len);
        refuse(r, DS_K_INVALID, msg);
        set_free(s);
        if (!small) {
            free(kp);
            free(kl);
        }
        return;
    }
    uint64_t short_bytes = 0; /* what the arena had no room for */
    for (uint32_t i = 0; i < n; i++) {
        ds_status_t st;
        if (ds__key_check(kp[i], kl[i], msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (s->sinks[i].len == 0) {
            snprintf(msg, sizeof(msg), "value for key '%.*s' is empty", (int)kl[i], kp[i]);
            st = DS_K_INVALID;
        } else {
            st = ds__store_reserve(srv->store, kp[i], kl[i], s->sinks[i].len,
                                   (ds_write_mode_t)wh.mode, wh.ttl, &s->pend[i], msg, sizeof(msg));
            if (st == DS_K_OUT_OF_MEMORY && srv->tier) {
                ds__tier_oom(srv, s->sinks[i].len, msg, sizeof(msg));
                short_bytes += s->sinks[i].len;
            }
        }
        s->status[i] = (uint32_t)st;
        if (st == DS_K_OK)
            s->sinks[i].p = ds__store_data(srv->store, s->pend[i]);
        else
            set_err(s, msg);
    }
    if (!small) {
        free(kp);
        free(kl);
    }
    /* The arena is full: wait while spills make room, then run again (the
     * data section stays unread meanwhile). */
    if (short_bytes && ds__tier_wait_room(srv, r, short_bytes, ds__ops_set)) {
        set_free(s);
        return;
    }
    ds__req_recv_data(r, s->sinks, n, set_finish, s);
    /* A SET that waited: its connection reads the values now. */
    if (ds__req_is_deferred(r)) ds__req_drop(r);
}

/* ---- CREATE, PUBLISH, RELEASE ---- */

void ds__ops_create(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    write_head_t wh;
    char msg[1024];
    if (read_write_head(&rb, "CREATE", &wh, msg, sizeof(msg)) != 0) {
        ds__req_error(r, DS_K_INVALID, "%s", msg);
        return;
    }
    if (!r->session->shm) {
        ds__req_error(r, DS_K_NOT_SUPPORTED, "CREATE needs a local client that mapped the arena");
        return;
    }
    /* Reserve every key first: when the arena is full and spills can make
     * room, the CREATE waits and runs again with nothing reserved. */
    ds_obj_t **objs = calloc(wh.n, sizeof(*objs));
    uint32_t *sts = calloc(wh.n, sizeof(*sts));
    if (objs == NULL || sts == NULL) {
        free(objs);
        free(sts);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds_status_t overall = DS_K_OK;
    char first[1024] = "";
    uint64_t short_bytes = 0;
    for (uint32_t i = 0; i < wh.n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint64_t size = ds__rbuf_u64(&rb);
        ds_status_t st = DS_K_OK;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed CREATE: entry %u truncated", i);
            st = DS_K_INVALID;
        } else if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (size == 0) {
            snprintf(msg, sizeof(msg), "value for key '%.*s' is empty", (int)kl, k);
            st = DS_K_INVALID;
        } else {
            st = ds__store_reserve(srv->store, k, kl, size, (ds_write_mode_t)wh.mode, wh.ttl,
                                   &objs[i], msg, sizeof(msg));
            if (st == DS_K_OUT_OF_MEMORY && srv->tier) {
                ds__tier_oom(srv, size, msg, sizeof(msg));
                short_bytes += size;
            }
        }
        sts[i] = (uint32_t)st;
        if (st != DS_K_OK && overall == DS_K_OK) {
            overall = st;
            snprintf(first, sizeof(first), "%s", msg);
        }
    }
    if (short_bytes && ds__tier_wait_room(srv, r, short_bytes, ds__ops_create)) {
        for (uint32_t i = 0; i < wh.n; i++)
            if (objs[i]) ds__store_unref(srv->store, objs[i]);
        free(objs);
        free(sts);
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, wh.n);
    for (uint32_t i = 0; i < wh.n; i++) {
        ds_status_t st = (ds_status_t)sts[i];
        ds_obj_t *o = objs[i];
        uint64_t handle = 0;
        if (st == DS_K_OK) {
            handle = ds__session_add(r->session, o, wh.existence);
            if (handle == 0) {
                ds__store_unref(srv->store, o);
                st = DS_K_OUT_OF_MEMORY;
                if (overall == DS_K_OK) {
                    overall = st;
                    snprintf(first, sizeof(first), "out of memory");
                }
            }
        }
        ds__wbuf_u32(&w, (uint32_t)st);
        ds__wbuf_u64(&w, st == DS_K_OK ? ds__store_offset(srv->store, o) : 0);
        ds__wbuf_u64(&w, handle);
    }
    free(objs);
    free(sts);
    if (overall != DS_K_OK) ds__ops_lead_error(&w, first);
    ds__req_reply(r, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void publish_resume(ds_server_t *srv, ds_req_t *d, void *ctx)
{
    (void)ctx;
    ds__ops_publish_release(srv, d);
}

/* A PUBLISH of a key under a read latch waits for the latch (latch.c). */
static bool publish_parked(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 4 * DS_MAX_BATCH, 8);
    if (rb.err || n == 0 || r->session == NULL) return false;
    const char **kp = malloc(n * sizeof(*kp));
    uint32_t *kl = malloc(n * sizeof(*kl));
    uint32_t k = 0;
    for (uint32_t i = 0; kp && kl && i < n; i++) {
        ds_slot_t *sl = ds__session_slot(r->session, ds__rbuf_u64(&rb));
        if (sl && sl->obj->state == DS_OBJ_CREATING) {
            kp[k] = sl->obj->key;
            kl[k++] = sl->obj->keylen;
        }
    }
    bool parked = kp && kl && k && ds__latch_park(srv, r, kp, kl, k, publish_resume, NULL, NULL);
    free(kp);
    free(kl);
    return parked;
}

void ds__ops_publish_release(ds_server_t *srv, ds_req_t *r)
{
    bool publish = r->op == DS_OP_PUBLISH;
    if (publish && !(r->flags & DS_FLAG_NOREPLY) && ds__latch_any(srv) && publish_parked(srv, r))
        return;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, 4 * DS_MAX_BATCH, 8);
    bool noreply = r->flags & DS_FLAG_NOREPLY;
    if (rb.err) {
        if (!noreply) ds__req_error(r, DS_K_INVALID, "malformed %s", ds__opcode_name(r->op));
        return;
    }
    uint32_t *st = calloc(n ? n : 1, sizeof(*st));
    ds_obj_t **published = calloc(n ? n : 1, sizeof(*published));
    bool any_nx = false; /* a PUBLISH batch mixing NX and not is treated as NX */
    char first[512] = "";
    uint64_t now = ds__now_ms();
    for (uint32_t i = 0; st && i < n; i++) {
        uint64_t h = ds__rbuf_u64(&rb);
        if (!publish) {
            st[i] = ds__session_release(srv->store, r->session, h) ? DS_K_OK : DS_K_INVALID;
            continue;
        }
        ds_slot_t *sl = ds__session_slot(r->session, h);
        if (sl == NULL || sl->obj->state != DS_OBJ_CREATING) {
            st[i] = DS_K_INVALID;
            if (!first[0])
                snprintf(first, sizeof(first), "handle %" PRIx64 " is not an unpublished buffer",
                         h);
            continue;
        }
        any_nx |= sl->existence == DS_EXISTENCE_NX;
        char sealed_msg[256];
        if (sealed_key(srv, sl->obj, sl->existence, DS_K_OK, now, sealed_msg, sizeof(sealed_msg))) {
            st[i] = DS_K_OC_ALREADY_SEALED;
            if (!first[0]) snprintf(first, sizeof(first), "%s", sealed_msg);
            continue;
        }
        ds_status_t s = DS_K_OK;
        if (srv->tier) {
            char msg[256];
            s = ds__tier_admit(srv, sl->obj, sl->existence == DS_EXISTENCE_NX, msg, sizeof(msg));
            if (s == DS_K_WRITE_BACK_QUEUE_FULL) {
                st[i] = (uint32_t)s;
                if (!first[0]) snprintf(first, sizeof(first), "%s", msg);
                continue;
            }
        }
        if (s == DS_K_OK)
            s = ds__store_publish(srv->store, sl->obj, (ds_existence_t)sl->existence, now);
        if (s == DS_K_OC_ALREADY_SEALED &&
            sealed_key(srv, sl->obj, sl->existence, s, now, sealed_msg, sizeof(sealed_msg))) {
            st[i] = (uint32_t)s;
            if (!first[0]) snprintf(first, sizeof(first), "%s", sealed_msg);
            continue;
        }
        /* NX of an existing key: a success that keeps the old value. */
        st[i] = DS_K_OK;
        if (s == DS_K_OK) {
            ds__subs_publish(&srv->subs, sl->obj->key, sl->obj->keylen);
            if (published) published[i] = sl->obj;
            if (srv->tier) ds__tier_published(srv, sl->obj, i);
        }
    }
    /* a waiter opened for this request's L2 jobs that no answer will hold */
    if (srv->tier && (noreply || st == NULL || published == NULL || !publish))
        ds__tier_no_answer(srv);
    if (!noreply) {
        if (st == NULL || published == NULL)
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        else if (!publish)
            ds__req_error(r, DS_K_OK, "%s", "");
        else
            ds__ops_answer_published(srv, r, published, st, n, any_nx, first);
    }
    free(published);
    free(st);
}
