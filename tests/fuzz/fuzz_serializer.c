/* libFuzzer target for the OmniSerializer-compatible decoder (src/connector,
 * include/omni/serializer.h): the input is one msgpack document. A document
 * that decodes is walked completely (every scalar read, every tensor view's
 * bytes touched, so a view reaching outside the input is an ASan report),
 * then re-encoded; that encoding must decode again and re-encode to the very
 * same bytes (the encoder is canonical), and encoding into a buffer one byte
 * too small must fail cleanly. */
#include "omni/serializer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_serializer: check failed: %s (line %d)\n", #cond, __LINE__);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch(const void *p, size_t n)
{
    if (n == 0) return;
    const uint8_t *b = p;
    sink ^= b[0];
    sink ^= b[n - 1];
}

static void walk(const omni_value_t *v, int depth)
{
    CHECK(depth <= OMNI_MAX_DEPTH + 1);
    bool b;
    int64_t i;
    uint64_t u;
    double d;
    const char *s;
    const void *p;
    size_t n;
    int8_t et;
    switch (omni_value_type(v)) {
    case OMNI_NIL:
        break;
    case OMNI_BOOL:
        CHECK(omni_value_get_bool(v, &b) == DS_K_OK);
        break;
    case OMNI_INT:
        CHECK(omni_value_get_int(v, &i) == DS_K_OK || omni_value_get_uint(v, &u) == DS_K_OK);
        CHECK(omni_value_get_float(v, &d) == DS_K_OK);
        break;
    case OMNI_FLOAT:
        CHECK(omni_value_get_float(v, &d) == DS_K_OK);
        break;
    case OMNI_STR:
        CHECK(omni_value_get_str(v, &s, &n) == DS_K_OK);
        touch(s, n);
        CHECK(omni_value_len(v) == n);
        break;
    case OMNI_BIN:
        CHECK(omni_value_get_bin(v, &p, &n) == DS_K_OK);
        touch(p, n);
        break;
    case OMNI_EXT:
        CHECK(omni_value_get_ext(v, &et, &p, &n) == DS_K_OK);
        touch(p, n);
        break;
    case OMNI_ARRAY:
        n = omni_value_len(v);
        for (size_t k = 0; k < n; k++) {
            const omni_value_t *item = omni_array_at(v, k);
            CHECK(item != NULL);
            walk(item, depth + 1);
        }
        CHECK(omni_array_at(v, n) == NULL);
        break;
    case OMNI_MAP:
        n = omni_value_len(v);
        for (size_t k = 0; k < n; k++) {
            const omni_value_t *key = omni_map_key_at(v, k);
            const omni_value_t *val = omni_map_value_at(v, k);
            CHECK(key != NULL && val != NULL);
            walk(key, depth + 1);
            walk(val, depth + 1);
            if (omni_value_type(key) == OMNI_STR) {
                char kb[64];
                CHECK(omni_value_get_str(key, &s, &n) == DS_K_OK);
                if (n < sizeof(kb) && memchr(s, '\0', n) == NULL) {
                    memcpy(kb, s, n);
                    kb[n] = '\0';
                    CHECK(omni_map_get(v, kb) != NULL);
                }
                n = omni_value_len(v);
            }
        }
        CHECK(omni_map_key_at(v, n) == NULL);
        break;
    case OMNI_TENSOR:
    case OMNI_NDARRAY:
    case OMNI_IMAGE: {
        omni_tensor_view_t tv;
        CHECK(omni_value_get_tensor(v, &tv) == DS_K_OK);
        size_t es = omni_dtype_size(tv.dtype);
        CHECK(es > 0);
        CHECK(tv.ndim <= OMNI_MAX_NDIM);
        size_t numel = 1;
        for (size_t k = 0; k < tv.ndim; k++) {
            CHECK(tv.shape[k] >= 0);
            numel *= (size_t)tv.shape[k];
        }
        CHECK(numel == tv.numel);
        CHECK(tv.nbytes == tv.numel * es);
        touch(tv.data, tv.nbytes);
        if (omni_value_type(v) == OMNI_IMAGE) CHECK(tv.mode != NULL);
        break;
    }
    default:
        CHECK(!"unknown value type");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    omni_value_t *v = NULL;
    ds_status_t st = omni_decode(data, size, &v);
    if (st != DS_K_OK) {
        CHECK(v == NULL);
        CHECK(ds_last_error() != NULL && ds_last_error()[0] != '\0');
        return 0;
    }
    CHECK(v != NULL);
    walk(v, 0);

    size_t need = 0;
    void *enc = NULL;
    size_t enc_len = 0;
    if (omni_value_encoded_size(v, &need) != DS_K_OK) {
        omni_value_free(v);
        return 0;
    }
    CHECK(omni_value_encode(v, &enc, &enc_len) == DS_K_OK);
    CHECK(enc_len == need);
    if (need > 0) {
        void *small = malloc(need - 1 ? need - 1 : 1);
        CHECK(small != NULL);
        CHECK(omni_value_encode_to(v, small, need - 1, NULL) != DS_K_OK);
        free(small);
    }
    omni_value_t *v2 = NULL;
    CHECK(omni_decode(enc, enc_len, &v2) == DS_K_OK);
    void *enc2 = NULL;
    size_t enc2_len = 0;
    CHECK(omni_value_encode(v2, &enc2, &enc2_len) == DS_K_OK);
    CHECK(enc2_len == enc_len && memcmp(enc, enc2, enc_len) == 0);
    omni_free(enc2);
    omni_value_free(v2);
    omni_free(enc);
    omni_value_free(v);
    return 0;
}
