/* Worker flags as data: each row names the flag, its type, where it lands in
 * ds_worker_config_t, its default, its limits and its help. Parsing, defaults
 * and --help all come from this one table. */
#include "worker/ops/flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { FLAG_STR, FLAG_INT } flag_type_t;

typedef struct {
    const char *name;
    flag_type_t type;
    size_t offset;
    size_t size; /* buffer size for strings */
    const char *def;
    int64_t min, max;
    const char *help;
} flag_def_t;

#define STR(field, def, help)                                                                      \
    {                                                                                              \
#field, FLAG_STR, offsetof(ds_worker_config_t, field),                                     \
            sizeof(((ds_worker_config_t *)0)->field), def, 0, 0, help                              \
    }
#define INT(field, def, lo, hi, help)                                                              \
    {                                                                                              \
#field, FLAG_INT, offsetof(ds_worker_config_t, field), 0, #def, lo, hi, help               \
    }

static const flag_def_t flags[] = {
    STR(worker_address, "127.0.0.1:31501", "host:port the worker serves TCP clients on"),
    STR(etcd_address, "", "etcd endpoints host:port[,host:port...]; empty = standalone"),
    STR(unix_socket_dir, "",
        "directory of the worker's Unix socket (default /tmp/yr-datasystem-<uid>)"),
    STR(cluster_name, "default", "cluster name (etcd key prefix)"),
    STR(log_level, "info", "debug, info, warn or error"),
    STR(auth_token_file, "", "file holding the shared secret TCP clients and peers must prove"),
    INT(shared_memory_size_mb, 1024, 1, 1 << 20, "size of the shared-memory arena in MiB"),
    INT(max_client_num, 200, 1, 100000,
        "most clients served at once (each may pool up to 70 connections)"),
    INT(node_timeout_s, 10, 1, 3600, "cluster lease: a silent worker is dropped after this"),
    INT(heartbeat_interval_ms, 1000, 50, 600000, "cluster lease keep-alive period"),
    INT(max_frame_mb, 2048, 1, 1 << 20, "largest request data section accepted, MiB"),
    INT(inline_max_kb, 64, 0, 1 << 20,
        "values up to this size travel inline to local clients, KiB"),
    INT(index_value_max_kb, 4096, 0, 1 << 20,
        "local clients read values up to this size straight from the arena index, KiB; 0 = off"),
    INT(busy_poll_us, 0, 0, 1000000,
        "after handling events, poll the sockets this long before sleeping (CPU for latency)"),
    INT(max_pending_subscriptions, 100000, 1, 100000000, "most keys waited on by subscribe-gets"),
    INT(metrics_port, 0, 0, 65535,
        "port of the Prometheus /metrics endpoint on the worker host; 0 = off"),
};
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

static int set_flag(ds_worker_config_t *cfg, const flag_def_t *f, const char *val, char *err,
                    size_t err_cap)
{
    char *dst = (char *)cfg + f->offset;
    if (f->type == FLAG_STR) {
        if (strlen(val) >= f->size) {
            snprintf(err, err_cap, "--%s: value is longer than %zu bytes", f->name, f->size - 1);
            return -1;
        }
        strcpy(dst, val);
        return 0;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end != '\0') {
        snprintf(err, err_cap, "--%s: '%s' is not an integer", f->name, val);
        return -1;
    }
    if (v < f->min || v > f->max) {
        snprintf(err, err_cap, "--%s: %lld is outside %lld..%lld", f->name, v, (long long)f->min,
                 (long long)f->max);
        return -1;
    }
    memcpy(dst, &(int64_t){v}, sizeof(int64_t));
    return 0;
}

int ds__flags_parse(ds_worker_config_t *cfg, int argc, char **argv, char *err, size_t err_cap)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NFLAGS; i++)
        if (set_flag(cfg, &flags[i], flags[i].def, err, err_cap) != 0) return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            ds__flags_usage(argv[0]);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, err_cap, "unexpected argument '%s' (flags look like --name value)", a);
            return -1;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        const flag_def_t *f = NULL;
        for (size_t k = 0; k < NFLAGS; k++)
            if (strlen(flags[k].name) == nl && strncmp(flags[k].name, a, nl) == 0) f = &flags[k];
        if (f == NULL) {
            snprintf(err, err_cap, "unknown flag '--%.*s' (see --help)", (int)nl, a);
            return -1;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (val == NULL) {
            if (i + 1 >= argc) {
                snprintf(err, err_cap, "--%s needs a value", f->name);
                return -1;
            }
            val = argv[++i];
        }
        if (set_flag(cfg, f, val, err, err_cap) != 0) return -1;
    }
    return 0;
}

void ds__flags_usage(const char *prog)
{
    printf("usage: %s [--flag value ...]\n\n", prog);
    for (size_t i = 0; i < NFLAGS; i++)
        printf("  --%-28s %s (default: %s)\n", flags[i].name, flags[i].help,
               *flags[i].def ? flags[i].def : "\"\"");
}
