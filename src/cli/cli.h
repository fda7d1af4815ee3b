/* dscli internals: the command table (commands and their flags as data), the
 * argument parser driven by it, and the commands themselves.
 *
 * Every command's flags are rows of a table; parsing, validation and --help
 * all read the same rows. `start` additionally hands flags it does not know
 * to the worker unchanged, since the worker owns its own flag table and
 * reports its own errors. */
#ifndef DS_CLI_CLI_H
#define DS_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CLI_MAX_FLAGS 16
#define CLI_MAX_FWD 256

#define CLI_DEFAULT_WORKER_ADDRESS "127.0.0.1:31501"
/* Yuanrong's dscli: start waits 90 s; stop waits 180 s plus the time to
 * migrate the arena (shared_memory_size_mb / data_migrate_rate_limit_mb). */
#define CLI_DEFAULT_START_TIMEOUT_S "90"
#define CLI_STOP_BASE_TIMEOUT_S 180
#define CLI_DEFAULT_SHM_MB 1024
#define CLI_DEFAULT_MIGRATE_MB 40

typedef struct {
    const char *name; /* long name, without the leading "--" */
    char short_name;  /* e.g. 't' for -t; 0 = none */
    bool takes_value;
    bool forward; /* start: also passed to the worker */
    const char *def;
    const char *help;
    bool multi; /* takes every following argument up to the next flag (--keys a b c) */
} cli_flag_t;

typedef struct {
    const char *values[CLI_MAX_FLAGS]; /* by flag row; NULL = not given, "" for a given switch */
    bool help;
    int nfwd;
    const char *fwd[CLI_MAX_FWD]; /* the worker's argv tail, in the order given */
    int nmulti;
    const char *multi[CLI_MAX_FWD]; /* the values of the (one) multi flag */
} cli_args_t;

typedef struct cli_cmd {
    const char *name;
    const char *summary;
    const char *usage;
    const cli_flag_t *flags;
    size_t nflags;
    bool passthrough; /* unknown --flags go to the worker */
    int (*run)(const struct cli_cmd *cmd, const cli_args_t *a);
} cli_cmd_t;

/* Exit codes. */
#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

/* The command table (commands.c). */
const cli_cmd_t *cli_commands(size_t *n);
const cli_cmd_t *cli_find_command(const char *name);

/* Parses argv[0..argc) (the arguments after the command name). Returns 0,
 * 1 when --help was asked for, or -1 with a message in err. */
int cli_parse(const cli_cmd_t *cmd, int argc, char **argv, cli_args_t *out, char *err,
              size_t err_cap);
/* The value of flag `name`: given, else its default (NULL when neither). */
const char *cli_value(const cli_cmd_t *cmd, const cli_args_t *a, const char *name);
bool cli_given(const cli_cmd_t *cmd, const cli_args_t *a, const char *name);
/* Parses a positive number of seconds into milliseconds; -1 with a message. */
int cli_parse_seconds(const char *s, long *ms, char *err, size_t err_cap);

void cli_print_usage(FILE *f, const cli_cmd_t *cmd);
void cli_print_main_usage(FILE *f);

/* Where datasystem_worker is: $DS_WORKER_BIN, the directory of `self` (the
 * dscli executable), ../worker/ relative to it (the build tree), then $PATH.
 * Returns 0 with the path in out, or -1 with the places tried in err. */
int cli_find_worker(const char *self, char *out, size_t cap, char *err, size_t err_cap);
/* The last max_lines lines of path from byte offset `from` on, into out. */
void cli_log_tail(const char *path, long from, int max_lines, char *out, size_t cap);

/* Commands. */
int cli_cmd_start(const cli_cmd_t *cmd, const cli_args_t *a);
int cli_cmd_stop(const cli_cmd_t *cmd, const cli_args_t *a);
int cli_cmd_status(const cli_cmd_t *cmd, const cli_args_t *a);
int cli_cmd_query_cluster(const cli_cmd_t *cmd, const cli_args_t *a);
int cli_cmd_query_route(const cli_cmd_t *cmd, const cli_args_t *a);
int cli_cmd_generate_config(const cli_cmd_t *cmd, const cli_args_t *a);

/* config.c: Yuanrong-style worker configuration files (start -f). Loads
 * path into out: a copy of a whose worker flags are the file's entries
 * (--flag=value) followed by a's own, and whose dscli values (worker_address,
 * auth_token_file, log_dir) come from the file where a has none. home_dir
 * (NULL = none) replaces a leading "./" in the file's values. 0, or -1 with a
 * message. */
int cli_config_merge(const cli_cmd_t *cmd, const cli_args_t *a, const char *path,
                     const char *home_dir, cli_args_t *out, char *err, size_t err_cap);
/* The value of one entry of a configuration file (either shape), into out;
 * 1 when present and non-empty, 0 when not, -1 with a message when the file
 * cannot be read. */
int cli_config_get(const char *path, const char *name, char *out, size_t cap, char *err,
                   size_t err_cap);
/* The value a worker flag is given in fwd (--name=v, -name=v, --name v or
 * -name v; the last one wins), or NULL. */
const char *cli_fwd_value(const cli_args_t *a, const char *name);
/* Whether a boolean worker flag is on in fwd (--name, --name=true, --name
 * true, --noname; gflags' spellings; the last one wins). */
bool cli_fwd_bool(const cli_args_t *a, const char *name);
/* The value Yuanrong's configuration file gives a flag whose own default
 * differs (the ./datasystem/... paths), or NULL. */
const char *cli_file_default(const char *name);

#endif
