/* The table of built-in connectors (see builtins.h). A concrete connector in
 * this directory lists its factory name and constructor here; the factory
 * registers the entries in this order, before any other registration. Both
 * built-ins store payloads in a datasystem worker (dsconn.h):
 * YuanrongConnector anywhere, by deterministic key; SharedMemoryConnector in
 * the local worker's arena, with a metadata handoff. */
#include "connector/builtins.h"

#include <stddef.h>

const omni__builtin_t omni__builtins[] = {
    {"YuanrongConnector", omni__yuanrong_create},
    {"SharedMemoryConnector", omni__shm_create},
    {NULL, NULL},
};
