/* Stream settings (Yuanrong's datasystem/stream/stream_config.h): the
 * subscription's name and type, the producer's configuration. */
#ifndef DATASYSTEM_STREAM_CACHE_STREAM_CONFIG_H
#define DATASYSTEM_STREAM_CACHE_STREAM_CONFIG_H

#include <cstdint>
#include <string>
#include <utility>

#include "datasystem/utils/status.h"

namespace datasystem
{

/* Only STREAM is served (as by Yuanrong's worker): the others are K_INVALID. */
enum SubscriptionType { STREAM, ROUND_ROBIN, KEY_PARTITIONS, UNKNOWN };

struct SubscriptionConfig {
    static constexpr uint32_t SC_CACHE_CAPACITY = 32768;
    static constexpr uint16_t SC_CACHE_LWM = 0;
    std::string subscriptionName;
    SubscriptionType subscriptionType = SubscriptionType::STREAM;
    uint32_t cacheCapacity = SC_CACHE_CAPACITY; /* accepted; the worker keeps the elements */
    uint16_t cachePrefetchLWM = SC_CACHE_LWM;   /* accepted; no client-side prefetch */

    SubscriptionConfig(std::string subName, const SubscriptionType subType)
        : subscriptionName(std::move(subName)), subscriptionType(subType)
    {
    }
    SubscriptionConfig(std::string subName, const SubscriptionType subType, uint32_t cacheMax,
                       uint16_t cachePrefetchPercent)
        : subscriptionName(std::move(subName)), subscriptionType(subType), cacheCapacity(cacheMax),
          cachePrefetchLWM(cachePrefetchPercent)
    {
    }
    SubscriptionConfig() = default;
    bool operator==(const SubscriptionConfig &o) const
    {
        return subscriptionName == o.subscriptionName && subscriptionType == o.subscriptionType &&
               cacheCapacity == o.cacheCapacity && cachePrefetchLWM == o.cachePrefetchLWM;
    }
    bool operator!=(const SubscriptionConfig &o) const
    {
        return !(*this == o);
    }
};

enum StreamMode : int32_t { MPMC = 0, MPSC, SPSC };

struct ProducerConf {
    int64_t delayFlushTime = 5;                   /* ms; sends are visible at once here */
    int64_t pageSize = 1024 * 1024ul;             /* a multiple of 4 KiB, at most 16 MiB */
    uint64_t maxStreamSize = 100 * 1024 * 1024ul; /* >= 64 KiB and >= twice pageSize */
    bool autoCleanup = false;           /* delete when the last producer/consumer closes */
    uint64_t retainForNumConsumers = 0; /* keep elements for this many consumers (<= 16) */
    bool encryptStream = false;         /* accepted; nothing leaves the worker */
    uint64_t reserveSize = 0;           /* 0 = pageSize; a multiple of pageSize */
    StreamMode streamMode = StreamMode::MPMC;
};

} // namespace datasystem

#endif
