/* Runs the compiled examples against a real worker: stage_example (the
 * program the README quotes), checking what it prints and leaves behind, and
 * a short pipeline_demo run (the three stage processes of scripts/demo.sh).
 * Both link the shared libomniconn and libdatasystem, so stage_example's
 * error run also checks that a message libomniconn sets is the one
 * ds_last_error() returns in a program using both shared libraries (one
 * error buffer, src/common/error.h). */
#include "it_connector_util.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 64, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

/* Runs the built program rel with argv; its exit status, output in out. */
static int run_prog(const char *rel, char *const argv[], char *out, size_t cap)
{
    char bin[512];
    dst_build_path(rel, bin, sizeof(bin));
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        close(p[1]);
        if (W.sockdir[0] != '\0') setenv("DS_UNIX_SOCKET_DIR", W.sockdir, 1);
        execv(bin, argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t n;
    uint64_t deadline = ds__now_ns() + 120ull * 1000000000ull;
    while (len + 1 < cap && (n = read(p[0], out + len, cap - 1 - len)) > 0 &&
           ds__now_ns() < deadline)
        len += (size_t)n;
    out[len] = '\0';
    close(p[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    printf("%s", out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run_example(char *addr, char *out, size_t cap)
{
    char *argv[] = {"stage_example", addr, NULL};
    return run_prog("examples/stage_example", argv, out, cap);
}

static void test_example_runs(void **state)
{
    (void)state;
    char addr[96], out[4096];
    snprintf(addr, sizeof(addr), "%s:%d", W.host, W.port);
    assert_int_equal(run_example(addr, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "stage 0: put req-1 on edge 0->1"));
    assert_non_null(
        strstr(out, "stage 1: got req-1: hidden float32[4, 8], 4 token ids, last 3.875"));
    assert_non_null(strstr(out, "health: healthy, puts 1, gets 1"));
    /* Its cleanup removed the request's key. */
    ds_client_t *kv = dst_connect(&W, DS_TRANSPORT_AUTO);
    assert_non_null(kv);
    assert_false(itc_exists(kv, "req-1:0_1"));
    ds_client_close(kv);
}

static void test_example_reports_errors(void **state)
{
    (void)state;
    char addr[64], want[96], out[4096];
    int port = ds__free_tcp_port(NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    snprintf(want, sizeof(want), "cannot reach the datasystem worker at 127.0.0.1:%d", port);
    assert_int_equal(run_example(addr, out, sizeof(out)), 1);
    /* Set by libomniconn's factory, read through libdatasystem's
     * ds_last_error(): the one buffer both libraries share. */
    assert_non_null(strstr(out, "stage_example: failed to create connector YuanrongConnector: "));
    assert_non_null(strstr(out, want));
}

static void run_pipeline_mode(char *config, const char *connector, char *talker_edge)
{
    char addr[96], out[16384];
    snprintf(addr, sizeof(addr), "%s:%d", W.host, W.port);
    char *argv[] = {
        "pipeline_demo", "--config", config,          "--worker_address", addr, "--requests", "40",
        "--window",      "8",        "--talker_edge", talker_edge,        NULL};
    assert_int_equal(run_prog("examples/pipeline_demo", argv, out, sizeof(out)), 0);
    assert_non_null(strstr(out, connector));
    assert_non_null(strstr(out, "verified: 40/40 waveforms match"));
    assert_non_null(strstr(out, "0 mismatched, 0 lost; 0 payloads failed"));
    assert_non_null(strstr(out, "store: 0 of the run's"));
    assert_non_null(strstr(out, "PASS"));
    assert_non_null(strstr(out, "time to first chunk p50"));
    if (strcmp(talker_edge, "stream") == 0)
        assert_non_null(strstr(out, "one stream of chunks per request"));
}

static void run_pipeline(char *config, const char *connector)
{
    run_pipeline_mode(config, connector, "keys");
}

static void test_pipeline_demo(void **state)
{
    (void)state;
    run_pipeline(DS_SOURCE_DIR "/examples/pipeline.yaml", "edge 0->1 YuanrongConnector");
}

/* Default edges: SharedMemoryConnector, which must not reclaim what a
 * consumer still needs. */
static void test_pipeline_demo_shm(void **state)
{
    (void)state;
    run_pipeline(DS_SOURCE_DIR "/examples/pipeline_shm.yaml", "edge 0->1 SharedMemoryConnector");
}

/* The talker -> code2wav edge as one stream of chunks per request: every
 * waveform still verified, nothing left in the store. */
static void test_pipeline_demo_stream(void **state)
{
    (void)state;
    run_pipeline_mode(DS_SOURCE_DIR "/examples/pipeline.yaml", "edge 1->2 YuanrongConnector",
                      "stream");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_runs),         cmocka_unit_test(test_example_reports_errors),
        cmocka_unit_test(test_pipeline_demo),        cmocka_unit_test(test_pipeline_demo_shm),
        cmocka_unit_test(test_pipeline_demo_stream),
    };
    return dst_run_group_tests_name("it_connector_example", tests, setup, teardown);
}
