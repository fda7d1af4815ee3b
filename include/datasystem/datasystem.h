/* The whole C++ SDK: DsClient bundles a KV and an object client on the same
 * connect options. (The C API is separate: #include "ds/kv_client.h".) */
#ifndef DATASYSTEM_CPP_DATASYSTEM_H
#define DATASYSTEM_CPP_DATASYSTEM_H

#include <memory>

#include "datasystem/kv_client.h"
#include "datasystem/object_client.h"
#include "datasystem/stream_client.h"
#include "datasystem/utils/service_discovery.h"
#include "datasystem/utils/status.h"

namespace datasystem
{

/* Heterogeneous (device memory) client: not available in this SDK. */
class HeteroClient;

class DS_CPP_API DsClient
{
  public:
    explicit DsClient(const ConnectOptions &connectOptions = {});
    ~DsClient() = default;
    /* Connects both clients; the first failure is returned. */
    Status Init();
    Status ShutDown();
    std::shared_ptr<KVClient> KV();
    /* Always nullptr: no device memory here. */
    std::shared_ptr<HeteroClient> Hetero();
    std::shared_ptr<ObjectClient> Object();

  private:
    std::shared_ptr<KVClient> kvClient_;
    std::shared_ptr<HeteroClient> heteroClient_;
    std::shared_ptr<ObjectClient> objectClient_;
};

} // namespace datasystem

#endif
