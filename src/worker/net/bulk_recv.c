/* The receiver thread for large SET data sections (see ../THREADS.md): the
 * bulk sender's counterpart (bulk.c).
 *
 * A 256 MiB SET from a TCP client costs the receiving thread the kernel's
 * copy of every byte. Read by the loop in DS_IO_SLICE_DATA steps, that kept
 * the loop CPU-bound for the whole transfer, and other clients' small
 * requests waited behind it for the scheduler's time slices. So once a
 * SET's data section has DS_BRECV_MIN bytes or more still to come and the
 * connection's read buffer is drained (the loop reads the first bytes with
 * the frame's header), the rest is handed to this thread, which receives it
 * straight into the value's arena ranges (several connections' sections in
 * turn, DS_BRECV_STEP each) while the loop goes on serving everything else.
 * The loop reads nothing more on that connection until the job is back.
 *
 * The thread touches only the job (its copy of the sinks' places and its
 * progress), the arena ranges the sinks name (reserved and invisible until
 * the loop publishes them) and the socket. A connection closed meanwhile is
 * shut down (failing the thread's next receive); its SET's reservations are
 * let go and the connection freed only once the job is back. */
#include "worker/net/conn.h"
#include "worker/net/xfer.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#define DS_BRECV_STEP (1u << 20)
#define DS_BRECV_DISCARD (64u << 10)

typedef struct job {
    ds_xfer_job_t x; /* first: the socket, and the errno of a failed receive
                      * (EPIPE: the peer closed), 0 when done */
    ds_conn_t *conn; /* only for the loop: the thread never dereferences it */
    /* What is left: sinks[idx..n) from off into sinks[idx], or skip bytes
     * to discard when there are no sinks. */
    const ds_sink_t *sinks;
    uint32_t n, idx;
    uint64_t off, skip;
    uint64_t got;
    ds_tls_t *tls; /* the connection's TLS session, or NULL */
} job_t;

struct ds_brecv {
    ds_xfer_t *xfer;
    uint8_t *discard; /* the thread's: bytes nobody asked for */
};

/* Skips empty sinks; true when nothing is left to receive. */
static bool job_over(job_t *j)
{
    if (j->sinks == NULL) return j->skip == 0;
    while (j->idx < j->n && j->off == j->sinks[j->idx].len) {
        j->idx++;
        j->off = 0;
    }
    return j->idx == j->n;
}

/* Receives up to DS_BRECV_STEP of the job; true when it is finished (all
 * arrived, or failed). */
uint32_t ds__brecv_jobs(const ds_brecv_t *b)
{
    return b ? ds__xfer_jobs(b->xfer) : 0;
}

static bool recv_some(void *ctx, ds_xfer_job_t *x)
{
    ds_brecv_t *b = ctx;
    job_t *j = (job_t *)x;
    uint64_t budget = DS_BRECV_STEP;
    /* Bytes a TLS session holds are no event for the thread's poll: a
     * step ends only once the session has handed over what it holds (at
     * most its receive buffer and a record past the budget). */
    while (budget > 0 || (j->tls && ds__tls_pending(j->tls))) {
        if (job_over(j)) return true;
        uint8_t *dst;
        uint64_t want;
        if (j->sinks == NULL) {
            dst = b->discard;
            want = j->skip < DS_BRECV_DISCARD ? j->skip : DS_BRECV_DISCARD;
        } else {
            const ds_sink_t *s = &j->sinks[j->idx];
            want = s->len - j->off;
            dst = s->p ? s->p + j->off : b->discard;
            if (s->p == NULL && want > DS_BRECV_DISCARD) want = DS_BRECV_DISCARD;
        }
        if (want > budget && budget > 0) want = budget;
        ssize_t r =
            j->tls ? ds__tls_recv(j->tls, dst, want) : recv(j->x.fd, dst, want, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
            j->x.err = errno;
            return true;
        }
        if (r == 0) {
            j->x.err = EPIPE;
            return true;
        }
        j->got += (uint64_t)r;
        if (j->sinks == NULL)
            j->skip -= (uint64_t)r;
        else
            j->off += (uint64_t)r;
        budget = (uint64_t)r >= budget ? 0 : budget - (uint64_t)r;
    }
    return job_over(j);
}

/* On the loop: the job is back, finished or failed. */
static void done(void *ctx, ds_xfer_job_t *x)
{
    job_t *j = (job_t *)x;
    (void)ctx;
    ds__conn_brecv_done(j->conn, j->got, x->err);
    free(j);
}

ds_brecv_t *ds__brecv_new(ds_loop_t *loop, char *err, size_t err_cap)
{
    ds_brecv_t *b = calloc(1, sizeof(*b));
    if (b == NULL || (b->discard = malloc(DS_BRECV_DISCARD)) == NULL) {
        free(b);
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    b->xfer = ds__xfer_new(loop, "bulk receiver", POLLIN, recv_some, done, b, err, err_cap);
    if (b->xfer == NULL) {
        free(b->discard);
        free(b);
        return NULL;
    }
    return b;
}

/* Every job it had comes back, failed if unfinished. */
void ds__brecv_free(ds_brecv_t *b)
{
    if (b == NULL) return;
    ds__xfer_free(b->xfer);
    free(b->discard);
    free(b);
}

bool ds__brecv_take(ds_brecv_t *b, ds_conn_t *c)
{
    if (b == NULL) return false;
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) return false;
    j->conn = c;
    j->x.fd = c->io.fd;
    j->sinks = c->sinks;
    j->n = c->nsinks;
    j->idx = c->sink_idx;
    j->off = c->sink_off;
    j->skip = c->sinks ? 0 : c->skip;
    j->tls = c->tls;
    uint64_t left = j->skip;
    for (uint32_t i = j->idx; i < j->n; i++)
        left += j->sinks[i].len - (i == j->idx ? j->off : 0);
    if (ds__xfer_take(b->xfer, &j->x, left)) return true;
    free(j);
    return false;
}
