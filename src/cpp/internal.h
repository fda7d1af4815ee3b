/* Internals of the C++ SDK (libdatasystem_cpp): the shared connection state
 * behind KVClient and ObjectClient, the state behind a Buffer, and the
 * conversions from C API results. */
#ifndef DS_CPP_INTERNAL_H
#define DS_CPP_INTERNAL_H

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "datasystem/kv_client.h"
#include "datasystem/object_client.h"
#include "ds/hetero_client.h"
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
    /* hetero: connect a heterogeneous client (ds_hetero_t), whose KV
     * client Get returns; HeteroClient's connections are these. */
    Status Connect(const char *who, bool hetero = false);
    Status ShutDown();
    /* The C client, or nullptr (with *st set) before Init or after ShutDown. */
    ds_client_t *Get(Status *st, const char *method) const;
    /* The heterogeneous C client, likewise. */
    ds_hetero_t *GetHetero(Status *st, const char *method) const;
    /* Work on a thread of the SDK's own (an async call's tail) holds the
     * connection with Enter, which gives the C client (nullptr when it is
     * shut down), and gives it back with Leave; ShutDown waits for it. */
    ds_client_t *Enter();
    void Leave();

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
    std::atomic<ds_hetero_t *> h_{nullptr}; /* owns c_ when set */
    std::mutex busyMu_;
    std::condition_variable idle_;
    int busy_ = 0;         /* Enter without Leave; under busyMu_ */
    bool closing_ = false; /* under busyMu_ */
};

} // namespace object_cache

/* Key arrays for the C calls: pointers into the strings, valid while keys is. */
std::vector<const char *> KeyPtrs(const std::vector<std::string> &keys);
/* KVClient::Exist and HeteroClient::Exist on impl's connection: whether
 * each key exists; method names the caller in the errors. */
Status ExistKeys(const object_cache::ObjectClientImpl &impl, const char *method,
                 const std::vector<std::string> &keys, std::vector<bool> &exists);

} // namespace datasystem

#endif
