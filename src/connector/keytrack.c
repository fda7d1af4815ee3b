/* The request -> keys table behind cleanup (see keytrack.h): an intrusive
 * hash table (common/dict.h) of requests, each with a small array of keys,
 * threaded on a list in insertion order so the oldest request is the one
 * forgotten when the table is full. The list owns the requests: the table
 * only finds them. */
#include "connector/keytrack.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dict.h"
#include "common/error.h"
#include "common/hash.h"

typedef struct req {
    ds_dict_node_t node; /* in the table, by id */
    char *id;
    char **keys;
    size_t n, cap;
    struct req *older, *newer; /* insertion order */
} req_t;

struct omni__keytrack {
    pthread_mutex_t mu;
    ds_dict_t table;
    size_t nreqs, nkeys, max_reqs;
    req_t *oldest, *newest;
    char *edge_from[OMNI__MAX_EDGES], *edge_to[OMNI__MAX_EDGES];
    size_t nedges;
};

static uint32_t id_hash(const char *id)
{
    return ds__murmur3_32(id, strlen(id), 0);
}

static bool req_id_eq(const ds_dict_node_t *n, const void *key, size_t len)
{
    const req_t *r = DS_DICT_ENTRY(n, req_t, node);
    return strlen(r->id) == len && memcmp(r->id, key, len) == 0;
}

static const ds_dict_type_t req_table_type = {req_id_eq, NULL};

omni__keytrack_t *omni__keytrack_new(size_t max_requests)
{
    omni__keytrack_t *t = calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    if (ds__dict_init(&t->table, &req_table_type, NULL, 64) != 0) {
        free(t);
        return NULL;
    }
    t->max_reqs = max_requests > 0 ? max_requests : 1;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

static void req_free(req_t *r)
{
    omni__keys_free(r->keys, r->n);
    free(r->id);
    free(r);
}

void omni__keytrack_free(omni__keytrack_t *t)
{
    if (t == NULL) return;
    ds__dict_clear(&t->table); /* first: it walks the requests */
    for (req_t *r = t->oldest, *next; r != NULL; r = next) {
        next = r->newer;
        req_free(r);
    }
    for (size_t i = 0; i < t->nedges; i++) {
        free(t->edge_from[i]);
        free(t->edge_to[i]);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void omni__keys_free(char **keys, size_t n)
{
    if (keys == NULL) return;
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

static req_t *do_find(omni__keytrack_t *t, const char *id)
{
    ds_dict_node_t *n = ds__dict_find(&t->table, id, strlen(id), id_hash(id));
    return n ? DS_DICT_ENTRY(n, req_t, node) : NULL;
}

/* Unlinks r from the table and the age list; the caller frees it. */
static void do_unlink(omni__keytrack_t *t, req_t *r)
{
    ds__dict_remove(&t->table, &r->node);
    if (r->older != NULL)
        r->older->newer = r->newer;
    else
        t->oldest = r->newer;
    if (r->newer != NULL)
        r->newer->older = r->older;
    else
        t->newest = r->older;
    t->nreqs--;
    t->nkeys -= r->n;
}

static void do_add_edge(omni__keytrack_t *t, const char *from, const char *to)
{
    for (size_t i = 0; i < t->nedges; i++) {
        if (strcmp(t->edge_from[i], from) == 0 && strcmp(t->edge_to[i], to) == 0) return;
    }
    if (t->nedges == OMNI__MAX_EDGES) return;
    char *f = strdup(from), *o = strdup(to);
    if (f == NULL || o == NULL) {
        free(f);
        free(o);
        return;
    }
    t->edge_from[t->nedges] = f;
    t->edge_to[t->nedges++] = o;
}

void omni__keytrack_add_edge(omni__keytrack_t *t, const char *from_stage, const char *to_stage)
{
    pthread_mutex_lock(&t->mu);
    do_add_edge(t, from_stage, to_stage);
    pthread_mutex_unlock(&t->mu);
}

static ds_status_t do_add(omni__keytrack_t *t, const char *id, const char *key)
{
    req_t *r = do_find(t, id);
    if (r == NULL) {
        if (t->nreqs >= t->max_reqs) {
            req_t *old = t->oldest;
            do_unlink(t, old);
            req_free(old);
        }
        r = calloc(1, sizeof(*r));
        if (r == NULL || (r->id = strdup(id)) == NULL) {
            free(r);
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory tracking request '%s'", id);
        }
        ds__dict_add(&t->table, &r->node, id_hash(id));
        r->older = t->newest;
        if (t->newest != NULL)
            t->newest->newer = r;
        else
            t->oldest = r;
        t->newest = r;
        t->nreqs++;
    }
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->keys[i], key) == 0) return DS_K_OK;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 2;
        char **k = realloc(r->keys, cap * sizeof(*k));
        if (k == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory tracking '%s'", key);
        r->keys = k;
        r->cap = cap;
    }
    if ((r->keys[r->n] = strdup(key)) == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory tracking '%s'", key);
    r->n++;
    t->nkeys++;
    return DS_K_OK;
}

ds_status_t omni__keytrack_add(omni__keytrack_t *t, const char *request_id, const char *key,
                               const char *from_stage, const char *to_stage)
{
    pthread_mutex_lock(&t->mu);
    do_add_edge(t, from_stage, to_stage);
    ds_status_t st = do_add(t, request_id, key);
    pthread_mutex_unlock(&t->mu);
    return st;
}

void omni__keytrack_drop(omni__keytrack_t *t, const char *request_id, const char *key)
{
    pthread_mutex_lock(&t->mu);
    req_t *r = do_find(t, request_id);
    for (size_t i = 0; r != NULL && i < r->n; i++) {
        if (strcmp(r->keys[i], key) != 0) continue;
        free(r->keys[i]);
        r->keys[i] = r->keys[--r->n];
        t->nkeys--;
        break;
    }
    pthread_mutex_unlock(&t->mu);
}

/* Appends key to a growing array unless it is there already. */
static int push_unique(char ***keys, size_t *n, size_t *cap, char *key)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*keys)[i], key) == 0) {
            free(key);
            return 0;
        }
    }
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        char **k = realloc(*keys, c * sizeof(*k));
        if (k == NULL) {
            free(key);
            return -1;
        }
        *keys = k;
        *cap = c;
    }
    (*keys)[(*n)++] = key;
    return 0;
}

ds_status_t omni__keytrack_take(omni__keytrack_t *t, const char *request_id, char sep, char ***keys,
                                size_t *n)
{
    *keys = NULL;
    *n = 0;
    size_t cap = 0;
    int rc = 0;
    pthread_mutex_lock(&t->mu);
    req_t *r = do_find(t, request_id);
    if (r != NULL) {
        do_unlink(t, r);
        /* The request's own array becomes the result; edge keys go after it. */
        *keys = r->keys;
        *n = r->n;
        cap = r->cap;
        r->keys = NULL;
        r->n = 0;
        req_free(r);
    }
    for (size_t i = 0; i < t->nedges && rc == 0; i++) {
        char *k = NULL;
        if (asprintf(&k, "%s%c%s_%s", request_id, sep, t->edge_from[i], t->edge_to[i]) < 0) {
            rc = -1;
            break;
        }
        rc = push_unique(keys, n, &cap, k);
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != 0) {
        omni__keys_free(*keys, *n);
        *keys = NULL;
        *n = 0;
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory collecting the keys of '%s'",
                             request_id);
    }
    return DS_K_OK;
}

ds_status_t omni__keytrack_take_all(omni__keytrack_t *t, char ***keys, size_t *n)
{
    *keys = NULL;
    *n = 0;
    pthread_mutex_lock(&t->mu);
    char **all = t->nkeys > 0 ? malloc(t->nkeys * sizeof(*all)) : NULL;
    if (t->nkeys > 0 && all == NULL) {
        pthread_mutex_unlock(&t->mu);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory collecting %zu tracked keys",
                             t->nkeys);
    }
    size_t k = 0;
    while (t->oldest != NULL) {
        req_t *r = t->oldest;
        do_unlink(t, r);
        for (size_t i = 0; i < r->n; i++)
            all[k++] = r->keys[i];
        r->n = 0;
        req_free(r);
    }
    pthread_mutex_unlock(&t->mu);
    *keys = all;
    *n = k;
    return DS_K_OK;
}

size_t omni__keytrack_count(omni__keytrack_t *t)
{
    pthread_mutex_lock(&t->mu);
    size_t n = t->nkeys;
    pthread_mutex_unlock(&t->mu);
    return n;
}
