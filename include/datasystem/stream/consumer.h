/* A subscription's consumer (Yuanrong's datasystem/stream/consumer.h), made
 * by StreamClient::Subscribe. Received elements' bytes are the consumer's:
 * valid until acknowledged or the consumer closes. */
#ifndef DATASYSTEM_STREAM_CACHE_CONSUMER_H
#define DATASYSTEM_STREAM_CACHE_CONSUMER_H

#include <memory>
#include <vector>

#include "datasystem/stream/element.h"
#include "datasystem/utils/status.h"

namespace datasystem
{
namespace client
{
namespace stream_cache
{
class StreamClientImpl;
class ConsumerImpl;
} // namespace stream_cache
} // namespace client

class DS_CPP_API Consumer
{
  public:
    ~Consumer(); /* closes it if Close was not called */
    /* Up to expectNum elements, waiting up to timeoutMs for that many. */
    Status Receive(uint32_t expectNum, uint32_t timeoutMs, std::vector<Element> &outElements);
    /* Whatever is there, waiting up to timeoutMs for one. */
    Status Receive(uint32_t timeoutMs, std::vector<Element> &outElements);
    /* Done with every element up to elementId. */
    Status Ack(uint64_t elementId);
    Status Close();
    /* Elements received, and received but not acknowledged. */
    void GetStatisticsMessage(uint64_t &totalElements, uint64_t &notProcessedElements);

  private:
    explicit Consumer(std::unique_ptr<client::stream_cache::ConsumerImpl> impl);
    friend class client::stream_cache::StreamClientImpl;
    std::unique_ptr<client::stream_cache::ConsumerImpl> impl_;
};

} // namespace datasystem

#endif
