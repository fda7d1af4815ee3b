/* The whole C++ SDK: DsClient bundles a KV, a heterogeneous (device memory)
 * and an object client on the same connect options. (The C API is separate: #include
 * "ds/kv_client.h".) */
#ifndef DATASYSTEM_CPP_DATASYSTEM_H
#define DATASYSTEM_CPP_DATASYSTEM_H

#include <memory>

#include "datasystem/hetero_client.h"
#include "datasystem/kv_client.h"
#include "datasystem/object_client.h"
#include "datasystem/stream_client.h"
#include "datasystem/utils/service_discovery.h"
#include "datasystem/utils/status.h"

namespace datasystem
{

class DS_CPP_API DsClient
{
  public:
    explicit DsClient(const ConnectOptions &connectOptions = {});
    ~DsClient() = default;
    /* Connects the three clients; the first failure is returned. */
    Status Init();
    Status ShutDown();
    std::shared_ptr<KVClient> KV();
    std::shared_ptr<HeteroClient> Hetero();
    std::shared_ptr<ObjectClient> Object();

  private:
    std::shared_ptr<KVClient> kvClient_;
    std::shared_ptr<HeteroClient> heteroClient_;
    std::shared_ptr<ObjectClient> objectClient_;
};

} // namespace datasystem

#endif
