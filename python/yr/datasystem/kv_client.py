"""KV client of the datasystem (Yuanrong Datasystem's ``yr.datasystem.kv_client``).

``KVClient`` talks to one worker through libdatasystem (see ``_native``). A
worker on this host is reached over its Unix socket and its shared-memory arena
is mapped, so ``set`` copies a value once into the arena, ``get`` copies it once
out of it, and ``get_buffers`` / ``get_read_only_buffers`` / ``mcreate`` +
``mset_buffer`` read and write the arena in place.

Names, signatures and messages follow Yuanrong's Python SDK: ``WriteMode`` and
``CacheType`` come from ``object_client`` (re-exported here), ``ReadParam`` is
its namedtuple, errors are ``RuntimeError`` whose text is
``code: [<code text>], msg: [<message>]`` (precisely ``DsError``, with
``code``, the status number of status.h), arguments of the wrong type are
``TypeError("The input of <name> has invalid type, valid type: [...]")``.
Every call that may wait (connect, subscribe-gets, large transfers) releases
the GIL.
"""

import os
import sys
import threading
import uuid
from collections import namedtuple
from enum import IntEnum
from typing import Any, List, NoReturn, Optional, Sequence, Union

from yr.datasystem import _checks as _c
from yr.datasystem import _native as _n
from yr.datasystem._native import DsError
from yr.datasystem.object_client import Buffer, CacheType, WriteMode
from yr.datasystem.util import Status, Validator
from yr.datasystem.lib import libds_client_py as ds
from yr.datasystem.service_discovery import CoordinatorServiceDiscovery, ServiceDiscovery

# A value to set: bytes-like, or str (encoded as UTF-8).
BytesLike = Union[bytes, bytearray, memoryview]
Value = Union[bytes, bytearray, memoryview, str]

__all__ = [
    "KVClient",
    "SetParam",
    "ReadParam",
    "ReadOnlyBuffer",
    "WriteMode",
    "ExistenceOpt",
    "CacheType",
    "Buffer",
    "Status",
    "DsError",
]

DEFAULT_FAST_TRANSPORT_MEM_SIZE = 256 * 1024 * 1024
MAX_FAST_TRANSPORT_MEM_SIZE = 2 * 1024 * 1024 * 1024

# Yuanrong's text for the deprecated transactional mset (code K_RUNTIME_ERROR).
MSETTX_DEPRECATED_MSG = "MSetTx is a deprecated API and is no longer supported."


ReadParam = namedtuple("ReadParam", ["key", "offset", "size"])
ReadParam.__doc__ = """What ``KVClient.read`` reads of one value.

Args:
    key (str): the key of the value.
    offset (int): bytes of the value to skip.
    size (int): bytes to read from there.
"""


class ExistenceOpt(IntEnum):
    """What a set does when the key already exists: overwrite (NONE) or keep (NX)."""

    NONE = 0
    NX = 1


class SetParam:
    """The set properties of a key: write_mode, ttl_second, existence, cache_type.

    ``SetParam()`` gives Yuanrong's defaults; the keywords are this package's.
    """

    def __init__(
        self,
        write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
        ttl_second: int = 0,
        existence: "ExistenceOpt" = ExistenceOpt.NONE,
        cache_type: CacheType = CacheType.MEMORY,
    ) -> None:
        self.write_mode = write_mode
        self.ttl_second = ttl_second
        self.existence = existence
        self.cache_type = cache_type

    def __repr__(self) -> str:
        return "SetParam(write_mode=%r, ttl_second=%r, existence=%r)" % (
            self.write_mode,
            self.ttl_second,
            self.existence,
        )


class ReadOnlyBuffer(Buffer):
    """A value pinned for reading (Yuanrong's ``kv_client.ReadOnlyBuffer``).

    ``immutable_data(with_latch=False, timeout_sec=60)`` is a read-only
    memoryview of the pinned version; it stays intact when the key is
    overwritten or deleted, for as long as the buffer or a view of it lives.
    ``with_latch`` (or ``rlatch``) takes the worker's read latch on the key:
    writers of the key (set, delete) wait until ``unrlatch`` or the timeout.
    """

    __slots__ = ()

    def __init__(self, client: "KVClient", handle: int, key: str) -> None:
        super().__init__(client, handle, key, published=True)

    def immutable_data(self, with_latch: bool = False, timeout_sec: int = 60) -> memoryview:
        """A read-only memoryview of the value (with_latch: take the read latch first).

        Raises:
            TypeError: an argument of the wrong type.
            RuntimeError: timeout_sec outside [1, 2147483647].
        """
        Validator.check_args_types([["with_latch", with_latch, bool], ["timeout_sec", timeout_sec, int]])
        Validator.check_param_range("timeout_sec", timeout_sec, 1, Validator.INT32_MAX_SIZE)
        if with_latch:
            self.rlatch(timeout_sec)
        return Buffer.immutable_data(self)

    def ImmutableData(self, with_latch: bool = False, timeout_sec: int = 60) -> memoryview:  # noqa: N802 - Yuanrong's name
        return self.immutable_data(with_latch, timeout_sec)

    def __repr__(self):
        return "ReadOnlyBuffer(key=%r, size=%d)" % (self._key, self._size)


class StateValueBuffer(ReadOnlyBuffer):
    """A value ``get_buffers`` returns (Yuanrong's ``StateValueBuffer``), zero copy.

    Yuanrong's methods: ``GetSize()``, ``ImmutableData(with_latch=False,
    timeout_sec=60)``, ``RLatch`` / ``UnRLatch``, and the snake_case ones of
    ``ReadOnlyBuffer``. It also reads like the read-only memoryview of the
    value it pins: ``len``, indexing and slicing, ``==`` with bytes-like
    values, ``bytes(buf)``, ``tobytes()``, ``readonly``, ``nbytes``, and it
    exports that memoryview through the buffer protocol, zero copy:
    ``memoryview(buf)``, ``numpy.frombuffer(buf)``, ``struct.unpack_from(fmt,
    buf)``, ``pickle.loads(data, buffers=[buf])`` (a writable request raises
    BufferError). Before CPython 3.12 that needs the C base the build makes
    (``_native.BufferBase``; ``_native.BUFFER_PROTOCOL`` says whether it was
    found); without it take ``ImmutableData()`` for those. The pinned version
    stays intact until the buffer and every view of it are gone.
    """

    __slots__ = ("_view",)

    def __init__(self, client: "KVClient", handle: int, key: str) -> None:
        super().__init__(client, handle, key)
        self._view = None

    def _mv(self) -> memoryview:
        if self._view is None:
            self._view = Buffer.immutable_data(self)
        return self._view

    def __buffer__(self, flags: int) -> memoryview:
        if flags & _n.PYBUF_WRITABLE:
            raise BufferError("The buffer of key %r is read-only." % self._key)
        return self._mv()

    def __getitem__(self, index):
        return self._mv()[index]

    def __iter__(self):
        return iter(self._mv())

    def __eq__(self, other):
        if isinstance(other, StateValueBuffer):
            other = other._mv()
        try:
            return self._mv() == other
        except TypeError:
            return NotImplemented

    __hash__ = None

    def __bytes__(self) -> bytes:
        return self._mv().tobytes()

    def tobytes(self) -> bytes:
        return self._mv().tobytes()

    @property
    def readonly(self) -> bool:
        return True

    @property
    def nbytes(self) -> int:
        return self._size

    def release(self) -> None:
        self._view = None
        super().release()

    def __repr__(self):
        return "StateValueBuffer(key=%r, size=%d)" % (self._key, self._size)


# ---------------------------------------------------------------------------
# Arguments (messages in _checks / util.Validator).


def _enum_value(v, enum, name):
    if isinstance(v, enum):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return enum(v)
    # A foreign enum whose .value is one of ours (e.g. another binding's WriteMode).
    value = getattr(v, "value", None)
    if isinstance(value, int) and not isinstance(value, bool) and hasattr(v, "name"):
        return enum(value)
    raise _c.type_error(name, enum)


def _write_mode(v):
    return _enum_value(v, WriteMode, "write_mode")


def _existence(v, name="existence_opt"):
    return _enum_value(v, ExistenceOpt, name)


def _param(write_mode, ttl_second, existence=ExistenceOpt.NONE, existence_name="existence_opt"):
    p = _n.SetParamC()
    p.write_mode = int(_write_mode(write_mode))
    p.ttl_second = _c.ttl(ttl_second)
    p.existence = int(_existence(existence, existence_name))
    return p


_INT32_MAX = (1 << 31) - 1
_PARAMS = {}


def _param_cached(write_mode, ttl_second, existence):
    """_param for the common argument types, built once per combination (the
    library only reads it). Anything else is checked by _param each time."""
    if type(ttl_second) is not int or type(write_mode) not in (int, WriteMode) or \
            type(existence) not in (int, ExistenceOpt):
        return _param(write_mode, ttl_second, existence, "existence")
    k = (int(write_mode), ttl_second, int(existence))
    p = _PARAMS.get(k)
    if p is None:
        p = _param(write_mode, ttl_second, existence, "existence")
        if len(_PARAMS) < 256:
            _PARAMS[k] = p
    return p


def _statuses(n):
    arr = (_n.c_status * n)()
    # A status the library never writes: a key it did not report on counts as failed.
    sentinel = -1
    for i in range(n):
        arr[i] = sentinel
    return arr


def _not_found_or(rc):
    """DsError for a get that failed as a whole: Yuanrong's text when nothing was found."""
    if rc == _n.K_NOT_FOUND:
        return DsError(rc, _c.MSG_NOT_FOUND)
    msg = _n.last_error()
    return DsError(rc, msg)


# ---------------------------------------------------------------------------


class KVClient:
    """Datasystem KV client (Yuanrong's ``yr.datasystem.kv_client.KVClient``).

    Args:
        host (str): worker host; "" falls back to env DATASYSTEM_HOST.
        port (int): worker port; 0 falls back to env DATASYSTEM_PORT.
        connect_timeout_ms (int): connection timeout, default 9000.
        token (str): shared secret for an authenticated worker ("" = none;
            falls back to env DATASYSTEM_TOKEN).
        client_public_key, client_private_key, server_public_key, access_key,
        secret_key, tenant_id, enable_exclusive_connection,
        fast_transport_mem_size: accepted for compatibility with Yuanrong
            and checked for type; not used.
        enable_cross_node_connection (bool): with a ServiceDiscovery, fail
            over to another discovered worker when this one stops answering.
        req_timeout_ms (int): per-request timeout; <= 0 uses the library's
            default. Subscribe waits add their own timeout.
        service_discovery: a ``ServiceDiscovery`` or ``CoordinatorServiceDiscovery``
            (``init()`` called first): the library connects to the worker it
            selects and fails over through it (enable_cross_node_connection).
            Any other object with ``select_worker() -> (_, host, port, _)`` is
            asked once, in ``init()``.
        transport (str, keyword): "auto" (shared memory when the worker is on
            this host, its socket found by convention or from the worker's
            HELLO over TCP; else TCP), "tcp" or "local". ``is_local`` says
            which was chosen.
        unix_socket_dir (str, keyword): where to look for the worker's socket
            first; None falls back to env DS_UNIX_SOCKET_DIR, then the
            library's default. Not needed: the worker tells its socket.
        enable_ucx (bool or None, keyword): True: a remote (TCP) client's
            large values come by UCX straight into the buffer they are read
            into (the worker needs --enable_rdma true); False: never; None:
            env DS_CLIENT_UCX (1 or 0), else off. UCX failing to start makes
            init() raise with the reason.
        enable_tls (bool or None, keyword): True: TLS over TCP, for a worker
            started with --enable_tls; False: plain TCP; None: env
            DATASYSTEM_ENABLE_TLS (1/true or 0/false), else plain. Sessions
            over the worker's Unix socket never use TLS.
        tls_ca, tls_cert, tls_key (str or None, keyword): the CA file the
            worker's certificate must chain to (None: env DATASYSTEM_TLS_CA,
            else the system's CAs), and this client's certificate and key
            for a worker with --tls_verify_client (None: env
            DATASYSTEM_TLS_CERT / DATASYSTEM_TLS_KEY).
    """

    _TRANSPORTS = {
        "auto": _n.TRANSPORT_AUTO,
        "tcp": _n.TRANSPORT_TCP,
        "local": _n.TRANSPORT_LOCAL,
    }

    def __init__(
        self,
        host: str = "",
        port: int = 0,
        connect_timeout_ms: int = 9000,
        token: str = "",
        client_public_key: str = "",
        client_private_key: str = "",
        server_public_key: str = "",
        access_key: str = "",
        secret_key: str = "",
        tenant_id: str = "",
        enable_cross_node_connection: bool = False,
        req_timeout_ms: int = 0,
        fast_transport_mem_size: int = DEFAULT_FAST_TRANSPORT_MEM_SIZE,
        service_discovery: Any = None,
        *,
        enable_exclusive_connection: bool = False,
        transport: str = "auto",
        unix_socket_dir: Optional[str] = None,
        enable_ucx: Optional[bool] = None,
        enable_tls: Optional[bool] = None,
        tls_ca: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
    ) -> None:
        self._handle = None
        self._pid = os.getpid()
        self._cv = threading.Condition()
        # One entry per call in flight, which close() waits for (see _call).
        self._calls = []
        native_discovery = isinstance(service_discovery, (ServiceDiscovery, CoordinatorServiceDiscovery))
        if service_discovery is not None:
            if host or port:
                import warnings

                warnings.warn("host and port are ignored when service_discovery is provided", stacklevel=2)
            if not native_discovery and not callable(getattr(service_discovery, "select_worker", None)):
                raise _c.type_error("service_discovery", ServiceDiscovery, CoordinatorServiceDiscovery)
        else:
            _c.check_str("host", host)
            if isinstance(port, bool) or not isinstance(port, int):
                raise _c.type_error("port", int)
        if isinstance(connect_timeout_ms, bool) or not isinstance(connect_timeout_ms, int):
            raise _c.type_error("connect_timeout_ms", int)
        for name, v in (
            ("token", token),
            ("client_public_key", client_public_key),
            ("client_private_key", client_private_key),
            ("server_public_key", server_public_key),
            ("access_key", access_key),
            ("secret_key", secret_key),
            ("tenant_id", tenant_id),
        ):
            _c.check_str(name, v)
        _c.check_bool("enable_cross_node_connection", enable_cross_node_connection)
        _c.check_bool("enable_exclusive_connection", enable_exclusive_connection)
        if isinstance(fast_transport_mem_size, bool) or not isinstance(fast_transport_mem_size, int):
            raise _c.type_error("fast_transport_mem_size", int)
        if isinstance(req_timeout_ms, bool) or not isinstance(req_timeout_ms, int):
            raise _c.type_error("req_timeout_ms", int)
        Validator.check_param_range("connect_timeout_ms", connect_timeout_ms, 0, Validator.INT32_MAX_SIZE)
        Validator.check_param_range(
            "fast_transport_mem_size", fast_transport_mem_size, 1, MAX_FAST_TRANSPORT_MEM_SIZE
        )
        if transport not in self._TRANSPORTS:
            raise ValueError("transport must be one of %s" % sorted(self._TRANSPORTS))
        if unix_socket_dir is not None:
            _c.check_str("unix_socket_dir", unix_socket_dir)
        if enable_ucx is not None:
            _c.check_bool("enable_ucx", enable_ucx)
        if enable_tls is not None:
            _c.check_bool("enable_tls", enable_tls)
        for name, v in (("tls_ca", tls_ca), ("tls_cert", tls_cert), ("tls_key", tls_key)):
            if v is not None:
                _c.check_str(name, v)

        if native_discovery:
            if not service_discovery.initialized:
                raise RuntimeError("service_discovery is not initialized, call init() before creating KVClient")
            if not enable_cross_node_connection:
                import warnings

                warnings.warn(
                    "service_discovery is set but enable_cross_node_connection is False. "
                    "Failover to another discovered worker will not occur on connection failure.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        elif service_discovery is not None:
            pass  # any object with select_worker(): asked once, in init()
        elif bool(host) != (port > 0):
            # Yuanrong's check; both empty falls back to DATASYSTEM_HOST / _PORT.
            raise RuntimeError("host and port must be provided together, or use service_discovery")

        # The constructor's arguments as Yuanrong's native client takes them.
        client_args = [host, port, connect_timeout_ms, token, client_public_key, client_private_key,
                       server_public_key, access_key, secret_key, tenant_id,
                       enable_cross_node_connection, req_timeout_ms, fast_transport_mem_size]
        if native_discovery:
            client_args.append(service_discovery.native_discovery)
        self._native = ds.KVClient(*client_args)
        self._sd = service_discovery
        self._failover = bool(enable_cross_node_connection)
        self._host = host
        self._port = port
        self._connect_timeout_ms = connect_timeout_ms
        self._req_timeout_ms = max(0, min(req_timeout_ms, _n.INT32_MAX))
        self._token = token
        self._transport = transport
        self._unix_socket_dir = unix_socket_dir
        self._enable_ucx = 0 if enable_ucx is None else (1 if enable_ucx else -1)
        self._enable_tls = 0 if enable_tls is None else (1 if enable_tls else -1)
        self._tls = (tls_ca, tls_cert, tls_key)

    # -- lifecycle -------------------------------------------------------

    def _resolve_address(self):
        host, port = self._host, self._port
        if not host:
            host = os.environ.get("DATASYSTEM_HOST", "")
        if not port:
            env_port = os.environ.get("DATASYSTEM_PORT", "")
            try:
                port = int(env_port) if env_port else 0
            except ValueError:
                raise DsError(_n.K_INVALID, "DATASYSTEM_PORT=%r is not a port" % env_port)
        if not host or not port:
            raise DsError(
                _n.K_INVALID,
                "worker address unknown: pass host and port or set DATASYSTEM_HOST and "
                "DATASYSTEM_PORT",
            )
        if port < 1 or port > 65535:
            raise DsError(_n.K_INVALID, "port %d is out of range" % port)
        return host, port

    def _connect_timeout(self):
        """connect_timeout_ms; left at its default (9000), env DATASYSTEM_CONNECT_TIME_MS
        overrides it, as in Yuanrong's client_env_guide."""
        if self._connect_timeout_ms != 9000:
            return self._connect_timeout_ms
        env = os.environ.get("DATASYSTEM_CONNECT_TIME_MS", "")
        if not env:
            return self._connect_timeout_ms
        try:
            value = int(env)
        except ValueError:
            value = -1
        if value < 0 or value > Validator.INT32_MAX_SIZE:
            raise DsError(
                _n.K_INVALID,
                "DATASYSTEM_CONNECT_TIME_MS=%r is not a timeout in ms (0..%d)"
                % (env, Validator.INT32_MAX_SIZE),
            )
        return value

    def init(self) -> None:
        """Connects to the worker. Raises RuntimeError when it cannot."""
        if self._handle is not None:
            if self._pid == os.getpid():
                return
            self._handle = None  # inherited over fork: the parent's, not ours
        lib = _n.load()
        opts = _n.ClientOptions()
        lib.ds_client_options_init(opts)
        if isinstance(self._sd, (ServiceDiscovery, CoordinatorServiceDiscovery)):
            # The library asks the discovery for the worker, and again on failover.
            host, port = "", 0
            opts.service_discovery = self._sd.native_discovery.handle
            opts.enable_cross_node_connection = 1 if self._failover else 0
            what = "cannot connect to a worker found by service discovery"
        else:
            if self._sd is not None:
                _, self._host, self._port, _ = self._sd.select_worker()
                _c.check_str("host", self._host)
            host, port = self._resolve_address()
            opts.host = host.encode()
            opts.port = port
            what = "cannot connect to worker %s:%d" % (host, port)
        opts.connect_timeout_ms = self._connect_timeout()
        if self._req_timeout_ms > 0:
            opts.request_timeout_ms = self._req_timeout_ms
        opts.transport = self._TRANSPORTS[self._transport]
        token = self._token or os.environ.get("DATASYSTEM_TOKEN", "")
        opts.token = token.encode() if token else None
        # None lets the library use env DS_UNIX_SOCKET_DIR, then its default.
        sock_dir = self._unix_socket_dir
        opts.unix_socket_dir = sock_dir.encode() if sock_dir else None
        opts.enable_ucx = self._enable_ucx
        opts.enable_tls = self._enable_tls
        # None lets the library use env DATASYSTEM_TLS_CA / _CERT / _KEY.
        opts.tls_ca, opts.tls_cert, opts.tls_key = (v.encode() if v else None for v in self._tls)
        out = _n.c_client_p()
        rc = lib.ds_client_connect(opts, out)
        _n.check(rc, what)
        self._handle = out.value
        self._pid = os.getpid()

    def close(self) -> None:
        """Closes the connections; idempotent. Calls in flight in other threads
        finish first (a subscribe-get may take its timeout); later calls raise.
        Buffers and views still held stay valid."""
        with self._cv:
            h, self._handle = self._handle, None
            while self._calls:
                self._cv.wait()
        if h and self._pid == os.getpid():
            _n.load().ds_client_close(h)

    def __enter__(self):
        self.init()
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _call(self, fn, *args):
        """fn(handle, *args), with the handle kept open for the call's length.

        Without a lock (taking one twice cost 0.44 us a call here):
        a list's append and pop are atomic, a call enters the list before it
        reads the handle, and close() clears the handle before it looks at
        the list. So close() either sees the call and waits for it, or the
        call sees no handle."""
        calls = self._calls
        calls.append(None)
        try:
            h = self._handle
            if h is None:
                raise DsError(_n.K_NOT_READY, "KVClient is not initialized: call init() first")
            if self._pid != _n.current_pid():
                raise DsError(
                    _n.K_RUNTIME_ERROR,
                    "KVClient was connected in process %d; create and init() a new one in "
                    "this process" % self._pid,
                )
            return fn(h, *args)
        finally:
            calls.pop()
            # Only close() waits (it has cleared the handle first).
            if not calls and self._handle is None:
                with self._cv:
                    self._cv.notify_all()

    @property
    def is_local(self) -> bool:
        """True when values are read and written in the worker's shared memory."""
        return bool(self._call(_n.load().ds_client_is_local))

    # -- writes ----------------------------------------------------------

    def set(
        self,
        key: str,
        val: Value,
        write_mode: Union[WriteMode, SetParam] = WriteMode.NONE_L2_CACHE,
        ttl_second: int = 0,
        existence: ExistenceOpt = ExistenceOpt.NONE,
    ) -> None:
        """Sets the value of key.

        Args:
            key (str): the key.
            val (bytes, bytearray, memoryview, str): the value (str is UTF-8 encoded).
            write_mode (WriteMode): reliability; a SetParam is also accepted, and
                then its write_mode, ttl_second and existence are used.
            ttl_second (int): seconds until the key expires; 0 = never.
            existence (ExistenceOpt): NX keeps an existing value and raises
                RuntimeError with code K_OC_KEY_ALREADY_EXIST (2004).
        """
        _c.check_str("key", key)
        v = _c.value("val", val)
        if isinstance(write_mode, SetParam):
            p = _param(write_mode.write_mode, write_mode.ttl_second, write_mode.existence, "existence")
        else:
            p = _param_cached(write_mode, ttl_second, existence)
        kb = _c.encode_key(key)
        _c.nonempty_value("val", v)
        lib = _n.load()
        if type(v) is bytes:
            # ctypes passes an immutable bytes object's own memory.
            rc = self._call(lib.ds_kv_set, kb, v, len(v), p)
        else:
            with _n.BorrowedBuffers() as borrowed:
                addr, n = borrowed.add(v)
                rc = self._call(lib.ds_kv_set, kb, addr, n, p)
        if rc != _n.K_OK:
            _n.check(rc, "set %r" % key)

    def set_pieces(
        self,
        key: str,
        pieces: Sequence[BytesLike],
        write_mode: Union[WriteMode, SetParam] = WriteMode.NONE_L2_CACHE,
        ttl_second: int = 0,
        existence: ExistenceOpt = ExistenceOpt.NONE,
    ) -> None:
        """Sets key to the concatenation of pieces, without joining them first.

        The same as ``set(key, b"".join(pieces), ...)``, but a local client
        copies each piece once, straight into the worker's shared memory, and
        publishes the value with one request (C: ``ds_kv_setv``).

        Args:
            key (str): the key.
            pieces (list or tuple): bytes-like objects (bytes, bytearray,
                memoryview, C-contiguous numpy arrays), at most 4096; empty
                ones are allowed, an empty total is not.
            write_mode, ttl_second, existence: as for ``set``.
        """
        _c.check_str("key", key)
        if not isinstance(pieces, (list, tuple)):
            raise _c.type_error("pieces", list, tuple)
        n = len(pieces)
        if n == 0 or n > _n.MAX_SETV_PIECES:
            raise DsError(_n.K_INVALID, "The number of pieces %d is not in 1..%d."
                          % (n, _n.MAX_SETV_PIECES))
        if isinstance(write_mode, SetParam):
            p = _param(write_mode.write_mode, write_mode.ttl_second, write_mode.existence,
                       "existence")
        else:
            p = _param_cached(write_mode, ttl_second, existence)
        kb = _c.encode_key(key)
        lib = _n.load()
        setv = getattr(lib, "ds_kv_setv", None)
        if setv is None:  # an older libdatasystem: join, then set
            joined = b"".join(x if isinstance(x, bytes) else memoryview(x).tobytes()
                              for x in pieces)
            _c.nonempty_value("pieces", joined)
            with _n.BorrowedBuffers() as borrowed:
                addr, size = borrowed.add(joined)
                rc = self._call(lib.ds_kv_set, kb, addr, size, p)
            _n.check(rc, "set %r" % key)
            return
        addrs = (_n.ctypes.c_void_p * n)()
        lens = (_n.ctypes.c_size_t * n)()
        with _n.BorrowedBuffers() as borrowed:
            for i, piece in enumerate(pieces):
                if isinstance(piece, str):
                    raise _c.type_error("pieces[%d]" % i, bytes, bytearray, memoryview)
                try:
                    addrs[i], lens[i] = borrowed.add(piece)
                except TypeError:
                    raise _c.type_error("pieces[%d]" % i, bytes, bytearray, memoryview) from None
            rc = self._call(setv, kb, n, addrs, lens, p)
        if rc != _n.K_OK:
            _n.check(rc, "set %r" % key)

    def set_value(
        self, val: Value, write_mode: WriteMode = WriteMode.NONE_L2_CACHE, ttl_second: int = 0
    ) -> str:
        """Sets val under a newly generated key and returns the key."""
        _c.value("val", val)
        _param(write_mode, ttl_second)
        key = self.generate_key()
        self.set(key, val, write_mode, ttl_second)
        return key

    def mset(
        self,
        keys: Sequence[str],
        vals: Sequence[Value],
        write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
        ttl_second: int = 0,
        existence_opt: ExistenceOpt = ExistenceOpt.NONE,
    ) -> List[str]:
        """Sets many keys in one request; returns the keys that failed.

        Raises RuntimeError when every key failed.
        """
        _c.check_list("keys", keys)
        _c.check_list("vals", vals)
        kbs = _c.key_list(keys, empty_msg=_c.MSG_EMPTY_KEYS_SET)
        if len(vals) != len(kbs):
            raise DsError(_n.K_INVALID, _c.MSG_KEYS_VALUES)
        vs = [_c.value("vals[%d]" % i, v) for i, v in enumerate(vals)]
        p = _param(write_mode, ttl_second, existence_opt)
        lib = _n.load()
        n = len(kbs)
        addrs = (_n.ctypes.c_void_p * n)()
        lens = (_n.ctypes.c_size_t * n)()
        statuses = _statuses(n)
        with _n.BorrowedBuffers() as borrowed:
            for i, v in enumerate(vs):
                addrs[i], lens[i] = borrowed.add(v)
            rc = self._call(lib.ds_kv_mset, n, _n.keys_array(kbs), addrs, lens, p, statuses)
        return self._failed(rc, keys, statuses, "mset")

    @staticmethod
    def _failed(rc, keys, statuses, what):
        failed = [k for k, s in zip(keys, statuses) if s != _n.K_OK]
        if rc != _n.K_OK and len(failed) == len(keys):
            _n.check(rc, what)  # rc is the first failure's code
        return failed

    # -- zero-copy writes ------------------------------------------------

    def mcreate(
        self,
        keys: Sequence[str],
        sizes: Sequence[int],
        write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
        ttl_second: int = 0,
    ) -> List[Buffer]:
        """Reserves one Buffer per key (in shared memory for a local client).

        Fill each ``buf.mutable_data()`` and publish them with ``mset_buffer``.
        """
        _c.check_list("keys", keys)
        _c.check_list("sizes", sizes)
        kbs = _c.key_list(keys, empty_msg=_c.MSG_EMPTY_KEYS_SET)
        if len(sizes) != len(kbs):
            raise DsError(_n.K_INVALID, "The number of key and size is not the same.")
        n = len(kbs)
        c_sizes = (_n.ctypes.c_size_t * n)()
        for i, s in enumerate(sizes):
            c_sizes[i] = _c.check_int("sizes[%d]" % i, s, 0, sys.maxsize)
        p = _param(write_mode, ttl_second)
        lib = _n.load()
        out = (_n.c_buffer_p * n)()
        rc = self._call(lib.ds_kv_mcreate, n, _n.keys_array(kbs), c_sizes, p, out)
        if rc != _n.K_OK:
            msg = _n.last_error()
            for i in range(n):
                if out[i]:
                    lib.ds_buffer_release(out[i])
            raise DsError(rc, "mcreate: " + msg)
        if not all(out[i] for i in range(n)):  # pragma: no cover - the library reports it
            for i in range(n):
                lib.ds_buffer_release(out[i])
            raise DsError(_n.K_RUNTIME_ERROR, "mcreate returned no buffer for some keys")
        return [Buffer(self, out[i], keys[i]) for i in range(n)]

    def mset_buffer(self, buffers: Sequence[Buffer]) -> None:
        """Publishes Buffers from ``mcreate``. Raises RuntimeError if any failed."""
        if not isinstance(buffers, (list, tuple)):
            raise _c.type_error("buffers", list)
        if not buffers:
            raise DsError(_n.K_INVALID, "The buffers should not be empty.")
        for b in buffers:
            if not isinstance(b, Buffer):
                raise _c.type_error("buffers", Buffer)
            if b._client is not self:
                raise DsError(_n.K_INVALID, "buffer of key %r was created by another KVClient"
                              % b.key)
        n = len(buffers)
        handles = (_n.c_buffer_p * n)()
        for i, b in enumerate(buffers):
            handles[i] = b._handle()
        statuses = _statuses(n)
        rc = self._call(_n.load().ds_kv_mpublish, n, handles, statuses)
        msg = _n.last_error() if rc != _n.K_OK else ""
        failed = []
        for b, s in zip(buffers, statuses):
            if s == _n.K_OK or (s == -1 and rc == _n.K_OK):
                b._published = True
            else:
                failed.append(b.key)
        if rc != _n.K_OK or failed:
            raise DsError(rc if rc != _n.K_OK else _n.K_RUNTIME_ERROR,
                          "mset_buffer failed for %s: %s" % (failed, msg))

    # -- reads -----------------------------------------------------------

    def _get_buffers(self, kbs, timeout_ms):
        lib = _n.load()
        n = len(kbs)
        out = (_n.c_buffer_p * n)()
        rc = self._call(lib.ds_kv_get_buffers, n, _n.keys_array(kbs), timeout_ms, out)
        if rc != _n.K_OK:
            err = _not_found_or(rc)
            for i in range(n):
                if out[i]:
                    lib.ds_buffer_release(out[i])
            raise err
        return out

    def get(
        self,
        keys: Optional[Sequence[str]] = None,
        convert_to_str: bool = False,
        sub_timeout_ms: int = 0,
    ) -> List[Union[bytes, str, None]]:
        """Gets the values of keys: a list of bytes (str if convert_to_str), None
        for a key that is missing.

        With sub_timeout_ms > 0 the worker waits up to that long for every key
        to be published, then returns what it has. Raises RuntimeError (code
        K_NOT_FOUND) only when no key at all was found.
        """
        _c.check_list("keys", keys)
        if isinstance(sub_timeout_ms, bool) or not isinstance(sub_timeout_ms, int):
            raise _c.type_error("sub_timeout_ms", int)
        _c.check_bool("convert_to_str", convert_to_str)
        timeout = _c.timeout("sub_timeout_ms", sub_timeout_ms)
        kbs = _c.key_list(keys)
        if len(kbs) > 1:
            values = self._mget(kbs, timeout)
        else:
            values = self._get_one_copy(kbs, timeout)
        if convert_to_str:
            return [v.decode("utf-8") if v is not None else None for v in values]
        return values

    def _mget(self, kbs, timeout):
        # Many keys: one request whose arena pins are released in one frame;
        # each value is copied twice (arena -> malloc -> bytes), cheap for the
        # small values batches usually hold.
        lib = _n.load()
        n = len(kbs)
        out = (_n.ValueC * n)()
        rc = self._call(lib.ds_kv_mget, n, _n.keys_array(kbs), timeout, out)
        values = []
        try:
            if rc != _n.K_OK:
                raise _not_found_or(rc)
            for v in out:
                values.append(_n.string_at(v.data, v.len) if v.data else None)
        finally:
            for v in out:
                if v.data:
                    lib.ds_free(v.data)
        return values

    def _get_one_copy(self, kbs, timeout):
        # One key (the connector's case, often a large payload): pin the value
        # and copy it once, straight from the arena into the bytes object.
        lib = _n.load()
        out = self._get_buffers(kbs, timeout)
        values = []
        try:
            for i in range(len(kbs)):
                b = out[i]
                if not b:
                    values.append(None)
                    continue
                data = _n.string_at(lib.ds_buffer_data(b), lib.ds_buffer_size(b))
                lib.ds_buffer_release(b)
                out[i] = None
                values.append(data)
        finally:
            for i in range(len(kbs)):
                if out[i]:
                    lib.ds_buffer_release(out[i])
        return values

    def get_buffers(self, keys: Sequence[str], timeout_ms: int = 0) -> List[Optional[StateValueBuffer]]:
        """Zero-copy reads: a list of StateValueBuffers (None when missing), as Yuanrong's.

        Each buffer pins the version it shows: it stays intact when the key is
        overwritten or deleted, until the buffer and every view taken from it
        (``ImmutableData()``, slices, arrays) are gone. Raises RuntimeError
        only when no key was found.
        """
        _c.check_list("keys", keys)
        timeout = _c.timeout("timeout_ms", timeout_ms)
        kbs = _c.key_list(keys)
        out = self._get_buffers(kbs, timeout)
        result = []
        for i, k in enumerate(keys):
            b = out[i]
            result.append(StateValueBuffer(self, b, k) if b else None)
        return result

    def get_view(self, key: str, timeout_ms: int = 0) -> Optional[memoryview]:
        """Zero-copy read of one key: a read-only memoryview of its value, or
        None when it is missing (after waiting up to timeout_ms for it).

        The view pins the version it shows, as ``get_buffers``' do, until it
        (and every slice or array made from it) is gone. A value the worker's
        shared index lists (up to 4 MiB, no TTL) is pinned through this
        client's pin table in the arena with no request at all, and let go
        of with one store. Others take one request; the worker hears that
        such a pin is gone with this client's next request rather than at
        once (C: ``ds_buffer_release_deferred``; values over 4 MiB, or more
        than 8 MiB of them waiting, are released at once), so a read costs
        one request and no frame of its own.
        """
        if type(timeout_ms) is int and 0 <= timeout_ms <= _INT32_MAX:
            timeout = timeout_ms
        else:
            timeout = _c.timeout("timeout_ms", timeout_ms)
        kb = _c.encode_key(key)
        lib = _n.load()
        keys = (_n.ctypes.c_char_p * 1)(kb)
        out = (_n.c_buffer_p * 1)()
        rc = self._call(lib.ds_kv_get_buffers, 1, keys, timeout, out)
        b = out[0]
        if rc != _n.K_OK:
            if b:
                lib.ds_buffer_release(b)
            if rc == _n.K_NOT_FOUND:
                return None
            raise _not_found_or(rc)
        if not b:  # pragma: no cover - the library reports a missing key as NOT_FOUND
            return None
        return _n.pinned_view(_n.ViewPin(b), lib.ds_buffer_data(b), lib.ds_buffer_size(b))

    def query_size(self, keys: Sequence[str]) -> List[Optional[int]]:
        """Sizes of keys' values: a list of int, None for a missing key."""
        kbs = _c.key_list(keys)
        n = len(kbs)
        sizes = (_n.ctypes.c_uint64 * n)()
        statuses = _statuses(n)
        rc = self._call(_n.load().ds_kv_query_size, n, _n.keys_array(kbs), sizes, statuses)
        if rc not in (_n.K_OK, _n.K_NOT_FOUND):
            _n.check(rc, "query_size")
        return [int(sizes[i]) if statuses[i] == _n.K_OK else None for i in range(n)]

    # -- other operations ------------------------------------------------

    def delete(self, keys: Optional[Sequence[str]] = None) -> List[str]:
        """Deletes keys; a missing key is not an error. Returns the keys that failed."""
        kbs = _c.key_list(keys)
        n = len(kbs)
        statuses = _statuses(n)
        rc = self._call(_n.load().ds_kv_del, n, _n.keys_array(kbs), statuses)
        if rc != _n.K_OK and all(s == -1 for s in statuses):
            _n.check(rc, "delete")
        return self._failed(rc, keys, statuses, "delete")

    def exist(self, keys: Sequence[str]) -> List[bool]:
        """Whether each key is published: a list of bool."""
        kbs = _c.key_list(keys, limit=_n.MAX_EXIST_BATCH)
        n = len(kbs)
        out = (_n.ctypes.c_bool * n)()
        rc = self._call(_n.load().ds_kv_exist, n, _n.keys_array(kbs), out)
        _n.check(rc, "exist")
        return [bool(x) for x in out]

    def expire(self, keys: Sequence[str], ttl_second: int) -> List[str]:
        """Sets a new TTL on keys (0 removes it); returns the keys that failed
        (a missing key fails with K_NOT_FOUND). Raises when every key failed."""
        _c.check_list("keys", keys)
        ttl = _c.ttl(ttl_second)
        kbs = _c.key_list(keys)
        n = len(kbs)
        statuses = _statuses(n)
        rc = self._call(_n.load().ds_kv_expire, n, _n.keys_array(kbs), ttl, statuses)
        if rc != _n.K_OK and all(s == -1 for s in statuses):
            _n.check(rc, "expire")
        return self._failed(rc, keys, statuses, "expire")

    def generate_key(self, prefix: str = "") -> str:
        """A unique key for a set, as Yuanrong generates it.

        With no prefix: a random UUID in its 36-character text form
        ("0a595240-5506-4c7c-b1f7-7abfb1eb4add"). With a prefix: the prefix
        itself (checked against the key rules).
        """
        _c.check_str("prefix", prefix)
        self._call(lambda h: None)  # raises when the client is not initialized
        if prefix:
            _c.encode_key(prefix, "prefix")
            kb = prefix.encode("utf-8", "surrogateescape")
            _n.check(_n.load().ds_key_validate(kb, len(kb)), "prefix")
            return prefix
        return str(uuid.uuid4())

    # -- Yuanrong calls beyond the KV basics -----------------------------

    def msettx(
        self,
        keys: Sequence[str],
        vals: Sequence[Value],
        write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
        ttl_second: int = 0,
        existence_opt: ExistenceOpt = ExistenceOpt.NONE,
    ) -> NoReturn:
        """Deprecated in Yuanrong: checks its arguments, then raises RuntimeError
        "code: [Runtime error], msg: [MSetTx is a deprecated API and is no longer
        supported.]". Use ``mset``."""
        _c.check_list("keys", keys)
        _c.check_list("vals", vals)
        _write_mode(write_mode)
        if isinstance(ttl_second, bool) or not isinstance(ttl_second, int):
            raise _c.type_error("ttl_second", int)
        _existence(existence_opt)
        raise DsError(_n.K_RUNTIME_ERROR, MSETTX_DEPRECATED_MSG)

    def _pinned_buffers(self, keys, timeout_ms, cls):
        """cls(self, handle, key) per found key (None when missing): pinned reads."""
        kbs = _c.key_list(keys, name="keys" if cls is ReadOnlyBuffer else "object_keys")
        out = self._get_buffers(kbs, timeout_ms)
        result = []
        try:
            for i, k in enumerate(keys):
                h = out[i]
                if not h:
                    result.append(None)
                    continue
                out[i] = None
                if cls is ReadOnlyBuffer:
                    result.append(ReadOnlyBuffer(self, h, k))
                else:
                    result.append(cls(self, h, k, published=True))
        finally:
            lib = _n.load()
            for i in range(len(kbs)):
                if out[i]:
                    lib.ds_buffer_release(out[i])
        return result

    def get_read_only_buffers(
        self, keys: Optional[Sequence[str]] = None, timeout_ms: int = 0
    ) -> List[Optional[ReadOnlyBuffer]]:
        """The values of keys as ReadOnlyBuffers (None for a missing key), zero copy.

        timeout_ms: how long to wait for keys not yet published (0: do not wait).
        Raises RuntimeError ("Cannot get objects from worker") when no key was found.
        """
        Validator.check_args_types([["keys", keys, list, tuple], ["timeout_ms", timeout_ms, int]])
        timeout = _c.timeout("timeout_ms", timeout_ms)
        return self._pinned_buffers(keys, timeout, ReadOnlyBuffer)

    def read(self, read_params: Sequence[ReadParam]) -> List[Optional[ReadOnlyBuffer]]:
        """Reads part of values: a ReadOnlyBuffer of ``size`` bytes from ``offset``
        per ReadParam (None for a missing key).

        Needs the library's partial read (``_native.kv_read``); until this
        library has it, raises RuntimeError with code K_NOT_SUPPORTED.
        """
        Validator.check_args_types([["read_params", read_params, list, tuple]])
        if not read_params:
            raise DsError(_n.K_INVALID, "The input of read_param list should not be empty")
        if len(read_params) > _n.MAX_BATCH:
            raise DsError(_n.K_INVALID, _c.MSG_TOO_MANY_KEYS % _n.MAX_BATCH)
        params = []
        for i, rp in enumerate(read_params):
            try:
                key, offset, size = rp.key, rp.offset, rp.size
            except AttributeError:
                raise _c.type_error("read_params[%d]" % i, ReadParam)
            kb = _c.encode_key(key, "read_params[%d].key" % i)
            offset = _c.check_int("read_params[%d].offset" % i, offset, 0, Validator.UINT64_MAX_SIZE)
            size = _c.check_int("read_params[%d].size" % i, size, 0, Validator.UINT64_MAX_SIZE)
            params.append((kb, offset, size))
        native = _n.hook("kv_read")
        if native is None:
            raise DsError(
                _n.K_NOT_SUPPORTED,
                "read (a part of a value) needs libdatasystem's partial read, which this build "
                "lacks (_native.kv_read); get_read_only_buffers reads whole values.",
            )
        handles = self._call(native, params)
        result = []
        try:
            for i, h in enumerate(handles):
                if not h:
                    result.append(None)
                    continue
                handles[i] = None
                result.append(ReadOnlyBuffer(self, h, read_params[i].key))
        finally:
            lib = _n.load()
            for h in handles:
                if h:
                    lib.ds_buffer_release(h)
        return result

    def health_check(self) -> Status:
        """The worker's health as a Status (``.is_ok()``)."""
        try:
            rc = self._call(_n.load().ds_client_health_check)
        except DsError as e:
            return Status(e.code, e.message)
        return Status(rc, _n.last_error() if rc != _n.K_OK else "")
