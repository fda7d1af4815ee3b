/* Spill (docs/design.md section 8): objects that cannot be evicted move to
 * --spill_directory (the sfs format, through the disk I/O thread of
 * tier.c) when arena use passes its high watermark or a write finds the
 * arena full; writes that find it full wait here while spills make room. */
#include "worker/ops/tier_int.h"

#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* After a failed spill write, no spilling for this long. */
#define SPILL_ERR_BACKOFF_MS 1000

/* A spill copy is written: the object leaves memory if it is still the
 * key's current version, nobody pins it and no later write or delete of the
 * key replaced the spill index entry; otherwise the copy goes. */
void ds__spill_put_done(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    ds_obj_t *o = j->obj;
    t->spill_inflight -= ds__tier_disk_of(j->meta.size, o->keylen);
    o->spilling = 0;
    t->room_kick = true;
    ent_t *e = ds__tier_ix_find(&t->sx, o->key, o->keylen);
    bool mine = e && e->version == j->meta.version;
    if (j->rc == 0 && mine && o->in_table && o->refcnt == 2) {
        t->c.spill_writes++;
        ds__store_delete(srv->store, o->key, o->keylen);
        return;
    }
    if (mine) {
        ds__tier_ix_remove(&t->sx, o->key, o->keylen);
        if (j->rc == 0) ds__tier_submit_del(t, true, o->key, o->keylen);
    }
    if (j->rc != 0) {
        /* The directory refuses (full, read-only): no more spilling for a
         * while; writes waiting for room fail with this error meanwhile. */
        t->spill_err_until = ds__now_ms() + SPILL_ERR_BACKOFF_MS;
        snprintf(t->spill_err, sizeof(t->spill_err), "%s", j->err);
    }
}

/* The spill directory holds nothing of value across a restart: what an
 * earlier run left there is deleted. */
static void forget_one(void *ctx, const char *key, size_t keylen, const ds_l2_meta_t *m)
{
    (void)m;
    ds_l2_t *sp = ctx;
    char err[64];
    sp->ops->del(sp, key, keylen, err, sizeof(err));
}

int ds__spill_open(ds_server_t *srv, char *err, size_t cap)
{
    ds_tier_t *t = srv->tier;
    const ds_worker_config_t *cfg = &srv->cfg;
    t->spill = ds__l2_sfs_open(cfg->spill_directory, err, cap);
    if (t->spill == NULL) return -1;
    if (t->spill->ops->scan(t->spill, UINT64_MAX, forget_one, t->spill, err, cap) < 0) return -1;
    t->spill_limit = (uint64_t)cfg->spill_size_limit;
    if (t->spill_limit == 0) {
        struct statvfs vs;
        if (statvfs(cfg->spill_directory, &vs) != 0) {
            snprintf(err, cap, "spill: cannot stat %s: %s (errno %d)", cfg->spill_directory,
                     strerror(errno), errno);
            return -1;
        }
        t->spill_limit = (uint64_t)((double)vs.f_bavail * (double)vs.f_frsize * 0.95);
    }
    t->spill_high = (uint64_t)(cfg->spill_high_watermark_ratio * (double)t->spill_limit);
    t->spill_low = (uint64_t)(cfg->spill_low_watermark_ratio * (double)t->spill_limit);
    DS_LOG_INFO("spill directory %s, limit %llu bytes (background spilling up to %llu)",
                cfg->spill_directory, (unsigned long long)t->spill_limit,
                (unsigned long long)t->spill_high);
    return 0;
}

/* Spilling copies objects that cannot be evicted to the spill directory
 * until the copies in flight would bring arena use down to the low
 * watermark (memory.c runs it in the background past the high one) or make
 * room for a write that found the arena full; each object leaves memory
 * once its copy is written. Background spilling stays under
 * --spill_high_watermark_ratio of the limit (pausing there until use falls
 * under the low spill watermark); a waiting write may use it all. */

/* Kept free under the limit for the directory's own blocks. */
#define SPILL_DIR_SLACK 65536

typedef struct {
    ds_server_t *srv;
    uint64_t need, got, now, limit;
} pick_t;

static void pick(void *ctx, ds_obj_t *o)
{
    pick_t *p = ctx;
    ds_tier_t *t = p->srv->tier;
    if (p->got >= p->need || t->depth >= t->cap) return;
    if (o->spilling || o->refcnt != 1 || !o->in_table) return;
    if (o->write_mode == DS_WRITE_NONE_L2_CACHE_EVICT) return; /* eviction's */
    if (o->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT && o->l2_persisted) return;
    if (o->ttl_deadline_ms && o->ttl_deadline_ms <= p->now + 1000) return;
    uint64_t disk = ds__tier_disk_of(o->size, o->keylen);
    /* (the index lists queued copies already) */
    if (t->sx.disk + disk + SPILL_DIR_SLACK > p->limit) return;
    if (!ds__tier_queue_put(p->srv, o, true)) return;
    o->spilling = 1;
    t->spill_inflight += disk;
    p->got += o->size;
}

/* Starts a round of spills (none while one is in flight) that brings arena
 * use down to low, plus extra bytes a waiting write needs (extra 0: the
 * background, within the spill high watermark). */
void ds__spill_round(ds_server_t *srv, uint64_t low, uint64_t extra)
{
    ds_tier_t *t = srv->tier;
    if (t->spill == NULL || t->spill_inflight > 0) return;
    if (t->spill_err_until && ds__now_ms() < t->spill_err_until) return;
    uint64_t used, total;
    ds__store_usage(srv->store, &used, &total);
    /* A background round that found nothing to spill is tried again only
     * once arena or spill use has changed (not on every loop turn). */
    if (extra == 0 && used == t->spill_stuck_used && t->sx.disk == t->spill_stuck_disk) return;
    if (extra == 0) {
        if (t->sx.disk >= t->spill_high) t->spill_paused = true;
        if (t->sx.disk < t->spill_low) t->spill_paused = false;
        if (t->spill_paused) return;
    }
    /* The limit may promise more than the file system has (or shares with
     * others): never plan past what is free there. */
    uint64_t limit = t->spill_limit;
    struct statvfs vs;
    if (statvfs(t->spill->path, &vs) == 0) {
        t->spill_fs_free = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
        uint64_t fs_cap = t->sx.disk + t->spill_fs_free;
        if (fs_cap < limit) limit = fs_cap;
    }
    if (extra == 0 && t->spill_high < limit) limit = t->spill_high;
    pick_t p = {srv, (used > low ? used - low : 0) + extra, 0, ds__now_ms(), limit};
    if (p.need == 0) return;
    /* A walk of the table, only while nothing is in flight: at most once
     * per batch of spills. */
    ds__store_foreach(srv->store, pick, &p);
    if (p.got > 0) t->c.spill_rounds++;
    t->spill_stuck_used = p.got == 0 ? used : 0;
    t->spill_stuck_disk = p.got == 0 ? t->sx.disk : 0;
}

uint64_t ds__spill_arena_low(ds_server_t *srv)
{
    uint64_t used, total;
    ds__store_usage(srv->store, &used, &total);
    return (uint64_t)(srv->cfg.eviction_low_watermark_ratio * (double)total);
}

void ds__tier_oom(ds_server_t *srv, uint64_t size, char *msg, size_t cap)
{
    ds_tier_t *t = srv->tier;
    (void)size;
    if (t->spill == NULL) return;
    uint64_t used, total;
    ds__store_usage(srv->store, &used, &total);
    size_t len = strlen(msg);
    if (len < cap)
        snprintf(msg + len, cap - len,
                 "; memory: %llu of %llu bytes used; spill %s: %llu of %llu bytes used "
                 "(--spill_size_limit), %llu in flight, %llu free on its file system",
                 (unsigned long long)used, (unsigned long long)total, t->spill->path,
                 (unsigned long long)t->sx.disk, (unsigned long long)t->spill_limit,
                 (unsigned long long)t->spill_inflight, (unsigned long long)t->spill_fs_free);
    len = strlen(msg);
    if (t->spill_err_until && ds__now_ms() < t->spill_err_until && len < cap)
        snprintf(msg + len, cap - len, "; last spill write failed: %s", t->spill_err);
}

/* ---- writes waiting for room ---- */

/* A write that found the arena full waits (deferred) while spills make
 * room, then runs again; at most this long. */
#define ROOM_WAIT_MS 10000

static void room_cancel(ds_req_t *d, void *ctx)
{
    (void)d;
    (void)ctx; /* the waiter stays queued; ds__req_gone tells it at its turn */
}

bool ds__tier_wait_room(ds_server_t *srv, ds_req_t *r, uint64_t size,
                        void (*rerun)(ds_server_t *srv, ds_req_t *d))
{
    ds_tier_t *t = srv->tier;
    if (t->spill == NULL && t->evict_writes == 0) return false;
    uint64_t now = ds__now_ms();
    uint64_t deadline = now + ROOM_WAIT_MS;
    if (r == t->rerun_req) deadline = t->rerun_deadline; /* waiting already */
    if (deadline <= now) return false;
    ds__spill_round(srv, ds__spill_arena_low(srv), size);
    /* nothing can make room (both tiers full, no write-back on the way) */
    if (t->spill_inflight == 0 && t->evict_writes == 0) return false;
    room_t *w = calloc(1, sizeof(*w));
    if (w == NULL) return false;
    ds_req_t *d = ds__req_park(r, room_cancel, NULL);
    if (d == NULL) {
        free(w);
        return false;
    }
    w->d = d;
    w->deadline = deadline;
    w->rerun = rerun;
    room_t **p = &t->rooms;
    while (*p)
        p = &(*p)->next;
    *p = w;
    t->c.spill_waits++;
    return true;
}

/* Spills finished (or waits timed out, all: every waiter when now is 0):
 * the waiting writes run again, in arrival order. */
uint64_t ds__spill_rooms_resume(ds_server_t *srv, uint64_t now)
{
    ds_tier_t *t = srv->tier;
    room_t *l = t->rooms, *keep = NULL, **kt = &keep;
    t->rooms = NULL;
    while (l) {
        room_t *w = l;
        l = l->next;
        if (now && w->deadline > now && !ds__req_gone(w->d) &&
            (t->spill_inflight > 0 || t->evict_writes > 0)) {
            *kt = w;
            kt = &w->next;
            continue;
        }
        w->next = NULL;
        if (ds__req_gone(w->d)) {
            ds__req_drop(w->d);
        } else {
            ds__req_unpark(w->d);
            t->rerun_req = w->d;
            t->rerun_deadline = w->deadline;
            w->rerun(srv, w->d);
            t->rerun_req = NULL;
        }
        free(w);
    }
    /* reruns that wait again were appended to t->rooms meanwhile */
    *kt = t->rooms;
    t->rooms = keep;
    uint64_t next = 0;
    for (room_t *w = t->rooms; w; w = w->next)
        if (next == 0 || w->deadline < next) next = w->deadline;
    return next;
}

void ds__spill_rooms_drop(ds_server_t *srv)
{
    ds_tier_t *t = srv->tier;
    while (t->rooms) {
        room_t *w = t->rooms;
        t->rooms = w->next;
        if (ds__req_gone(w->d))
            ds__req_drop(w->d);
        else
            ds__req_error(w->d, DS_K_OUT_OF_MEMORY,
                          "worker stopping while the write waited for room");
        free(w);
    }
}
