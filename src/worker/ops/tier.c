/* Storage tiers: the L2 index on the loop, the disk I/O thread, and the glue
 * that SET, PUBLISH, GET and DEL call (see tier.h and ../THREADS.md).
 *
 * Write-through: the answer is held until the file is durable; a failed L2
 * write answers K_IO_ERROR with the backend's message (path and errno) and
 * leaves the new value in memory, cached only, as without L2 (it is the
 * key's current version already, and rolling it back would drop the version
 * it replaced from memory too). Nothing acknowledged is lost: the L2 index
 * entry is only dropped if no later write of the key was queued since.
 * Write-back: answered at once; the write waits in the bounded queue, and a
 * WRITE_BACK_L2_CACHE_EVICT object becomes evictable once written. A failed
 * write-back is tried again with a backoff while its value is current.
 * Spill: the same queue and file format in --spill_directory, with its own
 * index; an object leaves memory only once its copy is written and only if
 * it is still current and unpinned, and comes back (its copy deleted) when
 * a GET needs it (spilling itself, and writes waiting for room: spill.c).
 * Both indexes are updated when a job is queued, so the queue's FIFO order
 * keeps every later job consistent with earlier ones. */
#include "worker/ops/tier.h"
#include "worker/ops/tier_int.h"

#include "worker/ops/ops_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool is_l2_mode(uint8_t m)
{
    return m == DS_WRITE_THROUGH_L2_CACHE || m == DS_WRITE_BACK_L2_CACHE ||
           m == DS_WRITE_BACK_L2_CACHE_EVICT;
}

/* ---- the index ---- */

static ent_t **ix_slot(ix_t *t, const char *key, uint32_t keylen, uint32_t h)
{
    ent_t **p = &t->b[h & (t->nb - 1)];
    while (*p &&
           !((*p)->hash == h && (*p)->keylen == keylen && memcmp((*p)->key, key, keylen) == 0))
        p = &(*p)->next;
    return p;
}

static void ix_grow(ix_t *t)
{
    uint64_t nb = t->nb * 2;
    ent_t **b = calloc(nb, sizeof(*b));
    if (b == NULL) return; /* longer chains, still correct */
    for (uint64_t i = 0; i < t->nb; i++)
        for (ent_t *e = t->b[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(t->b);
    t->b = b;
    t->nb = nb;
}

static void ix_remove(ix_t *t, const char *key, uint32_t keylen)
{
    ent_t **p = ix_slot(t, key, keylen, ds__murmur3_32(key, keylen, 0));
    ent_t *e = *p;
    if (e == NULL) return;
    *p = e->next;
    t->count--;
    t->bytes -= e->size;
    t->disk -= ds__tier_disk_of(e->size, e->keylen);
    free(e);
}

/* Adds or replaces; returns the entry's version (0 when out of memory). */
static uint64_t ix_put(ix_t *t, const char *key, uint32_t keylen, const ds_l2_meta_t *m)
{
    ix_remove(t, key, keylen);
    if (t->count >= t->nb) ix_grow(t);
    ent_t *e = malloc(sizeof(*e) + keylen + 1);
    if (e == NULL) return 0;
    e->hash = ds__murmur3_32(key, keylen, 0);
    e->keylen = keylen;
    e->size = m->size;
    e->ttl_wall_ms = m->ttl_wall_ms;
    e->mode = m->write_mode;
    e->version = ++t->version;
    e->put = NULL;
    memcpy(e->key, key, keylen);
    e->key[keylen] = '\0';
    ent_t **p = &t->b[e->hash & (t->nb - 1)];
    e->next = *p;
    *p = e;
    t->count++;
    t->bytes += e->size;
    t->disk += ds__tier_disk_of(e->size, e->keylen);
    return e->version;
}

static ent_t *ix_find(ix_t *t, const char *key, uint32_t keylen)
{
    return *ix_slot(t, key, keylen, ds__murmur3_32(key, keylen, 0));
}

/* ---- the I/O thread ---- */

/* JOB_RETTL: an object only on disk gets a new deadline: read it, write it
 * back with j->meta.ttl_wall_ms (same temporary-file-and-rename write). */
static int run_rettl(job_t *j)
{
    ds_l2_t *l2 = j->be;
    void *buf = malloc(j->meta.size ? j->meta.size : 1);
    if (buf == NULL) {
        snprintf(j->err, sizeof(j->err), "out of memory for %llu bytes",
                 (unsigned long long)j->meta.size);
        return -1;
    }
    ds_l2_meta_t m;
    int rc = l2->ops->get(l2, j->key, j->keylen, buf, j->meta.size, &m, j->err, sizeof(j->err));
    if (rc == 0) {
        m.ttl_wall_ms = j->meta.ttl_wall_ms;
        rc = l2->ops->put(l2, j->key, j->keylen, buf, &m, j->err, sizeof(j->err));
    }
    free(buf);
    return rc;
}

static void run_job(job_t *j)
{
    ds_l2_t *l2 = j->be;
    const char *key = j->obj ? j->obj->key : j->key;
    uint32_t kl = j->obj ? j->obj->keylen : j->keylen;
    j->err[0] = '\0';
    switch (j->kind) {
    case JOB_PUT:
        if (atomic_load(&j->superseded)) { /* a newer value of the key follows */
            j->skipped = true;
            j->rc = 0;
            break;
        }
        j->rc = l2->ops->put(l2, key, kl, j->data, &j->meta, j->err, sizeof(j->err));
        break;
    case JOB_GET:
        j->rc = l2->ops->get(l2, key, kl, j->data, j->obj->size, &j->meta, j->err, sizeof(j->err));
        break;
    case JOB_DEL:
        j->rc = l2->ops->del(l2, key, kl, j->err, sizeof(j->err));
        break;
    case JOB_NOP: /* marks a point in the queue: everything before it is done */
        j->rc = 0;
        break;
    case JOB_RETTL:
        j->rc = run_rettl(j);
        break;
    case JOB_HEAD: /* sfs: the header only (see l2.h) */
        j->rc = l2->ops->get(l2, key, kl, NULL, 0, &j->meta, j->err, sizeof(j->err));
        break;
    }
}

/* Hands finished jobs (a list, in order) back to the loop. */
static void post_done(ds_tier_t *t, job_t *l)
{
    pthread_mutex_lock(&t->mu);
    while (l) {
        job_t *next = l->next;
        l->next = t->done;
        t->done = l;
        l = next;
    }
    pthread_mutex_unlock(&t->mu);
    uint64_t one = 1;
    ssize_t w = write(t->done_fd, &one, sizeof(one));
    (void)w;
}

/* Takes jobs in order until told to stop with nothing left: a clean stop
 * flushes the write-back queue. A write or delete the L2 answers with
 * DS_L2_PENDING (group commit) is held until a sync covers it (every held
 * job is the L2's, in queue order): the backend syncs when its batch is due,
 * or at once when the queue is empty. Other jobs are handed back as they
 * finish, ahead of held ones. With nothing queued or held, the L2 does its
 * upkeep (compaction), a bounded step at a time so that a job waits for one
 * step at most, unless the worker is stopping. */
static void *io_thread(void *arg)
{
    ds_tier_t *t = arg;
    job_t *held = NULL, **held_tail = &held;
    char err[sizeof(held->err)];
    bool upkeep = false; /* the L2's upkeep has another step to do */
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->todo == NULL && !atomic_load(&t->stop) && !upkeep)
            pthread_cond_wait(&t->cv, &t->mu);
        job_t *j = t->todo;
        if (j) {
            t->todo = j->next;
            if (t->todo == NULL) t->todo_tail = NULL;
        }
        bool idle = t->todo == NULL;
        pthread_mutex_unlock(&t->mu);
        if (j == NULL && atomic_load(&t->stop)) break;
        if (j == NULL) { /* nothing queued: the next step of the upkeep */
            upkeep = held == NULL && t->l2->ops->maintain(t->l2);
            continue;
        }
        run_job(j);
        j->next = NULL;
        if (j->rc == DS_L2_PENDING) {
            *held_tail = j;
            held_tail = &j->next;
        } else {
            post_done(t, j);
        }
        if (held) {
            err[0] = '\0';
            int s = t->l2->ops->sync(t->l2, idle, err, sizeof(err));
            if (s != 0) {
                for (job_t *h = held; h; h = h->next) {
                    h->rc = s > 0 ? 0 : -1;
                    if (s < 0) snprintf(h->err, sizeof(h->err), "%s", err);
                }
                post_done(t, held);
                held = NULL;
                held_tail = &held;
            }
        }
        if (idle && held == NULL && !atomic_load(&t->stop) && t->l2 && t->l2->ops->maintain)
            upkeep = t->l2->ops->maintain(t->l2);
    }
    return NULL;
}

/* Jobs are collected on the loop and handed to the thread in one go at
 * the end of the loop's turn (submit_flush, from ds__tier_tick), after the
 * turn's answers went out: a write-back SET does not pay for waking the
 * thread, and a batch of jobs costs one lock and one wake. */
static void submit(ds_tier_t *t, job_t *j)
{
    t->depth++;
    if (j->w) j->w->pending++;
    j->next = NULL;
    if (t->pend_tail)
        t->pend_tail->next = j;
    else
        t->pend = j;
    t->pend_tail = j;
}

static void submit_flush(ds_tier_t *t)
{
    if (t->pend == NULL) return;
    pthread_mutex_lock(&t->mu);
    if (t->todo_tail)
        t->todo_tail->next = t->pend;
    else
        t->todo = t->pend;
    t->todo_tail = t->pend_tail;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    t->pend = t->pend_tail = NULL;
}

/* Queues the deletion of key's file in a backend (no index change); the
 * job, or NULL when out of memory. */
static job_t *submit_del(ds_tier_t *t, bool spill, const char *key, uint32_t keylen)
{
    job_t *j = calloc(1, sizeof(*j));
    char *k = malloc(keylen + 1);
    if (j == NULL || k == NULL) {
        free(j);
        free(k);
        t->c.errors++;
        DS_LOG_ERROR("out of memory queueing the deletion of '%.*s'",
                     (int)(keylen > 64 ? 64 : keylen), key);
        return NULL;
    }
    memcpy(k, key, keylen);
    k[keylen] = '\0';
    j->kind = JOB_DEL;
    j->be = spill ? t->spill : t->l2;
    j->spill = spill;
    j->key = k;
    j->keylen = keylen;
    submit(t, j);
    return j;
}

/* The waiter of the request being handled: its answer waits for every job
 * that joins it (ds__tier_hold_answer). NULL on out of memory. */
static waiter_t *open_waiter(ds_tier_t *t)
{
    if (t->open == NULL) t->open = calloc(1, sizeof(*t->open));
    return t->open;
}

/* Queues the deletion of key's L2 copy for key idx of the request being
 * handled, whose answer waits for it; e: the index entry being removed,
 * restored if the delete fails (restore), else only reported. Without
 * memory to wait, the delete is queued unwatched. */
static void del_waited(ds_tier_t *t, const char *key, uint32_t keylen, uint32_t idx, const ent_t *e,
                       bool restore)
{
    waiter_t *w = idx == DS_TIER_UNWATCHED ? NULL : open_waiter(t);
    job_t *j = submit_del(t, false, key, keylen);
    if (w == NULL || j == NULL) return;
    j->w = w;
    w->pending++;
    j->idx = idx;
    j->restore = restore;
    j->meta.size = e->size;
    j->meta.write_mode = e->mode;
    j->meta.ttl_wall_ms = e->ttl_wall_ms;
}

/* A watched L2 delete failed: the request learns it, and a DEL's key keeps
 * its copy in the index unless a newer value came meanwhile. */
static void del_failed(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    waiter_t *w = j->w;
    if (w && w->st && j->idx < w->n) {
        w->st[j->idx] = DS_K_IO_ERROR;
        if (w->first[0] == '\0')
            snprintf(w->first, sizeof(w->first), "L2 delete of '%.*s' failed: %.300s",
                     (int)(j->keylen > 64 ? 64 : j->keylen), j->key, j->err);
    }
    if (j->restore && ix_find(&t->ix, j->key, j->keylen) == NULL &&
        ds__store_lookup(srv->store, j->key, j->keylen, ds__now_ms()) == NULL)
        ix_put(&t->ix, j->key, j->keylen, &j->meta);
}

/* ---- completions, on the loop ---- */

static void waiter_cancel(ds_req_t *d, void *ctx)
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
    uint64_t wnow = wall_ms();
    if (j->rc != 0 || (j->meta.ttl_wall_ms && j->meta.ttl_wall_ms <= wnow) ||
        ds__store_lookup(srv->store, j->key, j->keylen, ds__now_ms()) != NULL ||
        ix_find(&t->ix, j->key, j->keylen) != NULL)
        return;
    ix_put(&t->ix, j->key, j->keylen, &j->meta);
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
    submit(t, g);
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
    ent_t *e = ix_find(&srv->tier->ix, j->obj->key, j->obj->keylen);
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
static void drop_put(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    ent_t *e = ix_find(&t->ix, j->obj->key, j->obj->keylen);
    if (e && e->put == j) e->put = NULL;
    if (j->obj->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT) {
        t->evict_writes--;
        t->room_kick = true;
    }
    ds__store_unref(srv->store, j->obj);
    free(j);
}

/* Queues the retries that are due; returns when the next one is (0 none). */
static uint64_t retry_due(ds_server_t *srv, uint64_t now)
{
    ds_tier_t *t = srv->tier;
    while (t->retry && t->retry->due_ms <= now) {
        job_t *j = t->retry;
        t->retry = j->next;
        t->retry_pending--;
        if (retry_current(srv, j)) {
            t->c.retries++;
            submit(t, j);
        } else {
            drop_put(srv, j);
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
            ent_t *e = ix_find(&t->ix, key, kl);
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
            ent_t *e = ix_find(&t->ix, key, kl);
            if (e && e->version == j->meta.version) ix_remove(&t->ix, key, kl);
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
            j->obj->l2_persisted = !j->spill || (t->l2 && ix_find(&t->ix, key, kl) != NULL);
            /* NX: a value written meanwhile is newer than the copy read. */
            if (ds__store_publish(srv->store, j->obj, DS_EXISTENCE_NX, now) == DS_K_OK)
                ds__subs_publish(&srv->subs, key, kl);
        }
        if (j->spill || (j->rc == 0 && t->spill)) {
            /* back in memory (or superseded, or rejected): a spill copy goes */
            if (ix_find(&t->sx, key, kl)) {
                ix_remove(&t->sx, key, kl);
                submit_del(t, true, key, kl);
            }
        } else if (j->rc != 0) {
            /* gone or rejected (torn, foreign): not served, not tried again;
             * the get learns why (K_NOT_FOUND_IN_L2CACHE, as Yuanrong
             * answers for an object its metadata lists but its L2 lacks) */
            ix_remove(&t->ix, key, kl);
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
        if (j->rc < 0 && !j->spill) del_failed(srv, j);
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

static void on_done(void *ctx, uint32_t events)
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

/* ---- start and stop ---- */

static void index_one(void *ctx, const char *key, size_t keylen, const ds_l2_meta_t *m)
{
    ix_put(ctx, key, (uint32_t)keylen, m);
}

static bool ix_init(ix_t *x)
{
    x->nb = 1024;
    x->b = calloc(x->nb, sizeof(*x->b));
    return x->b != NULL;
}

static void ix_free(ix_t *x)
{
    for (uint64_t i = 0; x->b && i < x->nb; i++)
        for (ent_t *e = x->b[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    free(x->b);
}

int ds__tier_init(ds_server_t *srv, char *err, size_t cap)
{
    const ds_worker_config_t *cfg = &srv->cfg;
    bool l2 = strcmp(cfg->l2_cache_type, "none") != 0 && cfg->l2_cache_type[0] != '\0';
    bool spill = cfg->spill_directory[0] != '\0';
    if (!l2 && !spill) return 0;
    bool dd = l2 && strcmp(cfg->l2_cache_type, "distributed_disk") == 0;
    if (l2 && !dd && strcmp(cfg->l2_cache_type, "sfs") != 0) {
        snprintf(err, cap,
                 "--l2_cache_type '%s' is not supported here (none, sfs or distributed_disk)",
                 cfg->l2_cache_type);
        return -1;
    }
    ds_tier_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    srv->tier = t;
    t->done_fd = -1;
    t->cap = (uint64_t)cfg->l2_cache_async_write_queue_size;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (!ix_init(&t->ix) || !ix_init(&t->sx)) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    if (l2) {
        uint64_t t0 = ds__now_ms();
        ds_l2_dd_opts_t o = {(uint64_t)cfg->distributed_disk_sync_interval_ms,
                             (uint64_t)cfg->distributed_disk_sync_batch_bytes,
                             (uint64_t)cfg->distributed_disk_compact_min_dead_mb << 20,
                             (uint32_t)cfg->distributed_disk_compact_dead_percent, 0};
        t->l2 = dd ? ds__l2_dd_open(cfg->distributed_disk_path, cfg->cluster_name,
                                    cfg->worker_address, &o, err, cap)
                   : ds__l2_sfs_open(cfg->sfs_path, err, cap);
        if (t->l2 == NULL) return -1;
        int64_t n = t->l2->ops->scan(t->l2, wall_ms(), index_one, &t->ix, err, cap);
        if (n < 0) return -1;
        DS_LOG_INFO("L2 cache %s at %s: %lld objects (%llu bytes) indexed in %llu ms",
                    t->l2->ops->name, t->l2->path, (long long)n, (unsigned long long)t->ix.bytes,
                    (unsigned long long)(ds__now_ms() - t0));
    }
    if (spill && ds__spill_open(srv, err, cap) != 0) return -1;
    t->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->done_fd < 0 ||
        ds__loop_add(srv->net.loop, &t->done_io, t->done_fd, EPOLLIN, on_done, srv) != 0) {
        snprintf(err, cap, "cannot set up the disk completion eventfd: %s", strerror(errno));
        return -1;
    }
    if (pthread_create(&t->thread, NULL, io_thread, t) != 0) {
        snprintf(err, cap, "cannot start the disk I/O thread");
        return -1;
    }
    t->started = true;
    return 0;
}

void ds__tier_destroy(ds_server_t *srv)
{
    ds_tier_t *t = srv->tier;
    if (t == NULL) return;
    if (t->started) {
        submit_flush(t);
        atomic_store(&t->stop, true);
        pthread_mutex_lock(&t->mu);
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
        on_done(srv, 0);
        if (t->retry_pending)
            DS_LOG_WARN("stopping with %llu write-backs still failing: those values are not in "
                        "the L2 cache",
                        (unsigned long long)t->retry_pending);
        while (t->retry) {
            job_t *j = t->retry;
            t->retry = j->next;
            drop_put(srv, j);
        }
        /* what those completions queued (deletions of spill copies) is
         * dropped: the spill directory is emptied at the next start */
        while (t->pend) {
            job_t *j = t->pend;
            t->pend = j->next;
            if (j->obj) ds__store_unref(srv->store, j->obj);
            free(j->key);
            free(j);
        }
    }
    ds__spill_rooms_drop(srv);
    if (t->done_fd >= 0) {
        if (t->started) ds__loop_del(srv->net.loop, &t->done_io);
        close(t->done_fd);
    }
    ix_free(&t->ix);
    ix_free(&t->sx);
    if (t->l2) t->l2->ops->destroy(t->l2);
    if (t->spill) t->spill->ops->destroy(t->spill);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    srv->tier = NULL;
}

/* ---- entry points ---- */

/* The entry for key in x, if live; an expired one is forgotten, its file
 * deleted. */
static ent_t *live_in(ds_tier_t *t, ix_t *x, bool spill, const char *key, uint32_t keylen)
{
    ent_t *e = ix_find(x, key, keylen);
    if (e && e->ttl_wall_ms && e->ttl_wall_ms <= wall_ms()) {
        ix_remove(x, key, keylen);
        submit_del(t, spill, key, keylen);
        return NULL;
    }
    return e;
}

const char *ds__tier_get_miss(ds_server_t *srv)
{
    return srv->tier ? srv->tier->get_miss : NULL;
}

bool ds__tier_has(ds_server_t *srv, const char *key, uint32_t keylen)
{
    ds_tier_t *t = srv->tier;
    return (t->l2 && live_in(t, &t->ix, false, key, keylen)) ||
           (t->spill && live_in(t, &t->sx, true, key, keylen));
}

ds_status_t ds__tier_admit(ds_server_t *srv, const ds_obj_t *o, bool nx, char *msg, size_t cap)
{
    ds_tier_t *t = srv->tier;
    if (nx && ds__tier_has(srv, o->key, o->keylen) &&
        ds__store_lookup(srv->store, o->key, o->keylen, ds__now_ms()) == NULL)
        return DS_K_OC_KEY_ALREADY_EXIST;
    if (t->l2 && is_l2_mode(o->write_mode) && t->depth >= t->cap) {
        t->c.queue_full++;
        snprintf(msg, cap,
                 "L2 write queue full (%llu of --l2_cache_async_write_queue_size %llu) for key "
                 "'%.*s'",
                 (unsigned long long)t->depth, (unsigned long long)t->cap,
                 (int)(o->keylen > 64 ? 64 : o->keylen), o->key);
        return DS_K_WRITE_BACK_QUEUE_FULL;
    }
    return DS_K_OK;
}

void ds__tier_del(ds_server_t *srv, const char *key, uint32_t keylen, uint32_t idx)
{
    ds_tier_t *t = srv->tier;
    ent_t *e = ix_find(&t->ix, key, keylen);
    if (e) {
        del_waited(t, key, keylen, idx, e, true);
        ix_remove(&t->ix, key, keylen);
    }
    if (ix_find(&t->sx, key, keylen)) {
        ix_remove(&t->sx, key, keylen);
        submit_del(t, true, key, keylen);
    }
}

static uint64_t wall_deadline(const ds_obj_t *o)
{
    if (o->ttl_deadline_ms == 0) return 0;
    uint64_t now = ds__now_ms();
    return wall_ms() + (o->ttl_deadline_ms > now ? o->ttl_deadline_ms - now : 0);
}

/* Queues o's copy to the L2 (a write-through one joins the open waiter) or
 * to the spill directory. false when out of memory. */
static bool queue_put(ds_server_t *srv, ds_obj_t *o, uint32_t idx, bool wait, bool spill)
{
    ds_tier_t *t = srv->tier;
    job_t *j = calloc(1, sizeof(*j));
    waiter_t *w = j && wait ? open_waiter(t) : NULL;
    if (j == NULL || (wait && w == NULL)) {
        free(j);
        t->c.errors++;
        DS_LOG_ERROR("out of memory queueing the %s write of '%s'", spill ? "spill" : "L2", o->key);
        return false;
    }
    j->kind = JOB_PUT;
    j->be = spill ? t->spill : t->l2;
    j->spill = spill;
    j->obj = o;
    ds__store_ref(o);
    j->data = ds__store_data(srv->store, o);
    j->idx = idx;
    j->w = w;
    j->meta.size = o->size;
    j->meta.write_mode = o->write_mode;
    j->meta.ttl_wall_ms = wall_deadline(o);
    ix_t *x = spill ? &t->sx : &t->ix;
    /* Write-back coalescing: an older write-back of the key still queued is
     * skipped by the thread (this newer write follows it in the queue). */
    ent_t *old = spill ? NULL : ix_find(x, o->key, o->keylen);
    if (old && old->put) atomic_store(&old->put->superseded, true);
    j->meta.version = ix_put(x, o->key, o->keylen, &j->meta);
    if (!spill && o->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT) t->evict_writes++;
    ent_t *e = (!spill && !wait) ? ix_find(x, o->key, o->keylen) : NULL;
    if (e) e->put = j;
    submit(t, j);
    return true;
}

/* For spill.c (tier_int.h). */
ent_t *ds__tier_ix_find(ix_t *x, const char *key, uint32_t keylen)
{
    return ix_find(x, key, keylen);
}

void ds__tier_ix_remove(ix_t *x, const char *key, uint32_t keylen)
{
    ix_remove(x, key, keylen);
}

void ds__tier_submit_del(ds_tier_t *t, bool spill, const char *key, uint32_t keylen)
{
    submit_del(t, spill, key, keylen);
}

bool ds__tier_queue_put(ds_server_t *srv, ds_obj_t *o, bool spill)
{
    return queue_put(srv, o, 0, false, spill);
}

uint64_t ds__tier_tick(ds_server_t *srv, uint64_t now, bool spill, uint64_t low)
{
    ds_tier_t *t = srv->tier;
    if (spill) ds__spill_round(srv, low, 0);
    uint64_t next = t->rooms ? ds__spill_rooms_resume(srv, now) : 0; /* past their deadline */
    uint64_t retry = t->retry ? retry_due(srv, now) : 0;
    if (retry && (next == 0 || retry < next)) next = retry;
    submit_flush(t);
    return next;
}

void ds__tier_published(ds_server_t *srv, ds_obj_t *o, uint32_t idx)
{
    ds_tier_t *t = srv->tier;
    if (t->spill && ix_find(&t->sx, o->key, o->keylen)) {
        /* an older version's spill copy */
        ix_remove(&t->sx, o->key, o->keylen);
        submit_del(t, true, o->key, o->keylen);
    }
    if (t->l2) {
        if (!is_l2_mode(o->write_mode)) {
            ent_t *e = ix_find(&t->ix, o->key, o->keylen);
            if (e) { /* a cache-only overwrite: its answer says if the old copy stays */
                del_waited(t, o->key, o->keylen, idx, e, false);
                ix_remove(&t->ix, o->key, o->keylen);
            }
        } else {
            queue_put(srv, o, idx, o->write_mode == DS_WRITE_THROUGH_L2_CACHE, false);
        }
    }
}

/* A job of kind on the L2 for a key it copies (no object): TTL rewrites
 * and probes. NULL on out of memory. */
static job_t *key_job(ds_tier_t *t, job_kind_t kind, const char *key, uint32_t keylen)
{
    job_t *j = calloc(1, sizeof(*j));
    char *k = malloc(keylen + 1);
    if (j == NULL || k == NULL) {
        free(j);
        free(k);
        return NULL;
    }
    memcpy(k, key, keylen);
    k[keylen] = '\0';
    j->kind = kind;
    j->be = t->l2;
    j->key = k;
    j->keylen = keylen;
    return j;
}

ds_status_t ds__tier_expire_key(ds_server_t *srv, const char *key, uint32_t keylen, uint32_t ttl)
{
    ds_tier_t *t = srv->tier;
    uint64_t deadline = ttl ? wall_ms() + (uint64_t)ttl * 1000u : 0;
    ent_t *e = t->spill ? live_in(t, &t->sx, true, key, keylen) : NULL;
    /* The spill directory is emptied at start: its index alone counts. */
    if (e) e->ttl_wall_ms = deadline;
    ent_t *l = t->l2 ? live_in(t, &t->ix, false, key, keylen) : NULL;
    if (l == NULL) return e ? DS_K_OK : DS_K_NOT_FOUND;
    l->ttl_wall_ms = deadline;
    job_t *j = key_job(t, JOB_RETTL, key, keylen);
    if (j == NULL) return DS_K_OUT_OF_MEMORY;
    j->meta.size = l->size;
    j->meta.ttl_wall_ms = deadline;
    submit(t, j); /* rewritten like a write-back: the answer does not wait */
    return DS_K_OK;
}

void ds__tier_expire(ds_server_t *srv, ds_obj_t *o)
{
    ds_tier_t *t = srv->tier;
    /* Rewritten like a write-back: the EXPIRE answer does not wait for it. */
    if (o && t->l2 && is_l2_mode(o->write_mode) && ix_find(&t->ix, o->key, o->keylen) != NULL)
        queue_put(srv, o, 0, false, false);
}

bool ds__tier_hold_answer(ds_server_t *srv, ds_req_t *r, ds_obj_t **published, const uint32_t *st,
                          uint32_t n, bool nx, const char *first_err)
{
    ds_tier_t *t = srv->tier;
    waiter_t *w = t->open;
    if (w == NULL) return false;
    t->open = NULL;
    w->st = malloc((n ? n : 1) * sizeof(*w->st));
    w->objs = published ? calloc(n ? n : 1, sizeof(*w->objs)) : NULL;
    ds_req_t *d =
        w->st == NULL || (published && w->objs == NULL) ? NULL : ds__req_park(r, waiter_cancel, w);
    if (d == NULL) {
        /* No memory to wait: the writes go on, the answer goes now. */
        free(w->st);
        free(w->objs);
        w->st = NULL;
        w->objs = NULL;
        return false;
    }
    memcpy(w->st, st, n * sizeof(*st));
    for (uint32_t i = 0; published && i < n; i++)
        if ((w->objs[i] = published[i]) != NULL) ds__store_ref(published[i]);
    w->nx = nx;
    w->n = n;
    snprintf(w->first, sizeof(w->first), "%s", first_err ? first_err : "");
    w->r = d;
    return true;
}

void ds__tier_no_answer(ds_server_t *srv)
{
    srv->tier->open = NULL; /* its jobs still hold it; it frees itself */
}

static const char *job_key(const job_t *j, uint32_t *len)
{
    *len = j->obj ? j->obj->keylen : j->keylen;
    return j->obj ? j->obj->key : j->key;
}

static bool tier_get(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                     uint32_t n, void (*resume)(ds_server_t *srv, ds_req_t *d),
                     void (*retry)(ds_server_t *srv, ds_req_t *d), bool probe,
                     void (*resume_ctx)(ds_server_t *srv, ds_req_t *d, void *ctx), void *ctx)
{
    ds_tier_t *t = srv->tier;
    uint64_t now = ds__now_ms();
    waiter_t *w = NULL;
    job_t *jobs = NULL;
    bool again = false;     /* retry once the spills queued for room are done */
    char no_room[600] = ""; /* a key on disk that found no room in the arena */
    uint32_t in_memory = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (t->depth >= t->cap) break;
        if (ds__store_lookup(srv->store, keys[i], lens[i], now) != NULL) {
            in_memory++;
            continue;
        }
        bool spill = false;
        ent_t *e = t->l2 ? live_in(t, &t->ix, false, keys[i], lens[i]) : NULL;
        if (e == NULL && t->spill) {
            e = live_in(t, &t->sx, true, keys[i], lens[i]);
            spill = true;
        }
        bool dup = false;
        for (job_t *j = jobs; j && !dup; j = j->next) {
            uint32_t jl;
            const char *jk = job_key(j, &jl);
            dup = jl == lens[i] && memcmp(jk, keys[i], lens[i]) == 0;
        }
        if (dup) continue;
        if (e == NULL && probe && t->l2) {
            if (w == NULL) w = calloc(1, sizeof(*w));
            job_t *j = w ? key_job(t, JOB_HEAD, keys[i], lens[i]) : NULL;
            if (j == NULL) break;
            j->next = jobs;
            jobs = j;
            continue;
        }
        if (e == NULL) continue;
        uint32_t ttl = 0;
        if (e->ttl_wall_ms) {
            uint64_t wnow = wall_ms();
            uint64_t left = e->ttl_wall_ms > wnow ? e->ttl_wall_ms - wnow : 1;
            ttl = (uint32_t)((left + 999) / 1000);
        }
        char msg[256];
        ds_obj_t *o = NULL;
        ds_status_t rs = ds__store_reserve(srv->store, keys[i], lens[i], e->size,
                                           (ds_write_mode_t)e->mode, ttl, &o, msg, sizeof(msg));
        if (rs == DS_K_OUT_OF_MEMORY && retry && t->spill) {
            ds__spill_round(srv, ds__spill_arena_low(srv), e->size);
            if (t->spill_inflight > 0) {
                again = true;
                continue;
            }
        }
        if (rs != DS_K_OK) {
            ds__req_log(r, DS_LOG_WARN, "cannot bring '%.*s' back from %s: %s",
                        (int)(lens[i] > 64 ? 64 : lens[i]), keys[i], spill ? "spill" : "L2", msg);
            if (no_room[0] == '\0')
                snprintf(no_room, sizeof(no_room), "cannot bring '%.*s' back from %s: %s",
                         (int)(lens[i] > 64 ? 64 : lens[i]), keys[i], spill ? "spill" : "L2", msg);
            continue;
        }
        if (w == NULL) w = calloc(1, sizeof(*w));
        job_t *j = w ? calloc(1, sizeof(*j)) : NULL;
        if (j == NULL) {
            ds__store_unref(srv->store, o);
            break;
        }
        j->kind = JOB_GET;
        j->be = spill ? t->spill : t->l2;
        j->spill = spill;
        j->obj = o;
        j->data = ds__store_data(srv->store, o);
        j->next = jobs;
        jobs = j;
    }
    if (no_room[0] && jobs == NULL && !again && in_memory == 0 && resume_ctx == NULL) {
        /* nothing else to answer with: the key is there, the room is not */
        free(w);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "%s", no_room);
        return true;
    }
    if (again && jobs == NULL) {
        /* nothing to load yet: wait for the spills, then try again */
        if (w == NULL) w = calloc(1, sizeof(*w));
        jobs = w ? calloc(1, sizeof(*jobs)) : NULL;
        if (jobs) jobs->kind = JOB_NOP;
    }
    ds_req_t *d = NULL;
    if (jobs) {
        w->is_get = true;
        w->resume = again ? retry : resume;
        w->resume_ctx = resume_ctx;
        w->ctx = ctx;
        d = ds__req_park(r, waiter_cancel, w);
    }
    if (d == NULL) {
        while (jobs) {
            job_t *next = jobs->next;
            if (jobs->obj) ds__store_unref(srv->store, jobs->obj);
            free(jobs->key);
            free(jobs);
            jobs = next;
        }
        free(w);
        return false;
    }
    w->r = d;
    while (jobs) {
        job_t *next = jobs->next;
        jobs->w = w;
        submit(t, jobs);
        jobs = next;
    }
    return true;
}

bool ds__tier_get(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                  uint32_t n, void (*resume)(ds_server_t *srv, ds_req_t *d),
                  void (*retry)(ds_server_t *srv, ds_req_t *d))
{
    return tier_get(srv, r, keys, lens, n, resume, retry, false, NULL, NULL);
}

bool ds__tier_get_ctx(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                      uint32_t n, void (*done)(ds_server_t *srv, ds_req_t *d, void *ctx), void *ctx)
{
    ds_tier_t *t = srv->tier;
    /* Another worker's objects on a shared sfs directory are found by
     * probing for the key (no index entry: this worker did not write them,
     * or wrote them after its scan). */
    bool probe = srv->cfg.enable_l2_cache_fallback && t->l2 && strcmp(t->l2->ops->name, "sfs") == 0;
    return tier_get(srv, r, keys, lens, n, NULL, NULL, probe, done, ctx);
}

bool ds__tier_counters(ds_server_t *srv, ds_tier_counters_t *out)
{
    ds_tier_t *t = srv->tier;
    if (t == NULL) return false;
    *out = t->c;
    out->l2_on = t->l2 != NULL;
    out->spill_on = t->spill != NULL;
    out->objects = t->ix.count;
    out->bytes = t->ix.bytes;
    out->spill_objects = t->sx.count;
    out->spill_bytes = t->sx.bytes;
    out->spill_disk = t->sx.disk;
    out->spill_limit = t->spill_limit;
    out->queue_depth = t->depth;
    out->queue_cap = t->cap;
    out->retry_pending = t->retry_pending;
    if (t->l2) {
        ds_l2_figures_t *f = &t->l2->fig;
        out->fsyncs = atomic_load_explicit(&f->fsyncs, memory_order_relaxed);
        out->file_bytes = atomic_load_explicit(&f->file_bytes, memory_order_relaxed);
        out->dead_bytes = atomic_load_explicit(&f->dead_bytes, memory_order_relaxed);
        out->compactions = atomic_load_explicit(&f->compactions, memory_order_relaxed);
        out->torn_bytes = atomic_load_explicit(&f->torn_bytes, memory_order_relaxed);
        out->damaged_bytes = atomic_load_explicit(&f->damaged_bytes, memory_order_relaxed);
    }
    return true;
}

void ds__tier_stats(ds_server_t *srv, cJSON *root)
{
    ds_tier_counters_t c;
    if (!ds__tier_counters(srv, &c)) return;
    ds_tier_t *t = srv->tier;
    cJSON *l2 = t->l2 ? cJSON_AddObjectToObject(root, "l2") : NULL;
    if (l2) {
        cJSON_AddStringToObject(l2, "type", t->l2->ops->name);
        cJSON_AddStringToObject(l2, "path", t->l2->path);
        cJSON_AddNumberToObject(l2, "objects", (double)c.objects);
        cJSON_AddNumberToObject(l2, "bytes", (double)c.bytes);
        cJSON_AddNumberToObject(l2, "reads", (double)c.reads);
        cJSON_AddNumberToObject(l2, "read_bytes", (double)c.read_bytes);
        cJSON_AddNumberToObject(l2, "writes", (double)c.writes);
        cJSON_AddNumberToObject(l2, "write_bytes", (double)c.write_bytes);
        cJSON_AddNumberToObject(l2, "deletes", (double)c.deletes);
        cJSON_AddNumberToObject(l2, "errors", (double)c.errors);
        cJSON_AddNumberToObject(l2, "queue_depth", (double)c.queue_depth);
        cJSON_AddNumberToObject(l2, "queue_cap", (double)c.queue_cap);
        cJSON_AddNumberToObject(l2, "queue_full", (double)c.queue_full);
        cJSON_AddNumberToObject(l2, "fallback_reads", (double)c.fallback_reads);
        cJSON_AddNumberToObject(l2, "coalesced", (double)c.coalesced);
        cJSON_AddNumberToObject(l2, "retries", (double)c.retries);
        cJSON_AddNumberToObject(l2, "retry_pending", (double)c.retry_pending);
        /* writes that found the arena full and waited (for spills or for
         * write-backs that make WRITE_BACK_L2_CACHE_EVICT objects evictable) */
        cJSON_AddNumberToObject(l2, "room_waits", (double)c.spill_waits);
        cJSON_AddNumberToObject(l2, "fsyncs", (double)c.fsyncs);
        cJSON_AddNumberToObject(l2, "file_bytes", (double)c.file_bytes);
        cJSON_AddNumberToObject(l2, "dead_bytes", (double)c.dead_bytes);
        cJSON_AddNumberToObject(l2, "compactions", (double)c.compactions);
        cJSON_AddNumberToObject(l2, "torn_bytes", (double)c.torn_bytes);
        cJSON_AddNumberToObject(l2, "damaged_bytes", (double)c.damaged_bytes);
    }
    cJSON *sp = t->spill ? cJSON_AddObjectToObject(root, "spill") : NULL;
    if (sp) {
        cJSON_AddStringToObject(sp, "path", t->spill->path);
        cJSON_AddNumberToObject(sp, "objects", (double)c.spill_objects);
        cJSON_AddNumberToObject(sp, "bytes", (double)c.spill_bytes);
        cJSON_AddNumberToObject(sp, "disk_bytes", (double)c.spill_disk);
        cJSON_AddNumberToObject(sp, "limit_bytes", (double)c.spill_limit);
        cJSON_AddNumberToObject(sp, "writes", (double)c.spill_writes);
        cJSON_AddNumberToObject(sp, "reads", (double)c.spill_reads);
        cJSON_AddNumberToObject(sp, "errors", (double)c.spill_errors);
        cJSON_AddNumberToObject(sp, "rounds", (double)c.spill_rounds);
        cJSON_AddNumberToObject(sp, "waits", (double)c.spill_waits);
        cJSON_AddNumberToObject(sp, "paused", t->spill_paused ? 1 : 0);
        cJSON_AddNumberToObject(sp, "queue_depth", (double)c.queue_depth);
    }
}
