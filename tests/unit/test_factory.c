/* Unit tests for the connector layer (omni/connector.h): the factory registry
 * (duplicates, unknown names listing what is registered, constructor
 * failures), and the connector handle around an in-memory test connector:
 * put/get of values and raw payloads, metadata, cleanup, health, argument
 * checks, idempotent close (also while other threads are mid-call), received
 * payloads and key building. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "omni/connector.h"

/* ---- an in-memory connector ---- */

#define MEM_MAX 16

typedef struct {
    char key[128];
    omni_data_kind_t kind;
    uint8_t *data;
    size_t len;
} mem_entry_t;

typedef struct {
    pthread_mutex_t lock;
    mem_entry_t entries[MEM_MAX];
    int64_t capacity;
    bool metadata;
    omni_health_t counts;
    int *closes, *destroys, *releases;
} mem_t;

/* Counters the test reads after the connector is gone. */
static int n_closes, n_destroys, n_releases;

static mem_entry_t *mem_find(mem_t *m, const char *key)
{
    for (int i = 0; i < MEM_MAX; i++) {
        if (m->entries[i].data != NULL && strcmp(m->entries[i].key, key) == 0)
            return &m->entries[i];
    }
    return NULL;
}

static ds_status_t mem_put(void *impl, const char *from, const char *to, const char *put_key,
                           const omni_data_t *data, size_t *size, omni_value_t **metadata)
{
    mem_t *m = impl;
    char key[128];
    ds_status_t st = omni_connector_make_key(put_key, from, to, ':', key, sizeof(key));
    if (st != DS_K_OK) return st;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (data->kind == OMNI_DATA_VALUE) {
        void *enc;
        if ((st = omni_value_encode(data->value, &enc, &len)) != DS_K_OK) return st;
        buf = malloc(len);
        memcpy(buf, enc, len);
        omni_free(enc);
    } else if (data->kind == OMNI_DATA_BYTES) {
        buf = malloc(data->len + 1);
        memcpy(buf, data->bytes, data->len);
        len = data->len;
    } else {
        /* A raw tensor is stored as a lone tensor map, data written in place. */
        const omni_tensor_view_t *t = &data->tensor;
        size_t hdr;
        st = omni_tensor_header_size(OMNI_TENSOR, t->dtype, t->shape, t->ndim, NULL, &hdr);
        if (st != DS_K_OK) return st;
        len = hdr + t->nbytes;
        buf = malloc(len);
        omni_tensor_encode_header(OMNI_TENSOR, t->dtype, t->shape, t->ndim, NULL, buf, len, &hdr);
        memcpy(buf + hdr, t->data, t->nbytes);
    }
    pthread_mutex_lock(&m->lock);
    mem_entry_t *e = mem_find(m, key);
    for (int i = 0; e == NULL && i < m->capacity && i < MEM_MAX; i++) {
        if (m->entries[i].data == NULL) e = &m->entries[i];
    }
    if (e == NULL) {
        pthread_mutex_unlock(&m->lock);
        free(buf);
        return DS_K_OUT_OF_MEMORY;
    }
    free(e->data);
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->kind = data->kind;
    e->data = buf;
    e->len = len;
    m->counts.puts++;
    m->counts.bytes_transferred += len;
    pthread_mutex_unlock(&m->lock);
    *size = len;
    if (m->metadata) {
        *metadata = omni_value_new_map();
        omni_map_set(*metadata, "key", omni_value_new_str(key));
        omni_map_set(*metadata, "data_size", omni_value_new_uint(len));
    }
    return DS_K_OK;
}

static void count_release(void *ctx)
{
    (void)ctx;
    __atomic_add_fetch(&n_releases, 1, __ATOMIC_SEQ_CST);
}

static ds_status_t mem_get(void *impl, const char *from, const char *to, const char *get_key,
                           const omni_value_t *metadata, omni_received_t **out)
{
    mem_t *m = impl;
    char key[128];
    ds_status_t st = omni_connector_make_key(get_key, from, to, ':', key, sizeof(key));
    if (st != DS_K_OK) return st;
    if (metadata != NULL) {
        const char *mk;
        size_t mlen;
        if (omni_value_get_str(omni_map_get(metadata, "key"), &mk, &mlen) != DS_K_OK ||
            mlen != strlen(key) || memcmp(mk, key, mlen) != 0)
            return DS_K_INVALID;
    }
    pthread_mutex_lock(&m->lock);
    mem_entry_t *e = mem_find(m, key);
    m->counts.gets++;
    if (e == NULL) {
        m->counts.not_found++;
        pthread_mutex_unlock(&m->lock);
        return DS_K_NOT_FOUND;
    }
    /* Zero copy: the payload views the stored bytes until released. */
    st = omni_received_new(e->kind, e->data, e->len, count_release, NULL, out);
    pthread_mutex_unlock(&m->lock);
    return st;
}

static ds_status_t mem_cleanup(void *impl, const char *request_id)
{
    mem_t *m = impl;
    size_t n = strlen(request_id);
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < MEM_MAX; i++) {
        mem_entry_t *e = &m->entries[i];
        if (e->data != NULL && strncmp(e->key, request_id, n) == 0 && e->key[n] == ':') {
            free(e->data);
            e->data = NULL;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return DS_K_OK;
}

static void mem_health(void *impl, omni_health_t *out)
{
    mem_t *m = impl;
    pthread_mutex_lock(&m->lock);
    out->puts = m->counts.puts;
    out->gets = m->counts.gets;
    out->bytes_transferred = m->counts.bytes_transferred;
    out->not_found = m->counts.not_found;
    pthread_mutex_unlock(&m->lock);
}

static void mem_close(void *impl)
{
    (void)impl;
    __atomic_add_fetch(&n_closes, 1, __ATOMIC_SEQ_CST);
}

static void mem_destroy(void *impl)
{
    mem_t *m = impl;
    for (int i = 0; i < MEM_MAX; i++)
        free(m->entries[i].data);
    pthread_mutex_destroy(&m->lock);
    free(m);
    n_destroys++;
}

static const omni_connector_ops_t mem_ops = {mem_put,    mem_get,   mem_cleanup,
                                             mem_health, mem_close, mem_destroy};

/* Extras: capacity (int), raw, metadata and fail (bools). */
static ds_status_t mem_create(const omni_connector_spec_t *spec, void *user, omni_connector_t **out)
{
    (void)user;
    bool raw, metadata, fail;
    int64_t capacity;
    ds_status_t st;
    if ((st = omni_spec_get_int(spec, "capacity", MEM_MAX, &capacity)) != DS_K_OK ||
        (st = omni_spec_get_bool(spec, "raw", false, &raw)) != DS_K_OK ||
        (st = omni_spec_get_bool(spec, "metadata", false, &metadata)) != DS_K_OK ||
        (st = omni_spec_get_bool(spec, "fail", false, &fail)) != DS_K_OK)
        return st;
    if (fail) return DS_K_RUNTIME_ERROR; /* no message: the factory uses the code's */
    mem_t *m = calloc(1, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    m->capacity = capacity;
    m->metadata = metadata;
    st = omni_connector_new(spec->name, &mem_ops, raw, m, out);
    if (st != DS_K_OK) mem_destroy(m);
    return st;
}

static ds_status_t null_create(const omni_connector_spec_t *spec, void *user,
                               omni_connector_t **out)
{
    (void)spec;
    (void)user;
    (void)out;
    return DS_K_OK;
}

static void expect_msg(const char *needle)
{
    if (strstr(ds_last_error(), needle) == NULL)
        fail_msg("message '%s' lacks '%s'", ds_last_error(), needle);
}

static omni_connector_t *make(const omni_kv_t *kv, size_t n)
{
    omni_connector_spec_t spec = {"MemConnector", kv, n};
    omni_connector_t *c = NULL;
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_OK);
    assert_non_null(c);
    return c;
}

static int setup(void **state)
{
    (void)state;
    return omni_factory_register("MemConnector", mem_create, NULL) == DS_K_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return omni_factory_unregister("MemConnector") == DS_K_OK ? 0 : -1;
}

/* ---- factory ---- */

static void test_registry(void **state)
{
    (void)state;
    assert_true(omni_factory_is_registered("MemConnector"));
    assert_false(omni_factory_is_registered("Nope"));
    assert_false(omni_factory_is_registered(NULL));
    assert_int_equal(omni_factory_register("MemConnector", mem_create, NULL), DS_K_DUPLICATED);
    expect_msg("connector 'MemConnector' is already registered");
    assert_int_equal(omni_factory_register("Other", null_create, NULL), DS_K_OK);
    char names[256];
    size_t before = omni_factory_list(names, sizeof(names));
    assert_non_null(strstr(names, "MemConnector, Other"));
    assert_int_equal(omni_factory_list(NULL, 0), before);
    char small[5];
    assert_int_equal(omni_factory_list(small, sizeof(small)), before);
    assert_int_equal(strlen(small), 4);

    omni_connector_spec_t spec = {"YuanrongConnectr", NULL, 0};
    omni_connector_t *c = (omni_connector_t *)1;
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_NOT_FOUND);
    assert_null(c);
    expect_msg("unknown connector 'YuanrongConnectr'; registered: ");
    expect_msg("MemConnector, Other");

    assert_int_equal(omni_factory_unregister("Other"), DS_K_OK);
    assert_int_equal(omni_factory_unregister("Other"), DS_K_NOT_FOUND);
    expect_msg("'Other' is not registered");
    assert_int_equal(omni_factory_list(NULL, 0), before - 1);
    assert_int_equal(omni_factory_unregister(NULL), DS_K_INVALID);
    assert_int_equal(omni_factory_register(NULL, mem_create, NULL), DS_K_INVALID);
    assert_int_equal(omni_factory_register("", mem_create, NULL), DS_K_INVALID);
    assert_int_equal(omni_factory_register("X", NULL, NULL), DS_K_INVALID);
}

static void test_create_errors(void **state)
{
    (void)state;
    omni_connector_t *c;
    omni_connector_spec_t spec = {"MemConnector", NULL, 0};
    assert_int_equal(omni_factory_create(&spec, NULL), DS_K_INVALID);
    assert_int_equal(omni_factory_create(NULL, &c), DS_K_INVALID);
    spec.name = "";
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_INVALID);
    expect_msg("no name");
    spec.name = "MemConnector";
    spec.n_extra = 2;
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_INVALID);
    expect_msg("2 extras but no array");

    /* A constructor's code and message come back, prefixed. */
    const omni_kv_t bad[] = {{"capacity", "lots"}};
    spec = (omni_connector_spec_t){"MemConnector", bad, 1};
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_INVALID);
    expect_msg("failed to create connector MemConnector: extra 'capacity' of connector "
               "'MemConnector' is 'lots', not an integer");
    const omni_kv_t fail[] = {{"fail", "true"}};
    spec = (omni_connector_spec_t){"MemConnector", fail, 1};
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_RUNTIME_ERROR);
    assert_null(c);
    expect_msg("failed to create connector MemConnector: runtime error");
    assert_int_equal(omni_factory_register("Null", null_create, NULL), DS_K_OK);
    spec = (omni_connector_spec_t){"Null", NULL, 0};
    assert_int_equal(omni_factory_create(&spec, &c), DS_K_RUNTIME_ERROR);
    expect_msg("returned no connector");
    assert_int_equal(omni_factory_unregister("Null"), DS_K_OK);
}

static void test_connector_new_errors(void **state)
{
    (void)state;
    omni_connector_t *c;
    omni_connector_ops_t partial = mem_ops;
    partial.get = NULL;
    assert_int_equal(omni_connector_new("X", &mem_ops, false, NULL, NULL), DS_K_INVALID);
    assert_int_equal(omni_connector_new(NULL, &mem_ops, false, NULL, &c), DS_K_INVALID);
    assert_null(c);
    assert_int_equal(omni_connector_new("", &mem_ops, false, NULL, &c), DS_K_INVALID);
    assert_int_equal(omni_connector_new("X", NULL, false, NULL, &c), DS_K_INVALID);
    assert_int_equal(omni_connector_new("X", &partial, false, NULL, &c), DS_K_INVALID);
    expect_msg("connector 'X' lacks put, get, cleanup or health");
    assert_null(omni_connector_name(NULL));
    assert_false(omni_connector_supports_raw_data(NULL));
}

/* ---- put and get ---- */

static void test_put_get_value(void **state)
{
    (void)state;
    omni_connector_t *c = make(NULL, 0);
    assert_string_equal(omni_connector_name(c), "MemConnector");
    assert_false(omni_connector_supports_raw_data(c));
    float hidden[4] = {1, 2, 3, 4};
    int64_t shape[2] = {2, 2};
    omni_value_t *v = omni_value_new_map();
    assert_int_equal(
        omni_map_set(v, "hidden",
                     omni_value_new_tensor_ref(OMNI_DTYPE_FLOAT32, shape, 2, hidden, 16)),
        DS_K_OK);
    assert_int_equal(omni_map_set(v, "finished", omni_value_new_bool(true)), DS_K_OK);
    size_t expect, size = 0;
    assert_int_equal(omni_value_encoded_size(v, &expect), DS_K_OK);
    omni_value_t *md = (omni_value_t *)1;
    omni_data_t d = omni_data_value(v);
    assert_int_equal(omni_connector_put(c, "0", "1", "req-1", &d, &size, &md), DS_K_OK);
    assert_int_equal(size, expect);
    assert_null(md); /* no metadata hand-off */

    omni_received_t *r = NULL;
    n_releases = 0;
    assert_int_equal(omni_connector_get(c, "0", "1", "req-1", NULL, &r), DS_K_OK);
    assert_int_equal(omni_received_kind(r), OMNI_DATA_VALUE);
    assert_int_equal(omni_received_size(r), size);
    const omni_value_t *got, *again;
    assert_int_equal(omni_received_value(r, &got), DS_K_OK);
    assert_int_equal(omni_received_value(r, &again), DS_K_OK);
    assert_ptr_equal(got, again);
    omni_tensor_view_t tv;
    assert_int_equal(omni_value_get_tensor(omni_map_get(got, "hidden"), &tv), DS_K_OK);
    assert_memory_equal(tv.data, hidden, 16);
    const uint8_t *raw = omni_received_data(r);
    assert_true((const uint8_t *)tv.data > raw && (const uint8_t *)tv.data < raw + size);
    assert_int_equal(omni_received_tensor(r, &tv), DS_K_INVALID); /* the root is a map */
    omni_received_free(r);
    assert_int_equal(n_releases, 1);

    /* Other stages or keys are different entries. */
    assert_int_equal(omni_connector_get(c, "1", "0", "req-1", NULL, &r), DS_K_NOT_FOUND);
    assert_null(r);
    assert_int_equal(omni_connector_get(c, "0", "1", "req-2", NULL, &r), DS_K_NOT_FOUND);
    /* Size and metadata outputs are optional. */
    assert_int_equal(omni_connector_put(c, "0", "1", "req-3", &d, NULL, NULL), DS_K_OK);
    omni_value_free(v);
    omni_connector_free(c);
}

/* Without a raw path, bytes and tensors travel as values; with one, as is. */
static void test_raw_payloads(void **state)
{
    (void)state;
    int16_t ids[3] = {7, 8, 9};
    int64_t shape[1] = {3};
    omni_tensor_view_t t = {OMNI_DTYPE_INT16, 1, shape, 3, ids, sizeof(ids), NULL};
    omni_data_t bytes = omni_data_bytes("hello", 5);
    omni_data_t tensor = omni_data_tensor(&t);
    for (int raw = 0; raw <= 1; raw++) {
        const omni_kv_t kv[] = {{"raw", raw ? "on" : "off"}};
        omni_connector_t *c = make(kv, 1);
        assert_int_equal(omni_connector_supports_raw_data(c), raw);
        size_t size;
        assert_int_equal(omni_connector_put(c, "0", "1", "b", &bytes, &size, NULL), DS_K_OK);
        assert_int_equal(size, raw ? 5 : 7); /* a bin adds 2 header bytes */
        assert_int_equal(omni_connector_put(c, "0", "1", "t", &tensor, &size, NULL), DS_K_OK);

        omni_received_t *r;
        assert_int_equal(omni_connector_get(c, "0", "1", "b", NULL, &r), DS_K_OK);
        const omni_value_t *v;
        if (raw) {
            assert_int_equal(omni_received_kind(r), OMNI_DATA_BYTES);
            assert_memory_equal(omni_received_data(r), "hello", 5);
            assert_int_equal(omni_received_value(r, &v), DS_K_INVALID);
            expect_msg("raw bytes");
        } else {
            const void *p;
            size_t n;
            assert_int_equal(omni_received_kind(r), OMNI_DATA_VALUE);
            assert_int_equal(omni_received_value(r, &v), DS_K_OK);
            assert_int_equal(omni_value_get_bin(v, &p, &n), DS_K_OK);
            assert_int_equal(n, 5);
            assert_memory_equal(p, "hello", 5);
        }
        omni_received_free(r);

        assert_int_equal(omni_connector_get(c, "0", "1", "t", NULL, &r), DS_K_OK);
        assert_int_equal(omni_received_kind(r), raw ? OMNI_DATA_TENSOR : OMNI_DATA_VALUE);
        omni_tensor_view_t got;
        assert_int_equal(omni_received_tensor(r, &got), DS_K_OK);
        assert_int_equal(got.dtype, OMNI_DTYPE_INT16);
        assert_int_equal(got.shape[0], 3);
        assert_memory_equal(got.data, ids, sizeof(ids));
        omni_received_free(r);
        omni_connector_free(c);
    }
}

static void test_metadata(void **state)
{
    (void)state;
    const omni_kv_t kv[] = {{"metadata", "true"}};
    omni_connector_t *c = make(kv, 1);
    omni_value_t *v = omni_value_new_str("payload");
    omni_data_t d = omni_data_value(v);
    omni_value_t *md = NULL;
    size_t size;
    assert_int_equal(omni_connector_put(c, "0", "1", "r", &d, &size, &md), DS_K_OK);
    assert_non_null(md);
    uint64_t ds;
    assert_int_equal(omni_value_get_uint(omni_map_get(md, "data_size"), &ds), DS_K_OK);
    assert_int_equal(ds, size);
    omni_received_t *r;
    assert_int_equal(omni_connector_get(c, "0", "1", "r", md, &r), DS_K_OK);
    omni_received_free(r);
    /* Metadata from another edge is refused by the connector. */
    assert_int_equal(omni_connector_get(c, "0", "2", "r", md, &r), DS_K_INVALID);
    /* The handle insists metadata is a map. */
    assert_int_equal(omni_connector_get(c, "0", "1", "r", v, &r), DS_K_INVALID);
    expect_msg("metadata must be a map");
    /* Metadata nobody asked for is freed by the handle (ASan checks). */
    assert_int_equal(omni_connector_put(c, "0", "1", "r", &d, &size, NULL), DS_K_OK);
    omni_value_free(md);
    omni_value_free(v);
    omni_connector_free(c);
}

static void test_cleanup_and_health(void **state)
{
    (void)state;
    omni_connector_t *c = make(NULL, 0);
    omni_value_t *v = omni_value_new_int(1);
    omni_data_t d = omni_data_value(v);
    assert_int_equal(omni_connector_put(c, "0", "1", "a", &d, NULL, NULL), DS_K_OK);
    assert_int_equal(omni_connector_put(c, "1", "2", "a", &d, NULL, NULL), DS_K_OK);
    assert_int_equal(omni_connector_put(c, "0", "1", "ab", &d, NULL, NULL), DS_K_OK);
    assert_int_equal(omni_connector_cleanup(c, "a"), DS_K_OK);
    omni_received_t *r;
    assert_int_equal(omni_connector_get(c, "0", "1", "a", NULL, &r), DS_K_NOT_FOUND);
    assert_int_equal(omni_connector_get(c, "1", "2", "a", NULL, &r), DS_K_NOT_FOUND);
    assert_int_equal(omni_connector_get(c, "0", "1", "ab", NULL, &r), DS_K_OK);
    omni_received_free(r);
    assert_int_equal(omni_connector_cleanup(c, ""), DS_K_INVALID);
    assert_int_equal(omni_connector_cleanup(c, NULL), DS_K_INVALID);
    expect_msg("request id is empty");

    omni_health_t h;
    assert_int_equal(omni_connector_health(c, &h), DS_K_OK);
    assert_true(h.healthy);
    assert_string_equal(h.status, "healthy");
    assert_int_equal(h.puts, 3);
    assert_int_equal(h.gets, 3);
    assert_int_equal(h.not_found, 2);
    assert_int_equal(h.bytes_transferred, 3);
    assert_int_equal(omni_connector_health(c, NULL), DS_K_INVALID);
    assert_int_equal(omni_connector_health(NULL, &h), DS_K_INVALID);
    omni_value_free(v);
    omni_connector_free(c);
}

static void test_argument_errors(void **state)
{
    (void)state;
    omni_connector_t *c = make(NULL, 0);
    omni_value_t *v = omni_value_new_int(1);
    omni_data_t d = omni_data_value(v);
    omni_received_t *r;
    assert_int_equal(omni_connector_put(NULL, "0", "1", "k", &d, NULL, NULL), DS_K_INVALID);
    expect_msg("connector is NULL");
    assert_int_equal(omni_connector_put(c, NULL, "1", "k", &d, NULL, NULL), DS_K_INVALID);
    expect_msg("from_stage is NULL");
    assert_int_equal(omni_connector_put(c, "0", NULL, "k", &d, NULL, NULL), DS_K_INVALID);
    expect_msg("to_stage is NULL");
    assert_int_equal(omni_connector_put(c, "0", "1", NULL, &d, NULL, NULL), DS_K_INVALID);
    expect_msg("key is NULL");
    assert_int_equal(omni_connector_put(c, "0", "1", "", &d, NULL, NULL), DS_K_INVALID);
    expect_msg("key is empty");
    assert_int_equal(omni_connector_put(c, "0", "1", "k", NULL, NULL, NULL), DS_K_INVALID);
    expect_msg("data is NULL");
    omni_data_t bad = omni_data_value(NULL);
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &bad, NULL, NULL), DS_K_INVALID);
    expect_msg("value is NULL");
    bad = omni_data_bytes(NULL, 3);
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &bad, NULL, NULL), DS_K_INVALID);
    expect_msg("bytes are NULL");
    bad.kind = (omni_data_kind_t)7;
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &bad, NULL, NULL), DS_K_INVALID);
    expect_msg("unknown payload kind 7");
    int64_t shape[1] = {2};
    float f[2] = {0};
    omni_tensor_view_t t = {OMNI_DTYPE_FLOAT32, 1, shape, 2, f, 8, "RGB"};
    bad = omni_data_tensor(&t);
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &bad, NULL, NULL), DS_K_INVALID);
    expect_msg("a raw tensor has no mode");
    t.mode = NULL;
    t.data = NULL;
    bad = omni_data_tensor(&t);
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &bad, NULL, NULL), DS_K_INVALID);
    expect_msg("tensor data is NULL");
    t.data = f;
    t.nbytes = 4;
    bad = omni_data_tensor(&t);
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &bad, NULL, NULL), DS_K_INVALID);
    expect_msg("need 8");
    /* The connector's own failure comes back unchanged. */
    char long_key[200];
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    size_t size = 99;
    assert_int_equal(omni_connector_put(c, "0", "1", long_key, &d, &size, NULL), DS_K_INVALID);
    assert_int_equal(size, 0);
    expect_msg("does not fit in 128 bytes");

    assert_int_equal(omni_connector_get(c, "0", "1", "k", NULL, NULL), DS_K_INVALID);
    expect_msg("out is NULL");
    assert_int_equal(omni_connector_get(c, "0", "1", "", NULL, &r), DS_K_INVALID);
    assert_int_equal(omni_connector_get(NULL, "0", "1", "k", NULL, &r), DS_K_INVALID);
    assert_int_equal(omni_connector_cleanup(NULL, "k"), DS_K_INVALID);
    omni_value_free(v);
    omni_connector_free(c);
}

/* ---- close ---- */

static void test_close_is_idempotent(void **state)
{
    (void)state;
    n_closes = n_destroys = 0;
    omni_connector_t *c = make(NULL, 0);
    omni_value_t *v = omni_value_new_int(1);
    omni_data_t d = omni_data_value(v);
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &d, NULL, NULL), DS_K_OK);
    omni_connector_close(c);
    omni_connector_close(c);
    assert_int_equal(n_closes, 1);
    omni_received_t *r;
    assert_int_equal(omni_connector_put(c, "0", "1", "k", &d, NULL, NULL), DS_K_NOT_READY);
    expect_msg("connector 'MemConnector' is closed");
    assert_int_equal(omni_connector_get(c, "0", "1", "k", NULL, &r), DS_K_NOT_READY);
    assert_int_equal(omni_connector_cleanup(c, "k"), DS_K_NOT_READY);
    omni_health_t h;
    assert_int_equal(omni_connector_health(c, &h), DS_K_OK);
    assert_false(h.healthy);
    assert_string_equal(h.status, "closed");
    assert_int_equal(h.puts, 1); /* counters survive close */
    omni_connector_free(c);
    assert_int_equal(n_closes, 1);
    assert_int_equal(n_destroys, 1);
    omni_connector_close(NULL);
    omni_connector_free(NULL);
    /* free closes a connector that was never closed. */
    c = make(NULL, 0);
    omni_connector_free(c);
    assert_int_equal(n_closes, 2);
    assert_int_equal(n_destroys, 2);
    omni_value_free(v);
}

typedef struct {
    omni_connector_t *c;
    int ok, refused, unexpected;
} worker_t;

static void *hammer(void *arg)
{
    worker_t *w = arg;
    omni_value_t *v = omni_value_new_int(42);
    omni_data_t d = omni_data_value(v);
    char key[32];
    snprintf(key, sizeof(key), "w%p", (void *)w);
    for (;;) {
        omni_received_t *r;
        ds_status_t st = omni_connector_put(w->c, "0", "1", key, &d, NULL, NULL);
        if (st == DS_K_OK) st = omni_connector_get(w->c, "0", "1", key, NULL, &r);
        if (st == DS_K_NOT_READY) {
            w->refused++;
            break;
        }
        if (st != DS_K_OK) { /* cmocka's asserts must stay on the main thread */
            w->unexpected++;
            break;
        }
        omni_received_free(r);
        w->ok++;
    }
    omni_value_free(v);
    return NULL;
}

/* close waits for calls in flight; every later call is refused. */
static void test_close_while_busy(void **state)
{
    (void)state;
    n_closes = 0;
    omni_connector_t *c = make(NULL, 0);
    worker_t w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_t){c, 0, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &w[i]), 0);
    }
    usleep(20000);
    omni_connector_close(c);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].refused, 1);
        assert_int_equal(w[i].unexpected, 0);
    }
    assert_int_equal(n_closes, 1);
    omni_connector_free(c);
}

/* ---- received payloads and keys ---- */

static void test_received_api(void **state)
{
    (void)state;
    omni_received_t *r;
    n_releases = 0;
    assert_int_equal(omni_received_new((omni_data_kind_t)9, "x", 1, count_release, NULL, &r),
                     DS_K_INVALID);
    assert_int_equal(n_releases, 1); /* released on failure, so nothing leaks */
    assert_int_equal(omni_received_new(OMNI_DATA_BYTES, NULL, 1, count_release, NULL, &r),
                     DS_K_INVALID);
    assert_int_equal(omni_received_new(OMNI_DATA_BYTES, "x", 1, count_release, NULL, NULL),
                     DS_K_INVALID);
    assert_int_equal(n_releases, 3);
    assert_int_equal(omni_received_new(OMNI_DATA_BYTES, NULL, 0, NULL, NULL, &r), DS_K_OK);
    assert_int_equal(omni_received_size(r), 0);
    assert_non_null(omni_received_data(r));
    omni_received_free(r);

    char src[3] = {(char)0x92, 1, 2};
    assert_int_equal(omni_received_copy(OMNI_DATA_VALUE, src, 3, &r), DS_K_OK);
    src[1] = 5; /* the copy is independent */
    const omni_value_t *v;
    assert_int_equal(omni_received_value(r, &v), DS_K_OK);
    int64_t i;
    assert_int_equal(omni_value_get_int(omni_array_at(v, 0), &i), DS_K_OK);
    assert_int_equal(i, 1);
    omni_received_free(r);
    assert_int_equal(omni_received_copy(OMNI_DATA_VALUE, NULL, 3, &r), DS_K_INVALID);
    assert_int_equal(omni_received_copy(OMNI_DATA_VALUE, "\xc1", 1, &r), DS_K_OK);
    assert_int_equal(omni_received_value(r, &v), DS_K_INVALID);
    expect_msg("reserved msgpack byte");
    assert_int_equal(omni_received_value(r, NULL), DS_K_INVALID);
    assert_int_equal(omni_received_value(NULL, &v), DS_K_INVALID);
    omni_received_free(r);
    omni_received_free(NULL);
}

static void test_make_key(void **state)
{
    (void)state;
    char buf[32];
    assert_int_equal(omni_connector_make_key("req-1", "0", "1", ':', buf, sizeof(buf)), DS_K_OK);
    assert_string_equal(buf, "req-1:0_1");
    assert_int_equal(omni_connector_make_key("req-1", "thinker", "talker", '@', buf, sizeof(buf)),
                     DS_K_OK);
    assert_string_equal(buf, "req-1@thinker_talker");
    assert_int_equal(omni_connector_make_key("req-1", "0", "1", ':', buf, 9), DS_K_INVALID);
    expect_msg("'req-1:0_1' does not fit in 9 bytes");
    assert_int_equal(omni_connector_make_key("req-1", "0", "1", ':', buf, 10), DS_K_OK);
    assert_int_equal(omni_connector_make_key(NULL, "0", "1", ':', buf, 10), DS_K_INVALID);
    assert_int_equal(omni_connector_make_key("k", "0", "1", ':', NULL, 10), DS_K_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_connector_new_errors),
        cmocka_unit_test(test_put_get_value),
        cmocka_unit_test(test_raw_payloads),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_cleanup_and_health),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_close_is_idempotent),
        cmocka_unit_test(test_close_while_busy),
        cmocka_unit_test(test_received_api),
        cmocka_unit_test(test_make_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
