/* The cluster across network namespaces: each worker in its own namespace
 * (h1, h2, h3) joined by veth pairs to a "hub" namespace that holds a bridge
 * and etcd, addresses 198.18.0.0/24 existing only inside these namespaces.
 * The clients run inside the namespaces too (ct_node via `ip netns exec`):
 * a value set on h1 is read on h2 (TCP and local clients, checksummed), a
 * consumer waiting on h3 is woken by a publish on h1, and a wait for a key
 * that never comes times out promptly, and `dscli stop` of h1's worker moves
 * its objects to h2 and h3 before it exits. The workers keep two copies of
 * each write (--replica_num 2): keys set through h3 all read back on h2 after
 * h3's worker is killed (last, once h1 has left). Namespace names carry this process's
 * pid and are deleted at the end, on failure and on SIGTERM/SIGINT too;
 * leftovers of earlier runs that died are swept first. Skipped, with a
 * message, when the kernel refuses namespaces (not root, EPERM). */
#include "cluster_util.h"
#include "netns_util.h"

#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
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

static ct_netns_t N;
static dst_etcd_t E;
static dst_worker_t W[3];
static char node_bin[512];

static int setup(void **state)
{
    (void)state;
    dst_build_path("tests/cluster/ct_node", node_bin, sizeof(node_bin));
    if (ct_netns_setup(&N, 3, &E) != 0) return -1;
    if (N.unavailable[0]) return 0; /* every test skips */
    char flags[512];
    snprintf(flags, sizeof(flags),
             "--etcd_address %s --cluster_name ns%d --node_timeout_s %d --heartbeat_interval_ms %d "
             "--replica_num 2",
             E.address, (int)getpid(), CT_NODE_TIMEOUT_S, CT_HEARTBEAT_MS);
    return ct_netns_start_workers(&N, W, 3, flags);
}

static int teardown(void **state)
{
    (void)state;
    ct_netns_teardown(&N, &E, W, 3);
    return 0;
}

#define SKIP_IF_UNAVAILABLE() CT_NETNS_SKIP_IF_UNAVAILABLE(&N)

/* Starts `ip netns exec NS ct_node ARGS...` for node i; its stdout goes to
 * *out_fd (may be NULL: inherited). */
static pid_t node_start(int i, int *out_fd, const char *fmt, ...)
{
    char args[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    char *argv[32] = {"/usr/sbin/ip", "netns", "exec", N.hosts[i], node_bin};
    int argc = 5;
    for (char *tok = strtok(args, " "); tok && argc < 31; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    int p[2] = {-1, -1};
    if (out_fd && pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (out_fd) {
            dup2(p[1], 1);
            close(p[0]);
            close(p[1]);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    if (out_fd) {
        close(p[1]);
        *out_fd = p[0];
    }
    return pid;
}

/* Waits for a ct_node (at most timeout_ms, then kills it); its exit status
 * (-1 on a kill) and its output in out. */
static int node_wait(pid_t pid, int fd, char *out, size_t cap, int timeout_ms)
{
    int status = -1;
    uint64_t until = ds__now_ms() + (uint64_t)timeout_ms;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (ds__now_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            status = -1;
            break;
        }
        usleep(10000);
    }
    if (out) {
        ssize_t n = fd >= 0 ? read(fd, out, cap - 1) : -1;
        out[n > 0 ? n : 0] = '\0';
    }
    if (fd >= 0) close(fd);
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int node_run(int i, char *out, size_t cap, const char *fmt, ...)
{
    char args[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    int fd = -1;
    pid_t pid = node_start(i, &fd, "%s", args);
    if (pid < 0) return -1;
    char buf[256];
    int rc = node_wait(pid, fd, out ? out : buf, out ? cap : sizeof(buf), 20000);
    return rc;
}

static void test_members_seen_inside_namespaces(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    for (int i = 0; i < 3; i++)
        assert_int_equal(node_run(i, NULL, 0, "%s:%d members 3 15000", N.ip[i], W[i].port), 0);
}

static void test_set_on_h1_get_on_h2(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    static const size_t sizes[] = {100, 70000, 6u << 20};
    for (int s = 0; s < 3; s++) {
        char key[32], out[256];
        snprintf(key, sizeof(key), "ns-%d", s);
        assert_int_equal(node_run(0, NULL, 0, "-t %s -d %s %s:%d set %s %zu %d",
                                  s % 2 ? "tcp" : "local", W[0].sockdir, N.ip[0], W[0].port, key,
                                  sizes[s], 300 + s),
                         0);
        for (int t = 0; t < 2; t++) {
            assert_int_equal(node_run(1, out, sizeof(out), "-t %s -d %s %s:%d get %s %zu %d 0",
                                      t ? "tcp" : "local", W[1].sockdir, N.ip[1], W[1].port, key,
                                      sizes[s], 300 + s),
                             0);
            assert_non_null(strstr(out, "ok"));
        }
        assert_int_equal(node_run(2, out, sizeof(out), "%s:%d get %s %zu %d 0", N.ip[2], W[2].port,
                                  key, sizes[s], 300 + s),
                         0);
    }
}

static void test_consumer_on_h3_woken_by_h1(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    for (int t = 0; t < 2; t++) {
        char key[32], out[256];
        snprintf(key, sizeof(key), "ns-wait-%d", t);
        int fd = -1;
        pid_t consumer = node_start(2, &fd, "-t %s -d %s %s:%d get %s 4096 77 10000",
                                    t ? "tcp" : "local", W[2].sockdir, N.ip[2], W[2].port, key);
        assert_true(consumer > 0);
        usleep(600000); /* the consumer process starts and waits */
        uint64_t t0 = ds__now_ms();
        assert_int_equal(node_run(0, NULL, 0, "%s:%d set %s 4096 77", N.ip[0], W[0].port, key), 0);
        int rc = node_wait(consumer, fd, out, sizeof(out), 15000);
        if (rc != 0) fprintf(stderr, "  consumer on h3: exit %d: %s\n", rc, out);
        assert_int_equal(rc, 0);
        uint64_t woke = ds__now_ms() - t0;
        unsigned long long waited = 0;
        assert_int_equal(sscanf(out, "ok %llu", &waited), 1);
        fprintf(stderr,
                "  consumer on h3 waited %llu ms; woken %llu ms after the set on h1 began\n",
                waited, (unsigned long long)woke);
        /* Woken by the publish, long before its 10 s timeout. */
        assert_true(waited >= 300 && waited < 5000);
        assert_true(woke < 3000);
    }
}

static void test_wait_times_out_promptly(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    char out[256];
    assert_int_equal(
        node_run(1, out, sizeof(out), "%s:%d get ns-never 10 1 500", N.ip[1], W[1].port), 3);
    unsigned long long ms = 0;
    assert_int_equal(sscanf(out, "missing %llu", &ms), 1);
    fprintf(stderr, "  a 500 ms wait on h2 for a missing key returned after %llu ms\n", ms);
    assert_true(ms >= 490 && ms < 500 + 5000);
}

/* A planned exit across namespaces: keys set through all three hosts,
 * `dscli stop` of h1's worker run inside h1, then every key reads back
 * byte-exact through h2 and h3 (its objects moved to them first). */
static void test_planned_exit_in_namespaces(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    enum { NK = 12 };
    char out[2048];
    for (int k = 0; k < NK; k++)
        assert_int_equal(node_run(k % 3, NULL, 0, "%s:%d set ns-exit-%d %zu %d", N.ip[k % 3],
                                  W[k % 3].port, k, ((size_t)1024 << (k % 12)), 700 + k),
                         0);
    char dscli[512], cmd[1400];
    dst_build_path("src/cli/dscli", dscli, sizeof(dscli));
    snprintf(cmd, sizeof(cmd),
             "/usr/sbin/ip netns exec %s env -u DS_UNIX_SOCKET_DIR %s stop -w %s:%d "
             "--unix_socket_dir %s -t 60 2>&1",
             N.hosts[0], dscli, N.ip[0], W[0].port, W[0].sockdir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    fprintf(stderr, "$ dscli stop (in %s)\n%s", N.hosts[0], out);
    if (strstr(out, "; 0 not moved") == NULL) {
        snprintf(cmd, sizeof(cmd), "grep -i 'cluster' %s | tail -n 30 >&2", W[0].logpath);
        if (system(cmd) != 0) fprintf(stderr, "(no log at %s)\n", W[0].logpath);
    }
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_non_null(strstr(out, "; 0 not moved"));
    dst_worker_stop(&W[0]); /* reaps it */
    for (int h = 1; h < 3; h++)
        assert_int_equal(node_run(h, NULL, 0, "%s:%d members 2 15000", N.ip[h], W[h].port), 0);
    for (int h = 1; h < 3; h++)
        for (int k = 0; k < NK; k++) {
            int rc = node_run(h, out, sizeof(out), "%s:%d get ns-exit-%d %zu %d 0", N.ip[h],
                              W[h].port, k, ((size_t)1024 << (k % 12)), 700 + k);
            if (rc != 0) fprintf(stderr, "get ns-exit-%d through h%d: %s\n", k, h + 1, out);
            assert_int_equal(rc, 0);
            assert_non_null(strstr(out, "ok"));
        }
}

static void test_replicas_survive_kill(void **state)
{
    (void)state;
    SKIP_IF_UNAVAILABLE();
    enum { NK = 24 };
    char out[256];
    for (int i = 0; i < NK; i++) {
        size_t size = (size_t)1024 << (i % 12); /* 1 KiB .. 2 MiB */
        assert_int_equal(node_run(2, NULL, 0, "-t tcp %s:%d set nsr-%d %zu %d", N.ip[2], W[2].port,
                                  i, size, 700 + i),
                         0);
    }
    dst_worker_kill(&W[2]);
    /* h1 left in the planned-exit test before: h2 is the only survivor */
    assert_int_equal(node_run(1, NULL, 0, "%s:%d members 1 15000", N.ip[1], W[1].port), 0);
    int lost = 0;
    for (int i = 0; i < NK; i++) {
        size_t size = (size_t)1024 << (i % 12);
        /* A waiting get: the new owners learn the holders' copies within
         * moments of the ring change. */
        lost += node_run(1, out, sizeof(out), "-t tcp %s:%d get nsr-%d %zu %d 3000", N.ip[1],
                         W[1].port, i, size, 700 + i) != 0;
    }
    fprintf(stderr, "  h3 killed with --replica_num 2: %d of %d keys set through it lost\n", lost,
            NK);
    assert_int_equal(lost, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_seen_inside_namespaces),
        cmocka_unit_test(test_set_on_h1_get_on_h2),
        cmocka_unit_test(test_consumer_on_h3_woken_by_h1),
        cmocka_unit_test(test_wait_times_out_promptly),
        cmocka_unit_test(test_planned_exit_in_namespaces),
        cmocka_unit_test(test_replicas_survive_kill),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
