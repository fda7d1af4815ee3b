/* dscli: the datasystem command-line tool. Looks the command up in the table
 * (commands.c), parses its flags with the table-driven parser (args.c) and
 * runs it. Exit codes: 0 success, 1 the operation failed, 2 bad usage. */
#include "cli/cli.h"

#include "ds/version.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_print_main_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        cli_print_main_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("dscli %s\n", DS_VERSION_STRING);
        return CLI_EXIT_OK;
    }
    /* Two-word commands ("query cluster") come first. */
    int skip = 2;
    const cli_cmd_t *cmd = NULL;
    if (argc >= 3) {
        char two[128];
        snprintf(two, sizeof(two), "%s %s", name, argv[2]);
        if ((cmd = cli_find_command(two)) != NULL) skip = 3;
    }
    if (cmd == NULL) cmd = cli_find_command(name);
    if (cmd == NULL) {
        size_t n;
        const cli_cmd_t *cmds = cli_commands(&n);
        fprintf(stderr,
                "dscli: unknown %s '%s'; commands are:", name[0] == '-' ? "flag" : "command", name);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %s", cmds[i].name);
        fprintf(stderr, " (see dscli --help)\n");
        return CLI_EXIT_USAGE;
    }
    cli_args_t args;
    char err[512];
    int r = cli_parse(cmd, argc - skip, argv + skip, &args, err, sizeof(err));
    if (r == 1) {
        cli_print_usage(stdout, cmd);
        return CLI_EXIT_OK;
    }
    if (r != 0) {
        fprintf(stderr, "dscli %s: %s (see dscli %s --help)\n", cmd->name, err, cmd->name);
        return CLI_EXIT_USAGE;
    }
    return cmd->run(cmd, &args);
}
