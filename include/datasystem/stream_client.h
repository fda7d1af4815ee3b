/* Yuanrong's StreamClient (datasystem/stream_client.h) over the C API
 * (ds/stream_client.h): producers and consumers of named streams on the
 * worker. Design: docs/streams.md. Producers and consumers keep the
 * connection alive; after ShutDown their calls fail. */
#ifndef DATASYSTEM_STREAM_CLIENT_H_CPP
#define DATASYSTEM_STREAM_CLIENT_H_CPP

#include <memory>
#include <string>

#include "datasystem/stream/consumer.h"
#include "datasystem/stream/element.h"
#include "datasystem/stream/producer.h"
#include "datasystem/stream/stream_config.h"
#include "datasystem/utils/connection.h"
#include "datasystem/utils/status.h"

namespace datasystem
{
namespace client
{
namespace stream_cache
{
class StreamClientImpl;
} // namespace stream_cache
} // namespace client

class DS_CPP_API StreamClient
{
  public:
    explicit StreamClient(ConnectOptions connectOptions);
    ~StreamClient();
    Status ShutDown();
    /* reportWorkerLost: accepted; a lost worker fails the next call. */
    Status Init(bool reportWorkerLost = false);
    Status CreateProducer(const std::string &streamName, std::shared_ptr<Producer> &outProducer,
                          ProducerConf producerConf = {});
    /* autoAck: each Receive first acknowledges what the previous one returned. */
    Status Subscribe(const std::string &streamName, const struct SubscriptionConfig &config,
                     std::shared_ptr<Consumer> &outConsumer, bool autoAck = false);
    /* K_SC_STREAM_IN_USE while producers or consumers are open. */
    Status DeleteStream(const std::string &streamName);
    /* Workers with a producer on the stream (Yuanrong counts per worker). */
    Status QueryGlobalProducersNum(const std::string &streamName, uint64_t &gProducerNum);
    Status QueryGlobalConsumersNum(const std::string &streamName, uint64_t &gConsumerNum);

  private:
    std::shared_ptr<client::stream_cache::StreamClientImpl> impl_;
};

} // namespace datasystem

#endif
