/* Consistent-hash ring (see ring.h): a sorted token array and a binary search. */
#include "worker/cluster/ring.h"

#include "common/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t hash;
    uint32_t member;
} token_t;

struct ds_ring {
    char **members;
    size_t n;
    token_t *tokens;
    size_t ntokens;
};

static int cmp_token(const void *a, const void *b)
{
    const token_t *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->member < y->member ? -1 : x->member > y->member;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

ds_ring_t *ds__ring_build(const char *const *addrs, size_t n)
{
    ds_ring_t *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->members = calloc(n ? n : 1, sizeof(*r->members));
    r->tokens = calloc(n ? n * DS_RING_TOKENS : 1, sizeof(*r->tokens));
    if (r->members == NULL || r->tokens == NULL) {
        ds__ring_free(r);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        r->members[i] = strdup(addrs[i]);
        if (r->members[i] == NULL) {
            r->n = i;
            ds__ring_free(r);
            return NULL;
        }
    }
    r->n = n;
    /* Sorted members make the member index independent of input order. */
    qsort(r->members, n, sizeof(*r->members), cmp_str);
    for (size_t i = 0; i < n; i++) {
        for (int t = 0; t < DS_RING_TOKENS; t++) {
            char buf[320];
            int l = snprintf(buf, sizeof(buf), "%s#%d", r->members[i], t);
            token_t *tk = &r->tokens[r->ntokens++];
            tk->hash = ds__murmur3_32(buf, (size_t)l, 0);
            tk->member = (uint32_t)i;
        }
    }
    qsort(r->tokens, r->ntokens, sizeof(*r->tokens), cmp_token);
    return r;
}

void ds__ring_free(ds_ring_t *r)
{
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++)
        free(r->members[i]);
    free(r->members);
    free(r->tokens);
    free(r);
}

const char *ds__ring_owner(const ds_ring_t *r, const char *key, size_t len)
{
    if (r == NULL || r->ntokens == 0) return NULL;
    uint32_t h = ds__murmur3_32(key, len, 0);
    size_t lo = 0, hi = r->ntokens;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->tokens[mid].hash < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == r->ntokens) lo = 0;
    return r->members[r->tokens[lo].member];
}

size_t ds__ring_size(const ds_ring_t *r)
{
    return r ? r->n : 0;
}

const char *ds__ring_member(const ds_ring_t *r, size_t i)
{
    return r && i < r->n ? r->members[i] : NULL;
}

int ds__ring_has(const ds_ring_t *r, const char *addr)
{
    for (size_t i = 0; r && i < r->n; i++)
        if (strcmp(r->members[i], addr) == 0) return 1;
    return 0;
}

size_t ds__ring_npoints(const ds_ring_t *r)
{
    return r ? r->ntokens : 0;
}

uint32_t ds__ring_point(const ds_ring_t *r, size_t i, const char **owner)
{
    *owner = r->members[r->tokens[i].member];
    return r->tokens[i].hash;
}
