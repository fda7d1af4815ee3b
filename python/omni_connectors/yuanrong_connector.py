"""YuanrongConnector: stage-to-stage payloads through the datasystem.

The spec (docs/spec/YuanrongConnector.md) in short: the producer ``put``s a
serialized payload under ``{request_id}:{from_stage}_{to_stage}`` with write
mode NONE_L2_CACHE_EVICT; the consumer rebuilds the key and ``get``s it with
one subscribe-get that waits up to ``get_sub_timeout_ms``. No metadata travels
besides the key.

Beyond the spec, as docs/design.md section 7 asks:

* ``cleanup(request_id)`` deletes the keys this connector wrote (and read) for
  that request on every edge;
* one-copy hand-off (the default; ``supports_raw_data``): bytes values, numpy
  arrays and torch tensors, at the top level or inside the payload, are never
  copied into an intermediate serialized blob. A payload of ``raw_inplace_min``
  (64 KiB) or more is copied piece by piece straight into the worker's shared
  memory and published with one request (``KVClient.set_pieces``: one copy of
  the array data); the bytes stored are exactly OmniSerializer's, so a
  consumer on the old path (plain get + deserialize) reads them. get is one
  request (``KVClient.get_view``) for a pinned view and decodes the arrays as
  numpy views of it that keep the pin alive (no copy; ``zero_copy: False``
  copies); the worker hears that the pin is gone with the next request. A
  remote (TCP) client sends the same bytes, the pieces as they are, with one
  set;
* metrics split failures into not_found / timeout / transport / decode;
* a worker that cannot be reached is a RuntimeError at construction.
"""

import logging
import threading
import time
from typing import Any, Optional, Union

from .base import GetResult, OmniConnectorBase, PutResult
from .serializer import VIEW_MIN, deserialize, serialize, serialize_chunks
from .stream_edge import ChunkReader, ChunkWriter, stream_client_over

logger = logging.getLogger(__name__)

try:
    from datasystem.kv_client import KVClient, SetParam, WriteMode
except ImportError:  # pragma: no cover - the package ships datasystem
    KVClient = None
    SetParam = None
    WriteMode = None

# The one-copy threshold. From this size up a payload's pieces (msgpack
# framing and array views) go to KVClient.set_pieces: each copied once into
# the connection's arena space and published with one SETR (a KVClient
# without set_pieces gets mcreate + a copy loop + mset_buffer); below it the
# pieces are joined and sent with one plain set. 64 KiB is the worker's
# default inline_max; it was chosen when the in-place path took two round
# trips (CREATE, PUBLISH), so plain set was faster below it (measured then:
# 190 vs 255 us put+get at 8 KiB). set_pieces is one round trip like set, so
# a lower threshold may now pay; not measured yet. The C connector uses the
# same threshold (OMNI__INPLACE_MIN, src/connector/dsconn.h).
_RAW_INPLACE_MIN = 64 * 1024

# Separators that may follow a request id inside a put_key (chunked or
# per-sub-request keys such as "req-1_3" or "req-1:chunk3").
_KEY_SEPARATORS = ("_", ":", "-", "@", "#", ".", "/")

_K_NOT_FOUND = 3


class YuanrongConnector(OmniConnectorBase):
    """Datasystem-backed OmniConnector.

    config keys: host ("127.0.0.1"), port (35001), get_sub_timeout_ms (1000;
    0 = do not wait), and optionally connect_timeout_ms (9000), zero_copy
    (True: raw arrays come back as views of shared memory), raw_inplace_min
    (bytes from which a raw payload is written in place), cleanup_reads (True:
    cleanup also deletes keys this connector read), max_tracked_requests
    (100000: requests whose keys are remembered for cleanup, oldest forgotten
    first), unix_socket_dir, transport ("auto" / "tcp" / "local"),
    stream_chunk_size (0 = off: the chunk size put_chunked uses by default).

    Streaming edges (stream_edge.py): open_chunk_writer / open_chunk_reader
    send and receive one request's payload as a stream of chunks, each
    readable as soon as it is sent; put_chunked / get_chunked do the whole
    payload at once.
    """

    supports_raw_data = True

    def __init__(self, config: dict) -> None:
        self.client = None
        self._closed = True
        if KVClient is None or SetParam is None or WriteMode is None:
            raise ImportError(
                "datasystem components (KVClient/SetParam/WriteMode) are not available"
            )
        self.config = dict(config or {})
        self.set_param = SetParam()
        self.set_param.write_mode = WriteMode.NONE_L2_CACHE_EVICT
        self.get_sub_timeout_ms = max(0, int(self.config.get("get_sub_timeout_ms", 1000)))
        self.zero_copy = bool(self.config.get("zero_copy", True))
        self.raw_inplace_min = int(self.config.get("raw_inplace_min", _RAW_INPLACE_MIN))
        self.cleanup_reads = bool(self.config.get("cleanup_reads", True))
        self.max_tracked_requests = max(1, int(self.config.get("max_tracked_requests", 100000)))
        self.stream_chunk_size = int(self.config.get("stream_chunk_size", 0))
        if self.stream_chunk_size < 0:
            raise ValueError(f"stream_chunk_size is {self.stream_chunk_size}, not >= 0")
        self.host = self.config.get("host", "127.0.0.1")
        self.port = int(self.config.get("port", 35001))

        self._lock = threading.Lock()
        self._metrics = {
            "puts": 0,
            "gets": 0,
            "bytes_transferred": 0,
            "errors": 0,
            "timeouts": 0,
            "not_found": 0,
            "timeout": 0,
            "transport": 0,
            "decode": 0,
        }
        self._last_error = None
        # request id -> set of datasystem keys written or read for it.
        self._keys = {}
        self._init_client()

    # -- setup -------------------------------------------------------------

    @staticmethod
    def _make_key(key: str, from_stage: str, to_stage: str) -> str:
        """``{request_id}:{from_stage}_{to_stage}``."""
        return f"{key}:{from_stage}_{to_stage}"

    def _init_client(self):
        kwargs = {}
        if "connect_timeout_ms" in self.config:
            kwargs["connect_timeout_ms"] = int(self.config["connect_timeout_ms"])
        extra = {}
        if self.config.get("unix_socket_dir"):
            extra["unix_socket_dir"] = str(self.config["unix_socket_dir"])
        if self.config.get("transport"):
            extra["transport"] = str(self.config["transport"])
        client = KVClient(self.host, self.port, **kwargs, **extra)
        try:
            client.init()
        except Exception as e:
            logger.error("YuanrongConnector: cannot reach datasystem worker %s:%s: %s",
                         self.host, self.port, e)
            raise
        self.client = client
        self._closed = False
        logger.info("YuanrongConnector connected to %s:%s", self.host, self.port)

    # -- bookkeeping -------------------------------------------------------

    def _fail(self, kind, err, **extra):
        with self._lock:
            self._metrics[kind] += 1
            for k, v in extra.items():
                self._metrics[k] += v
            self._last_error = "%s: %s" % (kind, err)

    def _track(self, request_key, key):
        with self._lock:
            keys = self._keys.get(request_key)
            if keys is None:
                if len(self._keys) >= self.max_tracked_requests:
                    # Forget the oldest request: its volatile keys are left to
                    # eviction, as they would be without cleanup at all.
                    self._keys.pop(next(iter(self._keys)))
                keys = self._keys[request_key] = set()
            keys.add(key)

    # -- data path ---------------------------------------------------------

    def _write(self, key, data):
        """Writes data under key in OmniSerializer's format; returns the size.

        With the raw path on, array data (and a top-level bytes value) is not
        copied into an intermediate bytes object: a payload of at least
        raw_inplace_min bytes is written piece by piece straight into a buffer
        created in the worker's arena, then published.
        """
        mode = self.set_param.write_mode
        if not self.supports_raw_data:
            payload = serialize(data)
            self.client.set(key, payload, mode)
            return len(payload)
        chunks, total = serialize_chunks(data, VIEW_MIN)
        if total < self.raw_inplace_min or len(chunks) == 1:
            payload = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            self.client.set(key, payload, mode)
            return total
        set_pieces = getattr(self.client, "set_pieces", None)
        if set_pieces is not None:
            # One call: each piece copied once into the arena, one request.
            set_pieces(key, chunks, mode)
            return total
        buf = self.client.mcreate([key], [total], mode)[0]
        try:
            mv = buf.mutable_data()
            pos = 0
            for c in chunks:
                n = len(c) if isinstance(c, bytes) else c.nbytes
                mv[pos : pos + n] = c
                pos += n
            del mv
            self.client.mset_buffer([buf])
        finally:
            buf.release()
        return total

    def put(self, from_stage: str, to_stage: str, put_key: str, data: Any) -> PutResult:
        if self.client is None:
            logger.error("YuanrongConnector: client not initialized")
            return False, 0, None
        key = self._make_key(put_key, from_stage, to_stage)
        try:
            size = self._write(key, data)
        except (TypeError, ValueError, OverflowError) as e:
            self._fail("errors", e)
            logger.error("YuanrongConnector put %s: cannot serialize: %s", key, e)
            return False, 0, None
        except Exception as e:
            self._fail("errors", e, transport=1)
            logger.error("YuanrongConnector put %s failed: %s", key, e)
            return False, 0, None
        self._track(put_key, key)
        with self._lock:
            m = self._metrics
            m["puts"] += 1
            m["bytes_transferred"] += size
        logger.debug("YuanrongConnector stored %s (%d bytes)", key, size)
        return True, size, None

    def get(
        self, from_stage: str, to_stage: str, get_key: str, metadata: Optional[dict] = None
    ) -> Optional[GetResult]:
        if self.client is None:
            logger.error("YuanrongConnector: client not initialized")
            return None
        key = self._make_key(get_key, from_stage, to_stage)
        debug = logger.isEnabledFor(logging.DEBUG)
        t0 = time.perf_counter() if debug else 0.0
        try:
            get_view = getattr(self.client, "get_view", None)
            if get_view is not None:
                view = get_view(key, self.get_sub_timeout_ms)
            else:
                view = self.client.get_buffers([key], self.get_sub_timeout_ms)[0]
                # A StateValueBuffer (Yuanrong's type): its bytes as a memoryview.
                if view is not None and not isinstance(view, memoryview):
                    view = view.ImmutableData()
        except RuntimeError as e:
            if getattr(e, "code", None) == _K_NOT_FOUND:
                kind = "timeout" if self.get_sub_timeout_ms > 0 else "not_found"
                self._fail(kind, e, timeouts=1)
                logger.debug("YuanrongConnector get %s: %s", key, e)
            else:
                self._fail("transport", e, errors=1)
                logger.error("YuanrongConnector get %s failed: %s", key, e)
            return None
        if view is None:
            kind = "timeout" if self.get_sub_timeout_ms > 0 else "not_found"
            self._fail(kind, "key %s missing" % key, timeouts=1)
            logger.debug("YuanrongConnector get %s: not found", key)
            return None
        size = len(view)
        try:
            obj = deserialize(view, zero_copy=self.zero_copy)
            if isinstance(obj, memoryview):
                # A raw bytes payload: hand back bytes, as it was put.
                obj = obj.tobytes()
        except Exception as e:
            self._fail("decode", e, errors=1)
            logger.error("YuanrongConnector get %s: cannot decode %d bytes: %s", key, size, e)
            return None
        finally:
            del view
        if self.cleanup_reads:
            self._track(get_key, key)
        with self._lock:
            m = self._metrics
            m["gets"] += 1
            m["bytes_transferred"] += size
        if debug:
            logger.debug("YuanrongConnector fetched %s: %d bytes in %.1f ms",
                         key, size, (time.perf_counter() - t0) * 1000)
        return obj, size

    def cleanup(self, request_id: str) -> None:
        """Deletes the request's keys on every edge this connector used."""
        if self.client is None:
            return
        with self._lock:
            ids = [
                rid
                for rid in self._keys
                if rid == request_id
                or (rid.startswith(request_id) and rid[len(request_id)] in _KEY_SEPARATORS)
            ]
            keys = sorted({k for rid in ids for k in self._keys.pop(rid)})
        if not keys:
            return
        try:
            for i in range(0, len(keys), 10000):
                failed = self.client.delete(keys[i : i + 10000])
                if failed:
                    logger.warning("YuanrongConnector cleanup %s: could not delete %s",
                                   request_id, failed)
        except Exception as e:
            self._fail("transport", e, errors=1)
            logger.error("YuanrongConnector cleanup %s failed: %s", request_id, e)

    def health(self) -> dict:
        if self.client is None:
            return {"status": "unhealthy", "error": "Datasystem client not initialized"}
        status = self.client.health_check()
        with self._lock:
            metrics = dict(self._metrics)
            last_error = self._last_error
            tracked = sum(len(v) for v in self._keys.values())
        return {
            "status": "healthy" if status.is_ok() else "unhealthy",
            "worker_status": status.to_string(),
            "host": self.host,
            "port": self.port,
            "protocol": "shm" if self.client.is_local else "tcp",
            "pool_device": None,
            "pool_size": 0,
            "tracked_keys": tracked,
            "last_error": last_error,
            **metrics,
        }

    # -- streaming edges -----------------------------------------------------

    def _edge_client(self):
        if self.client is None:
            raise RuntimeError("YuanrongConnector is closed")
        return stream_client_over(self.client)

    def open_chunk_writer(self, from_stage: str, to_stage: str, request_id: str) -> ChunkWriter:
        """The sending end of request_id's edge from_stage -> to_stage."""
        return ChunkWriter(self._edge_client(), self._make_key(request_id, from_stage, to_stage))

    def open_chunk_reader(self, from_stage: str, to_stage: str, request_id: str) -> ChunkReader:
        """The receiving end of request_id's edge from_stage -> to_stage."""
        return ChunkReader(self._edge_client(), self._make_key(request_id, from_stage, to_stage))

    def put_chunked(self, from_stage: str, to_stage: str, request_id: str,
                    data: Union[bytes, bytearray, memoryview], chunk_size: int = 0) -> int:
        """Sends bytes-like data as chunks of chunk_size (0: stream_chunk_size)
        and the end marker; returns the number of chunks."""
        size = chunk_size or self.stream_chunk_size
        if size <= 0:
            raise ValueError("put_chunked needs a chunk size (stream_chunk_size is off)")
        view = memoryview(data).cast("B")
        n = 0
        with self.open_chunk_writer(from_stage, to_stage, request_id) as w:
            for off in range(0, len(view), size):
                w.send(view[off:off + size])
                n += 1
            w.end()
        return n

    def get_chunked(self, from_stage: str, to_stage: str, request_id: str,
                    timeout_ms: Optional[int] = None) -> bytes:
        """Every chunk up to the end marker, joined; each waited for up to
        timeout_ms (default get_sub_timeout_ms); TimeoutError when one does
        not come."""
        t = self.get_sub_timeout_ms if timeout_ms is None else timeout_ms
        with self.open_chunk_reader(from_stage, to_stage, request_id) as r:
            return b"".join(r.chunks(t))

    def close(self) -> None:
        client = getattr(self, "client", None)
        self.client = None
        self._closed = True
        if client is not None:
            try:
                client.close()
            except Exception as e:  # pragma: no cover - close never raises in practice
                logger.warning("YuanrongConnector close: %s", e)
            logger.info("YuanrongConnector closed")
