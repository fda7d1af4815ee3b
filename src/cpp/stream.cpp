// StreamClient, Producer and Consumer (include/datasystem/stream_client.h)
// over the C API (ds/stream_client.h). Each call is the matching ds_* call,
// with its code and message.
#include <deque>
#include <mutex>

#include "datasystem/stream_client.h"
#include "ds/stream_client.h"
#include "internal.h"

namespace datasystem
{
namespace client
{
namespace stream_cache
{

class StreamClientImpl
{
  public:
    explicit StreamClientImpl(const ConnectOptions &opts)
        : conn(std::make_shared<object_cache::ObjectClientImpl>(opts))
    {
    }
    std::shared_ptr<object_cache::ObjectClientImpl> conn;

    static std::shared_ptr<Producer> MakeProducer(std::shared_ptr<ProducerImpl> impl)
    {
        return std::shared_ptr<Producer>(new Producer(std::move(impl)));
    }
    static std::shared_ptr<Consumer> MakeConsumer(std::unique_ptr<ConsumerImpl> impl)
    {
        return std::shared_ptr<Consumer>(new Consumer(std::move(impl)));
    }
};

class ProducerImpl
{
  public:
    ~ProducerImpl()
    {
        if (p != nullptr) ds_producer_close(p);
    }
    std::shared_ptr<object_cache::ObjectClientImpl> conn; // keeps the connection
    ds_producer_t *p = nullptr;
    std::mutex mu;
};

class ConsumerImpl
{
  public:
    ~ConsumerImpl()
    {
        FreeAll();
        if (c != nullptr) ds_consumer_close(c);
    }
    void FreeAll()
    {
        for (auto &b : blocks)
            ds_elements_free(b.second);
        blocks.clear();
    }
    std::shared_ptr<object_cache::ObjectClientImpl> conn;
    ds_consumer_t *c = nullptr;
    bool autoAck = false;
    uint64_t lastId = 0; // the last id received
    uint64_t total = 0, acked = 0;
    // Received arrays, oldest first, with their last id: freed once acked.
    std::deque<std::pair<uint64_t, ds_element_t *>> blocks;
    std::mutex mu;
};

} // namespace stream_cache
} // namespace client

using client::stream_cache::ConsumerImpl;
using client::stream_cache::ProducerImpl;
using client::stream_cache::StreamClientImpl;

static Status Closed(const char *what)
{
    return Status(K_SC_ALREADY_CLOSED, std::string("The ") + what + " is already closed");
}

StreamClient::StreamClient(ConnectOptions connectOptions)
    : impl_(std::make_shared<StreamClientImpl>(connectOptions))
{
}

StreamClient::~StreamClient() = default;

Status StreamClient::ShutDown()
{
    return impl_->conn->ShutDown();
}

Status StreamClient::Init(bool reportWorkerLost)
{
    (void)reportWorkerLost;
    return impl_->conn->Connect("StreamClient");
}

Status StreamClient::CreateProducer(const std::string &streamName,
                                    std::shared_ptr<Producer> &outProducer,
                                    ProducerConf producerConf)
{
    Status st;
    ds_client_t *c = impl_->conn->Get(&st, "StreamClient::CreateProducer");
    if (c == nullptr) return st;
    ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
    conf.delay_flush_time_ms = producerConf.delayFlushTime;
    conf.page_size = producerConf.pageSize;
    conf.max_stream_size = producerConf.maxStreamSize;
    conf.auto_cleanup = producerConf.autoCleanup;
    conf.retain_for_num_consumers = producerConf.retainForNumConsumers;
    conf.encrypt_stream = producerConf.encryptStream;
    conf.reserve_size = producerConf.reserveSize;
    auto impl = std::make_shared<ProducerImpl>();
    st = FromC(ds_stream_create_producer(c, streamName.c_str(), &conf, &impl->p));
    if (st.IsError()) return st;
    impl->conn = impl_->conn;
    outProducer = StreamClientImpl::MakeProducer(std::move(impl));
    return Status();
}

Status StreamClient::Subscribe(const std::string &streamName, const SubscriptionConfig &config,
                               std::shared_ptr<Consumer> &outConsumer, bool autoAck)
{
    Status st;
    ds_client_t *c = impl_->conn->Get(&st, "StreamClient::Subscribe");
    if (c == nullptr) return st;
    std::unique_ptr<ConsumerImpl> impl(new ConsumerImpl());
    st = FromC(ds_stream_subscribe(c, streamName.c_str(), config.subscriptionName.c_str(),
                                   static_cast<ds_subscription_type_t>(config.subscriptionType),
                                   &impl->c));
    if (st.IsError()) return st;
    impl->conn = impl_->conn;
    impl->autoAck = autoAck;
    outConsumer = StreamClientImpl::MakeConsumer(std::move(impl));
    return Status();
}

Status StreamClient::DeleteStream(const std::string &streamName)
{
    Status st;
    ds_client_t *c = impl_->conn->Get(&st, "StreamClient::DeleteStream");
    if (c == nullptr) return st;
    return FromC(ds_stream_delete(c, streamName.c_str()));
}

Status StreamClient::QueryGlobalProducersNum(const std::string &streamName, uint64_t &gProducerNum)
{
    Status st;
    ds_client_t *c = impl_->conn->Get(&st, "StreamClient::QueryGlobalProducersNum");
    if (c == nullptr) return st;
    return FromC(ds_stream_query_global_producer_num(c, streamName.c_str(), &gProducerNum));
}

Status StreamClient::QueryGlobalConsumersNum(const std::string &streamName, uint64_t &gConsumerNum)
{
    Status st;
    ds_client_t *c = impl_->conn->Get(&st, "StreamClient::QueryGlobalConsumersNum");
    if (c == nullptr) return st;
    return FromC(ds_stream_query_global_consumer_num(c, streamName.c_str(), &gConsumerNum));
}

Producer::Producer(std::shared_ptr<ProducerImpl> impl) : impl_(std::move(impl)) {}

Producer::~Producer() = default;

Status Producer::Send(const Element &element)
{
    return Send(element, -1);
}

Status Producer::Send(const Element &element, int64_t timeoutMs)
{
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->p == nullptr) return Closed("producer");
    return FromC(ds_producer_send(impl_->p, element.ptr, element.size, timeoutMs));
}

Status Producer::Close()
{
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->p == nullptr) return Closed("producer");
    ds_producer_t *p = impl_->p;
    impl_->p = nullptr;
    return FromC(ds_producer_close(p));
}

Consumer::Consumer(std::unique_ptr<ConsumerImpl> impl) : impl_(std::move(impl)) {}

Consumer::~Consumer() = default;

static Status AckLocked(ConsumerImpl *s, uint64_t id)
{
    Status st = FromC(ds_consumer_ack(s->c, id));
    if (st.IsError()) return st;
    while (!s->blocks.empty() && s->blocks.front().first <= id) {
        ds_elements_free(s->blocks.front().second);
        s->blocks.pop_front();
    }
    if (id > s->acked) s->acked = id;
    return st;
}

static Status ReceiveLocked(ConsumerImpl *s, uint32_t expectNum, uint32_t timeoutMs,
                            std::vector<Element> &outElements)
{
    outElements.clear();
    if (s->c == nullptr) return Closed("consumer");
    if (s->autoAck && s->lastId > s->acked) {
        Status st = AckLocked(s, s->lastId);
        if (st.IsError()) return st;
    }
    ds_element_t *els = nullptr;
    size_t n = 0;
    Status st = FromC(ds_consumer_receive(s->c, expectNum, timeoutMs, &els, &n));
    if (st.IsError() || n == 0) return st;
    outElements.reserve(n);
    for (size_t i = 0; i < n; i++)
        outElements.emplace_back(const_cast<uint8_t *>(els[i].ptr), els[i].size, els[i].id);
    s->lastId = els[n - 1].id;
    s->total += n;
    s->blocks.emplace_back(s->lastId, els);
    return st;
}

Status Consumer::Receive(uint32_t expectNum, uint32_t timeoutMs, std::vector<Element> &outElements)
{
    std::lock_guard<std::mutex> g(impl_->mu);
    if (expectNum == 0) return Status(K_INVALID, "The expectNum should be greater than 0");
    return ReceiveLocked(impl_.get(), expectNum, timeoutMs, outElements);
}

Status Consumer::Receive(uint32_t timeoutMs, std::vector<Element> &outElements)
{
    std::lock_guard<std::mutex> g(impl_->mu);
    return ReceiveLocked(impl_.get(), 0, timeoutMs, outElements);
}

Status Consumer::Ack(uint64_t elementId)
{
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->c == nullptr) return Closed("consumer");
    return AckLocked(impl_.get(), elementId);
}

Status Consumer::Close()
{
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->c == nullptr) return Closed("consumer");
    ds_consumer_t *c = impl_->c;
    impl_->c = nullptr;
    impl_->FreeAll();
    return FromC(ds_consumer_close(c));
}

void Consumer::GetStatisticsMessage(uint64_t &totalElements, uint64_t &notProcessedElements)
{
    std::lock_guard<std::mutex> g(impl_->mu);
    totalElements = impl_->total;
    notProcessedElements = impl_->lastId > impl_->acked ? impl_->lastId - impl_->acked : 0;
}

} // namespace datasystem
