/* ds_kv_setv: one key set to the concatenation of several pieces (a gather
 * set), so a caller that has a value in parts (a serializer's framing around
 * a tensor's bytes) does not join them into one buffer first.
 *
 * A local client whose connection holds a large enough arena space (SETR,
 * space.c) copies each piece once, straight into the space, and publishes the
 * value with one SETR that keeps no pin: one round trip, no release frame.
 * Without such a space (the first large set of a connection, a larger value
 * than before, a worker that will not reserve) it takes the create / publish
 * path, whose SETR answer leaves the connection a space for the next call.
 * A value small enough to travel inline, and every value of a remote client,
 * goes in one SET with the pieces as the data section (each large piece its
 * own iovec, no copy on the client). */
#include "client/client_internal.h"

#include "common/copy.h"
#include "common/error.h"
#include "common/tsan.h"

#include <string.h>

#define KQ 64

/* The one key's status of a SET or SETR answer: a failure that carries only
 * its message is the request's status. */
static ds_status_t key_status(ds_conn_t *conn, ds_status_t st, const char *what)
{
    if (conn->state != DS_CONN_OK || (st != DS_K_OK && conn->r.pos == conn->r.len)) return st;
    uint32_t m = ds__rbuf_count(&conn->r, 1, 4);
    ds_status_t ks = (ds_status_t)ds__rbuf_u32(&conn->r);
    if (conn->r.err || m != 1) return ds__conn_protocol_error(conn, what);
    return ks;
}

static ds_status_t setv_inline(ds_conn_t *conn, const char *key, size_t n,
                               const void *const *pieces, const size_t *lens, uint64_t total,
                               const ds_set_param_t *p, uint64_t deadline)
{
    ds__conn_begin(conn);
    ds__set_param_put(conn, p);
    ds__wbuf_u32(&conn->w, 1);
    ds__wbuf_cstr(&conn->w, key);
    ds__wbuf_u64(&conn->w, total);
    for (size_t i = 0; i < n; i++)
        ds__conn_add_data(conn, pieces[i], lens[i]);
    ds_status_t st = key_status(conn, ds__conn_call(conn, DS_OP_SET, false, deadline), "set");
    ds__conn_drain(conn, deadline);
    return st;
}

/* The pieces copied into the connection's space (which holds at least
 * total bytes) and published with one SETR without a pin; its answer names
 * the connection's next space. */
static ds_status_t setv_in_space(ds_conn_t *conn, const char *key, size_t n,
                                 const void *const *pieces, const size_t *lens, uint64_t total,
                                 const ds_set_param_t *p, uint64_t deadline)
{
    ds_sess_t *s = conn->sess;
    uint64_t need = ds__round_up64(total);
    uint64_t want = ds__space_want(conn, need);
    uint64_t off = conn->space.off;
    uint8_t *dst = s->base + off;
    ds_lane_ahead_t ahead;
    ds__lane_ahead_init(&ahead, conn, total);
    for (size_t i = 0; i < n; i++) {
        ds__lane_copy_in(&ahead, dst, pieces[i], lens[i]);
        dst += lens[i];
    }
    DS__TSAN_PUBLISHED(s->base, s->base + off);
    ds__space_begin(conn, conn->space.handle, want, 0);
    ds__set_param_put(conn, p);
    ds__wbuf_u32(&conn->w, 1);
    ds__wbuf_cstr(&conn->w, key);
    ds__wbuf_u64(&conn->w, off);
    ds__wbuf_u64(&conn->w, total);
    ds_status_t st = ds__conn_call(conn, DS_OP_SETR, false, deadline);
    ds_status_t ts = ds__space_take(conn);
    if (ts != DS_K_OK) st = ts;
    st = key_status(conn, st, "set_reserved");
    ds__conn_drain(conn, deadline);
    return st;
}

/* No space that fits: a created buffer (from a space the create asks for,
 * or CREATE), the pieces copied into it once, published and released. */
static ds_status_t setv_created(ds_client_t *c, const char *key, size_t n,
                                const void *const *pieces, const size_t *lens, uint64_t total,
                                const ds_set_param_t *p)
{
    ds_buffer_t *b = NULL;
    ds_status_t st = ds_kv_create(c, key, (size_t)total, p, &b);
    if (st != DS_K_OK) return st;
    uint8_t *dst = ds_buffer_mutable_data(b);
    /* A remote client's buffer is private memory this process sends next. */
    void (*copy)(void *, const void *, size_t) = ds_client_is_local(c) ? ds__copy_in : ds__copy;
    for (size_t i = 0; i < n; i++) {
        if (lens[i]) copy(dst, pieces[i], lens[i]);
        dst += lens[i];
    }
    st = ds_kv_publish(c, b);
    ds_buffer_release(b);
    return st;
}

static ds_status_t kv_setv(ds_client_t *c, const char *key, size_t n, const void *const *pieces,
                           const size_t *lens, const ds_set_param_t *param)
{
    ds__clear_error();
    if (c == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    ds_status_t st = ds__check_keys(1, &key, 1);
    if (st != DS_K_OK) return st;
    if (n == 0 || n > DS_MAX_SETV_PIECES)
        return ds__set_error(DS_K_INVALID, "%zu pieces is not in 1..%d", n, DS_MAX_SETV_PIECES);
    if (pieces == NULL || lens == NULL) return ds__set_error(DS_K_INVALID, "pieces are NULL");
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] != 0 && pieces[i] == NULL)
            return ds__set_error(DS_K_INVALID, "piece #%zu is NULL", i);
        if (lens[i] > UINT64_MAX / 2 - total)
            return ds__set_error(DS_K_INVALID, "the pieces' total length overflows");
        total += lens[i];
    }
    if (total == 0)
        return ds__set_error(DS_K_INVALID, "the value for key '%.*s' is empty", KQ, key);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    if (param) p = *param;
    if ((st = ds__check_param(&p)) != DS_K_OK) return st;

    uint64_t deadline = ds__client_deadline(c, 0);
    ds_conn_t *conn;
    if ((st = ds__client_acquire(c, &deadline, &conn)) != DS_K_OK) return st;
    ds_sess_t *s = conn->sess;
    size_t inline_max = s->inline_max;
    if (s->base && s->setr && inline_max > DS_CLIENT_SPACE_MIN) inline_max = DS_CLIENT_SPACE_MIN;
    if (s->base == NULL || total <= inline_max) {
        st = setv_inline(conn, key, n, pieces, lens, total, &p, deadline);
    } else if (s->setr && conn->space.len >= ds__round_up64(total)) {
        st = setv_in_space(conn, key, n, pieces, lens, total, &p, deadline);
    } else {
        ds__client_put(c, conn);
        st = setv_created(c, key, n, pieces, lens, total, &p);
        return st;
    }
    ds__client_put(c, conn);
    if (st != DS_K_OK && ds_last_error()[0] == '\0')
        ds__set_error(st, "set of key '%.*s' failed: %s", KQ, key, ds_status_message(st));
    return st;
}

ds_status_t ds_kv_setv(ds_client_t *c, const char *key, size_t n, const void *const *pieces,
                       const size_t *lens, const ds_set_param_t *param)
{
    ds__client_enter(c);
    return ds__client_leave(c, kv_setv(c, key, n, pieces, lens, param));
}
