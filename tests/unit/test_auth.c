/* common/auth.c: secret files of one or two secrets (the cluster secret's
 * rotation), the HMAC helper, and Ed25519 member keys (sign and verify). */
#include "common/auth.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char path[64];

static int read_text(const char *text, char out[2][256], char *err, size_t cap)
{
    snprintf(path, sizeof(path), "/tmp/test_auth.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    int n = ds__auth_read_secrets(path, "cluster secret file", out, err, cap);
    unlink(path);
    return n;
}

static void test_secret_files(void **state)
{
    (void)state;
    char s[2][256], err[512];
    assert_int_equal(read_text("one\n", s, err, sizeof(err)), 1);
    assert_string_equal(s[0], "one");
    assert_int_equal(read_text("  new secret \r\n\n\told\n", s, err, sizeof(err)), 2);
    assert_string_equal(s[0], "new secret");
    assert_string_equal(s[1], "old");
    assert_int_equal(read_text("no newline", s, err, sizeof(err)), 1);
    assert_string_equal(s[0], "no newline");

    assert_int_equal(read_text("", s, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is empty"));
    assert_int_equal(read_text("\n  \n", s, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is empty"));
    assert_int_equal(read_text("a\nb\nc\n", s, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "more than two secrets"));
    char big[400];
    memset(big, 'x', 300);
    big[300] = '\0';
    assert_int_equal(read_text(big, s, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "longer than 255"));
    assert_int_equal(
        ds__auth_read_secrets("/nonexistent/secret", "cluster secret file", s, err, sizeof(err)),
        -1);
    assert_non_null(strstr(err, "cannot read cluster secret file /nonexistent/secret"));
}

static void test_hmac_matches_prove(void **state)
{
    (void)state;
    char a[DS_AUTH_HEX_LEN + 1], b[DS_AUTH_HEX_LEN + 1];
    ds__auth_prove("k", "challenge", a);
    ds__auth_hmac_hex("k", "challenge", 9, b);
    assert_string_equal(a, b);
    ds__auth_hmac_hex("k2", "challenge", 9, b);
    assert_string_not_equal(a, b);
}

static void test_member_keys(void **state)
{
    (void)state;
    char pub[DS_AUTH_PUB_HEX + 1], pub2[DS_AUTH_PUB_HEX + 1], sig[DS_AUTH_SIG_HEX + 1];
    ds_auth_key_t *k = ds__auth_key_new(pub);
    ds_auth_key_t *k2 = ds__auth_key_new(pub2);
    assert_non_null(k);
    assert_non_null(k2);
    assert_int_equal(strlen(pub), DS_AUTH_PUB_HEX);
    assert_string_not_equal(pub, pub2);
    const char *msg = "ds-peer-auth-v1\nacceptor\na\nb\nn1\nn2";
    assert_int_equal(ds__auth_sign(k, msg, strlen(msg), sig), 0);
    assert_int_equal(strlen(sig), DS_AUTH_SIG_HEX);
    assert_true(ds__auth_sig_verify(pub, msg, strlen(msg), sig, strlen(sig)));
    /* Another message, another key, a changed signature, bad hex: no. */
    assert_false(ds__auth_sig_verify(pub, msg, strlen(msg) - 1, sig, strlen(sig)));
    assert_false(ds__auth_sig_verify(pub2, msg, strlen(msg), sig, strlen(sig)));
    sig[5] = sig[5] == '0' ? '1' : '0';
    assert_false(ds__auth_sig_verify(pub, msg, strlen(msg), sig, strlen(sig)));
    sig[5] = 'Z';
    assert_false(ds__auth_sig_verify(pub, msg, strlen(msg), sig, strlen(sig)));
    assert_false(ds__auth_sig_verify(pub, msg, strlen(msg), sig, 10));
    assert_false(ds__auth_sig_verify(NULL, msg, strlen(msg), sig, strlen(sig)));
    assert_false(ds__auth_sig_verify("abcd", msg, strlen(msg), sig, strlen(sig)));
    ds__auth_key_free(k);
    ds__auth_key_free(k2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_files),
        cmocka_unit_test(test_hmac_matches_prove),
        cmocka_unit_test(test_member_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
