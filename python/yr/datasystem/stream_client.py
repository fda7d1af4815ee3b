"""Stream cache client: Yuanrong's ``yr.datasystem.stream_client``.

``StreamClient`` creates producers and subscribes consumers to named streams
on the worker; ``Producer.send`` appends an element, ``Consumer.receive`` /
``receive_any`` return ``Element`` objects in order and ``Consumer.ack``
releases them. Same names, parameters, defaults and errors as Yuanrong's
module (errors are RuntimeError, ``code: [...], msg: [...]``); the design is
the repository's docs/streams.md. Over ctypes (``_native``), like
``kv_client``: the C API is include/ds/stream_client.h.
"""

import ctypes
import threading
from enum import Enum

from . import _native as _n
from .kv_client import KVClient
from .util import Validator as validator

INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

__all__ = [
    "StreamClient",
    "Producer",
    "Consumer",
    "Element",
    "SubconfigType",
    "SubscriptionType",
    "SubscriptionConfig",
]


class SubconfigType(Enum):
    """The type of a subscription (Yuanrong's name)."""

    STREAM = 0
    ROUND_ROBIN = 1
    KEY_PARTITIONS = 2


# Yuanrong's C++ name for the same enum.
SubscriptionType = SubconfigType


class SubscriptionConfig:
    """A subscription's name and type (Yuanrong's SubscriptionConfig)."""

    SC_CACHE_CAPACITY = 32768
    SC_CACHE_LWM = 0

    def __init__(self, subscription_name="", subscription_type=SubconfigType.STREAM,
                 cache_capacity=SC_CACHE_CAPACITY, cache_prefetch_lwm=SC_CACHE_LWM):
        self.subscription_name = subscription_name
        self.subscription_type = subscription_type
        self.cache_capacity = cache_capacity
        self.cache_prefetch_lwm = cache_prefetch_lwm


class Element(bytes):
    """One received element: its bytes (``memoryview(element)`` works) and
    ``get_id()``, the id the worker gave it (from 1)."""

    def __new__(cls, data, element_id):
        obj = super().__new__(cls, data)
        obj._id = element_id
        return obj

    def get_id(self):
        return self._id

    @property
    def id(self):
        return self._id


def _check_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("The input of %s should be int." % name)


def _check_str(name, value):
    if not isinstance(value, str):
        raise TypeError("The input of %s should be string." % name)


class StreamClient:
    """The client of streams: one worker connection (like KVClient's)."""

    def __init__(self, host, port, client_public_key="", client_private_key="",
                 server_public_key="", access_key="", secret_key="", token="", tenant_id=""):
        if isinstance(token, bytes):
            token = token.decode()
        if isinstance(client_private_key, bytes):
            client_private_key = client_private_key.decode()
        if isinstance(secret_key, bytes):
            secret_key = secret_key.decode()
        self._kv = KVClient(host, port, token=token, client_public_key=client_public_key,
                            client_private_key=client_private_key,
                            server_public_key=server_public_key, access_key=access_key,
                            secret_key=secret_key, tenant_id=tenant_id)

    def init(self):
        """Connects to the worker; RuntimeError when it cannot."""
        self._kv.init()

    def _handle(self):
        h = self._kv._handle
        if h is None:
            raise _n.DsError(_n.K_NOT_READY, "StreamClient is not initialized: call init() first")
        return h

    def create_producer(self, stream_name, delay_flush_time_ms=5, page_size_byte=1024 * 1024,
                        max_stream_size_byte=1024 * 1024 * 1024, auto_cleanup=False,
                        retain_for_num_consumers=0, encrypt_stream=False, reserve_size=0):
        """Creates a producer on stream_name (made on first use). Errors:
        TypeError for a wrong type, RuntimeError for a bad value or a failure."""
        _check_str("stream_name", stream_name)
        _check_int("delay_flush_time_ms", delay_flush_time_ms)
        validator.check_param_range("delay_flush_time_ms", delay_flush_time_ms, 0,
                                    validator.INT32_MAX_SIZE)
        _check_int("page_size_byte", page_size_byte)
        validator.check_param_range("page_size_byte", page_size_byte, 0, INT64_MAX)
        _check_int("max_stream_size_byte", max_stream_size_byte)
        validator.check_param_range("max_stream_size_byte", max_stream_size_byte, 0, UINT64_MAX)
        if not isinstance(auto_cleanup, bool):
            raise TypeError("The input of auto_cleanup should be bool.")
        _check_int("retain_for_num_consumers", retain_for_num_consumers)
        validator.check_param_range("retain_for_num_consumers", retain_for_num_consumers, 0,
                                    UINT64_MAX)
        if not isinstance(encrypt_stream, bool):
            raise TypeError("The input of encrypt_stream should be bool.")
        _check_int("reserve_size", reserve_size)
        validator.check_param_range("reserve_size", reserve_size, 0, UINT64_MAX)
        conf = _n.ProducerConfC(delay_flush_time_ms, page_size_byte, max_stream_size_byte,
                                auto_cleanup, retain_for_num_consumers, encrypt_stream,
                                reserve_size)
        out = ctypes.c_void_p()
        lib = _n.load()
        _n.check(lib.ds_stream_create_producer(self._handle(), stream_name.encode(),
                                               ctypes.byref(conf), ctypes.byref(out)),
                 "create_producer")
        return Producer(self, out.value)

    def subscribe(self, stream_name, sub_name, subscription_type):
        """Subscribes a new consumer. subscription_type: an int
        (SubconfigType.X.value) or a SubconfigType, or a SubscriptionConfig in
        place of sub_name with subscription_type left out."""
        _check_str("stream_name", stream_name)
        if isinstance(subscription_type, SubconfigType):
            subscription_type = subscription_type.value
        _check_int("type", subscription_type)
        _check_str("sub_name", sub_name)
        out = ctypes.c_void_p()
        lib = _n.load()
        _n.check(lib.ds_stream_subscribe(self._handle(), stream_name.encode(), sub_name.encode(),
                                         subscription_type, ctypes.byref(out)), "subscribe")
        return Consumer(self, out.value)

    def delete_stream(self, stream_name):
        """Deletes a stream none uses (K_SC_STREAM_IN_USE otherwise)."""
        _check_str("stream_name", stream_name)
        _n.check(_n.load().ds_stream_delete(self._handle(), stream_name.encode()), "delete_stream")

    def _query(self, fn, stream_name):
        _check_str("stream_name", stream_name)
        out = ctypes.c_uint64()
        _n.check(fn(self._handle(), stream_name.encode(), ctypes.byref(out)), "query")
        return out.value

    def query_global_producer_num(self, stream_name):
        """Workers with a producer on the stream."""
        return self._query(_n.load().ds_stream_query_global_producer_num, stream_name)

    def query_global_consumer_num(self, stream_name):
        """Consumers of the stream."""
        return self._query(_n.load().ds_stream_query_global_consumer_num, stream_name)


class _End:
    """A producer's or consumer's handle, closed once."""

    def __init__(self, client, handle):
        self._client = client  # the handle's client lives as long as it
        self._h = handle
        self._lock = threading.Lock()

    def _take(self):
        with self._lock:
            h, self._h = self._h, None
        return h

    def _get(self, what):
        h = self._h
        if h is None:
            raise _n.DsError(_n.K_SC_ALREADY_CLOSED, "The %s is already closed" % what)
        return h


class Producer(_End):
    """Appends elements to its stream."""

    def send(self, element_bytes, timeout_ms=None):
        """Appends one element (bytes, bytearray or memoryview, not empty).
        timeout_ms: how long to wait for room when the stream is at its size
        limit (0: not at all); then RuntimeError (K_OUT_OF_MEMORY)."""
        if not isinstance(element_bytes, (bytes, bytearray, memoryview)):
            raise TypeError("The input of parament should be memoryview or bytes or bytearray.")
        if timeout_ms is None:
            timeout = -1
        else:
            _check_int("timeout_ms", timeout_ms)
            validator.check_param_range("timeout_ms", timeout_ms, 0, validator.INT32_MAX_SIZE)
            timeout = timeout_ms
        h = self._get("producer")
        lib = _n.load()
        if isinstance(element_bytes, bytes):
            _n.check(lib.ds_producer_send(h, element_bytes, len(element_bytes), timeout), "send")
            return
        with _n.BorrowedBuffers() as keep:
            addr, n = keep.add(element_bytes)
            _n.check(lib.ds_producer_send(h, addr, n, timeout), "send")

    def close(self):
        """Closes the producer; its elements stay readable."""
        h = self._take()
        if h is None:
            raise _n.DsError(_n.K_SC_ALREADY_CLOSED, "The producer is already closed")
        _n.check(_n.load().ds_producer_close(h), "close")

    def __del__(self):
        try:
            h = self._take()
            if h is not None:
                _n.load().ds_producer_close(h)
        except Exception:
            pass


class Consumer(_End):
    """Receives its subscription's elements in order."""

    def _receive(self, expect_num, timeout_ms):
        h = self._get("consumer")
        lib = _n.load()
        out = ctypes.POINTER(_n.ElementC)()
        n = ctypes.c_size_t()
        _n.check(lib.ds_consumer_receive(h, expect_num, timeout_ms, ctypes.byref(out),
                                         ctypes.byref(n)), "receive")
        try:
            return [Element(ctypes.string_at(out[i].ptr, out[i].size), out[i].id)
                    for i in range(n.value)]
        finally:
            if n.value:
                lib.ds_elements_free(out)

    def receive(self, expect_num, timeout_ms):
        """Up to expect_num elements, waiting up to timeout_ms for that many."""
        _check_int("expect_num", expect_num)
        validator.check_param_range("expect_num", expect_num, 1, validator.INT32_MAX_SIZE)
        _check_int("timeout_ms", timeout_ms)
        validator.check_param_range("timeout_ms", timeout_ms, 0, validator.INT32_MAX_SIZE)
        return self._receive(expect_num, timeout_ms)

    def receive_any(self, timeout_ms):
        """Whatever is there, waiting up to timeout_ms for at least one."""
        _check_int("timeout_ms", timeout_ms)
        validator.check_param_range("timeout_ms", timeout_ms, 0, validator.INT32_MAX_SIZE)
        return self._receive(0, timeout_ms)

    def ack(self, element_id):
        """Done with every element up to element_id."""
        _check_int("element_id", element_id)
        validator.check_param_range("element_id", element_id, 0, UINT64_MAX)
        _n.check(_n.load().ds_consumer_ack(self._get("consumer"), element_id), "ack")

    def close(self):
        """Closes the consumer: its subscription and cursor go."""
        h = self._take()
        if h is None:
            raise _n.DsError(_n.K_SC_ALREADY_CLOSED, "The consumer is already closed")
        _n.check(_n.load().ds_consumer_close(h), "close")

    def __del__(self):
        try:
            h = self._take()
            if h is not None:
                _n.load().ds_consumer_close(h)
        except Exception:
            pass
