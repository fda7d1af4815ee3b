/* Yuanrong-compatible heterogeneous client: values moved between device
 * memory and the worker's shared memory, a thin layer over the C API
 * (ds/hetero_client.h), whose codes and messages each call returns.
 *
 * Device memory is reached through the process's device backend, chosen
 * by DS_DEVICE_BACKEND (host: host memory stands in for device memory;
 * cuda: NVIDIA GPUs through the driver); docs/device.md. The Dev* calls
 * keep the object in the worker's arena between the two devices (Yuanrong
 * sends it device to device). Keys, blob lists and parameters are read
 * during the call (the async calls copy them first); device memory is the
 * caller's and must stay valid until the call, or its future, completes.
 * Thread safety as KVClient: one client may be used from many threads, but
 * not while ShutDown runs. */
#ifndef DATASYSTEM_CPP_HETERO_CLIENT_H
#define DATASYSTEM_CPP_HETERO_CLIENT_H

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "datasystem/hetero/device_common.h"
#include "datasystem/hetero/future.h"
#include "datasystem/kv_client.h"
#include "datasystem/utils/connection.h"
#include "datasystem/utils/status.h"

namespace datasystem
{

namespace object_cache
{
class ObjectClientImpl;
} // namespace object_cache

struct MetaInfo {
    /* The value's size, one entry (the set's blob boundaries are not kept). */
    std::vector<uint64_t> blobSizeList;
};

class DS_CPP_API HeteroClient : public std::enable_shared_from_this<HeteroClient>
{
  public:
    /* ConnectOptions::enableRemoteH2D: a key held by another worker of the
     * cluster is pulled to this client's worker by MGetH2D; off, MGetH2D
     * reads only keys this worker holds (others fail K_NOT_FOUND). */
    explicit HeteroClient(const ConnectOptions &connectOptions = {});
    ~HeteroClient();

    Status ShutDown();
    Status Init();

    /* Copies each key's value into its blobs (split as the blobs say, from
     * srcOffset), waiting up to subTimeoutMs for keys not yet set. K_OK when
     * any key succeeded; failKeys: the others. */
    Status MGetH2D(const std::vector<std::string> &keys,
                   const std::vector<DeviceBlobList> &devBlobList,
                   std::vector<std::string> &failKeys, int32_t subTimeoutMs);

    /* Registers device ranges that later MGetH2D destinations lie in, until
     * ShutDown: page-locked with the driver on cuda. A destination blob
     * that starts in a registered range must end in it (K_INVALID). */
    Status PreRegisterDeviceMemory(const std::vector<void *> &devPtrs,
                                   const std::vector<uint64_t> &sizes);

    /* Writes each key's blobs, joined, as its value (one copy into the
     * worker's shared memory, then one publish). */
    Status MSetD2H(const std::vector<std::string> &keys,
                   const std::vector<DeviceBlobList> &devBlobList, const SetParam &setParam = {});
    /* outLocalSetKeys (cleared first; may be nullptr): the keys this call
     * set that were not there before it. */
    Status MSetD2H(const std::vector<std::string> &keys,
                   const std::vector<DeviceBlobList> &devBlobList, const SetParam &setParam,
                   std::vector<std::string> *outLocalSetKeys);

    /* K_OK when any key was deleted (a missing key is not a failure). */
    Status Delete(const std::vector<std::string> &keys, std::vector<std::string> &failedKeys);

    /* MSetD2H / MGetH2D on a thread of their own; the future's AsyncResult
     * holds the status and the failed keys. Bad arguments complete the
     * future at once with K_INVALID. */
    std::shared_future<AsyncResult> AsyncMSetD2H(const std::vector<std::string> &keys,
                                                 const std::vector<DeviceBlobList> &devBlobList,
                                                 const SetParam &setParam = {});
    std::shared_future<AsyncResult> AsyncMGetH2D(const std::vector<std::string> &keys,
                                                 const std::vector<DeviceBlobList> &devBlobList,
                                                 uint64_t subTimeoutMs);

    /* prefix "": a new unique key; otherwise prefix itself. */
    Status GenerateKey(const std::string &prefix, std::string &key);

    /* Publishes device memory under keys for one DevSubscribe: one Future
     * per key, OK once the key was received (until then a subscriber on
     * this machine may copy straight from this memory, which must stay
     * alive and unchanged). */
    Status DevPublish(const std::vector<std::string> &keys,
                      const std::vector<DeviceBlobList> &devBlobList,
                      std::vector<Future> &futureVec);
    /* Receives published keys into device memory (waiting up to 60 s for
     * the publisher): device to device from the publisher's memory on the
     * same machine, else from the worker's copy; a key received is
     * deleted. One Future per key. */
    Status DevSubscribe(const std::vector<std::string> &keys,
                        const std::vector<DeviceBlobList> &devBlobList,
                        std::vector<Future> &futureVec);
    /* Reads keys set by DevMSet into device memory; they stay until
     * DevDelete / DevLocalDelete. */
    Status DevMGet(const std::vector<std::string> &keys, std::vector<DeviceBlobList> &devBlobList,
                   std::vector<std::string> &failedKeys, int32_t subTimeoutMs = 0);
    Status DevMSet(const std::vector<std::string> &keys,
                   const std::vector<DeviceBlobList> &devBlobList,
                   std::vector<std::string> &failedKeys);
    std::shared_future<AsyncResult> AsyncDevDelete(const std::vector<std::string> &keys);
    Status DevDelete(const std::vector<std::string> &keys, std::vector<std::string> &failedKeys);
    Status DevLocalDelete(const std::vector<std::string> &keys,
                          std::vector<std::string> &failedKeys);

    /* state: NORMAL when the worker answers. */
    Status HealthCheck(ServerState &state);
    Status Exist(const std::vector<std::string> &keys, std::vector<bool> &exists);
    /* One MetaInfo per key (empty blobSizeList for a missing one, which is
     * in failKeys). K_OK when any key was found. */
    Status GetMetaInfo(const std::vector<std::string> &keys, bool isDevKey,
                       std::vector<MetaInfo> &metaInfos, std::vector<std::string> &failKeys);

  private:
    std::shared_ptr<object_cache::ObjectClientImpl> impl_;
    /* K_OK: this SDK always has the heterogeneous client (the device
     * backend is chosen at run time). */
    static Status IsCompileWithHetero();
};

} // namespace datasystem

#endif
