/* The transfer thread shared by the bulk sender and receiver (xfer.h). */
#include "worker/net/xfer.h"

#include "common/log.h"
#include "common/tuning.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ds_xfer {
    ds_loop_t *loop;
    const char *name;
    short events;
    ds_xfer_step_fn step;
    ds_xfer_done_fn done_cb;
    void *ctx;
    pthread_t thread;
    bool started, in_loop;
    atomic_bool stop;
    /* Lock-free lists (push one, take all), so that the loop never waits
     * for the thread, which runs at a lower priority (lower_priority). */
    _Atomic(ds_xfer_job_t *) inbox; /* loop -> thread */
    _Atomic(ds_xfer_job_t *) done;  /* thread -> loop */
    int wake_fd;                    /* the thread's eventfd: new work or stop */
    int done_fd;                    /* the loop's eventfd: finished jobs */
    ds_io_t done_io;
    uint32_t jobs; /* the loop's count of big jobs handed over and not back yet */
};

/* The consumer takes the whole list at once, so a job it holds is never
 * the head of a later compare-and-swap (no ABA). */
static void push(_Atomic(ds_xfer_job_t *) *list, ds_xfer_job_t *j, int fd)
{
    ds_xfer_job_t *head = atomic_load_explicit(list, memory_order_relaxed);
    do {
        j->next = head;
    } while (!atomic_compare_exchange_weak_explicit(list, &head, j, memory_order_release,
                                                    memory_order_relaxed));
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w;
}

static ds_xfer_job_t *take_all(_Atomic(ds_xfer_job_t *) *list)
{
    return atomic_exchange_explicit(list, NULL, memory_order_acquire);
}

/* The thread runs at nice DS_XFER_NICE (common/tuning.h), so that the loop
 * and the clients of small requests preempt its copy of a large value.
 * Best effort: a thread left at its priority is slower for others, not
 * wrong. */
static void lower_priority(const char *name)
{
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), DS_XFER_NICE) != 0)
        DS_LOG_WARN("%s: cannot lower its priority: %s", name, strerror(errno));
}

/* Every job in hand is served in turn, however many there are: a peer that
 * stops reading or sending holds its own job only. */
static void *xfer_thread(void *arg)
{
    ds_xfer_t *x = arg;
    lower_priority(x->name);
    ds_xfer_job_t **active = NULL;
    struct pollfd *pfd = NULL;
    int n = 0, cap = 0;
    ds_xfer_job_t *waiting = NULL; /* taken from the inbox, no room in active yet */
    for (;;) {
        bool stop = atomic_load(&x->stop);
        ds_xfer_job_t *in = take_all(&x->inbox);
        while (in) {
            ds_xfer_job_t *next = in->next;
            in->next = waiting;
            waiting = in;
            in = next;
        }
        while (waiting) {
            if (n == cap) {
                int nc = cap ? cap * 2 : 16;
                ds_xfer_job_t **na = realloc(active, (size_t)nc * sizeof(*na));
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
            if (active[i]->err || x->step(x->ctx, active[i])) {
                push(&x->done, active[i], x->done_fd);
                active[i] = active[--n];
            } else {
                i++;
            }
        }
        if (stop && n == 0) {
            while (waiting) {
                ds_xfer_job_t *next = waiting->next;
                waiting->err = ESHUTDOWN;
                push(&x->done, waiting, x->done_fd);
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
        /* Idle (nothing ever handed over, so no array yet) it sleeps on the
         * wake descriptor alone, rather than waking every millisecond. */
        struct pollfd idle;
        struct pollfd *p = pfd ? pfd : &idle;
        p[0].fd = x->wake_fd;
        p[0].events = POLLIN;
        p[0].revents = 0;
        for (int i = 0; i < n; i++) {
            p[i + 1].fd = active[i]->fd;
            p[i + 1].events = x->events;
        }
        if (poll(p, (nfds_t)n + 1, -1) < 0 && errno != EINTR) {
            DS_LOG_ERROR("%s: poll: %s", x->name, strerror(errno));
            usleep(1000);
        }
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(x->wake_fd, &v, sizeof(v));
            (void)r;
        }
    }
}

static void on_done(void *ctx, uint32_t events)
{
    ds_xfer_t *x = ctx;
    (void)events;
    uint64_t v;
    ssize_t r = read(x->done_fd, &v, sizeof(v));
    (void)r;
    for (ds_xfer_job_t *j = take_all(&x->done); j;) {
        ds_xfer_job_t *next = j->next;
        if (j->big) x->jobs--;
        x->done_cb(x->ctx, j);
        j = next;
    }
}

ds_xfer_t *ds__xfer_new(ds_loop_t *loop, const char *name, short events, ds_xfer_step_fn step,
                        ds_xfer_done_fn done, void *ctx, char *err, size_t err_cap)
{
    ds_xfer_t *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    x->loop = loop;
    x->name = name;
    x->events = events;
    x->step = step;
    x->done_cb = done;
    x->ctx = ctx;
    x->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    x->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (x->wake_fd >= 0 && x->done_fd >= 0 &&
        ds__loop_add(loop, &x->done_io, x->done_fd, EPOLLIN, on_done, x) == 0) {
        x->in_loop = true;
        /* pthread_create returns its error rather than setting errno. */
        int rc = pthread_create(&x->thread, NULL, xfer_thread, x);
        x->started = rc == 0;
        if (rc != 0) errno = rc;
    }
    if (!x->started) {
        snprintf(err, err_cap, "cannot start the %s: %s", name, strerror(errno));
        ds__xfer_free(x);
        return NULL;
    }
    return x;
}

void ds__xfer_free(ds_xfer_t *x)
{
    if (x == NULL) return;
    if (x->started) {
        atomic_store(&x->stop, true);
        uint64_t one = 1;
        ssize_t w = write(x->wake_fd, &one, sizeof(one));
        (void)w;
        pthread_join(x->thread, NULL);
        on_done(x, 0); /* every job it had comes back, failed if unfinished */
    }
    if (x->in_loop) ds__loop_del(x->loop, &x->done_io);
    if (x->done_fd >= 0) close(x->done_fd);
    if (x->wake_fd >= 0) close(x->wake_fd);
    free(x);
}

bool ds__xfer_take(ds_xfer_t *x, ds_xfer_job_t *j, uint64_t bytes)
{
    if (atomic_load(&x->stop)) return false;
    j->big = bytes >= DS_POLL_XFER_SLEEP_MIN;
    if (j->big) x->jobs++;
    push(&x->inbox, j, x->wake_fd);
    return true;
}

uint32_t ds__xfer_jobs(const ds_xfer_t *x)
{
    return x ? x->jobs : 0;
}
