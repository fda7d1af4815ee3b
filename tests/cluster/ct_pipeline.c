/* The connector over a cluster: the three-stage pipeline demo
 * (thinker -> talker -> code2wav through YuanrongConnector) with each stage
 * on a different worker, so every payload is written on one worker and
 * pulled by the next stage's worker. The demo verifies every payload end to
 * end and exits 0 only when all arrived intact; this test checks that and
 * its report. */
#include "cluster_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

static ct_cluster_t C;

static int setup(void **state)
{
    (void)state;
    return ct_cluster_start(&C, 3, NULL);
}

static int teardown(void **state)
{
    (void)state;
    ct_cluster_stop(&C);
    return 0;
}

static void test_stages_on_three_workers(void **state)
{
    (void)state;
    char demo[512], cmd[2048];
    dst_build_path("examples/pipeline_demo", demo, sizeof(demo));
    snprintf(cmd, sizeof(cmd),
             "DS_UNIX_SOCKET_DIR=%s %s --config %s/examples/pipeline.yaml --requests 60 "
             "--window 8 --stage_workers %s:%d,%s:%d,%s:%d 2>&1",
             C.w[0].sockdir, demo, DS_SOURCE_DIR, C.w[0].host, C.w[0].port, C.w[1].host,
             C.w[1].port, C.w[2].host, C.w[2].port);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[1024];
    bool pass = false, verified = false;
    while (fgets(line, sizeof(line), p)) {
        fputs(line, stderr);
        pass |= strncmp(line, "PASS", 4) == 0;
        verified |= strstr(line, "verified: 60/60") != NULL;
    }
    int status = pclose(p);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(verified);
    assert_true(pass);
    /* The payloads really crossed workers: each worker served remote pulls
     * (GETs from peers) or answered LOCATEs as an owner. */
    double locates = 0;
    for (int i = 0; i < 3; i++)
        locates += dst_stat(&C.w[i], "operations.locate");
    assert_true(locates > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages_on_three_workers),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
