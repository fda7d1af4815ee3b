/* A well-behaved client keeps being served while a hostile one floods the
 * worker up to a quota, and the hostile one is refused with the quota's
 * status, naming its flag. Each flood runs in a thread of this process
 * against its own worker, briefly, bounded in requests and time:
 *  - read latches past --max_read_latches_per_client (K_OUT_OF_MEMORY), on
 *    many keys and many times on one key;
 *  - subscribe-gets past --max_pending_subscriptions_per_client
 *    (K_TRY_AGAIN);
 *  - silent TCP sockets reopened as the worker closes them, past
 *    --max_handshake_conns_per_peer (K_RUNTIME_ERROR) and
 *    --handshake_timeout_ms (K_RPC_DEADLINE_EXCEEDED);
 *  - large SETs pipelined by a session that already has one in flight, past
 *    --max_client_inflight_mb (K_OUT_OF_MEMORY);
 *  - all four at once.
 * Meanwhile a local (Unix-socket) and a TCP client set and get 1 KiB values
 * (and latch and subscribe-get their own keys) and every one of their
 * requests must succeed with the right bytes. No timing is asserted beyond
 * the clients' request timeout of 5 s (bench/flood_bench measures the
 * latency). */
#include "it_hostile_raw.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>

#include <cmocka.h>

static dst_worker_t W;

#define FLOOD_MAX_MS 20000
#define FLOOD_MAX_REQS 100000
#define NLATCH 1000
#define NSUB 2000
#define NSILENT 48
#define BULK_LEN (8u << 20)

/* One flood: its thread stops when told, after FLOOD_MAX_MS or after
 * FLOOD_MAX_REQS requests, and keeps what it was refused with. */
typedef struct flood {
    void *(*run)(void *);
    pthread_t th;
    atomic_int stop;
    atomic_int refusals; /* answers with want_status */
    int want_status;
    const char *want_flag; /* the refusal's message names this */
    atomic_int named;      /* refusals whose message named want_flag */
    int want_status2;      /* a second status the flood may see (or -1) */
    const char *want_flag2;
    atomic_int named2;
    atomic_int other; /* answers with any other status than OK, NOT_FOUND */
    char other_msg[256];
    uint64_t deadline;
    int reqs;
} flood_t;

static bool going(flood_t *f)
{
    return !atomic_load(&f->stop) && ds__now_ms() < f->deadline && f->reqs++ < FLOOD_MAX_REQS;
}

static void saw(flood_t *f, int status, const char *msg)
{
    msg = msg ? msg : "";
    if (status == f->want_status) {
        atomic_fetch_add(&f->refusals, 1);
        if (strstr(msg, f->want_flag))
            atomic_fetch_add(&f->named, 1);
        else
            fprintf(stderr, "refused without naming %s: %s\n", f->want_flag, msg);
    } else if (status == f->want_status2) {
        if (strstr(msg, f->want_flag2)) atomic_fetch_add(&f->named2, 1);
    } else if (status != DS_K_OK && status != DS_K_NOT_FOUND) {
        if (atomic_fetch_add(&f->other, 1) == 0)
            snprintf(f->other_msg, sizeof(f->other_msg), "%s: %s", ds_status_name(status), msg);
    }
}

static ds_client_t *connect_kind(ds_transport_t t)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = t;
    o.unix_socket_dir = W.sockdir;
    o.request_timeout_ms = 5000; /* the liveness bound: each request answered within 5 s */
    ds_client_t *c = NULL;
    return ds_client_connect(&o, &c) == DS_K_OK ? c : NULL;
}

/* ---- the floods (threads: no cmocka asserts here) ---- */

static void *flood_latches(void *arg)
{
    flood_t *f = arg;
    ds_client_t *c = connect_kind(DS_TRANSPORT_TCP);
    static char names[NLATCH][24];
    static const char *keys[NLATCH], *one[NLATCH];
    static const void *vals[NLATCH];
    static size_t lens[NLATCH];
    for (int i = 0; i < NLATCH; i++) {
        snprintf(names[i], sizeof(names[i]), "flood-latch-%d", i);
        keys[i] = names[i];
        one[i] = names[0];
        vals[i] = "v";
        lens[i] = 1;
    }
    const char *extra = "flood-latch-extra";
    if (c == NULL || ds_kv_mset(c, NLATCH, keys, vals, lens, NULL, NULL) != DS_K_OK ||
        ds_kv_set(c, extra, "v", 1, NULL) != DS_K_OK) {
        saw(f, DS_K_RUNTIME_ERROR, "latch flood: setup failed");
        if (c) ds_client_close(c);
        return NULL;
    }
    for (int round = 0; going(f); round++) {
        /* Up to the cap on many keys, then on one key; one more is refused. */
        const char *const *set = round % 2 ? one : keys;
        saw(f, ds_kv_rlatch(c, NLATCH, set, 60000, NULL), ds_last_error());
        saw(f, ds_kv_rlatch(c, 1, &extra, 60000, NULL), ds_last_error());
        saw(f, ds_kv_unrlatch(c, NLATCH, set, NULL), ds_last_error());
    }
    ds_client_close(c);
    return NULL;
}

typedef struct {
    ds_client_t *c;
    int n, wait_ms;
    ds_status_t st;
    char err[256];
} sub_hold_t;

static void *sub_hold(void *arg)
{
    sub_hold_t *h = arg;
    static char names[NSUB][24];
    static const char *keys[NSUB];
    ds_value_t *out = calloc(NSUB, sizeof(*out));
    for (int i = 0; i < h->n; i++) {
        snprintf(names[i], sizeof(names[i]), "flood-never-%d", i);
        keys[i] = names[i];
    }
    h->st = out ? ds_kv_mget(h->c, (size_t)h->n, keys, h->wait_ms, out) : DS_K_OUT_OF_MEMORY;
    snprintf(h->err, sizeof(h->err), "%s", ds_last_error() ? ds_last_error() : "");
    free(out);
    return NULL;
}

static void *flood_subs(void *arg)
{
    flood_t *f = arg;
    ds_client_t *c = connect_kind(DS_TRANSPORT_TCP);
    if (c == NULL) {
        saw(f, DS_K_RUNTIME_ERROR, "subscription flood: connect failed");
        return NULL;
    }
    /* One subscribe-get holds the client's whole share; the rest are past
     * it. Each hold lasts a second, then the next takes the share again. */
    while (going(f)) {
        sub_hold_t h = {c, NSUB, 1000, DS_K_OK, ""};
        pthread_t th;
        if (pthread_create(&th, NULL, sub_hold, &h) != 0) break;
        /* the rest once the hold is registered (the good clients' own
         * subscribe-gets may be counted too) */
        uint64_t until = ds__now_ms() + 2000;
        while (dst_stat(&W, "subscriptions_waiting") < NSUB && ds__now_ms() < until)
            usleep(5000);
        until = ds__now_ms() + 600;
        while (ds__now_ms() < until && going(f)) {
            void *v = NULL;
            size_t n = 0;
            ds_status_t st = ds_kv_get(c, "flood-never-more", 500, &v, &n);
            saw(f, st, ds_last_error());
            if (st == DS_K_OK) ds_free(v);
        }
        pthread_join(th, NULL);
        saw(f, h.st, h.err);
    }
    ds_client_close(c);
    return NULL;
}

/* A silent TCP socket from 127.0.0.2: the attacker is another peer than the
 * well-behaved clients (127.0.0.1), as it would be on a network, so the
 * per-peer cap falls on it alone. 0 or -1. */
static int open_silent(hr_conn_t *c)
{
    memset(c, 0, sizeof(*c));
    ds__wbuf_init(&c->out);
    c->next_id = 1;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -1;
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.2", &src.sin_addr);
    inet_pton(AF_INET, W.host, &dst.sin_addr);
    dst.sin_port = htons((uint16_t)W.port);
    if (bind(c->fd, (struct sockaddr *)&src, sizeof(src)) != 0 ||
        connect(c->fd, (struct sockaddr *)&dst, sizeof(dst)) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    return 0;
}

static void *flood_silent(void *arg)
{
    flood_t *f = arg;
    static hr_conn_t s[NSILENT];
    for (int i = 0; i < NSILENT; i++)
        open_silent(&s[i]);
    /* Closed ones are reopened in batches, every 500 ms: each batch evicts
     * the ones waiting past --max_handshake_conns_per_peer, and between
     * batches those left wait out --handshake_timeout_ms. */
    uint64_t next_batch = ds__now_ms() + 500;
    while (going(f)) {
        bool batch = ds__now_ms() >= next_batch;
        if (batch) next_batch = ds__now_ms() + 500;
        struct pollfd p[NSILENT];
        for (int i = 0; i < NSILENT; i++)
            p[i] = (struct pollfd){.fd = s[i].fd, .events = POLLIN};
        if (poll(p, NSILENT, 50) < 0) continue;
        for (int i = 0; i < NSILENT; i++) {
            if (s[i].fd >= 0 && !p[i].revents) continue;
            if (s[i].fd < 0 && !batch) continue;
            if (s[i].fd >= 0) {
                /* Told why and closed; reopened at once. */
                hr_frame_t fr;
                if (hr_read_frame(&s[i], &fr, ds__now_ms() + 200) == 0) {
                    saw(f, (int)fr.h.status, fr.err);
                    hr_frame_free(&fr);
                }
                hr_close(&s[i]);
                continue;
            }
            open_silent(&s[i]);
        }
    }
    for (int i = 0; i < NSILENT; i++)
        hr_close(&s[i]);
    return NULL;
}

static uint64_t set_header(hr_conn_t *c, const char *key, uint64_t len)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_set(&m, key, len);
    uint64_t id = hr_add_raw(c, DS_OP_SET, 0, &m, len, NULL, 0);
    ds__wbuf_free(&m);
    return id;
}

static void *flood_bulk(void *arg)
{
    flood_t *f = arg;
    dst_worker_t w = W;
    uint8_t *data = malloc(BULK_LEN);
    hr_conn_t a, b;
    if (data == NULL || hr_open_hello(&a, &w, false) != 0 || hr_open(&b, &w, false) != 0 ||
        hr_hello(&b, a.sid, false, a.skey, 5000) != 0 || b.hello_status != 0) {
        saw(f, DS_K_RUNTIME_ERROR, "bulk flood: setup failed");
        free(data);
        return NULL;
    }
    memset(data, 'b', BULK_LEN);
    /* a's SET is in flight for the whole flood: its data never all comes. */
    uint64_t aid = set_header(&a, "flood-bulk-a", BULK_LEN);
    if (hr_flush(&a) != 0 || ds__write_full(a.fd, data, 4096, ds__now_ms() + 5000) != 0)
        saw(f, DS_K_RUNTIME_ERROR, "bulk flood: a's SET not sent");
    /* b pipelines two large SETs at a time, past the quota. */
    while (going(f)) {
        uint64_t ids[2];
        bool sent = true;
        for (int k = 0; k < 2 && sent; k++) {
            ids[k] = set_header(&b, "flood-bulk-b", BULK_LEN);
            sent = hr_flush(&b) == 0 &&
                   ds__write_full(b.fd, data, BULK_LEN, ds__now_ms() + 20000) == 0;
        }
        for (int k = 0; k < 2 && sent; k++) {
            hr_frame_t *fr = hr_answer(&b, ids[k], ds__now_ms() + 20000);
            if (fr == NULL) {
                sent = false;
                break;
            }
            saw(f, (int)fr->h.status, fr->err);
        }
        for (uint32_t i = 0; i < b.ngot; i++)
            hr_frame_free(&b.got[i]);
        b.ngot = 0;
        if (!sent) {
            saw(f, DS_K_RUNTIME_ERROR, "bulk flood: connection lost");
            break;
        }
    }
    /* a's data completes: its SET is stored. */
    if (ds__write_full(a.fd, data + 4096, BULK_LEN - 4096, ds__now_ms() + 20000) == 0) {
        hr_frame_t *fr = hr_answer(&a, aid, ds__now_ms() + 20000);
        saw(f, fr ? (int)fr->h.status : DS_K_RUNTIME_ERROR, fr ? fr->err : "a: no answer");
    } else {
        saw(f, DS_K_RUNTIME_ERROR, "bulk flood: a's data not sent");
    }
    hr_close(&a);
    hr_close(&b);
    free(data);
    return NULL;
}

/* ---- the well-behaved clients ---- */

static void flood_start(flood_t *f)
{
    atomic_store(&f->stop, 0);
    f->deadline = ds__now_ms() + FLOOD_MAX_MS;
    assert_int_equal(pthread_create(&f->th, NULL, f->run, f), 0);
}

/* Until the flood has been refused at least once (bounded). */
static void flood_refused(flood_t *f)
{
    uint64_t until = ds__now_ms() + 15000;
    while ((atomic_load(&f->refusals) == 0 ||
            (f->want_status2 >= 0 && atomic_load(&f->named2) == 0)) &&
           ds__now_ms() < until)
        usleep(10000);
    if (atomic_load(&f->refusals) == 0) fprintf(stderr, "never refused %s\n", f->want_flag);
    assert_true(atomic_load(&f->refusals) > 0);
}

static void flood_end(flood_t *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    if (atomic_load(&f->other)) fprintf(stderr, "flood saw: %s\n", f->other_msg);
    assert_int_equal(atomic_load(&f->other), 0);
    /* every refusal named the quota's flag */
    assert_true(atomic_load(&f->named) > 0);
    assert_int_equal(atomic_load(&f->named), atomic_load(&f->refusals));
}

/* n rounds of 1 KiB set+get on each client, values checked; then each
 * latches and releases its own key, and subscribe-gets a key the other
 * sets. */
static void well_behaved(ds_client_t *const *c, int n, const char *tag)
{
    uint8_t val[1024], got[1024];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            char key[64];
            snprintf(key, sizeof(key), "good-%s-%d", tag, k);
            dst_fill(val, sizeof(val), (uint64_t)(i * 2 + k + 1));
            assert_int_equal(ds_kv_set(c[k], key, val, sizeof(val), NULL), DS_K_OK);
            size_t len = 0;
            memset(got, 0, sizeof(got));
            assert_int_equal(ds_kv_get_into(c[k], key, 0, got, sizeof(got), &len), DS_K_OK);
            assert_int_equal(len, sizeof(val));
            assert_memory_equal(got, val, sizeof(val));
        }
    }
    for (int k = 0; k < 2; k++) {
        char key[64];
        snprintf(key, sizeof(key), "good-%s-%d", tag, k);
        const char *kp = key;
        assert_int_equal(ds_kv_rlatch(c[k], 1, &kp, 5000, NULL), DS_K_OK);
        assert_int_equal(ds_kv_unrlatch(c[k], 1, &kp, NULL), DS_K_OK);
    }
    /* a subscribe-get of a key nobody sets waits and misses: never refused */
    void *none = NULL;
    size_t nlen = 0;
    assert_int_equal(ds_kv_get(c[0], "good-never-set", 100, &none, &nlen), DS_K_NOT_FOUND);
    assert_int_equal(ds_kv_get(c[1], "good-never-set", 100, &none, &nlen), DS_K_NOT_FOUND);
    /* a subscribe-get of a key the other client has set */
    char sub[64];
    snprintf(sub, sizeof(sub), "good-%s-sub", tag);
    assert_int_equal(ds_kv_set(c[1], sub, "published", 9, NULL), DS_K_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(c[0], sub, 3000, &v, &len), DS_K_OK);
    assert_int_equal(len, 9);
    assert_memory_equal(v, "published", 9);
    ds_free(v);
}

static void run_floods(flood_t **f, int nf, const char *tag)
{
    ds_client_t *c[2] = {connect_kind(DS_TRANSPORT_LOCAL), connect_kind(DS_TRANSPORT_TCP)};
    assert_non_null(c[0]);
    assert_non_null(c[1]);
    well_behaved(c, 20, "idle");
    for (int i = 0; i < nf; i++)
        flood_start(f[i]);
    for (int i = 0; i < nf; i++)
        flood_refused(f[i]);
    well_behaved(c, 200, tag);
    for (int i = 0; i < nf; i++)
        flood_end(f[i]);
    well_behaved(c, 20, "after");
    ds_client_close(c[0]);
    ds_client_close(c[1]);
}

static flood_t latches = {.run = flood_latches,
                          .want_status = DS_K_OUT_OF_MEMORY,
                          .want_flag = "--max_read_latches_per_client",
                          .want_status2 = -1};
static flood_t subs = {.run = flood_subs,
                       .want_status = DS_K_TRY_AGAIN,
                       .want_flag = "--max_pending_subscriptions_per_client",
                       .want_status2 = -1};
static flood_t silent = {.run = flood_silent,
                         .want_status = DS_K_RUNTIME_ERROR,
                         .want_flag = "--max_handshake_conns_per_peer",
                         .want_status2 = DS_K_RPC_DEADLINE_EXCEEDED,
                         .want_flag2 = "--handshake_timeout_ms"};
static flood_t bulk = {.run = flood_bulk,
                       .want_status = DS_K_OUT_OF_MEMORY,
                       .want_flag = "--max_client_inflight_mb",
                       .want_status2 = -1};

#define FLAGS                                                                                      \
    "--max_read_latches_per_client 1000 --max_pending_subscriptions 100000 "                       \
    "--max_pending_subscriptions_per_client 2000 --max_handshake_conns_per_peer 16 "               \
    "--handshake_timeout_ms 300 --max_client_inflight_mb 4"

static void reset(flood_t *f)
{
    atomic_store(&f->refusals, 0);
    atomic_store(&f->named, 0);
    atomic_store(&f->named2, 0);
    atomic_store(&f->other, 0);
    f->reqs = 0;
}

static void one(flood_t *f, const char *tag)
{
    reset(f);
    flood_t *fs[1] = {f};
    run_floods(fs, 1, tag);
}

static void test_latches(void **state)
{
    (void)state;
    one(&latches, "latches");
}

static void test_subscriptions(void **state)
{
    (void)state;
    one(&subs, "subs");
}

static void test_silent(void **state)
{
    (void)state;
    one(&silent, "silent");
    /* 48 silent sockets against 16 per peer: evicted; the ones left wait
     * out the deadline, told so. */
    assert_true(atomic_load(&silent.named2) > 0);
}

static void test_bulk(void **state)
{
    (void)state;
    one(&bulk, "bulk");
    void *v = NULL;
    size_t n = 0;
    ds_client_t *c = connect_kind(DS_TRANSPORT_TCP);
    assert_non_null(c);
    /* the in-flight SET completed and was stored */
    assert_int_equal(ds_kv_get(c, "flood-bulk-a", 0, &v, &n), DS_K_OK);
    assert_int_equal(n, BULK_LEN);
    ds_free(v);
    ds_client_close(c);
}

static void test_all_at_once(void **state)
{
    (void)state;
    flood_t *fs[4] = {&latches, &subs, &silent, &bulk};
    for (int i = 0; i < 4; i++)
        reset(fs[i]);
    run_floods(fs, 4, "all");
}

static int start(void **state)
{
    (void)state;
    return dst_worker_start(&W, 128, FLAGS);
}

static int stop(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

int main(void)
{
    if (getenv("DS_TEST_WORKER")) {
        printf("it_flood starts workers with its own flags: skipped with DS_TEST_WORKER\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_latches, start, stop),
        cmocka_unit_test_setup_teardown(test_subscriptions, start, stop),
        cmocka_unit_test_setup_teardown(test_silent, start, stop),
        cmocka_unit_test_setup_teardown(test_bulk, start, stop),
        cmocka_unit_test_setup_teardown(test_all_at_once, start, stop),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
