/* The worker's configuration: one typed table of flags with defaults, help
 * text and limits (flags.c), parsed from the command line. */
#ifndef DS_WORKER_FLAGS_H
#define DS_WORKER_FLAGS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char worker_address[300];
    char etcd_address[1024];
    char unix_socket_dir[200];
    char cluster_name[128];
    char log_level[16];
    char auth_token_file[512];
    int64_t shared_memory_size_mb;
    int64_t max_client_num;
    int64_t node_timeout_s;
    int64_t heartbeat_interval_ms;
    int64_t max_frame_mb;
    int64_t inline_max_kb;
    int64_t index_value_max_kb;
    int64_t busy_poll_us;
    int64_t max_pending_subscriptions;
    int64_t metrics_port;
} ds_worker_config_t;

/* Fills defaults, then parses argv ("--name value" or "--name=value").
 * Returns 0; 1 when --help was printed; -1 with a message naming the bad flag. */
int ds__flags_parse(ds_worker_config_t *cfg, int argc, char **argv, char *err, size_t err_cap);
void ds__flags_usage(const char *prog);

#endif
