/* Subscribe-gets. A GET with sub_timeout_ms whose keys are not all published
 * parks its connection; each missing key gets a subscription entry in a hash
 * table keyed by the key bytes. Publishing a key walks only that key's bucket
 * and wakes the waits that now have every key; a min-heap of deadlines answers
 * the rest when their time is up. Nothing polls. */
#include "worker/server.h"

#include "common/hash.h"
#include "worker/cluster.h"

#include <stdlib.h>
#include <string.h>

struct ds_sub {
    struct ds_sub *next, *prev;
    ds_wait_t *w;
    const char *key; /* points into w->meta */
    uint32_t len;
    uint32_t hash;
    bool done;
    bool linked;
};

void ds__subs_init(ds_server_t *srv)
{
    srv->sub_nbuckets = 1024;
    srv->sub_buckets = calloc(srv->sub_nbuckets, sizeof(*srv->sub_buckets));
}

static void unlink_sub(ds_server_t *srv, struct ds_sub *s)
{
    if (!s->linked) return;
    if (s->prev)
        s->prev->next = s->next;
    else
        srv->sub_buckets[s->hash & (srv->sub_nbuckets - 1)] = s->next;
    if (s->next) s->next->prev = s->prev;
    s->linked = false;
    srv->sub_count--;
}

static void link_sub(ds_server_t *srv, struct ds_sub *s)
{
    struct ds_sub **b = &srv->sub_buckets[s->hash & (srv->sub_nbuckets - 1)];
    s->prev = NULL;
    s->next = *b;
    if (*b) (*b)->prev = s;
    *b = s;
    s->linked = true;
    srv->sub_count++;
}

static void grow(ds_server_t *srv)
{
    uint32_t nb = srv->sub_nbuckets * 2;
    struct ds_sub **nbk = calloc(nb, sizeof(*nbk));
    if (nbk == NULL) return; /* keep the smaller table: slower, still correct */
    struct ds_sub **old = srv->sub_buckets;
    uint32_t on = srv->sub_nbuckets;
    srv->sub_buckets = nbk;
    srv->sub_nbuckets = nb;
    srv->sub_count = 0;
    for (uint32_t i = 0; i < on; i++) {
        struct ds_sub *s = old[i];
        while (s) {
            struct ds_sub *n = s->next;
            link_sub(srv, s);
            s = n;
        }
    }
    free(old);
}

/* ---- deadline heap ---- */

static void heap_swap(ds_server_t *srv, uint32_t a, uint32_t b)
{
    ds_wait_t *t = srv->wait_heap[a];
    srv->wait_heap[a] = srv->wait_heap[b];
    srv->wait_heap[b] = t;
    srv->wait_heap[a]->heap_idx = (int32_t)a;
    srv->wait_heap[b]->heap_idx = (int32_t)b;
}

static void heap_up(ds_server_t *srv, uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (srv->wait_heap[p]->deadline_ms <= srv->wait_heap[i]->deadline_ms) break;
        heap_swap(srv, i, p);
        i = p;
    }
}

static void heap_down(ds_server_t *srv, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < srv->wait_n && srv->wait_heap[l]->deadline_ms < srv->wait_heap[m]->deadline_ms)
            m = l;
        if (r < srv->wait_n && srv->wait_heap[r]->deadline_ms < srv->wait_heap[m]->deadline_ms)
            m = r;
        if (m == i) return;
        heap_swap(srv, i, m);
        i = m;
    }
}

static void heap_remove(ds_server_t *srv, ds_wait_t *w)
{
    if (w->heap_idx < 0) return;
    uint32_t i = (uint32_t)w->heap_idx;
    srv->wait_n--;
    if (i != srv->wait_n) {
        srv->wait_heap[i] = srv->wait_heap[srv->wait_n];
        srv->wait_heap[i]->heap_idx = (int32_t)i;
        heap_down(srv, i);
        heap_up(srv, i);
    }
    w->heap_idx = -1;
}

static void free_wait(ds_server_t *srv, ds_wait_t *w)
{
    heap_remove(srv, w);
    for (uint32_t i = 0; i < w->nsubs; i++)
        unlink_sub(srv, &w->subs[i]);
    free(w->subs);
    free(w->meta);
    free(w);
}

bool ds__subs_wait(ds_server_t *srv, ds_conn_t *c, uint16_t op, uint64_t req_id, uint8_t *meta,
                   uint32_t meta_len, const char **keys, const uint32_t *lens, uint32_t nkeys,
                   uint64_t deadline_ms)
{
    if ((uint64_t)srv->sub_count + nkeys > (uint64_t)srv->cfg.max_pending_subscriptions)
        return false;
    if (srv->wait_n == srv->wait_cap) {
        uint32_t cap = srv->wait_cap ? srv->wait_cap * 2 : 64;
        ds_wait_t **nh = realloc(srv->wait_heap, cap * sizeof(*nh));
        if (nh == NULL) return false;
        srv->wait_heap = nh;
        srv->wait_cap = cap;
    }
    ds_wait_t *w = calloc(1, sizeof(*w));
    struct ds_sub *subs = calloc(nkeys, sizeof(*subs));
    if (w == NULL || subs == NULL) {
        free(w);
        free(subs);
        return false;
    }
    while (srv->sub_count + nkeys > 2 * srv->sub_nbuckets) {
        uint32_t before = srv->sub_nbuckets;
        grow(srv);
        if (srv->sub_nbuckets == before) break;
    }
    w->conn = c;
    w->op = op;
    w->req_id = req_id;
    w->deadline_ms = deadline_ms;
    w->meta = meta;
    w->meta_len = meta_len;
    w->subs = subs;
    w->nsubs = nkeys;
    w->missing = nkeys;
    for (uint32_t i = 0; i < nkeys; i++) {
        subs[i].w = w;
        subs[i].key = keys[i];
        subs[i].len = lens[i];
        subs[i].hash = ds__murmur3_32(keys[i], lens[i], 0);
        link_sub(srv, &subs[i]);
    }
    w->heap_idx = (int32_t)srv->wait_n;
    srv->wait_heap[srv->wait_n++] = w;
    heap_up(srv, (uint32_t)w->heap_idx);
    c->wait = w;
    return true;
}

static void complete(ds_server_t *srv, ds_wait_t *w)
{
    ds_conn_t *c = w->conn;
    c->wait = NULL;
    if (w->op == DS_OP_LOCATE)
        ds__cluster_locate_answer(c, w->req_id, w->meta, w->meta_len);
    else
        ds__ops_get_answer(c, w->req_id, w->meta, w->meta_len);
    free_wait(srv, w);
    ds__conn_unpark(c);
}

void ds__subs_publish(ds_server_t *srv, const char *key, size_t len)
{
    if (srv->sub_count == 0) return;
    uint32_t h = ds__murmur3_32(key, len, 0);
    ds_wait_t *ready[64];
    uint32_t nready = 0;
    bool more = true;
    /* Completing a wait unlinks its entries, possibly from this bucket, so
     * collect a batch first and rescan until no ready wait is left. */
    while (more) {
        more = false;
        nready = 0;
        for (struct ds_sub *s = srv->sub_buckets[h & (srv->sub_nbuckets - 1)]; s; s = s->next) {
            if (s->hash != h || s->len != len || memcmp(s->key, key, len) != 0) continue;
            if (!s->done) {
                s->done = true;
                s->w->missing--;
            }
            if (s->w->missing == 0) {
                if (nready == 64) {
                    more = true;
                    break;
                }
                ready[nready++] = s->w;
            }
        }
        for (uint32_t i = 0; i < nready; i++)
            complete(srv, ready[i]);
    }
}

uint64_t ds__subs_expire(ds_server_t *srv, uint64_t now_ms)
{
    while (srv->wait_n > 0 && srv->wait_heap[0]->deadline_ms <= now_ms)
        complete(srv, srv->wait_heap[0]);
    return srv->wait_n ? srv->wait_heap[0]->deadline_ms : 0;
}

void ds__subs_cancel(ds_server_t *srv, ds_wait_t *w)
{
    w->conn->wait = NULL;
    free_wait(srv, w);
}

void ds__subs_destroy(ds_server_t *srv)
{
    while (srv->wait_n > 0)
        ds__subs_cancel(srv, srv->wait_heap[0]);
    free(srv->wait_heap);
    free(srv->sub_buckets);
}
