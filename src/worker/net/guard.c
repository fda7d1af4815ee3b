/* Limits that keep one client from locking others out.
 *
 * Before HELLO: a connection that has not completed HELLO (and, with a
 * secret, answered its challenge) is nobody yet, so it must not hold a
 * place a client that does say HELLO needs. Such connections are kept on a
 * list, oldest first, and
 *  - are closed once they have waited --handshake_timeout_ms;
 *  - are at most --max_handshake_conns in all and --max_handshake_conns_per_peer
 *    from one peer (a TCP client's address; a Unix client's uid, the only
 *    identity a local process cannot renew by forking): a new connection
 *    past either cap closes the oldest waiting one (of that peer, or of all),
 *    so a flood of silent sockets only ever churns itself; a peer's own
 *    churn is bounded (DS_HS_PEER_EVICT_CAPS_PER_S): past it, its new
 *    connections wait for their deadline instead of closing its old ones,
 *    so a flooder that reopens what is closed is not accepted and closed
 *    at full speed;
 *  - give way at the worker's connection limit (--max_client_num times
 *    DS_CONNS_PER_CLIENT): the oldest one waiting for HELLO is closed to
 *    admit the new connection, so the limit is only ever reached by clients
 *    that said HELLO.
 * A client's own HELLO follows its connect within a round trip, so closing
 * the oldest waiting connection never meets it unless the caps are flooded
 * faster than that.
 *
 * In-flight bytes: a session's SETs whose data is being received or whose
 * answer is not yet out hold arena space; a client pipelining large SETs
 * over many connections could hold all of it. Their data bytes, all of the
 * session's connections together, are capped at --max_client_inflight_mb
 * (beyond the first such SET, so one value of any allowed size still goes
 * through): a SET past it is answered K_OUT_OF_MEMORY, naming the cap, and
 * its data section is discarded.
 *
 * Pauses after a refusal: a request refused for a quota (the in-flight
 * bytes above; subscriptions and read latches in the operations layer)
 * is answered after a pause, during which its connection reads nothing
 * (ds__req_penalize): a refused SET's data section is not read meanwhile,
 * and a client that retries at once waits instead of making the loop refuse
 * it again and again. The pause doubles while the session keeps being
 * refused, and a session's pauses follow one another, so more connections
 * do not multiply them. A refused SET's pause lasts at least as long as
 * dropping its data at DS_QUOTA_DROP_MIB_PER_S.
 *
 * Loop thread only. */
#include "worker/net/conn.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/tuning.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void ds__guard_peer(int fd, bool is_unix, uint8_t peer[17])
{
    memset(peer, 0, 17);
    if (is_unix) {
        struct ucred cr;
        socklen_t len = sizeof(cr);
        peer[0] = 'u';
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
            memcpy(peer + 1, &cr.uid, sizeof(cr.uid));
        return;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) return;
    if (ss.ss_family == AF_INET) {
        peer[0] = '4';
        memcpy(peer + 1, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        peer[0] = '6';
        memcpy(peer + 1, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    }
}

/* The peer for log lines: "127.0.0.1", "uid 1000". */
static const char *peer_name(const uint8_t peer[17], char *buf, size_t cap)
{
    if (peer[0] == 'u') {
        uint32_t uid;
        memcpy(&uid, peer + 1, sizeof(uid));
        snprintf(buf, cap, "uid %u", uid);
    } else if (peer[0] == '4' || peer[0] == '6') {
        if (inet_ntop(peer[0] == '4' ? AF_INET : AF_INET6, peer + 1, buf, (socklen_t)cap) == NULL)
            snprintf(buf, cap, "?");
    } else {
        snprintf(buf, cap, "unknown peer");
    }
    return buf;
}

/* Tells a connection closed before HELLO why (best effort: it said nothing
 * yet, so nothing else is queued on it), then closes it. */
static void close_waiting(ds_conn_t *c, ds_status_t st, const char *why)
{
    if (c->out_head == NULL && c->bulk_out == NULL) {
        ds_wbuf_t w;
        uint8_t room[DS_REPLY_ROOM];
        ds__wbuf_init_on(&w, room, sizeof(room));
        ds__wbuf_cstr(&w, why);
        uint8_t hdr[DS_WIRE_HEADER_LEN];
        ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                              .version = DS_WIRE_VERSION,
                              .flags = DS_FLAG_RESPONSE,
                              .opcode = DS_OP_HELLO,
                              .status = (uint32_t)st,
                              .meta_len = (uint32_t)w.len};
        ds__wire_header_encode(&h, hdr);
        struct iovec iov[2] = {{hdr, sizeof(hdr)}, {w.buf, w.len}};
        ds__conn_send_refusal(c, iov, 2);
        ds__wbuf_free(&w);
    }
    ds__conn_close(c, why);
}

static void evict(ds_conn_t *c, const char *why)
{
    ds_net_t *net = c->net;
    char who[INET6_ADDRSTRLEN + 16];
    net->ctr.handshake_evictions++;
    DS_LOG_DEBUG("conn %" PRIu64 " (%s) closed before HELLO: %s", c->id,
                 peer_name(c->origin, who, sizeof(who)), why);
    close_waiting(c, DS_K_RUNTIME_ERROR, why);
}

/* Whether the peer may have one more of its connections closed for a new
 * one this second (DS_HS_PEER_EVICT_CAPS_PER_S); counts it when so. */
static bool may_evict(ds_net_t *net, const uint8_t peer[17])
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 17; i++)
        h = (h ^ peer[i]) * 16777619u;
    struct ds_hs_peer *e = &net->hs_peers[h % DS_HS_PEER_SLOTS];
    uint64_t now = ds__now_ms();
    if (memcmp(e->peer, peer, 17) != 0 || now >= e->since_ms + 1000) {
        memcpy(e->peer, peer, 17);
        e->since_ms = now;
        e->evicted = 0;
    }
    if ((uint64_t)e->evicted >= (uint64_t)net->hs_max_peer * DS_HS_PEER_EVICT_CAPS_PER_S)
        return false;
    e->evicted++;
    return true;
}

bool ds__guard_admit(ds_net_t *net, const uint8_t peer[17])
{
    if (net->hs_max_peer) {
        uint32_t n = 0;
        ds_conn_t *oldest = NULL;
        for (ds_conn_t *c = net->hs_head; c; c = c->hs_next)
            if (memcmp(c->origin, peer, 17) == 0 && n++ == 0) oldest = c;
        if (n >= net->hs_max_peer && oldest && may_evict(net, peer)) {
            static bool told;
            char who[INET6_ADDRSTRLEN + 16];
            if (!told)
                DS_LOG_WARN("%s holds %u connections without HELLO "
                            "(--max_handshake_conns_per_peer): closing its oldest for each new one",
                            peer_name(peer, who, sizeof(who)), n);
            told = true;
            evict(oldest, "closed: too many connections from this peer waiting for HELLO "
                          "(--max_handshake_conns_per_peer)");
        }
    }
    if (net->hs_max && net->nhs >= net->hs_max && net->hs_head)
        evict(net->hs_head, "closed: too many connections waiting for HELLO "
                            "(--max_handshake_conns)");
    uint64_t limit = (uint64_t)net->max_clients * DS_CONNS_PER_CLIENT;
    if (net->nconns >= limit && net->hs_head)
        evict(net->hs_head, "closed: the worker is at its connection limit and this "
                            "connection had not said HELLO");
    return net->nconns < limit;
}

void ds__guard_track(ds_conn_t *c)
{
    ds_net_t *net = c->net;
    c->hs_on = true;
    c->hs_since_ms = ds__now_ms();
    c->hs_next = NULL;
    c->hs_prev = net->hs_tail;
    if (net->hs_tail)
        net->hs_tail->hs_next = c;
    else
        net->hs_head = c;
    net->hs_tail = c;
    net->nhs++;
}

void ds__guard_untrack(ds_conn_t *c)
{
    if (!c->hs_on) return;
    ds_net_t *net = c->net;
    if (c->hs_prev)
        c->hs_prev->hs_next = c->hs_next;
    else
        net->hs_head = c->hs_next;
    if (c->hs_next)
        c->hs_next->hs_prev = c->hs_prev;
    else
        net->hs_tail = c->hs_prev;
    c->hs_prev = c->hs_next = NULL;
    c->hs_on = false;
    net->nhs--;
}

uint64_t ds__guard_tick(ds_net_t *net, uint64_t now_ms)
{
    if (net->handshake_ms == 0) return 0;
    /* Oldest first, and every connection has the same allowance: the head
     * is the next to expire. DS_HS_CLOSE_BATCH a turn; the rest are due at
     * once, in the next turn. */
    for (uint32_t i = 0; net->hs_head && net->hs_head->hs_since_ms + net->handshake_ms <= now_ms;
         i++) {
        if (i == DS_HS_CLOSE_BATCH) return now_ms;
        ds_conn_t *c = net->hs_head;
        char who[INET6_ADDRSTRLEN + 16];
        char why[160];
        net->ctr.handshake_timeouts++;
        snprintf(why, sizeof(why),
                 "closed: no HELLO completed within --handshake_timeout_ms (%" PRIu64 " ms)",
                 net->handshake_ms);
        DS_LOG_DEBUG("conn %" PRIu64 " (%s) %s", c->id, peer_name(c->origin, who, sizeof(who)),
                     why);
        close_waiting(c, DS_K_RPC_DEADLINE_EXCEEDED, why); /* which untracks it */
    }
    return net->hs_head ? net->hs_head->hs_since_ms + net->handshake_ms : 0;
}

bool ds__guard_set_admit(ds_conn_t *c)
{
    ds_net_t *net = c->net;
    ds_session_t *s = c->session;
    uint64_t len = c->h.data_len;
    if (s == NULL || len == 0) return true;
    if (net->inflight_max && s->inflight > 0 && s->inflight + len > net->inflight_max) {
        net->ctr.inflight_refusals++;
        ds__req_penalize(&c->cur);
        ds__req_error(&c->cur, DS_K_OUT_OF_MEMORY,
                      "SET of %" PRIu64 " bytes refused: this client already has %" PRIu64
                      " bytes of SETs in flight (received or unanswered), and "
                      "--max_client_inflight_mb allows %" PRIu64
                      " MiB; wait for their answers before sending more",
                      len, s->inflight, net->inflight_max >> 20);
        return false;
    }
    s->inflight += len;
    c->charged = len;
    return true;
}

void ds__guard_uncharge(ds_conn_t *c)
{
    if (c->charged == 0) return;
    if (c->session) c->session->inflight -= c->charged;
    c->charged = 0;
}

/* A connection paused after a refusal: a placeholder request parked on it
 * (so it reads nothing) until due_ms. */
struct ds_pause {
    struct ds_pause *prev, *next;
    ds_req_t *d;
    ds_net_t *net;
    uint64_t due_ms;
};

static void pause_unlink(struct ds_pause *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        p->net->pauses = p->next;
    if (p->next) p->next->prev = p->prev;
}

/* The connection closed while paused. */
static void pause_cancel(ds_req_t *d, void *ctx)
{
    struct ds_pause *p = ctx;
    pause_unlink(p);
    free(p);
    ds__req_drop(d);
}

void ds__req_penalize(ds_req_t *r)
{
    ds_session_t *s = r->session;
    if (s == NULL || ds__req_is_deferred(r) || r->conn_ == NULL) return;
    uint64_t now = ds__now_ms();
    uint32_t ms = DS_QUOTA_PAUSE_MIN_MS;
    if (s->pause_ms && now <= s->pause_end_ms + DS_QUOTA_PAUSE_RESET_MS)
        ms = s->pause_ms * 2 > DS_QUOTA_PAUSE_MAX_MS ? DS_QUOTA_PAUSE_MAX_MS : s->pause_ms * 2;
    uint64_t drop_ms = r->data_len * 1000u / ((uint64_t)DS_QUOTA_DROP_MIB_PER_S << 20);
    if (drop_ms > ms) ms = (uint32_t)drop_ms;
    struct ds_pause *p = calloc(1, sizeof(*p));
    if (p == NULL) return;
    /* After the session's pause under way, if any: one at a time. */
    uint64_t from = s->pause_end_ms > now ? s->pause_end_ms : now;
    p->net = r->net_;
    p->due_ms = from + ms;
    p->d = ds__req_park(r, pause_cancel, p);
    if (p->d == NULL) {
        free(p);
        return;
    }
    /* The park took the request's place on the connection; r itself, not
     * deferred, is answered as usual, but its answer waits with the
     * connection: a client with more connections than one would otherwise
     * just send its next request on another. */
    r->conn_->out_held = true;
    s->pause_ms = ms;
    s->pause_end_ms = p->due_ms;
    p->net->ctr.quota_pauses++;
    p->next = p->net->pauses;
    if (p->next) p->next->prev = p;
    p->net->pauses = p;
}

uint64_t ds__guard_pause_tick(ds_net_t *net, uint64_t now_ms)
{
    /* At most one per connection: bounded by the connections. */
    uint64_t next = 0;
    for (struct ds_pause *p = net->pauses, *n; p; p = n) {
        n = p->next;
        if (p->due_ms <= now_ms) {
            pause_unlink(p);
            ds_req_t *d = p->d;
            free(p);
            if (d->conn_) d->conn_->out_held = false;
            ds__req_unpark(d);
            ds__req_drop(d); /* the connection reads on after this event */
        } else if (next == 0 || p->due_ms < next) {
            next = p->due_ms;
        }
    }
    return next;
}
