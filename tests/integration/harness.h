/* Test harness for black-box tests against real worker processes: start a
 * datasystem_worker on a free loopback port with a private socket directory,
 * connect clients to it, restart or kill it, and always stop it by PID, even
 * when the test fails (the worker also dies with the test process through
 * PR_SET_PDEATHSIG). DS_TEST_WORKER=host:port points the tests at a worker
 * that is already running instead (tests that restart or kill it skip).
 * Cluster tests also start private etcd servers, workers on other 127.0.0.x
 * hosts, and network namespaces, all undone at exit. */
#ifndef DS_TESTS_HARNESS_H
#define DS_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ds/kv_client.h"

typedef struct {
    pid_t pid; /* 0 when external */
    char host[64];
    int port;
    char sockdir[256];
    char logpath[320];
    int arena_mb;
    char extra[1024];
} dst_worker_t;

/* Starts a worker (arena_mb MiB; extra = more flags or NULL) and waits until it
 * answers. 0 or -1 (message on stderr). */
int dst_worker_start(dst_worker_t *w, int arena_mb, const char *extra);
/* SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit status or -1.
 * A worker in a cluster leaves it first on SIGTERM (moving its objects);
 * dst_worker_stop_sig(w, SIGINT) stops one at once. A worker that exits
 * other than with status 0 (a sanitizer report at exit, a crash, a stop
 * that needed SIGKILL) gets the tail of its log on stderr and fails the
 * test program: dst_run_group_tests answers non-zero. */
int dst_worker_stop(dst_worker_t *w);
int dst_worker_stop_sig(dst_worker_t *w, int sig);
void dst_worker_kill(dst_worker_t *w);
/* Restarts on the same port and socket directory (stopped with SIGINT: at once). */
int dst_worker_restart(dst_worker_t *w);
bool dst_worker_external(const dst_worker_t *w);

ds_client_t *dst_connect(const dst_worker_t *w, ds_transport_t t);
/* The worker's STATS JSON value at a dotted path (e.g. "objects.pinned"); -1 if absent. */
double dst_stat(const dst_worker_t *w, const char *path);
/* STATS operations.<name>: how many requests of that opcode the worker served. */
double dst_ops(const dst_worker_t *w, const char *name);
/* Polls dst_stat every 20 ms until it equals want; false after timeout_ms. */
bool dst_wait_stat(const dst_worker_t *w, const char *path, double want, int timeout_ms);

/* Deterministic test payloads: fill and verify by key and seed. */
void dst_fill(void *buf, size_t len, uint64_t seed);
bool dst_check(const void *buf, size_t len, uint64_t seed);
/* Sets key to size bytes of dst_fill(seed): the set's status. */
ds_status_t dst_set_filled(ds_client_t *c, const char *key, size_t size, uint64_t seed);

/* cmocka group fixtures for a test file whose tests share one worker:
 * dst_group_worker names it, its arena and extra flags (before
 * dst_run_group_tests); dst_group_setup starts it (dst_worker_start);
 * dst_group_teardown stops it and fails, with the worker's exit status and
 * the tail of its log on stderr, unless it exited cleanly. */
void dst_group_worker(dst_worker_t *w, int arena_mb, const char *extra);
int dst_group_setup(void **state);
int dst_group_teardown(void **state);

/* cmocka_run_group_tests, made to fail when a group fixture fails or a
 * worker stopped by dst_worker_stop* exited uncleanly: cmocka itself only
 * prints "GROUP TEARDOWN FAILED" and exits 0, so a teardown's checks of the
 * worker's exit would otherwise never fail a test. */
struct CMUnitTest;
int dst_run_group_tests_(const char *name, const struct CMUnitTest *tests, size_t n,
                         int (*setup)(void **), int (*teardown)(void **));
#define dst_run_group_tests(tests, setup, teardown)                                                \
    dst_run_group_tests_(#tests, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)
#define dst_run_group_tests_name(name, tests, setup, teardown)                                     \
    dst_run_group_tests_(name, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)

/* Path of a built binary next to the tests (e.g. "src/worker/datasystem_worker"). */
const char *dst_build_path(const char *rel, char *out, size_t cap);

/* ---- TLS ---- */

/* Makes self-signed test certificates (openssl CLI, P-256 keys) in a new
 * directory under /tmp, removed at exit: ca.pem; worker.pem/.key and
 * client.pem/.key signed by it; other-ca.pem and other-client.pem/.key
 * signed by that one (a CA nobody trusts). The directory's path into dir;
 * 0, or -1 with a message on stderr. Once per process: later calls return
 * the same directory. */
int dst_tls_certs(char *dir, size_t cap);
/* DS_TEST_TLS=1: every worker the harness starts gets --enable_tls
 * --tls_verify_client with dst_tls_certs' worker certificate (peers
 * included), and clients in this process connect with TLS and the client
 * certificate (DATASYSTEM_ENABLE_TLS and friends, set here). The flags, ""
 * when TLS is off; NULL when certificates could not be made. */
const char *dst_tls_worker_flags(void);

/* ---- clusters (tests/cluster) ---- */

/* Like dst_worker_start, on a given host (a 127.0.0.x address, or an address
 * of the network namespace the calling thread is in); never external. */
int dst_worker_start_on(dst_worker_t *w, const char *host, int arena_mb, const char *extra);
/* Polls the worker's STATS until "cluster.members" is n; the milliseconds it
 * took, or -1 after timeout_ms. */
int dst_wait_members(const dst_worker_t *w, int n, int timeout_ms);

/* A private etcd server (/usr/bin/etcd) with its own data directory. */
typedef struct {
    pid_t pid; /* 0 when stopped */
    char host[64];
    int client_port, peer_port;
    char dir[256]; /* temp dir holding data/ and etcd.log */
    char logpath[320];
    char address[96]; /* host:client_port, for --etcd_address */
} dst_etcd_t;

/* Starts etcd on host (NULL = 127.0.0.1) on free ports and waits until it
 * answers. 0 or -1 (message and log on stderr). */
int dst_etcd_start(dst_etcd_t *e, const char *host);
/* SIGTERM, then SIGKILL after 10 s. */
void dst_etcd_stop(dst_etcd_t *e);
void dst_etcd_kill(dst_etcd_t *e);
/* Starts it again on the same ports; wipe = with an empty data directory
 * (every registration and lease lost). */
int dst_etcd_restart(dst_etcd_t *e, bool wipe);
/* Stops it and removes its directory. */
void dst_etcd_destroy(dst_etcd_t *e);
/* How many keys etcd holds under prefix, or -1 when it does not answer. */
int dst_etcd_count(const dst_etcd_t *e, const char *prefix);

/* Network namespaces (needs root). Names are tracked: every namespace made
 * here is deleted at exit, after the processes started here are killed. */
int dst_netns_add(const char *name);
void dst_netns_del(const char *name);
/* Moves the calling thread into the namespace (NULL: back to the one it
 * started in); sockets and processes started afterwards live there. */
int dst_netns_enter(const char *name);
/* Runs a shell command line; its exit status, or -1. */
int dst_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Kills and forgets every process and namespace the harness started. */
void dst_cleanup_all(void);

#endif
