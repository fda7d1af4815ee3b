/* Request latency histograms per operation and the Prometheus /metrics
 * endpoint that exposes them with the worker's counters and store gauges.
 *
 * Histograms have fixed log2 buckets, 1 us to 2^25 us (~34 s), plus +Inf, so
 * recording is a handful of integer operations on the hot path.
 *
 * The endpoint is a deliberately tiny HTTP/1.x server living in the worker's
 * own epoll loop (single-threaded, like everything else in the worker): every
 * socket is non-blocking, a request is read into a bounded buffer, answered
 * once with `Connection: close`, and the connection is closed when the answer
 * is out. It never blocks and never holds more than DS_METRICS_MAX_CONNS
 * sockets; when that many are open, the oldest is dropped to make room, so a
 * scraper that connects and says nothing cannot lock others out (the loop has
 * no timers of its own to time such clients out). */
#include "worker/core/server.h"
#include "worker/net/ucx.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DS_HIST_FINITE 26 /* buckets le = 2^0 .. 2^25 us; one more for +Inf */
#define DS_METRICS_MAX_REQ 8192
#define DS_METRICS_MAX_CONNS 16

typedef struct mconn {
    ds_io_t io;
    struct ds_metrics *m;
    struct mconn *prev, *next; /* oldest first */
    char req[DS_METRICS_MAX_REQ];
    size_t req_len;
    char *resp; /* NULL while the request is still being read */
    size_t resp_len, resp_off;
} mconn_t;

struct ds_metrics {
    ds_server_t *srv;
    uint64_t count[DS_OP__MAX];
    uint64_t sum_ns[DS_OP__MAX];
    uint64_t bucket[DS_OP__MAX][DS_HIST_FINITE + 1];

    int lfd; /* -1 when --metrics_port is 0 */
    ds_io_t lio;
    mconn_t *head, *tail;
    uint32_t nconns;
    uint64_t scrapes;
};

/* ---- histograms ---- */

void ds__metrics_observe(void *ctx, uint16_t op, uint64_t ns)
{
    ds_server_t *srv = ctx;
    struct ds_metrics *m = srv->metrics;
    if (m == NULL || op >= DS_OP__MAX) return;
    m->count[op]++;
    m->sum_ns[op] += ns;
    /* Bucket b holds ns <= 2^b us; compare in ns so 1.5 us is not rounded
     * down into the 1 us bucket. */
    int b = 0;
    while (b < DS_HIST_FINITE && ns > (1000ull << b))
        b++;
    m->bucket[op][b]++;
}

/* ---- exposition text ---- */

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} text_t;

static void emit(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit(text_t *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n;
        char *np = realloc(t->p, cap);
        if (np == NULL) {
            t->oom = true;
            return;
        }
        t->p = np;
        t->cap = cap;
    }
}

static void family(text_t *t, const char *name, const char *type, const char *help)
{
    emit(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(text_t *t, const char *name, const char *help, uint64_t v)
{
    family(t, name, "gauge", help);
    emit(t, "%s %" PRIu64 "\n", name, v);
}

static void counter(text_t *t, const char *name, const char *help, uint64_t v)
{
    family(t, name, "counter", help);
    emit(t, "%s %" PRIu64 "\n", name, v);
}

/* The whole exposition as a malloc'd string (NULL on out of memory). */
static char *render(struct ds_metrics *m, size_t *len)
{
    ds_server_t *srv = m->srv;
    text_t t = {.cap = 16384};
    t.p = malloc(t.cap);
    if (t.p == NULL) return NULL;
    t.p[0] = '\0';

    family(&t, "ds_worker_info", "gauge", "Identity of this worker; the value is always 1.");
    emit(&t, "ds_worker_info{worker_id=\"%s\",address=\"%s:%d\",mode=\"%s\"} 1\n", srv->worker_id,
         srv->host, srv->port, srv->cfg.etcd_address[0] ? "cluster" : "standalone");
    family(&t, "ds_worker_uptime_seconds", "gauge", "Seconds since the worker started.");
    emit(&t, "ds_worker_uptime_seconds %.3f\n", (double)(ds__now_ms() - srv->start_ms) / 1000.0);

    family(&t, "ds_worker_operations_total", "counter", "Requests received, by operation.");
    /* Opcode numbers have gaps (ranges kept for kinds of operations). */
    for (unsigned op = 1; op < DS_OP__MAX; op++)
        if (ds__opcode_name(op) != NULL) /* not a gap between opcode ranges */
            emit(&t, "ds_worker_operations_total{op=\"%s\"} %" PRIu64 "\n", ds__opcode_name(op),
                 srv->net.ctr.ops[op]);
    family(&t, "ds_worker_operation_errors_total", "counter",
           "Responses with a status other than K_OK, by operation.");
    for (unsigned op = 1; op < DS_OP__MAX; op++)
        if (ds__opcode_name(op) != NULL)
            emit(&t, "ds_worker_operation_errors_total{op=\"%s\"} %" PRIu64 "\n",
                 ds__opcode_name(op), srv->net.ctr.errors[op]);

    family(&t, "ds_worker_request_duration_seconds", "histogram",
           "Time from a request's header arriving to its response being queued, by operation.");
    for (unsigned op = 1; op < DS_OP__MAX; op++) {
        const char *name = ds__opcode_name(op);
        if (name == NULL) continue;
        uint64_t cum = 0;
        for (int b = 0; b < DS_HIST_FINITE; b++) {
            cum += m->bucket[op][b];
            emit(&t,
                 "ds_worker_request_duration_seconds_bucket{op=\"%s\",le=\"%.6f\"} %" PRIu64 "\n",
                 name, (double)(1ull << b) / 1e6, cum);
        }
        cum += m->bucket[op][DS_HIST_FINITE];
        emit(&t, "ds_worker_request_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
             name, cum);
        emit(&t, "ds_worker_request_duration_seconds_sum{op=\"%s\"} %.9f\n", name,
             (double)m->sum_ns[op] / 1e9);
        emit(&t, "ds_worker_request_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n", name,
             m->count[op]);
    }

    counter(&t, "ds_worker_received_bytes_total", "Bytes read from client sockets.",
            srv->net.ctr.bytes_in);
    counter(&t, "ds_worker_sent_bytes_total", "Bytes written to client sockets.",
            srv->net.ctr.bytes_out);
    counter(&t, "ds_worker_socket_writes_total",
            "Writes of answers to client sockets by the event loop (a pipelining client's small "
            "answers go out together).",
            srv->net.ctr.socket_writes);
    counter(&t, "ds_worker_poll_hits_total",
            "Events the event loop caught while polling (--busy_poll_us) instead of sleeping.",
            srv->net.ctr.poll_hits);
    counter(&t, "ds_worker_poll_promised_total",
            "Event-loop turns that polled because a local client promised a request (a large "
            "set waking the worker ahead).",
            srv->net.ctr.poll_promised);
    counter(&t, "ds_worker_poll_watched_total",
            "Local clients' lane requests the event loop caught while watching the lanes in a "
            "poll step.",
            srv->net.ctr.poll_watched);
    counter(&t, "ds_worker_lane_parts_total",
            "Moves of the event loop off the vCPU of a polling local client it had just served, "
            "so that both can poll.",
            srv->net.ctr.lane_parts);
    counter(&t, "ds_worker_lane_wakes_total",
            "Answers through a request lane whose local client had stopped polling and slept: "
            "each cost a futex wake-up.",
            srv->net.ctr.lane_wakes);
    family(&t, "ds_worker_poll_seconds_total", "counter",
           "Time the event loop spent polling (--busy_poll_us).");
    emit(&t, "ds_worker_poll_seconds_total %.6f\n", (double)srv->net.ctr.poll_ns / 1e9);

    ds_store_stats_t st;
    ds__store_stats(srv->store, &st);
    gauge(&t, "ds_worker_arena_total_bytes", "Size of the shared-memory arena.", st.arena.total);
    gauge(&t, "ds_worker_arena_used_bytes", "Arena bytes allocated to objects.", st.arena.used);
    gauge(&t, "ds_worker_arena_free_bytes", "Arena bytes not allocated.", st.arena.free);
    gauge(&t, "ds_worker_arena_largest_free_bytes", "Largest contiguous free arena range.",
          st.arena.largest_free);
    gauge(&t, "ds_worker_objects", "Keys with a published value.", st.objects);
    gauge(&t, "ds_worker_objects_pinned",
          "Objects held by readers, unpublished creations or superseded versions.", st.pinned);
    counter(&t, "ds_worker_evictions_total", "Volatile objects evicted to make room.",
            st.evictions);
    counter(&t, "ds_worker_background_evictions_total",
            "Evictions done between requests, past --eviction_high_watermark_ratio.",
            srv->bg_evictions);
    counter(&t, "ds_worker_expirations_total", "Objects deleted because their TTL passed.",
            st.expirations);
    gauge(&t, "ds_worker_subscriptions_waiting", "Keys waited on by parked subscribe-gets.",
          srv->subs.count);

    gauge(&t, "ds_worker_clients", "Open client connections.", srv->net.nconns);
    gauge(&t, "ds_worker_sessions", "Client sessions (a client's connections share one).",
          srv->net.nsessions);
    counter(&t, "ds_worker_connections_accepted_total", "Client connections accepted.",
            srv->net.ctr.conns_accepted);
    counter(&t, "ds_worker_connections_rejected_total",
            "Client connections refused because --max_client_num was reached.",
            srv->net.ctr.conns_rejected);
    counter(&t, "ds_worker_protocol_errors_total", "Malformed frames (each closed its connection).",
            srv->net.ctr.protocol_errors);
    counter(&t, "ds_worker_tls_failures_total",
            "TCP connections closed in or before the TLS handshake (--enable_tls).",
            srv->net.ctr.tls_failures);
    ds_tier_counters_t l2;
    bool tiers = ds__tier_counters(srv, &l2);
    if (tiers && l2.spill_on) {
        gauge(&t, "ds_worker_spill_objects", "Objects in the spill directory.", l2.spill_objects);
        gauge(&t, "ds_worker_spill_bytes", "Value bytes in the spill directory.", l2.spill_bytes);
        gauge(&t, "ds_worker_spill_limit_bytes", "--spill_size_limit in effect.", l2.spill_limit);
        counter(&t, "ds_worker_spill_writes_total", "Objects moved from memory to spill.",
                l2.spill_writes);
        counter(&t, "ds_worker_spill_reads_total", "Objects brought back from spill.",
                l2.spill_reads);
        counter(&t, "ds_worker_spill_errors_total", "Failed spill reads, writes and deletes.",
                l2.spill_errors);
        counter(&t, "ds_worker_spill_waits_total",
                "Writes that found the arena full and waited while spills made room.",
                l2.spill_waits);
    }
    if (tiers && l2.l2_on) {
        gauge(&t, "ds_worker_l2_objects", "Objects in the L2 cache (index).", l2.objects);
        gauge(&t, "ds_worker_l2_bytes", "Value bytes in the L2 cache (index).", l2.bytes);
        counter(&t, "ds_worker_l2_reads_total", "Objects read back from L2 into the arena.",
                l2.reads);
        counter(&t, "ds_worker_l2_writes_total", "Objects written durably to L2.", l2.writes);
        counter(&t, "ds_worker_l2_deletes_total", "L2 copies deleted.", l2.deletes);
        counter(&t, "ds_worker_l2_errors_total", "Failed L2 reads, writes and deletes.", l2.errors);
        gauge(&t, "ds_worker_l2_queue_depth", "Jobs queued for the disk I/O thread.",
              l2.queue_depth);
        counter(&t, "ds_worker_l2_queue_full_total", "Writes refused with K_WRITE_BACK_QUEUE_FULL.",
                l2.queue_full);
        counter(&t, "ds_worker_l2_coalesced_total",
                "Queued write-backs skipped because a newer write of the key followed.",
                l2.coalesced);
        counter(&t, "ds_worker_l2_retries_total",
                "Failed write-backs queued again (backoff 100 ms doubling to 5 s).", l2.retries);
        gauge(&t, "ds_worker_l2_retry_pending", "Failed write-backs waiting to be tried again.",
              l2.retry_pending);
        counter(&t, "ds_worker_l2_fallback_reads_total",
                "Objects found by probing the (shared) L2 directory without an index entry.",
                l2.fallback_reads);
        counter(&t, "ds_worker_l2_fsyncs_total",
                "fsync calls on L2 data (distributed_disk: one per group commit).", l2.fsyncs);
        gauge(&t, "ds_worker_l2_file_bytes", "Size of the distributed_disk log.", l2.file_bytes);
        gauge(&t, "ds_worker_l2_dead_bytes",
              "Overwritten, deleted and expired bytes in the distributed_disk log.", l2.dead_bytes);
        counter(&t, "ds_worker_l2_compactions_total", "distributed_disk log compactions completed.",
                l2.compactions);
    }
    if (srv->ucx) {
        uint64_t in_flight, timeouts;
        ds__ucx_counts(srv->ucx, &in_flight, &timeouts);
        counter(&t, "ds_worker_ucx_client_sends_total",
                "Values sent to remote clients with UCX (UCX_GET, --enable_rdma).",
                srv->uctr.client_sends);
        counter(&t, "ds_worker_ucx_client_bytes_total", "Bytes of those values.",
                srv->uctr.client_bytes);
        counter(&t, "ds_worker_ucx_client_send_failures_total",
                "UCX sends to clients that failed or were ended at their deadline.",
                srv->uctr.client_send_failures);
        gauge(&t, "ds_worker_ucx_sends_in_flight",
              "UCX sends under way (each pins its object), to clients and peers.", in_flight);
        counter(&t, "ds_worker_ucx_send_timeouts_total",
                "UCX sends ended at their deadline: a receiver alive but not taking the data.",
                timeouts);
    }
    if (srv->cluster) {
        counter(&t, "ds_worker_peer_link_requests_total",
                "Requests to peers sent from the event loop over a persistent link.",
                srv->cctr.peer_link_requests);
        counter(&t, "ds_worker_peer_job_requests_total",
                "Requests to peers run by a job thread (large pulls, waits, metadata).",
                srv->cctr.peer_job_requests);
        counter(&t, "ds_worker_locate_inline_values_total",
                "Small values sent along with a LOCATE answer (saving the pull).",
                srv->cctr.locate_inline_values);
    }
    counter(&t, "ds_worker_metrics_scrapes_total", "GET /metrics requests answered.",
            m->scrapes + 1);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    *len = t.len;
    return t.p;
}

/* ---- HTTP connections ---- */

static void mconn_close(mconn_t *mc)
{
    struct ds_metrics *m = mc->m;
    ds__loop_del(m->srv->net.loop, &mc->io);
    close(mc->io.fd);
    if (mc->prev)
        mc->prev->next = mc->next;
    else
        m->head = mc->next;
    if (mc->next)
        mc->next->prev = mc->prev;
    else
        m->tail = mc->prev;
    m->nconns--;
    free(mc->resp);
    free(mc);
}

static void mconn_write(mconn_t *mc)
{
    while (mc->resp_off < mc->resp_len) {
        ssize_t w = send(mc->io.fd, mc->resp + mc->resp_off, mc->resp_len - mc->resp_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                ds__loop_mod(mc->m->srv->net.loop, &mc->io, EPOLLOUT);
                return;
            }
            break;
        }
        mc->resp_off += (size_t)w;
    }
    /* Closing a socket with unread input makes the kernel send a reset, which
     * can destroy the answer before the client reads it: end our side first
     * and drop whatever the client sent beyond its request. */
    shutdown(mc->io.fd, SHUT_WR);
    char scratch[4096];
    for (int i = 0; i < 16; i++)
        if (recv(mc->io.fd, scratch, sizeof(scratch), MSG_DONTWAIT) <= 0) break;
    mconn_close(mc);
}

/* Queues an answer and starts writing it; the body may be NULL for errors,
 * which then carry their status line as a one-line body. */
static void answer(mconn_t *mc, const char *status, char *body, size_t body_len)
{
    char head[256];
    char fallback[128];
    if (body == NULL) {
        body_len = (size_t)snprintf(fallback, sizeof(fallback), "%s\n", status);
    }
    int hl = snprintf(
        head, sizeof(head),
        "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
        "Connection: close\r\n\r\n",
        status, body ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8",
        body_len);
    mc->resp = malloc((size_t)hl + body_len);
    if (mc->resp == NULL) {
        free(body);
        mconn_close(mc);
        return;
    }
    memcpy(mc->resp, head, (size_t)hl);
    memcpy(mc->resp + hl, body ? body : fallback, body_len);
    mc->resp_len = (size_t)hl + body_len;
    free(body);
    /* Input after the request is ignored: stop reading, only write. */
    ds__loop_mod(mc->m->srv->net.loop, &mc->io, EPOLLOUT);
    mconn_write(mc);
}

/* A complete request head is in mc->req (NUL-terminated at its blank line).
 * Only the request line matters: "GET /metrics HTTP/1.x". */
static void handle_request(mconn_t *mc)
{
    char *line_end = strpbrk(mc->req, "\r\n");
    if (line_end) *line_end = '\0';
    char *method = mc->req;
    char *sp1 = strchr(method, ' ');
    char *target = sp1 ? sp1 + 1 : NULL;
    char *sp2 = target ? strchr(target, ' ') : NULL;
    char *version = sp2 ? sp2 + 1 : NULL;
    if (sp1 == NULL || sp2 == NULL || sp1 == method || sp2 == target ||
        strncmp(version, "HTTP/1.", 7) != 0 || version[7] < '0' || version[7] > '9' ||
        version[8] != '\0' || strchr(version, ' ')) {
        answer(mc, "400 Bad Request", NULL, 0);
        return;
    }
    *sp1 = '\0';
    *sp2 = '\0';
    /* A query string (Prometheus may add one) does not change the answer. */
    size_t plen = strcspn(target, "?");
    bool is_metrics = plen == 8 && memcmp(target, "/metrics", 8) == 0;
    if (!is_metrics) {
        answer(mc, "404 Not Found", NULL, 0);
        return;
    }
    if (strcmp(method, "GET") != 0) {
        answer(mc, "405 Method Not Allowed", NULL, 0);
        return;
    }
    size_t len = 0;
    char *body = render(mc->m, &len);
    if (body == NULL) {
        answer(mc, "500 Internal Server Error", NULL, 0);
        return;
    }
    mc->m->scrapes++;
    answer(mc, "200 OK", body, len);
}

static void mconn_read(mconn_t *mc)
{
    for (;;) {
        size_t room = sizeof(mc->req) - 1 - mc->req_len;
        if (room == 0) {
            answer(mc, "431 Request Header Fields Too Large", NULL, 0);
            return;
        }
        ssize_t r = recv(mc->io.fd, mc->req + mc->req_len, room, MSG_DONTWAIT);
        if (r == 0) {
            mconn_close(mc); /* closed before a complete request */
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
            mconn_close(mc);
            return;
        }
        size_t from = mc->req_len >= 3 ? mc->req_len - 3 : 0;
        mc->req_len += (size_t)r;
        mc->req[mc->req_len] = '\0';
        if (memchr(mc->req + from, '\0', mc->req_len - from)) {
            answer(mc, "400 Bad Request", NULL, 0);
            return;
        }
        /* The head ends at a blank line; bare LFs are tolerated as HTTP allows. */
        char *end = strstr(mc->req + from, "\r\n\r\n");
        char *end_lf = strstr(mc->req + from, "\n\n");
        if (end == NULL || (end_lf && end_lf < end)) end = end_lf;
        if (end) {
            *end = '\0';
            handle_request(mc);
            return;
        }
    }
}

static void on_mconn(void *ctx, uint32_t events)
{
    mconn_t *mc = ctx;
    if (mc->resp) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) mconn_write(mc);
        return;
    }
    mconn_read(mc);
}

static void on_accept(void *ctx, uint32_t events)
{
    struct ds_metrics *m = ctx;
    (void)events;
    for (int i = 0; i < 16; i++) {
        int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (m->nconns >= DS_METRICS_MAX_CONNS) mconn_close(m->head);
        mconn_t *mc = calloc(1, sizeof(*mc));
        if (mc == NULL) {
            close(fd);
            return;
        }
        mc->m = m;
        if (ds__loop_add(m->srv->net.loop, &mc->io, fd, EPOLLIN, on_mconn, mc) != 0) {
            close(fd);
            free(mc);
            return;
        }
        mc->prev = m->tail;
        if (m->tail)
            m->tail->next = mc;
        else
            m->head = mc;
        m->tail = mc;
        m->nconns++;
    }
}

int ds__metrics_init(ds_server_t *srv, char *err, size_t err_cap)
{
    struct ds_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, err_cap, "out of memory creating the metrics");
        return -1;
    }
    m->srv = srv;
    m->lfd = -1;
    srv->metrics = m;
    if (srv->cfg.metrics_port <= 0) return 0;
    char why[256];
    m->lfd = ds__tcp_listen(srv->host, (int)srv->cfg.metrics_port, why, sizeof(why));
    if (m->lfd < 0) {
        snprintf(err, err_cap, "--metrics_port: %s", why);
        return -1;
    }
    if (ds__loop_add(srv->net.loop, &m->lio, m->lfd, EPOLLIN, on_accept, m) != 0) {
        snprintf(err, err_cap, "cannot watch the metrics listener: %s", strerror(errno));
        return -1;
    }
    DS_LOG_INFO("metrics on http://%s:%lld/metrics", srv->host, (long long)srv->cfg.metrics_port);
    return 0;
}

void ds__metrics_destroy(ds_server_t *srv)
{
    struct ds_metrics *m = srv->metrics;
    if (m == NULL) return;
    while (m->head)
        mconn_close(m->head);
    if (m->lfd >= 0) {
        ds__loop_del(srv->net.loop, &m->lio);
        close(m->lfd);
    }
    free(m);
    srv->metrics = NULL;
}
