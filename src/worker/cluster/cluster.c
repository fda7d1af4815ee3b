/* Cluster plumbing (see cluster.h): the membership and watch threads, the job
 * thread pool with its completion eventfd, pending operations, and the ring
 * rebuilt from each member list the watch delivers. */
#include "worker/cluster/cluster_int.h"

#include "common/tls.h"
#include "common/clock.h"
#include "common/etcd.h"
#include "common/hash.h"
#include "common/log.h"
#include "worker/cluster/peer.h"
#include "worker/cluster/peer_auth.h"
#include "worker/cluster/ring.h"
#include "worker/net/ucx.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define DS_JOB_THREADS 4

typedef struct {
    char addr[300];
    char id[64];
    char ucx[DS_UCX_ADDR_HEX_MAX + 1]; /* its UCX worker address (hex), "" without --enable_rdma */
    char pub[DS_AUTH_PUB_HEX + 1]; /* its member key (peer_auth.h), "" when its record has none */
} member_t;

struct ds_cluster {
    ds_server_t *srv;
    char self[300];
    char prefix[256];
    char member_key[600];
    char member_value[DS_UCX_ADDR_HEX_MAX + 900];
    ds_peer_auth_t *auth;
    ds_peers_t *peers;
    ds_links_t *links;
    ds_meta_t *meta;
    ds_holds_t *holds; /* latches and references held for keys' owners (cluster_hold.c) */
    ds_seals_t *seals; /* seal marks of owned keys, and owners' answers (cluster_seal.c) */
    ds_ring_t *ring;
    ds_ucx_t *ucx; /* srv->ucx (--enable_rdma), for the job threads */
    member_t members[DS_MAX_MEMBERS];
    size_t nmembers;

    pthread_t job_threads[DS_JOB_THREADS];
    pthread_t member_thread, watch_thread;
    int njob_threads; /* started, so joined: start-up may fail part way */
    bool member_started, watch_started;
    atomic_bool stop;
    pthread_mutex_t mu; /* guards the queues and the posted member list */
    pthread_cond_t cv;
    ds_job_t *todo_head, *todo_tail;
    ds_job_t *done_head, *done_tail;
    int efd;
    ds_io_t eio;
    member_t posted[DS_MAX_MEMBERS];
    size_t nposted;
    bool have_posted;
    ds_etcd_t *etcd_member, *etcd_watch, *etcd_range;
    atomic_int registered;
    /* This worker was out of the others' rings (its lease was lost, or a
     * member list without it was seen): they forgot where its keys live, so
     * it registers every local key again once it is back. */
    atomic_bool reannounce;
    bool self_missing; /* loop only */
    ds_repl_t *repl;   /* replicas and hot copies (cluster_repl.c) */
    /* A planned exit (cluster_migrate.c): the loop asks the membership
     * thread to revoke the lease (withdraw) and learns when it did. */
    atomic_bool withdraw, withdrawn;
    struct ds_leave *leave; /* loop only */
    struct ds_rebal *rebal; /* loop only (cluster_rebalance.c) */
    /* The ring before the last change, for DS_REDIRECT_WINDOW_MS after it
     * (ring_at): a key its new owner does not know yet is asked of the
     * previous owner (--enable_redirect), which keeps the entries it no
     * longer owns until prune_due. Loop only. */
    ds_ring_t *prev_ring;
    uint64_t ring_at, prune_due;
    /* The ring of the other members (each key's owner should this worker
     * leave), and the members' identity (addresses and worker ids), which
     * every worker computes alike from the same member list. Loop only. */
    ds_ring_t *ring_others;
    uint64_t ring_id;
    struct ds_rewait *rewaits; /* loop only (cluster_ops.c) */
};

#define DS_REDIRECT_WINDOW_MS 10000

/* ---- jobs ---- */

ds_job_t *ds__job_new(ds_pend_t *p, const char *addr, uint16_t op, void (*done)(ds_job_t *))
{
    ds_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) return NULL;
    j->pend = p;
    j->done = done;
    j->op = op;
    j->timeout_ms = 30000;
    j->conn_fd = -1;
    snprintf(j->addr, sizeof(j->addr), "%s", addr);
    ds__wbuf_init(&j->req);
    return j;
}

ds_job_t *ds__job_new_indexed(ds_pend_t *p, const char *addr, uint16_t op, void (*done)(ds_job_t *),
                              uint32_t n)
{
    ds_job_t *j = addr ? ds__job_new(p, addr, op, done) : NULL;
    if (j && (j->idx = malloc((n ? n : 1) * sizeof(*j->idx))) == NULL) {
        ds__wbuf_free(&j->req);
        free(j);
        j = NULL;
    }
    return j;
}

static void job_free(ds_job_t *j)
{
    ds__tls_free(j->conn_tls);
    if (j->conn_fd >= 0) close(j->conn_fd);
    ds__wbuf_free(&j->req);
    free(j->idx);
    free(j->resp);
    free(j);
}

/* The member at addr, or NULL: this worker talks only to members it learned
 * from etcd (and itself). */
static const member_t *member_at(const struct ds_cluster *cl, const char *addr)
{
    for (size_t i = 0; i < cl->nmembers; i++)
        if (strcmp(cl->members[i].addr, addr) == 0) return &cl->members[i];
    return NULL;
}

void ds__job_submit(ds_server_t *srv, ds_job_t *j)
{
    struct ds_cluster *cl = srv->cluster;
    if (j->pend) j->pend->outstanding++;
    const member_t *m = member_at(cl, j->addr);
    /* A job for an address that is not a member fails on a job thread (so
     * it completes after its caller, like every job), never connecting. */
    j->not_member = m == NULL;
    snprintf(j->peer_pub, sizeof(j->peer_pub), "%s", m ? m->pub : "");
    if (!j->not_member && ds__links_submit(cl->links, j)) {
        srv->cctr.peer_link_requests++;
        return;
    }
    srv->cctr.peer_job_requests++;
    pthread_mutex_lock(&cl->mu);
    if (cl->todo_tail)
        cl->todo_tail->next = j;
    else
        cl->todo_head = j;
    cl->todo_tail = j;
    pthread_cond_signal(&cl->cv);
    pthread_mutex_unlock(&cl->mu);
}

/* A pull: the response is a one-key GET whose value goes straight into dst. */
static void run_pull(ds_pconn_t *pc, ds_job_t *j, ds_peer_resp_t *resp, uint64_t dl)
{
    uint32_t n = ds__rbuf_u32(&resp->r);
    uint8_t kind = ds__rbuf_u8(&resp->r);
    uint64_t size = ds__rbuf_u64(&resp->r);
    if (resp->r.err || n != 1 || kind != DS_VAL_INLINE || size != j->dst_len ||
        resp->data_len != size) {
        j->status = DS_K_NOT_FOUND; /* replaced or gone since the owner answered */
        snprintf(j->err, sizeof(j->err), "key changed on %.200s during the pull", j->addr);
        if (ds__peer_read(pc, resp, NULL, resp->data_len, dl) != 0) j->transport_failed = 1;
        return;
    }
    if (ds__peer_read(pc, resp, j->dst, size, dl) != 0) {
        j->transport_failed = 1;
        snprintf(j->err, sizeof(j->err), "pulling from worker %.200s failed mid-transfer", j->addr);
    }
}

static void run_job(struct ds_cluster *cl, ds_job_t *j)
{
    char err[256];
    uint64_t dl = ds__now_ms() + j->timeout_ms;
    if (j->not_member) {
        j->transport_failed = 1;
        snprintf(j->err, sizeof(j->err),
                 "%.200s is not a member of this cluster in etcd: not contacted", j->addr);
        return;
    }
    ds_pconn_t *pc = ds__peer_acquire(cl->peers, j->addr, j->peer_pub[0] ? j->peer_pub : NULL, dl,
                                      err, sizeof(err));
    if (pc == NULL) {
        j->transport_failed = 1;
        snprintf(j->err, sizeof(j->err), "%s", err);
        return;
    }
    if (j->connect_only) {
        j->conn_fd = ds__peer_detach(pc, &j->conn_tls);
        return;
    }
    if (j->op == DS_OP_UCX_PULL) {
        bool ok = true;
        ds__cluster_ucx_run(cl->ucx, pc, j, dl, &ok);
        ds__peer_release(cl->peers, pc, ok && !j->transport_failed);
        return;
    }
    ds_peer_resp_t resp;
    /* A send (REPL_PUT) reads a published object the job holds a reference
     * to: its bytes never change. */
    struct iovec src = {(void *)(uintptr_t)j->src, (size_t)j->src_len};
    if (ds__peer_request(pc, j->op, &j->req, j->src ? &src : NULL, j->src ? 1 : 0, dl, &resp) !=
        0) {
        j->transport_failed = 1;
        snprintf(j->err, sizeof(j->err), "%s", resp.err[0] ? resp.err : "peer request failed");
        ds__peer_resp_free(&resp);
        ds__peer_release(cl->peers, pc, false);
        return;
    }
    j->status = resp.status;
    snprintf(j->err, sizeof(j->err), "%s", resp.err);
    if (j->dst && resp.status == DS_K_OK)
        run_pull(pc, j, &resp, dl);
    else if (resp.data_len && ds__peer_read(pc, &resp, NULL, resp.data_len, dl) != 0)
        j->transport_failed = 1;
    /* Keep the metadata for the loop-side handler; it reads after the error. */
    j->resp = resp.meta;
    j->resp_len = resp.meta_len;
    j->r = resp.r;
    resp.meta = NULL;
    ds__peer_release(cl->peers, pc, !j->transport_failed);
}

static void *job_thread(void *arg)
{
    struct ds_cluster *cl = arg;
    for (;;) {
        pthread_mutex_lock(&cl->mu);
        while (cl->todo_head == NULL && !atomic_load(&cl->stop))
            pthread_cond_wait(&cl->cv, &cl->mu);
        ds_job_t *j = cl->todo_head;
        if (j == NULL) {
            pthread_mutex_unlock(&cl->mu);
            return NULL;
        }
        cl->todo_head = j->next;
        if (cl->todo_head == NULL) cl->todo_tail = NULL;
        pthread_mutex_unlock(&cl->mu);
        j->next = NULL;
        run_job(cl, j);
        pthread_mutex_lock(&cl->mu);
        if (cl->done_tail)
            cl->done_tail->next = j;
        else
            cl->done_head = j;
        cl->done_tail = j;
        pthread_mutex_unlock(&cl->mu);
        uint64_t one = 1;
        ssize_t w = write(cl->efd, &one, sizeof(one));
        (void)w;
    }
}

/* ---- pending operations ---- */

ds_pend_t *ds__pend_new(ds_server_t *srv, ds_req_t *r, void (*finish)(ds_pend_t *))
{
    ds_pend_t *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    p->srv = srv;
    p->req = r;
    p->op = r->op;
    p->flags = r->flags;
    p->finish = finish;
    return p;
}

void ds__pend_free(ds_pend_t *p)
{
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->keys) free(p->keys[i]);
        if (p->objs && p->objs[i]) ds__store_unref(p->srv->store, p->objs[i]);
    }
    free(p->keys);
    free(p->keylens);
    free(p->objs);
    free(p->status);
    free(p->sizes);
    free(p->orig_status);
    free(p->orig_idx);
    if (p->ext_free) p->ext_free(p->srv, p->ext);
    free(p);
}

ds_pend_t *ds__pend_new_statuses(ds_server_t *srv, ds_req_t *r, void (*finish)(ds_pend_t *),
                                 uint32_t n)
{
    ds_pend_t *p = ds__pend_new(srv, r, finish);
    if (p == NULL || (p->status = calloc(n ? n : 1, sizeof(*p->status))) == NULL) {
        if (p) ds__pend_free(p);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    p->n = n;
    return p;
}

bool ds__pend_add_key(ds_pend_t *p, const char *k, uint32_t kl)
{
    char *copy = malloc((size_t)kl + 1);
    if (copy == NULL) return false;
    memcpy(copy, k, kl);
    copy[kl] = '\0';
    p->keys[p->n] = copy;
    p->keylens[p->n] = kl;
    p->n++;
    return true;
}

bool ds__pend_read_keys(ds_pend_t *p, ds_rbuf_t *rb, uint32_t n)
{
    p->keys = calloc(n, sizeof(*p->keys));
    p->keylens = calloc(n, sizeof(*p->keylens));
    if (p->keys == NULL || p->keylens == NULL) return false;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        uint32_t kl = ds__rbuf_str(rb, &k);
        if (rb->err) return true;
        if (!ds__pend_add_key(p, k, kl)) return false;
    }
    return true;
}

static void pend_done(ds_pend_t *p);

void ds__key_rec_read(ds_rbuf_t *rb, ds_key_rec_t *kr)
{
    kr->kl = ds__rbuf_str(rb, &kr->key);
    kr->size = ds__rbuf_u64(rb);
    kr->version = ds__rbuf_u64(rb);
}

void ds__pend_hold(ds_pend_t *p)
{
    p->outstanding++;
}

void ds__pend_unhold(ds_pend_t *p)
{
    if (--p->outstanding == 0) pend_done(p);
}

static void pend_done(ds_pend_t *p)
{
    if (p->req == NULL) {
        if (p->gone) p->gone(p); /* answered when it could not be deferred */
    } else if (ds__req_gone(p->req)) {
        if (p->gone) p->gone(p);
        ds__req_drop(p->req); /* the client left: nobody to answer */
    } else {
        ds__req_unpark(p->req);
        p->finish(p);
    }
    ds__pend_free(p);
}

void ds__pend_start(ds_pend_t *p)
{
    if (p->outstanding > 0) {
        /* Its jobs finish (and free what they hold) even if the client
         * leaves meanwhile; the answer then goes nowhere. */
        ds_req_t *d = ds__req_park(p->req, NULL, NULL);
        if (d) {
            p->req = d;
            return;
        }
        /* Out of memory for the deferred request: fail it now; the jobs
         * still run to their end. */
        ds__req_error(p->req, DS_K_OUT_OF_MEMORY, "out of memory");
        p->req = NULL;
        return;
    }
    pend_done(p);
}

static void on_completions(void *ctx, uint32_t events)
{
    struct ds_cluster *cl = ctx;
    (void)events;
    uint64_t v;
    ssize_t r = read(cl->efd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&cl->mu);
    ds_job_t *list = cl->done_head;
    cl->done_head = cl->done_tail = NULL;
    pthread_mutex_unlock(&cl->mu);
    while (list) {
        ds_job_t *j = list;
        list = j->next;
        ds__job_complete(cl->srv, j);
    }
}

void ds__job_complete(ds_server_t *srv, ds_job_t *j)
{
    if (j->transport_failed && !j->connect_only) ds__peers_forget(srv->cluster->peers, j->addr);
    if (j->done) j->done(j);
    ds_pend_t *p = j->pend;
    job_free(j);
    if (p && --p->outstanding == 0) pend_done(p);
}

uint64_t ds__cluster_tick(ds_server_t *srv, uint64_t now)
{
    struct ds_cluster *cl = srv->cluster;
    if (cl == NULL) return 0;
    if (cl->prune_due && now >= cl->prune_due) {
        cl->prune_due = 0;
        ds__meta_prune(cl->meta, srv, NULL);
    }
    uint64_t a = ds__links_expire(cl->links, now), b = ds__migrate_tick(srv, now);
    uint64_t due = a && (b == 0 || a < b) ? a : b;
    uint64_t c = ds__cluster_rewait_tick(srv, now);
    due = c && (due == 0 || c < due) ? c : due;
    uint64_t d = ds__repl_tick(srv, now);
    due = d && (due == 0 || d < due) ? d : due;
    uint64_t e = ds__rebal_tick(srv, now);
    due = e && (due == 0 || e < due) ? e : due;
    uint64_t f = ds__rebuild_tick(srv, now);
    due = f && (due == 0 || f < due) ? f : due;
    return cl->prune_due && (due == 0 || cl->prune_due < due) ? cl->prune_due : due;
}

const char *ds__cluster_prev_owner(ds_server_t *srv, const char *key, size_t len)
{
    struct ds_cluster *cl = srv->cluster;
    if (!srv->cfg.enable_redirect || cl->prev_ring == NULL ||
        ds__now_ms() >= cl->ring_at + DS_REDIRECT_WINDOW_MS)
        return NULL;
    const char *was = ds__ring_owner(cl->prev_ring, key, len);
    const char *now = ds__ring_owner(cl->ring, key, len);
    if (was == NULL || now == NULL || strcmp(was, now) == 0 || member_at(cl, was) == NULL)
        return NULL;
    return was;
}

void ds__cluster_withdraw(ds_server_t *srv)
{
    atomic_store(&srv->cluster->withdraw, true);
}

bool ds__cluster_withdrawn(ds_server_t *srv)
{
    return atomic_load(&srv->cluster->withdrawn);
}

struct ds_rewait **ds__cluster_rewait_slot(ds_server_t *srv)
{
    return &srv->cluster->rewaits;
}

struct ds_rebal **ds__cluster_rebal_slot(ds_server_t *srv)
{
    return &srv->cluster->rebal;
}

struct ds_leave **ds__cluster_leave_slot(ds_server_t *srv)
{
    return &srv->cluster->leave;
}

/* ---- membership ---- */

static void post_members(struct ds_cluster *cl)
{
    char err[256];
    ds_etcd_kv_t *kvs = NULL;
    size_t n = 0;
    if (ds__etcd_range_prefix(cl->etcd_range, cl->prefix, &kvs, &n, err, sizeof(err)) != 0) {
        DS_LOG_WARN("cluster: cannot read members: %s", err);
        return;
    }
    member_t *m = malloc(DS_MAX_MEMBERS * sizeof(*m));
    size_t k = 0;
    for (size_t i = 0; m && i < n && k < DS_MAX_MEMBERS; i++) {
        cJSON *j = cJSON_Parse(kvs[i].value);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "address");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "worker_id");
        const cJSON *ux = cJSON_GetObjectItemCaseSensitive(j, "ucx_address");
        const cJSON *pk = cJSON_GetObjectItemCaseSensitive(j, "peer_key");
        if (cJSON_IsString(a) && cJSON_IsString(id)) {
            snprintf(m[k].addr, sizeof(m[k].addr), "%s", a->valuestring);
            snprintf(m[k].id, sizeof(m[k].id), "%s", id->valuestring);
            snprintf(m[k].ucx, sizeof(m[k].ucx), "%s",
                     cJSON_IsString(ux) && strlen(ux->valuestring) < sizeof(m[k].ucx)
                         ? ux->valuestring
                         : "");
            snprintf(m[k].pub, sizeof(m[k].pub), "%s",
                     cJSON_IsString(pk) && strlen(pk->valuestring) == DS_AUTH_PUB_HEX
                         ? pk->valuestring
                         : "");
            k++;
        }
        cJSON_Delete(j);
    }
    ds__etcd_kvs_free(kvs, n);
    if (m == NULL) return;
    pthread_mutex_lock(&cl->mu);
    memcpy(cl->posted, m, k * sizeof(*m));
    cl->nposted = k;
    cl->have_posted = true;
    pthread_mutex_unlock(&cl->mu);
    free(m);
    uint64_t one = 1;
    ssize_t w = write(cl->efd, &one, sizeof(one));
    (void)w;
}

static void on_watch_event(void *ctx)
{
    post_members(ctx);
}

static void nap(struct ds_cluster *cl, uint64_t ms)
{
    uint64_t until = ds__now_ms() + ms;
    while (!atomic_load(&cl->stop) && ds__now_ms() < until)
        usleep(20000);
}

static void *watch_thread(void *arg)
{
    struct ds_cluster *cl = arg;
    char err[256];
    while (!atomic_load(&cl->stop)) {
        post_members(cl);
        if (ds__etcd_watch(cl->etcd_watch, cl->prefix, on_watch_event, cl, &cl->stop, err,
                           sizeof(err)) != 0) {
            DS_LOG_DEBUG("cluster: %s; retrying", err);
            nap(cl, 500);
        }
    }
    return NULL;
}

/* Registers under a lease and keeps it alive. When etcd is unreachable the
 * worker keeps serving on the last ring; once etcd answers again and the
 * lease is gone, it registers anew (which the others see as a rejoin). */
static void *member_thread(void *arg)
{
    struct ds_cluster *cl = arg;
    ds_server_t *srv = cl->srv;
    char err[256];
    int64_t lease = 0;
    bool warned = false, ever = false;
    while (!atomic_load(&cl->stop)) {
        if (atomic_load(&cl->withdraw)) {
            /* Leaving for good: the others drop this worker now, not when
             * the lease runs out. */
            if (atomic_load(&cl->registered)) ds__etcd_revoke(cl->etcd_member, lease);
            atomic_store(&cl->registered, 0);
            atomic_store(&cl->withdrawn, true);
            nap(cl, 50);
            continue;
        }
        if (!atomic_load(&cl->registered)) {
            if (ds__etcd_grant(cl->etcd_member, (int)srv->cfg.node_timeout_s, &lease, err,
                               sizeof(err)) == 0 &&
                ds__etcd_put(cl->etcd_member, cl->member_key, cl->member_value, lease, err,
                             sizeof(err)) == 0) {
                atomic_store(&cl->registered, 1);
                DS_LOG_INFO("cluster: registered %s (lease %lld)", cl->member_key,
                            (long long)lease);
                warned = false;
                if (ever) {
                    /* The lease was lost: the others dropped this worker. */
                    atomic_store(&cl->reannounce, true);
                    uint64_t one = 1;
                    ssize_t w = write(cl->efd, &one, sizeof(one));
                    (void)w;
                }
                ever = true;
            } else if (!warned) {
                DS_LOG_WARN("cluster: cannot register with etcd: %s; retrying", err);
                warned = true;
            }
        } else {
            int64_t ttl = 0;
            if (ds__etcd_keepalive(cl->etcd_member, lease, &ttl, err, sizeof(err)) != 0) {
                if (!warned) DS_LOG_WARN("cluster: keep-alive failed: %s", err);
                warned = true;
            } else if (ttl <= 0) {
                DS_LOG_WARN("cluster: lease %lld expired; registering again", (long long)lease);
                atomic_store(&cl->registered, 0);
                continue;
            } else {
                warned = false;
            }
        }
        nap(cl, (uint64_t)srv->cfg.heartbeat_interval_ms);
    }
    if (atomic_load(&cl->registered)) ds__etcd_revoke(cl->etcd_member, lease);
    return NULL;
}

static int cmp_member(const void *a, const void *b)
{
    return strcmp(((const member_t *)a)->addr, ((const member_t *)b)->addr);
}

/* In the loop: adopt a member list posted by the watch thread. */
static void adopt_members(struct ds_cluster *cl)
{
    member_t *m = malloc(DS_MAX_MEMBERS * sizeof(*m));
    if (m == NULL) return;
    pthread_mutex_lock(&cl->mu);
    bool have = cl->have_posted;
    size_t n = cl->nposted;
    memcpy(m, cl->posted, n * sizeof(*m));
    cl->have_posted = false;
    pthread_mutex_unlock(&cl->mu);
    if (!have) {
        free(m);
        return;
    }
    /* This worker serves whatever etcd says (it may not have registered yet,
     * or its lease may be renewing): it is always on its own ring. */
    bool self_listed = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].addr, cl->self) != 0) continue;
        self_listed = true; /* an old registration of ours may still show a stale id */
        snprintf(m[i].id, sizeof(m[i].id), "%s", cl->srv->worker_id);
        snprintf(m[i].ucx, sizeof(m[i].ucx), "%s", cl->ucx ? ds__ucx_address(cl->ucx) : "");
        snprintf(m[i].pub, sizeof(m[i].pub), "%s", ds__peer_auth_pub(cl->auth));
    }
    /* Listed again after a list without us: the others may have dropped us
     * meanwhile (the first list, before our registration, does not count). */
    if (!self_listed && atomic_load(&cl->registered) && cl->nmembers > 1) cl->self_missing = true;
    if (self_listed && cl->self_missing) {
        cl->self_missing = false;
        atomic_store(&cl->reannounce, true);
    }
    if (!self_listed && n < DS_MAX_MEMBERS) {
        snprintf(m[n].addr, sizeof(m[n].addr), "%s", cl->self);
        snprintf(m[n].id, sizeof(m[n].id), "%s", cl->srv->worker_id);
        snprintf(m[n].ucx, sizeof(m[n].ucx), "%s", cl->ucx ? ds__ucx_address(cl->ucx) : "");
        snprintf(m[n].pub, sizeof(m[n].pub), "%s", ds__peer_auth_pub(cl->auth));
        n++;
    }
    qsort(m, n, sizeof(*m), cmp_member);
    bool same = n == cl->nmembers;
    for (size_t i = 0; same && i < n; i++)
        same = !strcmp(m[i].addr, cl->members[i].addr) && !strcmp(m[i].id, cl->members[i].id) &&
               !strcmp(m[i].ucx, cl->members[i].ucx) && !strcmp(m[i].pub, cl->members[i].pub);
    if (same) {
        free(m);
        return;
    }
    /* Members that left or restarted (new worker id) lost their data. */
    for (size_t i = 0; i < cl->nmembers; i++) {
        bool kept = false;
        for (size_t k = 0; k < n; k++)
            kept |= !strcmp(m[k].addr, cl->members[i].addr) && !strcmp(m[k].id, cl->members[i].id);
        if (!kept) {
            DS_LOG_INFO("cluster: member %s (%s) left", cl->members[i].addr, cl->members[i].id);
            ds__meta_prune(cl->meta, cl->srv, cl->members[i].addr);
            ds__holds_member_left(cl->srv, cl->members[i].addr);
            ds__repl_member_left(cl->srv, cl->members[i].addr);
            ds__peers_forget(cl->peers, cl->members[i].addr);
            ds__links_forget(cl->links, cl->members[i].addr);
            /* Its UCX endpoint stays: closing it here loses what the member
             * sends once it is back (a pause past its lease); one to a member
             * that restarted is replaced when its new address is first used,
             * and UCX fails one to a dead member by itself. */
        }
    }
    const char **addrs = malloc((n ? n : 1) * sizeof(*addrs));
    for (size_t i = 0; addrs && i < n; i++)
        addrs[i] = m[i].addr;
    ds_ring_t *ring = addrs ? ds__ring_build(addrs, n) : NULL;
    free(addrs);
    if (ring == NULL) {
        free(m);
        return;
    }
    ds_ring_t *old = cl->ring;
    const char **others = malloc((n ? n : 1) * sizeof(*others));
    size_t no = 0;
    uint32_t ha = 0x72696e67u, hb = 0x6d656d62u;
    for (size_t i = 0; i < n; i++) {
        ha = ds__murmur3_32(m[i].id, strlen(m[i].id),
                            ds__murmur3_32(m[i].addr, strlen(m[i].addr), ha));
        hb = ds__murmur3_32(m[i].id, strlen(m[i].id),
                            ds__murmur3_32(m[i].addr, strlen(m[i].addr), hb));
        if (others && strcmp(m[i].addr, cl->self) != 0) others[no++] = m[i].addr;
    }
    ds__ring_free(cl->ring_others);
    cl->ring_others = others ? ds__ring_build(others, no) : NULL;
    free(others);
    cl->ring_id = (uint64_t)ha << 32 | hb;
    /* Keys are registered again where their owner changed: the old ring is
     * the previous members, those that left included (their keys move to
     * new owners). A restarted member keeps its address but lost its
     * metadata: leave it out of the old ring so keys it owns are registered
     * with it again. */
    const char **kept = malloc((cl->nmembers ? cl->nmembers : 1) * sizeof(*kept));
    size_t nk = 0;
    for (size_t i = 0; kept && i < cl->nmembers; i++) {
        bool restarted = false;
        for (size_t k = 0; k < n; k++)
            restarted |=
                !strcmp(m[k].addr, cl->members[i].addr) && strcmp(m[k].id, cl->members[i].id) != 0;
        if (!restarted) kept[nk++] = cl->members[i].addr;
    }
    ds_ring_t *old_alive = kept ? ds__ring_build(kept, nk) : NULL;
    free(kept);
    memcpy(cl->members, m, n * sizeof(*m));
    cl->nmembers = n;
    cl->ring = ring;
    free(m);
    DS_LOG_INFO("cluster: %zu members", n);
    /* Entries kept from the change before and owned here on neither ring
     * go now (a key owned here again later must not come back stale); those
     * handed over ahead of this change (a member leaving) stay. */
    if (cl->prune_due) {
        ds__meta_prune_rings(cl->meta, cl->self, old, ring);
        cl->prune_due = 0;
    }
    if (cl->srv->cfg.enable_redirect)
        cl->prune_due = ds__now_ms() + DS_REDIRECT_WINDOW_MS;
    else
        ds__meta_prune(cl->meta, cl->srv, NULL);
    ds__cluster_ring_changed(cl->srv, old_alive);
    ds__seal_ring_changed(cl->srv, old_alive);
    ds__holds_ring_changed(cl->srv, old_alive);
    ds__rebuild_round(cl->srv, old_alive);
    ds__rebal_ring_changed(cl->srv, old_alive);
    ds__ring_free(old_alive);
    ds__ring_free(cl->prev_ring);
    cl->prev_ring = old;
    cl->ring_at = ds__now_ms();
}

static void on_eventfd(void *ctx, uint32_t events)
{
    struct ds_cluster *cl = ctx;
    on_completions(cl, events);
    adopt_members(cl);
    if (atomic_exchange(&cl->reannounce, false)) {
        DS_LOG_INFO("cluster: back in the ring; registering every local key again");
        ds__cluster_ring_changed(cl->srv, NULL);
    }
}

static void on_gone(void *ctx, const ds_obj_t *o)
{
    ds__cluster_gone(ctx, o);
}

const char *ds__cluster_owner(ds_server_t *srv, const char *key, size_t len)
{
    return ds__ring_owner(srv->cluster->ring, key, len);
}

const char *ds__cluster_backup(ds_server_t *srv, const char *key, size_t len)
{
    const ds_ring_t *r = srv->cluster->ring_others;
    return r ? ds__ring_owner(r, key, len) : NULL;
}

uint64_t ds__cluster_ring_id(ds_server_t *srv)
{
    return srv->cluster->ring_id;
}

const char *ds__cluster_self(ds_server_t *srv)
{
    return srv->cluster->self;
}

const ds_ring_t *ds__cluster_ring(ds_server_t *srv)
{
    return srv->cluster->ring;
}

ds_repl_t *ds__cluster_repl(ds_server_t *srv)
{
    return srv->cluster->repl;
}

ds_meta_t *ds__cluster_meta(ds_server_t *srv)
{
    return srv->cluster->meta;
}

ds_holds_t **ds__cluster_holds(ds_server_t *srv)
{
    return &srv->cluster->holds;
}

ds_seals_t **ds__cluster_seals(ds_server_t *srv)
{
    return &srv->cluster->seals;
}

size_t ds__cluster_peers(ds_server_t *srv, const char **out, size_t cap)
{
    struct ds_cluster *cl = srv->cluster;
    size_t k = 0;
    for (size_t i = 0; i < cl->nmembers && k < cap; i++)
        if (strcmp(cl->members[i].addr, cl->self) != 0) out[k++] = cl->members[i].addr;
    return k;
}

ds_ucx_t *ds__cluster_ucx(ds_server_t *srv)
{
    return srv->cluster->ucx;
}

const char *ds__cluster_member_key(ds_server_t *srv, const char *addr)
{
    const member_t *m = member_at(srv->cluster, addr);
    return m ? m->pub : NULL;
}

ds_peer_auth_t *ds__cluster_auth(ds_server_t *srv)
{
    return srv->cluster->auth;
}

const char *ds__cluster_ucx_address_of(ds_server_t *srv, const char *addr)
{
    struct ds_cluster *cl = srv->cluster;
    for (size_t i = 0; i < cl->nmembers; i++)
        if (strcmp(cl->members[i].addr, addr) == 0)
            return cl->members[i].ucx[0] ? cl->members[i].ucx : NULL;
    return NULL;
}

size_t ds__cluster_members(ds_server_t *srv, char *out, size_t cap)
{
    struct ds_cluster *cl = srv->cluster;
    size_t off = 0;
    if (cap) out[0] = '\0';
    for (size_t i = 0; i < cl->nmembers && off < cap; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s%s", i ? "," : "", cl->members[i].addr);
    return cl->nmembers;
}

static void cluster_stats(ds_server_t *srv, struct cJSON *root)
{
    char members[4096];
    size_t nm = ds__cluster_members(srv, members, sizeof(members));
    cJSON *cl = cJSON_AddObjectToObject(root, "cluster");
    cJSON_AddStringToObject(cl, "name", srv->cfg.cluster_name);
    cJSON_AddNumberToObject(cl, "members", (double)nm);
    cJSON_AddNumberToObject(cl, "peers_proven", (double)srv->cctr.peers_proven);
    cJSON_AddNumberToObject(cl, "peer_auth_failures",
                            (double)ds__peer_auth_failures(srv->cluster->auth));
    cJSON_AddStringToObject(cl, "member_list", members);
    cJSON_AddNumberToObject(cl, "owned_keys", (double)ds__meta_count(srv->cluster->meta));
    /* Sealed keys this worker knows: marks it keeps as their owner, and
     * those other owners hinted (a write of them asks the owner). */
    cJSON_AddNumberToObject(cl, "seals_known",
                            (double)(ds__seal_marks(srv) + ds__holds_seal_hints(srv)));
    cJSON_AddNumberToObject(cl, "peer_link_requests", (double)srv->cctr.peer_link_requests);
    cJSON_AddNumberToObject(cl, "peer_job_requests", (double)srv->cctr.peer_job_requests);
    cJSON_AddNumberToObject(cl, "locate_inline_values", (double)srv->cctr.locate_inline_values);
    cJSON_AddNumberToObject(cl, "rdma", srv->cluster->ucx != NULL ? 1 : 0);
    cJSON_AddNumberToObject(cl, "ucx_pulls", (double)srv->cctr.ucx_pulls);
    cJSON_AddNumberToObject(cl, "ucx_sends", (double)srv->cctr.ucx_sends);
    cJSON_AddNumberToObject(cl, "ucx_pull_fallbacks", (double)srv->cctr.ucx_pull_fallbacks);
    /* Members this worker can send to over UCX (their record has an address). */
    size_t np = 0;
    for (size_t i = 0; i < srv->cluster->nmembers; i++)
        np += srv->cluster->members[i].ucx[0] &&
              strcmp(srv->cluster->members[i].addr, srv->cluster->self) != 0;
    cJSON_AddNumberToObject(cl, "ucx_peers", (double)np);
    ds__cluster_stream_stats(srv, cl);
    ds__repl_stats(srv, cl);
    ds__rebal_stats(srv, cl);
}

/* What the operations layer hands to the cluster. */
static const ds_remote_t remote = {
    .get = ds__cluster_get,
    .published = ds__cluster_published,
    .keys_op = ds__cluster_keys_op,
    .peer_op = ds__cluster_peer_op,
    .owned = ds__holds_owned,
    .latch_wait = ds__holds_latch_wait,
    .latch_hinted = ds__holds_hinted,
    .session_end = ds__holds_session_end,
    .gref_gone = ds__holds_gref_gone,
    .owns = ds__holds_owns,
    .seal = ds__seal_client,
    .sealed = ds__seal_refused,
    .nest = ds__nest_client,
    .kid_hold = ds__nest_kid_hold,
    .nest_answer = ds__nest_answer,
    .stats = cluster_stats,
    .stream_reg = ds__cluster_stream_reg,
    .stream_room = ds__cluster_stream_room,
    .stream_forward = ds__cluster_stream_forward,
    .stream_query = ds__cluster_stream_query,
    .stream_delete = ds__cluster_stream_delete,
    .leave = ds__migrate_leave,
};

int ds__cluster_init(ds_server_t *srv, char *err, size_t err_cap)
{
    if (srv->cfg.etcd_address[0] == '\0') return 0;
    struct ds_cluster *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    srv->cluster = cl;
    cl->srv = srv;
    cl->efd = -1;
    snprintf(cl->self, sizeof(cl->self), "%s:%d", srv->host, srv->port);
    snprintf(cl->prefix, sizeof(cl->prefix), "/datasystem/%s/cluster/", srv->cfg.cluster_name);
    snprintf(cl->member_key, sizeof(cl->member_key), "%s%s", cl->prefix, cl->self);
    cl->ucx = srv->ucx; /* the server's (--enable_rdma), or NULL */
    pthread_mutex_init(&cl->mu, NULL);
    pthread_cond_init(&cl->cv, NULL);
    cl->auth = ds__peer_auth_new(cl->self, srv->cfg.cluster_secret_file, err, err_cap);
    if (cl->auth == NULL) return -1;
    /* The record carries the member key peers check this worker's proofs
     * with when there is no cluster secret (peer_auth.h), and with
     * --enable_rdma the UCX worker address peers send to (cluster_ucx.c). */
    /* host_id: the host ID from --host_id_env_name's variable, which
     * clients' service discovery matches against their own for same-node
     * selection; left out when unset or when it would need JSON escapes. */
    const char *host_id = srv->cfg.host_id_env_name[0] ? getenv(srv->cfg.host_id_env_name) : NULL;
    for (const char *h = host_id; h && *h; h++)
        if (*h == '"' || *h == '\\' || (unsigned char)*h < 0x20 || h - host_id > 200) {
            DS_LOG_WARN("cluster: the host ID in $%s is not published: it is longer than 200 "
                        "bytes or holds a quote, backslash or control character",
                        srv->cfg.host_id_env_name);
            host_id = NULL;
            break;
        }
    snprintf(cl->member_value, sizeof(cl->member_value),
             "{\"address\": \"%s\", \"worker_id\": \"%s\", \"state\": \"ready\", \"pid\": "
             "%d, \"peer_key\": \"%s\"%s%s%s%s%s%s}",
             cl->self, srv->worker_id, (int)getpid(), ds__peer_auth_pub(cl->auth),
             cl->ucx ? ", \"ucx_address\": \"" : "", cl->ucx ? ds__ucx_address(cl->ucx) : "",
             cl->ucx ? "\"" : "", host_id && *host_id ? ", \"host_id\": \"" : "",
             host_id && *host_id ? host_id : "", host_id && *host_id ? "\"" : "");
    if (!ds__peer_auth_has_secret(cl->auth))
        DS_LOG_WARN("cluster: no --cluster_secret_file: peers prove themselves with member keys "
                    "published in etcd, so whoever may write /datasystem/%s/cluster/ in etcd "
                    "can act as a peer (docs/security.md)",
                    srv->cfg.cluster_name);
    cl->peers = ds__peers_new(srv->auth_token, cl->auth, srv->tls_peer);
    cl->links = ds__links_new(srv);
    cl->meta = ds__meta_new();
    cl->repl = ds__repl_new(srv);
    cl->etcd_member = ds__etcd_new(srv->cfg.etcd_address, err, err_cap);
    if (cl->etcd_member == NULL) return -1;
    cl->etcd_watch = ds__etcd_new(srv->cfg.etcd_address, err, err_cap);
    cl->etcd_range = ds__etcd_new(srv->cfg.etcd_address, err, err_cap);
    cl->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!cl->peers || !cl->links || !cl->meta || !cl->repl || !cl->etcd_watch || !cl->etcd_range ||
        cl->efd < 0 ||
        ds__loop_add(srv->net.loop, &cl->eio, cl->efd, EPOLLIN, on_eventfd, cl) != 0) {
        snprintf(err, err_cap, "cannot set up the cluster: %s", strerror(errno));
        return -1;
    }
    ds__store_set_gone_hook(srv->store, on_gone, srv);
    srv->remote = &remote;
    /* Start with ourselves so keys can be served before etcd answers. */
    const char *self = cl->self;
    cl->ring = ds__ring_build(&self, 1);
    snprintf(cl->members[0].addr, sizeof(cl->members[0].addr), "%s", cl->self);
    snprintf(cl->members[0].id, sizeof(cl->members[0].id), "%s", srv->worker_id);
    snprintf(cl->members[0].ucx, sizeof(cl->members[0].ucx), "%s",
             cl->ucx ? ds__ucx_address(cl->ucx) : "");
    snprintf(cl->members[0].pub, sizeof(cl->members[0].pub), "%s", ds__peer_auth_pub(cl->auth));
    cl->nmembers = 1;
    /* A thread that cannot start fails start-up; ds__cluster_destroy stops and
     * joins the ones that did. */
    int rc = 0;
    for (int i = 0; i < DS_JOB_THREADS && rc == 0; i++)
        if ((rc = pthread_create(&cl->job_threads[i], NULL, job_thread, cl)) == 0)
            cl->njob_threads++;
    if (rc == 0 && (rc = pthread_create(&cl->member_thread, NULL, member_thread, cl)) == 0)
        cl->member_started = true;
    if (rc == 0 && (rc = pthread_create(&cl->watch_thread, NULL, watch_thread, cl)) == 0)
        cl->watch_started = true;
    if (rc != 0) {
        snprintf(err, err_cap, "cannot start the cluster threads: %s", strerror(rc));
        return -1;
    }
    DS_LOG_INFO("cluster '%s': joining through etcd %s as %s", srv->cfg.cluster_name,
                srv->cfg.etcd_address, cl->self);
    return 0;
}

void ds__cluster_destroy(ds_server_t *srv)
{
    struct ds_cluster *cl = srv->cluster;
    if (cl == NULL) return;
    atomic_store(&cl->stop, true);
    ds__ucx_stopping(cl->ucx); /* job threads waiting on UCX receives give up */
    if (cl->njob_threads > 0) {
        pthread_mutex_lock(&cl->mu);
        pthread_cond_broadcast(&cl->cv);
        pthread_mutex_unlock(&cl->mu);
    }
    for (int i = 0; i < cl->njob_threads; i++)
        pthread_join(cl->job_threads[i], NULL);
    if (cl->member_started) pthread_join(cl->member_thread, NULL);
    if (cl->watch_started) pthread_join(cl->watch_thread, NULL);
    /* Jobs never run are dropped; their pends go with the connections. */
    on_completions(cl, 0);
    while (cl->todo_head) {
        ds_job_t *j = cl->todo_head;
        cl->todo_head = j->next;
        if (j->obj) ds__store_unref(srv->store, j->obj);
        ds_pend_t *p = j->pend;
        job_free(j);
        if (p && --p->outstanding == 0) pend_done(p);
    }
    ds__migrate_destroy(srv);
    ds__rebal_destroy(srv);
    ds__cluster_rewait_destroy(srv);
    ds__links_free(cl->links);
    /* The UCX data plane itself is the server's: ds__server_destroy frees it
     * next (its sends still under way end there, their pins go). */
    cl->ucx = NULL;
    if (cl->efd >= 0) {
        ds__loop_del(srv->net.loop, &cl->eio);
        close(cl->efd);
    }
    ds__etcd_free(cl->etcd_member);
    ds__etcd_free(cl->etcd_watch);
    ds__etcd_free(cl->etcd_range);
    ds__peers_free(cl->peers);
    ds__peer_auth_free(cl->auth);
    ds__meta_free(cl->meta);
    ds__holds_free(cl->holds);
    ds__seals_free(cl->seals);
    ds__cluster_stream_free(srv);
    ds__repl_free(cl->repl);
    ds__ring_free(cl->ring);
    ds__ring_free(cl->prev_ring);
    ds__ring_free(cl->ring_others);
    pthread_mutex_destroy(&cl->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
    srv->cluster = NULL;
    srv->remote = NULL;
}
