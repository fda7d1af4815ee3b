/* How workers prove to each other that they are members of the cluster
 * (PEER_AUTH in common/wire.h; the trust model in docs/security.md).
 *
 * Every peer connection runs a mutual challenge: each side contributes a
 * fresh nonce, and each proves itself over both nonces, both member
 * addresses and its role, so a recorded proof is worthless on another
 * connection (replay) and a side's proof cannot be sent back to it as the
 * other's (reflection). The proof is an HMAC-SHA256 with the cluster secret
 * (--cluster_secret_file, one or two secrets: the first proves, both are
 * accepted, so a secret can be rotated with no downtime), or without a secret
 * an Ed25519 signature by the worker's member key, generated at start, whose
 * public half its etcd record carries: then whoever may write the cluster's
 * member records in etcd is trusted as a peer, no one else.
 *
 * Thread-safe: the loop answers PEER_AUTH, the job threads run the
 * initiator's side. The secret file is read again when it changes (checked
 * at most once a second), under the module's own lock. */
#ifndef DS_WORKER_CLUSTER_PEER_AUTH_H
#define DS_WORKER_CLUSTER_PEER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/auth.h"

#define DS_PEER_ROLE_ACCEPTOR "acceptor"
#define DS_PEER_ROLE_INITIATOR "initiator"
/* A proof in hex: an HMAC (64) or a signature (128). */
#define DS_PEER_PROOF_MAX DS_AUTH_SIG_HEX

typedef struct ds_peer_auth ds_peer_auth_t;

/* self: this worker's member address; secret_file "" = none. NULL with a
 * message when the file cannot be read or libcrypto fails. */
ds_peer_auth_t *ds__peer_auth_new(const char *self, const char *secret_file, char *err,
                                  size_t err_cap);
void ds__peer_auth_free(ds_peer_auth_t *a);
const char *ds__peer_auth_self(const ds_peer_auth_t *a);
/* The public half of the member key (hex), for the etcd record. */
const char *ds__peer_auth_pub(const ds_peer_auth_t *a);
bool ds__peer_auth_has_secret(const ds_peer_auth_t *a);
/* This side's proof for role over the transcript. 0, or -1 (libcrypto). */
int ds__peer_auth_prove(ds_peer_auth_t *a, const char *role, const char *from, const char *to,
                        const char *nonce_a, const char *nonce_b, char out[DS_PEER_PROOF_MAX + 1]);
/* Whether proof (plen bytes) is the other side's for role; peer_pub is the
 * other side's member key from etcd (used without a secret; NULL = none). */
bool ds__peer_auth_check(ds_peer_auth_t *a, const char *role, const char *from, const char *to,
                         const char *nonce_a, const char *nonce_b, const char *proof, size_t plen,
                         const char *peer_pub);
/* The acceptor's nonce for one connection's handshake, derived from a
 * random key of this process, the connection and the initiator's claim, so
 * the acceptor keeps no state between the two steps and a nonce is never
 * valid on another connection. */
void ds__peer_auth_nonce(ds_peer_auth_t *a, uint64_t conn_id, const char *from, const char *nonce_a,
                         char out[DS_AUTH_HEX_LEN + 1]);
/* Counts a handshake that failed on a wrong proof, on either side (any
 * thread), and reads the count. */
void ds__peer_auth_failed(ds_peer_auth_t *a);
uint64_t ds__peer_auth_failures(const ds_peer_auth_t *a);
/* A nonce is exactly DS_AUTH_HEX_LEN lowercase hex digits. */
bool ds__peer_auth_nonce_ok(const char *p, size_t len);

#endif
