/* Per-opcode message layouts for the fuzz targets (see layouts.h). Every
 * field is read with the ds__rbuf reader, as the worker and client read it,
 * and written back with the matching ds__wbuf writer. Counts are read with
 * ds__rbuf_count and the smallest size an element can have, as the worker
 * guards its allocations. */
#include "layouts.h"

#include "common/keys.h"
#include "ds/kv_client.h"

#include <string.h>

typedef struct {
    ds_rbuf_t r;
    ds_wbuf_t *w;
    fz_parse_t *out;
} pipe_t;

static uint8_t u8(pipe_t *p)
{
    uint8_t v = ds__rbuf_u8(&p->r);
    if (p->w && !p->r.err) ds__wbuf_u8(p->w, v);
    return v;
}

static uint32_t u32(pipe_t *p)
{
    uint32_t v = ds__rbuf_u32(&p->r);
    if (p->w && !p->r.err) ds__wbuf_u32(p->w, v);
    return v;
}

static int32_t i32(pipe_t *p)
{
    int32_t v = ds__rbuf_i32(&p->r);
    if (p->w && !p->r.err) ds__wbuf_i32(p->w, v);
    return v;
}

static uint64_t u64(pipe_t *p)
{
    uint64_t v = ds__rbuf_u64(&p->r);
    if (p->w && !p->r.err) ds__wbuf_u64(p->w, v);
    return v;
}

static void str(pipe_t *p)
{
    const char *s;
    uint32_t n = ds__rbuf_str(&p->r, &s);
    if (p->w && !p->r.err) ds__wbuf_str(p->w, s, n);
}

/* A key: a str the worker then checks against the key rules. */
static void key(pipe_t *p)
{
    const char *s;
    uint32_t n = ds__rbuf_str(&p->r, &s);
    if (p->r.err) return;
    char msg[256];
    (void)ds__key_check(s, n, msg, sizeof(msg));
    if (p->w) ds__wbuf_str(p->w, s, n);
}

static uint32_t count(pipe_t *p, uint32_t max, size_t min_each)
{
    uint32_t n = ds__rbuf_count(&p->r, max, min_each);
    if (p->w && !p->r.err) ds__wbuf_u32(p->w, n);
    p->out->nkeys = n;
    return n;
}

static void keys(pipe_t *p, uint32_t max)
{
    uint32_t n = count(p, max, 4);
    for (uint32_t i = 0; i < n && !p->r.err; i++)
        key(p);
}

static void statuses(pipe_t *p)
{
    uint32_t n = count(p, UINT32_MAX, 4);
    for (uint32_t i = 0; i < n && !p->r.err; i++)
        (void)u32(p);
}

static void finish(pipe_t *p)
{
    p->out->complete = ds__rbuf_done(&p->r);
}

void fz_parse_request(uint16_t op, const uint8_t *meta, size_t len, ds_wbuf_t *echo,
                      fz_parse_t *out)
{
    memset(out, 0, sizeof(*out));
    pipe_t p = {.w = echo, .out = out};
    ds__rbuf_init(&p.r, meta, len);
    switch (op) {
    case DS_OP_HELLO:
        (void)u32(&p);
        (void)u64(&p);
        (void)u8(&p);
        str(&p);
        /* the session key, from clients that know about session keys */
        if (p.r.pos < p.r.len) str(&p);
        /* discovery: the TCP session to prove and the challenge */
        if (p.r.pos < p.r.len) {
            (void)u64(&p);
            str(&p);
        }
        break;
    case DS_OP_SET:
    case DS_OP_CREATE: {
        (void)u8(&p);
        (void)u32(&p);
        (void)u8(&p);
        uint32_t n = count(&p, DS_MAX_BATCH, 12);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            key(&p);
            uint64_t l = u64(&p);
            /* Saturate: a sum that wraps must not look like a small frame. */
            out->set_data = out->set_data + l < out->set_data ? UINT64_MAX : out->set_data + l;
        }
        break;
    }
    case DS_OP_GET:
        (void)i32(&p);
        (void)u8(&p);
        keys(&p, DS_MAX_BATCH);
        break;
    case DS_OP_SETR: {
        (void)u64(&p); /* the space's handle */
        (void)u64(&p); /* bytes wanted next */
        (void)u8(&p);  /* flags */
        (void)u8(&p);
        (void)u32(&p);
        (void)u8(&p);
        uint32_t n = count(&p, DS_MAX_BATCH, 21);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            key(&p);
            (void)u64(&p);
            (void)u64(&p);
        }
        break;
    }
    case DS_OP_PUBLISH:
    case DS_OP_RELEASE: {
        uint32_t n = count(&p, 4 * DS_MAX_BATCH, 8);
        for (uint32_t i = 0; i < n && !p.r.err; i++)
            (void)u64(&p);
        break;
    }
    case DS_OP_DEL:
    case DS_OP_QSIZE:
        keys(&p, DS_MAX_BATCH);
        break;
    case DS_OP_EXIST:
        keys(&p, DS_MAX_EXIST_BATCH);
        break;
    case DS_OP_EXPIRE:
        (void)u32(&p);
        keys(&p, DS_MAX_BATCH);
        break;
    case DS_OP_GENKEY:
        str(&p);
        break;
    case DS_OP_HEALTH:
    case DS_OP_STATS:
    case DS_OP_SHUTDOWN:
    case DS_OP_LANE:
        break;
    case DS_OP_LOCATE:
        (void)i32(&p);
        (void)u32(&p);
        keys(&p, DS_MAX_BATCH);
        break;
    case DS_OP_META_PUT: {
        str(&p);
        (void)u8(&p); /* only_if_unknown */
        uint32_t n = count(&p, DS_MAX_BATCH, 20);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            key(&p);
            (void)u64(&p);
            (void)u64(&p);
        }
        break;
    }
    case DS_OP_META_DEL: {
        str(&p);
        (void)u8(&p);
        uint32_t n = count(&p, DS_MAX_BATCH, 12);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            key(&p);
            (void)u64(&p);
        }
        break;
    }
    case DS_OP_DROP: {
        uint32_t n = count(&p, DS_MAX_BATCH, 12);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            key(&p);
            (void)u64(&p);
        }
        break;
    }
    case DS_OP_READ: {
        uint32_t n = count(&p, DS_MAX_BATCH, 21);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            key(&p);
            (void)u64(&p);
            (void)u64(&p);
        }
        break;
    }
    case DS_OP_RLATCH:
        (void)u32(&p);
        keys(&p, DS_MAX_BATCH);
        break;
    case DS_OP_UNRLATCH:
        keys(&p, DS_MAX_BATCH);
        break;
    case DS_OP_GREF:
        (void)i32(&p);
        keys(&p, DS_MAX_BATCH);
        break;
    case DS_OP_PEER_AUTH: {
        uint8_t step = u8(&p);
        str(&p); /* from */
        str(&p); /* nonce_a */
        if (step == 2) {
            str(&p); /* nonce_b */
            str(&p); /* proof_a */
        }
        break;
    }
    default:
        break;
    }
    finish(&p);
}

bool fz_response_is_bare(uint16_t op)
{
    return op == DS_OP_RELEASE || op == DS_OP_HEALTH || op == DS_OP_SHUTDOWN ||
           op == DS_OP_PEER_AUTH; /* step 2 */
}

void fz_parse_response(uint16_t op, const uint8_t *meta, size_t len, ds_wbuf_t *echo,
                       fz_parse_t *out)
{
    memset(out, 0, sizeof(*out));
    pipe_t p = {.w = echo, .out = out};
    ds__rbuf_init(&p.r, meta, len);
    str(&p);
    if (ds__rbuf_done(&p.r)) out->error_only = true;
    switch (op) {
    case DS_OP_HELLO:
        (void)u64(&p);
        (void)u64(&p);
        (void)u32(&p);
        str(&p);
        (void)u32(&p);
        /* the arena index (common/shm_index.h), when the worker has one */
        if (p.r.pos < p.r.len) {
            (void)u64(&p);
            (void)u32(&p);
            (void)u32(&p);
        }
        /* the session key, from workers that hand keys out */
        if (p.r.pos < p.r.len) str(&p);
        /* discovery: the Unix socket's path and the proof */
        if (p.r.pos < p.r.len) str(&p);
        if (p.r.pos < p.r.len) str(&p);
        /* the features the session may use */
        if (p.r.pos < p.r.len) (void)u32(&p);
        /* the session's table of readers' shared pins */
        if (p.r.pos < p.r.len) (void)u64(&p);
        break;
    case DS_OP_SETR:
        /* statuses unless refused, then always the space (handle, offset,
         * length) and, when the request asked for one, a pin. An answer of
         * one status without a pin has the length of a refusal with one: it
         * parses either way. */
        if (p.r.len - p.r.pos != 24 && p.r.len - p.r.pos != 32) statuses(&p);
        (void)u64(&p);
        (void)u64(&p);
        (void)u64(&p);
        if (p.r.len - p.r.pos == 8) (void)u64(&p);
        break;
    case DS_OP_SET:
    case DS_OP_PUBLISH:
    case DS_OP_DEL:
    case DS_OP_EXPIRE:
    case DS_OP_META_PUT:
    case DS_OP_META_DEL:
    case DS_OP_DROP:
    case DS_OP_RLATCH:
    case DS_OP_UNRLATCH:
    case DS_OP_WLATCH:
    case DS_OP_UNWLATCH:
    case DS_OP_SEAL:
        statuses(&p);
        break;
    case DS_OP_READ: {
        uint32_t n = count(&p, UINT32_MAX, 13);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            (void)u32(&p);
            uint8_t kind = u8(&p);
            uint64_t size = u64(&p);
            if (kind == DS_VAL_SHM) {
                (void)u64(&p);
                (void)u64(&p);
            } else if (kind == DS_VAL_INLINE) {
                out->inline_data = out->inline_data + size < out->inline_data
                                       ? UINT64_MAX
                                       : out->inline_data + size;
            } else if (kind != DS_VAL_MISSING) {
                p.r.err = true;
            }
        }
        break;
    }
    case DS_OP_GREF: {
        uint32_t n = count(&p, UINT32_MAX, 8);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            (void)u32(&p);
            (void)u32(&p);
        }
        break;
    }
    case DS_OP_GET: {
        uint32_t n = count(&p, UINT32_MAX, 9);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            uint8_t kind = u8(&p);
            uint64_t size = u64(&p);
            if (kind == DS_VAL_SHM) {
                (void)u64(&p);
                (void)u64(&p);
            } else if (kind == DS_VAL_INLINE) {
                out->inline_data = out->inline_data + size < out->inline_data
                                       ? UINT64_MAX
                                       : out->inline_data + size;
            } else if (kind != DS_VAL_MISSING) {
                p.r.err = true; /* an unknown kind: the client must reject it */
            }
        }
        break;
    }
    case DS_OP_CREATE: {
        uint32_t n = count(&p, UINT32_MAX, 20);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            (void)u32(&p);
            (void)u64(&p);
            (void)u64(&p);
        }
        break;
    }
    case DS_OP_EXIST: {
        uint32_t n = count(&p, UINT32_MAX, 1);
        for (uint32_t i = 0; i < n && !p.r.err; i++)
            (void)u8(&p);
        break;
    }
    case DS_OP_QSIZE: {
        uint32_t n = count(&p, UINT32_MAX, 12);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            (void)u32(&p);
            (void)u64(&p);
        }
        break;
    }
    case DS_OP_GENKEY:
    case DS_OP_STATS:
        str(&p);
        break;
    case DS_OP_LANE: /* u64 hub_offset, u64 lane_offset, u32 gen */
        (void)u64(&p);
        (void)u64(&p);
        (void)u32(&p);
        break;
    case DS_OP_LOCATE: {
        uint32_t n = count(&p, UINT32_MAX, 25);
        for (uint32_t i = 0; i < n && !p.r.err; i++) {
            (void)u8(&p);
            (void)u64(&p);
            (void)u64(&p);
            str(&p);
            str(&p);
        }
        break;
    }
    case DS_OP_PEER_AUTH: /* step 1: str nonce_b, str proof_b; step 2: nothing */
        if (p.r.pos < p.r.len) {
            str(&p);
            str(&p);
        }
        break;
    default: /* RELEASE, HEALTH, SHUTDOWN: the error string only */
        break;
    }
    finish(&p);
}
