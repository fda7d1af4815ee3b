/* ROUND_ROBIN and KEY_PARTITIONS subscriptions (docs/streams.md): several
 * consumers share one subscription and each element goes to exactly one of
 * them. Elements are handed out as they are appended: ROUND_ROBIN in turn,
 * KEY_PARTITIONS by the element's key (its producer), each key sticking to
 * one consumer. A consumer that leaves hands what it held and had not
 * acknowledged to the others. Event loop only. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "worker/ops/stream.h"
#include "worker/ops/worker.h"

static int qent_cmp(const void *a, const void *b)
{
    uint64_t x = ((const sc_qent_t *)a)->id, y = ((const sc_qent_t *)b)->id;
    return x < y ? -1 : x > y;
}

static bool q_push(sc_end_t *e, uint64_t id, uint64_t key)
{
    if (e->qn == e->qcap) {
        uint32_t nc = e->qcap ? e->qcap * 2 : 64;
        sc_qent_t *nq = realloc(e->q, nc * sizeof(*nq));
        if (nq == NULL) return false;
        e->q = nq;
        e->qcap = nc;
    }
    e->q[e->qn].id = id;
    e->q[e->qn].key = key;
    e->qn++;
    return true;
}

/* The consumer holding the fewest keys (the first such in joining order). */
static sc_end_t *least_keys(const sc_sub_t *s, const sc_end_t *skip)
{
    sc_end_t *best = NULL;
    uint32_t best_n = UINT32_MAX;
    for (uint32_t i = 0; i < s->ncons; i++) {
        if (s->cons[i] == skip) continue;
        uint32_t n = 0;
        for (uint32_t k = 0; k < s->nkeys; k++)
            n += s->keys[k].e == s->cons[i];
        if (n < best_n) {
            best = s->cons[i];
            best_n = n;
        }
    }
    return best;
}

/* The consumer that gets an element of key: KEY_PARTITIONS, the key's own
 * (given on first sight); ROUND_ROBIN, the next in turn. */
static sc_end_t *pick(sc_sub_t *s, uint64_t key)
{
    if (s->ncons == 0) return NULL;
    if (s->type == DS_SC_SUB_ROUND_ROBIN) return s->cons[s->turn++ % s->ncons];
    for (uint32_t k = 0; k < s->nkeys; k++)
        if (s->keys[k].key == key) return s->keys[k].e;
    sc_end_t *e = least_keys(s, NULL);
    if (s->nkeys == s->capkeys) {
        uint32_t nc = s->capkeys ? s->capkeys * 2 : 8;
        sc_keymap_t *nk = realloc(s->keys, nc * sizeof(*nk));
        if (nk == NULL) return e; /* unmapped: still delivered, maybe elsewhere next time */
        s->keys = nk;
        s->capkeys = nc;
    }
    s->keys[s->nkeys].key = key;
    s->keys[s->nkeys].e = e;
    s->nkeys++;
    return e;
}

static void give(sc_sub_t *s, uint64_t id, uint64_t key)
{
    sc_end_t *e = pick(s, key);
    if (e && !q_push(e, id, key))
        DS_LOG_WARN("streams: out of memory: element %" PRIu64 " skipped for subscription %s", id,
                    s->name);
}

void ds__sc_sub_assign(sc_stream_t *st, uint64_t id, uint64_t key)
{
    for (sc_sub_t *s = st->subs; s; s = s->next) {
        if (s->type == DS_SC_SUB_STREAM || id < s->cursor) continue;
        give(s, id, key);
        s->cursor = id + 1;
    }
}

bool ds__sc_sub_join(sc_stream_t *st, sc_sub_t *s, sc_end_t *e)
{
    if (s->ncons == s->capcons) {
        uint32_t nc = s->capcons ? s->capcons * 2 : 4;
        sc_end_t **ncs = realloc(s->cons, nc * sizeof(*ncs));
        if (ncs == NULL) return false;
        s->cons = ncs;
        s->capcons = nc;
    }
    s->cons[s->ncons++] = e;
    /* A new subscription of a retaining stream starts at the oldest element
     * held: those already appended are handed out now (their producer is
     * not known any more: key 0). */
    for (uint64_t id = s->cursor; id < st->next_id; id++)
        give(s, id, 0);
    if (s->cursor < st->next_id) s->cursor = st->next_id;
    return true;
}

uint32_t ds__sc_sub_leave(sc_sub_t *s, sc_end_t *e)
{
    uint32_t i = 0;
    while (i < s->ncons && s->cons[i] != e)
        i++;
    if (i == s->ncons) return s->ncons;
    memmove(&s->cons[i], &s->cons[i + 1], (s->ncons - i - 1) * sizeof(*s->cons));
    s->ncons--;
    /* Its keys go to the consumers holding fewest; the keymap keeps no
     * entry for a consumer that is gone. */
    for (uint32_t k = 0; k < s->nkeys;) {
        if (s->keys[k].e != e) {
            k++;
            continue;
        }
        sc_end_t *to = s->ncons ? least_keys(s, e) : NULL;
        if (to) {
            s->keys[k++].e = to;
        } else {
            s->keys[k] = s->keys[--s->nkeys];
        }
    }
    if (s->ncons > 0 && e->qn > 0) {
        /* Redelivery: what it received and did not acknowledge and what it
         * had not received yet go to the others, each keeping ascending
         * order among what it has not received. */
        for (uint32_t k = 0; k < e->qn; k++)
            give(s, e->q[k].id, e->q[k].key);
        for (uint32_t c = 0; c < s->ncons; c++) {
            sc_end_t *o = s->cons[c];
            qsort(o->q + o->qdeliv, o->qn - o->qdeliv, sizeof(*o->q), qent_cmp);
        }
    }
    free(e->q);
    e->q = NULL;
    e->qn = e->qdeliv = e->qcap = 0;
    return s->ncons;
}

void ds__sc_sub_free(sc_sub_t *s)
{
    free(s->cons);
    free(s->keys);
}

uint64_t ds__sc_sub_low(const sc_sub_t *s)
{
    uint64_t low = s->cursor;
    for (uint32_t c = 0; c < s->ncons; c++) {
        const sc_end_t *e = s->cons[c];
        for (uint32_t k = 0; k < e->qn; k++)
            if (e->q[k].id < low) low = e->q[k].id;
    }
    return low;
}

uint64_t ds__sc_sub_available(const sc_end_t *e)
{
    return e->qn - e->qdeliv;
}

bool ds__sc_sub_ack(sc_end_t *e, uint64_t id)
{
    if (id > e->max_deliv) return false;
    uint32_t w = 0;
    for (uint32_t k = 0; k < e->qdeliv; k++)
        if (e->q[k].id > id) e->q[w++] = e->q[k];
    uint32_t gone = e->qdeliv - w;
    if (gone) {
        memmove(&e->q[w], &e->q[e->qdeliv], (e->qn - e->qdeliv) * sizeof(*e->q));
        e->qdeliv -= gone;
        e->qn -= gone;
    }
    return true;
}

/* The page holding id, searched from hint on (then from the head). */
static sc_page_t *page_at(sc_stream_t *st, sc_page_t *hint, uint64_t id)
{
    for (int pass = 0; pass < 2; pass++) {
        for (sc_page_t *p = pass ? st->head : hint; p; p = p->next)
            if (id >= p->first_id && id < p->first_id + p->n) return p;
        if (hint == NULL) break;
    }
    return NULL;
}

void ds__sc_sub_reply(ds_server_t *srv, ds_req_t *r, sc_end_t *e, uint32_t max, bool in_place)
{
    sc_stream_t *st = e->st;
    uint64_t avail = ds__sc_sub_available(e);
    if (max == 0 || max > avail) max = (uint32_t)avail;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    size_t count_at = w.len;
    ds__wbuf_u32(&w, 0);
    struct iovec *segs = max ? malloc(max * sizeof(*segs)) : NULL;
    ds_obj_t **refs = max ? malloc(max * sizeof(*refs)) : NULL;
    if (max && (segs == NULL || refs == NULL)) {
        free(segs);
        free(refs);
        ds__wbuf_free(&w);
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
    uint32_t nseg = 0, n = 0;
    uint64_t bytes = 0;
    sc_page_t *p = st->head;
    while (n < max) {
        uint64_t id = e->q[e->qdeliv + n].id;
        p = page_at(st, p, id);
        if (p == NULL) break; /* cannot happen: held elements keep their pages */
        uint32_t i = (uint32_t)(id - p->first_id);
        uint64_t from = p->off[i], to = i + 1 < p->n ? p->off[i + 1] : p->used;
        if (n > 0 && bytes + (to - from) > DS_SC_RECV_MAX_BYTES) break;
        ds__wbuf_u64(&w, id);
        ds__wbuf_u32(&w, (uint32_t)(to - from));
        bytes += to - from;
        if (in_place) {
            /* A local consumer reads the page where it is (held until acked). */
            ds__wbuf_u64(&w, (uint64_t)(p->base - srv->arena.base) + from);
        } else if (nseg > 0 && refs[nseg - 1] == p->space && /* adjacent: one segment */
                   (uint8_t *)segs[nseg - 1].iov_base + segs[nseg - 1].iov_len == p->base + from) {
            segs[nseg - 1].iov_len += to - from;
        } else {
            segs[nseg].iov_base = p->base + from;
            segs[nseg].iov_len = to - from;
            ds__store_ref(p->space);
            refs[nseg++] = p->space;
        }
        if (id > e->max_deliv) e->max_deliv = id;
        n++;
    }
    if (w.oom) {
        for (uint32_t k = 0; k < nseg; k++)
            ds__store_unref(srv->store, refs[k]);
        free(segs);
        free(refs);
        ds__wbuf_free(&w);
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
    uint8_t *cnt = w.buf + count_at;
    cnt[0] = (uint8_t)n;
    cnt[1] = (uint8_t)(n >> 8);
    cnt[2] = (uint8_t)(n >> 16);
    cnt[3] = (uint8_t)(n >> 24);
    e->qdeliv += n;
    ds__req_reply(r, DS_K_OK, &w, segs, nseg, refs, nseg, -1);
    free(segs);
    free(refs);
    ds__wbuf_free(&w);
}
