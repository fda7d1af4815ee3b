/* The copying key-value calls: set/mset, get/get_into/mget, del, exist,
 * expire, query_size and generate_key.
 *
 * Writes: a remote client sends every value in a SET's data section. A local
 * client sends small values (up to the worker's inline_max) the same way, and
 * writes large ones straight into the arena, in one round trip: each pool
 * connection holds arena space the worker reserved for it (a "space", space.c; see
 * SETR in common/wire.h), the values are copied there and one SETR names
 * them, whose answer reserves the space for the next set. The first set of a
 * connection, or one larger than its space, asks for the space first (one
 * more round trip); a worker without SETR, or one that will not reserve
 * that much, gets CREATE (reserves), memcpy, PUBLISH (makes visible) and a
 * release of the creation pin.
 *
 * Reads: values come inline in the response's data section, read straight
 * into their destination (the caller's buffer or one malloc'd allocation), or
 * for a local client as pinned arena ranges that are copied out and released
 * in one NOREPLY frame per call.
 *
 * Local fast path: get_into, get and mget first look the keys up in the
 * worker's shared GET index (common/shm_index.h) and copy hits straight out
 * of the arena with no request at all. Anything else (a miss, a long key, a
 * value over the worker's --index_value_max_kb, a key with a TTL, a read
 * that raced the worker)
 * takes the normal GET, so results are the same either way. Gets served from
 * the index never reach the worker, so its statistics and metrics do not
 * count them (operations.get, latency histograms, the clock bit that keeps
 * recently read volatile objects from eviction). get_buffer never uses the
 * index: its buffers need the worker's pins. */
#include "client/client_internal.h"

#include "common/clock.h"
#include "common/copy.h"
#include "common/error.h"
#include "common/keys.h"
#include "common/tsan.h"
#include "common/ucx_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest key prefix quoted in messages. */
#define KQ 64

ds_status_t ds__check_keys(size_t n, const char *const *keys, size_t max)
{
    if (n == 0) return ds__set_error(DS_K_INVALID, "the key list is empty");
    if (n > max)
        return ds__set_error(DS_K_INVALID, "a batch of %zu keys exceeds the limit of %zu keys", n,
                             max);
    if (keys == NULL) return ds__set_error(DS_K_INVALID, "keys is NULL");
    char msg[256];
    for (size_t i = 0; i < n; i++) {
        if (keys[i] == NULL) return ds__set_error(DS_K_INVALID, "key #%zu is NULL", i);
        if (ds__key_check(keys[i], strlen(keys[i]), msg, sizeof(msg)) != 0)
            return ds__set_error(DS_K_INVALID, "%s", msg);
    }
    return DS_K_OK;
}

ds_status_t ds__check_param(const ds_set_param_t *p)
{
    if ((int)p->write_mode < DS_WRITE_NONE_L2_CACHE ||
        (int)p->write_mode > DS_WRITE_BACK_L2_CACHE_EVICT)
        return ds__set_error(DS_K_INVALID, "unknown write mode %d", (int)p->write_mode);
    if ((int)p->existence < DS_EXISTENCE_NONE || (int)p->existence > DS_EXISTENCE_NX)
        return ds__set_error(DS_K_INVALID, "unknown existence mode %d", (int)p->existence);
    return DS_K_OK;
}

static size_t at(const size_t *idx, size_t i)
{
    return idx ? idx[i] : i;
}

static void fill(ds_status_t *sts, const size_t *idx, size_t n, ds_status_t st)
{
    for (size_t i = 0; i < n; i++)
        sts[at(idx, i)] = st;
}

/* Reads per-key u32 statuses into sts[idx[i]]. A failed response that holds
 * only its message is a request-level failure: every key gets its status. */
static ds_status_t read_statuses(ds_conn_t *conn, ds_status_t overall, size_t n, const size_t *idx,
                                 ds_status_t *sts)
{
    if (conn->state != DS_CONN_OK || (overall != DS_K_OK && conn->r.pos == conn->r.len)) {
        fill(sts, idx, n, overall);
        return overall;
    }
    uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, 4);
    for (uint32_t i = 0; i < m && m == n; i++)
        sts[at(idx, i)] = (ds_status_t)ds__rbuf_u32(&conn->r);
    if (conn->r.err || m != n) {
        ds_status_t st = ds__conn_protocol_error(conn, ds__opcode_name(conn->rh.opcode));
        fill(sts, idx, n, st);
        return st;
    }
    return overall;
}

static void put_keys(ds_conn_t *conn, size_t n, const size_t *idx, const char *const *keys)
{
    ds__wbuf_u32(&conn->w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        ds__wbuf_cstr(&conn->w, keys[at(idx, i)]);
}

void ds__set_param_put(ds_conn_t *conn, const ds_set_param_t *p)
{
    ds__wbuf_u8(&conn->w, (uint8_t)p->write_mode);
    ds__wbuf_u32(&conn->w, p->ttl_second);
    ds__wbuf_u8(&conn->w, (uint8_t)p->existence);
}

void ds__set_values(ds_conn_t *conn, const ds_set_param_t *p, size_t n, const size_t *idx,
                    const char *const *keys, const void *const *vals, const size_t *lens,
                    ds_status_t *sts, uint64_t deadline)
{
    ds__conn_begin(conn);
    ds__set_param_put(conn, p);
    ds__wbuf_u32(&conn->w, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        size_t k = at(idx, i);
        ds__wbuf_cstr(&conn->w, keys[k]);
        ds__wbuf_u64(&conn->w, lens[k]);
        ds__conn_add_data(conn, vals[k], lens[k]);
    }
    ds_status_t st = ds__conn_call(conn, DS_OP_SET, false, deadline);
    read_statuses(conn, st, n, idx, sts);
    ds__conn_drain(conn, deadline);
}

/* Large values of a local client: CREATE, copy into the arena, PUBLISH, and
 * release the creation pins. */
static void set_in_arena(ds_conn_t *conn, const ds_set_param_t *p, size_t n, const size_t *idx,
                         const char *const *keys, const void *const *vals, const size_t *lens,
                         ds_status_t *sts, uint64_t deadline)
{
    ds_sess_t *s = conn->sess;
    uint64_t *h = malloc(n * sizeof(*h));
    size_t *ok = malloc(n * sizeof(*ok));
    if (h == NULL || ok == NULL) {
        free(h);
        free(ok);
        fill(sts, idx, n, ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory setting %zu keys", n));
        return;
    }
    ds__conn_begin(conn);
    ds__set_param_put(conn, p);
    ds__wbuf_u32(&conn->w, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        ds__wbuf_cstr(&conn->w, keys[at(idx, i)]);
        ds__wbuf_u64(&conn->w, lens[at(idx, i)]);
    }
    ds_status_t st = ds__conn_call(conn, DS_OP_CREATE, false, deadline);
    size_t nok = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += lens[at(idx, i)];
    ds_lane_ahead_t ahead;
    ds__lane_ahead_init(&ahead, conn, total);
    if (conn->state == DS_CONN_OK && !(st != DS_K_OK && conn->r.pos == conn->r.len)) {
        uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, 20);
        for (uint32_t i = 0; i < m && m == n; i++) {
            size_t k = at(idx, i);
            ds_status_t ks = (ds_status_t)ds__rbuf_u32(&conn->r);
            uint64_t off = ds__rbuf_u64(&conn->r);
            uint64_t handle = ds__rbuf_u64(&conn->r);
            sts[k] = ks;
            if (ks != DS_K_OK || conn->r.err) continue;
            h[nok++] = handle;
            if (off > s->size || lens[k] > s->size - off) {
                conn->r.err = true;
                break;
            }
            ds__lane_copy_in(&ahead, s->base + off, vals[k], lens[k]);
            DS__TSAN_PUBLISHED(s->base, s->base + off);
            ok[nok - 1] = k;
        }
        if (conn->r.err || m != n) {
            st = ds__conn_protocol_error(conn, "create");
            ds__sess_release(s, h, nok);
            fill(sts, idx, n, st);
            nok = 0;
        }
    } else {
        fill(sts, idx, n, st);
    }
    ds__conn_drain(conn, deadline);
    if (nok > 0) {
        ds__conn_begin(conn);
        ds__wbuf_u32(&conn->w, (uint32_t)nok);
        for (size_t i = 0; i < nok; i++)
            ds__wbuf_u64(&conn->w, h[i]);
        st = ds__conn_call(conn, DS_OP_PUBLISH, false, deadline);
        read_statuses(conn, st, nok, ok, sts);
        ds__conn_drain(conn, deadline);
        /* Published or not, the creation pins are ours to drop. */
        ds__sess_release(s, h, nok);
    }
    free(h);
    free(ok);
}

/* Large values of a local client, in one round trip: copied into the arena
 * space the worker reserved for this connection and published with one SETR,
 * whose answer reserves the space for the next set. Without a space that
 * fits, one round trip first asks for it. false when the worker would not
 * reserve enough (the caller then takes the CREATE / PUBLISH way); true
 * when sts is filled. */
static bool set_in_space(ds_conn_t *conn, const ds_set_param_t *p, size_t n, const size_t *idx,
                         const char *const *keys, const void *const *vals, const size_t *lens,
                         ds_status_t *sts, uint64_t deadline)
{
    ds_sess_t *s = conn->sess;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ds__round_up64(lens[at(idx, i)]);
    if (total > s->size) return false;
    ds_status_t rs;
    int fits = ds__space_reserve(conn, total, deadline, &rs);
    if (fits < 0) {
        fill(sts, idx, n, rs);
        return true;
    }
    if (fits == 0) return false;
    /* Ask to keep room for the larger sets this connection made lately. */
    uint64_t want = ds__space_want(conn, total);
    ds__space_begin(conn, conn->space.handle, want, 0);
    ds__set_param_put(conn, p);
    ds__wbuf_u32(&conn->w, (uint32_t)n);
    uint64_t off = conn->space.off;
    ds_lane_ahead_t ahead;
    ds__lane_ahead_init(&ahead, conn, total);
    for (size_t i = 0; i < n; i++) {
        size_t k = at(idx, i);
        ds__lane_copy_in(&ahead, s->base + off, vals[k], lens[k]);
        DS__TSAN_PUBLISHED(s->base, s->base + off);
        ds__wbuf_cstr(&conn->w, keys[k]);
        ds__wbuf_u64(&conn->w, off);
        ds__wbuf_u64(&conn->w, lens[k]);
        off += ds__round_up64(lens[k]);
    }
    ds_status_t st = ds__conn_call(conn, DS_OP_SETR, false, deadline);
    ds_status_t ts = ds__space_take(conn);
    if (ts != DS_K_OK) st = ts;
    read_statuses(conn, st, n, idx, sts);
    ds__conn_drain(conn, deadline);
    return true;
}

ds_status_t ds__first_failure(size_t n, const char *const *keys, const ds_status_t *sts,
                              const char *verb)
{
    for (size_t i = 0; i < n; i++) {
        if (sts[i] == DS_K_OK) continue;
        if (ds_last_error()[0] == '\0')
            ds__set_error(sts[i], "%s of key '%.*s' failed: %s", verb, KQ, keys[i],
                          ds_status_message(sts[i]));
        return sts[i];
    }
    return DS_K_OK;
}

static ds_status_t kv_mset(ds_client_t *c, size_t n, const char *const *keys,
                           const void *const *vals, const size_t *lens, const ds_set_param_t *param,
                           ds_status_t *statuses)
{
    ds__clear_error();
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    if (vals == NULL || lens == NULL) return ds__set_error(DS_K_INVALID, "values are NULL");
    for (size_t i = 0; i < n; i++)
        if (lens[i] == 0 || vals[i] == NULL)
            return ds__set_error(DS_K_INVALID, "the value for key '%.*s' is empty", KQ, keys[i]);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    if (param) p = *param;
    if ((st = ds__check_param(&p)) != DS_K_OK) return st;

    ds_status_t one;
    ds_status_t *sts = statuses ? statuses : n == 1 ? &one : malloc(n * sizeof(*sts));
    size_t *idx = NULL;
    if (sts == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory setting %zu keys", n);
    uint64_t deadline = ds__client_deadline(c, 0);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += lens[i] + strlen(keys[i]);
    ds_conn_t *conn;
    st = ds__client_acquire_small(c, &deadline, bytes, &conn);
    if (st != DS_K_OK) {
        fill(sts, NULL, n, st);
        goto out;
    }
    ds_sess_t *s = conn->sess;
    if (s->base == NULL) {
        ds__set_values(conn, &p, n, NULL, keys, vals, lens, sts, deadline);
    } else {
        /* Split: small values inline (front of idx), large ones via the arena
         * (back of idx), each group in one request. */
        size_t small_idx[1];
        idx = n == 1 ? small_idx : malloc(n * sizeof(*idx));
        if (idx == NULL) {
            ds__client_put(c, conn);
            fill(sts, NULL, n, ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory"));
            goto out;
        }
        size_t ns = 0, nb = 0;
        /* With SETR a value goes through the arena as soon as that beats the
         * socket (one copy instead of two); else above the worker's limit. */
        size_t inline_max = s->inline_max;
        if (s->setr && inline_max > DS_CLIENT_SPACE_MIN) inline_max = DS_CLIENT_SPACE_MIN;
        for (size_t i = 0; i < n; i++) {
            if (lens[i] <= inline_max)
                idx[ns++] = i;
            else
                idx[n - 1 - nb++] = i;
        }
        if (ns > 0) ds__set_values(conn, &p, ns, idx, keys, vals, lens, sts, deadline);
        if (nb > 0 && conn->state != DS_CONN_OK) {
            fill(sts, idx + ns, nb, sts[idx[0]]);
        } else if (nb > 0) {
            /* One SETR from the connection's reserved space when the worker
             * takes it, else CREATE / PUBLISH. */
            if (!(s->setr && set_in_space(conn, &p, nb, idx + ns, keys, vals, lens, sts, deadline)))
                set_in_arena(conn, &p, nb, idx + ns, keys, vals, lens, sts, deadline);
        }
        if (idx == small_idx) idx = NULL;
    }
    ds__client_put(c, conn);
out:
    st = ds__first_failure(n, keys, sts, "set");
    free(idx);
    if (sts != statuses && sts != &one) free(sts);
    return st;
}

ds_status_t ds_kv_set(ds_client_t *c, const char *key, const void *val, size_t len,
                      const ds_set_param_t *param)
{
    return ds_kv_mset(c, 1, &key, &val, &len, param, NULL);
}
/* ---- reads ---- */

/* The message of a miss. A subscribe-get answered before its wait was over
 * says so, with how long it took: "not found within N ms" would claim a
 * wait that did not happen. t0_ms: when the get began. */
static ds_status_t not_found(const char *key, int32_t sub_timeout_ms, uint64_t t0_ms)
{
    uint64_t took = ds__now_ms() - t0_ms;
    if (sub_timeout_ms > 0 && took + 1 < (uint64_t)sub_timeout_ms)
        return ds__set_error(DS_K_NOT_FOUND,
                             "key '%.*s' not found: the worker answered after %llu ms, before "
                             "the %d ms wait was over",
                             KQ, key, (unsigned long long)took, (int)sub_timeout_ms);
    if (sub_timeout_ms > 0)
        return ds__set_error(DS_K_NOT_FOUND, "key '%.*s' not found within %d ms", KQ, key,
                             (int)sub_timeout_ms);
    return ds__set_error(DS_K_NOT_FOUND, "key '%.*s' not found", KQ, key);
}

static ds_status_t check_sub(int32_t sub_timeout_ms)
{
    if (sub_timeout_ms < 0)
        return ds__set_error(DS_K_INVALID, "sub_timeout_ms %d is negative", (int)sub_timeout_ms);
    return DS_K_OK;
}

void ds__release_entries(ds_sess_t *s, const ds_getent_t *e, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += e[i].kind == DS_VAL_SHM;
    if (k == 0) return;
    uint64_t small[64];
    uint64_t *h = k <= 64 ? small : malloc(k * sizeof(*h));
    if (h == NULL) {
        /* No memory for one frame: release one by one rather than leak pins. */
        for (size_t i = 0; i < n; i++)
            if (e[i].kind == DS_VAL_SHM) ds__sess_release(s, &e[i].handle, 1);
        return;
    }
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].kind == DS_VAL_SHM) h[k++] = e[i].handle;
    ds__sess_release(s, h, k);
    if (h != small) free(h);
}

bool ds__read_entry(ds_conn_t *conn, ds_getent_t *e, uint64_t *inline_total, bool *bad)
{
    const ds_sess_t *s = conn->sess;
    e->kind = ds__rbuf_u8(&conn->r);
    e->size = ds__rbuf_u64(&conn->r);
    e->off = e->handle = 0;
    if (e->kind == DS_VAL_SHM) {
        e->off = ds__rbuf_u64(&conn->r);
        e->handle = ds__rbuf_u64(&conn->r);
    }
    if (conn->r.err) return false;
    if (e->kind == DS_VAL_INLINE)
        *inline_total += e->size;
    else if (e->kind == DS_VAL_UCX)
        *bad = !conn->ucx_get || e->size == 0;
    else if (e->kind == DS_VAL_SHM)
        *bad = s->base == NULL || e->off > s->size || e->size > s->size - e->off;
    else
        *bad = e->kind != DS_VAL_MISSING;
    return true;
}

/* GET, or with ucx (tag != 0) a UCX_GET; see ds__get_request. */
static ds_status_t get_request(ds_conn_t *conn, size_t n, const char *const *keys,
                               int32_t sub_timeout_ms, uint8_t flags, uint64_t deadline,
                               ds_getent_t *ents, uint64_t tag, uint64_t max_size, const char *addr)
{
    ds_sess_t *s = conn->sess;
    ds__conn_begin(conn);
    ds__wbuf_i32(&conn->w, sub_timeout_ms);
    ds__wbuf_u8(&conn->w, s->base ? flags : 0);
    put_keys(conn, n, NULL, keys);
    if (tag) {
        uint64_t now = ds__now_ms();
        uint64_t wait = deadline > now ? deadline - now : 1;
        ds__wbuf_u64(&conn->w, tag);
        ds__wbuf_u64(&conn->w, max_size);
        ds__wbuf_u32(&conn->w, wait > UINT32_MAX ? UINT32_MAX : (uint32_t)wait);
        ds__wbuf_cstr(&conn->w, addr);
    }
    conn->ucx_get = tag != 0;
    ds_status_t st = ds__conn_call(conn, tag ? DS_OP_UCX_GET : DS_OP_GET, false, deadline);
    if (conn->state != DS_CONN_OK) return st;
    if (st != DS_K_OK && conn->r.pos == conn->r.len) {
        ds__conn_drain(conn, deadline);
        return st;
    }
    uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, 9);
    uint64_t inline_total = 0;
    size_t parsed = 0;
    bool bad = m != n;
    for (uint32_t i = 0; i < m && !bad; i++) {
        if (!ds__read_entry(conn, &ents[i], &inline_total, &bad)) break;
        parsed = i + 1;
    }
    if (bad || conn->r.err || inline_total != conn->rh.data_len) {
        ds__release_entries(s, ents, parsed);
        return ds__conn_protocol_error(conn, "get");
    }
    if (st != DS_K_OK) {
        ds__release_entries(s, ents, n);
        ds__conn_drain(conn, deadline);
    }
    return st;
}

ds_status_t ds__get_request(ds_conn_t *conn, size_t n, const char *const *keys,
                            int32_t sub_timeout_ms, uint8_t flags, uint64_t deadline,
                            ds_getent_t *ents)
{
    return get_request(conn, n, keys, sub_timeout_ms, flags, deadline, ents, 0, 0, NULL);
}

ds_status_t ds__get_request_ucx(ds_client_t *c, ds_conn_t *conn, size_t n, const char *const *keys,
                                int32_t sub_timeout_ms, uint8_t flags, uint64_t max_size,
                                uint64_t deadline, ds_getent_t *ents, uint64_t *tag)
{
    *tag = 0;
    if (c->ucx == NULL || conn->sess->base != NULL)
        return ds__get_request(conn, n, keys, sub_timeout_ms, flags, deadline, ents);
    char *addr = malloc(DS_UCX_ADDR_HEX_MAX + 1);
    if (addr == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a UCX get");
    uint64_t gen = 0;
    ds_status_t st = ds__cucx_begin(c->ucx, n, tag, addr, &gen);
    if (st == DS_K_OK && atomic_load(&conn->sess->ucx_registered) != gen + 1) {
        /* The session's first UCX get (or the first since a new UCX
         * worker): the worker vets the address before it uses it. */
        ds__conn_begin(conn);
        ds__wbuf_cstr(&conn->w, addr);
        st = ds__conn_call(conn, DS_OP_UCX_ADDR, false, deadline);
        if (st == DS_K_OK) atomic_store(&conn->sess->ucx_registered, gen + 1);
    }
    if (st == DS_K_OK)
        st = get_request(conn, n, keys, sub_timeout_ms, 0, deadline, ents, *tag, max_size, addr);
    free(addr);
    return st;
}

/* Copies key's value into buf (cap bytes) from the shared GET index. true
 * on a hit; false means ask the worker. */
static bool index_get_into(ds_client_t *c, const char *key, void *buf, size_t cap, size_t *len)
{
    ds_sess_t *s = ds__client_index_session(c);
    if (s == NULL) return false;
    uint64_t sz = 0;
    ds_shm_index_res_t r =
        ds__shm_index_get(&s->ix, s->base, s->size, key, strlen(key), buf, cap, &sz);
    ds__sess_unref(s);
    if (r != DS_SHM_INDEX_HIT) return false;
    *len = (size_t)sz;
    return true;
}

/* All n values from the shared GET index, each in its own allocation, or
 * false (nothing allocated) when any key has to go to the worker. */
static bool index_mget(ds_client_t *c, size_t n, const char *const *keys, ds_value_t *out)
{
    ds_sess_t *s = ds__client_index_session(c);
    if (s == NULL) return false;
    size_t i = 0;
    for (; i < n; i++) {
        size_t kl = strlen(keys[i]);
        uint64_t sz = 0;
        /* The size first, then a copy into an allocation of that size; a
         * value that changed size meanwhile fails the second read. */
        if (ds__shm_index_get(&s->ix, s->base, s->size, keys[i], kl, NULL, 0, &sz) !=
            DS_SHM_INDEX_SMALL)
            break;
        void *p = malloc(sz);
        uint64_t got = 0;
        if (p == NULL || ds__shm_index_get(&s->ix, s->base, s->size, keys[i], kl, p, sz, &got) !=
                             DS_SHM_INDEX_HIT) {
            free(p);
            break;
        }
        out[i] = (ds_value_t){DS_K_OK, p, (size_t)got};
    }
    ds__sess_unref(s);
    if (i == n) return true;
    while (i-- > 0) {
        free(out[i].data);
        out[i] = (ds_value_t){DS_K_NOT_FOUND, NULL, 0};
    }
    return false;
}

/* Copies one found value to dst: from the socket when inline, else from the
 * arena (the pin is left for the caller to release). */
static ds_status_t copy_value(ds_conn_t *conn, const ds_getent_t *e, void *dst, uint64_t deadline)
{
    if (e->kind == DS_VAL_INLINE) return ds__conn_read_data(conn, dst, e->size, deadline);
    DS__TSAN_READING(conn->sess->base, conn->sess->base + e->off);
    ds__copy(dst, conn->sess->base + e->off, e->size);
    DS__TSAN_READ_DONE(conn->sess->base);
    return DS_K_OK;
}

/* Skips a found value that will not be copied. */
static ds_status_t skip_value(ds_conn_t *conn, const ds_getent_t *e, uint64_t deadline)
{
    return e->kind == DS_VAL_INLINE ? ds__conn_skip(conn, e->size, deadline) : DS_K_OK;
}

static ds_status_t kv_get_into(ds_client_t *c, const char *key, int32_t sub_timeout_ms, void *buf,
                               size_t cap, size_t *len)
{
    ds__clear_error();
    if (c == NULL || len == NULL || (buf == NULL && cap > 0))
        return ds__set_error(DS_K_INVALID, "client, buf or len is NULL");
    ds_status_t st = ds__check_keys(1, &key, 1);
    if (st == DS_K_OK) st = check_sub(sub_timeout_ms);
    if (st != DS_K_OK) return st;
    if (index_get_into(c, key, buf, cap, len)) return DS_K_OK;
    uint64_t t0 = ds__now_ms();
    uint64_t deadline = ds__client_deadline(c, sub_timeout_ms);
    ds_conn_t *conn;
    /* A subscribe-get may wait at the worker: never on the shared connection. */
    st = sub_timeout_ms == 0 ? ds__client_acquire_small(c, &deadline, cap, &conn)
                             : ds__client_acquire(c, &deadline, &conn);
    if (st != DS_K_OK) return st;
    ds_getent_t e;
    uint64_t tag;
    st = ds__get_request_ucx(c, conn, 1, &key, sub_timeout_ms, DS_GET_WANT_SHM, cap, deadline, &e,
                             &tag);
    if (st == DS_K_OK) {
        if (e.kind == DS_VAL_MISSING) {
            st = not_found(key, sub_timeout_ms, t0);
        } else if (e.kind == DS_VAL_UCX) {
            /* Straight into the caller's buffer (the worker checked it fits). */
            ds_crecv_t rv;
            st = ds__cucx_recv(c->ucx, &rv, tag, buf, e.size);
            if (st == DS_K_OK) st = ds__cucx_wait(c->ucx, &rv, 1, conn, deadline);
            if (st != DS_K_OK && conn->state == DS_CONN_OK) conn->state = DS_CONN_BROKEN;
            if (st == DS_K_OK) *len = e.size;
        } else if (e.size > cap) {
            *len = e.size;
            st = skip_value(conn, &e, deadline);
            if (st == DS_K_OK)
                st = ds__set_error(DS_K_INVALID,
                                   "the value of key '%.*s' is %llu bytes, larger than the "
                                   "buffer of %zu bytes",
                                   KQ, key, (unsigned long long)e.size, cap);
        } else {
            st = copy_value(conn, &e, buf, deadline);
            if (st == DS_K_OK) *len = e.size;
        }
        ds__release_entries(conn->sess, &e, 1);
    }
    ds__client_put(c, conn);
    return st;
}

ds_status_t ds_kv_get(ds_client_t *c, const char *key, int32_t sub_timeout_ms, void **val,
                      size_t *len)
{
    ds_value_t v;
    if (val == NULL || len == NULL) {
        ds__clear_error();
        return ds__set_error(DS_K_INVALID, "val or len is NULL");
    }
    *val = NULL;
    *len = 0;
    ds_status_t st = ds_kv_mget(c, 1, &key, sub_timeout_ms, &v);
    if (st != DS_K_OK) return st; /* a miss's message is kv_mget's */
    *val = v.data;
    *len = v.len;
    return DS_K_OK;
}

static ds_status_t kv_mget(ds_client_t *c, size_t n, const char *const *keys,
                           int32_t sub_timeout_ms, ds_value_t *out)
{
    ds__clear_error();
    if (c == NULL || out == NULL) return ds__set_error(DS_K_INVALID, "client or out is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st == DS_K_OK) st = check_sub(sub_timeout_ms);
    if (st != DS_K_OK) return st;
    for (size_t i = 0; i < n; i++)
        out[i] = (ds_value_t){DS_K_NOT_FOUND, NULL, 0};
    if (index_mget(c, n, keys, out)) return DS_K_OK;
    ds_getent_t one;
    ds_getent_t *ents = n == 1 ? &one : malloc(n * sizeof(*ents));
    if (ents == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory getting %zu keys", n);
    uint64_t t0 = ds__now_ms();
    uint64_t deadline = ds__client_deadline(c, sub_timeout_ms);
    ds_conn_t *conn;
    ds_crecv_t rv_one, *rv = NULL;
    size_t nrv = 0;
    if ((st = ds__client_acquire(c, &deadline, &conn)) != DS_K_OK) goto out;
    uint64_t tag;
    st = ds__get_request_ucx(c, conn, n, keys, sub_timeout_ms, DS_GET_WANT_SHM, UINT64_MAX,
                             deadline, ents, &tag);
    if (st == DS_K_OK && tag) {
        rv = n == 1 ? &rv_one : calloc(n, sizeof(*rv));
        if (rv == NULL) st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory getting %zu keys", n);
    }
    if (st == DS_K_OK) {
        size_t found = 0;
        for (size_t i = 0; i < n && st == DS_K_OK; i++) {
            if (ents[i].kind == DS_VAL_MISSING) continue;
            /* One allocation per value, read into directly: no staging copy. */
            void *p = malloc(ents[i].size ? ents[i].size : 1);
            if (p == NULL) {
                st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a value of %llu bytes",
                                   (unsigned long long)ents[i].size);
                break;
            }
            if (ents[i].kind == DS_VAL_UCX)
                st = ds__cucx_recv(c->ucx, &rv[nrv++], tag + i, p, ents[i].size);
            else
                st = copy_value(conn, &ents[i], p, deadline);
            out[i] = (ds_value_t){DS_K_OK, p, ents[i].size};
            found++;
        }
        ds__release_entries(conn->sess, ents, n);
        ds__conn_drain(conn, deadline);
        /* The UCX values once the inline ones are read off the connection
         * (which then must stay silent: it closing means the worker died). */
        if (nrv && st == DS_K_OK && conn->state == DS_CONN_OK)
            st = ds__cucx_wait(c->ucx, rv, nrv, conn, deadline);
        else if (nrv)
            ds__cucx_abandon(c->ucx, rv, nrv);
        if (nrv && st != DS_K_OK && conn->state == DS_CONN_OK) conn->state = DS_CONN_BROKEN;
        if (st != DS_K_OK) {
            for (size_t i = 0; i < n; i++) {
                free(out[i].data);
                out[i] = (ds_value_t){DS_K_NOT_FOUND, NULL, 0};
            }
        } else if (found == 0) {
            st = n == 1 ? not_found(keys[0], sub_timeout_ms, t0)
                        : ds__set_error(DS_K_NOT_FOUND, "none of the %zu keys was found", n);
        }
    }
    ds__client_put(c, conn);
out:
    if (rv != &rv_one) free(rv);
    if (ents != &one) free(ents);
    return st;
}

/* ---- del, exist, expire, query_size, generate_key ---- */

/* Borrows a connection and sends a request whose metadata is u32 n + keys
 * (already checked),
 * preceded by `pre` (a u32 ttl for EXPIRE, nothing else otherwise). */
static ds_status_t keys_request(ds_client_t *c, ds_opcode_t op, const uint32_t *pre, size_t n,
                                const char *const *keys, uint64_t deadline, ds_conn_t **out)
{
    *out = NULL;
    ds_status_t st;
    ds_conn_t *conn;
    if ((st = ds__client_acquire(c, &deadline, &conn)) != DS_K_OK) return st;
    ds__conn_begin(conn);
    if (pre) ds__wbuf_u32(&conn->w, *pre);
    put_keys(conn, n, NULL, keys);
    *out = conn;
    return ds__conn_call(conn, op, false, deadline);
}

/* Per-key statuses of DEL and EXPIRE. */
static ds_status_t status_call_in(ds_client_t *c, ds_opcode_t op, const uint32_t *pre, size_t n,
                                  const char *const *keys, ds_status_t *statuses, bool missing_ok)
{
    ds__clear_error();
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    ds_status_t one;
    ds_status_t *sts = statuses ? statuses : n == 1 ? &one : malloc(n * sizeof(*sts));
    if (sts == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    st = keys_request(c, op, pre, n, keys, deadline, &conn);
    if (conn == NULL) {
        fill(sts, NULL, n, st);
    } else {
        read_statuses(conn, st, n, NULL, sts);
        ds__conn_drain(conn, deadline);
        ds__client_put(c, conn);
        for (size_t i = 0; missing_ok && i < n; i++)
            if (sts[i] == DS_K_NOT_FOUND) sts[i] = DS_K_OK;
        st = ds__first_failure(n, keys, sts, ds__opcode_name(op));
    }
    if (sts != statuses && sts != &one) free(sts);
    return st;
}

static ds_status_t status_call(ds_client_t *c, ds_opcode_t op, const uint32_t *pre, size_t n,
                               const char *const *keys, ds_status_t *statuses, bool missing_ok)
{
    ds__client_enter(c);
    return ds__client_leave(c, status_call_in(c, op, pre, n, keys, statuses, missing_ok));
}

ds_status_t ds_kv_del(ds_client_t *c, size_t n, const char *const *keys, ds_status_t *statuses)
{
    return status_call(c, DS_OP_DEL, NULL, n, keys, statuses, true);
}

ds_status_t ds_kv_expire(ds_client_t *c, size_t n, const char *const *keys, uint32_t ttl_second,
                         ds_status_t *statuses)
{
    return status_call(c, DS_OP_EXPIRE, &ttl_second, n, keys, statuses, false);
}

static ds_status_t kv_exist(ds_client_t *c, size_t n, const char *const *keys, bool *exists)
{
    ds__clear_error();
    if (c == NULL || exists == NULL) return ds__set_error(DS_K_INVALID, "client or exists is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_EXIST_BATCH);
    if (st != DS_K_OK) return st;
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    st = keys_request(c, DS_OP_EXIST, NULL, n, keys, deadline, &conn);
    if (conn == NULL) return st;
    if (st == DS_K_OK) {
        uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, 1);
        for (uint32_t i = 0; i < m && m == n; i++)
            exists[i] = ds__rbuf_u8(&conn->r) != 0;
        if (conn->r.err || m != n) st = ds__conn_protocol_error(conn, "exist");
    }
    ds__conn_drain(conn, deadline);
    ds__client_put(c, conn);
    return st;
}

static ds_status_t kv_query_size(ds_client_t *c, size_t n, const char *const *keys, uint64_t *sizes,
                                 ds_status_t *statuses)
{
    ds__clear_error();
    if (c == NULL || sizes == NULL) return ds__set_error(DS_K_INVALID, "client or sizes is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    st = keys_request(c, DS_OP_QSIZE, NULL, n, keys, deadline, &conn);
    if (conn == NULL) return st;
    if (st == DS_K_OK) {
        size_t found = 0;
        uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, 12);
        for (uint32_t i = 0; i < m && m == n; i++) {
            ds_status_t ks = (ds_status_t)ds__rbuf_u32(&conn->r);
            uint64_t sz = ds__rbuf_u64(&conn->r);
            sizes[i] = ks == DS_K_OK ? sz : 0;
            if (statuses) statuses[i] = ks;
            found += ks == DS_K_OK;
        }
        if (conn->r.err || m != n)
            st = ds__conn_protocol_error(conn, "query_size");
        else if (found == 0)
            st = n == 1 ? not_found(keys[0], 0, 0)
                        : ds__set_error(DS_K_NOT_FOUND, "none of the %zu keys was found", n);
    }
    ds__conn_drain(conn, deadline);
    ds__client_put(c, conn);
    return st;
}

static ds_status_t kv_generate_key(ds_client_t *c, const char *prefix, char **out)
{
    ds__clear_error();
    if (c == NULL || out == NULL) return ds__set_error(DS_K_INVALID, "client or out is NULL");
    *out = NULL;
    char msg[256];
    if (prefix && *prefix && ds__key_check(prefix, strlen(prefix), msg, sizeof(msg)) != 0)
        return ds__set_error(DS_K_INVALID, "prefix: %s", msg);
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    ds_status_t st = ds__client_acquire(c, &deadline, &conn);
    if (st != DS_K_OK) return st;
    ds__conn_begin(conn);
    ds__wbuf_cstr(&conn->w, prefix);
    st = ds__conn_call(conn, DS_OP_GENKEY, false, deadline);
    if (st == DS_K_OK) {
        const char *k;
        uint32_t kl = ds__rbuf_str(&conn->r, &k);
        /* A key with a NUL in it would come back shortened, possibly empty. */
        if (conn->r.err || kl == 0 || memchr(k, '\0', kl) != NULL) {
            st = ds__conn_protocol_error(conn, "generate_key");
        } else if ((*out = strndup(k, kl)) == NULL) {
            st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
        }
    }
    ds__conn_drain(conn, deadline);
    ds__client_put(c, conn);
    return st;
}

/* ---- entry points: each call holds a reference on the client while it runs,
 * so ds_client_close on another thread cannot free it underneath ---- */

ds_status_t ds_kv_mset(ds_client_t *c, size_t n, const char *const *keys, const void *const *vals,
                       const size_t *lens, const ds_set_param_t *param, ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_mset(c, n, keys, vals, lens, param, statuses));
}

ds_status_t ds_kv_get_into(ds_client_t *c, const char *key, int32_t sub_timeout_ms, void *buf,
                           size_t cap, size_t *len)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_get_into(c, key, sub_timeout_ms, buf, cap, len));
}

ds_status_t ds_kv_mget(ds_client_t *c, size_t n, const char *const *keys, int32_t sub_timeout_ms,
                       ds_value_t *out)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_mget(c, n, keys, sub_timeout_ms, out));
}

ds_status_t ds_kv_exist(ds_client_t *c, size_t n, const char *const *keys, bool *exists)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_exist(c, n, keys, exists));
}

ds_status_t ds_kv_query_size(ds_client_t *c, size_t n, const char *const *keys, uint64_t *sizes,
                             ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_query_size(c, n, keys, sizes, statuses));
}

ds_status_t ds_kv_generate_key(ds_client_t *c, const char *prefix, char **out)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_generate_key(c, prefix, out));
}
