/* Worker-to-worker RPC (see peer.h). */
#include "worker/cluster/peer.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/tls.h"
#include "ds/status.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ds_pconn {
    ds_pconn_t *next;
    int fd;
    ds_tls_t *tls; /* --enable_tls, else NULL */
    uint64_t next_req;
    char addr[300];
};

struct ds_peers {
    pthread_mutex_t mu;
    ds_pconn_t *idle;
    char *token;
    ds_peer_auth_t *auth;
    ds_tls_ctx_t *tls;
};

static void pconn_free(ds_pconn_t *c)
{
    ds__tls_free(c->tls);
    close(c->fd);
    free(c);
}

/* The socket's bytes, through the TLS session when there is one. */
static int pconn_write(ds_pconn_t *c, const void *buf, size_t len, uint64_t deadline_ms)
{
    if (c->tls) return ds__tls_write_full(c->tls, c->fd, buf, len, deadline_ms);
    return ds__write_full(c->fd, buf, len, deadline_ms);
}

static int pconn_read(ds_pconn_t *c, void *buf, size_t len, uint64_t deadline_ms)
{
    if (c->tls) return ds__tls_read_full(c->tls, c->fd, buf, len, deadline_ms);
    return ds__read_full(c->fd, buf, len, deadline_ms);
}

ds_peers_t *ds__peers_new(const char *token, ds_peer_auth_t *auth, ds_tls_ctx_t *tls)
{
    ds_peers_t *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    p->auth = auth;
    p->tls = tls;
    pthread_mutex_init(&p->mu, NULL);
    p->token = strdup(token ? token : "");
    return p;
}

void ds__peers_free(ds_peers_t *p)
{
    if (p == NULL) return;
    while (p->idle) {
        ds_pconn_t *c = p->idle;
        p->idle = c->next;
        pconn_free(c);
    }
    pthread_mutex_destroy(&p->mu);
    free(p->token);
    free(p);
}

void ds__peers_forget(ds_peers_t *p, const char *addr)
{
    pthread_mutex_lock(&p->mu);
    for (ds_pconn_t **pp = &p->idle; *pp;) {
        if (strcmp((*pp)->addr, addr) == 0) {
            ds_pconn_t *c = *pp;
            *pp = c->next;
            pconn_free(c);
        } else {
            pp = &(*pp)->next;
        }
    }
    pthread_mutex_unlock(&p->mu);
}

static int send_frame(ds_pconn_t *c, uint16_t op, uint8_t flags, const ds_wbuf_t *meta,
                      const struct iovec *data, int ndata, uint64_t deadline_ms)
{
    uint64_t dl = 0;
    for (int i = 0; i < ndata; i++)
        dl += data[i].iov_len;
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = flags,
                          .opcode = op,
                          .meta_len = meta ? (uint32_t)meta->len : 0,
                          .req_id = ++c->next_req,
                          .data_len = dl};
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, hb);
    if (pconn_write(c, hb, sizeof(hb), deadline_ms) != 0) return -1;
    if (meta && meta->len && pconn_write(c, meta->buf, meta->len, deadline_ms) != 0) return -1;
    for (int i = 0; i < ndata; i++)
        if (pconn_write(c, data[i].iov_base, data[i].iov_len, deadline_ms) != 0) return -1;
    return 0;
}

static int read_resp(ds_pconn_t *c, ds_peer_resp_t *resp, uint64_t deadline_ms)
{
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h;
    memset(resp, 0, sizeof(*resp));
    if (pconn_read(c, hb, sizeof(hb), deadline_ms) != 0) {
        snprintf(resp->err, sizeof(resp->err), "peer %.200s: %s", c->addr,
                 errno == ETIMEDOUT ? "timed out" : "connection lost");
        return -1;
    }
    if (ds__wire_header_decode(hb, UINT64_MAX, &h, resp->err, sizeof(resp->err)) != 0 ||
        !(h.flags & DS_FLAG_RESPONSE) || h.req_id != c->next_req)
        return -1;
    resp->status = h.status;
    resp->meta_len = h.meta_len;
    resp->data_len = h.data_len;
    resp->meta = malloc(h.meta_len ? h.meta_len : 1);
    if (resp->meta == NULL || pconn_read(c, resp->meta, h.meta_len, deadline_ms) != 0) {
        snprintf(resp->err, sizeof(resp->err), "peer %.200s: connection lost", c->addr);
        return -1;
    }
    ds__rbuf_init(&resp->r, resp->meta, h.meta_len);
    const char *e;
    uint32_t el = ds__rbuf_str(&resp->r, &e);
    snprintf(resp->err, sizeof(resp->err), "%.*s", (int)el, e);
    return 0;
}

/* A member whose record has not reached the acceptor yet is told
 * K_TRY_AGAIN: ask again after this long, for at most DS_PEER_AUTH_WAIT_MS
 * (a watch delivers a new record in milliseconds; an acceptor that stays
 * behind longer, e.g. cut off from etcd, should not hold a job thread for a
 * job's whole deadline). */
#define DS_PEER_AUTH_RETRY_MS 100
#define DS_PEER_AUTH_WAIT_MS 3000

/* The initiator's side of PEER_AUTH (common/wire.h) on a HELLO'd connection.
 * 0, or -1 with a message. */
static int peer_auth(ds_peers_t *p, ds_pconn_t *c, const char *peer_pub, uint64_t deadline_ms,
                     char *err, size_t err_cap)
{
    const char *self = ds__peer_auth_self(p->auth);
    char na[DS_AUTH_HEX_LEN + 1], nb[DS_AUTH_HEX_LEN + 1], proof[DS_PEER_PROOF_MAX + 1];
    if (ds__auth_challenge(na) != 0) {
        snprintf(err, err_cap, "no randomness for a peer nonce");
        return -1;
    }
    ds_peer_resp_t r = {0};
    uint64_t retry_until = ds__now_ms() + DS_PEER_AUTH_WAIT_MS;
    if (retry_until > deadline_ms) retry_until = deadline_ms;
    for (;;) {
        ds_wbuf_t m;
        ds__wbuf_init(&m);
        ds__wbuf_u8(&m, 1);
        ds__wbuf_cstr(&m, self);
        ds__wbuf_cstr(&m, na);
        int rc = send_frame(c, DS_OP_PEER_AUTH, 0, &m, NULL, 0, deadline_ms);
        ds__wbuf_free(&m);
        if (rc == 0) rc = read_resp(c, &r, deadline_ms);
        if (rc != 0) {
            ds__peer_resp_free(&r);
            snprintf(err, err_cap, "peer %s: connection lost during PEER_AUTH", c->addr);
            return -1;
        }
        if (r.status != DS_K_TRY_AGAIN || ds__now_ms() + DS_PEER_AUTH_RETRY_MS >= retry_until)
            break;
        ds__peer_resp_free(&r);
        usleep(DS_PEER_AUTH_RETRY_MS * 1000);
    }
    if (r.status != DS_K_OK) {
        snprintf(err, err_cap, "peer %s refused PEER_AUTH: %s", c->addr, r.err);
        ds__peer_resp_free(&r);
        return -1;
    }
    const char *s, *pb;
    uint32_t sl = ds__rbuf_str(&r.r, &s);
    uint32_t pl = ds__rbuf_str(&r.r, &pb);
    bool ok = !r.r.err && ds__peer_auth_nonce_ok(s, sl);
    if (ok) {
        memcpy(nb, s, sl);
        nb[sl] = '\0';
        ok = ds__peer_auth_check(p->auth, DS_PEER_ROLE_ACCEPTOR, self, c->addr, na, nb, pb, pl,
                                 peer_pub);
    }
    ds__peer_resp_free(&r);
    if (!ok) {
        ds__peer_auth_failed(p->auth);
        snprintf(err, err_cap, "peer %s did not prove it is a cluster member (%s does not match)",
                 c->addr,
                 ds__peer_auth_has_secret(p->auth) ? "its cluster secret"
                                                   : "its member key in etcd");
        return -1;
    }
    if (ds__peer_auth_prove(p->auth, DS_PEER_ROLE_INITIATOR, self, c->addr, na, nb, proof) != 0) {
        snprintf(err, err_cap, "cannot make a peer proof (libcrypto failed)");
        return -1;
    }
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, 2);
    ds__wbuf_cstr(&m, self);
    ds__wbuf_cstr(&m, na);
    ds__wbuf_cstr(&m, nb);
    ds__wbuf_cstr(&m, proof);
    int rc = send_frame(c, DS_OP_PEER_AUTH, 0, &m, NULL, 0, deadline_ms);
    ds__wbuf_free(&m);
    if (rc == 0) rc = read_resp(c, &r, deadline_ms);
    if (rc != 0) {
        ds__peer_resp_free(&r);
        snprintf(err, err_cap, "peer %s: connection lost during PEER_AUTH", c->addr);
        return -1;
    }
    rc = r.status == DS_K_OK ? 0 : -1;
    if (rc != 0) snprintf(err, err_cap, "peer %s refused PEER_AUTH: %s", c->addr, r.err);
    ds__peer_resp_free(&r);
    return rc;
}

ds_pconn_t *ds__peer_acquire(ds_peers_t *p, const char *addr, const char *peer_pub,
                             uint64_t deadline_ms, char *err, size_t err_cap)
{
    pthread_mutex_lock(&p->mu);
    for (ds_pconn_t **pp = &p->idle; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->addr, addr) == 0) {
            ds_pconn_t *c = *pp;
            *pp = c->next;
            pthread_mutex_unlock(&p->mu);
            return c;
        }
    }
    pthread_mutex_unlock(&p->mu);
    char host[256];
    int port;
    if (ds__parse_hostport(addr, host, sizeof(host), &port, err, err_cap) != 0) return NULL;
    int fd = ds__tcp_connect(host, port, 2000, err, err_cap);
    if (fd < 0) return NULL;
    ds_pconn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    c->fd = fd;
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    if (p->tls) {
        char te[256];
        c->tls = ds__tls_new(p->tls, fd, te, sizeof(te));
        if (c->tls == NULL || ds__tls_handshake(c->tls, deadline_ms, te, sizeof(te)) != 0) {
            snprintf(err, err_cap, "peer %s: %s", addr, te);
            pconn_free(c);
            return NULL;
        }
    }
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u32(&m, DS_WIRE_VERSION);
    ds__wbuf_u64(&m, 0);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_cstr(&m, "");
    ds_peer_resp_t r;
    int rc = send_frame(c, DS_OP_HELLO, 0, &m, NULL, 0, deadline_ms);
    if (rc == 0) rc = read_resp(c, &r, deadline_ms);
    ds__wbuf_free(&m);
    if (rc == 0 && r.status == DS_K_NOT_AUTHORIZED && p->token[0]) {
        /* Answer the worker's challenge with a second HELLO. */
        const char *ch;
        uint32_t cl = ds__rbuf_str(&r.r, &ch);
        char chal[DS_AUTH_HEX_LEN + 1], proof[DS_AUTH_HEX_LEN + 1];
        snprintf(chal, sizeof(chal), "%.*s", (int)cl, ch);
        ds__auth_prove(p->token, chal, proof);
        ds__peer_resp_free(&r);
        ds__wbuf_init(&m);
        ds__wbuf_u32(&m, DS_WIRE_VERSION);
        ds__wbuf_u64(&m, 0);
        ds__wbuf_u8(&m, 0);
        ds__wbuf_cstr(&m, proof);
        rc = send_frame(c, DS_OP_HELLO, 0, &m, NULL, 0, deadline_ms);
        if (rc == 0) rc = read_resp(c, &r, deadline_ms);
        ds__wbuf_free(&m);
    }
    if (rc != 0 || r.status != 0) {
        snprintf(err, err_cap, "peer %s refused HELLO: %s", addr, rc ? "connection lost" : r.err);
        if (rc == 0) ds__peer_resp_free(&r);
        pconn_free(c);
        return NULL;
    }
    ds__peer_resp_free(&r);
    if (peer_auth(p, c, peer_pub, deadline_ms, err, err_cap) != 0) {
        pconn_free(c);
        return NULL;
    }
    return c;
}

int ds__peer_request(ds_pconn_t *c, uint16_t op, const ds_wbuf_t *meta, const struct iovec *data,
                     int ndata, uint64_t deadline_ms, ds_peer_resp_t *resp)
{
    memset(resp, 0, sizeof(*resp));
    if (send_frame(c, op, DS_FLAG_PEER, meta, data, ndata, deadline_ms) != 0) {
        snprintf(resp->err, sizeof(resp->err), "peer %.200s: connection lost", c->addr);
        return -1;
    }
    return read_resp(c, resp, deadline_ms);
}

int ds__peer_read(ds_pconn_t *c, ds_peer_resp_t *resp, void *dst, uint64_t n, uint64_t deadline_ms)
{
    if (n > resp->data_len) return -1;
    if (dst) {
        if (pconn_read(c, dst, n, deadline_ms) != 0) return -1;
    } else {
        char junk[65536];
        for (uint64_t left = n; left > 0;) {
            size_t k = left > sizeof(junk) ? sizeof(junk) : (size_t)left;
            if (pconn_read(c, junk, k, deadline_ms) != 0) return -1;
            left -= k;
        }
    }
    resp->data_len -= n;
    return 0;
}

void ds__peer_resp_free(ds_peer_resp_t *resp)
{
    free(resp->meta);
    resp->meta = NULL;
}

void ds__peer_release(ds_peers_t *p, ds_pconn_t *c, bool ok)
{
    if (c == NULL) return;
    if (!ok) {
        pconn_free(c);
        return;
    }
    pthread_mutex_lock(&p->mu);
    c->next = p->idle;
    p->idle = c;
    pthread_mutex_unlock(&p->mu);
}

int ds__peer_detach(ds_pconn_t *c, ds_tls_t **tls)
{
    int fd = c->fd;
    *tls = c->tls;
    free(c);
    return fd;
}
