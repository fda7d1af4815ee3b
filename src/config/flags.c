/* Worker flags as data: each row names the flag, its kind, its type, where
 * it lands in ds_worker_config_t, its default, its limits and its help.
 * Parsing, defaults, --help, the compatibility warnings and
 * `dscli generate_config` all come from this one table.
 *
 * Kinds: OURS are this worker's flags; YUANRONG are Yuanrong Datasystem flag
 * names that mean the same thing here (same name, same field); ALIAS are
 * Yuanrong names for one of our flags under another name; COMPAT are the
 * rest of Yuanrong's worker flags (cli/deploy/conf/worker_config.json in its
 * repository): their values are checked for their type, so a typo still
 * fails, and are otherwise ignored with one warning each. */
#include "config/flags.h"

#include "common/log.h"
#include "worker/net/limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { FLAG_STR, FLAG_INT, FLAG_BOOL, FLAG_REAL } flag_type_t;
typedef enum { KIND_OURS, KIND_YUANRONG, KIND_ALIAS, KIND_COMPAT } flag_kind_t;

typedef struct {
    const char *name;
    flag_kind_t kind;
    flag_type_t type;
    size_t offset;
    size_t size; /* buffer size for strings; 0 for COMPAT rows */
    const char *def;
    int64_t min, max;
    const char *help;
} flag_def_t;

#define FIELD_SIZE(field) sizeof(((ds_worker_config_t *)0)->field)
#define STR_AS(kind, name, field, def, help)                                                       \
    {                                                                                              \
        name, kind, FLAG_STR, offsetof(ds_worker_config_t, field), FIELD_SIZE(field), def, 0, 0,   \
            help                                                                                   \
    }
#define INT_AS(kind, field, def, lo, hi, help)                                                     \
    {                                                                                              \
#field, kind, FLAG_INT, offsetof(ds_worker_config_t, field), 0, #def, lo, hi, help         \
    }
#define STR(field, def, help) STR_AS(KIND_OURS, #field, field, def, help)
#define INT(field, def, lo, hi, help) INT_AS(KIND_OURS, field, def, lo, hi, help)
#define YSTR(field, def, help) STR_AS(KIND_YUANRONG, #field, field, def, help)
#define YINT(field, def, lo, hi, help) INT_AS(KIND_YUANRONG, field, def, lo, hi, help)
/* A ratio: the limits are in thousandths. */
#define YREAL(field, def, lo_milli, hi_milli, help)                                                \
    {                                                                                              \
#field, KIND_YUANRONG, FLAG_REAL, offsetof(ds_worker_config_t, field), 0, #def, lo_milli,  \
            hi_milli, help                                                                         \
    }
#define YBOOL(field, def, help)                                                                    \
    {                                                                                              \
#field, KIND_YUANRONG, FLAG_BOOL, offsetof(ds_worker_config_t, field), 0, #def, 0, 0, help \
    }
#define BOOL(field, def, help)                                                                     \
    {                                                                                              \
#field, KIND_OURS, FLAG_BOOL, offsetof(ds_worker_config_t, field), 0, #def, 0, 0, help     \
    }
#define YR(name, type)                                                                             \
    {                                                                                              \
#name, KIND_COMPAT, type, 0, 0, "", 0, 0, NULL                                             \
    }
#define COMPAT_STR FLAG_STR
#define COMPAT_INT FLAG_INT
#define COMPAT_BOOL FLAG_BOOL
#define COMPAT_REAL FLAG_REAL

static const flag_def_t flags[] = {
    YSTR(worker_address, "127.0.0.1:31501", "host:port the worker serves TCP clients on"),
    YSTR(etcd_address, "", "etcd endpoints host:port[,host:port...]; empty = standalone"),
    STR(unix_socket_dir, "",
        "directory of the worker's Unix socket (default /tmp/yr-datasystem-<uid>)"),
    STR_AS(KIND_ALIAS, "unix_domain_socket_dir", unix_socket_dir, "",
           "Yuanrong's name for --unix_socket_dir"),
    YSTR(cluster_name, "default", "cluster name (etcd key prefix)"),
    YSTR(host_id_env_name, "",
         "environment variable holding this host's ID, published in etcd for clients' "
         "same-node service discovery; empty = none"),
    STR(log_level, "",
        "debug, info, warn or error; empty = from --minloglevel and --v (info by default)"),
    YINT(minloglevel, 0, 0, 3, "Yuanrong's level: 0 info, 1 warn, 2 and 3 error"),
    YINT(v, 0, 0, 9, "Yuanrong's verbose level: above 0 logs debug lines too (at --minloglevel 0)"),
    YSTR(log_dir, "",
         "write the log to <dir>/worker-<host>-<port>.log instead of stderr; empty = stderr"),
    YSTR(liveness_check_path, "",
         "file rewritten with 'liveness check success' every --liveness_interval_s while the "
         "worker's loop runs, removed on a clean stop; empty = none"),
    INT(liveness_interval_s, 5, 1, 3600, "how often the liveness file is rewritten"),
    YSTR(health_check_path, "",
         "file holding 'health check success' once the worker has started (~/ = home); "
         "removed on a clean stop; empty = none (dscli start fills it)"),
    YSTR(ready_check_path, "",
         "file holding 'health check success' once the worker accepts clients (~/ = home); "
         "removed on a clean stop; empty = none (dscli start fills it)"),
    STR(auth_token_file, "", "file holding the shared secret TCP clients and peers must prove"),
    STR(cluster_secret_file, "",
        "file holding the cluster secret peers prove to each other (one line; a second line "
        "is also accepted, for rotation); empty = member keys published in etcd"),
    YINT(shared_memory_size_mb, 1024, 1, 1 << 20, "size of the shared-memory arena in MiB"),
    YINT(max_client_num, 200, 1, 100000,
         "most clients served at once (each may pool up to " DS_STRINGIFY(
             DS_CONNS_PER_CLIENT) " connections)"),
    INT(handshake_timeout_ms, 5000, 0, 3600000,
        "a connection that has not completed HELLO (and its authentication) this long after "
        "connecting is closed; 0 = no deadline"),
    INT(max_handshake_conns, 1024, 1, 1000000,
        "most connections waiting for HELLO at once; past it the oldest is closed for a new one"),
    INT(max_handshake_conns_per_peer, 128, 1, 1000000,
        "most connections waiting for HELLO from one TCP address (or local uid); past it that "
        "peer's oldest is closed for a new one"),
    INT(max_client_inflight_mb, 0, 0, 1 << 20,
        "most MiB of SET data a client may have in flight (being received or not yet answered, "
        "all its connections together) beyond its first such SET; past it a SET is refused "
        "with K_OUT_OF_MEMORY; 0 = half of --shared_memory_size_mb"),
    YINT(node_timeout_s, 10, 1, 3600, "cluster lease: a silent worker is dropped after this"),
    YINT(node_dead_timeout_s, 300, 1, 100000000,
         "Yuanrong's grace before a lost worker counts as dead; here a member whose lease "
         "lapses (--node_timeout_s) leaves the ring at once, so this is only checked and logged"),
    YINT(heartbeat_interval_ms, 1000, 50, 600000, "cluster lease keep-alive period"),
    INT(replica_num, 1, 1, 8,
        "memory replicas: a write is answered once this many workers hold it (capped at the "
        "member count), so losing fewer than this many loses nothing it acknowledged; lost "
        "copies are made again elsewhere (docs/replication.md)"),
    YBOOL(enable_data_replication, true,
          "a value a get pulled from another worker stays as a local hot copy (evictable, "
          "dropped when the key is written again or deleted anywhere), so the next get of it "
          "is served locally"),
    INT(max_frame_mb, 2048, 1, 1 << 20, "largest request data section accepted, MiB"),
    INT(inline_max_kb, 64, 0, 1 << 20,
        "values up to this size travel inline to local clients, KiB"),
    INT(index_value_max_kb, 4096, 0, 1 << 20,
        "local clients read values up to this size straight from the arena index, KiB; 0 = off"),
    INT(busy_poll_us, 200, 0, 1000000,
        "longest the worker polls its sockets for the next request before sleeping; the "
        "window adapts to how soon requests arrive and stops when the CPU has other work "
        "(CPU for latency); 0 = a plain epoll loop: no polling, parting, load checks or "
        "lane watching"),
    INT(max_pending_subscriptions, 100000, 1, 100000000, "most keys waited on by subscribe-gets"),
    INT(max_pending_subscriptions_per_client, 0, 0, 100000000,
        "most keys one client session waits on by subscribe-gets, so one client cannot take "
        "every slot; 0 = a quarter of --max_pending_subscriptions"),
    INT(max_read_latches_per_client, 10000, 1, 100000000,
        "most read latches one client (session) holds; past it RLATCH answers K_OUT_OF_MEMORY"),
    INT(max_read_latches, 100000, 1, 100000000,
        "most read latches the worker holds for all clients; past it RLATCH answers "
        "K_OUT_OF_MEMORY"),
    INT(max_read_latch_timeout_ms, 600000, 1, INT32_MAX,
        "longest timeout a read latch may ask for; a longer one is K_INVALID"),
    YINT(sc_shm_threshold_percentage, 100, 1, 100,
         "most of the shared memory, in percent, that streams' pages may take; a send past it "
         "waits for acks like one past its stream's max_stream_size"),
    YINT(sc_metrics_log_interval_s, 60, 1, INT32_MAX,
         "Interval between logging stream metrics (streams, producers, consumers, page bytes, "
         "parked waits; at info level, once streams are in use). Default to 60s"),
    INT(metrics_port, 0, 0, 65535,
        "port of the Prometheus /metrics endpoint on the worker host; 0 = off"),
    YSTR(l2_cache_type, "none",
         "second-level cache behind the arena: none, sfs (a directory, --sfs_path) or "
         "distributed_disk (a log per worker, --distributed_disk_path); the "
         "WRITE_THROUGH / WRITE_BACK write modes persist there and a get that misses memory "
         "reads it"),
    YSTR(sfs_path, "", "directory of the sfs L2 cache (one file per object); created if missing"),
    YSTR(kv_events_config, "",
         "KV event publisher, a JSON object: bind_endpoint (ZMQ PUB address, required), "
         "backend_id (required), block_size, dp_rank, queue_capacity (65536), topic; "
         "empty = off. Publishes vLLM's KV event batches for keys stored and removed"),
    YSTR(distributed_disk_path, "",
         "root of the distributed_disk L2 cache: each worker appends to its own log, "
         "<path>/<cluster_name>/<worker_address>/data.log; created if missing"),
    YINT(distributed_disk_sync_interval_ms, 1000, 0, 60000,
         "distributed_disk group commit: longest a written record waits for its fsync while "
         "more writes are queued (an empty queue syncs at once)"),
    YINT(distributed_disk_sync_batch_bytes, 33554432, 1, INT64_MAX,
         "distributed_disk group commit: bytes written that force an fsync"),
    INT(distributed_disk_compact_min_dead_mb, 64, 0, 1 << 30,
        "distributed_disk: compact the log once this many MiB of it are dead (overwritten, "
        "deleted or expired) ..."),
    INT(distributed_disk_compact_dead_percent, 50, 1, 100,
        "... and dead bytes are at least this share of the log"),
    YINT(l2_cache_async_write_queue_size, 1000, 1, 10000000,
         "most objects waiting for the disk I/O thread (write-back, write-through, L2 reads and "
         "deletes); a write past it answers K_WRITE_BACK_QUEUE_FULL"),
    YSTR(spill_directory, "",
         "directory that takes objects which cannot be evicted when the arena passes "
         "--eviction_high_watermark_ratio; "
         "gets bring them back; emptied at start; empty = no spill"),
    YINT(spill_size_limit, 0, 0, INT64_MAX,
         "most bytes kept in --spill_directory; 0 = 95% of its file system's free space"),
    YBOOL(enable_l2_cache_fallback, true,
          "in a cluster on a shared --sfs_path: a get that no live worker can serve reads the "
          "object from the shared directory (a dead worker's objects stay readable)"),
    YREAL(eviction_high_watermark_ratio, 0.9, 20, 1000,
          "arena use (ratio) past which background eviction and spill start, between requests; "
          "must be above --eviction_low_watermark_ratio (0.02-1.0)"),
    YREAL(eviction_low_watermark_ratio, 0.8, 10, 990,
          "arena use (ratio) background eviction and spill bring it down to (0.01-0.99)"),
    YREAL(spill_high_watermark_ratio, 0.8, 20, 1000,
          "spill use (ratio of --spill_size_limit) past which background spilling pauses, "
          "keeping the rest for writes that find the arena full; must be above "
          "--spill_low_watermark_ratio (0.02-1.0)"),
    YREAL(spill_low_watermark_ratio, 0.6, 10, 990,
          "spill use (ratio of --spill_size_limit) under which paused background spilling "
          "resumes (0.01-0.99)"),
    YBOOL(enable_rdma, false,
          "move values between workers, and to remote clients that ask for it (enable_ucx), "
          "with UCX (its transports as UCX_TLS allows: RDMA verbs, shared memory, TCP) "
          "instead of the worker's own TCP stream; a worker that cannot start UCX refuses to "
          "start"),
    BOOL(enable_tls, false,
         "TLS on the TCP port (clients and peers) and on this worker's connections to peers, "
         "with --tls_cert, --tls_key and --tls_ca; Unix-socket clients are unaffected; cannot be "
         "combined with --enable_rdma (UCX transfers are not encrypted)"),
    STR(tls_cert, "",
        "--enable_tls: PEM certificate (chain) this worker presents to clients and "
        "peers"),
    STR(tls_key, "", "--enable_tls: PEM private key of --tls_cert"),
    STR(tls_ca, "",
        "--enable_tls: PEM CA bundle that peers' (and, with --tls_verify_client, clients') "
        "certificates must chain to; empty = the system's CAs"),
    STR(tls_passphrase_path, "",
        "--enable_tls: file holding the passphrase of an encrypted --tls_key; empty = none"),
    BOOL(tls_verify_client, false,
         "--enable_tls: TCP clients must present a certificate that chains to --tls_ca"),
    YR(coordinator_address, COMPAT_STR),
    YR(etcd_username, COMPAT_STR),
    YR(etcd_password, COMPAT_STR),
    YR(metastore_address, COMPAT_STR),
    YR(start_metastore_service, COMPAT_BOOL),
    YR(sc_local_cache_memory_size_mb, COMPAT_INT),
    YR(oc_shm_threshold_percentage, COMPAT_INT),
    YR(memory_alignment, COMPAT_INT),
    YR(ipc_through_shared_memory, COMPAT_BOOL),
    YR(shared_memory_worker_port, COMPAT_INT),
    YR(enable_distributed_master, COMPAT_BOOL),
    YR(sc_regular_socket_num, COMPAT_INT),
    YR(sc_stream_socket_num, COMPAT_INT),
    YR(oc_worker_worker_direct_port, COMPAT_INT),
    YR(sc_worker_worker_direct_port, COMPAT_INT),
    YR(oc_worker_worker_pool_size, COMPAT_INT),
    YR(sc_worker_worker_pool_size, COMPAT_INT),
    YR(sc_gc_interval_ms, COMPAT_INT),
    YR(sc_scan_interval_ms, COMPAT_INT),
    YR(sc_cache_pages, COMPAT_INT),
    YR(sc_scan_thread_num, COMPAT_INT),
    YR(sc_scan_num_buckets, COMPAT_INT),
    YR(sc_shared_page_size_mb, COMPAT_INT),
    YR(sc_shared_page_group_count, COMPAT_INT),
    YR(sc_thread_num, COMPAT_INT),
    YR(master_sc_thread_num, COMPAT_INT),
    YR(payload_nocopy_threshold, COMPAT_INT),
    YR(oc_thread_num, COMPAT_INT),
    YR(eviction_reserve_mem_threshold_mb, COMPAT_INT),
    YR(client_reconnect_wait_s, COMPAT_INT),
    YR(page_size, COMPAT_INT),
    YR(etcd_meta_pool_size, COMPAT_INT),
    YR(spill_thread_num, COMPAT_INT),
    YR(spill_file_max_size_mb, COMPAT_INT),
    YR(spill_file_open_limit, COMPAT_INT),
    YR(spill_enable_readahead, COMPAT_BOOL),
    YBOOL(enable_memory_rebalance, false,
          "when a worker joins the cluster, workers whose shared memory use is high move objects "
          "toward the least used one (docs/operations.md, scale-out)"),
    YINT(rebalance_source_usage_percent, 70, 1, 100,
         "shared memory use (percent) at or above which a worker moves objects away "
         "(--enable_memory_rebalance)"),
    YINT(rebalance_usage_gap_percent, 20, 1, 100,
         "least gap (percentage points) between a source's and the target's shared memory use "
         "for a move (--enable_memory_rebalance)"),
    YR(rebalance_task_report_grace_ms, COMPAT_INT),
    YR(log_monitor, COMPAT_BOOL),
    YR(json_log_monitor, COMPAT_BOOL),
    YR(log_monitor_exporter, COMPAT_STR),
    YR(log_monitor_interval_ms, COMPAT_INT),
    YR(system_access_key, COMPAT_STR),
    YR(system_secret_key, COMPAT_STR),
    YR(system_data_key, COMPAT_STR),
    YR(tenant_access_key, COMPAT_STR),
    YR(tenant_secret_key, COMPAT_STR),
    YR(request_expire_time_s, COMPAT_INT),
    YR(oc_metadata_header, COMPAT_BOOL),
    YR(l2_cache_delete_thread_num, COMPAT_INT),
    YR(object_del_retry_delay_sec, COMPAT_INT),
    YR(rocksdb_store_dir, COMPAT_STR),
    YR(rocksdb_max_open_file, COMPAT_INT),
    YR(rocksdb_background_threads, COMPAT_INT),
    YR(rocksdb_write_mode, COMPAT_STR),
    YR(arena_per_tenant, COMPAT_INT),
    YR(shared_memory_populate, COMPAT_BOOL),
    YR(memory_reclamation_time_second, COMPAT_INT),
    YR(async_delete, COMPAT_BOOL),
    YR(add_node_wait_time_s, COMPAT_INT),
    YR(auto_del_dead_node, COMPAT_BOOL),
    YR(client_dead_timeout_s, COMPAT_INT),
    YR(monitor_config_file, COMPAT_STR),
    YR(enable_thp, COMPAT_BOOL),
    YR(enable_worker_worker_batch_get, COMPAT_BOOL),
    YR(batch_get_threshold_mb, COMPAT_INT),
    YR(enable_reconciliation, COMPAT_BOOL),
    YR(l2_cache_async_write_rate_limit_mb, COMPAT_INT),
    YINT(data_migrate_rate_limit_mb, 40, 1, 1 << 20,
         "MB/s a worker leaving the cluster (dscli stop) moves its objects to the others at"),
    YR(data_migrate_urma_transport_mode, COMPAT_STR),
    YR(check_async_queue_empty_time_s, COMPAT_INT),
    YR(obs_access_key, COMPAT_STR),
    YR(obs_secret_key, COMPAT_STR),
    YR(obs_endpoint, COMPAT_STR),
    YR(obs_bucket, COMPAT_STR),
    YR(obs_https_enabled, COMPAT_BOOL),
    YR(distributed_disk_max_data_file_size_mb, COMPAT_INT),
    YR(distributed_disk_compact_interval_s, COMPAT_INT),
    YR(rpc_thread_num, COMPAT_INT),
    YR(log_filename, COMPAT_STR),
    YR(log_async_queue_size, COMPAT_INT),
    YR(max_log_size, COMPAT_INT),
    YR(max_log_file_num, COMPAT_INT),
    YR(log_retention_day, COMPAT_INT),
    YR(log_async, COMPAT_BOOL),
    YR(log_compress, COMPAT_BOOL),
    YR(logbufsecs, COMPAT_INT),
    YR(log_only_write_info_file, COMPAT_BOOL),
    YR(request_sample_rate, COMPAT_STR),
    YR(access_sample_rate, COMPAT_STR),
    YR(diagnostic_sample_rate, COMPAT_STR),
    YR(slow_log_process_slower_than, COMPAT_INT),
    YR(slow_log_rpc_slower_than, COMPAT_INT),
    YR(enable_curve_zmq, COMPAT_BOOL),
    YR(zmq_client_io_context, COMPAT_INT),
    YR(zmq_client_io_thread, COMPAT_INT),
    YR(io_thread_nice, COMPAT_INT),
    YR(enable_sched_runtime, COMPAT_BOOL),
    YR(zmq_chunk_sz, COMPAT_INT),
    YR(use_brpc, COMPAT_BOOL),
    YR(brpc_event_dispatcher_num, COMPAT_INT),
    YR(brpc_server_num_threads, COMPAT_INT),
    YR(brpc_max_concurrency, COMPAT_INT),
    YR(curve_key_dir, COMPAT_STR),
    YR(enable_etcd_auth, COMPAT_BOOL),
    YR(etcd_target_name_override, COMPAT_STR),
    YR(etcd_ca, COMPAT_STR),
    YR(etcd_cert, COMPAT_STR),
    YR(etcd_key, COMPAT_STR),
    YR(etcd_passphrase_path, COMPAT_STR),
    YR(max_rpc_session_num, COMPAT_INT),
    YR(enable_huge_tlb, COMPAT_BOOL),
    YR(enable_fallocate, COMPAT_BOOL),
    YR(enable_lossless_data_exit_mode, COMPAT_BOOL),
    YR(enable_p2p_transfer, COMPAT_BOOL),
    YR(enable_cloud_service_token_rotation, COMPAT_BOOL),
    YR(enable_meta_replica, COMPAT_BOOL),
    YR(enable_urma, COMPAT_BOOL),
    YR(enable_ub_numa_affinity, COMPAT_BOOL),
    YR(ub_numa_rr_type, COMPAT_INT),
    YR(ub_numa_src_chip_policy, COMPAT_INT),
    YR(ub_numa_inflight_wr_diff_threshold, COMPAT_INT),
    YR(shared_memory_distribution_policy, COMPAT_STR),
    YR(urma_connection_size, COMPAT_INT),
    YR(urma_event_mode, COMPAT_BOOL),
    YR(urma_poll_size, COMPAT_INT),
    YR(urma_max_write_size_mb, COMPAT_INT),
    YR(urma_register_whole_arena, COMPAT_BOOL),
    YR(enable_pipeline_h2d, COMPAT_BOOL),
    YR(pipeline_h2d_thread_num, COMPAT_INT),
    YR(enable_transport_fallback, COMPAT_BOOL),
    YR(logfile_mode, COMPAT_INT),
    YR(enable_perf_trace_log, COMPAT_BOOL),
    YR(oc_shm_transfer_threshold_kb, COMPAT_INT),
    YR(remote_send_thread_num, COMPAT_INT),
    YR(shared_disk_arena_per_tenant, COMPAT_INT),
    YR(shared_disk_directory, COMPAT_STR),
    YR(shared_disk_size_mb, COMPAT_INT),
    YR(stream_idle_time_s, COMPAT_INT),
    YR(skip_authenticate, COMPAT_BOOL),
    YBOOL(enable_redirect, true,
          "a reader whose key moved (a worker leaving or joining) asks again where it lives "
          "instead of reporting it missing"),
    YR(enable_metadata_recovery, COMPAT_BOOL),
    YR(rdma_register_whole_arena, COMPAT_BOOL),
    YR(enable_stream_data_verification, COMPAT_BOOL),
    YR(oc_io_from_l2cache_need_metadata, COMPAT_BOOL),
    YR(oc_worker_aggregate_merge_size, COMPAT_INT),
    YR(oc_worker_aggregate_single_max, COMPAT_INT),
    YR(oc_worker_worker_parallel_min, COMPAT_INT),
    YR(oc_worker_worker_parallel_nums, COMPAT_INT),
    YR(sc_encrypt_secret_key, COMPAT_STR),
    YR(iam_kit, COMPAT_STR),
    YR(yuanrong_iam_url, COMPAT_STR),
    YR(yuanrong_iam_ca, COMPAT_STR),
    YR(yuanrong_iam_cert, COMPAT_STR),
    YR(yuanrong_iam_key, COMPAT_STR),
    YR(yuanrong_iam_passphrase, COMPAT_STR),
    YR(remote_h2d_device_ids, COMPAT_STR),
    YR(remote_h2d_link_type, COMPAT_STR),
    YR(remote_h2d_hccs_buffer_pool, COMPAT_STR),
    YR(urma_failover_success_rate_ratio, COMPAT_REAL),
    YR(urma_failover_min_sample_count, COMPAT_INT),
};
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

static const flag_def_t *find_flag(const char *name, size_t len)
{
    for (size_t k = 0; k < NFLAGS; k++)
        if (strlen(flags[k].name) == len && strncmp(flags[k].name, name, len) == 0)
            return &flags[k];
    return NULL;
}

bool ds__flags_known(const char *name)
{
    return find_flag(name, strlen(name)) != NULL;
}

/* gflags' spellings of a boolean. 1 true, 0 false, -1 neither. */
static int parse_bool(const char *s)
{
    static const char *const yes[] = {"true", "t", "yes", "y", "1"};
    static const char *const no[] = {"false", "f", "no", "n", "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) return 1;
        if (strcasecmp(s, no[i]) == 0) return 0;
    }
    return -1;
}

/* Checks val against the row's type; for rows with a field, stores it. */
static int set_flag(ds_worker_config_t *cfg, const flag_def_t *f, const char *val, char *err,
                    size_t err_cap)
{
    char *dst = (char *)cfg + f->offset;
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case FLAG_STR:
        if (f->kind == KIND_COMPAT) return 0;
        if (strlen(val) >= f->size) {
            snprintf(err, err_cap, "--%s: value is longer than %zu bytes", f->name, f->size - 1);
            return -1;
        }
        strcpy(dst, val);
        return 0;
    case FLAG_BOOL: {
        int b = parse_bool(val);
        if (b < 0) {
            snprintf(err, err_cap, "--%s: '%s' is not true or false", f->name, val);
            return -1;
        }
        if (f->kind != KIND_COMPAT) memcpy(dst, &(bool){b == 1}, sizeof(bool));
        return 0;
    }
    case FLAG_REAL: {
        double d = strtod(val, &end);
        if (errno || end == val || *end != '\0') {
            snprintf(err, err_cap, "--%s: '%s' is not a number", f->name, val);
            return -1;
        }
        if (f->kind == KIND_COMPAT) return 0;
        if (!(d * 1000.0 >= (double)f->min && d * 1000.0 <= (double)f->max)) {
            snprintf(err, err_cap, "--%s: %s is outside %g..%g", f->name, val,
                     (double)f->min / 1000.0, (double)f->max / 1000.0);
            return -1;
        }
        memcpy(dst, &d, sizeof(d));
        return 0;
    }
    case FLAG_INT:
        break;
    }
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end != '\0') {
        snprintf(err, err_cap, "--%s: '%s' is not an integer", f->name, val);
        return -1;
    }
    if (f->kind == KIND_COMPAT) return 0;
    if (v < f->min || v > f->max) {
        snprintf(err, err_cap, "--%s: %lld is outside %lld..%lld", f->name, v, (long long)f->min,
                 (long long)f->max);
        return -1;
    }
    memcpy(dst, &(int64_t){v}, sizeof(int64_t));
    return 0;
}

static void note_compat(ds_worker_config_t *cfg, const flag_def_t *f)
{
    for (int i = 0; i < cfg->ncompat_given; i++)
        if (cfg->compat_given[i] == f->name) return;
    if (cfg->ncompat_given < DS_FLAGS_MAX_COMPAT) cfg->compat_given[cfg->ncompat_given++] = f->name;
}

/* Settles what depends on several flags once all are parsed. */
static int finish(ds_worker_config_t *cfg, char *err, size_t err_cap)
{
    if (cfg->eviction_high_watermark_ratio <= cfg->eviction_low_watermark_ratio) {
        snprintf(err, err_cap,
                 "--eviction_high_watermark_ratio %g must be greater than "
                 "--eviction_low_watermark_ratio %g",
                 cfg->eviction_high_watermark_ratio, cfg->eviction_low_watermark_ratio);
        return -1;
    }
    if (cfg->spill_high_watermark_ratio <= cfg->spill_low_watermark_ratio) {
        snprintf(err, err_cap,
                 "--spill_high_watermark_ratio %g must be greater than "
                 "--spill_low_watermark_ratio %g",
                 cfg->spill_high_watermark_ratio, cfg->spill_low_watermark_ratio);
        return -1;
    }
    if (cfg->enable_tls && (cfg->tls_cert[0] == '\0' || cfg->tls_key[0] == '\0')) {
        snprintf(err, err_cap, "--enable_tls needs --tls_cert and --tls_key");
        return -1;
    }
    if (cfg->enable_tls && cfg->enable_rdma) {
        snprintf(err, err_cap,
                 "--enable_tls cannot be combined with --enable_rdma: UCX moves values "
                 "unencrypted, outside the TLS connections");
        return -1;
    }
    if (!cfg->enable_tls && cfg->tls_verify_client) {
        snprintf(err, err_cap, "--tls_verify_client needs --enable_tls");
        return -1;
    }
    if (cfg->log_level[0] == '\0') {
        static const char *const by_min[] = {"info", "warn", "error", "error"};
        const char *lvl = by_min[cfg->minloglevel];
        if (cfg->minloglevel == 0 && cfg->v > 0) lvl = "debug";
        snprintf(cfg->log_level, sizeof(cfg->log_level), "%s", lvl);
    }
    return 0;
}

int ds__flags_parse(ds_worker_config_t *cfg, int argc, char **argv, char *err, size_t err_cap)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NFLAGS; i++)
        if (flags[i].kind != KIND_COMPAT && flags[i].kind != KIND_ALIAS &&
            set_flag(cfg, &flags[i], flags[i].def, err, err_cap) != 0)
            return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "-help") == 0) {
            ds__flags_usage(argv[0]);
            return 1;
        }
        /* gflags syntax: -name or --name, each with =value, a following
         * value, or (booleans) nothing or a no prefix. */
        if (a[0] != '-' || a[1] == '\0' || (a[1] == '-' && a[2] == '\0')) {
            snprintf(err, err_cap, "unexpected argument '%s' (flags look like --name value)", a);
            return -1;
        }
        a += a[1] == '-' ? 2 : 1;
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        const char *val = eq ? eq + 1 : NULL;
        const flag_def_t *f = find_flag(a, nl);
        if (f == NULL && val == NULL && nl > 2 && strncmp(a, "no", 2) == 0) {
            const flag_def_t *b = find_flag(a + 2, nl - 2);
            if (b != NULL && b->type == FLAG_BOOL) {
                f = b;
                val = "false";
            }
        }
        if (f == NULL) {
            /* A flag this worker does not know (say, one a newer Yuanrong
             * added): warned about at start, never a refusal, so a
             * deployment's config file keeps working. A value without '='
             * is the next argument unless that looks like a flag. */
            if (val == NULL && i + 1 < argc && argv[i + 1][0] != '-') i++;
            if (cfg->nunknown_given < DS_FLAGS_MAX_COMPAT) {
                cfg->unknown_given[cfg->nunknown_given] = a;
                cfg->unknown_len[cfg->nunknown_given++] = (int)nl;
            }
            continue;
        }
        if (val == NULL && f->type == FLAG_BOOL) {
            /* gflags style: a bare boolean is true; a following true/false is its value. */
            if (i + 1 < argc && parse_bool(argv[i + 1]) >= 0)
                val = argv[++i];
            else
                val = "true";
        } else if (val == NULL) {
            if (i + 1 >= argc) {
                snprintf(err, err_cap, "--%s needs a value", f->name);
                return -1;
            }
            val = argv[++i];
        }
        if (set_flag(cfg, f, val, err, err_cap) != 0) return -1;
        if (f->kind == KIND_COMPAT) note_compat(cfg, f);
    }
    return finish(cfg, err, err_cap);
}

void ds__flags_warn_compat(const ds_worker_config_t *cfg)
{
    for (int i = 0; i < cfg->nunknown_given; i++)
        DS_LOG_WARN("unknown flag '--%.*s' ignored (not a flag of this worker or of the Yuanrong "
                    "Datasystem release it follows; see --help)",
                    cfg->unknown_len[i], cfg->unknown_given[i]);
    for (int i = 0; i < cfg->ncompat_given; i++)
        DS_LOG_WARN("--%s is accepted for compatibility with Yuanrong Datasystem and has no "
                    "effect here",
                    cfg->compat_given[i]);
}

void ds__flags_usage(const char *prog)
{
    printf("usage: %s [--flag value ...]\n\n", prog);
    for (size_t i = 0; i < NFLAGS; i++) {
        if (flags[i].kind == KIND_COMPAT) continue;
        printf("  --%-28s %s (default: %s)\n", flags[i].name, flags[i].help,
               *flags[i].def ? flags[i].def : "\"\"");
    }
    printf("\nAccepted for compatibility with Yuanrong Datasystem, with no effect here (each "
           "given one is\nnamed in a warning at start):\n ");
    int col = 1;
    for (size_t i = 0; i < NFLAGS; i++) {
        if (flags[i].kind != KIND_COMPAT) continue;
        int w = (int)strlen(flags[i].name) + 3;
        if (col + w > 100) {
            printf("\n ");
            col = 1;
        }
        printf(" --%s", flags[i].name);
        col += w;
    }
    printf("\n");
}

/* JSON string body: the table's texts are plain ASCII, but quote anyway. */
static void put_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

int ds__flags_write_config(FILE *f, const char *(*file_value)(const char *name))
{
    fprintf(f, "{\n");
    bool first = true;
    for (size_t i = 0; i < NFLAGS; i++) {
        if (flags[i].kind == KIND_COMPAT || flags[i].kind == KIND_ALIAS) continue;
        fprintf(f, "%s    ", first ? "" : ",\n");
        put_json_str(f, flags[i].name);
        fprintf(f, ": {\n        \"value\": ");
        const char *v = file_value ? file_value(flags[i].name) : NULL;
        put_json_str(f, v ? v : flags[i].def);
        fprintf(f, ",\n        \"description\": ");
        put_json_str(f, flags[i].help);
        fprintf(f, "\n    }");
        first = false;
    }
    fprintf(f, "\n}\n");
    return ferror(f) ? -1 : 0;
}
