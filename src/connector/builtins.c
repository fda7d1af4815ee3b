/* The table of built-in connectors (see builtins.h). A concrete connector in
 * this directory lists its factory name and constructor here; the factory
 * registers the entries in this order, before any other registration. The
 * terminating entry is the only one until the concrete connectors land. */
#include "connector/builtins.h"

#include <stddef.h>

const omni__builtin_t omni__builtins[] = {
    {NULL, NULL},
};
