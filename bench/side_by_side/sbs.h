/* The side-by-side harness (sbs): this project's worker next to Redis 7 and
 * vLLM-Omni's shared-memory path, with the machine's limits measured in the
 * same run. This header is shared by the harness's files: the result rows, the
 * processes it starts (worker, Redis, the Python script), the client drivers
 * that hide which system a measurement talks to, and the phases (single
 * client, scale, resident keys, head-of-line blocking, connector). */
#ifndef DS_BENCH_SBS_H
#define DS_BENCH_SBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench/stats.h"

#define SBS_KIB ((size_t)1 << 10)
#define SBS_MIB ((size_t)1 << 20)

/* ---- result rows ---- */

typedef struct {
    char system[32]; /* ds-local, ds-remote, redis-unix, redis-tcp, vllm-omni-shm, ... */
    char op[48];
    size_t size;
    int clients;
    double p50_us, p99_us;
    double gbps;           /* payload bytes per ns at the median (or aggregate) */
    double ops_per_s;      /* 0 when not measured */
    double ratio_to_limit; /* NAN when not applicable */
    double ratio_to_redis; /* NAN when not applicable */
    double extra;          /* bytes per key for memory rows; NAN otherwise */
    char note[192];
} sbs_row_t;

/* Adds a row from raw latency samples (sorted in place). gbps is size / p50.
 * Returns the row (valid until the next add) or NULL when the table is full. */
sbs_row_t *sbs_row_add(const char *system, const char *op, size_t size, int clients, uint64_t *ns,
                       size_t n);
/* Adds a row with the figures given directly. */
sbs_row_t *sbs_row_add_raw(const char *system, const char *op, size_t size, int clients,
                           double p50_us, double p99_us, double gbps);
sbs_row_t *sbs_row_find(const char *system, const char *op, size_t size, int clients);
size_t sbs_row_count(void);
/* The median of n values (the upper one of an even count; 0 when n is 0);
 * sorts v in place. */
double sbs_median(double *v, int n);
sbs_row_t *sbs_row_at(size_t i);

/* ---- run settings ---- */

typedef struct {
    bool quick;
    const char *build_dir;  /* where src/worker/datasystem_worker and src/cli/dscli are */
    const char *out_dir;    /* results: JSON, plot data, logs */
    const char *python;     /* /usr/bin/python3 */
    const char *shm_script; /* bench/side_by_side/shm_bench.py */
    const char *redis_bin;  /* redis-server */
    int arena_mb;
    /* The worker's --busy_poll_us and its clients' DS_BUSY_POLL_US (0 = off
     * on both sides); -1 = their defaults (adaptive polling up to 200 us). */
    int busy_poll_us;
    char tmp_dir[256]; /* private directory for sockets and logs */
} sbs_opts_t;

/* Iterations for one single-client measurement of a value size, and the
 * warm-up iterations that precede it; the same for every system. */
int sbs_iters(const sbs_opts_t *o, size_t size);
int sbs_warmup(const sbs_opts_t *o, size_t size);
/* Rounds a size block is split into (see single.c). */
int sbs_rounds(const sbs_opts_t *o, size_t size);

/* ---- processes the harness starts (and always stops by PID) ---- */

typedef struct {
    pid_t pid;
    int port;
    char host[32];
    char unix_path[300]; /* Redis: its Unix socket */
    char log[300];
} sbs_proc_t;

int sbs_worker_start(const sbs_opts_t *o, sbs_proc_t *w);
int sbs_redis_start(const sbs_opts_t *o, sbs_proc_t *r);
/* SIGTERM, wait up to 10 s, then SIGKILL. */
void sbs_proc_stop(sbs_proc_t *p);
/* Waits for child pid to exit until deadline_ms (ds__now_ms), asleep (no
 * periodic wake-ups while a measured child runs); its wait status in *st.
 * Returns pid, or 0 at the deadline (the child still runs), or -1. */
pid_t sbs_wait_exit(pid_t pid, uint64_t deadline_ms, int *st);
/* Registers (add) or forgets a child to be killed by sbs_proc_kill_all. */
void sbs_proc_track(pid_t pid, bool add);
/* Kills every process still registered (atexit and signal paths). */
void sbs_proc_kill_all(void);
/* A field of /proc/<pid>/status in bytes (e.g. "VmRSS", "RssAnon"); -1 on failure. */
double sbs_proc_status_bytes(pid_t pid, const char *field);
/* Minor plus major page faults of a process so far (0 = this process), or 0. */
double sbs_proc_faults(pid_t pid);
/* CPU time of the process's main thread (pid 0: the calling thread) so far,
 * in us, from /proc/.../schedstat; NAN when it cannot be read. */
double sbs_proc_cpu_us(pid_t pid);
/* The same summed over every thread of the process (/proc/<pid>/task). */
double sbs_proc_cpu_all_us(pid_t pid);
/* The worker's STATS (via `dscli status`) at a dotted path; -1 if absent. */
double sbs_worker_stat(const sbs_opts_t *o, const sbs_proc_t *w, const char *path);
/* Runs argv with stdout captured into a malloc'd string (NUL-terminated), at
 * most timeout_s seconds. Returns the exit status, or -1. */
int sbs_run_capture(char *const argv[], int timeout_s, char **out);

/* ---- client drivers ---- */

typedef enum {
    SBS_DS_LOCAL = 0, /* shared memory over the worker's Unix socket */
    SBS_DS_REMOTE,    /* TCP to the same worker */
    SBS_REDIS_UNIX,
    SBS_REDIS_TCP,
    SBS_NKINDS
} sbs_kind_t;

const char *sbs_kind_name(sbs_kind_t k);
bool sbs_kind_is_ds(sbs_kind_t k);

typedef struct {
    const sbs_proc_t *worker;
    const sbs_proc_t *redis;
} sbs_env_t;

typedef struct sbs_conn sbs_conn_t;

sbs_conn_t *sbs_connect(const sbs_env_t *env, sbs_kind_t kind);
/* A handle for another thread: the same datasystem client (it is thread
 * safe and pools connections), or a new Redis connection. */
sbs_conn_t *sbs_conn_share(sbs_conn_t *c);
void sbs_close(sbs_conn_t *c);
/* 0 on success, -1 with a message on stderr. */
int sbs_set(sbs_conn_t *c, const char *key, const void *val, size_t len);
int sbs_get(sbs_conn_t *c, const char *key, void *buf, size_t cap, size_t *len);
/* Datasystem only: pin the value, read its first and last byte, release. */
int sbs_get_zc(sbs_conn_t *c, const char *key, size_t *len);
/* Zero-copy write: create a buffer, copy the value in, publish, release
 * (datasystem clients only). */
int sbs_set_zc(sbs_conn_t *c, const char *key, const void *val, size_t len);
int sbs_del(sbs_conn_t *c, const char *key);
/* Bulk load for the resident-keys phase: n keys in one request (datasystem
 * mset, Redis MSET). */
int sbs_mset(sbs_conn_t *c, size_t n, const char *const *keys, const void *const *vals,
             const size_t *lens);
int sbs_mdel(sbs_conn_t *c, size_t n, const char *const *keys);
/* Redis only: INFO memory's used_memory, or -1. */
double sbs_redis_used_memory(sbs_conn_t *c);
/* Redis only: MEMORY PURGE (jemalloc returns retained pages). */
int sbs_redis_purge(sbs_conn_t *c);

/* ---- phases ---- */

typedef struct {
    double memcpy_gbps[8];       /* per value size index: glibc's memcpy */
    double movsb_gbps[8];        /* the same copy with `rep movsb`; 0: no ERMS */
    double copy2_gbps[8];        /* glibc's memcpy by two threads, half each; 0: one CPU */
    double copy_gbps[8];         /* the fastest of the three: the machine's copy limit */
    double tcp_stream_gbps[8];   /* per value size index */
    dsb_lat_t unix_rtt, tcp_rtt; /* 1 KiB ping-pong */
} sbs_limits_t;

extern const size_t sbs_sizes[];
extern const size_t sbs_nsizes;
/* The index of size in sbs_sizes, or -1. */
int sbs_size_index(size_t size);
/* How many of sbs_sizes this run measures: --quick leaves out 256 MiB. */
size_t sbs_nsizes_run(const sbs_opts_t *o);

/* Writes byte over every page of buf, so that the timed loops that follow
 * touch warm memory (see docs/performance.md on cold pages). */
void sbs_warm(void *buf, size_t len, int byte);

/* Single client: every system and operation at every value size, with the
 * limits measured in the same size block. */
int sbs_phase_single(const sbs_opts_t *o, const sbs_env_t *env, sbs_limits_t *lim);
/* The connector rows when a YuanrongConnector is registered; else a note in
 * *why (returns 1 when skipped). */
int sbs_phase_connector(const sbs_opts_t *o, const sbs_env_t *env, char *why, size_t why_cap);
/* The Python connector's one-copy put+get (bench/py_bench.py --onecopy-only)
 * against this run's worker and, in a run with the default polling, once
 * more with polling off on both sides. */
int sbs_phase_pyconn(const sbs_opts_t *o, const sbs_env_t *env);
int sbs_phase_scale(const sbs_opts_t *o, const sbs_env_t *env);
int sbs_phase_resident(const sbs_opts_t *o, const sbs_env_t *env);
int sbs_phase_hol(const sbs_opts_t *o, const sbs_env_t *env);
/* Streams against Redis Streams, with its own targets and results file
 * (streams_bench.{txt,json}); only when --phases names it. */
int sbs_phase_streams(const sbs_opts_t *o, const sbs_env_t *env);

#endif
