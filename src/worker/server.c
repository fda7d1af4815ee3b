/* The worker process: listeners (TCP on exactly --worker_address, a Unix
 * socket in a 0700 directory), the arena and store, signals through a
 * signalfd, and the loop that also drives TTL expiry and subscribe-get
 * deadlines. */
#include "worker/server.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/net.h"
#include "common/shm_index.h"
#include "worker/cluster.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

static void on_listen(void *ctx, uint32_t events)
{
    ds_server_t *srv = ctx;
    (void)events;
    ds__conn_accept(srv, srv->tcp_fd, false);
}

static void on_listen_unix(void *ctx, uint32_t events)
{
    ds_server_t *srv = ctx;
    (void)events;
    ds__conn_accept(srv, srv->unix_fd, true);
}

static void on_signal(void *ctx, uint32_t events)
{
    ds_server_t *srv = ctx;
    (void)events;
    struct signalfd_siginfo si;
    while (read(srv->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
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
    srv->max_data = (uint64_t)cfg->max_frame_mb << 20;
    srv->inline_max = (uint32_t)(cfg->inline_max_kb * 1024);
    char idsrc[400];
    int il = snprintf(idsrc, sizeof(idsrc), "%s:%d/%d/%llu", srv->host, srv->port, (int)getpid(),
                      (unsigned long long)ds__now_ns());
    snprintf(srv->worker_id, sizeof(srv->worker_id), "%08x",
             ds__murmur3_32(idsrc, (size_t)il, 0x5eed));

    srv->loop = ds__loop_create();
    if (srv->loop == NULL) {
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
    ds__subs_init(srv);

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
    if ((srv->bulk = ds__bulk_new(srv, err, err_cap)) == NULL) return -1;
    if (ds__cluster_init(srv, err, err_cap) != 0) return -1;
    if (srv->sig_fd < 0 ||
        ds__loop_add(srv->loop, &srv->tcp_io, srv->tcp_fd, EPOLLIN, on_listen, srv) != 0 ||
        ds__loop_add(srv->loop, &srv->unix_io, srv->unix_fd, EPOLLIN, on_listen_unix, srv) != 0 ||
        ds__loop_add(srv->loop, &srv->sig_io, srv->sig_fd, EPOLLIN, on_signal, srv) != 0) {
        snprintf(err, err_cap, "cannot set up the event loop: %s", strerror(errno));
        return -1;
    }
    DS_LOG_INFO("worker %s listening on %s:%d and %s, arena %lld MiB, pid %d", srv->worker_id,
                srv->host, srv->port, srv->sock_path, (long long)cfg->shared_memory_size_mb,
                (int)getpid());
    return 0;
}

void ds__server_stop(ds_server_t *srv)
{
    srv->stopping = true;
}

static void free_dead(ds_server_t *srv)
{
    while (srv->dead) {
        ds_conn_t *c = srv->dead;
        srv->dead = c->next;
        free(c);
    }
}

void ds__server_run(ds_server_t *srv)
{
    /* --busy_poll_us: after a turn that handled events, poll (timeout 0)
     * until that long has passed without any, so that a client's next
     * request is picked up without waking the thread. */
    uint64_t poll_ns = (uint64_t)srv->cfg.busy_poll_us * 1000u, spin_until = 0;
    while (!srv->stopping) {
        uint64_t now = ds__now_ms();
        uint64_t t1 = ds__store_expire_due(srv->store, now);
        uint64_t t2 = ds__subs_expire(srv, now);
        uint64_t t3 = ds__cluster_tick(srv, now);
        uint64_t next = t1 && t2 ? (t1 < t2 ? t1 : t2) : (t1 ? t1 : t2);
        if (t3 && (next == 0 || t3 < next)) next = t3;
        int timeout = -1;
        if (next) {
            now = ds__now_ms();
            timeout = next > now ? (int)(next - now) : 0;
        }
        bool spinning = spin_until && ds__now_ns() < spin_until;
        if (spinning) timeout = 0;
        if (ds__loop_run_once(srv->loop, timeout) > 0 && poll_ns)
            spin_until = ds__now_ns() + poll_ns;
        else if (spinning)
            sched_yield(); /* a client sharing this CPU gets to send its request */
        free_dead(srv);
    }
    /* Let final replies (e.g. to SHUTDOWN) go out before closing. */
    uint64_t until = ds__now_ms() + 200;
    for (;;) {
        bool pending = false;
        for (ds_conn_t *c = srv->conns; c; c = c->next)
            pending |= c->out_head != NULL;
        if (!pending || ds__now_ms() >= until) break;
        ds__loop_run_once(srv->loop, 10);
        free_dead(srv);
    }
    DS_LOG_INFO("worker stopped");
}

void ds__server_destroy(ds_server_t *srv)
{
    ds__bulk_free(srv->bulk); /* hands back every frame it held */
    srv->bulk = NULL;
    while (srv->conns)
        ds__conn_close(srv->conns, "worker shutting down");
    free_dead(srv);
    ds__cluster_destroy(srv);
    while (srv->sessions)
        ds__session_free(srv, srv->sessions);
    ds__subs_destroy(srv);
    if (srv->tcp_fd >= 0) close(srv->tcp_fd);
    if (srv->unix_fd >= 0) {
        close(srv->unix_fd);
        unlink(srv->sock_path);
    }
    if (srv->sig_fd >= 0) close(srv->sig_fd);
    ds__metrics_destroy(srv);
    if (srv->store) ds__store_destroy(srv->store);
    if (srv->arena.fd >= 0) ds__arena_destroy(&srv->arena);
    ds__loop_destroy(srv->loop);
}

char *ds__server_stats_json(ds_server_t *srv)
{
    ds_store_stats_t st;
    ds__store_stats(srv->store, &st);
    cJSON *root = cJSON_CreateObject();
    char addr[300];
    snprintf(addr, sizeof(addr), "%s:%d", srv->host, srv->port);
    cJSON_AddStringToObject(root, "worker_address", addr);
    cJSON_AddStringToObject(root, "worker_id", srv->worker_id);
    cJSON_AddNumberToObject(root, "pid", getpid());
    cJSON_AddNumberToObject(root, "uptime_s", (double)(ds__now_ms() - srv->start_ms) / 1000.0);
    cJSON_AddStringToObject(root, "mode", srv->cluster ? "cluster" : "standalone");
    if (srv->cluster) {
        char members[4096];
        size_t nm = ds__cluster_members(srv, members, sizeof(members));
        cJSON *cl = cJSON_AddObjectToObject(root, "cluster");
        cJSON_AddStringToObject(cl, "name", srv->cfg.cluster_name);
        cJSON_AddNumberToObject(cl, "members", (double)nm);
        cJSON_AddStringToObject(cl, "member_list", members);
        cJSON_AddNumberToObject(cl, "owned_keys", (double)ds__meta_count(ds__cluster_meta(srv)));
        cJSON_AddNumberToObject(cl, "peer_link_requests", (double)srv->ctr.peer_link_requests);
        cJSON_AddNumberToObject(cl, "peer_job_requests", (double)srv->ctr.peer_job_requests);
        cJSON_AddNumberToObject(cl, "locate_inline_values", (double)srv->ctr.locate_inline_values);
    }
    cJSON *arena = cJSON_AddObjectToObject(root, "arena");
    cJSON_AddNumberToObject(arena, "total_bytes", (double)st.arena.total);
    cJSON_AddNumberToObject(arena, "used_bytes", (double)st.arena.used);
    cJSON_AddNumberToObject(arena, "free_bytes", (double)st.arena.free);
    cJSON_AddNumberToObject(arena, "largest_free_bytes", (double)st.arena.largest_free);
    cJSON *objs = cJSON_AddObjectToObject(root, "objects");
    cJSON_AddNumberToObject(objs, "count", (double)st.objects);
    cJSON_AddNumberToObject(objs, "pinned", (double)st.pinned);
    cJSON_AddNumberToObject(objs, "evictions", (double)st.evictions);
    cJSON_AddNumberToObject(objs, "expirations", (double)st.expirations);
    uint32_t nsess = 0;
    for (ds_session_t *s = srv->sessions; s; s = s->next)
        nsess++;
    cJSON *cl = cJSON_AddObjectToObject(root, "clients");
    cJSON_AddNumberToObject(cl, "connections", srv->nconns);
    cJSON_AddNumberToObject(cl, "sessions", nsess);
    cJSON_AddNumberToObject(cl, "accepted", (double)srv->ctr.conns_accepted);
    cJSON_AddNumberToObject(cl, "rejected", (double)srv->ctr.conns_rejected);
    cJSON_AddNumberToObject(cl, "protocol_errors", (double)srv->ctr.protocol_errors);
    cJSON_AddNumberToObject(cl, "auth_failures", (double)srv->ctr.auth_failures);
    cJSON_AddNumberToObject(root, "subscriptions_waiting", srv->sub_count);
    cJSON *ops = cJSON_AddObjectToObject(root, "operations");
    cJSON *errs = cJSON_AddObjectToObject(root, "errors");
    for (unsigned op = 1; op < DS_OP__MAX; op++) {
        const char *name = ds__opcode_name(op);
        if (name == NULL) continue;
        cJSON_AddNumberToObject(ops, name, (double)srv->ctr.ops[op]);
        cJSON_AddNumberToObject(errs, name, (double)srv->ctr.errors[op]);
    }
    cJSON_AddNumberToObject(root, "bytes_in", (double)srv->ctr.bytes_in);
    cJSON_AddNumberToObject(root, "bytes_out", (double)srv->ctr.bytes_out);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}
