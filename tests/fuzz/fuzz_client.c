/* libFuzzer target for the client library's response handling (src/client):
 * a fake worker on a loopback TCP port answers the client's requests with
 * frames taken from the input, so every parser on the client side - header
 * checks, per-opcode metadata, data sections, the connection pool's recovery
 * from a broken connection - meets hostile answers, as it would from a buggy
 * or malicious remote worker.
 *
 * Input: byte 0 control (bit 0: HELLO answers come from the input too, else
 * the fake worker answers HELLO properly), bytes 1..4 choose four client
 * calls, the rest is a sequence of answers, each a u16 length (little-endian)
 * and that many bytes. The fake worker copies each request's id into the
 * answer (when it is long enough to hold one) so answers are matched, and
 * closes the connection when the input runs out.
 *
 * Oracles: the sanitizers (and libFuzzer's leak check), no hang past the
 * client's request timeout, and every call either succeeds or fails with a
 * message. */
#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"
#include "ds/kv_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_client: check failed: %s (line %d)\n", #cond, __LINE__);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int lfd = -1;
static int lport;

typedef struct {
    const uint8_t *p;
    size_t left;
    bool fuzz_hello;
    atomic_bool done;
} fake_t;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 64) == 0 &&
          getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
    lport = ntohs(sa.sin_port);
    return 0;
}

/* A client on loopback sends its next request at once. */
static int read_n(int fd, void *buf, size_t n)
{
    return ds__read_full(fd, buf, n, ds__now_ms() + 200);
}

/* Whether a client reading this answer has all the bytes it announces. One
 * that does not would wait for the rest until its request timeout, so the
 * fake worker hangs up after sending it instead: fast, and it exercises the
 * client's handling of a connection lost mid-answer. */
static bool answer_complete(const uint8_t *p, size_t n)
{
    ds_wire_header_t h;
    char err[128];
    if (n < DS_WIRE_HEADER_LEN || ds__wire_header_decode(p, UINT64_MAX, &h, err, sizeof(err)) != 0)
        return false;
    return (uint64_t)(n - DS_WIRE_HEADER_LEN) >= (uint64_t)h.meta_len + h.data_len;
}

/* Reads one request; returns its header, or -1 when the client went away. */
static int read_request(int fd, ds_wire_header_t *h)
{
    uint8_t hb[DS_WIRE_HEADER_LEN];
    char err[128];
    if (read_n(fd, hb, sizeof(hb)) != 0) return -1;
    if (ds__wire_header_decode(hb, UINT64_MAX, h, err, sizeof(err)) != 0) return -1;
    uint64_t skip = h->meta_len + h->data_len;
    if (skip > (64u << 20)) return -1;
    static uint8_t sink[1 << 16];
    while (skip > 0) {
        size_t n = skip < sizeof(sink) ? (size_t)skip : sizeof(sink);
        if (read_n(fd, sink, n) != 0) return -1;
        skip -= n;
    }
    return 0;
}

static void send_hello(int fd, uint64_t req_id)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_cstr(&m, "");
    ds__wbuf_u64(&m, 1);
    ds__wbuf_u64(&m, 0);
    ds__wbuf_u32(&m, 65536);
    ds__wbuf_cstr(&m, "0123456789abcdef");
    ds__wbuf_u32(&m, 1);
    ds__wbuf_u64(&m, 0); /* no shared GET index */
    ds__wbuf_u32(&m, 0);
    ds__wbuf_u32(&m, 0);
    ds__wbuf_cstr(&m, "00112233445566778899aabbccddeeff");
    uint8_t hb[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = DS_FLAG_RESPONSE,
                          .opcode = DS_OP_HELLO,
                          .meta_len = (uint32_t)m.len,
                          .req_id = req_id};
    ds__wire_header_encode(&h, hb);
    (void)!send(fd, hb, sizeof(hb), MSG_NOSIGNAL);
    (void)!send(fd, m.buf, m.len, MSG_NOSIGNAL);
    ds__wbuf_free(&m);
}

/* Serves one connection until the client closes it or the input runs out
 * (then returns false). */
static bool serve(fake_t *f, int fd)
{
    for (;;) {
        ds_wire_header_t h;
        if (read_request(fd, &h) != 0) return true;
        if (h.flags & DS_FLAG_NOREPLY) continue;
        if (h.opcode == DS_OP_HELLO && !f->fuzz_hello) {
            send_hello(fd, h.req_id);
            continue;
        }
        if (f->left < 2) return false;
        size_t n = (size_t)f->p[0] | (size_t)f->p[1] << 8;
        f->p += 2;
        f->left -= 2;
        if (n > f->left) n = f->left;
        uint8_t *chunk = malloc(n ? n : 1);
        CHECK(chunk != NULL);
        memcpy(chunk, f->p, n);
        f->p += n;
        f->left -= n;
        if (n >= 24)
            for (int i = 0; i < 8; i++)
                chunk[16 + i] = (uint8_t)(h.req_id >> (8 * i));
        (void)!send(fd, chunk, n, MSG_NOSIGNAL);
        bool whole = answer_complete(chunk, n);
        free(chunk);
        if (!whole) return true;
    }
}

static void *fake_worker(void *arg)
{
    fake_t *f = arg;
    bool more = true;
    while (!atomic_load(&f->done)) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        if (atomic_load(&f->done)) { /* the wake-up connection */
            close(fd);
            break;
        }
        /* Once the input is spent, connections are closed at once, so the
         * client fails fast instead of waiting for its timeout. */
        if (more) more = serve(f, fd);
        close(fd);
    }
    return NULL;
}

static void call(ds_client_t *c, uint8_t which)
{
    const char *keys[3] = {"fz-a", "fz-b", "fz-c"};
    const void *vals[3] = {"one", "two-two", "three-three-three"};
    size_t lens[3] = {3, 7, 17};
    ds_status_t sts[3];
    switch (which % 14) {
    case 0:
        (void)ds_kv_set(c, keys[0], vals[0], lens[0], NULL);
        break;
    case 1:
        (void)ds_kv_mset(c, 3, keys, vals, lens, NULL, sts);
        break;
    case 2: {
        void *v = NULL;
        size_t len = 0;
        if (ds_kv_get(c, keys[0], 0, &v, &len) == DS_K_OK && len) {
            volatile uint8_t x = ((uint8_t *)v)[len - 1];
            (void)x;
        }
        ds_free(v);
        break;
    }
    case 3: {
        ds_value_t out[3];
        memset(out, 0, sizeof(out));
        ds_status_t st = ds_kv_mget(c, 3, keys, 0, out);
        for (int i = 0; i < 3; i++) {
            /* On failure nothing is handed out. */
            if (st != DS_K_OK && st != DS_K_NOT_FOUND) CHECK(out[i].data == NULL);
            if (out[i].status == DS_K_OK && out[i].len) {
                volatile uint8_t x = ((uint8_t *)out[i].data)[out[i].len - 1];
                (void)x;
            }
            ds_free(out[i].data);
        }
        break;
    }
    case 4: {
        uint8_t buf[16];
        size_t len = 0;
        (void)ds_kv_get_into(c, keys[1], 0, buf, sizeof(buf), &len);
        break;
    }
    case 5: {
        ds_buffer_t *b[2] = {NULL, NULL};
        if (ds_kv_get_buffers(c, 2, keys, 0, b) == DS_K_OK) {
            for (int i = 0; i < 2; i++) {
                if (b[i] && ds_buffer_size(b[i])) {
                    volatile uint8_t x =
                        ((const uint8_t *)ds_buffer_data(b[i]))[ds_buffer_size(b[i]) - 1];
                    (void)x;
                }
                ds_buffer_release(b[i]);
            }
        }
        break;
    }
    case 6: {
        ds_buffer_t *b = NULL;
        if (ds_kv_create(c, keys[2], 32, NULL, &b) == DS_K_OK) {
            memset(ds_buffer_mutable_data(b), 7, 32);
            (void)ds_kv_publish(c, b);
            ds_buffer_release(b);
        }
        break;
    }
    case 7:
        (void)ds_kv_del(c, 2, keys, sts);
        break;
    case 8: {
        bool ex[3];
        (void)ds_kv_exist(c, 3, keys, ex);
        break;
    }
    case 9:
        (void)ds_kv_expire(c, 2, keys, 5, sts);
        break;
    case 10: {
        uint64_t sizes[2];
        (void)ds_kv_query_size(c, 2, keys, sizes, sts);
        break;
    }
    case 11: {
        char *k = NULL;
        if (ds_kv_generate_key(c, "pre", &k) == DS_K_OK) CHECK(k != NULL && strlen(k) > 0);
        ds_free(k);
        break;
    }
    case 12:
        (void)ds_client_health_check(c);
        break;
    default: {
        void *v = NULL;
        size_t len = 0;
        (void)ds_kv_get(c, keys[2], 5, &v, &len);
        ds_free(v);
        break;
    }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5) return 0;
    fake_t f = {.p = data + 5, .left = size - 5, .fuzz_hello = data[0] & 1};
    atomic_init(&f.done, false);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fake_worker, &f) == 0);
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = "127.0.0.1";
    o.port = lport;
    o.transport = DS_TRANSPORT_TCP;
    o.connect_timeout_ms = 1000;
    o.request_timeout_ms = 1000;
    ds_client_t *c = NULL;
    ds_status_t st = ds_client_connect(&o, &c);
    if (st == DS_K_OK) {
        CHECK(c != NULL);
        for (int i = 1; i <= 4; i++)
            call(c, data[i]);
        ds_client_close(c);
    } else {
        CHECK(c == NULL);
        CHECK(ds_last_error() != NULL && ds_last_error()[0] != '\0');
    }
    /* Wake the fake worker with one last connection, which it just closes. */
    atomic_store(&f.done, true);
    char err[128];
    int wake = ds__tcp_connect("127.0.0.1", lport, 2000, err, sizeof(err));
    pthread_join(th, NULL);
    if (wake >= 0) close(wake);
    return 0;
}
