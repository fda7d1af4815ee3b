/* etcd v3 JSON gateway client (see etcd.h). Keys and values travel base64
 * encoded, as the gateway requires; numbers (lease ids, TTLs) come back as
 * JSON strings. */
#include "common/etcd.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ENDPOINTS 8

struct ds_etcd {
    char *endpoints[MAX_ENDPOINTS];
    int n;
    int current;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const void *src, size_t len)
{
    const uint8_t *s = src;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (out == NULL) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < len) v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < len) v |= s[i + 2];
        out[o++] = b64chars[(v >> 18) & 63];
        out[o++] = b64chars[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64chars[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static char *b64_decode(const char *s)
{
    size_t len = strlen(s);
    char *out = malloc(len / 4 * 3 + 1);
    if (out == NULL) return NULL;
    size_t o = 0;
    uint32_t v = 0;
    int bits = 0;
    for (size_t i = 0; i < len && s[i] != '='; i++) {
        const char *p = strchr(b64chars, s[i]);
        if (p == NULL || s[i] == '\0') continue;
        v = (v << 6) | (uint32_t)(p - b64chars);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((v >> bits) & 0xff);
        }
    }
    out[o] = '\0';
    return out;
}

ds_etcd_t *ds__etcd_new(const char *endpoints, char *err, size_t err_cap)
{
    pthread_once(&curl_once, curl_init_once);
    ds_etcd_t *e = calloc(1, sizeof(*e));
    char *copy = strdup(endpoints ? endpoints : "");
    if (e == NULL || copy == NULL) {
        free(e);
        free(copy);
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && e->n < MAX_ENDPOINTS;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (strncmp(tok, "http://", 7) == 0) tok += 7;
        if (*tok == '\0' || strchr(tok, ':') == NULL) {
            snprintf(err, err_cap, "etcd endpoint '%s' is not host:port", tok);
            free(copy);
            ds__etcd_free(e);
            return NULL;
        }
        e->endpoints[e->n++] = strdup(tok);
    }
    free(copy);
    if (e->n == 0) {
        snprintf(err, err_cap, "no etcd endpoint given");
        ds__etcd_free(e);
        return NULL;
    }
    return e;
}

void ds__etcd_free(ds_etcd_t *e)
{
    if (e == NULL) return;
    for (int i = 0; i < e->n; i++)
        free(e->endpoints[i]);
    free(e);
}

typedef struct {
    char *buf;
    size_t len, cap;
    void (*on_line)(void *ctx, const char *line);
    void *ctx;
    atomic_bool *stop;
} body_t;

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
    body_t *b = ud;
    size_t n = sz * nm;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        if (cap > (64u << 20)) return 0; /* refuse absurd answers */
        char *nb = realloc(b->buf, cap);
        if (nb == NULL) return 0;
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    b->buf[b->len] = '\0';
    if (b->on_line) {
        /* The watch stream sends one JSON object per line. */
        char *nl;
        while ((nl = memchr(b->buf, '\n', b->len)) != NULL) {
            *nl = '\0';
            b->on_line(b->ctx, b->buf);
            size_t rest = b->len - (size_t)(nl + 1 - b->buf);
            memmove(b->buf, nl + 1, rest);
            b->len = rest;
            b->buf[b->len] = '\0';
        }
    }
    return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    body_t *body = ud;
    return body->stop && atomic_load(body->stop) ? 1 : 0;
}

/* POSTs json to path on one endpoint after another; the parsed answer or NULL. */
static cJSON *post(ds_etcd_t *e, const char *path, const char *json, long timeout_ms, char *err,
                   size_t err_cap)
{
    for (int attempt = 0; attempt < e->n; attempt++) {
        int idx = (e->current + attempt) % e->n;
        CURL *h = curl_easy_init();
        if (h == NULL) break;
        char url[512];
        snprintf(url, sizeof(url), "http://%s%s", e->endpoints[idx], path);
        body_t b = {0};
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 2000 ? timeout_ms : 2000);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
        CURLcode rc = curl_easy_perform(h);
        long code = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(h);
        if (rc == CURLE_OK && code == 200 && b.buf) {
            cJSON *j = cJSON_Parse(b.buf);
            free(b.buf);
            if (j) {
                e->current = idx;
                return j;
            }
            snprintf(err, err_cap, "etcd %s answered %s with malformed JSON", e->endpoints[idx],
                     path);
            continue;
        }
        snprintf(err, err_cap, "etcd %s: %s%s (HTTP %ld)", e->endpoints[idx],
                 rc == CURLE_OK ? "request failed: " : curl_easy_strerror(rc),
                 rc == CURLE_OK && b.buf ? b.buf : "", code);
        free(b.buf);
    }
    return NULL;
}

static int64_t json_int(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (cJSON_IsString(v)) return strtoll(v->valuestring, NULL, 10);
    if (cJSON_IsNumber(v)) return (int64_t)v->valuedouble;
    return 0;
}

int ds__etcd_grant(ds_etcd_t *e, int ttl_s, int64_t *lease, char *err, size_t err_cap)
{
    char json[64];
    snprintf(json, sizeof(json), "{\"TTL\": %d}", ttl_s);
    cJSON *j = post(e, "/v3/lease/grant", json, 3000, err, err_cap);
    if (j == NULL) return -1;
    *lease = json_int(j, "ID");
    cJSON_Delete(j);
    if (*lease == 0) {
        snprintf(err, err_cap, "etcd granted no lease");
        return -1;
    }
    return 0;
}

int ds__etcd_keepalive(ds_etcd_t *e, int64_t lease, int64_t *ttl_left, char *err, size_t err_cap)
{
    char json[64];
    snprintf(json, sizeof(json), "{\"ID\": \"%lld\"}", (long long)lease);
    cJSON *j = post(e, "/v3/lease/keepalive", json, 3000, err, err_cap);
    if (j == NULL) return -1;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "result");
    *ttl_left = json_int(res ? res : j, "TTL");
    cJSON_Delete(j);
    return 0;
}

int ds__etcd_revoke(ds_etcd_t *e, int64_t lease)
{
    char json[64], err[256];
    snprintf(json, sizeof(json), "{\"ID\": \"%lld\"}", (long long)lease);
    cJSON *j = post(e, "/v3/lease/revoke", json, 2000, err, sizeof(err));
    cJSON_Delete(j);
    return j ? 0 : -1;
}

int ds__etcd_put(ds_etcd_t *e, const char *key, const char *value, int64_t lease, char *err,
                 size_t err_cap)
{
    char *k = b64_encode(key, strlen(key)), *v = b64_encode(value, strlen(value));
    char *json = malloc(strlen(k) + strlen(v) + 96);
    if (k == NULL || v == NULL || json == NULL) {
        free(k);
        free(v);
        free(json);
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    sprintf(json, "{\"key\": \"%s\", \"value\": \"%s\", \"lease\": \"%lld\"}", k, v,
            (long long)lease);
    cJSON *j = post(e, "/v3/kv/put", json, 3000, err, err_cap);
    free(k);
    free(v);
    free(json);
    cJSON_Delete(j);
    return j ? 0 : -1;
}

int ds__etcd_delete(ds_etcd_t *e, const char *key)
{
    char *k = b64_encode(key, strlen(key));
    char json[2048], err[256];
    snprintf(json, sizeof(json), "{\"key\": \"%s\"}", k ? k : "");
    free(k);
    cJSON *j = post(e, "/v3/kv/deleterange", json, 2000, err, sizeof(err));
    cJSON_Delete(j);
    return j ? 0 : -1;
}

/* The range end that covers every key with this prefix. */
static void prefix_end(const char *prefix, char *out, size_t cap)
{
    snprintf(out, cap, "%s", prefix);
    size_t n = strlen(out);
    if (n) out[n - 1]++;
}

static char *range_json(const char *prefix)
{
    char end[512];
    prefix_end(prefix, end, sizeof(end));
    char *k = b64_encode(prefix, strlen(prefix)), *r = b64_encode(end, strlen(end));
    char *json = malloc((k ? strlen(k) : 0) + (r ? strlen(r) : 0) + 64);
    if (k && r && json) sprintf(json, "{\"key\": \"%s\", \"range_end\": \"%s\"}", k, r);
    free(k);
    free(r);
    return json;
}

int ds__etcd_range_prefix(ds_etcd_t *e, const char *prefix, ds_etcd_kv_t **out, size_t *n,
                          char *err, size_t err_cap)
{
    *out = NULL;
    *n = 0;
    char *json = range_json(prefix);
    if (json == NULL) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    cJSON *j = post(e, "/v3/kv/range", json, 3000, err, err_cap);
    free(json);
    if (j == NULL) return -1;
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(j, "kvs");
    int cnt = cJSON_IsArray(kvs) ? cJSON_GetArraySize(kvs) : 0;
    ds_etcd_kv_t *arr = calloc(cnt ? (size_t)cnt : 1, sizeof(*arr));
    const cJSON *it;
    size_t i = 0;
    cJSON_ArrayForEach(it, kvs)
    {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "key");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "value");
        if (!arr || !cJSON_IsString(k)) continue;
        arr[i].key = b64_decode(k->valuestring);
        arr[i].value = b64_decode(cJSON_IsString(v) ? v->valuestring : "");
        const cJSON *mr = cJSON_GetObjectItemCaseSensitive(it, "mod_revision");
        arr[i].mod_revision = cJSON_IsString(mr) ? strtoll(mr->valuestring, NULL, 10) : 0;
        i++;
    }
    cJSON_Delete(j);
    *out = arr;
    *n = i;
    return arr ? 0 : -1;
}

void ds__etcd_kvs_free(ds_etcd_kv_t *kvs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

typedef struct {
    void (*on_event)(void *ctx);
    void *ctx;
} watch_ctx_t;

static void on_watch_line(void *ud, const char *line)
{
    watch_ctx_t *w = ud;
    /* Every message (creation, events, progress) may follow a gap in which
     * changes were missed, so each one triggers a full re-read by the caller. */
    if (strstr(line, "\"events\"") || strstr(line, "\"created\"")) w->on_event(w->ctx);
}

int ds__etcd_watch(ds_etcd_t *e, const char *prefix, void (*on_event)(void *ctx), void *ctx,
                   atomic_bool *stop, char *err, size_t err_cap)
{
    char *range = range_json(prefix);
    if (range == NULL) return -1;
    char *json = malloc(strlen(range) + 32);
    if (json == NULL) {
        free(range);
        return -1;
    }
    sprintf(json, "{\"create_request\": %s}", range);
    free(range);
    int idx = e->current;
    CURL *h = curl_easy_init();
    char url[512];
    snprintf(url, sizeof(url), "http://%s/v3/watch", e->endpoints[idx]);
    watch_ctx_t wc = {on_event, ctx};
    body_t b = {.on_line = on_watch_line, .ctx = &wc, .stop = stop};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &b);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    free(json);
    free(b.buf);
    if (atomic_load(stop)) return 0;
    snprintf(err, err_cap, "etcd watch on %s ended: %s", e->endpoints[idx], curl_easy_strerror(rc));
    e->current = (idx + 1) % e->n;
    return -1;
}
