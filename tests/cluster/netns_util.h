/* Network namespaces for the cluster tests: a "hub" namespace holding a
 * bridge (198.18.0.1/24) and up to CT_NS_MAX host namespaces, each joined
 * to the bridge by a veth pair with address 198.18.0.(11+i). The addresses
 * exist only inside these namespaces. Names carry the test's pid; those of
 * earlier runs whose process is gone are swept first. */
#ifndef DS_TESTS_CLUSTER_NETNS_UTIL_H
#define DS_TESTS_CLUSTER_NETNS_UTIL_H

#include "harness.h"

#define CT_NS_MAX 4

typedef struct {
    char hub[64];
    char hosts[CT_NS_MAX][64];
    char ip[CT_NS_MAX][32];
    int n;
    char unavailable[256]; /* why namespaces could not be made: the tests skip */
} ct_netns_t;

/* Builds the hub and n host namespaces. 0 when built; -1 on failure, with
 * ns->unavailable set when the kernel or the user cannot make namespaces
 * at all (not root, EPERM), empty when building failed part way. */
int ct_netns_make(ct_netns_t *ns, int n);
/* Deletes the namespaces made (those not made are skipped). */
void ct_netns_destroy(ct_netns_t *ns);

/* A suite's setup: SIGTERM and SIGINT stop the harness's processes (so
 * that the namespaces go too), then ct_netns_make(ns, n) and etcd started
 * in the hub on 198.18.0.1; returns in the test's own namespace. 0 when
 * ready, and 0 with ns->unavailable set when namespaces cannot be made
 * (every test skips); -1 on failure. */
int ct_netns_setup(ct_netns_t *ns, int n, dst_etcd_t *etcd);
/* Starts w[i] for i < n in host i's namespace on its address, 64 MiB each,
 * with flags; returns in the test's own namespace. 0 or -1. */
int ct_netns_start_workers(ct_netns_t *ns, dst_worker_t *w, int n, const char *flags);
/* Stops the running workers of w[0..nw-1] (w may be NULL) with SIGINT, then
 * the hub's etcd, and deletes the namespaces. */
void ct_netns_teardown(ct_netns_t *ns, dst_etcd_t *etcd, dst_worker_t *w, int nw);

/* Skips the calling test, saying why, when namespaces are unavailable. */
#define CT_NETNS_SKIP_IF_UNAVAILABLE(ns)                                                           \
    do {                                                                                           \
        if ((ns)->unavailable[0]) {                                                                \
            fprintf(stderr, "  SKIPPED: network namespaces unavailable: %s\n", (ns)->unavailable); \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#endif
