/* ServiceDiscovery and CoordinatorServiceDiscovery over the C discovery
 * (ds/service_discovery.h). */
#include "datasystem/utils/service_discovery.h"

#include "ds/service_discovery.h"
#include "internal.h"

namespace datasystem
{

NativeServiceDiscovery::~NativeServiceDiscovery()
{
    ds_service_discovery_free(sd_);
}

Status NativeServiceDiscovery::Init()
{
    if (sd_ == nullptr) return made_;
    return FromC(ds_service_discovery_init(sd_));
}

Status NativeServiceDiscovery::SelectWorker(std::string &workerIp, int &workerPort,
                                            bool *isSameNode, bool *isNoAvailableWorker)
{
    if (isNoAvailableWorker) *isNoAvailableWorker = false;
    if (sd_ == nullptr) return made_;
    char ip[256];
    bool same = false;
    ds_status_t st = ds_service_discovery_select_worker(sd_, ip, sizeof(ip), &workerPort, &same);
    if (st == DS_K_TRY_AGAIN && isNoAvailableWorker) *isNoAvailableWorker = true;
    if (st != DS_K_OK) return FromC(st);
    workerIp = ip;
    if (isSameNode) *isSameNode = same;
    return Status();
}

Status NativeServiceDiscovery::SelectSameNodeWorker(std::string &workerIp, int &workerPort)
{
    if (sd_ == nullptr) return made_;
    char ip[256];
    ds_status_t st = ds_service_discovery_select_same_node_worker(sd_, ip, sizeof(ip), &workerPort);
    if (st != DS_K_OK) return FromC(st);
    workerIp = ip;
    return Status();
}

Status NativeServiceDiscovery::GetAllWorkers(std::vector<std::string> &sameHostAddrs,
                                             std::vector<std::string> &otherAddrs)
{
    sameHostAddrs.clear();
    otherAddrs.clear();
    if (sd_ == nullptr) return made_;
    char **same = nullptr, **other = nullptr;
    size_t ns = 0, no = 0;
    ds_status_t st = ds_service_discovery_get_all_workers(sd_, &same, &ns, &other, &no);
    if (st != DS_K_OK) return FromC(st);
    sameHostAddrs.assign(same, same + ns);
    otherAddrs.assign(other, other + no);
    ds_strings_free(same, ns);
    ds_strings_free(other, no);
    return Status();
}

ServiceAffinityPolicy NativeServiceDiscovery::GetAffinityPolicy() const
{
    return policy_;
}

bool NativeServiceDiscovery::HasHostAffinity() const
{
    return ds_service_discovery_has_host_affinity(sd_);
}

std::string NativeServiceDiscovery::GetHostId() const
{
    return sd_ ? ds_service_discovery_host_id(sd_) : "";
}

static const char *OrNull(const std::string &s)
{
    return s.empty() ? nullptr : s.c_str();
}

static const char *OrNull(const SensitiveValue &s)
{
    return s.Empty() ? nullptr : s.GetData();
}

ServiceDiscovery::ServiceDiscovery(const ServiceDiscoveryOptions &opts)
{
    policy_ = opts.affinityPolicy;
    ds_service_discovery_options_t o;
    ds_service_discovery_options_init(&o);
    o.etcd_address = opts.etcdAddress.c_str();
    o.cluster_name = OrNull(opts.clusterName);
    o.etcd_ca = OrNull(opts.etcdCa);
    o.etcd_cert = OrNull(opts.etcdCert);
    o.etcd_key = OrNull(opts.etcdKey);
    o.etcd_dns_name = OrNull(opts.etcdDNSName);
    o.username = OrNull(opts.username);
    o.password = OrNull(opts.password);
    o.token_refresh_interval_sec = opts.tokenRefreshIntervalSec;
    o.host_id_env_name = OrNull(opts.hostIdEnvName);
    o.affinity_policy = static_cast<ds_service_affinity_policy_t>(opts.affinityPolicy);
    made_ = FromC(ds_service_discovery_new(&o, &sd_));
}

CoordinatorServiceDiscovery::CoordinatorServiceDiscovery(
    const CoordinatorServiceDiscoveryOptions &opts)
{
    policy_ = opts.affinityPolicy;
    made_ = FromC(ds_coordinator_service_discovery_new(
        opts.serviceAddress.c_str(), OrNull(opts.clusterName), OrNull(opts.hostIdEnvName),
        static_cast<ds_service_affinity_policy_t>(opts.affinityPolicy), &sd_));
}

} // namespace datasystem
