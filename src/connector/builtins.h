/* The connectors libomniconn ships, which the factory registers before its
 * first use so that a spec naming one of them works without any setup. */
#ifndef OMNI_CONNECTOR_BUILTINS_H
#define OMNI_CONNECTOR_BUILTINS_H

#include "omni/connector.h"

typedef struct {
    const char *name;
    omni_connector_ctor_t ctor;
} omni__builtin_t;

/* Terminated by an entry whose name is NULL. */
extern const omni__builtin_t omni__builtins[];

/* The built-in constructors (yuanrong.c, shm.c). */
ds_status_t omni__yuanrong_create(const omni_connector_spec_t *spec, void *user,
                                  omni_connector_t **out);
ds_status_t omni__shm_create(const omni_connector_spec_t *spec, void *user, omni_connector_t **out);

/* For the built-in extensions (stream_edge.c): enters c as a call does (the
 * shared lock, failing when closed) and hands out its ops and impl;
 * omni__connector_leave ends the call. */
ds_status_t omni__connector_enter(omni_connector_t *c, const char *op,
                                  const omni_connector_ops_t **ops, void **impl);
void omni__connector_leave(omni_connector_t *c);
/* True when ops are a datasystem-backed connector's (impl is omni__dsconn_t). */
bool omni__yuanrong_ops(const omni_connector_ops_t *ops);
bool omni__shm_ops(const omni_connector_ops_t *ops);

#endif
