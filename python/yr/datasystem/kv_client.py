"""KV client of the datasystem, with Yuanrong Datasystem's Python signatures.

``KVClient`` talks to one worker through libdatasystem (see ``_native``). A
worker on this host is reached over its Unix socket and its shared-memory arena
is mapped, so ``set`` copies a value once into the arena, ``get`` copies it once
out of it, and ``get_buffers`` / ``mcreate`` + ``mset_buffer`` read and write
the arena in place.

Errors from the datasystem are ``RuntimeError`` (precisely ``DsError``, whose
``code`` is the status number of status.h); arguments of the wrong type are
``TypeError``. Every call that may wait (connect, subscribe-gets, large
transfers) releases the GIL.
"""

import os
import sys
import threading
from collections import namedtuple
from enum import IntEnum

from yr.datasystem import _native as _n
from yr.datasystem._native import DsError

__all__ = [
    "KVClient",
    "SetParam",
    "WriteMode",
    "ExistenceOpt",
    "CacheType",
    "Buffer",
    "ReadOnlyBuffer",
    "ReadParam",
    "Status",
    "DsError",
]

DEFAULT_FAST_TRANSPORT_MEM_SIZE = 256 * 1024 * 1024
MAX_FAST_TRANSPORT_MEM_SIZE = 2 * 1024 * 1024 * 1024


class WriteMode(IntEnum):
    """Reliability of an object (docs/design.md section 3)."""

    NONE_L2_CACHE = 0
    WRITE_THROUGH_L2_CACHE = 1
    WRITE_BACK_L2_CACHE = 2
    NONE_L2_CACHE_EVICT = 3
    WRITE_BACK_L2_CACHE_EVICT = 4


class ExistenceOpt(IntEnum):
    """What a set does when the key already exists: overwrite, or keep (NX)."""

    NONE = 0
    NX = 1


class CacheType(IntEnum):
    """Where data is cached. Only MEMORY is supported by this datasystem."""

    MEMORY = 0
    DISK = 1


# Yuanrong spells it this way; kept so code written against it runs.
CacheType.MEMEORY = CacheType.MEMORY


class SetParam:
    """The set properties of a key: write_mode, ttl_second, existence."""

    def __init__(
        self,
        write_mode=WriteMode.NONE_L2_CACHE,
        ttl_second=0,
        existence=ExistenceOpt.NONE,
        cache_type=CacheType.MEMORY,
    ):
        self.write_mode = write_mode
        self.ttl_second = ttl_second
        self.existence = existence
        self.cache_type = cache_type

    def __repr__(self):
        return "SetParam(write_mode=%r, ttl_second=%r, existence=%r)" % (
            self.write_mode,
            self.ttl_second,
            self.existence,
        )


ReadParam = namedtuple("ReadParam", ["key", "offset", "size"])
ReadParam.__doc__ = """A range to ``read``: size bytes of key's value from offset (size 0:
to the end; a range past the end is cut there)."""


class Status:
    """Result of ``health_check``: a code and a message."""

    __slots__ = ("code", "message")

    def __init__(self, code=0, message=""):
        self.code = int(code)
        self.message = message

    def is_ok(self):
        return self.code == _n.K_OK

    def is_error(self):
        return self.code != _n.K_OK

    def to_string(self):
        if self.is_ok():
            return "K_OK"
        return "%s(%d): %s" % (_n.status_name(self.code), self.code, self.message)

    def __str__(self):
        return self.to_string()

    def __repr__(self):
        return "Status(%s)" % self.to_string()


# ---------------------------------------------------------------------------
# Argument checking. Yuanrong raises TypeError for a wrong type; we do too.


def _type_name(v):
    return type(v).__name__


def _check_int(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be an int, not %s" % (name, _type_name(v)))
    if v < lo or v > hi:
        raise ValueError("%s=%d is out of range [%d, %d]" % (name, v, lo, hi))
    return int(v)


def _check_str(name, v):
    if not isinstance(v, str):
        raise TypeError("%s must be a str, not %s" % (name, _type_name(v)))
    return v


def _check_bool(name, v):
    if not isinstance(v, bool):
        raise TypeError("%s must be a bool, not %s" % (name, _type_name(v)))
    return v


def _write_mode(v):
    if isinstance(v, WriteMode):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return WriteMode(v)
    # A foreign enum whose .value is one of ours (e.g. another binding's WriteMode).
    value = getattr(v, "value", None)
    if isinstance(value, int) and not isinstance(value, bool) and hasattr(v, "name"):
        return WriteMode(value)
    raise TypeError("write_mode must be a WriteMode, not %s" % _type_name(v))


def _existence(v):
    if isinstance(v, ExistenceOpt):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return ExistenceOpt(v)
    value = getattr(v, "value", None)
    if isinstance(value, int) and not isinstance(value, bool) and hasattr(v, "name"):
        return ExistenceOpt(value)
    raise TypeError("existence_opt must be an ExistenceOpt, not %s" % _type_name(v))


def _ttl(v):
    return _check_int("ttl_second", v, 0, _n.UINT32_MAX)


def _timeout(name, v):
    return _check_int(name, v, 0, _n.INT32_MAX)


_VALUE_TYPES = (bytes, bytearray, memoryview, str)


def _value(name, v):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return v
    raise TypeError(
        "%s must be bytes, bytearray, memoryview or str, not %s" % (name, _type_name(v))
    )


def _encode_key(k):
    if not isinstance(k, str):
        raise TypeError("a key must be a str, not %s" % _type_name(k))
    b = k.encode("utf-8", "surrogateescape")
    if b"\0" in b:
        # A C string cannot carry NUL: let the library's validator name the byte.
        lib = _n.load()
        rc = lib.ds_key_validate(b, len(b))
        _n.check(rc if rc != _n.K_OK else _n.K_INVALID, "invalid key %r" % k)
    return b


def _key_list(keys, limit=_n.MAX_BATCH, name="keys"):
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        raise TypeError("%s must be a list of str, not %s" % (name, _type_name(keys)))
    if not keys:
        raise DsError(_n.K_INVALID, "%s is empty" % name)
    if len(keys) > limit:
        raise DsError(_n.K_INVALID, "%d %s is more than the limit of %d" % (len(keys), name, limit))
    return [_encode_key(k) for k in keys]


def _param(write_mode, ttl_second, existence=ExistenceOpt.NONE):
    p = _n.SetParamC()
    p.write_mode = int(_write_mode(write_mode))
    p.ttl_second = _ttl(ttl_second)
    p.existence = int(_existence(existence))
    return p


_UNSET = object()


def _statuses(n):
    arr = (_n.c_status * n)()
    # A status the library never writes: a key it did not report on counts as failed.
    sentinel = -1
    for i in range(n):
        arr[i] = sentinel
    return arr


# ---------------------------------------------------------------------------


class Buffer:
    """A value being written in place (from ``mcreate``) or read in place.

    ``mutable_data()`` is a writable memoryview over the reserved bytes (in the
    worker's shared memory for a local client); fill it, then publish with
    ``KVClient.mset_buffer([...])`` or ``publish()``. The reservation is dropped
    when the Buffer and every view taken from it are gone, or on ``release()``.
    """

    __slots__ = ("_client", "_pin", "_key", "_size", "_published", "__weakref__")

    def __init__(self, client, handle, key):
        self._client = client
        self._pin = _n.Pin(handle)
        self._key = key
        self._size = _n.load().ds_buffer_size(handle)
        self._published = False

    @property
    def key(self):
        return self._key

    @property
    def size(self):
        return self._size

    def get_size(self):
        return self._size

    def __len__(self):
        return self._size

    @property
    def published(self):
        return self._published

    def _handle(self):
        h = self._pin.handle
        if not h:
            raise DsError(_n.K_INVALID, "buffer of key %r was released" % self._key)
        return h

    def mutable_data(self):
        """A writable memoryview; only before the buffer is published."""
        h = self._handle()
        addr = _n.load().ds_buffer_mutable_data(h)
        if not addr:
            raise DsError(_n.K_INVALID, "buffer of key %r is published: it is read-only" % self._key)
        return _n.pinned_view(self._pin, addr, self._size, readonly=False)

    def immutable_data(self):
        """A read-only memoryview of the buffer's bytes."""
        h = self._handle()
        addr = _n.load().ds_buffer_data(h)
        return _n.pinned_view(self._pin, addr, self._size, readonly=True)

    def memory_copy(self, value, offset=0):
        """Copies value (bytes-like or str) into the buffer at offset."""
        value = _value("value", value)
        mv = memoryview(value)
        if not mv.c_contiguous:
            mv = memoryview(mv.tobytes())
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        _check_int("offset", offset, 0, self._size)
        if offset + n > self._size:
            raise DsError(
                _n.K_INVALID,
                "%d bytes at offset %d do not fit a buffer of %d" % (n, offset, self._size),
            )
        self.mutable_data()[offset : offset + n] = mv

    def publish(self):
        """Makes the buffer's contents visible under its key."""
        self._client.mset_buffer([self])

    seal = publish

    def release(self):
        """Drops the buffer now (an unpublished one is discarded).

        Views still held from it must not be used afterwards.
        """
        self._pin.release()

    def __repr__(self):
        return "Buffer(key=%r, size=%d, published=%s)" % (self._key, self._size, self._published)


def _timeout_sec(v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("The input of timeout_sec has invalid type, valid type: (<class 'int'>,)")
    if not 1 <= v <= _n.INT32_MAX:
        raise RuntimeError(
            "Invalid timeout_sec size %d is set, which should be between [1,%d]" % (v, _n.INT32_MAX)
        )
    return min(v * 1000, _n.INT32_MAX)


class ReadOnlyBuffer:
    """A read-only value (or range of one) from ``get_read_only_buffers`` or ``read``.

    The bytes stay valid while the buffer (or any view of it) is alive, even if
    the key is overwritten or deleted. ``rlatch`` / ``unrlatch`` hold writers
    of the key (set, delete) back while the latch is held (Yuanrong's read latch).
    """

    __slots__ = ("_client", "_pin", "_key", "_size", "_latched", "__weakref__")

    def __init__(self, client, handle, key):
        self._client = client
        self._pin = _n.Pin(handle)
        self._key = key
        self._size = _n.load().ds_buffer_size(handle)
        self._latched = 0

    @property
    def key(self):
        return self._key

    @property
    def size(self):
        return self._size

    def get_size(self):
        return self._size

    def __len__(self):
        return self._size

    def _check_buffer(self):
        if not self._pin.handle:
            raise RuntimeError("The buffer is None, please create it first.")
        return self._pin.handle

    def immutable_data(self, with_latch=False, timeout_sec=60):
        """A read-only memoryview; with_latch takes the read latch first."""
        _check_bool("with_latch", with_latch)
        _timeout_sec(timeout_sec)
        h = self._check_buffer()
        if with_latch:
            self.rlatch(timeout_sec)
        return _n.pinned_view(self._pin, _n.load().ds_buffer_data(h), self._size)

    def rlatch(self, timeout_sec=60):
        """Takes the read latch on the key for at most timeout_sec seconds."""
        ms = _timeout_sec(timeout_sec)
        self._check_buffer()
        kb = _encode_key(self._key)
        rc = self._client._call(_n.load().ds_kv_rlatch, 1, _n.keys_array([kb]), ms, None)
        _n.check(rc, "rlatch")
        self._latched += 1

    def unrlatch(self):
        """Releases the read latch."""
        self._check_buffer()
        kb = _encode_key(self._key)
        rc = self._client._call(_n.load().ds_kv_unrlatch, 1, _n.keys_array([kb]), None)
        _n.check(rc, "unrlatch")
        self._latched = max(0, self._latched - 1)

    def release(self):
        """Drops the buffer now; views taken from it must not be used afterwards."""
        self._pin.release()

    def __repr__(self):
        return "ReadOnlyBuffer(key=%r, size=%d)" % (self._key, self._size)


class KVClient:
    """Datasystem KV client (Yuanrong's ``yr.datasystem.kv_client.KVClient``).

    Args:
        host (str): worker host; "" falls back to env DATASYSTEM_HOST.
        port (int): worker port; 0 falls back to env DATASYSTEM_PORT.
        connect_timeout_ms (int): connection timeout, default 9000.
        token (str): shared secret for an authenticated worker ("" = none;
            falls back to env DATASYSTEM_TOKEN).
        client_public_key, client_private_key, server_public_key, access_key,
        secret_key, tenant_id, enable_cross_node_connection,
        enable_exclusive_connection, fast_transport_mem_size: accepted for
            compatibility with Yuanrong and checked for type; not used.
        req_timeout_ms (int): per-request timeout; <= 0 uses the library's
            default. Subscribe waits add their own timeout.
        service_discovery: an object with ``select_worker() -> (_, host, port, _)``.
        transport (str, keyword): "auto" (shared memory when the worker is on
            this host), "tcp" or "local".
        unix_socket_dir (str, keyword): the worker's --unix_socket_dir; None
            falls back to env DS_UNIX_SOCKET_DIR, then the library's default.
    """

    _TRANSPORTS = {
        "auto": _n.TRANSPORT_AUTO,
        "tcp": _n.TRANSPORT_TCP,
        "local": _n.TRANSPORT_LOCAL,
    }

    def __init__(
        self,
        host="",
        port=0,
        connect_timeout_ms=9000,
        token="",
        client_public_key="",
        client_private_key="",
        server_public_key="",
        access_key="",
        secret_key="",
        tenant_id="",
        enable_cross_node_connection=False,
        req_timeout_ms=0,
        enable_exclusive_connection=False,
        fast_transport_mem_size=DEFAULT_FAST_TRANSPORT_MEM_SIZE,
        service_discovery=None,
        *,
        transport="auto",
        unix_socket_dir=None,
    ):
        self._handle = None
        self._pid = os.getpid()
        self._cv = threading.Condition(threading.Lock())
        self._active = 0  # calls in flight, which close() waits for
        _check_int("connect_timeout_ms", connect_timeout_ms, 0, _n.INT32_MAX)
        for name, v in (
            ("token", token),
            ("client_public_key", client_public_key),
            ("client_private_key", client_private_key),
            ("server_public_key", server_public_key),
            ("access_key", access_key),
            ("secret_key", secret_key),
            ("tenant_id", tenant_id),
        ):
            _check_str(name, v)
        _check_bool("enable_cross_node_connection", enable_cross_node_connection)
        _check_bool("enable_exclusive_connection", enable_exclusive_connection)
        _check_int("fast_transport_mem_size", fast_transport_mem_size, 1, MAX_FAST_TRANSPORT_MEM_SIZE)
        if isinstance(req_timeout_ms, bool) or not isinstance(req_timeout_ms, int):
            raise TypeError("req_timeout_ms must be an int, not %s" % _type_name(req_timeout_ms))
        if transport not in self._TRANSPORTS:
            raise ValueError("transport must be one of %s" % sorted(self._TRANSPORTS))
        if unix_socket_dir is not None:
            _check_str("unix_socket_dir", unix_socket_dir)

        if service_discovery is not None:
            _, host, port, _ = service_discovery.select_worker()
        _check_str("host", host)
        if isinstance(port, bool) or not isinstance(port, int):
            raise TypeError("port must be an int, not %s" % _type_name(port))

        self._host = host
        self._port = port
        self._connect_timeout_ms = connect_timeout_ms
        self._req_timeout_ms = max(0, min(req_timeout_ms, _n.INT32_MAX))
        self._token = token
        self._transport = transport
        self._unix_socket_dir = unix_socket_dir

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

    def init(self):
        """Connects to the worker. Raises RuntimeError when it cannot."""
        if self._handle is not None:
            if self._pid == os.getpid():
                return
            self._handle = None  # inherited over fork: the parent's, not ours
        lib = _n.load()
        host, port = self._resolve_address()
        opts = _n.ClientOptions()
        lib.ds_client_options_init(opts)
        opts.host = host.encode()
        opts.port = port
        opts.connect_timeout_ms = self._connect_timeout_ms
        if self._req_timeout_ms > 0:
            opts.request_timeout_ms = self._req_timeout_ms
        opts.transport = self._TRANSPORTS[self._transport]
        token = self._token or os.environ.get("DATASYSTEM_TOKEN", "")
        opts.token = token.encode() if token else None
        # None lets the library use env DS_UNIX_SOCKET_DIR, then its default.
        sock_dir = self._unix_socket_dir
        opts.unix_socket_dir = sock_dir.encode() if sock_dir else None
        out = _n.c_client_p()
        rc = lib.ds_client_connect(opts, out)
        _n.check(rc, "cannot connect to worker %s:%d" % (host, port))
        self._handle = out.value
        self._pid = os.getpid()

    def close(self):
        """Closes the connections; idempotent. Calls in flight in other threads
        finish first (a subscribe-get may take its timeout); later calls raise.
        Buffers and views still held stay valid."""
        with self._cv:
            h, self._handle = self._handle, None
            while self._active:
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
        """fn(handle, *args), with the handle kept open for the call's length."""
        with self._cv:
            h = self._handle
            if h is None:
                raise DsError(_n.K_NOT_READY, "KVClient is not initialized: call init() first")
            if self._pid != os.getpid():
                raise DsError(
                    _n.K_RUNTIME_ERROR,
                    "KVClient was connected in process %d; create and init() a new one in "
                    "this process" % self._pid,
                )
            self._active += 1
        try:
            return fn(h, *args)
        finally:
            with self._cv:
                self._active -= 1
                if not self._active:
                    self._cv.notify_all()

    @property
    def is_local(self):
        """True when values are read and written in the worker's shared memory."""
        return bool(self._call(_n.load().ds_client_is_local))

    # -- writes ----------------------------------------------------------

    def set(self, key, val, write_mode=WriteMode.NONE_L2_CACHE, ttl_second=0, existence=ExistenceOpt.NONE):
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
        kb = _encode_key(key)
        v = _value("val", val)
        if isinstance(write_mode, SetParam):
            p = _param(write_mode.write_mode, write_mode.ttl_second, write_mode.existence)
        else:
            p = _param(write_mode, ttl_second, existence)
        lib = _n.load()
        with _n.BorrowedBuffers() as borrowed:
            addr, n = borrowed.add(v)
            rc = self._call(lib.ds_kv_set, kb, addr, n, p)
        _n.check(rc, "set %r" % key)

    def set_value(self, val, write_mode=WriteMode.NONE_L2_CACHE, ttl_second=0):
        """Sets val under a newly generated key and returns the key."""
        _value("val", val)
        _param(write_mode, ttl_second)
        key = self.generate_key()
        self.set(key, val, write_mode, ttl_second)
        return key

    def mset(
        self,
        keys,
        vals,
        write_mode=WriteMode.NONE_L2_CACHE,
        ttl_second=0,
        existence_opt=ExistenceOpt.NONE,
    ):
        """Sets many keys in one request; returns the keys that failed.

        Raises RuntimeError when every key failed.
        """
        kbs = _key_list(keys)
        if not isinstance(vals, (list, tuple)):
            raise TypeError("vals must be a list, not %s" % _type_name(vals))
        if len(vals) != len(kbs):
            raise DsError(
                _n.K_INVALID, "%d keys but %d values" % (len(kbs), len(vals))
            )
        vs = [_value("vals[%d]" % i, v) for i, v in enumerate(vals)]
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

    def msettx(self, keys, vals, write_mode=WriteMode.NONE_L2_CACHE, ttl_second=0,
               existence_opt=ExistenceOpt.NONE):
        """Not supported: raises RuntimeError (DsError, K_NOT_SUPPORTED).

        Use ``mset`` (with ``existence_opt=ExistenceOpt.NX`` to keep existing
        values), which this datasystem applies key by key."""
        raise DsError(
            _n.K_NOT_SUPPORTED,
            "msettx is not supported by this datasystem: use mset (existence_opt=NX keeps "
            "existing values)",
        )

    @staticmethod
    def _failed(rc, keys, statuses, what):
        failed = [k for k, s in zip(keys, statuses) if s != _n.K_OK]
        if rc != _n.K_OK and len(failed) == len(keys):
            _n.check(rc, what)  # rc is the first failure's code
        return failed

    # -- zero-copy writes ------------------------------------------------

    def mcreate(self, keys, sizes, write_mode=WriteMode.NONE_L2_CACHE, ttl_second=0):
        """Reserves one Buffer per key (in shared memory for a local client).

        Fill each ``buf.mutable_data()`` and publish them with ``mset_buffer``.
        """
        kbs = _key_list(keys)
        if not isinstance(sizes, (list, tuple)):
            raise TypeError("sizes must be a list, not %s" % _type_name(sizes))
        if len(sizes) != len(kbs):
            raise DsError(_n.K_INVALID, "%d keys but %d sizes" % (len(kbs), len(sizes)))
        n = len(kbs)
        c_sizes = (_n.ctypes.c_size_t * n)()
        for i, s in enumerate(sizes):
            c_sizes[i] = _check_int("sizes[%d]" % i, s, 0, sys.maxsize)
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

    def mset_buffer(self, buffers):
        """Publishes Buffers from ``mcreate``. Raises RuntimeError if any failed."""
        if not isinstance(buffers, (list, tuple)):
            raise TypeError("buffers must be a list, not %s" % _type_name(buffers))
        if not buffers:
            raise DsError(_n.K_INVALID, "buffers is empty")
        for b in buffers:
            if not isinstance(b, Buffer):
                raise TypeError("buffers must hold Buffer objects, not %s" % _type_name(b))
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
            msg = _n.last_error()
            for i in range(n):
                if out[i]:
                    lib.ds_buffer_release(out[i])
            if rc == _n.K_NOT_FOUND and not msg:
                msg = "none of the %d keys was found" % n
            raise DsError(rc, msg)
        return out

    def get(self, keys=None, convert_to_str=False, sub_timeout_ms=0):
        """Gets the values of keys: a list of bytes (str if convert_to_str), None
        for a key that is missing.

        With sub_timeout_ms > 0 the worker waits up to that long for every key
        to be published, then returns what it has. Raises RuntimeError (code
        K_NOT_FOUND) only when no key at all was found.
        """
        if keys is None:
            raise DsError(_n.K_INVALID, "The input of keys list should not be empty")
        kbs = _key_list(keys)
        _check_bool("convert_to_str", convert_to_str)
        timeout = _timeout("sub_timeout_ms", sub_timeout_ms)
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
                msg = _n.last_error()
                if rc == _n.K_NOT_FOUND and not msg:
                    msg = "none of the %d keys was found" % n
                raise DsError(rc, msg)
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

    def get_buffers(self, keys, timeout_ms=0):
        """Zero-copy reads: a list of read-only memoryviews (None when missing).

        Each view pins the version it shows: it stays intact when the key is
        overwritten or deleted, until the view (and every slice or array made
        from it) is gone. Raises RuntimeError only when no key was found.
        """
        kbs = _key_list(keys)
        timeout = _timeout("timeout_ms", timeout_ms)
        lib = _n.load()
        out = self._get_buffers(kbs, timeout)
        views = []
        for i in range(len(kbs)):
            b = out[i]
            if not b:
                views.append(None)
                continue
            pin = _n.Pin(b)
            views.append(_n.pinned_view(pin, lib.ds_buffer_data(b), lib.ds_buffer_size(b)))
        return views

    def get_read_only_buffers(self, keys=None, timeout_ms=0):
        """Zero-copy reads as ReadOnlyBuffer objects (None for a missing key).

        Raises RuntimeError when no key was found.
        """
        kbs = _key_list(keys)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
            raise TypeError("timeout_ms must be an int, not %s" % _type_name(timeout_ms))
        if not 0 <= timeout_ms <= _n.INT32_MAX:
            raise RuntimeError(
                "Invalid timeout_ms size %d is set, which should be between [0,%d]"
                % (timeout_ms, _n.INT32_MAX)
            )
        out = self._get_buffers(kbs, timeout_ms)
        return [ReadOnlyBuffer(self, out[i], keys[i]) if out[i] else None for i in range(len(kbs))]

    def read(self, read_params):
        """Reads ranges (a list of ReadParam) without moving whole values:
        a list of ReadOnlyBuffer, None where a range failed (missing key, or
        an offset beyond the value's size). Raises RuntimeError when every
        range failed."""
        if read_params is None:
            raise RuntimeError("The input of read_param list should not be empty")
        if not isinstance(read_params, list):
            raise TypeError("read_params must be a list, not %s" % _type_name(read_params))
        if not read_params:
            raise DsError(_n.K_INVALID, "read_params is empty")
        if len(read_params) > _n.MAX_BATCH:
            raise DsError(_n.K_INVALID, "%d ranges is more than the limit of %d"
                          % (len(read_params), _n.MAX_BATCH))
        n = len(read_params)
        params = (_n.ReadParamC * n)()
        keep = []
        for i, rp in enumerate(read_params):
            try:
                k, off, size = rp.key, rp.offset, rp.size
            except AttributeError:
                raise TypeError("read_params must hold ReadParam, not %s" % _type_name(rp))
            kb = _encode_key(k)
            keep.append(kb)
            params[i].key = kb
            params[i].offset = _check_int("offset", off, 0, 2**64 - 1)
            params[i].size = _check_int("size", size, 0, 2**64 - 1)
        lib = _n.load()
        out = (_n.c_buffer_p * n)()
        statuses = _statuses(n)
        rc = self._call(lib.ds_kv_read, n, params, out, statuses)
        if rc != _n.K_OK:
            msg = _n.last_error()
            for i in range(n):
                if out[i]:
                    lib.ds_buffer_release(out[i])
            raise DsError(rc, "read: " + msg)
        return [
            ReadOnlyBuffer(self, out[i], read_params[i].key) if out[i] else None for i in range(n)
        ]

    def query_size(self, keys):
        """Sizes of keys' values: a list of int, None for a missing key."""
        kbs = _key_list(keys)
        n = len(kbs)
        sizes = (_n.ctypes.c_uint64 * n)()
        statuses = _statuses(n)
        rc = self._call(_n.load().ds_kv_query_size, n, _n.keys_array(kbs), sizes, statuses)
        if rc not in (_n.K_OK, _n.K_NOT_FOUND):
            _n.check(rc, "query_size")
        return [int(sizes[i]) if statuses[i] == _n.K_OK else None for i in range(n)]

    # -- other operations ------------------------------------------------

    def delete(self, keys=None):
        """Deletes keys; a missing key is not an error. Returns the keys that failed."""
        if keys is None:
            raise DsError(_n.K_INVALID, "The input of keys list should not be empty")
        kbs = _key_list(keys)
        n = len(kbs)
        statuses = _statuses(n)
        rc = self._call(_n.load().ds_kv_del, n, _n.keys_array(kbs), statuses)
        if rc != _n.K_OK and all(s == -1 for s in statuses):
            _n.check(rc, "delete")
        return self._failed(rc, keys, statuses, "delete")

    def exist(self, keys):
        """Whether each key is published: a list of bool."""
        kbs = _key_list(keys, limit=_n.MAX_EXIST_BATCH)
        n = len(kbs)
        out = (_n.ctypes.c_bool * n)()
        rc = self._call(_n.load().ds_kv_exist, n, _n.keys_array(kbs), out)
        _n.check(rc, "exist")
        return [bool(x) for x in out]

    def expire(self, keys, ttl_second):
        """Sets a new TTL on keys (0 removes it); returns the keys that failed
        (a missing key fails with K_NOT_FOUND). Raises when every key failed."""
        kbs = _key_list(keys)
        ttl = _ttl(ttl_second)
        n = len(kbs)
        statuses = _statuses(n)
        rc = self._call(_n.load().ds_kv_expire, n, _n.keys_array(kbs), ttl, statuses)
        if rc != _n.K_OK and all(s == -1 for s in statuses):
            _n.check(rc, "expire")
        return self._failed(rc, keys, statuses, "expire")

    def generate_key(self, prefix=""):
        """A new unique key starting with prefix."""
        _check_str("prefix", prefix)
        pb = prefix.encode("utf-8") if prefix else None
        lib = _n.load()
        out = _n.ctypes.c_void_p()
        rc = self._call(lib.ds_kv_generate_key, pb, out)
        _n.check(rc, "generate_key")
        try:
            return _n.ctypes.string_at(out.value).decode("utf-8")
        finally:
            lib.ds_free(out.value)

    def health_check(self):
        """The worker's health as a Status (``.is_ok()``)."""
        try:
            rc = self._call(_n.load().ds_client_health_check)
        except DsError as e:
            return Status(e.code, e.message)
        return Status(rc, _n.last_error() if rc != _n.K_OK else "")
