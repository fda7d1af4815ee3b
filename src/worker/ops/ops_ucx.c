/* UCX_GET: a remote client's get whose large values travel by UCX (see
 * common/wire.h). The GET machinery does everything else (waits, L2 loads,
 * cluster pulls); at the answer, each found value above inline_max goes out
 * as a UCX tagged send from the arena straight into the client's receive
 * buffer, and the answer only names it (kind UCX). The reference the answer
 * took on the object is the send's pin: it is dropped when UCX is done with
 * the bytes, when the send fails (the client's UCX endpoint broke), when the
 * client's session ends (its endpoint is closed, which ends the send), or at
 * the send's deadline (the client's wait plus DS_UCX_SEND_GRACE_MS: a client
 * alive but no longer receiving cannot hold the pin for ever). */
#include "worker/ops/ops_int.h"
#include "worker/ops/stream.h"
#include "worker/net/ucx.h"

#include "common/clock.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ds_server_t *srv;
    ds_obj_t *obj; /* the pin */
} client_send_t;

int ds__ops_ucx_trailer(ds_rbuf_t *rb, ds_ucx_get_t *t, char *msg, size_t cap)
{
    t->tag = ds__rbuf_u64(rb);
    t->max_size = ds__rbuf_u64(rb);
    t->wait_ms = ds__rbuf_u32(rb);
    const char *a;
    uint32_t al = ds__rbuf_str(rb, &a);
    if (rb->err) {
        snprintf(msg, cap,
                 "malformed UCX_GET: the tag, size limit, wait or UCX address is missing");
        return -1;
    }
    if (!ds__rbuf_done(rb)) {
        snprintf(msg, cap, "malformed UCX_GET: %zu trailing bytes", rb->len - rb->pos);
        return -1;
    }
    uint8_t bin[DS_UCX_ADDR_HEX_MAX / 2];
    if (t->tag == 0 || al < 2 || al > DS_UCX_ADDR_HEX_MAX ||
        ds__ucx_from_hex(a, al, bin, sizeof(bin)) <= 0) {
        snprintf(msg, cap,
                 "malformed UCX_GET: tag 0 or a UCX address of %u characters that is not "
                 "lowercase hex of 2..%d characters",
                 al, DS_UCX_ADDR_HEX_MAX);
        return -1;
    }
    memcpy(t->addr, a, al);
    t->addr[al] = '\0';
    return 0;
}

void ds__ops_ucx_peer(const ds_session_t *s, char *out, size_t cap)
{
    snprintf(out, cap, "client:%016" PRIx64, s->id);
}

static void client_sent(void *ctx, bool ok, const char *err)
{
    client_send_t *cs = ctx;
    ds_server_t *srv = cs->srv;
    if (ok) {
        srv->uctr.client_sends++;
        srv->uctr.client_bytes += cs->obj->size;
    } else {
        srv->uctr.client_send_failures++;
        DS_LOG_WARN("rdma: UCX send of '%.64s' (%" PRIu64 " bytes) to a client failed: %s",
                    cs->obj->key, (uint64_t)cs->obj->size, err);
    }
    ds__store_unref(srv->store, cs->obj);
    free(cs);
}

int ds__ops_ucx_send(ds_server_t *srv, ds_req_t *r, const ds_ucx_get_t *t, uint32_t i, ds_obj_t *o,
                     char *msg, size_t cap)
{
    client_send_t *cs = malloc(sizeof(*cs));
    if (cs == NULL) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    *cs = (client_send_t){.srv = srv, .obj = o};
    char peer[64];
    ds__ops_ucx_peer(r->session, peer, sizeof(peer));
    uint64_t deadline = ds__now_ms() + t->wait_ms + DS_UCX_SEND_GRACE_MS;
    char err[256];
    if (ds__ucx_send(srv->ucx, peer, t->addr, t->tag + i, ds__store_data(srv->store, o), o->size,
                     deadline, client_sent, cs, err, sizeof(err)) != 0) {
        free(cs);
        snprintf(msg, cap, "cannot send '%.64s' to this client over UCX: %s", o->key, err);
        return -1;
    }
    return 0;
}

void ds__ops_session_end(void *ctx, ds_session_t *s)
{
    ds_server_t *srv = ctx;
    ds__latch_session_end(srv, s);
    ds__ops_grefs_session_end(srv, s);
    if (srv->remote && srv->remote->session_end) srv->remote->session_end(srv, s);
    ds__stream_session_end(srv, s);
    if (srv->ucx && !s->is_unix) {
        char peer[64];
        ds__ops_ucx_peer(s, peer, sizeof(peer));
        ds__ucx_forget(srv->ucx, peer);
    }
}
