/* The worker's side of request lanes (common/lane.h): the arena region, the
 * doorbell, and the loop's hooks. Private to src/worker/net and the loop
 * that drives it (core/server.c). */
#ifndef DS_WORKER_NET_LANE_H
#define DS_WORKER_NET_LANE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "worker/net/net.h"

/* Carves n lanes out of the arena and registers the doorbell with the
 * loop. 0, or -1 with a message (the worker then runs without lanes). */
int ds__lanes_init(ds_net_t *net, uint32_t n, char *err, size_t err_cap);
void ds__lanes_destroy(ds_net_t *net);

/* Serves every lane whose request is new; the number served. *found_ns
 * (may be NULL): when the first of them was found, before it was served. */
int ds__lanes_poll(ds_net_t *net, uint64_t *found_ns);
/* Whether the last request handled came through a lane, from a client that
 * ran on this thread's CPU. */
bool ds__lanes_shared_cpu(ds_net_t *net);
/* Parting (DS_LANE_PART_NS in common/lane.h): when the last lane request
 * served came from a polling client on the loop's own CPU, moves the loop
 * to another; true when it did. */
bool ds__lanes_part(ds_net_t *net);
/* Watches the hub for DS_LANE_WATCH_NS, or, when the last request came
 * through a lane, until DS_LANE_WATCH_BACK_NS after idle_since (when the
 * loop last had work) if that is later: true as soon as a lane request
 * came in. Not while sharing the CPU with the last client. */
bool ds__lanes_watch(ds_net_t *net, uint64_t idle_since);
/* Whether a client has promised a lane request soon (DS_LANE_AHEAD_MIN in
 * common/lane.h): the loop then polls instead of sleeping. */
bool ds__lanes_expected(ds_net_t *net, uint64_t now_ns);
/* The loop is about to sleep: tells clients to ring the doorbell. false
 * when a request came in meanwhile (then it must not sleep). */
bool ds__lanes_sleep(ds_net_t *net);
/* The loop is awake again. */
void ds__lanes_woke(ds_net_t *net);

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
