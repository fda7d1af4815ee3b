/* The operations: one handler per opcode of the table in common/wire.h. Each
 * parses its metadata with the bounds-checked reader, validates every key and
 * limit (the worker never trusts a client to have checked), acts on the store
 * and answers. Malformed metadata gets a K_INVALID answer naming the problem;
 * the connection stays usable because the frame's boundaries are known. */
#include "worker/server.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/keys.h"
#include "common/log.h"
#include "common/shm_index.h"
#include "worker/cluster.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *p;
    uint32_t len;
} key_t_;

/* Reads n keys (n bounded by max). On any invalid key fills msg and returns
 * -1 (bad) or -2 (malformed metadata). keys is malloc'd on success. */
static int read_keys(ds_rbuf_t *r, uint32_t max, key_t_ **keys, uint32_t *n, char *msg, size_t cap)
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
    key_t_ *k = malloc(cnt * sizeof(*k));
    if (k == NULL) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < cnt; i++) {
        k[i].len = ds__rbuf_str(r, &k[i].p);
        if (r->err) {
            free(k);
            snprintf(msg, cap, "malformed request: key %u truncated", i);
            return -2;
        }
    }
    *keys = k;
    *n = cnt;
    return 0;
}

static bool mode_ok(uint8_t mode, char *msg, size_t cap)
{
    if (mode == DS_WRITE_NONE_L2_CACHE || mode == DS_WRITE_NONE_L2_CACHE_EVICT) return true;
    if (mode <= DS_WRITE_BACK_L2_CACHE_EVICT)
        snprintf(msg, cap, "write mode %u needs an L2 cache backend, and this worker has none",
                 mode);
    else
        snprintf(msg, cap, "write mode %u is not one of 0..4", mode);
    return false;
}

/* The head SET and CREATE share: write mode, TTL, existence, key count. */
typedef struct {
    uint8_t mode, existence;
    uint32_t ttl, n;
} write_head_t;

/* Reads and checks the head; 0, or -1 with a message naming the problem. */
static int read_write_head(ds_rbuf_t *r, const char *what, write_head_t *h, char *msg, size_t cap)
{
    h->mode = ds__rbuf_u8(r);
    h->ttl = ds__rbuf_u32(r);
    h->existence = ds__rbuf_u8(r);
    h->n = ds__rbuf_u32(r);
    /* each entry is at least a 4-byte length, one key byte and a u64 */
    if (r->err || h->n == 0 || h->n > DS_MAX_BATCH || (r->len - r->pos) / 13 < h->n) {
        snprintf(msg, cap, "malformed %s: %u keys (allowed 1..%u) or metadata too short", what,
                 h->n, DS_MAX_BATCH);
        return -1;
    }
    if (!mode_ok(h->mode, msg, cap)) return -1;
    if (h->existence > DS_EXISTENCE_NX) {
        snprintf(msg, cap, "existence option %u is not NONE(0) or NX(1)", h->existence);
        return -1;
    }
    return 0;
}

/* Status-list answer: str err, n, n*u32. Returns the overall status. */
static ds_status_t build_statuses(ds_wbuf_t *w, const uint32_t *st, uint32_t n,
                                  const char *first_err)
{
    ds_status_t overall = DS_K_OK;
    for (uint32_t i = 0; i < n; i++)
        if (st[i] != DS_K_OK) {
            overall = (ds_status_t)st[i];
            break;
        }
    ds__wbuf_cstr(w, overall == DS_K_OK ? "" : first_err);
    ds__wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        ds__wbuf_u32(w, st[i]);
    return overall;
}

static void reply_statuses(ds_conn_t *c, uint16_t op, const uint32_t *st, uint32_t n,
                           const char *first_err)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds_status_t overall = build_statuses(&w, st, n, first_err);
    ds__conn_reply(c, c->h.req_id, op, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

/* After local publishes: in a cluster the owners learn the new copies
 * before the client hears back; standalone the answer goes out now. */
static void answer_published(ds_conn_t *c, uint16_t op, ds_obj_t **published, const uint32_t *st,
                             uint32_t n, bool nx, const char *first_err)
{
    if (c->srv->cluster == NULL || (c->h.flags & DS_FLAG_PEER))
        reply_statuses(c, op, st, n, first_err);
    else
        ds__cluster_published(c, published, st, n, nx, first_err);
}

/* Answers are built with an empty error string in front (4 bytes: length
 * 0); once a per-key failure is known, this puts its message there. */
static void set_leading_error(ds_wbuf_t *w, const char *msg)
{
    ds_wbuf_t e;
    ds__wbuf_init(&e);
    ds__wbuf_cstr(&e, msg);
    ds__wbuf_bytes(&e, w->buf + 4, w->len - 4);
    ds__wbuf_free(w);
    *w = e;
}

/* ---- SET ---- */

static void set_fail(ds_conn_t *c, const char *msg)
{
    /* Skip the data section, then answer with msg. */
    snprintf(c->pend_err, sizeof(c->pend_err), "%s", msg);
    c->npend = 0;
    c->nsinks = 0;
    c->sink_idx = 0;
    if (c->h.data_len) {
        c->sinks = calloc(1, sizeof(*c->sinks));
        if (c->sinks == NULL) {
            ds__conn_close(c, "out of memory");
            return;
        }
        c->sinks[0].len = c->h.data_len;
        c->nsinks = 1;
    }
    c->state = CONN_READ_DATA;
}

void ds__ops_set_begin(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    ds_rbuf_t r;
    ds__rbuf_init(&r, c->meta, c->h.meta_len);
    write_head_t wh;
    char msg[256];
    if (read_write_head(&r, "SET", &wh, msg, sizeof(msg)) != 0) {
        set_fail(c, msg);
        return;
    }
    uint8_t mode = wh.mode, existence = wh.existence;
    uint32_t ttl = wh.ttl, n = wh.n;
    key_t_ *keys = malloc(n * sizeof(*keys));
    uint64_t *lens = malloc(n * sizeof(*lens));
    c->pend = calloc(n, sizeof(*c->pend));
    c->pend_status = calloc(n, sizeof(*c->pend_status));
    c->sinks = calloc(n, sizeof(*c->sinks));
    if (!keys || !lens || !c->pend || !c->pend_status || !c->sinks) {
        free(keys);
        free(lens);
        ds__conn_close(c, "out of memory");
        return;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        keys[i].len = ds__rbuf_str(&r, &keys[i].p);
        lens[i] = ds__rbuf_u64(&r);
        total += lens[i];
    }
    if (!ds__rbuf_done(&r) || total != c->h.data_len) {
        free(keys);
        free(lens);
        ds__conn_release_pending(c);
        snprintf(msg, sizeof(msg),
                 "malformed SET: value sizes add up to %" PRIu64
                 " but the data section has %" PRIu64 " bytes",
                 total, c->h.data_len);
        set_fail(c, msg);
        return;
    }
    c->npend = n;
    c->nsinks = n;
    c->sink_idx = 0;
    c->sink_off = 0;
    c->pend_existence = existence;
    c->pend_err[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        c->sinks[i].len = lens[i];
        ds_status_t st = DS_K_OK;
        if (ds__key_check(keys[i].p, keys[i].len, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (lens[i] == 0) {
            snprintf(msg, sizeof(msg), "value for key '%.*s' is empty", (int)keys[i].len,
                     keys[i].p);
            st = DS_K_INVALID;
        } else {
            st = ds__store_reserve(srv->store, keys[i].p, keys[i].len, lens[i],
                                   (ds_write_mode_t)mode, ttl, &c->pend[i], msg, sizeof(msg));
        }
        c->pend_status[i] = (uint32_t)st;
        if (st == DS_K_OK)
            c->sinks[i].p = ds__store_data(srv->store, c->pend[i]);
        else if (c->pend_err[0] == '\0')
            snprintf(c->pend_err, sizeof(c->pend_err), "%s", msg);
    }
    free(keys);
    free(lens);
    /* Skip zero-length sinks so the data phase ends exactly with the bytes. */
    while (c->sink_idx < c->nsinks && c->sinks[c->sink_idx].len == 0)
        c->sink_idx++;
    c->state = CONN_READ_DATA;
}

void ds__ops_set_finish(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    uint64_t now = ds__now_ms();
    if (c->npend == 0) {
        uint32_t st = DS_K_INVALID;
        reply_statuses(c, DS_OP_SET, &st, 1, c->pend_err);
        ds__conn_release_pending(c);
        return;
    }
    ds_obj_t **published = calloc(c->npend, sizeof(*published));
    for (uint32_t i = 0; i < c->npend; i++) {
        ds_obj_t *o = c->pend[i];
        if (o == NULL) continue;
        ds_status_t st = ds__store_publish(srv->store, o, (ds_existence_t)c->pend_existence, now);
        c->pend_status[i] = (uint32_t)st;
        if (st == DS_K_OK) {
            ds__subs_publish(srv, o->key, o->keylen);
            if (published) published[i] = o;
        } else if (c->pend_err[0] == '\0') {
            snprintf(c->pend_err, sizeof(c->pend_err), "key '%s' already exists (NX)", o->key);
        }
    }
    if (published)
        answer_published(c, DS_OP_SET, published, c->pend_status, c->npend,
                         c->pend_existence == DS_EXISTENCE_NX, c->pend_err);
    else
        ds__conn_reply_err(c, c->h.req_id, DS_OP_SET, DS_K_OUT_OF_MEMORY, "out of memory");
    free(published);
    ds__conn_release_pending(c);
}

/* ---- GET ---- */

void ds__ops_get_reply(ds_conn_t *c, uint64_t req_id, uint8_t flags, const char *const *keys,
                       const uint32_t *lens, uint32_t n, ds_obj_t **objs)
{
    ds_server_t *srv = c->srv;
    bool shm_ok = c->session && c->session->shm;
    struct iovec *segs = malloc((n ? n : 1) * sizeof(*segs));
    ds_obj_t **refs = malloc((n ? n : 1) * sizeof(*refs));
    if (segs == NULL || refs == NULL) {
        free(segs);
        free(refs);
        ds__conn_reply_err(c, req_id, DS_OP_GET, DS_K_OUT_OF_MEMORY, "out of memory");
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
            uint64_t handle = ds__session_add(c->session, o, 0);
            if (handle != 0) {
                ds__wbuf_u8(&w, DS_VAL_SHM);
                ds__wbuf_u64(&w, o->size);
                ds__wbuf_u64(&w, ds__store_offset(srv->store, o));
                ds__wbuf_u64(&w, handle);
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
        if (n == 1)
            snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)lens[0], keys[0]);
        else
            snprintf(msg, sizeof(msg), "none of the %u keys was found", n);
        set_leading_error(&w, msg);
        st = DS_K_NOT_FOUND;
    }
    if (w.oom) {
        for (uint32_t i = 0; i < nseg; i++)
            ds__store_unref(srv->store, refs[i]);
        ds__conn_reply_err(c, req_id, DS_OP_GET, DS_K_OUT_OF_MEMORY, "out of memory");
    } else {
        ds__conn_reply(c, req_id, DS_OP_GET, st, &w, segs, nseg, refs, nseg, -1);
    }
    ds__wbuf_free(&w);
    free(segs);
    free(refs);
}

void ds__ops_get_answer(ds_conn_t *c, uint64_t req_id, const uint8_t *meta, uint32_t meta_len)
{
    ds_server_t *srv = c->srv;
    ds_rbuf_t r;
    ds__rbuf_init(&r, meta, meta_len);
    (void)ds__rbuf_i32(&r);
    uint8_t flags = ds__rbuf_u8(&r);
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    if (read_keys(&r, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg)) != 0) {
        ds__conn_reply_err(c, req_id, DS_OP_GET, DS_K_INVALID, "%s", msg);
        return;
    }
    const char **kp = malloc(n * sizeof(*kp));
    uint32_t *kl = malloc(n * sizeof(*kl));
    ds_obj_t **objs = malloc(n * sizeof(*objs));
    if (kp == NULL || kl == NULL || objs == NULL) {
        ds__conn_reply_err(c, req_id, DS_OP_GET, DS_K_OUT_OF_MEMORY, "out of memory");
    } else {
        uint64_t now = ds__now_ms();
        for (uint32_t i = 0; i < n; i++) {
            kp[i] = keys[i].p;
            kl[i] = keys[i].len;
            objs[i] = ds__store_lookup(srv->store, keys[i].p, keys[i].len, now);
        }
        ds__ops_get_reply(c, req_id, flags, kp, kl, n, objs);
    }
    free(kp);
    free(kl);
    free(objs);
    free(keys);
}

static void op_get(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    ds_rbuf_t r;
    ds__rbuf_init(&r, c->meta, c->h.meta_len);
    int32_t timeout = ds__rbuf_i32(&r);
    uint8_t gflags = ds__rbuf_u8(&r);
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    int rc = read_keys(&r, DS_MAX_BATCH, &keys, &n, msg, sizeof(msg));
    if (rc == 0 && !ds__rbuf_done(&r)) {
        snprintf(msg, sizeof(msg), "malformed GET: %zu trailing bytes", r.len - r.pos);
        rc = -2;
        free(keys);
    }
    if (rc != 0) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_GET, DS_K_INVALID, "%s", msg);
        return;
    }
    if (timeout < 0) {
        free(keys);
        ds__conn_reply_err(c, c->h.req_id, DS_OP_GET, DS_K_INVALID, "sub_timeout_ms %d is negative",
                           timeout);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (ds__key_check(keys[i].p, keys[i].len, msg, sizeof(msg)) != 0) {
            free(keys);
            ds__conn_reply_err(c, c->h.req_id, DS_OP_GET, DS_K_INVALID, "%s", msg);
            return;
        }
    }
    if (srv->cluster && !(c->h.flags & DS_FLAG_PEER)) {
        /* Keys missing here may live on another worker: ask their owners. */
        const char **kp = malloc(n * sizeof(*kp));
        uint32_t *kl = malloc(n * sizeof(*kl));
        if (kp && kl) {
            for (uint32_t i = 0; i < n; i++) {
                kp[i] = keys[i].p;
                kl[i] = keys[i].len;
            }
            ds__cluster_get(c, timeout, gflags, kp, kl, n);
        } else {
            ds__conn_reply_err(c, c->h.req_id, DS_OP_GET, DS_K_OUT_OF_MEMORY, "out of memory");
        }
        free(kp);
        free(kl);
        free(keys);
        return;
    }
    if (timeout > 0) {
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
        if (mk && ml && nm > 0) {
            parked = ds__subs_wait(srv, c, DS_OP_GET, c->h.req_id, c->meta, c->h.meta_len, mk, ml,
                                   nm, now + (uint64_t)timeout);
            if (!parked)
                DS_LOG_WARN("subscription limit (%" PRId64 ") reached; answering at once",
                            srv->cfg.max_pending_subscriptions);
        }
        free(mk);
        free(ml);
        if (parked) {
            c->meta = NULL; /* the wait owns it now */
            c->state = CONN_PARKED;
            free(keys);
            return;
        }
    }
    free(keys);
    ds__ops_get_answer(c, c->h.req_id, c->meta, c->h.meta_len);
}

/* ---- the rest ---- */

/* The challenge-response of common/auth.h. true once the connection is
 * authenticated; otherwise it has answered (a challenge or a refusal). */
static bool hello_auth(ds_conn_t *c, const char *token, uint32_t tlen)
{
    ds_server_t *srv = c->srv;
    if (c->challenge[0] && tlen > 0) {
        bool ok = ds__auth_verify(srv->auth_token, c->challenge, token, tlen);
        c->challenge[0] = '\0'; /* one answer per challenge */
        if (ok) {
            c->authed = true;
            return true;
        }
        srv->ctr.auth_failures++;
        if (++c->auth_failures >= 3) c->close_after_write = true;
        DS_LOG_WARN("conn %" PRIu64 ": wrong authentication proof", c->id);
        ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_NOT_AUTHORIZED,
                           "authentication failed: wrong proof for the challenge");
        return false;
    }
    if (ds__auth_challenge(c->challenge) != 0) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_RUNTIME_ERROR,
                           "no randomness for an authentication challenge");
        return false;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "authentication required: answer the challenge");
    ds__wbuf_cstr(&w, c->challenge);
    ds__conn_reply(c, c->h.req_id, DS_OP_HELLO, DS_K_NOT_AUTHORIZED, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
    return false;
}

static void op_hello(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    ds_rbuf_t r;
    ds__rbuf_init(&r, c->meta, c->h.meta_len);
    uint32_t proto = ds__rbuf_u32(&r);
    uint64_t sid = ds__rbuf_u64(&r);
    uint8_t want_shm = ds__rbuf_u8(&r);
    const char *token;
    uint32_t tlen = ds__rbuf_str(&r, &token);
    if (r.err) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_INVALID, "malformed HELLO");
        return;
    }
    if (proto != DS_WIRE_VERSION) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_INVALID,
                           "client protocol %u, worker speaks %u", proto, DS_WIRE_VERSION);
        return;
    }
    if (c->hello_done) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_INVALID, "HELLO sent twice");
        return;
    }
    if (!c->authed && !hello_auth(c, token, tlen)) return;
    ds_session_t *s;
    if (sid != 0) {
        s = ds__session_find(srv, sid);
        if (s == NULL) {
            ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_NOT_FOUND,
                               "session %" PRIu64 " is unknown to this worker (restarted?)", sid);
            return;
        }
    } else {
        uint32_t nsess = 0;
        for (ds_session_t *x = srv->sessions; x; x = x->next)
            nsess++;
        if (nsess >= (uint32_t)srv->cfg.max_client_num) {
            srv->ctr.conns_rejected++;
            c->close_after_write = true;
            ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_RUNTIME_ERROR,
                               "worker has reached --max_client_num (%lld) clients",
                               (long long)srv->cfg.max_client_num);
            return;
        }
        s = ds__session_new(srv);
        if (s == NULL) {
            ds__conn_reply_err(c, c->h.req_id, DS_OP_HELLO, DS_K_OUT_OF_MEMORY, "out of memory");
            return;
        }
    }
    s->nconns++;
    c->session = s;
    c->hello_done = true;
    bool grant = want_shm && c->is_unix;
    if (grant) s->shm = true;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u64(&w, s->id);
    ds__wbuf_u64(&w, grant ? srv->arena.size : 0);
    ds__wbuf_u32(&w, srv->inline_max);
    ds__wbuf_cstr(&w, srv->worker_id);
    ds__wbuf_u32(&w, (uint32_t)getpid());
    uint64_t ix_off = 0, ix_slots = 0;
    if (!grant || !ds__store_index(srv->store, &ix_off, &ix_slots)) ix_off = ix_slots = 0;
    ds__wbuf_u64(&w, ix_off);
    ds__wbuf_u32(&w, (uint32_t)ix_slots);
    ds__wbuf_u32(&w, ix_slots ? DS_SHM_INDEX_KEYMAX : 0);
    /* A joining connection's client mapped the arena already. */
    ds__conn_reply(c, c->h.req_id, DS_OP_HELLO, DS_K_OK, &w, NULL, 0, NULL, 0,
                   grant && sid == 0 ? srv->arena.fd : -1);
    ds__wbuf_free(&w);
}

static void op_create(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    ds_rbuf_t r;
    ds__rbuf_init(&r, c->meta, c->h.meta_len);
    write_head_t wh;
    char msg[256];
    if (read_write_head(&r, "CREATE", &wh, msg, sizeof(msg)) != 0) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_CREATE, DS_K_INVALID, "%s", msg);
        return;
    }
    if (!c->session->shm) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_CREATE, DS_K_NOT_SUPPORTED,
                           "CREATE needs a local client that mapped the arena");
        return;
    }
    uint8_t mode = wh.mode, existence = wh.existence;
    uint32_t ttl = wh.ttl, n = wh.n;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    ds_status_t overall = DS_K_OK;
    char first[256] = "";
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&r, &k);
        uint64_t size = ds__rbuf_u64(&r);
        ds_status_t st = DS_K_OK;
        ds_obj_t *o = NULL;
        uint64_t handle = 0;
        if (r.err) {
            snprintf(msg, sizeof(msg), "malformed CREATE: entry %u truncated", i);
            st = DS_K_INVALID;
        } else if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (size == 0) {
            snprintf(msg, sizeof(msg), "value for key '%.*s' is empty", (int)kl, k);
            st = DS_K_INVALID;
        } else {
            st = ds__store_reserve(srv->store, k, kl, size, (ds_write_mode_t)mode, ttl, &o, msg,
                                   sizeof(msg));
            if (st == DS_K_OK) {
                handle = ds__session_add(c->session, o, existence);
                if (handle == 0) {
                    ds__store_unref(srv->store, o);
                    snprintf(msg, sizeof(msg), "out of memory");
                    st = DS_K_OUT_OF_MEMORY;
                }
            }
        }
        if (st != DS_K_OK && overall == DS_K_OK) {
            overall = st;
            snprintf(first, sizeof(first), "%s", msg);
        }
        ds__wbuf_u32(&w, (uint32_t)st);
        ds__wbuf_u64(&w, st == DS_K_OK ? ds__store_offset(srv->store, o) : 0);
        ds__wbuf_u64(&w, handle);
    }
    if (overall != DS_K_OK) set_leading_error(&w, first);
    ds__conn_reply(c, c->h.req_id, DS_OP_CREATE, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_publish_release(ds_conn_t *c, bool publish)
{
    ds_server_t *srv = c->srv;
    uint16_t op = publish ? DS_OP_PUBLISH : DS_OP_RELEASE;
    ds_rbuf_t r;
    ds__rbuf_init(&r, c->meta, c->h.meta_len);
    uint32_t n = ds__rbuf_count(&r, 4 * DS_MAX_BATCH, 8);
    bool noreply = c->h.flags & DS_FLAG_NOREPLY;
    if (r.err) {
        if (!noreply)
            ds__conn_reply_err(c, c->h.req_id, op, DS_K_INVALID, "malformed %s",
                               ds__opcode_name(op));
        return;
    }
    uint32_t *st = calloc(n ? n : 1, sizeof(*st));
    ds_obj_t **published = calloc(n ? n : 1, sizeof(*published));
    bool any_nx = false; /* a PUBLISH batch mixing NX and not is treated as NX */
    char first[256] = "";
    uint64_t now = ds__now_ms();
    for (uint32_t i = 0; st && i < n; i++) {
        uint64_t h = ds__rbuf_u64(&r);
        if (!publish) {
            st[i] = ds__session_release(srv, c->session, h) ? DS_K_OK : DS_K_INVALID;
            continue;
        }
        ds_slot_t *sl = ds__session_slot(c->session, h);
        if (sl == NULL || sl->obj->state != DS_OBJ_CREATING) {
            st[i] = DS_K_INVALID;
            if (!first[0])
                snprintf(first, sizeof(first), "handle %" PRIx64 " is not an unpublished buffer",
                         h);
            continue;
        }
        any_nx |= sl->existence == DS_EXISTENCE_NX;
        ds_status_t s = ds__store_publish(srv->store, sl->obj, (ds_existence_t)sl->existence, now);
        st[i] = (uint32_t)s;
        if (s == DS_K_OK) {
            ds__subs_publish(srv, sl->obj->key, sl->obj->keylen);
            if (published) published[i] = sl->obj;
        } else if (!first[0])
            snprintf(first, sizeof(first), "key '%s' already exists (NX)", sl->obj->key);
    }
    if (!noreply) {
        if (st == NULL || published == NULL)
            ds__conn_reply_err(c, c->h.req_id, op, DS_K_OUT_OF_MEMORY, "out of memory");
        else if (!publish)
            ds__conn_reply_err(c, c->h.req_id, op, DS_K_OK, "%s", "");
        else
            answer_published(c, op, published, st, n, any_nx, first);
    }
    free(published);
    free(st);
}

static void op_keys(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    uint16_t op = c->h.opcode;
    ds_rbuf_t r;
    ds__rbuf_init(&r, c->meta, c->h.meta_len);
    uint32_t ttl = op == DS_OP_EXPIRE ? ds__rbuf_u32(&r) : 0;
    key_t_ *keys = NULL;
    uint32_t n = 0;
    char msg[256];
    int rc = read_keys(&r, op == DS_OP_EXIST ? DS_MAX_EXIST_BATCH : DS_MAX_BATCH, &keys, &n, msg,
                       sizeof(msg));
    if (rc == 0 && !ds__rbuf_done(&r)) {
        free(keys);
        snprintf(msg, sizeof(msg), "malformed %s: trailing bytes", ds__opcode_name(op));
        rc = -2;
    }
    if (rc != 0) {
        ds__conn_reply_err(c, c->h.req_id, op, DS_K_INVALID, "%s", msg);
        return;
    }
    if (srv->cluster && !(c->h.flags & DS_FLAG_PEER)) {
        const char **kp = malloc(n * sizeof(*kp));
        uint32_t *kl = malloc(n * sizeof(*kl));
        int bad = -1;
        for (uint32_t i = 0; kp && kl && i < n && bad < 0; i++) {
            kp[i] = keys[i].p;
            kl[i] = keys[i].len;
            if (ds__key_check(keys[i].p, keys[i].len, msg, sizeof(msg)) != 0) bad = (int)i;
        }
        if (!kp || !kl)
            ds__conn_reply_err(c, c->h.req_id, op, DS_K_OUT_OF_MEMORY, "out of memory");
        else if (bad >= 0)
            ds__conn_reply_err(c, c->h.req_id, op, DS_K_INVALID, "%s", msg);
        else
            ds__cluster_keys_op(c, op, kp, kl, n, ttl);
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
    for (uint32_t i = 0; i < n; i++) {
        ds_status_t st = DS_K_OK;
        if (ds__key_check(keys[i].p, keys[i].len, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (op == DS_OP_DEL) {
            ds__store_delete(srv->store, keys[i].p, keys[i].len);
        } else if (op == DS_OP_EXPIRE) {
            st = ds__store_expire(srv->store, keys[i].p, keys[i].len, ttl, now);
            if (st != DS_K_OK)
                snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)keys[i].len, keys[i].p);
        }
        if (st != DS_K_OK && overall == DS_K_OK) {
            overall = st;
            snprintf(first, sizeof(first), "%s", msg);
        }
        if (op == DS_OP_EXIST) {
            bool ex = st == DS_K_OK && ds__store_lookup(srv->store, keys[i].p, keys[i].len, now);
            ds__wbuf_u8(&w, ex);
        } else if (op == DS_OP_QSIZE) {
            ds_obj_t *o =
                st == DS_K_OK ? ds__store_lookup(srv->store, keys[i].p, keys[i].len, now) : NULL;
            ds__wbuf_u32(&w, o ? DS_K_OK : (st == DS_K_OK ? DS_K_NOT_FOUND : st));
            ds__wbuf_u64(&w, o ? o->size : 0);
        } else {
            ds__wbuf_u32(&w, (uint32_t)st);
        }
    }
    free(keys);
    if (overall != DS_K_OK) set_leading_error(&w, first);
    ds__conn_reply(c, c->h.req_id, op, overall, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_genkey(ds_conn_t *c)
{
    ds_server_t *srv = c->srv;
    ds_rbuf_t r;
    ds__rbuf_init(&r, c->meta, c->h.meta_len);
    const char *prefix;
    uint32_t pl = ds__rbuf_str(&r, &prefix);
    char msg[256];
    if (r.err || pl > DS_MAX_KEY_LEN - 40) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_GENKEY, DS_K_INVALID,
                           "prefix is malformed or longer than %d bytes", DS_MAX_KEY_LEN - 40);
        return;
    }
    if (pl > 0 && ds__key_check(prefix, pl, msg, sizeof(msg)) != 0) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_GENKEY, DS_K_INVALID, "prefix: %s", msg);
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
    ds__conn_reply(c, c->h.req_id, DS_OP_GENKEY, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void op_stats(ds_conn_t *c)
{
    char *json = ds__server_stats_json(c->srv);
    if (json == NULL) {
        ds__conn_reply_err(c, c->h.req_id, DS_OP_STATS, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_cstr(&w, json);
    ds__conn_reply(c, c->h.req_id, DS_OP_STATS, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
    free(json);
}

void ds__ops_dispatch(ds_conn_t *c)
{
    switch (c->h.opcode) {
    case DS_OP_HELLO:
        op_hello(c);
        break;
    case DS_OP_GET:
        op_get(c);
        break;
    case DS_OP_CREATE:
        op_create(c);
        break;
    case DS_OP_PUBLISH:
        op_publish_release(c, true);
        break;
    case DS_OP_RELEASE:
        op_publish_release(c, false);
        break;
    case DS_OP_DEL:
    case DS_OP_EXIST:
    case DS_OP_EXPIRE:
    case DS_OP_QSIZE:
        op_keys(c);
        break;
    case DS_OP_GENKEY:
        op_genkey(c);
        break;
    case DS_OP_HEALTH:
        ds__conn_reply_err(c, c->h.req_id, DS_OP_HEALTH, DS_K_OK, "%s", "");
        break;
    case DS_OP_STATS:
        op_stats(c);
        break;
    case DS_OP_LOCATE:
        ds__cluster_op_locate(c);
        break;
    case DS_OP_META_PUT:
        ds__cluster_op_meta_put(c);
        break;
    case DS_OP_META_DEL:
        ds__cluster_op_meta_del(c);
        break;
    case DS_OP_DROP:
        ds__cluster_op_drop(c);
        break;
    case DS_OP_SHUTDOWN:
        if (!c->is_unix) {
            ds__conn_reply_err(c, c->h.req_id, DS_OP_SHUTDOWN, DS_K_NOT_AUTHORIZED,
                               "SHUTDOWN is accepted on the worker's Unix socket only");
            break;
        }
        DS_LOG_INFO("shutdown requested by a client");
        ds__conn_reply_err(c, c->h.req_id, DS_OP_SHUTDOWN, DS_K_OK, "%s", "");
        ds__server_stop(c->srv);
        break;
    default:
        ds__conn_reply_err(c, c->h.req_id, c->h.opcode, DS_K_INVALID, "opcode %u not handled here",
                           c->h.opcode);
    }
}
