/* A raw-protocol peer for the cluster tests (on it_hostile_raw.h): the
 * initiator's side of PEER_AUTH (common/wire.h) with an HMAC proof over a
 * secret the test names, or with a proof or nonce of the test's choosing, to
 * check what the workers accept. Header-only, like it_hostile_raw.h. */
#ifndef DS_TESTS_CT_PEER_RAW_H
#define DS_TESTS_CT_PEER_RAW_H

#include "it_hostile_raw.h"

#include "common/auth.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The transcript PEER_AUTH proofs are made over. */
static inline void ct_peer_transcript(char *out, size_t cap, const char *role, const char *from,
                                      const char *to, const char *na, const char *nb)
{
    snprintf(out, cap, "ds-peer-auth-v1\n%s\n%s\n%s\n%s\n%s", role, from, to, na, nb);
}

typedef struct {
    uint32_t st1, st2; /* the answers' statuses; UINT32_MAX: none came */
    char nb[DS_AUTH_HEX_LEN + 1];
    char proof_b[256];
    bool proof_b_ok; /* proof_b is HMAC(secret) of the acceptor's transcript */
} ct_pa_result_t;

static inline uint32_t ct_pa_answer(hr_conn_t *c, uint64_t id, const char *what, hr_frame_t **fp)
{
    hr_frame_t *f = hr_answer(c, id, ds__now_ms() + 5000);
    char d[512];
    printf("# %s: %s\n", what, hr_describe(f, d, sizeof(d)));
    if (fp) *fp = f;
    return f ? f->h.status : UINT32_MAX;
}

/* PEER_AUTH on c claiming to be `from`, to the worker at `to`. Step 2 sends
 * HMAC(secret) over the initiator's transcript (secret NULL: over "none"),
 * or proof2 verbatim when given; nb2 replaces the nonce the worker gave
 * (NULL: keep it). Step 2 is sent only when step 1 succeeded. 0, or -1 when
 * the exchange itself failed (no answer, a malformed one). */
static inline int ct_peer_auth(hr_conn_t *c, const char *from, const char *to, const char *secret,
                               const char *proof2, const char *nb2, ct_pa_result_t *res)
{
    memset(res, 0, sizeof(*res));
    res->st2 = UINT32_MAX;
    char na[DS_AUTH_HEX_LEN + 1], t[1024];
    if (ds__auth_challenge(na) != 0) return -1;
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, 1);
    ds__wbuf_cstr(&m, from);
    ds__wbuf_cstr(&m, na);
    uint64_t id = hr_add(c, DS_OP_PEER_AUTH, &m, NULL, 0);
    ds__wbuf_free(&m);
    if (hr_flush(c) != 0) return -1;
    hr_frame_t *f;
    res->st1 = ct_pa_answer(c, id, "PEER_AUTH step 1", &f);
    if (res->st1 != DS_K_OK) return res->st1 == UINT32_MAX ? -1 : 0;
    ds_rbuf_t r;
    ds__rbuf_init(&r, f->meta, f->h.meta_len);
    const char *s;
    (void)ds__rbuf_str(&r, &s);
    uint32_t nl = ds__rbuf_str(&r, &s);
    if (r.err || nl != DS_AUTH_HEX_LEN) return -1;
    memcpy(res->nb, s, nl);
    uint32_t pl = ds__rbuf_str(&r, &s);
    if (r.err) return -1;
    snprintf(res->proof_b, sizeof(res->proof_b), "%.*s", (int)pl, s);
    if (secret) {
        char want[DS_AUTH_HEX_LEN + 1];
        ct_peer_transcript(t, sizeof(t), "acceptor", from, to, na, res->nb);
        ds__auth_hmac_hex(secret, t, strlen(t), want);
        res->proof_b_ok = strcmp(want, res->proof_b) == 0;
    }
    char proof[DS_AUTH_HEX_LEN + 1] = "";
    if (proof2 == NULL) {
        ct_peer_transcript(t, sizeof(t), "initiator", from, to, na, res->nb);
        ds__auth_hmac_hex(secret ? secret : "none", t, strlen(t), proof);
        proof2 = proof;
    }
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, 2);
    ds__wbuf_cstr(&m, from);
    ds__wbuf_cstr(&m, na);
    ds__wbuf_cstr(&m, nb2 ? nb2 : res->nb);
    ds__wbuf_cstr(&m, proof2);
    id = hr_add(c, DS_OP_PEER_AUTH, &m, NULL, 0);
    ds__wbuf_free(&m);
    if (hr_flush(c) != 0) return -1;
    res->st2 = ct_pa_answer(c, id, "PEER_AUTH step 2", NULL);
    return res->st2 == UINT32_MAX ? -1 : 0;
}

/* Writes a secret file whole and renames it into place, as an operator
 * would. 0 or -1. */
static inline int ct_write_secret(const char *path, const char *text)
{
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) return -1;
    fputs(text, f);
    fclose(f);
    chmod(tmp, 0600);
    return rename(tmp, path);
}

#endif
