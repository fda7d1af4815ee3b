/* The worker's flag parser (config/flags.h) in gflags' syntax: one or two
 * dashes, =value or a following value, bare and no-prefixed booleans;
 * unknown names kept for a warning and skipped with their value; bad values
 * of known flags refused with the flag's name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "config/flags.h"

static ds_worker_config_t cfg;
static char err[256];

#define PARSE(...)                                                                                 \
    ({                                                                                             \
        char *argv_[] = {"worker", __VA_ARGS__};                                                   \
        err[0] = '\0';                                                                             \
        ds__flags_parse(&cfg, (int)(sizeof(argv_) / sizeof(argv_[0])), argv_, err, sizeof(err));   \
    })

static void test_dash_forms(void **state)
{
    (void)state;
    assert_int_equal(PARSE("-worker_address=127.0.0.1:4000", "--max_client_num", "12",
                           "-shared_memory_size_mb", "64", "--node_timeout_s=9"),
                     0);
    assert_string_equal(cfg.worker_address, "127.0.0.1:4000");
    assert_int_equal(cfg.max_client_num, 12);
    assert_int_equal(cfg.shared_memory_size_mb, 64);
    assert_int_equal(cfg.node_timeout_s, 9);
}

static void test_booleans(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--enable_l2_cache_fallback"), 0);
    assert_true(cfg.enable_l2_cache_fallback);
    assert_int_equal(PARSE("--noenable_l2_cache_fallback"), 0);
    assert_false(cfg.enable_l2_cache_fallback);
    assert_int_equal(PARSE("-noenable_l2_cache_fallback"), 0);
    assert_false(cfg.enable_l2_cache_fallback);
    assert_int_equal(PARSE("--enable_l2_cache_fallback", "false"), 0);
    assert_false(cfg.enable_l2_cache_fallback);
    assert_int_equal(PARSE("--enable_l2_cache_fallback=true"), 0);
    assert_true(cfg.enable_l2_cache_fallback);
    /* "no" is a prefix of booleans only. */
    assert_int_equal(PARSE("--nomax_client_num"), 0);
    assert_int_equal(cfg.nunknown_given, 1);
}

static void test_unknown_flags_warn(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--some_future_flag", "7", "-another_one=x", "--bare_future",
                           "--max_client_num", "5"),
                     0);
    assert_int_equal(cfg.max_client_num, 5);
    assert_int_equal(cfg.nunknown_given, 3);
    assert_int_equal(cfg.unknown_len[0], (int)strlen("some_future_flag"));
    assert_memory_equal(cfg.unknown_given[0], "some_future_flag", cfg.unknown_len[0]);
    assert_memory_equal(cfg.unknown_given[1], "another_one", cfg.unknown_len[1]);
    assert_memory_equal(cfg.unknown_given[2], "bare_future", cfg.unknown_len[2]);
}

static void test_bad_values_refused(void **state)
{
    (void)state;
    assert_int_equal(PARSE("-max_client_num=many"), -1);
    assert_non_null(strstr(err, "max_client_num"));
    assert_int_equal(PARSE("--shared_memory_size_mb", "-5"), -1);
    assert_non_null(strstr(err, "shared_memory_size_mb"));
    assert_int_equal(PARSE("--enable_l2_cache_fallback=maybe"), -1);
    assert_non_null(strstr(err, "enable_l2_cache_fallback"));
    assert_int_equal(PARSE("stray"), -1);
    assert_non_null(strstr(err, "stray"));
    assert_int_equal(PARSE("--node_timeout_s"), -1);
    assert_non_null(strstr(err, "node_timeout_s"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dash_forms),
        cmocka_unit_test(test_booleans),
        cmocka_unit_test(test_unknown_flags_warn),
        cmocka_unit_test(test_bad_values_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
