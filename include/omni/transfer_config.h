/* Transfer-config loader (libomniconn): which connector carries each stage
 * edge of a vLLM-Omni pipeline, read from its stage config file, as
 * vLLM-Omni's load_omni_transfer_config does.
 *
 * Two shapes of file are understood, in YAML (.yaml, .yml; libyaml) or JSON
 * (.json; cJSON):
 *
 *   legacy:  stage_args: [{stage_id, input_connectors: {from_stage_N: ref},
 *                          output_connectors: {to_stage_N: ref},
 *                          engine_input_source: [N, ...]}, ...]
 *            runtime: {connectors: {id: {name, extra}}, edges: [{from, to}, ...]}
 *   newer:   connectors: {id: {name, extra}}   stages: [same as stage_args]
 *            (plus optional top-level edges)
 *
 * A ref is either the id of a defined connector or an inline {name, extra}
 * spec. Each (from, to) stage pair named on either end becomes an edge with
 * that spec; both ends of one edge must name the same connector type. Edges
 * only implied by runtime edges or engine_input_source get a
 * SharedMemoryConnector with no extra. Stage ids are kept as text ("0"), as
 * vLLM-Omni keys its edges by str(stage_id).
 *
 * Loading only reads the file: nothing here connects to any address the
 * config names.
 *
 * Errors (the message names the file, and where it applies the line, stage and
 * edge): DS_K_NOT_FOUND for a missing file; DS_K_IO_ERROR when it cannot be
 * read; DS_K_INVALID for an unknown file type, malformed YAML or JSON (with the
 * line), an undefined connector reference, two ends of an edge naming
 * different connectors, a connector without a name, or a section of the wrong
 * shape. */
#ifndef OMNI_TRANSFER_CONFIG_H
#define OMNI_TRANSFER_CONFIG_H

#include <stddef.h>

#include "ds/status.h"
#include "omni/connector.h"
#include "omni/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct omni_transfer_config omni_transfer_config_t;

typedef enum {
    OMNI_CONFIG_YAML = 0,
    OMNI_CONFIG_JSON = 1,
} omni_config_format_t;

/* Loads path; the format follows the extension (case-insensitive). */
OMNI_EXPORT ds_status_t omni_transfer_config_load(const char *path, omni_transfer_config_t **out);
/* Parses len bytes of text. source names it in error messages (NULL:
 * "<memory>"). An empty document gives a config without edges. */
OMNI_EXPORT ds_status_t omni_transfer_config_parse(const char *text, size_t len,
                                                   omni_config_format_t format, const char *source,
                                                   omni_transfer_config_t **out);
/* Frees the config and every spec and string it handed out. NULL is fine. */
OMNI_EXPORT void omni_transfer_config_free(omni_transfer_config_t *cfg);

/* Edges in the order vLLM-Omni registers them: per stage its input then its
 * output connectors, then runtime edges, then engine_input_source. */
OMNI_EXPORT size_t omni_transfer_config_edge_count(const omni_transfer_config_t *cfg);
/* Any of from, to and spec may be NULL. The strings and spec belong to cfg.
 * DS_K_INVALID when i is out of range. */
OMNI_EXPORT ds_status_t omni_transfer_config_edge_at(const omni_transfer_config_t *cfg, size_t i,
                                                     const char **from_stage, const char **to_stage,
                                                     const omni_connector_spec_t **spec);
/* The spec of edge from_stage -> to_stage, or NULL when there is no such edge. */
OMNI_EXPORT const omni_connector_spec_t *
omni_transfer_config_find(const omni_transfer_config_t *cfg, const char *from_stage,
                          const char *to_stage);

#ifdef __cplusplus
}
#endif
#endif
