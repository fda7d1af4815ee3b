/* The worker's configuration: one typed table of flags with defaults, help
 * text and limits (flags.c), parsed from the command line.
 *
 * The table also holds every flag name of Yuanrong Datasystem's worker
 * (its cli/deploy/conf/worker_config.json): those that mean something here
 * are typed rows, or aliases of ours (unix_domain_socket_dir); the rest are
 * "compat" rows, whose values are checked for their type and otherwise
 * ignored, with one warning each at start (ds__flags_warn_compat). */
#ifndef DS_CONFIG_FLAGS_H
#define DS_CONFIG_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DS_FLAGS_MAX_COMPAT 256

typedef struct {
    char worker_address[300];
    char etcd_address[1024];
    char unix_socket_dir[200];
    char cluster_name[128];
    char host_id_env_name[128];
    char log_level[16]; /* after parsing: debug, info, warn or error */
    char log_dir[512];
    char liveness_check_path[512];
    char health_check_path[512];
    char ready_check_path[512];
    char auth_token_file[512];
    char cluster_secret_file[512];
    char l2_cache_type[32];
    char sfs_path[512];
    char kv_events_config[2048]; /* JSON; "" = no KV event publisher */
    char distributed_disk_path[512];
    char spill_directory[512];
    int64_t shared_memory_size_mb;
    int64_t max_client_num;
    int64_t handshake_timeout_ms;
    int64_t max_handshake_conns;
    int64_t max_handshake_conns_per_peer;
    int64_t max_client_inflight_mb;
    int64_t node_timeout_s;
    int64_t node_dead_timeout_s;
    int64_t heartbeat_interval_ms;
    int64_t liveness_interval_s;
    int64_t minloglevel;
    int64_t v;
    int64_t max_frame_mb;
    int64_t inline_max_kb;
    int64_t index_value_max_kb;
    int64_t busy_poll_us;
    int64_t max_pending_subscriptions;
    int64_t max_pending_subscriptions_per_client;
    int64_t max_read_latches_per_client, max_read_latches, max_read_latch_timeout_ms;
    int64_t sc_shm_threshold_percentage;
    int64_t sc_metrics_log_interval_s;
    int64_t metrics_port;
    int64_t l2_cache_async_write_queue_size;
    int64_t spill_size_limit;
    double eviction_high_watermark_ratio, eviction_low_watermark_ratio;
    double spill_high_watermark_ratio, spill_low_watermark_ratio;
    bool enable_l2_cache_fallback;
    /* planned exit and scale-out (cluster_migrate.c) */
    int64_t data_migrate_rate_limit_mb;
    bool enable_redirect;
    bool enable_memory_rebalance;
    int64_t rebalance_source_usage_percent, rebalance_usage_gap_percent;
    int64_t distributed_disk_sync_interval_ms;
    int64_t distributed_disk_sync_batch_bytes;
    int64_t distributed_disk_compact_min_dead_mb;
    int64_t distributed_disk_compact_dead_percent;
    bool enable_rdma;
    /* copies of a write (cluster/cluster_repl.c) */
    int64_t replica_num;
    bool enable_data_replication;
    /* TLS on the TCP port and between peers (--enable_tls; common/tls.h) */
    bool enable_tls, tls_verify_client;
    char tls_ca[512], tls_cert[512], tls_key[512], tls_passphrase_path[512];
    /* Accepted-but-ignored flags given, each once, in the order first given. */
    const char *compat_given[DS_FLAGS_MAX_COMPAT];
    int ncompat_given;
    /* Flags no row names, each as given (pointing into argv, not
     * NUL-terminated: unknown_len bytes): warned about, never refused. */
    const char *unknown_given[DS_FLAGS_MAX_COMPAT];
    int unknown_len[DS_FLAGS_MAX_COMPAT];
    int nunknown_given;
} ds_worker_config_t;

/* Fills defaults, then parses argv in gflags' syntax: "--name value",
 * "--name=value", the same with one dash, and for a boolean also "--name"
 * alone (true) or "--noname" (false). A name no row knows is kept for a
 * warning (ds__flags_warn_compat) and skipped with its value, so that a
 * newer Yuanrong's config file still starts the worker; a bad value for a
 * known flag is refused. Returns 0; 1 when --help was printed; -1 with a
 * message naming the bad flag. */
int ds__flags_parse(ds_worker_config_t *cfg, int argc, char **argv, char *err, size_t err_cap);
void ds__flags_usage(const char *prog);
/* Logs one warning per unknown flag and per accepted-but-ignored flag that
 * was given. */
void ds__flags_warn_compat(const ds_worker_config_t *cfg);
/* Writes the worker's own flags with their defaults as a configuration file
 * in Yuanrong's worker_config.json shape: {"flag": {"value": "...",
 * "description": "..."}, ...}. file_value (may be NULL) gives the value a
 * flag has in a configuration file where that differs from the flag's own
 * default (NULL = the default), as Yuanrong's file has ./datasystem/...
 * paths where its flags default to "". Returns 0, or -1 on a write error. */
int ds__flags_write_config(FILE *f, const char *(*file_value)(const char *name));
/* True when `name` (without "--") is a flag the worker accepts. */
bool ds__flags_known(const char *name);

#endif
