/* A small epoll event loop (in the spirit of Redis's ae): file descriptors with
 * a callback each, and a wait bounded by the next timer deadline the caller
 * passes in. Single-threaded. */
#ifndef DS_WORKER_LOOP_H
#define DS_WORKER_LOOP_H

#include <stdint.h>
#include <sys/epoll.h>

typedef void (*ds_io_cb)(void *ctx, uint32_t events);

/* Embedded in whatever owns the fd; its address is the epoll cookie. */
typedef struct {
    ds_io_cb cb;
    void *ctx;
    int fd;
    uint32_t events;
} ds_io_t;

typedef struct ds_loop ds_loop_t;

ds_loop_t *ds__loop_create(void);
void ds__loop_destroy(ds_loop_t *l);
/* Registers io->fd for events (EPOLLIN/EPOLLOUT); 0 or -1 with errno. */
int ds__loop_add(ds_loop_t *l, ds_io_t *io, int fd, uint32_t events, ds_io_cb cb, void *ctx);
int ds__loop_mod(ds_loop_t *l, ds_io_t *io, uint32_t events);
void ds__loop_del(ds_loop_t *l, ds_io_t *io);
/* fn(ctx) runs after every dispatched callback: the worker resumes there
 * the connections whose deferred requests ended during that event. */
void ds__loop_set_after(ds_loop_t *l, void (*fn)(void *ctx), void *ctx);
/* Waits up to timeout_ms (-1 = forever) and dispatches ready callbacks.
 * Returns the number dispatched. */
int ds__loop_run_once(ds_loop_t *l, int timeout_ms);
/* When the last wait that returned events did (CLOCK_MONOTONIC ns), before
 * their callbacks ran. */
uint64_t ds__loop_woke_ns(const ds_loop_t *l);

#endif
