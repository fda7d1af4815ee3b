/* A stream's producer (Yuanrong's datasystem/stream/producer.h), made by
 * StreamClient::CreateProducer. */
#ifndef DATASYSTEM_STREAM_CACHE_PRODUCER_H
#define DATASYSTEM_STREAM_CACHE_PRODUCER_H

#include <memory>

#include "datasystem/stream/element.h"
#include "datasystem/utils/status.h"

namespace datasystem
{
namespace client
{
namespace stream_cache
{
class ProducerImpl;
class StreamClientImpl;
} // namespace stream_cache
} // namespace client

class DS_CPP_API Producer
{
  public:
    ~Producer(); /* closes it if Close was not called */
    /* Appends element; waits for room in a full stream up to the worker's
     * default (60 s), then K_OUT_OF_MEMORY. */
    Status Send(const Element &element);
    /* The same, waiting at most timeoutMs (0: not at all). */
    Status Send(const Element &element, int64_t timeoutMs);
    /* Its elements stay readable. A second Close: K_SC_ALREADY_CLOSED. */
    Status Close();

  private:
    explicit Producer(std::shared_ptr<client::stream_cache::ProducerImpl> impl);
    friend class client::stream_cache::StreamClientImpl;
    std::shared_ptr<client::stream_cache::ProducerImpl> impl_;
};

} // namespace datasystem

#endif
