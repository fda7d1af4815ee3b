/* Zero-copy buffers: ds_kv_get_buffers, ds_kv_create/mcreate,
 * ds_kv_publish/mpublish and the ds_buffer_* accessors.
 *
 * On a local client a buffer is a window into the worker's arena: a read
 * buffer pins one published version, with no request through the session's
 * shared pin table when the worker's GET index lists the value
 * (common/shm_index.h), else with a GET with DS_GET_PIN; a created buffer is
 * a reservation the caller fills before PUBLISH. A single create takes the
 * connection's reserved space (SETR, see space.c) when it fits, with no round
 * trip, and its publish is one SETR that keeps a pin on the value. Either way the buffer holds a
 * reference on its session, which keeps the arena mapped and the pin alive
 * until ds_buffer_release drops it, even after the client is closed or has
 * moved on to a new session.
 *
 * On a remote client the same calls work on heap memory: a read buffer holds
 * the bytes received, a created buffer is filled locally and sent as a SET on
 * publish. Heap buffers are 64-byte aligned so tensor views over them are as
 * well aligned as arena ones. */
#include "client/client_internal.h"

#include "common/bigbuf.h"
#include "common/error.h"
#include "common/shm_index.h"
#include "common/tsan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KQ 64
/* Status of a buffer not yet published in this call (not a wire value). */
#define PENDING ((ds_status_t)-1)

static ds_buffer_t *buf_new(const char *key, ds_buf_kind_t kind)
{
    size_t kl = strlen(key);
    ds_buffer_t *b = calloc(1, sizeof(*b) + kl + 1);
    if (b == NULL) return NULL;
    memcpy(b->key, key, kl + 1);
    b->kind = kind;
    b->pin_slot = -1;
    return b;
}

/* ---- readers' shared pins (common/shm_index.h) ---- */

static int pin_take(ds_sess_t *s)
{
    uint64_t v = atomic_load_explicit(&s->pins_free, memory_order_relaxed);
    while (v != 0) {
        int i = __builtin_ctzll(v);
        if (atomic_compare_exchange_weak_explicit(&s->pins_free, &v, v & ~(UINT64_C(1) << i),
                                                  memory_order_acquire, memory_order_relaxed))
            return i;
    }
    return -1;
}

static void pin_give(ds_sess_t *s, int i)
{
    atomic_fetch_or_explicit(&s->pins_free, UINT64_C(1) << i, memory_order_release);
}

/* Lets go of a shared pin. The slot is left alone once the worker has
 * closed the session's anchor: the session is over there, and its table
 * may belong to another session by now. */
static void pin_drop(ds_buffer_t *b)
{
    ds_sess_t *s = b->sess;
    if (!atomic_load(&s->anchor_dead)) ds__shm_pins_clear(s->pins, (unsigned)b->pin_slot);
    pin_give(s, b->pin_slot);
    b->pin_slot = -1;
}

/* Big heap buffers are huge-page-backed mappings (common/bigbuf.h): a
 * remote zero-copy get writes its whole buffer at once, and faulting it in
 * 4 KiB pages cost more than the transfer. */
static uint8_t *heap_alloc(size_t size)
{
    return ds__bigbuf_alloc(size ? size : 1);
}

void ds_buffer_release(ds_buffer_t *b)
{
    if (b == NULL) return;
    if (b->kind == DS_BUF_SHM) {
        DS__TSAN_READ_DONE(b->sess->base);
        if (b->pin_slot >= 0) pin_drop(b);
        if (b->handle) ds__sess_release(b->sess, &b->handle, 1);
        ds__sess_unref(b->sess);
    } else {
        ds__bigbuf_free(b->data);
    }
    free(b);
}

void ds__buffers_release(ds_buffer_t **bufs, size_t n)
{
    uint64_t handles[64];
    size_t k = 0;
    ds_sess_t *s = NULL;
    for (size_t i = 0; i < n; i++) {
        ds_buffer_t *b = bufs[i];
        if (b == NULL) continue;
        bufs[i] = NULL;
        if (b->kind != DS_BUF_SHM || b->handle == 0) {
            ds_buffer_release(b);
            continue;
        }
        /* Handles of one session go together; a new session or a full
         * batch sends what is gathered first. */
        if (k && (b->sess != s || k == sizeof handles / sizeof handles[0])) {
            ds__sess_release(s, handles, k);
            ds__sess_unref(s);
            k = 0;
        }
        if (k == 0) {
            s = b->sess;
            ds__sess_ref(s);
        }
        DS__TSAN_READ_DONE(b->sess->base);
        if (b->pin_slot >= 0) pin_drop(b);
        handles[k++] = b->handle;
        ds__sess_unref(b->sess);
        free(b);
    }
    if (k) {
        ds__sess_release(s, handles, k);
        ds__sess_unref(s);
    }
}

void ds_buffer_release_deferred(ds_buffer_t *b)
{
    if (b == NULL) return;
    ds_sess_t *s = b->sess;
    /* Only a published pin waits; an unpublished buffer is discarded now. */
    if (b->kind != DS_BUF_SHM || !b->published || b->handle == 0 || b->size > DS_CLIENT_DEFER_ONE) {
        ds_buffer_release(b);
        return;
    }
    DS__TSAN_READ_DONE(s->base);
    uint64_t now[DS_CLIENT_DEFER_MAX + 1];
    size_t n = 0;
    pthread_mutex_lock(&s->defer_mu);
    size_t k = atomic_load_explicit(&s->ndeferred, memory_order_relaxed);
    if (k == DS_CLIENT_DEFER_MAX || s->deferred_bytes + b->size > DS_CLIENT_DEFER_TOTAL) {
        /* Full: these and this one go now, in one frame over the anchor. */
        memcpy(now, s->deferred, k * sizeof(*now));
        now[k] = b->handle;
        n = k + 1;
        atomic_store_explicit(&s->ndeferred, 0, memory_order_relaxed);
        s->deferred_bytes = 0;
    } else {
        s->deferred[k] = b->handle;
        s->deferred_bytes += b->size;
        atomic_store_explicit(&s->ndeferred, (uint32_t)(k + 1), memory_order_relaxed);
    }
    pthread_mutex_unlock(&s->defer_mu);
    if (n) ds__sess_release(s, now, n);
    ds__sess_unref(s);
    free(b);
}

const void *ds_buffer_data(const ds_buffer_t *b)
{
    return b ? b->data : NULL;
}

void *ds_buffer_mutable_data(ds_buffer_t *b)
{
    return b && !b->published ? b->data : NULL;
}

ds_status_t ds_buffer_memory_copy(ds_buffer_t *b, const void *data, size_t length)
{
    ds__clear_error();
    if (b == NULL)
        return ds__set_error(DS_K_INVALID,
                             "Buffer is not initialized. Key may already exist with NX option.");
    if (data == NULL) return ds__set_error(DS_K_INVALID, "Can't put null pointer.");
    if (length == 0 || length > b->size)
        return ds__set_error(DS_K_INVALID, "Data length must be in (0, buffer_size].");
    uint8_t *dst = ds_buffer_mutable_data(b);
    if (dst == NULL)
        return ds__set_error(DS_K_INVALID, "the buffer of key '%.*s' is already published", KQ,
                             b->key);
    /* Into the arena: the copy a set makes (its way chosen for the value's
     * size, common/copy.h), not the caller's memcpy, and like a set's it
     * wakes the worker ahead of the publish that follows (client/lane.c). */
    if (b->kind == DS_BUF_SHM)
        b->promised = ds__lane_copy_in_sess(b->sess, dst, data, length);
    else
        memcpy(dst, data, length);
    return DS_K_OK;
}

size_t ds_buffer_size(const ds_buffer_t *b)
{
    return b ? b->size : 0;
}

const char *ds_buffer_key(const ds_buffer_t *b)
{
    return b ? b->key : NULL;
}

static void release_all(ds_buffer_t **out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ds_buffer_release(out[i]);
        out[i] = NULL;
    }
}

/* The buffer for a found entry e of key: a pinned view into the arena (the
 * pin passes from the entry to the buffer) or the inline bytes read from the
 * connection into a private allocation. *out is set once the buffer exists,
 * so the caller's release_all frees it on a later failure. */
static ds_status_t entry_buffer(ds_conn_t *conn, const char *key, ds_getent_t *e, uint64_t deadline,
                                ds_buffer_t **out)
{
    ds_buffer_t *b = buf_new(key, e->kind == DS_VAL_SHM ? DS_BUF_SHM : DS_BUF_HEAP);
    if (b == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    b->size = e->size;
    b->published = true;
    *out = b;
    if (e->kind == DS_VAL_SHM) {
        ds_sess_t *s = conn->sess;
        ds__sess_ref(s);
        b->sess = s;
        b->data = s->base + e->off;
        DS__TSAN_READING(s->base, b->data);
        b->handle = e->handle;
        e->kind = DS_VAL_MISSING; /* the pin now belongs to the buffer */
        return DS_K_OK;
    }
    b->data = heap_alloc(e->size);
    if (b->data == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a value of %llu bytes",
                             (unsigned long long)e->size);
    if (e->kind == DS_VAL_UCX) return DS_K_OK; /* the caller receives it */
    return ds__conn_read_data(conn, b->data, e->size, deadline);
}

/* All n values as views that the session's shared pin table holds, with no
 * request; false (nothing held) when any key has to go to the worker. */
static bool shm_get_buffers(ds_client_t *c, size_t n, const char *const *keys, ds_buffer_t **out)
{
    ds_sess_t *s = ds__client_index_session(c);
    if (s == NULL) return false;
    size_t i = 0;
    for (; s->pins != NULL && i < n; i++) {
        int slot = pin_take(s);
        if (slot < 0) break;
        uint64_t off = 0, size = 0;
        ds_buffer_t *b = buf_new(keys[i], DS_BUF_SHM);
        if (b == NULL || ds__shm_index_pin(&s->ix, s->size, keys[i], strlen(keys[i]), s->pins,
                                           (unsigned)slot, &off, &size) != DS_SHM_INDEX_HIT) {
            free(b);
            pin_give(s, slot);
            break;
        }
        ds__sess_ref(s);
        b->sess = s;
        b->pin_slot = slot;
        b->data = s->base + off;
        DS__TSAN_READING(s->base, b->data);
        b->size = size;
        b->published = true;
        out[i] = b;
    }
    ds__sess_unref(s);
    if (i == n) return true;
    release_all(out, i);
    return false;
}

static ds_status_t kv_get_buffers(ds_client_t *c, size_t n, const char *const *keys,
                                  int32_t sub_timeout_ms, ds_buffer_t **out)
{
    ds__clear_error();
    if (c == NULL || out == NULL) return ds__set_error(DS_K_INVALID, "client or out is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    if (sub_timeout_ms < 0)
        return ds__set_error(DS_K_INVALID, "sub_timeout_ms %d is negative", (int)sub_timeout_ms);
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (shm_get_buffers(c, n, keys, out)) return DS_K_OK;
    ds_getent_t *ents = malloc(n * sizeof(*ents));
    if (ents == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory getting %zu keys", n);
    uint64_t deadline = ds__client_deadline(c, sub_timeout_ms);
    ds_conn_t *conn;
    if ((st = ds__client_acquire(c, &deadline, &conn)) != DS_K_OK) {
        free(ents);
        return st;
    }
    ds_sess_t *s = conn->sess;
    uint64_t tag;
    ds_crecv_t rv_one, *rv = NULL;
    size_t nrv = 0;
    st = ds__get_request_ucx(c, conn, n, keys, sub_timeout_ms, DS_GET_PIN, UINT64_MAX, deadline,
                             ents, &tag);
    if (st == DS_K_OK && tag) {
        rv = n == 1 ? &rv_one : calloc(n, sizeof(*rv));
        if (rv == NULL) st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory getting %zu keys", n);
    }
    if (st == DS_K_OK) {
        size_t found = 0;
        for (size_t i = 0; i < n && st == DS_K_OK; i++) {
            if (ents[i].kind == DS_VAL_MISSING) continue;
            found++;
            st = entry_buffer(conn, keys[i], &ents[i], deadline, &out[i]);
            /* A remote session's value over UCX: received into the buffer's
             * own allocation once the inline values are read. */
            if (st == DS_K_OK && ents[i].kind == DS_VAL_UCX)
                st = ds__cucx_recv(c->ucx, &rv[nrv++], tag + i, out[i]->data, ents[i].size);
        }
        if (nrv && st == DS_K_OK) ds__conn_drain(conn, deadline);
        if (nrv && st == DS_K_OK && conn->state == DS_CONN_OK)
            st = ds__cucx_wait(c->ucx, rv, nrv, conn, deadline);
        else if (nrv)
            ds__cucx_abandon(c->ucx, rv, nrv);
        if (nrv && st != DS_K_OK && conn->state == DS_CONN_OK) conn->state = DS_CONN_BROKEN;
        if (st != DS_K_OK) {
            release_all(out, n);
            ds__release_entries(s, ents, n);
            ds__conn_drain(conn, deadline);
        } else if (found == 0) {
            st = n == 1 ? ds__set_error(DS_K_NOT_FOUND, "key '%.*s' not found", KQ, keys[0])
                        : ds__set_error(DS_K_NOT_FOUND, "none of the %zu keys was found", n);
        }
    }
    ds__client_put(c, conn);
    if (rv != &rv_one) free(rv);
    free(ents);
    return st;
}

/* READ: ranges of values. SHM entries become buffers over the range (the pin
 * holds the whole value), inline ones heap buffers holding just the range. */
static ds_status_t kv_read(ds_client_t *c, size_t n, const ds_read_param_t *params,
                           ds_buffer_t **out, ds_status_t *statuses)
{
    ds__clear_error();
    if (c == NULL || out == NULL || params == NULL)
        return ds__set_error(DS_K_INVALID, "client, params or out is NULL");
    if (n == 0 || n > DS_MAX_BATCH)
        return ds__set_error(DS_K_INVALID, "a batch of %zu ranges is not in 1..%d", n,
                             DS_MAX_BATCH);
    const char **keys = malloc(n * sizeof(*keys));
    ds_getent_t *ents = malloc(n * sizeof(*ents));
    ds_status_t *sts = statuses ? statuses : malloc(n * sizeof(*sts));
    ds_status_t st = DS_K_OK;
    if (keys == NULL || ents == NULL || sts == NULL) {
        st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory reading %zu ranges", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        keys[i] = params[i].key;
        out[i] = NULL;
        sts[i] = DS_K_RUNTIME_ERROR;
    }
    if ((st = ds__check_keys(n, keys, DS_MAX_BATCH)) != DS_K_OK) goto out;
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    if ((st = ds__client_acquire(c, &deadline, &conn)) != DS_K_OK) goto out;
    ds_sess_t *s = conn->sess;
    ds__conn_begin(conn);
    ds__wbuf_u32(&conn->w, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        ds__wbuf_cstr(&conn->w, params[i].key);
        ds__wbuf_u64(&conn->w, params[i].offset);
        ds__wbuf_u64(&conn->w, params[i].size);
    }
    st = ds__conn_call(conn, DS_OP_READ, false, deadline);
    if (conn->state != DS_CONN_OK || (st != DS_K_OK && conn->r.pos == conn->r.len)) {
        for (size_t i = 0; i < n; i++)
            sts[i] = st;
        ds__conn_drain(conn, deadline);
        ds__client_put(c, conn);
        goto out;
    }
    ds_status_t overall = st;
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", ds_last_error());
    uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, 13);
    uint64_t inline_total = 0;
    size_t parsed = 0;
    bool bad = m != n;
    for (uint32_t i = 0; i < m && !bad; i++) {
        ds_getent_t *e = &ents[i];
        sts[i] = (ds_status_t)ds__rbuf_u32(&conn->r);
        if (!ds__read_entry(conn, e, &inline_total, &bad)) break;
        parsed = i + 1;
        bad = bad || ((e->kind == DS_VAL_MISSING) != (sts[i] != DS_K_OK));
    }
    if (bad || conn->r.err || inline_total != conn->rh.data_len) {
        ds__release_entries(s, ents, parsed);
        st = ds__conn_protocol_error(conn, "read");
        for (size_t i = 0; i < n; i++)
            sts[i] = st;
        ds__client_put(c, conn);
        goto out;
    }
    for (size_t i = 0; i < n && st == DS_K_OK; i++) {
        if (ents[i].kind == DS_VAL_MISSING) continue;
        st = entry_buffer(conn, keys[i], &ents[i], deadline, &out[i]);
    }
    if (st != DS_K_OK) {
        release_all(out, n);
        ds__release_entries(s, ents, n);
        ds__conn_drain(conn, deadline);
        for (size_t i = 0; i < n; i++)
            sts[i] = st;
    } else {
        st = overall;
        if (st != DS_K_OK)
            ds__set_error(st, "%s", msg);
        else if (msg[0])
            ds__set_error(DS_K_OK, "%s", msg); /* what failed, when some ranges did */
    }
    ds__client_put(c, conn);
out:
    if (sts != statuses) free(sts);
    free(keys);
    free(ents);
    return st;
}

/* Reserves arena space for every key, or for none: a partial result would
 * need per-key statuses the API does not have. */
static ds_status_t create_in_arena(ds_conn_t *conn, size_t n, const char *const *keys,
                                   const size_t *sizes, const ds_set_param_t *p, ds_buffer_t **out,
                                   uint64_t deadline)
{
    ds_sess_t *s = conn->sess;
    ds__conn_begin(conn);
    ds__wbuf_u8(&conn->w, (uint8_t)p->write_mode);
    ds__wbuf_u32(&conn->w, p->ttl_second);
    ds__wbuf_u8(&conn->w, (uint8_t)p->existence);
    ds__wbuf_u32(&conn->w, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        ds__wbuf_cstr(&conn->w, keys[i]);
        ds__wbuf_u64(&conn->w, sizes[i]);
    }
    ds_status_t st = ds__conn_call(conn, DS_OP_CREATE, false, deadline);
    if (conn->state != DS_CONN_OK || (st != DS_K_OK && conn->r.pos == conn->r.len)) return st;
    uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)n, 20);
    ds_status_t first = DS_K_OK;
    size_t first_i = 0;
    for (uint32_t i = 0; i < m && m == n; i++) {
        ds_status_t ks = (ds_status_t)ds__rbuf_u32(&conn->r);
        uint64_t off = ds__rbuf_u64(&conn->r);
        uint64_t handle = ds__rbuf_u64(&conn->r);
        if (conn->r.err) break;
        if (ks != DS_K_OK) {
            if (first == DS_K_OK) {
                first = ks;
                first_i = i;
            }
            continue;
        }
        ds_buffer_t *b = buf_new(keys[i], DS_BUF_SHM);
        if (b == NULL) {
            ds__sess_release(s, &handle, 1);
            if (first == DS_K_OK) first = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
            continue;
        }
        ds__sess_ref(s);
        b->sess = s;
        b->handle = handle;
        b->size = sizes[i];
        out[i] = b;
        if (off > s->size || sizes[i] > s->size - off) {
            conn->r.err = true;
            break;
        }
        b->data = s->base + off;
    }
    if (conn->r.err || m != n) {
        release_all(out, n);
        return ds__conn_protocol_error(conn, "create");
    }
    if (first != DS_K_OK) {
        /* Dropping the reservations that did succeed discards them. */
        release_all(out, n);
        if (st == DS_K_OK || ds_last_error()[0] == '\0')
            ds__set_error(first, "create of key '%.*s' failed: %s", KQ, keys[first_i],
                          ds_status_message(first));
        return first;
    }
    return DS_K_OK;
}

/* A local create without a round trip: the connection's reserved space
 * (SETR, space.c) becomes the buffer's own, asking for one first when the
 * connection holds none large enough. false when the worker would not
 * reserve it (the caller then sends CREATE); else *st says how it went. */
static bool create_in_space(ds_conn_t *conn, const char *key, size_t size, const ds_set_param_t *p,
                            ds_buffer_t **out, uint64_t deadline, ds_status_t *st)
{
    ds_sess_t *s = conn->sess;
    uint64_t need = ds__round_up64(size);
    *st = DS_K_OK;
    if (conn->space.len < need) {
        *st = ds__space_get(conn, need, deadline);
        if (*st != DS_K_OK) return true;
        if (conn->space.len < need) return false;
    }
    ds_buffer_t *b = buf_new(key, DS_BUF_SHM);
    if (b == NULL) {
        *st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
        return true;
    }
    ds__sess_ref(s);
    b->sess = s;
    b->data = s->base + conn->space.off;
    b->handle = ds__space_hand_over(conn);
    b->size = size;
    b->param = *p;
    b->space = true;
    *out = b;
    return true;
}

static void slot_drop(ds_sess_t *s, int slot)
{
    if (!atomic_load(&s->anchor_dead)) ds__shm_pins_clear(s->pins, (unsigned)slot);
    pin_give(s, slot);
}

/* Publishes a buffer over a space of its own with one SETR that keeps a pin
 * (the buffer's view stays valid, as a CREATE buffer's does). What is left
 * of the space becomes the connection's when it has none that fits. */
static ds_status_t publish_space(ds_conn_t *conn, ds_buffer_t *b, uint64_t deadline)
{
    ds_sess_t *s = conn->sess;
    uint64_t need = ds__round_up64(b->size);
    uint64_t want = conn->space.len >= need ? 0 : need;
    /* The view after publish is held in the session's shared pin table when
     * a slot is free: written before the request, dropped with no RELEASE. */
    int slot = s->pins && !atomic_load(&s->anchor_dead) ? pin_take(s) : -1;
    if (slot >= 0) {
        atomic_fetch_add_explicit(&s->pins->held, 1, memory_order_seq_cst);
        atomic_store_explicit(&s->pins->slot[slot], (uint64_t)(b->data - s->base),
                              memory_order_seq_cst);
        ds__shm_pins_fence();
    }
    ds__lane_take_promise(conn, b->promised);
    b->promised = 0;
    ds__space_begin(conn, b->handle, want, DS_SETR_PIN | (slot >= 0 ? DS_SETR_SHM_PIN : 0));
    ds__wbuf_u8(&conn->w, (uint8_t)b->param.write_mode);
    ds__wbuf_u32(&conn->w, b->param.ttl_second);
    ds__wbuf_u8(&conn->w, (uint8_t)b->param.existence);
    ds__wbuf_u32(&conn->w, 1);
    ds__wbuf_cstr(&conn->w, b->key);
    ds__wbuf_u64(&conn->w, (uint64_t)(b->data - s->base));
    ds__wbuf_u64(&conn->w, b->size);
    DS__TSAN_PUBLISHED(s->base, b->data);
    ds_status_t st = ds__conn_call(conn, DS_OP_SETR, false, deadline);
    uint64_t t[4];
    ds_status_t ts = ds__space_trailer(conn, true, t);
    if (ts != DS_K_OK) st = ts;
    if (conn->state != DS_CONN_OK) {
        if (slot >= 0) slot_drop(s, slot);
        ds__conn_drain(conn, deadline);
        return st;
    }
    if (st != DS_K_OK && conn->r.pos == conn->r.len) {
        /* Refused as a whole: the space stays the buffer's, renamed. */
        b->handle = t[0];
        b->space = t[0] != 0;
        if (slot >= 0) slot_drop(s, slot);
        ds__conn_drain(conn, deadline);
        return st;
    }
    uint32_t m = ds__rbuf_count(&conn->r, 1, 4);
    ds_status_t ks = (ds_status_t)ds__rbuf_u32(&conn->r);
    b->handle = t[3];
    b->space = false;
    /* Published: the slot holds the view; failed: nothing to hold. */
    if (slot >= 0 && ks == DS_K_OK && !conn->r.err && m == 1)
        b->pin_slot = slot;
    else if (slot >= 0)
        slot_drop(s, slot);
    ds__space_replace(conn, t);
    if (conn->r.err || m != 1) ks = ds__conn_protocol_error(conn, "set_reserved");
    ds__conn_drain(conn, deadline);
    return ks;
}

static ds_status_t kv_mcreate(ds_client_t *c, size_t n, const char *const *keys,
                              const size_t *sizes, const ds_set_param_t *param, ds_buffer_t **out)
{
    ds__clear_error();
    if (c == NULL || out == NULL || sizes == NULL)
        return ds__set_error(DS_K_INVALID, "client, sizes or out is NULL");
    ds_status_t st = ds__check_keys(n, keys, DS_MAX_BATCH);
    if (st != DS_K_OK) return st;
    for (size_t i = 0; i < n; i++)
        if (sizes[i] == 0)
            return ds__set_error(DS_K_INVALID, "the size for key '%.*s' is 0", KQ, keys[i]);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    if (param) p = *param;
    if ((st = ds__check_param(&p)) != DS_K_OK) return st;
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;

    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    if ((st = ds__client_acquire(c, &deadline, &conn)) != DS_K_OK) return st;
    if (conn->sess->base) {
        if (!(n == 1 && conn->sess->setr &&
              create_in_space(conn, keys[0], sizes[0], &p, out, deadline, &st)))
            st = create_in_arena(conn, n, keys, sizes, &p, out, deadline);
        /* The caller writes what this hands out: after the answer, since the
         * range may be one another thread wrote until the worker freed it. */
        DS__TSAN_WRITING(conn->sess->base);
        ds__conn_drain(conn, deadline);
        ds__client_put(c, conn);
        return st;
    }
    ds__client_put(c, conn);
    for (size_t i = 0; i < n; i++) {
        ds_buffer_t *b = buf_new(keys[i], DS_BUF_HEAP);
        if (b && (b->data = heap_alloc(sizes[i])) == NULL) {
            free(b);
            b = NULL;
        }
        if (b == NULL) {
            release_all(out, n);
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a buffer of %zu bytes",
                                 sizes[i]);
        }
        b->size = sizes[i];
        b->param = p;
        out[i] = b;
    }
    return DS_K_OK;
}

ds_status_t ds_kv_create(ds_client_t *c, const char *key, size_t size, const ds_set_param_t *param,
                         ds_buffer_t **out)
{
    if (out) *out = NULL;
    return ds_kv_mcreate(c, 1, &key, &size, param, out);
}

static bool same_param(const ds_set_param_t *a, const ds_set_param_t *b)
{
    return a->write_mode == b->write_mode && a->ttl_second == b->ttl_second &&
           a->existence == b->existence;
}

/* Publishes the buffers whose status is PENDING over conn: buffers over a space of their own
 * with one SETR each, other arena buffers in one PUBLISH, heap buffers in one SET per distinct
 * parameter set. */
static void publish_on(ds_conn_t *conn, size_t n, ds_buffer_t *const *bufs, const char **keys,
                       const void **vals, size_t *lens, size_t *idx, ds_status_t *sts,
                       uint64_t deadline)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sts[i] == PENDING && bufs[i]->space)
            sts[i] = conn->state == DS_CONN_OK ? publish_space(conn, bufs[i], deadline)
                                               : DS_K_RPC_UNAVAILABLE;
    for (size_t i = 0; i < n; i++)
        if (sts[i] == PENDING && bufs[i]->kind == DS_BUF_SHM) idx[k++] = i;
    if (k > 0) {
        ds__conn_begin(conn);
        ds__wbuf_u32(&conn->w, (uint32_t)k);
        for (size_t i = 0; i < k; i++) {
            ds__lane_take_promise(conn, bufs[idx[i]]->promised);
            bufs[idx[i]]->promised = 0;
            ds__wbuf_u64(&conn->w, bufs[idx[i]]->handle);
            DS__TSAN_PUBLISHED(bufs[idx[i]]->sess->base, bufs[idx[i]]->data);
        }
        ds_status_t st = ds__conn_call(conn, DS_OP_PUBLISH, false, deadline);
        if (conn->state != DS_CONN_OK || (st != DS_K_OK && conn->r.pos == conn->r.len)) {
            for (size_t i = 0; i < k; i++)
                sts[idx[i]] = st;
        } else {
            uint32_t m = ds__rbuf_count(&conn->r, (uint32_t)k, 4);
            for (uint32_t i = 0; i < m && m == k; i++)
                sts[idx[i]] = (ds_status_t)ds__rbuf_u32(&conn->r);
            if (conn->r.err || m != k) {
                st = ds__conn_protocol_error(conn, "publish");
                for (size_t i = 0; i < k; i++)
                    sts[idx[i]] = st;
            }
        }
        ds__conn_drain(conn, deadline);
    }
    for (size_t first = 0; first < n && conn->state == DS_CONN_OK; first++) {
        if (sts[first] != PENDING || bufs[first]->kind != DS_BUF_HEAP) continue;
        k = 0;
        for (size_t i = first; i < n; i++)
            if (sts[i] == PENDING && bufs[i]->kind == DS_BUF_HEAP &&
                same_param(&bufs[i]->param, &bufs[first]->param))
                idx[k++] = i;
        ds__set_values(conn, &bufs[first]->param, k, idx, keys, vals, lens, sts, deadline);
        /* A failed request leaves some statuses at TRY_AGAIN only if the
         * worker lied about the count; do not loop on them. */
        for (size_t i = 0; i < k; i++)
            if (sts[idx[i]] == PENDING) sts[idx[i]] = DS_K_RUNTIME_ERROR;
    }
}

static ds_status_t kv_mpublish(ds_client_t *c, size_t n, ds_buffer_t *const *bufs,
                               ds_status_t *statuses)
{
    ds__clear_error();
    if (c == NULL || bufs == NULL) return ds__set_error(DS_K_INVALID, "client or bufs is NULL");
    if (n == 0 || n > DS_MAX_BATCH)
        return ds__set_error(DS_K_INVALID, "a batch of %zu buffers is not in 1..%d", n,
                             DS_MAX_BATCH);
    for (size_t i = 0; i < n; i++)
        if (bufs[i] == NULL) return ds__set_error(DS_K_INVALID, "buffer #%zu is NULL", i);
    ds_status_t *sts = statuses ? statuses : malloc(n * sizeof(*sts));
    const char **keys = malloc(n * sizeof(*keys));
    const void **vals = malloc(n * sizeof(*vals));
    size_t *lens = malloc(n * sizeof(*lens));
    size_t *idx = malloc(n * sizeof(*idx));
    ds_status_t st = DS_K_OK;
    if (sts == NULL || keys == NULL || vals == NULL || lens == NULL || idx == NULL) {
        st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory publishing %zu buffers", n);
        goto out;
    }
    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    st = ds__client_acquire(c, &deadline, &conn);
    for (size_t i = 0; i < n; i++) {
        ds_buffer_t *b = bufs[i];
        keys[i] = b->key;
        vals[i] = b->data;
        lens[i] = b->size;
        if (st != DS_K_OK)
            sts[i] = st;
        else if (b->published)
            sts[i] = ds__set_error(DS_K_INVALID, "the buffer of key '%.*s' is already published",
                                   KQ, b->key);
        else if (b->kind == DS_BUF_SHM && b->sess != conn->sess)
            sts[i] = ds__set_error(DS_K_CLIENT_WORKER_DISCONNECT,
                                   "the buffer of key '%.*s' was created before the connection "
                                   "to the worker was lost; create it again",
                                   KQ, b->key);
        else
            sts[i] = PENDING;
    }
    if (st == DS_K_OK) {
        publish_on(conn, n, bufs, keys, vals, lens, idx, sts, deadline);
        ds__client_put(c, conn);
    }
    for (size_t i = 0; i < n; i++)
        if (sts[i] == DS_K_OK) bufs[i]->published = true;
    st = ds__first_failure(n, keys, sts, "publish");
out:
    if (sts != statuses) free(sts);
    free(keys);
    free((void *)vals);
    free(lens);
    free(idx);
    return st;
}

ds_status_t ds_kv_publish(ds_client_t *c, ds_buffer_t *buf)
{
    ds_status_t st;
    return ds_kv_mpublish(c, 1, &buf, &st);
}

/* ---- entry points: each call holds a reference on the client while it runs,
 * so ds_client_close on another thread cannot free it underneath ---- */

ds_status_t ds_kv_get_buffers(ds_client_t *c, size_t n, const char *const *keys,
                              int32_t sub_timeout_ms, ds_buffer_t **out)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_get_buffers(c, n, keys, sub_timeout_ms, out));
}

ds_status_t ds_kv_mcreate(ds_client_t *c, size_t n, const char *const *keys, const size_t *sizes,
                          const ds_set_param_t *param, ds_buffer_t **out)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_mcreate(c, n, keys, sizes, param, out));
}

ds_status_t ds_kv_mpublish(ds_client_t *c, size_t n, ds_buffer_t *const *bufs,
                           ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_mpublish(c, n, bufs, statuses));
}

ds_status_t ds_kv_read(ds_client_t *c, size_t n, const ds_read_param_t *params, ds_buffer_t **out,
                       ds_status_t *statuses)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_read(c, n, params, out, statuses));
}
