/* Yuanrong-style configuration files: `dscli start -f FILE` reads one and
 * `dscli generate_config` writes one.
 *
 * The format is Yuanrong Datasystem's worker_config.json: a JSON object with
 * one entry per worker flag, either {"flag": {"value": V, "description": ...}}
 * or a plain {"flag": V}. V may be a string, a number or a boolean; an entry
 * whose value is empty is left out, as Yuanrong's dscli does, so the worker
 * keeps its default. Every entry becomes --flag=V on the worker's command
 * line; flags dscli itself needs (worker_address for the health check,
 * auth_token_file, log_dir) are read from the file too. Flags also given on
 * the command line come after the file's, so they win. The worker warns
 * about (and ignores) entries it does not know, so a newer Yuanrong file
 * works as it is; a value out of range is still refused, naming the flag.
 * `generate_config` writes this worker's flags with Yuanrong's file values
 * for the probe and log paths (./datasystem/...), plus Yuanrong's
 * cluster_config.json and coordinator_config.json. */
#include "cli/cli.h"

#include "config/flags.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The JSON value of one entry as flag text; NULL when empty or not a scalar. */
static char *entry_text(const cJSON *item, char *num, size_t num_cap)
{
    if (cJSON_IsObject(item)) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, "value");
        char *t = v ? entry_text(v, num, num_cap) : NULL;
        if (t == NULL) { /* Yuanrong falls back to "default" when "value" is empty */
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(item, "default");
            t = d && !cJSON_IsObject(d) ? entry_text(d, num, num_cap) : NULL;
        }
        return t;
    }
    if (cJSON_IsString(item)) return item->valuestring[0] ? item->valuestring : NULL;
    if (cJSON_IsBool(item)) return cJSON_IsTrue(item) ? "true" : "false";
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (d == (double)(long long)d)
            snprintf(num, num_cap, "%lld", (long long)d);
        else
            snprintf(num, num_cap, "%.17g", d);
        return num;
    }
    return NULL;
}

static char *read_all(const char *path, char *err, size_t err_cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_cap, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = cap < (16u << 20) ? realloc(buf, cap * 2) : NULL;
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                snprintf(err, err_cap, "%s is too large for a configuration file", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

int cli_config_merge(const cli_cmd_t *cmd, const cli_args_t *a, const char *path,
                     const char *home_dir, cli_args_t *out, char *err, size_t err_cap)
{
    char *text = read_all(path, err, err_cap);
    if (text == NULL) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        snprintf(err, err_cap,
                 "%s is not a JSON object of worker flags (see dscli generate_config)", path);
        cJSON_Delete(root);
        return -1;
    }
    *out = *a;
    out->nfwd = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        const char *name = item->string;
        if (name == NULL || name[0] == '\0' || strcmp(name, "service_type") == 0) continue;
        char num[64];
        const char *val = entry_text(item, num, sizeof(num));
        if (val == NULL) continue;
        /* -d DIR: a relative default such as ./datasystem/logs moves under DIR. */
        char moved[PATH_MAX];
        if (home_dir && strncmp(val, "./", 2) == 0) {
            snprintf(moved, sizeof(moved), "%s/%s", home_dir, val + 2);
            val = moved;
        }
        size_t len = strlen(name) + strlen(val) + 4;
        char *arg = malloc(len); /* lives until dscli exits, like argv */
        if (arg == NULL || out->nfwd >= CLI_MAX_FWD) {
            snprintf(err, err_cap, "%s has too many entries", path);
            free(arg);
            cJSON_Delete(root);
            return -1;
        }
        snprintf(arg, len, "--%s=%s", name, val);
        out->fwd[out->nfwd++] = arg;
        /* dscli's own view (worker address, token, log): the file's value
         * unless the command line gave one. */
        for (size_t i = 0; i < cmd->nflags; i++)
            if (strcmp(cmd->flags[i].name, name) == 0 && cmd->flags[i].takes_value &&
                a->values[i] == NULL)
                out->values[i] = strchr(arg, '=') + 1;
    }
    cJSON_Delete(root);
    for (int i = 0; i < a->nfwd; i++) {
        if (out->nfwd >= CLI_MAX_FWD) {
            snprintf(err, err_cap, "too many worker flags (at most %d arguments)", CLI_MAX_FWD);
            return -1;
        }
        out->fwd[out->nfwd++] = a->fwd[i];
    }
    return 0;
}

int cli_config_get(const char *path, const char *name, char *out, size_t cap, char *err,
                   size_t err_cap)
{
    char *text = read_all(path, err, err_cap);
    if (text == NULL) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        snprintf(err, err_cap, "%s is not a JSON object of worker flags", path);
        cJSON_Delete(root);
        return -1;
    }
    char num[64];
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, name);
    const char *v = item ? entry_text(item, num, sizeof(num)) : NULL;
    if (v) snprintf(out, cap, "%s", v);
    cJSON_Delete(root);
    return v != NULL;
}

/* Yuanrong's worker_config.json gives these flags paths under ./datasystem
 * while the flags themselves default to "" (no file; stderr). */
static const char *const file_defaults[][2] = {
    {"health_check_path", "./datasystem/probe/healthy"},
    {"ready_check_path", "./datasystem/probe/ready"},
    {"log_dir", "./datasystem/logs"},
};

const char *cli_file_default(const char *name)
{
    for (size_t i = 0; i < sizeof(file_defaults) / sizeof(file_defaults[0]); i++)
        if (strcmp(file_defaults[i][0], name) == 0) return file_defaults[i][1];
    return NULL;
}

/* The other two files Yuanrong's generate_config writes, in its shapes: the
 * cluster description of `dscli up` and the coordinator's flags (this system
 * has no coordinator; the file is there so scripts that copy it work). */
static const char cluster_config[] = "{\n"
                                     "    \"ssh_auth\": {\n"
                                     "        \"ssh_private_key\": \"~/.ssh/id_rsa\",\n"
                                     "        \"ssh_user_name\": \"root\"\n"
                                     "    },\n"
                                     "    \"worker_config_path\": \"./worker_config.json\",\n"
                                     "    \"worker_nodes\": [\n"
                                     "        \"127.0.0.1\"\n"
                                     "    ],\n"
                                     "    \"worker_port\": 31501,\n"
                                     "    \"metastore_head_node\": \"\"\n"
                                     "}\n";
static const char coordinator_config[] =
    "{\n"
    "  \"coordinator_address\": {\n"
    "    \"value\": \"127.0.0.1:31511\",\n"
    "    \"description\": \"Address of coordinator in 'host:port' format. This system has no "
    "coordinator: workers coordinate through etcd (etcd_address in worker_config.json).\"\n"
    "  }\n"
    "}\n";

static int write_one(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path)) {
        fprintf(stderr, "[ERROR] Generate failed: the path under %s is too long\n", dir);
        return CLI_EXIT_USAGE;
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "[ERROR] Generate failed: cannot write %s: %s\n", path, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    int r = text ? (fputs(text, f) < 0 ? -1 : 0) : ds__flags_write_config(f, cli_file_default);
    if (fclose(f) != 0 || r != 0) {
        fprintf(stderr, "[ERROR] Generate failed: cannot write %s: %s\n", path, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    printf("[INFO] Configuration file %s has been generated to %s\n", name, path);
    return CLI_EXIT_OK;
}

int cli_cmd_generate_config(const cli_cmd_t *cmd, const cli_args_t *a)
{
    const char *dir = cli_value(cmd, a, "output_path");
    if (dir == NULL) dir = ".";
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "[ERROR] Generate failed: Path is not a directory: %s\n", dir);
        return CLI_EXIT_FAIL;
    }
    int rc;
    if ((rc = write_one(dir, "cluster_config.json", cluster_config)) != CLI_EXIT_OK ||
        (rc = write_one(dir, "worker_config.json", NULL)) != CLI_EXIT_OK ||
        (rc = write_one(dir, "coordinator_config.json", coordinator_config)) != CLI_EXIT_OK)
        return rc;
    printf("[INFO] Configuration generation completed successfully\n");
    return CLI_EXIT_OK;
}
