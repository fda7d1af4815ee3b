/* Frame header and metadata codec of the wire protocol (see wire.h). Pure
 * functions over memory: no I/O, so it can be fuzzed in isolation. */
#include "common/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ds__opcode_name(unsigned op)
{
    switch (op) {
#define DS__OP_NAME(name, num, text)                                                               \
    case num:                                                                                      \
        return text;
        DS_OPCODE_MAP(DS__OP_NAME)
#undef DS__OP_NAME
    default:
        return NULL;
    }
}

/* DS_OP__MAX is the last opcode plus one, so the map must stay in ascending
 * order: arrays indexed by opcode are DS_OP__MAX long. */
#define DS__OP_ORDER(name, num, text)                                                              \
    _Static_assert((num) < DS_OP__MAX, "DS_OPCODE_MAP out of order at " #name);
DS_OPCODE_MAP(DS__OP_ORDER)
#undef DS__OP_ORDER

bool ds__opcode_peer_only(unsigned op)
{
    return op == DS_OP_LOCATE || op == DS_OP_META_PUT || op == DS_OP_META_DEL || op == DS_OP_DROP ||
           op == DS_OP_UCX_PULL || op == DS_OP_OWNED || op == DS_OP_LATCH_WAIT ||
           op == DS_OP_LATCH_HINT || op == DS_OP_HOLDER_END ||
           (op >= DS_OP_SEAL_OWNED && op <= DS_OP_OWNER_REBUILD) || op == DS_OP_SC_PEER_REG ||
           op == DS_OP_SC_PEER_PUSH || op == DS_OP_SC_PEER_QUERY || op == DS_OP_SC_PEER_DELETE ||
           op == DS_OP_SC_PEER_DROP || (op >= DS_OP_REPL_PUT && op <= DS_OP_HOT_DROP) ||
           op == DS_OP_MIGRATE || op == DS_OP_META_MOVE || op == DS_OP_USAGE ||
           op == DS_OP_REBUILD_DONE;
}

/* Little-endian fields. On a little-endian host they are plain unaligned
 * loads and stores (memcpy); the byte loops are what a big-endian host runs.
 * Every request and answer goes through these, so they matter. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof(v));
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}
#else
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
#endif

void ds__wire_header_encode(const ds_wire_header_t *h, uint8_t out[DS_WIRE_HEADER_LEN])
{
    put32(out, h->magic);
    out[4] = h->version;
    out[5] = h->flags;
    out[6] = (uint8_t)h->opcode;
    out[7] = (uint8_t)(h->opcode >> 8);
    put32(out + 8, h->status);
    put32(out + 12, h->meta_len);
    put64(out + 16, h->req_id);
    put64(out + 24, h->data_len);
}

int ds__wire_header_decode(const uint8_t in[DS_WIRE_HEADER_LEN], uint64_t max_data,
                           ds_wire_header_t *h, char *err, size_t err_cap)
{
    h->magic = get32(in);
    h->version = in[4];
    h->flags = in[5];
    h->opcode = (uint16_t)(in[6] | (in[7] << 8));
    h->status = get32(in + 8);
    h->meta_len = get32(in + 12);
    h->req_id = get64(in + 16);
    h->data_len = get64(in + 24);
    if (h->magic != DS_WIRE_MAGIC) {
        snprintf(err, err_cap, "bad frame magic 0x%08x (expected 0x%08x)", h->magic, DS_WIRE_MAGIC);
        return -1;
    }
    if (h->version != DS_WIRE_VERSION) {
        snprintf(err, err_cap, "unsupported protocol version %u (expected %u)", h->version,
                 DS_WIRE_VERSION);
        return -1;
    }
    if (ds__opcode_name(h->opcode) == NULL) {
        snprintf(err, err_cap, "unknown opcode %u", h->opcode);
        return -1;
    }
    if (h->meta_len > DS_WIRE_MAX_META) {
        snprintf(err, err_cap, "metadata of %u bytes exceeds the limit of %u", h->meta_len,
                 DS_WIRE_MAX_META);
        return -1;
    }
    if (h->data_len > max_data) {
        snprintf(err, err_cap, "data of %llu bytes exceeds the frame limit of %llu",
                 (unsigned long long)h->data_len, (unsigned long long)max_data);
        return -1;
    }
    return 0;
}

void ds__wbuf_init(ds_wbuf_t *w)
{
    memset(w, 0, sizeof(*w));
}

void ds__wbuf_init_on(ds_wbuf_t *w, void *storage, size_t cap)
{
    memset(w, 0, sizeof(*w));
    w->buf = storage;
    w->cap = cap;
    w->borrowed = true;
}

void ds__wbuf_free(ds_wbuf_t *w)
{
    if (!w->borrowed) free(w->buf);
    memset(w, 0, sizeof(*w));
}

void ds__wbuf_reset(ds_wbuf_t *w)
{
    w->len = 0;
    w->oom = false;
}

uint8_t *ds__wbuf_reserve(ds_wbuf_t *w, size_t n)
{
    if (w->oom) return NULL;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *nb = w->borrowed ? malloc(cap) : realloc(w->buf, cap);
        if (nb == NULL) {
            w->oom = true;
            return NULL;
        }
        if (w->borrowed && w->len) memcpy(nb, w->buf, w->len);
        w->borrowed = false;
        w->buf = nb;
        w->cap = cap;
    }
    uint8_t *p = w->buf + w->len;
    w->len += n;
    return p;
}

void ds__wbuf_u8(ds_wbuf_t *w, uint8_t v)
{
    uint8_t *p = ds__wbuf_reserve(w, 1);
    if (p) *p = v;
}

void ds__wbuf_u32(ds_wbuf_t *w, uint32_t v)
{
    uint8_t *p = ds__wbuf_reserve(w, 4);
    if (p) put32(p, v);
}

void ds__wbuf_i32(ds_wbuf_t *w, int32_t v)
{
    ds__wbuf_u32(w, (uint32_t)v);
}

void ds__wbuf_u64(ds_wbuf_t *w, uint64_t v)
{
    uint8_t *p = ds__wbuf_reserve(w, 8);
    if (p) put64(p, v);
}

void ds__wbuf_bytes(ds_wbuf_t *w, const void *src, size_t n)
{
    uint8_t *p = ds__wbuf_reserve(w, n);
    if (p && n) memcpy(p, src, n);
}

void ds__wbuf_str(ds_wbuf_t *w, const void *src, size_t n)
{
    ds__wbuf_u32(w, (uint32_t)n);
    ds__wbuf_bytes(w, src, n);
}

void ds__wbuf_cstr(ds_wbuf_t *w, const char *s)
{
    ds__wbuf_str(w, s ? s : "", s ? strlen(s) : 0);
}

void ds__rbuf_init(ds_rbuf_t *r, const void *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->pos = 0;
    r->err = false;
}

static const uint8_t *take(ds_rbuf_t *r, size_t n)
{
    if (r->err || r->len - r->pos < n) {
        r->err = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

uint8_t ds__rbuf_u8(ds_rbuf_t *r)
{
    const uint8_t *p = take(r, 1);
    return p ? *p : 0;
}

uint32_t ds__rbuf_u32(ds_rbuf_t *r)
{
    const uint8_t *p = take(r, 4);
    return p ? get32(p) : 0;
}

int32_t ds__rbuf_i32(ds_rbuf_t *r)
{
    return (int32_t)ds__rbuf_u32(r);
}

uint64_t ds__rbuf_u64(ds_rbuf_t *r)
{
    const uint8_t *p = take(r, 8);
    return p ? get64(p) : 0;
}

uint32_t ds__rbuf_str(ds_rbuf_t *r, const char **out)
{
    uint32_t n = ds__rbuf_u32(r);
    const uint8_t *p = take(r, n);
    if (p == NULL) {
        *out = "";
        return 0;
    }
    *out = (const char *)p;
    return n;
}

uint32_t ds__rbuf_count(ds_rbuf_t *r, uint32_t max, size_t min_each)
{
    uint32_t n = ds__rbuf_u32(r);
    if (r->err) return 0;
    if (n > max || (min_each && (r->len - r->pos) / min_each < n)) {
        r->err = true;
        return 0;
    }
    return n;
}

bool ds__rbuf_done(const ds_rbuf_t *r)
{
    return !r->err && r->pos == r->len;
}
