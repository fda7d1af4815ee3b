/* Large SET data sections received by the receiver thread
 * (src/worker/net/bulk_recv.c), from raw-protocol TCP clients:
 *  - a 48 MiB value arrives intact, the request pipelined behind its data is
 *    answered after it, and other clients are served while it streams in;
 *  - a batch SET of several large values and one the worker discards (an
 *    invalid key) stores the good ones intact;
 *  - a worker stopped while the thread holds a half-received value exits
 *    cleanly (the value's reservation is let go once the job is back);
 *  - the transfer threads (receiver and sender) run at DS_XFER_NICE, the
 *    loop at the nice the worker started with. */
#include "it_hostile_raw.h"
#include "common/tuning.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int start_worker(void **state)
{
    (void)state;
    return dst_worker_start(&W, 256, NULL);
}

static int stop_worker(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

/* Queues a SET of n keys with the given sizes (all of their data), each
 * value dst_fill'ed with seed i + 1. */
static uint64_t set_many(hr_conn_t *c, const char *const *keys, const uint64_t *lens, uint32_t n)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, 0);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, n);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        ds__wbuf_cstr(&m, keys[i]);
        ds__wbuf_u64(&m, lens[i]);
        total += lens[i];
    }
    uint8_t *data = malloc(total);
    assert_non_null(data);
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        dst_fill(data + off, lens[i], i + 1);
        off += lens[i];
    }
    uint64_t id = hr_add_raw(c, DS_OP_SET, 0, &m, total, data, total);
    free(data);
    ds__wbuf_free(&m);
    return id;
}

typedef struct {
    hr_conn_t *c;
    int rc;
} writer_t;

static void *write_all(void *arg)
{
    writer_t *w = arg;
    w->rc = ds__write_full(w->c->fd, w->c->out.buf, w->c->out.len, ds__now_ms() + 60000);
    return NULL;
}

/* The worker's copy of key is len bytes of dst_fill(seed). */
static void check_value(const char *key, uint64_t len, uint64_t seed)
{
    ds_client_t *c = dst_connect(&W, DS_TRANSPORT_TCP);
    assert_non_null(c);
    void *v = NULL;
    size_t got = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &v, &got), DS_K_OK);
    assert_int_equal(got, len);
    assert_true(dst_check(v, len, seed));
    ds_free(v);
    ds_client_close(c);
}

static void test_large_set_then_pipelined(void **state)
{
    (void)state;
    hr_conn_t c;
    assert_int_equal(hr_open_hello(&c, &W, false), 0);
    const char *key = "brecv-big";
    uint64_t len = 48u << 20;
    uint64_t sid = set_many(&c, &key, &len, 1);
    uint64_t hid = hr_health(&c);
    /* Sent from a thread of its own, so that this one can meanwhile be
     * another client of the worker. */
    writer_t wr = {.c = &c, .rc = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, write_all, &wr), 0);
    hr_conn_t other;
    assert_int_equal(hr_open_hello(&other, &W, false), 0);
    uint64_t oid = hr_set(&other, "brecv-small", "meanwhile");
    assert_int_equal(hr_flush(&other), 0);
    hr_frame_t *fo = hr_answer(&other, oid, ds__now_ms() + 10000);
    assert_non_null(fo);
    assert_int_equal(fo->h.status, 0);

    hr_frame_t *fs = hr_answer(&c, sid, ds__now_ms() + 60000);
    assert_non_null(fs);
    assert_int_equal(fs->h.status, 0);
    hr_frame_t *fh = hr_answer(&c, hid, ds__now_ms() + 10000);
    assert_non_null(fh);
    assert_int_equal(fh->h.status, 0);
    pthread_join(t, NULL);
    assert_int_equal(wr.rc, 0);
    ds__wbuf_reset(&c.out);
    check_value(key, len, 1);
    /* That value went through the receiver thread, and the loop, polling
     * by default, slept beside it instead (core/poll_policy.c). */
    assert_int_equal(dst_stat(&W, "bulk_receives"), 1);
    if (dst_stat(&W, "polling.max_us") > 0)
        assert_true(dst_stat(&W, "polling.transfer_sleeps") >= 1);
    hr_close(&other);
    hr_close(&c);
}

static void test_batch_with_discarded_value(void **state)
{
    (void)state;
    hr_conn_t c;
    assert_int_equal(hr_open_hello(&c, &W, false), 0);
    /* The second key is invalid: its 5 MiB are received and discarded. */
    const char *keys[3] = {"brecv-a", "bad key", "brecv-c"};
    uint64_t lens[3] = {3u << 20, 5u << 20, (7u << 20) + 13};
    uint64_t sid = set_many(&c, keys, lens, 3);
    uint64_t hid = hr_health(&c);
    assert_int_equal(ds__write_full(c.fd, c.out.buf, c.out.len, ds__now_ms() + 30000), 0);
    ds__wbuf_reset(&c.out);
    hr_frame_t *fs = hr_answer(&c, sid, ds__now_ms() + 30000);
    assert_non_null(fs);
    assert_int_equal(fs->h.status, DS_K_INVALID);
    hr_frame_t *fh = hr_answer(&c, hid, ds__now_ms() + 10000);
    assert_non_null(fh);
    assert_int_equal(fh->h.status, 0);
    check_value("brecv-a", lens[0], 1);
    check_value("brecv-c", lens[2], 3);
    hr_close(&c);
}

static void test_stop_while_receiving(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    hr_conn_t c;
    assert_int_equal(hr_open_hello(&c, &W, false), 0);
    /* Half of a 32 MiB value, then nothing. */
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    hr_m_set(&m, "brecv-half", 32u << 20);
    uint8_t *half = calloc(1, 16u << 20);
    assert_non_null(half);
    double sets0 = dst_ops(&W, "set");
    hr_add_raw(&c, DS_OP_SET, 0, &m, 32u << 20, half, 16u << 20);
    ds__wbuf_free(&m);
    free(half);
    assert_int_equal(hr_flush(&c), 0);
    assert_true(dst_wait_stat(&W, "operations.set", sets0 + 1, 5000));
    int st = dst_worker_stop(&W);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    hr_close(&c);
}

/* The nice value of one of pid's threads, from /proc (field 19 of its stat;
 * the name, field 2, may hold spaces, so fields are counted after its ')'). */
static int thread_nice(pid_t pid, const char *tid)
{
    char path[128], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, tid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return INT32_MIN;
    char *got = fgets(line, sizeof(line), f);
    fclose(f);
    char *p = got ? strrchr(line, ')') : NULL;
    if (p == NULL) return INT32_MIN;
    int field = 2, nice = INT32_MIN;
    for (char *save = NULL, *tok = strtok_r(p + 1, " ", &save); tok;
         tok = strtok_r(NULL, " ", &save))
        if (++field == 19) {
            nice = atoi(tok);
            break;
        }
    return nice;
}

/* How many of pid's threads, other than its first, run at nice. */
static int threads_at(pid_t pid, int nice)
{
    char dir[64], main_tid[16];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    snprintf(main_tid, sizeof(main_tid), "%d", (int)pid);
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int n = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
        if (e->d_name[0] != '.' && strcmp(e->d_name, main_tid) != 0 &&
            thread_nice(pid, e->d_name) == nice)
            n++;
    closedir(d);
    return n;
}

static void test_transfer_threads_lowest_priority(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    int own = getpriority(PRIO_PROCESS, 0);
    char main_tid[16];
    snprintf(main_tid, sizeof(main_tid), "%d", (int)W.pid);
    assert_int_equal(thread_nice(W.pid, main_tid), own);
    /* A test run at nice DS_XFER_NICE already finds every thread there. */
    if (own >= DS_XFER_NICE) return;
    /* The bulk sender and the bulk receiver, once each has started (each
     * lowers itself first thing); no other thread of a standalone worker. */
    int lowered = threads_at(W.pid, DS_XFER_NICE);
    for (int i = 0; i < 250 && lowered < 2; i++) {
        usleep(20000);
        lowered = threads_at(W.pid, DS_XFER_NICE);
    }
    assert_int_equal(lowered, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_large_set_then_pipelined, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_batch_with_discarded_value, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_stop_while_receiving, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_transfer_threads_lowest_priority, start_worker,
                                        stop_worker),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
