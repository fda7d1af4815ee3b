"""Status, Context and argument checks (Yuanrong Datasystem's ``yr.datasystem.util``).

* ``Status``: the result of a call that does not raise (``health_check``):
  ``is_ok()``, ``is_error()``, ``to_string()`` in Yuanrong's form
  ``code: [<code text>], msg: [<message>]``, plus ``code`` and ``message``.
* ``Context.set_trace_id(trace_id)``: tags every later call of the calling
  thread with a trace id. Errors raised while it is set carry
  ", traceId: <id>" in their message, as Yuanrong's do. Carrying the id to the
  worker needs the library's ``ds_context_set_trace_id`` (``_native.hook``);
  without it, or for an id the worker's rules refuse, the id stays on the
  client side.
* ``Validator``: the argument checks the clients share. Type errors are
  ``TypeError("The input of <name> has invalid type, valid type: [...]")`` and
  range errors ``RuntimeError("Invalid <name> size <v> is set, which should be
  between [<lo>,<hi>]")``, Yuanrong's texts.
"""

import re
from typing import Any, List

from yr.datasystem import _native as _n

__all__ = ["Status", "Context", "Validator"]


class ArgumentRangeError(ValueError, RuntimeError):
    """A number out of range: a RuntimeError as in Yuanrong's ``check_param_range``,
    and a ValueError as this package raised before."""


class Validator:
    """Argument checks with Yuanrong's messages."""

    INT32_MAX_SIZE = 2**31 - 1
    UINT32_MAX_SIZE = 2**32 - 1
    UINT64_MAX_SIZE = 2**64 - 1

    @staticmethod
    def type_error(name: str, types: Any) -> TypeError:
        return TypeError(
            "The input of {name} has invalid type, valid type: {type}".format(
                name=name, type=list(types)
            )
        )

    @staticmethod
    def check_args_types(args: List[list]) -> None:
        """args: a list of [name, value, type, type, ...]; raises TypeError when
        a value is of none of its types (bool never passes for int)."""
        if not isinstance(args, list):
            raise TypeError("The input of args should be a list, error type: %s" % type(args))
        for arg in args:
            if not isinstance(arg, list) or len(arg) < 3:
                raise TypeError(
                    "Each element of the input of args should be a list of an argument name, "
                    "its value and its valid types"
                )
            name, value, types = arg[0], arg[1], arg[2:]
            if not Validator.is_of(value, types):
                raise Validator.type_error(name, types)

    @staticmethod
    def is_of(value: Any, types: Any) -> bool:
        for t in types:
            if t is int and isinstance(value, bool):
                continue
            if isinstance(value, t):
                return True
        return False

    @staticmethod
    def check_param_range(name: str, value: int, lo: int, hi: int) -> None:
        """Raises RuntimeError (also a ValueError) unless lo <= value <= hi."""
        if not lo <= value <= hi:
            raise ArgumentRangeError(
                "Invalid {} size {} is set, which should be between [{},{}]".format(name, value, lo, hi)
            )

    @staticmethod
    def check_key_exists(args: dict, keys: List[str]) -> List[Any]:
        """The values of ``keys`` in the dict ``args``; TypeError when one is missing."""
        if not isinstance(args, dict):
            raise TypeError("The input of args should be dict, error type: %s" % type(args))
        if not isinstance(keys, list):
            raise TypeError("The input of keys should be list, error type: %s" % type(keys))
        out = []
        for key in keys:
            value = args.get(key)
            if value is None:
                raise TypeError("The key '%s' of the input param does not exist" % key)
            out.append(value)
        return out


class Status:
    """The result of a call: a code (status.h number) and a message.

    ``to_string()`` is Yuanrong's ``code: [<code text>], msg: [<message>]``
    (``code: [OK], msg: []`` for success).
    """

    __slots__ = ("code", "message")

    def __init__(self, code: int = 0, message: str = "") -> None:
        self.code = int(code)
        self.message = message or ""

    def is_ok(self) -> bool:
        return self.code == _n.K_OK

    def is_error(self) -> bool:
        return self.code != _n.K_OK

    def get_code(self) -> int:
        return self.code

    def get_msg(self) -> str:
        return self.message

    @property
    def name(self) -> str:
        """The code's symbol, e.g. "K_NOT_FOUND"."""
        return _n.status_name(self.code)

    def to_string(self) -> str:
        return _n.format_status(self.code, self.message)

    def __str__(self):
        return self.to_string()

    def __repr__(self):
        return "Status(%s)" % self.to_string()


# Yuanrong's Context::SetTraceId: the characters of a key plus ~ / &, at most
# 36 of them (Trace::TRACEID_PREFIX_SIZE).
_TRACE_ID_RE = re.compile(r"^[a-zA-Z0-9~.\-/_!@#%^&*()+=:;]*$")
TRACE_ID_MAX_LEN = 36


class Context:
    """Per-thread call context (Yuanrong's ``yr.datasystem.util.Context``)."""

    @staticmethod
    def set_trace_id(trace_id: str) -> None:
        """Sets the trace id of every later call of the calling thread ("" clears it).

        Raises:
            TypeError: trace_id is not a str.
            RuntimeError: trace_id has a character outside
                ``[a-zA-Z0-9~.-/_!@#%^&*()+=:;]`` or is longer than 36.
        """
        Validator.check_args_types([["trace_id", trace_id, str]])
        if not _TRACE_ID_RE.match(trace_id):
            raise _n.DsError(
                _n.K_INVALID,
                "The trace id contains illegal char(s). traceId not match regex "
                '"^[a-zA-Z0-9\\~\\.\\-\\/_!@#%\\^\\&\\*\\(\\)\\+\\=\\:;]*$"',
                trace_id="",
            )
        if len(trace_id) > TRACE_ID_MAX_LEN:
            raise _n.DsError(
                _n.K_INVALID,
                "The length of trace id should less than %d" % TRACE_ID_MAX_LEN,
                trace_id="",
            )
        native = _n.hook("set_trace_id")
        if native is not None:
            try:
                native(trace_id)
            except _n.DsError:
                # The worker's trace ids are [A-Za-z0-9._:-]; a Yuanrong id outside
                # that set stays on the client side (in error messages) only.
                native("")
        _n.set_current_trace_id(trace_id)

    @staticmethod
    def get_trace_id() -> str:
        """The calling thread's trace id ("" when none is set)."""
        return _n.current_trace_id()
