/* epoll event loop (see loop.h). Level-triggered, so a callback that stops
 * early for fairness is simply called again on the next turn. */
#include "worker/net/loop.h"

#include "common/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define DS_LOOP_BATCH 256

struct ds_loop {
    int epfd;
    void (*after)(void *ctx);
    void *after_ctx;
    uint64_t woke_ns;
};

ds_loop_t *ds__loop_create(void)
{
    ds_loop_t *l = calloc(1, sizeof(*l));
    if (l == NULL) return NULL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        free(l);
        return NULL;
    }
    return l;
}

void ds__loop_destroy(ds_loop_t *l)
{
    if (l == NULL) return;
    close(l->epfd);
    free(l);
}

int ds__loop_add(ds_loop_t *l, ds_io_t *io, int fd, uint32_t events, ds_io_cb cb, void *ctx)
{
    io->cb = cb;
    io->ctx = ctx;
    io->fd = fd;
    io->events = events;
    struct epoll_event ev = {.events = events, .data.ptr = io};
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev);
}

int ds__loop_mod(ds_loop_t *l, ds_io_t *io, uint32_t events)
{
    if (io->events == events) return 0;
    io->events = events;
    struct epoll_event ev = {.events = events, .data.ptr = io};
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, io->fd, &ev);
}

void ds__loop_del(ds_loop_t *l, ds_io_t *io)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, io->fd, NULL);
}

void ds__loop_set_after(ds_loop_t *l, void (*fn)(void *ctx), void *ctx)
{
    l->after = fn;
    l->after_ctx = ctx;
}

int ds__loop_run_once(ds_loop_t *l, int timeout_ms)
{
    struct epoll_event evs[DS_LOOP_BATCH];
    int n = epoll_wait(l->epfd, evs, DS_LOOP_BATCH, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : -1;
    if (n > 0) l->woke_ns = ds__now_ns();
    for (int i = 0; i < n; i++) {
        ds_io_t *io = evs[i].data.ptr;
        io->cb(io->ctx, evs[i].events);
        if (l->after) l->after(l->after_ctx);
    }
    return n;
}

uint64_t ds__loop_woke_ns(const ds_loop_t *l)
{
    return l->woke_ns;
}
