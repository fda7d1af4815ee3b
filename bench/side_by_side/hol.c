/* The head-of-line phase: how much a 256 MiB transfer to or from one client
 * slows another client's small operations on the same server.
 *
 * For each server, a separate process keeps fetching a 256 MiB value over
 * TCP (this project: a remote client of the worker; Redis: a TCP client),
 * or in windows of their own keeps setting one (the server then receives
 * the 256 MiB), while the measuring client does 1 KiB set and get operations, once over
 * the local path (shared memory / Redis Unix socket) and once over TCP. The
 * two clients share nothing but the server. A loaded window lasts several
 * whole transfers, so that whatever a transfer does to the others once per
 * transfer shows in the p99; idle windows of the same operations, with the
 * same warm-up, alternate with the loaded ones. The figure of merit is p99
 * under load over p99 idle. On a 2-core machine the transfer's client and
 * server threads keep both cores busy, so part of any slowdown can be CPU
 * contention rather than the server's own queueing: a control with no server
 * at all (a Unix-socket ping-pong next to a plain TCP stream between two
 * other processes) shows what the machine alone adds, and the Redis rows
 * show a server that serves one request at a time. */
#include "bench/side_by_side/sbs.h"

#include "bench/limits.h"
#include "common/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (256 * SBS_MIB)
#define SMALL SBS_KIB
#define BIG_MAX_ITERS 2000
#define WARMUP 100
#define MAX_SAMPLES ((size_t)1 << 20)

/* Shared with the process doing the big transfers. */
typedef struct {
    atomic_int ready; /* connected, buffer warm */
    atomic_int stop;
    atomic_int done; /* transfers completed */
    atomic_int failed;
    int set; /* the big client sets the value (else gets it); set before the fork */
} big_t;

typedef struct {
    int rounds;    /* idle/loaded window pairs per client kind */
    int idle_ms;   /* length of an idle window */
    int transfers; /* a loaded window lasts this many 256 MiB transfers ... */
    int loaded_ms; /* ... or this long, whichever comes first */
} plan_t;

typedef struct {
    uint64_t *ns;
    size_t n;
    double seconds;
    int transfers;
} pool_t;

/* The big client: its own process and connection, getting the 256 MiB
 * value into its own warm buffer (or setting it, from a warm buffer, under
 * a key of its own) until told to stop. */
static void big_child(const sbs_env_t *env, sbs_kind_t kind, const char *key, big_t *b)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sbs_conn_t *c = sbs_connect(env, kind);
    uint8_t *dst = malloc(BIG);
    if (c == NULL || dst == NULL) {
        atomic_store(&b->failed, 1);
        _exit(1);
    }
    sbs_warm(dst, BIG, b->set ? 0x55 : 0);
    char set_key[96];
    snprintf(set_key, sizeof(set_key), "%s-set", key);
    atomic_store(&b->ready, 1);
    size_t len = BIG;
    for (int i = 0; i < BIG_MAX_ITERS && !atomic_load(&b->stop); i++) {
        int rc = b->set ? sbs_set(c, set_key, dst, BIG) : sbs_get(c, key, dst, BIG, &len);
        if (rc != 0 || len != BIG) {
            atomic_store(&b->failed, 1);
            break;
        }
        atomic_fetch_add(&b->done, 1);
    }
    _exit(atomic_load(&b->failed) ? 1 : 0);
}

/* WARMUP untimed pairs (idle windows), then 1 KiB set+get pairs until the deadline or,
 * with b, until b has completed `until` transfers; both operations'
 * latencies are appended to p. */
static int small_window(sbs_conn_t *c, const char *key, pool_t *p, int ms, big_t *b, int until)
{
    uint8_t val[SMALL], dst[SMALL];
    memset(val, 0x21, sizeof(val));
    memset(dst, 0, sizeof(dst));
    size_t len;
    /* A loaded window follows an idle one on the same connection, warm
     * already: untimed pairs there would only hide the wait for the first
     * transfer (Redis serves one 256 MiB answer before anything else). */
    for (int i = 0; b == NULL && i < WARMUP; i++)
        if (sbs_set(c, key, val, SMALL) != 0 || sbs_get(c, key, dst, SMALL, &len) != 0) return -1;
    int done0 = b ? atomic_load(&b->done) : 0;
    uint64_t start = ds__now_ns(), deadline = ds__now_ms() + (uint64_t)ms;
    while (p->n + 2 <= MAX_SAMPLES && ds__now_ms() < deadline) {
        if (b && (atomic_load(&b->done) >= until || atomic_load(&b->failed))) break;
        uint64_t t0 = ds__now_ns();
        if (sbs_set(c, key, val, SMALL) != 0) return -1;
        uint64_t t1 = ds__now_ns();
        if (sbs_get(c, key, dst, SMALL, &len) != 0) return -1;
        p->ns[p->n++] = t1 - t0;
        p->ns[p->n++] = ds__now_ns() - t1;
    }
    p->seconds += (double)(ds__now_ns() - start) / 1e9;
    if (b) p->transfers += atomic_load(&b->done) - done0;
    return 0;
}

/* One loaded window: the big client starts, the small operations run until
 * `transfers` of its transfers completed (or the time is up), then it stops
 * after its current transfer. */
static int loaded_window(const sbs_env_t *env, sbs_kind_t big_kind, const char *big_key,
                         sbs_conn_t *sc, const char *key, big_t *b, const plan_t *pl, pool_t *p)
{
    atomic_store(&b->ready, 0);
    atomic_store(&b->stop, 0);
    atomic_store(&b->done, 0);
    atomic_store(&b->failed, 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) big_child(env, big_kind, big_key, b);
    sbs_proc_track(pid, true);
    uint64_t deadline = ds__now_ms() + 60000;
    while (!atomic_load(&b->ready) && !atomic_load(&b->failed) && ds__now_ms() < deadline)
        usleep(1000);
    int rc = atomic_load(&b->ready) ? 0 : -1;
    if (rc == 0) {
        usleep(50000); /* the first request is on its way */
        rc = small_window(sc, key, p, pl->loaded_ms, b, pl->transfers);
    }
    atomic_store(&b->stop, 1);
    int st = 0;
    pid_t w = sbs_wait_exit(pid, ds__now_ms() + 60000, &st);
    if (w != pid) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        rc = -1;
    }
    sbs_proc_track(pid, false);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || atomic_load(&b->failed)) rc = -1;
    return rc;
}

/* Idle and loaded windows alternate (rounds of each), so that noise from the
 * rest of the machine falls on both. */
static int one_server(const sbs_env_t *env, sbs_kind_t big_kind, const sbs_kind_t small_kinds[2],
                      const plan_t *pl, uint8_t *big_buf)
{
    const char *big_key = "sbs-hol-big";
    sbs_conn_t *bc = sbs_connect(env, big_kind);
    pool_t idle = {calloc(MAX_SAMPLES, sizeof(uint64_t)), 0, 0, 0};
    /* Loaded windows: [0] during the big client's gets, [1] its sets. */
    pool_t busy[2] = {{calloc(MAX_SAMPLES, sizeof(uint64_t)), 0, 0, 0},
                      {calloc(MAX_SAMPLES, sizeof(uint64_t)), 0, 0, 0}};
    big_t *b = mmap(NULL, sizeof(big_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) b = NULL;
    int rc = bc && idle.ns && busy[0].ns && busy[1].ns && b ? 0 : -1;
    if (bc == NULL) fprintf(stderr, "hol: cannot connect the %s client\n", sbs_kind_name(big_kind));
    if (rc == 0) {
        sbs_warm(big_buf, BIG, 0x77);
        rc = sbs_set(bc, big_key, big_buf, BIG);
        if (rc != 0) fprintf(stderr, "hol: %s: the 256 MiB set failed\n", sbs_kind_name(big_kind));
    }
    for (int s = 0; s < 2 && rc == 0; s++) {
        sbs_kind_t sk = small_kinds[s];
        sbs_conn_t *sc = sbs_connect(env, sk);
        if (sc == NULL) {
            fprintf(stderr, "hol: cannot connect the %s client\n", sbs_kind_name(sk));
            rc = -1;
            break;
        }
        char key[64];
        snprintf(key, sizeof(key), "sbs-hol-small-%s", sbs_kind_name(sk));
        idle.n = 0;
        idle.seconds = 0;
        for (int m = 0; m < 2; m++) {
            busy[m].n = 0;
            busy[m].seconds = 0;
            busy[m].transfers = 0;
        }
        for (int r = 0; r < pl->rounds && rc == 0; r++) {
            for (int m = 0; m < 2 && rc == 0; m++) {
                rc = small_window(sc, key, &idle, pl->idle_ms, NULL, 0);
                if (rc != 0) {
                    fprintf(stderr, "hol: %s: an idle window's 1 KiB set/get failed\n",
                            sbs_kind_name(sk));
                    break;
                }
                b->set = m;
                rc = loaded_window(env, big_kind, big_key, sc, key, b, pl, &busy[m]);
                if (rc != 0)
                    fprintf(stderr,
                            "hol: %s beside %s %s: a loaded window failed (big client %s)\n",
                            sbs_kind_name(sk), sbs_kind_name(big_kind), m ? "sets" : "gets",
                            atomic_load(&b->failed) ? "failed" : "ok");
            }
        }
        sbs_row_t *row = NULL;
        if (rc == 0 && idle.n > 0 && busy[0].n > 0 && busy[1].n > 0) {
            size_t ni = idle.n, nb;
            row = sbs_row_add(sbs_kind_name(sk), "1KiB set/get idle", SMALL, 1, idle.ns, ni);
            /* sbs_row_add sorted the samples: the last is the longest wait. */
            if (row) row->ops_per_s = (double)ni / idle.seconds;
            if (row)
                snprintf(row->note, sizeof(row->note), "%zu ops over %.2f s; longest op %.1f ms",
                         ni, idle.seconds, (double)idle.ns[ni - 1] / 1e6);
            for (int m = 0; m < 2; m++) {
                pool_t *p = &busy[m];
                nb = p->n;
                row = sbs_row_add(sbs_kind_name(sk),
                                  m ? "1KiB set/get during 256MiB set"
                                    : "1KiB set/get during 256MiB get",
                                  SMALL, 2, p->ns, nb);
                if (row) row->ops_per_s = (double)nb / p->seconds;
                if (row)
                    snprintf(row->note, sizeof(row->note),
                             "%zu ops over %.2f s while %d transfers of 256 MiB %s a %s client "
                             "ran; longest op %.1f ms",
                             nb, p->seconds, p->transfers, m ? "from" : "to",
                             sbs_kind_name(big_kind), (double)p->ns[nb - 1] / 1e6);
            }
        } else if (rc == 0) {
            fprintf(stderr, "hol: %s: no samples (%zu idle, %zu/%zu loaded)\n", sbs_kind_name(sk),
                    idle.n, busy[0].n, busy[1].n);
            rc = -1;
        }
        sbs_del(sc, key);
        sbs_close(sc);
    }
    if (bc) {
        char set_key[96];
        snprintf(set_key, sizeof(set_key), "%s-set", big_key);
        sbs_del(bc, big_key);
        sbs_del(bc, set_key);
    }
    sbs_close(bc);
    if (b) munmap(b, sizeof(big_t));
    free(idle.ns);
    free(busy[0].ns);
    free(busy[1].ns);
    return rc;
}

typedef struct {
    int iters;
    double gbps;
} stream_t;

static void *stream_thread(void *p)
{
    stream_t *s = p;
    s->gbps = dsb_tcp_stream_gbps(BIG, s->iters);
    return NULL;
}

/* The machine's own share of the slowdown: 1 KiB Unix-socket ping-pong
 * between two processes, idle and while a plain loopback TCP stream moves
 * 256 MiB blocks between two other processes. No server is involved, so
 * what the p99 gains here is CPU contention on this machine alone. */
static int control(int iters)
{
    dsb_lat_t idle = {0}, busy = {0};
    if (dsb_unix_rtt(SMALL, iters, &idle) != 0) return -1;
    stream_t s = {8, 0};
    pthread_t tid;
    if (pthread_create(&tid, NULL, stream_thread, &s) != 0) return -1;
    usleep(300000); /* the stream is set up and flowing */
    int rc = dsb_unix_rtt(SMALL, iters, &busy);
    pthread_join(tid, NULL);
    if (rc != 0) return -1;
    sbs_row_add_raw("limit", "unix_rtt idle", SMALL, 1, idle.p50_us, idle.p99_us, NAN);
    sbs_row_t *r = sbs_row_add_raw("limit", "unix_rtt during 256MiB tcp stream", SMALL, 2,
                                   busy.p50_us, busy.p99_us, NAN);
    if (r) snprintf(r->note, sizeof(r->note), "stream ran at %.2f GB/s", s.gbps);
    return 0;
}

int sbs_phase_hol(const sbs_opts_t *o, const sbs_env_t *env)
{
    /* Loaded windows of whole transfers: this project moves 256 MiB in a few
     * hundred ms, Redis in seconds, so the counts differ and the windows
     * last a second or more either way. */
    plan_t ds_plan = o->quick ? (plan_t){1, 1000, 4, 6000} : (plan_t){2, 2000, 10, 10000};
    plan_t redis_plan = o->quick ? (plan_t){1, 1000, 1, 6000} : (plan_t){2, 2000, 2, 10000};
    uint8_t *buf = malloc(BIG);
    if (buf == NULL) return -1;
    const sbs_kind_t ds_small[2] = {SBS_DS_LOCAL, SBS_DS_REMOTE};
    const sbs_kind_t redis_small[2] = {SBS_REDIS_UNIX, SBS_REDIS_TCP};
    printf("  head-of-line, this project ...\n");
    fflush(stdout);
    int rc = one_server(env, SBS_DS_REMOTE, ds_small, &ds_plan, buf);
    printf("  head-of-line, Redis ...\n");
    fflush(stdout);
    if (one_server(env, SBS_REDIS_TCP, redis_small, &redis_plan, buf) != 0) rc = -1;
    printf("  head-of-line, the machine alone ...\n");
    fflush(stdout);
    if (control(o->quick ? 5000 : 20000) != 0) rc = -1;
    free(buf);
    return rc;
}
