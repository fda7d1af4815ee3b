/* Synchronous worker-to-worker RPC for the cluster's job threads: a pool of
 * TCP connections per peer address (HELLO'd and PEER_AUTH'd once, so each
 * side has proved to the other that it is a cluster member: peer_auth.h),
 * requests framed with the common wire codec and marked DS_FLAG_PEER so the
 * peer acts locally only. Thread-safe; never used from the event loop. */
#ifndef DS_WORKER_PEER_H
#define DS_WORKER_PEER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/tls.h"
#include "common/wire.h"
#include "worker/cluster/peer_auth.h"

typedef struct ds_peers ds_peers_t;
typedef struct ds_pconn ds_pconn_t;

typedef struct {
    uint32_t status;
    uint8_t *meta; /* owned; freed by ds__peer_resp_free */
    uint32_t meta_len;
    uint64_t data_len; /* data bytes still to read with ds__peer_read */
    ds_rbuf_t r;       /* positioned after the error string */
    char err[256];
} ds_peer_resp_t;

/* token: the client token (--auth_token_file) HELLO may ask for; auth: how
 * this worker proves itself to peers (not owned); tls: the client side of
 * --enable_tls (the peers' certificates must chain to its CA; it presents
 * this worker's), or NULL for plain TCP. */
ds_peers_t *ds__peers_new(const char *token, ds_peer_auth_t *auth, ds_tls_ctx_t *tls);
void ds__peers_free(ds_peers_t *p);
/* Closes every pooled connection to addr (the peer died or left). */
void ds__peers_forget(ds_peers_t *p, const char *addr);

/* A connection to addr, from the pool or new: a new one has completed
 * PEER_AUTH (peer_pub: addr's member key from its etcd record, NULL = none).
 * NULL with a message. */
ds_pconn_t *ds__peer_acquire(ds_peers_t *p, const char *addr, const char *peer_pub,
                             uint64_t deadline_ms, char *err, size_t err_cap);
/* Sends one request and reads the response header and metadata. 0, or -1 on
 * a transport failure (message in resp->err; the connection is then dead). */
int ds__peer_request(ds_pconn_t *c, uint16_t op, const ds_wbuf_t *meta, const struct iovec *data,
                     int ndata, uint64_t deadline_ms, ds_peer_resp_t *resp);
/* Reads n bytes of the response's data section into dst (NULL = discard). */
int ds__peer_read(ds_pconn_t *c, ds_peer_resp_t *resp, void *dst, uint64_t n, uint64_t deadline_ms);
void ds__peer_resp_free(ds_peer_resp_t *resp);
/* Takes the connected socket and its TLS session (NULL without TLS) out of
 * c (freeing c) for the caller to own. */
int ds__peer_detach(ds_pconn_t *c, ds_tls_t **tls);
/* Back to the pool when ok (and the response fully read), else closed. */
void ds__peer_release(ds_peers_t *p, ds_pconn_t *c, bool ok);

#endif
