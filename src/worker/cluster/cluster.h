/* The cluster, as the rest of the worker sees it: started by the core when
 * --etcd_address is set, it plugs into the operations layer through
 * srv->remote (ops/worker.h) and into the store's eviction hook, and needs
 * a tick from the loop for its peer links' deadlines. Everything else about
 * it (membership, ring, owners' tables, peer links and job threads) is in
 * cluster_int.h. */
#ifndef DS_WORKER_CLUSTER_CLUSTER_H
#define DS_WORKER_CLUSTER_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "worker/ops/worker.h"

/* Joins the cluster named by srv->cfg (nothing without --etcd_address).
 * 0, or -1 with a message. */
int ds__cluster_init(ds_server_t *srv, char *err, size_t err_cap);
/* Stops the cluster's threads and ends every request still waiting on a
 * peer (their connections are closed by then). */
void ds__cluster_destroy(ds_server_t *srv);
/* Fails overdue peer requests; returns the next deadline (0 = none). */
uint64_t ds__cluster_tick(ds_server_t *srv, uint64_t now);
/* Comma-separated member addresses into out; returns the member count. */
size_t ds__cluster_members(ds_server_t *srv, char *out, size_t cap);

#endif
