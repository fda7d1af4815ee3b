/* HELLO: the first request on every connection. It authenticates the
 * connection (the challenge-response of common/auth.h when the worker has a
 * secret), creates a session or joins one the client proves it owns (its id
 * and key, over the same kind of socket), and tells the client about this
 * worker: its identity, the arena (whose memfd rides along for a local
 * client) and the shared GET index. Here too is the check every request
 * passes before its handler runs (ds__conn_rights): what the connection
 * proved decides what it may send (docs/security.md). */
#include "worker/net/conn.h"

#include "common/auth.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* true once the connection is authenticated; otherwise it has answered (a
 * challenge or a refusal). */
static bool hello_auth(ds_conn_t *c, const char *token, uint32_t tlen)
{
    ds_net_t *net = c->net;
    ds_req_t *r = &c->cur;
    if (c->challenge[0] && tlen > 0) {
        bool ok = ds__auth_verify(net->auth_token, c->challenge, token, tlen);
        c->challenge[0] = '\0'; /* one answer per challenge */
        if (ok) {
            c->authed = true;
            return true;
        }
        net->ctr.auth_failures++;
        if (++c->auth_failures >= 3) c->close_after_write = true;
        DS_LOG_WARN("conn %" PRIu64 ": wrong authentication proof", c->id);
        ds__req_error(r, DS_K_NOT_AUTHORIZED,
                      "authentication failed: wrong proof for the challenge");
        return false;
    }
    if (ds__auth_challenge(c->challenge) != 0) {
        ds__req_error(r, DS_K_RUNTIME_ERROR, "no randomness for an authentication challenge");
        return false;
    }
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "authentication required: answer the challenge");
    ds__wbuf_cstr(&w, c->challenge);
    ds__req_reply(r, DS_K_NOT_AUTHORIZED, &w, NULL, 0, NULL, 0, -1);
    ds__wbuf_free(&w);
    return false;
}

/* The session c may join: sid with the matching key, created over the same
 * kind of socket. NULL when refused (answered). */
static ds_session_t *join(ds_conn_t *c, uint64_t sid, const char *key, uint32_t klen)
{
    ds_net_t *net = c->net;
    ds_session_t *s = ds__session_find(net, sid);
    if (s == NULL) {
        ds__req_error(&c->cur, DS_K_NOT_FOUND,
                      "session %016" PRIx64 " is unknown to this worker (restarted?)", sid);
        return NULL;
    }
    bool key_ok = klen == DS_SESSION_KEY_HEX && ds__auth_equal(s->key, key, klen);
    if (!key_ok || s->is_unix != c->is_unix) {
        net->ctr.auth_failures++;
        DS_LOG_WARN("conn %" PRIu64 ": refused to join session %016" PRIx64 ": %s", c->id, sid,
                    key_ok ? "other transport" : "wrong key");
        ds__req_error(&c->cur, DS_K_NOT_AUTHORIZED,
                      key_ok ? "session %016" PRIx64
                               " was created over the other socket: it cannot be joined here"
                             : "session key does not match for session %016" PRIx64,
                      sid);
        return NULL;
    }
    return s;
}

/* Discovery (wire.h, HELLO): a client that reached this worker over TCP and
 * now talks to it over the Unix socket the TCP answer named asks it to prove
 * that it is the worker behind that TCP session, whose key only the two of
 * them know. The proof is made on the Unix socket only, and only for a TCP
 * session: a Unix session's key proves nothing the client does not already
 * know. out is "" when there is nothing to prove. */
static void local_proof(ds_conn_t *c, uint64_t sid, const char *chal, uint32_t clen,
                        char out[DS_AUTH_HEX_LEN + 1])
{
    out[0] = '\0';
    if (!c->is_unix || sid == 0 || clen == 0 || clen > DS_AUTH_HEX_LEN) return;
    ds_session_t *ts = ds__session_find(c->net, sid);
    if (ts == NULL || ts->is_unix) return;
    char ch[DS_AUTH_HEX_LEN + 1];
    memcpy(ch, chal, clen);
    ch[clen] = '\0';
    ds__auth_prove(ts->key, ch, out);
}

/* Requests are checked against what the connection proved before any
 * handler sees them: a header flag or an operation reserved for peers is
 * refused on every connection that did not complete PEER_AUTH (a client
 * setting DS_FLAG_PEER would otherwise skip read latches and the cluster
 * logic; one sending META_PUT could point keys at an address of its
 * choosing), and a flag bit this worker does not know is refused rather than
 * guessed at. The connection keeps working: only the request is refused. */
ds_status_t ds__conn_rights(ds_conn_t *c, char *why, size_t cap)
{
    const char *name = ds__opcode_name(c->h.opcode);
    uint8_t unknown = (uint8_t)(c->h.flags & ~DS_FLAG_REQUEST_MASK);
    ds_status_t st = DS_K_OK;
    if (unknown) {
        snprintf(why, cap, "%s: header flags 0x%02x carry bits a request may not set (0x%02x)",
                 name, c->h.flags, unknown);
        st = DS_K_INVALID;
    } else if (!c->peer && ds__opcode_peer_only(c->h.opcode)) {
        snprintf(why, cap,
                 "%s is a worker-to-worker operation: this connection has not proved it is a "
                 "cluster peer (PEER_AUTH)",
                 name);
        st = DS_K_NOT_AUTHORIZED;
    } else if (!c->peer && (c->h.flags & DS_FLAG_PEER)) {
        snprintf(why, cap,
                 "%s: the peer flag is for cluster peers; this connection has not proved it is "
                 "one (PEER_AUTH)",
                 name);
        st = DS_K_NOT_AUTHORIZED;
    }
    if (st != DS_K_OK) {
        c->net->ctr.requests_refused++;
        DS_LOG_DEBUG("conn %" PRIu64 ": refused: %s", c->id, why);
    }
    return st;
}

void ds__req_set_peer(ds_req_t *r)
{
    if (r->conn_ && !ds__req_gone(r)) r->conn_->peer = true;
}

void ds__hello(ds_conn_t *c)
{
    ds_net_t *net = c->net;
    ds_req_t *r = &c->cur;
    ds_rbuf_t rb;
    ds__rbuf_init(&rb, r->meta, r->meta_len);
    uint32_t proto = ds__rbuf_u32(&rb);
    uint64_t sid = ds__rbuf_u64(&rb);
    uint8_t want_shm = ds__rbuf_u8(&rb);
    const char *token, *key = "", *chal = "";
    uint32_t tlen = ds__rbuf_str(&rb, &token), klen = 0, clen = 0;
    if (!rb.err && rb.pos < rb.len) klen = ds__rbuf_str(&rb, &key);
    uint64_t proof_sid = 0;
    if (!rb.err && rb.pos < rb.len) {
        proof_sid = ds__rbuf_u64(&rb);
        clen = ds__rbuf_str(&rb, &chal);
    }
    if (rb.err) {
        ds__req_error(r, DS_K_INVALID, "malformed HELLO");
        return;
    }
    if (proto != DS_WIRE_VERSION) {
        ds__req_error(r, DS_K_INVALID, "client protocol %u, worker speaks %u", proto,
                      DS_WIRE_VERSION);
        return;
    }
    if (c->hello_done) {
        ds__req_error(r, DS_K_INVALID, "HELLO sent twice");
        return;
    }
    if (!c->authed && !hello_auth(c, token, tlen)) return;
    ds_session_t *s;
    if (sid != 0) {
        if ((s = join(c, sid, key, klen)) == NULL) return;
    } else {
        if (net->nsessions >= net->max_clients) {
            net->ctr.conns_rejected++;
            c->close_after_write = true;
            ds__req_error(r, DS_K_RUNTIME_ERROR, "worker has reached --max_client_num (%u) clients",
                          net->max_clients);
            return;
        }
        s = ds__session_new(net, c->is_unix);
        if (s == NULL) {
            ds__req_error(r, DS_K_OUT_OF_MEMORY, "cannot create a session (out of memory)");
            return;
        }
    }
    s->nconns++;
    c->session = s;
    c->hello_done = true;
    ds__guard_untrack(c);
    const ds_hello_info_t *hi = &net->hello;
    bool grant = want_shm && c->is_unix && hi->arena_fd >= 0;
    if (grant) s->shm = true;
    /* Shared pins need the GET index; a session without a table (none
     * free) takes its pins with requests as before. */
    if (grant && hi->index_slots > 0 && s->pins_off == 0 &&
        ds__store_pins_open(net->store, &s->pins_off) != DS_K_OK)
        s->pins_off = 0;
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u64(&w, s->id);
    ds__wbuf_u64(&w, grant ? hi->arena_size : 0);
    ds__wbuf_u32(&w, hi->inline_max);
    ds__wbuf_cstr(&w, hi->worker_id);
    ds__wbuf_u32(&w, (uint32_t)getpid());
    bool ix = grant && hi->index_slots > 0;
    ds__wbuf_u64(&w, ix ? hi->index_offset : 0);
    ds__wbuf_u32(&w, ix ? hi->index_slots : 0);
    ds__wbuf_u32(&w, ix ? hi->index_keymax : 0);
    ds__wbuf_cstr(&w, s->key);
    ds__wbuf_cstr(&w, hi->sock_path);
    char proof[DS_AUTH_HEX_LEN + 1];
    local_proof(c, proof_sid, chal, clen, proof);
    ds__wbuf_cstr(&w, proof);
    ds__wbuf_u32(&w, (grant ? DS_FEATURE_SETR : 0) |
                         (grant && s->pins_off ? DS_FEATURE_SHM_PINS : 0) |
                         (grant && net->lanes ? DS_FEATURE_LANE : 0) |
                         (hi->pipeline ? DS_FEATURE_PIPELINE : 0));
    ds__wbuf_u64(&w, grant ? s->pins_off : 0);
    /* A joining connection's client mapped the arena already. */
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, grant && sid == 0 ? hi->arena_fd : -1);
    ds__wbuf_free(&w);
}
