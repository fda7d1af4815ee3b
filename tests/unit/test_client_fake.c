/* Unit tests of the client library against a scripted in-process fake worker.
 *
 * The fake speaks the wire protocol over TCP (remote client) or a Unix socket
 * with a small memfd arena (local client), keeps values in a tiny table, and
 * can be told to misbehave (stay silent, hang up, send garbage, answer the
 * wrong request) so the client's framing, zero-copy paths, pin releases and
 * failure handling are checked without a real worker. It hands out sessions
 * with keys and a worker id the way the worker does, and can change its
 * identity to look restarted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/auth.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"
#include "ds/kv_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define ARENA (4u << 20)
#define INLINE_MAX 1024
#define NVALS 2048

typedef enum { FAKE_OK, FAKE_SILENT, FAKE_CLOSE, FAKE_GARBAGE, FAKE_BAD_REQID } fake_mode_t;

typedef struct {
    char key[64];
    uint8_t *val;
    size_t len;
} fake_val_t;

typedef struct {
    int lfd_tcp, lfd_unix, port;
    char dir[64];
    int memfd;
    uint8_t *arena;
    size_t bump;
    pthread_mutex_t mu;
    fake_val_t vals[NVALS];
    uint64_t next_handle;
    struct {
        uint64_t handle, off, len;
        char key[64];
    } created[64];
    int ncreated;
    struct {
        uint64_t id;
        char key[40];
    } sess[64];
    int nsess;
    char worker_id[24];     /* 16 hex characters, like the worker's */
    char last_join_key[80]; /* the key the latest join carried */
    bool legacy_hello;      /* answer HELLO without a session key, like older workers */
    char name_socket[128];  /* the Unix socket HELLO names for discovery; "" = none */
    bool bad_proof;         /* answer discovery challenges with a wrong proof */
    bool pipeline;          /* HELLO says DS_FEATURE_PIPELINE (the client may share) */
    atomic_int mode;
    atomic_int releases, creates, hellos, sessions_created;
    atomic_bool stop;
    pthread_t th;
} fake_t;

static fake_t F;

static fake_val_t *find(const char *k, size_t kl)
{
    for (int i = 0; i < NVALS; i++)
        if (F.vals[i].val && strlen(F.vals[i].key) == kl && memcmp(F.vals[i].key, k, kl) == 0)
            return &F.vals[i];
    return NULL;
}

static void store(const char *k, size_t kl, const void *v, size_t len)
{
    fake_val_t *e = find(k, kl);
    for (int i = 0; e == NULL && i < NVALS; i++)
        if (F.vals[i].val == NULL) e = &F.vals[i];
    assert_non_null(e);
    free(e->val);
    snprintf(e->key, sizeof(e->key), "%.*s", (int)kl, k);
    e->val = malloc(len);
    memcpy(e->val, v, len);
    e->len = len;
}

static uint64_t arena_alloc(size_t len)
{
    if (F.bump + len > ARENA) F.bump = 0; /* the tests never hold this much at once */
    uint64_t off = F.bump;
    F.bump += (len + 63) & ~(size_t)63;
    return off;
}

static void reply(int fd, const ds_wire_header_t *rq, uint32_t status, ds_wbuf_t *m,
                  const void *data, size_t dlen, int pass_fd)
{
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = DS_FLAG_RESPONSE,
                          .opcode = rq->opcode,
                          .status = status,
                          .meta_len = (uint32_t)m->len,
                          .req_id = rq->req_id,
                          .data_len = dlen};
    int mode = atomic_load(&F.mode);
    if (mode == FAKE_BAD_REQID) h.req_id += 100;
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, hb);
    if (mode == FAKE_GARBAGE) hb[0] ^= 0xff;
    if (pass_fd >= 0) {
        assert_int_equal(ds__send_with_fd(fd, hb, sizeof(hb), pass_fd), (ssize_t)sizeof(hb));
    } else if (ds__write_full(fd, hb, sizeof(hb), 0) != 0) {
        /* A client that shares its connection hangs up on a lie while
         * answers to its other requests are still being written. */
        return;
    }
    if (m->len) ds__write_full(fd, m->buf, m->len, 0);
    if (dlen) ds__write_full(fd, data, dlen, 0);
}

/* Handles one request; returns false to hang up. */
static bool serve_one(int fd, bool is_unix, const ds_wire_header_t *h, const uint8_t *meta,
                      const uint8_t *data)
{
    int mode = atomic_load(&F.mode);
    if (h->opcode != DS_OP_HELLO && h->opcode != DS_OP_RELEASE) {
        if (mode == FAKE_SILENT) return true;
        if (mode == FAKE_CLOSE) return false;
    }
    ds_rbuf_t r;
    ds__rbuf_init(&r, meta, h->meta_len);
    ds_wbuf_t w, d;
    ds__wbuf_init(&w);
    ds__wbuf_init(&d);
    ds__wbuf_cstr(&w, "");
    uint32_t status = 0;
    int pass_fd = -1;
    pthread_mutex_lock(&F.mu);
    switch (h->opcode) {
    case DS_OP_HELLO: {
        (void)ds__rbuf_u32(&r);
        uint64_t sid = ds__rbuf_u64(&r);
        bool want = ds__rbuf_u8(&r) && is_unix;
        const char *tok, *key = "";
        (void)ds__rbuf_str(&r, &tok);
        uint32_t kl = r.pos < r.len ? ds__rbuf_str(&r, &key) : 0;
        uint64_t proof_sid = 0;
        const char *chal = "";
        uint32_t cl = 0;
        if (r.pos < r.len) {
            proof_sid = ds__rbuf_u64(&r);
            cl = ds__rbuf_str(&r, &chal);
        }
        assert_false(r.err);
        atomic_fetch_add(&F.hellos, 1);
        int at = -1;
        if (sid == 0) {
            /* Random-looking ids and keys, as the worker makes them. */
            at = F.nsess++ % 64;
            F.sess[at].id = 0x9e3779b97f4a7c15ull * (uint64_t)F.nsess;
            snprintf(F.sess[at].key, sizeof(F.sess[at].key), "%016llx%016llx",
                     (unsigned long long)F.sess[at].id, (unsigned long long)~F.sess[at].id);
            if (F.legacy_hello) F.sess[at].key[0] = '\0';
            atomic_fetch_add(&F.sessions_created, 1);
        } else {
            for (int i = 0; i < 64 && i < F.nsess; i++)
                if (F.sess[i].id == sid) at = i;
            snprintf(F.last_join_key, sizeof(F.last_join_key), "%.*s", (int)kl, key);
            if (at < 0) {
                ds__wbuf_reset(&w);
                ds__wbuf_cstr(&w, "unknown session");
                status = DS_K_NOT_FOUND;
                break;
            }
            if (strlen(F.sess[at].key) != kl || memcmp(F.sess[at].key, key, kl) != 0) {
                ds__wbuf_reset(&w);
                ds__wbuf_cstr(&w, "session key does not match");
                status = DS_K_NOT_AUTHORIZED;
                break;
            }
        }
        ds__wbuf_u64(&w, F.sess[at].id);
        ds__wbuf_u64(&w, want ? ARENA : 0);
        ds__wbuf_u32(&w, INLINE_MAX);
        ds__wbuf_cstr(&w, F.worker_id);
        ds__wbuf_u32(&w, (uint32_t)getpid());
        if (!F.legacy_hello) {
            ds__wbuf_u64(&w, 0); /* no shared GET index */
            ds__wbuf_u32(&w, 0);
            ds__wbuf_u32(&w, 0);
            ds__wbuf_cstr(&w, F.sess[at].key);
            /* Discovery, as the worker does it (wire.h, HELLO). */
            char proof[DS_AUTH_HEX_LEN + 1] = "", ch[DS_AUTH_HEX_LEN + 1];
            for (int i = 0;
                 is_unix && proof_sid && cl && cl <= DS_AUTH_HEX_LEN && i < 64 && i < F.nsess;
                 i++) {
                if (F.sess[i].id != proof_sid) continue;
                snprintf(ch, sizeof(ch), "%.*s", (int)cl, chal);
                ds__auth_prove(F.sess[i].key, ch, proof);
                if (F.bad_proof) proof[0] = proof[0] == '0' ? '1' : '0';
            }
            ds__wbuf_cstr(&w, F.name_socket);
            ds__wbuf_cstr(&w, proof);
            if (F.pipeline) {
                ds__wbuf_u32(&w, DS_FEATURE_PIPELINE);
                ds__wbuf_u64(&w, 0); /* no pin table */
            }
        }
        if (want && sid == 0) pass_fd = F.memfd;
        break;
    }
    case DS_OP_SET: {
        (void)ds__rbuf_u8(&r);
        (void)ds__rbuf_u32(&r);
        (void)ds__rbuf_u8(&r);
        uint32_t n = ds__rbuf_u32(&r);
        size_t at = 0;
        bool reject = false;
        ds__wbuf_u32(&w, n);
        for (uint32_t i = 0; i < n; i++) {
            const char *k;
            uint32_t kl = ds__rbuf_str(&r, &k);
            uint64_t len = ds__rbuf_u64(&r);
            bool bad = kl == 6 && memcmp(k, "reject", 6) == 0;
            if (!bad) store(k, kl, data + at, len);
            ds__wbuf_u32(&w, bad ? DS_K_INVALID : DS_K_OK);
            reject |= bad;
            at += len;
        }
        assert_int_equal(at, h->data_len);
        if (reject) {
            ds__wbuf_reset(&w);
            ds__wbuf_cstr(&w, "key 'reject' is not welcome");
            ds__wbuf_u32(&w, n);
            for (uint32_t i = 0; i < n; i++)
                ds__wbuf_u32(&w, DS_K_INVALID);
            status = DS_K_INVALID;
        }
        break;
    }
    case DS_OP_GET: {
        (void)ds__rbuf_i32(&r);
        uint8_t flags = ds__rbuf_u8(&r);
        uint32_t n = ds__rbuf_u32(&r);
        ds__wbuf_u32(&w, n);
        for (uint32_t i = 0; i < n; i++) {
            const char *k;
            uint32_t kl = ds__rbuf_str(&r, &k);
            fake_val_t *e = find(k, kl);
            if (e == NULL) {
                ds__wbuf_u8(&w, DS_VAL_MISSING);
                ds__wbuf_u64(&w, 0);
            } else if ((flags & DS_GET_PIN) || ((flags & DS_GET_WANT_SHM) && e->len > INLINE_MAX)) {
                uint64_t off = arena_alloc(e->len);
                memcpy(F.arena + off, e->val, e->len);
                ds__wbuf_u8(&w, DS_VAL_SHM);
                ds__wbuf_u64(&w, e->len);
                ds__wbuf_u64(&w, off);
                ds__wbuf_u64(&w, ++F.next_handle);
            } else {
                ds__wbuf_u8(&w, DS_VAL_INLINE);
                ds__wbuf_u64(&w, e->len);
                ds__wbuf_bytes(&d, e->val, e->len);
            }
        }
        break;
    }
    case DS_OP_CREATE: {
        (void)ds__rbuf_u8(&r);
        (void)ds__rbuf_u32(&r);
        (void)ds__rbuf_u8(&r);
        uint32_t n = ds__rbuf_u32(&r);
        ds__wbuf_u32(&w, n);
        for (uint32_t i = 0; i < n; i++) {
            const char *k;
            uint32_t kl = ds__rbuf_str(&r, &k);
            uint64_t len = ds__rbuf_u64(&r);
            int c = F.ncreated++ % 64;
            F.created[c].handle = ++F.next_handle;
            F.created[c].off = arena_alloc(len);
            F.created[c].len = len;
            snprintf(F.created[c].key, sizeof(F.created[c].key), "%.*s", (int)kl, k);
            ds__wbuf_u32(&w, DS_K_OK);
            ds__wbuf_u64(&w, F.created[c].off);
            ds__wbuf_u64(&w, F.created[c].handle);
            atomic_fetch_add(&F.creates, 1);
        }
        break;
    }
    case DS_OP_PUBLISH: {
        uint32_t n = ds__rbuf_u32(&r);
        ds__wbuf_u32(&w, n);
        for (uint32_t i = 0; i < n; i++) {
            uint64_t hd = ds__rbuf_u64(&r);
            uint32_t st = DS_K_INVALID;
            for (int c = 0; c < 64; c++) {
                if (F.created[c].handle != hd) continue;
                store(F.created[c].key, strlen(F.created[c].key), F.arena + F.created[c].off,
                      F.created[c].len);
                st = DS_K_OK;
            }
            ds__wbuf_u32(&w, st);
        }
        break;
    }
    case DS_OP_RELEASE:
        assert_true(h->flags & DS_FLAG_NOREPLY);
        atomic_fetch_add(&F.releases, (int)ds__rbuf_u32(&r));
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&F.mu);
    if (!(h->flags & DS_FLAG_NOREPLY)) reply(fd, h, status, &w, d.buf, d.len, pass_fd);
    ds__wbuf_free(&w);
    ds__wbuf_free(&d);
    return true;
}

static void *conn_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    bool is_unix = sa.ss_family == AF_UNIX;
    for (;;) {
        uint8_t hb[DS_WIRE_HEADER_LEN];
        ds_wire_header_t h;
        char err[128];
        if (ds__read_full(fd, hb, sizeof(hb), 0) != 0) break;
        if (ds__wire_header_decode(hb, 1ull << 32, &h, err, sizeof(err)) != 0) break;
        uint8_t *meta = malloc(h.meta_len + 1), *data = malloc(h.data_len + 1);
        bool ok = ds__read_full(fd, meta, h.meta_len, 0) == 0 &&
                  ds__read_full(fd, data, h.data_len, 0) == 0 &&
                  serve_one(fd, is_unix, &h, meta, data);
        free(meta);
        free(data);
        if (!ok) break;
    }
    close(fd);
    return NULL;
}

static void *accept_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&F.stop)) {
        for (int i = 0; i < 2; i++) {
            int fd = accept4(i ? F.lfd_unix : F.lfd_tcp, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) continue;
            /* Blocking reads in the per-connection thread. */
            int flags = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
            pthread_t t;
            pthread_create(&t, NULL, conn_thread, (void *)(intptr_t)fd);
            pthread_detach(t);
        }
        usleep(2000);
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof(F));
    pthread_mutex_init(&F.mu, NULL);
    snprintf(F.worker_id, sizeof(F.worker_id), "0123456789abcdef");
    char err[256];
    snprintf(F.dir, sizeof(F.dir), "/tmp/ds-fake-XXXXXX");
    assert_non_null(mkdtemp(F.dir));
    F.lfd_tcp = ds__tcp_listen("127.0.0.1", 0, err, sizeof(err));
    assert_true(F.lfd_tcp >= 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    getsockname(F.lfd_tcp, (struct sockaddr *)&sa, &sl);
    F.port = ntohs(sa.sin_port);
    char path[128];
    assert_int_equal(ds__socket_path(F.dir, "127.0.0.1", F.port, path, sizeof(path)), 0);
    F.lfd_unix = ds__unix_listen(path, err, sizeof(err));
    assert_true(F.lfd_unix >= 0);
    F.memfd = memfd_create("fake-arena", MFD_CLOEXEC);
    assert_int_equal(ftruncate(F.memfd, ARENA), 0);
    F.arena = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_SHARED, F.memfd, 0);
    assert_true(F.arena != MAP_FAILED);
    pthread_create(&F.th, NULL, accept_thread, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    atomic_store(&F.stop, true);
    pthread_join(F.th, NULL);
    close(F.lfd_tcp);
    close(F.lfd_unix);
    char path[128];
    ds__socket_path(F.dir, "127.0.0.1", F.port, path, sizeof(path));
    unlink(path);
    rmdir(F.dir);
    return 0;
}

static ds_client_t *connect_fake(ds_transport_t t, int request_ms)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = F.port;
    o.transport = t;
    o.unix_socket_dir = F.dir;
    o.request_timeout_ms = request_ms;
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_OK);
    return c;
}

/* Waits (briefly) for NOREPLY releases, which the fake counts asynchronously. */
static void expect_releases(int n)
{
    uint64_t end = ds__now_ms() + 2000;
    while (atomic_load(&F.releases) < n && ds__now_ms() < end)
        usleep(1000);
    assert_int_equal(atomic_load(&F.releases), n);
}

static uint8_t *pattern(size_t len, int seed)
{
    uint8_t *p = malloc(len);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 31 + (size_t)seed);
    return p;
}

static void test_remote_roundtrip(void **state)
{
    (void)state;
    ds_client_t *c = connect_fake(DS_TRANSPORT_TCP, 0);
    assert_false(ds_client_is_local(c));
    enum { N = 1003 };
    static char names[N][32];
    static const char *keys[N];
    static const void *vals[N];
    static size_t lens[N];
    static ds_status_t sts[N];
    static ds_value_t out[N];
    uint8_t *big[3];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "rt.%d", i);
        keys[i] = names[i];
        vals[i] = names[i];
        lens[i] = strlen(names[i]);
    }
    /* A few large values among the small ones: sent from the caller's memory. */
    for (int i = 0; i < 3; i++) {
        big[i] = pattern(100000 + (size_t)i, i);
        vals[500 + i] = big[i];
        lens[500 + i] = 100000 + (size_t)i;
    }
    assert_int_equal(ds_kv_mset(c, N, keys, vals, lens, NULL, sts), DS_K_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(sts[i], DS_K_OK);
    assert_int_equal(ds_kv_mget(c, N, keys, 0, out), DS_K_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(out[i].status, DS_K_OK);
        assert_int_equal(out[i].len, lens[i]);
        assert_memory_equal(out[i].data, vals[i], lens[i]);
        ds_free(out[i].data);
    }
    char buf[200000];
    size_t len = 0;
    assert_int_equal(ds_kv_get_into(c, "rt.501", 0, buf, sizeof(buf), &len), DS_K_OK);
    assert_int_equal(len, 100001);
    assert_memory_equal(buf, big[1], len);
    assert_int_equal(ds_kv_get_into(c, "rt.501", 0, buf, 10, &len), DS_K_INVALID);
    assert_int_equal(len, 100001);
    /* The oversized value was drained: the connection still works. */
    void *v;
    assert_int_equal(ds_kv_get(c, "rt.7", 0, &v, &len), DS_K_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(v, "rt.7", 4);
    ds_free(v);
    assert_int_equal(ds_kv_get(c, "rt.missing", 0, &v, &len), DS_K_NOT_FOUND);
    assert_null(v);
    assert_non_null(strstr(ds_last_error(), "'rt.missing' not found"));
    assert_int_equal(ds_kv_set(c, "reject", "x", 1, NULL), DS_K_INVALID);
    assert_string_equal(ds_last_error(), "worker: key 'reject' is not welcome");
    for (int i = 0; i < 3; i++)
        free(big[i]);
    ds_client_close(c);
}

static void test_remote_create_publish(void **state)
{
    (void)state;
    ds_client_t *c = connect_fake(DS_TRANSPORT_TCP, 0);
    int creates = atomic_load(&F.creates);
    ds_buffer_t *b;
    assert_int_equal(ds_kv_create(c, "rc.one", 5000, NULL, &b), DS_K_OK);
    uint8_t *w = ds_buffer_mutable_data(b);
    assert_non_null(w);
    assert_int_equal((uintptr_t)w % 64, 0);
    memset(w, 'r', 5000);
    assert_int_equal(ds_kv_publish(c, b), DS_K_OK);
    assert_null(ds_buffer_mutable_data(b));
    assert_int_equal(((const uint8_t *)ds_buffer_data(b))[4999], 'r');
    assert_int_equal(ds_kv_publish(c, b), DS_K_INVALID);
    ds_buffer_release(b);
    /* Remote create never reserves worker memory: publish is a SET. */
    assert_int_equal(atomic_load(&F.creates), creates);
    fake_val_t *e = find("rc.one", 6);
    assert_non_null(e);
    assert_int_equal(e->len, 5000);
    assert_int_equal(e->val[123], 'r');

    const char *keys[2] = {"rc.a", "rc.b"};
    size_t sizes[2] = {10, 20};
    ds_buffer_t *bs[2];
    ds_status_t sts[2];
    assert_int_equal(ds_kv_mcreate(c, 2, keys, sizes, NULL, bs), DS_K_OK);
    memset(ds_buffer_mutable_data(bs[0]), 'a', 10);
    memset(ds_buffer_mutable_data(bs[1]), 'b', 20);
    assert_string_equal(ds_buffer_key(bs[1]), "rc.b");
    assert_int_equal(ds_kv_mpublish(c, 2, bs, sts), DS_K_OK);
    assert_int_equal(find("rc.b", 4)->len, 20);
    ds_buffer_release(bs[0]);
    ds_buffer_release(bs[1]);
    ds_client_close(c);
}

static void test_local_paths(void **state)
{
    (void)state;
    ds_client_t *c = connect_fake(DS_TRANSPORT_AUTO, 0);
    assert_true(ds_client_is_local(c));
    int creates = atomic_load(&F.creates), rel = atomic_load(&F.releases);
    assert_int_equal(ds_kv_set(c, "lp.small", "tiny", 4, NULL), DS_K_OK);
    assert_int_equal(atomic_load(&F.creates), creates); /* inline */

    /* Large: CREATE, copy into the arena, PUBLISH, release the creation pin. */
    uint8_t *big = pattern(300000, 5);
    assert_int_equal(ds_kv_set(c, "lp.big", big, 300000, NULL), DS_K_OK);
    assert_int_equal(atomic_load(&F.creates), creates + 1);
    expect_releases(++rel);
    assert_memory_equal(find("lp.big", 6)->val, big, 300000);

    /* A large get arrives pinned in the arena, is copied out and released. */
    void *v;
    size_t len;
    assert_int_equal(ds_kv_get(c, "lp.big", 0, &v, &len), DS_K_OK);
    assert_int_equal(len, 300000);
    assert_memory_equal(v, big, len);
    ds_free(v);
    expect_releases(++rel);

    /* Zero-copy read: every value pinned, released with the buffer, readable
     * after the client is closed. */
    const char *keys[3] = {"lp.small", "lp.none", "lp.big"};
    ds_buffer_t *bufs[3];
    assert_int_equal(ds_kv_get_buffers(c, 3, keys, 0, bufs), DS_K_OK);
    assert_null(bufs[1]);
    assert_int_equal(ds_buffer_size(bufs[0]), 4);
    assert_memory_equal(ds_buffer_data(bufs[0]), "tiny", 4);
    assert_null(ds_buffer_mutable_data(bufs[2]));

    /* Local create hands out arena memory. */
    ds_buffer_t *cb;
    assert_int_equal(ds_kv_create(c, "lp.created", 2000, NULL, &cb), DS_K_OK);
    memset(ds_buffer_mutable_data(cb), 'c', 2000);
    assert_int_equal(ds_kv_publish(c, cb), DS_K_OK);
    assert_int_equal(find("lp.created", 10)->val[1999], 'c');
    ds_buffer_release(cb);
    expect_releases(++rel);

    ds_client_close(c);
    assert_memory_equal(ds_buffer_data(bufs[2]), big, 300000);
    ds_buffer_release(bufs[0]);
    ds_buffer_release(bufs[2]);
    expect_releases(rel + 2);
    free(big);
}

static void test_failures(void **state)
{
    (void)state;
    ds_client_t *c = connect_fake(DS_TRANSPORT_TCP, 200);
    struct {
        fake_mode_t mode;
        ds_status_t want;
        const char *msg;
    } cases[] = {
        {FAKE_SILENT, DS_K_RPC_DEADLINE_EXCEEDED, "timed out"},
        {FAKE_CLOSE, DS_K_CLIENT_WORKER_DISCONNECT, "lost the connection"},
        {FAKE_GARBAGE, DS_K_RUNTIME_ERROR, "malformed"},
        {FAKE_BAD_REQID, DS_K_RUNTIME_ERROR, "malformed"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        atomic_store(&F.mode, cases[i].mode);
        uint64_t t0 = ds__now_ms();
        assert_int_equal(ds_kv_set(c, "f.k", "v", 1, NULL), cases[i].want);
        assert_non_null(strstr(ds_last_error(), cases[i].msg));
        if (cases[i].mode == FAKE_SILENT) {
            uint64_t took = ds__now_ms() - t0;
            assert_true(took >= 190 && took < 2000);
        }
        /* The broken connection was dropped; the next call works. */
        atomic_store(&F.mode, FAKE_OK);
        assert_int_equal(ds_kv_set(c, "f.k", "v", 1, NULL), DS_K_OK);
    }
    ds_client_close(c);
}

/* Threads of one client that share its connection (DS_FEATURE_PIPELINE):
 * right values while the fake behaves; when it answers garbage or another
 * request's id, every call fails promptly as malformed (none waits for its
 * deadline, none gets another's answer), and calls work again after. */
typedef struct {
    ds_client_t *c;
    int id, iters;
    int ok, wrong;
    ds_status_t st;
    uint64_t ms;
} mux_arg_t;

static void *mux_thread(void *p)
{
    mux_arg_t *a = p;
    uint64_t t0 = ds__now_ms();
    a->st = DS_K_OK;
    for (int i = 0; i < a->iters && a->st == DS_K_OK; i++) {
        char key[32], val[48], got[64];
        snprintf(key, sizeof(key), "mux.%d", a->id);
        int n = snprintf(val, sizeof(val), "value %d of thread %d", i, a->id);
        size_t len = 0;
        a->st = ds_kv_set(a->c, key, val, (size_t)n, NULL);
        if (a->st == DS_K_OK) a->st = ds_kv_get_into(a->c, key, 0, got, sizeof(got), &len);
        if (a->st == DS_K_OK && (len != (size_t)n || memcmp(got, val, len) != 0)) a->wrong++;
        if (a->st == DS_K_OK) a->ok++;
    }
    a->ms = ds__now_ms() - t0;
    return NULL;
}

static void mux_round(ds_client_t *c, int iters, mux_arg_t *args, int n)
{
    pthread_t th[8];
    for (int i = 0; i < n; i++) {
        args[i] = (mux_arg_t){.c = c, .id = i, .iters = iters};
        assert_int_equal(pthread_create(&th[i], NULL, mux_thread, &args[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

static void test_shared_connection(void **state)
{
    (void)state;
    enum { N = 6 };
    F.pipeline = true;
    ds_client_t *c = connect_fake(DS_TRANSPORT_TCP, 3000);
    mux_arg_t a[N];
    int hellos = atomic_load(&F.hellos);
    mux_round(c, 200, a, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].st, DS_K_OK);
        assert_int_equal(a[i].wrong, 0);
    }
    /* Six threads, a handful of connections: they shared. */
    printf("6 threads: %d new connections\n", atomic_load(&F.hellos) - hellos);
    assert_true(atomic_load(&F.hellos) - hellos <= 3);
    fake_mode_t lies[] = {FAKE_BAD_REQID, FAKE_GARBAGE};
    for (size_t l = 0; l < 2; l++) {
        atomic_store(&F.mode, lies[l]);
        mux_round(c, 5, a, N);
        for (int i = 0; i < N; i++) {
            assert_int_equal(a[i].st, DS_K_RUNTIME_ERROR);
            assert_int_equal(a[i].wrong, 0);
            assert_true(a[i].ms < 1500); /* not the 3 s deadline */
        }
        atomic_store(&F.mode, FAKE_OK);
        mux_round(c, 20, a, N);
        for (int i = 0; i < N; i++) {
            assert_int_equal(a[i].st, DS_K_OK);
            assert_int_equal(a[i].wrong, 0);
        }
    }
    ds_client_close(c);
    F.pipeline = false;
}

static void test_argument_checks(void **state)
{
    (void)state;
    ds_client_t *c = connect_fake(DS_TRANSPORT_TCP, 0);
    const char *one[1] = {"ok"};
    const char *bad[1] = {"a b"};
    ds_value_t out[1];
    void *v;
    size_t len;
    ds_buffer_t *b;
    assert_int_equal(ds_kv_mget(c, 0, one, 0, out), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "empty"));
    assert_int_equal(ds_kv_get(c, "a b", 0, &v, &len), DS_K_INVALID);
    assert_string_equal(ds_last_error(), "key 'a b' has invalid byte 0x20 at offset 1");
    assert_int_equal(ds_kv_del(c, 1, bad, NULL), DS_K_INVALID);
    assert_int_equal(ds_kv_set(c, "ok", "", 0, NULL), DS_K_INVALID);
    assert_int_equal(ds_kv_get(c, "ok", -1, &v, &len), DS_K_INVALID);
    assert_int_equal(ds_kv_create(c, "ok", 0, NULL, &b), DS_K_INVALID);
    assert_null(b);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = (ds_write_mode_t)9;
    assert_int_equal(ds_kv_set(c, "ok", "v", 1, &p), DS_K_INVALID);
    char longkey[DS_MAX_KEY_LEN + 2];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_int_equal(ds_kv_set(c, longkey, "v", 1, NULL), DS_K_INVALID);

    static const char *many[DS_MAX_EXIST_BATCH + 1];
    static bool exists[DS_MAX_EXIST_BATCH + 1];
    for (size_t i = 0; i <= DS_MAX_EXIST_BATCH; i++)
        many[i] = "k";
    assert_int_equal(ds_kv_del(c, DS_MAX_BATCH + 1, many, NULL), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "10001"));
    assert_int_equal(ds_kv_exist(c, DS_MAX_EXIST_BATCH + 1, many, exists), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "100001"));
    assert_int_equal(ds_kv_mpublish(c, 1, (ds_buffer_t *const[]){NULL}, NULL), DS_K_INVALID);
    ds_client_close(c);

    ds_client_options_t o;
    ds_client_options_init(&o);
    ds_client_t *x = (ds_client_t *)1;
    assert_int_equal(ds_client_connect(&o, &x), DS_K_INVALID); /* no host */
    assert_null(x);
    o.host = "127.0.0.1";
    o.port = 70000;
    assert_int_equal(ds_client_connect(&o, &x), DS_K_INVALID);
    o.port = F.port;
    o.transport = DS_TRANSPORT_LOCAL;
    o.unix_socket_dir = "/nonexistent-dir";
    assert_int_equal(ds_client_connect(&o, &x), DS_K_RPC_UNAVAILABLE);
    assert_non_null(strstr(ds_last_error(), "/nonexistent-dir/worker-127.0.0.1-"));
    /* AUTO falls back to TCP when the socket is not there. */
    o.transport = DS_TRANSPORT_AUTO;
    assert_int_equal(ds_client_connect(&o, &x), DS_K_OK);
    assert_false(ds_client_is_local(x));
    ds_client_close(x);
    assert_false(ds_client_is_local(NULL));
    ds_client_close(NULL);
    ds_buffer_release(NULL);
}

/* Makes the pool connection the client holds fail, so that its next call
 * has to open (join with) a new one. The anchor is left alone. */
static void drop_pool_connection(ds_client_t *c)
{
    atomic_store(&F.mode, FAKE_CLOSE);
    assert_int_equal(ds_kv_set(c, "x.drop", "v", 1, NULL), DS_K_CLIENT_WORKER_DISCONNECT);
    atomic_store(&F.mode, FAKE_OK);
}

static void test_session_key(void **state)
{
    (void)state;
    /* A local client creates its session on the anchor and joins it for the
     * pool connection: the join carries the key the worker gave. */
    ds_client_t *c = connect_fake(DS_TRANSPORT_AUTO, 0);
    assert_true(ds_client_is_local(c));
    pthread_mutex_lock(&F.mu);
    char key[40];
    snprintf(key, sizeof(key), "%s", F.sess[(F.nsess - 1) % 64].key);
    assert_int_equal(strlen(key), 32);
    assert_string_equal(F.last_join_key, key);
    pthread_mutex_unlock(&F.mu);

    /* A rejoin after a lost pool connection carries it too. */
    drop_pool_connection(c);
    F.last_join_key[0] = '\0';
    int created = atomic_load(&F.sessions_created);
    assert_int_equal(ds_kv_set(c, "sk.a", "v", 1, NULL), DS_K_OK);
    assert_string_equal(F.last_join_key, key);
    assert_int_equal(atomic_load(&F.sessions_created), created);

    /* A key the worker disputes while the session's anchor is alive is an
     * error for the call, not a reason to give the session up. */
    pthread_mutex_lock(&F.mu);
    F.sess[(F.nsess - 1) % 64].key[0] ^= 1;
    pthread_mutex_unlock(&F.mu);
    drop_pool_connection(c);
    assert_int_equal(ds_kv_set(c, "sk.b", "v", 1, NULL), DS_K_NOT_AUTHORIZED);
    assert_non_null(strstr(ds_last_error(), "session key does not match"));
    assert_int_equal(atomic_load(&F.sessions_created), created);
    pthread_mutex_lock(&F.mu);
    F.sess[(F.nsess - 1) % 64].key[0] ^= 1;
    pthread_mutex_unlock(&F.mu);
    assert_int_equal(ds_kv_set(c, "sk.b", "v", 1, NULL), DS_K_OK);
    ds_client_close(c);

    /* A worker that sends no key (older than session keys) is joined with
     * an empty one. */
    F.legacy_hello = true;
    c = connect_fake(DS_TRANSPORT_AUTO, 0);
    assert_true(ds_client_is_local(c));
    assert_string_equal(F.last_join_key, "");
    assert_int_equal(ds_kv_set(c, "sk.c", "v", 1, NULL), DS_K_OK);
    ds_client_close(c);
    F.legacy_hello = false;
}

static void test_worker_identity(void **state)
{
    (void)state;
    ds_client_t *c = connect_fake(DS_TRANSPORT_AUTO, 0);
    assert_int_equal(ds_kv_set(c, "wi.k", "v1", 2, NULL), DS_K_OK);
    int created = atomic_load(&F.sessions_created);
    int hellos = atomic_load(&F.hellos);

    /* The worker comes back as another identity that still accepts the old
     * session id and key (as a worker reusing ids could): the client must
     * not keep using a session across identities, and starts a new one. */
    pthread_mutex_lock(&F.mu);
    snprintf(F.worker_id, sizeof(F.worker_id), "fedcba9876543210");
    pthread_mutex_unlock(&F.mu);
    drop_pool_connection(c);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c, "wi.k", 0, &v, &len), DS_K_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(v, "v1", 2);
    ds_free(v);
    assert_int_equal(atomic_load(&F.sessions_created), created + 1);
    /* the join the new identity answered (dropped), the new session's anchor
     * and its pool connection */
    assert_int_equal(atomic_load(&F.hellos), hellos + 3);
    assert_true(ds_client_is_local(c));

    /* Same identity again: joins keep the session. */
    drop_pool_connection(c);
    assert_int_equal(ds_kv_set(c, "wi.k", "v2", 2, NULL), DS_K_OK);
    assert_int_equal(atomic_load(&F.sessions_created), created + 1);
    ds_client_close(c);
}

/* Discovery: a client that finds no socket where it looks reaches the fake
 * over TCP, learns the socket's path from HELLO and moves to it only when
 * the process there proves it holds the TCP session's key. */
static void test_discovery_proof(void **state)
{
    (void)state;
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = F.port;
    o.unix_socket_dir = "/nonexistent-dir";
    ds__socket_path(F.dir, "127.0.0.1", F.port, F.name_socket, sizeof(F.name_socket));
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_OK);
    assert_true(ds_client_is_local(c));
    assert_int_equal(ds_kv_set(c, "dp.a", "v", 1, NULL), DS_K_OK);
    ds_client_close(c);

    /* A process at the path that cannot prove it: TCP for AUTO, an error
     * for LOCAL. */
    F.bad_proof = true;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_OK);
    assert_false(ds_client_is_local(c));
    assert_int_equal(ds_kv_set(c, "dp.b", "v", 1, NULL), DS_K_OK);
    ds_client_close(c);
    o.transport = DS_TRANSPORT_LOCAL;
    c = NULL;
    assert_int_not_equal(ds_client_connect(&o, &c), DS_K_OK);
    assert_null(c);
    assert_non_null(strstr(ds_last_error(), "could not prove"));
    F.bad_proof = false;
    F.name_socket[0] = '\0';
}

/* No worker at all: a local client says what failed both ways, each once
 * (the TCP half used to be formatted from the buffer it was written into). */
static void test_nobody_there(void **state)
{
    (void)state;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &al), 0);
    close(s); /* a port nobody listens on */
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = ntohs(a.sin_port);
    o.transport = DS_TRANSPORT_LOCAL;
    o.unix_socket_dir = F.dir;
    o.connect_timeout_ms = 500;
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_RPC_UNAVAILABLE);
    assert_null(c);
    const char *m = ds_last_error();
    const char *tcp = strstr(m, "(and over TCP: ");
    assert_non_null(tcp);
    assert_null(strstr(tcp + 1, "(and over TCP: "));
    assert_non_null(strstr(m, ".sock"));
    assert_non_null(strstr(tcp, "refused"));
    assert_int_equal(m[strlen(m) - 1], ')');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_roundtrip), cmocka_unit_test(test_remote_create_publish),
        cmocka_unit_test(test_local_paths),      cmocka_unit_test(test_failures),
        cmocka_unit_test(test_argument_checks),  cmocka_unit_test(test_session_key),
        cmocka_unit_test(test_worker_identity),  cmocka_unit_test(test_discovery_proof),
        cmocka_unit_test(test_nobody_there),     cmocka_unit_test(test_shared_connection),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
