/* A small document tree shared by the YAML (libyaml) and JSON (cJSON) readers
 * of the transfer-config loader, so one interpreter serves both formats.
 * Scalars keep their source text; YAML nodes remember their line. */
#ifndef OMNI_CONNECTOR_CONFIG_TREE_H
#define OMNI_CONNECTOR_CONFIG_TREE_H

#include <stdbool.h>
#include <stddef.h>

#include "ds/status.h"

typedef enum { CFG_NULL, CFG_SCALAR, CFG_MAP, CFG_SEQ } cfg_kind_t;

typedef struct cfg_node {
    cfg_kind_t kind;
    int line;    /* 1-based; 0 when unknown (JSON) */
    char *text;  /* CFG_SCALAR: the scalar's text; NULL otherwise */
    bool quoted; /* CFG_SCALAR written as a string (quoted YAML, JSON string) */
    size_t n;
    char **keys;             /* CFG_MAP: n key texts */
    struct cfg_node **items; /* CFG_MAP values / CFG_SEQ items */
} cfg_node_t;

/* Parse text into a tree. source names the input in error messages. An empty
 * document gives *out NULL with DS_K_OK. Errors are DS_K_INVALID with
 * "source:line:col: malformed YAML|JSON: ..." or DS_K_OUT_OF_MEMORY. */
ds_status_t cfg_parse_yaml(const char *text, size_t len, const char *source, cfg_node_t **out);
ds_status_t cfg_parse_json(const char *text, size_t len, const char *source, cfg_node_t **out);

void cfg_free(cfg_node_t *n);

/* map[key] (the last entry, as YAML and JSON loaders keep), or NULL. */
const cfg_node_t *cfg_get(const cfg_node_t *map, const char *key);

/* The node as text for a connector spec's extra: a scalar's text, NULL for
 * null, and compact JSON for a sequence or map. Returns a malloc'd string in
 * *out (NULL for null); false when memory runs out. */
bool cfg_to_text(const cfg_node_t *n, char **out);

#endif
