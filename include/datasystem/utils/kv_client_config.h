/* Client-side settings for KVClient::Init, built with KVClientConfig::Builder.
 * The settings are Yuanrong's client log options; this client writes no log
 * files, so they are recorded (GetArgs) and checked, and change nothing. */
#ifndef DATASYSTEM_CPP_UTILS_KV_CLIENT_CONFIG_H
#define DATASYSTEM_CPP_UTILS_KV_CLIENT_CONFIG_H

#include <cstdint>
#include <string>
#include <unordered_map>

#include "datasystem/utils/status.h"

namespace datasystem
{

class DS_CPP_API KVClientConfig
{
  public:
    KVClientConfig() = default;
    ~KVClientConfig() = default;

    const std::unordered_map<std::string, std::string> &GetArgs() const
    {
        return args_;
    }

    class DS_CPP_API Builder
    {
      public:
        Builder() = default;
        ~Builder() = default;
        Builder &LogDir(const std::string &path);
        Builder &LogName(const std::string &name);
        Builder &LogWithoutPid(bool enable);
        Builder &AccessLogName(const std::string &name);
        Builder &MinLogLevel(int level);
        Builder &VLogLevel(int level);
        Builder &StderrThreshold(int level);
        Builder &MaxLogSize(int size);
        Builder &MaxLogFileNum(uint32_t num);
        Builder &LogCompress(bool enable);
        Builder &LogRetentionDay(uint32_t days);
        Builder &LogToStderr(bool enable);
        Builder &AlsoLogToStderr(bool enable);
        Builder &LogOnlyWriteInfoFile(bool enable);
        Builder &LogAsyncEnable(bool enable);
        Builder &LogAsyncQueueSize(uint32_t size);
        Builder &LogMonitorEnable(bool enable);
        Builder &MonitorConfigPath(const std::string &path);
        Builder &ZmqClientIoContext(int32_t threads);
        Builder &ZmqClientIoThread(int32_t threads);
        /* K_INVALID naming the first bad setting (a negative size or level). */
        Status Build(KVClientConfig &config) const;

      private:
        std::unordered_map<std::string, std::string> args_;
    };

  private:
    friend class Builder;
    std::unordered_map<std::string, std::string> args_;
};

} // namespace datasystem

#endif
