/* A value read by KVClient::Get, read-only. RLatch latches the key at the
 * worker (ds_kv_rlatch): until UnRLatch, a set or delete of the key by any
 * client waits. */
#ifndef DATASYSTEM_CPP_KV_READ_ONLY_BUFFER_H
#define DATASYSTEM_CPP_KV_READ_ONLY_BUFFER_H

#include <cstdint>
#include <memory>

#include "datasystem/object/buffer.h"
#include "datasystem/utils/status.h"

namespace datasystem
{

class DS_CPP_API ReadOnlyBuffer
{
  public:
    ReadOnlyBuffer() = default;
    ~ReadOnlyBuffer() = default;
    int64_t GetSize() const;
    const void *ImmutableData();
    Status RLatch(uint64_t timeout = 60);
    Status UnRLatch();

  private:
    friend class KVClient;
    friend class object_cache::ObjectClientImpl;
    explicit ReadOnlyBuffer(std::shared_ptr<Buffer> &buffer) : buffer_(buffer) {}
    std::shared_ptr<Buffer> buffer_;
};

} // namespace datasystem

#endif
