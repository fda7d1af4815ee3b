/* The reserved arena space of a local pool connection (SETR, common/wire.h).
 *
 * The worker reserves a range of its arena for a connection (a "space");
 * the client copies large values of its next set there and names them with
 * one SETR, whose answer reserves the space for the set after. A set that
 * does not fit asks for a space first (SETR without keys), one more round
 * trip; a size the worker lately would not reserve goes straight to CREATE /
 * PUBLISH (kv.c), asking again every 64th time. The space is sized to the
 * connection's recent sets (ds__space_want) and given back over the anchor
 * when the connection is freed.
 *
 * kv.c (set_in_space), setv.c and buffer.c (create_in_space, publish_space)
 * write into the space; this file keeps its bookkeeping and the SETR
 * answer's trailer. */
#include "client/client_internal.h"

#include "common/error.h"

#include <string.h>

uint64_t ds__round_up64(uint64_t n)
{
    return (n + 63) & ~(uint64_t)63;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void ds__space_begin(ds_conn_t *conn, uint64_t handle, uint64_t want, uint8_t flags)
{
    ds__conn_begin(conn);
    ds__wbuf_u64(&conn->w, handle);
    ds__wbuf_u64(&conn->w, want);
    ds__wbuf_u8(&conn->w, flags);
}

ds_status_t ds__space_trailer(ds_conn_t *conn, bool pin, uint64_t t[4])
{
    ds_sess_t *s = conn->sess;
    size_t len = pin ? 32 : 24;
    memset(t, 0, 4 * sizeof(*t));
    if (conn->state != DS_CONN_OK) return DS_K_OK;
    if (conn->r.len - conn->r.pos < len) return ds__conn_protocol_error(conn, "set_reserved");
    conn->r.len -= len;
    const uint8_t *p = conn->r.p + conn->r.len;
    for (size_t i = 0; i < len / 8; i++)
        t[i] = get_u64(p + 8 * i);
    if (t[0] != 0 && (t[1] > s->size || t[2] > s->size - t[1] || t[1] % 64 != 0))
        return ds__conn_protocol_error(conn, "set_reserved");
    return DS_K_OK;
}

ds_status_t ds__space_take(ds_conn_t *conn)
{
    uint64_t t[4];
    ds_space_t *sp = &conn->space;
    sp->handle = sp->off = sp->len = 0;
    ds_status_t st = ds__space_trailer(conn, false, t);
    sp->handle = t[0];
    sp->off = t[1];
    sp->len = t[0] ? t[2] : 0;
    return st;
}

void ds__space_replace(ds_conn_t *conn, const uint64_t t[4])
{
    ds_space_t *sp = &conn->space;
    if (t[0] == 0) return;
    if (sp->handle) ds__sess_release(conn->sess, &sp->handle, 1);
    sp->handle = t[0];
    sp->off = t[1];
    sp->len = t[2];
}

uint64_t ds__space_hand_over(ds_conn_t *conn)
{
    ds_space_t *sp = &conn->space;
    uint64_t h = sp->handle;
    sp->handle = sp->off = sp->len = 0;
    return h;
}

void ds__space_drop(ds_conn_t *conn)
{
    if (conn->sess && conn->space.handle) ds__sess_release(conn->sess, &conn->space.handle, 1);
    conn->space.handle = conn->space.off = conn->space.len = 0;
}

/* The space to ask for: the largest of the recent sets (two windows of
 * DS_CLIENT_SPACE_WINDOW sets), at most DS_CLIENT_SPACE_KEEP, never less
 * than need. Not the largest space this connection ever had: after one big
 * set, a space that size would make the worker carve every later smaller
 * value from a fresh part of a new space, out of every cache, and a small
 * set would pay for cold memory. Sized to the recent sets, the space comes
 * back to the range the version just replaced, still in the cache. */
uint64_t ds__space_want(ds_conn_t *conn, uint64_t need)
{
    ds_space_t *sp = &conn->space;
    if (need > sp->win[0]) sp->win[0] = need;
    if (++sp->sets % DS_CLIENT_SPACE_WINDOW == 0) {
        sp->win[1] = sp->win[0];
        sp->win[0] = 0;
    }
    uint64_t want = sp->win[0] > sp->win[1] ? sp->win[0] : sp->win[1];
    if (want > DS_CLIENT_SPACE_KEEP) want = DS_CLIENT_SPACE_KEEP;
    return want < need ? need : want;
}

/* Asks the worker for a space of at least want bytes (SETR without keys).
 * A transport or protocol failure's status (the connection is then broken),
 * else DS_K_OK: whether the worker granted it, conn->space.len says. */
ds_status_t ds__space_get(ds_conn_t *conn, uint64_t want, uint64_t deadline)
{
    ds__space_begin(conn, conn->space.handle, want, 0);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    ds__set_param_put(conn, &p);
    ds__wbuf_u32(&conn->w, 0);
    ds_status_t st = ds__conn_call(conn, DS_OP_SETR, false, deadline);
    ds_status_t ts = ds__space_take(conn);
    if (ts != DS_K_OK) st = ts;
    ds__conn_drain(conn, deadline);
    if (conn->state == DS_CONN_OK) {
        ds__clear_error(); /* a refusal: the trailer says what we hold */
        return DS_K_OK;
    }
    return st;
}

int ds__space_reserve(ds_conn_t *conn, uint64_t total, uint64_t deadline, ds_status_t *st)
{
    ds_space_t *sp = &conn->space;
    *st = DS_K_OK;
    if (sp->len >= total) return 1;
    /* A size the worker would not reserve lately: straight to CREATE. */
    if (sp->refused && total >= sp->refused && ++sp->refusals % 64 != 0) return 0;
    if ((*st = ds__space_get(conn, total, deadline)) != DS_K_OK) return -1;
    sp->refused = sp->len < total ? total : 0;
    return sp->len >= total;
}
