/* The KV event publisher.
 *
 * Format (vLLM's vllm/distributed/kv_events.py, which routers decode with
 * msgspec): each message is three ZMQ frames, the topic, an 8-byte
 * big-endian sequence number and a msgpack payload, the batch
 * [timestamp (float seconds), [event, ...], data_parallel_rank]. An event is
 * a tagged array: ["BlockStored", [hash], parent_block_hash (nil),
 * token_ids ([]), block_size, lora_id (nil), medium ("CPU")],
 * ["BlockRemoved", [hash], medium] or ["AllBlocksCleared"]. A key's hash is
 * the low 64 bits of the chunk hash in a vLLM-Ascend pool key
 * ("...@cache_family:<family>@<hex>[@<digits>]", as Yuanrong parses it),
 * and otherwise the key's bytes (vLLM's ExternalBlockHash is int or bytes).
 *
 * Threads: the store's hook runs on the event loop and only queues the key
 * (a bounded queue of queue_capacity events: past it events are dropped and
 * counted, the loop never waits); the publisher thread owns the ZMQ socket,
 * drains the queue in batches and sends. Lock: ev->mu guards the queue only
 * (src/worker/THREADS.md). */
#include "worker/core/kv_events.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/log.h"

#define KV_EVENTS_BATCH_MAX 1024

typedef struct {
    uint8_t kind; /* 0 stored, 1 removed, 2 all cleared */
    uint16_t keylen;
    char *key;
} kv_ev_t;

struct ds_kv_events {
    void *zctx, *sock;
    char topic[128];
    char endpoint[256];
    uint32_t block_size, dp_rank, capacity;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kv_ev_t *q; /* ring of capacity entries */
    uint32_t head, count;
    bool stopping;
    uint64_t seq, dropped, published;
};

static void enqueue(ds_kv_events_t *ev, uint8_t kind, const char *key, size_t keylen)
{
    char *copy = NULL;
    if (keylen) {
        copy = malloc(keylen);
        if (copy == NULL) return;
        memcpy(copy, key, keylen);
    }
    pthread_mutex_lock(&ev->mu);
    if (ev->count == ev->capacity) {
        ev->dropped++;
        pthread_mutex_unlock(&ev->mu);
        free(copy);
        return;
    }
    kv_ev_t *e = &ev->q[(ev->head + ev->count) % ev->capacity];
    e->kind = kind;
    e->keylen = (uint16_t)keylen;
    e->key = copy;
    ev->count++;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
}

static void on_store_event(void *ctx, ds_store_ev_t kind, const ds_obj_t *o)
{
    enqueue(ctx, kind == DS_STORE_EV_STORED ? 0 : 1, o->key, o->keylen);
}

/* The low 64 bits of the chunk hash of a pool key, as Yuanrong reads it. */
static bool pool_key_hash(const char *k, size_t n, uint64_t *out)
{
    static const char fam[] = "@cache_family:";
    const char *end = k + n, *p = NULL;
    for (const char *s = k; s + sizeof fam - 1 <= end; s++)
        if (memcmp(s, fam, sizeof fam - 1) == 0) {
            p = s + sizeof fam - 1;
            break;
        }
    if (p == NULL) return false;
    const char *b = memchr(p, '@', (size_t)(end - p));
    if (b == NULL) return false;
    b++;
    const char *e = memchr(b, '@', (size_t)(end - b));
    if (e == NULL) {
        e = end;
    } else {
        if (e + 1 == end) return false;
        for (const char *d = e + 1; d < end; d++)
            if (!isdigit((unsigned char)*d)) return false;
    }
    if (e == b) return false;
    for (const char *d = b; d < e; d++)
        if (!isxdigit((unsigned char)*d)) return false;
    const char *lo = e - b > 16 ? e - 16 : b;
    uint64_t v = 0;
    for (const char *d = lo; d < e; d++)
        v = v << 4 | (uint64_t)(isdigit((unsigned char)*d) ? *d - '0' : (tolower(*d) - 'a' + 10));
    *out = v;
    return true;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_event(ds_kv_events_t *ev, msgpack_packer *pk, const kv_ev_t *e)
{
    if (e->kind == 2) {
        msgpack_pack_array(pk, 1);
        pack_str(pk, "AllBlocksCleared");
        return;
    }
    msgpack_pack_array(pk, e->kind == 0 ? 7 : 3);
    pack_str(pk, e->kind == 0 ? "BlockStored" : "BlockRemoved");
    msgpack_pack_array(pk, 1);
    uint64_t h;
    if (pool_key_hash(e->key, e->keylen, &h)) {
        msgpack_pack_uint64(pk, h);
    } else {
        msgpack_pack_bin(pk, e->keylen);
        msgpack_pack_bin_body(pk, e->key, e->keylen);
    }
    if (e->kind == 0) {
        msgpack_pack_nil(pk);      /* parent_block_hash */
        msgpack_pack_array(pk, 0); /* token_ids */
        msgpack_pack_uint32(pk, ev->block_size);
        msgpack_pack_nil(pk); /* lora_id */
    }
    pack_str(pk, "CPU"); /* medium: the worker's host memory */
}

static void send_batch(ds_kv_events_t *ev, const kv_ev_t *batch, uint32_t n)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    msgpack_pack_array(&pk, n);
    for (uint32_t i = 0; i < n; i++)
        pack_event(ev, &pk, &batch[i]);
    msgpack_pack_uint32(&pk, ev->dp_rank);
    uint8_t seq[8];
    uint64_t s = ev->seq++;
    for (int i = 0; i < 8; i++)
        seq[i] = (uint8_t)(s >> (56 - 8 * i));
    if (zmq_send(ev->sock, ev->topic, strlen(ev->topic), ZMQ_SNDMORE) < 0 ||
        zmq_send(ev->sock, seq, sizeof seq, ZMQ_SNDMORE) < 0 ||
        zmq_send(ev->sock, sb.data, sb.size, 0) < 0)
        DS_LOG_WARN("kv events: sending a batch of %u events failed: %s", n,
                    zmq_strerror(zmq_errno()));
    else
        ev->published += n;
    msgpack_sbuffer_destroy(&sb);
}

static void *publisher_main(void *arg)
{
    ds_kv_events_t *ev = arg;
    kv_ev_t *batch = malloc(KV_EVENTS_BATCH_MAX * sizeof *batch);
    for (;;) {
        pthread_mutex_lock(&ev->mu);
        while (ev->count == 0 && !ev->stopping)
            pthread_cond_wait(&ev->cv, &ev->mu);
        if (ev->count == 0 && ev->stopping) {
            pthread_mutex_unlock(&ev->mu);
            break;
        }
        uint32_t n = 0;
        while (batch && ev->count > 0 && n < KV_EVENTS_BATCH_MAX) {
            batch[n++] = ev->q[ev->head];
            ev->head = (ev->head + 1) % ev->capacity;
            ev->count--;
        }
        pthread_mutex_unlock(&ev->mu);
        if (batch) send_batch(ev, batch, n);
        for (uint32_t i = 0; i < n; i++)
            free(batch[i].key);
    }
    free(batch);
    return NULL;
}

/* Reads an unsigned field: absent keeps *v; anything but a non-negative
 * integer up to max is an error naming the field. */
static int read_uint(const cJSON *root, const char *name, uint32_t *v, uint32_t min, uint32_t max,
                     char *err, size_t cap)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (f == NULL) return 0;
    double d = cJSON_IsNumber(f) ? f->valuedouble : -1;
    if (d < min || d > max || d != (double)(uint64_t)d) {
        snprintf(err, cap, "kv_events_config.%s must be an integer in [%u, %u]", name, min, max);
        return -1;
    }
    *v = (uint32_t)d;
    return 0;
}

static int read_str(const cJSON *root, const char *name, char *dst, size_t dcap, bool required,
                    char *err, size_t cap)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (f == NULL && !required) return 0;
    if (f == NULL || !cJSON_IsString(f) || (required && f->valuestring[0] == '\0')) {
        snprintf(err, cap, "kv_events_config.%s %s", name,
                 f == NULL  ? "is required"
                 : required ? "must be a non-empty string"
                            : "must be a string");
        return -1;
    }
    if (strlen(f->valuestring) >= dcap) {
        snprintf(err, cap, "kv_events_config.%s is longer than %zu bytes", name, dcap - 1);
        return -1;
    }
    if (dst) snprintf(dst, dcap, "%s", f->valuestring);
    return 0;
}

static int parse(ds_kv_events_t *ev, const char *json, char *err, size_t cap)
{
    cJSON *root = cJSON_Parse(json);
    if (root == NULL || !cJSON_IsObject(root)) {
        snprintf(err, cap,
                 "kv_events_config must be a JSON object, e.g. "
                 "{\"bind_endpoint\":\"tcp://127.0.0.1:5557\",\"backend_id\":\"worker-0\"}");
        cJSON_Delete(root);
        return -1;
    }
    char backend[256], scratch[256];
    bool legacy_ok = true;
    int rc = read_str(root, "bind_endpoint", ev->endpoint, sizeof ev->endpoint, true, err, cap);
    if (rc == 0) rc = read_str(root, "backend_id", backend, sizeof backend, true, err, cap);
    if (rc == 0) rc = read_str(root, "topic", ev->topic, sizeof ev->topic, false, err, cap);
    /* Yuanrong's other fields, checked for type: vLLM's batches carry none. */
    const char *strs[] = {"model_name", "tenant_id", "additional_salt", "lora_name"};
    for (size_t i = 0; rc == 0 && i < sizeof strs / sizeof strs[0]; i++)
        rc = read_str(root, strs[i], scratch, sizeof scratch, false, err, cap);
    const cJSON *legacy = cJSON_GetObjectItemCaseSensitive(root, "emit_legacy_compat_fields");
    if (legacy && !cJSON_IsBool(legacy)) legacy_ok = false;
    if (rc == 0 && !legacy_ok) {
        snprintf(err, cap, "kv_events_config.emit_legacy_compat_fields must be a boolean");
        rc = -1;
    }
    if (rc == 0) rc = read_uint(root, "block_size", &ev->block_size, 0, UINT32_MAX, err, cap);
    if (rc == 0) rc = read_uint(root, "dp_rank", &ev->dp_rank, 0, UINT32_MAX, err, cap);
    if (rc == 0) rc = read_uint(root, "queue_capacity", &ev->capacity, 1, 1u << 24, err, cap);
    cJSON_Delete(root);
    return rc;
}

static void free_ev(ds_kv_events_t *ev)
{
    if (ev->sock) zmq_close(ev->sock);
    if (ev->zctx) zmq_ctx_term(ev->zctx);
    if (ev->q)
        for (uint32_t i = 0; i < ev->count; i++)
            free(ev->q[(ev->head + i) % ev->capacity].key);
    free(ev->q);
    pthread_mutex_destroy(&ev->mu);
    pthread_cond_destroy(&ev->cv);
    free(ev);
}

int ds__kv_events_start(const char *json, ds_store_t *store, ds_kv_events_t **out, char *err,
                        size_t err_cap)
{
    *out = NULL;
    if (json == NULL || json[0] == '\0') return 0;
    ds_kv_events_t *ev = calloc(1, sizeof *ev);
    if (ev == NULL) {
        snprintf(err, err_cap, "out of memory for the KV event publisher");
        return -1;
    }
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    ev->capacity = 65536;
    if (parse(ev, json, err, err_cap) != 0) {
        free_ev(ev);
        return -1;
    }
    ev->q = calloc(ev->capacity, sizeof *ev->q);
    ev->zctx = zmq_ctx_new();
    ev->sock = ev->zctx ? zmq_socket(ev->zctx, ZMQ_PUB) : NULL;
    int linger = 1000;
    if (ev->q == NULL || ev->sock == NULL ||
        zmq_setsockopt(ev->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_bind(ev->sock, ev->endpoint) != 0) {
        snprintf(err, err_cap, "kv_events_config.bind_endpoint '%s': cannot bind: %s", ev->endpoint,
                 ev->q == NULL ? "out of memory" : zmq_strerror(zmq_errno()));
        free_ev(ev);
        return -1;
    }
    if (pthread_create(&ev->thread, NULL, publisher_main, ev) != 0) {
        snprintf(err, err_cap, "cannot start the KV event publisher thread");
        free_ev(ev);
        return -1;
    }
    enqueue(ev, 2, NULL, 0);
    ds__store_set_event_hook(store, on_store_event, ev);
    DS_LOG_INFO("kv events: publishing on %s", ev->endpoint);
    *out = ev;
    return 0;
}

void ds__kv_events_stop(ds_kv_events_t *ev, ds_store_t *store)
{
    if (ev == NULL) return;
    if (store) ds__store_set_event_hook(store, NULL, NULL);
    pthread_mutex_lock(&ev->mu);
    ev->stopping = true;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
    pthread_join(ev->thread, NULL);
    if (ev->dropped)
        DS_LOG_WARN("kv events: %llu events dropped (queue_capacity %u)",
                    (unsigned long long)ev->dropped, ev->capacity);
    free_ev(ev);
}
