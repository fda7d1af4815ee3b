/* Shared-secret authentication for TCP clients and peer workers: an
 * HMAC-SHA256 challenge-response, so the secret never crosses the wire.
 *
 * A TCP connection to a worker that has a secret starts unauthenticated. Its
 * HELLO without a proof is answered K_NOT_AUTHORIZED carrying a fresh random
 * challenge (64 hex digits); the client answers with a second HELLO whose
 * token is hex(HMAC-SHA256(secret, challenge)). Any other request before that
 * gets K_NOT_AUTHORIZED and the connection is closed. The Unix socket is
 * trusted through its 0700 directory.
 *
 * Peers prove more (PEER_AUTH, worker/cluster/peer_auth.h) with the helpers
 * below: HMAC over a cluster secret read from a file of one or two secrets,
 * or Ed25519 signatures by member keys published in etcd. */
#ifndef DS_COMMON_AUTH_H
#define DS_COMMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define DS_AUTH_HEX_LEN 64

/* A fresh random challenge, NUL-terminated. 0, or -1 if no randomness. */
int ds__auth_challenge(char out[DS_AUTH_HEX_LEN + 1]);
/* The proof for a challenge, NUL-terminated. */
void ds__auth_prove(const char *secret, const char *challenge, char out[DS_AUTH_HEX_LEN + 1]);
/* Constant-time check of a proof of length len. */
bool ds__auth_verify(const char *secret, const char *challenge, const char *proof, size_t len);
/* Constant-time comparison of two byte strings of length len. */
bool ds__auth_equal(const void *a, const void *b, size_t len);
/* Reads a secret file (first line, whitespace trimmed). 0, or -1 with a message. */
int ds__auth_read_secret(const char *path, char *out, size_t cap, char *err, size_t err_cap);
/* Reads a file of one or two secrets, one a line (whitespace trimmed, blank
 * lines skipped): the first is the one this side proves with, both are
 * accepted (a rotation). what names the file in messages. Returns how many
 * (1 or 2), or -1 with a message (unreadable, empty, a third secret, a line
 * longer than cap - 1). */
int ds__auth_read_secrets(const char *path, const char *what, char out[2][256], char *err,
                          size_t err_cap);
/* hex(HMAC-SHA256(secret, msg)), NUL-terminated. */
void ds__auth_hmac_hex(const char *secret, const void *msg, size_t len,
                       char out[DS_AUTH_HEX_LEN + 1]);

/* Ed25519 keys for proofs whose verifier knows only a public key. */
#define DS_AUTH_PUB_HEX 64  /* a public key: 32 bytes */
#define DS_AUTH_SIG_HEX 128 /* a signature: 64 bytes */
typedef struct ds_auth_key ds_auth_key_t;
/* A fresh key pair; its public half as hex in pub. NULL when libcrypto fails. */
ds_auth_key_t *ds__auth_key_new(char pub[DS_AUTH_PUB_HEX + 1]);
void ds__auth_key_free(ds_auth_key_t *k);
/* The hex signature of msg. 0, or -1. Thread-safe. */
int ds__auth_sign(ds_auth_key_t *k, const void *msg, size_t len, char sig[DS_AUTH_SIG_HEX + 1]);
/* Whether sig (siglen hex characters) is pub's signature of msg. */
bool ds__auth_sig_verify(const char *pub, const void *msg, size_t len, const char *sig,
                         size_t siglen);

#endif
