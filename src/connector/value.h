/* Internal layout of omni_value_t, shared by the value builder (value.c), the
 * msgpack codec (codec.c) and the dtype tables (dtype.c). Nothing outside
 * src/connector includes this. */
#ifndef OMNI_CONNECTOR_VALUE_H
#define OMNI_CONNECTOR_VALUE_H

#include <stdint.h>

#include "omni/serializer.h"

/* flags */
#define OMNI__F_OWN_DATA 0x01 /* raw.ptr / tensor data was malloc'd by this value */
#define OMNI__F_DOC 0x02      /* part of a decoded document: read-only */
#define OMNI__F_DOC_ROOT 0x04 /* the first value of a decoded document's block */
#define OMNI__F_UNSIGNED 0x08 /* an int above INT64_MAX, held in u.u */

/* Tensors, ndarrays and images. shape has ndim entries. */
typedef struct {
    const void *data;
    size_t nbytes;
    size_t numel;
    size_t ndim;
    int64_t *shape;
    char mode[OMNI_MAX_MODE_LEN + 1];
} omni__tensor_t;

struct omni_value {
    uint8_t type; /* omni_type_t */
    uint8_t flags;
    uint8_t dtype;   /* omni_dtype_t, tensors only */
    int8_t ext_type; /* OMNI_EXT only */
    union {
        bool b;
        int64_t i;
        uint64_t u;
        double f;
        struct {
            const void *ptr;
            size_t len;
        } raw; /* OMNI_STR, OMNI_BIN, OMNI_EXT */
        struct {
            omni_value_t **items;
            size_t len, cap;
        } arr; /* OMNI_ARRAY; OMNI_MAP keeps key i at items[2i], value at items[2i+1] */
        omni__tensor_t *t;
    } u;
};

/* The three marker keys, and which type each marker map decodes to. */
#define OMNI__TENSOR_MARKER "__tensor__"
#define OMNI__NDARRAY_MARKER "__ndarray__"
#define OMNI__IMAGE_MARKER "__pil_image__"

/* Checks dtype, shape and mode for a tensor of the given type and computes its
 * element count and data size. DS_K_INVALID with a message on failure. */
ds_status_t omni__tensor_nbytes(omni_type_t type, omni_dtype_t dtype, const int64_t *shape,
                                size_t ndim, const char *mode, size_t *numel, size_t *nbytes);

/* Same, and checks that the data is nbytes long. */
ds_status_t omni__check_tensor(omni_type_t type, omni_dtype_t dtype, const int64_t *shape,
                               size_t ndim, const char *mode, size_t nbytes, size_t *numel);

/* The dtype text written on the wire for a tensor type: the torch name for
 * OMNI_TENSOR, numpy's str for OMNI_NDARRAY. NULL when there is none. */
const char *omni__wire_dtype(omni_type_t type, omni_dtype_t dtype);

/* The marker key for a tensor type. */
const char *omni__marker(omni_type_t type);

#endif
