/* The KV event publisher (--kv_events_config): every key stored in the
 * worker's table, and every key that leaves it (delete, eviction, expiry),
 * published on a ZMQ PUB socket as vLLM's KV event batches, for routers that
 * place requests by cache hits. */
#ifndef DS_WORKER_KV_EVENTS_H
#define DS_WORKER_KV_EVENTS_H

#include <stddef.h>

#include "worker/store/store.h"

typedef struct ds_kv_events ds_kv_events_t;

/* Parses json (Yuanrong's kv_events_config object), binds the socket,
 * starts the publisher thread, hooks the store's key events and publishes
 * one AllBlocksCleared (the worker starts empty). json "" = off: *out NULL,
 * 0. A bad config or a socket that cannot bind: -1 with err naming it. */
int ds__kv_events_start(const char *json, ds_store_t *store, ds_kv_events_t **out, char *err,
                        size_t err_cap);
/* Unhooks the store, publishes what is queued and stops. NULL is fine. */
void ds__kv_events_stop(ds_kv_events_t *ev, ds_store_t *store);

#endif
