/* The dscli command table: each command with its usage line, its flags (name,
 * short form, whether it takes a value, whether `start` hands it to the
 * worker, default, help) and the function that runs it. */
#include "cli/cli.h"

#include <string.h>

/* Flag groups that several commands share, written once so that their help
 * stays the same everywhere. */

/* One flag a line, as in the tables below. */
/* clang-format off */

/* How a client command finds and authenticates to one worker besides its address. */
#define WORKER_REACH_FLAGS                                                                         \
    {"unix_socket_dir", 0, true, false, NULL, "directory of the worker's Unix socket", false},     \
    {"auth_token_file", 0, true, false, NULL,                                                      \
     "file with the worker's shared secret (needed over TCP when it has one)", false}

/* Where a cluster command reads the members from. */
#define CLUSTER_FLAGS                                                                              \
    {"etcd_address", 0, true, false, NULL, "etcd host:port[,host:port...] of the cluster", false}, \
    {"coordinator_address", 0, true, false, NULL,                                                  \
     "Yuanrong's coordinator backend (not part of this system: answers an error)", false},         \
    {"cluster_name", 0, true, false, "default", "the workers' --cluster_name", false}

/* The help of --enable_tls, --tls_ca and --tls_cert for a command that talks
 * to one worker, and for one that checks every member of a cluster. */
#define ONE_WORKER_TLS_ENABLE                                                                      \
    "the worker has --enable_tls: reach its TCP port over TLS (-f: the file's entry)"
#define ONE_WORKER_TLS_CA "with --enable_tls: CA bundle the worker's certificate chains to"
#define ONE_WORKER_TLS_CERT                                                                        \
    "with --enable_tls: certificate to present (a worker with --tls_verify_client asks)"
#define MEMBERS_TLS_ENABLE "the workers have --enable_tls: check each member with a TLS handshake"
#define MEMBERS_TLS_CA "with --enable_tls: CA bundle the workers' certificates chain to"
#define MEMBERS_TLS_CERT                                                                           \
    "with --enable_tls: certificate to present (workers with --tls_verify_client ask)"

/* The TLS client flags; WHO is ONE_WORKER or MEMBERS. */
#define TLS_CLIENT_FLAGS(WHO)                                                                      \
    {"enable_tls", 0, false, false, NULL, WHO##_TLS_ENABLE, false},                                \
    {"tls_ca", 0, true, false, NULL, WHO##_TLS_CA, false},                                         \
    {"tls_cert", 0, true, false, NULL, WHO##_TLS_CERT, false},                                     \
    {"tls_key", 0, true, false, NULL, "with --enable_tls: private key of --tls_cert", false},      \
    {"tls_passphrase_path", 0, true, false, NULL,                                                  \
     "with --enable_tls: file holding the passphrase of an encrypted --tls_key", false}

/* clang-format on */

static const cli_flag_t start_flags[] = {
    {"worker_args", 'w', false, false, NULL,
     "start a worker from the worker flags that follow (Yuanrong's -w/--worker_args)", false},
    {"worker", 0, false, false, NULL, "the same as --worker_args", false},
    {"config_path", 'f', true, false, NULL,
     "start the worker from a Yuanrong-style JSON configuration file (see generate_config)", false},
    {"worker_config_path", 'W', true, false, NULL, "the same as --config_path", false},
    {"datasystem_home_dir", 'd', true, false, NULL,
     "with -f: put the file's relative paths (./...) under this directory", false},
    {"worker_address", 0, true, true, CLI_DEFAULT_WORKER_ADDRESS, "host:port the worker serves on",
     false},
    {"etcd_address", 0, true, true, NULL, "etcd host:port; omit for a standalone worker", false},
    {"shared_memory_size_mb", 0, true, true, "1024", "size of the worker's shared memory, MiB",
     false},
    {"unix_socket_dir", 0, true, true, NULL,
     "directory of the worker's Unix socket (default $DS_UNIX_SOCKET_DIR or "
     "/tmp/yr-datasystem-<uid>)",
     false},
    {"auth_token_file", 0, true, true, NULL,
     "file with the shared secret the worker requires of TCP clients", false},
    {"log_dir", 0, true, true, NULL,
     "where the worker's log goes (default <socket dir>/logs); file worker-<host>-<port>.log",
     false},
    {"timeout", 't', true, false, CLI_DEFAULT_START_TIMEOUT_S,
     "seconds to wait for the worker to be ready before giving up", false},
};

static const cli_flag_t generate_config_flags[] = {
    {"output_path", 'o', true, false, ".",
     "directory to write cluster_config.json, worker_config.json and coordinator_config.json to",
     false},
};

static const cli_flag_t stop_flags[] = {
    {"config_path", 'f', true, false, NULL,
     "stop the worker a configuration file describes (its worker_address, socket and secret)",
     false},
    {"worker_config_path", 0, true, false, NULL, "the same as --config_path", false},
    {"worker_address", 'w', true, false, NULL, "host:port of the worker", false},
    WORKER_REACH_FLAGS,
    TLS_CLIENT_FLAGS(ONE_WORKER),
    {"timeout", 't', true, false, NULL,
     "seconds to wait for the worker to exit (default, as Yuanrong's: 180 + "
     "shared_memory_size_mb / data_migrate_rate_limit_mb)",
     false},
};

static const cli_flag_t status_flags[] = {
    {"worker_address", 0, true, false, CLI_DEFAULT_WORKER_ADDRESS, "host:port of the worker",
     false},
    WORKER_REACH_FLAGS,
    TLS_CLIENT_FLAGS(ONE_WORKER),
    {"timeout", 't', true, false, "10", "seconds to wait for the answer", false},
};

static const cli_flag_t query_cluster_flags[] = {
    CLUSTER_FLAGS,
    TLS_CLIENT_FLAGS(MEMBERS),
    {"timeout", 't', true, false, "5", "seconds to wait for each answer", false},
};

static const cli_flag_t query_route_flags[] = {
    CLUSTER_FLAGS,
    {"keys", 0, true, false, NULL, "the keys to route (one or more arguments)", true},
    TLS_CLIENT_FLAGS(MEMBERS),
    {"timeout", 't', true, false, "5", "seconds to wait for each answer", false},
};

#define ROWS(a) a, sizeof(a) / sizeof(a[0])

static const cli_cmd_t commands[] = {
    {"start", "Start a datasystem worker in the background and wait until it serves.",
     "dscli start [-t SECONDS] -w --worker_address H:P [--etcd_address E:P] "
     "[--worker_flag V ...]\n       dscli start [-t SECONDS] [-d DIR] -f worker_config.json "
     "[--worker_flag V ...]",
     ROWS(start_flags), true, cli_cmd_start},
    {"generate_config",
     "Write cluster_config.json, worker_config.json and coordinator_config.json (Yuanrong's "
     "format).",
     "dscli generate_config [-o DIR]", ROWS(generate_config_flags), false, cli_cmd_generate_config},
    {"stop", "Ask the worker on this host to shut down and wait until it has exited.",
     "dscli stop -w H:P [-t SECONDS]\n       dscli stop -f worker_config.json [-t SECONDS]",
     ROWS(stop_flags), false, cli_cmd_stop},
    {"status", "Print the worker's statistics as JSON.", "dscli status --worker_address H:P",
     ROWS(status_flags), false, cli_cmd_status},
    {"query cluster",
     "Print the cluster's members (from etcd), their health and hash ranges, as Yuanrong's "
     "JSON.",
     "dscli query cluster --etcd_address E:P [--cluster_name NAME]", ROWS(query_cluster_flags),
     false, cli_cmd_query_cluster},
    {"query route",
     "Print which worker each key belongs to, grouped by worker, as Yuanrong's JSON.",
     "dscli query route --etcd_address E:P [--cluster_name NAME] --keys KEY [KEY ...]",
     ROWS(query_route_flags), false, cli_cmd_query_route},
    {"query worker", "Print one worker's statistics and metrics as JSON (same as status).",
     "dscli query worker --worker_address H:P", ROWS(status_flags), false, cli_cmd_status},
};

const cli_cmd_t *cli_commands(size_t *n)
{
    *n = sizeof(commands) / sizeof(commands[0]);
    return commands;
}

const cli_cmd_t *cli_find_command(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}
