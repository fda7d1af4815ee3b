/* READ (a range of a value, Yuanrong's KVClient.Read) and GREF (global
 * reference counts, Yuanrong's ObjectClient.g_increase_ref /
 * g_decrease_ref / query_global_ref_num). Layouts in common/wire.h. */
#include "worker/ops/ops_int.h"

#include "common/clock.h"
#include "common/hash.h"
#include "common/keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- READ ---- */

void ds__ops_read(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    /* each entry is at least a 4-byte length, one key byte and two u64 */
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 21);
    if (rb.err || n == 0) {
        ds__req_error(r, DS_K_INVALID, "malformed READ: %u ranges (allowed 1..%u)", n,
                      DS_MAX_BATCH);
        return;
    }
    bool shm_ok = r->session && r->session->shm;
    struct iovec *segs = malloc(n * sizeof(*segs));
    ds_obj_t **refs = malloc(n * sizeof(*refs));
    if (segs == NULL || refs == NULL) {
        free(segs);
        free(refs);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    uint32_t nseg = 0, found = 0;
    ds_status_t first = DS_K_OK;
    char msg[256], first_msg[256] = "";
    uint64_t now = ds__now_ms();
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint64_t off = ds__rbuf_u64(&rb);
        uint64_t size = ds__rbuf_u64(&rb);
        ds_status_t st = DS_K_OK;
        ds_obj_t *o = NULL;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed READ: range %u truncated", i);
            st = DS_K_INVALID;
        } else if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else if ((o = ds__store_lookup(srv->store, k, kl, now)) == NULL) {
            snprintf(msg, sizeof(msg), "key '%.*s' not found", (int)kl, k);
            st = DS_K_NOT_FOUND;
        } else if (off > o->size) {
            snprintf(msg, sizeof(msg),
                     "offset %" PRIu64 " of key '%.*s' is beyond its size %" PRIu64, off, (int)kl,
                     k, o->size);
            st = DS_K_INVALID;
        }
        ds__wbuf_u32(&w, (uint32_t)st);
        if (st != DS_K_OK) {
            if (first == DS_K_OK) {
                first = st;
                snprintf(first_msg, sizeof(first_msg), "%s", msg);
            }
            ds__wbuf_u8(&w, DS_VAL_MISSING);
            ds__wbuf_u64(&w, 0);
            continue;
        }
        /* size 0: to the end; a range past the end is cut there */
        uint64_t len = o->size - off;
        if (size != 0 && size < len) len = size;
        found++;
        ds__store_ref(o);
        if (shm_ok) {
            /* The pin holds the whole value; the client sees the range. */
            uint64_t handle = ds__session_add(r->session, o, 0);
            if (handle != 0) {
                ds__wbuf_u8(&w, DS_VAL_SHM);
                ds__wbuf_u64(&w, len);
                ds__wbuf_u64(&w, ds__store_offset(srv->store, o) + off);
                ds__wbuf_u64(&w, handle);
                continue;
            }
        }
        ds__wbuf_u8(&w, DS_VAL_INLINE);
        ds__wbuf_u64(&w, len);
        segs[nseg].iov_base = ds__store_data(srv->store, o) + off;
        segs[nseg].iov_len = len;
        refs[nseg++] = o;
    }
    ds_status_t overall = found ? DS_K_OK : first;
    if (first != DS_K_OK) ds__ops_lead_error(&w, first_msg);
    ds__ops_reply_values(srv, r, overall, &w, segs, refs, nseg);
    free(segs);
    free(refs);
}

/* ---- GREF: global reference counts ---- */

/* A count per key, in a chained hash the worker owns (the object table
 * holds versions; a count outlives overwrites and may precede the put). */
typedef struct gref {
    struct gref *next;
    uint32_t count, keylen;
    char key[];
} gref_t;

struct ds_grefs {
    gref_t **b;
    uint32_t nb, n;
};

static gref_t **gref_find(struct ds_grefs *g, const char *k, uint32_t kl)
{
    gref_t **pp = &g->b[ds__murmur3_32(k, kl, 0x9e3779b9u) & (g->nb - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->keylen == kl && memcmp((*pp)->key, k, kl) == 0) return pp;
    return pp;
}

static int gref_grow(struct ds_grefs *g)
{
    uint32_t nb = g->nb ? g->nb * 2 : 64;
    gref_t **b = calloc(nb, sizeof(*b));
    if (b == NULL) return -1;
    for (uint32_t i = 0; i < g->nb; i++)
        for (gref_t *e = g->b[i], *nx; e; e = nx) {
            nx = e->next;
            gref_t **pp = &b[ds__murmur3_32(e->key, e->keylen, 0x9e3779b9u) & (nb - 1)];
            e->next = *pp;
            *pp = e;
        }
    free(g->b);
    g->b = b;
    g->nb = nb;
    return 0;
}

void ds__ops_grefs_free(ds_server_t *srv)
{
    struct ds_grefs *g = srv->grefs;
    if (g == NULL) return;
    for (uint32_t i = 0; i < g->nb; i++)
        for (gref_t *e = g->b[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    free(g->b);
    free(g);
    srv->grefs = NULL;
}

/* Applies delta to key's count; the count after it in *count. */
static ds_status_t gref_apply(ds_server_t *srv, const char *k, uint32_t kl, int32_t delta,
                              uint32_t *count, char *msg, size_t cap)
{
    struct ds_grefs *g = srv->grefs;
    if (g == NULL && (g = srv->grefs = calloc(1, sizeof(*g))) == NULL) goto oom;
    if (g->nb == 0 && gref_grow(g) != 0) goto oom;
    gref_t **pp = gref_find(g, k, kl);
    gref_t *e = *pp;
    *count = e ? e->count : 0;
    if (delta == 0) return DS_K_OK;
    if (delta < 0) {
        if (e == NULL) {
            snprintf(msg, cap, "key '%.*s' has no global reference", (int)kl, k);
            return DS_K_NOT_FOUND;
        }
        if (--e->count > 0) {
            *count = e->count;
            return DS_K_OK;
        }
        /* The last reference: the object goes with it. */
        *pp = e->next;
        free(e);
        g->n--;
        *count = 0;
        ds__store_delete(srv->store, k, kl);
        return DS_K_OK;
    }
    if (e) {
        if (e->count == UINT32_MAX) {
            snprintf(msg, cap, "key '%.*s' has too many global references", (int)kl, k);
            return DS_K_INVALID;
        }
        *count = ++e->count;
        return DS_K_OK;
    }
    if (g->n >= g->nb && gref_grow(g) != 0) goto oom;
    e = malloc(sizeof(*e) + kl);
    if (e == NULL) goto oom;
    memcpy(e->key, k, kl);
    e->keylen = kl;
    e->count = 1;
    pp = gref_find(g, k, kl);
    e->next = *pp;
    *pp = e;
    g->n++;
    *count = 1;
    return DS_K_OK;
oom:
    snprintf(msg, cap, "out of memory");
    return DS_K_OUT_OF_MEMORY;
}

void ds__ops_gref(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    int32_t delta = ds__rbuf_i32(&rb);
    uint32_t n = ds__rbuf_count(&rb, DS_MAX_BATCH, 5);
    if (rb.err || n == 0 || delta < -1 || delta > 1) {
        ds__req_error(r, DS_K_INVALID, "malformed GREF: delta %d (allowed -1, 0, 1), %u keys",
                      delta, n);
        return;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u32(&w, n);
    ds_status_t first = DS_K_OK;
    uint32_t ok = 0;
    char msg[256], first_msg[256] = "";
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&rb, &k);
        uint32_t count = 0;
        ds_status_t st;
        if (rb.err) {
            snprintf(msg, sizeof(msg), "malformed GREF: key %u truncated", i);
            st = DS_K_INVALID;
        } else if (ds__key_check(k, kl, msg, sizeof(msg)) != 0) {
            st = DS_K_INVALID;
        } else {
            st = gref_apply(srv, k, kl, delta, &count, msg, sizeof(msg));
        }
        if (st == DS_K_OK) {
            ok++;
        } else if (first == DS_K_OK) {
            first = st;
            snprintf(first_msg, sizeof(first_msg), "%s", msg);
        }
        ds__wbuf_u32(&w, (uint32_t)st);
        ds__wbuf_u32(&w, count);
    }
    if (first != DS_K_OK) ds__ops_lead_error(&w, first_msg);
    ds__req_reply(r, ok ? DS_K_OK : first, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}
