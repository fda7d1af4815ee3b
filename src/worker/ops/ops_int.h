/* Private to the operations layer (ops*.c). */
#ifndef DS_WORKER_OPS_OPS_INT_H
#define DS_WORKER_OPS_OPS_INT_H

#include "common/ucx_common.h"
#include "worker/ops/worker.h"

/* Answers are built with an empty error string in front (4 bytes: length
 * 0); once a per-key failure is known, this puts its message there. */
void ds__ops_lead_error(ds_wbuf_t *w, const char *msg);
/* Answers with w's metadata and the values in segs (refs[i] holding
 * segs[i]'s object, taken over), or K_OUT_OF_MEMORY when w ran out of
 * memory; frees w. */
void ds__ops_reply_values(ds_server_t *srv, ds_req_t *r, ds_status_t st, ds_wbuf_t *w,
                          const struct iovec *segs, ds_obj_t **refs, uint32_t nseg);

void ds__ops_create(ds_server_t *srv, ds_req_t *r);
/* Reads and checks the head SET, CREATE and SETR share (write mode, TTL,
 * existence, key count; n = 0 only when may_be_empty, each entry at least
 * min_entry bytes): 0, or -1 with a message naming the problem. */
int ds__ops_write_head(ds_rbuf_t *r, const char *what, bool may_be_empty, size_t min_entry,
                       uint8_t *mode, uint32_t *ttl, uint8_t *existence, uint32_t *n, char *msg,
                       size_t cap);
/* Publishes n written CREATING objects (pend[i] NULL where key i already
 * failed with status[i]) like the end of a SET: read latches, the storage
 * tier, the cluster, then the answer. Takes over the references in pend;
 * the arrays stay the caller's (they are copied). after(srv, r, after_arg,
 * pend, n) runs once the objects are published and before the answer is
 * built (when the request waited for a latch, r is then the deferred
 * request). */
typedef void (*ds_published_fn)(ds_server_t *srv, ds_req_t *r, const uint64_t arg[3],
                                ds_obj_t *const *objs, uint32_t n);
void ds__ops_publish_written(ds_server_t *srv, ds_req_t *r, ds_obj_t **pend, uint32_t *status,
                             uint32_t n, uint8_t existence, const char *first_err,
                             ds_published_fn after, const uint64_t after_arg[3]);
/* ops_space.c: SETR, a set from the session's reserved arena space. */
void ds__ops_setr(ds_server_t *srv, ds_req_t *r);
/* PUBLISH and RELEASE. */
void ds__ops_publish_release(ds_server_t *srv, ds_req_t *r);

/* ops_read.c */
void ds__ops_read(ds_server_t *srv, ds_req_t *r);

/* latch.c: read latches and the writers waiting for them. */
/* RLATCH, UNRLATCH, WLATCH and UNWLATCH (latch.c). */
void ds__ops_latch(ds_server_t *srv, ds_req_t *r);
/* True when some latch may block a write (a local one, or a cluster's
 * hint that an owner holds one): a write then checks its keys. */
bool ds__latch_any(ds_server_t *srv);
/* When any of the keys is latched: parks r and returns true; resume(srv,
 * d, ctx) runs once none is (d unparked: it must end d, or park it again
 * with a cancel callback of its own), cancel(ctx) instead if the connection
 * closes first. false: go ahead now. */
bool ds__latch_park(ds_server_t *srv, ds_req_t *r, const char *const *keys, const uint32_t *lens,
                    uint32_t n, ds_latch_resume_fn resume, ds_latch_cancel_fn cancel, void *ctx);

/* ops_ucx.c: UCX_GET, a remote client's get over UCX (common/wire.h) */
typedef struct {
    uint64_t tag, max_size;
    uint32_t wait_ms;
    char addr[DS_UCX_ADDR_HEX_MAX + 1];
} ds_ucx_get_t;
/* Reads and checks what UCX_GET adds after the GET layout (rb is past the
 * keys); -1 with a message when malformed. */
int ds__ops_ucx_trailer(ds_rbuf_t *rb, ds_ucx_get_t *t, char *msg, size_t cap);
/* Sends found value i (o, pinned by the caller's reference, which the send
 * takes over) to the client; -1 with a message (the reference stays the
 * caller's) when the send could not start. */
int ds__ops_ucx_send(ds_server_t *srv, ds_req_t *r, const ds_ucx_get_t *t, uint32_t i, ds_obj_t *o,
                     char *msg, size_t cap);
/* UCX_ADDR: vets and registers a session's UCX address (ops_ucx_addr.c). */
void ds__ops_ucx_addr(ds_server_t *srv, ds_req_t *r);
/* The UCX endpoint name of a client session. */
void ds__ops_ucx_peer(const ds_session_t *s, char *out, size_t cap);

#endif
