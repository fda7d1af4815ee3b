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

#define DS_BULK_STEP (1u << 20)

typedef struct item {
    struct item *next;
    ds_conn_t *conn; /* only for the loop: the thread never dereferences it */
    ds_out_t *out;
    int fd;
    ds_tls_t *tls; /* the connection's TLS session, or NULL */
    uint64_t sent;
    int err; /* errno of a failed write, 0 when all was sent */
} item_t;

struct ds_bulk {
    ds_loop_t *loop;
    pthread_t thread;
    bool started, in_loop;
    atomic_bool stop;
    pthread_mutex_t mu;
    item_t *inbox; /* loop -> thread */
    item_t *done;  /* thread -> loop */
    int wake_fd;   /* the thread's eventfd: new work or stop */
    int done_fd;   /* the loop's eventfd: finished frames */
    ds_io_t done_io;
};

static void push(ds_bulk_t *b, item_t **list, item_t *it, int fd)
{
    pthread_mutex_lock(&b->mu);
    it->next = *list;
    *list = it;
    pthread_mutex_unlock(&b->mu);
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w;
}

static item_t *take_all(ds_bulk_t *b, item_t **list)
{
    pthread_mutex_lock(&b->mu);
    item_t *l = *list;
    *list = NULL;
    pthread_mutex_unlock(&b->mu);
    return l;
}

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

/* Every frame in hand is written in turn, however many there are: a reader
 * that stopped reading holds its own frame only. */
static void *bulk_thread(void *arg)
{
    ds_bulk_t *b = arg;
    item_t **active = NULL;
    struct pollfd *pfd = NULL;
    int n = 0, cap = 0;
    item_t *waiting = NULL; /* taken from the inbox, no room in active yet */
    for (;;) {
        bool stop = atomic_load(&b->stop);
        item_t *in = take_all(b, &b->inbox);
        while (in) {
            item_t *next = in->next;
            in->next = waiting;
            waiting = in;
            in = next;
        }
        while (waiting) {
            if (n == cap) {
                int nc = cap ? cap * 2 : 16;
                item_t **na = realloc(active, (size_t)nc * sizeof(*na));
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
            if (active[i]->err || send_some(active[i])) {
                push(b, &b->done, active[i], b->done_fd);
                active[i] = active[--n];
            } else {
                i++;
            }
        }
        if (stop && n == 0) {
            while (waiting) {
                item_t *next = waiting->next;
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
        /* Idle (nothing ever sent, so no array yet) it sleeps on the wake
         * descriptor alone, rather than waking every millisecond. */
        struct pollfd idle;
        struct pollfd *p = pfd ? pfd : &idle;
        p[0].fd = b->wake_fd;
        p[0].events = POLLIN;
        p[0].revents = 0;
        for (int i = 0; i < n; i++) {
            p[i + 1].fd = active[i]->fd;
            p[i + 1].events = POLLOUT;
        }
        if (poll(p, (nfds_t)n + 1, -1) < 0 && errno != EINTR) {
            DS_LOG_ERROR("bulk sender: poll: %s", strerror(errno));
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
    ds_bulk_t *b = ctx;
    (void)events;
    uint64_t v;
    ssize_t r = read(b->done_fd, &v, sizeof(v));
    (void)r;
    for (item_t *it = take_all(b, &b->done); it;) {
        item_t *next = it->next;
        ds__conn_bulk_done(it->conn, it->out, it->sent, it->err);
        free(it);
        it = next;
    }
}

ds_bulk_t *ds__bulk_new(ds_loop_t *loop, char *err, size_t err_cap)
{
    ds_bulk_t *b = calloc(1, sizeof(*b));
    if (b == NULL) {
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
        /* pthread_create returns its error rather than setting errno. */
        int rc = pthread_create(&b->thread, NULL, bulk_thread, b);
        b->started = rc == 0;
        if (rc != 0) errno = rc;
    }
    if (!b->started) {
        snprintf(err, err_cap, "cannot start the bulk sender: %s", strerror(errno));
        ds__bulk_free(b);
        return NULL;
    }
    return b;
}

void ds__bulk_free(ds_bulk_t *b)
{
    if (b == NULL) return;
    if (b->started) {
        atomic_store(&b->stop, true);
        uint64_t one = 1;
        ssize_t w = write(b->wake_fd, &one, sizeof(one));
        (void)w;
        pthread_join(b->thread, NULL);
        on_done(b, 0); /* every frame it had comes back, failed if unsent */
    }
    if (b->in_loop) ds__loop_del(b->loop, &b->done_io);
    if (b->done_fd >= 0) close(b->done_fd);
    if (b->wake_fd >= 0) close(b->wake_fd);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

bool ds__bulk_send(ds_bulk_t *b, ds_conn_t *c, ds_out_t *o)
{
    if (b == NULL || atomic_load(&b->stop)) return false;
    item_t *it = calloc(1, sizeof(*it));
    if (it == NULL) return false;
    it->conn = c;
    it->out = o;
    it->fd = c->io.fd;
    it->tls = c->tls;
    push(b, &b->inbox, it, b->wake_fd);
    return true;
}
