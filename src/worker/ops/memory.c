/* Background eviction and spill between the arena's watermarks
 * (--eviction_high_watermark_ratio / --eviction_low_watermark_ratio, as in
 * Yuanrong): once arena use passes the high watermark, the loop evicts
 * volatile objects between requests, a batch per turn, until use is back at
 * the low watermark; objects that cannot be evicted are spilled (tier.c)
 * when eviction alone does not get there. A write then rarely finds the
 * arena full, and does not pay for eviction in its own latency. */
#include "worker/ops/worker.h"

/* Objects evicted per loop turn: a turn stays short (each eviction is a
 * table unlink and an allocator free). */
#define EVICT_BATCH 64

uint64_t ds__ops_memory_tick(ds_server_t *srv, uint64_t now)
{
    uint64_t used, total;
    ds__store_usage(srv->store, &used, &total);
    const ds_worker_config_t *cfg = &srv->cfg;
    uint64_t high = (uint64_t)(cfg->eviction_high_watermark_ratio * (double)total);
    uint64_t low = (uint64_t)(cfg->eviction_low_watermark_ratio * (double)total);
    uint64_t next = 0;
    /* Past the high watermark: evict until the low one. A run that found
     * nothing more to evict starts again only once use has changed. */
    if (!srv->evicting && used > high && used != srv->evict_stuck_at) srv->evicting = true;
    if (srv->evicting) {
        uint32_t n = ds__store_evict_to(srv->store, low, EVICT_BATCH);
        srv->bg_evictions += n;
        ds__store_usage(srv->store, &used, &total);
        if (n == EVICT_BATCH && used > low) {
            next = now; /* another batch next turn */
        } else {
            srv->evicting = false;
            srv->evict_stuck_at = used > low ? used : 0;
        }
    }
    /* What eviction could not free: spill (between the same watermarks). */
    if (srv->tier) {
        uint64_t t = ds__tier_tick(srv, now, !srv->evicting && used > high, low);
        if (t && (next == 0 || t < next)) next = t;
    }
    return next;
}
