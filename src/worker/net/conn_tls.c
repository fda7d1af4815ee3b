/* TLS on the worker's TCP connections (--enable_tls; common/tls.h).
 *
 * A TCP connection accepted while the worker has a TLS context starts in
 * the handshake, driven by the loop like any other I/O: each step runs when
 * epoll says the socket is ready for what the step waits for, and no
 * request is read before the handshake is over. A client that speaks our
 * protocol in plain TCP gets one plain error frame saying the worker wants
 * TLS, then the connection closes; any other failure (a refused
 * certificate, garbage) closes it with a warning naming the reason. The
 * worker goes on serving everyone else either way.
 *
 * Afterwards the connection's reads and writes go through ds__conn_recv and
 * ds__conn_sendv, which use the session when the connection has one. Unix
 * socket connections never do.
 *
 * A connection refused before HELLO (the connection limit, guard.c's
 * evictions) is told why in a frame the client can read: without TLS
 * before the handshake's first byte (the client's failed handshake keeps
 * the bytes it got instead, common/tls.h ds__tls_first_bytes), through the
 * session after the handshake (or once a last step can finish it: the
 * client's side is over), and not at all in between. */
#include "worker/net/conn.h"

#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The first bytes of every frame of ours ("YRDS", DS_WIRE_MAGIC). */
static const uint8_t plain_magic[4] = {0x59, 0x52, 0x44, 0x53};

void ds__conn_tls_start(ds_conn_t *c)
{
    ds_net_t *net = c->net;
    if (c->is_unix || net->tls == NULL) return;
    char err[256];
    c->tls = ds__tls_new(net->tls, c->io.fd, err, sizeof(err));
    if (c->tls == NULL) {
        DS_LOG_WARN("conn %llu: %s", (unsigned long long)c->id, err);
        c->tls_failed = true;
        return;
    }
    c->tls_hs = 1;
}

/* A plain frame of ours where a TLS handshake should begin: say what is
 * wrong, in a frame the client can read, before closing. */
static bool refuse_plain(ds_conn_t *c)
{
    uint8_t first[4];
    ssize_t n = recv(c->io.fd, first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
    if (n < (ssize_t)sizeof(first) || memcmp(first, plain_magic, sizeof(first)) != 0) return false;
    const char *msg = "this worker accepts TLS connections only (--enable_tls): connect with "
                      "TLS (the client's enable_tls and tls_ca)";
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, msg);
    uint8_t hdr[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = DS_FLAG_RESPONSE,
                          .opcode = DS_OP_HELLO,
                          .status = DS_K_NOT_SUPPORTED,
                          .meta_len = (uint32_t)w.len,
                          .req_id = 1};
    ds__wire_header_encode(&h, hdr);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {w.buf, w.len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t wr = sendmsg(c->io.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)wr;
    ds__wbuf_free(&w);
    c->net->ctr.tls_failures++;
    DS_LOG_WARN("conn %llu: a plain TCP client at a TLS worker: refused",
                (unsigned long long)c->id);
    ds__conn_close(c, "plain TCP client");
    return true;
}

bool ds__conn_tls_handshake(ds_conn_t *c)
{
    if (c->tls_failed) {
        ds__conn_close(c, "no TLS session");
        return true;
    }
    if (c->tls_hs == 1) {
        uint8_t b;
        ssize_t n = recv(c->io.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) {
            ds__conn_close(c, "peer closed before the TLS handshake");
            return true;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                ds__conn_close(c, strerror(errno));
            return true;
        }
        if (refuse_plain(c)) return true;
        c->tls_hs = 2;
    }
    short ev = 0;
    char err[256];
    int r = ds__tls_handshake_step(c->tls, &ev, err, sizeof(err));
    if (r < 0) {
        c->net->ctr.tls_failures++;
        DS_LOG_WARN("conn %llu: %s", (unsigned long long)c->id, err);
        ds__conn_close(c, err);
        return true;
    }
    if (r == 0) {
        ds__loop_mod(c->net->loop, &c->io, EPOLLRDHUP | (ev == POLLOUT ? EPOLLOUT : EPOLLIN));
        return true;
    }
    c->tls_hs = 0;
    return false;
}

ssize_t ds__conn_recv(ds_conn_t *c, void *buf, size_t len)
{
    if (c->tls) return ds__tls_recv(c->tls, buf, len);
    return recv(c->io.fd, buf, len, MSG_DONTWAIT);
}

ssize_t ds__conn_sendv(ds_conn_t *c, const struct iovec *iov, int n)
{
    if (c->tls) return ds__tls_writev(c->tls, iov, n);
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    return sendmsg(c->io.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void ds__conn_send_refusal(ds_conn_t *c, const struct iovec *iov, int n)
{
    if (c->tls && c->tls_hs == 0) {
        ssize_t w = ds__tls_writev(c->tls, iov, n);
        (void)w;
        return;
    }
    /* Mid-handshake the client reads TLS records, where a plain frame of
     * ours would only be garbage. A client whose side of the handshake is
     * over has its last message in the socket already: one more step
     * finishes ours (without waiting), and the frame goes through the
     * session. Otherwise the client learns of the close alone. */
    if (c->tls && c->tls_hs == 2) {
        short ev = 0;
        char err[256];
        if (ds__tls_handshake_step(c->tls, &ev, err, sizeof(err)) != 1) return;
        c->tls_hs = 0;
        ssize_t w = ds__tls_writev(c->tls, iov, n);
        (void)w;
        return;
    }
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(c->io.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
}

bool ds__conn_tls_pending(ds_conn_t *c)
{
    return c->tls != NULL && c->tls_hs == 0 && ds__tls_pending(c->tls);
}

void ds__conn_tls_free(ds_conn_t *c)
{
    ds__tls_free(c->tls);
    c->tls = NULL;
}
