/* The result of one key of DevPublish / DevSubscribe (Yuanrong's Future).
 * Copyable; every copy reads the same result. */
#ifndef DATASYSTEM_CPP_HETERO_FUTURE_H
#define DATASYSTEM_CPP_HETERO_FUTURE_H

#include <future>
#include <memory>
#include <string>

#include "datasystem/utils/status.h"

namespace datasystem
{

class DeviceRtEventWrapper;
class DS_CPP_API Future
{
  public:
    /* Waits up to subTimeoutMs (0: does not wait; at most 1,800,000) for the
     * key's operation: its status, or K_FUTURE_TIMEOUT while it still runs.
     * May be called again. */
    Status Get(uint64_t subTimeoutMs = 60000);

  private:
    friend class PromiseWithEvent;
    Future(std::shared_future<Status> future, std::shared_ptr<DeviceRtEventWrapper> event,
           const std::string &objectKey);

    std::shared_future<Status> future_;
    /* Unused here: the copies are complete when future_ is. */
    std::shared_ptr<DeviceRtEventWrapper> event_;
    std::string objectKey_;
};

} // namespace datasystem

#endif
