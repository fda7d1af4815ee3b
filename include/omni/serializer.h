/* OmniSerializer-compatible payloads in C (part of libomniconn).
 *
 * vLLM-Omni's OmniSerializer encodes stage payloads as one MessagePack document
 * (msgspec's encoder, no framing header). Plain Python values map to plain
 * msgpack types; three kinds of array travel as marker maps whose keys are
 * written in this order:
 *
 *   torch.Tensor   {"__tensor__": true, "dtype": "float32", "shape": [..], "data": bin}
 *   numpy.ndarray  {"__ndarray__": true, "dtype": "<f4", "shape": [..], "data": bin}
 *   PIL.Image      {"__pil_image__": true, "mode": "RGB", "shape": [..], "data": bin}
 *
 * The tensor dtype is the torch name without "torch."; the ndarray dtype is
 * numpy's dtype.str; image data is always uint8. Integers take the smallest
 * msgpack encoding, floats are always float64, strings and bins the smallest
 * header, so a value built here encodes to the same bytes Python produces.
 *
 * Values form a tree of omni_value_t. Build one with the omni_value_new_*
 * constructors and the container setters, encode it with omni_value_encode
 * (one exact-size allocation) or omni_value_encode_to (into any buffer, e.g. a
 * datasystem arena buffer from ds_kv_create). Tensor data is copied exactly once
 * while encoding; the *_ref constructors borrow it instead of copying it into
 * the tree. omni_tensor_encode_header lets a producer write a lone tensor's data
 * in place after the header.
 *
 * omni_decode parses a received buffer without copying: strings, bins and
 * tensor data of the resulting tree point into that buffer, so the buffer must
 * outlive the tree. Marker maps come back as OMNI_TENSOR, OMNI_NDARRAY and
 * OMNI_IMAGE values, read with omni_value_get_tensor. msgpack does not align
 * anything, so a tensor view's data may sit at any address: read elements
 * with memcpy (or copy the block out) rather than through a typed pointer.
 *
 * Ownership: every omni_value_t handed out is released with omni_value_free,
 * which frees its whole subtree. Container setters take ownership of the child
 * in every case, also when they fail, so constructors can be nested directly:
 * `omni_map_set(m, "ids", omni_value_new_int(7))` (a NULL child makes the setter
 * fail with DS_K_INVALID, keeping the constructor's message). Values returned by accessors
 * (omni_array_at, omni_map_get, ...) belong to their parent. A decoded tree is
 * read-only; its inner values are freed with its root.
 *
 * Errors: functions return a ds_status_t or NULL; ds_last_error() tells why.
 * A value may be read from many threads at once but changed by one. */
#ifndef OMNI_SERIALIZER_H
#define OMNI_SERIALIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/status.h"
#include "omni/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most dimensions a tensor, ndarray or image may have (numpy's limit). */
#define OMNI_MAX_NDIM 64
/* The longest PIL mode name accepted ("I;16B" is the longest PIL has). */
#define OMNI_MAX_MODE_LEN 15
/* Containers nest at most this deep in a decoded document (msgpack-c's limit). */
#define OMNI_MAX_DEPTH 32

typedef enum {
    OMNI_NIL = 0,
    OMNI_BOOL,
    OMNI_INT,   /* int64, or a uint64 above INT64_MAX (see omni_value_get_uint) */
    OMNI_FLOAT, /* float64 (a float32 on the wire decodes to this too) */
    OMNI_STR,   /* UTF-8, not NUL-terminated when decoded */
    OMNI_BIN,
    OMNI_ARRAY,
    OMNI_MAP,
    OMNI_EXT, /* msgpack extension: a type byte and raw bytes */
    OMNI_TENSOR,
    OMNI_NDARRAY,
    OMNI_IMAGE,
} omni_type_t;

typedef enum {
    OMNI_DTYPE_INVALID = 0,
    OMNI_DTYPE_BOOL,
    OMNI_DTYPE_INT8,
    OMNI_DTYPE_UINT8,
    OMNI_DTYPE_INT16,
    OMNI_DTYPE_UINT16,
    OMNI_DTYPE_INT32,
    OMNI_DTYPE_UINT32,
    OMNI_DTYPE_INT64,
    OMNI_DTYPE_UINT64,
    OMNI_DTYPE_FLOAT16,
    OMNI_DTYPE_BFLOAT16, /* torch only: numpy has no bfloat16 */
    OMNI_DTYPE_FLOAT32,
    OMNI_DTYPE_FLOAT64,
    OMNI_DTYPE_COMPLEX64,
    OMNI_DTYPE_COMPLEX128,
    OMNI_DTYPE_FLOAT8_E4M3FN, /* torch only */
    OMNI_DTYPE_FLOAT8_E5M2,   /* torch only */
    OMNI_DTYPE_COUNT_
} omni_dtype_t;

typedef struct omni_value omni_value_t;

/* A view of a tensor, ndarray or image. shape, data and mode point into the
 * value (and, for a decoded value, into the received buffer). */
typedef struct {
    omni_dtype_t dtype; /* OMNI_DTYPE_UINT8 for images */
    size_t ndim;
    const int64_t *shape; /* ndim entries; NULL when ndim is 0 */
    size_t numel;         /* product of shape (1 for a 0-d tensor) */
    const void *data;     /* numel * omni_dtype_size(dtype) bytes, C order */
    size_t nbytes;
    const char *mode; /* images: the PIL mode, e.g. "RGB"; NULL otherwise */
} omni_tensor_view_t;

/* ---- dtypes ---- */

/* Bytes per element; 0 for an invalid dtype. */
OMNI_EXPORT size_t omni_dtype_size(omni_dtype_t dtype);
/* "float32" (torch name without "torch."), or NULL for an invalid dtype. */
OMNI_EXPORT const char *omni_dtype_torch_name(omni_dtype_t dtype);
/* numpy's dtype.str ("<f4", "|u1"), or NULL where numpy has no such dtype. */
OMNI_EXPORT const char *omni_dtype_numpy_str(omni_dtype_t dtype);
/* OMNI_DTYPE_INVALID when the name is unknown. Accepts a "torch." prefix. */
OMNI_EXPORT omni_dtype_t omni_dtype_from_torch_name(const char *name, size_t len);
/* Accepts the "<", "|" and "=" byte orders; big-endian (">") and non-numeric
 * dtypes give OMNI_DTYPE_INVALID. */
OMNI_EXPORT omni_dtype_t omni_dtype_from_numpy_str(const char *str, size_t len);

/* ---- building values ---- */

/* Scalars and containers. NULL only when memory runs out, or (strings) when
 * the text is not valid UTF-8, which Python could not decode. */
OMNI_EXPORT omni_value_t *omni_value_new_nil(void);
OMNI_EXPORT omni_value_t *omni_value_new_bool(bool b);
OMNI_EXPORT omni_value_t *omni_value_new_int(int64_t i);
OMNI_EXPORT omni_value_t *omni_value_new_uint(uint64_t u);
OMNI_EXPORT omni_value_t *omni_value_new_float(double f);
OMNI_EXPORT omni_value_t *omni_value_new_str(const char *s);
OMNI_EXPORT omni_value_t *omni_value_new_strn(const char *s, size_t len);
/* Copies len bytes. */
OMNI_EXPORT omni_value_t *omni_value_new_bin(const void *data, size_t len);
/* Borrows data: it must stay valid and unchanged until the value is freed. */
OMNI_EXPORT omni_value_t *omni_value_new_bin_ref(const void *data, size_t len);
/* Copies len bytes. */
OMNI_EXPORT omni_value_t *omni_value_new_ext(int8_t type, const void *data, size_t len);
OMNI_EXPORT omni_value_t *omni_value_new_array(void);
OMNI_EXPORT omni_value_t *omni_value_new_map(void);

/* Arrays. shape has ndim entries (each >= 0; ndim 0 is a 0-d tensor of one
 * element); nbytes must equal numel * omni_dtype_size(dtype). The plain forms
 * copy data into the value; the _ref forms borrow it until the value is freed,
 * so encoding copies it exactly once. NULL with DS_K_INVALID on a bad dtype,
 * shape or size, e.g. an ndarray of bfloat16. */
OMNI_EXPORT omni_value_t *omni_value_new_tensor(omni_dtype_t dtype, const int64_t *shape,
                                                size_t ndim, const void *data, size_t nbytes);
OMNI_EXPORT omni_value_t *omni_value_new_tensor_ref(omni_dtype_t dtype, const int64_t *shape,
                                                    size_t ndim, const void *data, size_t nbytes);
OMNI_EXPORT omni_value_t *omni_value_new_ndarray(omni_dtype_t dtype, const int64_t *shape,
                                                 size_t ndim, const void *data, size_t nbytes);
OMNI_EXPORT omni_value_t *omni_value_new_ndarray_ref(omni_dtype_t dtype, const int64_t *shape,
                                                     size_t ndim, const void *data, size_t nbytes);
/* Images hold uint8 data, nbytes = product of shape (e.g. {H, W, 3} for RGB). */
OMNI_EXPORT omni_value_t *omni_value_new_image(const char *mode, const int64_t *shape, size_t ndim,
                                               const void *data, size_t nbytes);
OMNI_EXPORT omni_value_t *omni_value_new_image_ref(const char *mode, const int64_t *shape,
                                                   size_t ndim, const void *data, size_t nbytes);

/* Appends item to array. Takes ownership of item in every case. */
OMNI_EXPORT ds_status_t omni_array_push(omni_value_t *array, omni_value_t *item);
/* Sets map[key] = value, replacing (and freeing) an earlier value under the
 * same string key; new keys keep insertion order, as Python dicts do. Takes
 * ownership of value in every case. */
OMNI_EXPORT ds_status_t omni_map_set(omni_value_t *map, const char *key, omni_value_t *value);
/* Appends an entry with any key value (ints, say). No duplicate check. Takes
 * ownership of key and value in every case. */
OMNI_EXPORT ds_status_t omni_map_set_value(omni_value_t *map, omni_value_t *key,
                                           omni_value_t *value);

/* Frees v and everything it holds. For a decoded tree only the root frees;
 * freeing an inner value of it does nothing. NULL is fine. */
OMNI_EXPORT void omni_value_free(omni_value_t *v);

/* ---- reading values ---- */

/* OMNI_NIL for NULL. */
OMNI_EXPORT omni_type_t omni_value_type(const omni_value_t *v);
/* Each getter returns DS_K_INVALID when v is NULL or of another type. */
OMNI_EXPORT ds_status_t omni_value_get_bool(const omni_value_t *v, bool *out);
/* DS_K_INVALID also for a uint64 above INT64_MAX. */
OMNI_EXPORT ds_status_t omni_value_get_int(const omni_value_t *v, int64_t *out);
/* DS_K_INVALID also for a negative int. */
OMNI_EXPORT ds_status_t omni_value_get_uint(const omni_value_t *v, uint64_t *out);
/* Accepts ints as well, converted to double. */
OMNI_EXPORT ds_status_t omni_value_get_float(const omni_value_t *v, double *out);
OMNI_EXPORT ds_status_t omni_value_get_str(const omni_value_t *v, const char **s, size_t *len);
OMNI_EXPORT ds_status_t omni_value_get_bin(const omni_value_t *v, const void **data, size_t *len);
OMNI_EXPORT ds_status_t omni_value_get_ext(const omni_value_t *v, int8_t *type, const void **data,
                                           size_t *len);
/* For OMNI_TENSOR, OMNI_NDARRAY and OMNI_IMAGE values. */
OMNI_EXPORT ds_status_t omni_value_get_tensor(const omni_value_t *v, omni_tensor_view_t *out);

/* Entries of an array or map, bytes of a str, bin or ext; 0 otherwise. */
OMNI_EXPORT size_t omni_value_len(const omni_value_t *v);
/* NULL when out of range or not an array. */
OMNI_EXPORT const omni_value_t *omni_array_at(const omni_value_t *array, size_t i);
/* The i-th entry of a map in wire order; NULL when out of range. */
OMNI_EXPORT const omni_value_t *omni_map_key_at(const omni_value_t *map, size_t i);
OMNI_EXPORT const omni_value_t *omni_map_value_at(const omni_value_t *map, size_t i);
/* The value under a string key (the last one, as a Python dict keeps), or
 * NULL when absent or map is not a map. */
OMNI_EXPORT const omni_value_t *omni_map_get(const omni_value_t *map, const char *key);

/* ---- encoding ---- */

/* The exact number of bytes omni_value_encode_to will write. */
OMNI_EXPORT ds_status_t omni_value_encoded_size(const omni_value_t *v, size_t *size);
/* Encodes into buf. DS_K_INVALID when cap is too small (nothing useful is
 * left in buf then) or a bin exceeds msgpack's 4 GiB limit. *written may be
 * NULL. */
OMNI_EXPORT ds_status_t omni_value_encode_to(const omni_value_t *v, void *buf, size_t cap,
                                             size_t *written);
/* Encodes into a new allocation of exactly *len bytes, 64-byte aligned (from
 * 4 MiB up a mapping of its own, advised for transparent huge pages, since
 * first-touch page faults would otherwise cost far more than the copy); free
 * it with omni_free. */
OMNI_EXPORT ds_status_t omni_value_encode(const omni_value_t *v, void **buf, size_t *len);
/* Frees memory returned by omni_value_encode (and nothing else). NULL is fine. */
OMNI_EXPORT void omni_free(void *p);

/* In-place writing of a lone tensor (type OMNI_TENSOR, OMNI_NDARRAY or
 * OMNI_IMAGE; mode only for images). The encoding is a header of *header_len
 * bytes followed by the nbytes of data, so a producer can reserve
 * *header_len + nbytes bytes, write the header, and then compute the data
 * directly at buf + *header_len. omni_tensor_encode_header writes the header
 * (and checks dtype, shape and mode as the constructors do). */
OMNI_EXPORT ds_status_t omni_tensor_header_size(omni_type_t type, omni_dtype_t dtype,
                                                const int64_t *shape, size_t ndim, const char *mode,
                                                size_t *header_len);
OMNI_EXPORT ds_status_t omni_tensor_encode_header(omni_type_t type, omni_dtype_t dtype,
                                                  const int64_t *shape, size_t ndim,
                                                  const char *mode, void *buf, size_t cap,
                                                  size_t *header_len);

/* ---- decoding ---- */

/* Parses exactly one msgpack document filling all len bytes. *out's strings,
 * bins and array data point into buf (no copy): buf must stay valid until
 * omni_value_free(*out). Errors (DS_K_INVALID unless noted), each naming the
 * byte offset or the path of the bad value: truncated input, trailing bytes,
 * a reserved byte, nesting deeper than OMNI_MAX_DEPTH, a container count
 * larger than the input could hold, a marker map with a missing or malformed
 * dtype, shape, mode or data, data whose size does not match dtype and shape;
 * DS_K_NOT_SUPPORTED for a dtype this library has no type for (a big-endian
 * ndarray, say). *out is NULL on failure. */
OMNI_EXPORT ds_status_t omni_decode(const void *buf, size_t len, omni_value_t **out);

#ifdef __cplusplus
}
#endif
#endif
