/* Buffer and ReadOnlyBuffer over ds_buffer_t. */
#include <chrono>
#include <cstring>

#include "internal.h"

namespace datasystem
{

using object_cache::BufferState;

namespace
{
const Status kEmpty(K_INVALID, "the buffer is empty (default-constructed or moved from)");
}

object_cache::BufferState::~BufferState()
{
    ds_buffer_release(buf);
}

Buffer::Buffer() = default;
Buffer::Buffer(std::shared_ptr<BufferState> state) : state_(std::move(state)) {}
Buffer::Buffer(Buffer &&other) noexcept : state_(std::move(other.state_)) {}
Buffer &Buffer::operator=(Buffer &&other) noexcept
{
    state_ = std::move(other.state_);
    return *this;
}
Buffer::~Buffer() = default;

int64_t Buffer::GetSize() const
{
    if (!state_) return 0;
    return static_cast<int64_t>(ds_buffer_size(state_->buf));
}

void *Buffer::MutableData()
{
    if (!state_ || state_->sealed) return nullptr;
    BufferState &s = *state_;
    if (!s.published) return ds_buffer_mutable_data(s.buf);
    /* Published: writes go to a private copy that Publish stores. */
    if (!s.dirty) {
        const auto *p = static_cast<const unsigned char *>(ds_buffer_data(s.buf));
        s.copy.assign(p, p + ds_buffer_size(s.buf));
        s.dirty = true;
    }
    return s.copy.data();
}

const void *Buffer::ImmutableData()
{
    if (!state_) return nullptr;
    if (state_->dirty) return state_->copy.data();
    return ds_buffer_data(state_->buf);
}

Status Buffer::MemoryCopy(const void *data, uint64_t length)
{
    if (!state_) return kEmpty;
    if (state_->sealed)
        return Status(K_OC_ALREADY_SEALED,
                      "Buffer::MemoryCopy: object '" + state_->key + "' is sealed");
    uint64_t size = ds_buffer_size(state_->buf);
    if (length > size)
        return Status(K_INVALID, "Buffer::MemoryCopy: " + std::to_string(length) +
                                     " bytes do not fit the " + std::to_string(size) +
                                     "-byte buffer of '" + state_->key + "'");
    if (length == 0) return Status();
    if (data == nullptr) return Status(K_INVALID, "Buffer::MemoryCopy: data is null");
    void *dst = MutableData();
    if (dst == nullptr)
        return Status(K_RUNTIME_ERROR, "Buffer::MemoryCopy: the buffer is not writable");
    std::memcpy(dst, data, length);
    return Status();
}

Status Buffer::Publish(const std::unordered_set<std::string> &nestedKeys)
{
    if (!state_) return kEmpty;
    if (!nestedKeys.empty())
        return NotSupported("Buffer::Publish with nested keys", "objects have no nesting here");
    BufferState &s = *state_;
    if (s.sealed)
        return Status(K_OC_ALREADY_SEALED, "Buffer::Publish: object '" + s.key + "' is sealed");
    Status st;
    ds_client_t *c = s.client->Get(&st, "Buffer::Publish");
    if (c == nullptr) return st;
    if (!s.published) {
        st = FromC(ds_kv_publish(c, s.buf));
        if (st.IsOk()) s.published = true;
        return st;
    }
    if (!s.dirty) return Status();
    st = FromC(ds_kv_set(c, s.key.c_str(), s.copy.data(), s.copy.size(), nullptr));
    return st;
}

Status Buffer::Seal(const std::unordered_set<std::string> &nestedKeys)
{
    if (!state_) return kEmpty;
    if (!nestedKeys.empty())
        return NotSupported("Buffer::Seal with nested keys", "objects have no nesting here");
    Status st = Publish();
    if (!st.IsOk()) return st;
    /* The worker keeps the mark too: no client publishes over it. */
    ds_client_t *c = state_->client->Get(&st, "Buffer::Seal");
    if (c == nullptr) return st;
    const char *key = state_->key.c_str();
    st = FromC(ds_object_seal(c, 1, &key, nullptr));
    if (st.IsOk()) state_->sealed = true;
    return st;
}

Status Buffer::WLatch(uint64_t timeoutSec)
{
    if (!state_) return kEmpty;
    if (!state_->latch.try_lock_for(std::chrono::seconds(timeoutSec)))
        return Status(K_TRY_AGAIN,
                      "Buffer::WLatch: not acquired within " + std::to_string(timeoutSec) + " s");
    state_->writer.store(true);
    return Status();
}

Status Buffer::RLatch(uint64_t timeoutSec)
{
    if (!state_) return kEmpty;
    if (!state_->latch.try_lock_shared_for(std::chrono::seconds(timeoutSec)))
        return Status(K_TRY_AGAIN,
                      "Buffer::RLatch: not acquired within " + std::to_string(timeoutSec) + " s");
    state_->readers.fetch_add(1);
    return Status();
}

Status Buffer::UnRLatch()
{
    if (!state_) return kEmpty;
    int r = state_->readers.load();
    do {
        if (r <= 0) return Status(K_INVALID, "Buffer::UnRLatch: no read latch is held");
    } while (!state_->readers.compare_exchange_weak(r, r - 1));
    state_->latch.unlock_shared();
    return Status();
}

Status Buffer::UnWLatch()
{
    if (!state_) return kEmpty;
    if (!state_->writer.exchange(false))
        return Status(K_INVALID, "Buffer::UnWLatch: no write latch is held");
    state_->latch.unlock();
    return Status();
}

Status Buffer::InvalidateBuffer()
{
    return NotSupported("Buffer::InvalidateBuffer", "a buffer stays valid until it is destroyed");
}

Status Buffer::CopyDataWithRLatch(const std::function<Status()> &copyFn)
{
    Status st = RLatch();
    if (st.IsError()) return st;
    st = copyFn();
    UnRLatch();
    return st;
}

RemoteH2DHostInfoPb *Buffer::GetRemoteHostInfo()
{
    return nullptr;
}

/* ---- ReadOnlyBuffer ---- */

int64_t ReadOnlyBuffer::GetSize() const
{
    return buffer_ ? buffer_->GetSize() : 0;
}

const void *ReadOnlyBuffer::ImmutableData()
{
    return buffer_ ? buffer_->ImmutableData() : nullptr;
}

Status ReadOnlyBuffer::RLatch(uint64_t timeout)
{
    if (!buffer_) return kEmpty;
    const auto &s = object_cache::ObjectClientImpl::StateOf(*buffer_);
    if (!s) return kEmpty;
    Status st;
    ds_client_t *c = s->client->Get(&st, "ReadOnlyBuffer::RLatch");
    if (c == nullptr) return st;
    uint64_t ms = timeout * 1000;
    if (ms == 0 || ms > INT32_MAX) ms = INT32_MAX;
    const char *key = s->key.c_str();
    return FromC(ds_kv_rlatch(c, 1, &key, static_cast<int32_t>(ms), nullptr));
}

Status ReadOnlyBuffer::UnRLatch()
{
    if (!buffer_) return kEmpty;
    const auto &s = object_cache::ObjectClientImpl::StateOf(*buffer_);
    if (!s) return kEmpty;
    Status st;
    ds_client_t *c = s->client->Get(&st, "ReadOnlyBuffer::UnRLatch");
    if (c == nullptr) return st;
    const char *key = s->key.c_str();
    return FromC(ds_kv_unrlatch(c, 1, &key, nullptr));
}

} // namespace datasystem
