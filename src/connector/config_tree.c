/* Reading YAML (libyaml's document loader) and JSON (cJSON) into cfg_node_t
 * trees, and writing nodes back as text for connector extras. YAML aliases are
 * expanded and `<<` merge keys applied as PyYAML's safe_load does, within
 * limits on depth and node count so an alias bomb cannot exhaust memory. */
#include "connector/config_tree.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "common/error.h"

#define CFG_MAX_DEPTH 64
#define CFG_MAX_NODES 1000000

void cfg_free(cfg_node_t *n)
{
    if (n == NULL) return;
    for (size_t i = 0; i < n->n; i++) {
        if (n->keys != NULL) free(n->keys[i]);
        cfg_free(n->items[i]);
    }
    free(n->keys);
    free(n->items);
    free(n->text);
    free(n);
}

const cfg_node_t *cfg_get(const cfg_node_t *map, const char *key)
{
    if (map == NULL || map->kind != CFG_MAP) return NULL;
    for (size_t i = map->n; i-- > 0;) {
        if (strcmp(map->keys[i], key) == 0) return map->items[i];
    }
    return NULL;
}

typedef struct {
    const char *source;
    size_t nodes;
    ds_status_t st;
} build_t;

static cfg_node_t *new_node(build_t *b, cfg_kind_t kind, int line)
{
    if (++b->nodes > CFG_MAX_NODES) {
        b->st = ds__set_error(DS_K_INVALID, "%s:%d: more than %d nodes (alias expansion?)",
                              b->source, line, CFG_MAX_NODES);
        return NULL;
    }
    cfg_node_t *n = calloc(1, sizeof(*n));
    if (n == NULL) {
        b->st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %s", b->source);
        return NULL;
    }
    n->kind = kind;
    n->line = line;
    return n;
}

/* Inserts (key, item) into a map, or item into a sequence, at position at;
 * takes both. */
static bool insert_item(build_t *b, cfg_node_t *parent, size_t at, char *key, cfg_node_t *item)
{
    bool ok = true;
    cfg_node_t **items = realloc(parent->items, (parent->n + 1) * sizeof(*items));
    if (items != NULL)
        parent->items = items;
    else
        ok = false;
    if (ok && parent->kind == CFG_MAP) {
        char **keys = realloc(parent->keys, (parent->n + 1) * sizeof(*keys));
        if (keys != NULL)
            parent->keys = keys;
        else
            ok = false;
    }
    if (!ok) {
        free(key);
        cfg_free(item);
        b->st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %s", b->source);
        return false;
    }
    size_t tail = parent->n - at;
    memmove(&parent->items[at + 1], &parent->items[at], tail * sizeof(*parent->items));
    parent->items[at] = item;
    if (parent->kind == CFG_MAP) {
        memmove(&parent->keys[at + 1], &parent->keys[at], tail * sizeof(*parent->keys));
        parent->keys[at] = key;
    }
    parent->n++;
    return true;
}

static bool add_item(build_t *b, cfg_node_t *parent, char *key, cfg_node_t *item)
{
    return insert_item(b, parent, parent->n, key, item);
}

/* ---- YAML ---- */

static bool yaml_is_null(const yaml_node_t *y)
{
    if (y->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *t = (const char *)y->data.scalar.value;
    return strcmp(t, "") == 0 || strcmp(t, "~") == 0 || strcmp(t, "null") == 0 ||
           strcmp(t, "Null") == 0 || strcmp(t, "NULL") == 0;
}

static cfg_node_t *from_yaml(build_t *b, yaml_document_t *doc, yaml_node_t *y, int depth);

/* Inserts the entries of a `<<` merge source into map at *pos, ahead of the
 * map's own keys. Lookups take the last entry, so the order PyYAML gives
 * merges (own keys win, then earlier sources over later ones) comes from
 * inserting later sources first. */
static bool yaml_merge(build_t *b, cfg_node_t *map, yaml_document_t *doc, yaml_node_t *src,
                       int depth, size_t *pos)
{
    int line = (int)src->start_mark.line + 1;
    if (src->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = src->data.sequence.items.top;
             it-- > src->data.sequence.items.start;) {
            if (!yaml_merge(b, map, doc, yaml_document_get_node(doc, *it), depth, pos))
                return false;
        }
        return true;
    }
    if (src->type != YAML_MAPPING_NODE) {
        b->st = ds__set_error(DS_K_INVALID, "%s:%d: a << merge needs a mapping", b->source, line);
        return false;
    }
    cfg_node_t *m = from_yaml(b, doc, src, depth);
    if (m == NULL) return false;
    bool ok = true;
    for (size_t i = 0; i < m->n && ok; i++) {
        ok = insert_item(b, map, (*pos)++, m->keys[i], m->items[i]);
        m->keys[i] = NULL;
        m->items[i] = NULL;
    }
    cfg_free(m);
    return ok;
}

static cfg_node_t *from_yaml(build_t *b, yaml_document_t *doc, yaml_node_t *y, int depth)
{
    int line = (int)y->start_mark.line + 1;
    if (depth > CFG_MAX_DEPTH) {
        b->st = ds__set_error(DS_K_INVALID, "%s:%d: nesting deeper than %d", b->source, line,
                              CFG_MAX_DEPTH);
        return NULL;
    }
    cfg_node_t *n;
    switch (y->type) {
    case YAML_SCALAR_NODE:
        if (yaml_is_null(y)) return new_node(b, CFG_NULL, line);
        if ((n = new_node(b, CFG_SCALAR, line)) == NULL) return NULL;
        n->quoted = y->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        n->text = strndup((const char *)y->data.scalar.value, y->data.scalar.length);
        if (n->text == NULL) {
            cfg_free(n);
            b->st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %s", b->source);
            return NULL;
        }
        return n;
    case YAML_SEQUENCE_NODE:
        if ((n = new_node(b, CFG_SEQ, line)) == NULL) return NULL;
        for (yaml_node_item_t *it = y->data.sequence.items.start; it < y->data.sequence.items.top;
             it++) {
            cfg_node_t *c = from_yaml(b, doc, yaml_document_get_node(doc, *it), depth + 1);
            if (c == NULL || !add_item(b, n, NULL, c)) {
                cfg_free(n);
                return NULL;
            }
        }
        return n;
    case YAML_MAPPING_NODE:
        if ((n = new_node(b, CFG_MAP, line)) == NULL) return NULL;
        size_t merge_pos = 0;
        for (yaml_node_pair_t *p = y->data.mapping.pairs.start; p < y->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            yaml_node_t *v = yaml_document_get_node(doc, p->value);
            if (k->type != YAML_SCALAR_NODE) {
                b->st = ds__set_error(DS_K_INVALID, "%s:%d: a mapping key is not a scalar",
                                      b->source, (int)k->start_mark.line + 1);
                cfg_free(n);
                return NULL;
            }
            const char *ktext = (const char *)k->data.scalar.value;
            if (k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(ktext, "<<") == 0) {
                if (!yaml_merge(b, n, doc, v, depth + 1, &merge_pos)) {
                    cfg_free(n);
                    return NULL;
                }
                continue;
            }
            char *key = strdup(ktext);
            cfg_node_t *c = key != NULL ? from_yaml(b, doc, v, depth + 1) : NULL;
            if (key == NULL)
                b->st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %s", b->source);
            if (c == NULL) {
                free(key);
                cfg_free(n);
                return NULL;
            }
            if (!add_item(b, n, key, c)) {
                cfg_free(n);
                return NULL;
            }
        }
        return n;
    default:
        return new_node(b, CFG_NULL, line);
    }
}

static ds_status_t yaml_error(const yaml_parser_t *p, const char *source)
{
    if (p->error == YAML_MEMORY_ERROR)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory parsing %s", source);
    if (p->error == YAML_READER_ERROR)
        return ds__set_error(DS_K_INVALID, "%s: malformed YAML at byte %zu: %s", source,
                             p->problem_offset, p->problem ? p->problem : "unreadable input");
    if (p->context != NULL)
        return ds__set_error(
            DS_K_INVALID, "%s:%zu:%zu: malformed YAML: %s (%s started at line %zu)", source,
            p->problem_mark.line + 1, p->problem_mark.column + 1,
            p->problem ? p->problem : "syntax error", p->context, p->context_mark.line + 1);
    return ds__set_error(DS_K_INVALID, "%s:%zu:%zu: malformed YAML: %s", source,
                         p->problem_mark.line + 1, p->problem_mark.column + 1,
                         p->problem ? p->problem : "syntax error");
}

ds_status_t cfg_parse_yaml(const char *text, size_t len, const char *source, cfg_node_t **out)
{
    *out = NULL;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory parsing %s", source);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_document_t doc;
    ds_status_t st = DS_K_OK;
    if (!yaml_parser_load(&parser, &doc)) {
        st = yaml_error(&parser, source);
        yaml_parser_delete(&parser);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    build_t b = {source, 0, DS_K_OK};
    cfg_node_t *tree = NULL;
    if (root != NULL && (tree = from_yaml(&b, &doc, root, 0)) == NULL) st = b.st;
    yaml_document_delete(&doc);
    if (st == DS_K_OK) {
        /* Like safe_load, accept exactly one document. */
        yaml_document_t next;
        if (!yaml_parser_load(&parser, &next)) {
            st = yaml_error(&parser, source);
        } else {
            yaml_node_t *extra = yaml_document_get_root_node(&next);
            if (extra != NULL)
                st = ds__set_error(DS_K_INVALID,
                                   "%s:%zu: malformed YAML: expected a single "
                                   "document, found another",
                                   source, extra->start_mark.line + 1);
            yaml_document_delete(&next);
        }
    }
    yaml_parser_delete(&parser);
    if (st != DS_K_OK) {
        cfg_free(tree);
        return st;
    }
    *out = tree;
    return DS_K_OK;
}

/* ---- JSON ---- */

/* The shortest %g text that reads back as the same double. */
static void number_text(double d, char *buf, size_t cap)
{
    if (d == floor(d) && fabs(d) < 9.2e18) {
        snprintf(buf, cap, "%lld", (long long)d);
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

static cfg_node_t *from_json(build_t *b, const cJSON *j, int depth)
{
    if (depth > CFG_MAX_DEPTH) {
        b->st = ds__set_error(DS_K_INVALID, "%s: nesting deeper than %d", b->source, CFG_MAX_DEPTH);
        return NULL;
    }
    cfg_node_t *n;
    if (cJSON_IsNull(j)) return new_node(b, CFG_NULL, 0);
    if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        bool obj = cJSON_IsObject(j);
        if ((n = new_node(b, obj ? CFG_MAP : CFG_SEQ, 0)) == NULL) return NULL;
        for (const cJSON *c = j->child; c != NULL; c = c->next) {
            char *key = NULL;
            if (obj && (key = strdup(c->string)) == NULL) {
                b->st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %s", b->source);
                cfg_free(n);
                return NULL;
            }
            cfg_node_t *child = from_json(b, c, depth + 1);
            if (child == NULL) {
                free(key);
                cfg_free(n);
                return NULL;
            }
            if (!add_item(b, n, key, child)) {
                cfg_free(n);
                return NULL;
            }
        }
        return n;
    }
    if ((n = new_node(b, CFG_SCALAR, 0)) == NULL) return NULL;
    char num[40];
    const char *text;
    if (cJSON_IsString(j)) {
        text = j->valuestring;
        n->quoted = true;
    } else if (cJSON_IsBool(j)) {
        text = cJSON_IsTrue(j) ? "true" : "false";
    } else {
        number_text(j->valuedouble, num, sizeof(num));
        text = num;
    }
    if ((n->text = strdup(text)) == NULL) {
        cfg_free(n);
        b->st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %s", b->source);
        return NULL;
    }
    return n;
}

static void line_col(const char *text, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

ds_status_t cfg_parse_json(const char *text, size_t len, const char *source, cfg_node_t **out)
{
    *out = NULL;
    size_t start = 0;
    while (start < len && strchr(" \t\r\n", text[start]) != NULL && text[start] != '\0')
        start++;
    if (start == len) return DS_K_OK; /* an empty document */
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t at = end != NULL && end >= text ? (size_t)(end - text) : 0;
    if (j != NULL) {
        /* Only whitespace may follow the value. */
        while (at < len && text[at] != '\0' && strchr(" \t\r\n", text[at]) != NULL)
            at++;
        if (at < len) {
            cJSON_Delete(j);
            j = NULL;
        }
    }
    if (j == NULL) {
        int line, col;
        line_col(text, at < len ? at : len, &line, &col);
        /* The text is not NUL-terminated: quote at most what is left of it. */
        int quote = at < len ? (int)(len - at < 20 ? len - at : 20) : 0;
        return ds__set_error(DS_K_INVALID, "%s:%d:%d: malformed JSON near '%.*s'", source, line,
                             col, quote, at < len ? text + at : "");
    }
    build_t b = {source, 0, DS_K_OK};
    cfg_node_t *tree = from_json(&b, j, 0);
    cJSON_Delete(j);
    if (tree == NULL) return b.st;
    *out = tree;
    return DS_K_OK;
}

/* ---- text for extras ---- */

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} strbuf_t;

static void put(strbuf_t *s, const char *p, size_t n)
{
    if (s->oom) return;
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (nb == NULL) {
            s->oom = true;
            return;
        }
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

static void put_json_string(strbuf_t *s, const char *t)
{
    put(s, "\"", 1);
    for (; *t; t++) {
        char esc[8];
        unsigned char c = (unsigned char)*t;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(s, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            put(s, esc, 6);
        } else {
            put(s, t, 1);
        }
    }
    put(s, "\"", 1);
}

/* A plain scalar that JSON can carry bare: a bool or a decimal number. */
static const char *bare_json(const char *t)
{
    if (strcasecmp(t, "true") == 0) return "true";
    if (strcasecmp(t, "false") == 0) return "false";
    const char *p = t + (*t == '-' || *t == '+');
    if (*p < '0' || *p > '9') return NULL;
    for (; *p; p++) {
        if (strchr("0123456789.eE+-", *p) == NULL) return NULL;
    }
    char *end;
    strtod(t, &end);
    return *end == '\0' ? t : NULL;
}

static void put_node(strbuf_t *s, const cfg_node_t *n)
{
    switch (n->kind) {
    case CFG_NULL:
        put(s, "null", 4);
        return;
    case CFG_SCALAR: {
        const char *bare = n->quoted ? NULL : bare_json(n->text);
        if (bare != NULL && bare[0] == '+') bare++;
        if (bare != NULL)
            put(s, bare, strlen(bare));
        else
            put_json_string(s, n->text);
        return;
    }
    case CFG_SEQ:
    case CFG_MAP:
        put(s, n->kind == CFG_MAP ? "{" : "[", 1);
        for (size_t i = 0; i < n->n; i++) {
            if (i > 0) put(s, ",", 1);
            if (n->kind == CFG_MAP) {
                put_json_string(s, n->keys[i]);
                put(s, ":", 1);
            }
            put_node(s, n->items[i]);
        }
        put(s, n->kind == CFG_MAP ? "}" : "]", 1);
        return;
    }
}

bool cfg_to_text(const cfg_node_t *n, char **out)
{
    *out = NULL;
    if (n == NULL || n->kind == CFG_NULL) return true;
    if (n->kind == CFG_SCALAR) {
        *out = strdup(n->text);
        return *out != NULL;
    }
    strbuf_t s = {NULL, 0, 0, false};
    put_node(&s, n);
    if (s.oom) {
        free(s.buf);
        return false;
    }
    *out = s.buf;
    return true;
}
