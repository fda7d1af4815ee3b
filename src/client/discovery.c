/* Service discovery over etcd (ds/service_discovery.h): reads the workers'
 * membership records with one range request to etcd's v3 JSON gateway per
 * lookup, keeps the ready ones and picks one per the affinity policy.
 *
 * The library stays free of libcurl and a JSON library (src/client's
 * CMakeLists), so the one request etcd needs is spoken here: HTTP/1.0 over a
 * plain TCP socket (the server then ends the body by closing), a body capped
 * in size, and a reader for the two JSON shapes involved (etcd's range answer
 * and the worker's record), which never nest objects inside the parts read.
 * Records the reader cannot take are skipped, as Yuanrong skips records it
 * cannot decode. */
#include "client/client_internal.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/net.h"
#include "ds/service_discovery.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* etcd answers a range of a few hundred workers in far less. */
#define SD_MAX_BODY (8u << 20)
#define SD_TIMEOUT_MS 5000
#define SD_MAX_ENDPOINTS 16

struct ds_service_discovery {
    char *endpoints; /* comma-separated host:port */
    char prefix[300];
    char *username;
    char *password;
    char *host_id_env;
    bool tls_asked;
    ds_service_affinity_policy_t policy;
    pthread_mutex_t mu; /* guards rng, host_id and inited */
    uint64_t rng;
    bool inited;
    char host_id[256];
};

static char *dup_or_null(const char *s)
{
    return s && s[0] ? strdup(s) : NULL;
}

static bool set(const char *s)
{
    return s && s[0];
}

void ds_service_discovery_options_init(ds_service_discovery_options_t *opts)
{
    if (opts == NULL) return;
    memset(opts, 0, sizeof(*opts));
    opts->token_refresh_interval_sec = 30;
    opts->affinity_policy = DS_AFFINITY_PREFERRED_SAME_NODE;
}

static bool valid_cluster_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return true;
}

/* Every comma-separated part must be host:port. */
static ds_status_t check_endpoints(const char *what, const char *list)
{
    if (!set(list))
        return ds__set_error(DS_K_INVALID, "The value of %s should not be empty.", what);
    char *copy = strdup(list);
    if (copy == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    ds_status_t st = DS_K_OK;
    int n = 0;
    char *save = NULL;
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        char host[256], err[128];
        int port;
        if (strncmp(p, "http://", 7) == 0) p += 7;
        if (++n > SD_MAX_ENDPOINTS ||
            ds__parse_hostport(p, host, sizeof(host), &port, err, sizeof(err)) != 0) {
            st = ds__set_error(DS_K_INVALID, "Invalid %s: %.200s", what, list);
            break;
        }
    }
    if (st == DS_K_OK && n == 0) st = ds__set_error(DS_K_INVALID, "Invalid %s: %.200s", what, list);
    free(copy);
    return st;
}

static ds_status_t sd_make(const char *endpoints, const char *what, const char *cluster,
                           const char *host_id_env, ds_service_affinity_policy_t policy,
                           ds_service_discovery_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "out is NULL");
    *out = NULL;
    ds_status_t st = check_endpoints(what, endpoints);
    if (st != DS_K_OK) return st;
    if (set(cluster) && !valid_cluster_name(cluster))
        return ds__set_error(DS_K_INVALID,
                             "Invalid cluster name for service discovery: '%.64s' (letters, "
                             "digits, '-', '_' and '.', at most 128)",
                             cluster);
    if (policy < DS_AFFINITY_PREFERRED_SAME_NODE || policy > DS_AFFINITY_RANDOM)
        return ds__set_error(DS_K_INVALID, "unknown affinity policy %d", (int)policy);
    ds_service_discovery_t *sd = calloc(1, sizeof(*sd));
    if (sd == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    sd->endpoints = strdup(endpoints);
    sd->host_id_env = dup_or_null(host_id_env);
    if (sd->endpoints == NULL || (set(host_id_env) && sd->host_id_env == NULL)) {
        ds_service_discovery_free(sd);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    }
    snprintf(sd->prefix, sizeof(sd->prefix), "/datasystem/%s/cluster/",
             set(cluster) ? cluster : "default");
    sd->policy = policy;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    sd->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
              (uint64_t)(uintptr_t)sd;
    if (sd->rng == 0) sd->rng = 1;
    pthread_mutex_init(&sd->mu, NULL);
    *out = sd;
    return DS_K_OK;
}

ds_status_t ds_service_discovery_new(const ds_service_discovery_options_t *opts,
                                     ds_service_discovery_t **out)
{
    ds__clear_error();
    if (opts == NULL) return ds__set_error(DS_K_INVALID, "options are NULL");
    ds_status_t st = sd_make(opts->etcd_address, "EtcdAddress", opts->cluster_name,
                             opts->host_id_env_name, opts->affinity_policy, out);
    if (st != DS_K_OK) return st;
    ds_service_discovery_t *sd = *out;
    sd->tls_asked = set(opts->etcd_ca) || set(opts->etcd_cert) || set(opts->etcd_key) ||
                    set(opts->etcd_dns_name);
    sd->username = dup_or_null(opts->username);
    sd->password = strdup(opts->password ? opts->password : "");
    if ((set(opts->username) && sd->username == NULL) || sd->password == NULL) {
        ds_service_discovery_free(sd);
        *out = NULL;
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    }
    return DS_K_OK;
}

ds_status_t ds_coordinator_service_discovery_new(const char *service_address,
                                                 const char *cluster_name,
                                                 const char *host_id_env_name,
                                                 ds_service_affinity_policy_t policy,
                                                 ds_service_discovery_t **out)
{
    ds__clear_error();
    if (!set(service_address)) {
        if (out) *out = NULL;
        return ds__set_error(DS_K_INVALID,
                             "coordinatorDiscovery should not be null when serviceAddress is "
                             "empty.");
    }
    return sd_make(service_address, "coordinator service address", cluster_name, host_id_env_name,
                   policy, out);
}

void ds_service_discovery_free(ds_service_discovery_t *sd)
{
    if (sd == NULL) return;
    free(sd->endpoints);
    free(sd->username);
    if (sd->password) {
        memset(sd->password, 0, strlen(sd->password));
        free(sd->password);
    }
    free(sd->host_id_env);
    pthread_mutex_destroy(&sd->mu);
    free(sd);
}

void ds_strings_free(char **strs, size_t n)
{
    if (strs == NULL) return;
    for (size_t i = 0; i < n; i++)
        free(strs[i]);
    free(strs);
}

/* ---- the HTTP request ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const char *src, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)src[i] << 16;
        if (i + 1 < len) v |= (uint32_t)(unsigned char)src[i + 1] << 8;
        if (i + 2 < len) v |= (unsigned char)src[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64[v & 63] : '=';
    }
    out[o] = '\0';
}

/* Decodes n characters of base64; NULL when they are not base64. */
static char *b64_decode(const char *s, size_t n)
{
    char *out = malloc(n / 4 * 3 + 4);
    if (out == NULL) return NULL;
    size_t o = 0;
    uint32_t v = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') break;
        const char *p = memchr(b64, s[i], 64);
        if (p == NULL || s[i] == '\0') {
            free(out);
            return NULL;
        }
        v = (v << 6) | (uint32_t)(p - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((v >> bits) & 0xff);
        }
    }
    out[o] = '\0';
    return out;
}

/* POSTs body to path at one endpoint; *resp is the answer's body (malloc'd,
 * NUL-terminated) when etcd said 200. */
static ds_status_t http_post(const char *endpoint, const char *path, const char *auth,
                             const char *body, char **resp)
{
    char host[256], err[256];
    int port;
    *resp = NULL;
    if (strncmp(endpoint, "http://", 7) == 0) endpoint += 7;
    if (ds__parse_hostport(endpoint, host, sizeof(host), &port, err, sizeof(err)) != 0)
        return ds__set_error(DS_K_INVALID, "Invalid etcd address %.200s: %s", endpoint, err);
    int fd = ds__tcp_connect(host, port, SD_TIMEOUT_MS, err, sizeof(err));
    if (fd < 0)
        return ds__set_error(DS_K_RPC_UNAVAILABLE, "cannot reach etcd at %s: %s", endpoint, err);
    uint64_t deadline = ds__now_ms() + SD_TIMEOUT_MS;
    size_t blen = strlen(body);
    char head[1024];
    int hl = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      "%s%s%sContent-Length: %zu\r\n\r\n",
                      path, endpoint, auth ? "Authorization: " : "", auth ? auth : "",
                      auth ? "\r\n" : "", blen);
    if (hl < 0 || (size_t)hl >= sizeof(head) ||
        ds__write_full(fd, head, (size_t)hl, deadline) != 0 ||
        ds__write_full(fd, body, blen, deadline) != 0) {
        close(fd);
        return ds__set_error(DS_K_RPC_UNAVAILABLE, "cannot send a request to etcd at %s", endpoint);
    }
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    ds_status_t st = DS_K_OK;
    while (buf) {
        int left = (int)(deadline > ds__now_ms() ? deadline - ds__now_ms() : 0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left == 0 || poll(&p, 1, left) <= 0) {
            st = ds__set_error(DS_K_RPC_DEADLINE_EXCEEDED, "etcd at %s did not answer in %d ms",
                               endpoint, SD_TIMEOUT_MS);
            break;
        }
        if (len + 1 >= cap) {
            if (cap >= SD_MAX_BODY) {
                st = ds__set_error(DS_K_RUNTIME_ERROR, "etcd at %s answered more than %u bytes",
                                   endpoint, SD_MAX_BODY);
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r == 0) break;
        if (r < 0) {
            st = ds__set_error(DS_K_RPC_UNAVAILABLE, "etcd at %s closed the connection", endpoint);
            break;
        }
        len += (size_t)r;
    }
    close(fd);
    if (buf == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    if (st != DS_K_OK) {
        free(buf);
        return st;
    }
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    int code = 0;
    if (sep == NULL || sscanf(buf, "HTTP/%*d.%*d %d", &code) != 1) {
        free(buf);
        return ds__set_error(DS_K_RUNTIME_ERROR, "etcd at %s sent no HTTP answer", endpoint);
    }
    if (code != 200) {
        st = ds__set_error(code == 401 || code == 403 ? DS_K_NOT_AUTHORIZED : DS_K_RUNTIME_ERROR,
                           "etcd at %s answered %d: %.200s", endpoint, code, sep + 4);
        free(buf);
        return st;
    }
    memmove(buf, sep + 4, len - (size_t)(sep + 4 - buf) + 1);
    *resp = buf;
    return DS_K_OK;
}

/* The string value of "name" in the JSON text [p, end): a pointer to its
 * first character and its length, or NULL. Values holding escapes are not
 * taken (none of the fields read here has any). */
static const char *json_str(const char *p, const char *end, const char *name, size_t *n)
{
    size_t nl = strlen(name);
    for (const char *q = p; q && q + nl + 2 < end; q++) {
        q = memchr(q, '"', (size_t)(end - q));
        if (q == NULL || q + nl + 2 >= end) return NULL;
        if (memcmp(q + 1, name, nl) != 0 || q[nl + 1] != '"') continue;
        const char *v = q + nl + 2;
        while (v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r'))
            v++;
        if (v >= end || *v != ':') continue;
        v++;
        while (v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r'))
            v++;
        if (v >= end || *v != '"') return NULL;
        v++;
        const char *e = v;
        while (e < end && *e != '"' && *e != '\\')
            e++;
        if (e >= end || *e != '"') return NULL;
        *n = (size_t)(e - v);
        return v;
    }
    return NULL;
}

static ds_status_t sd_authenticate(ds_service_discovery_t *sd, const char *endpoint, char **token)
{
    *token = NULL;
    /* The name and password go into JSON: refuse what would need escaping. */
    for (const char *s = sd->username; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            return ds__set_error(DS_K_INVALID, "the etcd username holds a character it cannot");
    for (const char *s = sd->password; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            return ds__set_error(DS_K_INVALID, "the etcd password holds a character it cannot");
    size_t cap = strlen(sd->username) + strlen(sd->password) + 64;
    char *body = malloc(cap);
    if (body == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    snprintf(body, cap, "{\"name\":\"%s\",\"password\":\"%s\"}", sd->username, sd->password);
    char *resp;
    ds_status_t st = http_post(endpoint, "/v3/auth/authenticate", NULL, body, &resp);
    memset(body, 0, cap);
    free(body);
    if (st != DS_K_OK) return st;
    size_t n;
    const char *t = json_str(resp, resp + strlen(resp), "token", &n);
    if (t) *token = strndup(t, n);
    free(resp);
    if (*token == NULL) return ds__set_error(DS_K_NOT_AUTHORIZED, "etcd gave no token");
    return DS_K_OK;
}

/* One range over the membership prefix, from the first endpoint that answers. */
static ds_status_t sd_range(ds_service_discovery_t *sd, char **resp)
{
    size_t pl = strlen(sd->prefix);
    char key[512], end[512], endraw[300];
    memcpy(endraw, sd->prefix, pl);
    endraw[pl - 1]++; /* '/' + 1: every key under the prefix */
    b64_encode(sd->prefix, pl, key);
    b64_encode(endraw, pl, end);
    char body[1100];
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\"}", key, end);
    char *copy = strdup(sd->endpoints);
    if (copy == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    ds_status_t st = DS_K_RPC_UNAVAILABLE;
    char *save = NULL;
    for (char *ep = strtok_r(copy, ",", &save); ep; ep = strtok_r(NULL, ",", &save)) {
        char *token = NULL;
        if (sd->username && (st = sd_authenticate(sd, ep, &token)) != DS_K_OK) {
            if (st == DS_K_RPC_UNAVAILABLE || st == DS_K_RPC_DEADLINE_EXCEEDED) continue;
            break;
        }
        st = http_post(ep, "/v3/kv/range", token, body, resp);
        free(token);
        if (st == DS_K_OK || (st != DS_K_RPC_UNAVAILABLE && st != DS_K_RPC_DEADLINE_EXCEEDED))
            break;
    }
    free(copy);
    return st;
}

/* ---- the worker list ---- */

typedef struct {
    char **v;
    size_t n, cap;
} strs_t;

static int strs_add(strs_t *s, const char *p, size_t n)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        char **nv = realloc(s->v, nc * sizeof(*nv));
        if (nv == NULL) return -1;
        s->v = nv;
        s->cap = nc;
    }
    if ((s->v[s->n] = strndup(p, n)) == NULL) return -1;
    s->n++;
    return 0;
}

static ds_status_t sd_init_locked(ds_service_discovery_t *sd)
{
    if (sd->inited) return DS_K_OK;
    if (sd->tls_asked)
        return ds__set_error(DS_K_NOT_SUPPORTED,
                             "TLS to etcd (etcd_ca, etcd_cert, etcd_key, etcd_dns_name) is not "
                             "supported by this client's service discovery");
    sd->host_id[0] = '\0';
    const char *h = sd->host_id_env ? getenv(sd->host_id_env) : NULL;
    if (h) snprintf(sd->host_id, sizeof(sd->host_id), "%s", h);
    sd->inited = true;
    return DS_K_OK;
}

/* Reads the ready workers, split by this host's ID. */
static ds_status_t obtain(ds_service_discovery_t *sd, strs_t *same, strs_t *other)
{
    memset(same, 0, sizeof(*same));
    memset(other, 0, sizeof(*other));
    char host_id[256];
    pthread_mutex_lock(&sd->mu);
    ds_status_t st = sd_init_locked(sd);
    snprintf(host_id, sizeof(host_id), "%s", sd->host_id);
    pthread_mutex_unlock(&sd->mu);
    if (st != DS_K_OK) return st;
    char *resp;
    if ((st = sd_range(sd, &resp)) != DS_K_OK) {
        char why[400]; /* a copy: ds_last_error() is the buffer ds__set_error writes */
        snprintf(why, sizeof(why), "%s", ds_last_error());
        return ds__set_error(
            st, "Failed to fetch cluster info from etcd, ensure etcd service is healthy: %s", why);
    }
    const char *p = strstr(resp, "\"kvs\"");
    const char *end = resp + strlen(resp);
    size_t pl = strlen(sd->prefix);
    while (p && (p = strchr(p, '{')) != NULL) {
        const char *close = strchr(p, '}');
        if (close == NULL) break;
        size_t kn, vn, sn, hn;
        const char *k = json_str(p, close, "key", &kn);
        const char *v = json_str(p, close, "value", &vn);
        char *key = k ? b64_decode(k, kn) : NULL;
        char *val = v ? b64_decode(v, vn) : NULL;
        if (key && val && strncmp(key, sd->prefix, pl) == 0 && key[pl]) {
            const char *vend = val + strlen(val);
            const char *state = json_str(val, vend, "state", &sn);
            const char *hid = json_str(val, vend, "host_id", &hn);
            if (state && sn == 5 && memcmp(state, "ready", 5) == 0) {
                bool here =
                    host_id[0] && hid && hn == strlen(host_id) && memcmp(hid, host_id, hn) == 0;
                if (strs_add(here ? same : other, key + pl, strlen(key + pl)) != 0)
                    st = DS_K_OUT_OF_MEMORY;
            }
        }
        free(key);
        free(val);
        if (st != DS_K_OK) break;
        p = close + 1;
        (void)end;
    }
    free(resp);
    if (st != DS_K_OK) {
        ds_strings_free(same->v, same->n);
        ds_strings_free(other->v, other->n);
        memset(same, 0, sizeof(*same));
        memset(other, 0, sizeof(*other));
        return ds__set_error(st, "out of memory reading the workers");
    }
    return DS_K_OK;
}

static size_t pick(ds_service_discovery_t *sd, size_t n)
{
    pthread_mutex_lock(&sd->mu);
    uint64_t x = sd->rng; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    sd->rng = x;
    pthread_mutex_unlock(&sd->mu);
    return (size_t)(x % n);
}

static ds_status_t split_addr(const char *addr, char *ip, size_t ip_cap, int *port)
{
    char host[256], err[128];
    int p;
    if (ds__parse_hostport(addr, host, sizeof(host), &p, err, sizeof(err)) != 0)
        return ds__set_error(DS_K_INVALID, "worker address '%.200s' in etcd: %s", addr, err);
    if (ip == NULL || strlen(host) >= ip_cap)
        return ds__set_error(DS_K_INVALID, "ip buffer too small for '%s'", host);
    snprintf(ip, ip_cap, "%s", host);
    if (port) *port = p;
    return DS_K_OK;
}

bool ds_service_discovery_has_host_affinity(const ds_service_discovery_t *csd)
{
    ds_service_discovery_t *sd = (ds_service_discovery_t *)csd;
    if (sd == NULL) return false;
    pthread_mutex_lock(&sd->mu);
    bool r = sd->policy != DS_AFFINITY_RANDOM && sd->host_id[0] != '\0';
    pthread_mutex_unlock(&sd->mu);
    return r;
}

ds_service_affinity_policy_t ds_service_discovery_affinity_policy(const ds_service_discovery_t *sd)
{
    return sd ? sd->policy : DS_AFFINITY_PREFERRED_SAME_NODE;
}

const char *ds_service_discovery_host_id(const ds_service_discovery_t *sd)
{
    /* Written once, by the first init, before anyone can read it back. */
    return sd ? sd->host_id : "";
}

ds_status_t ds_service_discovery_init(ds_service_discovery_t *sd)
{
    ds__clear_error();
    if (sd == NULL) return ds__set_error(DS_K_INVALID, "service discovery is NULL");
    strs_t same, other;
    ds_status_t st = obtain(sd, &same, &other);
    if (st != DS_K_OK) {
        char why[600];
        snprintf(why, sizeof(why), "%s", ds_last_error());
        return ds__set_error(st, "Failed to connect to etcd. %s", why);
    }
    ds_strings_free(same.v, same.n);
    ds_strings_free(other.v, other.n);
    return DS_K_OK;
}

ds_status_t ds__discovery_select(ds_service_discovery_t *sd, const char *avoid, char *ip,
                                 size_t ip_cap, int *port, bool *same_node)
{
    strs_t same, other;
    ds_status_t st = obtain(sd, &same, &other);
    if (st != DS_K_OK) return st;
    /* A worker just found dead may still be listed until its lease runs
     * out: leave it out while others are there. */
    if (avoid) {
        strs_t *lists[2] = {&same, &other};
        size_t total = same.n + other.n;
        for (int l = 0; l < 2 && total > 1; l++)
            for (size_t i = 0; i < lists[l]->n; i++)
                if (strcmp(lists[l]->v[i], avoid) == 0) {
                    free(lists[l]->v[i]);
                    lists[l]->v[i--] = lists[l]->v[--lists[l]->n];
                    total--;
                    break;
                }
    }
    bool affinity = ds_service_discovery_has_host_affinity(sd);
    const char *picked = NULL;
    bool here = false;
    if (sd->policy == DS_AFFINITY_REQUIRED_SAME_NODE) {
        if (!affinity)
            st = ds__set_error(DS_K_INVALID, "Failed to obtain sdk host_id from hostIdEnvName.");
        else if (same.n == 0)
            st = ds__set_error(DS_K_TRY_AGAIN, "No available same-node worker is detected.");
        else
            picked = same.v[pick(sd, same.n)], here = true;
    } else if (sd->policy == DS_AFFINITY_PREFERRED_SAME_NODE && same.n > 0) {
        picked = same.v[pick(sd, same.n)], here = true;
    } else if (same.n + other.n == 0) {
        st = ds__set_error(DS_K_TRY_AGAIN, "No available worker is detected.");
    } else {
        size_t i = pick(sd, same.n + other.n);
        here = i < same.n;
        picked = here ? same.v[i] : other.v[i - same.n];
    }
    if (picked) st = split_addr(picked, ip, ip_cap, port);
    if (st == DS_K_OK && same_node) *same_node = here;
    ds_strings_free(same.v, same.n);
    ds_strings_free(other.v, other.n);
    return st;
}

ds_status_t ds_service_discovery_select_worker(ds_service_discovery_t *sd, char *ip, size_t ip_cap,
                                               int *port, bool *same_node)
{
    ds__clear_error();
    if (sd == NULL || ip == NULL || port == NULL)
        return ds__set_error(DS_K_INVALID, "service discovery, ip and port must not be NULL");
    return ds__discovery_select(sd, NULL, ip, ip_cap, port, same_node);
}

ds_status_t ds_service_discovery_select_same_node_worker(ds_service_discovery_t *sd, char *ip,
                                                         size_t ip_cap, int *port)
{
    ds__clear_error();
    if (sd == NULL || ip == NULL || port == NULL)
        return ds__set_error(DS_K_INVALID, "service discovery, ip and port must not be NULL");
    strs_t same, other;
    ds_status_t st = obtain(sd, &same, &other);
    if (st != DS_K_OK) return st;
    if (sd->host_id[0] == '\0')
        st = ds__set_error(DS_K_INVALID, "Failed to obtain sdk host_id from hostIdEnvName.");
    else if (same.n == 0)
        st = ds__set_error(DS_K_RUNTIME_ERROR, "No available same-node worker is detected.");
    else
        st = split_addr(same.v[pick(sd, same.n)], ip, ip_cap, port);
    ds_strings_free(same.v, same.n);
    ds_strings_free(other.v, other.n);
    return st;
}

ds_status_t ds_service_discovery_get_all_workers(ds_service_discovery_t *sd, char ***same_host,
                                                 size_t *n_same, char ***other_out, size_t *n_other)
{
    ds__clear_error();
    if (sd == NULL || same_host == NULL || n_same == NULL || other_out == NULL || n_other == NULL)
        return ds__set_error(DS_K_INVALID, "service discovery and outputs must not be NULL");
    *same_host = *other_out = NULL;
    *n_same = *n_other = 0;
    strs_t same, other;
    ds_status_t st = obtain(sd, &same, &other);
    if (st != DS_K_OK) return st;
    if (sd->policy == DS_AFFINITY_RANDOM) {
        for (size_t i = 0; i < same.n && st == DS_K_OK; i++)
            if (strs_add(&other, same.v[i], strlen(same.v[i])) != 0)
                st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
        ds_strings_free(same.v, same.n);
        memset(&same, 0, sizeof(same));
    } else if (sd->policy == DS_AFFINITY_REQUIRED_SAME_NODE) {
        if (!ds_service_discovery_has_host_affinity(sd))
            st = ds__set_error(DS_K_INVALID, "Failed to obtain sdk host_id from hostIdEnvName.");
        ds_strings_free(other.v, other.n);
        memset(&other, 0, sizeof(other));
    }
    if (st != DS_K_OK) {
        ds_strings_free(same.v, same.n);
        ds_strings_free(other.v, other.n);
        return st;
    }
    *same_host = same.v;
    *n_same = same.n;
    *other_out = other.v;
    *n_other = other.n;
    return DS_K_OK;
}
