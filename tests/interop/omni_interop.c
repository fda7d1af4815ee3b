/* Interop helper for tests/python/test_serializer_interop.py: lets pytest
 * check libomniconn's msgpack codec against vLLM-Omni's OmniSerializer format
 * as reproduced with python3-msgpack and numpy.
 *
 *   omni_interop encode CASE OUT     build a named payload in C, write its bytes
 *   omni_interop decode IN           decode bytes, print the tree as JSON
 *   omni_interop reencode IN OUT     decode then encode again (must be byte-exact)
 *   omni_interop cases               list the case names
 *
 * decode prints every tensor's dtype, shape and mode, the offset of its data
 * inside the input (a zero-copy view points into it) and its first and last
 * element as C reads them, so Python can check the values C sees. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omni/serializer.h"

static void die(const char *what)
{
    fprintf(stderr, "omni_interop: %s: %s\n", what, ds_last_error());
    exit(1);
}

static void set(omni_value_t *m, const char *k, omni_value_t *v)
{
    if (omni_map_set(m, k, v) != DS_K_OK) die(k);
}

static void push(omni_value_t *a, omni_value_t *v)
{
    if (omni_array_push(a, v) != DS_K_OK) die("push");
}

/* Element i of a pattern every case uses: small, signed, repeatable. */
static double pattern(size_t i)
{
    return (double)((int)(i % 23) - 11) * 0.5;
}

/* A tensor of the given dtype filled from pattern() (raw bit patterns for the
 * 16- and 8-bit floats, which C has no type for). */
static omni_value_t *filled(omni_type_t type, omni_dtype_t dt, const int64_t *shape, size_t ndim)
{
    size_t n = 1;
    for (size_t i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    size_t isz = omni_dtype_size(dt);
    uint8_t *buf = calloc(n ? n : 1, isz);
    for (size_t i = 0; i < n; i++) {
        double p = pattern(i);
        void *at = buf + i * isz;
        switch (dt) {
        case OMNI_DTYPE_BOOL:
            *(uint8_t *)at = (uint8_t)(i % 3 == 0);
            break;
        case OMNI_DTYPE_INT8:
            *(int8_t *)at = (int8_t)(p * 2);
            break;
        case OMNI_DTYPE_UINT8:
            *(uint8_t *)at = (uint8_t)(i * 7);
            break;
        case OMNI_DTYPE_INT16:
            *(int16_t *)at = (int16_t)(p * 1000);
            break;
        case OMNI_DTYPE_UINT16:
            *(uint16_t *)at = (uint16_t)(i * 1000);
            break;
        case OMNI_DTYPE_INT32:
            *(int32_t *)at = (int32_t)(p * 100000);
            break;
        case OMNI_DTYPE_UINT32:
            *(uint32_t *)at = (uint32_t)i * 100000u;
            break;
        case OMNI_DTYPE_INT64:
            *(int64_t *)at = (int64_t)(p * 1e12);
            break;
        case OMNI_DTYPE_UINT64:
            *(uint64_t *)at = (uint64_t)i << 40;
            break;
        case OMNI_DTYPE_FLOAT16:
        case OMNI_DTYPE_BFLOAT16:
            *(uint16_t *)at = (uint16_t)(0x3c00 + i);
            break;
        case OMNI_DTYPE_FLOAT32:
            *(float *)at = (float)p;
            break;
        case OMNI_DTYPE_FLOAT64:
            *(double *)at = p / 3;
            break;
        case OMNI_DTYPE_COMPLEX64:
            ((float *)at)[0] = (float)p, ((float *)at)[1] = (float)i;
            break;
        case OMNI_DTYPE_COMPLEX128:
            ((double *)at)[0] = p, ((double *)at)[1] = 2.0 * (double)i;
            break;
        default:
            *(uint8_t *)at = (uint8_t)(0x30 + i);
            break; /* float8 */
        }
    }
    omni_value_t *v = type == OMNI_TENSOR ? omni_value_new_tensor(dt, shape, ndim, buf, n * isz)
                                          : omni_value_new_ndarray(dt, shape, ndim, buf, n * isz);
    free(buf);
    if (v == NULL) die("tensor");
    return v;
}

static omni_value_t *case_scalars(void)
{
    static const int64_t ints[] = {
        0,         1,  127, 128, 255,  256,  65535,  65536,  4294967295LL, 4294967296LL,
        INT64_MAX, -1, -32, -33, -128, -129, -32768, -32769, INT32_MIN,    (int64_t)INT32_MIN - 1,
        INT64_MIN};
    omni_value_t *m = omni_value_new_map();
    set(m, "nil", omni_value_new_nil());
    set(m, "t", omni_value_new_bool(true));
    set(m, "f", omni_value_new_bool(false));
    omni_value_t *a = omni_value_new_array();
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        push(a, omni_value_new_int(ints[i]));
    set(m, "ints", a);
    set(m, "u64", omni_value_new_uint(UINT64_MAX));
    set(m, "pi", omni_value_new_float(3.141592653589793));
    set(m, "negzero", omni_value_new_float(-0.0));
    set(m, "s", omni_value_new_str("hello"));
    char *big = malloc(70001);
    memset(big, 'z', 70000);
    big[70000] = '\0';
    set(m, "s40", omni_value_new_strn(big, 40));
    set(m, "s300", omni_value_new_strn(big, 300));
    set(m, "s70k", omni_value_new_str(big));
    free(big);
    set(m, "b", omni_value_new_bin("\x00\x01\x02", 3));
    set(m, "uni", omni_value_new_str("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80"));
    omni_value_t *nested = omni_value_new_array();
    push(nested, omni_value_new_array());
    push(nested, omni_value_new_map());
    omni_value_t *deep = omni_value_new_array(), *d2 = omni_value_new_array();
    omni_value_t *d3 = omni_value_new_array();
    push(d3, omni_value_new_int(3));
    push(d2, omni_value_new_int(2));
    push(d2, d3);
    push(deep, omni_value_new_int(1));
    push(deep, d2);
    push(nested, deep);
    set(m, "nested", nested);
    omni_value_t *ik = omni_value_new_map();
    if (omni_map_set_value(ik, omni_value_new_int(1), omni_value_new_str("one")) != DS_K_OK ||
        omni_map_set_value(ik, omni_value_new_int(-2), omni_value_new_str("minus two")) != DS_K_OK)
        die("intkey");
    set(m, "intkey", ik);
    return m;
}

static omni_value_t *case_tensors(void)
{
    static const struct {
        const char *key;
        omni_dtype_t dt;
        size_t ndim;
        int64_t shape[3];
    } t[] = {
        {"hidden", OMNI_DTYPE_FLOAT32, 2, {2, 3}}, {"ids", OMNI_DTYPE_INT64, 1, {5}},
        {"bf16", OMNI_DTYPE_BFLOAT16, 1, {4}},     {"half", OMNI_DTYPE_FLOAT16, 1, {3}},
        {"scalar", OMNI_DTYPE_FLOAT64, 0, {0}},    {"empty", OMNI_DTYPE_FLOAT32, 2, {0, 4}},
        {"mask", OMNI_DTYPE_BOOL, 1, {3}},         {"u8", OMNI_DTYPE_UINT8, 2, {2, 2}},
        {"c64", OMNI_DTYPE_COMPLEX64, 1, {2}},     {"c128", OMNI_DTYPE_COMPLEX128, 1, {2}},
        {"i8", OMNI_DTYPE_INT8, 1, {3}},           {"i16", OMNI_DTYPE_INT16, 1, {3}},
        {"i32", OMNI_DTYPE_INT32, 3, {2, 1, 2}},   {"u16", OMNI_DTYPE_UINT16, 1, {2}},
        {"u32", OMNI_DTYPE_UINT32, 1, {2}},        {"u64", OMNI_DTYPE_UINT64, 1, {2}},
        {"f8", OMNI_DTYPE_FLOAT8_E4M3FN, 1, {2}},  {"f8b", OMNI_DTYPE_FLOAT8_E5M2, 1, {2}},
    };
    omni_value_t *m = omni_value_new_map();
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        set(m, t[i].key, filled(OMNI_TENSOR, t[i].dt, t[i].shape, t[i].ndim));
    return m;
}

static omni_value_t *case_ndarrays(void)
{
    omni_value_t *m = omni_value_new_map();
    int64_t shape[2] = {2, 3};
    for (int d = OMNI_DTYPE_BOOL; d < OMNI_DTYPE_COUNT_; d++) {
        const char *np = omni_dtype_numpy_str((omni_dtype_t)d);
        if (np != NULL) set(m, np + 1, filled(OMNI_NDARRAY, (omni_dtype_t)d, shape, 2));
    }
    return m;
}

static omni_value_t *case_images(void)
{
    uint8_t px[18];
    for (int i = 0; i < 18; i++)
        px[i] = (uint8_t)(i * 13);
    int64_t rgb[3] = {2, 3, 3}, gray[2] = {3, 2};
    omni_value_t *m = omni_value_new_map();
    set(m, "img", omni_value_new_image("RGB", rgb, 3, px, 18));
    set(m, "gray", omni_value_new_image("L", gray, 2, px, 6));
    return m;
}

static omni_value_t *case_big(void)
{
    int64_t shape[2] = {1024, 1024};
    omni_value_t *m = omni_value_new_map();
    set(m, "x", filled(OMNI_TENSOR, OMNI_DTYPE_FLOAT32, shape, 2));
    return m;
}

static omni_value_t *case_mixed_list(void)
{
    int64_t s1[1] = {3}, s2[2] = {1, 2};
    uint8_t px[6] = {1, 2, 3, 4, 5, 6};
    int64_t is[3] = {1, 2, 3};
    omni_value_t *a = omni_value_new_array();
    push(a, filled(OMNI_TENSOR, OMNI_DTYPE_INT32, s1, 1));
    push(a, filled(OMNI_NDARRAY, OMNI_DTYPE_FLOAT64, s2, 2));
    push(a, omni_value_new_image("RGB", is, 3, px, 6));
    push(a, omni_value_new_int(1));
    push(a, omni_value_new_str("a"));
    return a;
}

static const struct {
    const char *name;
    omni_value_t *(*build)(void);
} cases[] = {
    {"scalars", case_scalars}, {"tensors", case_tensors}, {"ndarrays", case_ndarrays},
    {"images", case_images},   {"big", case_big},         {"mixed_list", case_mixed_list},
};

/* ---- JSON output ---- */

static void json_str(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_hex(const void *p, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++)
        printf("%02x", ((const uint8_t *)p)[i]);
    putchar('"');
}

/* One element as C reads it: ints as numbers, floats as hex-float strings,
 * complex as [re, im], 16/8-bit floats as their raw bits. Views into a msgpack
 * buffer are not aligned, so every element is copied out before use. */
static void json_elem(omni_dtype_t dt, const uint8_t *p)
{
    union {
        int8_t i8;
        int16_t i16;
        uint16_t u16;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        float f[2];
        double d[2];
    } e;
    memcpy(&e, p, omni_dtype_size(dt));
    switch (dt) {
    case OMNI_DTYPE_BOOL:
        printf("%d", *p != 0);
        return;
    case OMNI_DTYPE_INT8:
        printf("%d", e.i8);
        return;
    case OMNI_DTYPE_INT16:
        printf("%d", e.i16);
        return;
    case OMNI_DTYPE_UINT16:
    case OMNI_DTYPE_FLOAT16:
    case OMNI_DTYPE_BFLOAT16:
        printf("%u", e.u16);
        return;
    case OMNI_DTYPE_INT32:
        printf("%d", e.i32);
        return;
    case OMNI_DTYPE_UINT32:
        printf("%u", e.u32);
        return;
    case OMNI_DTYPE_INT64:
        printf("%" PRId64, e.i64);
        return;
    case OMNI_DTYPE_UINT64:
        printf("%" PRIu64, e.u64);
        return;
    case OMNI_DTYPE_FLOAT32:
        printf("\"%a\"", (double)e.f[0]);
        return;
    case OMNI_DTYPE_FLOAT64:
        printf("\"%a\"", e.d[0]);
        return;
    case OMNI_DTYPE_COMPLEX64:
        printf("[\"%a\", \"%a\"]", (double)e.f[0], (double)e.f[1]);
        return;
    case OMNI_DTYPE_COMPLEX128:
        printf("[\"%a\", \"%a\"]", e.d[0], e.d[1]);
        return;
    default: /* uint8 and the float8 types */
        printf("%u", *p);
        return;
    }
}

static void dump(const omni_value_t *v, const uint8_t *base)
{
    static const char *types[] = {"nil",   "bool", "int", "float",  "str",     "bin",
                                  "array", "map",  "ext", "tensor", "ndarray", "image"};
    omni_type_t t = omni_value_type(v);
    printf("{\"t\": \"%s\"", types[t]);
    bool b;
    int64_t i;
    uint64_t u;
    double f;
    const char *s;
    const void *p;
    size_t n;
    int8_t et;
    omni_tensor_view_t tv;
    switch (t) {
    case OMNI_NIL:
        break;
    case OMNI_BOOL:
        omni_value_get_bool(v, &b);
        printf(", \"v\": %s", b ? "true" : "false");
        break;
    case OMNI_INT:
        if (omni_value_get_int(v, &i) == DS_K_OK) {
            printf(", \"v\": %" PRId64, i);
        } else {
            omni_value_get_uint(v, &u);
            printf(", \"v\": %" PRIu64, u);
        }
        break;
    case OMNI_FLOAT:
        omni_value_get_float(v, &f);
        printf(", \"hex\": \"%a\"", f);
        break;
    case OMNI_STR:
        omni_value_get_str(v, &s, &n);
        printf(", \"v\": ");
        json_str(s, n);
        break;
    case OMNI_BIN:
        omni_value_get_bin(v, &p, &n);
        printf(", \"hex\": ");
        json_hex(p, n);
        break;
    case OMNI_EXT:
        omni_value_get_ext(v, &et, &p, &n);
        printf(", \"type\": %d, \"hex\": ", et);
        json_hex(p, n);
        break;
    case OMNI_ARRAY:
    case OMNI_MAP:
        printf(", \"v\": [");
        for (size_t k = 0; k < omni_value_len(v); k++) {
            if (k > 0) printf(", ");
            if (t == OMNI_MAP) {
                printf("[");
                dump(omni_map_key_at(v, k), base);
                printf(", ");
                dump(omni_map_value_at(v, k), base);
                printf("]");
            } else {
                dump(omni_array_at(v, k), base);
            }
        }
        printf("]");
        break;
    default:
        omni_value_get_tensor(v, &tv);
        printf(", \"dtype\": \"%s\", \"shape\": [", omni_dtype_torch_name(tv.dtype));
        for (size_t k = 0; k < tv.ndim; k++)
            printf("%s%" PRId64, k ? ", " : "", tv.shape[k]);
        printf("], \"numel\": %zu, \"nbytes\": %zu, \"offset\": %td", tv.numel, tv.nbytes,
               (const uint8_t *)tv.data - base);
        if (tv.mode != NULL) printf(", \"mode\": \"%s\"", tv.mode);
        if (tv.numel > 0) {
            size_t isz = omni_dtype_size(tv.dtype);
            printf(", \"first\": ");
            json_elem(tv.dtype, tv.data);
            printf(", \"last\": ");
            json_elem(tv.dtype, (const uint8_t *)tv.data + (tv.numel - 1) * isz);
        }
        break;
    }
    printf("}");
}

/* ---- files ---- */

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(1);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_value(const omni_value_t *v, const char *path)
{
    void *buf;
    size_t len;
    if (omni_value_encode(v, &buf, &len) != DS_K_OK) die("encode");
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    omni_free(buf);
}

int main(int argc, char **argv)
{
    const size_t n_cases = sizeof(cases) / sizeof(cases[0]);
    if (argc == 2 && strcmp(argv[1], "cases") == 0) {
        for (size_t i = 0; i < n_cases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "encode") == 0) {
        for (size_t i = 0; i < n_cases; i++) {
            if (strcmp(argv[2], cases[i].name) == 0) {
                omni_value_t *v = cases[i].build();
                write_value(v, argv[3]);
                omni_value_free(v);
                return 0;
            }
        }
        fprintf(stderr, "omni_interop: unknown case %s\n", argv[2]);
        return 2;
    }
    if ((argc == 3 && strcmp(argv[1], "decode") == 0) ||
        (argc == 4 && strcmp(argv[1], "reencode") == 0)) {
        size_t len;
        uint8_t *buf = read_all(argv[2], &len);
        omni_value_t *v;
        if (omni_decode(buf, len, &v) != DS_K_OK) {
            fprintf(stderr, "omni_interop: decode: %s\n", ds_last_error());
            free(buf);
            return 3;
        }
        if (argc == 3) {
            dump(v, buf);
            printf("\n");
        } else {
            write_value(v, argv[3]);
        }
        omni_value_free(v);
        free(buf);
        return 0;
    }
    fprintf(stderr, "usage: omni_interop cases | encode CASE OUT | decode IN | reencode IN OUT\n");
    return 2;
}
