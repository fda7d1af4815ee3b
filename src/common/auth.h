/* Shared-secret authentication for TCP clients and peer workers: an
 * HMAC-SHA256 challenge-response, so the secret never crosses the wire.
 *
 * A TCP connection to a worker that has a secret starts unauthenticated. Its
 * HELLO without a proof is answered K_NOT_AUTHORIZED carrying a fresh random
 * challenge (64 hex digits); the client answers with a second HELLO whose
 * token is hex(HMAC-SHA256(secret, challenge)). Any other request before that
 * gets K_NOT_AUTHORIZED and the connection is closed. The Unix socket is
 * trusted through its 0700 directory. */
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

#endif
