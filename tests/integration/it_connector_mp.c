/* YuanrongConnector between processes: a producer process and a consumer
 * process, each with its own connector, exchange 1,000 payloads of mixed
 * sizes (a few bytes to 6 MiB) and kinds (serialized values, raw bytes, raw
 * tensors) through one worker; the consumer checks every byte against the
 * deterministic content and cleans each request up. Run once with the
 * consumer on shared memory and once over TCP. Afterwards the store holds
 * none of the keys.
 *
 * Payloads are written NONE_L2_CACHE_EVICT (volatile), so the producer may
 * not run arbitrarily far ahead of the consumer: the consumer acknowledges
 * each payload through a pipe and the producer keeps at most WINDOW in
 * flight, as a pipeline's scheduler would. Children report through their
 * exit status and stderr, and die with the test (PR_SET_PDEATHSIG). */
#include "it_connector_util.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <cmocka.h>

#define N 1000
#define WINDOW 16

static dst_worker_t W;
static ds_client_t *KV;

static int setup(void **state)
{
    (void)state;
    if (dst_worker_start(&W, 256, NULL) != 0) return -1;
    KV = dst_connect(&W, DS_TRANSPORT_AUTO);
    return KV != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ds_client_close(KV);
    dst_worker_stop(&W);
    return 0;
}

typedef enum { K_VALUE = 0, K_BYTES, K_TENSOR } kind_t;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL; /* splitmix64 */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Payload i: its kind and size, 10% 1-6 MiB, 30% 1-256 KiB, 60% 1-200 B. */
static void shape_of(int i, kind_t *kind, size_t *size)
{
    uint64_t h = mix((uint64_t)i);
    *kind = (kind_t)(i % 3);
    unsigned r = (unsigned)(h % 100);
    h >>= 8;
    if (r < 10)
        *size = (1u << 20) + (size_t)(h % (5u << 20));
    else if (r < 40)
        *size = 1024 + (size_t)(h % (255u * 1024));
    else
        *size = 1 + (size_t)(h % 200);
    if (*kind == K_TENSOR) *size = (*size + 3) / 4 * 4;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, " (%s)\n", ds_last_error());                                               \
        _exit(1);                                                                                  \
    } while (0)

static omni_connector_t *child_connector(const char *transport)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *more[] = {"get_sub_timeout_ms", "10000", "transport", transport, NULL};
    omni_connector_t *c = itc_open(&W, "YuanrongConnector", more);
    if (c == NULL) FAIL("cannot create the connector");
    return c;
}

static void produce(int ack_fd, const char *tag)
{
    omni_connector_t *c = child_connector("auto");
    for (int i = 0; i < N; i++) {
        if (i >= WINDOW) {
            struct pollfd p = {ack_fd, POLLIN, 0};
            char b;
            if (poll(&p, 1, 60000) != 1 || read(ack_fd, &b, 1) != 1)
                FAIL("producer: no acknowledgement for payload %d", i - WINDOW);
        }
        kind_t kind;
        size_t size;
        shape_of(i, &kind, &size);
        uint8_t *buf = malloc(size);
        if (buf == NULL) FAIL("producer: out of memory");
        dst_fill(buf, size, 1000 + (uint64_t)i);
        char rid[64];
        snprintf(rid, sizeof(rid), "mp-%s-%d", tag, i);
        omni_value_t *v = NULL;
        omni_data_t d;
        int64_t shape[1] = {(int64_t)(size / 4)};
        omni_tensor_view_t tv = {OMNI_DTYPE_FLOAT32, 1, shape, size / 4, buf, size, NULL};
        if (kind == K_VALUE) {
            v = omni_value_new_map();
            if (omni_map_set(v, "i", omni_value_new_int(i)) != DS_K_OK ||
                omni_map_set(v, "payload", omni_value_new_bin_ref(buf, size)) != DS_K_OK)
                FAIL("producer: building payload %d", i);
            d = omni_data_value(v);
        } else if (kind == K_BYTES) {
            d = omni_data_bytes(buf, size);
        } else {
            d = omni_data_tensor(&tv);
        }
        if (omni_connector_put(c, "0", "1", rid, &d, NULL, NULL) != DS_K_OK)
            FAIL("producer: put %s", rid);
        omni_value_free(v);
        free(buf);
    }
    omni_health_t h;
    omni_connector_health(c, &h);
    if (h.puts != N || h.errors != 0)
        FAIL("producer: puts %llu errors %llu", (unsigned long long)h.puts,
             (unsigned long long)h.errors);
    omni_connector_free(c);
    _exit(0);
}

static void verify(int i, omni_received_t *r)
{
    kind_t kind;
    size_t size;
    shape_of(i, &kind, &size);
    uint64_t seed = 1000 + (uint64_t)i;
    const void *data = NULL;
    size_t len = 0;
    if (kind == K_BYTES) {
        if (omni_received_kind(r) != OMNI_DATA_BYTES) FAIL("payload %d is not bytes", i);
        data = omni_received_data(r);
        len = omni_received_size(r);
    } else if (kind == K_TENSOR) {
        omni_tensor_view_t t;
        if (omni_received_kind(r) != OMNI_DATA_TENSOR || omni_received_tensor(r, &t) != DS_K_OK ||
            t.dtype != OMNI_DTYPE_FLOAT32 || t.ndim != 1 || t.numel != size / 4)
            FAIL("payload %d is not the float32[%zu] tensor", i, size / 4);
        data = t.data;
        len = t.nbytes;
    } else {
        const omni_value_t *v;
        int64_t got = -1;
        if (omni_received_value(r, &v) != DS_K_OK ||
            omni_value_get_int(omni_map_get(v, "i"), &got) != DS_K_OK || got != i ||
            omni_value_get_bin(omni_map_get(v, "payload"), &data, &len) != DS_K_OK)
            FAIL("payload %d is not the value map", i);
    }
    if (len != size || !dst_check(data, len, seed))
        FAIL("payload %d: %zu bytes, expected %zu, content %s", i, len, size,
             len == size ? "corrupted" : "unchecked");
}

static void consume(int ack_fd, const char *tag, const char *transport)
{
    omni_connector_t *c = child_connector(transport);
    for (int i = 0; i < N; i++) {
        char rid[64];
        snprintf(rid, sizeof(rid), "mp-%s-%d", tag, i);
        omni_received_t *r = NULL;
        if (omni_connector_get(c, "0", "1", rid, NULL, &r) != DS_K_OK)
            FAIL("consumer: get %s", rid);
        verify(i, r);
        omni_received_free(r);
        if (omni_connector_cleanup(c, rid) != DS_K_OK) FAIL("consumer: cleanup %s", rid);
        /* The producer waits for N - WINDOW acknowledgements, then is done. */
        if (i < N - WINDOW && write(ack_fd, "k", 1) != 1) FAIL("consumer: ack %d", i);
    }
    omni_health_t h;
    omni_connector_health(c, &h);
    if (h.gets != N || h.errors != 0 || h.timeouts != 0 || h.not_found != 0)
        FAIL("consumer: gets %llu errors %llu timeouts %llu", (unsigned long long)h.gets,
             (unsigned long long)h.errors, (unsigned long long)h.timeouts);
    omni_connector_free(c);
    _exit(0);
}

/* Waits for pid up to deadline_ms; kills it (by PID) on timeout. */
static int wait_child(pid_t pid, uint64_t deadline_ns)
{
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 && errno != EINTR) return -1;
        if (ds__now_ns() > deadline_ns) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -2;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void exchange(const char *tag, const char *consumer_transport)
{
    int ack[2];
    assert_int_equal(pipe(ack), 0);
    fflush(NULL);
    uint64_t t0 = ds__now_ns();
    pid_t cons = fork();
    assert_true(cons >= 0);
    if (cons == 0) {
        close(ack[0]);
        consume(ack[1], tag, consumer_transport);
    }
    pid_t prod = fork();
    assert_true(prod >= 0);
    if (prod == 0) {
        close(ack[1]);
        produce(ack[0], tag);
    }
    close(ack[0]);
    close(ack[1]);
    uint64_t deadline = ds__now_ns() + 200ull * 1000000000ull;
    int cs = wait_child(cons, deadline);
    int ps = wait_child(prod, deadline);
    printf("  %s: %d payloads in %.2f s (producer exit %d, consumer exit %d)\n", tag, N,
           itc_ms_since(t0) / 1000.0, ps, cs);
    assert_int_equal(ps, 0);
    assert_int_equal(cs, 0);

    /* Nothing left behind. */
    char(*keys)[64] = malloc(sizeof(*keys) * N);
    const char *kp[N];
    bool exists[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "mp-%s-%d:0_1", tag, i);
        kp[i] = keys[i];
    }
    assert_int_equal(ds_kv_exist(KV, N, kp, exists), DS_K_OK);
    for (int i = 0; i < N; i++)
        if (exists[i]) fail_msg("%s is still in the store", kp[i]);
    free(keys);
}

static void test_shared_memory_consumer(void **state)
{
    (void)state;
    exchange("shm", "auto");
}

static void test_tcp_consumer(void **state)
{
    (void)state;
    exchange("tcp", "tcp");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_memory_consumer),
        cmocka_unit_test(test_tcp_consumer),
    };
    return dst_run_group_tests_name("it_connector_mp", tests, setup, teardown);
}
