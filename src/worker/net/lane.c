/* Request lanes, the worker's side (common/lane.h says the protocol).
 *
 * The loop looks at the hub's ready mask each turn (a load per 64 lanes)
 * and serves the lanes whose bit a client set, taking the bits. A request is copied into the
 * connection's read buffer and runs through the connection's own state
 * machine (ds__conn_feed), so a lane request is handled, checked and
 * answered exactly as the same bytes on the socket would be; only where
 * the answer goes differs (ds__lane_reply, from ds__conn_queue). */
#include "worker/net/lane.h"

#include "common/clock.h"
#include "common/lane.h"
#include "common/log.h"
#include "worker/net/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static ds_lane_t *lane_at(const ds_lanes_t *L, uint32_t i)
{
    return (ds_lane_t *)(void *)(L->base + (uint64_t)(i + 1) * DS_LANE_SIZE);
}

static void on_bell(void *ctx, uint32_t events)
{
    (void)events;
    ds_net_t *net = ctx;
    uint64_t v;
    /* One read empties the counter (no EFD_SEMAPHORE), so a second one
     * would only fail with EAGAIN: a system call on every wake-up of a
     * sleeping loop, which is what a lane request costs while the loop
     * sleeps beside a large transfer. A ring after the read leaves the fd
     * readable for the next turn, and the poll below sees its bit anyway. */
    (void)!read(net->lanes->bell_fd, &v, sizeof(v));
    ds__lanes_poll(net, NULL);
}

int ds__lanes_init(ds_net_t *net, uint32_t n, char *err, size_t err_cap)
{
    ds_lanes_t *L = calloc(1, sizeof(*L));
    if (L == NULL) {
        snprintf(err, err_cap, "out of memory for request lanes");
        return -1;
    }
    L->bell_fd = -1;
    if (n > DS_LANE_MAX) n = DS_LANE_MAX;
    L->owner = calloc(n, sizeof(*L->owner));
    if (L->owner == NULL) {
        snprintf(err, err_cap, "out of memory for request lanes");
        goto fail;
    }
    if (ds__store_region(net->store, ds__lane_region_size(n), &L->offset, &L->base) != DS_K_OK) {
        snprintf(err, err_cap, "no room in the arena for %u request lanes", n);
        goto fail;
    }
    L->hub = (ds_lane_hub_t *)(void *)L->base;
    L->n = n;
    L->bell_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (L->bell_fd < 0 ||
        ds__loop_add(net->loop, &L->bell, L->bell_fd, EPOLLIN, on_bell, net) != 0) {
        snprintf(err, err_cap, "cannot set up the request lanes' doorbell: %s", strerror(errno));
        goto fail;
    }
    net->lanes = L;
    return 0;
fail:
    if (L->bell_fd >= 0) close(L->bell_fd);
    free(L->owner);
    free(L);
    return -1;
}

void ds__lanes_destroy(ds_net_t *net)
{
    ds_lanes_t *L = net->lanes;
    if (L == NULL) return;
    ds__loop_del(net->loop, &L->bell);
    close(L->bell_fd);
    free(L->owner);
    free(L);
    net->lanes = NULL;
}

/* Bumps rep_seq and wakes the client if it sleeps on it. */
static void publish(ds_net_t *net, ds_lane_t *l)
{
    atomic_fetch_add_explicit(&l->rep_seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&l->waiting, memory_order_seq_cst)) {
        ds__futex_wake(&l->rep_seq);
        net->ctr.lane_wakes++;
    }
}

/* One lane's new request, if any. */
static void serve(ds_net_t *net, ds_conn_t *c)
{
    ds_lane_t *l = lane_at(net->lanes, c->lane - 1);
    uint32_t seq = atomic_load_explicit(&l->req_seq, memory_order_acquire);
    if (seq == c->lane_seen) return;
    /* A client that wrote under an earlier owner's generation is not this
     * connection's client: nothing it wrote is read. */
    if (atomic_load_explicit(&l->req_gen, memory_order_relaxed) != c->lane_gen) {
        c->lane_seen = seq;
        return;
    }
    uint32_t len = atomic_load_explicit(&l->req_len, memory_order_relaxed);
    char why[96];
    int fed = 0;
    if (len < DS_WIRE_HEADER_LEN || len > DS_LANE_REQ_MAX) {
        snprintf(why, sizeof(why), "lane request of %u bytes (must be %u..%u)", len,
                 DS_WIRE_HEADER_LEN, DS_LANE_REQ_MAX);
    } else if ((fed = ds__conn_feed(c, l->req, len)) == 0) {
        /* Sent as soon as the answer to a deferred request arrived, before
         * the connection resumed: served once it has. */
        uint32_t i = c->lane - 1;
        net->lanes->again[i / 64] |= UINT64_C(1) << (i % 64);
        net->lanes->any_again = true;
        return;
    } else if (fed > 0) {
        c->lane_seen = seq;
        net->lanes->client_cpu = atomic_load_explicit(&l->client_cpu, memory_order_relaxed);
        net->lanes->client_polls = atomic_load_explicit(&l->client_polls, memory_order_relaxed);
        net->lanes->served = true;
        net->ctr.lane_requests++;
        return;
    } else {
        snprintf(why, sizeof(why), "lane request while another request is in progress");
    }
    c->lane_seen = seq;
    net->ctr.protocol_errors++;
    DS_LOG_WARN("conn %llu: protocol error: %s", (unsigned long long)c->id, why);
    ds__conn_close(c, why);
}

int ds__lanes_poll(ds_net_t *net, uint64_t *found_ns)
{
    ds_lanes_t *L = net->lanes;
    if (L == NULL || L->nactive == 0) return 0;
    uint64_t before = net->ctr.lane_requests;
    bool again = L->any_again;
    L->any_again = false;
    for (uint32_t w = 0; w < (L->n + 63) / 64; w++) {
        uint64_t bits = atomic_load_explicit(&L->hub->ready[w], memory_order_relaxed)
                            ? atomic_exchange_explicit(&L->hub->ready[w], 0, memory_order_seq_cst)
                            : 0;
        if (again) {
            bits |= L->again[w];
            L->again[w] = 0;
        }
        if (bits && found_ns && *found_ns == 0) *found_ns = ds__now_ns();
        while (bits) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            /* A bit of a free lane, or past the lanes: a stale or hostile
             * client's; nothing to serve. */
            if (i < L->n && L->owner[i]) serve(net, L->owner[i]);
        }
    }
    int served = (int)(net->ctr.lane_requests - before);
    if (served) ds__net_after_event(net);
    return served;
}

bool ds__lanes_sleep(ds_net_t *net)
{
    ds_lanes_t *L = net->lanes;
    if (L == NULL || L->nactive == 0) return true;
    if (L->any_again) return false;
    atomic_store_explicit(&L->hub->sleeping, 1, memory_order_seq_cst);
    L->asleep = true;
    if (!ds__lanes_any_ready(L, memory_order_seq_cst)) return true;
    ds__lanes_woke(net);
    return false;
}

bool ds__lanes_woke(ds_net_t *net)
{
    ds_lanes_t *L = net->lanes;
    if (L == NULL || !L->asleep) return false;
    atomic_store_explicit(&L->hub->sleeping, 0, memory_order_relaxed);
    L->asleep = false;
    return true;
}

void ds__lane_open(ds_conn_t *c, ds_req_t *r)
{
    ds_net_t *net = c->net;
    ds_lanes_t *L = net->lanes;
    if (L == NULL || !c->is_unix || c->session == NULL || !c->session->shm) {
        ds__req_error(r, DS_K_NOT_SUPPORTED,
                      "LANE needs a worker with lanes and a Unix socket session with the arena");
        return;
    }
    if (c->lane) {
        ds__req_error(r, DS_K_INVALID, "LANE asked twice on one connection");
        return;
    }
    if (L->nactive == L->n) {
        ds__req_error(r, DS_K_OUT_OF_MEMORY, "all %u request lanes are taken", L->n);
        return;
    }
    uint32_t i = L->cursor;
    while (L->owner[i])
        i = (i + 1) % L->n;
    L->cursor = (i + 1) % L->n;
    L->owner[i] = c;
    L->nactive++;
    ds_lane_t *l = lane_at(L, i);
    memset(l, 0, DS_LANE_HDR);
    c->lane = i + 1;
    c->lane_seen = 0;
    c->lane_gen = ++L->next_gen ? L->next_gen : ++L->next_gen; /* never 0 */
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "");
    ds__wbuf_u64(&w, L->offset);
    ds__wbuf_u64(&w, L->offset + (uint64_t)(i + 1) * DS_LANE_SIZE);
    ds__wbuf_u32(&w, c->lane_gen);
    ds__req_reply(r, DS_K_OK, &w, NULL, 0, NULL, 0, L->bell_fd);
    ds__wbuf_free(&w);
}

void ds__lane_close(ds_conn_t *c)
{
    ds_lanes_t *L = c->net->lanes;
    if (c->lane == 0 || L == NULL) return;
    uint32_t i = c->lane - 1;
    ds_lane_t *l = lane_at(L, i);
    atomic_store_explicit(&l->closed, 1, memory_order_relaxed);
    if (c->lane_wait) {
        /* The client waits: to its socket, which is closed. */
        c->lane_wait = false;
        atomic_store_explicit(&l->rep_len, DS_LANE_ON_SOCKET, memory_order_relaxed);
        publish(c->net, l);
    }
    L->owner[i] = NULL;
    L->nactive--;
    L->again[i / 64] &= ~(UINT64_C(1) << (i % 64));
    c->lane = 0;
}

bool ds__lane_reply(ds_conn_t *c, const ds_wire_header_t *h, const uint8_t *meta,
                    const struct iovec *segs, uint32_t nseg, bool socket)
{
    ds_lane_t *l = lane_at(c->net->lanes, c->lane - 1);
    uint64_t total = DS_WIRE_HEADER_LEN + (uint64_t)h->meta_len + h->data_len;
    bool fits = !socket && total <= DS_LANE_REP_MAX;
    if (fits) {
        uint8_t *p = l->rep;
        ds__wire_header_encode(h, p);
        p += DS_WIRE_HEADER_LEN;
        if (h->meta_len) memcpy(p, meta, h->meta_len);
        p += h->meta_len;
        for (uint32_t i = 0; i < nseg; i++) {
            if (segs[i].iov_len) memcpy(p, segs[i].iov_base, segs[i].iov_len);
            p += segs[i].iov_len;
        }
    }
    atomic_store_explicit(&l->rep_len, fits ? (uint32_t)total : DS_LANE_ON_SOCKET,
                          memory_order_relaxed);
    publish(c->net, l);
    return fits;
}
