/* The worker process: listeners (TCP on exactly --worker_address, a Unix
 * socket in a 0700 directory), the arena and store, signals through a
 * signalfd, and the loop (in the manner of Redis's aeMain): the timers that
 * drive TTL expiry and the other deadlines, the polling policy's timeout,
 * the wait, the events, the lanes. */
#include "worker/core/server.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/lane.h"
#include "common/log.h"
#include "common/net.h"
#include "common/shm_index.h"
#include "common/tls.h"
#include "worker/cluster/cluster.h"
#include "worker/core/kv_events.h"
#include "worker/core/poll_policy.h"
#include "worker/net/lane.h"
#include "worker/net/ucx.h"
#include "worker/ops/stream.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

static void on_signal(void *ctx, uint32_t events)
{
    ds_server_t *srv = ctx;
    (void)events;
    struct signalfd_siginfo si;
    while (read(srv->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        /* SIGTERM in a cluster is a planned exit (a service manager's stop):
         * the worker moves its objects and metadata to the others first, as
         * for dscli stop. SIGINT, or a second SIGTERM while leaving, stops
         * at once. */
        if (si.ssi_signo == SIGTERM && !srv->leaving && srv->remote && srv->remote->leave) {
            DS_LOG_INFO("SIGTERM received: leaving the cluster (moving this worker's objects "
                        "to the others first; another SIGTERM stops at once)");
            srv->leaving = true;
            srv->remote->leave(srv, NULL);
            continue;
        }
        DS_LOG_INFO("signal %u received, shutting down", si.ssi_signo);
        ds__server_stop(srv);
    }
}

static int make_socket_dir(const char *dir, char *err, size_t err_cap)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, err_cap, "cannot create socket directory %s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
        snprintf(err, err_cap, "socket directory %s is not a directory owned by this user", dir);
        return -1;
    }
    chmod(dir, 0700); /* only the worker's user may reach the socket */
    return 0;
}

/* The loop's timers: each sweep of deadlines it drives, in the order the
 * loop ran them before timers were registered. Every one runs each turn
 * (DS_TIMER_EACH_TURN): their deadlines are created by request handlers in
 * other layers (a TTL, a wait's deadline, a link request, a held object,
 * eviction past the high watermark) without telling the loop, and each
 * sweep finds its earliest deadline in a look (a heap's or list's head). */
static uint64_t tick_store_expire(void *ctx, uint64_t now)
{
    return ds__store_expire_due(((ds_server_t *)ctx)->store, now);
}
static uint64_t tick_store_held(void *ctx, uint64_t now)
{
    return ds__store_held_due(((ds_server_t *)ctx)->store, now);
}
static uint64_t tick_ucx(void *ctx, uint64_t now)
{
    return ds__ucx_tick(((ds_server_t *)ctx)->ucx, now);
}
static uint64_t tick_memory(void *ctx, uint64_t now)
{
    return ds__ops_memory_tick(ctx, now);
}
static uint64_t tick_subs(void *ctx, uint64_t now)
{
    ds_server_t *srv = ctx;
    uint64_t a = ds__subs_expire(&srv->subs, now), b = ds__subs_expire(&srv->locates, now);
    uint64_t c = ds__ops_get_tick(srv, now);
    a = a && (b == 0 || a < b) ? a : b;
    return a && (c == 0 || a < c) ? a : c;
}
static uint64_t tick_cluster(void *ctx, uint64_t now)
{
    return ds__cluster_tick(ctx, now);
}
static uint64_t tick_net(void *ctx, uint64_t now)
{
    return ds__net_tick(&((ds_server_t *)ctx)->net, now);
}
static uint64_t tick_probe(void *ctx, uint64_t now)
{
    return ds__probe_tick(ctx, now);
}
static uint64_t tick_latch(void *ctx, uint64_t now)
{
    return ds__latch_expire(ctx, now);
}
static uint64_t tick_streams(void *ctx, uint64_t now)
{
    return ds__stream_tick(ctx, now);
}

static bool waits_ready(const ds_server_t *srv)
{
    return ds__subs_ready_pending(&srv->subs) || ds__subs_ready_pending(&srv->locates);
}

/* The after-event hook's first step: waits a publish or a deadline made
 * ready during the event are completed here, never inside the publishing
 * handler (subs.h). */
static void resume_waits(void *ctx)
{
    ds_server_t *srv = ctx;
    if (waits_ready(srv)) srv->net.resumed++;
    ds__subs_run_ready(&srv->subs);
    ds__subs_run_ready(&srv->locates);
}

static int add_timers(ds_server_t *srv)
{
    static const ds_timer_cb ticks[] = {tick_store_expire, tick_store_held, tick_ucx, tick_memory,
                                        tick_subs,         tick_cluster,    tick_net, tick_probe,
                                        tick_latch,        tick_streams};
    for (size_t i = 0; i < sizeof(ticks) / sizeof(ticks[0]); i++)
        if (ds__loop_timer_add(srv->net.loop, DS_TIMER_EACH_TURN, 0, ticks[i], srv) == NULL)
            return -1;
    return 0;
}

/* --enable_tls: the server side of the TCP port, and the client side of
 * this worker's connections to peers, both with this worker's certificate
 * (peers may ask for one: --tls_verify_client) and the same CA. */
static int init_tls(ds_server_t *srv, const ds_worker_config_t *cfg, char *err, size_t err_cap)
{
    ds_tls_conf_t tc = {.server = true,
                        .ca = cfg->tls_ca,
                        .cert = cfg->tls_cert,
                        .key = cfg->tls_key,
                        .passphrase_path = cfg->tls_passphrase_path,
                        .verify_peer = cfg->tls_verify_client};
    srv->net.tls = ds__tls_ctx_new(&tc, err, err_cap);
    if (srv->net.tls == NULL) return -1;
    tc.server = false;
    srv->tls_peer = ds__tls_ctx_new(&tc, err, err_cap);
    if (srv->tls_peer == NULL) return -1;
    DS_LOG_INFO("TLS on %s (certificate %s, CA %s%s)", cfg->worker_address, cfg->tls_cert,
                cfg->tls_ca[0] ? cfg->tls_ca : "of the system",
                cfg->tls_verify_client ? ", client certificates required" : "");
    return 0;
}

int ds__server_init(ds_server_t *srv, const ds_worker_config_t *cfg, char *err, size_t err_cap)
{
    memset(srv, 0, sizeof(*srv));
    srv->cfg = *cfg;
    srv->tcp_fd = srv->unix_fd = srv->sig_fd = -1;
    srv->arena.fd = -1;
    srv->start_ms = ds__now_ms();
    int lvl = ds__log_parse_level(cfg->log_level);
    if (lvl < 0) {
        snprintf(err, err_cap, "--log_level '%s' is not debug, info, warn or error",
                 cfg->log_level);
        return -1;
    }
    ds__log_set_level((ds_log_level_t)lvl);
    if (ds__parse_hostport(cfg->worker_address, srv->host, sizeof(srv->host), &srv->port, err,
                           err_cap) != 0)
        return -1;
    if (cfg->auth_token_file[0] && ds__auth_read_secret(cfg->auth_token_file, srv->auth_token,
                                                        sizeof(srv->auth_token), err, err_cap) != 0)
        return -1;
    if (cfg->enable_tls && init_tls(srv, cfg, err, err_cap) != 0) return -1;
    srv->inline_max = (uint32_t)(cfg->inline_max_kb * 1024);
    /* The worker's identity: random, so a client that reconnects can tell a
     * restarted worker (a new identity) from the one it knew. */
    uint64_t id;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
        snprintf(err, err_cap, "no randomness for the worker's identity: %s", strerror(errno));
        return -1;
    }
    snprintf(srv->worker_id, sizeof(srv->worker_id), "%016" PRIx64, id);
    ds__subs_init(&srv->subs, (uint64_t)cfg->max_pending_subscriptions,
                  (uint64_t)cfg->max_pending_subscriptions_per_client);
    /* LOCATEs wait on a table of their own: a key's location is known when
     * its META_PUT arrives, not when it is published here. */
    ds__subs_init(&srv->locates, (uint64_t)cfg->max_pending_subscriptions, 0);

    ds_net_t *net = &srv->net;
    net->loop = ds__loop_create();
    if (net->loop == NULL) {
        snprintf(err, err_cap, "cannot create the event loop: %s", strerror(errno));
        return -1;
    }
    uint64_t bytes = (uint64_t)cfg->shared_memory_size_mb << 20;
    if (ds__arena_create(&srv->arena, bytes, err, err_cap) != 0) return -1;
    /* The shared GET index lets local clients read small values without a
     * request. Not in a cluster: there the owner decides which copy of a key
     * is current, and a copy in this worker's table may be a stale one. */
    uint64_t slots = cfg->etcd_address[0] || cfg->index_value_max_kb == 0
                         ? 0
                         : ds__shm_index_slots_for(srv->arena.size);
    srv->store =
        ds__store_create_indexed(&srv->arena, slots, (uint64_t)cfg->index_value_max_kb << 10);
    if (srv->store == NULL) {
        snprintf(err, err_cap, "out of memory creating the object store");
        return -1;
    }
    /* A pin table per client for views without a request (512 bytes each;
     * with none left, clients pin with requests). */
    if (slots)
        (void)ds__store_pins_reserve(
            srv->store, cfg->max_client_num < 1024 ? (uint32_t)cfg->max_client_num : 1024u);

    char dir[256];
    if (cfg->unix_socket_dir[0])
        snprintf(dir, sizeof(dir), "%s", cfg->unix_socket_dir);
    else
        ds__default_socket_dir(dir, sizeof(dir));
    if (make_socket_dir(dir, err, err_cap) != 0) return -1;
    if (ds__socket_path(dir, srv->host, srv->port, srv->sock_path, sizeof(srv->sock_path)) != 0) {
        snprintf(err, err_cap, "socket path under %s is too long", dir);
        return -1;
    }
    srv->unix_fd = ds__unix_listen(srv->sock_path, err, err_cap);
    if (srv->unix_fd < 0) return -1;
    /* TCP last: a client that reaches the worker over TCP (readiness probes,
     * AUTO clients) then finds the Unix socket already there. */
    srv->tcp_fd = ds__tcp_listen(srv->host, srv->port, err, err_cap);
    if (srv->tcp_fd < 0) return -1;

    /* SIGTERM and SIGINT arrive through the loop's signalfd. Blocked before
     * any thread starts, so that none inherits them unblocked: the kernel
     * would deliver a SIGTERM there and its default action kill the worker
     * without the graceful stop. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    srv->sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);

    if (ds__metrics_init(srv, err, err_cap) != 0) return -1;
    net->store = srv->store;
    net->dispatch = ds__ops_dispatch;
    net->dispatch_ctx = srv;
    net->observe = ds__metrics_observe;
    net->observe_ctx = srv;
    net->session_end = ds__ops_session_end;
    net->session_end_ctx = srv;
    net->before_resume = resume_waits;
    net->before_resume_ctx = srv;
    net->max_data = (uint64_t)cfg->max_frame_mb << 20;
    net->max_clients = (uint32_t)cfg->max_client_num;
    net->handshake_ms = (uint64_t)cfg->handshake_timeout_ms;
    net->hs_max = (uint32_t)cfg->max_handshake_conns;
    net->hs_max_peer = (uint32_t)cfg->max_handshake_conns_per_peer;
    net->inflight_max = cfg->max_client_inflight_mb ? (uint64_t)cfg->max_client_inflight_mb << 20
                                                    : srv->arena.size / 2;
    snprintf(net->auth_token, sizeof(net->auth_token), "%s", srv->auth_token);
    ds_hello_info_t *hi = &net->hello;
    snprintf(hi->worker_id, sizeof(hi->worker_id), "%s", srv->worker_id);
    hi->arena_fd = srv->arena.fd;
    hi->arena_size = srv->arena.size;
    hi->inline_max = srv->inline_max;
    /* Clients learn the socket from HELLO over TCP: a relative
     * --unix_socket_dir would mean nothing in their working directory. */
    char cwd[PATH_MAX] = "";
    if (srv->sock_path[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL) cwd[0] = '\0';
    int pl = snprintf(hi->sock_path, sizeof(hi->sock_path), "%s%s%s", cwd, cwd[0] ? "/" : "",
                      srv->sock_path);
    if (pl < 0 || (size_t)pl >= sizeof(hi->sock_path) || hi->sock_path[0] != '/')
        hi->sock_path[0] = '\0';
    uint64_t ix_off = 0, ix_slots = 0;
    if (ds__store_index(srv->store, &ix_off, &ix_slots)) {
        hi->index_offset = ix_off;
        hi->index_slots = (uint32_t)ix_slots;
        hi->index_keymax = DS_SHM_INDEX_KEYMAX;
    }
    if (ds__net_init(net, err, err_cap) != 0) return -1;
    /* Request lanes (common/lane.h) for local connections, standalone and
     * in a cluster: one per connection up to --max_client_num and
     * DS_LANE_MAX, and at most 1/64 of the arena (4 MiB for 256 lanes;
     * stats arena.lane_bytes, part of used_bytes); without room the worker
     * runs without them. */
    uint64_t lanes = srv->arena.size / (64u * DS_LANE_SIZE);
    if (lanes > (uint64_t)cfg->max_client_num) lanes = (uint64_t)cfg->max_client_num;
    if (lanes > DS_LANE_MAX) lanes = DS_LANE_MAX;
    char lerr[160];
    if (lanes > 0 && ds__lanes_init(net, (uint32_t)lanes, lerr, sizeof(lerr)) != 0)
        DS_LOG_WARN("no request lanes: %s", lerr);
    /* --enable_rdma: UCX for pulls between workers (a cluster) and for
     * remote clients' gets (UCX_GET, standalone too); no UCX, no start. */
    if (cfg->enable_rdma && (ds__ops_ucx_addr_init(srv, err, err_cap) != 0 ||
                             (srv->ucx = ds__ucx_new(net->loop, srv->arena.base, srv->arena.size,
                                                     err, err_cap)) == NULL))
        return -1;
    if (ds__cluster_init(srv, err, err_cap) != 0) return -1;
    if (ds__kv_events_start(cfg->kv_events_config, srv->store, &srv->kv_events, err, err_cap) != 0)
        return -1;
    if (ds__tier_init(srv, err, err_cap) != 0) return -1;
    hi->pipeline = cfg->etcd_address[0] == '\0' && srv->tier == NULL;
    if (add_timers(srv) != 0) {
        snprintf(err, err_cap, "out of memory registering the loop's timers");
        return -1;
    }
    if (srv->sig_fd < 0 || ds__net_listen(net, &net->tcp, srv->tcp_fd, false) != 0 ||
        ds__net_listen(net, &net->unix_, srv->unix_fd, true) != 0 ||
        ds__loop_add(net->loop, &srv->sig_io, srv->sig_fd, EPOLLIN, on_signal, srv) != 0) {
        snprintf(err, err_cap, "cannot set up the event loop: %s", strerror(errno));
        return -1;
    }
    DS_LOG_INFO("worker %s listening on %s:%d and %s, arena %lld MiB, pid %d", srv->worker_id,
                srv->host, srv->port, srv->sock_path, (long long)cfg->shared_memory_size_mb,
                (int)getpid());
    if (cfg->etcd_address[0])
        DS_LOG_INFO("node_timeout_s %lld (lease), node_dead_timeout_s %lld (a lapsed lease drops "
                    "the member at once here)",
                    (long long)cfg->node_timeout_s, (long long)cfg->node_dead_timeout_s);
    /* Last: the probe files say the worker is up, so only once it is. */
    return ds__probe_start(srv, err, err_cap);
}

void ds__server_stop(ds_server_t *srv)
{
    srv->stopping = true;
}

void ds__server_run(ds_server_t *srv)
{
    ds_net_t *net = &srv->net;
    ds_loop_t *loop = net->loop;
    /* --busy_poll_us: polling and the other latency heuristics
     * (poll_policy.h); 0 leaves a plain epoll loop. */
    ds_poll_t poll;
    ds__poll_init(&poll, net, (uint64_t)srv->cfg.busy_poll_us);
    while (!srv->stopping) {
        /* Timers first; they run the after-event hook, since a sweep may
         * have ended deferred requests. */
        uint64_t resumed = net->resumed;
        uint64_t due = ds__loop_timers_run(loop, ds__now_ms());
        /* Connections or waits on a ready list: the loop must not sleep.
         * Nor when that hook resumed anything: the requests it ran (the next
         * one a client sent the moment its answer went out) may have set a
         * deadline after the timers looked (a subscribe-get's, a latch
         * request's next slice), which due does not hold; the next turn's
         * timers see it. Sleeping on due would leave such a request
         * unanswered until some other event came. */
        int timeout = net->resumed != resumed || ds__net_busy(net) || waits_ready(srv)
                          ? 0
                          : ds__loop_timeout(due, ds__now_ms());
        timeout = ds__poll_timeout(&poll, timeout);
        /* Clients with a request lane ring the doorbell only while the
         * loop may sleep. */
        if (timeout != 0 && !ds__lanes_sleep(net)) timeout = 0;
        ds__net_turn(net);
        int events = ds__loop_run_once(loop, timeout);
        bool slept = ds__lanes_woke(net);
        /* Lane requests that came in meanwhile (the doorbell's callback
         * serves those that rang). */
        uint64_t lane_at = 0; /* when one was found, before it was served */
        int lanes = ds__lanes_poll(net, &lane_at);
        ds__poll_after(&poll, events, lanes, lane_at, slept);
        ds__net_free_dead(net);
    }
    /* Let final replies (e.g. to SHUTDOWN) go out before closing. */
    uint64_t until = ds__now_ms() + 200;
    while (ds__net_output_pending(net) && ds__now_ms() < until) {
        ds__loop_run_once(net->loop, 10);
        ds__net_free_dead(net);
    }
    ds__probe_stop(srv);
    DS_LOG_INFO("worker stopped");
}

void ds__server_destroy(ds_server_t *srv)
{
    /* The L2 queue first: a clean stop flushes write-back and answers the
     * requests still waiting for the disk. */
    ds__tier_destroy(srv);
    ds__ops_ucx_addr_destroy(srv);
    /* Connections first: closing them ends every deferred request's wait. */
    if (srv->net.loop) ds__net_destroy(&srv->net);
    ds__cluster_destroy(srv);
    /* After the cluster's job threads: ends the UCX sends still under way
     * (their pins go) and releases ranges of receives abandoned to UCX. */
    ds__ucx_free(srv->ucx);
    srv->ucx = NULL;
    ds__subs_destroy(&srv->subs);
    ds__subs_destroy(&srv->locates);
    ds__ops_grefs_free(srv);
    ds__latch_destroy(srv);
    ds__stream_destroy(srv);
    if (srv->tcp_fd >= 0) close(srv->tcp_fd);
    if (srv->unix_fd >= 0) {
        close(srv->unix_fd);
        unlink(srv->sock_path);
    }
    if (srv->sig_fd >= 0) close(srv->sig_fd);
    ds__metrics_destroy(srv);
    ds__kv_events_stop(srv->kv_events, srv->store);
    srv->kv_events = NULL;
    if (srv->store) ds__store_destroy(srv->store);
    if (srv->arena.fd >= 0) ds__arena_destroy(&srv->arena);
    ds__loop_destroy(srv->net.loop);
    ds__tls_ctx_free(srv->net.tls);
    srv->net.tls = NULL;
    ds__tls_ctx_free(srv->tls_peer);
    srv->tls_peer = NULL;
}
