/* Streams across workers (docs/streams.md): the stream's ring owner keeps,
 * per worker, how many producers and consumers it has (SC_PEER_REG); the
 * elements a local producer appends go to the owner, and the owner passes
 * them to every other worker with consumers (SC_PEER_PUSH), once per worker
 * whatever its number of consumers. Pushes to one worker go one at a time,
 * in order, from a queue; while any queue holds more than
 * DS_SC_PUSH_QUEUE_MAX bytes, local sends wait (flow control reaches
 * across workers). A worker that cannot be reached loses its queue and its
 * registrations: its consumers see nothing more, the others go on. Event
 * loop only. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/hash.h"
#include "common/log.h"
#include "worker/cluster/cluster_int.h"
#include "worker/ops/stream.h"

#define DS_SC_PUSH_QUEUE_MAX (64u << 20)
/* How long a push may wait for room on the receiving worker; within the
 * job's own timeout (30 s). */
#define DS_SC_PUSH_WAIT_MS 20000

typedef struct {
    char addr[300];
    uint64_t seq;
    uint32_t producers, consumers;
} sc_member_t;

typedef struct {
    ds_dict_node_t node;
    char *name;
    uint32_t len;
    sc_member_t *m;
    uint32_t n, cap;
} sc_reg_t;

typedef struct sc_push {
    struct sc_push *next;
    ds_wbuf_t req;
} sc_push_t;

typedef struct sc_target {
    struct sc_target *next;
    char addr[300];
    sc_push_t *head, *tail;
    uint64_t bytes;
    bool inflight;
} sc_target_t;

struct ds_cstreams {
    ds_dict_t regs;
    sc_target_t *targets;
    uint64_t seq;
    uint64_t pushes, pushed_elements, push_failures;
};

typedef struct ds_cstreams cs_t;

static bool reg_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const sc_reg_t *g = DS_DICT_ENTRY(n, sc_reg_t, node);
    return g->len == len && memcmp(g->name, key, len) == 0;
}

static const ds_dict_type_t reg_type = {reg_eq, NULL};

static cs_t *cs_get(ds_server_t *srv)
{
    if (srv->cstreams) return srv->cstreams;
    cs_t *c = calloc(1, sizeof(*c));
    if (c == NULL || ds__dict_init(&c->regs, &reg_type, NULL, 16) != 0) {
        free(c);
        return NULL;
    }
    srv->cstreams = c;
    return c;
}

static sc_reg_t *reg_find(cs_t *c, const char *name, uint32_t len, bool make)
{
    uint32_t h = ds__murmur3_32(name, len, 7);
    ds_dict_node_t *n = ds__dict_find(&c->regs, name, len, h);
    if (n) return DS_DICT_ENTRY(n, sc_reg_t, node);
    if (!make) return NULL;
    sc_reg_t *g = calloc(1, sizeof(*g));
    char *nm = malloc(len + 1);
    if (g == NULL || nm == NULL) {
        free(g);
        free(nm);
        return NULL;
    }
    memcpy(nm, name, len);
    nm[len] = '\0';
    g->name = nm;
    g->len = len;
    ds__dict_add(&c->regs, &g->node, h);
    return g;
}

/* The owner records worker addr's counts (unless seq is older than what it has). */
static void reg_set(cs_t *c, const char *name, uint32_t len, const char *addr, uint32_t al,
                    uint64_t seq, uint32_t producers, uint32_t consumers)
{
    sc_reg_t *g = reg_find(c, name, len, true);
    if (g == NULL) return;
    sc_member_t *m = NULL;
    for (uint32_t i = 0; i < g->n; i++)
        if (strlen(g->m[i].addr) == al && memcmp(g->m[i].addr, addr, al) == 0) m = &g->m[i];
    if (m == NULL) {
        if (g->n == g->cap) {
            uint32_t nc = g->cap ? g->cap * 2 : 4;
            sc_member_t *nm = realloc(g->m, nc * sizeof(*nm));
            if (nm == NULL) return;
            g->m = nm;
            g->cap = nc;
        }
        m = &g->m[g->n++];
        memset(m, 0, sizeof(*m));
        snprintf(m->addr, sizeof(m->addr), "%.*s", (int)(al < 299 ? al : 299), addr);
    } else if (seq < m->seq) {
        return;
    }
    m->seq = seq;
    m->producers = producers;
    m->consumers = consumers;
}

/* ---- pushes ---- */

static void target_send(ds_server_t *srv, sc_target_t *t);

static sc_target_t *target_get(cs_t *c, const char *addr)
{
    for (sc_target_t *t = c->targets; t; t = t->next)
        if (strcmp(t->addr, addr) == 0) return t;
    sc_target_t *t = calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    snprintf(t->addr, sizeof(t->addr), "%s", addr);
    t->next = c->targets;
    c->targets = t;
    return t;
}

/* addr is gone: its queue goes, and (at owners) its registrations. */
static void target_lost(ds_server_t *srv, sc_target_t *t)
{
    cs_t *c = srv->cstreams;
    while (t->head) {
        sc_push_t *p = t->head;
        t->head = p->next;
        ds__wbuf_free(&p->req);
        free(p);
    }
    t->tail = NULL;
    t->bytes = 0;
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &c->regs);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        sc_reg_t *g = DS_DICT_ENTRY(nd, sc_reg_t, node);
        for (uint32_t i = 0; i < g->n; i++)
            if (strcmp(g->m[i].addr, t->addr) == 0) g->m[i] = g->m[--g->n];
    }
}

static void push_done(ds_job_t *j)
{
    ds_server_t *srv = j->ctx;
    cs_t *c = srv->cstreams;
    sc_target_t *t = NULL;
    for (sc_target_t *x = c->targets; x; x = x->next)
        if (strcmp(x->addr, j->addr) == 0) t = x;
    if (t == NULL) return;
    t->inflight = false;
    if (j->transport_failed || j->status != DS_K_OK) {
        c->push_failures++;
        DS_LOG_WARN("streams: pushing elements to %s failed: %s", j->addr, j->err);
        if (j->transport_failed) target_lost(srv, t);
    }
    target_send(srv, t);
    ds__sc_wake(srv, NULL); /* room in the queues: waiting sends may go on */
}

static void target_send(ds_server_t *srv, sc_target_t *t)
{
    if (t->inflight || t->head == NULL) return;
    sc_push_t *p = t->head;
    t->head = p->next;
    if (t->head == NULL) t->tail = NULL;
    t->bytes -= p->req.len;
    ds_job_t *j = ds__job_new(NULL, t->addr, DS_OP_SC_PEER_PUSH, push_done);
    if (j == NULL) {
        ds__wbuf_free(&p->req);
        free(p);
        return;
    }
    ds__wbuf_free(&j->req);
    j->req = p->req; /* the job takes the frame over */
    free(p);
    j->ctx = srv;
    t->inflight = true;
    srv->cstreams->pushes++;
    ds__job_submit(srv, j);
}

static void push_to(ds_server_t *srv, const char *addr, const char *name, uint32_t len,
                    const char *origin, uint32_t ol, const uint8_t *const *els,
                    const uint32_t *lens, uint32_t n)
{
    cs_t *c = srv->cstreams;
    sc_target_t *t = target_get(c, addr);
    sc_push_t *p = calloc(1, sizeof(*p));
    if (t == NULL || p == NULL) {
        free(p);
        DS_LOG_WARN("streams: out of memory forwarding %u elements to %s", n, addr);
        return;
    }
    ds__wbuf_init(&p->req);
    ds__wbuf_str(&p->req, name, len);
    ds__wbuf_str(&p->req, origin, ol);
    ds__wbuf_u64(&p->req, 0);
    ds__wbuf_i32(&p->req, DS_SC_PUSH_WAIT_MS);
    ds__wbuf_u32(&p->req, n);
    for (uint32_t i = 0; i < n; i++)
        ds__wbuf_str(&p->req, els[i], lens[i]);
    if (p->req.oom) {
        ds__wbuf_free(&p->req);
        free(p);
        DS_LOG_WARN("streams: out of memory forwarding %u elements to %s", n, addr);
        return;
    }
    c->pushed_elements += n;
    t->bytes += p->req.len;
    if (t->tail)
        t->tail->next = p;
    else
        t->head = p;
    t->tail = p;
    target_send(srv, t);
}

/* ---- the ds_remote_t hooks ---- */

/* A SUBSCRIBE waiting for its registration: its handle. */
typedef struct {
    ds_req_t *d;
    uint64_t handle;
} reg_wait_t;

static void answer_handle(ds_req_t *r, uint64_t handle)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u64(&w, handle);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void reg_done(ds_job_t *j)
{
    if (j->transport_failed || j->status != DS_K_OK)
        DS_LOG_WARN("streams: registering with owner %s failed: %s", j->addr, j->err);
    reg_wait_t *rw = j->ctx;
    if (rw == NULL) return;
    /* The subscription works locally either way; the owner learns of it
     * again with the next change or ring change. */
    answer_handle(rw->d, rw->handle);
    free(rw);
}

void ds__cluster_stream_reg(ds_server_t *srv, const char *name, uint32_t len, uint32_t producers,
                            uint32_t consumers, ds_req_t *r, uint64_t handle)
{
    cs_t *c = cs_get(srv);
    const char *owner = ds__cluster_owner(srv, name, len);
    const char *self = ds__cluster_self(srv);
    if (c == NULL || owner == NULL || strcmp(owner, self) == 0) {
        if (c && owner)
            reg_set(c, name, len, self, (uint32_t)strlen(self), ++c->seq, producers, consumers);
        if (r) answer_handle(r, handle);
        return;
    }
    uint64_t seq = ++c->seq;
    ds_job_t *j = ds__job_new(NULL, owner, DS_OP_SC_PEER_REG, reg_done);
    reg_wait_t *rw = r && j ? malloc(sizeof(*rw)) : NULL;
    if (j == NULL || (r && rw == NULL)) {
        free(j);
        if (r) answer_handle(r, handle);
        return;
    }
    if (rw) {
        rw->d = ds__req_park(r, NULL, NULL);
        if (rw->d == NULL) {
            free(rw);
            free(j);
            return answer_handle(r, handle);
        }
        rw->handle = handle;
        j->ctx = rw;
    }
    ds__wbuf_str(&j->req, name, len);
    ds__wbuf_cstr(&j->req, self);
    ds__wbuf_u64(&j->req, seq);
    ds__wbuf_u32(&j->req, producers);
    ds__wbuf_u32(&j->req, consumers);
    ds__job_submit(srv, j);
}

bool ds__cluster_stream_room(ds_server_t *srv)
{
    cs_t *c = srv->cstreams;
    if (c == NULL) return true;
    for (sc_target_t *t = c->targets; t; t = t->next)
        if (t->bytes > DS_SC_PUSH_QUEUE_MAX) return false;
    return true;
}

void ds__cluster_stream_forward(ds_server_t *srv, const char *name, uint32_t len,
                                const char *origin, uint32_t ol, const uint8_t *const *els,
                                const uint32_t *lens, uint32_t n)
{
    cs_t *c = cs_get(srv);
    const char *owner = ds__cluster_owner(srv, name, len);
    const char *self = ds__cluster_self(srv);
    if (c == NULL || owner == NULL) return;
    if (strcmp(owner, self) != 0) {
        /* Not the owner: a local producer's elements go to the owner, once. */
        if (origin == NULL)
            push_to(srv, owner, name, len, self, (uint32_t)strlen(self), els, lens, n);
        return;
    }
    sc_reg_t *g = reg_find(c, name, len, false);
    if (g == NULL) return;
    if (origin == NULL) {
        origin = self;
        ol = (uint32_t)strlen(self);
    }
    for (uint32_t i = 0; i < g->n; i++) {
        const sc_member_t *m = &g->m[i];
        if (m->consumers == 0 || strcmp(m->addr, self) == 0) continue;
        if (strlen(m->addr) == ol && memcmp(m->addr, origin, ol) == 0) continue;
        push_to(srv, m->addr, name, len, origin, ol, els, lens, n);
    }
}

static void counts(cs_t *c, const char *name, uint32_t len, uint64_t v[2])
{
    v[0] = v[1] = 0;
    sc_reg_t *g = c ? reg_find(c, name, len, false) : NULL;
    for (uint32_t i = 0; g && i < g->n; i++) {
        if (g->m[i].producers) v[0]++;
        v[1] += g->m[i].consumers;
    }
}

static void reply_counts(ds_req_t *r, const uint64_t v[2])
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u64(&w, v[0]);
    ds__wbuf_u64(&w, v[1]);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
}

static void query_done(ds_job_t *j)
{
    ds_req_t *d = j->ctx;
    if (j->transport_failed || j->status != DS_K_OK) {
        ds__req_error(d, j->transport_failed ? DS_K_RPC_UNAVAILABLE : (ds_status_t)j->status,
                      "asking stream owner %s failed: %s", j->addr, j->err);
        return;
    }
    uint64_t v[2];
    v[0] = ds__rbuf_u64(&j->r);
    v[1] = ds__rbuf_u64(&j->r);
    if (j->r.err) {
        ds__req_error(d, DS_K_RUNTIME_ERROR, "stream owner %s answered a malformed count", j->addr);
        return;
    }
    reply_counts(d, v);
}

void ds__cluster_stream_query(ds_server_t *srv, ds_req_t *r, const char *name, uint32_t len)
{
    const char *owner = ds__cluster_owner(srv, name, len);
    uint64_t v[2];
    if (owner == NULL || strcmp(owner, ds__cluster_self(srv)) == 0) {
        counts(srv->cstreams, name, len, v);
        return reply_counts(r, v);
    }
    ds_job_t *j = ds__job_new(NULL, owner, DS_OP_SC_PEER_QUERY, query_done);
    ds_req_t *d = j ? ds__req_park(r, NULL, NULL) : NULL;
    if (d == NULL) {
        free(j); /* never submitted: nothing else holds it */
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
    ds__wbuf_str(&j->req, name, len);
    j->ctx = d;
    ds__job_submit(srv, j);
}

/* ---- delete, through the owner ---- */

/* This worker's copy of the stream goes, unless it has producers or
 * consumers. Returns whether there was a copy. */
static bool drop_local(ds_server_t *srv, const char *name, uint32_t len, bool *in_use)
{
    sc_stream_t *st = srv->streams ? ds__sc_find(srv->streams, name, len) : NULL;
    *in_use = st && (st->producers || st->consumers);
    if (st == NULL || *in_use) return st != NULL;
    ds__sc_delete(srv, st);
    return true;
}

/* The owner's delete: waits for the other workers' drops, then answers. */
typedef struct {
    ds_req_t *d;
    int outstanding;
} del_wait_t;

static void del_finish(del_wait_t *w)
{
    if (--w->outstanding > 0) return;
    ds__req_error(w->d, DS_K_OK, "%s", "");
    free(w);
}

static void drop_done(ds_job_t *j)
{
    if (j->transport_failed || (j->status != DS_K_OK && j->status != DS_K_SC_STREAM_NOT_FOUND))
        DS_LOG_WARN("streams: dropping stream at %s failed: %s", j->addr, j->err);
    del_finish(j->ctx);
}

static void reg_remove(cs_t *c, sc_reg_t *g)
{
    ds__dict_remove(&c->regs, &g->node);
    free(g->name);
    free(g->m);
    free(g);
}

/* At the owner: refused while any worker has a producer or consumer
 * (Yuanrong's master's messages); else every worker that registered drops
 * its copy, and r is answered once they have. */
static void owner_delete(ds_server_t *srv, ds_req_t *r, const char *name, uint32_t len,
                         const char *from, uint32_t fl)
{
    cs_t *c = cs_get(srv);
    if (c == NULL) return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    sc_reg_t *g = reg_find(c, name, len, false);
    uint32_t pubs = 0, subs = 0;
    for (uint32_t i = 0; g && i < g->n; i++) {
        pubs += g->m[i].producers > 0;
        subs += g->m[i].consumers > 0;
    }
    if (pubs)
        return ds__req_error(r, DS_K_SC_STREAM_IN_USE,
                             "Stream:<%.*s>, State:<Has pub node in global scope>, Number:<%u>, "
                             "Request src:<%.*s>",
                             (int)len, name, pubs, (int)fl, from);
    if (subs)
        return ds__req_error(r, DS_K_SC_STREAM_IN_USE,
                             "Stream:<%.*s>, State:<Has sub node in global scope>, Number:<%u>, "
                             "Request src:<%.*s>",
                             (int)len, name, subs, (int)fl, from);
    bool in_use;
    bool had = drop_local(srv, name, len, &in_use);
    if (in_use)
        return ds__req_error(r, DS_K_SC_STREAM_IN_USE,
                             "Stream:<%.*s>, State:<Has pub or sub node in global scope>, "
                             "Number:<1>, Request src:<%.*s>",
                             (int)len, name, (int)fl, from);
    if (g == NULL) {
        if (had) return ds__req_error(r, DS_K_OK, "%s", "");
        return ds__req_error(r, DS_K_SC_STREAM_NOT_FOUND, "Stream %.*s not found", (int)len, name);
    }
    del_wait_t *w = malloc(sizeof(*w));
    ds_req_t *d = w ? ds__req_park(r, NULL, NULL) : NULL;
    if (d == NULL) {
        free(w);
        reg_remove(c, g);
        return ds__req_error(r, DS_K_OK, "%s", "");
    }
    w->d = d;
    w->outstanding = 1;
    const char *self = ds__cluster_self(srv);
    for (uint32_t i = 0; i < g->n; i++) {
        const char *a = g->m[i].addr;
        if (strcmp(a, self) == 0 || (strlen(a) == fl && memcmp(a, from, fl) == 0)) continue;
        ds_job_t *j = ds__job_new(NULL, a, DS_OP_SC_PEER_DROP, drop_done);
        if (j == NULL) continue;
        ds__wbuf_str(&j->req, name, len);
        j->ctx = w;
        w->outstanding++;
        ds__job_submit(srv, j);
    }
    reg_remove(c, g);
    del_finish(w);
}

/* A client's delete at a worker that is not the owner: the owner's answer,
 * then this worker's own copy. */
typedef struct {
    ds_server_t *srv;
    ds_req_t *d;
    uint32_t len;
    char name[];
} del_req_t;

static void delete_done(ds_job_t *j)
{
    del_req_t *q = j->ctx;
    if (j->transport_failed) {
        ds__req_error(q->d, DS_K_RPC_UNAVAILABLE, "asking stream owner %s failed: %s", j->addr,
                      j->err);
    } else if (j->status != DS_K_OK && j->status != DS_K_SC_STREAM_NOT_FOUND) {
        ds__req_error(q->d, (ds_status_t)j->status, "%s", j->err);
    } else {
        bool in_use;
        bool had = drop_local(q->srv, q->name, q->len, &in_use);
        if (in_use)
            ds__req_error(q->d, DS_K_SC_STREAM_IN_USE, "Stream %.*s is in use on this worker",
                          (int)q->len, q->name);
        else if (j->status == DS_K_OK || had)
            ds__req_error(q->d, DS_K_OK, "%s", "");
        else
            ds__req_error(q->d, DS_K_SC_STREAM_NOT_FOUND, "Stream %.*s not found", (int)q->len,
                          q->name);
    }
    free(q);
}

void ds__cluster_stream_delete(ds_server_t *srv, ds_req_t *r, const char *name, uint32_t len)
{
    const char *owner = ds__cluster_owner(srv, name, len);
    const char *self = ds__cluster_self(srv);
    if (owner == NULL || strcmp(owner, self) == 0)
        return owner_delete(srv, r, name, len, self, (uint32_t)strlen(self));
    ds_job_t *j = ds__job_new(NULL, owner, DS_OP_SC_PEER_DELETE, delete_done);
    del_req_t *q = j ? malloc(sizeof(*q) + len) : NULL;
    ds_req_t *d = q ? ds__req_park(r, NULL, NULL) : NULL;
    if (d == NULL) {
        free(q);
        free(j); /* never submitted */
        return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    }
    q->srv = srv;
    q->d = d;
    q->len = len;
    memcpy(q->name, name, len);
    ds__wbuf_str(&j->req, name, len);
    ds__wbuf_cstr(&j->req, self);
    j->ctx = q;
    ds__job_submit(srv, j);
}

/* SC_PEER_REG, SC_PEER_QUERY and SC_PEER_DELETE at the owner; SC_PEER_DROP
 * anywhere. */
void ds__cluster_stream_peer_op(ds_server_t *srv, ds_req_t *r)
{
    cs_t *c = cs_get(srv);
    if (c == NULL) return ds__req_error(r, DS_K_OUT_OF_MEMORY, "worker out of memory");
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *name;
    uint32_t nl = ds__rbuf_str(&rb, &name);
    if (r->op == DS_OP_SC_PEER_DROP) {
        if (!ds__rbuf_done(&rb) || nl == 0 || nl > DS_SC_NAME_MAX)
            return ds__req_error(r, DS_K_INVALID, "malformed sc_peer_drop request");
        bool in_use;
        bool had = drop_local(srv, name, nl, &in_use);
        if (in_use)
            return ds__req_error(r, DS_K_SC_STREAM_IN_USE, "Stream %.*s is in use on this worker",
                                 (int)nl, name);
        if (!had)
            return ds__req_error(r, DS_K_SC_STREAM_NOT_FOUND, "Stream %.*s not found", (int)nl,
                                 name);
        return ds__req_error(r, DS_K_OK, "%s", "");
    }
    if (r->op == DS_OP_SC_PEER_DELETE) {
        const char *from;
        uint32_t fl = ds__rbuf_str(&rb, &from);
        if (!ds__rbuf_done(&rb) || nl == 0 || nl > DS_SC_NAME_MAX || fl == 0 || fl >= 300)
            return ds__req_error(r, DS_K_INVALID, "malformed sc_peer_delete request");
        return owner_delete(srv, r, name, nl, from, fl);
    }
    if (r->op == DS_OP_SC_PEER_QUERY) {
        if (!ds__rbuf_done(&rb) || nl == 0)
            return ds__req_error(r, DS_K_INVALID, "malformed sc_peer_query request");
        uint64_t v[2];
        counts(c, name, nl, v);
        return reply_counts(r, v);
    }
    const char *addr;
    uint32_t al = ds__rbuf_str(&rb, &addr);
    uint64_t seq = ds__rbuf_u64(&rb);
    uint32_t p = ds__rbuf_u32(&rb), k = ds__rbuf_u32(&rb);
    if (!ds__rbuf_done(&rb) || nl == 0 || nl > DS_SC_NAME_MAX || al == 0 || al >= 300)
        return ds__req_error(r, DS_K_INVALID, "malformed sc_peer_reg request");
    reg_set(c, name, nl, addr, al, seq, p, k);
    ds__req_error(r, DS_K_OK, "%s", "");
}

void ds__cluster_stream_stats(ds_server_t *srv, cJSON *cl)
{
    cs_t *c = srv->cstreams;
    cJSON *o = cJSON_AddObjectToObject(cl, "streams");
    if (o == NULL) return;
    uint64_t queued = 0;
    for (sc_target_t *t = c ? c->targets : NULL; t; t = t->next)
        queued += t->bytes;
    cJSON_AddNumberToObject(o, "pushes", c ? (double)c->pushes : 0);
    cJSON_AddNumberToObject(o, "pushed_elements", c ? (double)c->pushed_elements : 0);
    cJSON_AddNumberToObject(o, "push_failures", c ? (double)c->push_failures : 0);
    cJSON_AddNumberToObject(o, "queued_bytes", (double)queued);
    cJSON_AddNumberToObject(o, "registered_streams", c ? (double)ds__dict_count(&c->regs) : 0);
}

void ds__cluster_stream_free(ds_server_t *srv)
{
    cs_t *c = srv->cstreams;
    if (c == NULL) return;
    while (c->targets) {
        sc_target_t *t = c->targets;
        c->targets = t->next;
        while (t->head) {
            sc_push_t *p = t->head;
            t->head = p->next;
            ds__wbuf_free(&p->req);
            free(p);
        }
        free(t);
    }
    ds_dict_iter_t it;
    ds__dict_iter_init(&it, &c->regs);
    for (ds_dict_node_t *nd; (nd = ds__dict_iter_next(&it)) != NULL;) {
        sc_reg_t *g = DS_DICT_ENTRY(nd, sc_reg_t, node);
        ds__dict_remove(&c->regs, nd);
        free(g->name);
        free(g->m);
        free(g);
    }
    ds__dict_clear(&c->regs);
    free(c);
    srv->cstreams = NULL;
}
