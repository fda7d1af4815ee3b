/* Copies of a write on more than one worker.
 *
 * Memory replicas (--replica_num N): a SET on worker A publishes locally,
 * pushes the value to N - 1 other members (REPL_PUT, the ring successors of
 * the key that are not A), and only then tells the owner every holder at
 * once (REPL_META); the client hears back after the owner recorded them. A
 * write is named by its origin and the origin's version (each holder's own
 * version differs: versions are per worker), which every holder keeps in
 * its copies table, so that after a ring change each holder can register
 * its copy with the key's new owner as a copy of the same write. When a
 * member leaves, each owner makes the copies its keys lost again elsewhere
 * (REPL_COPY asks a holder to push one), after a short delay that lets the
 * re-registrations arrive first.
 *
 * Hot copies (--enable_data_replication): a GET that pulled a value from
 * another worker keeps it as a local, evictable copy once the key's owner
 * recorded it (HOT_ADD); an overwrite or delete anywhere then drops it
 * (HOT_DROP) before it is answered, as with every other copy. The copy
 * stays invisible until the owner's answer, and a HOT_DROP that arrives
 * before that answer cancels it, so nothing stale is served after a write
 * or delete returned. A hot copy whose owner changes is dropped (it is a
 * cache: the new owner would not know to invalidate it).
 *
 * Loop thread only, like the rest of the cluster's state. */
#include "worker/cluster/cluster_repl_int.h"

#include "cJSON.h"
#include "common/clock.h"
#include "common/dict.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/log.h"
#include "worker/ops/subs.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool copy_key_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const copy_t *c = DS_DICT_ENTRY(n, copy_t, node);
    return c->keylen == len && memcmp(c->key, key, len) == 0;
}

static void copy_destroy(ds_dict_node_t *n, void *ctx)
{
    ds_repl_t *rp = ctx;
    copy_t *c = DS_DICT_ENTRY(n, copy_t, node);
    if (c->kind == COPY_HOT) {
        rp->nhot--;
        rp->hot_bytes -= c->size;
    }
    if (c->obj) ds__store_unref(rp->srv->store, c->obj);
    free(c);
}

static const ds_dict_type_t copy_type = {copy_key_eq, copy_destroy};

ds_repl_t *ds__repl_new(ds_server_t *srv)
{
    ds_repl_t *rp = calloc(1, sizeof(*rp));
    if (rp == NULL) return NULL;
    rp->srv = srv;
    if (ds__dict_init(&rp->copies, &copy_type, rp, 1024) != 0) {
        free(rp);
        return NULL;
    }
    return rp;
}

void ds__repl_free(ds_repl_t *rp)
{
    if (rp == NULL) return;
    ds__dict_clear(&rp->copies);
    for (size_t i = 0; i < rp->nnames; i++)
        free(rp->names[i]);
    free(rp->names);
    for (size_t i = 0; i < rp->nstale; i++)
        free(rp->stale[i]);
    free(rp->stale);
    free(rp->stale_len);
    for (size_t i = 0; i < sizeof(rp->rereg) / sizeof(rp->rereg[0]); i++)
        if (rp->rereg[i]) {
            ds__wbuf_free(&rp->rereg[i]->req);
            free(rp->rereg[i]);
        }
    free(rp);
}

const char *ds__repl_intern(ds_repl_t *rp, const char *s, size_t len)
{
    for (size_t i = 0; i < rp->nnames; i++)
        if (strlen(rp->names[i]) == len && memcmp(rp->names[i], s, len) == 0) return rp->names[i];
    char **nn = realloc(rp->names, (rp->nnames + 1) * sizeof(*nn));
    if (nn == NULL) return NULL;
    rp->names = nn;
    rp->names[rp->nnames] = strndup(s, len);
    return rp->names[rp->nnames] ? rp->names[rp->nnames++] : NULL;
}

copy_t *ds__repl_copy_find(ds_repl_t *rp, const char *key, size_t len)
{
    ds_dict_node_t *n = ds__dict_find(&rp->copies, key, len, ds__murmur3_32(key, len, 0));
    return n ? DS_DICT_ENTRY(n, copy_t, node) : NULL;
}

void ds__repl_copy_remove(ds_repl_t *rp, copy_t *c)
{
    ds__dict_remove(&rp->copies, &c->node);
    copy_destroy(&c->node, rp);
}

/* A fresh entry for key (replacing what was there). */
copy_t *ds__repl_copy_set(ds_repl_t *rp, const char *key, size_t len, copy_kind_t kind)
{
    copy_t *old = ds__repl_copy_find(rp, key, len);
    if (old) ds__repl_copy_remove(rp, old);
    copy_t *c = calloc(1, sizeof(*c) + len + 1);
    if (c == NULL) return NULL;
    c->kind = (uint8_t)kind;
    c->keylen = (uint32_t)len;
    memcpy(c->key, key, len);
    ds__dict_add(&rp->copies, &c->node, ds__murmur3_32(key, len, 0));
    return c;
}

uint32_t ds__repl_want(ds_server_t *srv)
{
    uint32_t want = (uint32_t)srv->cfg.replica_num;
    uint32_t members = (uint32_t)ds__ring_size(ds__cluster_ring(srv));
    if (want > members) want = members;
    return want ? want : 1;
}

/* Up to max members other than the holders named in skip (nskip), in the
 * order of the ring's points from the key's hash: where its copies go. */
uint32_t ds__repl_pick_targets(ds_server_t *srv, const char *key, size_t len, const char **skip,
                               uint32_t nskip, const char **out, uint32_t max)
{
    const ds_ring_t *ring = ds__cluster_ring(srv);
    size_t np = ds__ring_npoints(ring);
    uint32_t h = ds__murmur3_32(key, len, 0), k = 0;
    size_t start = 0;
    const char *m;
    while (start < np && ds__ring_point(ring, start, &m) < h)
        start++;
    for (size_t s = 0; s < np && k < max; s++) {
        (void)ds__ring_point(ring, (start + s) % np, &m);
        bool taken = false;
        for (uint32_t i = 0; i < nskip && !taken; i++)
            taken = strcmp(skip[i], m) == 0;
        for (uint32_t i = 0; i < k && !taken; i++)
            taken = strcmp(out[i], m) == 0;
        if (!taken) out[k++] = m;
    }
    return k;
}

/* The REPL_PUT of obj (a published object; the job takes a reference). */
ds_job_t *ds__repl_push_job(ds_server_t *srv, ds_pend_t *p, const char *target, ds_obj_t *o,
                            const char *origin, uint64_t origin_version, uint32_t want,
                            void (*done)(ds_job_t *))
{
    ds_job_t *j = ds__job_new(p, target, DS_OP_REPL_PUT, done);
    if (j == NULL) return NULL;
    ds__wbuf_str(&j->req, o->key, o->keylen);
    /* A replica is memory only: it is evictable when the write is. */
    ds__wbuf_u8(&j->req, o->write_mode == DS_WRITE_NONE_L2_CACHE_EVICT ||
                                 o->write_mode == DS_WRITE_BACK_L2_CACHE_EVICT
                             ? DS_WRITE_NONE_L2_CACHE_EVICT
                             : DS_WRITE_NONE_L2_CACHE);
    ds__wbuf_u32(&j->req, o->ttl_second);
    ds__wbuf_cstr(&j->req, origin);
    ds__wbuf_u64(&j->req, origin_version);
    ds__wbuf_u32(&j->req, want);
    ds__store_ref(o);
    j->obj = o;
    j->src = ds__store_data(srv->store, o);
    j->src_len = o->size;
    j->timeout_ms = 30000 + o->size / 1000; /* at least 1 GB/s... or a minute per 30 GB */
    return j;
}

void ds__repl_peer_op(ds_server_t *srv, ds_req_t *r)
{
    switch (r->op) {
    case DS_OP_REPL_PUT:
        ds__repl_op_put(srv, r);
        break;
    case DS_OP_REPL_META:
        ds__repl_op_meta(srv, r);
        break;
    case DS_OP_REPL_COPY:
        ds__repl_op_copy(srv, r);
        break;
    case DS_OP_HOT_ADD:
        ds__repl_op_hot_add(srv, r);
        break;
    default:
        ds__repl_op_hot_drop(srv, r);
    }
}

void ds__repl_forget(ds_server_t *srv, const char *key, uint32_t keylen)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    copy_t *c = ds__repl_copy_find(rp, key, keylen);
    if (c && c->kind == COPY_HOT_PENDING)
        c->cancelled = true; /* what it pulled is older than this */
    else if (c)
        ds__repl_copy_remove(rp, c);
}

bool ds__repl_tracked(ds_server_t *srv, const ds_obj_t *o)
{
    copy_t *c = ds__repl_copy_find(ds__cluster_repl(srv), o->key, o->keylen);
    return c && c->version == o->version && (c->kind != COPY_WRITE || c->want > 1);
}

uint64_t ds__repl_hot_bytes(ds_server_t *srv)
{
    return ds__cluster_repl(srv)->hot_bytes;
}

bool ds__repl_is_hot(ds_server_t *srv, const ds_obj_t *o)
{
    copy_t *c = ds__repl_copy_find(ds__cluster_repl(srv), o->key, o->keylen);
    return c && c->kind == COPY_HOT && c->version == o->version;
}

void ds__repl_stats(ds_server_t *srv, struct cJSON *cl)
{
    ds_repl_t *rp = ds__cluster_repl(srv);
    cJSON *o = cJSON_AddObjectToObject(cl, "replication");
    cJSON_AddNumberToObject(o, "replica_num", (double)srv->cfg.replica_num);
    cJSON_AddNumberToObject(o, "enable_data_replication", srv->cfg.enable_data_replication);
    cJSON_AddNumberToObject(o, "pushes", (double)rp->pushes);
    cJSON_AddNumberToObject(o, "push_failures", (double)rp->push_failures);
    cJSON_AddNumberToObject(o, "received", (double)rp->received);
    cJSON_AddNumberToObject(o, "repairs", (double)rp->repairs);
    cJSON_AddNumberToObject(o, "hot_kept", (double)rp->hot_kept);
    cJSON_AddNumberToObject(o, "hot_refused", (double)rp->hot_refused);
    cJSON_AddNumberToObject(o, "hot_dropped", (double)rp->hot_dropped);
    cJSON_AddNumberToObject(o, "hot_copies", (double)rp->nhot);
    cJSON_AddNumberToObject(o, "hot_bytes", (double)rp->hot_bytes);
    cJSON_AddNumberToObject(o, "copies_tracked", (double)ds__dict_count(&rp->copies));
}
