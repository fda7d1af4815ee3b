/* Key rules, status names/messages and address parsing. */
#include "common/error.h"
#include "common/hash.h"
#include "common/keys.h"
#include "common/net.h"
#include "common/spin.h"
#include "datasystem/kv_client.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

static void test_keys(void **state)
{
    (void)state;
    char msg[256];
    const char *ok = "req-1:0_1.a!@#%^*()+=;";
    assert_int_equal(ds__key_check(ok, strlen(ok), msg, sizeof(msg)), 0);
    assert_int_equal(ds__key_check("", 0, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "empty"));
    assert_int_equal(ds__key_check("a b", 3, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "0x20 at offset 1"));
    const char bad[] = {'a', '\0', 'b'};
    assert_int_equal(ds__key_check(bad, 3, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "0x00"));
    char big[1026];
    memset(big, 'k', sizeof(big));
    assert_int_equal(ds__key_check(big, 1024, msg, sizeof(msg)), 0);
    assert_int_equal(ds__key_check(big, 1025, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "1024"));
    const char *rejects = "/ \\\"'`~$&|<>?,[]{}\n\t";
    for (const char *p = rejects; *p; p++)
        assert_int_equal(ds__key_check(p, 1, msg, sizeof(msg)), -1);
    assert_int_equal(ds_key_validate("x y", 3), DS_K_INVALID);
    assert_non_null(strstr(ds_last_error(), "0x20"));
}

static void test_status_table(void **state)
{
    (void)state;
    assert_int_equal(DS_K_OK, 0);
    assert_int_equal(DS_K_NOT_FOUND, 3);
    assert_int_equal(DS_K_OUT_OF_MEMORY, 6);
    assert_int_equal(DS_K_RPC_UNAVAILABLE, 1002);
    assert_int_equal(DS_K_OC_KEY_ALREADY_EXIST, 2004);
    assert_string_equal(ds_status_name(23), "K_CLIENT_WORKER_DISCONNECT");
    assert_string_equal(ds_status_name(12345), "K_UNKNOWN");
    assert_string_equal(ds_status_message(3), "not found");
    assert_int_equal(ds__set_error(DS_K_INVALID, "bad %s", "thing"), DS_K_INVALID);
    assert_string_equal(ds_last_error(), "bad thing");
}

static void test_hostport(void **state)
{
    (void)state;
    char host[64], err[128];
    int port = 0;
    assert_int_equal(
        ds__parse_hostport("127.0.0.2:31501", host, sizeof(host), &port, err, sizeof(err)), 0);
    assert_string_equal(host, "127.0.0.2");
    assert_int_equal(port, 31501);
    assert_int_equal(ds__parse_hostport(":5", host, sizeof(host), &port, err, sizeof(err)), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(ds__parse_hostport("h", host, sizeof(host), &port, err, sizeof(err)), -1);
    assert_int_equal(ds__parse_hostport("h:0", host, sizeof(host), &port, err, sizeof(err)), -1);
    assert_int_equal(ds__parse_hostport("h:70000", host, sizeof(host), &port, err, sizeof(err)),
                     -1);
    assert_int_equal(ds__parse_hostport("h:12x", host, sizeof(host), &port, err, sizeof(err)), -1);
    assert_true(ds__host_is_local("127.0.0.1"));
    assert_true(ds__host_is_local("127.3.4.5"));
    assert_true(ds__host_is_local("localhost"));
    assert_false(ds__host_is_local("192.0.2.1")); /* TEST-NET: never local */
    char path[300];
    assert_int_equal(ds__socket_path("/tmp/x", "127.0.0.1", 31501, path, sizeof(path)), 0);
    assert_string_equal(path, "/tmp/x/worker-127.0.0.1-31501.sock");
}

static void test_murmur3(void **state)
{
    (void)state;
    /* Reference values of MurmurHash3_x86_32. */
    assert_int_equal(ds__murmur3_32("", 0, 0), 0);
    assert_int_equal(ds__murmur3_32("", 0, 1), 0x514E28B7);
    assert_int_equal(ds__murmur3_32("hello", 5, 0), 0x248BFA47);
    assert_int_equal(ds__murmur3_32("The quick brown fox jumps over the lazy dog", 43, 0),
                     0x2E4FF723);
}

/* ds__sum4: streaming in 32-byte multiples equals one pass; every single
 * flipped bit, any length, changes it; it differs from ds__sum64. */
static uint64_t sum4_once(const void *p, size_t n)
{
    ds_sum4_t s;
    ds__sum4_init(&s);
    ds__sum4_update(&s, p, n);
    return ds__sum4_final(&s);
}

static void test_sum4(void **state)
{
    (void)state;
    static uint8_t buf[4099];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 131u + 7u);
    uint64_t whole = sum4_once(buf, sizeof(buf));
    ds_sum4_t s;
    ds__sum4_init(&s);
    ds__sum4_update(&s, buf, 64);
    ds__sum4_update(&s, buf + 64, 1024);
    ds__sum4_update(&s, buf + 1088, sizeof(buf) - 1088);
    assert_true(ds__sum4_final(&s) == whole);
    assert_true(whole != ds__sum64(DS_SUM64_SEED, buf, sizeof(buf)));
    for (size_t n = 0; n < 70; n++) /* lengths around the 32-byte block */
        assert_true(sum4_once(buf, n) != sum4_once(buf, n + 1));
    for (size_t bit = 0; bit < sizeof(buf) * 8; bit += 37) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_true(sum4_once(buf, sizeof(buf)) != whole);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

/* The adaptive polling window: grows while waits end within the limit but
 * after sleeping, stays while polling catches them, halves after a wait past
 * the limit, quarters when the CPU was wanted elsewhere, and is 0 when off. */
static void test_spin_window(void **state)
{
    (void)state;
    ds_spin_t s;
    ds__spin_init(&s, 200000);
    assert_int_equal(s.window_ns, 0);
    /* Waits of 70 us that slept: the window doubles until it covers them. */
    static const uint64_t grows[] = {8000, 16000, 32000, 64000, 128000, 128000};
    for (size_t i = 0; i < sizeof(grows) / sizeof(grows[0]); i++) {
        ds__spin_done(&s, 70000, false);
        assert_int_equal(s.window_ns, grows[i]);
    }
    ds__spin_done(&s, 30000, false); /* caught while polling: unchanged */
    assert_int_equal(s.window_ns, 128000);
    ds__spin_done(&s, 150000, false); /* never past the limit */
    assert_int_equal(s.window_ns, 200000);
    ds__spin_done(&s, 5000000, false); /* a wait past the limit: halves */
    assert_int_equal(s.window_ns, 100000);
    ds__spin_done(&s, 1000, true); /* contended: quarters */
    assert_int_equal(s.window_ns, 25000);
    int quiet = 0;
    while (s.window_ns) {
        ds__spin_done(&s, 1000000000, false);
        quiet++;
    }
    assert_true(quiet <= 5); /* a quiet thread stops polling within a few waits */
    ds__spin_init(&s, 0);    /* off: never polls */
    for (int i = 0; i < 5; i++)
        ds__spin_done(&s, 1000, false);
    assert_int_equal(s.window_ns, 0);
    ds__spin_init(&s, 5000); /* a limit below the start window */
    ds__spin_done(&s, 3000, false);
    assert_int_equal(s.window_ns, 5000);
    assert_false(ds__spin_contended(1000, 1000 + DS_SPIN_CONTENDED_NS));
    assert_true(ds__spin_contended(1000, 1001 + DS_SPIN_CONTENDED_NS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),     cmocka_unit_test(test_status_table),
        cmocka_unit_test(test_hostport), cmocka_unit_test(test_murmur3),
        cmocka_unit_test(test_sum4),     cmocka_unit_test(test_spin_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
