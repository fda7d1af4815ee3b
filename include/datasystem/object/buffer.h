/* A value's bytes held by the client: made by Create (writable until
 * published) or returned by a get (pinning the version read; the C API's
 * ds_buffer_t underneath).
 *
 * Writing into a buffer that is already published (one from a get, or one
 * published before) writes a private copy of it; Publish then stores that
 * copy as the key's new value, as ds_kv_set would. Latches order threads of
 * this process that share the buffer; they are not seen by other clients
 * (a KV ReadOnlyBuffer's RLatch is: it latches the key at the worker). */
#ifndef DATASYSTEM_CPP_OBJECT_BUFFER_H
#define DATASYSTEM_CPP_OBJECT_BUFFER_H

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "datasystem/utils/status.h"

namespace datasystem
{
namespace object_cache
{
class ObjectClientImpl;
class BufferState;
} // namespace object_cache
class RemoteH2DHostInfoPb;
class KVClient;
class ObjectClient;
class ReadOnlyBuffer;

class DS_CPP_API Buffer : public std::enable_shared_from_this<Buffer>
{
  public:
    /* An empty buffer: every call on it fails K_INVALID. */
    Buffer();
    Buffer(Buffer &&other) noexcept;
    Buffer &operator=(Buffer &&other) noexcept;
    virtual ~Buffer();
    Buffer(const Buffer &other) = delete;
    Buffer &operator=(const Buffer &other) = delete;

    /* Copies length bytes to the start of the buffer (K_INVALID when longer
     * than the buffer). */
    Status MemoryCopy(const void *data, uint64_t length);
    int64_t GetSize() const;
    /* Makes the contents the key's value. Nested keys: K_NOT_SUPPORTED. */
    Status Publish(const std::unordered_set<std::string> &nestedKeys = {});
    /* Publish, after which this buffer refuses writes (K_OC_ALREADY_SEALED). */
    Status Seal(const std::unordered_set<std::string> &nestedKeys = {});
    /* Exclusive / shared latch on this buffer, waiting up to timeoutSec
     * (K_TRY_AGAIN when it passes). */
    Status WLatch(uint64_t timeoutSec = 60);
    Status RLatch(uint64_t timeoutSec = 60);
    Status UnRLatch();
    Status UnWLatch();
    /* Writable bytes (a private copy once published); nullptr after Seal. */
    void *MutableData();
    const void *ImmutableData();
    /* K_NOT_SUPPORTED: buffers here stay valid until destroyed. */
    Status InvalidateBuffer();
    /* Runs copyFn under the read latch and returns its status. */
    Status CopyDataWithRLatch(const std::function<Status()> &copyFn);
    /* nullptr: no remote host-to-device transfers here. */
    RemoteH2DHostInfoPb *GetRemoteHostInfo();

  private:
    friend class object_cache::ObjectClientImpl;
    friend class ReadOnlyBuffer;
    explicit Buffer(std::shared_ptr<object_cache::BufferState> state);
    std::shared_ptr<object_cache::BufferState> state_;
};

} // namespace datasystem

#endif
