/* The msgpack codec behind omni/serializer.h, on msgpack-c.
 *
 * Encoding runs msgpack-c's packer over a sink that either counts bytes or
 * copies them into a caller's buffer, so omni_value_encode sizes the output
 * exactly, allocates once and copies each tensor's data once.
 *
 * Decoding first scans the input without allocating (every length and count
 * must fit in the bytes left, nesting within OMNI_MAX_DEPTH), because
 * msgpack-c sizes a container's storage from its declared count before reading
 * it; then msgpack-c unpacks it, with strings and bins pointing into the input;
 * then the msgpack objects are converted into one block of omni_value_t nodes,
 * marker maps becoming tensor views of the input's bytes. */
#include "connector/value.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/bigbuf.h"

/* ---- encoding ---- */

typedef struct {
    char *buf;
    size_t cap;
    size_t pos;
    bool counting;
} sink_t;

static int sink_write(void *data, const char *p, size_t len)
{
    sink_t *s = data;
    if (!s->counting) {
        if (len > s->cap - s->pos) return -1;
        memcpy(s->buf + s->pos, p, len);
    }
    s->pos += len;
    return 0;
}

/* Why packing stopped: the sink ran out of room, or the value cannot be
 * encoded (the message is already set). */
typedef enum { PACK_OK, PACK_FULL, PACK_BAD } pack_result_t;

#define PACK(call)                                                                                 \
    do {                                                                                           \
        if ((call) != 0) return PACK_FULL;                                                         \
    } while (0)

static pack_result_t too_big(const char *what, size_t n)
{
    ds__set_error(DS_K_INVALID, "%s of %zu exceeds msgpack's 32-bit length limit", what, n);
    return PACK_BAD;
}

static pack_result_t pack_str(msgpack_packer *pk, const char *s, size_t len)
{
    if (len > UINT32_MAX) return too_big("string length", len);
    PACK(msgpack_pack_str(pk, len));
    PACK(msgpack_pack_str_body(pk, s, len));
    return PACK_OK;
}

/* The marker map up to and including the data bin's header, key order as
 * OmniSerializer writes it. */
static pack_result_t pack_tensor_header(msgpack_packer *pk, omni_type_t type, omni_dtype_t dtype,
                                        const int64_t *shape, size_t ndim, const char *mode,
                                        size_t nbytes)
{
    const char *marker = omni__marker(type);
    if (nbytes > UINT32_MAX) return too_big("tensor data size", nbytes);
    PACK(msgpack_pack_map(pk, 4));
    PACK(pack_str(pk, marker, strlen(marker)));
    PACK(msgpack_pack_true(pk));
    if (type == OMNI_IMAGE) {
        PACK(pack_str(pk, "mode", 4));
        PACK(pack_str(pk, mode, strlen(mode)));
    } else {
        const char *dt = omni__wire_dtype(type, dtype);
        PACK(pack_str(pk, "dtype", 5));
        PACK(pack_str(pk, dt, strlen(dt)));
    }
    PACK(pack_str(pk, "shape", 5));
    PACK(msgpack_pack_array(pk, ndim));
    for (size_t i = 0; i < ndim; i++)
        PACK(msgpack_pack_int64(pk, shape[i]));
    PACK(pack_str(pk, "data", 4));
    PACK(msgpack_pack_bin(pk, nbytes));
    return PACK_OK;
}

static pack_result_t pack_value(msgpack_packer *pk, const omni_value_t *v, int depth)
{
    pack_result_t r;
    switch ((omni_type_t)v->type) {
    case OMNI_NIL:
        PACK(msgpack_pack_nil(pk));
        return PACK_OK;
    case OMNI_BOOL:
        PACK(v->u.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
        return PACK_OK;
    case OMNI_INT:
        PACK((v->flags & OMNI__F_UNSIGNED) ? msgpack_pack_uint64(pk, v->u.u)
                                           : msgpack_pack_int64(pk, v->u.i));
        return PACK_OK;
    case OMNI_FLOAT:
        PACK(msgpack_pack_double(pk, v->u.f));
        return PACK_OK;
    case OMNI_STR:
        return pack_str(pk, v->u.raw.ptr, v->u.raw.len);
    case OMNI_BIN:
        if (v->u.raw.len > UINT32_MAX) return too_big("bin length", v->u.raw.len);
        PACK(msgpack_pack_bin(pk, v->u.raw.len));
        PACK(msgpack_pack_bin_body(pk, v->u.raw.ptr, v->u.raw.len));
        return PACK_OK;
    case OMNI_EXT:
        if (v->u.raw.len > UINT32_MAX) return too_big("ext length", v->u.raw.len);
        PACK(msgpack_pack_ext(pk, v->u.raw.len, v->ext_type));
        PACK(msgpack_pack_ext_body(pk, v->u.raw.ptr, v->u.raw.len));
        return PACK_OK;
    case OMNI_ARRAY:
    case OMNI_MAP: {
        if (depth >= OMNI_MAX_DEPTH) {
            ds__set_error(DS_K_INVALID, "containers nest deeper than %d", OMNI_MAX_DEPTH);
            return PACK_BAD;
        }
        size_t n = v->u.arr.len;
        if (n > UINT32_MAX) return too_big("container size", n);
        PACK(v->type == OMNI_MAP ? msgpack_pack_map(pk, n) : msgpack_pack_array(pk, n));
        size_t items = v->type == OMNI_MAP ? 2 * n : n;
        for (size_t i = 0; i < items; i++) {
            if ((r = pack_value(pk, v->u.arr.items[i], depth + 1)) != PACK_OK) return r;
        }
        return PACK_OK;
    }
    case OMNI_TENSOR:
    case OMNI_NDARRAY:
    case OMNI_IMAGE: {
        /* The marker map and its shape array are two levels. */
        if (depth + 1 >= OMNI_MAX_DEPTH) {
            ds__set_error(DS_K_INVALID, "containers nest deeper than %d", OMNI_MAX_DEPTH);
            return PACK_BAD;
        }
        const omni__tensor_t *t = v->u.t;
        r = pack_tensor_header(pk, (omni_type_t)v->type, (omni_dtype_t)v->dtype, t->shape, t->ndim,
                               t->mode, t->nbytes);
        if (r != PACK_OK) return r;
        PACK(msgpack_pack_bin_body(pk, t->data, t->nbytes));
        return PACK_OK;
    }
    }
    ds__set_error(DS_K_INVALID, "value has unknown type %d", v->type);
    return PACK_BAD;
}

static ds_status_t run_pack(const omni_value_t *v, sink_t *sink)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sink, sink_write);
    pack_result_t r = pack_value(&pk, v, 0);
    if (r == PACK_BAD) return DS_K_INVALID;
    if (r == PACK_FULL) {
        sink_t count = {NULL, 0, 0, true};
        msgpack_packer_init(&pk, &count, sink_write);
        pack_value(&pk, v, 0);
        return ds__set_error(DS_K_INVALID, "buffer of %zu bytes is too small: the value needs %zu",
                             sink->cap, count.pos);
    }
    return DS_K_OK;
}

ds_status_t omni_value_encoded_size(const omni_value_t *v, size_t *size)
{
    if (v == NULL || size == NULL)
        return ds__set_error(DS_K_INVALID, "omni_value_encoded_size: NULL argument");
    sink_t sink = {NULL, 0, 0, true};
    ds_status_t st = run_pack(v, &sink);
    if (st == DS_K_OK) *size = sink.pos;
    return st;
}

ds_status_t omni_value_encode_to(const omni_value_t *v, void *buf, size_t cap, size_t *written)
{
    if (v == NULL || (buf == NULL && cap > 0))
        return ds__set_error(DS_K_INVALID, "omni_value_encode_to: NULL argument");
    sink_t sink = {buf, cap, 0, false};
    ds_status_t st = run_pack(v, &sink);
    if (st == DS_K_OK && written != NULL) *written = sink.pos;
    return st;
}

ds_status_t omni_value_encode(const omni_value_t *v, void **buf, size_t *len)
{
    if (buf == NULL || len == NULL)
        return ds__set_error(DS_K_INVALID, "omni_value_encode: NULL argument");
    *buf = NULL;
    size_t size;
    ds_status_t st = omni_value_encoded_size(v, &size);
    if (st != DS_K_OK) return st;
    char *p = ds__bigbuf_alloc(size);
    if (p == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for %zu encoded bytes", size);
    st = omni_value_encode_to(v, p, size, len);
    if (st != DS_K_OK) {
        ds__bigbuf_free(p);
        return st;
    }
    *buf = p;
    return DS_K_OK;
}

static ds_status_t header_run(omni_type_t type, omni_dtype_t dtype, const int64_t *shape,
                              size_t ndim, const char *mode, sink_t *sink)
{
    size_t nbytes;
    ds_status_t st = omni__tensor_nbytes(type, dtype, shape, ndim, mode, NULL, &nbytes);
    if (st != DS_K_OK) return st;
    if (type == OMNI_IMAGE) dtype = OMNI_DTYPE_UINT8;
    msgpack_packer pk;
    msgpack_packer_init(&pk, sink, sink_write);
    pack_result_t r = pack_tensor_header(&pk, type, dtype, shape, ndim, mode, nbytes);
    if (r == PACK_BAD) return DS_K_INVALID;
    if (r == PACK_FULL)
        return ds__set_error(DS_K_INVALID, "buffer of %zu bytes is too small for the header",
                             sink->cap);
    return DS_K_OK;
}

ds_status_t omni_tensor_header_size(omni_type_t type, omni_dtype_t dtype, const int64_t *shape,
                                    size_t ndim, const char *mode, size_t *header_len)
{
    if (header_len == NULL)
        return ds__set_error(DS_K_INVALID, "omni_tensor_header_size: NULL argument");
    sink_t sink = {NULL, 0, 0, true};
    ds_status_t st = header_run(type, dtype, shape, ndim, mode, &sink);
    if (st == DS_K_OK) *header_len = sink.pos;
    return st;
}

ds_status_t omni_tensor_encode_header(omni_type_t type, omni_dtype_t dtype, const int64_t *shape,
                                      size_t ndim, const char *mode, void *buf, size_t cap,
                                      size_t *header_len)
{
    if (buf == NULL || header_len == NULL)
        return ds__set_error(DS_K_INVALID, "omni_tensor_encode_header: NULL argument");
    sink_t sink = {buf, cap, 0, false};
    ds_status_t st = header_run(type, dtype, shape, ndim, mode, &sink);
    if (st == DS_K_OK) *header_len = sink.pos;
    return st;
}

/* ---- decoding: the structural scan ---- */

static uint64_t load_be(const uint8_t *p, int n)
{
    uint64_t x = 0;
    for (int i = 0; i < n; i++)
        x = (x << 8) | p[i];
    return x;
}

/* Checks that p[0..len) holds exactly one msgpack document whose every length
 * fits the input and whose containers nest at most OMNI_MAX_DEPTH deep, the
 * way msgpack-c counts them. */
static ds_status_t scan(const uint8_t *p, size_t len)
{
    uint64_t left[OMNI_MAX_DEPTH + 1]; /* items still to read per open container */
    int depth = 0;
    left[0] = 1;
    size_t off = 0;
    for (;;) {
        while (depth > 0 && left[depth] == 0)
            depth--;
        if (depth == 0 && left[0] == 0) break;
        if (off >= len)
            return ds__set_error(DS_K_INVALID, "msgpack input truncated at offset %zu", off);
        uint8_t b = p[off];
        size_t at = off;
        int lenbytes = 0;   /* bytes of the length/count field after the type byte */
        uint64_t fixed = 0; /* payload bytes that follow the header */
        int kind = 0;       /* 0 scalar, 1 array, 2 map; bodies below */
        uint64_t n = 0;
        bool body = false;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        } else if (b <= 0x8f) {
            kind = 2, n = b & 0x0f;
        } else if (b <= 0x9f) {
            kind = 1, n = b & 0x0f;
        } else if (b <= 0xbf) {
            body = true, n = b & 0x1f;
        } else {
            switch (b) {
            case 0xc1:
                return ds__set_error(DS_K_INVALID, "reserved msgpack byte 0xc1 at offset %zu", at);
            case 0xc4:
            case 0xd9:
                lenbytes = 1, body = true;
                break;
            case 0xc5:
            case 0xda:
                lenbytes = 2, body = true;
                break;
            case 0xc6:
            case 0xdb:
                lenbytes = 4, body = true;
                break;
            case 0xc7:
                lenbytes = 1, body = true, fixed = 1;
                break; /* ext: + type byte */
            case 0xc8:
                lenbytes = 2, body = true, fixed = 1;
                break;
            case 0xc9:
                lenbytes = 4, body = true, fixed = 1;
                break;
            case 0xca:
                fixed = 4;
                break;
            case 0xcb:
                fixed = 8;
                break;
            case 0xcc:
            case 0xd0:
                fixed = 1;
                break;
            case 0xcd:
            case 0xd1:
                fixed = 2;
                break;
            case 0xce:
            case 0xd2:
                fixed = 4;
                break;
            case 0xcf:
            case 0xd3:
                fixed = 8;
                break;
            case 0xd4:
                fixed = 2;
                break;
            case 0xd5:
                fixed = 3;
                break;
            case 0xd6:
                fixed = 5;
                break;
            case 0xd7:
                fixed = 9;
                break;
            case 0xd8:
                fixed = 17;
                break;
            case 0xdc:
                lenbytes = 2, kind = 1;
                break;
            case 0xdd:
                lenbytes = 4, kind = 1;
                break;
            case 0xde:
                lenbytes = 2, kind = 2;
                break;
            default:
                lenbytes = 4, kind = 2;
                break; /* 0xdf */
            }
        }
        off++;
        if ((size_t)lenbytes > len - off)
            return ds__set_error(DS_K_INVALID, "msgpack input truncated at offset %zu", off);
        if (lenbytes > 0) {
            n = load_be(p + off, lenbytes);
            off += (size_t)lenbytes;
        }
        uint64_t payload = fixed + (body ? n : 0);
        if (payload > len - off)
            return ds__set_error(DS_K_INVALID,
                                 "msgpack value at offset %zu needs %llu bytes, only %zu remain",
                                 at, (unsigned long long)payload, len - off);
        off += (size_t)payload;
        left[depth]--;
        if (kind == 0) continue;
        if (depth >= OMNI_MAX_DEPTH)
            return ds__set_error(DS_K_INVALID,
                                 "msgpack containers nest deeper than %d at offset %zu",
                                 OMNI_MAX_DEPTH, at);
        uint64_t items = kind == 2 ? 2 * n : n;
        if (items > len - off)
            return ds__set_error(DS_K_INVALID,
                                 "msgpack %s at offset %zu declares %llu entries, more than the "
                                 "%zu bytes left could hold",
                                 kind == 2 ? "map" : "array", at, (unsigned long long)n, len - off);
        if (items > 0) left[++depth] = items;
    }
    if (off != len)
        return ds__set_error(DS_K_INVALID,
                             "%zu trailing bytes after the msgpack value at offset %zu", len - off,
                             off);
    return DS_K_OK;
}

/* ---- decoding: msgpack objects to omni values ---- */

typedef struct {
    size_t nodes, ptrs, tensors, dims;
} counts_t;

static bool str_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

/* The value under a string key of a msgpack map (the last, as dicts keep). */
static const msgpack_object *field(const msgpack_object *map, const char *key)
{
    for (uint32_t i = map->via.map.size; i-- > 0;) {
        if (str_is(&map->via.map.ptr[i].key, key)) return &map->via.map.ptr[i].val;
    }
    return NULL;
}

/* OMNI_TENSOR, OMNI_NDARRAY or OMNI_IMAGE for a marker map (checked in
 * OmniSerializer's order), OMNI_MAP for any other map. */
static omni_type_t marker_type(const msgpack_object *map)
{
    static const omni_type_t types[] = {OMNI_TENSOR, OMNI_NDARRAY, OMNI_IMAGE};
    for (size_t i = 0; i < 3; i++) {
        const msgpack_object *m = field(map, omni__marker(types[i]));
        if (m != NULL && m->type == MSGPACK_OBJECT_BOOLEAN && m->via.boolean) return types[i];
    }
    return OMNI_MAP;
}

static void count(const msgpack_object *o, counts_t *c)
{
    c->nodes++;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        c->ptrs += o->via.array.size;
        for (uint32_t i = 0; i < o->via.array.size; i++)
            count(&o->via.array.ptr[i], c);
    } else if (o->type == MSGPACK_OBJECT_MAP) {
        if (marker_type(o) != OMNI_MAP) {
            const msgpack_object *shape = field(o, "shape");
            c->tensors++;
            if (shape != NULL && shape->type == MSGPACK_OBJECT_ARRAY)
                c->dims += shape->via.array.size;
            return;
        }
        c->ptrs += 2 * (size_t)o->via.map.size;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            count(&o->via.map.ptr[i].key, c);
            count(&o->via.map.ptr[i].val, c);
        }
    }
}

typedef struct {
    omni_value_t *nodes;
    omni_value_t **ptrs;
    omni__tensor_t *tensors;
    int64_t *dims;
    char path[256];
} filler_t;

/* Appends to f->path at position at; returns the new length. */
static size_t path_push(filler_t *f, size_t at, const msgpack_object *key, size_t index)
{
    if (at >= sizeof(f->path) - 1) return at;
    int n;
    if (key != NULL && key->type == MSGPACK_OBJECT_STR)
        n = snprintf(f->path + at, sizeof(f->path) - at, ".%.*s", (int)key->via.str.size,
                     key->via.str.ptr);
    else
        n = snprintf(f->path + at, sizeof(f->path) - at, "[%zu]", index);
    size_t end = at + (size_t)n;
    return end < sizeof(f->path) ? end : sizeof(f->path) - 1;
}

static ds_status_t bad_tensor(filler_t *f, ds_status_t code, const char *what, const char *msg)
{
    return ds__set_error(code, "%s: %s map %s", f->path, what, msg);
}

static ds_status_t fill_tensor(filler_t *f, const msgpack_object *o, omni_type_t type,
                               omni_value_t *v)
{
    const char *what = type == OMNI_TENSOR ? "tensor" : type == OMNI_NDARRAY ? "ndarray" : "image";
    omni__tensor_t *t = f->tensors++;
    omni_dtype_t dtype = OMNI_DTYPE_UINT8;
    if (type == OMNI_IMAGE) {
        const msgpack_object *mode = field(o, "mode");
        if (mode == NULL || mode->type != MSGPACK_OBJECT_STR || mode->via.str.size == 0 ||
            mode->via.str.size > OMNI_MAX_MODE_LEN)
            return bad_tensor(f, DS_K_INVALID, what, "needs a \"mode\" string of 1..15 bytes");
        memcpy(t->mode, mode->via.str.ptr, mode->via.str.size);
        t->mode[mode->via.str.size] = '\0';
    } else {
        const msgpack_object *d = field(o, "dtype");
        if (d == NULL || d->type != MSGPACK_OBJECT_STR)
            return bad_tensor(f, DS_K_INVALID, what, "needs a \"dtype\" string");
        dtype = type == OMNI_TENSOR ? omni_dtype_from_torch_name(d->via.str.ptr, d->via.str.size)
                                    : omni_dtype_from_numpy_str(d->via.str.ptr, d->via.str.size);
        if (dtype == OMNI_DTYPE_INVALID)
            return ds__set_error(DS_K_NOT_SUPPORTED, "%s: %s dtype '%.*s' is not supported",
                                 f->path, what, (int)d->via.str.size, d->via.str.ptr);
    }
    const msgpack_object *shape = field(o, "shape");
    if (shape == NULL || shape->type != MSGPACK_OBJECT_ARRAY)
        return bad_tensor(f, DS_K_INVALID, what, "needs a \"shape\" array");
    if (shape->via.array.size > OMNI_MAX_NDIM)
        return bad_tensor(f, DS_K_INVALID, what, "has more than 64 dimensions");
    t->shape = f->dims;
    t->ndim = shape->via.array.size;
    f->dims += t->ndim;
    for (size_t i = 0; i < t->ndim; i++) {
        const msgpack_object *d = &shape->via.array.ptr[i];
        if (d->type != MSGPACK_OBJECT_POSITIVE_INTEGER || d->via.u64 > (uint64_t)INT64_MAX)
            return bad_tensor(f, DS_K_INVALID, what, "shape holds a non-integer or negative entry");
        t->shape[i] = (int64_t)d->via.u64;
    }
    const msgpack_object *data = field(o, "data");
    if (data == NULL || data->type != MSGPACK_OBJECT_BIN)
        return bad_tensor(f, DS_K_INVALID, what, "needs \"data\" bytes");
    char err[200];
    if (omni__check_tensor(type, dtype, t->shape, t->ndim, t->mode, data->via.bin.size,
                           &t->numel) != DS_K_OK) {
        snprintf(err, sizeof(err), "%s", ds_last_error());
        return ds__set_error(DS_K_INVALID, "%s: %s", f->path, err);
    }
    t->data = data->via.bin.ptr;
    t->nbytes = data->via.bin.size;
    v->dtype = (uint8_t)dtype;
    v->u.t = t;
    return DS_K_OK;
}

static ds_status_t fill(filler_t *f, const msgpack_object *o, size_t path_len, omni_value_t **out)
{
    omni_value_t *v = f->nodes++;
    *out = v;
    v->flags = OMNI__F_DOC;
    f->path[path_len] = '\0';
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        v->type = OMNI_NIL;
        return DS_K_OK;
    case MSGPACK_OBJECT_BOOLEAN:
        v->type = OMNI_BOOL;
        v->u.b = o->via.boolean;
        return DS_K_OK;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        v->type = OMNI_INT;
        v->u.u = o->via.u64;
        if (o->via.u64 > (uint64_t)INT64_MAX) v->flags |= OMNI__F_UNSIGNED;
        return DS_K_OK;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        v->type = OMNI_INT;
        v->u.i = o->via.i64;
        return DS_K_OK;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        v->type = OMNI_FLOAT;
        v->u.f = o->via.f64;
        return DS_K_OK;
    case MSGPACK_OBJECT_STR:
    case MSGPACK_OBJECT_BIN:
        v->type = o->type == MSGPACK_OBJECT_STR ? OMNI_STR : OMNI_BIN;
        v->u.raw.ptr = o->via.str.size > 0 ? o->via.str.ptr : "";
        v->u.raw.len = o->via.str.size;
        return DS_K_OK;
    case MSGPACK_OBJECT_EXT:
        v->type = OMNI_EXT;
        v->ext_type = o->via.ext.type;
        v->u.raw.ptr = o->via.ext.size > 0 ? o->via.ext.ptr : "";
        v->u.raw.len = o->via.ext.size;
        return DS_K_OK;
    case MSGPACK_OBJECT_ARRAY:
        v->type = OMNI_ARRAY;
        v->u.arr.items = f->ptrs;
        v->u.arr.len = v->u.arr.cap = o->via.array.size;
        f->ptrs += o->via.array.size;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            ds_status_t st =
                fill(f, &o->via.array.ptr[i], path_push(f, path_len, NULL, i), &v->u.arr.items[i]);
            if (st != DS_K_OK) return st;
        }
        return DS_K_OK;
    case MSGPACK_OBJECT_MAP: {
        omni_type_t mt = marker_type(o);
        v->type = (uint8_t)mt;
        if (mt != OMNI_MAP) return fill_tensor(f, o, mt, v);
        v->u.arr.items = f->ptrs;
        v->u.arr.len = v->u.arr.cap = o->via.map.size;
        f->ptrs += 2 * (size_t)o->via.map.size;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            ds_status_t st = fill(f, k, path_push(f, path_len, NULL, i), &v->u.arr.items[2 * i]);
            if (st == DS_K_OK)
                st = fill(f, &o->via.map.ptr[i].val, path_push(f, path_len, k, i),
                          &v->u.arr.items[2 * i + 1]);
            if (st != DS_K_OK) return st;
        }
        return DS_K_OK;
    }
    }
    return ds__set_error(DS_K_INVALID, "%s: unknown msgpack object type %d", f->path, o->type);
}

ds_status_t omni_decode(const void *buf, size_t len, omni_value_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_decode: out is NULL");
    *out = NULL;
    if (buf == NULL) return ds__set_error(DS_K_INVALID, "omni_decode: buffer is NULL");
    ds_status_t st = scan(buf, len);
    if (st != DS_K_OK) return st;

    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&up, buf, len, &off);
    if (ur != MSGPACK_UNPACK_SUCCESS) {
        msgpack_unpacked_destroy(&up);
        if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory unpacking %zu bytes", len);
        return ds__set_error(DS_K_INVALID, "msgpack-c could not parse the input (%d)", (int)ur);
    }

    counts_t c = {0, 0, 0, 0};
    count(&up.data, &c);
    size_t bytes = c.nodes * sizeof(omni_value_t) + c.ptrs * sizeof(omni_value_t *) +
                   c.tensors * sizeof(omni__tensor_t) + c.dims * sizeof(int64_t);
    char *block = calloc(1, bytes);
    if (block == NULL) {
        msgpack_unpacked_destroy(&up);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for %zu decoded values", c.nodes);
    }
    filler_t f;
    f.nodes = (omni_value_t *)block;
    f.ptrs = (omni_value_t **)(f.nodes + c.nodes);
    f.tensors = (omni__tensor_t *)(f.ptrs + c.ptrs);
    f.dims = (int64_t *)(f.tensors + c.tensors);
    f.path[0] = '$';
    omni_value_t *root;
    st = fill(&f, &up.data, 1, &root);
    msgpack_unpacked_destroy(&up);
    root->flags |= OMNI__F_DOC_ROOT;
    if (st != DS_K_OK) {
        omni_value_free(root);
        return st;
    }
    *out = root;
    return DS_K_OK;
}
