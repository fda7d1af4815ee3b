/* The UCX data plane (--enable_rdma): large values move from this worker's
 * arena with UCX tagged sends, over whatever transports UCX_TLS allows (RDMA
 * verbs, shared memory, TCP), to other workers' arenas (pulls: the requester
 * posts a tagged receive into the arena range it reserved and asks the owner
 * over its peer connection, UCX_PULL; cluster_ucx.c) and to remote clients'
 * buffers (UCX_GET; ops/ops_ucx.c). Control messages stay on TCP; the sender
 * holds a reference on the object until UCX reports the send done, failed,
 * or ended at its deadline.
 *
 * One UCX context and worker per process (thread mode MULTI), the arena mapped
 * once (ucp_mem_map) and named in every send and receive, and one progress
 * thread that sleeps on the UCX worker's event fd. Sends are posted from the
 * event loop and end there (their callbacks are queued to the loop through an
 * eventfd); receives are posted and waited for by job threads. */
#ifndef DS_WORKER_NET_UCX_H
#define DS_WORKER_NET_UCX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ucx_common.h"
#include "worker/net/loop.h"

typedef struct ds_ucx ds_ucx_t;
typedef struct ds_ucx_op ds_ucx_op_t;

/* Starts UCX over the arena [base, base+len). NULL with a message saying
 * why (e.g. UCX_TLS names no usable transport). */
ds_ucx_t *ds__ucx_new(ds_loop_t *loop, void *base, size_t len, char *err, size_t err_cap);
/* Wakes job threads waiting on receives (they fail); call before joining them. */
void ds__ucx_stopping(ds_ucx_t *u);
/* On the loop: stops the progress thread, closes every endpoint, ends what
 * is still in flight (send callbacks run, dropped receives are released). */
void ds__ucx_free(ds_ucx_t *u);
/* This worker's UCX address in hex, for its membership record. */
const char *ds__ucx_address(const ds_ucx_t *u);
/* A tag no earlier receive of this process used. */
uint64_t ds__ucx_new_tag(ds_ucx_t *u);

/* ---- the requester (a job thread) ---- */
/* Posts a receive of exactly len bytes at dst (inside the arena) for tag. */
ds_ucx_op_t *ds__ucx_recv(ds_ucx_t *u, uint64_t tag, void *dst, size_t len, char *err,
                          size_t err_cap);
/* Waits until the receive ends: 0 when all len bytes arrived, -1 (message)
 * on a transport error, a short message, the deadline or a stopping worker. */
int ds__ucx_wait(ds_ucx_t *u, ds_ucx_op_t *op, uint64_t deadline_ms, char *err, size_t err_cap);
/* The caller is done with the receive: an unfinished one is cancelled (by
 * the progress thread) and waited for up to wait_ms. true: it is over and
 * dst is the caller's again. false: UCX still owns dst (a transfer under
 * way); release(ctx, arg) runs on the loop once UCX has finished with it. */
bool ds__ucx_drop(ds_ucx_t *u, ds_ucx_op_t *op, uint64_t wait_ms,
                  void (*release)(void *ctx, void *arg), void *ctx, void *arg);

/* ---- the owner (the event loop) ---- */
typedef void (*ds_ucx_sent_fn)(void *ctx, bool ok, const char *err);
/* Sends len bytes at src (inside the arena) to tag on the UCX worker whose
 * address is addr_hex (peer names the endpoint: one per member, one per
 * client session). done runs on the loop once UCX is finished with src. A
 * send still unfinished at deadline_ms (a receiver alive but not taking the
 * data) is ended by closing its endpoint, which fails every send on it; done
 * then says so. -1 with a message when the send could not even start (done
 * is then not called). */
int ds__ucx_send(ds_ucx_t *u, const char *peer, const char *addr_hex, uint64_t tag, const void *src,
                 size_t len, uint64_t deadline_ms, ds_ucx_sent_fn done, void *ctx, char *err,
                 size_t err_cap);
/* On the loop: ends the sends past their deadline; the next deadline (0 = none). */
uint64_t ds__ucx_tick(ds_ucx_t *u, uint64_t now);
/* On the loop: closes peer's endpoint (its sends fail, their pins go) and
 * lets its entry be reused: a client session that ended. */
void ds__ucx_forget(ds_ucx_t *u, const char *peer);
/* Sends in flight now, and sends ended by their deadline so far. */
void ds__ucx_counts(const ds_ucx_t *u, uint64_t *in_flight, uint64_t *timeouts);

#endif
