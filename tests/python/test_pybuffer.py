"""The buffer protocol of the SDK's buffer classes (StateValueBuffer from
get_buffers, ReadOnlyBuffer, object_client.Buffer from mcreate), against a real
worker: memoryview(), numpy.frombuffer, struct.unpack_from and
pickle.loads(buffers=...) read the pinned bytes in place, a write through a
read-only buffer is refused, views outlive an overwrite of the key, and
dropping them gives the pin back. Before CPython 3.12 this goes through the C
base _native.BufferBase (src/client/pybuffer.c), which the build makes."""

import ctypes
import gc
import json
import os
import pickle
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from yr.datasystem import _native as _n
from yr.datasystem.kv_client import ReadOnlyBuffer, StateValueBuffer
from yr.datasystem.object_client import Buffer

try:
    import numpy as np
except ImportError:  # the numpy cases skip
    np = None

BUILD = Path(os.environ.get("DS_BUILD_DIR") or Path(__file__).resolve().parents[2] / "build-py")


def address_of(obj, flags=0):
    """The address the buffer protocol exports for obj; flags 0: a read-only
    request, PYBUF_WRITABLE: a writable one (its error is raised as is)."""
    view = _n._PyBuffer()
    assert _n._PyObject_GetBuffer(obj, ctypes.byref(view), flags) == 0
    try:
        return view.buf, view.len, bool(view.readonly)
    finally:
        _n._PyBuffer_Release(ctypes.byref(view))


def pinned_at(buf):
    """Where the library holds buf's bytes (ds_buffer_data of its handle)."""
    return _n.load().ds_buffer_data(buf._pin.handle)


def pinned(worker):
    out = subprocess.run(
        [str(BUILD / "src" / "cli" / "dscli"), "status", "--worker_address", worker.address],
        capture_output=True, text=True, timeout=20, check=True,
    )
    return json.loads(out.stdout)["objects"]["pinned"]


def wait_pinned(worker, want, timeout=5.0):
    end = time.monotonic() + timeout
    while True:
        got = pinned(worker)
        if got == want or time.monotonic() > end:
            return got
        time.sleep(0.02)


def test_the_c_base_is_used_before_312():
    if sys.version_info >= (3, 12):
        assert _n.BUFFER_PROTOCOL
        pytest.skip("CPython %d.%d honours __buffer__ itself" % sys.version_info[:2])
    if not list((BUILD / "src" / "client").glob("_pybuffer*.so")):
        pytest.skip("this build has no _pybuffer module (no Python headers)")
    assert _n.BUFFER_PROTOCOL
    assert _n.BufferBase is not object
    assert _n.BufferBase.__module__ == "yr.datasystem._pybuffer"
    for cls in (Buffer, ReadOnlyBuffer, StateValueBuffer):
        assert issubclass(cls, _n.BufferBase)


@pytest.fixture
def protocol():
    if not _n.BUFFER_PROTOCOL:
        pytest.skip("no buffer protocol for Python classes here (no _pybuffer module)")


def test_memoryview_of_get_buffers_is_the_pinned_bytes(protocol, client, key):
    value = bytes(range(256)) * 1024
    client.set(key, value)
    buf = client.get_buffers([key])[0]
    assert isinstance(buf, StateValueBuffer)
    mv = memoryview(buf)
    assert mv.readonly and mv.nbytes == len(value) and mv.format == "B"
    assert mv == value
    # Zero copy: the exported address is the library's, not a copy's.
    addr, size, readonly = address_of(buf)
    assert addr == pinned_at(buf) and size == len(value) and readonly
    assert struct.unpack_from("<4B", buf, 10) == (10, 11, 12, 13)
    assert struct.unpack_from("<I", mv, 256 * 3) == (0x03020100,)
    # The read-only view refuses writes; a writable request is a BufferError
    # (which struct and ctypes report as TypeError).
    with pytest.raises(TypeError):
        mv[0] = 1
    with pytest.raises(BufferError, match="read-only"):
        address_of(buf, _n.PYBUF_WRITABLE)
    with pytest.raises(TypeError):
        struct.pack_into("<I", buf, 0, 7)
    with pytest.raises(TypeError):
        ctypes.c_char.from_buffer(buf)
    assert client.get([key])[0] == value


def test_read_only_buffer_exports_too(protocol, client, key):
    client.set(key, b"read-only-buffer")
    buf = client.get_read_only_buffers([key])[0]
    assert isinstance(buf, ReadOnlyBuffer)
    mv = memoryview(buf)
    assert mv.readonly and bytes(mv) == b"read-only-buffer"
    assert address_of(buf)[0] == pinned_at(buf)
    with pytest.raises(BufferError, match="published"):
        address_of(buf, _n.PYBUF_WRITABLE)


def test_numpy_frombuffer_is_zero_copy(protocol, client, key):
    if np is None:
        pytest.skip("numpy is not installed")
    src = np.arange(10000, dtype=np.float64)
    client.set(key, src.tobytes())
    buf = client.get_buffers([key])[0]
    arr = np.frombuffer(buf, dtype=np.float64)
    assert arr.ctypes.data == pinned_at(buf)
    assert np.array_equal(arr, src)
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 1.0


def test_pickle_loads_out_of_band_buffers(protocol, client, key):
    # Protocol 5 keeps large payloads out of the pickle; loads takes them back
    # from the pinned buffers without copying them.
    payload = pickle.PickleBuffer(b"\x01\x02payload" * 1000)
    oob = []
    meta = pickle.dumps({"blob": payload}, protocol=5, buffer_callback=oob.append)
    client.mset([key + ".meta", key + ".0"], [meta, oob[0].raw().tobytes()])
    meta_buf, data_buf = client.get_buffers([key + ".meta", key + ".0"])
    out = pickle.loads(meta_buf, buffers=[data_buf])
    assert bytes(out["blob"]) == b"\x01\x02payload" * 1000
    assert address_of(out["blob"])[0] == pinned_at(data_buf)
    if np is not None:
        arr = np.arange(4096, dtype=np.int32)
        oob = []
        meta = pickle.dumps(arr, protocol=5, buffer_callback=oob.append)
        client.set(key + ".np", oob[0].raw().tobytes())
        data_buf = client.get_buffers([key + ".np"])[0]
        back = pickle.loads(meta, buffers=[data_buf])
        assert np.array_equal(back, arr) and back.ctypes.data == pinned_at(data_buf)


def test_unpublished_buffer_is_writable_then_read_only(protocol, client, key):
    b = client.mcreate([key], [16])[0]
    assert type(b) is Buffer
    mv = memoryview(b)
    assert not mv.readonly
    assert address_of(b, _n.PYBUF_WRITABLE) == (
        _n.load().ds_buffer_mutable_data(b._pin.handle), 16, False)
    struct.pack_into("<QQ", b, 0, 0x1122334455667788, 42)  # a writable request
    assert bytes(b.mutable_data()) == struct.pack("<QQ", 0x1122334455667788, 42)
    del mv
    client.mset_buffer([b])
    assert client.get([key])[0] == struct.pack("<QQ", 0x1122334455667788, 42)
    # Published: read-only, the next version goes through mutable_data().
    assert memoryview(b).readonly
    with pytest.raises(BufferError, match="published"):
        address_of(b, _n.PYBUF_WRITABLE)
    with pytest.raises(TypeError):
        struct.pack_into("<Q", b, 0, 1)
    assert struct.unpack_from("<Q", b, 8) == (42,)


def test_views_outlive_an_overwrite_and_the_buffer(protocol, client, key):
    original = os.urandom(1 << 20)
    client.set(key, original)
    buf = client.get_buffers([key])[0]
    mv = memoryview(buf)[1000:2000]
    arr = np.frombuffer(buf, dtype=np.uint8) if np is not None else None
    del buf
    gc.collect()
    client.set(key, b"\x00" * (1 << 20))  # a new version; the old one stays pinned
    for i in range(8):  # churn the arena so freed memory would be reused
        client.set("%s.churn.%d" % (key, i), b"\xee" * (1 << 20))
    assert bytes(mv) == original[1000:2000]
    if arr is not None:
        assert arr.tobytes() == original
    assert client.get([key])[0] == b"\x00" * (1 << 20)
    client.delete([key] + ["%s.churn.%d" % (key, i) for i in range(8)])


def test_a_released_buffer_exports_nothing(protocol, client, key):
    client.set(key, b"gone")
    buf = client.get_buffers([key])[0]
    buf.release()
    with pytest.raises(RuntimeError, match="released"):
        memoryview(buf)
    empty = Buffer()
    with pytest.raises(RuntimeError, match="create it first"):
        memoryview(empty)


def test_dropping_the_views_gives_the_pin_back(protocol, fresh_worker, key):
    w = fresh_worker(shm_mb=64)
    c = w.client()
    try:
        c.set(key, b"v1" * 50000)
        base = wait_pinned(w, pinned(w))
        buf = c.get_buffers([key])[0]
        mv = memoryview(buf)
        view2 = struct.unpack_from("<2s", buf, 0)
        arr = np.frombuffer(buf, dtype=np.uint8) if np is not None else None
        del buf
        gc.collect()
        c.set(key, b"v2" * 50000)  # the old version is now held by the views alone
        assert wait_pinned(w, base + 1) == base + 1
        assert bytes(mv[:2]) == b"v1" and view2 == (b"v1",)
        del mv, arr
        gc.collect()
        c.exist([key])  # a request: a deferred release reaches the worker with it
        assert wait_pinned(w, base) == base
        # Released explicitly, while a memoryview of it was never taken.
        buf = c.get_buffers([key])[0]
        assert bytes(memoryview(buf)[:2]) == b"v2"
        buf.release()
        c.set(key, b"v3")
        c.exist([key])
        assert wait_pinned(w, base) == base
    finally:
        c.close()


def test_without_the_module_the_classes_stay_plain_python(worker, key):
    code = r"""
import sys
from yr.datasystem import _native as _n
from yr.datasystem import KVClient
from yr.datasystem.kv_client import StateValueBuffer
assert _n.BufferBase is object
assert _n.BUFFER_PROTOCOL == (sys.version_info >= (3, 12))
assert StateValueBuffer.__mro__[-1] is object and len(StateValueBuffer.__mro__) == 4
c = KVClient(sys.argv[1], int(sys.argv[2]))
c.init()
c.set(sys.argv[3], b"plain")
buf = c.get_buffers([sys.argv[3]])[0]
assert bytes(buf.ImmutableData()) == b"plain" and buf == b"plain"
if sys.version_info < (3, 12):
    try:
        memoryview(buf)
    except TypeError:
        pass
    else:
        raise AssertionError("memoryview worked without the module")
print("ok")
"""
    env = worker.env()
    env["DS_NO_PYBUFFER"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code, worker.host, str(worker.port), key],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
