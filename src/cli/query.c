/* `dscli query cluster`: reads the member registrations from etcd (the same
 * keys the workers keep alive under their leases) and checks whether each
 * member answers on its TCP port, printing one JSON document. */
#include "cli/cli.h"

#include "common/clock.h"
#include "common/etcd.h"
#include "common/net.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_cmd_query_cluster(const cli_cmd_t *cmd, const cli_args_t *a)
{
    const char *etcd = cli_value(cmd, a, "etcd_address");
    const char *name = cli_value(cmd, a, "cluster_name");
    if (etcd == NULL) {
        fprintf(stderr, "dscli query cluster: --etcd_address is required\n");
        return CLI_EXIT_USAGE;
    }
    long timeout_ms;
    char err[512];
    if (cli_parse_seconds(cli_value(cmd, a, "timeout"), &timeout_ms, err, sizeof(err)) != 0) {
        fprintf(stderr, "dscli query cluster: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    ds_etcd_t *e = ds__etcd_new(etcd, err, sizeof(err));
    if (e == NULL) {
        fprintf(stderr, "dscli query cluster: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    char prefix[256];
    snprintf(prefix, sizeof(prefix), "/datasystem/%s/cluster/", name);
    ds_etcd_kv_t *kvs = NULL;
    size_t n = 0;
    if (ds__etcd_range_prefix(e, prefix, &kvs, &n, err, sizeof(err)) != 0) {
        fprintf(stderr, "dscli query cluster: %s\n", err);
        ds__etcd_free(e);
        return CLI_EXIT_FAIL;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "cluster", name);
    cJSON_AddStringToObject(root, "etcd", etcd);
    cJSON *members = cJSON_AddArrayToObject(root, "members");
    for (size_t i = 0; i < n; i++) {
        cJSON *m = cJSON_Parse(kvs[i].value);
        if (m == NULL) {
            m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "key", kvs[i].key);
            cJSON_AddStringToObject(m, "state", "unreadable registration");
        }
        const cJSON *addr = cJSON_GetObjectItemCaseSensitive(m, "address");
        bool reachable = false;
        char host[256];
        int port;
        if (cJSON_IsString(addr) && ds__parse_hostport(addr->valuestring, host, sizeof(host), &port,
                                                       err, sizeof(err)) == 0) {
            int fd = ds__tcp_connect(host, port, (int)timeout_ms, err, sizeof(err));
            reachable = fd >= 0;
            if (fd >= 0) close(fd);
        }
        cJSON_AddBoolToObject(m, "reachable", reachable);
        cJSON_AddItemToArray(members, m);
    }
    cJSON_AddNumberToObject(root, "count", (double)n);
    char *out = cJSON_Print(root);
    printf("%s\n", out ? out : "{}");
    free(out);
    cJSON_Delete(root);
    ds__etcd_kvs_free(kvs, n);
    ds__etcd_free(e);
    return CLI_EXIT_OK;
}
