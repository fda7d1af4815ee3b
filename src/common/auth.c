/* HMAC-SHA256 challenge-response and Ed25519 proofs (see auth.h), on
 * OpenSSL's libcrypto. */
#include "common/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
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

void ds__auth_hmac_hex(const char *secret, const void *msg, size_t len,
                       char out[DS_AUTH_HEX_LEN + 1])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, len, mac, &n);
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

int ds__auth_read_secrets(const char *path, const char *what, char out[2][256], char *err,
                          size_t err_cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_cap, "cannot read %s %s: %s", what, path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        fprintf(stderr, "warning: %s %s is readable by other users\n", what, path);
    int n = 0, rc = 0;
    char line[512];
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        size_t len = strlen(line);
        bool whole = len > 0 && line[len - 1] == '\n';
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                       line[len - 1] == '\t'))
            line[--len] = '\0';
        size_t lead = strspn(line, " \t");
        if (!whole && !feof(f)) {
            snprintf(err, err_cap, "%s %s: a line longer than 255 characters", what, path);
            rc = -1;
        } else if (len == lead) {
            continue;
        } else if (len - lead > 255) {
            snprintf(err, err_cap, "%s %s: a secret longer than 255 characters", what, path);
            rc = -1;
        } else if (n == 2) {
            snprintf(err, err_cap, "%s %s holds more than two secrets (one a line)", what, path);
            rc = -1;
        } else {
            snprintf(out[n++], 256, "%s", line + lead);
        }
    }
    fclose(f);
    if (rc == 0 && n == 0) {
        snprintf(err, err_cap, "%s %s is empty", what, path);
        rc = -1;
    }
    return rc == 0 ? n : -1;
}

struct ds_auth_key {
    EVP_PKEY *pkey;
};

ds_auth_key_t *ds__auth_key_new(char pub[DS_AUTH_PUB_HEX + 1])
{
    ds_auth_key_t *k = calloc(1, sizeof(*k));
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
    unsigned char raw[32];
    size_t rl = sizeof(raw);
    if (k == NULL || ctx == NULL || EVP_PKEY_keygen_init(ctx) != 1 ||
        EVP_PKEY_keygen(ctx, &k->pkey) != 1 ||
        EVP_PKEY_get_raw_public_key(k->pkey, raw, &rl) != 1 || rl != sizeof(raw)) {
        EVP_PKEY_CTX_free(ctx);
        ds__auth_key_free(k);
        return NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    to_hex(raw, sizeof(raw), pub);
    return k;
}

void ds__auth_key_free(ds_auth_key_t *k)
{
    if (k == NULL) return;
    EVP_PKEY_free(k->pkey);
    free(k);
}

int ds__auth_sign(ds_auth_key_t *k, const void *msg, size_t len, char sig[DS_AUTH_SIG_HEX + 1])
{
    unsigned char raw[64];
    size_t sl = sizeof(raw);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int ok = md && EVP_DigestSignInit(md, NULL, NULL, NULL, k->pkey) == 1 &&
             EVP_DigestSign(md, raw, &sl, msg, len) == 1 && sl == sizeof(raw);
    EVP_MD_CTX_free(md);
    if (!ok) return -1;
    to_hex(raw, sizeof(raw), sig);
    return 0;
}

static int from_hex(const char *in, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        for (int h = 0; h < 2; h++) {
            char ch = in[2 * i + h];
            int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
            if (d < 0) return -1;
            v = v * 16 + d;
        }
        out[i] = (unsigned char)v;
    }
    return 0;
}

bool ds__auth_sig_verify(const char *pub, const void *msg, size_t len, const char *sig,
                         size_t siglen)
{
    unsigned char rp[32], rs[64];
    if (pub == NULL || strlen(pub) != DS_AUTH_PUB_HEX || siglen != DS_AUTH_SIG_HEX ||
        from_hex(pub, sizeof(rp), rp) != 0 || from_hex(sig, sizeof(rs), rs) != 0)
        return false;
    EVP_PKEY *pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, rp, sizeof(rp));
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = pk && md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, pk) == 1 &&
              EVP_DigestVerify(md, rs, sizeof(rs), msg, len) == 1;
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(pk);
    return ok;
}
