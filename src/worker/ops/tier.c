/* Storage tiers: starting and stopping them, and the glue that SET, PUBLISH,
 * GET and DEL call (see tier.h and ../THREADS.md). The indexes are in
 * tier_index.c, the disk queue and its thread in tier_io.c, completions in
 * tier_done.c, spilling in spill.c.
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
#include "common/log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- start and stop ---- */

static void index_one(void *ctx, const char *key, size_t keylen, const ds_l2_meta_t *m)
{
    ds__tier_ix_put(ctx, key, (uint32_t)keylen, m);
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
    if (!ds__tier_ix_init(&t->ix) || !ds__tier_ix_init(&t->sx)) {
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
        int64_t n = t->l2->ops->scan(t->l2, ds__tier_wall_ms(), index_one, &t->ix, err, cap);
        if (n < 0) return -1;
        DS_LOG_INFO("L2 cache %s at %s: %lld objects (%llu bytes) indexed in %llu ms",
                    t->l2->ops->name, t->l2->path, (long long)n, (unsigned long long)t->ix.bytes,
                    (unsigned long long)(ds__now_ms() - t0));
    }
    if (spill && ds__spill_open(srv, err, cap) != 0) return -1;
    t->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->done_fd < 0 ||
        ds__loop_add(srv->net.loop, &t->done_io, t->done_fd, EPOLLIN, ds__tier_on_done, srv) != 0) {
        snprintf(err, cap, "cannot set up the disk completion eventfd: %s", strerror(errno));
        return -1;
    }
    if (pthread_create(&t->thread, NULL, ds__tier_io_thread, t) != 0) {
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
        ds__tier_submit_flush(t);
        atomic_store(&t->stop, true);
        pthread_mutex_lock(&t->mu);
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
        ds__tier_on_done(srv, 0);
        if (t->retry_pending)
            DS_LOG_WARN("stopping with %llu write-backs still failing: those values are not in "
                        "the L2 cache",
                        (unsigned long long)t->retry_pending);
        while (t->retry) {
            job_t *j = t->retry;
            t->retry = j->next;
            ds__tier_drop_put(srv, j);
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
    ds__tier_ix_free(&t->ix);
    ds__tier_ix_free(&t->sx);
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
    ent_t *e = ds__tier_ix_find(x, key, keylen);
    if (e && e->ttl_wall_ms && e->ttl_wall_ms <= ds__tier_wall_ms()) {
        ds__tier_ix_remove(x, key, keylen);
        ds__tier_submit_del(t, spill, key, keylen);
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
    if (t->l2 && ds__tier_is_l2_mode(o->write_mode) && t->depth >= t->cap) {
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
    ent_t *e = ds__tier_ix_find(&t->ix, key, keylen);
    if (e) {
        ds__tier_del_waited(t, key, keylen, idx, e, true);
        ds__tier_ix_remove(&t->ix, key, keylen);
    }
    if (ds__tier_ix_find(&t->sx, key, keylen)) {
        ds__tier_ix_remove(&t->sx, key, keylen);
        ds__tier_submit_del(t, true, key, keylen);
    }
}

static uint64_t wall_deadline(const ds_obj_t *o)
{
    if (o->ttl_deadline_ms == 0) return 0;
    uint64_t now = ds__now_ms();
    return ds__tier_wall_ms() + (o->ttl_deadline_ms > now ? o->ttl_deadline_ms - now : 0);
}

/* Queues o's copy to the L2 (a write-through one joins the open waiter) or
 * to the spill directory. false when out of memory. */
static bool queue_put(ds_server_t *srv, ds_obj_t *o, uint32_t idx, bool wait, bool spill)
{
    ds_tier_t *t = srv->tier;
    job_t *j = calloc(1, sizeof(*j));
    waiter_t *w = j && wait ? ds__tier_open_waiter(t) : NULL;
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
    ent_t *old = spill ? NULL : ds__tier_ix_find(x, o->key, o->keylen);
    if (old && old->put) atomic_store(&old->put->superseded, true);
    j->meta.version = ds__tier_ix_put(x, o->key, o->keylen, &j->meta);
    if (!spill && o->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT) t->evict_writes++;
    ent_t *e = (!spill && !wait) ? ds__tier_ix_find(x, o->key, o->keylen) : NULL;
    if (e) e->put = j;
    ds__tier_submit(t, j);
    return true;
}

/* For spill.c (tier_int.h). */
bool ds__tier_queue_put(ds_server_t *srv, ds_obj_t *o, bool spill)
{
    return queue_put(srv, o, 0, false, spill);
}

uint64_t ds__tier_tick(ds_server_t *srv, uint64_t now, bool spill, uint64_t low)
{
    ds_tier_t *t = srv->tier;
    if (spill) ds__spill_round(srv, low, 0);
    uint64_t next = t->rooms ? ds__spill_rooms_resume(srv, now) : 0; /* past their deadline */
    uint64_t retry = t->retry ? ds__tier_retry_due(srv, now) : 0;
    if (retry && (next == 0 || retry < next)) next = retry;
    ds__tier_submit_flush(t);
    return next;
}

void ds__tier_published(ds_server_t *srv, ds_obj_t *o, uint32_t idx)
{
    ds_tier_t *t = srv->tier;
    if (t->spill && ds__tier_ix_find(&t->sx, o->key, o->keylen)) {
        /* an older version's spill copy */
        ds__tier_ix_remove(&t->sx, o->key, o->keylen);
        ds__tier_submit_del(t, true, o->key, o->keylen);
    }
    if (t->l2) {
        if (!ds__tier_is_l2_mode(o->write_mode)) {
            ent_t *e = ds__tier_ix_find(&t->ix, o->key, o->keylen);
            if (e) { /* a cache-only overwrite: its answer says if the old copy stays */
                ds__tier_del_waited(t, o->key, o->keylen, idx, e, false);
                ds__tier_ix_remove(&t->ix, o->key, o->keylen);
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
    uint64_t deadline = ttl ? ds__tier_wall_ms() + (uint64_t)ttl * 1000u : 0;
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
    ds__tier_submit(t, j); /* rewritten like a write-back: the answer does not wait */
    return DS_K_OK;
}

void ds__tier_expire(ds_server_t *srv, ds_obj_t *o)
{
    ds_tier_t *t = srv->tier;
    /* Rewritten like a write-back: the EXPIRE answer does not wait for it. */
    if (o && t->l2 && ds__tier_is_l2_mode(o->write_mode) &&
        ds__tier_ix_find(&t->ix, o->key, o->keylen) != NULL)
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
    ds_req_t *d = w->st == NULL || (published && w->objs == NULL)
                      ? NULL
                      : ds__req_park(r, ds__tier_waiter_cancel, w);
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
            uint64_t wnow = ds__tier_wall_ms();
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
        d = ds__req_park(r, ds__tier_waiter_cancel, w);
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
        ds__tier_submit(t, jobs);
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
    out->objects = ds__tier_ix_count(&t->ix);
    out->bytes = t->ix.bytes;
    out->spill_objects = ds__tier_ix_count(&t->sx);
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
