/* The heterogeneous client through device memory the backend allocates, so
 * the same program checks the host backend (CI) and, with
 * DS_DEVICE_BACKEND=cuda on a GPU machine (tests/device/run.sh), the CUDA
 * backend: allocation; mset_d2h from device memory into the arena and
 * mget_h2d back to device memory, checked on the host; async calls; a
 * device-to-device copy; a value written by another process's device
 * memory and read into this one's; a client killed while waiting in a get,
 * after which the worker serves the rest. Unset, the backend is host. */
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

int main(int argc, char **argv)
{
    if (argc > 1 && strncmp(argv[1], "--child-", 8) == 0) return child_main(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_d2h_h2d_async_d2d),
        cmocka_unit_test(test_pre_registered_memory),
        cmocka_unit_test(test_cross_process_and_killed_client),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
