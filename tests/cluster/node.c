/* ct_node: a one-shot client for the namespace tests, run inside a network
 * namespace with `ip netns exec NS ct_node ...` so that the client's own
 * traffic starts in that namespace. Values are dst_fill patterns, checked on
 * read.
 *
 *   ct_node [-t local|tcp] [-d sockdir] HOST:PORT set KEY SIZE SEED
 *   ct_node [-t local|tcp] [-d sockdir] HOST:PORT get KEY SIZE SEED WAIT_MS
 *   ct_node HOST:PORT members N TIMEOUT_MS
 *
 * get prints "ok MS" (exit 0), "missing MS" (exit 3) or the error (exit 1),
 * MS being how long the get itself took; members exits 0 once the worker
 * sees N members. */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int usage(void)
{
    fprintf(stderr, "usage: ct_node [-t local|tcp] [-d sockdir] HOST:PORT "
                    "set KEY SIZE SEED | get KEY SIZE SEED WAIT_MS | members N TIMEOUT_MS\n");
    return 2;
}

int main(int argc, char **argv)
{
    ds_transport_t t = DS_TRANSPORT_TCP;
    const char *sockdir = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "t:d:")) != -1) {
        if (opt == 't')
            t = strcmp(optarg, "local") == 0 ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP;
        else if (opt == 'd')
            sockdir = optarg;
        else
            return usage();
    }
    if (argc - optind < 2) return usage();
    dst_worker_t w;
    memset(&w, 0, sizeof(w));
    char err[256];
    if (ds__parse_hostport(argv[optind], w.host, sizeof(w.host), &w.port, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (sockdir) snprintf(w.sockdir, sizeof(w.sockdir), "%s", sockdir);
    const char *cmd = argv[optind + 1];
    char **a = argv + optind + 2;
    int na = argc - optind - 2;
    if (strcmp(cmd, "members") == 0 && na == 2)
        return dst_wait_members(&w, atoi(a[0]), atoi(a[1])) >= 0 ? 0 : 1;
    if (!((strcmp(cmd, "set") == 0 && na == 3) || (strcmp(cmd, "get") == 0 && na == 4)))
        return usage();
    size_t size = strtoull(a[1], NULL, 10);
    uint64_t seed = strtoull(a[2], NULL, 10);
    ds_client_t *c = dst_connect(&w, t);
    if (c == NULL) return 1;
    int rc = 1;
    if (strcmp(cmd, "set") == 0) {
        uint8_t *v = malloc(size ? size : 1);
        dst_fill(v, size, seed);
        ds_status_t st = v ? ds_kv_set(c, a[0], v, size, NULL) : DS_K_OUT_OF_MEMORY;
        if (st == DS_K_OK)
            rc = 0;
        else
            fprintf(stderr, "set %s: %d %s\n", a[0], (int)st, ds_last_error());
        free(v);
    } else {
        void *v = NULL;
        size_t got = 0;
        uint64_t t0 = ds__now_ms();
        ds_status_t st = ds_kv_get(c, a[0], atoi(a[3]), &v, &got);
        unsigned long long dt = (unsigned long long)(ds__now_ms() - t0);
        if (st == DS_K_OK && got == size && dst_check(v, got, seed)) {
            printf("ok %llu\n", dt);
            rc = 0;
        } else if (st == DS_K_NOT_FOUND) {
            printf("missing %llu\n", dt);
            rc = 3;
        } else {
            printf("error %d %zu bytes (want %zu) %s\n", (int)st, got, size,
                   st == DS_K_OK ? "pattern mismatch" : ds_last_error());
        }
        ds_free(v);
    }
    ds_client_close(c);
    return rc;
}
