/* Unit tests for the OmniSerializer-compatible codec (omni/serializer.h):
 * exact wire bytes for every scalar width and the three marker maps, round
 * trips with zero-copy views, every builder, getter, encoder and decoder error,
 * the in-place tensor header, and the one-copy cost of a 64 MiB tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "omni/serializer.h"

/* ---- helpers ---- */

#define TEST(name) static void name(void **state __attribute__((unused)))

typedef struct {
    uint8_t *b;
    size_t n, cap;
} bytes_t;

static void bput(bytes_t *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->b = realloc(w->b, w->cap);
        assert_non_null(w->b);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

/* Appends bytes written as hex pairs; spaces are ignored. */
static void hex(bytes_t *w, const char *h)
{
    while (*h) {
        if (*h == ' ') {
            h++;
            continue;
        }
        unsigned v;
        assert_int_equal(sscanf(h, "%2x", &v), 1);
        uint8_t b = (uint8_t)v;
        bput(w, &b, 1);
        h += 2;
    }
}

/* Appends a fixstr. */
static void fstr(bytes_t *w, const char *s)
{
    uint8_t h = (uint8_t)(0xa0 | strlen(s));
    bput(w, &h, 1);
    bput(w, s, strlen(s));
}

static void expect_encoding(const omni_value_t *v, const bytes_t *want)
{
    void *buf;
    size_t len, size;
    assert_non_null(v);
    assert_int_equal(omni_value_encoded_size(v, &size), DS_K_OK);
    assert_int_equal(omni_value_encode(v, &buf, &len), DS_K_OK);
    assert_int_equal(len, want->n);
    assert_int_equal(size, want->n);
    assert_memory_equal(buf, want->b, want->n);
    omni_free(buf);
}

static void expect_hex(omni_value_t *v, const char *h)
{
    bytes_t w = {0};
    hex(&w, h);
    expect_encoding(v, &w);
    omni_value_free(v);
    free(w.b);
}

static void expect_error(ds_status_t got, ds_status_t want, const char *needle)
{
    assert_int_equal(got, want);
    if (strstr(ds_last_error(), needle) == NULL)
        fail_msg("message '%s' lacks '%s'", ds_last_error(), needle);
}

static void expect_null(omni_value_t *v, const char *needle)
{
    assert_null(v);
    if (strstr(ds_last_error(), needle) == NULL)
        fail_msg("message '%s' lacks '%s'", ds_last_error(), needle);
}

/* Getters that must succeed. */
static int64_t int_of(const omni_value_t *v)
{
    int64_t i = 0;
    assert_int_equal(omni_value_get_int(v, &i), DS_K_OK);
    return i;
}

static omni_tensor_view_t view_of(const omni_value_t *v)
{
    omni_tensor_view_t tv;
    assert_int_equal(omni_value_get_tensor(v, &tv), DS_K_OK);
    return tv;
}

static ds_status_t decode_hex(const char *h, omni_value_t **out, bytes_t *keep)
{
    memset(keep, 0, sizeof(*keep));
    hex(keep, h);
    return omni_decode(keep->b != NULL ? (const void *)keep->b : "", keep->n, out);
}

static void expect_decode_error(const char *h, ds_status_t code, const char *needle)
{
    bytes_t w;
    omni_value_t *v = (omni_value_t *)1;
    expect_error(decode_hex(h, &v, &w), code, needle);
    assert_null(v);
    free(w.b);
}

/* Appends a marker map with the given fields; NULL leaves a field out. */
static void marker_map(bytes_t *w, const char *marker, const char *dtype_key, const char *dtype,
                       const char *shape_hex, const char *data_hex)
{
    uint8_t n = 0x81 + (dtype != NULL) + (shape_hex != NULL) + (data_hex != NULL);
    bput(w, &n, 1);
    fstr(w, marker);
    hex(w, "c3");
    if (dtype != NULL) {
        fstr(w, dtype_key);
        if (dtype[0] == '#')
            hex(w, dtype + 1); /* a non-string dtype */
        else
            fstr(w, dtype);
    }
    if (shape_hex != NULL) {
        fstr(w, "shape");
        hex(w, shape_hex);
    }
    if (data_hex != NULL) {
        fstr(w, "data");
        hex(w, data_hex);
    }
}

/* ---- dtypes ---- */

TEST(test_dtype_tables)
{
    assert_int_equal(omni_dtype_size(OMNI_DTYPE_FLOAT32), 4);
    assert_int_equal(omni_dtype_size(OMNI_DTYPE_COMPLEX128), 16);
    assert_int_equal(omni_dtype_size(OMNI_DTYPE_BFLOAT16), 2);
    assert_int_equal(omni_dtype_size(OMNI_DTYPE_INVALID), 0);
    assert_int_equal(omni_dtype_size(OMNI_DTYPE_COUNT_), 0);
    assert_string_equal(omni_dtype_torch_name(OMNI_DTYPE_BFLOAT16), "bfloat16");
    assert_null(omni_dtype_torch_name(OMNI_DTYPE_INVALID));
    assert_string_equal(omni_dtype_numpy_str(OMNI_DTYPE_FLOAT32), "<f4");
    assert_string_equal(omni_dtype_numpy_str(OMNI_DTYPE_BOOL), "|b1");
    assert_null(omni_dtype_numpy_str(OMNI_DTYPE_BFLOAT16));
    assert_null(omni_dtype_numpy_str((omni_dtype_t)99));
    for (int d = OMNI_DTYPE_BOOL; d < OMNI_DTYPE_COUNT_; d++) {
        const char *t = omni_dtype_torch_name((omni_dtype_t)d);
        assert_int_equal(omni_dtype_from_torch_name(t, strlen(t)), d);
        const char *n = omni_dtype_numpy_str((omni_dtype_t)d);
        if (n != NULL) assert_int_equal(omni_dtype_from_numpy_str(n, strlen(n)), d);
    }
    assert_int_equal(omni_dtype_from_torch_name("torch.int64", 11), OMNI_DTYPE_INT64);
    assert_int_equal(omni_dtype_from_torch_name("float3", 6), OMNI_DTYPE_INVALID);
    assert_int_equal(omni_dtype_from_torch_name(NULL, 0), OMNI_DTYPE_INVALID);
    assert_int_equal(omni_dtype_from_numpy_str("=f8", 3), OMNI_DTYPE_FLOAT64);
    assert_int_equal(omni_dtype_from_numpy_str(">u1", 3), OMNI_DTYPE_UINT8);
    assert_int_equal(omni_dtype_from_numpy_str(">f4", 3), OMNI_DTYPE_INVALID);
    assert_int_equal(omni_dtype_from_numpy_str("<U5", 3), OMNI_DTYPE_INVALID);
    assert_int_equal(omni_dtype_from_numpy_str("f4", 2), OMNI_DTYPE_INVALID);
    assert_int_equal(omni_dtype_from_numpy_str("xf4", 3), OMNI_DTYPE_INVALID);
    assert_int_equal(omni_dtype_from_numpy_str(NULL, 3), OMNI_DTYPE_INVALID);
}

/* ---- exact encodings ---- */

TEST(test_encode_scalars)
{
    expect_hex(omni_value_new_nil(), "c0");
    expect_hex(omni_value_new_bool(true), "c3");
    expect_hex(omni_value_new_bool(false), "c2");
    expect_hex(omni_value_new_int(0), "00");
    expect_hex(omni_value_new_int(127), "7f");
    expect_hex(omni_value_new_int(128), "cc80");
    expect_hex(omni_value_new_int(255), "ccff");
    expect_hex(omni_value_new_int(256), "cd0100");
    expect_hex(omni_value_new_int(65535), "cdffff");
    expect_hex(omni_value_new_int(65536), "ce00010000");
    expect_hex(omni_value_new_int(4294967295LL), "ceffffffff");
    expect_hex(omni_value_new_int(4294967296LL), "cf0000000100000000");
    expect_hex(omni_value_new_int(INT64_MAX), "cf7fffffffffffffff");
    expect_hex(omni_value_new_int(-1), "ff");
    expect_hex(omni_value_new_int(-32), "e0");
    expect_hex(omni_value_new_int(-33), "d0df");
    expect_hex(omni_value_new_int(-128), "d080");
    expect_hex(omni_value_new_int(-129), "d1ff7f");
    expect_hex(omni_value_new_int(-32768), "d18000");
    expect_hex(omni_value_new_int(-32769), "d2ffff7fff");
    expect_hex(omni_value_new_int(INT32_MIN), "d280000000");
    expect_hex(omni_value_new_int((int64_t)INT32_MIN - 1), "d3ffffffff7fffffff");
    expect_hex(omni_value_new_int(INT64_MIN), "d38000000000000000");
    expect_hex(omni_value_new_uint(5), "05");
    expect_hex(omni_value_new_uint(UINT64_MAX), "cfffffffffffffffff");
    expect_hex(omni_value_new_float(1.5), "cb3ff8000000000000");
    expect_hex(omni_value_new_float(-0.0), "cb8000000000000000");
    expect_hex(omni_value_new_str(""), "a0");
    expect_hex(omni_value_new_str("abc"), "a3616263");
    expect_hex(omni_value_new_bin("", 0), "c400");
    expect_hex(omni_value_new_bin("\x01\x02", 2), "c4020102");
    expect_hex(omni_value_new_ext(5, "\x09", 1), "d40509");
    expect_hex(omni_value_new_ext(-1, "\x01\x02\x03", 3), "c703ff010203");
    expect_hex(omni_value_new_array(), "90");
    expect_hex(omni_value_new_map(), "80");
}

/* Expects v (freed here) to encode as the header hdr followed by body. */
static void expect_header(omni_value_t *v, const char *hdr, const void *body, size_t n)
{
    bytes_t w = {0};
    hex(&w, hdr);
    bput(&w, body, n);
    expect_encoding(v, &w);
    omni_value_free(v);
    omni_value_t *d; /* and decoding gives back the same value */
    assert_int_equal(omni_decode(w.b, w.n, &d), DS_K_OK);
    expect_encoding(d, &w);
    omni_value_free(d);
    free(w.b);
}

/* Header bytes for strings, bins and containers at each width boundary. */
TEST(test_encode_length_boundaries)
{
    static const struct {
        size_t n;
        const char *str_hdr, *bin_hdr;
    } cases[] = {
        {31, "bf", "c41f"},        {32, "d920", "c420"},        {255, "d9ff", "c4ff"},
        {256, "da0100", "c50100"}, {65535, "daffff", "c5ffff"}, {65536, "db00010000", "c600010000"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *s = calloc(cases[i].n + 1, 1);
        memset(s, 'x', cases[i].n);
        expect_header(omni_value_new_str(s), cases[i].str_hdr, s, cases[i].n);
        expect_header(omni_value_new_bin_ref(s, cases[i].n), cases[i].bin_hdr, s, cases[i].n);
        free(s);
    }
    static const struct {
        size_t n;
        const char *arr_hdr, *map_hdr;
    } ccases[] = {{15, "9f", "8f"}, {16, "dc0010", "de0010"}, {65536, "dd00010000", "df00010000"}};
    for (size_t i = 0; i < sizeof(ccases) / sizeof(ccases[0]); i++) {
        size_t n = ccases[i].n;
        omni_value_t *a = omni_value_new_array(), *m = omni_value_new_map();
        uint8_t *body = malloc(2 * n);
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(omni_array_push(a, omni_value_new_nil()), DS_K_OK);
            assert_int_equal(omni_map_set_value(m, omni_value_new_int(1), omni_value_new_nil()),
                             DS_K_OK);
        }
        memset(body, 0xc0, n); /* n nils */
        expect_header(a, ccases[i].arr_hdr, body, n);
        for (size_t k = 0; k < n; k++) /* n entries 1: nil */
            body[2 * k] = 0x01, body[2 * k + 1] = 0xc0;
        expect_header(m, ccases[i].map_hdr, body, 2 * n);
        free(body);
    }
}

/* The marker maps, key by key, as OmniSerializer writes them. */
TEST(test_encode_marker_maps)
{
    float f[2] = {1.0f, 2.0f};
    int64_t shape[1] = {2};
    bytes_t w = {0};
    marker_map(&w, "__tensor__", "dtype", "float32", "91 02", "c408 0000803f 00000040");
    omni_value_t *v = omni_value_new_tensor(OMNI_DTYPE_FLOAT32, shape, 1, f, sizeof(f));
    expect_encoding(v, &w);
    omni_value_free(v);

    /* 600 bytes of data take a bin16 header; 300 a uint16 in the shape. */
    int64_t nshape[2] = {1, 300};
    uint8_t *nd = calloc(300, 2);
    char data_hex[6 + 1200 + 1] = "c50258";
    memset(data_hex + 6, '0', 1200);
    data_hex[1206] = '\0';
    w.n = 0;
    marker_map(&w, "__ndarray__", "dtype", "<i2", "92 01 cd012c", data_hex);
    v = omni_value_new_ndarray_ref(OMNI_DTYPE_INT16, nshape, 2, nd, 600);
    expect_encoding(v, &w);
    omni_value_free(v);
    free(nd);

    uint8_t px[6] = {1, 2, 3, 4, 5, 6};
    int64_t ishape[3] = {1, 2, 3};
    w.n = 0;
    marker_map(&w, "__pil_image__", "mode", "RGB", "93 01 02 03", "c406 010203040506");
    v = omni_value_new_image("RGB", ishape, 3, px, 6);
    expect_encoding(v, &w);
    omni_value_free(v);

    /* A 0-d tensor: empty shape, one element. */
    int64_t one = 7;
    w.n = 0;
    marker_map(&w, "__tensor__", "dtype", "int64", "90", "c408 0700000000000000");
    v = omni_value_new_tensor(OMNI_DTYPE_INT64, NULL, 0, &one, 8);
    expect_encoding(v, &w);
    omni_value_free(v);
    free(w.b);
}

/* ---- round trips ---- */

static omni_value_t *sample(const float *hidden, size_t n_hidden, const uint8_t *px)
{
    int64_t hshape[2] = {2, (int64_t)n_hidden / 2};
    int64_t ishape[3] = {1, 2, 3};
    int64_t ids[3] = {151644, -1, 0};
    int64_t idshape[1] = {3};
    omni_value_t *m = omni_value_new_map();
    omni_value_t *tokens = omni_value_new_array();
    assert_int_equal(omni_array_push(tokens, omni_value_new_int(1)), DS_K_OK);
    assert_int_equal(omni_array_push(tokens, omni_value_new_int(-70000)), DS_K_OK);
    assert_int_equal(omni_array_push(tokens, omni_value_new_uint(UINT64_MAX)), DS_K_OK);
    assert_int_equal(omni_map_set(m, "request_id", omni_value_new_str("req-7")), DS_K_OK);
    assert_int_equal(omni_map_set(m, "finished", omni_value_new_bool(true)), DS_K_OK);
    assert_int_equal(omni_map_set(m, "score", omni_value_new_float(0.25)), DS_K_OK);
    assert_int_equal(omni_map_set(m, "none", omni_value_new_nil()), DS_K_OK);
    assert_int_equal(omni_map_set(m, "tokens", tokens), DS_K_OK);
    assert_int_equal(omni_map_set(m, "blob", omni_value_new_bin("\x00\xff", 2)), DS_K_OK);
    assert_int_equal(omni_map_set(m, "hidden",
                                  omni_value_new_tensor_ref(OMNI_DTYPE_FLOAT32, hshape, 2, hidden,
                                                            n_hidden * sizeof(float))),
                     DS_K_OK);
    assert_int_equal(
        omni_map_set(m, "ids",
                     omni_value_new_ndarray(OMNI_DTYPE_INT64, idshape, 1, ids, sizeof(ids))),
        DS_K_OK);
    assert_int_equal(omni_map_set(m, "img", omni_value_new_image_ref("RGB", ishape, 3, px, 6)),
                     DS_K_OK);
    assert_int_equal(omni_map_set(m, "ext", omni_value_new_ext(-1, "abcd", 4)), DS_K_OK);
    return m;
}

static bool inside(const void *p, const void *buf, size_t len)
{
    return (const uint8_t *)p >= (const uint8_t *)buf &&
           (const uint8_t *)p < (const uint8_t *)buf + len;
}

TEST(test_round_trip_zero_copy)
{
    float hidden[6] = {0.5f, -1.0f, 2.0f, 3.5f, 1e-3f, 7.0f};
    uint8_t px[6] = {10, 20, 30, 40, 50, 60};
    omni_value_t *m = sample(hidden, 6, px);
    void *buf;
    size_t len;
    assert_int_equal(omni_value_encode(m, &buf, &len), DS_K_OK);

    omni_value_t *d;
    assert_int_equal(omni_decode(buf, len, &d), DS_K_OK);
    assert_int_equal(omni_value_type(d), OMNI_MAP);
    assert_int_equal(omni_value_len(d), 10);
    const char *s;
    size_t slen;
    assert_int_equal(omni_value_get_str(omni_map_get(d, "request_id"), &s, &slen), DS_K_OK);
    assert_int_equal(slen, 5);
    assert_memory_equal(s, "req-7", 5);
    assert_true(inside(s, buf, len));
    bool b;
    assert_int_equal(omni_value_get_bool(omni_map_get(d, "finished"), &b), DS_K_OK);
    assert_true(b);
    double f;
    assert_int_equal(omni_value_get_float(omni_map_get(d, "score"), &f), DS_K_OK);
    assert_true(f == 0.25);
    assert_int_equal(omni_value_type(omni_map_get(d, "none")), OMNI_NIL);
    const omni_value_t *tokens = omni_map_get(d, "tokens");
    assert_int_equal(omni_value_len(tokens), 3);
    uint64_t u;
    assert_int_equal(int_of(omni_array_at(tokens, 1)), -70000);
    assert_int_equal(omni_value_get_uint(omni_array_at(tokens, 2), &u), DS_K_OK);
    assert_true(u == UINT64_MAX);
    assert_null(omni_array_at(tokens, 3));
    const void *blob;
    size_t blen;
    assert_int_equal(omni_value_get_bin(omni_map_get(d, "blob"), &blob, &blen), DS_K_OK);
    assert_int_equal(blen, 2);
    assert_memory_equal(blob, "\x00\xff", 2);
    int8_t et;
    assert_int_equal(omni_value_get_ext(omni_map_get(d, "ext"), &et, &blob, &blen), DS_K_OK);
    assert_int_equal(et, -1);
    assert_int_equal(blen, 4);

    const omni_value_t *h = omni_map_get(d, "hidden");
    assert_int_equal(omni_value_type(h), OMNI_TENSOR);
    omni_tensor_view_t tv = view_of(h);
    assert_int_equal(tv.dtype, OMNI_DTYPE_FLOAT32);
    assert_int_equal(tv.ndim, 2);
    assert_int_equal(tv.shape[0], 2);
    assert_int_equal(tv.shape[1], 3);
    assert_int_equal(tv.numel, 6);
    assert_int_equal(tv.nbytes, sizeof(hidden));
    assert_null(tv.mode);
    assert_memory_equal(tv.data, hidden, sizeof(hidden));
    assert_true(inside(tv.data, buf, len)); /* a view, not a copy */

    const omni_value_t *ids = omni_map_get(d, "ids");
    assert_int_equal(omni_value_type(ids), OMNI_NDARRAY);
    tv = view_of(ids);
    assert_int_equal(tv.dtype, OMNI_DTYPE_INT64);
    int64_t first; /* views into msgpack are unaligned: copy elements out */
    memcpy(&first, tv.data, sizeof(first));
    assert_int_equal(first, 151644);

    const omni_value_t *img = omni_map_get(d, "img");
    assert_int_equal(omni_value_type(img), OMNI_IMAGE);
    tv = view_of(img);
    assert_string_equal(tv.mode, "RGB");
    assert_int_equal(tv.dtype, OMNI_DTYPE_UINT8);
    assert_memory_equal(tv.data, px, 6);

    /* Keys come back in insertion order, and re-encoding is byte-exact. */
    const char *k0;
    assert_int_equal(omni_value_get_str(omni_map_key_at(d, 0), &k0, &slen), DS_K_OK);
    assert_memory_equal(k0, "request_id", slen);
    assert_non_null(omni_map_value_at(d, 9));
    assert_null(omni_map_key_at(d, 10));
    assert_null(omni_map_value_at(d, 10));
    void *again;
    size_t again_len;
    assert_int_equal(omni_value_encode(d, &again, &again_len), DS_K_OK);
    assert_int_equal(again_len, len);
    assert_memory_equal(again, buf, len);
    omni_free(again);

    /* Inner values of a decoded tree are freed with the root only. */
    omni_value_free((omni_value_t *)tokens);
    omni_value_free(d);
    omni_value_free(m);
    omni_free(buf);
}

TEST(test_round_trip_edge_values)
{
    /* Empty tensor, 0-d tensor, bool and bfloat16 tensors, float32 on the wire. */
    int64_t zero[1] = {0};
    uint16_t bf[2] = {0x3f80, 0x4000};
    int64_t two[1] = {2};
    bool flags[2] = {true, false};
    omni_value_t *a = omni_value_new_array();
    assert_int_equal(
        omni_array_push(a, omni_value_new_tensor(OMNI_DTYPE_FLOAT32, zero, 1, NULL, 0)), DS_K_OK);
    assert_int_equal(omni_array_push(a, omni_value_new_tensor(OMNI_DTYPE_BFLOAT16, two, 1, bf, 4)),
                     DS_K_OK);
    assert_int_equal(omni_array_push(a, omni_value_new_tensor(OMNI_DTYPE_BOOL, two, 1, flags, 2)),
                     DS_K_OK);
    void *buf;
    size_t len;
    assert_int_equal(omni_value_encode(a, &buf, &len), DS_K_OK);
    omni_value_t *d;
    assert_int_equal(omni_decode(buf, len, &d), DS_K_OK);
    omni_tensor_view_t tv = view_of(omni_array_at(d, 0));
    assert_int_equal(tv.numel, 0);
    assert_int_equal(tv.nbytes, 0);
    assert_int_equal(tv.ndim, 1);
    tv = view_of(omni_array_at(d, 1));
    assert_int_equal(tv.dtype, OMNI_DTYPE_BFLOAT16);
    assert_memory_equal(tv.data, bf, 4);
    assert_int_equal(view_of(omni_array_at(d, 2)).dtype, OMNI_DTYPE_BOOL);
    omni_value_free(d);
    omni_value_free(a);
    omni_free(buf);

    /* float32 (0xca) decodes as a float; a 0-d tensor has no shape array. */
    bytes_t w;
    assert_int_equal(decode_hex("ca3fc00000", &d, &w), DS_K_OK);
    double f;
    assert_int_equal(omni_value_get_float(d, &f), DS_K_OK);
    assert_true(f == 1.5);
    omni_value_free(d);
    free(w.b);
    int64_t one = 9;
    omni_value_t *s = omni_value_new_tensor(OMNI_DTYPE_INT64, NULL, 0, &one, 8);
    assert_int_equal(omni_value_encode(s, &buf, &len), DS_K_OK);
    assert_int_equal(omni_decode(buf, len, &d), DS_K_OK);
    tv = view_of(d);
    assert_int_equal(tv.ndim, 0);
    assert_null(tv.shape);
    assert_int_equal(tv.numel, 1);
    int64_t nine;
    memcpy(&nine, tv.data, sizeof(nine));
    assert_int_equal(nine, 9);
    omni_value_free(d);
    omni_value_free(s);
    omni_free(buf);

    /* A marker set to false is a plain map; with two markers the tensor wins,
     * as OmniSerializer checks __tensor__ first; the last duplicate key wins. */
    bytes_t m = {0};
    hex(&m, "82");
    fstr(&m, "__tensor__");
    hex(&m, "c2 a161 01");
    assert_int_equal(omni_decode(m.b, m.n, &d), DS_K_OK);
    assert_int_equal(omni_value_type(d), OMNI_MAP);
    omni_value_free(d);
    m.n = 0;
    marker_map(&m, "__ndarray__", "dtype", "uint8", "9101", "c4012a");
    m.b[0]++; /* one more entry: */
    fstr(&m, "__tensor__");
    hex(&m, "c3");
    assert_int_equal(omni_decode(m.b, m.n, &d), DS_K_OK);
    assert_int_equal(omni_value_type(d), OMNI_TENSOR);
    omni_value_free(d);
    m.n = 0;
    hex(&m, "82 a16b 01 a16b 02");
    assert_int_equal(omni_decode(m.b, m.n, &d), DS_K_OK);
    assert_int_equal(int_of(omni_map_get(d, "k")), 2);
    assert_null(omni_map_get(d, "missing"));
    omni_value_free(d);
    free(m.b);
}

TEST(test_map_set_replaces)
{
    omni_value_t *m = omni_value_new_map();
    assert_int_equal(omni_map_set(m, "a", omni_value_new_int(1)), DS_K_OK);
    assert_int_equal(omni_map_set(m, "b", omni_value_new_int(2)), DS_K_OK);
    assert_int_equal(omni_map_set(m, "a", omni_value_new_int(3)), DS_K_OK);
    assert_int_equal(omni_value_len(m), 2);
    assert_int_equal(int_of(omni_map_get(m, "a")), 3);
    /* Order is kept: {"a": 3, "b": 2}. */
    expect_hex(m, "82 a161 03 a162 02");
}

/* ---- builder, setter and getter errors ---- */

TEST(test_builder_errors)
{
    static const char *bad_utf8[] = {"\x80",     "\xc0\x80",         "\xed\xa0\x80",
                                     "\xe2\x82", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
                                     "ok\xc3"};
    for (size_t k = 0; k < sizeof(bad_utf8) / sizeof(bad_utf8[0]); k++) {
        assert_null(omni_value_new_str(bad_utf8[k]));
        assert_non_null(strstr(ds_last_error(), "UTF-8"));
    }
    omni_value_t *ok = omni_value_new_str("h\xc3\xa9llo \xe4\xb8\x96 \xf0\x9f\x98\x80");
    assert_non_null(ok);
    omni_value_free(ok);
    assert_null(omni_value_new_str(NULL));
    assert_null(omni_value_new_strn(NULL, 1));
    expect_null(omni_value_new_bin(NULL, 3), "NULL data");

    int64_t shape[2] = {2, 3};
    float data[6] = {0};
    expect_null(omni_value_new_tensor(OMNI_DTYPE_INVALID, shape, 2, data, 24), "invalid dtype");
    expect_null(omni_value_new_tensor(OMNI_DTYPE_FLOAT32, shape, 2, data, 20), "need 24");
    expect_null(omni_value_new_tensor(OMNI_DTYPE_FLOAT32, NULL, 2, data, 24), "shape is NULL");
    expect_null(omni_value_new_tensor(OMNI_DTYPE_FLOAT32, shape, 2, NULL, 24), "NULL data");
    int64_t neg[2] = {2, -3};
    expect_null(omni_value_new_tensor(OMNI_DTYPE_FLOAT32, neg, 2, data, 24), "negative");
    int64_t huge[2] = {INT64_MAX, INT64_MAX};
    expect_null(omni_value_new_tensor(OMNI_DTYPE_FLOAT32, huge, 2, data, 24), "overflows");
    int64_t big1[1] = {INT64_MAX / 2};
    expect_null(omni_value_new_tensor(OMNI_DTYPE_FLOAT64, big1, 1, data, 24), "overflows");
    int64_t many[OMNI_MAX_NDIM + 1];
    for (size_t k = 0; k < OMNI_MAX_NDIM + 1; k++)
        many[k] = 1;
    expect_null(omni_value_new_tensor(OMNI_DTYPE_FLOAT32, many, OMNI_MAX_NDIM + 1, data, 4),
                "dimensions");
    expect_null(omni_value_new_ndarray(OMNI_DTYPE_BFLOAT16, shape, 2, data, 12),
                "numpy has no dtype for bfloat16");
    expect_null(omni_value_new_image(NULL, shape, 2, data, 6), "mode");
    assert_null(omni_value_new_image("", shape, 2, data, 6));
    assert_null(omni_value_new_image("ABCDEFGHIJKLMNOP", shape, 2, data, 6));
    expect_null(omni_value_new_image_ref("L", shape, 2, data, 5), "uint8");
    omni_value_t *im = omni_value_new_image("I;16B", shape, 2, data, 6);
    assert_non_null(im);
    omni_value_free(im);
}

TEST(test_setter_errors)
{
    omni_value_t *m = omni_value_new_map();
    omni_value_t *a = omni_value_new_array();
    expect_error(omni_array_push(m, omni_value_new_int(1)), DS_K_INVALID, "needs an array");
    expect_error(omni_array_push(NULL, omni_value_new_int(1)), DS_K_INVALID, "needs an array");
    /* A failed constructor's message is kept by the setter. */
    expect_error(omni_array_push(a, omni_value_new_str("\xff")), DS_K_INVALID, "UTF-8");
    expect_error(omni_map_set(a, "k", omni_value_new_int(1)), DS_K_INVALID, "needs a map");
    expect_error(omni_map_set(m, NULL, omni_value_new_int(1)), DS_K_INVALID, "key is NULL");
    expect_error(omni_map_set(m, "k", NULL), DS_K_INVALID, "k is NULL");
    expect_error(omni_map_set(m, "\xff", omni_value_new_int(1)), DS_K_INVALID, "UTF-8");
    expect_error(omni_map_set_value(m, NULL, omni_value_new_int(1)), DS_K_INVALID, "key is NULL");
    expect_error(omni_map_set_value(m, omni_value_new_int(1), NULL), DS_K_INVALID, "value is NULL");
    expect_error(omni_map_set_value(a, omni_value_new_int(1), omni_value_new_int(1)), DS_K_INVALID,
                 "needs a map");
    assert_int_equal(omni_value_len(m), 0);
    assert_int_equal(omni_value_len(a), 0);

    /* Decoded trees are read-only. */
    bytes_t w;
    omni_value_t *d;
    assert_int_equal(decode_hex("91 80", &d, &w), DS_K_OK);
    expect_error(omni_array_push(d, omni_value_new_int(1)), DS_K_INVALID, "read-only");
    expect_error(omni_map_set((omni_value_t *)omni_array_at(d, 0), "k", omni_value_new_int(1)),
                 DS_K_INVALID, "read-only");
    omni_value_free(d);
    free(w.b);
    omni_value_free(m);
    omni_value_free(a);
    omni_value_free(NULL);
}

TEST(test_getter_errors)
{
    omni_value_t *s = omni_value_new_str("x");
    omni_value_t *neg = omni_value_new_int(-5);
    omni_value_t *big = omni_value_new_uint(UINT64_MAX);
    omni_value_t *i7 = omni_value_new_int(7);
    struct { /* one slot per getter's output */
        bool b;
        int64_t i;
        uint64_t u;
        double f;
        const char *str;
        const void *p;
        size_t n;
        int8_t t;
        omni_tensor_view_t tv;
    } o;
    expect_error(omni_value_get_bool(s, &o.b), DS_K_INVALID, "value is str, not bool");
    expect_error(omni_value_get_int(s, &o.i), DS_K_INVALID, "not int");
    expect_error(omni_value_get_int(big, &o.i), DS_K_INVALID, "does not fit");
    expect_error(omni_value_get_uint(neg, &o.u), DS_K_INVALID, "negative");
    expect_error(omni_value_get_uint(s, &o.u), DS_K_INVALID, "not int");
    expect_error(omni_value_get_float(s, &o.f), DS_K_INVALID, "not float");
    expect_error(omni_value_get_str(i7, &o.str, &o.n), DS_K_INVALID, "value is int, not str");
    expect_error(omni_value_get_bin(s, &o.p, &o.n), DS_K_INVALID, "not bin");
    expect_error(omni_value_get_ext(s, &o.t, &o.p, &o.n), DS_K_INVALID, "not ext");
    expect_error(omni_value_get_tensor(s, &o.tv), DS_K_INVALID, "tensor");
    expect_error(omni_value_get_bool(NULL, &o.b), DS_K_INVALID, "value is NULL");
    assert_int_equal(omni_value_get_float(i7, &o.f), DS_K_OK);
    assert_true(o.f == 7.0);
    assert_int_equal(omni_value_get_float(big, &o.f), DS_K_OK);
    assert_int_equal(omni_value_get_uint(big, &o.u), DS_K_OK);
    assert_int_equal(omni_value_get_int(neg, &o.i), DS_K_OK);
    assert_int_equal(omni_value_get_str(s, &o.str, NULL), DS_K_OK);
    assert_int_equal(omni_value_type(NULL), OMNI_NIL);
    assert_int_equal(omni_value_len(NULL), 0);
    assert_int_equal(omni_value_len(i7), 0);
    assert_null(omni_array_at(s, 0));
    assert_null(omni_map_key_at(s, 0));
    assert_null(omni_map_value_at(NULL, 0));
    assert_null(omni_map_get(s, "k"));
    assert_null(omni_map_get(NULL, "k"));
    omni_value_free(s);
    omni_value_free(neg);
    omni_value_free(big);
    omni_value_free(i7);
}

/* ---- encoder errors ---- */

TEST(test_encode_errors)
{
    omni_value_t *v = omni_value_new_str("hello");
    uint8_t small[4];
    size_t n;
    void *buf;
    expect_error(omni_value_encode_to(v, small, sizeof(small), &n), DS_K_INVALID,
                 "too small: the value needs 6");
    expect_error(omni_value_encode_to(NULL, small, 4, &n), DS_K_INVALID, "NULL argument");
    expect_error(omni_value_encode_to(v, NULL, 4, &n), DS_K_INVALID, "NULL argument");
    expect_error(omni_value_encoded_size(NULL, &n), DS_K_INVALID, "NULL argument");
    expect_error(omni_value_encoded_size(v, NULL), DS_K_INVALID, "NULL argument");
    expect_error(omni_value_encode(v, NULL, &n), DS_K_INVALID, "NULL argument");
    expect_error(omni_value_encode(NULL, &buf, &n), DS_K_INVALID, "NULL argument");
    uint8_t exact[6];
    assert_int_equal(omni_value_encode_to(v, exact, sizeof(exact), NULL), DS_K_OK);
    omni_value_free(v);

    /* Nesting beyond what the decoders accept is refused on encode too. */
    omni_value_t *root = omni_value_new_array(), *cur = root;
    for (int d = 1; d < OMNI_MAX_DEPTH; d++) {
        omni_value_t *next = omni_value_new_array();
        assert_int_equal(omni_array_push(cur, next), DS_K_OK);
        cur = next;
    }
    assert_int_equal(omni_value_encoded_size(root, &n), DS_K_OK);
    float x = 1;
    int64_t shape[1] = {1};
    assert_int_equal(
        omni_array_push(cur, omni_value_new_tensor(OMNI_DTYPE_FLOAT32, shape, 1, &x, 4)), DS_K_OK);
    expect_error(omni_value_encoded_size(root, &n), DS_K_INVALID, "nest deeper");
    omni_value_free(root);
    root = omni_value_new_array();
    cur = root;
    for (int d = 0; d < OMNI_MAX_DEPTH; d++) {
        omni_value_t *next = omni_value_new_map();
        if (d == 0)
            assert_int_equal(omni_array_push(cur, next), DS_K_OK);
        else
            assert_int_equal(omni_map_set(cur, "k", next), DS_K_OK);
        cur = next;
    }
    expect_error(omni_value_encode(root, &buf, &n), DS_K_INVALID, "nest deeper");
    omni_value_free(root);
}

/* ---- decoder errors ---- */

TEST(test_decode_malformed)
{
    omni_value_t *v;
    expect_error(omni_decode("x", 1, NULL), DS_K_INVALID, "out is NULL");
    expect_error(omni_decode(NULL, 1, &v), DS_K_INVALID, "buffer is NULL");
    expect_decode_error("", DS_K_INVALID, "truncated at offset 0");
    expect_decode_error("92 01", DS_K_INVALID, "more than the 1 bytes left");
    expect_decode_error("91", DS_K_INVALID, "more than the 0 bytes left");
    expect_decode_error("cd01", DS_K_INVALID, "needs 2 bytes, only 1 remain");
    expect_decode_error("da00", DS_K_INVALID, "truncated at offset 1");
    expect_decode_error("a3 6162", DS_K_INVALID, "needs 3 bytes");
    expect_decode_error("c7 02 05 01", DS_K_INVALID, "needs 3 bytes");
    expect_decode_error("d8 01 00", DS_K_INVALID, "needs 17 bytes");
    expect_decode_error("c1", DS_K_INVALID, "reserved msgpack byte 0xc1 at offset 0");
    expect_decode_error("91 c1", DS_K_INVALID, "0xc1 at offset 1");
    expect_decode_error("01 02", DS_K_INVALID, "1 trailing bytes after the msgpack value");
    /* Counts that could never fit are refused before anything is allocated. */
    expect_decode_error("dd ffffffff 00", DS_K_INVALID, "declares 4294967295 entries");
    expect_decode_error("df ffffffff 0000", DS_K_INVALID, "map at offset 0 declares");
    expect_decode_error("81 00", DS_K_INVALID, "more than the 1 bytes left");
    expect_decode_error("db ffffffff 61", DS_K_INVALID, "needs 4294967295 bytes");
    expect_decode_error("c6 fffffff0", DS_K_INVALID, "needs 4294967280 bytes");
    expect_decode_error("c9 ffffffff 01", DS_K_INVALID, "needs 4294967296 bytes");

    /* 32 nested containers are fine, a 33rd (even an empty one) is not. */
    bytes_t w = {0};
    for (int d = 0; d < OMNI_MAX_DEPTH - 1; d++)
        hex(&w, "91");
    hex(&w, "90");
    assert_int_equal(omni_decode(w.b, w.n, &v), DS_K_OK);
    omni_value_free(v);
    w.n = 0;
    for (int d = 0; d < OMNI_MAX_DEPTH; d++)
        hex(&w, "91");
    hex(&w, "90");
    expect_error(omni_decode(w.b, w.n, &v), DS_K_INVALID, "nest deeper than 32");
    free(w.b);

    /* Every proper prefix of a valid document is rejected. */
    float data[4] = {1, 2, 3, 4};
    uint8_t px[6] = {0};
    omni_value_t *m = sample(data, 4, px);
    void *buf;
    size_t len;
    assert_int_equal(omni_value_encode(m, &buf, &len), DS_K_OK);
    for (size_t cut = 0; cut < len; cut++) {
        v = (omni_value_t *)1;
        assert_int_equal(omni_decode(buf, cut, &v), DS_K_INVALID);
        assert_null(v);
    }
    omni_free(buf);
    omni_value_free(m);
}

static void expect_marker_error(const char *marker, const char *dtype_key, const char *dtype,
                                const char *shape, const char *data, ds_status_t code,
                                const char *needle)
{
    bytes_t w = {0};
    hex(&w, "81");
    fstr(&w, "x");
    marker_map(&w, marker, dtype_key, dtype, shape, data);
    omni_value_t *v = (omni_value_t *)1;
    expect_error(omni_decode(w.b, w.n, &v), code, needle);
    assert_null(v);
    if (strstr(ds_last_error(), "$.x") == NULL)
        fail_msg("message '%s' lacks the path", ds_last_error());
    free(w.b);
}

TEST(test_decode_bad_marker_maps)
{
    const char *T = "__tensor__", *N = "__ndarray__", *I = "__pil_image__";
    expect_marker_error(T, "dtype", NULL, "9102", "c4020102", DS_K_INVALID, "\"dtype\" string");
    expect_marker_error(T, "dtype", "#05", "9102", "c4020102", DS_K_INVALID, "\"dtype\" string");
    expect_marker_error(T, "dtype", "float128", "9101", "c401ff", DS_K_NOT_SUPPORTED,
                        "dtype 'float128' is not supported");
    expect_marker_error(N, "dtype", ">f4", "9101", "c40400000000", DS_K_NOT_SUPPORTED,
                        "dtype '>f4'");
    expect_marker_error(N, "dtype", "float32", "9101", "c40400000000", DS_K_NOT_SUPPORTED,
                        "ndarray dtype 'float32'");
    expect_marker_error(T, "dtype", "uint8", NULL, "c401ff", DS_K_INVALID, "\"shape\" array");
    expect_marker_error(T, "dtype", "uint8", "01", "c401ff", DS_K_INVALID, "\"shape\" array");
    expect_marker_error(T, "dtype", "uint8", "91ff", "c401ff", DS_K_INVALID, "negative entry");
    expect_marker_error(T, "dtype", "uint8", "91cb3ff0000000000000", "c401ff", DS_K_INVALID,
                        "non-integer");
    expect_marker_error(T, "dtype", "uint8", "91cf8000000000000000", "c401ff", DS_K_INVALID,
                        "non-integer");
    expect_marker_error(T, "dtype", "uint8", "9101", NULL, DS_K_INVALID, "\"data\" bytes");
    expect_marker_error(T, "dtype", "uint8", "9101", "a1ff", DS_K_INVALID, "\"data\" bytes");
    expect_marker_error(T, "dtype", "float32", "9102", "c404ffffffff", DS_K_INVALID,
                        "data is 4 bytes, but 2 float32 elements need 8");
    expect_marker_error(I, "mode", NULL, "9101", "c401ff", DS_K_INVALID, "\"mode\" string");
    expect_marker_error(I, "mode", "ABCDEFGHIJKLMNOP", "9101", "c401ff", DS_K_INVALID,
                        "\"mode\" string");
    expect_marker_error(I, "mode", "L", "920202", "c403ffffff", DS_K_INVALID, "need 4");
    /* 65 dimensions. */
    char shape65[2 * 68 + 1] = "dc0041";
    for (int k = 0; k < 65; k++)
        strcat(shape65, "01");
    expect_marker_error(T, "dtype", "uint8", shape65, "c401ff", DS_K_INVALID,
                        "more than 64 dimensions");
    /* Paths name array positions as well. */
    bytes_t w = {0};
    hex(&w, "92 c0");
    marker_map(&w, T, "dtype", "uint8", "9102", "c401ff");
    omni_value_t *v;
    expect_error(omni_decode(w.b, w.n, &v), DS_K_INVALID, "$[1]: tensor data is 1 bytes");
    free(w.b);
}

/* ---- in-place tensor header ---- */

TEST(test_tensor_header_in_place)
{
    int64_t shape[2] = {3, 100};
    size_t hdr, hdr2;
    assert_int_equal(omni_tensor_header_size(OMNI_TENSOR, OMNI_DTYPE_INT32, shape, 2, NULL, &hdr),
                     DS_K_OK);
    size_t total = hdr + 300 * 4;
    uint8_t *buf = malloc(total);
    assert_int_equal(
        omni_tensor_encode_header(OMNI_TENSOR, OMNI_DTYPE_INT32, shape, 2, NULL, buf, total, &hdr2),
        DS_K_OK);
    assert_int_equal(hdr, hdr2);
    int32_t *out = (int32_t *)(buf + hdr);
    for (int k = 0; k < 300; k++)
        memcpy(&out[k], &k, sizeof(k)); /* written in place by the producer */
    /* Same bytes as building and encoding the tensor. */
    int32_t ref[300];
    for (int k = 0; k < 300; k++)
        ref[k] = k;
    omni_value_t *t = omni_value_new_tensor_ref(OMNI_DTYPE_INT32, shape, 2, ref, sizeof(ref));
    void *enc;
    size_t len;
    assert_int_equal(omni_value_encode(t, &enc, &len), DS_K_OK);
    assert_int_equal(len, total);
    assert_memory_equal(enc, buf, total);
    omni_free(enc);
    omni_value_free(t);

    /* An image header, and the error paths. */
    int64_t ishape[3] = {4, 4, 4};
    assert_int_equal(
        omni_tensor_header_size(OMNI_IMAGE, OMNI_DTYPE_INVALID, ishape, 3, "RGBA", &hdr), DS_K_OK);
    expect_error(
        omni_tensor_encode_header(OMNI_TENSOR, OMNI_DTYPE_INT32, shape, 2, NULL, buf, 10, &hdr2),
        DS_K_INVALID, "too small for the header");
    expect_error(omni_tensor_header_size(OMNI_MAP, OMNI_DTYPE_INT32, shape, 2, NULL, &hdr),
                 DS_K_INVALID, "not a tensor");
    expect_error(
        omni_tensor_header_size(OMNI_NDARRAY, OMNI_DTYPE_FLOAT8_E5M2, shape, 2, NULL, &hdr),
        DS_K_INVALID, "numpy has no dtype");
    expect_error(omni_tensor_header_size(OMNI_TENSOR, OMNI_DTYPE_INT32, shape, 2, NULL, NULL),
                 DS_K_INVALID, "NULL argument");
    expect_error(
        omni_tensor_encode_header(OMNI_TENSOR, OMNI_DTYPE_INT32, shape, 2, NULL, NULL, 10, &hdr2),
        DS_K_INVALID, "NULL argument");
    expect_error(
        omni_tensor_encode_header(OMNI_IMAGE, OMNI_DTYPE_UINT8, ishape, 3, "", buf, total, &hdr2),
        DS_K_INVALID, "mode");
    free(buf);
}

/* ---- cost of a big tensor ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Encoding 64 MiB into a warm buffer costs about one memcpy, and decoding is
 * a view: the data pointer lands inside the received buffer. */
TEST(test_big_tensor_one_copy)
{
    const size_t nbytes = 64u << 20;
    int64_t shape[2] = {4096, (int64_t)(nbytes / 4 / 4096)};
    float *src = malloc(nbytes);
    assert_non_null(src);
    for (size_t k = 0; k < nbytes / 4; k++)
        src[k] = (float)k;
    omni_value_t *v = omni_value_new_tensor_ref(OMNI_DTYPE_FLOAT32, shape, 2, src, nbytes);
    size_t size;
    assert_int_equal(omni_value_encoded_size(v, &size), DS_K_OK);
    size_t hdr;
    assert_int_equal(omni_tensor_header_size(OMNI_TENSOR, OMNI_DTYPE_FLOAT32, shape, 2, NULL, &hdr),
                     DS_K_OK);
    assert_int_equal(size, hdr + nbytes);
    assert_true(hdr < 64);
    uint8_t *dst = malloc(size);
    assert_non_null(dst);
    memset(dst, 0, size); /* warm the pages, as an arena is */

    /* Best of three: memcpy and encode_to into the warm buffer; malloc +
     * memcpy and omni_value_encode into fresh memory. */
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int r = 0; r < 3; r++) {
        double t[5];
        void *enc, *fresh;
        size_t len;
        t[0] = now_s();
        memcpy(dst + hdr, src, nbytes);
        t[1] = now_s();
        assert_int_equal(omni_value_encode_to(v, dst, size, &len), DS_K_OK);
        t[2] = now_s();
        assert_int_equal(len, size);
        assert_non_null(fresh = malloc(size));
        memcpy((uint8_t *)fresh + hdr, src, nbytes);
        t[3] = now_s();
        free(fresh);
        double t_alloc = now_s();
        assert_int_equal(omni_value_encode(v, &enc, &len), DS_K_OK);
        t[4] = now_s();
        assert_int_equal(len, size);
        assert_int_equal((uintptr_t)enc % 64, 0);
        assert_memory_equal((const uint8_t *)enc + size - 64, dst + size - 64, 64);
        omni_free(enc);
        double took[4] = {t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t_alloc};
        for (int k = 0; k < 4; k++)
            best[k] = took[k] < best[k] ? took[k] : best[k];
    }
    print_message("64 MiB: memcpy %.2f ms, encode_to %.2f ms, malloc+memcpy %.2f ms, "
                  "omni_value_encode %.2f ms\n",
                  best[0] * 1e3, best[1] * 1e3, best[2] * 1e3, best[3] * 1e3);
    if (best[1] > 3 * best[0] + 0.02)
        fail_msg("encode_to took %.4fs, memcpy %.4fs", best[1], best[0]);
    if (best[3] > 1.5 * best[2] + 0.02)
        fail_msg("omni_value_encode took %.4fs, malloc+memcpy %.4fs", best[3], best[2]);
    double best_copy = best[0];

    omni_value_t *d;
    double t0 = now_s();
    assert_int_equal(omni_decode(dst, size, &d), DS_K_OK);
    double t1 = now_s();
    omni_tensor_view_t tv = view_of(d);
    assert_ptr_equal(tv.data, dst + hdr);
    assert_int_equal(tv.nbytes, nbytes);
    float last;
    memcpy(&last, (const uint8_t *)tv.data + nbytes - 4, sizeof(last));
    assert_true(last == (float)(nbytes / 4 - 1));
    if (t1 - t0 > best_copy / 4 + 0.005)
        fail_msg("decode took %.4fs; memcpy %.4fs: it should not copy", t1 - t0, best_copy);
    omni_value_free(d);
    omni_value_free(v);
    free(dst);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_tables),
        cmocka_unit_test(test_encode_scalars),
        cmocka_unit_test(test_encode_length_boundaries),
        cmocka_unit_test(test_encode_marker_maps),
        cmocka_unit_test(test_round_trip_zero_copy),
        cmocka_unit_test(test_round_trip_edge_values),
        cmocka_unit_test(test_map_set_replaces),
        cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_setter_errors),
        cmocka_unit_test(test_getter_errors),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_decode_malformed),
        cmocka_unit_test(test_decode_bad_marker_maps),
        cmocka_unit_test(test_tensor_header_in_place),
        cmocka_unit_test(test_big_tensor_one_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
