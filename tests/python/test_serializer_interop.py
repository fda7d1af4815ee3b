"""Interop tests: libomniconn's msgpack codec against vLLM-Omni's OmniSerializer.

OmniSerializer (vllm_omni/distributed/omni_connectors/utils/serialization.py)
encodes payloads with msgspec's msgpack encoder and an enc_hook that turns a
torch.Tensor into {"__tensor__": True, "dtype": <torch name>, "shape": [...],
"data": <bytes>}, a numpy.ndarray into {"__ndarray__": True, "dtype":
<dtype.str>, ...} and a PIL.Image into {"__pil_image__": True, "mode": ...,
"shape": ..., "data": ...}. Neither msgspec nor torch nor PIL is installed here,
so this file reproduces that encoding with python3-msgpack (which writes the
same bytes: smallest int and length headers, float64 floats, str8, bin) and
numpy, with small stand-ins for tensors and images.

The C side is the helper tests/interop/omni_interop, found under DS_BUILD_DIR
(tests/python/conftest.py defaults it to <repo>/build-py; without that
conftest, /work/main/build-conn); the tests skip, saying so, when it is not
built. Checks, both ways:
  * C-encoded bytes equal Python's bytes for the same payload, and decode in
    Python to equal values and arrays;
  * Python-encoded bytes decode in C with the right types, dtypes, shapes,
    element values and zero-copy data offsets, and re-encode byte-exactly;
  * payloads C must refuse are refused with a reason;
  * the repo's own Python serializer (python/omni_connectors) writes the same
    bytes as C.
"""

import json
import os
import struct
import subprocess

import msgpack
import numpy as np
import pytest

BUILD_DIR = os.environ.get("DS_BUILD_DIR", "/work/main/build-conn")
TOOL = os.path.join(BUILD_DIR, "tests", "interop", "omni_interop")

pytestmark = pytest.mark.skipif(
    not os.access(TOOL, os.X_OK),
    reason=f"interop helper not built: {TOOL} is missing (build the omni_interop "
    f"target, or point DS_BUILD_DIR at a build that has it)",
)

# torch dtype name -> numpy dtype holding its bytes (raw bits where numpy has
# no such type).
TORCH_STORAGE = {
    "bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2",
    "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
    "float16": "<f2", "bfloat16": "<u2", "float32": "<f4", "float64": "<f8",
    "complex64": "<c8", "complex128": "<c16",
    "float8_e4m3fn": "|u1", "float8_e5m2": "|u1",
}
# numpy dtype.str -> the torch name the C library reports for it.
NUMPY_TO_TORCH = {
    "|b1": "bool", "|i1": "int8", "|u1": "uint8", "<i2": "int16", "<u2": "uint16",
    "<i4": "int32", "<u4": "uint32", "<i8": "int64", "<u8": "uint64",
    "<f2": "float16", "<f4": "float32", "<f8": "float64", "<c8": "complex64",
    "<c16": "complex128",
}


class Tensor:
    """Stands in for torch.Tensor: a torch dtype name and its storage array."""

    def __init__(self, dtype, array):
        self.dtype = dtype
        self.array = np.asarray(array, dtype=TORCH_STORAGE[dtype])

    def __repr__(self):
        return f"Tensor({self.dtype}, {self.array.shape})"


class Image:
    """Stands in for PIL.Image: a mode and its uint8 pixels."""

    def __init__(self, mode, array):
        self.mode = mode
        self.array = np.asarray(array, dtype=np.uint8)


def _contiguous(arr):
    # Like OmniSerializer: only a non-contiguous array is copied (and
    # np.ascontiguousarray would turn a 0-d array into a 1-d one).
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def _enc_hook(obj):
    """OmniMsgpackEncoder._enc_hook for tensors, ndarrays and images."""
    if isinstance(obj, Tensor):
        # shape is the tensor's own (a 0-d tensor's is []), data its bytes.
        return {"__tensor__": True, "dtype": obj.dtype, "shape": list(obj.array.shape),
                "data": _contiguous(obj.array).tobytes()}
    if isinstance(obj, np.ndarray) and obj.dtype.kind not in ("O", "V"):
        arr = _contiguous(obj)
        return {"__ndarray__": True, "dtype": arr.dtype.str, "shape": list(arr.shape),
                "data": arr.tobytes()}
    if isinstance(obj, Image):
        arr = _contiguous(obj.array)
        return {"__pil_image__": True, "mode": obj.mode, "shape": list(arr.shape),
                "data": arr.tobytes()}
    raise TypeError(f"cannot serialize {type(obj).__name__}")


def serialize(obj):
    return msgpack.packb(obj, default=_enc_hook, use_bin_type=True)


def _post(obj):
    """OmniMsgpackDecoder._post_process for tensors, ndarrays and images."""
    if isinstance(obj, dict):
        if obj.get("__tensor__"):
            storage = np.frombuffer(obj["data"], dtype=TORCH_STORAGE[obj["dtype"]])
            return Tensor(obj["dtype"], storage.reshape(obj["shape"]))
        if obj.get("__ndarray__"):
            return np.frombuffer(obj["data"], dtype=obj["dtype"]).reshape(obj["shape"])
        if obj.get("__pil_image__"):
            pixels = np.frombuffer(obj["data"], dtype=np.uint8).reshape(obj["shape"])
            return Image(obj["mode"], pixels)
        return {k: _post(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_post(x) for x in obj]
    return obj


def deserialize(data):
    return _post(msgpack.unpackb(data, raw=False, strict_map_key=False))


# ---- the payloads omni_interop builds, written in Python ----

def filled(dtype, shape, torch=True):
    """Arrays filled like omni_interop's filled(): from i and p(i)."""
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    i = np.arange(n, dtype=np.int64)
    p = ((i % 23) - 11) * 0.5
    name = dtype if torch else NUMPY_TO_TORCH[dtype]
    values = {
        "bool": lambda: i % 3 == 0,
        "int8": lambda: (p * 2).astype(np.int8),
        "uint8": lambda: (i * 7 % 256).astype(np.uint8),
        "int16": lambda: (p * 1000).astype(np.int16),
        "uint16": lambda: (i * 1000 % 65536).astype(np.uint16),
        "int32": lambda: (p * 100000).astype(np.int32),
        "uint32": lambda: (i * 100000).astype(np.uint32),
        "int64": lambda: (p * 1e12).astype(np.int64),
        "uint64": lambda: i.astype(np.uint64) << np.uint64(40),
        "float16": lambda: (0x3C00 + i).astype(np.uint16).view(np.float16),
        "bfloat16": lambda: (0x3C00 + i).astype(np.uint16),
        "float32": lambda: p.astype(np.float32),
        "float64": lambda: p / 3,
        "complex64": lambda: (p + 1j * i).astype(np.complex64),
        "complex128": lambda: p + 2j * i,
        "float8_e4m3fn": lambda: (0x30 + i).astype(np.uint8),
        "float8_e5m2": lambda: (0x30 + i).astype(np.uint8),
    }[name]()
    raw = np.ascontiguousarray(values).astype(TORCH_STORAGE[name]).reshape(shape)
    if torch:
        return Tensor(dtype, raw)
    return raw.view(dtype)


def case_scalars():
    z = "z" * 70000
    return {
        "nil": None, "t": True, "f": False,
        "ints": [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, -1, -32,
                 -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63],
        "u64": 2**64 - 1, "pi": 3.141592653589793, "negzero": -0.0, "s": "hello",
        "s40": z[:40], "s300": z[:300], "s70k": z, "b": b"\x00\x01\x02",
        "uni": "h\u00e9llo \u4e16\u754c \U0001f600",
        "nested": [[], {}, [1, [2, [3]]]],
        "intkey": {1: "one", -2: "minus two"},
    }


def case_tensors():
    spec = [("hidden", "float32", [2, 3]), ("ids", "int64", [5]), ("bf16", "bfloat16", [4]),
            ("half", "float16", [3]), ("scalar", "float64", []), ("empty", "float32", [0, 4]),
            ("mask", "bool", [3]), ("u8", "uint8", [2, 2]), ("c64", "complex64", [2]),
            ("c128", "complex128", [2]), ("i8", "int8", [3]), ("i16", "int16", [3]),
            ("i32", "int32", [2, 1, 2]), ("u16", "uint16", [2]), ("u32", "uint32", [2]),
            ("u64", "uint64", [2]), ("f8", "float8_e4m3fn", [2]), ("f8b", "float8_e5m2", [2])]
    return {key: filled(dt, shape) for key, dt, shape in spec}


def case_ndarrays():
    return {s[1:]: filled(s, [2, 3], torch=False) for s in NUMPY_TO_TORCH}


def case_images():
    px = (np.arange(18) * 13 % 256).astype(np.uint8)
    return {"img": Image("RGB", px.reshape(2, 3, 3)), "gray": Image("L", px[:6].reshape(3, 2))}


def case_big():
    return {"x": filled("float32", [1024, 1024])}


def case_mixed_list():
    return [filled("int32", [3]), filled("<f8", [1, 2], torch=False),
            Image("RGB", np.arange(1, 7, dtype=np.uint8).reshape(1, 2, 3)), 1, "a"]


CASES = {
    "scalars": case_scalars, "tensors": case_tensors, "ndarrays": case_ndarrays,
    "images": case_images, "big": case_big, "mixed_list": case_mixed_list,
}


# ---- comparing ----

def assert_same(got, want, path="$"):
    """Deep equality; arrays must match dtype, shape and bytes."""
    if isinstance(want, Tensor):
        assert isinstance(got, Tensor), path
        assert got.dtype == want.dtype, path
        assert got.array.shape == want.array.shape, path
        assert got.array.tobytes() == want.array.tobytes(), path
    elif isinstance(want, Image):
        assert isinstance(got, Image) and got.mode == want.mode, path
        assert got.array.shape == want.array.shape, path
        assert got.array.tobytes() == want.array.tobytes(), path
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), path
        assert got.dtype.str == want.dtype.str and got.shape == want.shape, path
        assert got.tobytes() == want.tobytes(), path
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), path
        for k in want:
            assert_same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert isinstance(got, float), path
        assert struct.pack("<d", got) == struct.pack("<d", want), path
    else:
        assert type(got) is type(want) and got == want, (path, got, want)


def element(chunk, torch_name):
    """One element's bytes as omni_interop prints it."""
    if torch_name in ("float32", "float64"):
        return struct.unpack("<f" if torch_name == "float32" else "<d", chunk)[0]
    if torch_name in ("complex64", "complex128"):
        fmt = "<ff" if torch_name == "complex64" else "<dd"
        return list(struct.unpack(fmt, chunk))
    signed = torch_name.startswith("int")
    return int.from_bytes(chunk, "little", signed=signed)


def printed(value, torch_name):
    """Converts omni_interop's printed element back to a Python value."""
    if torch_name in ("float32", "float64"):
        return float.fromhex(value)
    if torch_name in ("complex64", "complex128"):
        return [float.fromhex(v) for v in value]
    return value


def check_array(desc, kind, torch_name, arr, raw, mode=None):
    assert desc["t"] == kind
    assert desc["dtype"] == torch_name
    assert desc["shape"] == list(arr.shape)
    assert desc["numel"] == arr.size
    assert desc["nbytes"] == arr.nbytes
    assert desc.get("mode") == mode
    data = np.ascontiguousarray(arr).tobytes()
    # The C view points at the data inside the received buffer: no copy.
    assert raw[desc["offset"]:desc["offset"] + desc["nbytes"]] == data
    if arr.size:
        isz = arr.itemsize
        assert printed(desc["first"], torch_name) == element(data[:isz], torch_name)
        assert printed(desc["last"], torch_name) == element(data[-isz:], torch_name)


def check_desc(desc, obj, raw):
    """Checks omni_interop's JSON description of a decoded value against obj."""
    if obj is None:
        assert desc["t"] == "nil"
    elif isinstance(obj, bool):
        assert desc == {"t": "bool", "v": obj}
    elif isinstance(obj, int):
        assert desc == {"t": "int", "v": obj}
    elif isinstance(obj, float):
        assert desc["t"] == "float"
        assert struct.pack("<d", float.fromhex(desc["hex"])) == struct.pack("<d", obj)
    elif isinstance(obj, str):
        assert desc == {"t": "str", "v": obj}
    elif isinstance(obj, bytes):
        assert desc == {"t": "bin", "hex": obj.hex()}
    elif isinstance(obj, (list, tuple)):
        assert desc["t"] == "array" and len(desc["v"]) == len(obj)
        for d, o in zip(desc["v"], obj):
            check_desc(d, o, raw)
    elif isinstance(obj, dict):
        assert desc["t"] == "map" and len(desc["v"]) == len(obj)
        for (dk, dv), (k, v) in zip(desc["v"], obj.items()):
            check_desc(dk, k, raw)
            check_desc(dv, v, raw)
    elif isinstance(obj, Tensor):
        check_array(desc, "tensor", obj.dtype, obj.array, raw)
    elif isinstance(obj, Image):
        check_array(desc, "image", "uint8", obj.array, raw, mode=obj.mode)
    elif isinstance(obj, np.ndarray):
        check_array(desc, "ndarray", NUMPY_TO_TORCH[obj.dtype.str], obj, raw)
    else:
        raise AssertionError(f"unexpected {type(obj)}")


def run_tool(*args):
    return subprocess.run([TOOL, *args], capture_output=True, check=False, timeout=60)


def c_decode(tmp_path, data):
    path = tmp_path / "in.msgpack"
    path.write_bytes(data)
    res = run_tool("decode", str(path))
    assert res.returncode == 0, res.stderr.decode()
    return json.loads(res.stdout)


def c_reencode(tmp_path, data):
    src, dst = tmp_path / "in.msgpack", tmp_path / "out.msgpack"
    src.write_bytes(data)
    res = run_tool("reencode", str(src), str(dst))
    assert res.returncode == 0, res.stderr.decode()
    return dst.read_bytes()


# ---- tests ----

def test_helper_knows_every_case():
    res = run_tool("cases")
    assert res.returncode == 0
    assert res.stdout.decode().split() == list(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_c_bytes_equal_python_bytes(tmp_path, name):
    out = tmp_path / f"{name}.msgpack"
    res = run_tool("encode", name, str(out))
    assert res.returncode == 0, res.stderr.decode()
    c_bytes = out.read_bytes()
    assert c_bytes == serialize(CASES[name]())
    assert_same(deserialize(c_bytes), CASES[name]())


@pytest.mark.parametrize("name", list(CASES))
def test_python_bytes_decode_in_c(tmp_path, name):
    payload = CASES[name]()
    data = serialize(payload)
    check_desc(c_decode(tmp_path, data), payload, data)
    assert c_reencode(tmp_path, data) == data


def random_value(rng, depth=0):
    kinds = ["nil", "bool", "int", "float", "str", "bytes", "tensor", "ndarray", "image"]
    if depth < 3:
        kinds += ["list", "dict", "dict"]
    kind = kinds[rng.integers(len(kinds))]
    if kind == "nil":
        return None
    if kind == "bool":
        return bool(rng.integers(2))
    if kind == "int":
        edges = [0, 127, 128, -32, -33, 2**16, -2**31 - 1, 2**63 - 1, -2**63, 2**64 - 1]
        return int(rng.choice(edges)) if rng.integers(2) else int(rng.integers(-10**6, 10**6))
    if kind == "float":
        return float(rng.normal() * 10.0 ** int(rng.integers(-5, 6)))
    if kind == "str":
        alphabet = list("abcXYZ 09_-") + ["\u00e9", "\u4e16", "\U0001f600"]
        n = int(rng.choice([0, 3, 31, 32, 300]))
        return "".join(alphabet[j] for j in rng.integers(len(alphabet), size=n))
    if kind == "bytes":
        return rng.integers(256, size=int(rng.choice([0, 5, 300])), dtype=np.uint8).tobytes()
    if kind in ("tensor", "ndarray", "image"):
        shape = [int(d) for d in rng.integers(0, 5, size=int(rng.integers(0, 4)))]
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if kind == "image":
            mode, c = [("RGB", 3), ("L", 0), ("RGBA", 4)][rng.integers(3)]
            shape = shape[:2] + ([c] if c else [])
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            return Image(mode, rng.integers(256, size=n, dtype=np.uint8).reshape(shape))
        names = list(TORCH_STORAGE) if kind == "tensor" else list(NUMPY_TO_TORCH)
        name = names[rng.integers(len(names))]
        storage = np.dtype(TORCH_STORAGE[name] if kind == "tensor" else name)
        top = 2 if storage.kind == "b" else 256  # bools hold 0 or 1
        raw = rng.integers(top, size=n * storage.itemsize, dtype=np.uint8).tobytes()
        arr = np.frombuffer(raw, dtype=storage).reshape(shape)
        return Tensor(name, arr) if kind == "tensor" else arr
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.integers(0, 5))]
    return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.integers(0, 5))}


def test_random_payloads_round_trip(tmp_path):
    rng = np.random.default_rng(20240611)
    for _ in range(60):
        payload = random_value(rng)
        data = serialize(payload)
        check_desc(c_decode(tmp_path, data), payload, data)
        again = c_reencode(tmp_path, data)
        assert again == data
        assert_same(deserialize(again), payload)


def test_large_tensor_from_python(tmp_path):
    arr = np.arange(4 * 1024 * 1024, dtype=np.float32).reshape(2048, 2048)
    payload = {"hidden_states": Tensor("float32", arr), "request_id": "req-1"}
    data = serialize(payload)
    desc = c_decode(tmp_path, data)
    check_desc(desc, payload, data)
    assert desc["v"][0][1]["nbytes"] == 16 * 1024 * 1024


@pytest.mark.parametrize("payload,reason", [
    ({"__ndarray__": True, "dtype": ">f4", "shape": [1], "data": b"\0\0\0\0"},
     "dtype '>f4' is not supported"),
    ({"__tensor__": True, "dtype": "float128", "shape": [1], "data": b"\0" * 16},
     "dtype 'float128' is not supported"),
    ({"__tensor__": True, "dtype": "float32", "shape": [3], "data": b"\0" * 8},
     "data is 8 bytes, but 3 float32 elements need 12"),
    ({"__pil_image__": True, "mode": "RGB", "shape": [1, 1, 3]}, "needs \"data\" bytes"),
])
def test_c_refuses_malformed_payloads(tmp_path, payload, reason):
    path = tmp_path / "bad.msgpack"
    path.write_bytes(msgpack.packb({"x": payload}, use_bin_type=True))
    res = run_tool("decode", str(path))
    assert res.returncode == 3
    assert reason in res.stderr.decode()
    assert "$.x" in res.stderr.decode()


def test_c_refuses_truncated_bytes(tmp_path):
    data = serialize(case_tensors())
    path = tmp_path / "cut.msgpack"
    for cut in (0, 1, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        res = run_tool("decode", str(path))
        assert res.returncode == 3, cut
        assert "msgpack" in res.stderr.decode()


def test_matches_project_python_serializer(tmp_path):
    """The repo's own Python OmniSerializer (python/omni_connectors) agrees byte for byte."""
    ser = pytest.importorskip("omni_connectors.serializer")
    for name in ("scalars", "ndarrays"):  # the cases that need neither torch nor PIL
        out = tmp_path / f"{name}.msgpack"
        assert run_tool("encode", name, str(out)).returncode == 0
        assert bytes(ser.serialize(CASES[name]())) == out.read_bytes()
