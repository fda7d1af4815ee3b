/* Quick peer requests straight from the event loop (see cluster.h).
 *
 * A job thread costs a request two thread handoffs (loop -> job thread, and
 * back through the eventfd), which on a small remote GET cost more than the
 * network round trip itself. Requests the peer answers at once from its own
 * loop - a LOCATE that does not wait, and the pull of a small value - go
 * instead over one persistent non-blocking connection per peer that the loop
 * drives like any other socket: it writes the request, and handles the
 * response when epoll says it arrived.
 *
 * A peer's worker answers the requests of one connection in order, so the
 * in-flight jobs of a link are a FIFO matched by request id. Connecting
 * (TCP connect, HELLO, the auth challenge) blocks, so a job thread does it
 * and hands the connected socket back; until then, and for a second after a
 * failed attempt, requests take the job threads as before. A link that fails
 * (EOF, a bad frame, a response overdue past its job's deadline) is closed
 * and fails every in-flight job as a transport failure, as a dead pooled
 * connection would. */
#include "worker/cluster/cluster_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/tls.h"
#include "worker/cluster/peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Values up to this size are pulled over the link; larger ones stream
 * straight into the arena from a job thread. */
#define DS_LINK_MAX_VALUE (64u << 10)
/* Largest response frame a link accepts (LOCATE answers for a full batch). */
#define DS_LINK_MAX_FRAME (16u << 20)
#define DS_LINK_RETRY_MS 1000

enum { LINK_DOWN, LINK_CONNECTING, LINK_READY };

typedef struct link {
    struct link *next;
    ds_links_t *owner;
    char addr[300];
    int state;
    uint64_t retry_at; /* LINK_DOWN: no new attempt before this */
    int fd;
    ds_tls_t *tls; /* --enable_tls, else NULL */
    ds_io_t io;
    bool want_out;
    bool broken;
    uint64_t next_req;
    ds_wbuf_t out;
    size_t out_pos;
    uint8_t *in;
    size_t in_len, in_cap;
    ds_job_t *head, *tail; /* in flight, oldest first */
} link_t;

struct ds_links {
    ds_server_t *srv;
    link_t *links;
};

ds_links_t *ds__links_new(ds_server_t *srv)
{
    ds_links_t *ls = calloc(1, sizeof(*ls));
    if (ls) ls->srv = srv;
    return ls;
}

static link_t *find(ds_links_t *ls, const char *addr)
{
    for (link_t *l = ls->links; l; l = l->next)
        if (strcmp(l->addr, addr) == 0) return l;
    return NULL;
}

static void unlink_link(ds_links_t *ls, link_t *l)
{
    for (link_t **pp = &ls->links; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            return;
        }
    }
}

/* Closes the link and fails its in-flight jobs. The link leaves the list
 * first, so a done-handler that submits again gets a fresh attempt. */
static void link_fail(link_t *l, const char *why)
{
    ds_links_t *ls = l->owner;
    unlink_link(ls, l);
    if (l->fd >= 0) {
        ds__loop_del(ls->srv->net.loop, &l->io);
        ds__tls_free(l->tls);
        close(l->fd);
    }
    if (l->head) DS_LOG_DEBUG("cluster: link to %s failed: %s", l->addr, why);
    ds_job_t *j = l->head;
    l->head = l->tail = NULL;
    ds__wbuf_free(&l->out);
    free(l->in);
    free(l);
    while (j) {
        ds_job_t *next = j->next;
        j->next = NULL;
        j->transport_failed = 1;
        snprintf(j->err, sizeof(j->err), "peer %.200s: %s", j->addr, why);
        ds__job_complete(ls->srv, j);
        j = next;
    }
}

void ds__links_free(ds_links_t *ls)
{
    if (ls == NULL) return;
    while (ls->links)
        link_fail(ls->links, "worker shutting down");
    free(ls);
}

void ds__links_forget(ds_links_t *ls, const char *addr)
{
    link_t *l = find(ls, addr);
    if (l) link_fail(l, "the peer left the cluster");
}

static void set_events(link_t *l, bool want_out)
{
    if (l->want_out == want_out) return;
    l->want_out = want_out;
    (void)ds__loop_mod(l->owner->srv->net.loop, &l->io, EPOLLIN | (want_out ? EPOLLOUT : 0));
}

/* Writes what the socket takes. A hard error only marks the link: epoll
 * reports the broken socket and the callback tears it down, so a submit
 * never frees a link under its caller. */
static void flush(link_t *l)
{
    while (l->out_pos < l->out.len) {
        ssize_t w;
        if (l->tls) {
            struct iovec v = {l->out.buf + l->out_pos, l->out.len - l->out_pos};
            w = ds__tls_writev(l->tls, &v, 1);
        } else {
            w = send(l->fd, l->out.buf + l->out_pos, l->out.len - l->out_pos,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (w > 0) {
            l->out_pos += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            set_events(l, true);
            return;
        }
        l->broken = true;
        set_events(l, true);
        return;
    }
    ds__wbuf_reset(&l->out);
    l->out_pos = 0;
    set_events(l, false);
}

/* A pull's response: one key, inline, exactly the size the owner gave. */
static void take_pull(ds_job_t *j, const ds_wire_header_t *h, const uint8_t *data)
{
    uint32_t n = ds__rbuf_u32(&j->r);
    uint8_t kind = ds__rbuf_u8(&j->r);
    uint64_t size = ds__rbuf_u64(&j->r);
    if (j->r.err || n != 1 || kind != DS_VAL_INLINE || size != j->dst_len || h->data_len != size) {
        j->status = DS_K_NOT_FOUND; /* replaced or gone since the owner answered */
        snprintf(j->err, sizeof(j->err), "key changed on %.200s during the pull", j->addr);
        return;
    }
    memcpy(j->dst, data, size);
}

/* One whole response frame for the oldest in-flight job. -1: not ours. */
static int take_frame(link_t *l, const ds_wire_header_t *h, const uint8_t *meta)
{
    ds_job_t *j = l->head;
    if (j == NULL || h->req_id != j->link_req || !(h->flags & DS_FLAG_RESPONSE)) return -1;
    l->head = j->next;
    if (l->head == NULL) l->tail = NULL;
    j->next = NULL;
    j->status = h->status;
    j->resp = malloc(h->meta_len ? h->meta_len : 1);
    if (j->resp == NULL) {
        j->transport_failed = 1;
        snprintf(j->err, sizeof(j->err), "out of memory reading a response from %.200s", j->addr);
    } else {
        memcpy(j->resp, meta, h->meta_len);
        j->resp_len = h->meta_len;
        ds__rbuf_init(&j->r, j->resp, h->meta_len);
        const char *e;
        uint32_t el = ds__rbuf_str(&j->r, &e);
        snprintf(j->err, sizeof(j->err), "%.*s", (int)el, e);
        if (j->dst && h->status == DS_K_OK) take_pull(j, h, meta + h->meta_len);
    }
    ds__job_complete(l->owner->srv, j);
    return 0;
}

/* Reads what arrived and completes the jobs whose responses are whole.
 * Returns a reason when the link must close, else NULL. */
static const char *drain_input(link_t *l)
{
    for (;;) {
        if (l->in_cap - l->in_len < 4096) {
            size_t cap = l->in_cap ? l->in_cap * 2 : 65536;
            uint8_t *p = cap <= DS_LINK_MAX_FRAME * 2u ? realloc(l->in, cap) : NULL;
            if (p == NULL) return "out of memory for a response";
            l->in = p;
            l->in_cap = cap;
        }
        /* Until EAGAIN: nothing is left inside a TLS session unseen. */
        ssize_t r = l->tls ? ds__tls_recv(l->tls, l->in + l->in_len, l->in_cap - l->in_len)
                           : recv(l->fd, l->in + l->in_len, l->in_cap - l->in_len, MSG_DONTWAIT);
        if (r == 0) return "connection closed";
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return NULL;
            return strerror(errno);
        }
        l->in_len += (size_t)r;
        size_t pos = 0;
        while (l->in_len - pos >= DS_WIRE_HEADER_LEN) {
            ds_wire_header_t h;
            char err[128];
            if (ds__wire_header_decode(l->in + pos, DS_LINK_MAX_FRAME, &h, err, sizeof(err)) != 0)
                return "malformed response";
            size_t need = DS_WIRE_HEADER_LEN + (size_t)h.meta_len + (size_t)h.data_len;
            if (l->in_len - pos < need) break;
            /* Completing a job may queue requests on this link (output
             * only): the input buffer stays put meanwhile. */
            if (take_frame(l, &h, l->in + pos + DS_WIRE_HEADER_LEN) != 0)
                return "response to no request";
            pos += need;
        }
        memmove(l->in, l->in + pos, l->in_len - pos);
        l->in_len -= pos;
    }
}

static void on_link(void *ctx, uint32_t events)
{
    link_t *l = ctx;
    const char *why = NULL;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) why = drain_input(l);
    if (why == NULL && l->broken) why = "connection lost";
    if (why == NULL && (events & EPOLLOUT)) flush(l);
    if (why == NULL && l->broken) why = "connection lost";
    if (why) link_fail(l, why);
}

/* The connecting job's done-handler, on the loop. */
static void on_connected(ds_job_t *j)
{
    ds_links_t *ls = j->ctx;
    link_t *l = find(ls, j->addr);
    int fd = j->conn_fd;
    ds_tls_t *tls = j->conn_tls;
    j->conn_fd = -1;
    j->conn_tls = NULL;
    if (l == NULL || l->state != LINK_CONNECTING) {
        ds__tls_free(tls);
        if (fd >= 0) close(fd);
        return;
    }
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0 &&
            ds__loop_add(ls->srv->net.loop, &l->io, fd, EPOLLIN, on_link, l) == 0) {
            l->fd = fd;
            l->tls = tls;
            l->state = LINK_READY;
            return;
        }
        ds__tls_free(tls);
        close(fd);
    }
    DS_LOG_DEBUG("cluster: no link to %s: %s", l->addr, j->err);
    l->state = LINK_DOWN;
    l->retry_at = ds__now_ms() + DS_LINK_RETRY_MS;
}

static bool quick(const ds_job_t *j)
{
    if (j->op == DS_OP_LOCATE) return !j->waits;
    return j->op == DS_OP_GET && j->dst != NULL && j->dst_len <= DS_LINK_MAX_VALUE;
}

static void start_connect(ds_links_t *ls, link_t *l)
{
    ds_job_t *c = ds__job_new(NULL, l->addr, DS_OP_HELLO, on_connected);
    if (c == NULL) return;
    l->state = LINK_CONNECTING;
    c->ctx = ls;
    c->connect_only = true;
    c->timeout_ms = 2000;
    ds__job_submit(ls->srv, c);
}

bool ds__links_submit(ds_links_t *ls, ds_job_t *j)
{
    if (ls == NULL || !quick(j)) return false;
    link_t *l = find(ls, j->addr);
    if (l == NULL) {
        l = calloc(1, sizeof(*l));
        if (l == NULL) return false;
        l->owner = ls;
        l->fd = -1;
        ds__wbuf_init(&l->out);
        snprintf(l->addr, sizeof(l->addr), "%s", j->addr);
        l->next = ls->links;
        ls->links = l;
    }
    if (l->state == LINK_DOWN && ds__now_ms() >= l->retry_at) start_connect(ls, l);
    if (l->state != LINK_READY || l->broken) return false;

    j->link_req = ++l->next_req;
    j->deadline = ds__now_ms() + j->timeout_ms;
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = DS_FLAG_PEER,
                          .opcode = j->op,
                          .meta_len = (uint32_t)j->req.len,
                          .req_id = j->link_req};
    uint8_t *hb = ds__wbuf_reserve(&l->out, DS_WIRE_HEADER_LEN);
    if (hb) ds__wire_header_encode(&h, hb);
    ds__wbuf_bytes(&l->out, j->req.buf, j->req.len);
    if (l->out.oom) {
        l->broken = true; /* half a frame may be queued: the link is unusable */
        set_events(l, true);
        return false;
    }
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    j->next = NULL;
    if (!l->want_out) flush(l);
    return true;
}

uint64_t ds__links_expire(ds_links_t *ls, uint64_t now)
{
    uint64_t next = 0;
    if (ls == NULL) return 0;
    for (link_t *l = ls->links, *nx; l; l = nx) {
        nx = l->next;
        if (l->head == NULL) continue;
        if (l->head->deadline <= now) {
            link_fail(l, "timed out");
            nx = ls->links; /* the list may have changed under the handlers */
            continue;
        }
        if (next == 0 || l->head->deadline < next) next = l->head->deadline;
    }
    return next;
}
