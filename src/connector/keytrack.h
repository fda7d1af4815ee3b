/* Per-request key bookkeeping for the datasystem-backed connectors, so that
 * cleanup(request_id) can delete what a request left in the store.
 *
 * A connector records every datasystem key it writes (and, for the
 * YuanrongConnector, reads) under the request id it came with, and every
 * stage edge it serves. cleanup(request_id) then takes the request's keys out
 * of the table and adds the request's deterministic key on each known edge,
 * which also covers a request the table never saw or already forgot (a
 * consumer that only ever timed out, say). The table holds at most
 * max_requests requests and forgets the oldest first: a forgotten request's
 * volatile keys are left to eviction, as they would be without cleanup. At
 * most OMNI__MAX_EDGES edges are remembered.
 *
 * Thread-safe: one mutex guards the table. */
#ifndef OMNI_CONNECTOR_KEYTRACK_H
#define OMNI_CONNECTOR_KEYTRACK_H

#include <stddef.h>

#include "ds/status.h"

#define OMNI__MAX_EDGES 64

typedef struct omni__keytrack omni__keytrack_t;

/* NULL when memory runs out. max_requests 0 means 1. */
omni__keytrack_t *omni__keytrack_new(size_t max_requests);
void omni__keytrack_free(omni__keytrack_t *t);

/* Remembers key under request_id (once) and the edge from_stage -> to_stage. */
ds_status_t omni__keytrack_add(omni__keytrack_t *t, const char *request_id, const char *key,
                               const char *from_stage, const char *to_stage);
/* Remembers only the edge (a get that found nothing still tells the edge). */
void omni__keytrack_add_edge(omni__keytrack_t *t, const char *from_stage, const char *to_stage);
/* Forgets key under request_id if it is there (a consumed payload). */
void omni__keytrack_drop(omni__keytrack_t *t, const char *request_id, const char *key);

/* Takes request_id's keys out of the table and appends
 * "{request_id}{sep}{from}_{to}" for every known edge (each key once).
 * *keys is an array of *n strings, freed with omni__keys_free; with nothing to
 * delete, *keys is NULL and *n 0. */
ds_status_t omni__keytrack_take(omni__keytrack_t *t, const char *request_id, char sep, char ***keys,
                                size_t *n);
/* Takes every tracked key out of the table (edges are not expanded). */
ds_status_t omni__keytrack_take_all(omni__keytrack_t *t, char ***keys, size_t *n);
/* Keys tracked now, over all requests. */
size_t omni__keytrack_count(omni__keytrack_t *t);

void omni__keys_free(char **keys, size_t n);

#endif
