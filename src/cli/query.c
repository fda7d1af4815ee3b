/* `dscli query cluster` and `dscli query route`, in Yuanrong's JSON schema
 * (schema_version "1.0"): one JSON object on stdout, exit status 0 only
 * when its status is "OK"; a failure prints {schema_version, cluster_name,
 * status, error} and exits 1.
 *
 * Both read the member registrations from etcd (the keys the workers keep
 * alive under their leases) and build the workers' own consistent-hash ring
 * from them (worker/cluster/ring.h), so hash ranges and routes are where the
 * workers put keys. A member is HEALTHY when it answers on its TCP port
 * (with --enable_tls: completes a TLS handshake there, its certificate
 * checked against --tls_ca), else UNHEALTHY; every registered member is ACTIVE (this system has no
 * joining or leaving states). topology_version is the etcd revision of the
 * newest registration. Ranges are Yuanrong's left-open, right-closed
 * "(start,end]" (start > end wraps past 4294967295); a lone member owns
 * "[0,4294967295]". Yuanrong's --coordinator_address backend does not exist
 * here and is answered with an error. */
#include "cli/cli.h"

#include "common/clock.h"
#include "common/etcd.h"
#include "common/net.h"
#include "common/tls.h"
#include "worker/cluster/ring.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define SCHEMA_VERSION "1.0"

typedef struct {
    char addr[256];
    bool healthy;
} member_t;

static int emit(cJSON *root, int rc)
{
    char *out = cJSON_Print(root);
    printf("%s\n", out ? out : "{}");
    free(out);
    cJSON_Delete(root);
    return rc;
}

static cJSON *head(const char *cluster, const char *status)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema_version", SCHEMA_VERSION);
    cJSON_AddStringToObject(root, "cluster_name", cluster);
    cJSON_AddStringToObject(root, "status", status);
    return root;
}

static int failure(const char *cluster, const char *status, const char *error, int rc)
{
    cJSON *root = head(cluster, status);
    cJSON_AddStringToObject(root, "error", error);
    return emit(root, rc);
}

/* --enable_tls: given as a switch, or a true value. */
static bool tls_wanted(const cli_cmd_t *cmd, const cli_args_t *a)
{
    const char *v = cli_value(cmd, a, "enable_tls");
    if (v == NULL) return false;
    static const char *const yes[] = {"", "true", "t", "yes", "y", "1"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcasecmp(v, yes[i]) == 0) return true;
    return false;
}

static int cmp_member(const void *a, const void *b)
{
    return strcmp(((const member_t *)a)->addr, ((const member_t *)b)->addr);
}

/* Reads the members (sorted by address) and their ring; 0, or the exit
 * status after printing the failure. */
static int load(const cli_cmd_t *cmd, const cli_args_t *a, member_t **out, size_t *nout,
                ds_ring_t **ring, long long *version)
{
    const char *etcd = cli_value(cmd, a, "etcd_address");
    const char *name = cli_value(cmd, a, "cluster_name");
    char err[512];
    if ((etcd == NULL) == (cli_value(cmd, a, "coordinator_address") == NULL))
        return failure(name, "Invalid parameter",
                       "exactly one coordination backend address is required", CLI_EXIT_FAIL);
    if (etcd == NULL)
        return failure(name, "Invalid parameter",
                       "--coordinator_address: this system has no coordinator; its workers "
                       "coordinate through etcd (use --etcd_address)",
                       CLI_EXIT_FAIL);
    long timeout_ms;
    if (cli_parse_seconds(cli_value(cmd, a, "timeout"), &timeout_ms, err, sizeof(err)) != 0)
        return failure(name, "Invalid parameter", err, CLI_EXIT_USAGE);
    ds_etcd_t *e = ds__etcd_new(etcd, err, sizeof(err));
    if (e == NULL) return failure(name, "Invalid parameter", err, CLI_EXIT_FAIL);
    char prefix[256];
    snprintf(prefix, sizeof(prefix), "/datasystem/%s/cluster/", name);
    ds_etcd_kv_t *kvs = NULL;
    size_t n = 0;
    if (ds__etcd_range_prefix(e, prefix, &kvs, &n, err, sizeof(err)) != 0) {
        ds__etcd_free(e);
        return failure(name, "RPC unavailable", err, CLI_EXIT_FAIL);
    }
    ds__etcd_free(e);
    /* Workers with --enable_tls: a member is healthy when it completes a
     * TLS handshake with a certificate of --tls_ca (and takes ours when it
     * asks), not merely when its port accepts. */
    ds_tls_ctx_t *tls = NULL;
    if (tls_wanted(cmd, a)) {
        ds_tls_conf_t tc = {.ca = cli_value(cmd, a, "tls_ca"),
                            .cert = cli_value(cmd, a, "tls_cert"),
                            .key = cli_value(cmd, a, "tls_key"),
                            .passphrase_path = cli_value(cmd, a, "tls_passphrase_path")};
        if ((tls = ds__tls_ctx_new(&tc, err, sizeof(err))) == NULL) {
            ds__etcd_kvs_free(kvs, n);
            return failure(name, "Invalid parameter", err, CLI_EXIT_USAGE);
        }
    }
    member_t *m = calloc(n ? n : 1, sizeof(*m));
    const char **addrs = calloc(n ? n : 1, sizeof(*addrs));
    size_t k = 0;
    *version = 0;
    for (size_t i = 0; m && addrs && i < n; i++) {
        cJSON *reg = cJSON_Parse(kvs[i].value);
        const cJSON *ad = cJSON_GetObjectItemCaseSensitive(reg, "address");
        char host[256];
        int port;
        if (cJSON_IsString(ad) && strlen(ad->valuestring) < sizeof(m[k].addr) &&
            ds__parse_hostport(ad->valuestring, host, sizeof(host), &port, err, sizeof(err)) == 0) {
            snprintf(m[k].addr, sizeof(m[k].addr), "%s", ad->valuestring);
            uint64_t deadline = ds__now_ms() + (uint64_t)timeout_ms;
            int fd = ds__tcp_connect(host, port, (int)timeout_ms, err, sizeof(err));
            m[k].healthy = fd >= 0;
            if (fd >= 0 && tls) {
                ds_tls_t *t = ds__tls_new(tls, fd, err, sizeof(err));
                m[k].healthy = t && ds__tls_handshake(t, deadline, err, sizeof(err)) == 0;
                ds__tls_free(t);
            }
            if (fd >= 0) close(fd);
            if (kvs[i].mod_revision > *version) *version = kvs[i].mod_revision;
            k++;
        }
        cJSON_Delete(reg);
    }
    ds__etcd_kvs_free(kvs, n);
    ds__tls_ctx_free(tls);
    if (m == NULL || addrs == NULL) {
        free(m);
        free(addrs);
        return failure(name, "Runtime error", "out of memory", CLI_EXIT_FAIL);
    }
    qsort(m, k, sizeof(*m), cmp_member);
    for (size_t i = 0; i < k; i++)
        addrs[i] = m[i].addr;
    *ring = ds__ring_build(addrs, k);
    free(addrs);
    if (*ring == NULL) {
        free(m);
        return failure(name, "Runtime error", "out of memory", CLI_EXIT_FAIL);
    }
    *out = m;
    *nout = k;
    return CLI_EXIT_OK;
}

static const char *health_of(const member_t *m, size_t n, const char *addr)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(m[i].addr, addr) == 0) return m[i].healthy ? "HEALTHY" : "UNHEALTHY";
    return "UNKNOWN";
}

/* The (start,end] ranges owner holds: each ring point owns the hashes after
 * the previous point up to itself; neighbouring points of one owner merge. */
static void add_ranges(cJSON *arr, const ds_ring_t *r, const char *owner, size_t nmembers)
{
    size_t np = ds__ring_npoints(r);
    if (nmembers == 1) {
        cJSON_AddItemToArray(arr, cJSON_CreateString("[0,4294967295]"));
        return;
    }
    /* Start at a point whose predecessor belongs to someone else, so merged
     * runs never straddle the walk's start. */
    size_t first = 0;
    const char *o;
    for (size_t i = 0; i < np; i++) {
        (void)ds__ring_point(r, (i + np - 1) % np, &o);
        if (strcmp(o, owner) != 0) {
            first = i;
            break;
        }
    }
    for (size_t s = 0; s < np;) {
        size_t i = (first + s) % np;
        uint32_t h = ds__ring_point(r, i, &o);
        if (strcmp(o, owner) != 0) {
            s++;
            continue;
        }
        uint32_t start = ds__ring_point(r, (i + np - 1) % np, &o);
        while (s + 1 < np) {
            const char *next;
            uint32_t nh = ds__ring_point(r, (first + s + 1) % np, &next);
            if (strcmp(next, owner) != 0) break;
            h = nh;
            s++;
        }
        s++;
        char buf[48];
        snprintf(buf, sizeof(buf), "(%u,%u]", start, h);
        cJSON_AddItemToArray(arr, cJSON_CreateString(buf));
    }
}

int cli_cmd_query_cluster(const cli_cmd_t *cmd, const cli_args_t *a)
{
    member_t *m = NULL;
    size_t n = 0;
    ds_ring_t *ring = NULL;
    long long version = 0;
    int rc = load(cmd, a, &m, &n, &ring, &version);
    if (rc != CLI_EXIT_OK) return rc;
    cJSON *root = head(cli_value(cmd, a, "cluster_name"), "OK");
    cJSON_AddNumberToObject(root, "topology_version", (double)version);
    cJSON *nodes = cJSON_AddArrayToObject(root, "nodes");
    for (size_t i = 0; i < n; i++) {
        cJSON *node = cJSON_CreateObject();
        cJSON_AddStringToObject(node, "worker_address", m[i].addr);
        cJSON_AddStringToObject(node, "health", m[i].healthy ? "HEALTHY" : "UNHEALTHY");
        cJSON_AddStringToObject(node, "state", "ACTIVE");
        add_ranges(cJSON_AddArrayToObject(node, "hash_ranges"), ring, m[i].addr, n);
        cJSON_AddItemToArray(nodes, node);
    }
    ds__ring_free(ring);
    free(m);
    return emit(root, CLI_EXIT_OK);
}

int cli_cmd_query_route(const cli_cmd_t *cmd, const cli_args_t *a)
{
    const char *name = cli_value(cmd, a, "cluster_name");
    if (a->nmulti == 0)
        return failure(name, "Invalid parameter", "--keys is required for route query",
                       CLI_EXIT_FAIL);
    member_t *m = NULL;
    size_t n = 0;
    ds_ring_t *ring = NULL;
    long long version = 0;
    int rc = load(cmd, a, &m, &n, &ring, &version);
    if (rc != CLI_EXIT_OK) return rc;
    if (n == 0) {
        ds__ring_free(ring);
        free(m);
        return failure(name, "Runtime error", "the cluster has no registered worker",
                       CLI_EXIT_FAIL);
    }
    cJSON *root = head(name, "OK");
    cJSON_AddNumberToObject(root, "topology_version", (double)version);
    cJSON *routes = cJSON_AddArrayToObject(root, "routes");
    /* Groups in the order their first key came; keys in input order,
     * repeats kept. */
    for (int i = 0; i < a->nmulti; i++) {
        const char *owner = ds__ring_owner(ring, a->multi[i], strlen(a->multi[i]));
        cJSON *group = NULL, *g;
        cJSON_ArrayForEach(g, routes)
        {
            if (strcmp(cJSON_GetObjectItemCaseSensitive(g, "worker_address")->valuestring, owner) ==
                0)
                group = g;
        }
        if (group == NULL) {
            group = cJSON_CreateObject();
            cJSON_AddStringToObject(group, "worker_address", owner);
            cJSON_AddArrayToObject(group, "keys");
            cJSON_AddStringToObject(group, "health", health_of(m, n, owner));
            cJSON_AddItemToArray(routes, group);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(group, "keys"),
                             cJSON_CreateString(a->multi[i]));
    }
    ds__ring_free(ring);
    free(m);
    return emit(root, CLI_EXIT_OK);
}
