/* Client drivers: one set/get interface over this project's client (local
 * shared memory or TCP) and over Redis (Unix socket or TCP), so that every
 * phase runs the same loop against every system.
 *
 * The Redis driver uses hiredis for connecting and for reading status and
 * small replies, but moves value bytes itself: SET writes the RESP header,
 * then the value straight from the caller's buffer (writev), and GET reads
 * the bulk reply straight into the caller's warm buffer. Stock hiredis would
 * format every SET into a freshly allocated copy of the value and return
 * every GET in a fresh allocation; on this VM a fresh 256 MiB allocation
 * costs more than the transfer, so the stock path would measure malloc, not
 * Redis. The lean path is what a careful C client does, and it is the fair
 * peer of ds_kv_get_into. */
#include "bench/side_by_side/sbs.h"

#include "common/clock.h"
#include "ds/kv_client.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define IO_TIMEOUT_S 120
#define STAGE_CAP (64 * 1024)

struct sbs_conn {
    sbs_kind_t kind;
    const sbs_env_t *env;
    ds_client_t *ds;
    bool owns_ds;
    redisContext *rc;
    char *stage; /* Redis: bytes read past a reply header */
};

static const char *kind_names[SBS_NKINDS] = {"ds-local", "ds-remote", "redis-unix", "redis-tcp"};

const char *sbs_kind_name(sbs_kind_t k)
{
    return k < SBS_NKINDS ? kind_names[k] : "?";
}

bool sbs_kind_is_ds(sbs_kind_t k)
{
    return k == SBS_DS_LOCAL || k == SBS_DS_REMOTE;
}

static redisContext *redis_open(const sbs_env_t *env, sbs_kind_t kind)
{
    struct timeval tv = {5, 0};
    redisContext *c = kind == SBS_REDIS_UNIX
                          ? redisConnectUnixWithTimeout(env->redis->unix_path, tv)
                          : redisConnectWithTimeout(env->redis->host, env->redis->port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "sbs: redis connect: %s\n", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    struct timeval io = {IO_TIMEOUT_S, 0};
    redisSetTimeout(c, io);
    return c;
}

sbs_conn_t *sbs_connect(const sbs_env_t *env, sbs_kind_t kind)
{
    sbs_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->kind = kind;
    c->env = env;
    if (sbs_kind_is_ds(kind)) {
        ds_client_options_t o;
        ds_client_options_init(&o);
        o.host = env->worker->host;
        o.port = env->worker->port;
        o.transport = kind == SBS_DS_LOCAL ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP;
        if (ds_client_connect(&o, &c->ds) != DS_K_OK) {
            fprintf(stderr, "sbs: %s connect: %s\n", sbs_kind_name(kind), ds_last_error());
            free(c);
            return NULL;
        }
        c->owns_ds = true;
        return c;
    }
    c->rc = redis_open(env, kind);
    c->stage = malloc(STAGE_CAP);
    if (c->rc == NULL || c->stage == NULL) {
        sbs_close(c);
        return NULL;
    }
    return c;
}

sbs_conn_t *sbs_conn_share(sbs_conn_t *c)
{
    if (!sbs_kind_is_ds(c->kind)) return sbs_connect(c->env, c->kind);
    sbs_conn_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    *s = *c;
    s->owns_ds = false;
    return s;
}

void sbs_close(sbs_conn_t *c)
{
    if (c == NULL) return;
    if (c->owns_ds) ds_client_close(c->ds);
    if (c->rc) redisFree(c->rc);
    free(c->stage);
    free(c);
}

static int ds_fail(const sbs_conn_t *c, const char *what, const char *key, ds_status_t st)
{
    fprintf(stderr, "sbs: %s %s %s: %s: %s\n", sbs_kind_name(c->kind), what, key,
            ds_status_name(st), ds_last_error());
    return -1;
}

/* ---- Redis wire helpers ---- */

static int write_iov(int fd, struct iovec *iov, int n)
{
    for (int bound = 0; n > 0 && bound < 1000000; bound++) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return n == 0 ? 0 : -1;
}

static int read_some(int fd, void *buf, size_t cap, size_t *got)
{
    for (int bound = 0; bound < 1000; bound++) {
        ssize_t r = read(fd, buf, cap);
        if (r > 0) {
            *got = (size_t)r;
            return 0;
        }
        if (r < 0 && errno == EINTR) continue;
        return -1; /* EOF, error, or the socket timeout (EAGAIN) */
    }
    return -1;
}

static int read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        size_t got;
        if (read_some(fd, p, len, &got) != 0) return -1;
        p += got;
        len -= got;
    }
    return 0;
}

static int redis_fail(const sbs_conn_t *c, const char *what, const char *key, const char *why)
{
    fprintf(stderr, "sbs: %s %s %s: %s\n", sbs_kind_name(c->kind), what, key, why);
    return -1;
}

static int redis_set(sbs_conn_t *c, const char *key, const void *val, size_t len)
{
    char hdr[128];
    size_t kl = strlen(key);
    int hl = snprintf(hdr, sizeof(hdr), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n", kl, key, len);
    struct iovec iov[3] = {{hdr, (size_t)hl}, {(void *)val, len}, {"\r\n", 2}};
    if (write_iov(c->rc->fd, iov, 3) != 0) return redis_fail(c, "SET", key, strerror(errno));
    redisReply *r = NULL;
    if (redisGetReply(c->rc, (void **)&r) != REDIS_OK || r == NULL)
        return redis_fail(c, "SET", key, c->rc->errstr);
    int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok) redis_fail(c, "SET", key, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* GET with the bulk read into buf: the header arrives with the first bytes of
 * the value in one read; those are copied from the staging buffer and the
 * rest is read in place. */
static int redis_get(sbs_conn_t *c, const char *key, void *buf, size_t cap, size_t *len)
{
    char hdr[128];
    size_t kl = strlen(key);
    int hl = snprintf(hdr, sizeof(hdr), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", kl, key);
    struct iovec iov[1] = {{hdr, (size_t)hl}};
    int fd = c->rc->fd;
    if (write_iov(fd, iov, 1) != 0) return redis_fail(c, "GET", key, strerror(errno));
    size_t have = 0;
    char *eol = NULL;
    while (eol == NULL) {
        size_t got;
        if (have >= STAGE_CAP || read_some(fd, c->stage + have, STAGE_CAP - have, &got) != 0)
            return redis_fail(c, "GET", key, "connection lost reading the reply header");
        have += got;
        eol = memchr(c->stage, '\n', have);
    }
    if (c->stage[0] != '$') return redis_fail(c, "GET", key, "not a bulk reply");
    long long n = strtoll(c->stage + 1, NULL, 10);
    if (n < 0) return redis_fail(c, "GET", key, "missing key");
    if ((size_t)n > cap) return redis_fail(c, "GET", key, "value larger than the buffer");
    size_t body = (size_t)(eol + 1 - c->stage);
    size_t in_stage = have - body; /* value bytes and maybe CRLF already read */
    size_t from_stage = in_stage < (size_t)n ? in_stage : (size_t)n;
    memcpy(buf, c->stage + body, from_stage);
    if ((size_t)n > from_stage &&
        read_full(fd, (char *)buf + from_stage, (size_t)n - from_stage) != 0)
        return redis_fail(c, "GET", key, "connection lost reading the value");
    size_t crlf_have = in_stage > (size_t)n ? in_stage - (size_t)n : 0;
    char crlf[2];
    if (crlf_have < 2 && read_full(fd, crlf, 2 - crlf_have) != 0)
        return redis_fail(c, "GET", key, "connection lost reading the reply end");
    *len = (size_t)n;
    return 0;
}

/* ---- the interface ---- */

int sbs_set(sbs_conn_t *c, const char *key, const void *val, size_t len)
{
    if (!sbs_kind_is_ds(c->kind)) return redis_set(c, key, val, len);
    ds_status_t st = ds_kv_set(c->ds, key, val, len, NULL);
    return st == DS_K_OK ? 0 : ds_fail(c, "set", key, st);
}

int sbs_get(sbs_conn_t *c, const char *key, void *buf, size_t cap, size_t *len)
{
    if (!sbs_kind_is_ds(c->kind)) return redis_get(c, key, buf, cap, len);
    ds_status_t st = ds_kv_get_into(c->ds, key, 0, buf, cap, len);
    return st == DS_K_OK ? 0 : ds_fail(c, "get", key, st);
}

int sbs_get_zc(sbs_conn_t *c, const char *key, size_t *len)
{
    if (!sbs_kind_is_ds(c->kind)) return redis_fail(c, "get_zc", key, "not a datasystem client");
    ds_buffer_t *b = NULL;
    ds_status_t st = ds_kv_get_buffers(c->ds, 1, &key, 0, &b);
    if (st != DS_K_OK || b == NULL) return ds_fail(c, "get_buffers", key, st);
    const volatile uint8_t *p = ds_buffer_data(b);
    *len = ds_buffer_size(b);
    uint8_t sink = (uint8_t)(p[0] ^ p[*len - 1]);
    (void)sink;
    ds_buffer_release(b);
    return 0;
}

int sbs_set_zc(sbs_conn_t *c, const char *key, const void *val, size_t len)
{
    if (!sbs_kind_is_ds(c->kind)) return redis_fail(c, "set_zc", key, "not a datasystem client");
    ds_buffer_t *b = NULL;
    ds_status_t st = ds_kv_create(c->ds, key, len, NULL, &b);
    if (st != DS_K_OK || b == NULL) return ds_fail(c, "create", key, st);
    memcpy(ds_buffer_mutable_data(b), val, len);
    st = ds_kv_publish(c->ds, b);
    ds_buffer_release(b);
    return st == DS_K_OK ? 0 : ds_fail(c, "publish", key, st);
}

int sbs_del(sbs_conn_t *c, const char *key)
{
    return sbs_mdel(c, 1, &key);
}

int sbs_mset(sbs_conn_t *c, size_t n, const char *const *keys, const void *const *vals,
             const size_t *lens)
{
    if (sbs_kind_is_ds(c->kind)) {
        ds_status_t st = ds_kv_mset(c->ds, n, keys, vals, lens, NULL, NULL);
        return st == DS_K_OK ? 0 : ds_fail(c, "mset", keys[0], st);
    }
    size_t argc = 1 + 2 * n;
    const char **argv = malloc(argc * sizeof(*argv));
    size_t *argl = malloc(argc * sizeof(*argl));
    int rc = -1;
    if (argv && argl) {
        argv[0] = "MSET";
        argl[0] = 4;
        for (size_t i = 0; i < n; i++) {
            argv[1 + 2 * i] = keys[i];
            argl[1 + 2 * i] = strlen(keys[i]);
            argv[2 + 2 * i] = vals[i];
            argl[2 + 2 * i] = lens[i];
        }
        redisReply *r = redisCommandArgv(c->rc, (int)argc, argv, argl);
        rc = r && r->type == REDIS_REPLY_STATUS ? 0 : -1;
        if (rc != 0) redis_fail(c, "MSET", keys[0], r ? r->str : c->rc->errstr);
        if (r) freeReplyObject(r);
    }
    free(argv);
    free(argl);
    return rc;
}

int sbs_mdel(sbs_conn_t *c, size_t n, const char *const *keys)
{
    if (sbs_kind_is_ds(c->kind)) {
        ds_status_t st = ds_kv_del(c->ds, n, keys, NULL);
        return st == DS_K_OK ? 0 : ds_fail(c, "del", keys[0], st);
    }
    size_t argc = 1 + n;
    const char **argv = malloc(argc * sizeof(*argv));
    size_t *argl = malloc(argc * sizeof(*argl));
    int rc = -1;
    if (argv && argl) {
        argv[0] = "DEL";
        argl[0] = 3;
        for (size_t i = 0; i < n; i++) {
            argv[1 + i] = keys[i];
            argl[1 + i] = strlen(keys[i]);
        }
        redisReply *r = redisCommandArgv(c->rc, (int)argc, argv, argl);
        rc = r && r->type == REDIS_REPLY_INTEGER ? 0 : -1;
        if (rc != 0) redis_fail(c, "DEL", keys[0], r && r->str ? r->str : c->rc->errstr);
        if (r) freeReplyObject(r);
    }
    free(argv);
    free(argl);
    return rc;
}

double sbs_redis_used_memory(sbs_conn_t *c)
{
    if (c->rc == NULL) return -1;
    redisReply *r = redisCommand(c->rc, "INFO memory");
    double v = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "used_memory:");
        if (p) v = strtod(p + strlen("used_memory:"), NULL);
    }
    if (r) freeReplyObject(r);
    return v;
}

int sbs_redis_purge(sbs_conn_t *c)
{
    if (c->rc == NULL) return -1;
    redisReply *r = redisCommand(c->rc, "MEMORY PURGE");
    int rc = r && r->type == REDIS_REPLY_STATUS ? 0 : -1;
    if (r) freeReplyObject(r);
    return rc;
}
