/* The transfer-config loader: vLLM-Omni's load_omni_transfer_config in C.
 * The file is read into a cfg_node_t tree (config_tree.c), the newer
 * `connectors:` + `stages:` shape is mapped onto the legacy `runtime.connectors`
 * + `stage_args` one, and every stage's input and output connectors become
 * edges; runtime edges and engine_input_source add SharedMemoryConnector
 * edges where nothing else was named. */
#include "omni/transfer_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/error.h"
#include "connector/config_tree.h"

#define MAX_CONFIG_BYTES (64u << 20)
#define DEFAULT_CONNECTOR "SharedMemoryConnector"

typedef struct {
    char *from, *to;
    omni_connector_spec_t spec; /* every string in it is owned by the edge */
    char origin[64];            /* which section named it first, for mismatch errors */
} edge_t;

struct omni_transfer_config {
    edge_t *edges;
    size_t n, cap;
};

typedef struct {
    const char *source;
    const cfg_node_t *connectors; /* map of id -> {name, extra}, or NULL */
    omni_transfer_config_t *cfg;
} loader_t;

static void free_spec(omni_connector_spec_t *s)
{
    for (size_t i = 0; i < s->n_extra; i++) {
        free((char *)s->extra[i].key);
        free((char *)s->extra[i].value);
    }
    free((omni_kv_t *)s->extra);
    free((char *)s->name);
    memset(s, 0, sizeof(*s));
}

void omni_transfer_config_free(omni_transfer_config_t *cfg)
{
    if (cfg == NULL) return;
    for (size_t i = 0; i < cfg->n; i++) {
        free(cfg->edges[i].from);
        free(cfg->edges[i].to);
        free_spec(&cfg->edges[i].spec);
    }
    free(cfg->edges);
    free(cfg);
}

static ds_status_t oom(const loader_t *l)
{
    return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory loading %s", l->source);
}

/* "file:line" for messages; just "file" when the line is unknown (JSON). */
static const char *where(const loader_t *l, const cfg_node_t *n, char *buf, size_t cap)
{
    if (n != NULL && n->line > 0)
        snprintf(buf, cap, "%s:%d", l->source, n->line);
    else
        snprintf(buf, cap, "%s", l->source);
    return buf;
}

/* Stage ids as vLLM-Omni keys them, str(int): "007" and "+7" are "7". */
static char *stage_text(const char *t)
{
    const char *p = t + (*t == '+' || *t == '-');
    bool digits = *p != '\0';
    for (const char *q = p; *q; q++)
        digits = digits && *q >= '0' && *q <= '9';
    if (!digits || strlen(p) > 18) return strdup(t);
    char buf[24];
    snprintf(buf, sizeof(buf), "%lld", strtoll(t, NULL, 10));
    return strdup(buf);
}

static const char *kind_name(const cfg_node_t *n)
{
    static const char *names[] = {"null", "a scalar", "a mapping", "a list"};
    return names[n->kind];
}

/* A section that must be a mapping or list (or absent/null). */
static ds_status_t want(const loader_t *l, const cfg_node_t *n, cfg_kind_t kind, const char *name)
{
    char w[300];
    if (n == NULL || n->kind == CFG_NULL || n->kind == kind) return DS_K_OK;
    return ds__set_error(DS_K_INVALID, "%s: '%s' must be %s, not %s", where(l, n, w, sizeof(w)),
                         name, kind == CFG_MAP ? "a mapping" : "a list", kind_name(n));
}

static edge_t *find_edge(const omni_transfer_config_t *cfg, const char *from, const char *to)
{
    for (size_t i = 0; i < cfg->n; i++) {
        if (strcmp(cfg->edges[i].from, from) == 0 && strcmp(cfg->edges[i].to, to) == 0)
            return &cfg->edges[i];
    }
    return NULL;
}

/* Adds an edge; takes from, to and spec (spec may be a zeroed "default"). */
static ds_status_t add_edge(loader_t *l, char *from, char *to, omni_connector_spec_t *spec,
                            const char *origin)
{
    omni_transfer_config_t *cfg = l->cfg;
    if (cfg->n == cfg->cap) {
        size_t cap = cfg->cap ? cfg->cap * 2 : 8;
        edge_t *e = realloc(cfg->edges, cap * sizeof(*e));
        if (e == NULL) {
            free(from);
            free(to);
            free_spec(spec);
            return oom(l);
        }
        cfg->edges = e;
        cfg->cap = cap;
    }
    edge_t *e = &cfg->edges[cfg->n++];
    e->from = from;
    e->to = to;
    e->spec = *spec;
    snprintf(e->origin, sizeof(e->origin), "%s", origin);
    return DS_K_OK;
}

/* Builds a spec from a {name, extra} mapping. */
static ds_status_t spec_from_def(loader_t *l, const cfg_node_t *def, const char *ctx,
                                 omni_connector_spec_t *out)
{
    char w[300];
    memset(out, 0, sizeof(*out));
    const cfg_node_t *name = cfg_get(def, "name");
    if (name == NULL || name->kind != CFG_SCALAR || name->text[0] == '\0')
        return ds__set_error(DS_K_INVALID, "%s: %s has no connector name",
                             where(l, def, w, sizeof(w)), ctx);
    const cfg_node_t *extra = cfg_get(def, "extra");
    if (extra != NULL && extra->kind != CFG_NULL && extra->kind != CFG_MAP)
        return ds__set_error(DS_K_INVALID, "%s: %s: 'extra' must be a mapping, not %s",
                             where(l, extra, w, sizeof(w)), ctx, kind_name(extra));
    if ((out->name = strdup(name->text)) == NULL) return oom(l);
    size_t n = extra != NULL && extra->kind == CFG_MAP ? extra->n : 0;
    omni_kv_t *kv = n > 0 ? calloc(n, sizeof(*kv)) : NULL;
    if (n > 0 && kv == NULL) {
        free_spec(out);
        return oom(l);
    }
    out->extra = kv;
    /* A key given twice (a << merge, a repeated JSON key) keeps its first
     * position and its last value, as a Python dict built from it would. */
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(extra->keys[j], extra->keys[i]) == 0;
        if (seen) continue;
        size_t last = i;
        for (size_t j = i + 1; j < n; j++) {
            if (strcmp(extra->keys[j], extra->keys[i]) == 0) last = j;
        }
        char *value;
        size_t k = out->n_extra++;
        kv[k].key = strdup(extra->keys[i]);
        if (kv[k].key == NULL || !cfg_to_text(extra->items[last], &value)) {
            free_spec(out);
            return oom(l);
        }
        kv[k].value = value;
    }
    return DS_K_OK;
}

static void defined_ids(const loader_t *l, char *buf, size_t cap)
{
    size_t pos = 0;
    buf[0] = '\0';
    size_t n = l->connectors != NULL && l->connectors->kind == CFG_MAP ? l->connectors->n : 0;
    for (size_t i = 0; i < n && pos < cap; i++) {
        int k = snprintf(buf + pos, cap - pos, "%s%s", i ? ", " : "", l->connectors->keys[i]);
        pos += k > 0 ? (size_t)k : 0;
    }
    if (n == 0) snprintf(buf, cap, "none");
}

/* Resolves one input/output connector entry (an id or an inline spec). */
static ds_status_t resolve_ref(loader_t *l, const cfg_node_t *ref, const char *ctx,
                               omni_connector_spec_t *out)
{
    char w[300];
    memset(out, 0, sizeof(*out));
    if (ref->kind == CFG_MAP) return spec_from_def(l, ref, ctx, out);
    if (ref->kind != CFG_SCALAR)
        return ds__set_error(DS_K_INVALID,
                             "%s: %s must name a connector or give an inline {name, extra}, "
                             "not %s",
                             where(l, ref, w, sizeof(w)), ctx, kind_name(ref));
    const cfg_node_t *def = cfg_get(l->connectors, ref->text);
    if (def == NULL) {
        char ids[200];
        defined_ids(l, ids, sizeof(ids));
        return ds__set_error(DS_K_INVALID,
                             "%s: %s: undefined connector reference '%s' (defined: %s)",
                             where(l, ref, w, sizeof(w)), ctx, ref->text, ids);
    }
    if (def->kind != CFG_MAP)
        return ds__set_error(DS_K_INVALID, "%s: connector '%s' must be a mapping, not %s",
                             where(l, def, w, sizeof(w)), ref->text, kind_name(def));
    return spec_from_def(l, def, ctx, out);
}

/* One stage's input_connectors (input true) or output_connectors. */
static ds_status_t stage_connectors(loader_t *l, const cfg_node_t *stage, const char *sid,
                                    bool input)
{
    const char *section = input ? "input_connectors" : "output_connectors";
    const char *prefix = input ? "from_stage_" : "to_stage_";
    const cfg_node_t *map = cfg_get(stage, section);
    ds_status_t st = want(l, map, CFG_MAP, section);
    if (st != DS_K_OK || map == NULL || map->kind != CFG_MAP) return st;
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < map->n; i++) {
        const char *key = map->keys[i];
        const char *other = strncmp(key, prefix, plen) == 0 ? key + plen : key;
        char *from = stage_text(input ? other : sid);
        char *to = stage_text(input ? sid : other);
        if (from == NULL || to == NULL) {
            free(from);
            free(to);
            return oom(l);
        }
        char ctx[400], origin[64];
        snprintf(ctx, sizeof(ctx), "stage %s, edge %s->%s (%s.%s)", sid, from, to, section, key);
        snprintf(origin, sizeof(origin), "%s of stage %s", section, sid);
        omni_connector_spec_t spec;
        st = resolve_ref(l, map->items[i], ctx, &spec);
        edge_t *e = st == DS_K_OK ? find_edge(l->cfg, from, to) : NULL;
        if (st != DS_K_OK || e != NULL) {
            char w[300];
            if (e != NULL && strcmp(e->spec.name, spec.name) != 0)
                st = ds__set_error(DS_K_INVALID,
                                   "%s: stage %s, edge %s->%s: connector mismatch: %s named "
                                   "'%s', but %s names '%s'",
                                   where(l, map->items[i], w, sizeof(w)), sid, from, to, e->origin,
                                   e->spec.name, origin, spec.name);
            free_spec(&spec);
            free(from);
            free(to);
            if (st != DS_K_OK) return st;
            continue;
        }
        if ((st = add_edge(l, from, to, &spec, origin)) != DS_K_OK) return st;
    }
    return DS_K_OK;
}

/* An edge named only by runtime edges or engine_input_source. */
static ds_status_t implied_edge(loader_t *l, const char *from_text, const char *to_text,
                                const char *origin)
{
    char *from = stage_text(from_text), *to = stage_text(to_text);
    omni_connector_spec_t spec = {strdup(DEFAULT_CONNECTOR), NULL, 0};
    if (from == NULL || to == NULL || spec.name == NULL) {
        free(from);
        free(to);
        free_spec(&spec);
        return oom(l);
    }
    if (find_edge(l->cfg, from, to) != NULL) {
        free(from);
        free(to);
        free_spec(&spec);
        return DS_K_OK;
    }
    return add_edge(l, from, to, &spec, origin);
}

static const char *scalar(const cfg_node_t *n)
{
    return n != NULL && n->kind == CFG_SCALAR ? n->text : NULL;
}

static ds_status_t interpret(loader_t *l, const cfg_node_t *root)
{
    char w[300];
    if (root == NULL) return DS_K_OK;
    if (root->kind != CFG_MAP)
        return ds__set_error(DS_K_INVALID, "%s: the top level must be a mapping, not %s",
                             where(l, root, w, sizeof(w)), kind_name(root));
    const cfg_node_t *runtime = cfg_get(root, "runtime");
    ds_status_t st = want(l, runtime, CFG_MAP, "runtime");
    if (st != DS_K_OK) return st;
    const cfg_node_t *stages = cfg_get(root, "stage_args");
    const char *stages_name = "stage_args";
    const cfg_node_t *connectors = cfg_get(runtime, "connectors");
    const cfg_node_t *edges = cfg_get(runtime, "edges");
    if (cfg_get(root, "stages") != NULL && stages == NULL) {
        /* The newer schema: top-level connectors/edges unless runtime has them. */
        stages = cfg_get(root, "stages");
        stages_name = "stages";
        if (connectors == NULL) connectors = cfg_get(root, "connectors");
        if (edges == NULL) edges = cfg_get(root, "edges");
    }
    if ((st = want(l, stages, CFG_SEQ, stages_name)) != DS_K_OK ||
        (st = want(l, connectors, CFG_MAP, "connectors")) != DS_K_OK)
        return st;
    l->connectors = connectors;
    size_t n_stages = stages != NULL && stages->kind == CFG_SEQ ? stages->n : 0;
    char **sids = n_stages > 0 ? calloc(n_stages, sizeof(*sids)) : NULL;
    if (n_stages > 0 && sids == NULL) return oom(l);
    for (size_t i = 0; i < n_stages && st == DS_K_OK; i++) {
        const cfg_node_t *stage = stages->items[i];
        const char *sid = stage->kind == CFG_MAP ? scalar(cfg_get(stage, "stage_id")) : NULL;
        if (sid == NULL) {
            st = ds__set_error(DS_K_INVALID, "%s: %s[%zu] needs a scalar stage_id",
                               where(l, stage, w, sizeof(w)), stages_name, i);
        } else if ((sids[i] = stage_text(sid)) == NULL) {
            st = oom(l);
        } else if ((st = stage_connectors(l, stage, sids[i], true)) == DS_K_OK) {
            st = stage_connectors(l, stage, sids[i], false);
        }
    }
    /* Runtime edges, then engine_input_source: anything unnamed gets SHM.
     * Malformed entries are skipped, as vLLM-Omni only warns about them. */
    if (st == DS_K_OK && edges != NULL && edges->kind == CFG_SEQ) {
        for (size_t i = 0; i < edges->n && st == DS_K_OK; i++) {
            const char *from = scalar(cfg_get(edges->items[i], "from"));
            const char *to = scalar(cfg_get(edges->items[i], "to"));
            if (from != NULL && to != NULL) st = implied_edge(l, from, to, "runtime edges");
        }
    }
    for (size_t i = 0; i < n_stages && st == DS_K_OK; i++) {
        const cfg_node_t *src = cfg_get(stages->items[i], "engine_input_source");
        if (src == NULL || src->kind == CFG_NULL || src->kind == CFG_MAP) continue;
        size_t n = src->kind == CFG_SEQ ? src->n : 1;
        for (size_t k = 0; k < n && st == DS_K_OK; k++) {
            const char *from = src->kind == CFG_SEQ ? scalar(src->items[k]) : src->text;
            if (from != NULL) st = implied_edge(l, from, sids[i], "engine_input_source");
        }
    }
    for (size_t i = 0; i < n_stages; i++)
        free(sids[i]);
    free(sids);
    return st;
}

ds_status_t omni_transfer_config_parse(const char *text, size_t len, omni_config_format_t format,
                                       const char *source, omni_transfer_config_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_transfer_config_parse: out is NULL");
    *out = NULL;
    if (source == NULL) source = "<memory>";
    if (text == NULL && len > 0) return ds__set_error(DS_K_INVALID, "%s: text is NULL", source);
    if (format != OMNI_CONFIG_YAML && format != OMNI_CONFIG_JSON)
        return ds__set_error(DS_K_INVALID, "%s: unknown config format %d", source, format);
    cfg_node_t *root = NULL;
    ds_status_t st = format == OMNI_CONFIG_YAML
                         ? cfg_parse_yaml(text ? text : "", len, source, &root)
                         : cfg_parse_json(text ? text : "", len, source, &root);
    if (st != DS_K_OK) return st;
    loader_t l = {source, NULL, calloc(1, sizeof(omni_transfer_config_t))};
    if (l.cfg == NULL) {
        cfg_free(root);
        return oom(&l);
    }
    st = interpret(&l, root);
    cfg_free(root);
    if (st != DS_K_OK) {
        omni_transfer_config_free(l.cfg);
        return st;
    }
    *out = l.cfg;
    return DS_K_OK;
}

static ds_status_t read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return ds__set_error(DS_K_IO_ERROR, "cannot open config file %s: %s", path,
                             strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    ds_status_t st = DS_K_OK;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16384;
            char *nb = cap <= MAX_CONFIG_BYTES ? realloc(buf, cap + 1) : NULL;
            if (nb == NULL) {
                st = cap > MAX_CONFIG_BYTES
                         ? ds__set_error(DS_K_INVALID, "config file %s is larger than %u bytes",
                                         path, MAX_CONFIG_BYTES)
                         : ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %s", path);
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) st = ds__set_error(DS_K_IO_ERROR, "cannot read config file %s", path);
            break;
        }
    }
    fclose(f);
    if (st != DS_K_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return DS_K_OK;
}

ds_status_t omni_transfer_config_load(const char *path, omni_transfer_config_t **out)
{
    if (out == NULL || path == NULL)
        return ds__set_error(DS_K_INVALID, "omni_transfer_config_load: NULL argument");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            return ds__set_error(DS_K_NOT_FOUND, "config file not found: %s", path);
        return ds__set_error(DS_K_IO_ERROR, "cannot stat config file %s: %s", path,
                             strerror(errno));
    }
    if (S_ISDIR(sb.st_mode))
        return ds__set_error(DS_K_IO_ERROR, "config file %s is a directory", path);
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash != NULL ? slash : path, '.');
    const char *ext = dot != NULL ? dot : "";
    omni_config_format_t format;
    if (strcasecmp(ext, ".yaml") == 0 || strcasecmp(ext, ".yml") == 0)
        format = OMNI_CONFIG_YAML;
    else if (strcasecmp(ext, ".json") == 0)
        format = OMNI_CONFIG_JSON;
    else
        return ds__set_error(DS_K_INVALID,
                             "%s: unsupported config file type '%s' (use .yaml, .yml or .json)",
                             path, ext);
    char *text = NULL;
    size_t len = 0;
    ds_status_t st = read_file(path, &text, &len);
    if (st != DS_K_OK) return st;
    st = omni_transfer_config_parse(text, len, format, path, out);
    free(text);
    return st;
}

size_t omni_transfer_config_edge_count(const omni_transfer_config_t *cfg)
{
    return cfg == NULL ? 0 : cfg->n;
}

ds_status_t omni_transfer_config_edge_at(const omni_transfer_config_t *cfg, size_t i,
                                         const char **from_stage, const char **to_stage,
                                         const omni_connector_spec_t **spec)
{
    if (cfg == NULL || i >= cfg->n)
        return ds__set_error(DS_K_INVALID, "edge %zu is out of range (%zu edges)", i,
                             cfg == NULL ? 0 : cfg->n);
    if (from_stage != NULL) *from_stage = cfg->edges[i].from;
    if (to_stage != NULL) *to_stage = cfg->edges[i].to;
    if (spec != NULL) *spec = &cfg->edges[i].spec;
    return DS_K_OK;
}

const omni_connector_spec_t *omni_transfer_config_find(const omni_transfer_config_t *cfg,
                                                       const char *from_stage, const char *to_stage)
{
    if (cfg == NULL || from_stage == NULL || to_stage == NULL) return NULL;
    const edge_t *e = find_edge(cfg, from_stage, to_stage);
    return e != NULL ? &e->spec : NULL;
}
