/* HMAC-SHA256 challenge-response (see auth.h), on OpenSSL's libcrypto. */
#include "common/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void to_hex(const unsigned char *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[2 * n] = '\0';
}

int ds__auth_challenge(char out[DS_AUTH_HEX_LEN + 1])
{
    unsigned char nonce[DS_AUTH_HEX_LEN / 2];
    if (RAND_bytes(nonce, sizeof(nonce)) != 1) return -1;
    to_hex(nonce, sizeof(nonce), out);
    return 0;
}

void ds__auth_prove(const char *secret, const char *challenge, char out[DS_AUTH_HEX_LEN + 1])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)challenge,
         strlen(challenge), mac, &len);
    to_hex(mac, 32, out);
}

bool ds__auth_verify(const char *secret, const char *challenge, const char *proof, size_t len)
{
    char want[DS_AUTH_HEX_LEN + 1];
    ds__auth_prove(secret, challenge, want);
    return len == DS_AUTH_HEX_LEN && CRYPTO_memcmp(want, proof, DS_AUTH_HEX_LEN) == 0;
}

bool ds__auth_equal(const void *a, const void *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}

int ds__auth_read_secret(const char *path, char *out, size_t cap, char *err, size_t err_cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_cap, "cannot read auth token file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        fprintf(stderr, "warning: auth token file %s is readable by other users\n", path);
    if (fgets(out, (int)cap, f) == NULL) out[0] = '\0';
    fclose(f);
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
        out[--n] = '\0';
    if (n == 0) {
        snprintf(err, err_cap, "auth token file %s is empty", path);
        return -1;
    }
    return 0;
}
