/* Service discovery: finding the workers of a cluster through etcd, as
 * Yuanrong's ServiceDiscovery does (include/datasystem/utils/service_discovery.h
 * there).
 *
 * Every worker started with --etcd_address registers
 * /datasystem/<cluster_name>/cluster/<host:port> under a lease; the record
 * says whether it is ready and, when the worker was started with
 * --host_id_env_name, the host ID it read from that environment variable. A
 * discovery reads those records on every call (one etcd range request, no
 * cache and no thread), keeps the ready ones and splits them into workers on
 * this client's host (the same host ID) and the others.
 *
 * A client connected with a discovery (ds_client_options_t.service_discovery)
 * takes its worker from it, and with enable_cross_node_connection, when its
 * worker stops answering, the next call dials another worker the discovery
 * lists (ds/kv_client.h, "Failover").
 *
 * Ownership: ds_service_discovery_new copies the options' strings; the
 * discovery is freed with ds_service_discovery_free, which must come after
 * every client connected with it has been closed. Address lists from
 * ds_service_discovery_get_all_workers are freed with ds_strings_free.
 *
 * Thread safety: a discovery may be used from many threads and by many
 * clients at once. */
#ifndef DATASYSTEM_SERVICE_DISCOVERY_H
#define DATASYSTEM_SERVICE_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/export.h"
#include "ds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Yuanrong's ServiceAffinityPolicy, with its numbers. */
typedef enum {
    /* A worker on this host when one is ready, else any. */
    DS_AFFINITY_PREFERRED_SAME_NODE = 0,
    /* Only a worker on this host; none ready is DS_K_TRY_AGAIN. */
    DS_AFFINITY_REQUIRED_SAME_NODE = 1,
    /* Any ready worker, uniformly. */
    DS_AFFINITY_RANDOM = 2,
} ds_service_affinity_policy_t;

typedef struct {
    /* etcd's client address, "host:port", or several separated by commas
     * (tried in turn). Required. */
    const char *etcd_address;
    /* The workers' --cluster_name; NULL or "" = "default", the worker's
     * default. Letters, digits, '-', '_' and '.' only. */
    const char *cluster_name;
    /* TLS to etcd (Yuanrong's etcdCa, etcdCert, etcdKey, etcdDNSName): not
     * supported by this client; setting any of them makes
     * ds_service_discovery_init fail with DS_K_NOT_SUPPORTED. */
    const char *etcd_ca;
    const char *etcd_cert;
    const char *etcd_key;
    const char *etcd_dns_name;
    /* etcd authentication: with a username, every lookup first asks etcd
     * for a token with this name and password (so the token never goes
     * stale; token_refresh_interval_sec is accepted for Yuanrong's sake). */
    const char *username;
    const char *password;
    uint32_t token_refresh_interval_sec; /* default 30 */
    /* The environment variable holding this host's ID (the same the
     * workers were given with --host_id_env_name). NULL, "" or unset: no
     * host affinity, every worker counts as another host's. */
    const char *host_id_env_name;
    ds_service_affinity_policy_t affinity_policy; /* default PREFERRED_SAME_NODE */
} ds_service_discovery_options_t;

typedef struct ds_service_discovery ds_service_discovery_t;

/* Fills defaults; etcd_address still has to be set. */
DS_EXPORT void ds_service_discovery_options_init(ds_service_discovery_options_t *opts);

/* A discovery over etcd (Yuanrong's ServiceDiscovery). Checks the options
 * (DS_K_INVALID naming the bad one) and copies them; contacts nobody. */
DS_EXPORT ds_status_t ds_service_discovery_new(const ds_service_discovery_options_t *opts,
                                               ds_service_discovery_t **out);

/* A discovery through a coordinator (Yuanrong's CoordinatorServiceDiscovery):
 * service_address is a service that answers etcd's v3 KV range API (etcd
 * itself, or a proxy in front of it), "host:port". cluster_name, host ID and
 * policy as for ds_service_discovery_new. */
DS_EXPORT ds_status_t ds_coordinator_service_discovery_new(const char *service_address,
                                                           const char *cluster_name,
                                                           const char *host_id_env_name,
                                                           ds_service_affinity_policy_t policy,
                                                           ds_service_discovery_t **out);

/* Resolves the host ID and checks that etcd answers (one lookup).
 * Idempotent. Calls below that find it not yet called call it first. */
DS_EXPORT ds_status_t ds_service_discovery_init(ds_service_discovery_t *sd);

/* A ready worker per the affinity policy: ip (NUL-terminated, at most
 * ip_cap bytes with the NUL) and port; *same_node (may be NULL) says
 * whether it is on this host. No ready worker: DS_K_TRY_AGAIN; policy
 * REQUIRED_SAME_NODE without a host ID: DS_K_INVALID. */
DS_EXPORT ds_status_t ds_service_discovery_select_worker(ds_service_discovery_t *sd, char *ip,
                                                         size_t ip_cap, int *port, bool *same_node);

/* A ready worker on this host. No host ID: DS_K_INVALID; none ready:
 * DS_K_RUNTIME_ERROR (Yuanrong's codes). */
DS_EXPORT ds_status_t ds_service_discovery_select_same_node_worker(ds_service_discovery_t *sd,
                                                                   char *ip, size_t ip_cap,
                                                                   int *port);

/* Every ready worker, "host:port", split by host: under RANDOM all are in
 * *other; under REQUIRED_SAME_NODE *other is empty. Free both arrays with
 * ds_strings_free. */
DS_EXPORT ds_status_t ds_service_discovery_get_all_workers(ds_service_discovery_t *sd,
                                                           char ***same_host, size_t *n_same,
                                                           char ***other, size_t *n_other);

DS_EXPORT ds_service_affinity_policy_t
ds_service_discovery_affinity_policy(const ds_service_discovery_t *sd);

/* True when the policy is not RANDOM and this host's ID is known (after
 * init). */
DS_EXPORT bool ds_service_discovery_has_host_affinity(const ds_service_discovery_t *sd);

/* This host's ID as resolved by init; "" when unknown. Owned by sd. */
DS_EXPORT const char *ds_service_discovery_host_id(const ds_service_discovery_t *sd);

DS_EXPORT void ds_service_discovery_free(ds_service_discovery_t *sd);

/* Frees an array of n strings the library returned, and the strings. */
DS_EXPORT void ds_strings_free(char **strs, size_t n);

#ifdef __cplusplus
}
#endif

#endif
