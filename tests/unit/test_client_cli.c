/* Unit tests of dscli's table-driven argument parsing and its helpers (worker
 * lookup, log tail), run against the real command table; no worker needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cli/cli.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int parse(const char *cmd, cli_args_t *a, char *err, size_t cap, ...)
{
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, cap);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
        argv[argc++] = (char *)s;
    va_end(ap);
    const cli_cmd_t *c = cli_find_command(cmd);
    assert_non_null(c);
    err[0] = '\0';
    return cli_parse(c, argc, argv, a, err, cap);
}

static void test_spec_start_line(void **state)
{
    (void)state;
    cli_args_t a;
    char err[256];
    const cli_cmd_t *c = cli_find_command("start");
    assert_int_equal(parse("start", &a, err, sizeof(err), "-w", "--worker_address",
                           "10.0.0.5:31501", "--etcd_address", "10.0.0.9:2379",
                           "--shared_memory_size_mb", "20480", NULL),
                     0);
    assert_true(cli_given(c, &a, "worker_args"));
    assert_string_equal(cli_value(c, &a, "worker_address"), "10.0.0.5:31501");
    assert_string_equal(cli_value(c, &a, "timeout"), "90"); /* Yuanrong's default */
    /* Everything but -w reaches the worker, in order. */
    const char *want[] = {"--worker_address", "10.0.0.5:31501",          "--etcd_address",
                          "10.0.0.9:2379",    "--shared_memory_size_mb", "20480"};
    assert_int_equal(a.nfwd, 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(a.fwd[i], want[i]);
}

static void test_spec_stop_line(void **state)
{
    (void)state;
    cli_args_t a;
    char err[256];
    const cli_cmd_t *c = cli_find_command("stop");
    assert_int_equal(
        parse("stop", &a, err, sizeof(err), "--worker_address", "10.0.0.5:31501", NULL), 0);
    assert_string_equal(cli_value(c, &a, "worker_address"), "10.0.0.5:31501");
    /* No default: stop computes Yuanrong's 180 s + arena / migration rate. */
    assert_null(cli_value(c, &a, "timeout"));
    assert_null(cli_value(c, &a, "unix_socket_dir"));
    assert_int_equal(a.nfwd, 0);
    /* Yuanrong's short forms: -w ADDR and -f FILE. */
    assert_int_equal(parse("stop", &a, err, sizeof(err), "-w", "10.0.0.6:31501", NULL), 0);
    assert_string_equal(cli_value(c, &a, "worker_address"), "10.0.0.6:31501");
    assert_int_equal(parse("stop", &a, err, sizeof(err), "-f", "/x/worker_config.json", NULL), 0);
    assert_string_equal(cli_value(c, &a, "config_path"), "/x/worker_config.json");
    assert_null(cli_value(c, &a, "worker_address"));
}

/* --worker_args is a marker, never a flag that takes the next argument as
 * its value; gflags forms reach the worker as written. */
static void test_worker_args_and_gflags(void **state)
{
    (void)state;
    cli_args_t a;
    char err[256];
    const cli_cmd_t *c = cli_find_command("start");
    assert_int_equal(parse("start", &a, err, sizeof(err), "-t", "5", "--worker_args",
                           "--worker_address", "127.0.0.1:1", "-etcd_address=127.0.0.1:2",
                           "-node_timeout_s", "7", "--noenable_rdma", "--enable_lru", "--v", "-1",
                           "-log_dir=/tmp/l", NULL),
                     0);
    assert_string_equal(cli_value(c, &a, "worker_address"), "127.0.0.1:1");
    assert_string_equal(cli_value(c, &a, "etcd_address"), "127.0.0.1:2");
    assert_string_equal(cli_value(c, &a, "log_dir"), "/tmp/l");
    const char *want[] = {"--worker_address", "127.0.0.1:1", "-etcd_address=127.0.0.1:2",
                          "-node_timeout_s",  "7",           "--noenable_rdma",
                          "--enable_lru",     "--v",         "-1",
                          "-log_dir=/tmp/l"};
    assert_int_equal(a.nfwd, 10);
    for (int i = 0; i < 10; i++)
        assert_string_equal(a.fwd[i], want[i]);
    assert_string_equal(cli_fwd_value(&a, "node_timeout_s"), "7");
    assert_string_equal(cli_fwd_value(&a, "etcd_address"), "127.0.0.1:2");
    assert_string_equal(cli_fwd_value(&a, "v"), "-1");
    assert_null(cli_fwd_value(&a, "health_check_path"));
    assert_null(cli_fwd_value(&a, "enable"));
}

static void test_query_route_keys(void **state)
{
    (void)state;
    cli_args_t a;
    char err[256];
    const cli_cmd_t *c = cli_find_command("query route");
    assert_int_equal(parse("query route", &a, err, sizeof(err), "--etcd_address", "127.0.0.1:2379",
                           "--keys", "k1", "k2", "k1", "--cluster_name", "x", NULL),
                     0);
    assert_int_equal(a.nmulti, 3);
    assert_string_equal(a.multi[0], "k1");
    assert_string_equal(a.multi[1], "k2");
    assert_string_equal(a.multi[2], "k1");
    assert_string_equal(cli_value(c, &a, "cluster_name"), "x");
    assert_int_equal(parse("query route", &a, err, sizeof(err), "--keys", NULL), -1);
    assert_non_null(strstr(err, "--keys needs at least one value"));
}

static void test_start_passthrough_and_local_flags(void **state)
{
    (void)state;
    cli_args_t a;
    char err[256];
    const cli_cmd_t *c = cli_find_command("start");
    assert_int_equal(parse("start", &a, err, sizeof(err), "-w", "--max_client_num", "50",
                           "--log_level=debug", "-t", "5", "--log_dir", "/tmp/x",
                           "--unix_socket_dir=/tmp/s", NULL),
                     0);
    assert_string_equal(cli_value(c, &a, "timeout"), "5");
    assert_string_equal(cli_value(c, &a, "log_dir"), "/tmp/x");
    assert_string_equal(cli_value(c, &a, "unix_socket_dir"), "/tmp/s");
    /* -t is dscli's own; the rest is forwarded as given (--log_dir too: the
     * worker writes the same log file dscli names). */
    const char *want[] = {"--max_client_num", "50",     "--log_level=debug",
                          "--log_dir",        "/tmp/x", "--unix_socket_dir=/tmp/s"};
    assert_int_equal(a.nfwd, 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(a.fwd[i], want[i]);
    assert_string_equal(cli_value(c, &a, "worker_address"), CLI_DEFAULT_WORKER_ADDRESS);
    assert_false(cli_given(c, &a, "worker_address"));
}

static void test_errors(void **state)
{
    (void)state;
    cli_args_t a;
    char err[256];
    assert_int_equal(parse("stop", &a, err, sizeof(err), "--bogus", "1", NULL), -1);
    assert_non_null(strstr(err, "unknown flag '--bogus'"));
    assert_int_equal(parse("stop", &a, err, sizeof(err), "-x", NULL), -1);
    assert_non_null(strstr(err, "unknown flag '-x'"));
    assert_int_equal(parse("stop", &a, err, sizeof(err), "--worker_address", NULL), -1);
    assert_non_null(strstr(err, "needs a value"));
    assert_int_equal(parse("status", &a, err, sizeof(err), "extra", NULL), -1);
    assert_non_null(strstr(err, "unexpected argument 'extra'"));
    assert_int_equal(parse("start", &a, err, sizeof(err), "--worker=1", NULL), -1);
    assert_non_null(strstr(err, "takes no value"));
    /* A worker flag without a value may be a boolean: the worker judges it. */
    assert_int_equal(parse("start", &a, err, sizeof(err), "--node_timeout_s", NULL), 0);
    assert_int_equal(a.nfwd, 1);
    assert_int_equal(parse("stop", &a, err, sizeof(err), "-bogus=1", NULL), -1);
    assert_non_null(strstr(err, "unknown flag '-bogus'"));
    assert_int_equal(parse("start", &a, err, sizeof(err), "--worker_address=", NULL), -1);
    assert_int_equal(parse("stop", &a, err, sizeof(err), "--worker_address", "h:1", "--help", NULL),
                     1);
    assert_true(a.help);
    assert_null(cli_find_command("restart"));
}

static void test_seconds(void **state)
{
    (void)state;
    long ms;
    char err[128];
    assert_int_equal(cli_parse_seconds("30", &ms, err, sizeof(err)), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(cli_parse_seconds("0.25", &ms, err, sizeof(err)), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(cli_parse_seconds("0", &ms, err, sizeof(err)), -1);
    assert_int_equal(cli_parse_seconds("-3", &ms, err, sizeof(err)), -1);
    assert_int_equal(cli_parse_seconds("5s", &ms, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'5s'"));
}

static void touch_exec(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "#!/bin/sh\n", 10), 10);
    close(fd);
}

static void test_find_worker(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/dscli-test-XXXXXX";
    char *root = mkdtemp(tmpl);
    assert_non_null(root);
    char cli[256], worker[256], self[512], out[512], err[512];
    snprintf(cli, sizeof(cli), "%s/cli", root);
    snprintf(worker, sizeof(worker), "%s/worker", root);
    snprintf(self, sizeof(self), "%s/dscli", cli);
    assert_int_equal(mkdir(cli, 0700), 0);
    assert_int_equal(mkdir(worker, 0700), 0);
    char *saved_path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    unsetenv("DS_WORKER_BIN");
    setenv("PATH", "/nonexistent", 1);

    /* Nothing anywhere: the error names where it looked. */
    assert_int_equal(cli_find_worker(self, out, sizeof(out), err, sizeof(err)), -1);
    assert_non_null(strstr(err, "DS_WORKER_BIN"));

    /* Build tree layout: build/src/cli/dscli, build/src/worker/datasystem_worker. */
    char w1[600];
    snprintf(w1, sizeof(w1), "%s/datasystem_worker", worker);
    touch_exec(w1);
    assert_int_equal(cli_find_worker(self, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "/cli/../worker/datasystem_worker"));

    /* Next to dscli wins over the build-tree guess. */
    char w2[600];
    snprintf(w2, sizeof(w2), "%s/datasystem_worker", cli);
    touch_exec(w2);
    assert_int_equal(cli_find_worker(self, out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, w2);

    /* The environment wins over everything, and a bad value is an error. */
    setenv("DS_WORKER_BIN", w1, 1);
    assert_int_equal(cli_find_worker(self, out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, w1);
    setenv("DS_WORKER_BIN", "/nonexistent/worker", 1);
    assert_int_equal(cli_find_worker(self, out, sizeof(out), err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/worker"));
    unsetenv("DS_WORKER_BIN");

    /* PATH is the last resort. */
    unlink(w2);
    unlink(w1);
    setenv("PATH", worker, 1);
    touch_exec(w1);
    assert_int_equal(cli_find_worker("/elsewhere/dscli", out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, w1);

    unlink(w1);
    rmdir(cli);
    rmdir(worker);
    rmdir(root);
    if (saved_path) setenv("PATH", saved_path, 1);
    free(saved_path);
}

static void test_log_tail(void **state)
{
    (void)state;
    char path[] = "/tmp/dscli-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *old = "old run line\n";
    assert_int_equal(write(fd, old, strlen(old)), (ssize_t)strlen(old));
    long from = (long)strlen(old);
    for (int i = 1; i <= 30; i++) {
        char line[32];
        int n = snprintf(line, sizeof(line), "line %d\n", i);
        assert_int_equal(write(fd, line, (size_t)n), n);
    }
    close(fd);
    char out[4096];
    cli_log_tail(path, from, 3, out, sizeof(out));
    assert_string_equal(out, "line 28\nline 29\nline 30");
    cli_log_tail(path, from, 100, out, sizeof(out));
    assert_null(strstr(out, "old run")); /* only this run's output */
    assert_true(strncmp(out, "line 1\n", 7) == 0);
    char small[16];
    cli_log_tail(path, 0, 100, small, sizeof(small));
    assert_true(strlen(small) < sizeof(small));
    cli_log_tail("/nonexistent/log", 0, 3, out, sizeof(out));
    assert_string_equal(out, "");
    unlink(path);
}

/* The TLS and cluster-secret flags are the worker's: dscli start passes them
 * on as written and reads --enable_tls as the worker does, for its own
 * health check. */
static void test_security_flags_pass_through(void **state)
{
    (void)state;
    cli_args_t a;
    char err[256];
    assert_int_equal(parse("start", &a, err, sizeof(err), "-w", "--cluster_secret_file", "/s",
                           "--enable_tls", "--tls_verify_client", "true", "--tls_ca=/ca.pem",
                           "-tls_cert", "/w.pem", "--tls_key", "/w.key", NULL),
                     0);
    const char *want[] = {
        "--cluster_secret_file", "/s",        "--enable_tls", "--tls_verify_client", "true",
        "--tls_ca=/ca.pem",      "-tls_cert", "/w.pem",       "--tls_key",           "/w.key"};
    assert_int_equal(a.nfwd, 10);
    for (int i = 0; i < 10; i++)
        assert_string_equal(a.fwd[i], want[i]);
    assert_true(cli_fwd_bool(&a, "enable_tls"));
    assert_true(cli_fwd_bool(&a, "tls_verify_client"));
    assert_false(cli_fwd_bool(&a, "enable_rdma"));
    assert_string_equal(cli_fwd_value(&a, "cluster_secret_file"), "/s");
    assert_string_equal(cli_fwd_value(&a, "tls_ca"), "/ca.pem");
    assert_string_equal(cli_fwd_value(&a, "tls_cert"), "/w.pem");

    /* The last one wins; gflags' spellings. */
    assert_int_equal(parse("start", &a, err, sizeof(err), "-w", "--enable_tls", "--noenable_tls",
                           "-tls_verify_client=YES", NULL),
                     0);
    assert_false(cli_fwd_bool(&a, "enable_tls"));
    assert_true(cli_fwd_bool(&a, "tls_verify_client"));
    assert_int_equal(parse("start", &a, err, sizeof(err), "-w", "--enable_tls=false",
                           "--tls_verify_client", "0", NULL),
                     0);
    assert_false(cli_fwd_bool(&a, "enable_tls"));
    assert_false(cli_fwd_bool(&a, "tls_verify_client"));
    /* A prefix is another flag. */
    assert_int_equal(parse("start", &a, err, sizeof(err), "-w", "--enable_tls_x", NULL), 0);
    assert_false(cli_fwd_bool(&a, "enable_tls"));

    /* stop and status take the TLS client's settings themselves. */
    const cli_cmd_t *c = cli_find_command("stop");
    assert_int_equal(parse("stop", &a, err, sizeof(err), "-w", "127.0.0.1:1", "--enable_tls",
                           "--tls_ca", "/ca.pem", "--tls_cert", "/c.pem", "--tls_key", "/c.key",
                           NULL),
                     0);
    assert_string_equal(cli_value(c, &a, "enable_tls"), "");
    assert_string_equal(cli_value(c, &a, "tls_key"), "/c.key");
    assert_int_equal(
        parse("status", &a, err, sizeof(err), "--enable_tls", "--tls_ca", "/ca.pem", NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_start_line),
        cmocka_unit_test(test_spec_stop_line),
        cmocka_unit_test(test_start_passthrough_and_local_flags),
        cmocka_unit_test(test_worker_args_and_gflags),
        cmocka_unit_test(test_query_route_keys),
        cmocka_unit_test(test_security_flags_pass_through),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_seconds),
        cmocka_unit_test(test_find_worker),
        cmocka_unit_test(test_log_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
