/* Scale-out with --enable_memory_rebalance: when a worker joins the
 * cluster, workers whose shared memory use is high move objects toward the
 * least used member.
 *
 * A round (every member runs its own, a short while after it saw the
 * join, so that every member's ring has the newcomer): the worker asks
 * every member for its shared memory use (USAGE) and computes the cluster's
 * mean. It is a source when its use is at least
 * --rebalance_source_usage_percent, above the mean, and at least
 * --rebalance_usage_gap_percent above the least used member's (the
 * target). The sources share the target's shortfall below the mean in
 * proportion to how far each is above it, so that together they fill the
 * target up to the mean; each moves at most its own excess.
 *
 * The move is the planned exit's (cluster_migrate.c): MIGRATE batches to
 * the target, at most --data_migrate_rate_limit_mb MiB/s. The target pulls
 * each value and asks the key's owner to move the location (META_MOVE); the
 * owner names the target before it drops this worker's copy, so a reader
 * finds one of the two copies at every moment (a pull that finds the copy
 * gone asks the owner again). A copy the target already holds, or one
 * written again meanwhile, stays here (K_DUPLICATED): nothing is dropped
 * that the owner does not name elsewhere. Replicas of writes with
 * --replica_num above 1 and hot copies stay where they are (the
 * replication tables name their holders).
 *
 * After a round another one follows (at most DS_REBAL_ROUNDS per join), so
 * that a gap that remains, the other sources' moves counted, closes too.
 * Loop thread only. */
#include "worker/cluster/cluster_int.h"

#include "cJSON.h"
#include "common/clock.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* After a join: time for every member to see the new member list. */
#define DS_REBAL_DELAY_MS 1000
#define DS_REBAL_ROUNDS 3
#define DS_REBAL_BATCH_KEYS 64
#define DS_REBAL_BATCH_BYTES (4u << 20)
#define DS_REBAL_INFLIGHT 2

enum { RB_IDLE, RB_ASKING, RB_MOVING };

typedef struct {
    char addr[300];
    uint64_t used, total;
    bool ok;
} usage_t;

typedef struct {
    char *key;
    uint32_t kl, ttl_s;
    uint64_t size, version;
    uint8_t mode;
} ritem_t;

struct ds_rebal {
    ds_server_t *srv;
    int phase;
    uint64_t due; /* RB_IDLE: the next round's start (0 = none); RB_MOVING: the rate's */
    uint32_t rounds_left;
    /* RB_ASKING */
    usage_t *members;
    size_t nmembers;
    uint32_t asks_out;
    /* RB_MOVING */
    char target[300];
    ritem_t *items;
    size_t nitems, cap, next;
    uint64_t budget, picked;
    int inflight;
    uint64_t rate_t0, rate_sent, rate_per_ms;
    /* counters (stats) */
    uint64_t rounds, moved, moved_bytes, kept;
};

typedef struct ds_rebal ds_rebal_t;

static ds_rebal_t *rebal(ds_server_t *srv)
{
    ds_rebal_t **slot = ds__cluster_rebal_slot(srv);
    if (*slot == NULL && (*slot = calloc(1, sizeof(**slot))) != NULL) (*slot)->srv = srv;
    return *slot;
}

static void items_free(ds_rebal_t *rb)
{
    for (size_t i = 0; i < rb->nitems; i++)
        free(rb->items[i].key);
    rb->nitems = rb->next = 0;
}

/* The shared memory in use, less the hot copies: those are caches that
 * give way under pressure and stay where they are, so counting them would
 * make a worker that reads much look full however much it moved. */
static void self_usage(ds_server_t *srv, uint64_t *used, uint64_t *total)
{
    ds_store_stats_t st;
    ds__store_stats(srv->store, &st);
    uint64_t hot = ds__repl_hot_bytes(srv);
    *used = st.arena.used > hot ? st.arena.used - hot : 0;
    *total = st.arena.total;
}

/* Percent of total in use, in hundredths (integer arithmetic). */
static uint64_t pct100(uint64_t used, uint64_t total)
{
    return total ? used * 10000 / total : 0;
}

static void round_end(ds_rebal_t *rb)
{
    items_free(rb);
    free(rb->members);
    rb->members = NULL;
    rb->nmembers = 0;
    rb->phase = RB_IDLE;
    rb->due = rb->rounds_left ? ds__now_ms() + DS_REBAL_DELAY_MS / 2 : 0;
}

void ds__rebal_ring_changed(ds_server_t *srv, const ds_ring_t *old)
{
    if (!srv->cfg.enable_memory_rebalance || old == NULL || ds__ring_size(old) == 0) return;
    const ds_ring_t *ring = ds__cluster_ring(srv);
    bool joined = false;
    for (size_t i = 0; i < ds__ring_size(ring) && !joined; i++)
        joined = !ds__ring_has(old, ds__ring_member(ring, i));
    if (!joined) return;
    ds_rebal_t *rb = rebal(srv);
    if (rb == NULL) return;
    rb->rounds_left = DS_REBAL_ROUNDS;
    if (rb->phase == RB_IDLE) rb->due = ds__now_ms() + DS_REBAL_DELAY_MS;
}

/* ---- moving ---- */

static void pump(ds_rebal_t *rb);

static void batch_done(ds_job_t *j)
{
    ds_rebal_t *rb = j->ctx;
    bool failed = j->transport_failed || j->status != DS_K_OK;
    uint32_t n = failed ? 0 : ds__rbuf_u32(&j->r);
    if (failed)
        DS_LOG_WARN("cluster: rebalance: moving %u objects to %s failed: %s (they stay here)",
                    j->nidx, j->addr, j->err);
    for (uint32_t e = 0; e < n && e < j->nidx && !j->r.err; e++) {
        uint32_t st = ds__rbuf_u32(&j->r);
        const ritem_t *it = &rb->items[j->index + e];
        if (st == DS_K_OK) {
            rb->moved++;
            rb->moved_bytes += it->size;
        } else {
            rb->kept++; /* the owner names another copy, or the target refused: it stays */
        }
    }
    rb->inflight--;
    pump(rb);
}

static void pump(ds_rebal_t *rb)
{
    ds_server_t *srv = rb->srv;
    uint64_t now = ds__now_ms();
    rb->due = 0;
    while (rb->inflight < DS_REBAL_INFLIGHT && rb->next < rb->nitems) {
        /* The rate limit, as the planned exit paces it. */
        if (rb->rate_sent > rb->rate_per_ms * (now - rb->rate_t0)) {
            rb->due = rb->rate_t0 + rb->rate_sent / rb->rate_per_ms + 1;
            return;
        }
        size_t a = rb->next, b = a;
        uint64_t bytes = 0;
        while (b < rb->nitems && b - a < DS_REBAL_BATCH_KEYS &&
               (b == a || bytes + rb->items[b].size <= DS_REBAL_BATCH_BYTES))
            bytes += rb->items[b++].size;
        rb->next = b;
        ds_job_t *j = ds__migrate_job(srv, rb->target, (uint32_t)(b - a), bytes, batch_done);
        if (j == NULL) continue;
        j->ctx = rb;
        j->index = (uint32_t)a;
        for (size_t i = a; i < b; i++)
            ds__migrate_job_item(j, rb->items[i].key, rb->items[i].kl, rb->items[i].size,
                                 rb->items[i].version, rb->items[i].mode, rb->items[i].ttl_s);
        rb->rate_sent += bytes;
        rb->inflight++;
        ds__job_submit(srv, j);
    }
    if (rb->next == rb->nitems && rb->inflight == 0) {
        DS_LOG_INFO("cluster: rebalance: round done: %" PRIu64 " objects (%" PRIu64
                    " bytes) moved in all, %" PRIu64 " kept",
                    rb->moved, rb->moved_bytes, rb->kept);
        round_end(rb);
    }
}

static void pick(void *ctx, ds_obj_t *o)
{
    ds_rebal_t *rb = ctx;
    uint64_t now = ds__now_ms();
    if (rb->picked >= rb->budget) return;
    if (o->ttl_deadline_ms && o->ttl_deadline_ms <= now) return;
    if (ds__repl_tracked(rb->srv, o)) return;
    if (rb->nitems == rb->cap) {
        size_t nc = rb->cap ? 2 * rb->cap : 256;
        ritem_t *ni = realloc(rb->items, nc * sizeof(*ni));
        if (ni == NULL) return;
        rb->items = ni;
        rb->cap = nc;
    }
    ritem_t *it = &rb->items[rb->nitems];
    if ((it->key = strndup(o->key, o->keylen)) == NULL) return;
    it->kl = o->keylen;
    it->size = o->size;
    it->version = o->version;
    it->mode = o->write_mode;
    it->ttl_s = o->ttl_deadline_ms ? (uint32_t)((o->ttl_deadline_ms - now + 999) / 1000) : 0;
    rb->picked += o->size;
    rb->nitems++;
}

/* ---- deciding ---- */

static void decide(ds_rebal_t *rb)
{
    ds_server_t *srv = rb->srv;
    const char *self = ds__cluster_self(srv);
    size_t n = 0, me = rb->nmembers, tgt = rb->nmembers;
    uint64_t sum = 0;
    for (size_t i = 0; i < rb->nmembers; i++) {
        usage_t *u = &rb->members[i];
        if (!u->ok || u->total == 0) continue;
        n++;
        sum += pct100(u->used, u->total);
        if (strcmp(u->addr, self) == 0)
            me = i;
        else if (tgt == rb->nmembers ||
                 pct100(u->used, u->total) < pct100(rb->members[tgt].used, rb->members[tgt].total))
            tgt = i;
    }
    if (me == rb->nmembers || tgt == rb->nmembers || n < 2) {
        round_end(rb);
        return;
    }
    uint64_t mean = sum / n, mine = pct100(rb->members[me].used, rb->members[me].total);
    uint64_t low = pct100(rb->members[tgt].used, rb->members[tgt].total);
    uint64_t src_min = (uint64_t)srv->cfg.rebalance_source_usage_percent * 100;
    uint64_t gap = (uint64_t)srv->cfg.rebalance_usage_gap_percent * 100;
    /* Every source's excess over the mean, in bytes: the target's shortfall
     * is shared in proportion to them. */
    uint64_t excess_all = 0, excess_mine = 0;
    for (size_t i = 0; i < rb->nmembers; i++) {
        usage_t *u = &rb->members[i];
        uint64_t p = pct100(u->used, u->total);
        if (!u->ok || i == tgt || p < src_min || p <= mean || p < low + gap) continue;
        uint64_t x = (p - mean) * u->total / 10000;
        excess_all += x;
        if (i == me) excess_mine = x;
    }
    if (excess_mine == 0 || mine <= mean) {
        round_end(rb);
        return;
    }
    uint64_t shortfall = (mean - low) * rb->members[tgt].total / 10000;
    uint64_t share = (uint64_t)((double)shortfall * ((double)excess_mine / (double)excess_all));
    rb->budget = share < excess_mine ? share : excess_mine;
    if (rb->budget == 0) {
        round_end(rb);
        return;
    }
    snprintf(rb->target, sizeof(rb->target), "%s", rb->members[tgt].addr);
    rb->picked = 0;
    ds__store_foreach(srv->store, pick, rb);
    DS_LOG_INFO("cluster: rebalance: use %" PRIu64 ".%02" PRIu64 "%% (mean %" PRIu64 ".%02" PRIu64
                "%%, %s at %" PRIu64 ".%02" PRIu64 "%%): moving %zu objects (%" PRIu64
                " bytes) to it",
                mine / 100, mine % 100, mean / 100, mean % 100, rb->target, low / 100, low % 100,
                rb->nitems, rb->picked);
    rb->rounds++;
    rb->phase = RB_MOVING;
    rb->rate_t0 = ds__now_ms();
    rb->rate_sent = 0;
    int64_t mb = srv->cfg.data_migrate_rate_limit_mb > 0 ? srv->cfg.data_migrate_rate_limit_mb : 40;
    rb->rate_per_ms = ((uint64_t)mb << 20) / 1000;
    if (rb->rate_per_ms == 0) rb->rate_per_ms = 1;
    pump(rb);
}

static void usage_done(ds_job_t *j)
{
    ds_rebal_t *rb = j->ctx;
    usage_t *u = &rb->members[j->index];
    if (!j->transport_failed && j->status == DS_K_OK) {
        u->used = ds__rbuf_u64(&j->r);
        u->total = ds__rbuf_u64(&j->r);
        u->ok = !j->r.err;
    }
    if (--rb->asks_out == 0) decide(rb);
}

static void round_start(ds_rebal_t *rb)
{
    ds_server_t *srv = rb->srv;
    rb->due = 0;
    if (rb->rounds_left == 0 || *ds__cluster_leave_slot(srv) != NULL) return;
    rb->rounds_left--;
    const ds_ring_t *ring = ds__cluster_ring(srv);
    size_t n = ds__ring_size(ring);
    rb->members = calloc(n ? n : 1, sizeof(*rb->members));
    if (rb->members == NULL) return;
    rb->nmembers = n;
    rb->phase = RB_ASKING;
    rb->asks_out = 1; /* held while the asks go out */
    for (size_t i = 0; i < n; i++) {
        usage_t *u = &rb->members[i];
        snprintf(u->addr, sizeof(u->addr), "%s", ds__ring_member(ring, i));
        if (strcmp(u->addr, ds__cluster_self(srv)) == 0) {
            self_usage(srv, &u->used, &u->total);
            u->ok = true;
            continue;
        }
        ds_job_t *j = ds__job_new(NULL, u->addr, DS_OP_USAGE, usage_done);
        if (j == NULL) continue;
        j->ctx = rb;
        j->index = (uint32_t)i;
        rb->asks_out++;
        ds__job_submit(srv, j);
    }
    if (--rb->asks_out == 0) decide(rb);
}

uint64_t ds__rebal_tick(ds_server_t *srv, uint64_t now)
{
    ds_rebal_t *rb = *ds__cluster_rebal_slot(srv);
    if (rb == NULL || rb->due == 0) return 0;
    if (now >= rb->due) {
        if (rb->phase == RB_IDLE)
            round_start(rb);
        else if (rb->phase == RB_MOVING)
            pump(rb);
    }
    return rb->due;
}

void ds__rebal_peer_op(ds_server_t *srv, ds_req_t *r)
{
    uint64_t used, total;
    self_usage(srv, &used, &total);
    uint8_t room[DS_REPLY_ROOM];
    ds_wbuf_t w;
    ds__wbuf_init_on(&w, room, sizeof(room));
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u64(&w, used);
    ds__wbuf_u64(&w, total);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

void ds__rebal_stats(ds_server_t *srv, struct cJSON *cl)
{
    ds_rebal_t *rb = *ds__cluster_rebal_slot(srv);
    cJSON *o = cJSON_AddObjectToObject(cl, "rebalance");
    cJSON_AddNumberToObject(o, "enable_memory_rebalance", srv->cfg.enable_memory_rebalance);
    cJSON_AddNumberToObject(o, "rounds", rb ? (double)rb->rounds : 0);
    cJSON_AddNumberToObject(o, "moved", rb ? (double)rb->moved : 0);
    cJSON_AddNumberToObject(o, "moved_bytes", rb ? (double)rb->moved_bytes : 0);
    cJSON_AddNumberToObject(o, "kept", rb ? (double)rb->kept : 0);
    /* 1 while a round is pending or under way */
    cJSON_AddNumberToObject(o, "active", rb && (rb->phase != RB_IDLE || rb->due) ? 1 : 0);
}

void ds__rebal_destroy(ds_server_t *srv)
{
    ds_rebal_t **slot = ds__cluster_rebal_slot(srv);
    ds_rebal_t *rb = *slot;
    if (rb == NULL) return;
    items_free(rb);
    free(rb->items);
    free(rb->members);
    free(rb);
    *slot = NULL;
}
