/* epoll event loop (see loop.h). Level-triggered, so a callback that stops
 * early for fairness is simply called again on the next turn. */
#include "worker/net/loop.h"

#include "common/clock.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#define DS_LOOP_BATCH 256

/* Timers are few (one per subsystem) and each turn looks at all of them:
 * a list in the order they were added, not a heap. */
struct ds_timer {
    ds_timer_t *next;
    uint32_t flags;
    uint64_t due; /* ms; 0 = nothing due */
    ds_timer_cb cb;
    void *ctx;
};

struct ds_loop {
    int epfd;
    void (*after)(void *ctx);
    void *after_ctx;
    uint64_t woke_ns;
    ds_timer_t *timers, *timers_tail;
    /* The loop's own busy time (ds__loop_take_longest): this pass's so far,
     * and the longest pass and event since the last take. */
    uint64_t pass_ns, longest_pass_ns, longest_event_ns;
    bool untimed; /* the current event took the figures: it counts in no window */
};

/* One event's (or timer's) time, counted toward its pass. */
static void account(ds_loop_t *l, uint64_t t0)
{
    uint64_t d = ds__now_ns() - t0;
    if (l->untimed) {
        l->untimed = false;
        return;
    }
    l->pass_ns += d;
    if (d > l->longest_event_ns) l->longest_event_ns = d;
}

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
    while (l->timers)
        ds__loop_timer_del(l, l->timers);
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
        uint64_t t0 = ds__now_ns();
        io->cb(io->ctx, evs[i].events);
        if (l->after) l->after(l->after_ctx);
        account(l, t0);
    }
    /* A pass: the timers and the events after one wait. */
    if (l->pass_ns > l->longest_pass_ns) l->longest_pass_ns = l->pass_ns;
    l->pass_ns = 0;
    return n;
}

uint64_t ds__loop_woke_ns(const ds_loop_t *l)
{
    return l->woke_ns;
}

void ds__loop_take_longest(ds_loop_t *l, uint64_t *pass_ns, uint64_t *event_ns)
{
    *pass_ns = l->longest_pass_ns;
    *event_ns = l->longest_event_ns;
    l->longest_pass_ns = l->longest_event_ns = 0;
    l->untimed = true;
}

ds_timer_t *ds__loop_timer_add(ds_loop_t *l, uint32_t flags, uint64_t first_due_ms, ds_timer_cb cb,
                               void *ctx)
{
    ds_timer_t *t = calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    t->flags = flags;
    /* 1: due at once (0 would say "nothing due"). */
    t->due = first_due_ms ? first_due_ms : 1;
    t->cb = cb;
    t->ctx = ctx;
    if (l->timers_tail)
        l->timers_tail->next = t;
    else
        l->timers = t;
    l->timers_tail = t;
    return t;
}

void ds__loop_timer_del(ds_loop_t *l, ds_timer_t *t)
{
    if (t == NULL) return;
    ds_timer_t **pp = &l->timers, *prev = NULL;
    while (*pp && *pp != t) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == NULL) return;
    *pp = t->next;
    if (l->timers_tail == t) l->timers_tail = prev;
    free(t);
}

uint64_t ds__loop_timers_run(ds_loop_t *l, uint64_t now_ms)
{
    uint64_t next = 0, t0 = ds__now_ns();
    for (ds_timer_t *t = l->timers; t; t = t->next) {
        if ((t->flags & DS_TIMER_EACH_TURN) || (t->due && t->due <= now_ms))
            t->due = t->cb(t->ctx, now_ms);
        if (t->due && (next == 0 || t->due < next)) next = t->due;
    }
    if (l->after) l->after(l->after_ctx);
    account(l, t0); /* the timers count as one event */
    return next;
}

int ds__loop_timeout(uint64_t due_ms, uint64_t now_ms)
{
    if (due_ms == 0) return -1;
    if (due_ms <= now_ms) return 0;
    uint64_t d = due_ms - now_ms;
    return d > INT_MAX ? INT_MAX : (int)d;
}
