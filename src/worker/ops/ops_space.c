/* SETR: a local set in one round trip (layout in common/wire.h).
 *
 * A local session holds reservations ("spaces"): keyless arena ranges
 * (store.h, DS_OBJ_RESERVED) in its handle table, one per client connection
 * that asked. The client copies values into its space and sends one SETR
 * naming the ranges; every answer carries the space it holds next, under a
 * new handle. Nothing the client says is trusted: the handle must be a live
 * space of this session (a pin, a CREATE buffer, a released or replayed
 * handle, another session's: refused), and every range must lie in that
 * space, aligned, in ascending order, before anything is carved; a refused
 * request publishes nothing and changes no object. A space is only ever
 * written by its own client: the worker never hands it to anybody else and
 * never evicts it, and it goes back to the allocator when the session ends
 * (a client that dies) or the client releases it.
 *
 * Budget: one space is at most a quarter of the arena's object part and all
 * spaces together at most half of it; a grant beyond that is refused (the
 * client then falls back to CREATE / PUBLISH). A grant may evict volatile
 * objects exactly as the set it prepares would. */
#include "worker/ops/ops_int.h"

#include "common/keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Spaces one session may hold: the client's pool (64) with room. */
#define DS_SPACES_PER_SESSION 128u
/* A space at most this large is kept for smaller sets too. */
#define DS_SPACE_KEEP (8u << 20)
/* Each entry: key (4-byte length + at least 1 byte), offset, length. */
#define ENTRY_MIN 21u
/* SETRs of at most this many keys keep their arrays on the stack. */
#define SETR_SMALL 8u

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The answer's trailer: the space the session holds after this request,
 * and with DS_SETR_PIN the pin's handle. */
static void set_trailer(ds_req_t *r, uint64_t handle, uint64_t off, uint64_t len, bool with_pin,
                        uint64_t pin)
{
    uint8_t t[32];
    put_u64(t, handle);
    put_u64(t + 8, off);
    put_u64(t + 16, len);
    put_u64(t + 24, pin);
    ds__req_set_tail(r, t, with_pin ? 32 : 24);
}

/* The space's handle is given a new one and reported; the old one is dead. */
static void report_space(ds_server_t *srv, ds_req_t *r, uint64_t *handle, bool with_pin,
                         uint64_t pin)
{
    ds_slot_t *sl = *handle ? ds__session_slot(r->session, *handle) : NULL;
    if (sl == NULL) {
        set_trailer(r, 0, 0, 0, with_pin, pin);
        return;
    }
    *handle = ds__session_rehandle(r->session, *handle);
    uint64_t off, len;
    ds__store_space(srv->store, sl->obj, &off, &len);
    set_trailer(r, *handle, off, len, with_pin, pin);
}

static void drop_space(ds_server_t *srv, ds_req_t *r, uint64_t *handle)
{
    if (*handle) ds__session_release(srv->store, r->session, *handle);
    *handle = 0;
}

/* Makes the session's space (handle *handle, 0 = none) hold at least want
 * bytes for the client's next set, within the budget; else drops it. */
static void replenish(ds_server_t *srv, ds_req_t *r, uint64_t *handle, uint64_t want)
{
    if (want == 0) {
        drop_space(srv, r, handle);
        return;
    }
    uint64_t grant = (want + DS_ALLOC_ALIGN - 1) / DS_ALLOC_ALIGN * DS_ALLOC_ALIGN;
    ds_slot_t *sl = *handle ? ds__session_slot(r->session, *handle) : NULL;
    uint64_t off = 0, len = 0;
    if (sl) ds__store_space(srv->store, sl->obj, &off, &len);
    /* Enough left, and not much more than asked (or not much at all): keep it. */
    if (len >= grant && (len / 4 <= grant || len <= DS_SPACE_KEEP)) return;
    uint64_t used, total;
    ds__store_usage(srv->store, &used, &total);
    uint64_t others = ds__store_reserved(srv->store) - len;
    char msg[256];
    if (want > total / 4 || grant > total / 4 || others + grant > total / 2) {
        drop_space(srv, r, handle);
        return;
    }
    if (sl) {
        if (ds__store_refill_space(srv->store, sl->obj, grant, msg, sizeof(msg)) != DS_K_OK)
            drop_space(srv, r, handle);
        return;
    }
    if (r->session->spaces >= DS_SPACES_PER_SESSION) return;
    ds_obj_t *o;
    if (ds__store_reserve_space(srv->store, grant, &o, msg, sizeof(msg)) != DS_K_OK) return;
    *handle = ds__session_add(r->session, o, 0);
    if (*handle == 0)
        ds__store_unref(srv->store, o);
    else
        r->session->spaces++;
}

/* Once the values are published (an overwrite has freed the version it
 * replaced, which a new space can then reuse while it is still in the
 * cache): the space for the next set, in the answer's trailer. arg: the
 * space's handle, the size wanted. */
static void after_publish(ds_server_t *srv, ds_req_t *r, const uint64_t arg[3],
                          ds_obj_t *const *objs, uint32_t n)
{
    uint64_t handle = arg[0], pin = 0;
    bool with_pin = arg[2] & DS_SETR_PIN;
    if (r->session == NULL) return; /* the connection is gone: so is the answer */
    if (with_pin && (arg[2] & DS_SETR_SHM_PIN) && n == 1 && objs[0]) {
        /* The client's pin table holds the range: it is checked before the
         * range is freed, as an indexed value's (store.c). */
        ds__store_mark_shm_pinned(objs[0]);
    } else if (with_pin && n == 1 && objs[0]) {
        /* The writer's view of its value stays valid, as a CREATE buffer's. */
        ds__store_ref(objs[0]);
        pin = ds__session_add(r->session, objs[0], 0);
        if (pin == 0) ds__store_unref(srv->store, objs[0]);
    }
    replenish(srv, r, &handle, arg[1]);
    report_space(srv, r, &handle, with_pin, pin);
}

/* A refused request: the message, and the space as it stands. */
static void refuse(ds_server_t *srv, ds_req_t *r, uint64_t handle, bool with_pin, ds_status_t st,
                   const char *msg)
{
    report_space(srv, r, &handle, with_pin, 0);
    ds__req_error(r, st, "%s", msg);
}

typedef struct {
    const char *key;
    uint32_t keylen;
    uint64_t off, len;
} entry_t;

/* Frees a SETR's arrays unless they are the stack ones (e == e_small). */
static void free_unless(entry_t *e, const entry_t *e_small, ds_obj_t **pend, uint32_t *status)
{
    if (e == e_small) return;
    free(e);
    free(pend);
    free(status);
}

/* Every range inside the space, aligned, ascending: 0, or -1 with a message. */
static int check_ranges(ds_server_t *srv, const ds_obj_t *space, const entry_t *e, uint32_t n,
                        char *msg, size_t cap)
{
    uint64_t start = 0, len = 0;
    if (space) ds__store_space(srv->store, space, &start, &len);
    uint64_t cursor = start, end = start + len;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t need = (e[i].len + DS_ALLOC_ALIGN - 1) / DS_ALLOC_ALIGN * DS_ALLOC_ALIGN;
        const char *why = NULL;
        if (e[i].len == 0)
            why = "is empty";
        else if (e[i].off < cursor || e[i].off > end)
            why = i ? "overlaps the range before it or lies outside the reservation"
                    : "lies outside the reservation";
        else if ((e[i].off - start) % DS_ALLOC_ALIGN != 0)
            why = "is not 64-byte aligned";
        else if (e[i].len > end - e[i].off || need > end - e[i].off)
            why = "runs past the end of the reservation";
        if (why) {
            snprintf(msg, cap,
                     "SETR range [%" PRIu64 ", +%" PRIu64 ") for key '%.*s' %s [%" PRIu64
                     ", +%" PRIu64 ")",
                     e[i].off, e[i].len, (int)(e[i].keylen > 64 ? 64 : e[i].keylen), e[i].key, why,
                     start, len);
            return -1;
        }
        cursor = e[i].off + need;
    }
    return 0;
}

void ds__ops_setr(ds_server_t *srv, ds_req_t *r)
{
    if (r->session == NULL || !r->session->shm) {
        ds__req_error(r, DS_K_NOT_SUPPORTED, "SETR needs a local client that mapped the arena");
        return;
    }
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint64_t handle = ds__rbuf_u64(&rb), want = ds__rbuf_u64(&rb);
    uint8_t flags = ds__rbuf_u8(&rb);
    bool pin = !rb.err && (flags & DS_SETR_PIN);
    uint8_t mode, existence;
    uint32_t ttl, n;
    char msg[512];
    ds_slot_t *sl = handle ? ds__session_slot(r->session, handle) : NULL;
    if (handle && (sl == NULL || sl->obj->state != DS_OBJ_RESERVED)) {
        snprintf(msg, sizeof(msg),
                 "SETR reservation handle %" PRIx64
                 " is not a live reservation of this session (released, already used, or "
                 "not one)",
                 handle);
        refuse(srv, r, 0, pin, DS_K_INVALID, msg);
        return;
    }
    if (flags & ~(DS_SETR_PIN | DS_SETR_SHM_PIN)) {
        snprintf(msg, sizeof(msg), "malformed SETR: unknown flags 0x%x", flags);
        refuse(srv, r, handle, pin, DS_K_INVALID, msg);
        return;
    }
    if (ds__ops_write_head(&rb, "SETR", true, ENTRY_MIN, &mode, &ttl, &existence, &n, msg,
                           sizeof(msg)) != 0) {
        refuse(srv, r, handle, pin, DS_K_INVALID, msg);
        return;
    }
    if (n > 0 && r->data_len != 0) {
        refuse(srv, r, handle, pin, DS_K_INVALID, "malformed SETR: the values belong in the arena");
        return;
    }
    /* A few keys (the usual one) on the stack, more on the heap. */
    entry_t e_small[SETR_SMALL];
    ds_obj_t *pend_small[SETR_SMALL];
    uint32_t status_small[SETR_SMALL];
    bool small = n <= SETR_SMALL;
    entry_t *e = small ? e_small : malloc(n * sizeof(*e));
    ds_obj_t **pend = small ? pend_small : malloc(n * sizeof(*pend));
    uint32_t *status = small ? status_small : malloc(n * sizeof(*status));
    if (e == NULL || pend == NULL || status == NULL) {
        free_unless(e, e_small, pend, status);
        refuse(srv, r, handle, pin, DS_K_OUT_OF_MEMORY, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        e[i].keylen = ds__rbuf_str(&rb, &e[i].key);
        e[i].off = ds__rbuf_u64(&rb);
        e[i].len = ds__rbuf_u64(&rb);
    }
    int bad = 0;
    if (!ds__rbuf_done(&rb)) {
        snprintf(msg, sizeof(msg), "malformed SETR: %u entries do not fill the metadata", n);
        bad = 1;
    } else if (pin && n != 1) {
        snprintf(msg, sizeof(msg), "SETR with a pin names one key, not %u", n);
        bad = 1;
    } else if (n > 0 && sl == NULL) {
        snprintf(msg, sizeof(msg), "SETR of %u keys names no reservation", n);
        bad = 1;
    } else if (check_ranges(srv, sl ? sl->obj : NULL, e, n, msg, sizeof(msg)) != 0) {
        bad = 1;
    }
    if (bad) {
        free_unless(e, e_small, pend, status);
        refuse(srv, r, handle, pin, DS_K_INVALID, msg);
        return;
    }
    char first[512] = "";
    for (uint32_t i = 0; i < n; i++) {
        ds_status_t st;
        pend[i] = NULL;
        if (ds__key_check(e[i].key, e[i].keylen, msg, sizeof(msg)) != 0)
            st = DS_K_INVALID;
        else
            st = ds__store_carve(srv->store, sl->obj, e[i].off, e[i].len, e[i].key, e[i].keylen,
                                 (ds_write_mode_t)mode, ttl, &pend[i], msg, sizeof(msg));
        status[i] = (uint32_t)st;
        if (st != DS_K_OK && first[0] == '\0') snprintf(first, sizeof(first), "%s", msg);
    }
    uint64_t arg[3] = {handle, want, flags};
    if (n == 0) {
        after_publish(srv, r, arg, NULL, 0);
        ds__ops_reply_statuses(r, NULL, 0, "");
    } else {
        ds__ops_publish_written(srv, r, pend, status, n, existence, first, after_publish, arg);
    }
    free_unless(e, e_small, pend, status);
}
