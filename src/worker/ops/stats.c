/* The STATS document (dscli status, the STATS op): one JSON object with
 * the worker's identity, arena, objects, clients and counters. */
#include "worker/ops/stream.h"
#include "worker/ops/worker.h"
#include "worker/net/ucx.h"

#include "common/clock.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <unistd.h>

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
    cJSON_AddStringToObject(root, "mode", srv->remote ? "cluster" : "standalone");
    if (srv->remote) srv->remote->stats(srv, root);
    cJSON *arena = cJSON_AddObjectToObject(root, "arena");
    cJSON_AddNumberToObject(arena, "total_bytes", (double)st.arena.total);
    cJSON_AddNumberToObject(arena, "used_bytes", (double)st.arena.used);
    cJSON_AddNumberToObject(arena, "free_bytes", (double)st.arena.free);
    /* The request lanes' region (common/lane.h), part of used_bytes. */
    cJSON_AddNumberToObject(arena, "lane_bytes", (double)st.region_bytes);
    cJSON_AddNumberToObject(arena, "largest_free_bytes", (double)st.arena.largest_free);
    /* Reservations of local sessions (SETR), part of used_bytes. */
    cJSON_AddNumberToObject(arena, "reserved_bytes", (double)st.reserved_bytes);
    cJSON_AddNumberToObject(arena, "reservations", (double)st.reservations);
    cJSON *objs = cJSON_AddObjectToObject(root, "objects");
    cJSON_AddNumberToObject(objs, "count", (double)st.objects);
    cJSON_AddNumberToObject(objs, "pinned", (double)st.pinned);
    cJSON_AddNumberToObject(objs, "shm_held", (double)st.shm_held);
    cJSON_AddNumberToObject(objs, "pin_tables", (double)st.pin_tables);
    cJSON_AddNumberToObject(objs, "evictions", (double)st.evictions);
    cJSON_AddNumberToObject(objs, "background_evictions", (double)srv->bg_evictions);
    cJSON_AddNumberToObject(objs, "expirations", (double)st.expirations);
    if (srv->tier) ds__tier_stats(srv, root);
    ds__latch_stats(srv, root);
    ds__stream_stats(srv, root);
    if (srv->ucx) {
        uint64_t in_flight, timeouts;
        ds__ucx_counts(srv->ucx, &in_flight, &timeouts);
        cJSON *u = cJSON_AddObjectToObject(root, "ucx");
        cJSON_AddNumberToObject(u, "client_sends", (double)srv->uctr.client_sends);
        cJSON_AddNumberToObject(u, "client_bytes", (double)srv->uctr.client_bytes);
        cJSON_AddNumberToObject(u, "client_send_failures", (double)srv->uctr.client_send_failures);
        cJSON_AddNumberToObject(u, "sends_in_flight", (double)in_flight);
        cJSON_AddNumberToObject(u, "send_timeouts", (double)timeouts);
        cJSON_AddNumberToObject(u, "address_checks", (double)srv->uctr.addr_checks);
        cJSON_AddNumberToObject(u, "addresses_refused", (double)srv->uctr.addr_rejected);
    }
    cJSON *cl = cJSON_AddObjectToObject(root, "clients");
    cJSON_AddNumberToObject(cl, "connections", srv->net.nconns);
    cJSON_AddNumberToObject(cl, "sessions", srv->net.nsessions);
    cJSON_AddNumberToObject(cl, "accepted", (double)srv->net.ctr.conns_accepted);
    cJSON_AddNumberToObject(cl, "rejected", (double)srv->net.ctr.conns_rejected);
    cJSON_AddNumberToObject(cl, "protocol_errors", (double)srv->net.ctr.protocol_errors);
    cJSON_AddNumberToObject(cl, "auth_failures", (double)srv->net.ctr.auth_failures);
    cJSON_AddNumberToObject(cl, "awaiting_hello", srv->net.nhs);
    cJSON_AddNumberToObject(cl, "handshake_timeouts", (double)srv->net.ctr.handshake_timeouts);
    cJSON_AddNumberToObject(cl, "handshake_evictions", (double)srv->net.ctr.handshake_evictions);
    cJSON_AddNumberToObject(cl, "inflight_refusals", (double)srv->net.ctr.inflight_refusals);
    cJSON_AddNumberToObject(cl, "quota_pauses", (double)srv->net.ctr.quota_pauses);
    cJSON_AddNumberToObject(cl, "requests_refused", (double)srv->net.ctr.requests_refused);
    cJSON_AddNumberToObject(cl, "tls_failures", (double)srv->net.ctr.tls_failures);
    cJSON_AddNumberToObject(root, "subscriptions_waiting", srv->subs.count);
    cJSON *ops = cJSON_AddObjectToObject(root, "operations");
    cJSON *errs = cJSON_AddObjectToObject(root, "errors");
    for (unsigned op = 1; op < DS_OP__MAX; op++) {
        const char *name = ds__opcode_name(op);
        if (name == NULL) continue;
        cJSON_AddNumberToObject(ops, name, (double)srv->net.ctr.ops[op]);
        cJSON_AddNumberToObject(errs, name, (double)srv->net.ctr.errors[op]);
    }
    cJSON_AddNumberToObject(root, "bytes_in", (double)srv->net.ctr.bytes_in);
    cJSON_AddNumberToObject(root, "bytes_out", (double)srv->net.ctr.bytes_out);
    cJSON_AddNumberToObject(root, "socket_writes", (double)srv->net.ctr.socket_writes);
    cJSON_AddNumberToObject(root, "bulk_receives", (double)srv->net.ctr.bulk_receives);
    cJSON_AddNumberToObject(root, "lane_requests", (double)srv->net.ctr.lane_requests);
    cJSON_AddNumberToObject(root, "lane_parts", (double)srv->net.ctr.lane_parts);
    cJSON_AddNumberToObject(root, "lane_wakes", (double)srv->net.ctr.lane_wakes);
    /* What one pass of the loop, and one event in it, held every other
     * client back at most since the previous STATS (each STATS starts the
     * window over): the figure the loop's slicing of large requests keeps
     * small. */
    uint64_t pass_ns, event_ns;
    ds__loop_take_longest(srv->net.loop, &pass_ns, &event_ns);
    cJSON *lp = cJSON_AddObjectToObject(root, "loop");
    cJSON_AddNumberToObject(lp, "longest_pass_us", (double)(pass_ns / 1000u));
    cJSON_AddNumberToObject(lp, "longest_event_us", (double)(event_ns / 1000u));
    cJSON *poll = cJSON_AddObjectToObject(root, "polling");
    cJSON_AddNumberToObject(poll, "max_us", (double)srv->cfg.busy_poll_us);
    cJSON_AddNumberToObject(poll, "hits", (double)srv->net.ctr.poll_hits);
    cJSON_AddNumberToObject(poll, "polled_us", (double)(srv->net.ctr.poll_ns / 1000u));
    cJSON_AddNumberToObject(poll, "promised", (double)srv->net.ctr.poll_promised);
    cJSON_AddNumberToObject(poll, "watched", (double)srv->net.ctr.poll_watched);
    cJSON_AddNumberToObject(poll, "transfer_sleeps", (double)srv->net.ctr.poll_transfer_sleeps);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}
