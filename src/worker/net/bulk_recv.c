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

#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define DS_BRECV_STEP (1u << 20)
#define DS_BRECV_DISCARD (64u << 10)

typedef struct job {
    struct job *next;
    ds_conn_t *conn; /* only for the loop: the thread never dereferences it */
    int fd;
    /* What is left: sinks[idx..n) from off into sinks[idx], or skip bytes
     * to discard when there are no sinks. */
    const ds_sink_t *sinks;
    uint32_t n, idx;
    uint64_t off, skip;
    uint64_t got;
    int err; /* errno of a failed receive (EPIPE: the peer closed), 0 when done */
} job_t;

struct ds_brecv {
    ds_loop_t *loop;
    pthread_t thread;
    bool started, in_loop;
    atomic_bool stop;
    pthread_mutex_t mu;
    job_t *inbox; /* loop -> thread */
    job_t *done;  /* thread -> loop */
    int wake_fd;  /* the thread's eventfd: new work or stop */
    int done_fd;  /* the loop's eventfd: finished jobs */
    ds_io_t done_io;
    uint8_t *discard; /* the thread's: bytes nobody asked for */
};

static void push(ds_brecv_t *b, job_t **list, job_t *j, int fd)
{
    pthread_mutex_lock(&b->mu);
    j->next = *list;
    *list = j;
    pthread_mutex_unlock(&b->mu);
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w;
}

static job_t *take_all(ds_brecv_t *b, job_t **list)
{
    pthread_mutex_lock(&b->mu);
    job_t *l = *list;
    *list = NULL;
    pthread_mutex_unlock(&b->mu);
    return l;
}

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
static bool recv_some(ds_brecv_t *b, job_t *j)
{
    uint64_t budget = DS_BRECV_STEP;
    while (budget > 0) {
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
        if (want > budget) want = budget;
        ssize_t r = recv(j->fd, dst, want, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
            j->err = errno;
            return true;
        }
        if (r == 0) {
            j->err = EPIPE;
            return true;
        }
        j->got += (uint64_t)r;
        if (j->sinks == NULL)
            j->skip -= (uint64_t)r;
        else
            j->off += (uint64_t)r;
        budget -= (uint64_t)r;
    }
    return job_over(j);
}

/* Every job in hand is served in turn, however many there are: a client
 * that stops sending holds its own job only. */
static void *brecv_thread(void *arg)
{
    ds_brecv_t *b = arg;
    job_t **active = NULL;
    struct pollfd *pfd = NULL;
    int n = 0, cap = 0;
    job_t *waiting = NULL; /* taken from the inbox, no room in active yet */
    for (;;) {
        bool stop = atomic_load(&b->stop);
        job_t *in = take_all(b, &b->inbox);
        while (in) {
            job_t *next = in->next;
            in->next = waiting;
            waiting = in;
            in = next;
        }
        while (waiting) {
            if (n == cap) {
                int nc = cap ? cap * 2 : 16;
                job_t **na = realloc(active, (size_t)nc * sizeof(*na));
                if (na) active = na;
                struct pollfd *np = na ? realloc(pfd, (size_t)(nc + 1) * sizeof(*np)) : NULL;
                if (np) pfd = np;
                if (na == NULL || np == NULL) break; /* retried next round */
                cap = nc;
            }
            active[n++] = waiting;
            waiting = waiting->next;
        }
        for (int i = 0; i < n;) {
            if (stop && active[i]->err == 0) active[i]->err = ESHUTDOWN;
            if (active[i]->err || recv_some(b, active[i])) {
                push(b, &b->done, active[i], b->done_fd);
                active[i] = active[--n];
            } else {
                i++;
            }
        }
        if (stop && n == 0) {
            while (waiting) {
                job_t *next = waiting->next;
                waiting->err = ESHUTDOWN;
                push(b, &b->done, waiting, b->done_fd);
                waiting = next;
            }
            free(active);
            free(pfd);
            return NULL;
        }
        if (pfd == NULL && waiting != NULL) {
            usleep(1000); /* no memory for even the first array yet */
            continue;
        }
        struct pollfd idle;
        struct pollfd *p = pfd ? pfd : &idle;
        p[0].fd = b->wake_fd;
        p[0].events = POLLIN;
        p[0].revents = 0;
        for (int i = 0; i < n; i++) {
            p[i + 1].fd = active[i]->fd;
            p[i + 1].events = POLLIN;
        }
        if (poll(p, (nfds_t)n + 1, -1) < 0 && errno != EINTR) {
            DS_LOG_ERROR("bulk receiver: poll: %s", strerror(errno));
            usleep(1000);
        }
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(b->wake_fd, &v, sizeof(v));
            (void)r;
        }
    }
}

static void on_done(void *ctx, uint32_t events)
{
    ds_brecv_t *b = ctx;
    (void)events;
    uint64_t v;
    ssize_t r = read(b->done_fd, &v, sizeof(v));
    (void)r;
    for (job_t *j = take_all(b, &b->done); j;) {
        job_t *next = j->next;
        ds__conn_brecv_done(j->conn, j->got, j->err);
        free(j);
        j = next;
    }
}

ds_brecv_t *ds__brecv_new(ds_loop_t *loop, char *err, size_t err_cap)
{
    ds_brecv_t *b = calloc(1, sizeof(*b));
    if (b == NULL || (b->discard = malloc(DS_BRECV_DISCARD)) == NULL) {
        free(b);
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    b->loop = loop;
    pthread_mutex_init(&b->mu, NULL);
    b->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    b->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (b->wake_fd >= 0 && b->done_fd >= 0 &&
        ds__loop_add(loop, &b->done_io, b->done_fd, EPOLLIN, on_done, b) == 0) {
        b->in_loop = true;
        int rc = pthread_create(&b->thread, NULL, brecv_thread, b);
        b->started = rc == 0;
        if (rc != 0) errno = rc;
    }
    if (!b->started) {
        snprintf(err, err_cap, "cannot start the bulk receiver: %s", strerror(errno));
        ds__brecv_free(b);
        return NULL;
    }
    return b;
}

void ds__brecv_free(ds_brecv_t *b)
{
    if (b == NULL) return;
    if (b->started) {
        atomic_store(&b->stop, true);
        uint64_t one = 1;
        ssize_t w = write(b->wake_fd, &one, sizeof(one));
        (void)w;
        pthread_join(b->thread, NULL);
        on_done(b, 0); /* every job it had comes back, failed if unfinished */
    }
    if (b->in_loop) ds__loop_del(b->loop, &b->done_io);
    if (b->done_fd >= 0) close(b->done_fd);
    if (b->wake_fd >= 0) close(b->wake_fd);
    pthread_mutex_destroy(&b->mu);
    free(b->discard);
    free(b);
}

bool ds__brecv_take(ds_brecv_t *b, ds_conn_t *c)
{
    if (b == NULL || atomic_load(&b->stop)) return false;
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) return false;
    j->conn = c;
    j->fd = c->io.fd;
    j->sinks = c->sinks;
    j->n = c->nsinks;
    j->idx = c->sink_idx;
    j->off = c->sink_off;
    j->skip = c->sinks ? 0 : c->skip;
    push(b, &b->inbox, j, b->wake_fd);
    return true;
}
