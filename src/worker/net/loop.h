/* A small epoll event loop (in the spirit of Redis's ae): file descriptors with
 * a callback each, and timers registered with the loop (aeCreateTimeEvent),
 * whose nearest deadline bounds the wait. Single-threaded. */
#ifndef DS_WORKER_LOOP_H
#define DS_WORKER_LOOP_H

#include <stdbool.h>
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
/* The longest pass (the timers, then the callbacks of one wait's events,
 * each with the after-event hook; the wait itself not counted) and the
 * longest single callback (or the timers together) in it (ns), since the
 * last call; then
 * starts over, leaving out the event that asked (a STATS request). What one connection's event, or
 * one timer, may cost the others: STATS shows it (loop.longest_pass_us, loop.longest_event_us). */
void ds__loop_take_longest(ds_loop_t *l, uint64_t *pass_ns, uint64_t *event_ns);

/* Timers. A timer's callback runs with the time (CLOCK_MONOTONIC ms) and
 * returns when it is next due (ms, same clock), or 0 when it has nothing
 * due; it may not add or delete timers. A plain timer runs only once its
 * due time has come, so it must know its deadlines itself (it returns
 * them). A timer added with DS_TIMER_EACH_TURN runs at every
 * ds__loop_timers_run whatever it returned: for sweeps whose deadlines
 * other code creates without telling the loop (a value stored with a TTL,
 * a request that waits with a deadline), which find the earliest one
 * themselves at the cost of a look per turn. */
typedef uint64_t (*ds_timer_cb)(void *ctx, uint64_t now_ms);
typedef struct ds_timer ds_timer_t;
#define DS_TIMER_EACH_TURN 1u
/* A new timer, first due at first_due_ms (0: at the next run), or NULL
 * (out of memory). Owned by the loop until ds__loop_timer_del. */
ds_timer_t *ds__loop_timer_add(ds_loop_t *l, uint32_t flags, uint64_t first_due_ms, ds_timer_cb cb,
                               void *ctx);
/* Removes and frees a timer (NULL: nothing). */
void ds__loop_timer_del(ds_loop_t *l, ds_timer_t *t);
/* Runs the timers that are due at now_ms (and every DS_TIMER_EACH_TURN
 * timer), in the order they were added; then the after-event hook, since a
 * timer may have ended deferred requests. Returns the nearest due time
 * (ms, 0 = none). */
uint64_t ds__loop_timers_run(ds_loop_t *l, uint64_t now_ms);
/* The wait a turn may take for the timers: ms until the nearest due time
 * (due_ms, as ds__loop_timers_run returned it) from now_ms, 0 when it has
 * passed, -1 when there is none. */
int ds__loop_timeout(uint64_t due_ms, uint64_t now_ms);

#endif
