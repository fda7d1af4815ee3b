/* A network of namespaces for the cluster tests: a "hub" namespace with a
 * bridge (198.18.0.1/24, where etcd listens) and n host namespaces, each
 * joined to the bridge by a veth pair (198.18.0.(11+i)); the addresses
 * exist only inside these namespaces. Names carry the test's pid and a
 * prefix; namespaces of earlier runs whose process is gone are swept first.
 * Header-only (static functions): each test program includes it once. */
#ifndef DS_TESTS_CLUSTER_NETNS_UTIL_H
#define DS_TESTS_CLUSTER_NETNS_UTIL_H

#include "cluster_util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NSU_MAX_HOSTS 4

typedef struct {
    const char *prefix; /* set by the caller: a few letters, unique to the test */
    int n;              /* hosts */
    char hub[64], hosts[NSU_MAX_HOSTS][64];
    char ip[NSU_MAX_HOSTS][32];
    char unavailable[256]; /* why the namespaces could not be made */
} nsu_net_t;

/* Deletes namespaces named prefix<pid>-* whose process is gone. */
static void nsu_sweep_stale(const char *prefix)
{
    FILE *f = popen("ip netns list 2>/dev/null", "r");
    if (f == NULL) return;
    char line[256], fmt[64];
    snprintf(fmt, sizeof(fmt), "%s%%d-%%63s", prefix);
    while (fgets(line, sizeof(line), f)) {
        int pid;
        char rest[64];
        if (sscanf(line, fmt, &pid, rest) != 2) continue;
        if (pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
        dst_sh("ip netns del '%s%d-%s' 2>/dev/null", prefix, pid, rest);
    }
    pclose(f);
}

/* Makes the hub and net->n hosts. 0; -1 with net->unavailable set when the
 * kernel refuses namespaces (the tests then skip), -1 without it when
 * building the network failed. */
static int nsu_make(nsu_net_t *net)
{
    if (geteuid() != 0) {
        snprintf(net->unavailable, sizeof(net->unavailable), "not root (euid %d)", (int)geteuid());
        return -1;
    }
    nsu_sweep_stale(net->prefix);
    snprintf(net->hub, sizeof(net->hub), "%s%d-hub", net->prefix, (int)getpid());
    if (dst_netns_add(net->hub) != 0) {
        snprintf(net->unavailable, sizeof(net->unavailable),
                 "the kernel refused 'ip netns add' (EPERM?)");
        net->hub[0] = '\0';
        return -1;
    }
    const char *hub = net->hub;
    if (dst_sh("ip -n %s link add br0 type bridge && ip -n %s addr add 198.18.0.1/24 dev br0 && "
               "ip -n %s link set br0 up",
               hub, hub, hub) != 0)
        return -1;
    for (int i = 0; i < net->n && i < NSU_MAX_HOSTS; i++) {
        snprintf(net->hosts[i], sizeof(net->hosts[i]), "%s%d-h%d", net->prefix, (int)getpid(),
                 i + 1);
        snprintf(net->ip[i], sizeof(net->ip[i]), "198.18.0.%d", 11 + i);
        if (dst_netns_add(net->hosts[i]) != 0) {
            net->hosts[i][0] = '\0';
            return -1;
        }
        /* The veth pair is made inside the hub, its far end moved straight
         * into the host namespace: nothing touches the root namespace. */
        if (dst_sh("ip -n %s link add vh%d type veth peer name eth0 netns %s && "
                   "ip -n %s link set vh%d master br0 up && "
                   "ip -n %s addr add %s/24 dev eth0 && ip -n %s link set eth0 up",
                   hub, i + 1, net->hosts[i], hub, i + 1, net->hosts[i], net->ip[i],
                   net->hosts[i]) != 0)
            return -1;
    }
    return 0;
}

/* Deletes the hosts and the hub (after their processes are stopped). */
static void nsu_destroy(nsu_net_t *net)
{
    for (int i = 0; i < net->n && i < NSU_MAX_HOSTS; i++)
        if (net->hosts[i][0]) dst_netns_del(net->hosts[i]);
    if (net->hub[0]) dst_netns_del(net->hub);
}

#endif
