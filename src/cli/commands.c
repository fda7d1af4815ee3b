/* The dscli command table: each command with its usage line, its flags (name,
 * short form, whether it takes a value, whether `start` hands it to the
 * worker, default, help) and the function that runs it. */
#include "cli/cli.h"

#include <string.h>

static const cli_flag_t start_flags[] = {
    {"worker", 'w', false, false, NULL, "start a worker (the only kind dscli starts)"},
    {"config_path", 'f', true, false, NULL,
     "start the worker from a Yuanrong-style JSON configuration file (see generate_config)"},
    {"worker_config_path", 'W', true, false, NULL, "the same as --config_path"},
    {"datasystem_home_dir", 'd', true, false, NULL,
     "with -f: put the file's relative paths (./...) under this directory"},
    {"worker_address", 0, true, true, CLI_DEFAULT_WORKER_ADDRESS, "host:port the worker serves on"},
    {"etcd_address", 0, true, true, NULL, "etcd host:port; omit for a standalone worker"},
    {"shared_memory_size_mb", 0, true, true, "1024", "size of the worker's shared memory, MiB"},
    {"unix_socket_dir", 0, true, true, NULL,
     "directory of the worker's Unix socket (default $DS_UNIX_SOCKET_DIR or "
     "/tmp/yr-datasystem-<uid>)"},
    {"auth_token_file", 0, true, true, NULL,
     "file with the shared secret the worker requires of TCP clients"},
    {"log_dir", 0, true, true, NULL,
     "where the worker's log goes (default <socket dir>/logs); file worker-<host>-<port>.log"},
    {"timeout", 't', true, false, CLI_DEFAULT_TIMEOUT_S,
     "seconds to wait for the worker to answer before giving up"},
};

static const cli_flag_t generate_config_flags[] = {
    {"output_path", 'o', true, false, ".", "directory to write worker_config.json to"},
};

static const cli_flag_t stop_flags[] = {
    {"worker_address", 0, true, false, CLI_DEFAULT_WORKER_ADDRESS, "host:port of the worker"},
    {"unix_socket_dir", 0, true, false, NULL, "directory of the worker's Unix socket"},
    {"auth_token_file", 0, true, false, NULL,
     "file with the worker's shared secret (needed over TCP when it has one)"},
    {"timeout", 't', true, false, CLI_DEFAULT_TIMEOUT_S, "seconds to wait for the worker to exit"},
};

static const cli_flag_t status_flags[] = {
    {"worker_address", 0, true, false, CLI_DEFAULT_WORKER_ADDRESS, "host:port of the worker"},
    {"unix_socket_dir", 0, true, false, NULL, "directory of the worker's Unix socket"},
    {"auth_token_file", 0, true, false, NULL,
     "file with the worker's shared secret (needed over TCP when it has one)"},
    {"timeout", 't', true, false, "10", "seconds to wait for the answer"},
};

static const cli_flag_t query_cluster_flags[] = {
    {"etcd_address", 0, true, false, NULL, "etcd host:port[,host:port...] of the cluster"},
    {"cluster_name", 0, true, false, "default", "the workers' --cluster_name"},
    {"timeout", 't', true, false, "5", "seconds to wait for each answer"},
};

#define ROWS(a) a, sizeof(a) / sizeof(a[0])

static const cli_cmd_t commands[] = {
    {"start", "Start a datasystem worker in the background and wait until it serves.",
     "dscli start -w --worker_address H:P [--etcd_address E:P] --shared_memory_size_mb N "
     "[--worker_flag V ...] [-t SECONDS]\n       dscli start -f worker_config.json [-d DIR] "
     "[--worker_flag V ...] [-t SECONDS]",
     ROWS(start_flags), true, cli_cmd_start},
    {"generate_config",
     "Write worker_config.json (Yuanrong's format) with this worker's flags and defaults.",
     "dscli generate_config [-o DIR]", ROWS(generate_config_flags), false, cli_cmd_generate_config},
    {"stop", "Ask the worker on this host to shut down and wait until it has exited.",
     "dscli stop --worker_address H:P [-t SECONDS]", ROWS(stop_flags), false, cli_cmd_stop},
    {"status", "Print the worker's statistics as JSON.", "dscli status --worker_address H:P",
     ROWS(status_flags), false, cli_cmd_status},
    {"query cluster", "Print the cluster's members (from etcd) and whether each answers, as JSON.",
     "dscli query cluster --etcd_address E:P [--cluster_name NAME]", ROWS(query_cluster_flags),
     false, cli_cmd_query_cluster},
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
