/* Read latches (Yuanrong's ReadOnlyBuffer.rlatch / unrlatch): a session
 * holds a latch on a key for a timeout, and a writer of that key (SET,
 * PUBLISH, DEL) waits until no live latch is left on it, then proceeds.
 * Waiting is a parked request (ds__req_park) on a waiter list, resumed
 * when a latch is released, times out, or its session ends; nothing polls
 * and the loop never blocks.
 *
 * Latches are rare and short-lived, so both lists are plain linked lists: a
 * write checks them only when some latch exists (one NULL test otherwise).
 * Latches are this worker's: in a cluster a writer on another worker does not
 * wait (README, compatibility notes). */
#include "worker/ops/ops_int.h"

#include "common/clock.h"
#include "common/keys.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct latch {
    struct latch *next;
    ds_session_t *sess;
    uint64_t deadline;
    uint32_t keylen;
    char key[];
} latch_t;

typedef struct waiter {
    struct waiter *next;
    ds_server_t *srv;
    ds_req_t *d;
    ds_latch_resume_fn resume;
    ds_latch_cancel_fn cancel;
    void *ctx;
    uint32_t n;
    char **keys;
    uint32_t *lens;
} waiter_t;

struct ds_latches {
    latch_t *latches;
    waiter_t *waiters;
};

static struct ds_latches *get(ds_server_t *srv)
{
    if (srv->latches == NULL) srv->latches = calloc(1, sizeof(*srv->latches));
    return srv->latches;
}

static bool held(struct ds_latches *L, const char *k, uint32_t kl, uint64_t now)
{
    for (latch_t *l = L->latches; l; l = l->next)
        if (l->deadline > now && l->keylen == kl && memcmp(l->key, k, kl) == 0) return true;
    return false;
}

bool ds__latch_any(const ds_server_t *srv)
{
    return srv->latches && srv->latches->latches;
}

static void waiter_free(waiter_t *w)
{
    for (uint32_t i = 0; i < w->n; i++)
        free(w->keys[i]);
    free(w->keys);
    free(w->lens);
    free(w);
}

static void unlink_waiter(struct ds_latches *L, waiter_t *w)
{
    for (waiter_t **pp = &L->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return;
        }
}

static void on_cancel(ds_req_t *d, void *ctx)
{
    waiter_t *w = ctx;
    unlink_waiter(w->srv->latches, w);
    if (w->cancel) w->cancel(w->ctx);
    waiter_free(w);
    ds__req_drop(d);
}

bool ds__latch_park(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                    uint32_t n, ds_latch_resume_fn resume, ds_latch_cancel_fn cancel, void *ctx)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL || L->latches == NULL) return false;
    uint64_t now = ds__now_ms();
    bool blocked = false;
    for (uint32_t i = 0; i < n && !blocked; i++)
        blocked = held(L, keys[i], lens[i], now);
    if (!blocked) return false;
    waiter_t *w = calloc(1, sizeof(*w));
    if (w) {
        w->keys = calloc(n, sizeof(*w->keys));
        w->lens = calloc(n, sizeof(*w->lens));
    }
    bool ok = w && w->keys && w->lens;
    for (uint32_t i = 0; ok && i < n; i++) {
        if ((w->keys[i] = malloc(lens[i] ? lens[i] : 1)) == NULL) {
            ok = false;
            break;
        }
        memcpy(w->keys[i], keys[i], lens[i]);
        w->lens[i] = lens[i];
        w->n = i + 1;
    }
    ds_req_t *d = ok ? ds__req_park(r, on_cancel, w) : NULL;
    if (d == NULL) {
        /* Out of memory: the write goes ahead rather than waiting forever. */
        if (w) waiter_free(w);
        DS_LOG_WARN("out of memory parking a write behind a read latch; it proceeds");
        return false;
    }
    w->srv = srv;
    w->d = d;
    w->resume = resume;
    w->cancel = cancel;
    w->ctx = ctx;
    w->next = L->waiters;
    L->waiters = w;
    ds__req_log(d, DS_LOG_DEBUG, "conn %llu %s waits for a read latch",
                (unsigned long long)d->conn_id, ds__opcode_name(d->op));
    return true;
}

/* Resumes every waiter none of whose keys is latched any more. A resumed
 * writer may not add latches, so one pass suffices. Each resumed request is
 * unparked first: its waiter (the cancel callback's context) is freed here,
 * and whoever parks it next (the disk, the cluster) gives its own. */
static void wake(ds_server_t *srv, uint64_t now)
{
    struct ds_latches *L = srv->latches;
    waiter_t *ready = NULL;
    for (waiter_t **pp = &L->waiters; *pp;) {
        waiter_t *w = *pp;
        bool blocked = false;
        for (uint32_t i = 0; i < w->n && !blocked; i++)
            blocked = held(L, w->keys[i], w->lens[i], now);
        if (blocked) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        w->next = ready;
        ready = w;
    }
    while (ready) {
        waiter_t *w = ready;
        ready = w->next;
        ds__req_unpark(w->d);
        w->resume(srv, w->d, w->ctx);
        waiter_free(w);
    }
}

/* Drops latches matching (sess, or any when NULL; expired ones always). */
static bool sweep(struct ds_latches *L, ds_session_t *sess, uint64_t now)
{
    bool dropped = false;
    for (latch_t **pp = &L->latches; *pp;) {
        latch_t *l = *pp;
        if (l->deadline <= now || (sess && l->sess == sess)) {
            *pp = l->next;
            free(l);
            dropped = true;
        } else {
            pp = &l->next;
        }
    }
    return dropped;
}

uint64_t ds__latch_expire(ds_server_t *srv, uint64_t now)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL || L->latches == NULL) return 0;
    if (sweep(L, NULL, now)) wake(srv, now);
    uint64_t next = 0;
    for (latch_t *l = L->latches; l; l = l->next)
        if (next == 0 || l->deadline < next) next = l->deadline;
    return next;
}

void ds__latch_session_end(void *ctx, ds_session_t *s)
{
    ds_server_t *srv = ctx;
    struct ds_latches *L = srv->latches;
    if (L == NULL || L->latches == NULL) return;
    uint64_t now = ds__now_ms();
    if (sweep(L, s, now)) wake(srv, now);
}

void ds__latch_destroy(ds_server_t *srv)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL) return;
    while (L->latches) {
        latch_t *l = L->latches;
        L->latches = l->next;
        free(l);
    }
    /* Waiters were cancelled with their connections (ds__net_destroy). */
    free(L);
    srv->latches = NULL;
}

/* RLATCH and UNRLATCH. */
void ds__ops_latch(ds_server_t *srv, ds_req_t *r)
{
    bool take = r->op == DS_OP_RLATCH;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t timeout = take ? ds__rbuf_u32(&rb) : 0;
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 5);
    if (rb.err || n == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed %s: %u keys (allowed 1..%u)",
                      ds__opcode_name(r->op), n, DS_MAX_BATCH);
        return;
    }
    if (take && (timeout == 0 || timeout > INT32_MAX)) {
        ds__req_error(r, DS_K_INVALID, "latch timeout %u ms is not in 1..%d", timeout, INT32_MAX);
        return;
    }
    if (r->session == NULL) {
        ds__req_error(r, DS_K_INVALID, "latches need a session");
        return;
    }
    struct ds_latches *L = get(srv);
    if (L == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    ds_status_t first = DS_K_OK;
    char msg[256], first_msg[256] = "";
    uint64_t now = ds__now_ms();
    bool released = false;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        ds_status_t st = DS_K_OK;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed %s: key %u truncated", ds__opcode_name(r->op), i);
            st = DS_K_INVALID;
        } else if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if (take) {
            latch_t *l = NULL;
            if (ds__store_lookup(srv->store, k, kl, now) == NULL) {
                snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)kl, k);
                st = DS_K_NOT_FOUND;
            } else if ((l = malloc(sizeof(*l) + kl)) == NULL) {
                snprintf(msg, sizeof(msg), "out of memory");
                st = DS_K_OUT_OF_MEMORY;
            } else {
                memcpy(l->key, k, kl);
                l->keylen = kl;
                l->sess = r->session;
                l->deadline = now + timeout;
                l->next = L->latches;
                L->latches = l;
            }
        } else {
            latch_t **pp = &L->latches;
            while (*pp && !((*pp)->sess == r->session && (*pp)->keylen == kl &&
                            memcmp((*pp)->key, k, kl) == 0))
                pp = &(*pp)->next;
            if (*pp) {
                latch_t *l = *pp;
                *pp = l->next;
                free(l);
                released = true;
            } else {
                snprintf(msg, sizeof(msg), "this client holds no read latch on key '%.*s'", (int)kl,
                         k);
                st = DS_K_NOT_FOUND;
            }
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
    if (released) wake(srv, now);
}
