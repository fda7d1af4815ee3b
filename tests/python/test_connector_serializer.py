"""OmniSerializer: byte layout (vLLM-Omni's msgspec format) and round trips.
Needs no worker."""

import dataclasses
import struct

import msgpack
import pytest

np = pytest.importorskip("numpy")

from omni_connectors.serializer import (  # noqa: E402
    OmniSerializer,
    RawTensor,
    deserialize,
    raw_frame,
    serialize,
    serialize_chunks,
)


def s(text):
    b = text.encode()
    assert len(b) < 32
    return bytes([0xA0 | len(b)]) + b


def test_ndarray_exact_bytes():
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype="<f4")
    expect = (
        b"\x84"
        + s("__ndarray__") + b"\xc3"
        + s("dtype") + s("<f4")
        + s("shape") + b"\x92\x02\x03"
        + s("data") + b"\xc4\x18" + a.tobytes()
    )
    assert serialize(a) == expect


def test_nested_map_exact_bytes_and_key_order():
    obj = {"z": 1, "a": -1, "m": 1.5, "t": True, "n": None, "s": "x" * 40, "b": b"\x01\x02",
           "l": (1, 300, 70000, 2**40), "neg": -200}
    expect = (
        b"\x89"
        + s("z") + b"\x01"
        + s("a") + b"\xff"
        + s("m") + b"\xcb" + struct.pack(">d", 1.5)  # floats always float64
        + s("t") + b"\xc3"
        + s("n") + b"\xc0"
        + s("s") + b"\xd9\x28" + b"x" * 40
        + s("b") + b"\xc4\x02\x01\x02"
        + s("l") + b"\x94\x01\xcd\x01\x2c\xce\x00\x01\x11\x70\xcf" + (2**40).to_bytes(8, "big")
        + s("neg") + b"\xd1" + (-200).to_bytes(2, "big", signed=True)
    )
    assert serialize(obj) == expect


def test_image_and_tensor_maps_decode_without_torch_or_pil():
    img = {"__pil_image__": True, "mode": "RGB", "shape": [2, 2, 3], "data": bytes(range(12))}
    out = deserialize(msgpack.packb(img, use_bin_type=True))
    # Without PIL an image comes back as its uint8 array.
    if isinstance(out, np.ndarray):
        assert out.shape == (2, 2, 3) and out.dtype == np.uint8
        assert out.tobytes() == bytes(range(12))
    t = {"__tensor__": True, "dtype": "float32", "shape": [3], "data": np.arange(3, dtype="<f4").tobytes()}
    out = deserialize(msgpack.packb(t, use_bin_type=True), tensor_type="numpy")
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert out.tolist() == [0.0, 1.0, 2.0]
    bf = {"__tensor__": True, "dtype": "bfloat16", "shape": [2], "data": b"\x80\x3f\x00\x40"}
    out = deserialize(msgpack.packb(bf, use_bin_type=True), tensor_type="numpy")
    assert isinstance(out, RawTensor)
    assert out.dtype == "bfloat16" and out.shape == [2] and out.data == b"\x80\x3f\x00\x40"


def test_tensor_scalar_shape():
    t = {"__tensor__": True, "dtype": "int64", "shape": [], "data": (7).to_bytes(8, "little")}
    out = deserialize(msgpack.packb(t, use_bin_type=True), tensor_type="numpy")
    assert out.shape == () and int(out) == 7


@pytest.mark.parametrize(
    "dtype", ["<f4", "<f8", "<f2", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "|b1",
              "<c8", "<c16"]
)
def test_ndarray_dtypes_roundtrip(dtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    out = deserialize(serialize(a))
    assert out.dtype == a.dtype and out.shape == a.shape and np.array_equal(out, a)
    assert serialize(a)[2:13] == b"__ndarray__"


def test_noncontiguous_and_zero_d_arrays():
    a = np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]
    out = deserialize(serialize(a))
    assert np.array_equal(out, a) and out.shape == (4, 3)
    z = np.array(2.5)
    assert deserialize(serialize(z)).shape == ()
    e = np.zeros((0, 3), dtype=np.float32)
    assert deserialize(serialize(e)).shape == (0, 3)


def test_dict_with_arrays_roundtrip():
    obj = {
        "request_id": "req-1",
        "hidden": np.random.rand(4, 8).astype(np.float32),
        "ids": np.arange(10, dtype=np.int64),
        "nested": {"lst": [np.ones(3, dtype=np.float16), 1, "two"], "none": None},
        "tuple": (1, 2),
        "blob": b"\x00" * 10,
    }
    out = OmniSerializer.deserialize(OmniSerializer.serialize(obj))
    assert out["request_id"] == "req-1"
    assert np.array_equal(out["hidden"], obj["hidden"]) and out["hidden"].dtype == np.float32
    assert np.array_equal(out["ids"], obj["ids"])
    assert np.array_equal(out["nested"]["lst"][0], obj["nested"]["lst"][0])
    assert out["nested"]["lst"][1:] == [1, "two"] and out["nested"]["none"] is None
    assert out["tuple"] == [1, 2]  # msgpack arrays come back as lists, as with msgspec
    assert out["blob"] == b"\x00" * 10
    # The instance interface works as well as the class one.
    assert OmniSerializer().serialize(obj) == OmniSerializer.serialize(obj)


def test_extras_encode_like_vllm_omni():
    @dataclasses.dataclass
    class Meta:
        name: str
        n: int

    out = deserialize(serialize({"m": Meta("x", 3), "sl": slice(1, 5, None), "np": np.int64(4)}))
    assert out == {"m": {"name": "x", "n": 3}, "sl": [1, 5, None], "np": 4}
    with pytest.raises(TypeError):
        serialize(object())


def test_int_map_keys_decode():
    assert deserialize(msgpack.packb({1: "a", 2: "b"})) == {1: "a", 2: "b"}


@pytest.mark.parametrize(
    "obj",
    [b"", b"abc", bytearray(b"x" * 300), memoryview(b"y" * 70000),
     np.arange(1000, dtype=np.float32).reshape(10, 100), np.array(3, dtype=np.int8),
     np.zeros((2, 0), dtype=np.float64)],
    ids=["empty", "small", "bin16", "bin32", "f32", "scalar", "empty-array"],
)
def test_raw_frame_is_byte_identical(obj):
    head, body = raw_frame(obj)
    assert head + body.tobytes() == serialize(obj)
    chunks, total = serialize_chunks(obj)
    assert b"".join(bytes(c) for c in chunks) == serialize(obj) and total == len(serialize(obj))


def test_raw_frame_declines_other_objects():
    assert raw_frame({"a": 1}) is None
    assert raw_frame([1, 2]) is None
    assert raw_frame(np.array([object()], dtype=object)) is None


def test_serialize_chunks_views_large_arrays():
    big = np.arange(100000, dtype=np.float32)
    mid = np.ones((64, 64), dtype=np.int16)
    small = np.arange(3, dtype=np.int8)
    obj = {"big": big, "meta": {"small": small, "mid": [mid, "x"], "b": b"raw" * 10},
           "tail": 1.5, "t": (big[:10], None)}
    chunks, total = serialize_chunks(obj)
    joined = b"".join(bytes(c) for c in chunks)
    assert joined == serialize(obj) and total == len(joined)
    views = [c for c in chunks if isinstance(c, memoryview)]
    # big and mid travel as views of the arrays themselves; small arrays inline.
    assert len(views) == 2
    assert np.frombuffer(views[0], dtype=np.float32).ctypes.data == big.ctypes.data
    assert serialize_chunks({"a": 1}) == ([serialize({"a": 1})], len(serialize({"a": 1})))


def test_serialize_chunks_with_placeholder_lookalike_data():
    # User bytes cannot be mistaken for a placeholder: the nonce is per call.
    a = np.arange(5000, dtype=np.uint8)
    obj = {"x": b"\xc4\x10" + bytes(16), "a": a, "y": [b"\xc4\x10" * 20]}
    chunks, _ = serialize_chunks(obj)
    assert b"".join(bytes(c) for c in chunks) == serialize(obj)


def test_zero_copy_decode_views_input():
    a = np.arange(64, dtype=np.float64)
    buf = bytearray(serialize(a))
    out = deserialize(memoryview(buf), zero_copy=True)
    assert np.array_equal(out, a)
    # The array views the buffer: a change there shows through.
    off = len(buf) - a.nbytes
    buf[off : off + 8] = struct.pack("<d", 99.0)
    assert out[0] == 99.0
    raw = deserialize(serialize(b"payload"), zero_copy=True)
    assert isinstance(raw, memoryview) and bytes(raw) == b"payload"


def test_zero_copy_decode_nested_views():
    big = np.arange(50000, dtype=np.float64)
    obj = {"k": np.ones(3), "big": big, "meta": {"ids": list(range(100)), "s": "\u00e9" * 40,
           "b": b"raw", "f": 0.5, "neg": -70000, "n": None, "u64": 2**63 + 5},
           "list": [big[:5], {"__tensor__": True, "dtype": "int32", "shape": [2],
                              "data": np.array([7, 8], dtype="<i4").tobytes()}]}
    buf = bytearray(serialize(obj))
    out = deserialize(memoryview(buf), zero_copy=True, tensor_type="numpy")
    assert np.array_equal(out["big"], big) and np.array_equal(out["k"], np.ones(3))
    assert out["meta"] == {"ids": list(range(100)), "s": "\u00e9" * 40, "b": b"raw", "f": 0.5,
                           "neg": -70000, "n": None, "u64": 2**63 + 5}
    assert isinstance(out["meta"]["b"], bytes)
    assert np.array_equal(out["list"][0], big[:5]) and out["list"][1].tolist() == [7, 8]
    # The big array views buf (no copy).
    assert out["big"].ctypes.data >= np.frombuffer(buf, np.uint8).ctypes.data
    plain = deserialize(bytes(buf))
    assert plain["meta"] == out["meta"]


def test_zero_copy_decode_falls_back_past_budget():
    obj = {"ids": list(range(20000)), "a": np.arange(10)}
    out = deserialize(serialize(obj), zero_copy=True)
    assert out["ids"] == list(range(20000)) and np.array_equal(out["a"], np.arange(10))


@pytest.mark.parametrize("obj", [
    None, True, 0, -1, 127, 128, -33, 2**64 - 1, -(2**63), 1.25, "", "s" * 40, "s" * 300,
    "s" * 70000, b"", b"b" * 300, [], [1, [2, [3]]], {}, {"a": {"b": {}}}, list(range(20)),
    {i: i for i in range(20)}, {"x" * 40: [None] * 70000},
], ids=repr)
def test_zero_copy_decoder_matches_msgpack(obj):
    data = msgpack.packb(obj, use_bin_type=True)
    expect = msgpack.unpackb(data, raw=False, strict_map_key=False)
    got = deserialize(data, zero_copy=True)
    if isinstance(got, memoryview):
        got = got.tobytes()
    assert got == expect


def test_zero_copy_decoder_float32_and_ext():
    data = b"\x92\xca" + struct.pack(">f", 1.5) + b"\xd4\x05\x07"
    assert deserialize(data, zero_copy=True) == [1.5, msgpack.ExtType(5, b"\x07")]


@pytest.mark.parametrize("zero_copy", [False, True])
def test_malformed_input_raises(zero_copy):
    for bad in (b"\xc1", serialize({"a": 1})[:-1], serialize([1]) + b"\x00", b"\xdf\xff\xff\xff\xff",
                b"\xc5\x00", b""):
        with pytest.raises(Exception):
            deserialize(bad, zero_copy=zero_copy)


# A lone top-level array (the usual stage payload) has fast paths both ways:
# serialize_chunks writes its header without the placeholder pass, and a
# zero-copy deserialize reads it without the general decoder. Same bytes, same
# results, and anything off the exact layout falls back.
LONE_ARRAYS = [
    np.arange(1024, dtype="<f4"),
    np.zeros((3, 70000, 2), np.int8),
    np.ones(5000, ">f8"),
    np.zeros((1,) * 14 + (9000,), np.uint8),  # 15 dims: the largest fixarray shape
    np.zeros((70000, 256), np.uint8),  # dims of 2 and 3 bytes
    np.zeros((2,) * 16 + (64,), np.uint8),  # 17 dims: array16, general path
    np.array(7.5, dtype=np.float64).reshape(()),
    np.zeros((1 << 16) + 1, np.uint8),  # bin32 header
]


@pytest.mark.parametrize("a", LONE_ARRAYS, ids=lambda a: "%s%s" % (a.dtype.str, a.shape))
def test_lone_array_fast_paths_match_the_general_ones(a):
    expect = serialize(a)
    for _ in range(2):  # the second one takes the cached header
        chunks, total = serialize_chunks(a, view_min=0)
        assert b"".join(bytes(c) for c in chunks) == expect and total == len(expect)
    # Same shape, another dtype: another header.
    b = a.astype(np.int16)
    assert b"".join(bytes(c) for c in serialize_chunks(b, view_min=0)[0]) == serialize(b)
    got = deserialize(memoryview(expect), zero_copy=True)
    general = deserialize(expect)
    assert isinstance(got, np.ndarray) and got.dtype == a.dtype and got.shape == a.shape
    assert np.array_equal(got, a) and np.array_equal(general, a)
    if a.nbytes:
        assert not got.flags.owndata  # a view of the input


def test_lone_array_fast_path_falls_back_off_layout():
    a = np.arange(4096, dtype="<i4")
    strided = np.arange(8192, dtype="<i4")[::2]
    assert b"".join(bytes(c) for c in serialize_chunks(strided)[0]) == serialize(strided)
    # Keys in another order, an extra key, a negative dim: the general decoder decides.
    other = msgpack.packb({"dtype": "<i4", "__ndarray__": True, "shape": [4096],
                           "data": a.tobytes()})
    assert np.array_equal(deserialize(memoryview(other), zero_copy=True), a)
    extra = msgpack.packb({"__ndarray__": True, "dtype": "<i4", "shape": [4096],
                           "data": a.tobytes(), "x": 1})
    assert deserialize(memoryview(extra), zero_copy=True)["x"] == 1
    neg = msgpack.packb({"__ndarray__": True, "dtype": "<i4", "shape": [-1],
                         "data": a.tobytes()})
    assert np.array_equal(deserialize(memoryview(neg), zero_copy=True), a)
    # Truncated data or trailing bytes are errors, as on the general path.
    good = serialize(a)
    with pytest.raises(ValueError):
        deserialize(memoryview(good[:-1]), zero_copy=True)
    with pytest.raises(ValueError):
        deserialize(memoryview(good + b"\x00"), zero_copy=True)


def test_lone_tensor_map_fast_path_without_torch():
    import omni_connectors.serializer as ser

    if ser._get_torch() is not None:
        pytest.skip("torch is importable: tensors decode to torch.Tensor (a copy)")
    a = np.arange(3000, dtype=np.float32).reshape(30, 100)
    doc = msgpack.packb({"__tensor__": True, "dtype": "float32", "shape": [30, 100],
                         "data": a.tobytes()})
    got = deserialize(memoryview(doc), zero_copy=True)
    assert isinstance(got, np.ndarray) and np.array_equal(got, a) and not got.flags.owndata
    raw = deserialize(memoryview(msgpack.packb({"__tensor__": True, "dtype": "bfloat16",
                                                "shape": [2], "data": b"\x01\x02\x03\x04"})),
                      zero_copy=True)
    assert isinstance(raw, RawTensor) and raw.dtype == "bfloat16" and raw.data == b"\x01\x02\x03\x04"
