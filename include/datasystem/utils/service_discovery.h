/* Service discovery (Yuanrong's include/datasystem/utils/service_discovery.h),
 * a thin layer over the C API (ds/service_discovery.h): ServiceDiscovery
 * reads the workers' records in etcd; CoordinatorServiceDiscovery reads them
 * from a service at serviceAddress that answers etcd's v3 KV range API.
 *
 * Give one to ConnectOptions::serviceDiscovery: the client connects to the
 * worker it selects and, with enableCrossNodeConnection, fails over to
 * another worker it lists when its worker stops answering (ds/kv_client.h,
 * enable_cross_node_connection). A discovery of your own (any other
 * IServiceDiscovery) is asked once, at Init, with no failover.
 *
 * Not supported: TLS to etcd (etcdCa, etcdCert, etcdKey, etcdDNSName make
 * Init fail K_NOT_SUPPORTED) and CoordinatorServiceDiscoveryOptions'
 * coordinatorDiscovery provider (serviceAddress names the service).
 * Thread safety: as the C discovery, usable from many threads. */
#ifndef DATASYSTEM_CPP_SERVICE_DISCOVERY_H
#define DATASYSTEM_CPP_SERVICE_DISCOVERY_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datasystem/utils/sensitive_value.h"
#include "datasystem/utils/status.h"

struct ds_service_discovery;

namespace datasystem
{

const uint32_t DEFAULT_ETCD_TOKEN_REFRESH_INTERVAL = 30; // seconds

enum class ServiceAffinityPolicy : uint8_t {
    PREFERRED_SAME_NODE = 0, // a worker on this node when one is ready, else any
    REQUIRED_SAME_NODE = 1,  // only a worker on this node
    RANDOM = 2,              // any ready worker
};

class DS_CPP_API IServiceDiscovery
{
  public:
    virtual ~IServiceDiscovery() = default;
    virtual Status Init() = 0;
    /* A ready worker; *isSameNode: on this node; *isNoAvailableWorker: none
     * was ready (K_TRY_AGAIN). */
    virtual Status SelectWorker(std::string &workerIp, int &workerPort, bool *isSameNode = nullptr,
                                bool *isNoAvailableWorker = nullptr) = 0;
    virtual Status SelectSameNodeWorker(std::string &workerIp, int &workerPort) = 0;
    /* Every ready worker ("host:port"), split by host as the policy says. */
    virtual Status GetAllWorkers(std::vector<std::string> &sameHostAddrs,
                                 std::vector<std::string> &otherAddrs) = 0;
    virtual ServiceAffinityPolicy GetAffinityPolicy() const = 0;
    virtual bool HasHostAffinity() const = 0;
    virtual std::string GetHostId() const
    {
        return "";
    }
};

struct ServiceDiscoveryOptions {
    std::string etcdAddress;
    std::string clusterName = ""; // "" = "default", the worker's default --cluster_name
    SensitiveValue etcdCa = "";
    SensitiveValue etcdCert = "";
    SensitiveValue etcdKey = "";
    std::string etcdDNSName = "";
    std::string username = "";
    SensitiveValue password = "";
    uint32_t tokenRefreshIntervalSec = DEFAULT_ETCD_TOKEN_REFRESH_INTERVAL;
    std::string hostIdEnvName = "";
    ServiceAffinityPolicy affinityPolicy = ServiceAffinityPolicy::PREFERRED_SAME_NODE;
};

/* What both discoveries of this SDK share: the C discovery they wrap. */
class DS_CPP_API NativeServiceDiscovery : public IServiceDiscovery
{
  public:
    ~NativeServiceDiscovery() override;
    Status Init() override;
    Status SelectWorker(std::string &workerIp, int &workerPort, bool *isSameNode = nullptr,
                        bool *isNoAvailableWorker = nullptr) override;
    Status SelectSameNodeWorker(std::string &workerIp, int &workerPort) override;
    Status GetAllWorkers(std::vector<std::string> &sameHostAddrs,
                         std::vector<std::string> &otherAddrs) override;
    ServiceAffinityPolicy GetAffinityPolicy() const override;
    bool HasHostAffinity() const override;
    std::string GetHostId() const override;
    /* The C discovery (ds/service_discovery.h); nullptr when its options
     * were refused (Init then says why). Owned by this object. */
    ds_service_discovery *Native() const
    {
        return sd_;
    }

  protected:
    NativeServiceDiscovery() = default;
    ds_service_discovery *sd_ = nullptr;
    Status made_; // the construction's status
    ServiceAffinityPolicy policy_ = ServiceAffinityPolicy::PREFERRED_SAME_NODE;
};

class DS_CPP_API ServiceDiscovery : public NativeServiceDiscovery
{
  public:
    explicit ServiceDiscovery(const ServiceDiscoveryOptions &opts);
};

struct CoordinatorServiceDiscoveryOptions {
    std::string serviceAddress;
    std::string clusterName = "";
    std::string hostIdEnvName = "";
    ServiceAffinityPolicy affinityPolicy = ServiceAffinityPolicy::PREFERRED_SAME_NODE;
};

class DS_CPP_API CoordinatorServiceDiscovery : public NativeServiceDiscovery
{
  public:
    explicit CoordinatorServiceDiscovery(const CoordinatorServiceDiscoveryOptions &opts);
};

} // namespace datasystem

#endif
