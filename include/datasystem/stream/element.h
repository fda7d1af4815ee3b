/* An element of a stream (Yuanrong's datasystem/stream/element.h): its
 * bytes and the id the worker gave it. A received element's bytes belong to
 * its Consumer and stay valid until the element is acknowledged (Ack of its
 * id or a later one) or the consumer is closed. */
#ifndef DATASYSTEM_STREAM_CACHE_ELEMENT_H
#define DATASYSTEM_STREAM_CACHE_ELEMENT_H

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>

#include "datasystem/utils/status.h"

namespace datasystem
{

struct Element {
    Element(uint8_t *ptr = nullptr, uint64_t size = 0, uint64_t id = ULONG_MAX)
        : ptr(ptr), size(size), id(id)
    {
    }
    ~Element() = default;
    uint8_t *ptr;  /* the bytes */
    uint64_t size; /* how many */
    uint64_t id;   /* from 1, given by the worker when the element was sent */
};

} // namespace datasystem

#endif
