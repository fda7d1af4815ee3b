/* Internals of the C++ SDK (libdatasystem_cpp): the shared connection state
 * behind KVClient and ObjectClient, the state behind a Buffer, and the
 * conversions from C API results. */
#ifndef DS_CPP_INTERNAL_H
#define DS_CPP_INTERNAL_H

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "datasystem/kv_client.h"
#include "datasystem/object_client.h"
#include "ds/kv_client.h"

namespace datasystem
{

/* The C call's code with its message (ds_last_error, this thread's). */
Status FromC(ds_status_t st);
/* K_NOT_SUPPORTED naming the method and why. */
Status NotSupported(const char *method, const char *why);

namespace object_cache
{

/* A Buffer's state. Owns the C buffer (released with it, which the C API
 * allows after the client closed). A write to a published buffer goes to
 * copy; dirty then says Publish must store copy. */
class BufferState
{
  public:
    ~BufferState();
    std::shared_ptr<ObjectClientImpl> client;
    ds_buffer_t *buf = nullptr;
    std::string key;
    bool published = false;
    bool sealed = false;
    bool dirty = false;
    std::vector<unsigned char> copy;
    std::shared_timed_mutex latch;
    /* Who holds the latch, so that an unlatch without a latch is an error
     * rather than undefined behaviour. */
    std::atomic<int> readers{0};
    std::atomic<bool> writer{false};
};

/* One connection to a worker (a ds_client_t), shared by a client object
 * and the buffers it handed out. */
class ObjectClientImpl
{
  public:
    explicit ObjectClientImpl(const ConnectOptions &opts) : opts_(opts) {}
    ~ObjectClientImpl();
    Status Connect(const char *who);
    Status ShutDown();
    /* The C client, or nullptr (with *st set) before Init or after ShutDown. */
    ds_client_t *Get(Status *st, const char *method) const;

    static Buffer MakeBuffer(std::shared_ptr<BufferState> state)
    {
        return Buffer(std::move(state));
    }
    static std::shared_ptr<Buffer> MakeSharedBuffer(std::shared_ptr<BufferState> state)
    {
        return std::shared_ptr<Buffer>(new Buffer(std::move(state)));
    }
    static const std::shared_ptr<BufferState> &StateOf(const Buffer &b)
    {
        return b.state_;
    }
    static ReadOnlyBuffer MakeReadOnly(std::shared_ptr<Buffer> b)
    {
        return ReadOnlyBuffer(b);
    }
    /* Wraps a C buffer (taking it over) of client self. */
    static std::shared_ptr<BufferState> Wrap(const std::shared_ptr<ObjectClientImpl> &self,
                                             ds_buffer_t *buf, bool published);

  private:
    ConnectOptions opts_;
    std::atomic<ds_client_t *> c_{nullptr};
};

} // namespace object_cache

/* Key arrays for the C calls: pointers into the strings, valid while keys is. */
std::vector<const char *> KeyPtrs(const std::vector<std::string> &keys);

} // namespace datasystem

#endif
