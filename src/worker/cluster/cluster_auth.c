/* The acceptor's side of PEER_AUTH (common/wire.h, peer_auth.h): a
 * connection that claims to be the member at `from` proves it, and this
 * worker proves itself back; only then may it send the peer operations.
 * Runs on the loop and keeps no state between the two steps: the nonce it
 * hands out is derived from the connection and the claim, and checked again
 * at step 2. */
#include "worker/cluster/cluster_int.h"

#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void ds__cluster_peer_auth(ds_server_t *srv, ds_req_t *r)
{
    ds_peer_auth_t *a = ds__cluster_auth(srv);
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint8_t step = ds__rbuf_u8(&rb);
    const char *f, *na, *nb = "", *proof = "";
    uint32_t fl = ds__rbuf_str(&rb, &f);
    uint32_t nal = ds__rbuf_str(&rb, &na), nbl = 0, pl = 0;
    if (step == 2) {
        nbl = ds__rbuf_str(&rb, &nb);
        pl = ds__rbuf_str(&rb, &proof);
    }
    if (rb.err || (step != 1 && step != 2) || !ds__rbuf_done(&rb) || fl == 0 || fl >= 300 ||
        memchr(f, '\0', fl) != NULL || !ds__peer_auth_nonce_ok(na, nal) ||
        (step == 2 && !ds__peer_auth_nonce_ok(nb, nbl))) {
        ds__req_error(r, DS_K_INVALID,
                      "malformed PEER_AUTH (u8 step 1 or 2, str from, str nonce_a of %d hex "
                      "digits, then at step 2 str nonce_b, str proof)",
                      DS_AUTH_HEX_LEN);
        return;
    }
    char from[300], nonce_a[DS_AUTH_HEX_LEN + 1], nonce_b[DS_AUTH_HEX_LEN + 1];
    memcpy(from, f, fl);
    from[fl] = '\0';
    memcpy(nonce_a, na, nal);
    nonce_a[nal] = '\0';
    const char *pub = ds__cluster_member_key(srv, from);
    if (pub == NULL) {
        ds__req_error(r, DS_K_TRY_AGAIN,
                      "PEER_AUTH: %s is not a member of cluster '%s' in etcd (not yet, or not "
                      "at all)",
                      from, srv->cfg.cluster_name);
        return;
    }
    const char *self = ds__peer_auth_self(a);
    ds__peer_auth_nonce(a, r->conn_id, from, nonce_a, nonce_b);
    if (step == 1) {
        char pb[DS_PEER_PROOF_MAX + 1];
        if (ds__peer_auth_prove(a, DS_PEER_ROLE_ACCEPTOR, from, self, nonce_a, nonce_b, pb) != 0) {
            ds__req_error(r, DS_K_RUNTIME_ERROR, "PEER_AUTH: cannot make a proof (libcrypto)");
            return;
        }
        ds_wbuf_t w;
        ds__wbuf_init(&w);
        ds__wbuf_cstr(&w, "");
        ds__wbuf_cstr(&w, nonce_b);
        ds__wbuf_cstr(&w, pb);
        ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, -1);
        ds__wbuf_free(&w);
        return;
    }
    /* Step 2: the nonce must be the one step 1 gave this connection, and
     * the proof the initiator's over it. */
    bool ok = ds__auth_equal(nonce_b, nb, DS_AUTH_HEX_LEN) &&
              ds__peer_auth_check(a, DS_PEER_ROLE_INITIATOR, from, self, nonce_a, nonce_b, proof,
                                  pl, pub[0] ? pub : NULL);
    if (!ok) {
        ds__peer_auth_failed(a);
        DS_LOG_WARN("cluster: conn %" PRIu64 " claiming to be member %s failed PEER_AUTH",
                    r->conn_id, from);
        ds__req_error(r, DS_K_NOT_AUTHORIZED, "PEER_AUTH: wrong proof for member %s (%s)", from,
                      ds__peer_auth_has_secret(a)
                          ? "the cluster secret differs: every worker needs the same "
                            "--cluster_secret_file"
                          : "it must be signed with the member key in its etcd record");
        return;
    }
    srv->cctr.peers_proven++;
    ds__req_set_peer(r);
    ds__req_error(r, DS_K_OK, "%s", "");
}
