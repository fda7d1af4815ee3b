"""Cross-language: the C connector layer (libomniconn) and the Python one agree
byte for byte.

libomniconn is driven through ctypes from this process, so a C producer and a
Python consumer (and the reverse) share one worker:

* values the C serializer encodes are the bytes OmniSerializer writes here;
* a C YuanrongConnector put (a document, or a raw tensor) is read by the Python
  YuanrongConnector, and the stored bytes equal the Python serializer's;
* a Python put is read back by the C connector, tensor bytes identical.

Skipped until libomniconn is built in DS_BUILD_DIR/src/connector.
"""

import ctypes
import os

import pytest

np = pytest.importorskip("numpy")

from conftest import BUILD_DIR  # noqa: E402
from omni_connectors import YuanrongConnector  # noqa: E402
from omni_connectors.serializer import serialize  # noqa: E402

REQUIRED = (
    "omni_value_new_map",
    "omni_value_new_ndarray",
    "omni_value_new_tensor",
    "omni_map_set",
    "omni_value_encode",
    "omni_free",
    "omni_value_free",
    "omni_dtype_from_numpy_str",
    "omni_factory_create",
    "omni_factory_is_registered",
    "omni_connector_put",
    "omni_connector_get",
    "omni_connector_free",
    "omni_received_data",
    "omni_received_kind",
    "omni_received_size",
    "omni_received_tensor",
    "omni_received_free",
)


def _find_omniconn():
    d = BUILD_DIR / "src" / "connector"
    for name in ("libomniconn.so", "libomniconn.so.0"):
        p = d / name
        if p.exists():
            return str(p)
    return None


class TensorView(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_size_t),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("numel", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_size_t),
        ("mode", ctypes.c_char_p),
    ]


class Data(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("value", ctypes.c_void_p),
        ("bytes", ctypes.c_void_p),
        ("len", ctypes.c_size_t),
        ("tensor", TensorView),
    ]


class KV(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class Spec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("extra", ctypes.POINTER(KV)), ("n_extra", ctypes.c_size_t)]


DATA_VALUE, DATA_BYTES, DATA_TENSOR = 0, 1, 2


@pytest.fixture(scope="module")
def omni():
    path = _find_omniconn()
    if path is None:
        pytest.skip("libomniconn not built in %s" % BUILD_DIR)
    lib = ctypes.CDLL(path)
    missing = [n for n in REQUIRED if not hasattr(lib, n)]
    if missing:
        pytest.skip("libomniconn lacks %s" % ", ".join(missing))
    vp = ctypes.c_void_p
    lib.omni_value_new_map.restype = vp
    lib.omni_value_new_map.argtypes = []
    for n in ("omni_value_new_ndarray", "omni_value_new_tensor"):
        f = getattr(lib, n)
        f.restype = vp
        f.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t, vp, ctypes.c_size_t]
    lib.omni_value_new_str.restype = vp
    lib.omni_value_new_str.argtypes = [ctypes.c_char_p]
    lib.omni_value_new_int.restype = vp
    lib.omni_value_new_int.argtypes = [ctypes.c_int64]
    lib.omni_value_new_float.restype = vp
    lib.omni_value_new_float.argtypes = [ctypes.c_double]
    lib.omni_map_set.restype = ctypes.c_int
    lib.omni_map_set.argtypes = [vp, ctypes.c_char_p, vp]
    lib.omni_value_encode.restype = ctypes.c_int
    lib.omni_value_encode.argtypes = [vp, ctypes.POINTER(vp), ctypes.POINTER(ctypes.c_size_t)]
    lib.omni_free.argtypes = [vp]
    lib.omni_value_free.argtypes = [vp]
    lib.omni_dtype_from_numpy_str.restype = ctypes.c_int
    lib.omni_dtype_from_numpy_str.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.omni_factory_create.restype = ctypes.c_int
    lib.omni_factory_create.argtypes = [ctypes.POINTER(Spec), ctypes.POINTER(vp)]
    lib.omni_connector_put.restype = ctypes.c_int
    lib.omni_connector_put.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(Data), ctypes.POINTER(ctypes.c_size_t),
                                       ctypes.POINTER(vp)]
    lib.omni_connector_get.restype = ctypes.c_int
    lib.omni_connector_get.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, vp,
                                       ctypes.POINTER(vp)]
    lib.omni_connector_free.argtypes = [vp]
    lib.omni_received_data.restype = vp
    lib.omni_received_data.argtypes = [vp]
    lib.omni_received_size.restype = ctypes.c_size_t
    lib.omni_received_size.argtypes = [vp]
    lib.omni_received_tensor.restype = ctypes.c_int
    lib.omni_received_tensor.argtypes = [vp, ctypes.POINTER(TensorView)]
    lib.omni_received_free.argtypes = [vp]
    return lib


def _err():
    from yr.datasystem import _native

    try:
        return _native.last_error()
    except Exception:
        return "?"


def c_array(lib, arr, as_tensor=False):
    """A C ndarray (or tensor) value copying arr."""
    arr = arr.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    code = lib.omni_dtype_from_numpy_str(arr.dtype.str.encode(), len(arr.dtype.str))
    assert code != 0, arr.dtype.str
    shape = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
    fn = lib.omni_value_new_tensor if as_tensor else lib.omni_value_new_ndarray
    v = fn(code, shape, arr.ndim, arr.ctypes.data, arr.nbytes)
    assert v, _err()
    return v


def c_encode(lib, v):
    buf, n = ctypes.c_void_p(), ctypes.c_size_t()
    assert lib.omni_value_encode(v, buf, n) == 0, _err()
    try:
        return ctypes.string_at(buf.value, n.value)
    finally:
        lib.omni_free(buf.value)


def tensor_map(arr, torch_dtype):
    return {"__tensor__": True, "dtype": torch_dtype, "shape": list(arr.shape),
            "data": arr.tobytes()}


ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.arange(-5, 5, dtype=np.int64),
    np.array(7, dtype=np.int16),
    (np.arange(30) % 2).astype(np.bool_).reshape(5, 6),
    np.linspace(0, 1, 9, dtype=np.float64).reshape(3, 3),
]


@pytest.mark.parametrize("arr", ARRAYS, ids=lambda a: "%s%s" % (a.dtype, list(a.shape)))
def test_c_encoded_ndarray_bytes_equal_python(omni, arr):
    v = c_array(omni, arr)
    try:
        assert c_encode(omni, v) == serialize(arr)
    finally:
        omni.omni_value_free(v)


def test_c_encoded_document_bytes_equal_python(omni):
    hidden = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    m = omni.omni_value_new_map()
    assert omni.omni_map_set(m, b"request_id", omni.omni_value_new_str(b"req-7")) == 0
    assert omni.omni_map_set(m, b"hidden", c_array(omni, hidden, as_tensor=True)) == 0
    assert omni.omni_map_set(m, b"ids", c_array(omni, np.arange(5, dtype=np.int64))) == 0
    assert omni.omni_map_set(m, b"step", omni.omni_value_new_int(300)) == 0
    assert omni.omni_map_set(m, b"score", omni.omni_value_new_float(0.5)) == 0
    try:
        expect = serialize({
            "request_id": "req-7",
            "hidden": tensor_map(hidden, "float32"),
            "ids": np.arange(5, dtype=np.int64),
            "step": 300,
            "score": 0.5,
        })
        assert c_encode(omni, m) == expect
    finally:
        omni.omni_value_free(m)


@pytest.fixture
def c_conn(omni, worker):
    omni.omni_factory_is_registered.restype = ctypes.c_bool
    omni.omni_factory_is_registered.argtypes = [ctypes.c_char_p]
    if not omni.omni_factory_is_registered(b"YuanrongConnector"):
        pytest.skip("libomniconn has no YuanrongConnector yet")
    extra = (KV * 3)(
        KV(b"host", worker.host.encode()),
        KV(b"port", str(worker.port).encode()),
        KV(b"get_sub_timeout_ms", b"2000"),
    )
    spec = Spec(b"YuanrongConnector", extra, 3)
    out = ctypes.c_void_p()
    rc = omni.omni_factory_create(ctypes.byref(spec), ctypes.byref(out))
    assert rc == 0, _err()
    try:
        yield out.value
    finally:
        omni.omni_connector_free(out.value)


@pytest.fixture
def py_conn(worker):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "get_sub_timeout_ms": 2000})
    try:
        yield c
    finally:
        c.close()


def test_c_producer_python_consumer_document(omni, c_conn, py_conn, worker, key):
    rid = key.replace(".", "-")
    hidden = np.random.default_rng(1).standard_normal((32, 16)).astype(np.float32)
    m = omni.omni_value_new_map()
    assert omni.omni_map_set(m, b"hidden", c_array(omni, hidden)) == 0
    assert omni.omni_map_set(m, b"tag", omni.omni_value_new_str(b"from-c")) == 0
    try:
        data = Data(DATA_VALUE, m, None, 0)
        size = ctypes.c_size_t()
        rc = omni.omni_connector_put(c_conn, b"0", b"1", rid.encode(), ctypes.byref(data),
                                     ctypes.byref(size), None)
        assert rc == 0, _err()
    finally:
        omni.omni_value_free(m)
    obj, got = py_conn.get("0", "1", rid)
    assert got == size.value
    assert obj["tag"] == "from-c" and np.array_equal(obj["hidden"], hidden)
    kv = worker.client()
    try:
        stored = kv.get([rid + ":0_1"])[0]
    finally:
        kv.close()
    assert stored == serialize({"hidden": hidden, "tag": "from-c"})


@pytest.mark.parametrize("shape", [(64, 128), (512, 256)], ids=["32KiB-set", "512KiB-in-place"])
def test_c_raw_tensor_python_consumer(omni, c_conn, py_conn, worker, key, shape):
    rid = key.replace(".", "-")
    arr = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    shape = (ctypes.c_int64 * 2)(*arr.shape)
    code = omni.omni_dtype_from_numpy_str(b"<f4", 3)
    tv = TensorView(code, 2, shape, arr.size, arr.ctypes.data, arr.nbytes, None)
    data = Data(DATA_TENSOR, None, None, 0, tv)
    rc = omni.omni_connector_put(c_conn, b"0", b"1", rid.encode(), ctypes.byref(data), None, None)
    assert rc == 0, _err()
    obj, _ = py_conn.get("0", "1", rid)
    # A raw tensor travels as a tensor map; without torch it comes back as an ndarray.
    assert np.asarray(obj).tobytes() == arr.tobytes()
    kv = worker.client()
    try:
        stored = kv.get([rid + ":0_1"])[0]
    finally:
        kv.close()
    assert stored == serialize(tensor_map(arr, "float32"))


@pytest.mark.parametrize("shape", [(64, 64), (1024, 256)], ids=["16KiB-set", "1MiB-in-place"])
def test_python_producer_c_consumer(omni, c_conn, py_conn, key, shape):
    rid = key.replace(".", "-")
    arr = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    ok, size, _ = py_conn.put("0", "1", rid, arr)
    assert ok
    out = ctypes.c_void_p()
    rc = omni.omni_connector_get(c_conn, b"0", b"1", rid.encode(), None, ctypes.byref(out))
    assert rc == 0, _err()
    try:
        assert omni.omni_received_size(out.value) == size
        tv = TensorView()
        assert omni.omni_received_tensor(out.value, ctypes.byref(tv)) == 0, _err()
        assert [tv.shape[i] for i in range(tv.ndim)] == list(shape)
        assert ctypes.string_at(tv.data, tv.nbytes) == arr.tobytes()
    finally:
        omni.omni_received_free(out.value)


@pytest.mark.parametrize("n", [10, 200000], ids=["small", "in-place"])
def test_raw_bytes_both_ways(omni, c_conn, py_conn, worker, key, n):
    rid = key.replace(".", "-")
    blob = os.urandom(n)
    data = Data(DATA_BYTES, None, ctypes.cast(ctypes.c_char_p(blob), ctypes.c_void_p), n)
    c_size = ctypes.c_size_t()
    rc = omni.omni_connector_put(c_conn, b"0", b"1", rid.encode(), ctypes.byref(data),
                                 ctypes.byref(c_size), None)
    assert rc == 0, _err()
    obj, size = py_conn.get("0", "1", rid)
    assert obj == blob and isinstance(obj, bytes)
    # Both put()s report the stored (serialized) size, as Python's get does.
    assert size == len(serialize(blob)) == c_size.value

    omni.omni_received_kind.restype = ctypes.c_int
    omni.omni_received_kind.argtypes = [ctypes.c_void_p]
    assert py_conn.put("1", "2", rid, blob)[0]
    out = ctypes.c_void_p()
    rc = omni.omni_connector_get(c_conn, b"1", b"2", rid.encode(), None, ctypes.byref(out))
    assert rc == 0, _err()
    try:
        assert omni.omni_received_kind(out.value) == DATA_BYTES
        assert ctypes.string_at(omni.omni_received_data(out.value), n) == blob
        # The C get reports the raw byte count for a BYTES payload (its put
        # reported the stored size); Python's get reports the stored size.
        assert omni.omni_received_size(out.value) in (n, len(serialize(blob)))
        kv = worker.client()
        try:
            assert kv.get([rid + ":1_2"])[0] == serialize(blob)
        finally:
            kv.close()
    finally:
        omni.omni_received_free(out.value)


def test_chunk_stream_both_ways(omni, c_conn, py_conn, key):
    """A streaming edge written by C is read chunk by chunk by Python, and
    the reverse: one format (tag byte, end marker) on both sides."""
    if not hasattr(omni, "omni_connector_put_chunked"):
        pytest.skip("libomniconn lacks streaming edges")
    vp = ctypes.c_void_p
    omni.omni_connector_put_chunked.restype = ctypes.c_int
    omni.omni_connector_put_chunked.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p,
                                                ctypes.c_char_p, vp, ctypes.c_size_t,
                                                ctypes.c_size_t]
    omni.omni_connector_get_chunked.restype = ctypes.c_int
    omni.omni_connector_get_chunked.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p,
                                                ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(vp)]
    rid = key.replace(".", "-")
    blob = os.urandom(5000)
    rc = omni.omni_connector_put_chunked(c_conn, b"1", b"2", rid.encode(),
                                         ctypes.cast(ctypes.c_char_p(blob), vp), len(blob), 1024)
    assert rc == 0, _err()
    with py_conn.open_chunk_reader("1", "2", rid) as r:
        got = list(r.chunks(5000))
    assert [len(c) for c in got] == [1024, 1024, 1024, 1024, 904]
    assert b"".join(got) == blob

    py_conn.put_chunked("2", "3", rid, blob, chunk_size=700)
    out = ctypes.c_void_p()
    rc = omni.omni_connector_get_chunked(c_conn, b"2", b"3", rid.encode(), 5000, ctypes.byref(out))
    assert rc == 0, _err()
    try:
        assert omni.omni_received_size(out.value) == len(blob)
        assert ctypes.string_at(omni.omni_received_data(out.value), len(blob)) == blob
    finally:
        omni.omni_received_free(out.value)
