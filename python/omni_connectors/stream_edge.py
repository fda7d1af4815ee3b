"""Streaming edges: one request's payload sent as a stream of chunks.

The same contract as the C connector's (include/omni/stream_edge.h), so the
two ends may be in different languages: the edge is a datasystem stream named
by the request's key ``{request_id}:{from_stage}_{to_stage}``; each chunk is
one element whose first byte is ``b"C"``; a last element ``b"E"`` marks the
end, so the consumer never needs to know how many chunks come. The writer's
producer retains its elements until one consumer has subscribed, so the
reader may open before or after the writer. The reader deletes the stream
once it has read the end marker (best effort: the writer may still hold its
producer).
"""

from typing import Iterator, Optional

try:
    from yr.datasystem.stream_client import StreamClient, SubconfigType
except ImportError:  # pragma: no cover - the package ships datasystem
    StreamClient = None
    SubconfigType = None

TAG_CHUNK = b"C"
TAG_END = b"E"
SUB_NAME = "omni-chunk-reader"


def stream_client_over(kv_client):
    """A StreamClient sharing kv_client's worker connection."""
    if StreamClient is None:
        raise ImportError("yr.datasystem.stream_client is not available")
    sc = StreamClient.__new__(StreamClient)
    sc._kv = kv_client
    return sc


class ChunkWriter:
    """The sending end of one request's edge."""

    def __init__(self, stream_client, name: str) -> None:
        self.name = name
        # delay_flush_time_ms 0: each chunk wakes the reader at once.
        self._producer = stream_client.create_producer(name, delay_flush_time_ms=0,
                                                       retain_for_num_consumers=1)
        self._ended = False

    def send(self, chunk) -> None:
        """Sends one chunk (bytes-like, not empty), visible to the reader at once."""
        if self._ended:
            raise ValueError(f"chunk stream '{self.name}': send after the end marker")
        data = bytes(chunk)
        if not data:
            raise ValueError(f"chunk stream '{self.name}': a chunk is not empty")
        self._producer.send(TAG_CHUNK + data)

    def end(self) -> None:
        """Sends the end marker and closes the producer."""
        if self._ended:
            raise ValueError(f"chunk stream '{self.name}': the end marker was sent already")
        self._producer.send(TAG_END)
        self._ended = True
        self._producer.close()

    def close(self) -> None:
        """Closes the producer (without an end marker when end was not called)."""
        if not self._ended:
            self._ended = True
            try:
                self._producer.close()
            except RuntimeError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ChunkReader:
    """The receiving end of one request's edge: chunks as they arrive."""

    def __init__(self, stream_client, name: str) -> None:
        self.name = name
        self._sc = stream_client
        self._consumer = stream_client.subscribe(name, SUB_NAME, SubconfigType.STREAM)
        self._pending = []
        self._ended = False

    def next(self, timeout_ms: int) -> Optional[bytes]:
        """The next chunk, waiting up to timeout_ms; None at the end marker
        (and after it); TimeoutError when nothing came within timeout_ms."""
        if self._ended:
            return None
        if not self._pending:
            got = self._consumer.receive_any(max(0, int(timeout_ms)))
            if not got:
                raise TimeoutError(f"chunk stream '{self.name}': no chunk within {timeout_ms} ms")
            self._consumer.ack(got[-1].id)
            self._pending = list(reversed(got))
        e = self._pending.pop()
        tag = e[:1]
        if tag == TAG_END:
            self._ended = True
            self._pending = []
            return None
        if tag != TAG_CHUNK:
            raise ValueError(f"chunk stream '{self.name}': element {e.id} is not a chunk "
                             "or end marker")
        return e[1:]

    def chunks(self, timeout_ms: int) -> Iterator[bytes]:
        """Every chunk up to the end marker, each waited for up to timeout_ms."""
        while True:
            c = self.next(timeout_ms)
            if c is None:
                return
            yield c

    def close(self) -> None:
        """Closes the consumer; deletes the stream when the end was read."""
        c, self._consumer = self._consumer, None
        if c is None:
            return
        try:
            c.close()
        except RuntimeError:
            pass
        if self._ended:
            try:
                self._sc.delete_stream(self.name)
            except RuntimeError:
                pass  # the writer still holds its producer

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
