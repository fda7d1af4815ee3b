/* Shared pieces of the cluster tests: a private etcd plus N workers on
 * distinct 127.0.0.x hosts with short leases, clients to any of them, and
 * checksummed reads that fail the test with the key named. Values are
 * dst_fill patterns: a seed per key and version, so an old version, a
 * neighbour's value or torn bytes never pass as the expected one. */
#ifndef DS_TESTS_CLUSTER_UTIL_H
#define DS_TESTS_CLUSTER_UTIL_H

#include "harness.h"

#include <stdatomic.h>

#define CT_MAX_WORKERS 5
/* Short leases so that failures show within seconds. */
#define CT_NODE_TIMEOUT_S 2
#define CT_HEARTBEAT_MS 300

typedef struct {
    dst_etcd_t etcd;
    dst_worker_t w[CT_MAX_WORKERS];
    int arena_mb[CT_MAX_WORKERS];
    int n;
    char name[64]; /* cluster name */
} ct_cluster_t;

/* Starts etcd and n workers on 127.0.0.(11+i) and waits until each sees n
 * members. arena_mb may be NULL (64 MiB each). 0 or -1. */
int ct_cluster_start(ct_cluster_t *c, int n, const int *arena_mb);
/* The same with more flags for worker i in extra[i] (extra or extra[i] NULL: none). */
int ct_cluster_start_with(ct_cluster_t *c, int n, const int *arena_mb, const char *const *extra);
/* Starts one more worker (index c->n, on 127.0.0.(11 + c->n)) with the
 * cluster's flags and extra (NULL: none), and waits until every worker sees
 * it (every running worker sees as many members as are running). Its
 * arena is c->arena_mb[c->n] MiB when the test set it, else 64.
 * 0 or -1. */
int ct_worker_add(ct_cluster_t *c, const char *extra);
/* Starts worker i again (on its address; a fresh process and worker id). */
int ct_worker_restart(ct_cluster_t *c, int i);
/* Waits until every running worker sees n members; ms taken or -1. */
int ct_wait_members(ct_cluster_t *c, int n, int timeout_ms);
void ct_cluster_stop(ct_cluster_t *c);
/* cmocka group fixtures for a test file whose tests share one cluster:
 * ct_group_cluster names it and its size (before dst_run_group_tests);
 * ct_group_setup starts it (ct_cluster_start, 64 MiB arenas) and
 * ct_group_teardown stops it. */
void ct_group_cluster(ct_cluster_t *c, int n);
int ct_group_setup(void **state);
int ct_group_teardown(void **state);

/* A client of worker i (LOCAL: Unix socket + shared memory, or TCP). */
ds_client_t *ct_client(ct_cluster_t *c, int i, ds_transport_t t);

/* Sets key to len bytes of pattern seed; the status. */
ds_status_t ct_set(ds_client_t *cl, const char *key, size_t len, uint64_t seed);
/* Reads key by copy and checks its size and pattern: true when it matches. */
bool ct_read_ok(ds_client_t *cl, const char *key, size_t len, uint64_t seed, int32_t wait_ms);
/* The same through a zero-copy buffer (ds_kv_get_buffers). */
bool ct_read_buffer_ok(ds_client_t *cl, const char *key, size_t len, uint64_t seed);
/* Sets key through cl and returns the index of the worker whose
 * cluster.owned_keys grew: the key's metadata owner; -1 if none did. */
int ct_set_find_owner(ct_cluster_t *c, ds_client_t *cl, const char *key, size_t len, uint64_t seed);
/* The status a copy-get of key returns (the value is dropped). */
ds_status_t ct_get_status(ds_client_t *cl, const char *key, int32_t wait_ms);

/* The lossless suites' key set (ct_migrate, ct_rebalance, ct_replica,
 * ct_netns_lossless): CT_NKEYS keys named PREFIX-000.., key i of
 * ct_key_len(i) bytes (1 KiB to 2 MiB) with pattern seed0 + i. */
#define CT_NKEYS 240
size_t ct_key_len(int i);
void ct_key_name(char *out, size_t cap, const char *prefix, int i);
/* Sets every key, round-robin through cl[0..ncl-1]; how many were set. */
int ct_set_keys(ds_client_t *const *cl, int ncl, const char *prefix, uint64_t seed0);
/* Reads every key through cl (byte-exact check); ok[i] (ok may be NULL)
 * says whether key i read back. How many did; the first few that did not
 * are printed with `who`. */
int ct_count_keys(ds_client_t *cl, const char *prefix, uint64_t seed0, bool *ok, const char *who);
/* ct_count_keys through a client of worker w of c (TCP for odd w, LOCAL for
 * even); -1 when no client connects. */
int ct_count_on(ct_cluster_t *c, int w, const char *prefix, uint64_t seed0);

/* A reader (pthread start routine ct_reader_main) that reads key i of the
 * set prefix/seed0 round and round through worker `worker` of c over TCP
 * until stop is set, counting reads and the misses (wrong bytes or none;
 * misses -1: no client). key_len NULL: ct_key_len. */
typedef struct {
    ct_cluster_t *c;
    int worker;
    const char *prefix;
    uint64_t seed0;
    size_t (*key_len)(int i);
    atomic_bool stop;
    long reads, misses;
    char first_miss[64];
} ct_reader_t;
void *ct_reader_main(void *arg);

/* A writer (pthread start routine ct_writer_main) for tests of writes that
 * wait: on its own thread it connects (connect(node), or a TCP client of
 * worker node of c when connect is NULL; a namespace connect enters stays
 * with that thread), sets key to len bytes of pattern seed, keeps the
 * status in st (K_RUNTIME_ERROR: no client), closes the client and then
 * sets done. */
typedef struct {
    ct_cluster_t *c;
    ds_client_t *(*connect)(int node);
    int node;
    const char *key;
    size_t len;
    uint64_t seed;
    atomic_bool done;
    ds_status_t st;
} ct_writer_t;
void *ct_writer_main(void *arg);
/* Waits up to ms for the writer to finish; true when it did. */
bool ct_writer_finished(ct_writer_t *w, int ms);

/* Runs `dscli stop` for worker w (inside network namespace netns when not
 * NULL) and reaps the worker: dscli's exit status, -2 when the worker did
 * not exit cleanly (under ASan: with a report), -1 when dscli could not
 * run; dscli's output in out (printed too, with the worker's log tail when
 * dscli failed). */
int ct_dscli_stop(dst_worker_t *w, const char *netns, char *out, size_t cap);

#endif
