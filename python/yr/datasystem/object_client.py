"""Object cache client (Yuanrong Datasystem's ``yr.datasystem.object_client``).

``WriteMode``, ``ConsistencyType`` and ``CacheType`` live here, as in
Yuanrong (its KV client imports them from this module). ``Buffer`` is a value
in the worker's memory: one being written (``KVClient.mcreate``,
``ObjectClient.create``) or one pinned for reading (``ObjectClient.get``).

A ``Buffer`` answers to both names Yuanrong gives such buffers: the snake_case
methods of ``object_client.Buffer`` (``mutable_data``, ``immutable_data``,
``memory_copy``, ``publish``, ``seal``, ``get_size``, ``wlatch`` ...) and the
CamelCase ones of the buffers Yuanrong's ``KVClient.mcreate`` returns
(``MutableData``, ``ImmutableData``, ``GetSize``, ``RLatch``, ``UnRLatch``).

Mutable objects (Yuanrong's pattern: get a published buffer, ``wlatch``,
``memory_copy``, ``publish`` again, ``unwlatch``): the worker keeps whole
versions, so writing to a published buffer writes a new version of the
object, made on the first write as a copy of the buffer's bytes, and
``publish`` makes it the object's value. Readers never see a half-written
version: one that holds a buffer keeps its version's bytes, a later get
sees the new one. The new version is written with ``WriteMode.NONE_L2_CACHE``
and no TTL.

``seal`` is ``publish`` of a final version: afterwards the buffer refuses
writes, ``wlatch``, ``publish`` and ``seal`` with K_OC_ALREADY_SEALED
("Client object is already sealed"), as Yuanrong's. The worker keeps the
mark too (``ds_object_seal``): a set or publish of the key by any client
then fails with K_OC_ALREADY_SEALED and the sealed version stays.

Latches: ``rlatch`` / ``unrlatch`` of a published buffer take and drop the
worker's read latch on its key (writers of the key wait meanwhile);
``wlatch`` / ``unwlatch`` its write latch, which also keeps other clients'
write latches and latched reads of the key out (``ds_object_wlatch``). An
unpublished buffer is its creator's alone: its latches succeed at once.
"""

from enum import IntEnum
from typing import Any, List, Optional, Sequence, Union

from yr.datasystem import _checks as _c
from yr.datasystem import _native as _n
from yr.datasystem._native import DsError
from yr.datasystem.util import Status, Validator

__all__ = ["WriteMode", "ConsistencyType", "CacheType", "Buffer", "ObjectClient", "ObjMetaInfo"]


class WriteMode(IntEnum):
    """Reliability of an object (docs/design.md section 3).

    ===================================  ===========================================
    ``NONE_L2_CACHE``                    cache only, never evicted (default)
    ``WRITE_THROUGH_L2_CACHE``           cache, written to L2 synchronously
    ``WRITE_BACK_L2_CACHE``              cache, written to L2 asynchronously
    ``NONE_L2_CACHE_EVICT``              volatile: evicted when space is needed
    ``WRITE_BACK_L2_CACHE_EVICT``        evictable, written to L2 asynchronously
    ===================================  ===========================================
    """

    NONE_L2_CACHE = 0
    WRITE_THROUGH_L2_CACHE = 1
    WRITE_BACK_L2_CACHE = 2
    NONE_L2_CACHE_EVICT = 3
    WRITE_BACK_L2_CACHE_EVICT = 4


class ConsistencyType(IntEnum):
    """Consistency of an object. Published objects are immutable here, so both hold."""

    PRAM = 0
    CAUSAL = 1


class CacheType(IntEnum):
    """Where data is cached. Only MEMORY is supported by this datasystem.

    ``MEMEORY`` is Yuanrong's spelling, kept as an alias so its code runs.
    """

    MEMORY = 0
    MEMEORY = 0
    DISK = 1


_LATCH_MAX = Validator.INT32_MAX_SIZE


def _check_latch_timeout(timeout_sec):
    Validator.check_args_types([["timeout_sec", timeout_sec, int]])
    Validator.check_param_range("timeout_sec", timeout_sec, 1, _LATCH_MAX)


def _check_nested_keys(nested_object_keys):
    if nested_object_keys is None:
        return []
    Validator.check_args_types([["nested_object_keys", nested_object_keys, list]])
    if not all(isinstance(k, str) for k in nested_object_keys):
        raise TypeError(
            "The input of nested_object_keys should be a list of strings. There exists error type."
        )
    return nested_object_keys


class ObjMetaInfo:
    """Yuanrong's ObjMetaInfo: ``obj_size`` (0 when the object is not found)
    and ``locations`` (the addresses of the workers holding it: here the one
    the client is connected to, which answered)."""

    __slots__ = ("obj_size", "locations")

    def __init__(self, obj_size: int = 0, locations: Optional[List[str]] = None) -> None:
        self.obj_size = obj_size
        self.locations = list(locations or [])

    def __eq__(self, other):
        if not isinstance(other, ObjMetaInfo):
            return NotImplemented
        return (self.obj_size, self.locations) == (other.obj_size, other.locations)

    def __repr__(self):
        return "ObjMetaInfo(obj_size=%d, locations=%r)" % (self.obj_size, self.locations)


def _set_nested(kv, key, nested):
    native = _n.hook("object_set_nested")
    if native is None:
        raise DsError(
            _n.K_NOT_SUPPORTED,
            "nested_object_keys need libdatasystem's ds_object_set_nested, which this build lacks",
        )
    kbs = _c.key_list(nested, name="nested_object_keys")
    kv._call(native, key.encode("utf-8", "surrogateescape"), kbs)


class Buffer(_n.BufferBase):
    """A value in the worker's memory, written in place or pinned for reading.

    ``mutable_data()`` is a writable memoryview over the reserved bytes (in the
    worker's shared memory for a local client); fill it, then publish with
    ``KVClient.mset_buffer([...])`` or ``publish()``. The buffer (a reservation,
    or the pin of the version read) is dropped when the Buffer and every view
    taken from it are gone, or on ``release()``.

    A Buffer also exports its bytes through the buffer protocol, zero copy:
    ``memoryview(buf)``, ``numpy.frombuffer(buf)``, ``struct.unpack_from(fmt,
    buf)``. An unpublished buffer's view is writable (``mutable_data()``), a
    published one's read-only (``immutable_data()``; writing needs
    ``mutable_data()``). On CPython 3.12 and later through ``__buffer__``;
    before that through the C base ``_native.BufferBase``, where the build
    has it (``_native.BUFFER_PROTOCOL`` says whether it works).
    """

    __slots__ = (
        "_client", "_pin", "_key", "_size", "_published", "_wlatched", "_draft", "_sealed",
        "__weakref__",
    )

    def __init__(
        self, client: Any = None, handle: Optional[int] = None, key: str = "", published: bool = False
    ) -> None:
        """``Buffer()`` (as Yuanrong's code makes one, to be assigned later) is empty:
        every method but ``get_size`` raises RuntimeError until it is replaced by one
        that ``create`` or ``get`` returned."""
        self._client = client
        self._key = key
        self._published = published
        self._wlatched = 0  # write latches this buffer took in the worker
        self._draft = None  # the next version of a published object, being written
        self._sealed = False
        if handle is None:
            self._pin = None
            self._size = 0
        else:
            self._pin = _n.Pin(handle)
            self._size = _n.load().ds_buffer_size(handle)

    # -- properties of this package ---------------------------------------

    @property
    def key(self) -> str:
        return self._key

    @property
    def size(self) -> int:
        return self._size

    @property
    def published(self) -> bool:
        return self._published

    def __len__(self) -> int:
        return self._size

    def _handle(self):
        if self._pin is None:
            raise DsError(_n.K_INVALID, "The buffer is None, please create it first.")
        h = self._pin.handle
        if not h:
            raise DsError(_n.K_INVALID, "The buffer of key %r was released." % self._key)
        return h

    # -- Yuanrong's object_client.Buffer ------------------------------------

    def get_size(self) -> int:
        """The size of the buffer in bytes."""
        if self._pin is None:
            raise DsError(_n.K_INVALID, "The buffer is None, please create it first.")
        return self._size

    def _check_not_sealed(self):
        if self._sealed:
            raise DsError(_n.K_OC_ALREADY_SEALED, "Client object is already sealed")

    def _new_version(self):
        """The draft of the object's next version, a copy of this buffer's bytes."""
        if self._draft is None:
            if self._client is None:
                raise DsError(_n.K_INVALID, "The buffer of key %r is read-only." % self._key)
            draft = self._client.mcreate([self._key], [self._size])[0]
            if self._size:
                draft.mutable_data()[:] = self.immutable_data()
            self._draft = draft
        return self._draft

    def mutable_data(self) -> memoryview:
        """A writable memoryview of the buffer; of a published one, of its next
        version (see the module's notes), which ``publish`` makes visible."""
        h = self._handle()
        self._check_not_sealed()
        if self._published:
            return self._new_version().mutable_data()
        addr = _n.load().ds_buffer_mutable_data(h)
        if not addr:
            raise DsError(
                _n.K_INVALID, "The buffer of key %r is published: it is read-only." % self._key
            )
        return _n.pinned_view(self._pin, addr, self._size, readonly=False)

    def immutable_data(self) -> memoryview:
        """A read-only memoryview of the buffer's bytes (with this client's
        unpublished writes to a published buffer)."""
        h = self._handle()
        if self._draft is not None:
            return self._draft.immutable_data()
        addr = _n.load().ds_buffer_data(h)
        return _n.pinned_view(self._pin, addr, self._size, readonly=True)

    def __buffer__(self, flags: int) -> memoryview:
        """The view the buffer protocol exports (PEP 688): mutable_data() of an
        unpublished buffer, else immutable_data(); a writable request on a
        published buffer raises BufferError."""
        self._handle()
        if not self._published and not self._sealed:
            return self.mutable_data()
        if flags & _n.PYBUF_WRITABLE:
            raise BufferError(
                "The buffer of key %r is published: it is read-only "
                "(write the next version through mutable_data())." % self._key
            )
        return self.immutable_data()

    def memory_copy(self, value: Union[bytes, bytearray, memoryview, str], offset: int = 0) -> None:
        """Copies value (memoryview, bytes, bytearray or str) into the buffer at offset."""
        value = _c.value("value", value)
        mv = memoryview(value)
        if not mv.c_contiguous:
            mv = memoryview(mv.tobytes())
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        _c.check_int("offset", offset, 0, self._size)
        if offset + n > self._size:
            raise DsError(
                _n.K_INVALID,
                "The data size %d at offset %d exceeds the buffer size %d." % (n, offset, self._size),
            )
        self.mutable_data()[offset : offset + n] = mv

    def publish(self, nested_object_keys: Optional[List[str]] = None) -> None:
        """Makes the buffer's contents visible under its key.

        nested_object_keys: keys this object holds (Yuanrong's nested
        references): they are not deleted while this object lives, though
        their own global references end (see ``ObjectClient.g_decrease_ref``).
        """
        nested = _check_nested_keys(nested_object_keys)
        self._handle()
        self._check_not_sealed()
        if self._client is None:
            raise DsError(_n.K_INVALID, "The buffer of key %r is not writable." % self._key)
        if self._draft is not None:
            draft = self._draft
            self._client.mset_buffer([draft])
            # This buffer now shows the version it published.
            self._pin, draft._pin = draft._pin, None
            self._draft = None
        elif not self._published:
            self._client.mset_buffer([self])
        if nested:
            _set_nested(self._client, self._key, nested)

    def seal(self, nested_object_keys: Optional[List[str]] = None) -> None:
        """Publishes the buffer's final version: it is not written again."""
        self.publish(nested_object_keys)
        native = _n.hook("object_seal")
        if native is not None and self._client is not None:
            self._client._call(native, [self._key.encode("utf-8", "surrogateescape")])
        self._sealed = True

    def invalidate_buffer(self) -> None:
        """Removes the object from the worker this client is connected to (Yuanrong:
        "invalidate data on the current host") and drops this buffer; a later get of
        the key fails. An unpublished buffer is only discarded. Pins other readers
        hold keep their version's bytes, as for a delete."""
        self._handle()
        if self._published and self._client is not None:
            failed = self._client.delete([self._key])
            if failed:
                raise DsError(_n.K_RUNTIME_ERROR, "invalidate_buffer of key %r failed" % self._key)
        self.release()

    def wlatch(self, timeout_sec: int = 60) -> None:
        """Write latch on a published object's key: other clients' wlatch and
        with_latch reads of it fail, and their writes of it wait, until
        ``unwlatch`` (or this client closes). Tries for up to timeout_sec, then
        raises RuntimeError (K_TRY_AGAIN). An unpublished buffer is its
        creator's alone: nothing to latch."""
        _check_latch_timeout(timeout_sec)
        self._handle()
        self._check_not_sealed()
        native, kb = self._latch_target("object_wlatch")
        if native is not None:
            self._client._call(native, [kb], min(timeout_sec * 1000, _LATCH_MAX))
            self._wlatched += 1

    def unwlatch(self) -> None:
        """Releases the write latch ``wlatch`` took (none taken: nothing to do)."""
        self._handle()
        if self._wlatched > 0:
            native = _n.hook("object_unwlatch")
            self._wlatched -= 1
            self._client._call(native, [self._key.encode("utf-8", "surrogateescape")])

    def _latch_target(self, name):
        self._handle()
        native = _n.hook(name)
        if native is None or not self._published or self._client is None:
            return None, None
        return native, self._key.encode("utf-8", "surrogateescape")

    def rlatch(self, timeout_sec: int = 60) -> None:
        """Read latch on the key (see the module's notes)."""
        _check_latch_timeout(timeout_sec)
        native, kb = self._latch_target("kv_rlatch")
        if native is not None:
            self._client._call(native, [kb], min(timeout_sec * 1000, _LATCH_MAX))

    def unrlatch(self) -> None:
        """Releases the read latch."""
        native, kb = self._latch_target("kv_unrlatch")
        if native is not None:
            self._client._call(native, [kb])

    def release(self) -> None:
        """Drops the buffer now (an unpublished one is discarded).

        Views still held from it must not be used afterwards.
        """
        if self._draft is not None:
            self._draft.release()
            self._draft = None
        if self._pin is not None:
            self._pin.release()

    # -- Yuanrong's KV buffer (StateValueBuffer) names -----------------------

    def MutableData(self) -> memoryview:  # noqa: N802 - Yuanrong's name
        return self.mutable_data()

    def ImmutableData(self, with_latch=False, timeout_sec=60):  # noqa: N802
        """A read-only memoryview of the bytes (with_latch takes the read latch first)."""
        Validator.check_args_types([["with_latch", with_latch, bool]])
        if with_latch:
            _check_latch_timeout(timeout_sec)
        return self.immutable_data()

    def GetSize(self):  # noqa: N802
        return self._size

    def RLatch(self, timeout_sec=60):  # noqa: N802
        """Read latch; returns a Status, as Yuanrong's binding does."""
        try:
            self.rlatch(timeout_sec)
        except DsError as e:
            return Status(e.code, e.message)
        return Status()

    def UnRLatch(self):  # noqa: N802
        try:
            self.unrlatch()
        except DsError as e:
            return Status(e.code, e.message)
        return Status()

    def __repr__(self):
        return "Buffer(key=%r, size=%d, published=%s)" % (self._key, self._size, self._published)


class ObjectClient:
    """Object cache client (Yuanrong's ``ObjectClient``) over the same worker.

    Objects and KV values are one namespace here: ``put`` / ``create`` +
    ``publish`` write a key a ``KVClient`` reads, and the other way round.
    Global references (``g_increase_ref`` ...) need the library's
    ``ds_object_g_increase_ref`` & co.; without them those calls raise
    K_NOT_SUPPORTED (``query_global_ref_num`` answers -1).
    """

    def __init__(
        self,
        host: str,
        port: int,
        connect_timeout_ms: int = 9000,
        token: str = "",
        client_public_key: str = "",
        client_private_key: str = "",
        server_public_key: str = "",
        access_key: str = "",
        secret_key: str = "",
        tenant_id: str = "",
        req_timeout_ms: int = 0,
        *,
        enable_exclusive_connection: bool = False,
        service_discovery: Any = None,
        enable_cross_node_connection: bool = False,
        **kwargs: Any
    ) -> None:
        from yr.datasystem.kv_client import KVClient

        Validator.check_args_types([["host", host, str], ["port", port, int]])
        # service_discovery and enable_cross_node_connection (keywords; not
        # in Yuanrong's Python ObjectClient, which its C++ ConnectOptions
        # has): as KVClient's, worker selection and failover by discovery.
        if service_discovery is not None:
            host, port = "", 0
        self._kv = KVClient(
            host,
            port,
            connect_timeout_ms,
            token,
            client_public_key,
            client_private_key,
            server_public_key,
            access_key,
            secret_key,
            tenant_id,
            enable_cross_node_connection,
            req_timeout_ms,
            service_discovery=service_discovery,
            enable_exclusive_connection=enable_exclusive_connection,
            **kwargs
        )

    @staticmethod
    def _consistency(param):
        if param is None:
            param = {"consistency_type": ConsistencyType.PRAM}
        Validator.check_args_types([["param", param, dict]])
        (consistency_type,) = Validator.check_key_exists(param, ["consistency_type"])
        Validator.check_args_types([["consistency_type", consistency_type, ConsistencyType]])
        return consistency_type

    def init(self) -> None:
        """Connects to the worker. Raises RuntimeError when it cannot."""
        self._kv.init()

    def close(self) -> None:
        self._kv.close()

    def __enter__(self) -> "ObjectClient":
        self.init()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def create(self, object_key: str, size: int, param: Optional[dict] = None) -> Buffer:
        """A writable Buffer of size bytes for object_key; publish() makes it visible."""
        self._consistency(param)
        Validator.check_args_types([["object_key", object_key, str], ["size", size, int]])
        return self._kv.mcreate([object_key], [size])[0]

    def put(
        self,
        object_key: str,
        value: Union[bytes, bytearray, memoryview, str],
        param: Optional[dict] = None,
        nested_object_keys: Optional[List[str]] = None,
    ) -> None:
        """Writes value (memoryview, bytes or bytearray) under object_key."""
        self._consistency(param)
        nested = _check_nested_keys(nested_object_keys)
        Validator.check_args_types(
            [["object_key", object_key, str], ["value", value, memoryview, bytes, bytearray]]
        )
        self._kv.set(object_key, value)
        if nested:
            _set_nested(self._kv, object_key, nested)

    def get(self, object_keys: Sequence[str], timeout_ms: int) -> List[Optional[Buffer]]:
        """Read-only Buffers of object_keys (None for a missing one), waiting up to
        timeout_ms for them. Raises RuntimeError when none was found."""
        Validator.check_args_types([["object_keys", object_keys, list], ["timeout_ms", timeout_ms, int]])
        Validator.check_param_range("timeout_ms", timeout_ms, 0, Validator.INT32_MAX_SIZE)
        if not object_keys:
            raise DsError(_n.K_INVALID, "The input of object_keys list should not be empty")
        return self._kv._pinned_buffers(object_keys, timeout_ms, Buffer)

    def generate_object_id(self, prefix: str = "") -> str:
        """A random UUID key when prefix is empty; otherwise prefix itself."""
        return self._kv.generate_key(prefix)

    generate_object_key = generate_object_id

    def _ref_hook(self, name):
        native = _n.hook(name)
        if native is None:
            raise DsError(
                _n.K_NOT_SUPPORTED,
                "%s needs libdatasystem's global references (ds_object_%s), which this build "
                "lacks." % (name, name),
            )
        return native

    def _refs(self, name, object_keys):
        Validator.check_args_types([["object_keys", object_keys, list]])
        if not object_keys:
            raise DsError(_n.K_INVALID, "The input of object_keys list should not be empty")
        kbs = _c.key_list(object_keys, name="object_keys")
        statuses = self._kv._call(self._ref_hook(name), kbs)
        return [k for k, st in zip(object_keys, statuses) if st != _n.K_OK]

    def g_increase_ref(self, object_keys: Sequence[str]) -> List[str]:
        """Adds a global reference to each object; returns the keys that failed."""
        return self._refs("g_increase_ref", object_keys)

    def g_decrease_ref(self, object_keys: Sequence[str]) -> List[str]:
        """Drops a global reference from each object (at 0 the object is deleted);
        returns the keys that failed."""
        return self._refs("g_decrease_ref", object_keys)

    def query_global_ref_num(self, object_key: str) -> int:
        """The object's global reference count; -1 on failure (as Yuanrong)."""
        Validator.check_args_types([["object_key", object_key, str]])
        native = _n.hook("query_global_ref_num")
        if native is None or not object_key:
            return -1
        try:
            return self._kv._call(native, object_key.encode("utf-8", "surrogateescape"))
        except DsError:
            return -1

    def get_meta_info(self, object_keys: Sequence[str], tenant_id: str = "") -> List[ObjMetaInfo]:
        """Yuanrong's GetObjMetaInfo: an ObjMetaInfo per key (size 0 and no
        location for a missing one). Raises RuntimeError when no key was found,
        and for a tenant_id other than "" (this datasystem has no tenants)."""
        Validator.check_args_types([["object_keys", object_keys, list], ["tenant_id", tenant_id, str]])
        if not object_keys:
            raise DsError(_n.K_INVALID, "The input of object_keys list should not be empty")
        kbs = _c.key_list(object_keys, name="object_keys")
        native = _n.hook("object_get_meta_info")
        if native is None:
            raise DsError(_n.K_NOT_SUPPORTED,
                          "get_meta_info needs libdatasystem's ds_object_get_meta_info, which this "
                          "build lacks.")
        metas = self._kv._call(native, tenant_id.encode("utf-8", "surrogateescape"), kbs)
        return [ObjMetaInfo(size, [loc] if loc else []) for size, loc in metas]

    GetObjMetaInfo = get_meta_info

    def health_check(self) -> Status:
        return self._kv.health_check()
