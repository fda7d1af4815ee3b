"""OmniSerializer: vLLM-Omni's msgpack wire format, without vLLM or torch.

The bytes are those vLLM-Omni's ``OmniSerializer`` (msgspec-based) writes, so a
payload produced here, by vLLM-Omni, or by the C serializer (libomniconn) reads
back the same everywhere:

* ``torch.Tensor`` -> map ``{"__tensor__": True, "dtype": "float32",
  "shape": [..], "data": bin}`` (torch dtype name without ``torch.``; a 0-d
  tensor keeps shape ``[]``);
* ``numpy.ndarray`` -> map ``{"__ndarray__": True, "dtype": "<f4",
  "shape": [..], "data": bin}`` (numpy ``dtype.str``);
* ``PIL.Image`` -> map ``{"__pil_image__": True, "mode": "RGB",
  "shape": [..], "data": bin}``;
* dataclasses as maps, slices as ``[start, stop, step]``, tuples/sets as
  arrays, everything else as plain msgpack (floats as float64, str as UTF-8
  str, bytes as bin), map keys in the order they were written.

Decoding rebuilds ndarrays (zero-copy over the input where it can), tensors as
``torch.Tensor`` when torch is importable and as ndarrays otherwise (a dtype
numpy lacks, such as bfloat16, comes back as a ``RawTensor``), and images as
``PIL.Image`` when PIL is importable (else a uint8 ndarray).
"""

import dataclasses
import enum
import struct
import uuid
from collections import namedtuple
from typing import Any, List, Optional, Tuple

import msgpack

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is a Debian package we require in practice
    np = None

_torch = None
_torch_checked = False


def _get_torch():
    """torch, if importable; looked up once and lazily (importing it is slow)."""
    global _torch, _torch_checked
    if not _torch_checked:
        _torch_checked = True
        try:
            import torch  # noqa: F401

            _torch = torch
        except Exception:
            _torch = None
    return _torch


def _torch_loaded():
    """torch only if the program already imported it: a tensor cannot exist otherwise."""
    import sys

    return sys.modules.get("torch")


def _pil_image_module():
    import sys

    mod = sys.modules.get("PIL.Image")
    if mod is not None:
        return mod
    try:
        from PIL import Image

        return Image
    except Exception:
        return None


TENSOR_MARKER = "__tensor__"
NDARRAY_MARKER = "__ndarray__"
PIL_IMAGE_MARKER = "__pil_image__"

RawTensor = namedtuple("RawTensor", ["dtype", "shape", "data"])
RawTensor.__doc__ = """A tensor whose dtype numpy cannot hold (bfloat16, float8...) decoded
without torch: the torch dtype name, the shape and the raw little-endian bytes."""

# torch dtype name -> numpy dtype str, for rebuilding tensors without torch.
_TORCH_TO_NUMPY = {
    "float64": "<f8",
    "float32": "<f4",
    "float16": "<f2",
    "int64": "<i8",
    "int32": "<i4",
    "int16": "<i2",
    "int8": "|i1",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "bool": "|b1",
    "complex64": "<c8",
    "complex128": "<c16",
}
_NUMPY_TO_TORCH = {v: k for k, v in _TORCH_TO_NUMPY.items()}


# ---------------------------------------------------------------------------
# Encoding


def _bytes_view(arr):
    """A flat 'B' memoryview of a C-contiguous copy-free view of arr's bytes."""
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return memoryview(arr.reshape(-1).view(np.uint8))


def encode_ndarray(arr: Any) -> dict:
    return {
        NDARRAY_MARKER: True,
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
        "data": _bytes_view(arr),
    }


def _tensor_dtype_name(t):
    return str(t.dtype).replace("torch.", "", 1)


def _tensor_bytes(t):
    """The tensor's bytes as a flat uint8 view (CPU, contiguous)."""
    torch = _get_torch()
    t = t.detach().cpu()
    if t.dim() == 0:
        t = t.reshape(1)
    if not t.is_contiguous():
        t = t.contiguous()
    return memoryview(t.view(torch.uint8).numpy())


def encode_tensor(t: Any) -> dict:
    return {
        TENSOR_MARKER: True,
        "dtype": _tensor_dtype_name(t),
        "shape": list(t.shape),
        "data": _tensor_bytes(t),
    }


def encode_pil_image(img: Any) -> dict:
    arr = np.asarray(img, dtype=np.uint8)
    return {
        PIL_IMAGE_MARKER: True,
        "mode": img.mode,
        "shape": list(arr.shape),
        "data": _bytes_view(arr),
    }


def _is_tensor(obj):
    torch = _torch_loaded()
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_pil_image(obj):
    import sys

    mod = sys.modules.get("PIL.Image")
    return mod is not None and isinstance(obj, mod.Image)


def _default(obj):
    """msgpack ``default`` hook: what msgpack cannot write natively."""
    if _is_tensor(obj):
        return encode_tensor(obj)
    if np is not None:
        if isinstance(obj, np.ndarray) and obj.dtype.kind not in ("O", "V"):
            return encode_ndarray(obj)
        if isinstance(obj, np.generic):
            return obj.item()
    if _is_pil_image(obj):
        return encode_pil_image(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, slice):
        return (obj.start, obj.stop, obj.step)
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, uuid.UUID):
        return str(obj)
    raise TypeError(
        "Object of type %s is not serializable. Supported types: torch.Tensor, "
        "np.ndarray, PIL.Image, dataclass, and standard Python types (dict, list, "
        "tuple, str, int, float, bool, None, bytes)." % type(obj).__name__
    )


def _packer():
    return msgpack.Packer(default=_default, use_bin_type=True, strict_types=False, autoreset=True)


def serialize(obj: Any) -> bytes:
    """obj -> bytes in OmniSerializer's format."""
    return _packer().pack(obj)


# ---------------------------------------------------------------------------
# Encoding without copying large arrays.
#
# serialize_chunks returns the same bytes as serialize(obj), but as a list of
# pieces in which every large array's data is a view of the array itself, so a
# producer can copy each piece exactly once, straight into a buffer created in
# shared memory. It packs the object with the C packer after swapping each
# large array's data for a unique 16-byte placeholder bin, then splits the
# packed bytes at the placeholders.

VIEW_MIN = 4096  # arrays smaller than this are packed inline (a copy is cheaper)


def _bin_header(n):
    if n < 1 << 8:
        return b"\xc4" + n.to_bytes(1, "big")
    if n < 1 << 16:
        return b"\xc5" + n.to_bytes(2, "big")
    if n < 1 << 32:
        return b"\xc6" + n.to_bytes(4, "big")
    raise ValueError("a value of %d bytes is too large for msgpack" % n)


def _flat_bytes(obj):
    """A flat 'B' memoryview of a bytes-like object (packed if strided)."""
    mv = memoryview(obj)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _lone_ndarray_chunks(arr):
    """[head, data view] for a top-level C-contiguous ndarray: the map
    encode_ndarray gives, its three small entries packed by msgpack and the
    "data" key and bin header appended, which is byte for byte what the
    general path (the packer over the whole map) writes."""
    data = memoryview(arr.reshape(-1).view(np.uint8))
    k = (arr.dtype.str, arr.shape)
    head = _LONE_HEAD_CACHE.get(k)
    if head is None:
        head = msgpack.packb({NDARRAY_MARKER: True, "dtype": k[0], "shape": list(k[1])})
        # fixmap of 3 -> fixmap of 4, then the fourth entry's key and bin header.
        head = b"\x84" + head[1:] + b"\xa4data" + _bin_header(data.nbytes)
        if len(_LONE_HEAD_CACHE) >= 256:
            _LONE_HEAD_CACHE.clear()
        _LONE_HEAD_CACHE[k] = head
    return [head, data], len(head) + data.nbytes


# (dtype.str, shape) -> the header _lone_ndarray_chunks writes: a stage sends
# the same few shapes again and again.
_LONE_HEAD_CACHE = {}


def serialize_chunks(obj: Any, view_min: int = VIEW_MIN) -> Tuple[List[Any], int]:
    """(chunks, total): pieces whose concatenation is serialize(obj); the data of
    each array of at least view_min bytes is a view, not a copy."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        mv = _flat_bytes(obj)
        head = _bin_header(mv.nbytes)
        return [head, mv], len(head) + mv.nbytes
    if (np is not None and type(obj) is np.ndarray and obj.dtype.kind not in ("O", "V")
            and obj.flags.c_contiguous and obj.nbytes >= view_min and obj.nbytes < 1 << 32):
        # The common stage payload, a lone tensor: no placeholder pass.
        return _lone_ndarray_chunks(obj)
    import os

    nonce = os.urandom(12)
    views = []

    def default(o):
        enc = _default(o)
        if isinstance(enc, dict) and isinstance(enc.get("data"), memoryview):
            data = enc["data"]
            if data.nbytes >= view_min:
                enc["data"] = nonce + len(views).to_bytes(4, "little")
                views.append(data)
        return enc

    packed = msgpack.Packer(default=default, use_bin_type=True, strict_types=False).pack(obj)
    if not views:
        return [packed], len(packed)
    chunks = []
    total = 0
    pos = 0
    for i, data in enumerate(views):
        marker = b"\xc4\x10" + nonce + i.to_bytes(4, "little")
        at = packed.find(marker, pos)
        if at < 0:  # pragma: no cover - the packer writes every placeholder
            raise RuntimeError("placeholder %d lost while packing" % i)
        head = packed[pos:at] + _bin_header(data.nbytes)
        chunks.append(head)
        chunks.append(data)
        total += len(head) + data.nbytes
        pos = at + len(marker)
    tail = packed[pos:]
    if tail:
        chunks.append(tail)
        total += len(tail)
    return chunks, total


def raw_frame(obj: Any) -> Optional[Tuple[bytes, memoryview]]:
    """(header, payload view) with header + payload == serialize(obj), for a
    top-level bytes-like object, ndarray or tensor; None for anything else."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        mv = _flat_bytes(obj)
        return _bin_header(mv.nbytes), mv
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype.kind in ("O", "V"):
            return None
    elif not _is_tensor(obj):
        return None
    chunks, _ = serialize_chunks(obj, view_min=0)
    if len(chunks) != 2:  # pragma: no cover - a lone array is header + data
        return None
    return bytes(chunks[0]), chunks[1]


def join_chunks(chunks: List[Any]) -> bytes:
    return b"".join(chunks)


# ---------------------------------------------------------------------------
# Decoding without copying array data.


class _OverBudget(Exception):
    pass


class _ViewDecoder:
    """A msgpack decoder in Python whose arrays view the input buffer.

    Marker maps become ndarrays (or tensors) over the input bytes, no copy;
    other bins are copied to bytes. It gives up (_OverBudget) past ``budget``
    items, so payloads made of many small values go to the C unpacker instead.
    """

    __slots__ = ("buf", "pos", "left", "tensor_type")

    def __init__(self, buf, budget, tensor_type):
        self.buf = buf
        self.pos = 0
        self.left = budget
        self.tensor_type = tensor_type

    def _take(self, n):
        p = self.pos
        end = p + n
        if end > len(self.buf):
            raise ValueError("truncated msgpack data at offset %d" % p)
        self.pos = end
        return self.buf[p:end]

    def _uint(self, n):
        return int.from_bytes(self._take(n), "big")

    def _int(self, n):
        return int.from_bytes(self._take(n), "big", signed=True)

    def decode(self):
        obj = self._obj()
        if isinstance(obj, memoryview):
            obj = obj.tobytes()
        if self.pos != len(self.buf):
            raise ValueError("%d trailing bytes after the msgpack document" % (len(self.buf) - self.pos))
        return obj

    def _obj(self):
        self.left -= 1
        if self.left < 0:
            raise _OverBudget()
        b = self._take(1)[0]
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0xA0 <= b <= 0xBF:
            return self._str(b & 0x1F)
        if 0x90 <= b <= 0x9F:
            return self._array(b & 0x0F)
        if 0x80 <= b <= 0x8F:
            return self._map(b & 0x0F)
        if b == 0xC0:
            return None
        if b == 0xC2:
            return False
        if b == 0xC3:
            return True
        if 0xC4 <= b <= 0xC6:
            return self._take(self._uint(1 << (b - 0xC4)))  # a view; see _finish
        if 0xC7 <= b <= 0xC9:
            n = self._uint(1 << (b - 0xC7))
            return self._ext(n)
        if b == 0xCA:
            return struct.unpack(">f", self._take(4))[0]
        if b == 0xCB:
            return struct.unpack(">d", self._take(8))[0]
        if 0xCC <= b <= 0xCF:
            return self._uint(1 << (b - 0xCC))
        if 0xD0 <= b <= 0xD3:
            return self._int(1 << (b - 0xD0))
        if 0xD4 <= b <= 0xD8:
            return self._ext(1 << (b - 0xD4))
        if 0xD9 <= b <= 0xDB:
            return self._str(self._uint(1 << (b - 0xD9)))
        if b in (0xDC, 0xDD):
            return self._array(self._uint(2 if b == 0xDC else 4))
        if b in (0xDE, 0xDF):
            return self._map(self._uint(2 if b == 0xDE else 4))
        raise ValueError("reserved msgpack byte 0x%02x at offset %d" % (b, self.pos - 1))

    def _str(self, n):
        return str(self._take(n), "utf-8")

    def _ext(self, n):
        code = self._int(1)
        data = self._take(n).tobytes()
        if code == -1:
            return msgpack.Timestamp.from_bytes(data)
        return msgpack.ExtType(code, data)

    def _array(self, n):
        if n > len(self.buf) - self.pos:
            raise ValueError("array of %d items is longer than the input" % n)
        out = [self._obj() for _ in range(n)]
        for i, v in enumerate(out):
            if type(v) is memoryview:
                out[i] = v.tobytes()
        return out

    def _map(self, n):
        if 2 * n > len(self.buf) - self.pos:
            raise ValueError("map of %d entries is longer than the input" % n)
        out = {}
        for _ in range(n):
            k = self._obj()
            if type(k) is memoryview:
                k = k.tobytes()
            out[k] = self._obj()
        data = out.get("data")
        if type(data) is memoryview and n == 4:
            if out.get(NDARRAY_MARKER) is True:
                return decode_ndarray(out)
            if out.get(TENSOR_MARKER) is True:
                return decode_tensor(out, self.tensor_type)
            if out.get(PIL_IMAGE_MARKER) is True:
                return decode_pil_image(out)
        for k, v in out.items():
            if type(v) is memoryview:
                out[k] = v.tobytes()
        return out


# ---------------------------------------------------------------------------
# Decoding


def _numpy_from(data, dtype, shape, copy):
    arr = np.frombuffer(data, dtype=np.dtype(dtype))
    if copy:
        arr = arr.copy()
    return arr.reshape(shape)


def decode_ndarray(obj: dict, copy: bool = False) -> Any:
    return _numpy_from(obj["data"], obj["dtype"], obj["shape"], copy)


def decode_tensor(obj: dict, tensor_type: str = "auto", copy: bool = False) -> Any:
    """A tensor map -> torch.Tensor (torch importable and tensor_type != "numpy"),
    else an ndarray, or a RawTensor for a dtype numpy lacks."""
    dtype_name, shape, data = obj["dtype"], obj["shape"], obj["data"]
    torch = _get_torch() if tensor_type in ("auto", "torch") else None
    if tensor_type == "torch" and torch is None:
        raise ImportError("tensor_type='torch' but torch is not importable")
    if torch is not None:
        torch_dtype = getattr(torch, dtype_name)
        if len(data) == 0:
            return torch.empty(shape, dtype=torch_dtype)
        # A writable copy: torch.frombuffer on read-only memory is undefined to write.
        buf = bytearray(data)
        return torch.frombuffer(buf, dtype=torch.uint8).view(torch_dtype).reshape(shape)
    np_dtype = _TORCH_TO_NUMPY.get(dtype_name)
    if np_dtype is None:
        return RawTensor(dtype_name, list(shape), bytes(data))
    return _numpy_from(data, np_dtype, shape, copy)


def decode_pil_image(obj: dict, copy: bool = False) -> Any:
    arr = _numpy_from(obj["data"], np.uint8, obj["shape"], copy)
    Image = _pil_image_module()
    if Image is None:
        return arr
    try:
        return Image.fromarray(arr, mode=obj["mode"])
    except Exception:
        return Image.fromarray(arr)


def _object_hook(tensor_type):
    def hook(obj):
        if obj.get(TENSOR_MARKER) is True and "data" in obj:
            return decode_tensor(obj, tensor_type)
        if obj.get(NDARRAY_MARKER) is True and "data" in obj:
            return decode_ndarray(obj)
        if obj.get(PIL_IMAGE_MARKER) is True and "data" in obj:
            return decode_pil_image(obj)
        return obj

    return hook


VIEW_DECODE_BUDGET = 4096


# The fixed start of a lone ndarray's / tensor's map as every encoder here
# writes it: {marker: True, "dtype": ...} then "shape", then "data".
_LONE_HEADS = (
    (b"\x84\xab" + NDARRAY_MARKER.encode() + b"\xc3\xa5dtype", NDARRAY_MARKER),
    (b"\x84\xaa" + TENSOR_MARKER.encode() + b"\xc3\xa5dtype", TENSOR_MARKER),
)


def _lone_array(mv, tensor_type):
    """The array of a document that is exactly one ndarray or tensor map in
    the order the encoders write it (dtype a fixstr, shape a fixarray of
    unsigned ints, data last), as a view of mv; None for anything else,
    which the general decoder then reads."""
    head = bytes(mv[:128])
    if head.startswith(_LONE_HEADS[0][0]):
        prefix, marker = _LONE_HEADS[0]
    elif head.startswith(_LONE_HEADS[1][0]):
        prefix, marker = _LONE_HEADS[1]
    else:
        return None
    try:
        p = len(prefix)
        b = head[p]
        if not 0xA0 <= b <= 0xBF:
            return None
        n = b & 0x1F
        dtype = head[p + 1 : p + 1 + n].decode("utf-8")
        p += 1 + n
        if head[p : p + 6] != b"\xa5shape" or not 0x90 <= head[p + 6] <= 0x9F:
            return None
        count = head[p + 6] & 0x0F
        p += 7
        shape = []
        for _ in range(count):
            b = head[p]
            if b <= 0x7F:
                shape.append(b)
                p += 1
            elif 0xCC <= b <= 0xCF:
                w = 1 << (b - 0xCC)
                shape.append(int.from_bytes(head[p + 1 : p + 1 + w], "big"))
                p += 1 + w
            else:
                return None
        if head[p : p + 5] != b"\xa4data" or not 0xC4 <= head[p + 5] <= 0xC6:
            return None
        w = 1 << (head[p + 5] - 0xC4)
        p += 6
        if p + w > len(head):
            return None
        size = int.from_bytes(head[p : p + w], "big")
        p += w
    except (IndexError, UnicodeDecodeError):
        return None
    if p + size != len(mv):
        return None
    if marker == NDARRAY_MARKER:
        # decode_ndarray's view, without its dict and helper calls.
        return np.frombuffer(mv[p:], dtype=dtype).reshape(shape)
    return decode_tensor({"dtype": dtype, "shape": shape, "data": mv[p:]}, tensor_type)


def deserialize(data: Any, tensor_type: str = "auto", zero_copy: bool = False) -> Any:
    """bytes (or any bytes-like, e.g. a pinned view) -> the object.

    tensor_type: "auto" (torch when importable, else numpy), "numpy" or "torch".
    zero_copy: arrays (ndarray / tensor / image data) come back as views of
    ``data`` instead of copies: read-only when ``data`` is, and keeping it
    alive. Applies to documents of up to VIEW_DECODE_BUDGET items (a handful of
    arrays and their metadata, the usual stage payload); larger ones are decoded
    by the C unpacker, with copies. A top-level bin comes back as a memoryview
    in this mode.
    """
    if zero_copy:
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if len(mv) and mv[0] in (0xC4, 0xC5, 0xC6):
            r = _ViewDecoder(mv, 1, tensor_type)
            r.pos = 1
            n = r._uint(1 << (mv[0] - 0xC4))
            if r.pos + n != len(mv):
                raise ValueError("malformed top-level bin")
            return mv[r.pos :]
        if len(mv) and mv[0] == 0x84:
            arr = _lone_array(mv, tensor_type)
            if arr is not None:
                return arr
        try:
            return _ViewDecoder(mv, VIEW_DECODE_BUDGET, tensor_type).decode()
        except _OverBudget:
            pass
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=False,
        use_list=True,
        object_hook=_object_hook(tensor_type),
    )


class OmniSerializer:
    """vLLM-Omni's serializer interface: ``OmniSerializer.serialize(obj) -> bytes``
    and ``OmniSerializer.deserialize(data)``; usable on the class or an instance."""

    serialize = staticmethod(serialize)
    deserialize = staticmethod(deserialize)
    serialize_chunks = staticmethod(serialize_chunks)


__all__ = [
    "OmniSerializer",
    "RawTensor",
    "serialize",
    "deserialize",
    "serialize_chunks",
    "raw_frame",
    "encode_ndarray",
    "encode_tensor",
    "TENSOR_MARKER",
    "NDARRAY_MARKER",
    "PIL_IMAGE_MARKER",
]
