/* Streams' state and rules: the stream table, handles, pages, appends,
 * reclamation and parked waits (docs/streams.md). Event loop only. */
#include "worker/ops/stream.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "worker/ops/worker.h"

static bool stream_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const sc_stream_t *st = DS_DICT_ENTRY(n, sc_stream_t, node);
    return st->name_len == len && memcmp(st->name, key, len) == 0;
}

static bool end_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    (void)len;
    const sc_end_t *e = DS_DICT_ENTRY(n, sc_end_t, node);
    return memcmp(&e->id, key, sizeof(e->id)) == 0;
}

static const ds_dict_type_t stream_type = {stream_eq, NULL};
static const ds_dict_type_t end_type = {end_eq, NULL};

static uint32_t id_hash(uint64_t id)
{
    return ds__murmur3_32(&id, sizeof(id), 0x5c);
}

ds_streams_t *ds__sc_get(ds_server_t *srv)
{
    if (srv->streams) return srv->streams;
    ds_streams_t *S = calloc(1, sizeof(*S));
    if (S == NULL) return NULL;
    if (ds__dict_init(&S->streams, &stream_type, NULL, 16) != 0 ||
        ds__dict_init(&S->ends, &end_type, NULL, 16) != 0) {
        ds__dict_clear(&S->streams);
        ds__dict_clear(&S->ends);
        free(S);
        return NULL;
    }
    S->next_end = 1;
    srv->streams = S;
    return S;
}

sc_stream_t *ds__sc_find(ds_streams_t *S, const char *name, uint32_t len)
{
    ds_dict_node_t *n = ds__dict_find(&S->streams, name, len, ds__murmur3_32(name, len, 0));
    return n ? DS_DICT_ENTRY(n, sc_stream_t, node) : NULL;
}

sc_stream_t *ds__sc_make(ds_streams_t *S, const char *name, uint32_t len)
{
    sc_stream_t *st = calloc(1, sizeof(*st));
    char *nm = malloc(len + 1);
    if (st == NULL || nm == NULL) {
        free(st);
        free(nm);
        return NULL;
    }
    memcpy(nm, name, len);
    nm[len] = '\0';
    st->name = nm;
    st->name_len = len;
    /* Yuanrong's ProducerConf defaults. */
    st->page_size = 1u << 20;
    st->max_size = 100u << 20;
    st->next_id = 1;
    ds__dict_add(&S->streams, &st->node, ds__murmur3_32(name, len, 0));
    return st;
}

sc_end_t *ds__sc_end(ds_streams_t *S, uint64_t id)
{
    ds_dict_node_t *n = ds__dict_find(&S->ends, &id, sizeof(id), id_hash(id));
    return n ? DS_DICT_ENTRY(n, sc_end_t, node) : NULL;
}

sc_end_t *ds__sc_end_new(ds_streams_t *S, sc_stream_t *st, bool consumer, const void *session)
{
    sc_end_t *e = calloc(1, sizeof(*e));
    if (e == NULL) return NULL;
    e->id = S->next_end++;
    e->consumer = consumer;
    e->st = st;
    e->session = session;
    ds__dict_add(&S->ends, &e->node, id_hash(e->id));
    return e;
}

static void page_free(ds_server_t *srv, sc_stream_t *st, sc_page_t *p)
{
    st->bytes -= p->cap;
    srv->streams->bytes -= p->cap;
    ds__store_unref(srv->store, p->space);
    free(p->off);
    free(p);
}

static bool retaining(const sc_stream_t *st)
{
    return st->retain > st->ever_consumers;
}

void ds__sc_reclaim(ds_server_t *srv, sc_stream_t *st)
{
    uint64_t low; /* every element <= low may go */
    if (retaining(st)) return;
    low = st->next_id - 1;
    for (sc_sub_t *s = st->subs; s; s = s->next) {
        uint64_t done = s->type == DS_SC_SUB_STREAM ? s->acked : ds__sc_sub_low(s) - 1;
        if (done < low) low = done;
    }
    bool freed = false;
    while (st->head && st->head->first_id + st->head->n - 1 <= low) {
        sc_page_t *p = st->head;
        st->head = p->next;
        if (st->tail == p) st->tail = NULL;
        page_free(srv, st, p);
        freed = true;
    }
    /* Freed room may let sends of any stream go on (the worker-wide
     * --sc_shm_threshold_percentage). */
    if (freed) ds__sc_wake(srv, NULL);
}

static ds_status_t page_new(ds_server_t *srv, sc_stream_t *st, uint64_t need)
{
    uint64_t cap = need > st->page_size ? (need + 63) & ~(uint64_t)63 : st->page_size;
    /* Flow control: the stream's pages stay within max_stream_size (a big
     * element's own page may pass it only when the stream holds nothing). */
    if (st->bytes > 0 && st->bytes + cap > st->max_size) return DS_K_TRY_AGAIN;
    /* --sc_shm_threshold_percentage: all streams together. */
    if (srv->streams->bytes + cap >
        srv->arena.size / 100 * (uint64_t)srv->cfg.sc_shm_threshold_percentage)
        return DS_K_TRY_AGAIN;
    sc_page_t *p = calloc(1, sizeof(*p));
    if (p == NULL) return DS_K_OUT_OF_MEMORY;
    char err[256];
    if (ds__store_reserve_space(srv->store, cap, &p->space, err, sizeof(err)) != DS_K_OK) {
        free(p);
        return DS_K_TRY_AGAIN; /* the arena is full: wait for space like a full stream */
    }
    uint64_t off, len;
    ds__store_space(srv->store, p->space, &off, &len);
    p->base = srv->arena.base + off;
    p->cap = cap;
    p->first_id = st->next_id;
    st->bytes += cap;
    srv->streams->bytes += cap;
    if (st->tail)
        st->tail->next = p;
    else
        st->head = p;
    st->tail = p;
    return DS_K_OK;
}

ds_status_t ds__sc_append(ds_server_t *srv, sc_stream_t *st, const uint8_t *const *els,
                          const uint32_t *lens, uint32_t n, uint32_t *done, const char *origin,
                          uint32_t origin_len)
{
    uint32_t start = *done;
    ds_status_t rc = DS_K_OK;
    bool new_page = false;
    /* Other workers' queues full: wait, as for a full stream. */
    if (srv->remote && srv->remote->stream_room && !srv->remote->stream_room(srv))
        return DS_K_TRY_AGAIN;
    for (uint32_t i = *done; i < n; i++) {
        if (st->subs == NULL && !retaining(st)) {
            st->next_id++; /* nobody will read it: dropped at once */
            *done = i + 1;
            continue;
        }
        sc_page_t *p = st->tail;
        if (p == NULL || p->cap - p->used < lens[i] || p->first_id + p->n != st->next_id) {
            /* A full page flushes (delay_flush_time_ms). */
            if (p) new_page = true;
            rc = page_new(srv, st, lens[i]);
            if (rc != DS_K_OK) break;
            p = st->tail;
        }
        if (p->n == p->ncap) {
            uint32_t nc = p->ncap ? p->ncap * 2 : 64;
            uint64_t *no = realloc(p->off, nc * sizeof(*no));
            if (no == NULL) {
                rc = DS_K_OUT_OF_MEMORY;
                break;
            }
            p->off = no;
            p->ncap = nc;
        }
        p->off[p->n++] = p->used;
        memcpy(p->base + p->used, els[i], lens[i]);
        p->used += lens[i];
        ds__sc_sub_assign(st, st->next_id, srv->streams->append_key);
        st->next_id++;
        *done = i + 1;
    }
    if (*done > start && srv->remote && srv->remote->stream_forward)
        srv->remote->stream_forward(srv, st->name, st->name_len, origin, origin_len, els + start,
                                    lens + start, *done - start);
    if (*done > start && (!srv->streams->append_delay || new_page)) {
        if (st->flush_at) srv->streams->flushes--;
        st->flush_at = 0;
        ds__sc_wake(srv, st);
    }
    return rc;
}

uint64_t ds__sc_available(const sc_end_t *e)
{
    if (e->sub->type != DS_SC_SUB_STREAM) return ds__sc_sub_available(e);
    return e->st->next_id - e->sub->cursor;
}

void ds__sc_flush(ds_server_t *srv, sc_stream_t *st)
{
    if (st->flush_at) srv->streams->flushes--;
    st->flush_at = 0;
    ds__sc_wake(srv, st);
}

/* The page holding id, or NULL. */
static sc_page_t *page_of(sc_stream_t *st, uint64_t id)
{
    for (sc_page_t *p = st->head; p; p = p->next)
        if (id >= p->first_id && id < p->first_id + p->n) return p;
    return NULL;
}

void ds__sc_reply_elements(ds_server_t *srv, ds_req_t *r, sc_end_t *e, uint32_t max, bool in_place)
{
    if (e->sub->type != DS_SC_SUB_STREAM) return ds__sc_sub_reply(srv, r, e, max, in_place);
    sc_stream_t *st = e->st;
    sc_sub_t *sub = e->sub;
    uint64_t avail = ds__sc_available(e);
    if (max == 0 || max > avail) max = (uint32_t)(avail < UINT32_MAX ? avail : UINT32_MAX);
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    size_t count_at = w.len;
    ds__wbuf_u32(&w, 0);
    struct iovec *segs = NULL;
    ds_obj_t **refs = NULL;
    uint32_t nseg = 0, cap = 0, n = 0;
    uint64_t bytes = 0;
    uint64_t id = sub->cursor;
    sc_page_t *p = max ? page_of(st, id) : NULL;
    while (p && n < max) {
        uint32_t i = (uint32_t)(id - p->first_id);
        uint64_t from = p->off[i], to = from;
        for (; i < p->n && n < max; i++) {
            uint64_t end = i + 1 < p->n ? p->off[i + 1] : p->used;
            if (n > 0 && bytes + (end - p->off[i]) > DS_SC_RECV_MAX_BYTES) {
                max = n;
                break;
            }
            ds__wbuf_u64(&w, id);
            ds__wbuf_u32(&w, (uint32_t)(end - p->off[i]));
            if (in_place) ds__wbuf_u64(&w, (uint64_t)(p->base - srv->arena.base) + p->off[i]);
            bytes += end - p->off[i];
            to = end;
            id++;
            n++;
        }
        if (to > from && !in_place) {
            if (nseg == cap) {
                cap = cap ? cap * 2 : 8;
                struct iovec *ns = realloc(segs, cap * sizeof(*ns));
                ds_obj_t **nr = realloc(refs, cap * sizeof(*nr));
                if (ns) segs = ns;
                if (nr) refs = nr;
                if (ns == NULL || nr == NULL) {
                    free(segs);
                    free(refs);
                    ds__wbuf_free(&w);
                    ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
                    return;
                }
            }
            segs[nseg].iov_base = p->base + from;
            segs[nseg].iov_len = to - from;
            ds__store_ref(p->space);
            refs[nseg++] = p->space;
        }
        p = p->next;
    }
    if (w.oom) {
        for (uint32_t k = 0; k < nseg; k++)
            ds__store_unref(srv->store, refs[k]);
        free(segs);
        free(refs);
        ds__wbuf_free(&w);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
        return;
    }
    uint8_t *cnt = w.buf + count_at;
    cnt[0] = (uint8_t)n;
    cnt[1] = (uint8_t)(n >> 8);
    cnt[2] = (uint8_t)(n >> 16);
    cnt[3] = (uint8_t)(n >> 24);
    sub->cursor = id;
    ds__req_reply(r, DS_K_OK, &w, segs, nseg, refs, nseg, -1);
    free(segs);
    free(refs);
    ds__wbuf_free(&w);
}

/* ---- closing ---- */

static void sub_unlink(sc_stream_t *st, sc_sub_t *sub)
{
    for (sc_sub_t **pp = &st->subs; *pp; pp = &(*pp)->next)
        if (*pp == sub) {
            *pp = sub->next;
            break;
        }
    ds__sc_sub_free(sub);
    free(sub->name);
    free(sub);
}

void ds__sc_delete(ds_server_t *srv, sc_stream_t *st)
{
    ds_streams_t *S = srv->streams;
    if (st->flush_at) S->flushes--;
    while (st->head) {
        sc_page_t *p = st->head;
        st->head = p->next;
        page_free(srv, st, p);
    }
    while (st->subs)
        sub_unlink(st, st->subs);
    ds__dict_remove(&S->streams, &st->node);
    free(st->name);
    free(st);
    ds__sc_wake(srv, NULL);
}

void ds__sc_counts_changed(ds_server_t *srv, sc_stream_t *st)
{
    if (srv->remote && srv->remote->stream_reg)
        srv->remote->stream_reg(srv, st->name, st->name_len, st->producers, st->consumers, NULL, 0);
}

void ds__stream_reregister(ds_server_t *srv)
{
    ds_streams_t *S = srv->streams;
    if (S == NULL) return;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &S->streams);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        sc_stream_t *st = DS_DICT_ENTRY(nd, sc_stream_t, node);
        if (st->producers || st->consumers) ds__sc_counts_changed(srv, st);
    }
}

void ds__sc_close(ds_server_t *srv, sc_end_t *e)
{
    ds_streams_t *S = srv->streams;
    sc_stream_t *st = e->st;
    ds__dict_remove(&S->ends, &e->node);
    if (e->consumer) {
        st->consumers--;
        /* A shared subscription stays while it has consumers; what this
         * one held goes to them. */
        if (e->sub->type == DS_SC_SUB_STREAM || ds__sc_sub_leave(e->sub, e) == 0)
            sub_unlink(st, e->sub);
        free(e->q);
    } else {
        st->producers--;
        ds__sc_flush(srv, st); /* a closing producer flushes */
    }
    free(e);
    ds__sc_counts_changed(srv, st);
    /* Its waits fail (the end is gone); the others may go on. */
    ds__sc_wake(srv, st);
    ds__sc_reclaim(srv, st);
    if (st->auto_cleanup && st->producers == 0 && st->consumers == 0) ds__sc_delete(srv, st);
}

void ds__stream_session_end(ds_server_t *srv, const void *session)
{
    ds_streams_t *S = srv->streams;
    if (S == NULL) return;
    /* Collect first: closing changes the table. */
    uint64_t n = ds__dict_count(&S->ends), k = 0;
    if (n == 0) return;
    uint64_t *ids = malloc(n * sizeof(*ids));
    if (ids == NULL) return;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &S->ends);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL && k < n;) {
        sc_end_t *e = DS_DICT_ENTRY(nd, sc_end_t, node);
        if (e->session == session) ids[k++] = e->id;
    }
    for (uint64_t i = 0; i < k; i++) {
        sc_end_t *e = ds__sc_end(S, ids[i]);
        if (e) ds__sc_close(srv, e);
    }
    free(ids);
}

void ds__stream_destroy(ds_server_t *srv)
{
    ds_streams_t *S = srv->streams;
    if (S == NULL) return;
    while (S->waits) {
        sc_wait_t *w = S->waits;
        ds_req_t *d = ds__sc_wait_take(S, w);
        ds__req_drop(d);
    }
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &S->ends);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        ds__dict_remove(&S->ends, nd);
        free(DS_DICT_ENTRY(nd, sc_end_t, node));
    }
    ds__dict_clear(&S->ends);
    ds__dict_iter_init(&it, &S->streams);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        sc_stream_t *st = DS_DICT_ENTRY(nd, sc_stream_t, node);
        ds__dict_remove(&S->streams, nd);
        while (st->head) {
            sc_page_t *p = st->head;
            st->head = p->next;
            page_free(srv, st, p);
        }
        while (st->subs)
            sub_unlink(st, st->subs);
        free(st->name);
        free(st);
    }
    ds__dict_clear(&S->streams);
    free(S);
    srv->streams = NULL;
}

static void count_ends(const ds_streams_t *S, uint64_t *producers, uint64_t *consumers,
                       uint64_t *waits)
{
    *producers = *consumers = *waits = 0;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, (ds_dict_t *)&S->ends);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        if (DS_DICT_ENTRY(nd, sc_end_t, node)->consumer)
            (*consumers)++;
        else
            (*producers)++;
    }
    for (sc_wait_t *w = S->waits; w; w = w->next)
        (*waits)++;
}

void ds__stream_log_metrics(ds_server_t *srv)
{
    ds_streams_t *S = srv->streams;
    if (S == NULL) return;
    uint64_t producers, consumers, waits;
    count_ends(S, &producers, &consumers, &waits);
    DS_LOG_INFO("streams metrics: streams %" PRIu64 ", producers %" PRIu64 ", consumers %" PRIu64
                ", page_bytes %" PRIu64 ", waits %" PRIu64,
                (uint64_t)ds__dict_count(&S->streams), producers, consumers, S->bytes, waits);
}

void ds__stream_stats(ds_server_t *srv, cJSON *root)
{
    ds_streams_t *S = srv->streams;
    cJSON *o = cJSON_AddObjectToObject(root, "streams");
    if (o == NULL) return;
    uint64_t producers = 0, consumers = 0, waits = 0;
    if (S) {
        ds_dict_iter_t it;
        ds__dict_iter_init(&it, &S->ends);
        for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
            if (DS_DICT_ENTRY(nd, sc_end_t, node)->consumer)
                consumers++;
            else
                producers++;
        }
        for (sc_wait_t *w = S->waits; w; w = w->next)
            waits++;
    }
    cJSON_AddNumberToObject(o, "streams", S ? (double)ds__dict_count(&S->streams) : 0);
    cJSON_AddNumberToObject(o, "producers", (double)producers);
    cJSON_AddNumberToObject(o, "consumers", (double)consumers);
    cJSON_AddNumberToObject(o, "page_bytes", S ? (double)S->bytes : 0);
    cJSON_AddNumberToObject(o, "waits", (double)waits);
}
