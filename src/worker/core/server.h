/* The worker process (core layer): brings the layers up in order - store,
 * connections, operations, cluster - owns the listeners, signals and the
 * /metrics endpoint, and runs the event loop that also drives TTL expiry,
 * subscribe-get deadlines and the cluster's timers. Threads and locks:
 * ../THREADS.md. */
#ifndef DS_WORKER_CORE_SERVER_H
#define DS_WORKER_CORE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "worker/ops/worker.h"

int ds__server_init(ds_server_t *srv, const ds_worker_config_t *cfg, char *err, size_t err_cap);
/* Runs until SIGTERM/SIGINT or a SHUTDOWN request. */
void ds__server_run(ds_server_t *srv);
void ds__server_destroy(ds_server_t *srv);

/* probe.c: --health_check_path, --ready_check_path, --liveness_check_path */

/* Writes the probe files that are configured (the last step of starting).
 * 0, or -1 with a message. */
int ds__probe_start(ds_server_t *srv, char *err, size_t err_cap);
/* Rewrites the liveness file when due; returns when it is next due (0 = never). */
uint64_t ds__probe_tick(ds_server_t *srv, uint64_t now);
/* Removes the probe files this worker wrote (a clean stop). */
void ds__probe_stop(ds_server_t *srv);

/* metrics.c: Prometheus /metrics endpoint and latency histograms */

/* Creates the histograms, and the HTTP listener on --metrics_port when it is
 * not 0 (bound to the worker's host). 0, or -1 with a message. */
int ds__metrics_init(ds_server_t *srv, char *err, size_t err_cap);
void ds__metrics_destroy(ds_server_t *srv);
/* Records one request's latency (header arrival -> answer queued); srv is
 * the ds_server_t. */
void ds__metrics_observe(void *srv, uint16_t op, uint64_t ns);

#endif
