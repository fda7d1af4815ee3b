/* Element types of tensors, ndarrays and images: sizes, the torch names and
 * numpy dtype strings OmniSerializer writes for them, and the shape and size
 * checks every tensor constructor and the decoder share. */
#include "connector/value.h"

#include <string.h>

#include "common/error.h"

typedef struct {
    const char *torch; /* str(torch.dtype) without "torch." */
    const char *numpy; /* numpy dtype.str on a little-endian host; NULL: none */
    size_t size;
} dtype_info_t;

static const dtype_info_t dtypes[OMNI_DTYPE_COUNT_] = {
    [OMNI_DTYPE_INVALID] = {NULL, NULL, 0},
    [OMNI_DTYPE_BOOL] = {"bool", "|b1", 1},
    [OMNI_DTYPE_INT8] = {"int8", "|i1", 1},
    [OMNI_DTYPE_UINT8] = {"uint8", "|u1", 1},
    [OMNI_DTYPE_INT16] = {"int16", "<i2", 2},
    [OMNI_DTYPE_UINT16] = {"uint16", "<u2", 2},
    [OMNI_DTYPE_INT32] = {"int32", "<i4", 4},
    [OMNI_DTYPE_UINT32] = {"uint32", "<u4", 4},
    [OMNI_DTYPE_INT64] = {"int64", "<i8", 8},
    [OMNI_DTYPE_UINT64] = {"uint64", "<u8", 8},
    [OMNI_DTYPE_FLOAT16] = {"float16", "<f2", 2},
    [OMNI_DTYPE_BFLOAT16] = {"bfloat16", NULL, 2},
    [OMNI_DTYPE_FLOAT32] = {"float32", "<f4", 4},
    [OMNI_DTYPE_FLOAT64] = {"float64", "<f8", 8},
    [OMNI_DTYPE_COMPLEX64] = {"complex64", "<c8", 8},
    [OMNI_DTYPE_COMPLEX128] = {"complex128", "<c16", 16},
    [OMNI_DTYPE_FLOAT8_E4M3FN] = {"float8_e4m3fn", NULL, 1},
    [OMNI_DTYPE_FLOAT8_E5M2] = {"float8_e5m2", NULL, 1},
};

static bool valid(omni_dtype_t d)
{
    return d > OMNI_DTYPE_INVALID && d < OMNI_DTYPE_COUNT_;
}

size_t omni_dtype_size(omni_dtype_t dtype)
{
    return valid(dtype) ? dtypes[dtype].size : 0;
}

const char *omni_dtype_torch_name(omni_dtype_t dtype)
{
    return valid(dtype) ? dtypes[dtype].torch : NULL;
}

const char *omni_dtype_numpy_str(omni_dtype_t dtype)
{
    return valid(dtype) ? dtypes[dtype].numpy : NULL;
}

omni_dtype_t omni_dtype_from_torch_name(const char *name, size_t len)
{
    if (name == NULL) return OMNI_DTYPE_INVALID;
    if (len >= 6 && memcmp(name, "torch.", 6) == 0) {
        name += 6;
        len -= 6;
    }
    for (int d = OMNI_DTYPE_INVALID + 1; d < OMNI_DTYPE_COUNT_; d++) {
        const char *t = dtypes[d].torch;
        if (strlen(t) == len && memcmp(t, name, len) == 0) return (omni_dtype_t)d;
    }
    return OMNI_DTYPE_INVALID;
}

omni_dtype_t omni_dtype_from_numpy_str(const char *str, size_t len)
{
    if (str == NULL || len < 3) return OMNI_DTYPE_INVALID;
    char order = str[0];
    if (order != '<' && order != '|' && order != '=' && order != '>') return OMNI_DTYPE_INVALID;
    for (int d = OMNI_DTYPE_INVALID + 1; d < OMNI_DTYPE_COUNT_; d++) {
        const char *n = dtypes[d].numpy;
        if (n == NULL || strlen(n) != len || memcmp(n + 1, str + 1, len - 1) != 0) continue;
        /* Byte order only matters for multi-byte elements; this host is
         * little-endian, so ">" is only acceptable for single bytes. */
        if (order == '>' && dtypes[d].size > 1) return OMNI_DTYPE_INVALID;
        return (omni_dtype_t)d;
    }
    return OMNI_DTYPE_INVALID;
}

const char *omni__wire_dtype(omni_type_t type, omni_dtype_t dtype)
{
    if (type == OMNI_TENSOR) return omni_dtype_torch_name(dtype);
    if (type == OMNI_NDARRAY) return omni_dtype_numpy_str(dtype);
    return NULL;
}

const char *omni__marker(omni_type_t type)
{
    switch (type) {
    case OMNI_TENSOR:
        return OMNI__TENSOR_MARKER;
    case OMNI_NDARRAY:
        return OMNI__NDARRAY_MARKER;
    case OMNI_IMAGE:
        return OMNI__IMAGE_MARKER;
    default:
        return NULL;
    }
}

static const char *type_label(omni_type_t type)
{
    return type == OMNI_TENSOR ? "tensor" : type == OMNI_NDARRAY ? "ndarray" : "image";
}

ds_status_t omni__tensor_nbytes(omni_type_t type, omni_dtype_t dtype, const int64_t *shape,
                                size_t ndim, const char *mode, size_t *numel, size_t *nbytes)
{
    const char *what = type_label(type);
    if (type != OMNI_TENSOR && type != OMNI_NDARRAY && type != OMNI_IMAGE)
        return ds__set_error(DS_K_INVALID, "type %d is not a tensor, ndarray or image", type);
    if (type == OMNI_IMAGE) {
        size_t mlen = mode == NULL ? 0 : strlen(mode);
        if (mlen == 0 || mlen > OMNI_MAX_MODE_LEN)
            return ds__set_error(DS_K_INVALID, "image mode must be 1..%d characters",
                                 OMNI_MAX_MODE_LEN);
        dtype = OMNI_DTYPE_UINT8;
    } else if (!valid(dtype)) {
        return ds__set_error(DS_K_INVALID, "%s has invalid dtype %d", what, (int)dtype);
    } else if (omni__wire_dtype(type, dtype) == NULL) {
        return ds__set_error(DS_K_INVALID, "numpy has no dtype for %s",
                             omni_dtype_torch_name(dtype));
    }
    if (ndim > OMNI_MAX_NDIM)
        return ds__set_error(DS_K_INVALID, "%s has %zu dimensions, more than %d", what, ndim,
                             OMNI_MAX_NDIM);
    if (ndim > 0 && shape == NULL) return ds__set_error(DS_K_INVALID, "%s shape is NULL", what);
    size_t n = 1;
    for (size_t i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ds__set_error(DS_K_INVALID, "%s dimension %zu is negative (%lld)", what, i,
                                 (long long)shape[i]);
        if (shape[i] != 0 && n > SIZE_MAX / (uint64_t)shape[i])
            return ds__set_error(DS_K_INVALID, "%s shape overflows", what);
        n *= (size_t)shape[i];
    }
    size_t isz = dtypes[dtype].size;
    if (n > SIZE_MAX / isz) return ds__set_error(DS_K_INVALID, "%s shape overflows", what);
    if (numel != NULL) *numel = n;
    *nbytes = n * isz;
    return DS_K_OK;
}

ds_status_t omni__check_tensor(omni_type_t type, omni_dtype_t dtype, const int64_t *shape,
                               size_t ndim, const char *mode, size_t nbytes, size_t *numel)
{
    size_t n = 0, need = 0;
    ds_status_t st = omni__tensor_nbytes(type, dtype, shape, ndim, mode, &n, &need);
    if (st != DS_K_OK) return st;
    if (need != nbytes)
        return ds__set_error(DS_K_INVALID, "%s data is %zu bytes, but %zu %s elements need %zu",
                             type_label(type), nbytes, n,
                             type == OMNI_IMAGE ? "uint8" : dtypes[dtype].torch, need);
    if (numel != NULL) *numel = n;
    return DS_K_OK;
}
