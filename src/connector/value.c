/* Building, reading and freeing omni_value_t trees. Built values own their
 * children and (except for the *_ref forms) their bytes; decoded values live
 * in one block owned by the document's root (see codec.c) and are read-only. */
#include "connector/value.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/bigbuf.h"

static omni_value_t *new_value(omni_type_t type)
{
    omni_value_t *v = calloc(1, sizeof(*v));
    if (v == NULL) {
        ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory allocating a value");
        return NULL;
    }
    v->type = (uint8_t)type;
    return v;
}

omni_value_t *omni_value_new_nil(void)
{
    return new_value(OMNI_NIL);
}

omni_value_t *omni_value_new_bool(bool b)
{
    omni_value_t *v = new_value(OMNI_BOOL);
    if (v != NULL) v->u.b = b;
    return v;
}

omni_value_t *omni_value_new_int(int64_t i)
{
    omni_value_t *v = new_value(OMNI_INT);
    if (v != NULL) v->u.i = i;
    return v;
}

omni_value_t *omni_value_new_uint(uint64_t u)
{
    omni_value_t *v = new_value(OMNI_INT);
    if (v != NULL) {
        v->u.u = u;
        if (u > (uint64_t)INT64_MAX) v->flags |= OMNI__F_UNSIGNED;
    }
    return v;
}

omni_value_t *omni_value_new_float(double f)
{
    omni_value_t *v = new_value(OMNI_FLOAT);
    if (v != NULL) v->u.f = f;
    return v;
}

/* Offset of the first byte that breaks UTF-8, or len when s is valid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return i;
        }
        if (len - i <= n) return i;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are invalid. */
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return i;
        i += n + 1;
    }
    return len;
}

static omni_value_t *new_bytes(omni_type_t type, const void *data, size_t len, bool copy)
{
    if (data == NULL && len > 0) {
        ds__set_error(DS_K_INVALID, "NULL data with length %zu", len);
        return NULL;
    }
    omni_value_t *v = new_value(type);
    if (v == NULL) return NULL;
    if (copy && len > 0) {
        void *p = malloc(len);
        if (p == NULL) {
            free(v);
            ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory copying %zu bytes", len);
            return NULL;
        }
        memcpy(p, data, len);
        v->u.raw.ptr = p;
        v->flags |= OMNI__F_OWN_DATA;
    } else {
        v->u.raw.ptr = len > 0 ? data : "";
    }
    v->u.raw.len = len;
    return v;
}

omni_value_t *omni_value_new_strn(const char *s, size_t len)
{
    if (s == NULL) {
        ds__set_error(DS_K_INVALID, "string is NULL");
        return NULL;
    }
    size_t bad = utf8_invalid_at((const unsigned char *)s, len);
    if (bad != len) {
        ds__set_error(DS_K_INVALID, "string is not valid UTF-8 at byte %zu", bad);
        return NULL;
    }
    return new_bytes(OMNI_STR, s, len, true);
}

omni_value_t *omni_value_new_str(const char *s)
{
    if (s == NULL) {
        ds__set_error(DS_K_INVALID, "string is NULL");
        return NULL;
    }
    return omni_value_new_strn(s, strlen(s));
}

omni_value_t *omni_value_new_bin(const void *data, size_t len)
{
    return new_bytes(OMNI_BIN, data, len, true);
}

omni_value_t *omni_value_new_bin_ref(const void *data, size_t len)
{
    return new_bytes(OMNI_BIN, data, len, false);
}

omni_value_t *omni_value_new_ext(int8_t type, const void *data, size_t len)
{
    omni_value_t *v = new_bytes(OMNI_EXT, data, len, true);
    if (v != NULL) v->ext_type = type;
    return v;
}

omni_value_t *omni_value_new_array(void)
{
    return new_value(OMNI_ARRAY);
}

omni_value_t *omni_value_new_map(void)
{
    return new_value(OMNI_MAP);
}

static omni_value_t *new_tensor(omni_type_t type, omni_dtype_t dtype, const char *mode,
                                const int64_t *shape, size_t ndim, const void *data, size_t nbytes,
                                bool copy)
{
    size_t numel;
    if (omni__check_tensor(type, dtype, shape, ndim, mode, nbytes, &numel) != DS_K_OK) return NULL;
    if (data == NULL && nbytes > 0) {
        ds__set_error(DS_K_INVALID, "NULL data with %zu bytes", nbytes);
        return NULL;
    }
    omni_value_t *v = new_value(type);
    if (v == NULL) return NULL;
    /* The tensor record and its shape share one allocation. */
    omni__tensor_t *t = calloc(1, sizeof(*t) + ndim * sizeof(int64_t));
    void *copy_buf = NULL;
    if (t != NULL && copy && nbytes > 0) copy_buf = malloc(nbytes);
    if (t == NULL || (copy && nbytes > 0 && copy_buf == NULL)) {
        free(t);
        free(v);
        ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a tensor of %zu bytes", nbytes);
        return NULL;
    }
    t->shape = (int64_t *)(t + 1);
    if (ndim > 0) memcpy(t->shape, shape, ndim * sizeof(int64_t));
    t->ndim = ndim;
    t->numel = numel;
    t->nbytes = nbytes;
    if (copy_buf != NULL) {
        memcpy(copy_buf, data, nbytes);
        t->data = copy_buf;
        v->flags |= OMNI__F_OWN_DATA;
    } else {
        t->data = nbytes > 0 ? data : "";
    }
    if (type == OMNI_IMAGE) {
        memcpy(t->mode, mode, strlen(mode) + 1); /* length checked above */
        dtype = OMNI_DTYPE_UINT8;
    }
    v->dtype = (uint8_t)dtype;
    v->u.t = t;
    return v;
}

omni_value_t *omni_value_new_tensor(omni_dtype_t dtype, const int64_t *shape, size_t ndim,
                                    const void *data, size_t nbytes)
{
    return new_tensor(OMNI_TENSOR, dtype, NULL, shape, ndim, data, nbytes, true);
}

omni_value_t *omni_value_new_tensor_ref(omni_dtype_t dtype, const int64_t *shape, size_t ndim,
                                        const void *data, size_t nbytes)
{
    return new_tensor(OMNI_TENSOR, dtype, NULL, shape, ndim, data, nbytes, false);
}

omni_value_t *omni_value_new_ndarray(omni_dtype_t dtype, const int64_t *shape, size_t ndim,
                                     const void *data, size_t nbytes)
{
    return new_tensor(OMNI_NDARRAY, dtype, NULL, shape, ndim, data, nbytes, true);
}

omni_value_t *omni_value_new_ndarray_ref(omni_dtype_t dtype, const int64_t *shape, size_t ndim,
                                         const void *data, size_t nbytes)
{
    return new_tensor(OMNI_NDARRAY, dtype, NULL, shape, ndim, data, nbytes, false);
}

omni_value_t *omni_value_new_image(const char *mode, const int64_t *shape, size_t ndim,
                                   const void *data, size_t nbytes)
{
    return new_tensor(OMNI_IMAGE, OMNI_DTYPE_UINT8, mode, shape, ndim, data, nbytes, true);
}

omni_value_t *omni_value_new_image_ref(const char *mode, const int64_t *shape, size_t ndim,
                                       const void *data, size_t nbytes)
{
    return new_tensor(OMNI_IMAGE, OMNI_DTYPE_UINT8, mode, shape, ndim, data, nbytes, false);
}

/* Makes room for `add` more item pointers in a built array or map. */
static ds_status_t reserve_items(omni_value_t *c, size_t add)
{
    size_t need = c->u.arr.len * (c->type == OMNI_MAP ? 2 : 1) + add;
    if (need <= c->u.arr.cap) return DS_K_OK;
    size_t cap = c->u.arr.cap ? c->u.arr.cap * 2 : 8;
    while (cap < need)
        cap *= 2;
    omni_value_t **items = realloc(c->u.arr.items, cap * sizeof(*items));
    if (items == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory growing a container");
    c->u.arr.items = items;
    c->u.arr.cap = cap;
    return DS_K_OK;
}

/* A constructor passed straight into a setter failed: keep its message. */
static ds_status_t null_child(const char *what, const char *name)
{
    char cause[256];
    snprintf(cause, sizeof(cause), "%s", ds_last_error());
    return ds__set_error(DS_K_INVALID, "%s: %s is NULL (%s)", what, name, cause);
}

static ds_status_t check_container(const omni_value_t *c, omni_type_t type, const char *what)
{
    if (c == NULL || c->type != type)
        return ds__set_error(DS_K_INVALID, "%s needs %s", what,
                             type == OMNI_MAP ? "a map" : "an array");
    if (c->flags & OMNI__F_DOC)
        return ds__set_error(DS_K_INVALID, "%s: a decoded value is read-only", what);
    return DS_K_OK;
}

ds_status_t omni_array_push(omni_value_t *array, omni_value_t *item)
{
    ds_status_t st = check_container(array, OMNI_ARRAY, "omni_array_push");
    if (st == DS_K_OK && item == NULL) st = null_child("omni_array_push", "item");
    if (st == DS_K_OK) st = reserve_items(array, 1);
    if (st != DS_K_OK) {
        omni_value_free(item);
        return st;
    }
    array->u.arr.items[array->u.arr.len++] = item;
    return DS_K_OK;
}

static bool key_equals(const omni_value_t *k, const char *key, size_t klen)
{
    return k->type == OMNI_STR && k->u.raw.len == klen && memcmp(k->u.raw.ptr, key, klen) == 0;
}

ds_status_t omni_map_set(omni_value_t *map, const char *key, omni_value_t *value)
{
    ds_status_t st = check_container(map, OMNI_MAP, "omni_map_set");
    if (st == DS_K_OK && key == NULL) st = ds__set_error(DS_K_INVALID, "omni_map_set: key is NULL");
    if (st == DS_K_OK && value == NULL) st = null_child("omni_map_set", key);
    if (st != DS_K_OK) {
        omni_value_free(value);
        return st;
    }
    size_t klen = strlen(key);
    for (size_t i = 0; i < map->u.arr.len; i++) {
        if (key_equals(map->u.arr.items[2 * i], key, klen)) {
            omni_value_free(map->u.arr.items[2 * i + 1]);
            map->u.arr.items[2 * i + 1] = value;
            return DS_K_OK;
        }
    }
    omni_value_t *k = omni_value_new_strn(key, klen);
    if (k == NULL) {
        omni_value_free(value);
        return DS_K_INVALID;
    }
    return omni_map_set_value(map, k, value);
}

ds_status_t omni_map_set_value(omni_value_t *map, omni_value_t *key, omni_value_t *value)
{
    ds_status_t st = check_container(map, OMNI_MAP, "omni_map_set_value");
    if (st == DS_K_OK && (key == NULL || value == NULL))
        st = null_child("omni_map_set_value", key == NULL ? "key" : "value");
    if (st == DS_K_OK) st = reserve_items(map, 2);
    if (st != DS_K_OK) {
        omni_value_free(key);
        omni_value_free(value);
        return st;
    }
    map->u.arr.items[2 * map->u.arr.len] = key;
    map->u.arr.items[2 * map->u.arr.len + 1] = value;
    map->u.arr.len++;
    return DS_K_OK;
}

void omni_value_free(omni_value_t *v)
{
    if (v == NULL) return;
    if (v->flags & OMNI__F_DOC) {
        /* A decoded document is one block starting at its root. */
        if (v->flags & OMNI__F_DOC_ROOT) free(v);
        return;
    }
    switch (v->type) {
    case OMNI_STR:
    case OMNI_BIN:
    case OMNI_EXT:
        if (v->flags & OMNI__F_OWN_DATA) free((void *)v->u.raw.ptr);
        break;
    case OMNI_ARRAY:
    case OMNI_MAP: {
        size_t n = v->u.arr.len * (v->type == OMNI_MAP ? 2 : 1);
        for (size_t i = 0; i < n; i++)
            omni_value_free(v->u.arr.items[i]);
        free(v->u.arr.items);
        break;
    }
    case OMNI_TENSOR:
    case OMNI_NDARRAY:
    case OMNI_IMAGE:
        if (v->flags & OMNI__F_OWN_DATA) free((void *)v->u.t->data);
        free(v->u.t);
        break;
    default:
        break;
    }
    free(v);
}

omni_type_t omni_value_type(const omni_value_t *v)
{
    return v == NULL ? OMNI_NIL : (omni_type_t)v->type;
}

static const char *type_name(const omni_value_t *v)
{
    static const char *names[] = {"nil",   "bool", "int", "float",  "str",     "bin",
                                  "array", "map",  "ext", "tensor", "ndarray", "image"};
    return v == NULL ? "NULL" : names[v->type];
}

static ds_status_t wrong_type(const omni_value_t *v, const char *want)
{
    return ds__set_error(DS_K_INVALID, "value is %s, not %s", type_name(v), want);
}

ds_status_t omni_value_get_bool(const omni_value_t *v, bool *out)
{
    if (v == NULL || v->type != OMNI_BOOL) return wrong_type(v, "bool");
    *out = v->u.b;
    return DS_K_OK;
}

ds_status_t omni_value_get_int(const omni_value_t *v, int64_t *out)
{
    if (v == NULL || v->type != OMNI_INT) return wrong_type(v, "int");
    if (v->flags & OMNI__F_UNSIGNED)
        return ds__set_error(DS_K_INVALID, "integer %llu does not fit in int64",
                             (unsigned long long)v->u.u);
    *out = v->u.i;
    return DS_K_OK;
}

ds_status_t omni_value_get_uint(const omni_value_t *v, uint64_t *out)
{
    if (v == NULL || v->type != OMNI_INT) return wrong_type(v, "int");
    if (!(v->flags & OMNI__F_UNSIGNED) && v->u.i < 0)
        return ds__set_error(DS_K_INVALID, "integer %lld is negative", (long long)v->u.i);
    *out = v->u.u;
    return DS_K_OK;
}

ds_status_t omni_value_get_float(const omni_value_t *v, double *out)
{
    if (v != NULL && v->type == OMNI_INT) {
        *out = (v->flags & OMNI__F_UNSIGNED) ? (double)v->u.u : (double)v->u.i;
        return DS_K_OK;
    }
    if (v == NULL || v->type != OMNI_FLOAT) return wrong_type(v, "float");
    *out = v->u.f;
    return DS_K_OK;
}

ds_status_t omni_value_get_str(const omni_value_t *v, const char **s, size_t *len)
{
    if (v == NULL || v->type != OMNI_STR) return wrong_type(v, "str");
    *s = v->u.raw.ptr;
    if (len != NULL) *len = v->u.raw.len;
    return DS_K_OK;
}

ds_status_t omni_value_get_bin(const omni_value_t *v, const void **data, size_t *len)
{
    if (v == NULL || v->type != OMNI_BIN) return wrong_type(v, "bin");
    *data = v->u.raw.ptr;
    if (len != NULL) *len = v->u.raw.len;
    return DS_K_OK;
}

ds_status_t omni_value_get_ext(const omni_value_t *v, int8_t *type, const void **data, size_t *len)
{
    if (v == NULL || v->type != OMNI_EXT) return wrong_type(v, "ext");
    if (type != NULL) *type = v->ext_type;
    *data = v->u.raw.ptr;
    if (len != NULL) *len = v->u.raw.len;
    return DS_K_OK;
}

ds_status_t omni_value_get_tensor(const omni_value_t *v, omni_tensor_view_t *out)
{
    if (v == NULL || (v->type != OMNI_TENSOR && v->type != OMNI_NDARRAY && v->type != OMNI_IMAGE))
        return wrong_type(v, "a tensor, ndarray or image");
    const omni__tensor_t *t = v->u.t;
    out->dtype = (omni_dtype_t)v->dtype;
    out->ndim = t->ndim;
    out->shape = t->ndim > 0 ? t->shape : NULL;
    out->numel = t->numel;
    out->data = t->data;
    out->nbytes = t->nbytes;
    out->mode = v->type == OMNI_IMAGE ? t->mode : NULL;
    return DS_K_OK;
}

size_t omni_value_len(const omni_value_t *v)
{
    if (v == NULL) return 0;
    switch (v->type) {
    case OMNI_STR:
    case OMNI_BIN:
    case OMNI_EXT:
        return v->u.raw.len;
    case OMNI_ARRAY:
    case OMNI_MAP:
        return v->u.arr.len;
    default:
        return 0;
    }
}

const omni_value_t *omni_array_at(const omni_value_t *array, size_t i)
{
    if (array == NULL || array->type != OMNI_ARRAY || i >= array->u.arr.len) return NULL;
    return array->u.arr.items[i];
}

const omni_value_t *omni_map_key_at(const omni_value_t *map, size_t i)
{
    if (map == NULL || map->type != OMNI_MAP || i >= map->u.arr.len) return NULL;
    return map->u.arr.items[2 * i];
}

const omni_value_t *omni_map_value_at(const omni_value_t *map, size_t i)
{
    if (map == NULL || map->type != OMNI_MAP || i >= map->u.arr.len) return NULL;
    return map->u.arr.items[2 * i + 1];
}

const omni_value_t *omni_map_get(const omni_value_t *map, const char *key)
{
    if (map == NULL || map->type != OMNI_MAP || key == NULL) return NULL;
    size_t klen = strlen(key);
    for (size_t i = map->u.arr.len; i-- > 0;) {
        if (key_equals(map->u.arr.items[2 * i], key, klen)) return map->u.arr.items[2 * i + 1];
    }
    return NULL;
}

void omni_free(void *p)
{
    ds__bigbuf_free(p);
}
