/* Calls on keys that answer a status per key and change no value: read
 * and write latches (RLATCH / UNRLATCH / WLATCH / UNWLATCH) and global
 * reference counts (GREF). Layouts in common/wire.h. */
#include "client/client_internal.h"

#include "common/clock.h"
#include "common/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KQ 64

/* The first of n statuses that is not DS_K_OK (DS_K_OK when none);
 * *nok: how many are DS_K_OK. */
static ds_status_t first_failure(const ds_status_t *sts, size_t n, size_t *nok)
{
    ds_status_t first = DS_K_OK;
    for (size_t i = 0; i < n; i++) {
        if (sts[i] == DS_K_OK)
            (*nok)++;
        else if (first == DS_K_OK)
            first = sts[i];
    }
    return first;
}

/* Sends op with head (written by put_head) and the keys, and reads n
 * entries of u32 status (+ u32 count when counts != NULL). any_ok: the
 * return is DS_K_OK when any key succeeded, else when all did. */
static ds_status_t keys_call(ds_client_t *c, ds_opcode_t op, int32_t arg, size_t n,
                             const char *const *keys, ds_status_t *statuses, uint32_t *counts,
                             bool any_ok)
{
    ds__clear_error();
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    ds_status_t *sts = statuses ? statuses : malloc(n * sizeof(*sts));
    if (sts == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    if ((st = ds__client_acquire(c, &deadline, &conn)) != DS_K_OK) {
        for (size_t i = 0; i < n; i++)
            sts[i] = st;
        goto out;
    }
    ds__conn_begin(conn);
    if (op != DS_OP_UNRLATCH && op != DS_OP_UNWLATCH && op != DS_OP_SEAL)
        ds__wbuf_i32(&conn->w, arg);
    ds__wbuf_u32(&conn->w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        ds__wbuf_cstr(&conn->w, keys[i]);
    st = ds__conn_call(conn, op, false, deadline);
    if (conn->state != DS_CONN_OK || (st != DS_K_OK && conn->r.pos == conn->r.len)) {
        for (size_t i = 0; i < n; i++)
            sts[i] = st;
    } else {
        size_t each = op == DS_OP_GREF ? 8 : 4;
        uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, each);
        for (uint32_t i = 0; i < m && m == n; i++) {
            sts[i] = (ds_status_t)ds__rbuf_u32(&conn->r);
            uint32_t cnt = op == DS_OP_GREF ? ds__rbuf_u32(&conn->r) : 0;
            if (counts) counts[i] = cnt;
        }
        if (conn->r.err || m != n) {
            st = ds__conn_protocol_error(conn, ds__opcode_name(op));
            for (size_t i = 0; i < n; i++)
                sts[i] = st;
        }
    }
    ds__conn_drain(conn, deadline);
    ds__client_put(c, conn);
out:;
    size_t nok = 0;
    ds_status_t first = first_failure(sts, n, &nok);
    if (first != DS_K_OK && ds_last_error()[0] == '\0')
        ds__set_error(first, "%s failed: %s", ds__opcode_name(op), ds_status_message(first));
    if (sts != statuses) free(sts);
    if (any_ok && nok > 0) return DS_K_OK;
    return first;
}

static void pause_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The keys a retrying call still asks for: todo[j] is keys[where[j]] and
 * part[j] its latest answer, for j below m; sts holds all n keys' statuses
 * (the caller's statuses, or its own array when those are NULL). */
typedef struct {
    ds_status_t *statuses, *sts, *part;
    const char **todo;
    size_t *where;
    size_t m;
} retry_set_t;

static void retry_set_free(retry_set_t *r)
{
    if (r->sts != r->statuses) free(r->sts);
    free(r->todo);
    free(r->where);
    free(r->part);
}

/* Every key to ask for at first; false when out of memory (r is freed). */
static bool retry_set_init(retry_set_t *r, size_t n, const char *const *keys, ds_status_t *statuses)
{
    r->statuses = statuses;
    r->sts = statuses ? statuses : malloc(n * sizeof(*r->sts));
    r->todo = malloc(n * sizeof(*r->todo));
    r->where = malloc(n * sizeof(*r->where));
    r->part = malloc(n * sizeof(*r->part));
    if (r->sts == NULL || r->todo == NULL || r->where == NULL || r->part == NULL) {
        retry_set_free(r);
        return false;
    }
    r->m = n;
    for (size_t i = 0; i < n; i++) {
        r->todo[i] = keys[i];
        r->where[i] = i;
    }
    return true;
}

/* Sleeps *wait_ms (no later than deadline) before the next try, doubling
 * it up to 32 ms; false, without sleeping, once deadline has passed. */
static bool retry_pause(uint32_t *wait_ms, uint64_t deadline)
{
    uint64_t now = ds__now_ms();
    if (now >= deadline) return false;
    uint64_t left = deadline - now;
    pause_ms(left < *wait_ms ? (uint32_t)left : *wait_ms);
    if (*wait_ms < 32) *wait_ms *= 2;
    return true;
}

/* keys_call, asking again for the keys answered K_TRY_AGAIN (a key's
 * owner rebuilding its holds after a ring change) until the request
 * timeout has passed, sleeping 1 ms, doubling to 32 ms, between tries;
 * those still refused then answer K_TRY_AGAIN with the worker's message. */
static ds_status_t retry_call(ds_client_t *c, ds_opcode_t op, int32_t arg, size_t n,
                              const char *const *keys, ds_status_t *statuses, uint32_t *counts,
                              bool any_ok)
{
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return keys_call(c, op, arg, n, keys, statuses, counts, any_ok);
    retry_set_t r;
    uint32_t *cnt = counts ? malloc(n * sizeof(*cnt)) : NULL;
    bool have = retry_set_init(&r, n, keys, statuses);
    if (!have || (counts && cnt == NULL)) {
        if (have) retry_set_free(&r);
        free(cnt);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    }
    ds_status_t *sts = r.sts, *part = r.part;
    const char **todo = r.todo;
    size_t *where = r.where;
    size_t m = r.m;
    uint64_t deadline = ds__client_deadline(c, 0);
    uint32_t wait_ms = 1;
    char err[512] = "", err_first[512] = "";
    ds_status_t rc = DS_K_OK;
    int tries = 0;
    size_t again = 0;
    for (;;) {
        rc = keys_call(c, op, arg, m, todo, part, cnt, any_ok);
        snprintf(tries++ ? err : err_first, sizeof(err), "%s", ds_last_error());
        again = 0;
        for (size_t j = 0; j < m; j++) {
            sts[where[j]] = part[j];
            if (counts) counts[where[j]] = cnt[j];
            if (part[j] == DS_K_TRY_AGAIN) again++;
        }
        /* NEST names the parent first: its keys go (or come back) whole. */
        if (again > 0 && op == DS_OP_GREF && arg == DS_GREF_NEST) again = m;
        if (again == 0) break;
        size_t k = 0;
        for (size_t j = 0; j < m; j++)
            if (part[j] == DS_K_TRY_AGAIN || again == m) {
                todo[k] = todo[j];
                where[k] = where[j];
                k++;
            }
        m = k;
        if (!retry_pause(&wait_ms, deadline)) break;
    }
    size_t nok = 0;
    ds_status_t first = first_failure(sts, n, &nok);
    retry_set_free(&r);
    free(cnt);
    if (tries == 1) return rc; /* nothing asked again: keys_call's answer and error */
    /* The message of the keys still refused, else the first call's. */
    const char *msg = again > 0 ? err : err_first;
    ds__clear_error();
    if (first != DS_K_OK) ds__set_error(first, "%s", msg[0] ? msg : ds_status_message(first));
    if (any_ok && nok > 0) {
        return DS_K_OK;
    }
    return first;
}

/* A latch call that retries the keys answered K_TRY_AGAIN (held by another
 * client) until timeout_ms has passed, sleeping 1 ms, doubling to 32 ms,
 * between tries; those still held then answer K_TRY_AGAIN. */
static ds_status_t latch_call(ds_client_t *c, ds_opcode_t op, int32_t timeout_ms, size_t n,
                              const char *const *keys, ds_status_t *statuses)
{
    if (timeout_ms <= 0)
        return ds__set_error(DS_K_INVALID, "latch timeout %d ms is not in 1..%d", (int)timeout_ms,
                             INT32_MAX);
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    retry_set_t r;
    if (!retry_set_init(&r, n, keys, statuses))
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    ds_status_t *sts = r.sts, *part = r.part;
    const char **todo = r.todo;
    size_t *where = r.where;
    size_t m = r.m;
    uint64_t deadline = ds__now_ms() + (uint64_t)timeout_ms;
    uint32_t wait_ms = 1;
    for (;;) {
        keys_call(c, op, timeout_ms, m, todo, part, NULL, false);
        size_t again = 0;
        for (size_t j = 0; j < m; j++) {
            sts[where[j]] = part[j];
            if (part[j] == DS_K_TRY_AGAIN) {
                todo[again] = todo[j];
                where[again] = where[j];
                again++;
            }
        }
        m = again;
        if (m == 0 || !retry_pause(&wait_ms, deadline)) break;
    }
    ds_status_t first = DS_K_OK;
    for (size_t i = 0; i < n && first == DS_K_OK; i++)
        first = sts[i];
    /* A key's new owner rebuilding its holds says so in its message. */
    if (m > 0 && strstr(ds_last_error(), "rebuilding") == NULL)
        ds__set_error(DS_K_TRY_AGAIN, "%s: %zu key(s) still latched by another client after %d ms",
                      ds__opcode_name(op), m, (int)timeout_ms);
    retry_set_free(&r);
    return first;
}

ds_status_t ds_kv_rlatch(ds_client_t *c, size_t n, const char *const *keys, int32_t timeout_ms,
                         ds_status_t *statuses)
{
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds__client_enter(c);
    return ds__client_leave(c, latch_call(c, DS_OP_RLATCH, timeout_ms, n, keys, statuses));
}

ds_status_t ds_object_wlatch(ds_client_t *c, size_t n, const char *const *keys, int32_t timeout_ms,
                             ds_status_t *statuses)
{
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds__client_enter(c);
    return ds__client_leave(c, latch_call(c, DS_OP_WLATCH, timeout_ms, n, keys, statuses));
}

ds_status_t ds_object_unwlatch(ds_client_t *c, size_t n, const char *const *keys,
                               ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, retry_call(c, DS_OP_UNWLATCH, 0, n, keys, statuses, NULL, false));
}

ds_status_t ds_kv_unrlatch(ds_client_t *c, size_t n, const char *const *keys, ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, retry_call(c, DS_OP_UNRLATCH, 0, n, keys, statuses, NULL, false));
}

ds_status_t ds_object_seal(ds_client_t *c, size_t n, const char *const *keys, ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, retry_call(c, DS_OP_SEAL, 0, n, keys, statuses, NULL, false));
}

ds_status_t ds_object_g_increase_ref(ds_client_t *c, size_t n, const char *const *keys,
                                     ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, retry_call(c, DS_OP_GREF, 1, n, keys, statuses, NULL, true));
}

ds_status_t ds_object_g_decrease_ref(ds_client_t *c, size_t n, const char *const *keys,
                                     ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, retry_call(c, DS_OP_GREF, -1, n, keys, statuses, NULL, true));
}

ds_status_t ds_object_set_nested(ds_client_t *c, const char *parent, size_t n,
                                 const char *const *nested_keys)
{
    ds__clear_error();
    if (parent == NULL) return ds__set_error(DS_K_INVALID, "parent is NULL");
    if (n > 0 && nested_keys == NULL) return ds__set_error(DS_K_INVALID, "nested_keys is NULL");
    if (n >= DS_MAX_BATCH)
        return ds__set_error(DS_K_INVALID, "%zu nested keys: at most %d", n, DS_MAX_BATCH - 1);
    const char **keys = malloc((n + 1) * sizeof(*keys));
    if (keys == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    keys[0] = parent;
    for (size_t i = 0; i < n; i++)
        keys[i + 1] = nested_keys[i];
    ds__client_enter(c);
    ds_status_t st = ds__client_leave(
        c, retry_call(c, DS_OP_GREF, DS_GREF_NEST, n + 1, keys, NULL, NULL, false));
    free(keys);
    return st;
}

ds_status_t ds_object_get_meta_info(ds_client_t *c, const char *tenant_id, size_t n,
                                    const char *const *keys, ds_obj_meta_t *metas,
                                    ds_status_t *statuses)
{
    ds__clear_error();
    if (c == NULL || metas == NULL) return ds__set_error(DS_K_INVALID, "client or metas is NULL");
    if (tenant_id != NULL && tenant_id[0] != '\0')
        return ds__set_error(DS_K_NOT_AUTHORIZED,
                             "tenant '%.64s': this datasystem has no tenants (pass \"\")",
                             tenant_id);
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    uint64_t *sizes = calloc(n, sizeof(*sizes));
    ds_status_t *sts = statuses ? statuses : calloc(n, sizeof(*sts));
    if (sizes == NULL || sts == NULL) {
        free(sizes);
        if (sts != statuses) free(sts);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    }
    /* A status the library never writes: a key it did not report on failed. */
    for (size_t i = 0; i < n; i++)
        sts[i] = (ds_status_t)-1;
    st = ds_kv_query_size(c, n, keys, sizes, sts);
    /* The worker that answered; a failover may change c->addr meanwhile. */
    char addr[sizeof(c->addr)];
    pthread_mutex_lock(&c->mu);
    snprintf(addr, sizeof(addr), "%s", c->addr);
    pthread_mutex_unlock(&c->mu);
    size_t found = 0;
    for (size_t i = 0; i < n; i++) {
        if (sts[i] == (ds_status_t)-1) sts[i] = st != DS_K_OK ? st : DS_K_RUNTIME_ERROR;
        bool ok = sts[i] == DS_K_OK;
        metas[i].size = ok ? sizes[i] : 0;
        if (ok) {
            snprintf(metas[i].location, sizeof(metas[i].location), "%s", addr);
            found++;
        } else {
            metas[i].location[0] = '\0';
        }
    }
    free(sizes);
    if (sts != statuses) free(sts);
    if (found > 0) {
        ds__clear_error();
        return DS_K_OK;
    }
    return st != DS_K_OK ? st : ds__set_error(DS_K_NOT_FOUND, "no object found");
}

ds_status_t ds_object_query_global_ref_num(ds_client_t *c, const char *key, uint32_t *count)
{
    if (count == NULL) return ds__set_error(DS_K_INVALID, "count is NULL");
    *count = 0;
    ds__client_enter(c);
    return ds__client_leave(c, retry_call(c, DS_OP_GREF, 0, 1, &key, NULL, count, false));
}
