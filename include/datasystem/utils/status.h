/* Yuanrong-compatible C++ status: a code (the same numbers as the C API's
 * ds_status_t, include/ds/status.h) and a message. A default Status is K_OK
 * and allocates nothing. */
#ifndef DATASYSTEM_CPP_UTILS_STATUS_H
#define DATASYSTEM_CPP_UTILS_STATUS_H

#include <memory>
#include <ostream>
#include <string>

#define DS_CPP_API __attribute__((visibility("default")))

namespace datasystem
{

enum StatusCode : int {
    K_OK = 0,
    K_DUPLICATED = 1,
    K_INVALID = 2,
    K_NOT_FOUND = 3,
    K_KVSTORE_ERROR = 4,
    K_RUNTIME_ERROR = 5,
    K_OUT_OF_MEMORY = 6,
    K_IO_ERROR = 7,
    K_NOT_READY = 8,
    K_NOT_AUTHORIZED = 9,
    K_UNKNOWN_ERROR = 10,
    K_INTERRUPTED = 11,
    K_OUT_OF_RANGE = 12,
    K_NO_SPACE = 13,
    K_NOT_LEADER_MASTER = 14,
    K_RECOVERY_ERROR = 15,
    K_RECOVERY_IN_PROGRESS = 16,
    K_FILE_NAME_TOO_LONG = 17,
    K_FILE_LIMIT_REACHED = 18,
    K_TRY_AGAIN = 19,
    K_DATA_INCONSISTENCY = 20,
    K_SHUTTING_DOWN = 21,
    K_WORKER_ABNORMAL = 22,
    K_CLIENT_WORKER_DISCONNECT = 23,
    K_WORKER_TIMEOUT = 24,
    K_MASTER_TIMEOUT = 25,
    K_NOT_FOUND_IN_L2CACHE = 26,
    K_REPLICA_NOT_READY = 27,
    K_CLIENT_WORKER_VERSION_MISMATCH = 28,
    K_SERVER_FD_CLOSED = 29,
    K_RETRY_IF_LEAVING = 30,
    K_SCALE_DOWN = 31,
    K_SCALING = 32,
    K_CLIENT_DEADLOCK = 33,
    K_LRU_HARD_LIMIT = 34,
    K_LRU_SOFT_LIMIT = 35,
    K_NOT_SUPPORTED = 36,
    K_NO_AVAILABLE_WORKER = 37,
    K_NOT_OWNER = 38,

    K_RPC_CANCELLED = 1000,
    K_RPC_DEADLINE_EXCEEDED = 1001,
    K_RPC_UNAVAILABLE = 1002,
    K_RPC_STREAM_END = 1003,
    K_URMA_ERROR = 1004,
    K_RDMA_ERROR = 1005,
    K_URMA_NEED_CONNECT = 1006,
    K_RDMA_NEED_CONNECT = 1007,
    K_URMA_TRY_AGAIN = 1008,
    K_URMA_CONNECT_FAILED = 1009,
    K_URMA_WAIT_TIMEOUT = 1010,
    K_RPC_PEER_DEAD = 1011,
    K_RPC_NETWORK_BLIP = 1012,

    K_OC_ALREADY_SEALED = 2000,
    K_OC_OBJECT_NOT_IN_USED = 2001,
    K_OC_REMOTE_GET_NOT_ENOUGH = 2002,
    K_WRITE_BACK_QUEUE_FULL = 2003,
    K_OC_KEY_ALREADY_EXIST = 2004,
    K_WORKER_PULL_OBJECT_NOT_FOUND = 2005,
    K_BUFFER_DEPRECATED = 2006,
    K_URMA_WORKER_UNAVAILABLE = 2007,
    K_URMA_DATA_WORKER_UNAVAILABLE = 2008,
    K_URMA_READ_SOURCE_DENIED = 2009,

    K_SC_STREAM_NOT_FOUND = 3000,
    K_SC_PRODUCER_NOT_FOUND = 3001,
    K_SC_CONSUMER_NOT_FOUND = 3002,
    K_SC_END_OF_PAGE = 3003,
    K_SC_STREAM_IN_RESET_STATE = 3004,
    K_SC_WORKER_WAS_LOST = 3005,
    K_SC_STREAM_IN_USE = 3006,
    K_SC_STREAM_DELETE_IN_PROGRESS = 3007,
    K_SC_STREAM_RESOURCE_ERROR = 3008,
    K_SC_ALREADY_CLOSED = 3009,
    K_SC_STREAM_NOTIFICATION_PENDING = 3010,

    K_ACL_ERROR = 5000,
    K_HCCL_ERROR = 5001,
    K_FUTURE_TIMEOUT = 5002,
    K_CUDA_ERROR = 5003,
    K_NCCL_ERROR = 5004
};

/* The code named name ("K_NOT_FOUND"); K_UNKNOWN_ERROR for an unknown name. */
DS_CPP_API StatusCode GetStatusCodeByName(const std::string &name);

class DS_CPP_API Status
{
  public:
    Status() noexcept;
    Status(const Status &other) noexcept;
    Status(Status &&other) noexcept;
    Status &operator=(const Status &other) noexcept;
    Status &operator=(Status &&other) noexcept;
    ~Status() noexcept = default;
    Status(StatusCode code, std::string msg) noexcept;
    /* A message "file:line" plus extra, for errors raised at a known place. */
    Status(StatusCode code, int lineOfCode, const std::string &fileName,
           const std::string &extra = "");

    static Status OK()
    {
        return Status();
    }
    /* "code: [K_NOT_FOUND], msg: [...]" */
    std::string ToString() const;
    StatusCode GetCode() const;
    std::string GetMsg() const;
    void AppendMsg(const std::string &appendMsg);
    friend DS_CPP_API std::ostream &operator<<(std::ostream &os, const Status &s);

    explicit operator bool() const
    {
        return GetCode() == K_OK;
    }
    /* Statuses compare by code only. */
    bool operator==(const Status &other) const
    {
        return GetCode() == other.GetCode();
    }
    bool operator!=(const Status &other) const
    {
        return !(*this == other);
    }
    bool IsOk() const
    {
        return GetCode() == K_OK;
    }
    bool IsError() const
    {
        return !IsOk();
    }
    /* "K_NOT_FOUND" for K_NOT_FOUND; "K_UNKNOWN" for a number not in the enum. */
    static std::string StatusCodeName(StatusCode code);

    Status &WithExtra(const std::string &extra)
    {
        if (state_ == nullptr) {
            state_ = std::make_unique<State>(State{K_OK, "", extra});
        } else {
            state_->extra = extra;
        }
        return *this;
    }
    bool HasExtra() const
    {
        return state_ != nullptr && !state_->extra.empty();
    }
    const std::string &GetExtra() const
    {
        static const std::string empty;
        return state_ != nullptr ? state_->extra : empty;
    }

  private:
    struct State {
        StatusCode code;
        std::string errMsg;
        std::string extra;
    };
    std::unique_ptr<State> state_{nullptr};
};

} // namespace datasystem

#endif
