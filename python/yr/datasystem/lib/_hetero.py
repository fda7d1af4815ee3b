"""The native objects behind ``yr.datasystem.hetero_client`` (served by Yuanrong's
pybind11 module ``yr.datasystem.lib.libds_client_py``), over libdatasystem's
``include/ds/hetero_client.h`` through ctypes.

As in Yuanrong, these calls do not raise on a failed operation: they return
a ``Status`` (``is_error()``, ``to_string()``), alone or with the result, and
the public ``HeteroClient`` raises ``RuntimeError(status.to_string())``.

Device memory is reached through the backend named by DS_DEVICE_BACKEND
(``host``: a device pointer is a host address of this process; ``cuda``:
NVIDIA GPUs); see include/ds/hetero_client.h.
"""

import ctypes
import threading

from yr.datasystem import _native as _n
from yr.datasystem.kv_client import ExistenceOpt, KVClient
from yr.datasystem.object_client import CacheType, WriteMode
from yr.datasystem.util import Status

__all__ = [
    "Blob", "CacheType", "DeviceBlobList", "ExistenceOpt", "Future", "HeteroClient", "MetaInfo",
    "SetParam", "Status", "WriteMode",
]

_OK = Status()
# How long dev_subscribe waits for its keys to be published (Yuanrong's
# DevSubscribe waits for the publisher; Future.get's default timeout), and
# a dev_publish future for its keys to be received.
_SUBSCRIBE_WAIT_MS = 60000
# The waits run in slices of this length, so closing the client ends them.
_WAIT_SLICE_MS = 200


class _BlobC(ctypes.Structure):
    _fields_ = [("dev_ptr", ctypes.c_uint64), ("size", ctypes.c_uint64)]


class _BlobListC(ctypes.Structure):
    _fields_ = [
        ("blobs", ctypes.POINTER(_BlobC)),
        ("n_blobs", ctypes.c_size_t),
        ("dev_idx", ctypes.c_int32),
        ("src_offset", ctypes.c_uint64),
    ]


class _DevStatsC(ctypes.Structure):
    _fields_ = [("d2d_keys", ctypes.c_uint64), ("arena_keys", ctypes.c_uint64)]


_PROTOS = {
    "ds_hetero_connect": (ctypes.c_int, [ctypes.POINTER(_n.ClientOptions), ctypes.c_bool,
                                         ctypes.POINTER(ctypes.c_void_p)]),
    "ds_hetero_close": (None, [ctypes.c_void_p]),
    "ds_hetero_kv": (ctypes.c_void_p, [ctypes.c_void_p]),
    "ds_device_backend_name": (ctypes.c_char_p, []),
    "ds_hetero_mset_d2h": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _n.c_keys_p,
                                          ctypes.POINTER(_BlobListC),
                                          ctypes.POINTER(_n.SetParamC), ctypes.c_void_p]),
    "ds_hetero_mget_h2d": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _n.c_keys_p,
                                          ctypes.POINTER(_BlobListC), ctypes.c_int32,
                                          ctypes.c_void_p]),
    "ds_hetero_async_mset_d2h": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _n.c_keys_p,
                                                ctypes.POINTER(_BlobListC),
                                                ctypes.POINTER(_n.SetParamC),
                                                ctypes.POINTER(ctypes.c_void_p)]),
    "ds_hetero_async_mget_h2d": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _n.c_keys_p,
                                                ctypes.POINTER(_BlobListC), ctypes.c_int32,
                                                ctypes.POINTER(ctypes.c_void_p)]),
    "ds_future_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]),
    "ds_future_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "ds_future_release": (None, [ctypes.c_void_p]),
    "ds_hetero_pre_register_device_memory": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64)]),
    "ds_hetero_dev_publish": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _n.c_keys_p,
                                             ctypes.POINTER(_BlobListC), ctypes.c_void_p]),
    "ds_hetero_dev_wait_received": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _n.c_keys_p,
                                                   ctypes.c_int32, ctypes.c_void_p]),
    "ds_hetero_dev_subscribe": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _n.c_keys_p,
                                               ctypes.POINTER(_BlobListC), ctypes.c_int32,
                                               ctypes.c_void_p]),
    "ds_device_current": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int32)]),
    "ds_hetero_dev_stats": (None, [ctypes.c_void_p, ctypes.POINTER(_DevStatsC)]),
    "ds_device_malloc": (ctypes.c_int, [ctypes.c_int32, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_uint64)]),
    "ds_device_free": (ctypes.c_int, [ctypes.c_uint64]),
    "ds_device_memcpy": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                                        ctypes.c_int]),
}
_lib = None
_lib_lock = threading.Lock()


def _load():
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                lib = _n.load()
                for name, (res, args) in _PROTOS.items():
                    fn = getattr(lib, name, None)
                    if fn is None:
                        raise _n.LibraryNotFound(
                            "%s has no %s: rebuild libdatasystem" % (_n.library_path(), name))
                    fn.restype, fn.argtypes = res, args
                _lib = lib
    return _lib


def _status(code):
    return _OK if code == _n.K_OK else Status(code, _n.last_error())


def _error(code, msg):
    return Status(code, msg)


class Blob:
    """One piece of device memory (Yuanrong's pybind ``Blob``)."""

    __slots__ = ("dev_ptr", "size")

    def __init__(self, dev_ptr=0, size=0):
        self.dev_ptr = dev_ptr
        self.size = size

    @staticmethod
    def build(dev_ptr, size):
        return Blob(dev_ptr, size)


class DeviceBlobList:
    """A key's blobs on one device (Yuanrong's pybind ``DeviceBlobList``)."""

    __slots__ = ("blob_list", "dev_idx", "src_offset")

    def __init__(self, blob_list=None, dev_idx=-1, src_offset=0):
        self.blob_list = list(blob_list or [])
        self.dev_idx = dev_idx
        self.src_offset = src_offset

    @staticmethod
    def build(blob_list, dev_idx, src_offset=0):
        return DeviceBlobList(blob_list, dev_idx, src_offset)


class SetParam:
    """The native set parameters (Yuanrong's pybind ``SetParam``)."""

    def __init__(self):
        self.write_mode = WriteMode.NONE_L2_CACHE
        self.existence = ExistenceOpt.NONE
        self.ttl_second = 0
        self.cache_type = CacheType.MEMORY


class MetaInfo:
    """A key's device meta info: ``blob_size_list``."""

    def __init__(self, blob_size_list=None):
        self.blob_size_list = list(blob_size_list or [])


def _check_int(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be an int, not %s" % (name, type(v).__name__))
    if v < lo or v > hi:
        raise ValueError("%s = %d is out of range [%d, %d]" % (name, v, lo, hi))


class _Batch:
    """keys and their blob lists as the C call takes them (held for its length)."""

    __slots__ = ("n", "keys", "lists", "blobs")

    def __init__(self, keys, addrs_of, dev_of, offset_of):
        n = len(keys)
        self.n = n
        enc = []
        for i, k in enumerate(keys):
            if not isinstance(k, str):
                raise TypeError("keys[%d] must be a str, not %s" % (i, type(k).__name__))
            enc.append(k.encode("utf-8", "surrogateescape"))
        self.keys = _n.keys_array(enc)
        flat = []
        counts = []
        for i in range(n):
            pairs = addrs_of(i)
            counts.append(len(pairs))
            for j, (ptr, size) in enumerate(pairs):
                _check_int("dev_ptr of blob %d of key %d" % (j, i), ptr, 0, 2**64 - 1)
                _check_int("size of blob %d of key %d" % (j, i), size, 0, 2**64 - 1)
                flat.append(ptr)
                flat.append(size)
        nb = len(flat) // 2
        self.blobs = (_BlobC * max(nb, 1))()
        if nb:
            ctypes.memmove(self.blobs, (ctypes.c_uint64 * len(flat))(*flat), 16 * nb)
        self.lists = (_BlobListC * n)()
        base = ctypes.addressof(self.blobs)
        at = 0
        for i in range(n):
            lst = self.lists[i]
            lst.blobs = ctypes.cast(base + 16 * at, ctypes.POINTER(_BlobC))
            lst.n_blobs = counts[i]
            dev = dev_of(i)
            _check_int("dev_idx of key %d" % i, dev, -(2**31), 2**31 - 1)
            lst.dev_idx = dev
            off = offset_of(i)
            _check_int("src_offset of key %d" % i, off, 0, 2**64 - 1)
            lst.src_offset = off
            at += counts[i]


def _from_blob_lists(keys, blob_lists):
    if len(keys) != len(blob_lists):
        # Yuanrong's check and message (K_INVALID, returned as a status).
        raise _n.DsError(_n.K_INVALID, "The size of objKeys(%d) and devBlobList(%d) does not match"
                         % (len(keys), len(blob_lists)))
    for i, bl in enumerate(blob_lists):
        if not isinstance(bl, DeviceBlobList):
            raise TypeError("data_blob_list[%d] must be a DeviceBlobList, not %s"
                            % (i, type(bl).__name__))
    return _Batch(keys,
                  lambda i: [(b.dev_ptr, b.size) for b in blob_lists[i].blob_list],
                  lambda i: blob_lists[i].dev_idx,
                  lambda i: blob_lists[i].src_offset)


def _from_multi_buffers(keys, addrs, sizes):
    return _Batch(keys, lambda i: list(zip(addrs[i], sizes[i])), lambda i: -1, lambda i: 0)


def _set_param_c(set_param):
    p = _n.SetParamC()
    if set_param is None:
        return p
    _check_int("ttl_second", int(set_param.ttl_second), 0, 2**32 - 1)
    p.write_mode = int(set_param.write_mode)
    p.ttl_second = int(set_param.ttl_second)
    p.existence = int(set_param.existence)
    return p


def _failed(keys, statuses):
    return [keys[i] for i in range(len(keys)) if statuses[i] != _n.K_OK]


class Future:
    """The result of an async call: ``get(timeout_ms)`` returns a Status, or
    ``{"failed_keys": [...], "status": Status}`` for calls on keys."""

    def __init__(self, handle=None, keys=None, hold=None, thread_result=None):
        self._handle = handle
        self._keys = keys
        self._hold = hold  # the C arrays the call reads until it is done
        self._thread_result = thread_result  # (event, [result]) of a Python-side call

    def get(self, timeout_ms=60000):
        _check_int("timeout_ms", timeout_ms, -(2**31), 2**31 - 1)
        if self._thread_result is not None:
            event, box = self._thread_result
            if not event.wait(None if timeout_ms < 0 else timeout_ms / 1000.0):
                return _error(_n.K_FUTURE_TIMEOUT,
                              "the async call did not finish within %d ms" % timeout_ms)
            return box[0]
        lib = _load()
        n = len(self._keys)
        statuses = (ctypes.c_int * n)()
        rc = lib.ds_future_get(self._handle, timeout_ms, statuses)
        if rc == _n.K_FUTURE_TIMEOUT:
            return _status(rc)
        st = _status(rc)
        failed = _failed(self._keys, statuses)
        return {"failed_keys": failed, "status": st}

    def __del__(self):
        h, self._handle = self._handle, None
        if h:
            try:
                _load().ds_future_release(h)
            except Exception:
                pass


def _thread_future(fn):
    """A Future of fn() run on a thread of its own."""
    event = threading.Event()
    box = [None]

    def run():
        try:
            box[0] = fn()
        except Exception as e:  # reported through the future, as a Status
            box[0] = _error(getattr(e, "code", _n.K_RUNTIME_ERROR), str(e))
        event.set()

    threading.Thread(target=run, daemon=True).start()
    return Future(thread_result=(event, box))


class _BorrowedKV(KVClient):
    """The KV client underneath a hetero client: its handle belongs to the
    hetero client, which closes it."""

    def close(self):
        with self._cv:
            self._handle = None
            while self._calls:
                self._cv.wait()


class HeteroClient:
    """Yuanrong's pybind ``HeteroClient``: the same constructor arguments."""

    def __init__(self, host, port, connect_timeout_ms=9000, token="", client_public_key="",
                 client_private_key="", server_public_key="", access_key="", secret_key="",
                 tenant_id="", enable_cross_node_connection=False, req_timeout_ms=0,
                 enable_remote_h2d=False):
        self._kv = _BorrowedKV(host, port, connect_timeout_ms, token, client_public_key,
                               client_private_key, server_public_key, access_key, secret_key,
                               tenant_id, enable_cross_node_connection, req_timeout_ms)
        self._enable_remote_h2d = bool(enable_remote_h2d)
        self._h = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------

    def init(self):
        try:
            lib = _load()
            with self._lock:
                if self._h is not None:
                    return _OK
                kv = self._kv
                host, port = kv._resolve_address()
                opts = _n.ClientOptions()
                lib.ds_client_options_init(opts)
                opts.host = host.encode()
                opts.port = port
                opts.connect_timeout_ms = kv._connect_timeout()
                if kv._req_timeout_ms > 0:
                    opts.request_timeout_ms = kv._req_timeout_ms
                import os

                token = kv._token or os.environ.get("DATASYSTEM_TOKEN", "")
                opts.token = token.encode() if token else None
                out = ctypes.c_void_p()
                rc = lib.ds_hetero_connect(opts, self._enable_remote_h2d, ctypes.byref(out))
                if rc != _n.K_OK:
                    return _status(rc)
                self._h = out.value
                kv._handle = lib.ds_hetero_kv(self._h)
                kv._pid = os.getpid()
                return _OK
        except _n.DsError as e:
            return _error(e.code, e.message)

    def close(self):
        with self._lock:
            h, self._h = self._h, None
            self._kv.close()
        if h:
            _load().ds_hetero_close(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        h = self._h
        if h is None:
            raise _n.DsError(_n.K_NOT_READY, "HeteroClient is not initialized: call init() first")
        return h

    # -- device <-> host -------------------------------------------------

    def _mset(self, batch, set_param):
        lib = _load()
        statuses = (ctypes.c_int * batch.n)()
        rc = lib.ds_hetero_mset_d2h(self._handle(), batch.n, batch.keys, batch.lists,
                                    ctypes.byref(_set_param_c(set_param)), statuses)
        return _status(rc), statuses

    def _mget(self, batch, sub_timeout_ms):
        lib = _load()
        statuses = (ctypes.c_int * batch.n)()
        rc = lib.ds_hetero_mget_h2d(self._handle(), batch.n, batch.keys, batch.lists,
                                    sub_timeout_ms, statuses)
        return _status(rc), statuses

    def _guard(self, fn):
        try:
            return fn()
        except _n.DsError as e:
            return _error(e.code, e.message)

    def mset_d2h(self, keys, blob_lists, set_param=None):
        return self._guard(lambda: self._mset(_from_blob_lists(keys, blob_lists), set_param)[0])

    def mset_d2h_from_multi_buffers(self, keys, addrs, sizes, set_param=None):
        return self._guard(
            lambda: self._mset(_from_multi_buffers(keys, addrs, sizes), set_param)[0])

    def _mget_failed(self, keys, batch, sub_timeout_ms):
        _check_int("sub_timeout_ms", sub_timeout_ms, 0, 2**31 - 1)
        st, statuses = self._mget(batch, sub_timeout_ms)
        return st, _failed(keys, statuses)

    def mget_h2d(self, keys, blob_lists, sub_timeout_ms):
        try:
            return self._mget_failed(keys, _from_blob_lists(keys, blob_lists), sub_timeout_ms)
        except _n.DsError as e:
            return _error(e.code, e.message), list(keys)

    def mget_h2d_from_multi_buffers(self, keys, addrs, sizes, sub_timeout_ms):
        try:
            return self._mget_failed(keys, _from_multi_buffers(keys, addrs, sizes),
                                     sub_timeout_ms)
        except _n.DsError as e:
            return _error(e.code, e.message), list(keys)

    def _submit(self, fn_name, keys, blob_lists, last):
        lib = _load()
        batch = _from_blob_lists(keys, blob_lists)
        out = ctypes.c_void_p()
        rc = getattr(lib, fn_name)(self._handle(), batch.n, batch.keys, batch.lists, last,
                                   ctypes.byref(out))
        if rc != _n.K_OK:
            st = _status(rc)
            return _thread_future(lambda: st)
        return Future(out.value, list(keys), hold=batch)

    def async_mset_d2h(self, keys, blob_lists, set_param=None):
        return self._submit("ds_hetero_async_mset_d2h", keys, blob_lists,
                            ctypes.byref(_set_param_c(set_param)))

    def async_mget_h2d(self, keys, blob_lists, sub_timeout_ms):
        _check_int("sub_timeout_ms", sub_timeout_ms, 0, 2**31 - 1)
        return self._submit("ds_hetero_async_mget_h2d", keys, blob_lists, sub_timeout_ms)

    def pre_register_device_memory(self, dev_ptrs, sizes):
        n = len(dev_ptrs)
        ptrs = (ctypes.c_uint64 * n)(*dev_ptrs)
        szs = (ctypes.c_uint64 * n)(*sizes)
        return self._guard(lambda: _status(
            _load().ds_hetero_pre_register_device_memory(self._handle(), n, ptrs, szs)))

    # -- keys ------------------------------------------------------------

    def _kv_call(self, fn):
        try:
            return _OK, fn()
        except _n.DsError as e:
            return _error(e.code, e.message), None

    def delete(self, keys):
        st, failed = self._kv_call(lambda: self._kv.delete(keys))
        return st, (failed if failed is not None else list(keys))

    def exist(self, keys):
        st, ex = self._kv_call(lambda: self._kv.exist(keys))
        return st, (ex if ex is not None else [])

    def batch_is_exist(self, keys):
        st, ex = self.exist(keys)
        return st, [1 if e else 0 for e in ex]

    def generate_key(self, prefix=""):
        st, key = self._kv_call(lambda: self._kv.generate_key(prefix))
        return st, (key or "")

    def get_meta_info(self, keys, is_dev_key):
        hook = _n.hook("object_get_meta_info")

        def run():
            enc = [k.encode("utf-8", "surrogateescape") for k in keys]
            metas = self._kv._call(lambda h: hook(h, None, enc))
            failed = [k for k, (size, _loc) in zip(keys, metas) if size == 0]
            infos = [MetaInfo([size] if size else []) for size, _loc in metas]
            return failed, infos

        if hook is None:
            return _error(_n.K_NOT_SUPPORTED, "this libdatasystem has no get_meta_info"), None
        return self._kv_call(run)

    # -- device to device --------------------------------------------------
    # dev_mset / dev_mget hold the value in the worker's arena. dev_publish
    # also records the publisher's device memory (cross-process handles):
    # dev_subscribe on the same machine copies straight from it, device to
    # device, and otherwise (another machine, a publisher that exited,
    # DS_DEVICE_IPC=0) from the worker's copy; dev_transfer_stats says which.

    def _keys_result(self, keys, st, statuses):
        failed = _failed(keys, statuses)
        if st.is_error() and len(failed) < len(keys):
            st = _OK  # some keys succeeded: the failed ones are reported
        return st, failed

    def dev_mset(self, keys, blob_lists):
        try:
            param = SetParam()
            st, statuses = self._mset(_from_blob_lists(keys, blob_lists), param)
            return self._keys_result(keys, st, statuses)
        except _n.DsError as e:
            return _error(e.code, e.message), list(keys)

    def dev_mget(self, keys, blob_lists, sub_timeout_ms):
        return self.mget_h2d(keys, blob_lists, sub_timeout_ms)

    def dev_delete(self, keys):
        return self.delete(keys)

    def async_dev_delete(self, keys):
        def run():
            st, failed = self.delete(keys)
            return {"failed_keys": failed, "status": st}

        return _thread_future(run)

    def dev_local_delete(self, keys):
        return self.delete(keys)

    def _hetero_call(self, fn):
        """fn(hetero handle), with the client kept open for its length (its
        close waits for the call)."""
        def run(_kv_handle):
            h = self._h
            if h is None:
                raise _n.DsError(_n.K_NOT_READY,
                                 "HeteroClient is not initialized: call init() first")
            return fn(h)

        return self._kv._call(run)

    def _in_slices(self, keys, step):
        """Runs step(pending key indexes, slice_ms) -> {index: status code}
        until every key has a final code or _SUBSCRIBE_WAIT_MS passed; a
        code of None means "not yet". Returns (codes, last message)."""
        import time

        codes = [None] * len(keys)
        msg = ""
        deadline = time.monotonic() + _SUBSCRIBE_WAIT_MS / 1000.0
        while True:
            pending = [i for i in range(len(keys)) if codes[i] is None]
            if not pending:
                break
            left_ms = int((deadline - time.monotonic()) * 1000)
            last = left_ms <= _WAIT_SLICE_MS
            got, m = step(pending, max(0, min(_WAIT_SLICE_MS, left_ms)), last)
            if m:
                msg = m
            for i, c in got.items():
                codes[i] = c
            if last:
                break
        return codes, msg

    def dev_publish(self, keys, blob_lists):
        try:
            batch = _from_blob_lists(keys, blob_lists)
            lib = _load()
            statuses = (ctypes.c_int * batch.n)()
            rc = self._hetero_call(lambda h: lib.ds_hetero_dev_publish(
                h, batch.n, batch.keys, batch.lists, statuses))
            st = _status(rc)
        except _n.DsError as e:
            return _error(e.code, e.message), []
        if st.is_error() and all(s != _n.K_OK for s in statuses):
            return st, []
        published = [i for i in range(len(keys)) if statuses[i] == _n.K_OK]
        done = threading.Event()
        box = {}

        def step(pending, slice_ms, last):
            idx = [published[p] for p in pending]
            enc = _n.keys_array([keys[i].encode("utf-8", "surrogateescape") for i in idx])
            sts = (ctypes.c_int * len(idx))()
            rc = self._hetero_call(lambda h: lib.ds_hetero_dev_wait_received(
                h, len(idx), enc, slice_ms, sts))
            msg = _n.last_error() if rc != _n.K_OK else ""
            got = {}
            for p, i in enumerate(idx):
                c = sts[p]
                if c != _n.K_FUTURE_TIMEOUT or last:
                    got[pending[p]] = c
            return got, msg

        def run():
            # The publisher's memory is read until its key is received: each
            # future completes then (Yuanrong's: OK once the peer has it).
            try:
                codes, msg = self._in_slices(published, step) if published else ([], "")
                box["r"] = (codes, msg)
            except Exception as e:
                box["r"] = ([getattr(e, "code", _n.K_RUNTIME_ERROR)] * len(published), str(e))
            done.set()

        threading.Thread(target=run, daemon=True).start()
        slot = {i: p for p, i in enumerate(published)}

        def key_result(i):
            if i not in slot:
                return Status(statuses[i], st.get_msg())
            done.wait()
            codes, msg = box["r"]
            c = codes[slot[i]]
            return _OK if c == _n.K_OK else Status(c, msg or "the key was not received")

        futures = [_thread_future(lambda i=i: key_result(i)) for i in range(len(keys))]
        return _OK, futures

    def dev_subscribe(self, keys, blob_lists):
        try:
            batch = _from_blob_lists(keys, blob_lists)
            self._handle()
            lib = _load()
            # "The current device" is the caller's: fixed here, as the
            # copies run on another thread.
            devs = [bl.dev_idx for bl in blob_lists]
            if any(d < 0 for d in devs):
                cur = ctypes.c_int32(-1)
                rc = lib.ds_device_current(ctypes.byref(cur))
                if rc != _n.K_OK:
                    return _status(rc), []
                devs = [cur.value if d < 0 else d for d in devs]
        except _n.DsError as e:
            return _error(e.code, e.message), []
        done = threading.Event()
        box = {}

        def step(pending, slice_ms, last):
            sub = _Batch([keys[i] for i in pending],
                         lambda p: [(b.dev_ptr, b.size) for b in blob_lists[pending[p]].blob_list],
                         lambda p: devs[pending[p]],
                         lambda p: blob_lists[pending[p]].src_offset)
            sts = (ctypes.c_int * sub.n)()
            rc = self._hetero_call(lambda h: lib.ds_hetero_dev_subscribe(
                h, sub.n, sub.keys, sub.lists, slice_ms, sts))
            msg = _n.last_error() if rc != _n.K_OK else ""
            got = {}
            for p, i in enumerate(pending):
                if sts[p] != _n.K_NOT_FOUND or last:
                    got[i] = sts[p]
            return got, msg

        def run():
            try:
                codes, msg = self._in_slices(keys, step)
                box["r"] = (codes, msg)
            except Exception as e:
                box["r"] = ([getattr(e, "code", _n.K_RUNTIME_ERROR)] * len(keys), str(e))
            done.set()

        del batch  # checked above; each slice builds its own
        threading.Thread(target=run, daemon=True).start()

        def key_result(i):
            done.wait()
            codes, msg = box["r"]
            if codes[i] == _n.K_OK:
                return _OK
            return Status(codes[i], msg or "the key was not received")

        futures = [_thread_future(lambda i=i: key_result(i)) for i in range(len(keys))]
        return _OK, futures

    def dev_transfer_stats(self):
        """How this client's dev_subscribe calls received their keys:
        {"d2d": keys copied from the publisher's device memory, "arena":
        keys copied from the worker's copy}."""
        out = _DevStatsC()
        _load().ds_hetero_dev_stats(self._h, ctypes.byref(out))
        return {"d2d": out.d2d_keys, "arena": out.arena_keys}


# Device memory helpers over the same backend (tests, benchmarks).

def device_backend_name():
    name = _load().ds_device_backend_name()
    if name is None:
        raise _n.DsError(_n.K_NOT_SUPPORTED, _n.last_error())
    return name.decode()


def device_malloc(size, dev_idx=-1):
    ptr = ctypes.c_uint64()
    _n.check(_load().ds_device_malloc(dev_idx, size, ctypes.byref(ptr)))
    return ptr.value


def device_free(ptr):
    _n.check(_load().ds_device_free(ptr))


COPY_H2D, COPY_D2H, COPY_D2D = 0, 1, 2


def device_memcpy(dst, src, size, kind):
    _n.check(_load().ds_device_memcpy(dst, src, size, kind))
