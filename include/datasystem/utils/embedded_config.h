/* Settings of an in-process worker (KVClient::InitEmbedded). This SDK runs
 * no embedded worker: the settings are recorded, and InitEmbedded answers
 * K_NOT_SUPPORTED. */
#ifndef DATASYSTEM_CPP_UTILS_EMBEDDED_CONFIG_H
#define DATASYSTEM_CPP_UTILS_EMBEDDED_CONFIG_H

#include <cstdint>
#include <string>
#include <unordered_map>

#include "datasystem/utils/status.h"

namespace datasystem
{

class DS_CPP_API EmbeddedConfig
{
  public:
    EmbeddedConfig() = default;
    ~EmbeddedConfig() = default;
    EmbeddedConfig &Address(const std::string &address);
    EmbeddedConfig &EtcdAddress(const std::string &address);
    EmbeddedConfig &SharedMemorySizeMb(uint64_t size);
    EmbeddedConfig &UnixDomainSocketDir(const std::string &path);
    EmbeddedConfig &EnableHugeTlb(bool enable);
    EmbeddedConfig &EnableFallocate(bool enable);
    EmbeddedConfig &SharedMemoryPopulate(bool populate);
    EmbeddedConfig &EnableThp(bool enable);
    EmbeddedConfig &ArenaPerTenant(int num);
    EmbeddedConfig &EnableUrma(bool enable);
    EmbeddedConfig &UrmaPollSize(int size);
    EmbeddedConfig &UrmaRegisterWholeArena(bool whole);
    EmbeddedConfig &UrmaEventMode(bool enable);
    EmbeddedConfig &LogDir(const std::string &path);
    EmbeddedConfig &MinLogLevel(int level);
    EmbeddedConfig &MaxLogSize(int size);
    EmbeddedConfig &VLogLevel(int level);
    EmbeddedConfig &RequestSampleRate(double rate);
    EmbeddedConfig &AccessSampleRate(double rate);
    EmbeddedConfig &DiagnosticSampleRate(double rate);
    EmbeddedConfig &SlowLogProcessSlowerThan(uint64_t us);
    EmbeddedConfig &SlowLogRpcSlowerThan(uint64_t us);
    EmbeddedConfig &RocksdbStoreDir(const std::string &path);
    EmbeddedConfig &RocksdbMaxOpenFile(int num);
    EmbeddedConfig &RocksdbBackgroundThreads(int num);
    EmbeddedConfig &RocksdbWriteMode(int mode);
    EmbeddedConfig &EnableRedirect(bool enable);
    EmbeddedConfig &EnableDataReplication(bool enable);
    EmbeddedConfig &SetArg(const std::string &name, const std::string &value);
    EmbeddedConfig &SetArgs(const std::unordered_map<std::string, std::string> &args);
    const std::unordered_map<std::string, std::string> &GetArgs() const;

  private:
    std::unordered_map<std::string, std::string> extraArgs;
};

} // namespace datasystem

#endif
