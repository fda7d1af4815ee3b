"""The one-copy connector hand-off, Python and C.

A YuanrongConnector put of a payload of at least its in-place threshold
(``raw_inplace_min``, 64 KiB, the worker's default inline_max) computes the
OmniSerializer encoding's exact size, reserves that many bytes in the worker's
arena (mcreate / ds_kv_create), writes the msgpack framing and copies each
array's bytes once into place, then publishes; a get reads a pinned view and
decodes arrays as views of it. Smaller payloads take one plain set.

What these tests hold either way:

* the stored bytes are exactly OmniSerializer's output (ndarrays of several
  dtypes, tensor maps incl. bfloat16, nested dicts and lists, bytes);
* a consumer on the old path (plain ``get`` + ``deserialize``) reads what the
  one-copy producer wrote, and the one-copy consumer reads what an old-path
  producer (``serialize`` + plain ``set``) wrote -- Python and C both;
* a remote (TCP) connector stores the same bytes.
"""

import ctypes

import pytest

np = pytest.importorskip("numpy")

from omni_connectors import YuanrongConnector  # noqa: E402
from omni_connectors.serializer import RawTensor, deserialize, serialize  # noqa: E402
from test_connector_crosslang import (  # noqa: E402,F401 - fixtures
    DATA_VALUE,
    Data,
    TensorView,
    _err,
    c_conn,
    omni,
)

THRESHOLD = 64 * 1024
SMALL = 512  # elements: every payload below the threshold
BIG = 256 * 1024  # elements: comfortably above the threshold for every dtype below


def _rng(seed):
    return np.random.default_rng(seed)


def bf16_map(n, seed=0):
    """A bfloat16 tensor as OmniSerializer writes it (torch's bytes: the high
    halves of float32 values)."""
    f = _rng(seed).standard_normal(n).astype(np.float32)
    raw = (f.view(np.uint32) >> 16).astype(np.uint16)
    return {"__tensor__": True, "dtype": "bfloat16", "shape": [n], "data": raw.tobytes()}


def tensor_map(arr, name):
    return {"__tensor__": True, "dtype": name, "shape": list(arr.shape), "data": arr.tobytes()}


def payloads(n):
    """name -> payload, each with n-element arrays."""
    r = _rng(n)
    return {
        "f32": r.standard_normal((n // 256, 256)).astype(np.float32),
        "f16": r.standard_normal(n).astype(np.float16),
        "f64": r.standard_normal(n).astype(np.float64),
        "i64": np.arange(n, dtype=np.int64),
        "u8": r.integers(0, 255, n, dtype=np.uint8),
        "bool": (np.arange(n) % 3 == 0),
        "c64": (r.standard_normal(n) + 1j).astype(np.complex64),
        "strided": np.arange(2 * n, dtype=np.int32)[::2],
        "bytes": r.bytes(n),
        "bf16-tensor-map": bf16_map(n),
        "nested": {
            "request_id": "req-9",
            "hidden": r.standard_normal((n // 128, 128)).astype(np.float32),
            "layers": [np.full(n // 4, i, dtype=np.float16) for i in range(3)],
            "meta": {"ids": list(range(20)), "done": False, "score": 0.5, "name": "x"},
            "tensor": tensor_map(np.arange(n // 2, dtype=np.int32), "int32"),
            "blob": b"\x00\x01" * 50,
            "empty": np.zeros((0, 4), dtype=np.float32),
            "scalar": np.array(3.5, dtype=np.float64),
        },
    }


CASES = [(name, n) for n in (SMALL, BIG) for name in payloads(SMALL)]


def assert_same(a, b):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    elif isinstance(a, dict) and a.get("__tensor__") is True:
        # With torch a tensor map comes back as a torch tensor; without it,
        # as an ndarray, or a RawTensor for a dtype numpy lacks.
        if isinstance(b, RawTensor):
            assert (b.dtype, list(b.shape), bytes(b.data)) == (a["dtype"], a["shape"], a["data"])
        elif type(b).__module__.startswith("torch"):
            import torch

            raw = b.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            assert list(b.shape) == a["shape"] and raw == a["data"]
        else:
            assert list(b.shape) == a["shape"] and np.asarray(b).tobytes() == a["data"]
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


@pytest.fixture
def conn(worker):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "get_sub_timeout_ms": 2000,
                           "unix_socket_dir": worker.sock_dir})
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def kv(worker):
    c = worker.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def rid(key):
    return key.replace(".", "-")


class Spy:
    """Counts the connector client's plain sets, in-place creates and gather
    sets (set_pieces: each piece copied once into the arena)."""

    def __init__(self, client):
        self.sets = self.creates = self.pieces = 0
        self._set, self._mcreate = client.set, client.mcreate
        self._set_pieces = client.set_pieces

        def set_pieces(*a, **k):
            self.pieces += 1
            return self._set_pieces(*a, **k)

        client.set_pieces = set_pieces

        def set_(*a, **k):
            self.sets += 1
            return self._set(*a, **k)

        def mcreate(*a, **k):
            self.creates += 1
            return self._mcreate(*a, **k)

        client.set, client.mcreate = set_, mcreate


@pytest.mark.parametrize("name,n", CASES, ids=["%s-%d" % c for c in CASES])
def test_python_one_copy_put_stores_serializer_bytes(conn, kv, rid, name, n):
    data = payloads(n)[name]
    expect = serialize(data)
    spy = Spy(conn.client)
    ok, size, meta = conn.put("0", "1", rid, data)
    assert ok and meta is None and size == len(expect)
    # Large payloads go in place (one copy into the arena), small ones by set.
    # A bytes value inside a container (the hand-built bfloat16 map) is packed
    # inline by msgpack, so that payload is one blob, also stored by set.
    in_place = size >= THRESHOLD and name != "bf16-tensor-map"
    assert (spy.pieces, spy.creates, spy.sets) == ((1, 0, 0) if in_place else (0, 0, 1))
    stored = kv.get([rid + ":0_1"])[0]
    assert stored == expect
    # An old-path consumer: plain get + deserialize.
    assert_same(data, deserialize(stored, tensor_type="numpy"))
    # The one-copy consumer: pinned view, arrays viewing it.
    obj, got = conn.get("0", "1", rid)
    assert got == size
    assert_same(data, obj)


@pytest.mark.parametrize("name,n", CASES, ids=["%s-%d" % c for c in CASES])
def test_old_path_producer_one_copy_consumer(conn, kv, rid, name, n):
    data = payloads(n)[name]
    kv.set(rid + ":0_1", serialize(data))
    obj, got = conn.get("0", "1", rid)
    assert got == len(serialize(data))
    assert_same(data, obj)


def test_one_copy_get_arrays_view_the_pinned_buffer(conn, kv, rid):
    data = payloads(BIG)["nested"]
    conn.put("0", "1", rid, data)
    obj, _ = conn.get("0", "1", rid)
    hidden = obj["hidden"]
    # A read-only view (of shared memory), not a private copy...
    assert not hidden.flags.writeable and not hidden.flags.owndata
    # ...which keeps its pin: deleting the key and overwriting it leave it intact.
    kv.delete([rid + ":0_1"])
    conn.put("0", "1", rid, {"hidden": np.zeros_like(data["hidden"])})
    del obj
    assert np.array_equal(hidden, data["hidden"])


@pytest.mark.parametrize("n", [SMALL, BIG], ids=["set", "in-place"])
def test_remote_tcp_producer_and_consumer(worker, conn, kv, rid, n):
    data = payloads(n)["nested"]
    tcp = YuanrongConnector({"host": worker.host, "port": worker.port, "transport": "tcp",
                             "get_sub_timeout_ms": 2000})
    try:
        assert not tcp.client.is_local
        ok, size, _ = tcp.put("0", "1", rid, data)
        assert ok
        assert kv.get([rid + ":0_1"])[0] == serialize(data)
        assert_same(data, conn.get("0", "1", rid)[0])
        conn.put("1", "2", rid, data)
        obj, got = tcp.get("1", "2", rid)
        assert got == size
        assert_same(data, obj)
    finally:
        tcp.close()


# ---- C: libomniconn's YuanrongConnector ----

OMNI_DTYPE_BFLOAT16 = 11


@pytest.fixture
def cvals(omni):
    vp = ctypes.c_void_p
    for n in ("omni_value_new_tensor_ref", "omni_value_new_ndarray_ref"):
        f = getattr(omni, n)
        f.restype = vp
        f.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t, vp,
                      ctypes.c_size_t]
    omni.omni_value_new_array.restype = vp
    omni.omni_value_new_array.argtypes = []
    omni.omni_array_push.restype = ctypes.c_int
    omni.omni_array_push.argtypes = [vp, vp]
    omni.omni_value_new_bin_ref.restype = vp
    omni.omni_value_new_bin_ref.argtypes = [vp, ctypes.c_size_t]
    omni.omni_received_value.restype = ctypes.c_int
    omni.omni_received_value.argtypes = [vp, ctypes.POINTER(vp)]
    omni.omni_map_get.restype = vp
    omni.omni_map_get.argtypes = [vp, ctypes.c_char_p]
    omni.omni_value_get_tensor.restype = ctypes.c_int
    omni.omni_value_get_tensor.argtypes = [vp, ctypes.POINTER(TensorView)]
    return omni


def c_ref(lib, arr, tensor=False, dtype_code=None):
    """A C tensor/ndarray value borrowing arr's bytes (copied once, when encoded)."""
    if dtype_code is None:
        dtype_code = lib.omni_dtype_from_numpy_str(arr.dtype.str.encode(), len(arr.dtype.str))
    shape = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
    fn = lib.omni_value_new_tensor_ref if tensor else lib.omni_value_new_ndarray_ref
    v = fn(dtype_code, shape, arr.ndim, arr.ctypes.data, arr.nbytes)
    assert v, _err()
    return v


def c_document(lib, n, keep):
    """{"hidden": f32 tensor, "bf16": bfloat16 tensor, "ids": i64 ndarray,
    "layers": [f16 tensor x2], "blob": bin, "tag": str} built with borrowed
    data; returns (value, the equal Python object)."""
    r = _rng(n + 1)
    hidden = r.standard_normal((n // 64, 64)).astype(np.float32)
    bf = bf16_map(n, seed=n)
    bf_arr = np.frombuffer(bf["data"], dtype=np.uint16)
    ids = np.arange(n // 8, dtype=np.int64)
    layers = [np.full(n // 4, i, dtype=np.float16) for i in range(2)]
    blob = b"abc" * 10
    keep.extend([hidden, bf_arr, ids, blob, *layers])
    m = lib.omni_value_new_map()
    assert lib.omni_map_set(m, b"hidden", c_ref(lib, hidden, tensor=True)) == 0
    assert lib.omni_map_set(m, b"bf16", c_ref(lib, bf_arr, tensor=True,
                                              dtype_code=OMNI_DTYPE_BFLOAT16)) == 0
    assert lib.omni_map_set(m, b"ids", c_ref(lib, ids)) == 0
    arr = lib.omni_value_new_array()
    for layer in layers:
        assert lib.omni_array_push(arr, c_ref(lib, layer, tensor=True)) == 0
    assert lib.omni_map_set(m, b"layers", arr) == 0
    assert lib.omni_map_set(m, b"blob", lib.omni_value_new_bin_ref(blob, len(blob))) == 0
    assert lib.omni_map_set(m, b"tag", lib.omni_value_new_str(b"from-c")) == 0
    py = {
        "hidden": tensor_map(hidden, "float32"),
        "bf16": bf,
        "ids": ids,
        "layers": [tensor_map(x, "float16") for x in layers],
        "blob": blob,
        "tag": "from-c",
    }
    return m, py


@pytest.mark.parametrize("n", [SMALL, BIG], ids=["set", "in-place"])
def test_c_one_copy_put_stores_serializer_bytes(cvals, c_conn, conn, kv, rid, n):
    keep = []
    m, py = c_document(cvals, n, keep)
    try:
        data = Data(DATA_VALUE, m, None, 0)
        size = ctypes.c_size_t()
        rc = cvals.omni_connector_put(c_conn, b"0", b"1", rid.encode(), ctypes.byref(data),
                                      ctypes.byref(size), None)
        assert rc == 0, _err()
    finally:
        cvals.omni_value_free(m)
    expect = serialize(py)
    assert (size.value >= THRESHOLD) == (n == BIG)
    stored = kv.get([rid + ":0_1"])[0]
    assert size.value == len(expect) and stored == expect
    # Old-path Python consumer, and the one-copy Python consumer.
    assert_same(py, deserialize(stored, tensor_type="numpy"))
    obj, got = conn.get("0", "1", rid)
    assert got == size.value
    assert_same(py, obj)


@pytest.mark.parametrize("how", ["one-copy", "old-path"])
@pytest.mark.parametrize("n", [SMALL, BIG], ids=["set", "in-place"])
def test_c_consumer_reads_python_producer(cvals, c_conn, conn, kv, rid, n, how):
    data = payloads(n)["nested"]
    if how == "one-copy":
        assert conn.put("0", "1", rid, data)[0]
    else:
        kv.set(rid + ":0_1", serialize(data))
    out = ctypes.c_void_p()
    rc = cvals.omni_connector_get(c_conn, b"0", b"1", rid.encode(), None, ctypes.byref(out))
    assert rc == 0, _err()
    try:
        assert cvals.omni_received_size(out.value) == len(serialize(data))
        root = ctypes.c_void_p()
        assert cvals.omni_received_value(out.value, ctypes.byref(root)) == 0, _err()
        for name in ("hidden", "scalar"):
            tv = TensorView()
            v = cvals.omni_map_get(root, name.encode())
            assert v and cvals.omni_value_get_tensor(v, ctypes.byref(tv)) == 0, _err()
            assert [tv.shape[i] for i in range(tv.ndim)] == list(data[name].shape)
            assert ctypes.string_at(tv.data, tv.nbytes) == data[name].tobytes()
        tv = TensorView()
        v = cvals.omni_map_get(root, b"tensor")
        assert cvals.omni_value_get_tensor(v, ctypes.byref(tv)) == 0, _err()
        assert ctypes.string_at(tv.data, tv.nbytes) == data["tensor"]["data"]
    finally:
        cvals.omni_received_free(out.value)
