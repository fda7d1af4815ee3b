/* Status, SensitiveValue, KVClientConfig::Builder and Context. */
#include <cstring>
#include <utility>

#include "datasystem/context/context.h"
#include "datasystem/utils/embedded_config.h"
#include "datasystem/utils/kv_client_config.h"
#include "datasystem/utils/sensitive_value.h"
#include "datasystem/utils/status.h"
#include "ds/kv_client.h"
#include "internal.h"

namespace datasystem
{

namespace
{
struct CodeName {
    StatusCode code;
    const char *name;
};
#define DS_CPP_CODE(n)                                                                             \
    {                                                                                              \
        n, #n                                                                                      \
    }
const CodeName kCodeNames[] = {
    DS_CPP_CODE(K_OK),
    DS_CPP_CODE(K_DUPLICATED),
    DS_CPP_CODE(K_INVALID),
    DS_CPP_CODE(K_NOT_FOUND),
    DS_CPP_CODE(K_KVSTORE_ERROR),
    DS_CPP_CODE(K_RUNTIME_ERROR),
    DS_CPP_CODE(K_OUT_OF_MEMORY),
    DS_CPP_CODE(K_IO_ERROR),
    DS_CPP_CODE(K_NOT_READY),
    DS_CPP_CODE(K_NOT_AUTHORIZED),
    DS_CPP_CODE(K_UNKNOWN_ERROR),
    DS_CPP_CODE(K_INTERRUPTED),
    DS_CPP_CODE(K_OUT_OF_RANGE),
    DS_CPP_CODE(K_NO_SPACE),
    DS_CPP_CODE(K_NOT_LEADER_MASTER),
    DS_CPP_CODE(K_RECOVERY_ERROR),
    DS_CPP_CODE(K_RECOVERY_IN_PROGRESS),
    DS_CPP_CODE(K_FILE_NAME_TOO_LONG),
    DS_CPP_CODE(K_FILE_LIMIT_REACHED),
    DS_CPP_CODE(K_TRY_AGAIN),
    DS_CPP_CODE(K_DATA_INCONSISTENCY),
    DS_CPP_CODE(K_SHUTTING_DOWN),
    DS_CPP_CODE(K_WORKER_ABNORMAL),
    DS_CPP_CODE(K_CLIENT_WORKER_DISCONNECT),
    DS_CPP_CODE(K_WORKER_TIMEOUT),
    DS_CPP_CODE(K_MASTER_TIMEOUT),
    DS_CPP_CODE(K_NOT_FOUND_IN_L2CACHE),
    DS_CPP_CODE(K_REPLICA_NOT_READY),
    DS_CPP_CODE(K_CLIENT_WORKER_VERSION_MISMATCH),
    DS_CPP_CODE(K_SERVER_FD_CLOSED),
    DS_CPP_CODE(K_RETRY_IF_LEAVING),
    DS_CPP_CODE(K_SCALE_DOWN),
    DS_CPP_CODE(K_SCALING),
    DS_CPP_CODE(K_CLIENT_DEADLOCK),
    DS_CPP_CODE(K_LRU_HARD_LIMIT),
    DS_CPP_CODE(K_LRU_SOFT_LIMIT),
    DS_CPP_CODE(K_NOT_SUPPORTED),
    DS_CPP_CODE(K_NO_AVAILABLE_WORKER),
    DS_CPP_CODE(K_NOT_OWNER),
    DS_CPP_CODE(K_RPC_CANCELLED),
    DS_CPP_CODE(K_RPC_DEADLINE_EXCEEDED),
    DS_CPP_CODE(K_RPC_UNAVAILABLE),
    DS_CPP_CODE(K_RPC_STREAM_END),
    DS_CPP_CODE(K_URMA_ERROR),
    DS_CPP_CODE(K_RDMA_ERROR),
    DS_CPP_CODE(K_URMA_NEED_CONNECT),
    DS_CPP_CODE(K_RDMA_NEED_CONNECT),
    DS_CPP_CODE(K_URMA_TRY_AGAIN),
    DS_CPP_CODE(K_URMA_CONNECT_FAILED),
    DS_CPP_CODE(K_URMA_WAIT_TIMEOUT),
    DS_CPP_CODE(K_RPC_PEER_DEAD),
    DS_CPP_CODE(K_RPC_NETWORK_BLIP),
    DS_CPP_CODE(K_OC_ALREADY_SEALED),
    DS_CPP_CODE(K_OC_OBJECT_NOT_IN_USED),
    DS_CPP_CODE(K_OC_REMOTE_GET_NOT_ENOUGH),
    DS_CPP_CODE(K_WRITE_BACK_QUEUE_FULL),
    DS_CPP_CODE(K_OC_KEY_ALREADY_EXIST),
    DS_CPP_CODE(K_WORKER_PULL_OBJECT_NOT_FOUND),
    DS_CPP_CODE(K_BUFFER_DEPRECATED),
    DS_CPP_CODE(K_URMA_WORKER_UNAVAILABLE),
    DS_CPP_CODE(K_URMA_DATA_WORKER_UNAVAILABLE),
    DS_CPP_CODE(K_URMA_READ_SOURCE_DENIED),
    DS_CPP_CODE(K_SC_STREAM_NOT_FOUND),
    DS_CPP_CODE(K_SC_PRODUCER_NOT_FOUND),
    DS_CPP_CODE(K_SC_CONSUMER_NOT_FOUND),
    DS_CPP_CODE(K_SC_END_OF_PAGE),
    DS_CPP_CODE(K_SC_STREAM_IN_RESET_STATE),
    DS_CPP_CODE(K_SC_WORKER_WAS_LOST),
    DS_CPP_CODE(K_SC_STREAM_IN_USE),
    DS_CPP_CODE(K_SC_STREAM_DELETE_IN_PROGRESS),
    DS_CPP_CODE(K_SC_STREAM_RESOURCE_ERROR),
    DS_CPP_CODE(K_SC_ALREADY_CLOSED),
    DS_CPP_CODE(K_SC_STREAM_NOTIFICATION_PENDING),
    DS_CPP_CODE(K_ACL_ERROR),
    DS_CPP_CODE(K_HCCL_ERROR),
    DS_CPP_CODE(K_FUTURE_TIMEOUT),
    DS_CPP_CODE(K_CUDA_ERROR),
    DS_CPP_CODE(K_NCCL_ERROR),
};
#undef DS_CPP_CODE
} // namespace

StatusCode GetStatusCodeByName(const std::string &name)
{
    for (const auto &cn : kCodeNames)
        if (name == cn.name) return cn.code;
    return K_UNKNOWN_ERROR;
}

std::string Status::StatusCodeName(StatusCode code)
{
    for (const auto &cn : kCodeNames)
        if (cn.code == code) return cn.name;
    return "K_UNKNOWN";
}

Status::Status() noexcept = default;

Status::Status(const Status &other) noexcept
{
    if (other.state_) state_ = std::make_unique<State>(*other.state_);
}

Status::Status(Status &&other) noexcept = default;

Status &Status::operator=(const Status &other) noexcept
{
    if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
    return *this;
}

Status &Status::operator=(Status &&other) noexcept = default;

Status::Status(StatusCode code, std::string msg) noexcept
{
    if (code != K_OK || !msg.empty())
        state_ = std::make_unique<State>(State{code, std::move(msg), ""});
}

Status::Status(StatusCode code, int lineOfCode, const std::string &fileName,
               const std::string &extra)
    : Status(code, fileName + ":" + std::to_string(lineOfCode) + (extra.empty() ? "" : " " + extra))
{
}

std::string Status::ToString() const
{
    return "code: [" + StatusCodeName(GetCode()) + "], msg: [" + GetMsg() + "]";
}

StatusCode Status::GetCode() const
{
    return state_ == nullptr ? K_OK : state_->code;
}

std::string Status::GetMsg() const
{
    return state_ == nullptr ? "" : state_->errMsg;
}

void Status::AppendMsg(const std::string &appendMsg)
{
    if (state_ == nullptr) state_ = std::make_unique<State>(State{K_OK, "", ""});
    state_->errMsg += appendMsg;
}

std::ostream &operator<<(std::ostream &os, const Status &s)
{
    return os << s.ToString();
}

Status FromC(ds_status_t st)
{
    if (st == DS_K_OK) return Status();
    return Status(static_cast<StatusCode>(st), ds_last_error());
}

Status NotSupported(const char *method, const char *why)
{
    return Status(K_NOT_SUPPORTED, std::string(method) + " is not supported: " + why);
}

/* ---- SensitiveValue ---- */

SensitiveValue::SensitiveValue(const char *str)
{
    SetData(str, str ? std::strlen(str) : 0);
}
SensitiveValue::SensitiveValue(const std::string &str)
{
    SetData(str.data(), str.size());
}
SensitiveValue::SensitiveValue(const char *str, size_t size)
{
    SetData(str, size);
}
SensitiveValue::SensitiveValue(std::unique_ptr<char[]> data, size_t size)
    : data_(std::move(data)), size_(size)
{
}
SensitiveValue::SensitiveValue(SensitiveValue &&other) noexcept
    : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0))
{
}
SensitiveValue::SensitiveValue(const SensitiveValue &other)
{
    SetData(other.data_.get(), other.size_);
}
SensitiveValue::~SensitiveValue()
{
    Clear();
}
SensitiveValue &SensitiveValue::operator=(const SensitiveValue &other)
{
    if (this != &other) SetData(other.data_.get(), other.size_);
    return *this;
}
SensitiveValue &SensitiveValue::operator=(SensitiveValue &&other) noexcept
{
    if (this != &other) {
        Clear();
        data_ = std::move(other.data_);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}
SensitiveValue &SensitiveValue::operator=(const char *str)
{
    SetData(str, str ? std::strlen(str) : 0);
    return *this;
}
SensitiveValue &SensitiveValue::operator=(const std::string &str)
{
    SetData(str.data(), str.size());
    return *this;
}
bool SensitiveValue::operator==(const SensitiveValue &other) const
{
    return size_ == other.size_ &&
           (size_ == 0 || std::memcmp(data_.get(), other.data_.get(), size_) == 0);
}
bool SensitiveValue::Empty() const
{
    return size_ == 0;
}
const char *SensitiveValue::GetData() const
{
    return data_ ? data_.get() : "";
}
size_t SensitiveValue::GetSize() const
{
    return size_;
}
bool SensitiveValue::MoveTo(std::unique_ptr<char[]> &outData, size_t &outSize)
{
    if (size_ == 0) return false;
    outData = std::move(data_);
    outSize = std::exchange(size_, 0);
    return true;
}
void SensitiveValue::Clear()
{
    if (data_) {
        /* volatile: the wipe must not be optimised away as a dead store. */
        volatile char *p = data_.get();
        for (size_t i = 0; i < size_; i++)
            p[i] = 0;
    }
    data_.reset();
    size_ = 0;
}
void SensitiveValue::SetData(const char *str, size_t size)
{
    Clear();
    if (str == nullptr || size == 0) return;
    data_ = std::make_unique<char[]>(size + 1);
    std::memcpy(data_.get(), str, size);
    data_[size] = '\0';
    size_ = size;
}

/* ---- KVClientConfig::Builder ---- */

#define DS_CPP_ARG(Name, Type)                                                                     \
    KVClientConfig::Builder &KVClientConfig::Builder::Name(Type v)                                 \
    {                                                                                              \
        args_[#Name] = ArgText(v);                                                                 \
        return *this;                                                                              \
    }
namespace
{
std::string ArgText(const std::string &v)
{
    return v;
}
std::string ArgText(bool v)
{
    return v ? "true" : "false";
}
std::string ArgText(int v)
{
    return std::to_string(v);
}
std::string ArgText(uint32_t v)
{
    return std::to_string(v);
}
} // namespace
DS_CPP_ARG(LogDir, const std::string &)
DS_CPP_ARG(LogName, const std::string &)
DS_CPP_ARG(LogWithoutPid, bool)
DS_CPP_ARG(AccessLogName, const std::string &)
DS_CPP_ARG(MinLogLevel, int)
DS_CPP_ARG(VLogLevel, int)
DS_CPP_ARG(StderrThreshold, int)
DS_CPP_ARG(MaxLogSize, int)
DS_CPP_ARG(MaxLogFileNum, uint32_t)
DS_CPP_ARG(LogCompress, bool)
DS_CPP_ARG(LogRetentionDay, uint32_t)
DS_CPP_ARG(LogToStderr, bool)
DS_CPP_ARG(AlsoLogToStderr, bool)
DS_CPP_ARG(LogOnlyWriteInfoFile, bool)
DS_CPP_ARG(LogAsyncEnable, bool)
DS_CPP_ARG(LogAsyncQueueSize, uint32_t)
DS_CPP_ARG(LogMonitorEnable, bool)
DS_CPP_ARG(MonitorConfigPath, const std::string &)
DS_CPP_ARG(ZmqClientIoContext, int32_t)
DS_CPP_ARG(ZmqClientIoThread, int32_t)
#undef DS_CPP_ARG

Status KVClientConfig::Builder::Build(KVClientConfig &config) const
{
    /* Numeric settings must not be negative. */
    static const char *const kNumeric[] = {"MinLogLevel",        "VLogLevel",
                                           "StderrThreshold",    "MaxLogSize",
                                           "ZmqClientIoContext", "ZmqClientIoThread"};
    for (const char *name : kNumeric) {
        auto it = args_.find(name);
        if (it != args_.end() && !it->second.empty() && it->second[0] == '-')
            return Status(K_INVALID, std::string("KVClientConfig: ") + name +
                                         " must not be negative, got " + it->second);
    }
    config.args_ = args_;
    return Status();
}

/* ---- EmbeddedConfig ---- */

#define DS_CPP_EARG(Name, Type)                                                                    \
    EmbeddedConfig &EmbeddedConfig::Name(Type v)                                                   \
    {                                                                                              \
        extraArgs[#Name] = EmbeddedText(v);                                                        \
        return *this;                                                                              \
    }
namespace
{
std::string EmbeddedText(const std::string &v)
{
    return v;
}
std::string EmbeddedText(bool v)
{
    return v ? "true" : "false";
}
std::string EmbeddedText(int v)
{
    return std::to_string(v);
}
std::string EmbeddedText(uint64_t v)
{
    return std::to_string(v);
}
std::string EmbeddedText(double v)
{
    return std::to_string(v);
}
} // namespace
DS_CPP_EARG(Address, const std::string &)
DS_CPP_EARG(EtcdAddress, const std::string &)
DS_CPP_EARG(SharedMemorySizeMb, uint64_t)
DS_CPP_EARG(UnixDomainSocketDir, const std::string &)
DS_CPP_EARG(EnableHugeTlb, bool)
DS_CPP_EARG(EnableFallocate, bool)
DS_CPP_EARG(SharedMemoryPopulate, bool)
DS_CPP_EARG(EnableThp, bool)
DS_CPP_EARG(ArenaPerTenant, int)
DS_CPP_EARG(EnableUrma, bool)
DS_CPP_EARG(UrmaPollSize, int)
DS_CPP_EARG(UrmaRegisterWholeArena, bool)
DS_CPP_EARG(UrmaEventMode, bool)
DS_CPP_EARG(LogDir, const std::string &)
DS_CPP_EARG(MinLogLevel, int)
DS_CPP_EARG(MaxLogSize, int)
DS_CPP_EARG(VLogLevel, int)
DS_CPP_EARG(RequestSampleRate, double)
DS_CPP_EARG(AccessSampleRate, double)
DS_CPP_EARG(DiagnosticSampleRate, double)
DS_CPP_EARG(SlowLogProcessSlowerThan, uint64_t)
DS_CPP_EARG(SlowLogRpcSlowerThan, uint64_t)
DS_CPP_EARG(RocksdbStoreDir, const std::string &)
DS_CPP_EARG(RocksdbMaxOpenFile, int)
DS_CPP_EARG(RocksdbBackgroundThreads, int)
DS_CPP_EARG(RocksdbWriteMode, int)
DS_CPP_EARG(EnableRedirect, bool)
DS_CPP_EARG(EnableDataReplication, bool)
#undef DS_CPP_EARG

EmbeddedConfig &EmbeddedConfig::SetArg(const std::string &name, const std::string &value)
{
    extraArgs[name] = value;
    return *this;
}

EmbeddedConfig &EmbeddedConfig::SetArgs(const std::unordered_map<std::string, std::string> &args)
{
    for (const auto &kv : args)
        extraArgs[kv.first] = kv.second;
    return *this;
}

const std::unordered_map<std::string, std::string> &EmbeddedConfig::GetArgs() const
{
    return extraArgs;
}

/* ---- Context ---- */

Status Context::SetTraceId(const std::string &traceId)
{
    return FromC(ds_context_set_trace_id(traceId.c_str()));
}

void Context::SetTenantId(const std::string &tenantId)
{
    (void)tenantId;
}

} // namespace datasystem
