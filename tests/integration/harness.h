/* Test harness for black-box tests against real worker processes: start a
 * datasystem_worker on a free loopback port with a private socket directory,
 * connect clients to it, restart or kill it, and always stop it by PID, even
 * when the test fails (the worker also dies with the test process through
 * PR_SET_PDEATHSIG). DS_TEST_WORKER=host:port points the tests at a worker
 * that is already running instead (tests that restart or kill it skip). */
#ifndef DS_TESTS_HARNESS_H
#define DS_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "datasystem/kv_client.h"

typedef struct {
    pid_t pid; /* 0 when external */
    char host[64];
    int port;
    char sockdir[256];
    char logpath[320];
    int arena_mb;
    char extra[512];
} dst_worker_t;

/* Starts a worker (arena_mb MiB; extra = more flags or NULL) and waits until it
 * answers. 0 or -1 (message on stderr). */
int dst_worker_start(dst_worker_t *w, int arena_mb, const char *extra);
/* SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit status or -1. */
int dst_worker_stop(dst_worker_t *w);
void dst_worker_kill(dst_worker_t *w);
/* Restarts on the same port and socket directory. */
int dst_worker_restart(dst_worker_t *w);
bool dst_worker_external(const dst_worker_t *w);

ds_client_t *dst_connect(const dst_worker_t *w, ds_transport_t t);
/* The worker's STATS JSON value at a dotted path (e.g. "objects.pinned"); -1 if absent. */
double dst_stat(const dst_worker_t *w, const char *path);

/* Deterministic test payloads: fill and verify by key and seed. */
void dst_fill(void *buf, size_t len, uint64_t seed);
bool dst_check(const void *buf, size_t len, uint64_t seed);

/* Path of a built binary next to the tests (e.g. "src/worker/datasystem_worker"). */
const char *dst_build_path(const char *rel, char *out, size_t cap);

#endif
