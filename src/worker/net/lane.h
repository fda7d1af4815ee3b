/* The worker's side of request lanes (common/lane.h): the arena region, the
 * doorbell, and the loop's hooks. Private to src/worker/net and the loop
 * that drives it (core/server.c). */
#ifndef DS_WORKER_NET_LANE_H
#define DS_WORKER_NET_LANE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/lane.h"
#include "worker/net/net.h"

/* The lanes of a worker. What the loop's polling policy reads
 * (core/poll_policy.c) is the hub, the ready mask and what the last lane
 * request served said about its client; only this file writes any of it. */
struct ds_lanes {
    uint8_t *base; /* the region in the worker's mapping */
    uint64_t offset;
    ds_lane_hub_t *hub;
    uint32_t n;
    struct ds_conn **owner; /* per lane: its connection, NULL = free */
    uint32_t nactive;
    uint32_t cursor; /* round-robin: a freed lane waits as long as it can */
    uint32_t next_gen;
    /* Lanes whose request waits for its connection to resume: looked at
     * again on the next poll. */
    uint64_t again[DS_LANE_MAX / 64];
    bool any_again;
    uint32_t client_cpu; /* of the last request served */
    bool client_polls;   /* its client polls for its answers */
    bool served;         /* a request was served since the policy last looked */
    bool asleep;
    int bell_fd;
    ds_io_t bell;
};

/* Whether a client has set its bit in the ready mask. */
static inline bool ds__lanes_any_ready(const ds_lanes_t *L, memory_order mo)
{
    for (uint32_t w = 0; w < (L->n + 63) / 64; w++)
        if (atomic_load_explicit(&L->hub->ready[w], mo)) return true;
    return false;
}

/* Carves n lanes out of the arena and registers the doorbell with the
 * loop. 0, or -1 with a message (the worker then runs without lanes). */
int ds__lanes_init(ds_net_t *net, uint32_t n, char *err, size_t err_cap);
void ds__lanes_destroy(ds_net_t *net);

/* Serves every lane whose request is new; the number served. *found_ns
 * (may be NULL): when the first of them was found, before it was served. */
int ds__lanes_poll(ds_net_t *net, uint64_t *found_ns);
/* The loop is about to sleep: tells clients to ring the doorbell. false
 * when a request came in meanwhile (then it must not sleep). */
bool ds__lanes_sleep(ds_net_t *net);
/* The loop is awake again; true when it had said it sleeps. */
bool ds__lanes_woke(ds_net_t *net);

struct ds_conn;
/* LANE: gives the connection of r a lane. */
void ds__lane_open(struct ds_conn *c, ds_req_t *r);
/* The connection closes: its lane goes back (a client waiting on it is
 * sent to its socket, where it finds the connection closed). */
void ds__lane_close(struct ds_conn *c);
/* The answer to the connection's lane request (header h, metadata meta,
 * data segs): into the lane when it fits and socket is false (true), else
 * the lane sends the client to its socket and the caller writes the answer
 * there (false). */
bool ds__lane_reply(struct ds_conn *c, const ds_wire_header_t *h, const uint8_t *meta,
                    const struct iovec *segs, uint32_t nseg, bool socket);

#endif
