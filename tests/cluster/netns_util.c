/* Network namespaces for the cluster tests (see netns_util.h). */
#include "netns_util.h"

#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NS_PREFIX "dsct"

/* Deletes namespaces of earlier runs whose process is gone. */
static void sweep_stale(void)
{
    FILE *f = popen("ip netns list 2>/dev/null", "r");
    if (f == NULL) return;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        int pid;
        char rest[64];
        if (sscanf(line, NS_PREFIX "%d-%63s", &pid, rest) != 2) continue;
        if (pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
        dst_sh("ip netns del '" NS_PREFIX "%d-%s' 2>/dev/null", pid, rest);
    }
    pclose(f);
}

int ct_netns_make(ct_netns_t *ns, int n)
{
    memset(ns, 0, sizeof(*ns));
    if (n < 1 || n > CT_NS_MAX) return -1;
    if (geteuid() != 0) {
        snprintf(ns->unavailable, sizeof(ns->unavailable), "not root (euid %d)", (int)geteuid());
        return -1;
    }
    sweep_stale();
    snprintf(ns->hub, sizeof(ns->hub), NS_PREFIX "%d-hub", (int)getpid());
    if (dst_netns_add(ns->hub) != 0) {
        snprintf(ns->unavailable, sizeof(ns->unavailable),
                 "the kernel refused 'ip netns add' (EPERM?)");
        ns->hub[0] = '\0';
        return -1;
    }
    if (dst_sh("ip -n %s link add br0 type bridge && ip -n %s addr add 198.18.0.1/24 dev br0 && "
               "ip -n %s link set br0 up",
               ns->hub, ns->hub, ns->hub) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        snprintf(ns->hosts[i], sizeof(ns->hosts[i]), NS_PREFIX "%d-h%d", (int)getpid(), i + 1);
        snprintf(ns->ip[i], sizeof(ns->ip[i]), "198.18.0.%d", 11 + i);
        if (dst_netns_add(ns->hosts[i]) != 0) {
            ns->hosts[i][0] = '\0';
            return -1;
        }
        ns->n = i + 1;
        /* The veth pair is made inside the hub, its far end moved straight
         * into the host namespace: nothing touches the root namespace. */
        if (dst_sh("ip -n %s link add vh%d type veth peer name eth0 netns %s && "
                   "ip -n %s link set vh%d master br0 up && "
                   "ip -n %s addr add %s/24 dev eth0 && ip -n %s link set eth0 up",
                   ns->hub, i + 1, ns->hosts[i], ns->hub, i + 1, ns->hosts[i], ns->ip[i],
                   ns->hosts[i]) != 0)
            return -1;
    }
    return 0;
}

void ct_netns_destroy(ct_netns_t *ns)
{
    for (int i = 0; i < CT_NS_MAX; i++)
        if (ns->hosts[i][0]) dst_netns_del(ns->hosts[i]);
    if (ns->hub[0]) dst_netns_del(ns->hub);
}

static void on_signal(int sig)
{
    dst_cleanup_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

int ct_netns_setup(ct_netns_t *ns, int n, dst_etcd_t *etcd)
{
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    if (ct_netns_make(ns, n) != 0) {
        if (ns->unavailable[0] == '\0') {
            fprintf(stderr, "building the namespace network failed\n");
            return -1;
        }
        return 0; /* every test skips */
    }
    if (dst_netns_enter(ns->hub) != 0 || dst_etcd_start(etcd, "198.18.0.1") != 0) return -1;
    return dst_netns_enter(NULL);
}

int ct_netns_start_workers(ct_netns_t *ns, dst_worker_t *w, int n, const char *flags)
{
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (dst_netns_enter(ns->hosts[i]) != 0 ||
            dst_worker_start_on(&w[i], ns->ip[i], 64, flags) != 0)
            rc = -1;
    return dst_netns_enter(NULL) != 0 ? -1 : rc;
}

void ct_netns_teardown(ct_netns_t *ns, dst_etcd_t *etcd, dst_worker_t *w, int nw)
{
    for (int i = 0; w && i < nw; i++)
        if (w[i].pid > 0) dst_worker_stop_sig(&w[i], SIGINT);
    if (ns->hub[0]) {
        dst_netns_enter(ns->hub);
        dst_etcd_destroy(etcd);
        dst_netns_enter(NULL);
    }
    ct_netns_destroy(ns);
}
