/* Completions, on the loop: each finished disk job updates the counters
 * and the indexes, publishes what a read brought back, parks a failed
 * write-back for another try, and lets the request waiting on it answer
 * once its last job is back. */
#include "worker/ops/tier_int.h"

#include "common/clock.h"
#include "common/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ds__tier_waiter_cancel(ds_req_t *d, void *ctx)
{
    (void)d;
    (void)ctx; /* the request stays valid; its answer is dropped */
}

static void waiter_done(ds_server_t *srv, waiter_t *w)
{
    if (w->is_get) srv->tier->get_miss = w->first[0] ? w->first : NULL;
    if (w->r) ds__req_unpark(w->r);
    if (w->r && w->resume_ctx)
        w->resume_ctx(srv, w->r, w->ctx); /* it checks whether the client is gone */
    else if (w->r && ds__req_gone(w->r))
        ds__req_drop(w->r);
    else if (w->r && w->is_get)
        w->resume(srv, w->r);
    else if (w->r)
        ds__ops_answer_durable(srv, w->r, w->objs, w->st, w->n, w->nx, w->first);
    srv->tier->get_miss = NULL;
    for (uint32_t i = 0; w->objs && i < w->n; i++)
        if (w->objs[i]) ds__store_unref(srv->store, w->objs[i]);
    free(w->objs);
    free(w->st);
    free(w);
}

/* A probe found another worker's object on the shared directory: it joins
 * the index, and is read like any L2 object for the same waiter. */
static void head_done(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    uint64_t wnow = ds__tier_wall_ms();
    if (j->rc != 0 || (j->meta.ttl_wall_ms && j->meta.ttl_wall_ms <= wnow) ||
        ds__store_lookup(srv->store, j->key, j->keylen, ds__now_ms()) != NULL ||
        ds__tier_ix_find(&t->ix, j->key, j->keylen) != NULL)
        return;
    ds__tier_ix_put(&t->ix, j->key, j->keylen, &j->meta);
    uint32_t ttl = 0;
    if (j->meta.ttl_wall_ms) ttl = (uint32_t)((j->meta.ttl_wall_ms - wnow + 999) / 1000);
    char msg[256];
    ds_obj_t *o = NULL;
    job_t *g = calloc(1, sizeof(*g));
    if (g == NULL || ds__store_reserve(srv->store, j->key, j->keylen, j->meta.size,
                                       (ds_write_mode_t)j->meta.write_mode, ttl, &o, msg,
                                       sizeof(msg)) != DS_K_OK) {
        if (g) DS_LOG_WARN("cannot load '%.64s' from the shared L2: %s", j->key, msg);
        free(g);
        return;
    }
    t->c.fallback_reads++;
    g->kind = JOB_GET;
    g->be = t->l2;
    g->obj = o;
    g->data = ds__store_data(srv->store, o);
    g->w = j->w;
    ds__tier_submit(t, g);
}

/* A failed write-back is tried again while its object is still the key's
 * current value in memory and no later write or delete of the key came:
 * first after RETRY_MIN_MS, the wait doubling up to RETRY_MAX_MS, for as long
 * as the L2 keeps failing (a full or read-only disk that an operator mends).
 * Until then the object stays in memory, unevictable as it was (its copy is
 * not durable). */
#define RETRY_MIN_MS 100u
#define RETRY_MAX_MS 5000u

static bool retry_current(ds_server_t *srv, job_t *j)
{
    ent_t *e = ds__tier_ix_find(&srv->tier->ix, j->obj->key, j->obj->keylen);
    return !atomic_load(&j->superseded) && e && e->put == j && e->version == j->meta.version &&
           ds__store_lookup(srv->store, j->obj->key, j->obj->keylen, ds__now_ms()) == j->obj;
}

static bool park_retry(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    if (atomic_load(&t->stop) || !retry_current(srv, j)) return false;
    uint64_t delay = (uint64_t)RETRY_MIN_MS << (j->attempts < 6 ? j->attempts : 6);
    j->attempts++;
    j->due_ms = ds__now_ms() + (delay < RETRY_MAX_MS ? delay : RETRY_MAX_MS);
    job_t **p = &t->retry;
    while (*p && (*p)->due_ms <= j->due_ms)
        p = &(*p)->next;
    j->next = *p;
    *p = j;
    t->retry_pending++;
    return true;
}

/* A write-back that will not be written (superseded, deleted, expired, or
 * the worker stopping) lets go of its object. */
void ds__tier_drop_put(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    ent_t *e = ds__tier_ix_find(&t->ix, j->obj->key, j->obj->keylen);
    if (e && e->put == j) e->put = NULL;
    if (j->obj->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT) {
        t->evict_writes--;
        t->room_kick = true;
    }
    ds__store_unref(srv->store, j->obj);
    free(j);
}

/* Queues the retries that are due; returns when the next one is (0 none). */
uint64_t ds__tier_retry_due(ds_server_t *srv, uint64_t now)
{
    ds_tier_t *t = srv->tier;
    while (t->retry && t->retry->due_ms <= now) {
        job_t *j = t->retry;
        t->retry = j->next;
        t->retry_pending--;
        if (retry_current(srv, j)) {
            t->c.retries++;
            ds__tier_submit(t, j);
        } else {
            ds__tier_drop_put(srv, j);
        }
    }
    return t->retry ? t->retry->due_ms : 0;
}

static void complete(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    t->depth--;
    const char *key = j->obj ? j->obj->key : j->key;
    uint32_t kl = j->obj ? j->obj->keylen : j->keylen;
    if (j->rc < 0 && j->kind != JOB_HEAD) {
        if (j->spill)
            t->c.spill_errors++;
        else
            t->c.errors++;
        DS_LOG_WARN("%s %s of '%.*s' failed: %s", j->spill ? "spill" : "L2",
                    j->kind == JOB_PUT     ? "write"
                    : j->kind == JOB_GET   ? "read"
                    : j->kind == JOB_RETTL ? "TTL rewrite"
                                           : "delete",
                    (int)(kl > 64 ? 64 : kl), key, j->err);
    } else if (j->rc < 0) { /* a probe: a miss for the reader, named in the log */
        DS_LOG_WARN("L2 probe of '%.*s' failed: %s", (int)(kl > 64 ? 64 : kl), key, j->err);
    }
    switch (j->kind) {
    case JOB_PUT:
        if (!j->spill && j->rc < 0 && j->w == NULL && park_retry(srv, j)) return;
        if (!j->spill) {
            ent_t *e = ds__tier_ix_find(&t->ix, key, kl);
            if (e && e->put == j) e->put = NULL;
            if (j->obj->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT) {
                t->evict_writes--;
                t->room_kick = true; /* its object may be evictable now */
            }
        }
        if (j->spill) {
            ds__spill_put_done(srv, j);
        } else if (j->skipped) {
            t->c.coalesced++;
        } else if (j->rc == 0) {
            t->c.writes++;
            t->c.write_bytes += j->meta.size;
            ds__store_persisted(srv->store, j->obj);
        } else {
            ent_t *e = ds__tier_ix_find(&t->ix, key, kl);
            if (e && e->version == j->meta.version) ds__tier_ix_remove(&t->ix, key, kl);
            if (j->w && j->w->st && j->idx < j->w->n) {
                j->w->st[j->idx] = DS_K_IO_ERROR;
                if (j->w->first[0] == '\0')
                    snprintf(j->w->first, sizeof(j->w->first), "L2 write of '%.*s' failed: %.300s",
                             (int)(kl > 64 ? 64 : kl), key, j->err);
            }
        }
        ds__store_unref(srv->store, j->obj);
        break;
    case JOB_GET: {
        uint64_t now = ds__now_ms();
        if (j->rc == 0) {
            if (j->spill) {
                t->c.spill_reads++;
            } else {
                t->c.reads++;
                t->c.read_bytes += j->meta.size;
            }
            j->obj->l2_persisted =
                !j->spill || (t->l2 && ds__tier_ix_find(&t->ix, key, kl) != NULL);
            /* NX: a value written meanwhile is newer than the copy read. */
            if (ds__store_publish(srv->store, j->obj, DS_EXISTENCE_NX, now) == DS_K_OK)
                ds__subs_publish(&srv->subs, key, kl);
        }
        if (j->spill || (j->rc == 0 && t->spill)) {
            /* back in memory (or superseded, or rejected): a spill copy goes */
            if (ds__tier_ix_find(&t->sx, key, kl)) {
                ds__tier_ix_remove(&t->sx, key, kl);
                ds__tier_submit_del(t, true, key, kl);
            }
        } else if (j->rc != 0) {
            /* gone or rejected (torn, foreign): not served, not tried again;
             * the get learns why (K_NOT_FOUND_IN_L2CACHE, as Yuanrong
             * answers for an object its metadata lists but its L2 lacks) */
            ds__tier_ix_remove(&t->ix, key, kl);
            if (j->w && j->w->first[0] == '\0')
                snprintf(j->w->first, sizeof(j->w->first),
                         "key '%.*s' is listed in the L2 cache but its copy cannot be read: %s",
                         (int)(kl > 64 ? 64 : kl), key, j->rc > 0 ? "no longer there" : j->err);
        }
        ds__store_unref(srv->store, j->obj);
        break;
    }
    case JOB_DEL:
        if (j->rc == 0 && !j->spill) t->c.deletes++;
        if (j->rc < 0 && !j->spill) ds__tier_del_failed(srv, j);
        free(j->key);
        break;
    case JOB_RETTL:
        free(j->key);
        break;
    case JOB_HEAD:
        head_done(srv, j);
        free(j->key);
        break;
    case JOB_NOP:
        break;
    }
    waiter_t *w = j->w;
    free(j);
    if (w && --w->pending == 0) waiter_done(srv, w);
}

void ds__tier_on_done(void *ctx, uint32_t events)
{
    (void)events;
    ds_server_t *srv = ctx;
    ds_tier_t *t = srv->tier;
    uint64_t v;
    ssize_t r = read(t->done_fd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&t->mu);
    job_t *l = t->done;
    t->done = NULL;
    pthread_mutex_unlock(&t->mu);
    /* The list is newest first: complete in submission order. */
    job_t *rev = NULL;
    while (l) {
        job_t *next = l->next;
        l->next = rev;
        rev = l;
        l = next;
    }
    while (rev) {
        job_t *next = rev->next;
        complete(srv, rev);
        rev = next;
    }
    if (t->room_kick) {
        t->room_kick = false;
        if (t->rooms) ds__spill_rooms_resume(srv, 0);
    }
}
