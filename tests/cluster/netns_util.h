/* Network namespaces for the cluster tests: a "hub" namespace holding a
 * bridge (198.18.0.1/24) and up to CT_NS_MAX host namespaces, each joined
 * to the bridge by a veth pair with address 198.18.0.(11+i). The addresses
 * exist only inside these namespaces. Names carry the test's pid; those of
 * earlier runs whose process is gone are swept first. */
#ifndef DS_TESTS_CLUSTER_NETNS_UTIL_H
#define DS_TESTS_CLUSTER_NETNS_UTIL_H

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

#endif
