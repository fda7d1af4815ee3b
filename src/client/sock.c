/* The socket transport (ds_conn_ops_t, client_internal.h): a request's
 * frames leave in as few sendmsg calls as the iovec limit allows, and the
 * answer is read through the connection's input buffer (conn.c), so that a
 * small answer (header, metadata and a value of a few KiB) costs one recv.
 * Over TCP that recv blocks in the kernel (with the socket's receive
 * timeout as the deadline); over a Unix socket a poll comes first, which
 * wakes sooner there. Either way a small round trip is two or three
 * syscalls instead of six, a noticeable share of a small request's time.
 * Before sleeping on the answer a call watches for it for a while
 * (busy_poll_us, common/spin.h). TLS (common/tls.h) wraps the TCP socket's
 * reads and writes; its reads block. */
#include "client/client_internal.h"

#include "common/clock.h"
#include "common/spin.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

int ds__wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = ds__now_ms();
        if (now >= deadline) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(deadline - now > INT_MAX ? INT_MAX : deadline - now));
        if (r > 0) return 0;
        if (r == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (errno != EINTR) return -1;
    }
}

/* Below this much time left a read polls instead of blocking: the receive
 * timeout's clock ticks in jiffies and could overrun a deadline this close. */
#define DS_BLOCKING_RECV_MIN_MS 50u

/* Gives the socket a receive timeout that ends a blocking recv before the
 * deadline, left ms away. The setting is kept while it lies between half of
 * left and left: a setsockopt per call would cost what blocking saves, and a
 * timeout that fires early only makes the caller look at the deadline and
 * block again. */
static int arm_recv_timeout(ds_conn_t *conn, uint64_t left)
{
    if (left > INT_MAX) left = INT_MAX;
    uint64_t cur = (uint64_t)conn->sock.rcvtimeo_ms;
    if (cur > 0 && cur <= left && cur >= left / 2) return 0;
    int want = (int)(left - left / 8);
    struct timeval tv = {.tv_sec = want / 1000, .tv_usec = (want % 1000) * 1000};
    if (setsockopt(conn->sock.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) return -1;
    conn->sock.rcvtimeo_ms = want;
    return 0;
}

/* One recv of at most cap bytes into buf, waiting for the first of them
 * until the deadline. The byte count, or -1 with errno set (ETIMEDOUT,
 * ECONNRESET when the worker closed the connection). */
ssize_t ds__sock_recv(ds_conn_t *conn, void *buf, size_t cap, uint64_t deadline)
{
    for (;;) {
        uint64_t now = ds__now_ms();
        if (now >= deadline) {
            errno = ETIMEDOUT;
            return -1;
        }
        /* Unix sockets: a recv that does not wait, then poll while there is
         * nothing to read. Measured here, a blocked recv of a Unix socket is
         * woken ~1.5 us later than a poll on it, while on TCP blocking in
         * recv is ~1 us faster than poll + recv. A reply that has arrived
         * (always, after polling caught it) costs no poll. */
        bool block = !conn->sock.is_unix && deadline - now >= DS_BLOCKING_RECV_MIN_MS &&
                     arm_recv_timeout(conn, deadline - now) == 0;
        /* A TLS session reads its socket as it is (blocking): near the
         * deadline, wait for bytes first unless the session holds some. */
        if (conn->sock.tls && !block && !ds__tls_pending(conn->sock.tls) &&
            ds__wait_fd(conn->sock.fd, POLLIN, deadline) != 0)
            return -1;
        ssize_t r = conn->sock.tls ? ds__tls_recv(conn->sock.tls, buf, cap)
                                   : recv(conn->sock.fd, buf, cap, block ? 0 : MSG_DONTWAIT);
        if (r > 0) return r;
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        /* Blocking: the receive timeout passed; look at the deadline again. */
        if (!block && !conn->sock.tls && ds__wait_fd(conn->sock.fd, POLLIN, deadline) != 0)
            return -1;
    }
}

int ds__send_iov(int fd, ds_tls_t *tls, struct iovec *iov, size_t n, uint64_t deadline)
{
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = n > IOV_MAX ? IOV_MAX : n};
        ssize_t w = tls ? ds__tls_writev(tls, iov, (int)m.msg_iovlen)
                        : sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (ds__wait_fd(fd, POLLOUT, deadline) != 0) return -1;
                continue;
            }
            return -1;
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int ds__sock_call(ds_conn_t *conn, struct iovec *iov, size_t n, uint64_t req, bool noreply,
                  uint64_t deadline)
{
    (void)req;
    if (ds__send_iov(conn->sock.fd, conn->sock.tls, iov, n, deadline) != 0) return -1;
    if (noreply || conn->in_pos != conn->in_len) return 0;
    if (conn->in == NULL && (conn->in = malloc(DS_CLIENT_INBUF)) == NULL) {
        errno = ENOMEM;
        return -1;
    }
    uint64_t t0 = conn->spin.max_ns ? ds__now_ns() : 0;
    uint64_t window = t0 ? ds__spin_window(&conn->spin, t0) : 0;
    bool contended = false;
    if (window && conn->sock.tls) {
        if (!ds__tls_pending(conn->sock.tls)) {
            /* Through TLS the watch only peeks: the bytes stay in the
             * socket for the session, whose read then finds them without
             * sleeping. */
            uint64_t until = t0 + window;
            for (;;) {
                uint8_t b;
                ssize_t r = recv(conn->sock.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
                if (r >= 0) break; /* bytes, or the close the read reports */
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
                uint64_t now;
                if ((contended = ds__spin_yield(&now)) || now >= until) break;
            }
        }
    } else if (window) {
        /* Watch for the reply before sleeping on it (common/spin.h): a
         * round trip then costs no wake-up of this thread. What the watching
         * recv gets is the start of the reply, read on from the buffer.
         *
         * Unlike the other waits, this one goes on polling while other
         * threads share the CPU (spin.h says why), each step yielding it;
         * only a neighbour that then holds the CPU for a time slice stops
         * it. */
        uint64_t until = t0 + window;
        for (;;) {
            ssize_t r = recv(conn->sock.fd, conn->in, DS_CLIENT_INBUF, MSG_DONTWAIT);
            if (r > 0) {
                conn->in_pos = 0;
                conn->in_len = (uint32_t)r;
                break;
            }
            if (r == 0) {
                errno = ECONNRESET;
                return -1;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
            uint64_t now;
            if ((contended = ds__spin_yield(&now)) || now >= until) break;
        }
    }
    if (conn->in_pos == conn->in_len) {
        /* Sleep on the reply's first bytes: the header and metadata are
         * read on from the buffer. */
        ssize_t r = ds__sock_recv(conn, conn->in, DS_CLIENT_INBUF, deadline);
        if (r < 0) return -1;
        conn->in_pos = 0;
        conn->in_len = (uint32_t)r;
    }
    if (t0) ds__spin_done(&conn->spin, ds__now_ns() - t0, contended);
    return 0;
}

void ds__sock_shutdown(ds_conn_t *conn)
{
    if (conn->sock.fd >= 0) shutdown(conn->sock.fd, SHUT_RDWR);
}

void ds__sock_close(ds_conn_t *conn)
{
    ds__tls_free(conn->sock.tls);
    conn->sock.tls = NULL;
    if (conn->sock.fd >= 0) close(conn->sock.fd);
    conn->sock.fd = -1;
}

const ds_conn_ops_t ds__sock_ops = {
    .call = ds__sock_call,
    .recv = ds__sock_recv,
    .shutdown = ds__sock_shutdown,
    .close = ds__sock_close,
};
