/* The operations: one handler per opcode of the table in common/wire.h (the
 * writing ones in ops_set.c). Each parses its metadata with the
 * bounds-checked reader, validates every key and limit (the worker never
 * trusts a client to have checked), acts on the store and answers through
 * the request layer. Malformed metadata gets a K_INVALID answer naming the
 * problem; the connection stays usable because the frame's boundaries are
 * known. */
#include "worker/ops/ops_int.h"
#include "worker/ops/stream.h"

#include "common/clock.h"
#include "common/keys.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    uint32_t len;
} key_t_;

/* Batches of up to this many keys are handled in arrays on the stack: a
 * single-key GET then allocates nothing. */
#define SMALL_BATCH 16u

/* Reads n keys (n bounded by max). On any invalid key fills msg and returns
 * -1 (bad) or -2 (malformed metadata). On success keys is small when the
 * batch fits its nsmall entries, else malloc'd (free_keys frees either). */
static int read_keys_into(ds_rbuf_t *r, uint32_t max, key_t_ **keys, uint32_t *n, char *msg,
                          size_t cap, key_t_ *small, uint32_t nsmall)
{
    uint32_t cnt = ds__rbuf_u32(r);
    if (r->err) {
        snprintf(msg, cap, "malformed request: missing key count");
        return -2;
    }
    if (cnt == 0 || cnt > max) {
        snprintf(msg, cap, "batch of %u keys is outside 1..%u", cnt, max);
        return -1;
    }
    if ((r->len - r->pos) / 5 < cnt) {
        snprintf(msg, cap, "malformed request: %u keys announced, metadata too short", cnt);
        return -2;
    }
    key_t_ *k = cnt <= nsmall ? small : malloc(cnt * sizeof(*k));
    if (k == NULL) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < cnt; i++) {
        k[i].len = ds__rbuf_str(r, &k[i].p);
        if (r->err) {
            if (k != small) free(k);
            snprintf(msg, cap, "malformed request: key %u truncated", i);
            return -2;
        }
    }
    *keys = k;
    *n = cnt;
    return 0;
}

static int read_keys(ds_rbuf_t *r, uint32_t max, key_t_ **keys, uint32_t *n, char *msg, size_t cap)
{
    return read_keys_into(r, max, keys, n, msg, cap, NULL, 0);
}

static void free_keys(key_t_ *keys, const key_t_ *small)
{
    if (keys != small) free(keys);
}

void ds__ops_lead_error(ds_wbuf_t *w, const char *msg)
{
    ds_wbuf_t e;
    ds__wbuf_init(&e);
    ds__wbuf_cstr(&e, msg);
    ds__wbuf_bytes(&e, w->buf + 4, w->len - 4);
    ds__wbuf_free(w);
    *w = e;
}

/* ---- GET ---- */

void ds__ops_reply_values(ds_server_t *srv, ds_req_t *r, ds_status_t st, ds_wbuf_t *w,
                          const struct iovec *segs, ds_obj_t **refs, uint32_t nseg)
{
    if (w->oom) {
        for (uint32_t i = 0; i < nseg; i++)
            ds__store_unref(srv->store, refs[i]);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
    } else {
        ds__req_reply(r, st, w, segs, nseg, refs, nseg, -1);
    }
    ds__wbuf_free(w);
}

/* A UCX_GET's parameters (its metadata after the GET layout), or NULL: a
 * plain GET, a local session (it reads the arena in place), a connection
 * already gone, or no UCX here. op_get checked them on arrival. */
static ds_ucx_get_t *ucx_params(ds_server_t *srv, const ds_req_t *r)
{
    if (r->op != DS_OP_UCX_GET || srv->ucx == NULL || r->session == NULL || r->session->shm)
        return NULL;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    (void)ds__rbuf_i32(&rb);
    (void)ds__rbuf_u8(&rb);
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    if (read_keys(&rb, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg)) != 0) return NULL;
    free(keys);
    ds_ucx_get_t *t = malloc(sizeof(*t));
    /* Only the address the session registered (and the worker vetted). */
    if (t && (ds__ops_ucx_trailer(&rb, t, msg, sizeof(msg)) != 0 || r->session->ucx_addr == NULL ||
              strcmp(r->session->ucx_addr, t->addr) != 0)) {
        free(t);
        t = NULL;
    }
    return t;
}

void ds__ops_get_reply(ds_server_t *srv, ds_req_t *r, uint8_t flags, const char *const *keys,
                       const uint32_t *lens, uint32_t n, ds_obj_t **objs)
{
    bool shm_ok = r->session && r->session->shm;
    ds_ucx_get_t *ucx = ucx_params(srv, r);
    char ucx_err[320] = "";
    struct iovec segs_small[SMALL_BATCH];
    ds_obj_t *refs_small[SMALL_BATCH];
    bool small = n <= SMALL_BATCH;
    struct iovec *segs = small ? segs_small : malloc(n * sizeof(*segs));
    ds_obj_t **refs = small ? refs_small : malloc(n * sizeof(*refs));
    if (segs == NULL || refs == NULL) {
        if (!small) {
            free(segs);
            free(refs);
        }
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    uint32_t nseg = 0, found = 0;
    char msg[256];
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    for (uint32_t i = 0; i < n; i++) {
        ds_obj_t *o = objs[i];
        if (o == NULL) {
            ds__wbuf_u8(&w, DS_VAL_MISSING);
            ds__wbuf_u64(&w, 0);
            continue;
        }
        found++;
        bool shm = shm_ok && ((flags & DS_GET_PIN) ||
                              ((flags & DS_GET_WANT_SHM) && o->size > srv->inline_max));
        ds__store_ref(o);
        if (shm) {
            uint64_t handle = ds__session_add(r->session, o, 0);
            if (handle != 0) {
                ds__wbuf_u8(&w, DS_VAL_SHM);
                ds__wbuf_u64(&w, o->size);
                ds__wbuf_u64(&w, ds__store_offset(srv->store, o));
                ds__wbuf_u64(&w, handle);
                continue;
            }
        }
        if (ucx && !ucx_err[0] && o->size > srv->inline_max && o->size <= ucx->max_size) {
            /* The reference just taken becomes the send's pin. */
            if (ds__ops_ucx_send(srv, r, ucx, i, o, ucx_err, sizeof(ucx_err)) == 0) {
                ds__wbuf_u8(&w, DS_VAL_UCX);
                ds__wbuf_u64(&w, o->size);
                continue;
            }
        }
        ds__wbuf_u8(&w, DS_VAL_INLINE);
        ds__wbuf_u64(&w, o->size);
        segs[nseg].iov_base = ds__store_data(srv->store, o);
        segs[nseg].iov_len = o->size;
        refs[nseg++] = o;
    }
    ds_status_t st = DS_K_OK;
    if (found == 0) {
        /* "not found" must say which key. */
        const char *miss = ds__tier_get_miss(srv);
        if (miss)
            snprintf(msg, sizeof(msg), "%s", miss);
        else if (n == 1)
            snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)lens[0], keys[0]);
        else
            snprintf(msg, sizeof(msg), "none of the %u keys was found", n);
        ds__ops_lead_error(&w, msg);
        st = miss ? DS_K_NOT_FOUND_IN_L2CACHE : DS_K_NOT_FOUND;
    }
    free(ucx);
    if (ucx_err[0]) {
        /* The client asked for UCX: no silent fall-back to the socket. Sends
         * already started for earlier keys end at their deadline or with
         * the session. */
        for (uint32_t i = 0; i < nseg; i++)
            ds__store_unref(srv->store, refs[i]);
        nseg = 0;
        ds__wbuf_free(&w);
        ds__req_error(r, DS_K_RPC_UNAVAILABLE, "%s", ucx_err);
    } else {
        ds__ops_reply_values(srv, r, st, &w, segs, refs, nseg);
    }
    if (!small) {
        free(segs);
        free(refs);
    }
}

static void get_answer(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    (void)ds__rbuf_i32(&rb);
    uint8_t flags = ds__rbuf_u8(&rb);
    key_t_ keys_small[SMALL_BATCH];
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    if (read_keys_into(&rb, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg), keys_small, SMALL_BATCH) !=
        0) {
        ds__req_error(r, DS_K_INVALID, "%s", msg);
        return;
    }
    const char *kp_small[SMALL_BATCH];
    uint32_t kl_small[SMALL_BATCH];
    ds_obj_t *objs_small[SMALL_BATCH];
    bool small = n <= SMALL_BATCH;
    const char **kp = small ? kp_small : malloc(n * sizeof(*kp));
    uint32_t *kl = small ? kl_small : malloc(n * sizeof(*kl));
    ds_obj_t **objs = small ? objs_small : malloc(n * sizeof(*objs));
    if (kp == NULL || kl == NULL || objs == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
    } else {
        uint64_t now = ds__now_ms();
        for (uint32_t i = 0; i < n; i++) {
            kp[i] = keys[i].p;
            kl[i] = keys[i].len;
            objs[i] = ds__store_lookup(srv->store, keys[i].p, keys[i].len, now);
        }
        ds__ops_get_reply(srv, r, flags, kp, kl, n, objs);
    }
    if (!small) {
        free(kp);
        free(kl);
        free(objs);
    }
    free_keys(keys, keys_small);
}

static void get_wait_done(void *ctx, ds_req_t *d, bool timed_out, uint64_t deadline_ms);

/* The answer to a subscribe-get of more than DS_SUB_SLICE keys whose wait
 * is over: its keys are looked up DS_SUB_SLICE a loop turn (each value
 * found held by a reference until the answer is built, so it stays as it
 * was found), then answered at once; the request stays parked meanwhile. */
struct ds_get_slices {
    struct ds_get_slices *next;
    ds_server_t *srv;
    ds_req_t *d;
    uint8_t flags;
    uint32_t i, n;
    ds_rbuf_t rb; /* the next key in d's metadata */
    const char **kp;
    uint32_t *kl;
    ds_obj_t **objs;
};

static void slices_free(struct ds_get_slices *g)
{
    for (uint32_t i = 0; i < g->i; i++)
        if (g->objs[i]) ds__store_unref(g->srv->store, g->objs[i]);
    free(g->kp);
    free(g->kl);
    free(g->objs);
    free(g);
}

static void slices_unlink(ds_server_t *srv, struct ds_get_slices *g)
{
    struct ds_get_slices *prev = NULL;
    for (struct ds_get_slices *x = srv->get_slices; x; prev = x, x = x->next)
        if (x == g) {
            if (prev)
                prev->next = g->next;
            else
                srv->get_slices = g->next;
            if (srv->get_slices_tail == g) srv->get_slices_tail = prev;
            g->next = NULL;
            return;
        }
}

/* The connection closed: nobody to answer. */
static void slices_cancel(ds_req_t *d, void *ctx)
{
    struct ds_get_slices *g = ctx;
    slices_unlink(g->srv, g);
    slices_free(g);
    ds__req_drop(d);
}

/* Looks up the next slice of g's keys; true when none is left. */
static bool slices_step(struct ds_get_slices *g)
{
    uint64_t now = ds__now_ms();
    for (uint32_t end = g->i + DS_SUB_SLICE; g->i < g->n && g->i < end; g->i++) {
        g->kl[g->i] = ds__rbuf_str(&g->rb, &g->kp[g->i]);
        ds_obj_t *o =
            g->rb.err ? NULL : ds__store_lookup(g->srv->store, g->kp[g->i], g->kl[g->i], now);
        if (o) ds__store_ref(o);
        g->objs[g->i] = o;
    }
    return g->i >= g->n;
}

static void slices_finish(struct ds_get_slices *g)
{
    ds__ops_get_reply(g->srv, g->d, g->flags, g->kp, g->kl, g->n, g->objs);
    slices_free(g);
}

uint64_t ds__ops_get_tick(ds_server_t *srv, uint64_t now)
{
    uint32_t turn = 0;
    for (struct ds_get_slices *g = srv->get_slices; g; g = g->next)
        turn++;
    while (srv->get_slices && turn-- > 0) {
        struct ds_get_slices *g = srv->get_slices;
        srv->get_slices = g->next;
        if (srv->get_slices == NULL) srv->get_slices_tail = NULL;
        g->next = NULL;
        if (slices_step(g)) {
            slices_finish(g);
            continue;
        }
        if (srv->get_slices_tail)
            srv->get_slices_tail->next = g;
        else
            srv->get_slices = g;
        srv->get_slices_tail = g;
    }
    return srv->get_slices ? now : 0;
}

/* Answers parked GET d a slice a turn when it names more than DS_SUB_SLICE
 * keys; true when it took d over. */
static bool get_answer_sliced(ds_server_t *srv, ds_req_t *d)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, d->meta, d->meta_len);
    (void)ds__rbuf_i32(&rb);
    uint8_t flags = ds__rbuf_u8(&rb);
    uint32_t n = ds__rbuf_u32(&rb);
    if (rb.err || n <= DS_SUB_SLICE || n > DS_MAX_BATCH) return false;
    struct ds_get_slices *g = calloc(1, sizeof(*g));
    if (g) {
        g->kp = malloc(n * sizeof(*g->kp));
        g->kl = malloc(n * sizeof(*g->kl));
        g->objs = malloc(n * sizeof(*g->objs));
    }
    if (g == NULL || g->kp == NULL || g->kl == NULL || g->objs == NULL ||
        ds__req_park(d, slices_cancel, g) != d) {
        if (g) slices_free(g);
        return false;
    }
    g->srv = srv;
    g->d = d;
    g->flags = flags;
    g->n = n;
    g->rb = rb;
    if (slices_step(g)) {
        slices_finish(g);
        return true;
    }
    if (srv->get_slices_tail)
        srv->get_slices_tail->next = g;
    else
        srv->get_slices = g;
    srv->get_slices_tail = g;
    return true;
}

/* Every key of a GET's wait was published, but the loop completes the wait
 * only after the event, which may have deleted one of them again (a
 * pipelined DEL): like Redis's blocked clients, the GET then waits on for
 * the keys missing now, until its deadline. true when it waits again. */
static bool get_rewait(ds_server_t *srv, ds_req_t *d, uint64_t deadline_ms)
{
    uint64_t now = ds__now_ms();
    if (deadline_ms <= now || ds__req_gone(d)) return false;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, d->meta, d->meta_len);
    (void)ds__rbuf_i32(&rb);
    (void)ds__rbuf_u8(&rb);
    key_t_ keys_small[SMALL_BATCH];
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    if (read_keys_into(&rb, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg), keys_small, SMALL_BATCH) !=
        0)
        return false;
    const char *mk_small[SMALL_BATCH];
    uint32_t ml_small[SMALL_BATCH];
    bool small = n <= SMALL_BATCH;
    const char **mk = small ? mk_small : malloc(n * sizeof(*mk));
    uint32_t *ml = small ? ml_small : malloc(n * sizeof(*ml));
    uint32_t nm = 0;
    for (uint32_t i = 0; mk && ml && i < n; i++) {
        if (ds__store_lookup(srv->store, keys[i].p, keys[i].len, now) == NULL) {
            mk[nm] = keys[i].p;
            ml[nm++] = keys[i].len;
        }
    }
    bool parked = mk && ml && nm > 0 &&
                  ds__subs_wait(&srv->subs, d, mk, ml, nm, deadline_ms, get_wait_done, srv);
    if (!small) {
        free(mk);
        free(ml);
    }
    free_keys(keys, keys_small);
    return parked;
}

/* A GET's wait is over: answer with what the store holds now (or wait on
 * for keys deleted again meanwhile, see get_rewait). */
static void get_wait_done(void *ctx, ds_req_t *d, bool timed_out, uint64_t deadline_ms)
{
    if (!timed_out && get_rewait(ctx, d, deadline_ms)) return;
    if (ds__req_gone(d) || !get_answer_sliced(ctx, d)) get_answer(ctx, d);
}

static void op_get(ds_server_t *srv, ds_req_t *r);

static bool key_present(void *ctx, const char *k, uint32_t kl)
{
    ds_server_t *srv = ctx;
    return ds__store_lookup(srv->store, k, kl, ds__now_ms()) != NULL;
}

/* A subscribe-get refused for a subscription limit: with the limit's name,
 * since answering at once would tell the client its keys were not set in
 * time. */
static void get_refuse(ds_req_t *r, uint32_t n, const char *refused)
{
    ds__req_log(r, DS_LOG_WARN, "subscribe-get of %" PRIu32 " keys refused: %s", n, refused);
    ds__req_penalize(r);
    ds__req_error(r, DS_K_TRY_AGAIN, "subscribe-get of %" PRIu32 " keys refused: %s", n, refused);
}

/* Waits (subscribe-get) for the keys not in memory, up to timeout ms, or
 * answers at once. A get of more than DS_SUB_SLICE keys registers its wait
 * a slice per loop turn (ds__subs_wait_keys), admitted or refused at once
 * on the keys it names, so that neither its lookups nor a refusal hold the
 * other clients back for more than a slice. */
static void get_wait(ds_server_t *srv, ds_req_t *r, int32_t timeout, const key_t_ *keys, uint32_t n)
{
    if (timeout > 0 && n > DS_SUB_SLICE) {
        /* keys[] point into r's metadata, each after its u32 length */
        size_t pos = (size_t)((const uint8_t *)keys[0].p - r->meta) - sizeof(uint32_t);
        if (ds__subs_wait_keys(&srv->subs, r, pos, n, ds__now_ms() + (uint64_t)timeout,
                               get_wait_done, srv, key_present, srv))
            return;
        const char *refused = ds__subs_refusal(&srv->subs);
        if (refused) {
            get_refuse(r, n, refused);
            return;
        }
        /* out of memory: answered with what the store holds */
    } else if (timeout > 0) {
        uint64_t now = ds__now_ms();
        const char **mk = malloc(n * sizeof(*mk));
        uint32_t *ml = malloc(n * sizeof(*ml));
        uint32_t nm = 0;
        for (uint32_t i = 0; mk && ml && i < n; i++) {
            if (ds__store_lookup(srv->store, keys[i].p, keys[i].len, now) == NULL) {
                mk[nm] = keys[i].p;
                ml[nm++] = keys[i].len;
            }
        }
        bool parked = false;
        const char *refused = NULL;
        if (mk && ml && nm > 0) {
            parked = ds__subs_wait(&srv->subs, r, mk, ml, nm, now + (uint64_t)timeout,
                                   get_wait_done, srv);
            if (!parked) refused = ds__subs_refusal(&srv->subs);
        }
        free(mk);
        free(ml);
        if (parked) return;
        if (refused) {
            get_refuse(r, nm, refused);
            return;
        }
    }
    get_answer(srv, r);
}

/* Keys a GET missed in memory are back from L2 or spill: wait for those
 * still missing as the GET asked (its wait counts from here), or answer. */
static void get_l2_resume(ds_server_t *srv, ds_req_t *d)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, d->meta, d->meta_len);
    int32_t timeout = ds__rbuf_i32(&rb);
    (void)ds__rbuf_u8(&rb);
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    if (timeout <= 0 || read_keys(&rb, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg)) != 0) {
        get_answer(srv, d);
        return;
    }
    get_wait(srv, d, timeout, keys, n);
    free(keys);
}

/* The arena had no room for keys to load: spills made some, try once more. */
static void get_l2_retry(ds_server_t *srv, ds_req_t *d)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, d->meta, d->meta_len);
    (void)ds__rbuf_i32(&rb);
    (void)ds__rbuf_u8(&rb);
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    const char **kp = NULL;
    uint32_t *kl = NULL;
    bool held = false;
    if (read_keys(&rb, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg)) == 0) {
        kp = malloc(n * sizeof(*kp));
        kl = malloc(n * sizeof(*kl));
        for (uint32_t i = 0; kp && kl && i < n; i++) {
            kp[i] = keys[i].p;
            kl[i] = keys[i].len;
        }
        if (kp && kl) held = ds__tier_get(srv, d, kp, kl, n, get_l2_resume, NULL);
    }
    free(kp);
    free(kl);
    free(keys);
    if (!held) get_l2_resume(srv, d);
}

static void op_get(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    int32_t timeout = ds__rbuf_i32(&rb);
    uint8_t gflags = ds__rbuf_u8(&rb);
    key_t_ keys_small[SMALL_BATCH];
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    if (r->op == DS_OP_UCX_GET && srv->ucx == NULL) {
        ds__req_error(r, DS_K_NOT_SUPPORTED,
                      "this worker does not send values over UCX: start it with --enable_rdma "
                      "true for clients with enable_ucx / DS_CLIENT_UCX=1");
        return;
    }
    int rc =
        read_keys_into(&rb, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg), keys_small, SMALL_BATCH);
    ds_ucx_get_t *ut = rc == 0 && r->op == DS_OP_UCX_GET ? malloc(sizeof(*ut)) : NULL;
    if (rc == 0 && r->op == DS_OP_UCX_GET) {
        if (ut == NULL || ds__ops_ucx_trailer(&rb, ut, msg, sizeof(msg)) != 0) {
            if (ut == NULL) snprintf(msg, sizeof(msg), "out of memory");
            rc = -2;
            free_keys(keys, keys_small);
        } else if (r->session == NULL || r->session->ucx_addr == NULL ||
                   strcmp(r->session->ucx_addr, ut->addr) != 0) {
            snprintf(msg, sizeof(msg),
                     "UCX_GET names a UCX address this session did not register (UCX_ADDR)");
            rc = -2;
            free_keys(keys, keys_small);
        }
        free(ut);
    } else if (rc == 0 && !ds__rbuf_done(&rb)) {
        snprintf(msg, sizeof(msg), "malformed GET: %zu trailing bytes", rb.len - rb.pos);
        rc = -2;
        free_keys(keys, keys_small);
    }
    if (rc != 0) {
        ds__req_error(r, DS_K_INVALID, "%s", msg);
        return;
    }
    if (timeout < 0) {
        free_keys(keys, keys_small);
        ds__req_error(r, DS_K_INVALID, "sub_timeout_ms %d is negative", timeout);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (ds__key_check(keys[i].p, keys[i].len, msg, sizeof(msg)) != 0) {
            free_keys(keys, keys_small);
            ds__req_error(r, DS_K_INVALID, "%s", msg);
            return;
        }
    }
    if (srv->remote && !(r->flags & DS_FLAG_PEER)) {
        /* Keys missing here may live on another worker: ask their owners. */
        const char **kp = malloc(n * sizeof(*kp));
        uint32_t *kl = malloc(n * sizeof(*kl));
        if (kp && kl) {
            for (uint32_t i = 0; i < n; i++) {
                kp[i] = keys[i].p;
                kl[i] = keys[i].len;
            }
            srv->remote->get(srv, r, timeout, gflags, kp, kl, n);
        } else {
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        }
        free(kp);
        free(kl);
        free_keys(keys, keys_small);
        return;
    }
    if (srv->tier) {
        const char **kp = malloc(n * sizeof(*kp));
        uint32_t *kl = malloc(n * sizeof(*kl));
        bool held = false;
        if (kp && kl) {
            for (uint32_t i = 0; i < n; i++) {
                kp[i] = keys[i].p;
                kl[i] = keys[i].len;
            }
            held = ds__tier_get(srv, r, kp, kl, n, get_l2_resume, get_l2_retry);
        }
        free(kp);
        free(kl);
        if (held) {
            free_keys(keys, keys_small);
            return;
        }
    }
    get_wait(srv, r, timeout, keys, n);
    free_keys(keys, keys_small);
}

/* ---- the rest ---- */

static void op_keys(ds_server_t *srv, ds_req_t *r)
{
    uint16_t op = r->op;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t ttl = op == DS_OP_EXPIRE ? ds__rbuf_u32(&rb) : 0;
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    int rc = read_keys(&rb, op == DS_OP_EXIST ? DS_MAX_EXIST_BATCH : DS_MAX_BATCH, &keys, &n, msg,
                       sizeof(msg));
    if (rc == 0 && !ds__rbuf_done(&rb)) {
        free(keys);
        snprintf(msg, sizeof(msg), "malformed %s: trailing bytes", ds__opcode_name(op));
        rc = -2;
    }
    if (rc != 0) {
        ds__req_error(r, DS_K_INVALID, "%s", msg);
        return;
    }
    if (srv->remote && !(r->flags & DS_FLAG_PEER)) {
        const char **kp = malloc(n * sizeof(*kp));
        uint32_t *kl = malloc(n * sizeof(*kl));
        int bad = -1;
        for (uint32_t i = 0; kp && kl && i < n && bad < 0; i++) {
            kp[i] = keys[i].p;
            kl[i] = keys[i].len;
            if (ds__key_check(keys[i].p, keys[i].len, msg, sizeof(msg)) != 0) bad = (int)i;
        }
        /* Nested holds are kept by the worker the client talks to. */
        for (uint32_t i = 0; op == DS_OP_DEL && bad < 0 && i < n; i++)
            ds__ops_grefs_deleted(srv, keys[i].p, keys[i].len);
        if (!kp || !kl)
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        else if (bad >= 0)
            ds__req_error(r, DS_K_INVALID, "%s", msg);
        else
            srv->remote->keys_op(srv, r, kp, kl, n, ttl);
        free(kp);
        free(kl);
        free(keys);
        return;
    }
    uint64_t now = ds__now_ms();
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    ds_status_t overall = DS_K_OK;
    char first[256] = "";
    /* DEL with an L2: the answer may wait for the L2 deletes (tier.h) */
    uint32_t *del_st = op == DS_OP_DEL && srv->tier ? malloc(n * sizeof(*del_st)) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        ds_status_t st = DS_K_OK;
        if (ds__key_check(keys[i].p, keys[i].len, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (op == DS_OP_DEL) {
            ds__store_delete(srv->store, keys[i].p, keys[i].len);
            ds__ops_grefs_deleted(srv, keys[i].p, keys[i].len);
            if (srv->tier) ds__tier_del(srv, keys[i].p, keys[i].len, i);
        } else if (op == DS_OP_EXPIRE) {
            st = ds__store_expire(srv->store, keys[i].p, keys[i].len, ttl, now);
            if (st == DS_K_OK && srv->tier)
                ds__tier_expire(srv, ds__store_lookup(srv->store, keys[i].p, keys[i].len, now));
            else if (st == DS_K_NOT_FOUND && srv->tier) /* only on disk */
                st = ds__tier_expire_key(srv, keys[i].p, keys[i].len, ttl);
            if (st != DS_K_OK)
                snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)keys[i].len, keys[i].p);
        }
        if (st != DS_K_OK && overall == DS_K_OK) {
            overall = st;
            snprintf(first, sizeof(first), "%s", msg);
        }
        if (op == DS_OP_EXIST) {
            bool ex = st == DS_K_OK && (ds__store_lookup(srv->store, keys[i].p, keys[i].len, now) ||
                                        (srv->tier && ds__tier_has(srv, keys[i].p, keys[i].len)));
            ds__wbuf_u8(&w, ex);
        } else if (op == DS_OP_QSIZE) {
            ds_obj_t *o =
                st == DS_K_OK ? ds__store_lookup(srv->store, keys[i].p, keys[i].len, now) : NULL;
            ds__wbuf_u32(&w, o ? DS_K_OK : (st == DS_K_OK ? DS_K_NOT_FOUND : st));
            ds__wbuf_u64(&w, o ? o->size : 0);
        } else {
            ds__wbuf_u32(&w, (uint32_t)st);
        }
        if (del_st) del_st[i] = (uint32_t)st;
    }
    free(keys);
    bool held = del_st && ds__tier_hold_answer(srv, r, NULL, del_st, n, false, first);
    free(del_st);
    if (held) {
        ds__wbuf_free(&w);
        return;
    }
    if (op == DS_OP_DEL && srv->tier) ds__tier_no_answer(srv); /* no memory to wait */
    if (overall != DS_K_OK) ds__ops_lead_error(&w, first);
    ds__req_reply(r, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void resume_keys(ds_server_t *srv, ds_req_t *d, void *ctx)
{
    (void)ctx;
    op_keys(srv, d);
}

/* A DEL of a key under a read latch waits for the latch (latch.c). */
static bool del_parked(ds_server_t *srv, ds_req_t *r)
{
    if (!ds__latch_any(srv) || (r->flags & DS_FLAG_PEER)) return false;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    if (read_keys(&rb, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg)) != 0) return false;
    const char **kp = malloc(n * sizeof(*kp));
    uint32_t *kl = malloc(n * sizeof(*kl));
    bool parked = false;
    if (kp && kl) {
        for (uint32_t i = 0; i < n; i++) {
            kp[i] = keys[i].p;
            kl[i] = keys[i].len;
        }
        parked = ds__latch_park(srv, r, kp, kl, n, resume_keys, NULL, NULL);
    }
    free(kp);
    free(kl);
    free(keys);
    return parked;
}

static void op_genkey(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *prefix;
    uint32_t pl = ds__rbuf_str(&rb, &prefix);
    char msg[256];
    if (rb.err || pl > DS_MAX_KEY_LEN - 40) {
        ds__req_error(r, DS_K_INVALID, "prefix is malformed or longer than %d bytes",
                      DS_MAX_KEY_LEN - 40);
        return;
    }
    if (pl > 0 && ds__key_check(prefix, pl, msg, sizeof(msg)) != 0) {
        ds__req_error(r, DS_K_INVALID, "prefix: %s", msg);
        return;
    }
    char key[DS_MAX_KEY_LEN + 1];
    uint64_t ctr = ++srv->genkey_counter;
    snprintf(key, sizeof(key), "%.*s%s-%016" PRIx64 "-%08x", (int)pl, prefix, srv->worker_id, ctr,
             (unsigned)(ctr * 2654435761u));
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_cstr(&w, key);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_stats(ds_server_t *srv, ds_req_t *r)
{
    char *json = ds__server_stats_json(srv);
    if (json == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_cstr(&w, json);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
    free(json);
}

/* SEAL: the keys' current versions are final (store.h: sealed). */
static void op_seal(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 5);
    if (rb.err || n == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed SEAL: %u keys (allowed 1..%u)", n, DS_MAX_BATCH);
        return;
    }
    /* In a cluster the mark is kept by each key's owner too. */
    if (srv->remote && srv->remote->seal && !(r->flags & DS_FLAG_PEER)) {
        srv->remote->seal(srv, r);
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    ds_status_t first = DS_K_OK;
    char msg[256], first_msg[256] = "";
    uint64_t now = ds__now_ms();
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        ds_status_t st = DS_K_OK;
        ds_obj_t *o = NULL;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed SEAL: key %u truncated", i);
            st = DS_K_INVALID;
        } else if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if ((o = ds__store_lookup(srv->store, k, kl, now)) == NULL) {
            snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)(kl > 200 ? 200 : kl), k);
            st = DS_K_NOT_FOUND;
        } else {
            o->sealed = 1;
        }
        if (st != DS_K_OK && first == DS_K_OK) {
            first = st;
            snprintf(first_msg, sizeof(first_msg), "%s", msg);
        }
        ds__wbuf_u32(&w, (uint32_t)st);
    }
    if (first != DS_K_OK) ds__ops_lead_error(&w, first_msg);
    ds__req_reply(r, first, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

void ds__ops_dispatch(void *ctx, ds_req_t *r)
{
    ds_server_t *srv = ctx;
    switch (r->op) {
    case DS_OP_SET:
        ds__ops_set(srv, r);
        break;
    case DS_OP_GET:
    case DS_OP_UCX_GET:
        op_get(srv, r);
        break;
    case DS_OP_UCX_ADDR:
        ds__ops_ucx_addr(srv, r);
        break;
    case DS_OP_CREATE:
        ds__ops_create(srv, r);
        break;
    case DS_OP_PUBLISH:
    case DS_OP_RELEASE:
        ds__ops_publish_release(srv, r);
        break;
    case DS_OP_SETR:
        ds__ops_setr(srv, r);
        break;
    case DS_OP_DEL:
        if (!del_parked(srv, r)) op_keys(srv, r);
        break;
    case DS_OP_EXIST:
    case DS_OP_EXPIRE:
    case DS_OP_QSIZE:
        op_keys(srv, r);
        break;
    case DS_OP_GENKEY:
        op_genkey(srv, r);
        break;
    case DS_OP_READ:
        ds__ops_read(srv, r);
        break;
    case DS_OP_GREF:
        ds__ops_gref(srv, r);
        break;
    case DS_OP_SEAL:
        op_seal(srv, r);
        break;
    case DS_OP_RLATCH:
    case DS_OP_UNRLATCH:
    case DS_OP_WLATCH:
    case DS_OP_UNWLATCH:
        ds__ops_latch(srv, r);
        break;
    case DS_OP_SC_CREATE_PRODUCER:
    case DS_OP_SC_CLOSE_PRODUCER:
    case DS_OP_SC_SUBSCRIBE:
    case DS_OP_SC_CLOSE_CONSUMER:
    case DS_OP_SC_SEND:
    case DS_OP_SC_RECEIVE:
    case DS_OP_SC_ACK:
    case DS_OP_SC_DELETE_STREAM:
    case DS_OP_SC_QUERY:
    case DS_OP_SC_PEER_PUSH:
        ds__stream_dispatch(srv, r);
        break;
    case DS_OP_HEALTH:
        ds__req_error(r, DS_K_OK, "%s", "");
        break;
    case DS_OP_STATS:
        op_stats(srv, r);
        break;
    case DS_OP_LOCATE:
    case DS_OP_META_PUT:
    case DS_OP_META_DEL:
    case DS_OP_DROP:
    case DS_OP_UCX_PULL:
    case DS_OP_PEER_AUTH:
    case DS_OP_OWNED:
    case DS_OP_LATCH_WAIT:
    case DS_OP_LATCH_HINT:
    case DS_OP_HOLDER_END:
    case DS_OP_SEAL_OWNED:
    case DS_OP_NEST_OWNED:
    case DS_OP_NEST_HOLD:
    case DS_OP_OWNER_REBUILD:
    case DS_OP_SC_PEER_REG:
    case DS_OP_SC_PEER_QUERY:
    case DS_OP_SC_PEER_DELETE:
    case DS_OP_SC_PEER_DROP:
    case DS_OP_REPL_PUT:
    case DS_OP_REPL_META:
    case DS_OP_REPL_COPY:
    case DS_OP_HOT_ADD:
    case DS_OP_HOT_DROP:
    case DS_OP_MIGRATE:
    case DS_OP_META_MOVE:
    case DS_OP_USAGE:
    case DS_OP_REBUILD_DONE:
        if (srv->remote)
            srv->remote->peer_op(srv, r);
        else
            ds__req_error(r, DS_K_NOT_SUPPORTED, "this worker is not in a cluster");
        break;
    case DS_OP_SHUTDOWN:
        if (!r->is_unix) {
            ds__req_error(r, DS_K_NOT_AUTHORIZED,
                          "SHUTDOWN is accepted on the worker's Unix socket only");
            break;
        }
        DS_LOG_INFO("shutdown requested by a client");
        /* In a cluster the worker first hands its objects and metadata to
         * the others (a planned exit); that answers and stops it. */
        if (srv->remote && srv->remote->leave) {
            srv->remote->leave(srv, r);
            break;
        }
        ds__req_error(r, DS_K_OK, "%s", "");
        srv->stopping = true;
        break;
    default:
        ds__req_error(r, DS_K_INVALID, "opcode %u not handled here", r->op);
    }
}
