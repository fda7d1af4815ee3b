/* The heterogeneous client through device memory the backend allocates, so
 * the same program checks the host backend (CI) and, with
 * DS_DEVICE_BACKEND=cuda on a GPU machine (tests/device/run.sh), the CUDA
 * backend: allocation; mset_d2h from device memory into the arena and
 * mget_h2d back to device memory, checked on the host; async calls; a
 * device-to-device copy; a value written by another process's device
 * memory and read into this one's; a client killed while waiting in a get,
 * after which the worker serves the rest; dev_publish / dev_subscribe
 * across processes, device to device from the publisher's memory, and from
 * the worker's copy when the publisher was killed or the path is off.
 * Unset, the backend is host. */
#include "harness.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ds/hetero_client.h"

static dst_worker_t W;
#define SZ (256u * 1024u)

static int setup(void **state)
{
    (void)state;
    setenv("DS_DEVICE_BACKEND", "host", 0);
    return dst_worker_start(&W, 128, NULL);
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(dst_worker_stop(&W), 0);
    return 0;
}

static ds_hetero_t *connect_to(const char *host, int port, const char *sockdir)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    o.unix_socket_dir = sockdir && sockdir[0] ? sockdir : NULL;
    ds_hetero_t *h = NULL;
    if (ds_hetero_connect(&o, false, &h) != DS_K_OK) return NULL;
    return h;
}

/* Device memory holding dst_fill(seed) bytes. */
static uint64_t dev_filled(size_t n, uint64_t seed)
{
    uint8_t *tmp = malloc(n);
    uint64_t d = 0;
    if (tmp == NULL || ds_device_malloc(0, n, &d) != DS_K_OK) {
        free(tmp);
        return 0;
    }
    dst_fill(tmp, n, seed);
    if (ds_device_memcpy(d, (uint64_t)(uintptr_t)tmp, n, DS_COPY_H2D) != DS_K_OK) {
        ds_device_free(d);
        d = 0;
    }
    free(tmp);
    return d;
}

static bool dev_check(uint64_t d, size_t n, uint64_t seed)
{
    uint8_t *tmp = malloc(n);
    bool ok = tmp && ds_device_memcpy((uint64_t)(uintptr_t)tmp, d, n, DS_COPY_D2H) == DS_K_OK &&
              dst_check(tmp, n, seed);
    free(tmp);
    return ok;
}

static void test_d2h_h2d_async_d2d(void **state)
{
    (void)state;
    ds_hetero_t *h = connect_to(W.host, W.port, W.sockdir);
    assert_non_null(h);
    printf("device backend: %s\n", ds_device_backend_name());
    uint64_t a = dev_filled(SZ, 1), b = dev_filled(SZ, 2), out = 0, out2 = 0;
    assert_true(a && b);
    assert_int_equal(ds_device_malloc(-1, 2 * SZ, &out), DS_K_OK);
    assert_int_equal(ds_device_malloc(0, SZ, &out2), DS_K_OK);
    ds_blob_t in[2] = {{a, SZ}, {b, SZ}}, o1[1] = {{out, 2 * SZ}};
    ds_device_blob_list_t il = {in, 2, 0, 0}, ol = {o1, 1, 0, 0};
    const char *k = "dev-ab";
    ds_status_t st[1];
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &k, &il, NULL, st), DS_K_OK);
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &k, &ol, 0, st), DS_K_OK);
    assert_true(dev_check(out, SZ, 1));
    assert_true(dev_check(out + SZ, SZ, 2));
    /* Async, from an offset: the second piece alone. */
    ds_blob_t o2 = {out2, SZ};
    ds_device_blob_list_t ol2 = {&o2, 1, 0, SZ};
    ds_future_t *f = NULL;
    assert_int_equal(ds_hetero_async_mget_h2d(h, 1, &k, &ol2, 0, &f), DS_K_OK);
    assert_int_equal(ds_future_get(f, 60000, st), DS_K_OK);
    ds_future_release(f);
    assert_true(dev_check(out2, SZ, 2));
    /* Device to device. */
    assert_int_equal(ds_device_memcpy(out2, a, SZ, DS_COPY_D2D), DS_K_OK);
    assert_true(dev_check(out2, SZ, 1));
    assert_int_equal(ds_kv_del(ds_hetero_kv(h), 1, &k, NULL), DS_K_OK);
    ds_device_free(a);
    ds_device_free(b);
    ds_device_free(out);
    ds_device_free(out2);
    ds_hetero_close(h);
}

/* Pre-registered device memory: a range of an allocation is accepted (cuda:
 * checked against the allocation), again as well; a blob that starts in it
 * and runs past its end fails its key before any byte moves, and the range
 * itself keeps working; an overlapping range is refused. */
static void test_pre_registered_memory(void **state)
{
    (void)state;
    ds_hetero_t *h = connect_to(W.host, W.port, W.sockdir);
    assert_non_null(h);
    uint64_t a = dev_filled(SZ, 7), reg = 0;
    assert_true(a != 0);
    assert_int_equal(ds_device_malloc(0, 2 * SZ, &reg), DS_K_OK);
    uint64_t half = SZ;
    /* The allocation's first half. */
    assert_int_equal(ds_hetero_pre_register_device_memory(h, 1, &reg, &half), DS_K_OK);
    assert_int_equal(ds_hetero_pre_register_device_memory(h, 1, &reg, &half), DS_K_OK);
    uint64_t inside = reg + 1;
    assert_int_equal(ds_hetero_pre_register_device_memory(h, 1, &inside, &half), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "overlaps the registered"));
    ds_blob_t in = {a, SZ};
    ds_device_blob_list_t il = {&in, 1, 0, 0};
    const char *k = "dev-reg";
    ds_status_t st[1];
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &k, &il, NULL, st), DS_K_OK);
    ds_blob_t past = {reg + 1, SZ};
    ds_device_blob_list_t pl = {&past, 1, 0, 0};
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &k, &pl, 0, st), DS_K_INVALID);
    assert_int_equal(st[0], DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "runs past its end"));
    ds_blob_t fits = {reg, SZ};
    ds_device_blob_list_t fl = {&fits, 1, 0, 0};
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &k, &fl, 0, st), DS_K_OK);
    assert_true(dev_check(reg, SZ, 7));
    assert_int_equal(ds_kv_del(ds_hetero_kv(h), 1, &k, NULL), DS_K_OK);
    /* Registrations end with the client, before the memory is freed. */
    ds_hetero_close(h);
    ds_device_free(a);
    ds_device_free(reg);
}

/* The child modes: "set KEY SEED" writes SZ bytes from its own device
 * memory; "wait KEY" waits in a get until killed. */
static int child_main(int argc, char **argv)
{
    if (argc < 6) return 2;
    ds_hetero_t *h = connect_to(argv[2], atoi(argv[3]), argv[4]);
    if (h == NULL) return 3;
    const char *k = argv[5];
    if (strcmp(argv[1], "--child-set") == 0 && argc >= 7) {
        uint64_t d = dev_filled(SZ, strtoull(argv[6], NULL, 10));
        ds_blob_t b = {d, SZ};
        ds_device_blob_list_t l = {&b, 1, 0, 0};
        ds_status_t rc = d ? ds_hetero_mset_d2h(h, 1, &k, &l, NULL, NULL) : DS_K_RUNTIME_ERROR;
        ds_device_free(d);
        ds_hetero_close(h);
        return rc == DS_K_OK ? 0 : 4;
    }
    if (strncmp(argv[1], "--child-pub", 11) == 0 && argc >= 7) {
        /* Two blobs of one allocation; "--child-pub-hang" then waits to be
         * killed, "--child-pub" until its key is received. */
        uint64_t d = dev_filled(2 * SZ, strtoull(argv[6], NULL, 10));
        ds_blob_t b[2] = {{d, SZ}, {d + SZ, SZ}};
        ds_device_blob_list_t l = {b, 2, 0, 0};
        if (d == 0 || ds_hetero_dev_publish(h, 1, &k, &l, NULL) != DS_K_OK) return 4;
        printf("published\n");
        fflush(stdout);
        if (strcmp(argv[1], "--child-pub-hang") == 0) {
            for (int i = 0; i < 600; i++)
                sleep(1);
            return 8;
        }
        ds_status_t rc = ds_hetero_dev_wait_received(h, 1, &k, 60000, NULL);
        ds_device_free(d);
        ds_hetero_close(h);
        return rc == DS_K_OK ? 0 : 7;
    }
    uint64_t d = 0;
    if (ds_device_malloc(0, SZ, &d) != DS_K_OK) {
        ds_hetero_close(h);
        return 5;
    }
    ds_blob_t b = {d, SZ};
    ds_device_blob_list_t l = {&b, 1, 0, 0};
    printf("waiting\n");
    fflush(stdout);
    ds_hetero_mget_h2d(h, 1, &k, &l, 60000, NULL);
    return 6;
}

static pid_t spawn(const char *mode, const char *key, const char *seed, int *out_fd)
{
    char port[16];
    snprintf(port, sizeof port, "%d", W.port);
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl("/proc/self/exe", "it_device", mode, W.host, port, W.sockdir, key, seed,
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *out_fd = p[0];
    return pid;
}

static void test_cross_process_and_killed_client(void **state)
{
    (void)state;
    int fd = -1, status = 0;
    pid_t pid = spawn("--child-set", "dev-xproc", "77", &fd);
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(fd);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    ds_hetero_t *h = connect_to(W.host, W.port, W.sockdir);
    assert_non_null(h);
    uint64_t d = 0;
    assert_int_equal(ds_device_malloc(0, SZ, &d), DS_K_OK);
    ds_blob_t b = {d, SZ};
    ds_device_blob_list_t l = {&b, 1, 0, 0};
    const char *k = "dev-xproc";
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &k, &l, 0, NULL), DS_K_OK);
    assert_true(dev_check(d, SZ, 77));

    /* A client killed while its get waits: the worker goes on serving. */
    pid = spawn("--child-wait", "dev-never", "0", &fd);
    assert_true(pid > 0);
    char line[16] = {0};
    assert_true(read(fd, line, sizeof line - 1) > 0); /* it is in its get */
    close(fd);
    usleep(100 * 1000);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    const char *k2 = "dev-never";
    uint64_t src = dev_filled(SZ, 5);
    assert_true(src != 0);
    ds_blob_t sb = {src, SZ};
    ds_device_blob_list_t sl = {&sb, 1, 0, 0};
    assert_int_equal(ds_hetero_mset_d2h(h, 1, &k2, &sl, NULL, NULL), DS_K_OK);
    assert_int_equal(ds_hetero_mget_h2d(h, 1, &k2, &l, 0, NULL), DS_K_OK);
    assert_true(dev_check(d, SZ, 5));
    assert_int_equal(ds_client_health_check(ds_hetero_kv(h)), DS_K_OK);
    const char *both[2] = {k, k2};
    assert_int_equal(ds_kv_del(ds_hetero_kv(h), 2, both, NULL), DS_K_OK);
    ds_device_free(d);
    ds_device_free(src);
    ds_hetero_close(h);
}

/* Subscribes key into 2 * SZ bytes of device memory split unlike the
 * publisher's blobs, checks them against seed, and returns which path ran
 * (1: device to device, 0: the worker's copy). */
static int subscribe_check(ds_hetero_t *h, const char *k, uint64_t seed)
{
    uint64_t out = 0;
    assert_int_equal(ds_device_malloc(0, 2 * SZ, &out), DS_K_OK);
    ds_blob_t b[3] = {{out, 100}, {out + 100, SZ}, {out + 100 + SZ, SZ - 100}};
    ds_device_blob_list_t l = {b, 3, 0, 0};
    ds_hetero_dev_stats_t s0, s1;
    ds_hetero_dev_stats(h, &s0);
    ds_status_t st[1];
    assert_int_equal(ds_hetero_dev_subscribe(h, 1, &k, &l, 10000, st), DS_K_OK);
    assert_int_equal(st[0], DS_K_OK);
    assert_true(dev_check(out, 2 * SZ, seed));
    ds_hetero_dev_stats(h, &s1);
    assert_int_equal(s1.d2d_keys + s1.arena_keys, s0.d2d_keys + s0.arena_keys + 1);
    /* Received: the object is gone. */
    bool ex = true;
    assert_int_equal(ds_kv_exist(ds_hetero_kv(h), 1, &k, &ex), DS_K_OK);
    assert_false(ex);
    ds_device_free(out);
    return s1.d2d_keys > s0.d2d_keys;
}

static pid_t spawn_published(const char *mode, const char *key, const char *seed)
{
    int fd = -1;
    pid_t pid = spawn(mode, key, seed, &fd);
    assert_true(pid > 0);
    char line[16] = {0};
    assert_true(read(fd, line, sizeof line - 1) > 0);
    assert_non_null(strstr(line, "published"));
    close(fd);
    return pid;
}

/* dev_publish in one process, dev_subscribe in another: the subscriber
 * copies device to device from the publisher's memory, and the publisher's
 * wait ends once it has. A publisher killed while its key is published:
 * the subscriber receives the bytes from the worker's copy (never the dead
 * process's memory) and the worker serves on. DS_DEVICE_IPC=0: the
 * worker's copy too. */
static void test_dev_publish_subscribe_across_processes(void **state)
{
    (void)state;
    ds_hetero_t *h = connect_to(W.host, W.port, W.sockdir);
    assert_non_null(h);
    int status = 0;
    pid_t pid = spawn_published("--child-pub", "dev-pub", "91");
    assert_int_equal(subscribe_check(h, "dev-pub", 91), 1);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    pid = spawn_published("--child-pub-hang", "dev-pub-killed", "92");
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(subscribe_check(h, "dev-pub-killed", 92), 0);
    assert_int_equal(ds_client_health_check(ds_hetero_kv(h)), DS_K_OK);

    setenv("DS_DEVICE_IPC", "0", 1);
    pid = spawn_published("--child-pub", "dev-pub-off", "93");
    assert_int_equal(subscribe_check(h, "dev-pub-off", 93), 0);
    unsetenv("DS_DEVICE_IPC");
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* The same process: its own pointers, device to device. */
    uint64_t d = dev_filled(2 * SZ, 94);
    assert_true(d != 0);
    ds_blob_t b[1] = {{d, 2 * SZ}};
    ds_device_blob_list_t l = {b, 1, 0, 0};
    const char *k = "dev-pub-self";
    assert_int_equal(ds_hetero_dev_publish(h, 1, &k, &l, NULL), DS_K_OK);
    ds_status_t st[1];
    assert_int_equal(ds_hetero_dev_wait_received(h, 1, &k, 0, st), DS_K_FUTURE_TIMEOUT);
    assert_int_equal(st[0], DS_K_FUTURE_TIMEOUT);
    assert_non_null(strstr(ds_last_error(), "was not received"));
    assert_int_equal(subscribe_check(h, k, 94), 1);
    assert_int_equal(ds_hetero_dev_wait_received(h, 1, &k, 0, st), DS_K_OK);
    ds_device_free(d);
    ds_hetero_close(h);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strncmp(argv[1], "--child-", 8) == 0) return child_main(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_d2h_h2d_async_d2d),
        cmocka_unit_test(test_pre_registered_memory),
        cmocka_unit_test(test_cross_process_and_killed_client),
        cmocka_unit_test(test_dev_publish_subscribe_across_processes),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
