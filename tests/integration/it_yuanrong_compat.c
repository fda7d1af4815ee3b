/* Drop-in for Yuanrong Datasystem users: a worker started with the command
 * line of Yuanrong's KV-cache deployment guide serves clients and keeps its
 * liveness file the way Yuanrong's probe script checks it; `dscli
 * generate_config` then `dscli start -f` starts a worker that serves;
 * Yuanrong-only flags and flags nobody knows yet are accepted with one
 * warning each, and a value out of range is still an error naming the flag. Workers started through
 * dscli are stopped with `dscli stop`, and by PID if a test fails before that. */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char tmpdir[64];
static pid_t started_pid; /* a dscli-started worker not yet stopped */

/* Runs a bash script with env exported; its stdout and stderr go to out.
 * Returns the exit status. */
static int run_script(const char *env, const char *script, char *out, size_t cap)
{
    char path[128], cli[512];
    snprintf(path, sizeof(path), "%s/script.sh", tmpdir);
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    fprintf(f, "export PATH=%s:$PATH\nexport DS_UNIX_SOCKET_DIR=%s/uds\n%s\n%s\n",
            dst_build_path("src/cli", cli, sizeof(cli)), tmpdir, env, script);
    fclose(f);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "bash %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    if (p == NULL) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    fprintf(stderr, "--- %s\n%s", script, out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* dscli start prints Yuanrong's "[INFO] [  OK  ] Start worker service @ H:P
 * success, PID: N". */
static pid_t started_from(const char *out)
{
    const char *p = strstr(out, "[  OK  ] Start worker service @ ");
    p = p ? strstr(p, " success, PID: ") : NULL;
    return p ? (pid_t)atoi(p + strlen(" success, PID: ")) : 0;
}

static void set_get(const char *host, int port, const char *key)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    o.transport = DS_TRANSPORT_TCP;
    ds_client_t *c = NULL;
    assert_int_equal(ds_client_connect(&o, &c), DS_K_OK);
    const char val[] = "yuanrong-compat";
    assert_int_equal(ds_kv_set(c, key, val, sizeof(val), NULL), DS_K_OK);
    void *v = NULL;
    size_t n = 0;
    assert_int_equal(ds_kv_get(c, key, 0, &v, &n), DS_K_OK);
    assert_int_equal(n, sizeof(val));
    assert_memory_equal(v, val, n);
    ds_free(v);
    ds_client_close(c);
}

static bool file_has(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

static int count_in_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    int k = 0;
    for (const char *p = buf; (p = strstr(p, text)) != NULL; p++)
        k++;
    return k;
}

/* The worker part of run_yr.sh in Yuanrong Datasystem's
 * docs/source_zh_cn/deployment/examples/glm5-dualnode-hybrid-guide.md
 * (section "启动 Yuanrong 服务"; the same lines are in the GLM-5 KV-cache
 * guides next to it), copied as written; only the variables are ours. */
static const char yuanrong_doc_start[] = "dscli start -w \\\n"
                                         "  --worker_address ${HOST_IP}:${WORKER_PORT} \\\n"
                                         "  --etcd_address ${ETCD_IP}:${ETCD_PORT} \\\n"
                                         "  --shared_memory_size_mb ${SHM_SIZE} \\\n"
                                         "  --node_timeout_s ${NODE_TIMEOUT} \\\n"
                                         "  --node_dead_timeout_s ${NODE_DEAD_TIMEOUT} \\\n"
                                         "  --liveness_check_path ${LIVENESS_PATH}\n";

static void test_kvcache_guide_command_line(void **state)
{
    (void)state;
    dst_etcd_t etcd;
    if (dst_etcd_start(&etcd, NULL) != 0) skip();
    int port = ds__free_tcp_port(NULL);
    char env[1024], out[8192], live[128];
    snprintf(live, sizeof(live), "%s/workspace/liveness", tmpdir);
    /* The guide's values, but an arena that fits a test machine. */
    snprintf(env, sizeof(env),
             "export HOST_IP=127.0.0.1 ETCD_IP=127.0.0.1 WORKER_PORT=%d ETCD_PORT=%d "
             "SHM_SIZE=64 NODE_TIMEOUT=30 NODE_DEAD_TIMEOUT=60 LIVENESS_PATH=%s",
             port, etcd.client_port, live);
    int rc = run_script(env, yuanrong_doc_start, out, sizeof(out));
    started_pid = started_from(out);
    assert_int_equal(rc, 0);
    assert_true(started_pid > 0);

    set_get("127.0.0.1", port, "kvcache-guide-1");
    /* Registered in etcd, as a cluster member: the worker serves before its
     * member thread has registered (keys are served from the start), so
     * wait for it, as ct_etcd does (a TSan build under load took >2 s). */
    int members = 0;
    for (uint64_t until = ds__now_ms() + 15000; ds__now_ms() < until; usleep(100000))
        if ((members = dst_etcd_count(&etcd, "/datasystem/default/cluster/")) == 1) break;
    assert_int_equal(members, 1);
    /* Yuanrong's yr_liveness_check.sh: the file exists, says "liveness check
     * success", and was modified within its timeout (30 s); here it is
     * rewritten every 5 s, so its mtime moves within 7 s. */
    assert_true(file_has(live, "liveness check success"));
    struct stat st0, st1;
    assert_int_equal(stat(live, &st0), 0);
    sleep(7);
    assert_int_equal(stat(live, &st1), 0);
    assert_true(st1.st_mtim.tv_sec > st0.st_mtim.tv_sec);
    assert_true(time(NULL) - st1.st_mtim.tv_sec <= 30);

    char stop[128];
    snprintf(stop, sizeof(stop), "dscli stop --worker_address 127.0.0.1:%d", port);
    assert_int_equal(run_script("", stop, out, sizeof(out)), 0);
    started_pid = 0;
    /* A clean stop removes the liveness file: a stopped worker never looks alive. */
    assert_int_equal(access(live, F_OK), -1);
    dst_etcd_destroy(&etcd);
}

static void test_generate_config_then_start_f(void **state)
{
    (void)state;
    char out[8192], cmd[512], path[128];
    snprintf(cmd, sizeof(cmd), "dscli generate_config -o %s", tmpdir);
    assert_int_equal(run_script("", cmd, out, sizeof(out)), 0);
    snprintf(path, sizeof(path), "%s/worker_config.json", tmpdir);

    /* Yuanrong's shape: every entry {"value": ..., "description": ...}. */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 16];
    text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "shared_memory_size_mb");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "value")->valuestring, "1024");
    assert_non_null(cJSON_GetObjectItemCaseSensitive(e, "description"));
    /* Edited the way a user would: another port, a small arena. */
    int port = ds__free_tcp_port(NULL);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(root, "worker_address"), "value"),
                         addr);
    cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(e, "value"), "16");
    /* A Yuanrong-only entry, as a plain value, and a boolean. */
    cJSON_AddNumberToObject(root, "arena_per_tenant", 1);
    cJSON_AddBoolToObject(root, "enable_huge_tlb", false);
    char *s = cJSON_Print(root);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(s, f);
    fclose(f);
    free(s);
    cJSON_Delete(root);

    /* Yuanrong's three files, its probe and log paths under -d. */
    char other[160];
    snprintf(other, sizeof(other), "%s/cluster_config.json", tmpdir);
    assert_int_equal(access(other, R_OK), 0);
    snprintf(other, sizeof(other), "%s/coordinator_config.json", tmpdir);
    assert_int_equal(access(other, R_OK), 0);
    snprintf(cmd, sizeof(cmd), "dscli start -d %s/home -f %s -t 20", tmpdir, path);
    int rc = run_script("", cmd, out, sizeof(out));
    started_pid = started_from(out);
    assert_int_equal(rc, 0);
    assert_true(started_pid > 0);
    char line[128];
    snprintf(line, sizeof(line), "[INFO] [  OK  ] Start worker service @ %s success, PID: %d\n",
             addr, (int)started_pid);
    assert_non_null(strstr(out, line));
    char healthy[160], ready[160];
    snprintf(healthy, sizeof(healthy), "%s/home/datasystem/probe/healthy", tmpdir);
    snprintf(ready, sizeof(ready), "%s/home/datasystem/probe/ready", tmpdir);
    assert_true(file_has(healthy, "health check success\n"));
    assert_true(file_has(ready, "health check success\n"));
    set_get("127.0.0.1", port, "generated-config-1");
    snprintf(cmd, sizeof(cmd), "dscli status --worker_address %s", addr);
    assert_int_equal(run_script("", cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, addr));
    snprintf(cmd, sizeof(cmd),
             "grep -c 'arena_per_tenant is accepted' %s/home/datasystem/logs/worker-*-%d.log",
             tmpdir, port);
    assert_int_equal(run_script("", cmd, out, sizeof(out)), 0);
    assert_int_equal(atoi(out), 1);
    snprintf(cmd, sizeof(cmd), "dscli stop -f %s", path);
    assert_int_equal(run_script("", cmd, out, sizeof(out)), 0);
    snprintf(line, sizeof(line), "[INFO] [  OK  ] Stop worker service @ %s normally, PID: %d\n",
             addr, (int)started_pid);
    assert_non_null(strstr(out, line));
    started_pid = 0;
    /* A stopped worker never looks healthy or ready. */
    assert_int_equal(access(healthy, F_OK), -1);
    assert_int_equal(access(ready, F_OK), -1);
}

static void test_compat_flags_warn_once(void **state)
{
    (void)state;
    dst_worker_t w;
    char logdir[128], extra[512];
    snprintf(logdir, sizeof(logdir), "%s/wlogs", tmpdir);
    snprintf(extra, sizeof(extra),
             "--enable_huge_tlb true --arena_per_tenant=1 --arena_per_tenant 2 --enable_thp "
             "--ipc_through_shared_memory=false --urma_failover_success_rate_ratio 0.9 "
             "--eviction_high_watermark_ratio 0.9 "
             "--minloglevel 0 --v=1 --zmq_server_io_context 4 -ub_numa_rr=true --log_dir %s",
             logdir);
    assert_int_equal(dst_worker_start(&w, 8, extra), 0);
    ds_client_t *c = dst_connect(&w, DS_TRANSPORT_AUTO);
    assert_non_null(c);
    assert_int_equal(ds_kv_set(c, "compat-1", "x", 1, NULL), DS_K_OK);
    ds_client_close(c);
    assert_int_equal(dst_worker_stop(&w), 0);
    char log[256];
    snprintf(log, sizeof(log), "%s/worker-%s-%d.log", logdir, w.host, w.port);
    assert_int_equal(count_in_file(log, "--arena_per_tenant is accepted for compatibility with "
                                        "Yuanrong Datasystem and has no effect here"),
                     1);
    assert_int_equal(count_in_file(log, "--enable_huge_tlb is accepted"), 1);
    /* Flags nobody knows yet (a newer Yuanrong's): a warning naming each. */
    assert_int_equal(count_in_file(log, "unknown flag '--zmq_server_io_context' ignored"), 1);
    assert_int_equal(count_in_file(log, "unknown flag '--ub_numa_rr' ignored"), 1);
    assert_int_equal(count_in_file(log, "--enable_thp is accepted"), 1);
    assert_int_equal(count_in_file(log, "--urma_failover_success_rate_ratio is accepted"), 1);
    /* Implemented flags draw no warning; --v 1 turned debug lines on. */
    assert_int_equal(count_in_file(log, "--log_dir is accepted"), 0);
    assert_int_equal(count_in_file(log, "--eviction_high_watermark_ratio is accepted"), 0);
    assert_true(count_in_file(log, " DEBUG ") > 0);
}

static void test_bad_flags_are_errors(void **state)
{
    (void)state;
    char out[4096], bin[512], cmd[1024];
    dst_build_path("src/worker/datasystem_worker", bin, sizeof(bin));
    const char *cases[][2] = {
        {"--shared_memory_size_mb 0", "--shared_memory_size_mb: 0 is outside"},
        {"-minloglevel=9", "--minloglevel: 9 is outside 0..3"},
        {"--enable_huge_tlb=maybe", "--enable_huge_tlb: 'maybe' is not true or false"},
        {"--arena_per_tenant lots", "--arena_per_tenant: 'lots' is not an integer"},
        {"--minloglevel 7", "--minloglevel: 7 is outside 0..3"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "%s --worker_address 127.0.0.1:1 %s", bin, cases[i][0]);
        assert_int_equal(run_script("", cmd, out, sizeof(out)), 2);
        assert_non_null(strstr(out, cases[i][1]));
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/it-yrcompat-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

/* After each test: a worker dscli started and a failed assertion left behind. */
static int kill_started(void **state)
{
    (void)state;
    if (started_pid > 0) kill(started_pid, SIGKILL);
    started_pid = 0;
    return 0;
}

static int teardown(void **state)
{
    kill_started(state);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    if (getenv("DS_TEST_WORKER") && *getenv("DS_TEST_WORKER")) {
        printf("it_yuanrong_compat: starts its own workers; skipped with DS_TEST_WORKER\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bad_flags_are_errors, kill_started),
        cmocka_unit_test_teardown(test_compat_flags_warn_once, kill_started),
        cmocka_unit_test_teardown(test_generate_config_then_start_f, kill_started),
        cmocka_unit_test_teardown(test_kvcache_guide_command_line, kill_started),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
