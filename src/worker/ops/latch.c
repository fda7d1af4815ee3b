/* Read latches (Yuanrong's ReadOnlyBuffer.rlatch / unrlatch): a session
 * holds a latch on a key for a timeout, and a writer of that key (SET,
 * PUBLISH, DEL) waits until no live latch is left on it, then proceeds.
 * Waiting is a parked request (ds__req_park) on a waiter list, resumed when
 * a latch is released, times out, or its session ends; nothing polls and
 * the loop never blocks.
 *
 * The latches themselves are in a table (latch_tab.h) within the worker's
 * limits: --max_read_latches_per_client, --max_read_latches, and
 * --max_read_latch_timeout_ms for one latch's timeout. A write checks only
 * the keys it writes (one lookup each, and none at all while no latch
 * exists), so latches on other keys never slow it down. Waiters are few
 * (one parked request per connection at most) and stay on a plain list.
 * In a cluster a key's latches are held by its ring owner (the cluster
 * forwards latch requests there, cluster/cluster_hold.c, and applies them
 * here with ds__latch_apply for holders that stand for other workers'
 * sessions); a write of a key another owner holds latched asks that owner
 * (ds__latch_park, through the cluster's latch_wait).
 *
 * A request of many keys (up to DS_MAX_BATCH) is served DS_LATCH_SLICE keys
 * per loop turn: after the first slice it is parked and the latch tick
 * (ds__latch_expire, run every turn) takes the next slice of each such
 * request, so other clients' requests are served between slices instead of
 * waiting behind thousands of keys. Its connection reads nothing
 * meanwhile, so its own requests stay in order. Writers woken by a slice's
 * releases are woken once per slice, not once per key.
 *
 * Write latches (Yuanrong's Buffer.wlatch / unwlatch) are in a second table
 * with the same limits. A session's write latch on a key excludes the other
 * sessions: their WLATCH and RLATCH of the key answer K_TRY_AGAIN (the
 * client library retries them until its timeout), and their SET, PUBLISH
 * and DEL of the key wait as for a read latch. The holder itself may read,
 * latch again and publish (Yuanrong's wlatch, memory_copy, publish,
 * unwlatch). A WLATCH is refused with K_TRY_AGAIN while another session
 * holds a read latch on the key. A write latch lasts until UNWLATCH, the end
 * of its session, or --max_read_latch_timeout_ms, whichever comes first.
 *
 * A holder that ends with more than DS_LATCH_DROP_SLICE latches (a session
 * may hold --max_read_latches_per_client of them) is retired at once and
 * its latches dropped that many per turn, by the same tick, so that one
 * client's disconnect does not hold the loop for milliseconds. Writers keep
 * waiting on them until they go; the session's memory, and so its name,
 * may meanwhile serve a new session, which holds none of them. */
#include "worker/ops/latch_tab.h"
#include "worker/ops/ops_int.h"

#include "common/clock.h"
#include "common/keys.h"
#include "common/log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct waiter {
    struct waiter *next;
    ds_server_t *srv;
    ds_req_t *d;
    ds_latch_resume_fn resume;
    ds_latch_cancel_fn cancel;
    void *ctx;
    const void *holder; /* the writer's session: its own write latches do not block it */
    bool asks_owner;    /* parked by ds__latch_park: keys owned elsewhere ask the owner */
    uint32_t n;
    char **keys;
    uint32_t *lens;
} waiter_t;

/* Keys of one RLATCH / UNRLATCH / WLATCH / UNWLATCH served per loop turn.
 * A key costs the loop ~0.3-0.5 us (a lookup, the table's insert or
 * release, its status), so a slice holds other clients back for about one
 * small request's round trip (~30 us) at most, while a turn's own cost (a
 * non-waiting epoll_wait, the timers) stays a few percent of it. */
#define DS_LATCH_SLICE 64u

/* Latches of an ended holder dropped per loop turn. Dropping one costs
 * ~1 us (its heap entry, two hash entries, three frees), so a turn's share
 * stays well under a small request's round trip, as a slice of a request
 * does. */
#define DS_LATCH_DROP_SLICE 64u

/* An ended holder's latches still to drop, under the name its table gave
 * them (ds__latch_tab_retire_holder). */
typedef struct retired {
    struct retired *next;
    ds_latch_tab_t *tab;
    const void *name;
} retired_t;

/* A latch request of more than one slice: its progress and its answer so
 * far. Parked (d) between slices. */
typedef struct batch {
    struct batch *next;
    ds_server_t *srv;
    ds_req_t *r;        /* the request; parked once a slice is left over */
    const void *holder; /* its session */
    uint16_t op;
    uint32_t timeout, i, n;
    ds_rbuf_t rb; /* the next key in r's metadata */
    ds_wbuf_t w;  /* the answer: a status per key */
    ds_status_t first;
    bool quota;
    char first_msg[256];
} batch_t;

struct ds_latches {
    ds_latch_tab_t tab;  /* read latches */
    ds_latch_tab_t wtab; /* write latches */
    waiter_t *waiters;
    uint32_t nwaiting;
    batch_t *batches, *batches_tail; /* parked latch requests, oldest first */
    bool batching;                   /* a slice runs: releases wake writers after it */
    bool released;                   /* the slice released a latch */
    retired_t *retired;              /* ended holders with latches left, oldest first */
};

static struct ds_latches *get(ds_server_t *srv)
{
    if (srv->latches == NULL) {
        srv->latches = calloc(1, sizeof(*srv->latches));
        if (srv->latches) {
            ds__latch_tab_init(&srv->latches->tab, (uint64_t)srv->cfg.max_read_latches_per_client,
                               (uint64_t)srv->cfg.max_read_latches);
            ds__latch_tab_init(&srv->latches->wtab, (uint64_t)srv->cfg.max_read_latches_per_client,
                               (uint64_t)srv->cfg.max_read_latches);
        }
    }
    return srv->latches;
}

static bool local_any(const ds_server_t *srv)
{
    return srv->latches && (ds__latch_tab_count(&srv->latches->tab) > 0 ||
                            ds__latch_tab_count(&srv->latches->wtab) > 0);
}

bool ds__latch_any(ds_server_t *srv)
{
    return local_any(srv) ||
           (srv->remote && srv->remote->latch_hinted && srv->remote->latch_hinted(srv));
}

/* Whether a write of the key by holder must wait: a read latch of anyone,
 * or a write latch of another session. */
static bool blocks_writer(const struct ds_latches *L, const void *holder, const char *k,
                          uint32_t kl)
{
    return ds__latch_tab_held(&L->tab, k, kl) ||
           ds__latch_tab_held_by_other(&L->wtab, holder, k, kl);
}

static bool any_held(const struct ds_latches *L, const void *holder, char *const *keys,
                     const uint32_t *lens, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (blocks_writer(L, holder, keys[i], lens[i])) return true;
    return false;
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
            L->nwaiting--;
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

static bool park(ds_server_t *srv, ds_req_t *r, const void *holder, bool asks_owner,
                 const char *const *keys, const uint32_t *lens, uint32_t n,
                 ds_latch_resume_fn resume, ds_latch_cancel_fn cancel, void *ctx);

/* Asks the keys' owners (the cluster's latch_wait) for a writer: true when
 * it waits there. */
static bool ask_owner(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                      uint32_t n, ds_latch_resume_fn resume, ds_latch_cancel_fn cancel, void *ctx)
{
    return srv->remote && srv->remote->latch_wait &&
           srv->remote->latch_wait(srv, r, keys, lens, n, resume, cancel, ctx);
}

bool ds__latch_park(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                    uint32_t n, ds_latch_resume_fn resume, ds_latch_cancel_fn cancel, void *ctx)
{
    if (park(srv, r, r->session, true, keys, lens, n, resume, cancel, ctx)) return true;
    /* Keys owned elsewhere are latched at their owner: the cluster asks it
     * when a member was told the key is latched (LATCH_HINT). */
    return ask_owner(srv, r, keys, lens, n, resume, cancel, ctx);
}

bool ds__latch_park_as(ds_server_t *srv, ds_req_t *r, const void *holder, const char *const *keys,
                       const uint32_t *lens, uint32_t n, ds_latch_resume_fn resume,
                       ds_latch_cancel_fn cancel, void *ctx)
{
    return park(srv, r, holder, false, keys, lens, n, resume, cancel, ctx);
}

static bool park(ds_server_t *srv, ds_req_t *r, const void *holder, bool asks_owner,
                 const char *const *keys, const uint32_t *lens, uint32_t n,
                 ds_latch_resume_fn resume, ds_latch_cancel_fn cancel, void *ctx)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL || !local_any(srv)) return false;
    bool blocked = false;
    for (uint32_t i = 0; i < n && !blocked; i++)
        blocked = blocks_writer(L, holder, keys[i], lens[i]);
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
    w->holder = holder;
    w->asks_owner = asks_owner;
    w->next = L->waiters;
    L->waiters = w;
    L->nwaiting++;
    ds__req_log(d, DS_LOG_DEBUG, "conn %llu %s waits for a read latch",
                (unsigned long long)d->conn_id, ds__opcode_name(d->op));
    return true;
}

/* Resumes every waiter none of whose keys is latched any more. A resumed
 * writer may not add latches, so one pass suffices. Each resumed request is
 * unparked first: its waiter (the cancel callback's context) is freed here,
 * and whoever parks it next (the disk, the cluster) gives its own. A
 * client's write whose keys are now latched at another owner (the latch
 * it waited for here moved there with a ring change) waits there next. */
static void wake(ds_server_t *srv)
{
    struct ds_latches *L = srv->latches;
    waiter_t *ready = NULL;
    for (waiter_t **pp = &L->waiters; *pp;) {
        waiter_t *w = *pp;
        if (any_held(L, w->holder, w->keys, w->lens, w->n)) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        L->nwaiting--;
        w->next = ready;
        ready = w;
    }
    while (ready) {
        waiter_t *w = ready;
        ready = w->next;
        ds__req_unpark(w->d);
        if (!w->asks_owner || !ask_owner(srv, w->d, (const char *const *)w->keys, w->lens, w->n,
                                         w->resume, w->cancel, w->ctx))
            w->resume(srv, w->d, w->ctx);
        waiter_free(w);
    }
}

static bool run_batches(ds_server_t *srv);

/* Drops the next DS_LATCH_DROP_SLICE latches of ended holders, waking the
 * writers that no longer wait on any; true when some are left. */
static bool drop_retired(ds_server_t *srv)
{
    struct ds_latches *L = srv->latches;
    uint32_t budget = DS_LATCH_DROP_SLICE, dropped = 0;
    while (L->retired && budget > 0) {
        retired_t *x = L->retired;
        uint32_t gone = 0;
        bool empty = ds__latch_tab_drop_retired(x->tab, x->name, budget, &gone);
        dropped += gone;
        budget -= gone;
        if (!empty) break;
        L->retired = x->next;
        free(x);
    }
    if (dropped > 0) wake(srv);
    return L->retired != NULL;
}

uint64_t ds__latch_expire(ds_server_t *srv, uint64_t now)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL) return 0;
    /* Ended holders or requests with slices left: due again at once. */
    bool again = L->retired && drop_retired(srv);
    if (L->batches && run_batches(srv)) again = true;
    if (again) {
        uint64_t gone = ds__latch_tab_expire(&L->tab, now) + ds__latch_tab_expire(&L->wtab, now);
        if (gone > 0) wake(srv);
        return now;
    }
    uint64_t nr = ds__latch_tab_next(&L->tab), nw = ds__latch_tab_next(&L->wtab);
    uint64_t next = nr == 0 ? nw : (nw == 0 || nr < nw ? nr : nw);
    if (next == 0 || next > now) return next;
    uint32_t gone = ds__latch_tab_expire(&L->tab, now) + ds__latch_tab_expire(&L->wtab, now);
    if (gone > 0) wake(srv);
    nr = ds__latch_tab_next(&L->tab);
    nw = ds__latch_tab_next(&L->wtab);
    return nr == 0 ? nw : (nw == 0 || nr < nw ? nr : nw);
}

void ds__latch_session_end(void *ctx, ds_session_t *s)
{
    ds__latch_holder_end(ctx, s);
}

/* Ends holder s's latches in t: at once when they are few, else retired
 * to the back of the queue drop_retired works through. */
static uint32_t end_in(struct ds_latches *L, ds_latch_tab_t *t, const void *s)
{
    if (ds__latch_tab_holder_count(t, s) <= DS_LATCH_DROP_SLICE)
        return ds__latch_tab_drop_holder(t, s);
    retired_t *x = malloc(sizeof(*x));
    if (x == NULL) return ds__latch_tab_drop_holder(t, s); /* all at once, then */
    x->tab = t;
    x->name = ds__latch_tab_retire_holder(t, s);
    x->next = NULL;
    retired_t **pp = &L->retired;
    while (*pp)
        pp = &(*pp)->next;
    *pp = x;
    return 0;
}

void ds__latch_holder_end(ds_server_t *srv, const void *s)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL || !local_any(srv)) return;
    uint32_t gone = end_in(L, &L->tab, s) + end_in(L, &L->wtab, s);
    if (gone > 0) wake(srv);
}

void ds__latch_holder_drop_if(ds_server_t *srv, const void *holder, ds_latch_drop_fn drop,
                              void *ctx)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL || !local_any(srv)) return;
    uint32_t gone = ds__latch_tab_drop_holder_if(&L->tab, holder, drop, ctx) +
                    ds__latch_tab_drop_holder_if(&L->wtab, holder, drop, ctx);
    if (gone > 0) wake(srv);
}

void ds__latch_destroy(ds_server_t *srv)
{
    struct ds_latches *L = srv->latches;
    if (L == NULL) return;
    while (L->retired) {
        retired_t *x = L->retired;
        L->retired = x->next;
        free(x);
    }
    ds__latch_tab_destroy(&L->tab);
    ds__latch_tab_destroy(&L->wtab);
    /* Waiters were cancelled with their connections (ds__net_destroy). */
    free(L);
    srv->latches = NULL;
}

void ds__latch_stats(ds_server_t *srv, cJSON *root)
{
    struct ds_latches *L = srv->latches;
    cJSON *o = cJSON_AddObjectToObject(root, "latches");
    if (o == NULL) return;
    cJSON_AddNumberToObject(o, "held", L ? ds__latch_tab_count(&L->tab) : 0);
    cJSON_AddNumberToObject(o, "keys", L ? ds__latch_tab_keys(&L->tab) : 0);
    cJSON_AddNumberToObject(o, "write_held", L ? ds__latch_tab_count(&L->wtab) : 0);
    cJSON_AddNumberToObject(o, "waiting", L ? L->nwaiting : 0);
    cJSON_AddNumberToObject(o, "max_per_client", (double)srv->cfg.max_read_latches_per_client);
    cJSON_AddNumberToObject(o, "max", (double)srv->cfg.max_read_latches);
}

/* Why key kl:k cannot be latched (st), in msg. */
static ds_status_t refuse_add(ds_server_t *srv, const ds_latch_tab_t *t, ds_latch_add_t why,
                              const void *holder, const char *k, uint32_t kl, char *msg, size_t cap)
{
    const char *what = t == &srv->latches->wtab ? "write" : "read";
    if (why == DS_LATCH_HOLDER_FULL)
        snprintf(msg, cap,
                 "cannot latch key '%.*s': this client holds %u %s latches, the most allowed "
                 "(--max_read_latches_per_client %lld)",
                 (int)(kl > 64 ? 64 : kl), k, ds__latch_tab_holder_count(t, holder), what,
                 (long long)srv->cfg.max_read_latches_per_client);
    else if (why == DS_LATCH_FULL)
        snprintf(msg, cap,
                 "cannot latch key '%.*s': the worker holds %u %s latches, the most allowed "
                 "(--max_read_latches %lld)",
                 (int)(kl > 64 ? 64 : kl), k, ds__latch_tab_count(t), what,
                 (long long)srv->cfg.max_read_latches);
    else
        snprintf(msg, cap, "out of memory");
    return DS_K_OUT_OF_MEMORY;
}

ds_status_t ds__latch_apply(ds_server_t *srv, const void *holder, uint16_t op, uint32_t timeout,
                            const char *k, uint32_t kl, bool exists, uint64_t *until, char *msg,
                            size_t cap)
{
    bool take = op == DS_OP_RLATCH || op == DS_OP_WLATCH;
    bool write = op == DS_OP_WLATCH || op == DS_OP_UNWLATCH;
    struct ds_latches *L = get(srv);
    *until = 0;
    if (L == NULL) {
        snprintf(msg, cap, "out of memory");
        return DS_K_OUT_OF_MEMORY;
    }
    if (ds__key_check(k, kl, msg, cap) != 0) return DS_K_INVALID;
    if (take) {
        ds_latch_tab_t *t = write ? &L->wtab : &L->tab;
        uint64_t now = ds__now_ms();
        /* A write latch lasts until released; the timeout only bounds the client's wait. */
        uint64_t dl = now + (write ? (uint64_t)srv->cfg.max_read_latch_timeout_ms : timeout);
        ds_latch_add_t a;
        if (!exists) {
            snprintf(msg, cap, "key '%.*s' not found", (int)kl, k);
            return DS_K_NOT_FOUND;
        }
        if (ds__latch_tab_held_by_other(&L->wtab, holder, k, kl)) {
            snprintf(msg, cap, "key '%.*s' is write-latched by another client",
                     (int)(kl > 64 ? 64 : kl), k);
            return DS_K_TRY_AGAIN;
        }
        if (write && ds__latch_tab_held_by_other(&L->tab, holder, k, kl)) {
            snprintf(msg, cap, "key '%.*s' is read-latched by another client",
                     (int)(kl > 64 ? 64 : kl), k);
            return DS_K_TRY_AGAIN;
        }
        if ((a = ds__latch_tab_add(t, holder, k, kl, dl)) != DS_LATCH_ADDED)
            return refuse_add(srv, t, a, holder, k, kl, msg, cap);
        *until = dl;
        return DS_K_OK;
    }
    if (ds__latch_tab_release(write ? &L->wtab : &L->tab, holder, k, kl)) {
        if (L->batching)
            L->released = true;
        else
            wake(srv);
        return DS_K_OK;
    }
    snprintf(msg, cap, "this client holds no %s latch on key '%.*s'", write ? "write" : "read",
             (int)kl, k);
    return DS_K_NOT_FOUND;
}

/* Serves the next slice of b's keys; true when none is left. Writers the
 * slice let go are woken by the caller (wake_released). */
static bool run_slice(batch_t *b)
{
    ds_server_t *srv = b->srv;
    struct ds_latches *L = get(srv);
    bool take = b->op == DS_OP_RLATCH || b->op == DS_OP_WLATCH;
    char msg[256];
    uint64_t now = ds__now_ms();
    if (L) L->batching = true;
    for (uint32_t end = b->i + DS_LATCH_SLICE; b->i < b->n && b->i < end; b->i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&b->rb, &k);
        ds_status_t st;
        uint64_t until;
        if (b->rb.err) {
            snprintf(msg, sizeof(msg), "malformed %s: key %u truncated", ds__opcode_name(b->op),
                     b->i);
            st = DS_K_INVALID;
        } else {
            bool exists = !take || ds__store_lookup(srv->store, k, kl, now) != NULL;
            st = ds__latch_apply(srv, b->holder, b->op, b->timeout, k, kl, exists, &until, msg,
                                 sizeof(msg));
            b->quota |= take && st == DS_K_OUT_OF_MEMORY; /* a latch quota (or memory) refused */
        }
        if (st != DS_K_OK && b->first == DS_K_OK) {
            b->first = st;
            snprintf(b->first_msg, sizeof(b->first_msg), "%s", msg);
        }
        ds__wbuf_u32(&b->w, (uint32_t)st);
    }
    if (L) L->batching = false;
    return b->i >= b->n;
}

/* Wakes the writers a slice let go, once the caller is done with its batch
 * (a woken writer's answer may not touch it, but nothing here relies on
 * that). */
static void wake_released(ds_server_t *srv)
{
    struct ds_latches *L = srv->latches;
    if (L && L->released) {
        L->released = false;
        wake(srv);
    }
}

/* Answers b's request and frees b (not on the list). */
static void finish(batch_t *b)
{
    if (b->first != DS_K_OK) ds__ops_lead_error(&b->w, b->first_msg);
    /* A latch refused for a quota: the client waits before its next request
     * (one served in one slice; a parked one is answered at once). */
    if (b->quota) ds__req_penalize(b->r);
    ds__req_reply(b->r, b->first, &b->w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&b->w);
    free(b);
}

static void batch_unlink(struct ds_latches *L, batch_t *b)
{
    batch_t *prev = NULL;
    for (batch_t *x = L->batches; x; prev = x, x = x->next)
        if (x == b) {
            if (prev)
                prev->next = b->next;
            else
                L->batches = b->next;
            if (L->batches_tail == b) L->batches_tail = prev;
            b->next = NULL;
            return;
        }
}

/* The parked request's connection closed: nobody to answer. */
static void batch_cancel(ds_req_t *d, void *ctx)
{
    batch_t *b = ctx;
    batch_unlink(b->srv->latches, b);
    ds__wbuf_free(&b->w);
    free(b);
    ds__req_drop(d);
}

/* One slice of each parked latch request, oldest first; those done are
 * answered. Whether any is left. */
static bool run_batches(ds_server_t *srv)
{
    struct ds_latches *L = srv->latches;
    uint32_t turn = 0;
    for (batch_t *b = L->batches; b; b = b->next)
        turn++;
    /* Each one once (a slice's wake-ups may end others: they leave the list). */
    while (L->batches && turn-- > 0) {
        batch_t *b = L->batches;
        L->batches = b->next;
        if (L->batches == NULL) L->batches_tail = NULL;
        b->next = NULL;
        if (run_slice(b)) {
            finish(b);
        } else {
            if (L->batches_tail)
                L->batches_tail->next = b;
            else
                L->batches = b;
            L->batches_tail = b;
        }
        wake_released(srv);
    }
    return L->batches != NULL;
}

/* RLATCH, UNRLATCH, WLATCH and UNWLATCH. */
void ds__ops_latch(ds_server_t *srv, ds_req_t *r)
{
    bool take = r->op == DS_OP_RLATCH || r->op == DS_OP_WLATCH;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t timeout = take ? ds__rbuf_u32(&rb) : 0;
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 5);
    if (rb.err || n == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed %s: %u keys (allowed 1..%u)",
                      ds__opcode_name(r->op), n, DS_MAX_BATCH);
        return;
    }
    if (take && (timeout == 0 || timeout > srv->cfg.max_read_latch_timeout_ms)) {
        ds__req_error(r, DS_K_INVALID,
                      "latch timeout %u ms is not in 1..%lld (--max_read_latch_timeout_ms)",
                      timeout, (long long)srv->cfg.max_read_latch_timeout_ms);
        return;
    }
    if (r->session == NULL) {
        ds__req_error(r, DS_K_INVALID, "latches need a session");
        return;
    }
    /* In a cluster the latches are held by each key's owner. */
    if (srv->remote && srv->remote->owned && srv->remote->owned(srv, r)) return;
    batch_t *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    b->srv = srv;
    b->r = r;
    b->holder = r->session;
    b->op = r->op;
    b->timeout = timeout;
    b->n = n;
    b->rb = rb;
    ds__wbuf_init(&b->w);
    /* The answer's room at once (a status per key): grown by doubling, it
     * was copied, and its fresh pages touched, within one slice. */
    if (ds__wbuf_reserve(&b->w, 8 + 4 * (size_t)n)) ds__wbuf_reset(&b->w);
    ds__wbuf_cstr(&b->w, "");
    ds__wbuf_u32(&b->w, n);
    if (run_slice(b)) {
        finish(b);
        wake_released(srv);
        return;
    }
    /* More than a slice: the rest in later turns (see above). */
    struct ds_latches *L = srv->latches;
    ds_req_t *d = L ? ds__req_park(r, batch_cancel, b) : NULL;
    if (d == NULL) {
        /* Out of memory to park it: the rest now, at once. */
        while (!run_slice(b)) {
        }
        finish(b);
        wake_released(srv);
        return;
    }
    size_t pos = b->rb.pos;
    ds__rbuf_init(&b->rb, d->meta, d->meta_len);
    b->rb.pos = pos;
    b->r = d;
    if (L->batches_tail)
        L->batches_tail->next = b;
    else
        L->batches = b;
    L->batches_tail = b;
    wake_released(srv);
}
