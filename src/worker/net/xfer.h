/* A transfer thread (see ../THREADS.md): the machinery the bulk sender
 * (bulk.c) and the bulk receiver (bulk_recv.c) share.
 *
 * The loop hands jobs to the thread through an inbox; the thread serves
 * every job in hand in turn, one step each, polling their sockets for the
 * given event while none can go on, and hands finished jobs back through a
 * done list and an eventfd the loop polls, where the done callback runs.
 * Stopping fails (ESHUTDOWN) every job still unfinished and hands it back.
 * The thread runs at nice DS_XFER_NICE (common/tuning.h), and the lists
 * between it and the loop take no lock, so the loop never waits for it. */
#ifndef DS_WORKER_XFER_H
#define DS_WORKER_XFER_H

#include "worker/net/loop.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Embedded first in each user's job. The thread reads fd and sets err. */
typedef struct ds_xfer_job {
    struct ds_xfer_job *next;
    int fd;
    int err;  /* errno of a failed step (ESHUTDOWN: stopped), 0 when done */
    bool big; /* the loop's: bytes >= DS_POLL_XFER_SLEEP_MIN at hand-over */
} ds_xfer_job_t;

/* On the thread: moves the job on by one bounded step; true when it is
 * finished (complete, or failed with j->err set). */
typedef bool (*ds_xfer_step_fn)(void *ctx, ds_xfer_job_t *j);
/* On the loop: the job is back, finished or failed; the callee owns it. */
typedef void (*ds_xfer_done_fn)(void *ctx, ds_xfer_job_t *j);

typedef struct ds_xfer ds_xfer_t;

/* Starts the thread named name (for messages), which polls jobs' sockets
 * for events (POLLIN or POLLOUT); NULL with err set on failure. */
ds_xfer_t *ds__xfer_new(ds_loop_t *loop, const char *name, short events, ds_xfer_step_fn step,
                        ds_xfer_done_fn done, void *ctx, char *err, size_t err_cap);
/* Stops and joins the thread; every job it had goes to done first (failed
 * when unfinished). */
void ds__xfer_free(ds_xfer_t *x);
/* Hands j, which has bytes to move, to the thread; false (j still the
 * caller's) when stopping. */
bool ds__xfer_take(ds_xfer_t *x, ds_xfer_job_t *j, uint64_t bytes);
/* Loop only: jobs of at least DS_POLL_XFER_SLEEP_MIN bytes (common/tuning.h)
 * handed to x and not back yet (0 for NULL). */
uint32_t ds__xfer_jobs(const ds_xfer_t *x);

#endif
