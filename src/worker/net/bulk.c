/* The sender thread for large responses (see ../THREADS.md).
 *
 * Pushing a 256 MiB value into a TCP socket costs the sending thread the
 * kernel's copy of every byte. Done by the loop in DS_IO_SLICE steps, that
 * made the loop a CPU-bound thread, and on a busy machine the scheduler then
 * lets a small request wait behind it for whole time slices. So a response
 * frame with at least DS_BULK_MIN bytes still to send is handed, when it
 * reaches the head of its connection's queue, to this thread (after one
 * direct write by the loop when that can finish it: a 1 MiB answer, for
 * which the hand-off and the wake-ups back cost more than the copy), which writes
 * it (several connections' frames in turn, DS_BULK_STEP each) while the loop
 * goes on serving everything else. The loop writes nothing more on that
 * connection until the frame is done; it keeps reading its requests.
 *
 * The thread touches only the frame's segments and progress and the socket;
 * the objects the frame references are released by the loop when the frame
 * comes back through the eventfd. A connection closed meanwhile is shut down
 * (failing the thread's next write) and freed only once its frame is back. */
#include "worker/net/conn.h"
#include "worker/net/xfer.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#define DS_BULK_STEP (1u << 20)

typedef struct item {
    ds_xfer_job_t x; /* first: the thread polls x.fd; step copies err into x.err */
    ds_conn_t *conn; /* only for the loop: the thread never dereferences it */
    ds_out_t *out;
    int fd;
    ds_tls_t *tls; /* the connection's TLS session, or NULL */
    uint64_t sent;
    int err; /* errno of a failed write, 0 when all was sent */
} item_t;

struct ds_bulk {
    ds_xfer_t *xfer;
};

/* Writes up to DS_BULK_STEP of the item; true when it is finished (all sent
 * or failed). */
static bool send_some(item_t *it)
{
    uint64_t budget = DS_BULK_STEP;
    while (budget > 0) {
        struct iovec iov[16];
        int n = ds__out_iov(it->out, iov, 16);
        if (n == 0) return true;
        ssize_t w;
        if (it->tls) {
            w = ds__tls_writev(it->tls, iov, n);
        } else {
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            w = sendmsg(it->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
            it->err = errno;
            return true;
        }
        it->sent += (uint64_t)w;
        if (ds__out_advance(it->out, (uint64_t)w)) return true;
        budget = (uint64_t)w >= budget ? 0 : budget - (uint64_t)w;
    }
    return false;
}

/* The transfer thread's step: one send_some, its failure reported to the
 * thread. */
static bool step(void *ctx, ds_xfer_job_t *x)
{
    item_t *it = (item_t *)x;
    (void)ctx;
    bool over = send_some(it);
    x->err = it->err;
    return over;
}

/* On the loop: the frame is back, sent or failed. */
static void done(void *ctx, ds_xfer_job_t *x)
{
    item_t *it = (item_t *)x;
    (void)ctx;
    ds__conn_bulk_done(it->conn, it->out, it->sent, x->err);
    free(it);
}

ds_bulk_t *ds__bulk_new(ds_loop_t *loop, char *err, size_t err_cap)
{
    ds_bulk_t *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    b->xfer = ds__xfer_new(loop, "bulk sender", POLLOUT, step, done, b, err, err_cap);
    if (b->xfer == NULL) {
        free(b);
        return NULL;
    }
    return b;
}

/* Every frame it had comes back, failed if unsent. */
void ds__bulk_free(ds_bulk_t *b)
{
    if (b == NULL) return;
    ds__xfer_free(b->xfer);
    free(b);
}

uint32_t ds__net_transfers(const ds_net_t *net)
{
    return (net->bulk ? ds__xfer_jobs(net->bulk->xfer) : 0) + ds__brecv_jobs(net->brecv);
}

bool ds__bulk_send(ds_bulk_t *b, ds_conn_t *c, ds_out_t *o)
{
    if (b == NULL) return false;
    item_t *it = calloc(1, sizeof(*it));
    if (it == NULL) return false;
    it->conn = c;
    it->out = o;
    it->fd = c->io.fd;
    it->x.fd = it->fd;
    it->tls = c->tls;
    if (ds__xfer_take(b->xfer, &it->x, ds__out_left(o))) return true;
    free(it);
    return false;
}
