/* The table-driven argument parser of dscli and the usage text generated from
 * the same tables. Accepted forms: --name value, --name=value, gflags' -name
 * value and -name=value, -x value and bare switches; anything else is an
 * error naming the offending argument. */
#include "cli/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int find_long(const cli_cmd_t *cmd, const char *name, size_t len)
{
    for (size_t i = 0; i < cmd->nflags; i++)
        if (strlen(cmd->flags[i].name) == len && strncmp(cmd->flags[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

static int find_short(const cli_cmd_t *cmd, char c)
{
    for (size_t i = 0; i < cmd->nflags; i++)
        if (cmd->flags[i].short_name == c) return (int)i;
    return -1;
}

static int add_fwd(cli_args_t *out, const char *arg, char *err, size_t err_cap)
{
    if (out->nfwd >= CLI_MAX_FWD) {
        snprintf(err, err_cap, "too many worker flags (at most %d arguments)", CLI_MAX_FWD);
        return -1;
    }
    out->fwd[out->nfwd++] = arg;
    return 0;
}

/* A worker flag's value may follow it as the next argument: anything that
 * does not look like a flag, or a negative number. */
static bool value_like(const char *s)
{
    if (s[0] != '-') return true;
    char *end = NULL;
    (void)strtod(s, &end);
    return end != s && *end == '\0';
}

int cli_parse(const cli_cmd_t *cmd, int argc, char **argv, cli_args_t *out, char *err,
              size_t err_cap)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0) {
            out->help = true;
            return 1;
        }
        int fi = -1;
        const char *val = NULL;
        size_t nl = 0;
        bool is_short = a[0] == '-' && a[1] != '\0' && a[1] != '-' && a[2] == '\0';
        if (is_short && (fi = find_short(cmd, a[1])) < 0 && !cmd->passthrough) {
            snprintf(err, err_cap, "unknown flag '%s'", a);
            return -1;
        }
        if (fi < 0 && a[0] == '-' && a[1] != '\0' && !(a[1] == '-' && a[2] == '\0')) {
            /* --name and gflags' -name, each with =value or a following value. */
            const char *name = a + (a[1] == '-' ? 2 : 1);
            const char *eq = strchr(name, '=');
            nl = eq ? (size_t)(eq - name) : strlen(name);
            if (eq) val = eq + 1;
            fi = find_long(cmd, name, nl);
            if (fi < 0) {
                if (!cmd->passthrough) {
                    snprintf(err, err_cap, "unknown flag '%.*s'", (int)(name - a + nl), a);
                    return -1;
                }
                /* Not ours: the worker's, which reports its own errors. A
                 * value is the next argument unless that looks like a flag
                 * (a boolean such as --enable_rdma or --noenable_rdma). */
                if (add_fwd(out, a, err, err_cap) != 0) return -1;
                if (val == NULL && i + 1 < argc && value_like(argv[i + 1]) &&
                    add_fwd(out, argv[++i], err, err_cap) != 0)
                    return -1;
                continue;
            }
        } else if (fi < 0) {
            snprintf(err, err_cap, "unexpected argument '%s' (flags look like --name value)", a);
            return -1;
        }

        const cli_flag_t *f = &cmd->flags[fi];
        if (f->multi) {
            if (val != NULL && *val != '\0' && out->nmulti < CLI_MAX_FWD)
                out->multi[out->nmulti++] = val;
            while (i + 1 < argc && argv[i + 1][0] != '-') {
                if (out->nmulti >= CLI_MAX_FWD) {
                    snprintf(err, err_cap, "--%s takes at most %d values", f->name, CLI_MAX_FWD);
                    return -1;
                }
                out->multi[out->nmulti++] = argv[++i];
            }
            if (out->nmulti == 0) {
                snprintf(err, err_cap, "--%s needs at least one value", f->name);
                return -1;
            }
            out->values[fi] = out->multi[0];
            continue;
        }
        bool forward_as_is = f->forward;
        if (f->takes_value && val == NULL) {
            if (i + 1 >= argc) {
                snprintf(err, err_cap, "--%s needs a value", f->name);
                return -1;
            }
            if (f->forward && add_fwd(out, a, err, err_cap) != 0) return -1;
            val = argv[++i];
            if (f->forward && add_fwd(out, val, err, err_cap) != 0) return -1;
            forward_as_is = false;
        } else if (!f->takes_value && val != NULL) {
            snprintf(err, err_cap, "--%s takes no value", f->name);
            return -1;
        }
        if (forward_as_is && add_fwd(out, a, err, err_cap) != 0) return -1;
        if (f->takes_value && *val == '\0') {
            snprintf(err, err_cap, "--%s needs a non-empty value", f->name);
            return -1;
        }
        out->values[fi] = f->takes_value ? val : "";
    }
    return 0;
}

const char *cli_fwd_value(const cli_args_t *a, const char *name)
{
    const char *found = NULL;
    size_t nl = strlen(name);
    for (int i = 0; i < a->nfwd; i++) {
        const char *s = a->fwd[i];
        if (s[0] != '-') continue;
        s += s[1] == '-' ? 2 : 1;
        if (strncmp(s, name, nl) != 0) continue;
        if (s[nl] == '=')
            found = s + nl + 1;
        else if (s[nl] == '\0' && i + 1 < a->nfwd && value_like(a->fwd[i + 1]))
            found = a->fwd[++i];
    }
    return found;
}

/* gflags' spellings of a boolean: 1 true, 0 false, -1 neither. */
static int bool_word(const char *s)
{
    static const char *const yes[] = {"true", "t", "yes", "y", "1"};
    static const char *const no[] = {"false", "f", "no", "n", "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) return 1;
        if (strcasecmp(s, no[i]) == 0) return 0;
    }
    return -1;
}

bool cli_fwd_bool(const cli_args_t *a, const char *name)
{
    bool on = false;
    size_t nl = strlen(name);
    for (int i = 0; i < a->nfwd; i++) {
        const char *s = a->fwd[i];
        if (s[0] != '-') continue;
        s += s[1] == '-' ? 2 : 1;
        if (strncmp(s, "no", 2) == 0 && strcmp(s + 2, name) == 0) {
            on = false;
            continue;
        }
        if (strncmp(s, name, nl) != 0) continue;
        if (s[nl] == '=') {
            on = bool_word(s + nl + 1) == 1; /* the worker refuses a non-boolean */
        } else if (s[nl] == '\0') {
            /* As the worker reads it: bare is true; a following boolean word is its value. */
            int b = i + 1 < a->nfwd ? bool_word(a->fwd[i + 1]) : -1;
            if (b >= 0) i++;
            on = b != 0;
        }
    }
    return on;
}

const char *cli_value(const cli_cmd_t *cmd, const cli_args_t *a, const char *name)
{
    int fi = find_long(cmd, name, strlen(name));
    if (fi < 0) return NULL;
    return a->values[fi] ? a->values[fi] : cmd->flags[fi].def;
}

bool cli_given(const cli_cmd_t *cmd, const cli_args_t *a, const char *name)
{
    int fi = find_long(cmd, name, strlen(name));
    return fi >= 0 && a->values[fi] != NULL;
}

int cli_parse_seconds(const char *s, long *ms, char *err, size_t err_cap)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v > 0) || v > 86400) {
        snprintf(err, err_cap, "'%s' is not a number of seconds in (0, 86400]", s);
        return -1;
    }
    *ms = (long)(v * 1000 + 0.5);
    if (*ms == 0) *ms = 1;
    return 0;
}

void cli_print_usage(FILE *f, const cli_cmd_t *cmd)
{
    fprintf(f, "usage: %s\n\n%s\n\nflags:\n", cmd->usage, cmd->summary);
    for (size_t i = 0; i < cmd->nflags; i++) {
        const cli_flag_t *fl = &cmd->flags[i];
        char left[64];
        if (fl->short_name)
            snprintf(left, sizeof(left), "-%c, --%s%s", fl->short_name, fl->name,
                     fl->takes_value ? " V" : "");
        else
            snprintf(left, sizeof(left), "    --%s%s", fl->name, fl->takes_value ? " V" : "");
        fprintf(f, "  %-30s %s%s", left, fl->help, fl->multi ? " [V ...]" : "");
        if (fl->def) fprintf(f, " (default: %s)", fl->def);
        fputc('\n', f);
    }
    fprintf(f, "  %-30s %s\n", "-h, --help", "show this help");
    if (cmd->passthrough)
        fprintf(f, "\nAny other --flag value is passed to datasystem_worker unchanged "
                   "(see datasystem_worker --help).\n");
}

void cli_print_main_usage(FILE *f)
{
    size_t n;
    const cli_cmd_t *cmds = cli_commands(&n);
    fprintf(f, "usage: dscli <command> [flags]\n\ncommands:\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "  %-15s %s\n", cmds[i].name, cmds[i].summary);
    fprintf(f, "\nRun 'dscli <command> --help' for a command's flags; 'dscli --version' prints "
               "the version.\n");
}
