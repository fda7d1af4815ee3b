/* The worker's flag table (worker/ops/flags.c) on its own: defaults, both
 * spellings ("--name value", "--name=value"), bare booleans, limits at and
 * past each end, and bad values (not a number, out of range, unknown flag,
 * missing value, too long, ratios in the wrong order), each refused with a
 * message that names the flag; Yuanrong's accepted-but-ignored flags are
 * checked for their type and listed once; the configuration file written
 * from the table is JSON with every flag of ours. */
#include "config/flags.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

static ds_worker_config_t cfg;
static char err[512];

/* Parses the flags given (NULL-terminated) after a program name. */
static int parse(const char *first, ...)
{
    char *argv[64] = {"datasystem_worker"};
    int argc = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    err[0] = '\0';
    return ds__flags_parse(&cfg, argc, argv, err, sizeof(err));
}

/* The parse fails and its message holds each of the strings given. */
static void refused(int rc, const char *want1, const char *want2)
{
    assert_int_equal(rc, -1);
    if (strstr(err, want1) == NULL || (want2 && strstr(err, want2) == NULL))
        fail_msg("message '%s' should name '%s'%s%s", err, want1, want2 ? " and " : "",
                 want2 ? want2 : "");
}

static void test_defaults(void **state)
{
    (void)state;
    assert_int_equal(parse(NULL), 0);
    assert_string_equal(cfg.worker_address, "127.0.0.1:31501");
    assert_string_equal(cfg.cluster_name, "default");
    assert_string_equal(cfg.l2_cache_type, "none");
    assert_string_equal(cfg.etcd_address, "");
    assert_int_equal(cfg.shared_memory_size_mb, 1024);
    assert_int_equal(cfg.busy_poll_us, 200);
    assert_int_equal(cfg.max_client_num, 200);
    assert_false(cfg.enable_rdma);
    assert_true(cfg.eviction_high_watermark_ratio > cfg.eviction_low_watermark_ratio);
    /* The log level follows --minloglevel and --v when not given. */
    assert_string_equal(cfg.log_level, "info");
    assert_int_equal(cfg.ncompat_given, 0);
}

static void test_both_spellings_and_booleans(void **state)
{
    (void)state;
    assert_int_equal(parse("--worker_address", "127.0.0.5:4000", "--shared_memory_size_mb=64",
                           "--busy_poll_us", "0", NULL),
                     0);
    assert_string_equal(cfg.worker_address, "127.0.0.5:4000");
    assert_int_equal(cfg.shared_memory_size_mb, 64);
    assert_int_equal(cfg.busy_poll_us, 0);
    /* A bare boolean is true; one followed by true/false takes it. */
    assert_int_equal(parse("--enable_rdma", NULL), 0);
    assert_true(cfg.enable_rdma);
    assert_int_equal(parse("--enable_rdma", "false", NULL), 0);
    assert_false(cfg.enable_rdma);
    assert_int_equal(parse("--enable_rdma=yes", "--busy_poll_us", "10", NULL), 0);
    assert_true(cfg.enable_rdma);
    assert_int_equal(cfg.busy_poll_us, 10);
    /* The last of a flag given twice wins. */
    assert_int_equal(parse("--busy_poll_us", "10", "--busy_poll_us", "20", NULL), 0);
    assert_int_equal(cfg.busy_poll_us, 20);
    /* Yuanrong's name for the socket directory sets ours. */
    assert_int_equal(parse("--unix_domain_socket_dir", "/tmp/ds-flags-test", NULL), 0);
    assert_string_equal(cfg.unix_socket_dir, "/tmp/ds-flags-test");
    assert_true(ds__flags_known("busy_poll_us"));
    assert_true(ds__flags_known("unix_domain_socket_dir"));
    assert_false(ds__flags_known("no_such_flag"));
}

/* Limits are inclusive at both ends; one past either end is refused with
 * the flag, the value and the range. */
static void test_limits(void **state)
{
    (void)state;
    assert_int_equal(parse("--busy_poll_us", "1000000", NULL), 0);
    assert_int_equal(cfg.busy_poll_us, 1000000);
    refused(parse("--busy_poll_us", "1000001", NULL), "--busy_poll_us", "1000001");
    refused(parse("--busy_poll_us", "-1", NULL), "--busy_poll_us", "0..1000000");
    assert_int_equal(parse("--shared_memory_size_mb", "1", NULL), 0);
    refused(parse("--shared_memory_size_mb", "0", NULL), "--shared_memory_size_mb", "outside");
    assert_int_equal(parse("--metrics_port", "65535", NULL), 0);
    refused(parse("--metrics_port", "65536", NULL), "--metrics_port", "65536");
    assert_int_equal(parse("--minloglevel", "3", NULL), 0);
    refused(parse("--minloglevel", "4", NULL), "--minloglevel", NULL);
    /* Ratios: limits in thousandths, shown as ratios. */
    assert_int_equal(parse("--eviction_high_watermark_ratio", "1", NULL), 0);
    refused(parse("--eviction_high_watermark_ratio", "1.5", NULL),
            "--eviction_high_watermark_ratio", "1.5");
}

static void test_bad_values_name_the_flag(void **state)
{
    (void)state;
    refused(parse("--busy_poll_us", "fast", NULL), "--busy_poll_us", "'fast' is not an integer");
    refused(parse("--busy_poll_us", "12abc", NULL), "--busy_poll_us", "12abc");
    refused(parse("--busy_poll_us", "", NULL), "--busy_poll_us", NULL);
    refused(parse("--shared_memory_size_mb", "99999999999999999999", NULL),
            "--shared_memory_size_mb", NULL);
    refused(parse("--eviction_low_watermark_ratio", "half", NULL), "--eviction_low_watermark_ratio",
            "'half' is not a number");
    refused(parse("--enable_rdma=maybe", NULL), "--enable_rdma", "'maybe' is not true or false");
    refused(parse("--busy_poll_us", NULL), "--busy_poll_us", "needs a value");
    /* An unknown name is no refusal (a newer Yuanrong's config file must
     * start the worker): it is kept for the start-up warning, its value
     * skipped. */
    assert_int_equal(parse("--no_such_flag", "1", "--busy_poll_us", "7", NULL), 0);
    assert_int_equal(cfg.nunknown_given, 1);
    assert_int_equal(cfg.busy_poll_us, 7);
    assert_int_equal(parse("--no_such_flag=1", NULL), 0);
    assert_int_equal(cfg.nunknown_given, 1);
    refused(parse("busy_poll_us", "1", NULL), "busy_poll_us", "unexpected argument");
    /* A string longer than its field is refused, not cut. */
    char big[2048];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    refused(parse("--cluster_name", big, NULL), "--cluster_name", "longer than");
    /* Flags that must agree: the message names both. */
    refused(parse("--eviction_high_watermark_ratio", "0.5", "--eviction_low_watermark_ratio", "0.6",
                  NULL),
            "--eviction_high_watermark_ratio", "--eviction_low_watermark_ratio");
    refused(
        parse("--spill_high_watermark_ratio", "0.2", "--spill_low_watermark_ratio", "0.2", NULL),
        "--spill_high_watermark_ratio", "--spill_low_watermark_ratio");
}

/* Yuanrong's flags without an effect here: accepted when their value has
 * the right type, listed once each in the order first given. */
static void test_compat_flags(void **state)
{
    (void)state;
    assert_int_equal(parse("--etcd_username", "u", "--coordinator_address", "127.0.0.1:1",
                           "--etcd_username", "v", NULL),
                     0);
    assert_int_equal(cfg.ncompat_given, 2);
    assert_string_equal(cfg.compat_given[0], "etcd_username");
    assert_string_equal(cfg.compat_given[1], "coordinator_address");
    assert_true(ds__flags_known("etcd_username"));
}

/* --v raises the level to debug at --minloglevel 0; --log_level wins. */
static void test_log_level(void **state)
{
    (void)state;
    assert_int_equal(parse("--v", "1", NULL), 0);
    assert_string_equal(cfg.log_level, "debug");
    assert_int_equal(parse("--minloglevel", "1", NULL), 0);
    assert_string_equal(cfg.log_level, "warn");
    assert_int_equal(parse("--minloglevel", "2", "--log_level", "debug", NULL), 0);
    assert_string_equal(cfg.log_level, "debug");
}

/* The configuration file: JSON, each of our flags with its default. */
static void test_write_config(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(ds__flags_write_config(f, NULL), 0);
    fclose(f);
    cJSON *root = cJSON_Parse(buf);
    assert_non_null(root);
    cJSON *bp = cJSON_GetObjectItemCaseSensitive(root, "busy_poll_us");
    assert_non_null(bp);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(bp, "value")->valuestring, "200");
    assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(bp, "description")));
    assert_non_null(cJSON_GetObjectItemCaseSensitive(root, "worker_address"));
    /* Neither ignored flags nor aliases are written. */
    assert_null(cJSON_GetObjectItemCaseSensitive(root, "etcd_username"));
    assert_null(cJSON_GetObjectItemCaseSensitive(root, "unix_domain_socket_dir"));
    cJSON_Delete(root);
    free(buf);
}

/* gflags' syntax beyond --name value: one dash, no-prefixed booleans, and
 * unknown names (with or without a value) kept for the start-up warning. */
static void test_gflags_syntax(void **state)
{
    (void)state;
    assert_int_equal(parse("-worker_address=127.0.0.1:4000", "-shared_memory_size_mb", "64", NULL),
                     0);
    assert_string_equal(cfg.worker_address, "127.0.0.1:4000");
    assert_int_equal(cfg.shared_memory_size_mb, 64);
    assert_int_equal(parse("--enable_rdma", "--noenable_rdma", NULL), 0);
    assert_false(cfg.enable_rdma);
    assert_int_equal(parse("-noenable_rdma", NULL), 0);
    assert_false(cfg.enable_rdma);
    /* "no" is a prefix of booleans only. */
    assert_int_equal(parse("--nomax_client_num", NULL), 0);
    assert_int_equal(cfg.nunknown_given, 1);
    assert_int_equal(parse("--some_future_flag", "7", "-another_one=x", "--bare_future",
                           "--max_client_num", "5", NULL),
                     0);
    assert_int_equal(cfg.max_client_num, 5);
    assert_int_equal(cfg.nunknown_given, 3);
    assert_memory_equal(cfg.unknown_given[0], "some_future_flag", cfg.unknown_len[0]);
    assert_memory_equal(cfg.unknown_given[1], "another_one", cfg.unknown_len[1]);
    assert_memory_equal(cfg.unknown_given[2], "bare_future", cfg.unknown_len[2]);
    refused(parse("-max_client_num=many", NULL), "max_client_num", "many");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),     cmocka_unit_test(test_both_spellings_and_booleans),
        cmocka_unit_test(test_limits),       cmocka_unit_test(test_bad_values_name_the_flag),
        cmocka_unit_test(test_compat_flags), cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_write_config), cmocka_unit_test(test_gflags_syntax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
