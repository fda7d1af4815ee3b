/* datasystem_worker: parses flags, runs the server until SIGTERM/SIGINT or a
 * SHUTDOWN request, exits 0 on a clean stop and 1 with a message otherwise. */
#include "worker/core/server.h"

#include "common/log.h"
#include "common/net.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    ds_worker_config_t cfg;
    char err[512];
    int r = ds__flags_parse(&cfg, argc, argv, err, sizeof(err));
    if (r == 1) return 0;
    if (r != 0) {
        fprintf(stderr, "datasystem_worker: %s\n", err);
        return 2;
    }
    /* The log file first, so that everything after, warnings included, lands there. */
    if (cfg.log_dir[0]) {
        char host[256];
        int port;
        if (ds__parse_hostport(cfg.worker_address, host, sizeof(host), &port, err, sizeof(err)) !=
                0 ||
            ds__log_to_dir(cfg.log_dir, host, port, err, sizeof(err)) != 0) {
            fprintf(stderr, "datasystem_worker: %s\n", err);
            return 2;
        }
    }
    ds__flags_warn_compat(&cfg);
    static ds_server_t srv;
    if (ds__server_init(&srv, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "datasystem_worker: %s\n", err);
        ds__server_destroy(&srv);
        return 1;
    }
    ds__server_run(&srv);
    ds__server_destroy(&srv);
    return 0;
}
