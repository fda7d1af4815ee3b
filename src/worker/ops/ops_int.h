/* Private to the operations layer (ops*.c). */
#ifndef DS_WORKER_OPS_OPS_INT_H
#define DS_WORKER_OPS_OPS_INT_H

#include "worker/ops/worker.h"

/* Answers are built with an empty error string in front (4 bytes: length
 * 0); once a per-key failure is known, this puts its message there. */
void ds__ops_lead_error(ds_wbuf_t *w, const char *msg);

void ds__ops_create(ds_server_t *srv, ds_req_t *r);
/* PUBLISH and RELEASE. */
void ds__ops_publish_release(ds_server_t *srv, ds_req_t *r);

#endif
