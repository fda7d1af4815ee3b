/* Discovery: a client given only host:port finds the worker's Unix socket
 * from HELLO over TCP, wherever --unix_socket_dir put it, and uses shared
 * memory when the process there is the same worker; it stays on TCP when the
 * socket cannot be reached or another worker answers there. dscli status and
 * stop reach such a worker by its address, with --auth_token_file when it has
 * a secret. The harness starts every worker with a private (non-default)
 * socket directory, and these clients are not told about it. */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define BIG (64u << 20)

static ds_client_t *connect_by_address(const dst_worker_t *w, ds_transport_t t, const char *tok)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = w->host;
    o.port = w->port;
    o.transport = t;
    o.token = tok;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK)
        fprintf(stderr, "connect %s:%d: %s\n", w->host, w->port, ds_last_error());
    return c;
}

/* Connects like connect_by_address, with the client's log (stderr) in log. */
static ds_client_t *connect_logged(const dst_worker_t *w, ds_transport_t t, char *log, size_t cap)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/dst-disc-log-%d", (int)getpid());
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    dup2(fileno(f), 2);
    ds_client_t *c = connect_by_address(w, t, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(log, 1, cap - 1, f);
    log[n] = '\0';
    fclose(f);
    unlink(path);
    fprintf(stderr, "client log: %s", log);
    return c;
}

static void sock_of(const dst_worker_t *w, char *out, size_t cap)
{
    assert_int_equal(ds__socket_path(w->sockdir, w->host, w->port, out, cap), 0);
}

/* Sets a 64 MiB value and reads it back as a buffer; true when that buffer
 * pinned the value in the worker's arena (zero copy: local clients only). */
static bool big_roundtrip(ds_client_t *c, const dst_worker_t *w, const char *key)
{
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_create(c, key, BIG, NULL, &b), DS_K_OK);
    dst_fill(ds_buffer_mutable_data(b), BIG, 7);
    assert_int_equal(ds_kv_publish(c, b), DS_K_OK);
    ds_buffer_release(b);
    const char *keys[1] = {key};
    ds_buffer_t *out[1] = {NULL};
    assert_int_equal(ds_kv_get_buffers(c, 1, keys, 0, out), DS_K_OK);
    assert_int_equal(ds_buffer_size(out[0]), BIG);
    assert_true(dst_check(ds_buffer_data(out[0]), BIG, 7));
    bool pinned = dst_stat(w, "objects.pinned") >= 1;
    ds_buffer_release(out[0]);
    ds_status_t dst[1];
    assert_int_equal(ds_kv_del(c, 1, keys, dst), DS_K_OK);
    return pinned;
}

static void test_discovers_socket_in_other_dir(void **state)
{
    (void)state;
    dst_worker_t w;
    assert_int_equal(dst_worker_start(&w, 256, NULL), 0);
    ds_client_t *c = connect_by_address(&w, DS_TRANSPORT_AUTO, NULL);
    assert_non_null(c);
    assert_true(ds_client_is_local(c));
    assert_true(big_roundtrip(c, &w, "disc.big"));
    ds_client_close(c);
    /* LOCAL finds it the same way; TCP stays TCP. */
    c = connect_by_address(&w, DS_TRANSPORT_LOCAL, NULL);
    assert_non_null(c);
    assert_true(ds_client_is_local(c));
    ds_client_close(c);
    c = connect_by_address(&w, DS_TRANSPORT_TCP, NULL);
    assert_non_null(c);
    assert_false(ds_client_is_local(c));
    ds_client_close(c);
    dst_worker_stop(&w);
}

static void test_unreachable_socket_falls_back(void **state)
{
    (void)state;
    dst_worker_t w;
    assert_int_equal(dst_worker_start(&w, 256, NULL), 0);
    char sock[300], moved[320];
    sock_of(&w, sock, sizeof(sock));
    snprintf(moved, sizeof(moved), "%s.moved", sock);
    assert_int_equal(rename(sock, moved), 0);
    char log[4096];
    ds_client_t *c = connect_logged(&w, DS_TRANSPORT_AUTO, log, sizeof(log));
    assert_non_null(c);
    assert_false(ds_client_is_local(c));
    /* It says it chose TCP, and why: the socket the worker named. */
    assert_non_null(strstr(log, "using TCP"));
    assert_non_null(strstr(log, sock));
    assert_false(big_roundtrip(c, &w, "fallback.big"));
    ds_client_close(c);
    c = connect_by_address(&w, DS_TRANSPORT_LOCAL, NULL);
    assert_null(c);
    assert_non_null(strstr(ds_last_error(), sock));
    assert_int_equal(rename(moved, sock), 0);
    dst_worker_stop(&w);
}

/* Another worker's socket planted at the path the first one names: its
 * worker_id differs, so the client keeps TCP to the worker it asked for. */
static void test_other_worker_at_the_path(void **state)
{
    (void)state;
    dst_worker_t a, b;
    assert_int_equal(dst_worker_start(&a, 64, NULL), 0);
    assert_int_equal(dst_worker_start(&b, 64, NULL), 0);
    char sa[300], sb[300], saved[320];
    sock_of(&a, sa, sizeof(sa));
    sock_of(&b, sb, sizeof(sb));
    snprintf(saved, sizeof(saved), "%s.saved", sa);
    assert_int_equal(rename(sa, saved), 0);
    assert_int_equal(rename(sb, sa), 0);
    char log[4096];
    ds_client_t *c = connect_logged(&a, DS_TRANSPORT_AUTO, log, sizeof(log));
    assert_non_null(c);
    assert_false(ds_client_is_local(c));
    assert_non_null(strstr(log, "using TCP"));
    assert_non_null(strstr(log, "another worker"));
    assert_int_equal(ds_kv_set(c, "only.a", "x", 1, NULL), DS_K_OK);
    ds_client_close(c);
    /* The value went to a (over TCP), not to b. */
    c = connect_by_address(&b, DS_TRANSPORT_TCP, NULL);
    assert_non_null(c);
    const char *k[1] = {"only.a"};
    bool ex[1] = {true};
    assert_int_equal(ds_kv_exist(c, 1, k, ex), DS_K_OK);
    assert_false(ex[0]);
    ds_client_close(c);
    assert_int_equal(rename(sa, sb), 0);
    assert_int_equal(rename(saved, sa), 0);
    dst_worker_stop(&b);
    dst_worker_stop(&a);
}

/* Runs dscli with args; its exit status, stdout+stderr in out. */
static int dscli(char *out, size_t cap, const char *fmt, ...)
{
    char bin[512], args[1024], cmd[1700];
    dst_build_path("src/cli/dscli", bin, sizeof(bin));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "env -u DS_UNIX_SOCKET_DIR %s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    fprintf(stderr, "$ dscli %s\n%s", args, out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool exits_within(pid_t pid, int ms)
{
    uint64_t end = ds__now_ms() + (uint64_t)ms;
    while (ds__now_ms() < end) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return true;
        usleep(10000);
    }
    return false;
}

static void dscli_case(const char *extra, const char *tokflag)
{
    dst_worker_t w;
    assert_int_equal(dst_worker_start(&w, 32, extra), 0);
    char out[16384];
    assert_int_equal(
        dscli(out, sizeof(out), "status --worker_address %s:%d %s", w.host, w.port, tokflag), 0);
    assert_non_null(strstr(out, "\"dscli_transport\""));
    assert_non_null(strstr(out, "\"used\":\t\"unix\""));
    assert_int_equal(
        dscli(out, sizeof(out), "stop --worker_address %s:%d %s -t 10", w.host, w.port, tokflag),
        0);
    assert_true(exits_within(w.pid, 5000));
    w.pid = 0;
}

static void test_dscli_other_socket_dir(void **state)
{
    (void)state;
    dscli_case(NULL, "");
}

static void test_dscli_with_token(void **state)
{
    (void)state;
    char path[64], extra[128];
    snprintf(path, sizeof(path), "/tmp/dst-disc-tok-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "disco secret\n");
    fclose(f);
    chmod(path, 0600);
    setenv("DS_TEST_TOKEN", "disco secret", 1); /* the harness's readiness probe */
    snprintf(extra, sizeof(extra), "--auth_token_file %s", path);
    char flag[128];
    snprintf(flag, sizeof(flag), "--auth_token_file %s", path);
    dscli_case(extra, flag);
    unsetenv("DS_TEST_TOKEN");
    unlink(path);
}

int main(void)
{
    unsetenv("DS_UNIX_SOCKET_DIR");
    if (getenv("DS_TEST_WORKER")) {
        fprintf(stderr, "it_discovery starts its own workers: skipped with DS_TEST_WORKER\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovers_socket_in_other_dir),
        cmocka_unit_test(test_unreachable_socket_falls_back),
        cmocka_unit_test(test_other_worker_at_the_path),
        cmocka_unit_test(test_dscli_other_socket_dir),
        cmocka_unit_test(test_dscli_with_token),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
