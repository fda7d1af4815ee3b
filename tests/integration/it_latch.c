/* Read latches against real workers: the writers they hold back, and their
 * limits.
 *
 * Parked writers that are handed on. A SET or DEL waiting for another
 * client's read latch is resumed when the latch goes, and with a
 * write-through L2 its answer then waits for the disk: the request is parked
 * a second time, by another owner. The client leaving (closing its socket,
 * or its request timeout closing it) while the disk write is pending must
 * reach that owner, never the latch's freed waiter. To keep the disk write
 * pending without timing, the worker's disk I/O thread (named "ds-disk-io")
 * is held at a gate: while it sleeps with nothing queued, the test stops
 * that one thread with ptrace (PTRACE_SEIZE, PTRACE_INTERRUPT; the worker is
 * its child), and every disk job queued meanwhile waits, in queue order,
 * until the test lets the thread go (gate_open: PTRACE_DETACH). The loop
 * and the worker's other threads keep running. The worker has no hook for
 * this: a thread stopped while it sleeps in its condition wait holds no
 * lock, so the loop never waits for it. Where ptrace is refused (a
 * sandbox), the gate tests are skipped with the reason.
 *
 * Limits: --max_read_latches_per_client and --max_read_latches cap the
 * latches a session and the worker hold; --max_read_latch_timeout_ms caps a
 * latch's timeout. The offender gets a clear error naming the flag; other
 * clients, and writes of unlatched keys, go on; a client's latches go with
 * it and free its share.
 *
 * Many keys: a request of thousands of keys (served a slice per loop turn)
 * answers each key's status in its place, holds writers back until its
 * release, and one whose client leaves half served leaves no latch; a
 * session that ends holding thousands is relieved of them a slice per
 * turn, its writers woken, its keys free for the next client. */
#include "harness.h"
#include "it_hostile_raw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;
static char dir[256];
static pid_t gate_tid; /* the disk I/O thread, while stopped at the gate */

/* Lets the disk thread go. When the worker died meanwhile, the thread is
 * no longer stopped (the detach fails) and, being traced, is reaped here: a
 * process is reaped only after its traced threads are. 0 when it was let
 * go alive. */
static int gate_release(void)
{
    pid_t tid = gate_tid;
    gate_tid = 0;
    if (tid <= 0) return 0;
    if (ptrace(PTRACE_DETACH, tid, NULL, NULL) == 0) return 0;
    for (int i = 0; i < 1000 && waitpid(tid, NULL, __WALL | WNOHANG) == 0; i++)
        usleep(10000);
    return -1;
}

/* cmocka runs it after each test, also one that failed half-way. */
static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    (void)gate_release(); /* let a held disk thread go, or the stop waits for it */
    if (W.pid > 0 && dst_worker_stop(&W) != 0) rc = -1; /* a clean stop exits 0 */
    memset(&W, 0, sizeof(W));
    if (dir[0]) dst_sh("rm -rf %s", dir);
    dir[0] = '\0';
    return rc;
}

static ds_client_t *client(int request_timeout_ms)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = DS_TRANSPORT_TCP;
    o.token = getenv("DS_TEST_TOKEN");
    o.unix_socket_dir = W.sockdir[0] ? W.sockdir : NULL;
    o.request_timeout_ms = request_timeout_ms;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK)
        fprintf(stderr, "connect %s:%d: %s\n", W.host, W.port, ds_last_error());
    assert_non_null(c);
    return c;
}

static void put(ds_client_t *c, const char *key, const char *val, ds_write_mode_t mode)
{
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = mode;
    ds_status_t st = ds_kv_set(c, key, val, strlen(val), &p);
    if (st != DS_K_OK) fprintf(stderr, "set %s: %s\n", key, ds_last_error());
    assert_int_equal(st, DS_K_OK);
}

static void want_value(ds_client_t *c, const char *key, const char *want)
{
    void *v = NULL;
    size_t len = 0;
    ds_status_t st = ds_kv_get(c, key, 0, &v, &len);
    if (st != DS_K_OK) fprintf(stderr, "get %s: %s\n", key, ds_last_error());
    assert_int_equal(st, DS_K_OK);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(v, want, len);
    ds_free(v);
}

/* The worker serves another client's write and read. */
static void still_serving(void)
{
    ds_client_t *c = client(0);
    put(c, "unrelated", "fine", DS_WRITE_NONE_L2_CACHE);
    want_value(c, "unrelated", "fine");
    ds_client_close(c);
}

/* A SET of one key in write mode mode, sent raw. */
static uint64_t raw_set(hr_conn_t *c, const char *key, const char *val, uint8_t mode)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, mode);
    ds__wbuf_u32(&m, 0); /* no TTL */
    ds__wbuf_u8(&m, 0);  /* existence NONE */
    ds__wbuf_u32(&m, 1);
    ds__wbuf_cstr(&m, key);
    ds__wbuf_u64(&m, strlen(val));
    uint64_t id = hr_add(c, DS_OP_SET, &m, val, strlen(val));
    ds__wbuf_free(&m);
    return id;
}

/* Until the worker has n writers waiting for read latches. */
static void wait_waiting(double n)
{
    assert_true(dst_wait_stat(&W, "latches.waiting", n, 10000));
}

/* Until the disk queue holds at least n jobs. */
static void wait_queued(double n)
{
    for (int i = 0; i < 500 && dst_stat(&W, "l2.queue_depth") < n; i++)
        usleep(10000);
    assert_true(dst_stat(&W, "l2.queue_depth") >= n);
}

/* A worker with an sfs L2 (and a spill directory when spill). */
static void gate_prepare(int arena_mb, bool spill)
{
    snprintf(dir, sizeof(dir), "/tmp/ds-it-latch-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char extra[800];
    int n = snprintf(extra, sizeof(extra), "--l2_cache_type sfs --sfs_path %s/l2", dir);
    if (spill)
        snprintf(extra + n, sizeof(extra) - (size_t)n,
                 " --spill_directory %s/spill --spill_size_limit 268435456", dir);
    assert_int_equal(dst_worker_start(&W, arena_mb, extra), 0);
}

/* The first line of /proc/<pid>/task/<tid>/<what> in buf; false when gone. */
static bool task_read(pid_t tid, const char *what, char *buf, size_t cap)
{
    char path[128];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)W.pid, (int)tid, what);
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok;
}

/* The worker's thread named "ds-disk-io", or 0. */
static pid_t disk_thread(void)
{
    char path[64], comm[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)W.pid);
    DIR *d = opendir(path);
    if (d == NULL) return 0;
    pid_t tid = 0;
    for (struct dirent *e; tid == 0 && (e = readdir(d)) != NULL;) {
        pid_t t = (pid_t)atoi(e->d_name);
        if (t > 0 && task_read(t, "comm", comm, sizeof(comm)) && strcmp(comm, "ds-disk-io\n") == 0)
            tid = t;
    }
    closedir(d);
    return tid;
}

/* Whether thread tid sleeps (state S in its stat line). */
static bool sleeping(pid_t tid)
{
    char st[512];
    if (!task_read(tid, "stat", st, sizeof(st))) return false;
    const char *p = strrchr(st, ')'); /* the name may hold spaces */
    return p != NULL && p[1] == ' ' && p[2] == 'S';
}

/* Stops the idle disk I/O thread: every disk job queued from now on waits. */
static void gate_close(void)
{
    for (int i = 0; i < 500 && dst_stat(&W, "l2.queue_depth") != 0; i++)
        usleep(10000);
    assert_true(dst_stat(&W, "l2.queue_depth") == 0);
    /* The thread names itself once it runs: look again for a while. */
    pid_t tid = disk_thread();
    for (int i = 0; i < 500 && tid <= 0; i++) {
        usleep(10000);
        tid = disk_thread();
    }
    assert_true(tid > 0);
    /* nothing queued: the thread goes to sleep in its condition wait, where
     * it holds no lock; seen asleep on several looks, it stays there */
    int asleep = 0;
    for (int i = 0; i < 500 && asleep < 5; i++) {
        asleep = sleeping(tid) ? asleep + 1 : 0;
        usleep(2000);
    }
    assert_int_equal(asleep, 5);
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0) {
        fprintf(stderr, "ptrace(PTRACE_SEIZE) of the worker's disk thread: %s; skipped\n",
                strerror(errno));
        skip();
    }
    gate_tid = tid;
    assert_int_equal(ptrace(PTRACE_INTERRUPT, tid, NULL, NULL), 0);
    int status = 0;
    assert_int_equal(waitpid(tid, &status, __WALL), tid);
    assert_true(WIFSTOPPED(status));
}

/* Lets the disk thread go and waits for the queue to drain. */
static void gate_open(void)
{
    assert_true(gate_tid > 0);
    assert_int_equal(gate_release(), 0);
    for (int i = 0; i < 500 && dst_stat(&W, "l2.queue_depth") != 0; i++)
        usleep(10000);
    assert_true(dst_stat(&W, "l2.queue_depth") == 0);
}

/* A write-through SET held by a latch, resumed, waiting for the disk; the
 * client closes its socket. The write stays, the worker keeps serving. */
static void test_set_resumed_then_client_leaves(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own workers */
    gate_prepare(64, false);
    gate_close();
    ds_client_t *a = client(0);
    const char *key = "lk";
    put(a, key, "old", DS_WRITE_NONE_L2_CACHE);
    assert_int_equal(ds_kv_rlatch(a, 1, &key, 30000, NULL), DS_K_OK);
    hr_conn_t b;
    assert_int_equal(hr_open_hello(&b, &W, false), 0);
    raw_set(&b, key, "new", DS_WRITE_THROUGH_L2_CACHE);
    assert_int_equal(hr_flush(&b), 0);
    wait_waiting(1);
    assert_int_equal(ds_kv_unrlatch(a, 1, &key, NULL), DS_K_OK);
    wait_queued(1); /* published; its answer waits for the disk write */
    wait_waiting(0);
    hr_close(&b);
    still_serving();
    gate_open();
    want_value(a, key, "new");
    ds_client_close(a);
    still_serving();
}

/* The same for a DEL whose L2 delete is pending. */
static void test_del_resumed_then_client_leaves(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own workers */
    gate_prepare(64, false);
    ds_client_t *a = client(0);
    const char *key = "lk";
    put(a, key, "old", DS_WRITE_THROUGH_L2_CACHE); /* an L2 copy for the DEL to delete */
    gate_close();
    assert_int_equal(ds_kv_rlatch(a, 1, &key, 30000, NULL), DS_K_OK);
    hr_conn_t b;
    assert_int_equal(hr_open_hello(&b, &W, false), 0);
    hr_del(&b, key);
    assert_int_equal(hr_flush(&b), 0);
    wait_waiting(1);
    assert_int_equal(ds_kv_unrlatch(a, 1, &key, NULL), DS_K_OK);
    wait_queued(1); /* deleted from memory; its answer waits for the L2 delete */
    hr_close(&b);
    still_serving();
    gate_open();
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(ds_kv_get(a, key, 0, &v, &len), DS_K_NOT_FOUND);
    ds_client_close(a);
    still_serving();
}

typedef struct {
    ds_client_t *c;
    const char *key;
    ds_status_t st;
} writer_t;

static void *writer(void *arg)
{
    writer_t *w = arg;
    ds_set_param_t p = DS_SET_PARAM_INIT;
    p.write_mode = DS_WRITE_THROUGH_L2_CACHE;
    w->st = ds_kv_set(w->c, w->key, "new", 3, &p);
    return NULL;
}

/* The writer's own request timeout closes its connection while its resumed
 * SET waits for the disk. */
static void test_set_resumed_then_request_times_out(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own workers */
    gate_prepare(64, false);
    gate_close();
    ds_client_t *a = client(0);
    const char *key = "lk";
    put(a, key, "old", DS_WRITE_NONE_L2_CACHE);
    assert_int_equal(ds_kv_rlatch(a, 1, &key, 30000, NULL), DS_K_OK);
    writer_t w = {.c = client(3000), .key = key};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, writer, &w), 0);
    wait_waiting(1);
    assert_int_equal(ds_kv_unrlatch(a, 1, &key, NULL), DS_K_OK);
    wait_queued(1);         /* its answer waits for the disk write */
    pthread_join(th, NULL); /* the timeout closed its connection */
    assert_int_equal(w.st, DS_K_RPC_DEADLINE_EXCEEDED);
    ds_client_close(w.c);
    still_serving();
    gate_open();
    want_value(a, key, "new");
    ds_client_close(a);
    still_serving();
}

/* A SET that finds the arena full waits while spills make room (parked by
 * the spill code); its client leaves before the spills, held at the gate,
 * are done. The worker keeps serving, and the spills complete. */
static void test_set_waiting_for_room_client_leaves(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own workers */
    gate_prepare(16, true);
    gate_close();
    ds_client_t *c = client(0);
    char *mib = malloc(1 << 20);
    assert_non_null(mib);
    memset(mib, 'm', 1 << 20);
    ds_set_param_t p = DS_SET_PARAM_INIT;
    char key[32];
    int n = 0;
    for (; n < 12; n++) { /* 12 of 16 MiB: nothing needs to wait yet */
        snprintf(key, sizeof(key), "fill-%d", n);
        assert_int_equal(ds_kv_set(c, key, mib, 1 << 20, &p), DS_K_OK);
    }
    /* 8 MiB more cannot fit: the SET waits for the spills, its data section
     * unread meanwhile (the client sends only the head) */
    hr_conn_t b;
    assert_int_equal(hr_open_hello(&b, &W, false), 0);
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_set(&m, "big", 8 << 20);
    hr_add_raw(&b, DS_OP_SET, 0, &m, 8 << 20, NULL, 0);
    ds__wbuf_free(&m);
    assert_int_equal(hr_flush(&b), 0);
    assert_true(dst_wait_stat(&W, "spill.waits", 1, 10000));
    hr_close(&b);
    still_serving();
    gate_open();
    for (int i = 0; i < n; i++) { /* spilled or not, every value reads back */
        snprintf(key, sizeof(key), "fill-%d", i);
        void *v = NULL;
        size_t len = 0;
        assert_int_equal(ds_kv_get(c, key, 0, &v, &len), DS_K_OK);
        assert_int_equal(len, 1 << 20);
        assert_memory_equal(v, mib, len);
        ds_free(v);
    }
    free(mib);
    ds_client_close(c);
    still_serving();
}

/* ---- limits ---- */

static void test_latch_limits(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own workers */
    assert_int_equal(dst_worker_start(&W, 64,
                                      "--max_read_latches_per_client 4 --max_read_latches 6 "
                                      "--max_read_latch_timeout_ms 5000"),
                     0);
    ds_client_t *a = client(0), *b = client(0), *c = client(0);
    const char *keys[6] = {"k0", "k1", "k2", "k3", "k4", "k5"};
    for (int i = 0; i < 6; i++)
        put(a, keys[i], "v", DS_WRITE_NONE_L2_CACHE);
    ds_status_t st[6];
    /* a timeout past the cap: refused, naming the limit */
    assert_int_equal(ds_kv_rlatch(a, 1, keys, 5001, st), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "--max_read_latch_timeout_ms"));
    assert_non_null(strstr(ds_last_error(), "5000"));
    assert_int_equal(ds_kv_rlatch(a, 1, keys, 5000, NULL), DS_K_OK);
    assert_int_equal(ds_kv_unrlatch(a, 1, keys, NULL), DS_K_OK);
    /* the client's cap: the first four of five keys are latched */
    assert_int_equal(ds_kv_rlatch(a, 5, keys, 5000, st), DS_K_OUT_OF_MEMORY);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], DS_K_OK);
    assert_int_equal(st[4], DS_K_OUT_OF_MEMORY);
    assert_non_null(strstr(ds_last_error(), "--max_read_latches_per_client"));
    assert_true(dst_stat(&W, "latches.held") == 4);
    /* one key latched twice counts twice */
    assert_int_equal(ds_kv_rlatch(a, 1, keys, 5000, st), DS_K_OUT_OF_MEMORY);
    /* another client has its own share, up to the worker's cap */
    assert_int_equal(ds_kv_rlatch(b, 2, keys + 4, 5000, st), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(c, 1, keys + 5, 5000, st), DS_K_OUT_OF_MEMORY);
    assert_non_null(strstr(ds_last_error(), "--max_read_latches "));
    assert_true(dst_stat(&W, "latches.held") == 6);
    /* the refused client goes on: an unrelated SET, a read */
    put(c, "unlatched", "written", DS_WRITE_NONE_L2_CACHE);
    want_value(c, "unlatched", "written");
    want_value(c, "k0", "v");
    /* a release frees a share */
    assert_int_equal(ds_kv_unrlatch(b, 1, keys + 4, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(c, 1, keys + 5, 5000, st), DS_K_OK);
    /* a client that leaves frees its share: a's four go */
    ds_client_close(a);
    assert_true(dst_wait_stat(&W, "latches.held", 2, 10000));
    assert_int_equal(ds_kv_rlatch(c, 3, keys, 5000, st), DS_K_OK);
    assert_true(dst_stat(&W, "latches.held") == 5);
    /* latched keys still hold writers back, unlatched ones do not */
    put(b, "k4", "rewritten", DS_WRITE_NONE_L2_CACHE);
    want_value(b, "k4", "rewritten");
    assert_int_equal(ds_kv_unrlatch(c, 1, keys, NULL), DS_K_OK);
    put(b, "k0", "rewritten", DS_WRITE_NONE_L2_CACHE);
    want_value(b, "k0", "rewritten");
    ds_client_close(b);
    ds_client_close(c);
    assert_true(dst_wait_stat(&W, "latches.held", 0, 10000));
    still_serving();
}

/* ---- many keys in one request ---- */

struct waiting_put {
    ds_client_t *c;
    const char *key;
    ds_status_t st;
};

static void *put_thread(void *arg)
{
    struct waiting_put *w = arg;
    w->st = ds_kv_set(w->c, w->key, "after", 5, NULL);
    return NULL;
}

/* A latch request of thousands of keys is served a slice per loop turn:
 * every key's status lands at its own place, a writer of its last key waits
 * for the release and only then goes on, and a client that leaves with its
 * request half served keeps no latch. */
static void test_large_batch(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own worker */
    assert_int_equal(dst_worker_start(&W, 64, ""), 0);
    enum { N = 3000, MISSING = 2500 };
    static char names[N][16];
    static const char *keys[N];
    static const void *vals[N];
    static size_t lens[N];
    static ds_status_t st[N];
    uint32_t nput = 0;
    static const char *put_keys[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "many-%d", i);
        keys[i] = names[i];
        if (i == MISSING) continue;
        put_keys[nput] = names[i];
        vals[nput] = "v";
        lens[nput] = 1;
        nput++;
    }
    ds_client_t *a = client(0), *b = client(0);
    assert_int_equal(ds_kv_mset(a, nput, put_keys, vals, lens, NULL, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(a, N, keys, 60000, st), DS_K_NOT_FOUND);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == MISSING ? DS_K_NOT_FOUND : DS_K_OK);
    assert_non_null(strstr(ds_last_error(), names[MISSING]));
    assert_true(dst_stat(&W, "latches.held") == N - 1);
    /* b's write of the last key waits for the latch. */
    struct waiting_put w = {.c = b, .key = names[N - 1], .st = DS_K_RUNTIME_ERROR};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, put_thread, &w), 0);
    assert_true(dst_wait_stat(&W, "latches.waiting", 1, 10000));
    assert_int_equal(ds_kv_unrlatch(a, N, keys, st), DS_K_NOT_FOUND);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == MISSING ? DS_K_NOT_FOUND : DS_K_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(w.st, DS_K_OK);
    want_value(a, names[N - 1], "after");
    assert_true(dst_stat(&W, "latches.held") == 0);

    /* A raw client sends the same request and leaves without its answer:
     * whatever part of it was served goes with its session. */
    for (int round = 0; round < 3; round++) {
        hr_conn_t r;
        assert_int_equal(hr_open_hello(&r, &W, false), 0);
        ds_wbuf_t m;
        ds__wbuf_init(&m);
        ds__wbuf_u32(&m, 60000);
        ds__wbuf_u32(&m, N);
        for (int i = 0; i < N; i++)
            ds__wbuf_cstr(&m, keys[i]);
        hr_add(&r, DS_OP_RLATCH, &m, NULL, 0);
        ds__wbuf_free(&m);
        assert_int_equal(hr_flush(&r), 0);
        hr_close(&r);
    }
    assert_true(dst_wait_stat(&W, "latches.held", 0, 10000));
    put(b, names[0], "free", DS_WRITE_NONE_L2_CACHE);
    want_value(b, names[0], "free");
    ds_client_close(a);
    ds_client_close(b);
    still_serving();
}

/* A session that ends holding thousands of latches has them dropped a
 * slice per loop turn: writers of its first and last keys both go on once
 * they are gone, and a client latching the same keys next holds exactly its
 * own latches and releases every one of them. */
static void test_session_ends_with_many_latches(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own worker */
    assert_int_equal(dst_worker_start(&W, 64, ""), 0);
    enum { N = 3000 };
    static char names[N][24];
    static const char *keys[N];
    static const void *vals[N];
    static size_t lens[N];
    static ds_status_t st[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "ends-%d", i);
        keys[i] = names[i];
        vals[i] = "v";
        lens[i] = 1;
    }
    ds_client_t *a = client(0), *b = client(0), *c = client(0);
    assert_int_equal(ds_kv_mset(a, N, keys, vals, lens, NULL, NULL), DS_K_OK);
    assert_int_equal(ds_kv_rlatch(a, N, keys, 60000, st), DS_K_OK);
    assert_true(dst_stat(&W, "latches.held") == N);
    struct waiting_put first = {.c = b, .key = names[0], .st = DS_K_RUNTIME_ERROR};
    struct waiting_put last = {.c = c, .key = names[N - 1], .st = DS_K_RUNTIME_ERROR};
    pthread_t t[2];
    assert_int_equal(pthread_create(&t[0], NULL, put_thread, &first), 0);
    assert_int_equal(pthread_create(&t[1], NULL, put_thread, &last), 0);
    assert_true(dst_wait_stat(&W, "latches.waiting", 2, 10000));
    ds_client_close(a);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(first.st, DS_K_OK);
    assert_int_equal(last.st, DS_K_OK);
    want_value(b, names[0], "after");
    want_value(b, names[N - 1], "after");
    assert_true(dst_wait_stat(&W, "latches.held", 0, 10000));
    ds_client_t *d = client(0);
    assert_int_equal(ds_kv_rlatch(d, N, keys, 60000, st), DS_K_OK);
    assert_true(dst_stat(&W, "latches.held") == N);
    assert_int_equal(ds_kv_unrlatch(d, N, keys, st), DS_K_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], DS_K_OK);
    assert_true(dst_stat(&W, "latches.held") == 0);
    ds_client_close(b);
    ds_client_close(c);
    ds_client_close(d);
    still_serving();
}

/* The flags' ranges: their ends start a worker, values past them do not. */
static void test_latch_flag_limits(void **state)
{
    (void)state;
    if (getenv("DS_TEST_WORKER")) skip(); /* starts its own workers */
    assert_int_equal(dst_worker_start(&W, 16,
                                      "--max_read_latches_per_client 1 --max_read_latches 1 "
                                      "--max_read_latch_timeout_ms 2147483647"),
                     0);
    ds_client_t *c = client(0);
    const char *keys[2] = {"a", "b"};
    put(c, "a", "v", DS_WRITE_NONE_L2_CACHE);
    put(c, "b", "v", DS_WRITE_NONE_L2_CACHE);
    ds_status_t st[2];
    assert_int_equal(ds_kv_rlatch(c, 2, keys, INT32_MAX, st), DS_K_OUT_OF_MEMORY);
    assert_int_equal(st[0], DS_K_OK);
    assert_int_equal(st[1], DS_K_OUT_OF_MEMORY);
    ds_client_close(c);
    assert_int_equal(dst_worker_stop(&W), 0);
    assert_int_equal(dst_worker_start(&W, 16, "--max_read_latches_per_client 0"), -1);
    assert_int_equal(dst_worker_start(&W, 16, "--max_read_latches -1"), -1);
    assert_int_equal(dst_worker_start(&W, 16, "--max_read_latch_timeout_ms 0"), -1);
    assert_int_equal(dst_worker_start(&W, 16, "--max_read_latch_timeout_ms 2147483648"), -1);
    memset(&W, 0, sizeof(W));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_set_resumed_then_client_leaves, teardown),
        cmocka_unit_test_teardown(test_del_resumed_then_client_leaves, teardown),
        cmocka_unit_test_teardown(test_set_resumed_then_request_times_out, teardown),
        cmocka_unit_test_teardown(test_set_waiting_for_room_client_leaves, teardown),
        cmocka_unit_test_teardown(test_latch_limits, teardown),
        cmocka_unit_test_teardown(test_latch_flag_limits, teardown),
        cmocka_unit_test_teardown(test_large_batch, teardown),
        cmocka_unit_test_teardown(test_session_ends_with_many_latches, teardown),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
