/* Pulls over UCX (--enable_rdma; see ucx.h): both ends of a UCX_PULL.
 *
 * The requester's job thread posts a tagged receive into the arena range the
 * loop reserved for the value, then asks the owner over its peer connection.
 * The owner (on its loop) takes a reference on the object - the pin that
 * keeps its arena range alive and unchanged - and sends it with UCX from its
 * mapped arena straight into that range; it answers once UCX has finished
 * with the bytes and drops the pin. The requester publishes nothing until its
 * receive has completed in full: on any failure the range stays invisible and
 * is released once UCX no longer owns it. */
#include "worker/cluster/cluster_int.h"
#include "worker/cluster/peer.h"
#include "worker/net/ucx.h"

#include "common/clock.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the owner ---- */

/* A UCX_PULL without the requester's wait (an older worker) gets this one. */
#define DS_UCX_PULL_DEFAULT_MS 60000u

typedef struct {
    ds_server_t *srv;
    ds_req_t *req; /* deferred */
    ds_obj_t *obj; /* the pin */
} pull_send_t;

static void reply_via(ds_req_t *r, bool via_ucx, ds_obj_t *o, ds_server_t *srv)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u8(&w, via_ucx ? 1 : 0);
    if (via_ucx) {
        ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
    } else {
        struct iovec seg = {.iov_base = ds__store_data(srv->store, o), .iov_len = o->size};
        ds__store_ref(o); /* the frame's, released once it is written */
        ds__req_reply(r, DS_K_OK, &w, &seg, 1, &o, 1, -1);
    }
    ds__wbuf_free(&w);
}

static void pull_sent(void *ctx, bool ok, const char *err)
{
    pull_send_t *s = ctx;
    DS_LOG_DEBUG("rdma: sent '%.64s' (%llu bytes): %s", s->obj->key,
                 (unsigned long long)s->obj->size, ok ? "done" : err);
    if (ok) s->srv->cctr.ucx_sends++;
    /* Each branch ends the deferred request exactly once. */
    if (ds__req_gone(s->req))
        ds__req_drop(s->req);
    else if (ok)
        reply_via(s->req, true, s->obj, s->srv);
    else
        ds__req_error(s->req, DS_K_RPC_UNAVAILABLE, "UCX send of '%.64s' failed: %s", s->obj->key,
                      err);
    ds__store_unref(s->srv->store, s->obj);
    free(s);
}

void ds__cluster_ucx_pull(ds_server_t *srv, ds_req_t *r)
{
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    const char *key, *who;
    uint32_t kl = ds__rbuf_str(&rb, &key);
    uint64_t size = ds__rbuf_u64(&rb);
    uint64_t tag = ds__rbuf_u64(&rb);
    uint32_t wl = ds__rbuf_str(&rb, &who);
    /* The requester's deadline (ms from now); older requesters send none. */
    uint32_t wait_ms = rb.pos < rb.len ? ds__rbuf_u32(&rb) : DS_UCX_PULL_DEFAULT_MS;
    if (rb.err || kl == 0 || wl == 0 || wl >= 300) {
        ds__req_error(r, DS_K_INVALID, "malformed UCX_PULL");
        return;
    }
    ds_obj_t *o = ds__store_lookup(srv->store, key, kl, ds__now_ms());
    if (o == NULL || o->size != size) {
        ds__req_error(r, DS_K_NOT_FOUND, "key '%.*s' of %llu bytes is not here",
                      (int)(kl > 64 ? 64 : kl), key, (unsigned long long)size);
        return;
    }
    char requester[300];
    snprintf(requester, sizeof(requester), "%.*s", (int)wl, who);
    ds_ucx_t *u = ds__cluster_ucx(srv);
    const char *addr = u ? ds__cluster_ucx_address_of(srv, requester) : NULL;
    if (addr == NULL) {
        /* This worker has no UCX, or does not know the requester's UCX
         * address yet (a member list in flight): the value goes on the peer
         * connection, as a GET's would. */
        reply_via(r, false, o, srv);
        return;
    }
    pull_send_t *s = calloc(1, sizeof(*s));
    ds_req_t *d = s ? ds__req_park(r, NULL, NULL) : NULL;
    if (d == NULL) {
        free(s);
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    ds__store_ref(o);
    *s = (pull_send_t){.srv = srv, .req = d, .obj = o};
    DS_LOG_DEBUG("rdma: sending '%.*s' (%llu bytes) to %s, tag %llu", (int)(kl > 64 ? 64 : kl), key,
                 (unsigned long long)size, requester, (unsigned long long)tag);
    char err[256];
    uint64_t deadline = ds__now_ms() + wait_ms + DS_UCX_SEND_GRACE_MS;
    if (ds__ucx_send(u, requester, addr, tag, ds__store_data(srv->store, o), size, deadline,
                     pull_sent, s, err, sizeof(err)) != 0) {
        ds__req_error(d, DS_K_RPC_UNAVAILABLE, "%s", err);
        ds__store_unref(srv->store, o);
        free(s);
    }
}

/* ---- the requester ---- */

bool ds__cluster_ucx_job(ds_server_t *srv, ds_job_t *j, const char *key, uint32_t kl)
{
    ds_ucx_t *u = ds__cluster_ucx(srv);
    if (u == NULL || j->dst_len <= DS_LOCATE_INLINE_MAX ||
        ds__cluster_ucx_address_of(srv, j->addr) == NULL)
        return false;
    j->op = DS_OP_UCX_PULL;
    j->ucx_tag = ds__ucx_new_tag(u);
    ds__wbuf_reset(&j->req);
    ds__wbuf_str(&j->req, key, kl);
    ds__wbuf_u64(&j->req, j->dst_len);
    ds__wbuf_u64(&j->req, j->ucx_tag);
    ds__wbuf_cstr(&j->req, ds__cluster_self(srv));
    return true;
}

/* How long a failed pull waits for its receive to be cancelled (unmatched:
 * at once) or to end (under way: until UCX sees the owner's endpoint fail)
 * before it leaves the range to UCX. */
#define DS_UCX_DROP_WAIT_MS 200

/* On the loop, once UCX let go of a range whose pull had already failed. */
static void release_range(void *ctx, void *arg)
{
    ds_server_t *srv = ctx;
    ds__store_unref(srv->store, arg);
}

/* The receive is over for this job: when UCX still owns the range, the
 * job hands its reference to the release above. */
static void drop_recv(ds_ucx_t *u, ds_job_t *j, ds_ucx_op_t *op)
{
    if (!ds__ucx_drop(u, op, DS_UCX_DROP_WAIT_MS, release_range, j->pend->srv, j->obj)) {
        DS_LOG_DEBUG("rdma: pull from %s abandoned while UCX owns its range", j->addr);
        j->obj = NULL;
    }
}

void ds__cluster_ucx_run(ds_ucx_t *u, ds_pconn_t *pc, ds_job_t *j, uint64_t dl, bool *pc_ok)
{
    char err[256];
    ds_ucx_op_t *op = ds__ucx_recv(u, j->ucx_tag, j->dst, j->dst_len, err, sizeof(err));
    if (op == NULL) {
        j->transport_failed = 1;
        snprintf(j->err, sizeof(j->err), "%s", err);
        return;
    }
    /* How long this side waits: past it (plus a grace) the owner gives up
     * the send and its pin, should this worker stop taking the data. */
    uint64_t now = ds__now_ms();
    ds__wbuf_u32(&j->req,
                 (uint32_t)(dl > now ? (dl - now > UINT32_MAX ? UINT32_MAX : dl - now) : 1));
    ds_peer_resp_t resp;
    if (ds__peer_request(pc, j->op, &j->req, NULL, 0, dl, &resp) != 0) {
        j->transport_failed = 1;
        *pc_ok = false;
        snprintf(j->err, sizeof(j->err), "%s", resp.err[0] ? resp.err : "peer request failed");
        ds__peer_resp_free(&resp);
        drop_recv(u, j, op);
        return;
    }
    j->status = resp.status;
    snprintf(j->err, sizeof(j->err), "%s", resp.err);
    uint8_t via_ucx = resp.status == DS_K_OK ? ds__rbuf_u8(&resp.r) : 0;
    if (resp.status == DS_K_OK && !via_ucx) {
        /* No UCX route after all: the value came on the connection. An
         * unmatched receive is cancelled at once. */
        j->ucx_tag = 0; /* not counted as a UCX pull */
        bool mine = ds__ucx_drop(u, op, DS_UCX_DROP_WAIT_MS, release_range, j->pend->srv, j->obj);
        if (!mine) j->obj = NULL;
        bool ok = resp.data_len == j->dst_len;
        if (ds__peer_read(pc, &resp, ok && mine ? j->dst : NULL, resp.data_len, dl) != 0)
            *pc_ok = ok = false;
        if (!ok || !mine) {
            j->transport_failed = 1;
            snprintf(j->err, sizeof(j->err), "pulling from worker %.200s failed mid-transfer",
                     j->addr);
        }
    } else {
        if (resp.data_len && ds__peer_read(pc, &resp, NULL, resp.data_len, dl) != 0) {
            *pc_ok = false;
            j->transport_failed = 1;
        }
        if (resp.status == DS_K_OK && !j->transport_failed &&
            ds__ucx_wait(u, op, dl, err, sizeof(err)) != 0) {
            j->transport_failed = 1;
            snprintf(j->err, sizeof(j->err), "pulling from worker %.100s: %.120s", j->addr, err);
        }
        if (resp.status == DS_K_OK && !j->transport_failed) {
            /* Complete: the loop publishes the range. */
            bool over = ds__ucx_drop(u, op, 0, release_range, j->pend->srv, j->obj);
            if (!over) j->transport_failed = 1; /* cannot happen: it finished */
        } else {
            drop_recv(u, j, op);
        }
    }
    ds__peer_resp_free(&resp);
}
