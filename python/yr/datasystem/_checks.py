"""Argument checks shared by the clients, with Yuanrong Datasystem's messages.

Types: ``TypeError("The input of <name> has invalid type, valid type: [...]")``
(``util.Validator``). Numbers out of range: ``util.ArgumentRangeError``, a
RuntimeError as in Yuanrong and a ValueError as before. ``ttl_second``
outside uint32 is a TypeError, as Yuanrong's binding raises for it (it is
also a ValueError). Keys and values the worker would refuse are refused here
with the texts Yuanrong's client library uses (code K_INVALID).
"""

from yr.datasystem import _native as _n
from yr.datasystem._native import DsError
from yr.datasystem.util import ArgumentRangeError, Validator

# Yuanrong's client-side messages (K_INVALID).
MSG_EMPTY_KEY = "The objectKey should not be empty."
MSG_EMPTY_VALUE = "The dataSize value should be bigger than zero."
MSG_EMPTY_KEYS = "The keys are empty"
MSG_EMPTY_KEYS_SET = "The keys should not be empty."
MSG_KEYS_VALUES = "The number of key and value is not the same."
MSG_TOO_MANY_KEYS = "The objectKeys size exceed %d."
# Yuanrong's K_NOT_FOUND text when no key of a get was found.
MSG_NOT_FOUND = "Cannot get objects from worker"


class TtlRangeError(TypeError, ValueError):
    """ttl_second outside uint32: a TypeError as Yuanrong raises, and a ValueError."""


def type_error(name, *types):
    return Validator.type_error(name, types)


def check_int(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int):
        raise type_error(name, int)
    Validator.check_param_range(name, v, lo, hi)
    return int(v)


def check_str(name, v):
    if not isinstance(v, str):
        raise type_error(name, str)
    return v


def check_bool(name, v):
    if not isinstance(v, bool):
        raise type_error(name, bool)
    return v


def check_list(name, v):
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
        raise type_error(name, list)
    return v


def ttl(v, name="ttl_second"):
    if isinstance(v, bool) or not isinstance(v, int):
        raise type_error(name, int)
    if v < 0 or v > _n.UINT32_MAX:
        raise TtlRangeError(
            "incompatible function arguments: %s=%d is not a uint32, the valid range is [0, %d]"
            % (name, v, _n.UINT32_MAX)
        )
    return int(v)


def timeout(name, v):
    return check_int(name, v, 0, Validator.INT32_MAX_SIZE)


def value(name, v):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return v
    raise type_error(name, memoryview, bytes, bytearray, str)


def nonempty_value(name, v):
    b = value(name, v)
    if (len(b) if not isinstance(b, memoryview) else b.nbytes) == 0:
        raise DsError(_n.K_INVALID, MSG_EMPTY_VALUE)
    return b


def encode_key(k, name="key", empty_msg=MSG_EMPTY_KEY):
    if not isinstance(k, str):
        raise type_error(name, str)
    if not k:
        raise DsError(_n.K_INVALID, empty_msg)
    b = k.encode("utf-8", "surrogateescape")
    if b"\0" in b:
        # A C string cannot carry NUL: let the library's validator name the byte.
        lib = _n.load()
        rc = lib.ds_key_validate(b, len(b))
        _n.check(rc if rc != _n.K_OK else _n.K_INVALID, "invalid key %r" % k)
    return b


def key_list(keys, limit=_n.MAX_BATCH, name="keys", empty_msg=MSG_EMPTY_KEYS):
    check_list(name, keys)
    if not keys:
        raise DsError(_n.K_INVALID, empty_msg)
    if len(keys) > limit:
        raise DsError(_n.K_INVALID, MSG_TOO_MANY_KEYS % limit)
    return [
        encode_key(k, "%s[%d]" % (name, i), "%s[%d] can not be empty" % (name, i))
        for i, k in enumerate(keys)
    ]


__all__ = ["ArgumentRangeError", "TtlRangeError"]
