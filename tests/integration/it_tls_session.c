/* TLS sessions (src/common/tls.c) on a socket pair, without a worker:
 * certificates made at run time (dst_tls_certs).
 *  - a write of many records that does not fit in the socket says EAGAIN,
 *    says it again while the socket stays full, and reports its bytes only
 *    once they are out; the reader gets every byte in order;
 *  - bytes a session holds are reported by ds__tls_pending, which is false
 *    whenever a read said EAGAIN, and reading on returns all of them;
 *  - one thread per direction on each side (a writer and a reader sharing
 *    a session, as the worker's sender thread and loop do) moves 8 MiB each
 *    way byte-exact, in writes of mixed sizes and iovec counts. */
#include "harness.h"

#include "common/clock.h"
#include "common/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

static ds_tls_ctx_t *S, *C; /* server and client contexts */

static int setup(void **state)
{
    (void)state;
    char d[256], ca[300], cert[300], key[300], err[512];
    if (dst_tls_certs(d, sizeof(d)) != 0) return -1;
    snprintf(ca, sizeof(ca), "%s/ca.pem", d);
    snprintf(cert, sizeof(cert), "%s/worker.pem", d);
    snprintf(key, sizeof(key), "%s/worker.key", d);
    ds_tls_conf_t sc = {.server = true, .ca = ca, .cert = cert, .key = key};
    ds_tls_conf_t cc = {.ca = ca};
    S = ds__tls_ctx_new(&sc, err, sizeof(err));
    if (S == NULL) fprintf(stderr, "server context: %s\n", err);
    C = S ? ds__tls_ctx_new(&cc, err, sizeof(err)) : NULL;
    if (S && C == NULL) fprintf(stderr, "client context: %s\n", err);
    return C ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ds__tls_ctx_free(S);
    ds__tls_ctx_free(C);
    return 0;
}

typedef struct {
    int fd[2];      /* 0: server's socket, 1: client's */
    ds_tls_t *t[2]; /* their sessions */
} pair_t;

/* A connected non-blocking socket pair with a session on each end, the
 * handshake done; sndbuf > 0 shrinks both send buffers. */
static void pair_open(pair_t *p, int sndbuf)
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fd), 0);
    char err[512];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fcntl(p->fd[i], F_SETFL, O_NONBLOCK), 0);
        if (sndbuf > 0)
            assert_int_equal(setsockopt(p->fd[i], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)),
                             0);
        p->t[i] = ds__tls_new(i == 0 ? S : C, p->fd[i], err, sizeof(err));
        assert_non_null(p->t[i]);
    }
    bool done[2] = {false, false};
    for (int step = 0; step < 1000 && !(done[0] && done[1]); step++) {
        for (int i = 0; i < 2; i++) {
            if (done[i]) continue;
            short ev = 0;
            int r = ds__tls_handshake_step(p->t[i], &ev, err, sizeof(err));
            if (r < 0) fprintf(stderr, "handshake: %s\n", err);
            assert_true(r >= 0);
            done[i] = r == 1;
        }
        if (!(done[0] && done[1])) poll(NULL, 0, 1);
    }
    assert_true(done[0] && done[1]);
}

static void pair_close(pair_t *p)
{
    for (int i = 0; i < 2; i++) {
        ds__tls_free(p->t[i]);
        close(p->fd[i]);
    }
}

static void fill(uint8_t *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
}

/* Reads what the session returns without waiting, into dst[*got..cap);
 * returns once a read says EAGAIN, checking that pending is false then. */
static void drain(ds_tls_t *t, uint8_t *dst, size_t cap, size_t *got, size_t chunk)
{
    for (int i = 0; i < 100000; i++) {
        size_t want = cap - *got < chunk ? cap - *got : chunk;
        if (want == 0) return;
        ssize_t r = ds__tls_recv(t, dst + *got, want);
        if (r < 0) {
            assert_int_equal(errno, EAGAIN);
            assert_false(ds__tls_pending(t));
            return;
        }
        assert_true(r > 0);
        *got += (size_t)r;
    }
    fail_msg("drain did not end");
}

static void test_gathered_write_reported_when_out(void **state)
{
    (void)state;
    pair_t p;
    pair_open(&p, 16 << 10);
    const size_t total = 4u << 20;
    uint8_t *src = malloc(total), *dst = malloc(total);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, total, 7);
    /* Nobody reads yet: the records of the first write cannot all go. */
    struct iovec v = {src, total};
    errno = 0;
    assert_int_equal(ds__tls_writev(p.t[1], &v, 1), -1);
    assert_int_equal(errno, EAGAIN);
    /* The repeat while the socket is still full is no progress either. */
    errno = 0;
    assert_int_equal(ds__tls_writev(p.t[1], &v, 1), -1);
    assert_int_equal(errno, EAGAIN);
    size_t sent = 0, got = 0;
    bool first = true;
    for (int i = 0; i < 200000 && got < total; i++) {
        drain(p.t[0], dst, total, &got, 100000);
        if (sent < total) {
            struct iovec w = {src + sent, total - sent};
            ssize_t r = ds__tls_writev(p.t[1], &w, 1);
            if (r < 0) {
                assert_int_equal(errno, EAGAIN);
            } else {
                /* The first write's bytes, all of them, once they are out. */
                if (first) assert_int_equal(r, DS_TLS_WRITE_MAX);
                first = false;
                assert_true(r > 0);
                sent += (size_t)r;
            }
        }
    }
    assert_int_equal(sent, total);
    assert_int_equal(got, total);
    assert_memory_equal(src, dst, total);
    free(src);
    free(dst);
    pair_close(&p);
}

static void test_pending_bytes_read_without_socket(void **state)
{
    (void)state;
    pair_t p;
    pair_open(&p, 1 << 20);
    const size_t total = 100u << 10;
    uint8_t *src = malloc(total), *dst = malloc(total);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, total, 9);
    /* Small pieces and the start of the large piece after them make one
     * full record (16 KiB) through the stage; the rest of the large piece
     * leaves as gathered records in one send. */
    const size_t rec = 16u << 10;
    struct iovec v[3] = {{src, 10}, {src + 10, 990}, {src + 1000, total - 1000}};
    assert_int_equal(ds__tls_writev(p.t[0], v, 3), rec);
    struct iovec rest = {src + rec, total - rec};
    assert_int_equal(ds__tls_writev(p.t[0], &rest, 1), total - rec);
    size_t got = 0;
    ssize_t r = ds__tls_recv(p.t[1], dst, 1000);
    assert_true(r > 0 && r <= 1000);
    got = (size_t)r;
    /* The rest is in the session, none of it in the socket: only
     * ds__tls_pending tells the reader to read on. */
    assert_true(ds__tls_pending(p.t[1]));
    struct pollfd pf = {.fd = p.fd[1], .events = POLLIN};
    assert_int_equal(poll(&pf, 1, 0), 0);
    /* Everything comes without waiting for the socket: the writer is done. */
    drain(p.t[1], dst, total, &got, 3000);
    assert_int_equal(got, total);
    assert_memory_equal(src, dst, total);
    free(src);
    free(dst);
    pair_close(&p);
}

typedef struct {
    ds_tls_t *t;
    int fd;
    uint8_t *buf;
    size_t len;
    int rc;
} io_arg_t;

static bool wait_fd(int fd, short ev)
{
    struct pollfd pf = {.fd = fd, .events = ev};
    return poll(&pf, 1, 10000) > 0;
}

/* Writes buf in pieces of varying sizes, some as several iovecs. */
static void *writer(void *a)
{
    io_arg_t *x = a;
    size_t off = 0, piece = 0;
    uint32_t k = 1;
    x->rc = -1;
    for (int i = 0; i < 1000000 && off < x->len; i++) {
        /* A write that said EAGAIN is repeated as it was (tls.h). */
        if (piece == 0) {
            k = k * 1103515245u + 12345u;
            piece = (k >> 8) % 3 == 0 ? 1 + (k >> 12) % 3000 : 1 + (k >> 12) % (600u << 10);
            if (piece > x->len - off) piece = x->len - off;
        }
        size_t a1 = piece > 7 ? 7 : piece;
        struct iovec v[2] = {{x->buf + off, a1}, {x->buf + off + a1, piece - a1}};
        ssize_t r = ds__tls_writev(x->t, v, piece > a1 ? 2 : 1);
        if (r > 0) {
            off += (size_t)r;
            piece = 0;
        } else if (r < 0 && errno == EAGAIN) {
            if (!wait_fd(x->fd, POLLOUT)) return NULL;
        } else {
            return NULL;
        }
    }
    x->rc = off == x->len ? 0 : -1;
    return NULL;
}

static void *reader(void *a)
{
    io_arg_t *x = a;
    size_t off = 0;
    x->rc = -1;
    for (int i = 0; i < 1000000 && off < x->len; i++) {
        size_t want = x->len - off < 70000 ? x->len - off : 70000;
        ssize_t r = ds__tls_recv(x->t, x->buf + off, want);
        if (r > 0) {
            off += (size_t)r;
        } else if (r < 0 && errno == EAGAIN) {
            if (!ds__tls_pending(x->t) && !wait_fd(x->fd, POLLIN)) return NULL;
        } else {
            return NULL;
        }
    }
    x->rc = off == x->len ? 0 : -1;
    return NULL;
}

static void test_both_directions_threads(void **state)
{
    (void)state;
    pair_t p;
    pair_open(&p, 64 << 10);
    const size_t total = 8u << 20;
    uint8_t *src[2], *dst[2];
    for (int i = 0; i < 2; i++) {
        src[i] = malloc(total);
        dst[i] = calloc(1, total);
        assert_non_null(src[i]);
        assert_non_null(dst[i]);
        fill(src[i], total, 100 + (uint32_t)i);
    }
    /* side i writes src[i] to the other side, which reads it into dst[i] */
    io_arg_t w[2], r[2];
    pthread_t th[4];
    for (int i = 0; i < 2; i++) {
        w[i] = (io_arg_t){.t = p.t[i], .fd = p.fd[i], .buf = src[i], .len = total};
        r[i] = (io_arg_t){.t = p.t[1 - i], .fd = p.fd[1 - i], .buf = dst[i], .len = total};
        assert_int_equal(pthread_create(&th[2 * i], NULL, writer, &w[i]), 0);
        assert_int_equal(pthread_create(&th[2 * i + 1], NULL, reader, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(w[i].rc, 0);
        assert_int_equal(r[i].rc, 0);
        assert_memory_equal(src[i], dst[i], total);
        free(src[i]);
        free(dst[i]);
    }
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gathered_write_reported_when_out),
        cmocka_unit_test(test_pending_bytes_read_without_socket),
        cmocka_unit_test(test_both_directions_threads),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
