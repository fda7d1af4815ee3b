"""ctypes binding of libdatasystem (include/ds/kv_client.h, status.h).

This module is the only place that knows the C ABI. It finds and loads the
shared library, declares every function's prototype, and offers three helpers
the Python API is built from:

* ``DsError`` (a RuntimeError carrying ``.code``), raised by ``check``;
* ``borrow`` / ``BorrowedBuffers``: the address of a bytes-like object's memory,
  held through the buffer protocol for the length of one C call, so values are
  handed to the library without a copy;
* ``pinned_view``: a zero-copy memoryview over library-owned memory that keeps a
  ``Pin`` (and so the C buffer handle) alive for as long as any view, slice or
  numpy array derived from it is alive.

Every foreign call goes through ``ctypes.CDLL``, which releases the GIL for the
duration of the call, so a get that waits for a subscription never blocks other
Python threads.
"""

import ctypes
import ctypes.util
import os
import sys
import threading
import weakref

# ---------------------------------------------------------------------------
# Status codes: generated from include/ds/status.h's table
# (python/gen_status.py), so that they cannot drift from the C library's and
# errors can be named even before the library is loaded.

from ._status import *  # noqa: E402,F401,F403  (K_OK, K_NOT_FOUND, ...)
from ._status import STATUS_MESSAGES, STATUS_NAMES  # noqa: E402,F401

# Limits (kv_client.h).
MAX_KEY_LEN = 1024
MAX_BATCH = 10000
MAX_SETV_PIECES = 4096  # DS_MAX_SETV_PIECES
MAX_EXIST_BATCH = 100000

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1

TRANSPORT_AUTO = 0
TRANSPORT_TCP = 1
TRANSPORT_LOCAL = 2


def status_name(code):
    return STATUS_NAMES.get(code, "K_UNKNOWN")


# The text Yuanrong's Status::StatusCodeName gives each code; its
# Status::ToString is "code: [<text>], msg: [<message>]", and the Python SDK
# raises RuntimeError(status.to_string()).
STATUS_TEXTS = {
    K_OK: "OK",
    K_DUPLICATED: "Key duplicated",
    K_INVALID: "Invalid parameter",
    K_NOT_FOUND: "Key not found",
    K_RUNTIME_ERROR: "Runtime error",
    K_OUT_OF_MEMORY: "Out of memory",
    K_IO_ERROR: "IO error",
    K_NOT_READY: "Not ready",
    K_NOT_AUTHORIZED: "Not authorized",
    K_TRY_AGAIN: "Try again",
    K_SHUTTING_DOWN: "Shutting down",
    K_CLIENT_WORKER_DISCONNECT: "Client and Worker disconnect",
    K_WORKER_TIMEOUT: "The worker may timeout",
    K_NOT_FOUND_IN_L2CACHE: "Key not found in l2 cache",
    K_NOT_SUPPORTED: "Not supported",
    K_RPC_DEADLINE_EXCEEDED: "RPC deadline exceeded",
    K_RPC_UNAVAILABLE: "RPC unavailable",
    K_WRITE_BACK_QUEUE_FULL: "Write back queue full",
    K_OC_KEY_ALREADY_EXIST: "Object already exist error",
    K_OC_ALREADY_SEALED: "Object already sealed error",
    K_FUTURE_TIMEOUT: "The future is timeout",
    K_CUDA_ERROR: "Cuda api error",
    K_SC_STREAM_NOT_FOUND: "Stream name not found",
    K_SC_PRODUCER_NOT_FOUND: "Producer not found",
    K_SC_CONSUMER_NOT_FOUND: "Consumer not found",
    K_SC_STREAM_IN_USE: "Stream is still in use",
    K_SC_ALREADY_CLOSED: "Producer or consumer already closed",
}


def status_text(code):
    return STATUS_TEXTS.get(code, "UNKNOWN_TYPE")


# The trace id of the calling thread (``yr.datasystem.util.Context``): as in
# Yuanrong, an error raised while one is set carries ", traceId: <id>".
_trace = threading.local()


def current_trace_id():
    return getattr(_trace, "trace_id", "")


def set_current_trace_id(trace_id):
    _trace.trace_id = trace_id


def with_trace_id(msg, trace_id=None):
    """msg as Yuanrong's Status builds it: a trailing '.' gives way to
    ", traceId: <id>" while a trace id is set and msg does not name it yet."""
    if trace_id is None:
        trace_id = current_trace_id()
    if not trace_id or trace_id in msg:
        return msg
    if msg.endswith("."):
        msg = msg[:-1]
    return msg + ", traceId: " + trace_id


def format_status(code, msg):
    """Yuanrong's Status::ToString: "code: [Key not found], msg: [...]"."""
    return "code: [%s], msg: [%s]" % (status_text(code), msg)


class DsError(RuntimeError):
    """A failed datasystem call: a RuntimeError with the status code.

    ``str(e)`` is Yuanrong's ``code: [<code text>], msg: [<message>]`` (the
    message carries ", traceId: <id>" while ``Context.set_trace_id`` is in
    effect). ``code`` is the number (status.h), ``name`` its symbol
    ("K_NOT_FOUND") and ``message`` the library's explanation as is.
    """

    def __init__(self, code, message="", trace_id=None):
        self.code = int(code)
        self.name = status_name(self.code)
        self.message = message or ""
        self.trace_id = current_trace_id() if trace_id is None else trace_id
        super().__init__(format_status(self.code, with_trace_id(self.message, self.trace_id)))

    def __reduce__(self):
        return (DsError, (self.code, self.message, self.trace_id))


class LibraryNotFound(ImportError, RuntimeError):
    """libdatasystem could not be loaded (an ImportError and a RuntimeError)."""


# ---------------------------------------------------------------------------
# C structures.


class ClientOptions(ctypes.Structure):
    _fields_ = [
        ("host", ctypes.c_char_p),
        ("port", ctypes.c_int),
        ("connect_timeout_ms", ctypes.c_int),
        ("request_timeout_ms", ctypes.c_int),
        ("transport", ctypes.c_int),
        ("token", ctypes.c_char_p),
        ("unix_socket_dir", ctypes.c_char_p),
        ("busy_poll_us", ctypes.c_int),
        ("enable_ucx", ctypes.c_int),
        ("enable_tls", ctypes.c_int),
        ("tls_ca", ctypes.c_char_p),
        ("tls_cert", ctypes.c_char_p),
        ("tls_key", ctypes.c_char_p),
        ("service_discovery", ctypes.c_void_p),
        ("enable_cross_node_connection", ctypes.c_int),
    ]


class DiscoveryOptions(ctypes.Structure):
    """ds_service_discovery_options_t (ds/service_discovery.h)."""

    _fields_ = [
        ("etcd_address", ctypes.c_char_p),
        ("cluster_name", ctypes.c_char_p),
        ("etcd_ca", ctypes.c_char_p),
        ("etcd_cert", ctypes.c_char_p),
        ("etcd_key", ctypes.c_char_p),
        ("etcd_dns_name", ctypes.c_char_p),
        ("username", ctypes.c_char_p),
        ("password", ctypes.c_char_p),
        ("token_refresh_interval_sec", ctypes.c_uint32),
        ("host_id_env_name", ctypes.c_char_p),
        ("affinity_policy", ctypes.c_int),
    ]


class SetParamC(ctypes.Structure):
    _fields_ = [
        ("write_mode", ctypes.c_int),
        ("ttl_second", ctypes.c_uint32),
        ("existence", ctypes.c_int),
    ]


class ObjMetaC(ctypes.Structure):
    """ds_obj_meta_t."""

    _fields_ = [
        ("size", ctypes.c_uint64),
        ("location", ctypes.c_char * 300),
    ]


class ProducerConfC(ctypes.Structure):
    """ds_producer_conf_t (stream_client.h)."""

    _fields_ = [
        ("delay_flush_time_ms", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("max_stream_size", ctypes.c_uint64),
        ("auto_cleanup", ctypes.c_bool),
        ("retain_for_num_consumers", ctypes.c_uint64),
        ("encrypt_stream", ctypes.c_bool),
        ("reserve_size", ctypes.c_uint64),
    ]


class ElementC(ctypes.Structure):
    """ds_element_t (stream_client.h)."""

    _fields_ = [
        ("ptr", ctypes.c_void_p),
        ("size", ctypes.c_uint64),
        ("id", ctypes.c_uint64),
    ]


class ValueC(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("len", ctypes.c_size_t),
    ]


class ReadParamC(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_char_p),
        ("offset", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
    ]


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


class ReadParamC(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_char_p),
        ("offset", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
    ]


c_client_p = ctypes.c_void_p
c_buffer_p = ctypes.c_void_p
c_status = ctypes.c_int
c_keys_p = ctypes.POINTER(ctypes.c_char_p)

_PROTOTYPES = {
    "ds_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "ds_status_message": (ctypes.c_char_p, [ctypes.c_int]),
    "ds_last_error": (ctypes.c_char_p, []),
    "ds_client_options_init": (None, [ctypes.POINTER(ClientOptions)]),
    "ds_client_connect": (c_status, [ctypes.POINTER(ClientOptions), ctypes.POINTER(c_client_p)]),
    "ds_client_close": (None, [c_client_p]),
    "ds_service_discovery_options_init": (None, [ctypes.POINTER(DiscoveryOptions)]),
    "ds_service_discovery_new": (
        c_status, [ctypes.POINTER(DiscoveryOptions), ctypes.POINTER(ctypes.c_void_p)]),
    "ds_coordinator_service_discovery_new": (
        c_status,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
         ctypes.POINTER(ctypes.c_void_p)],
    ),
    "ds_service_discovery_init": (c_status, [ctypes.c_void_p]),
    "ds_service_discovery_select_worker": (
        c_status,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int),
         ctypes.POINTER(ctypes.c_bool)],
    ),
    "ds_service_discovery_select_same_node_worker": (
        c_status,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)],
    ),
    "ds_service_discovery_get_all_workers": (
        c_status,
        [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)),
         ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)),
         ctypes.POINTER(ctypes.c_size_t)],
    ),
    "ds_service_discovery_affinity_policy": (ctypes.c_int, [ctypes.c_void_p]),
    "ds_service_discovery_has_host_affinity": (ctypes.c_bool, [ctypes.c_void_p]),
    "ds_service_discovery_host_id": (ctypes.c_char_p, [ctypes.c_void_p]),
    "ds_service_discovery_free": (None, [ctypes.c_void_p]),
    "ds_strings_free": (None, [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]),
    "ds_client_is_local": (ctypes.c_bool, [c_client_p]),
    "ds_client_health_check": (c_status, [c_client_p]),
    "ds_free": (None, [ctypes.c_void_p]),
    "ds_kv_set": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(SetParamC)],
    ),
    "ds_kv_setv": (
        c_status,
        [
            c_client_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(SetParamC),
        ],
    ),
    "ds_kv_mset": (
        c_status,
        [
            c_client_p,
            ctypes.c_size_t,
            c_keys_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(SetParamC),
            ctypes.POINTER(c_status),
        ],
    ),
    "ds_kv_get": (
        c_status,
        [
            c_client_p,
            ctypes.c_char_p,
            ctypes.c_int32,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
        ],
    ),
    "ds_kv_get_into": (
        c_status,
        [
            c_client_p,
            ctypes.c_char_p,
            ctypes.c_int32,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_size_t),
        ],
    ),
    "ds_kv_mget": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.c_int32, ctypes.POINTER(ValueC)],
    ),
    "ds_kv_get_buffers": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.c_int32, ctypes.POINTER(c_buffer_p)],
    ),
    "ds_kv_create": (
        c_status,
        [
            c_client_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(SetParamC),
            ctypes.POINTER(c_buffer_p),
        ],
    ),
    "ds_kv_mcreate": (
        c_status,
        [
            c_client_p,
            ctypes.c_size_t,
            c_keys_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(SetParamC),
            ctypes.POINTER(c_buffer_p),
        ],
    ),
    "ds_kv_publish": (c_status, [c_client_p, c_buffer_p]),
    "ds_kv_mpublish": (
        c_status,
        [c_client_p, ctypes.c_size_t, ctypes.POINTER(c_buffer_p), ctypes.POINTER(c_status)],
    ),
    "ds_buffer_data": (ctypes.c_void_p, [c_buffer_p]),
    "ds_buffer_mutable_data": (ctypes.c_void_p, [c_buffer_p]),
    "ds_buffer_size": (ctypes.c_size_t, [c_buffer_p]),
    "ds_buffer_key": (ctypes.c_char_p, [c_buffer_p]),
    "ds_buffer_release": (None, [c_buffer_p]),
    "ds_buffer_release_deferred": (None, [c_buffer_p]),
    "ds_kv_del": (c_status, [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(c_status)]),
    "ds_kv_exist": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(ctypes.c_bool)],
    ),
    "ds_kv_expire": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.c_uint32, ctypes.POINTER(c_status)],
    ),
    "ds_kv_query_size": (
        c_status,
        [
            c_client_p,
            ctypes.c_size_t,
            c_keys_p,
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(c_status),
        ],
    ),
    "ds_kv_generate_key": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)],
    ),
    "ds_key_validate": (c_status, [ctypes.c_char_p, ctypes.c_size_t]),
    "ds_context_set_trace_id": (c_status, [ctypes.c_char_p]),
    "ds_kv_read": (
        c_status,
        [
            c_client_p,
            ctypes.c_size_t,
            ctypes.POINTER(ReadParamC),
            ctypes.POINTER(c_buffer_p),
            ctypes.POINTER(c_status),
        ],
    ),
    "ds_kv_rlatch": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.c_int32, ctypes.POINTER(c_status)],
    ),
    "ds_kv_unrlatch": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(c_status)],
    ),
    "ds_object_wlatch": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.c_int32, ctypes.POINTER(c_status)],
    ),
    "ds_object_unwlatch": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(c_status)],
    ),
    "ds_object_seal": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(c_status)],
    ),
    "ds_object_get_meta_info": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(ObjMetaC),
         ctypes.POINTER(c_status)],
    ),
    "ds_object_set_nested": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.c_size_t, c_keys_p],
    ),
    "ds_object_g_increase_ref": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(c_status)],
    ),
    "ds_object_g_decrease_ref": (
        c_status,
        [c_client_p, ctypes.c_size_t, c_keys_p, ctypes.POINTER(c_status)],
    ),
    "ds_stream_create_producer": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.POINTER(ProducerConfC), ctypes.POINTER(ctypes.c_void_p)],
    ),
    "ds_producer_send": (
        c_status,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64],
    ),
    "ds_producer_close": (c_status, [ctypes.c_void_p]),
    "ds_stream_subscribe": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)],
    ),
    "ds_consumer_receive": (
        c_status,
        [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.POINTER(ElementC)),
         ctypes.POINTER(ctypes.c_size_t)],
    ),
    "ds_elements_free": (None, [ctypes.POINTER(ElementC)]),
    "ds_consumer_ack": (c_status, [ctypes.c_void_p, ctypes.c_uint64]),
    "ds_consumer_close": (c_status, [ctypes.c_void_p]),
    "ds_stream_delete": (c_status, [c_client_p, ctypes.c_char_p]),
    "ds_stream_query_global_producer_num": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)],
    ),
    "ds_stream_query_global_consumer_num": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)],
    ),
    "ds_object_query_global_ref_num": (
        c_status,
        [c_client_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32)],
    ),
}

# ---------------------------------------------------------------------------
# Finding the library.

_LIB_NAMES = ("libdatasystem.so", "libdatasystem.so.0")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _source_root():
    """The repository root when running from a checkout (python/yr/datasystem)."""
    root = os.path.normpath(os.path.join(_HERE, "..", "..", ".."))
    if os.path.isfile(os.path.join(root, "include", "ds", "kv_client.h")):
        return root
    return None


def candidate_paths():
    """Where libdatasystem is looked for, in order.

    1. ``DS_LIBRARY``: the full path of the library file.
    2. The copy bundled into the installed package (``yr/datasystem/lib``, put
       there by the wheel build with the ``dscli`` and ``datasystem_worker`` of
       the same build), so an installed package uses its own library whatever
       DS_LIBDIR / DS_BUILD_DIR say. A checkout has no such folder.
    3. ``DS_LIBDIR``: a folder holding it.
    4. ``DS_BUILD_DIR``: a CMake build tree (its ``src/client``).
    5. The build trees of the checkout this package sits in: ``build``,
       ``build-py``, then any other ``build*`` folder, then ``python/build/cmake``
       (where ``pip install [-e] ./python`` builds).
    6. The system's library path (``libdatasystem.so.0`` via the dynamic loader).
    """
    paths = []
    env_lib = os.environ.get("DS_LIBRARY")
    if env_lib:
        paths.append(env_lib)
    for d in candidate_dirs():
        for name in _LIB_NAMES:
            paths.append(os.path.join(d, name))
    return paths


def candidate_dirs():
    """The folders of ``candidate_paths`` 2 to 5, in order: where the package
    looks for libdatasystem and its other native files (``_pybuffer``)."""
    dirs = [os.path.join(_HERE, "lib")]
    if os.environ.get("DS_LIBDIR"):
        dirs.append(os.environ["DS_LIBDIR"])
    if os.environ.get("DS_BUILD_DIR"):
        dirs.append(os.path.join(os.environ["DS_BUILD_DIR"], "src", "client"))
    root = _source_root()
    if root:
        preferred = ["build", "build-py"]
        others = []
        try:
            others = sorted(
                d for d in os.listdir(root) if d.startswith("build") and d not in preferred
            )
        except OSError:
            pass
        for d in preferred + others:
            dirs.append(os.path.join(root, d, "src", "client"))
        # The CMake build of `pip install [-e] ./python` (python/setup.py).
        dirs.append(os.path.join(root, "python", "build", "cmake", "src", "client"))
    return dirs


# ---------------------------------------------------------------------------
# The buffer protocol for the buffer classes (object_client.Buffer and the KV
# buffers): a class written in Python exports a buffer through ``__buffer__``
# only from CPython 3.12 on. Before that they take ``BufferBase`` of the small
# C module ``_pybuffer`` (src/client/pybuffer.c) as their base, whose buffer
# slot calls their ``__buffer__``. It is looked for where libdatasystem is
# (``candidate_dirs``) under every file name this interpreter loads
# extensions by (``_pybuffer.abi3.so`` from a build against 3.11 or later).
# Not found, not loadable, or DS_NO_PYBUFFER=1: the classes stay plain Python,
# and ``memoryview(buf)`` needs 3.12 (``ImmutableData()`` works everywhere).

PYBUFFER_MODULE = "yr.datasystem._pybuffer"


def _load_buffer_base():
    if sys.version_info >= (3, 12):
        return None  # __buffer__ is honoured: nothing to add
    if os.environ.get("DS_NO_PYBUFFER", "") in ("1", "true", "yes"):
        return None
    import importlib.machinery
    import importlib.util

    for d in candidate_dirs():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if suffix.startswith(".abi3") and sys.version_info < (3, 11):
                continue  # the stable-ABI build is for 3.11 and later
            path = os.path.join(d, "_pybuffer" + suffix)
            if not os.path.isfile(path):
                continue
            try:
                spec = importlib.util.spec_from_file_location(PYBUFFER_MODULE, path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                base = mod.BufferBase
            except (ImportError, OSError, AttributeError):
                continue  # built for another interpreter: try the next
            sys.modules[PYBUFFER_MODULE] = mod
            return base
    return None


# The base of the buffer classes: _pybuffer's BufferBase, else object.
_buffer_base = _load_buffer_base()
BufferBase = _buffer_base if _buffer_base is not None else object
# True where memoryview(buf) works on the buffer classes.
BUFFER_PROTOCOL = _buffer_base is not None or sys.version_info >= (3, 12)
# PyBUF_WRITABLE of the flags __buffer__ receives (inspect.BufferFlags.WRITABLE).
PYBUF_WRITABLE = 1


_lib = None
_lib_path = None
_lib_lock = threading.Lock()


# ds_buffer_release_deferred of the loaded library, None when it has none.
_release_deferred_fn = None


def _declare(lib):
    global _release_deferred_fn
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    _release_deferred_fn = getattr(lib, "ds_buffer_release_deferred", None)


def load():
    """Loads libdatasystem once; raises ImportError naming where it looked."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        explicit = bool(os.environ.get("DS_LIBRARY"))
        for path in candidate_paths():
            if not os.path.isfile(path):
                tried.append(path)
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                if explicit:
                    break
                continue
            _declare(lib)
            _lib, _lib_path = lib, path
            return lib
        for name in ("libdatasystem.so.0", "datasystem"):
            found = name if name.startswith("lib") else ctypes.util.find_library(name)
            if not found:
                continue
            try:
                lib = ctypes.CDLL(found)
            except OSError as e:
                tried.append("%s (%s)" % (found, e))
                continue
            _declare(lib)
            _lib, _lib_path = lib, found
            return lib
        raise LibraryNotFound(
            "libdatasystem not found; set DS_LIBDIR (or DS_LIBRARY, DS_BUILD_DIR). Tried: "
            + ", ".join(tried)
        )


def library_path():
    load()
    return _lib_path


def last_error():
    msg = load().ds_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(code, what=None):
    """Raises DsError for a non-zero status, with the thread's last message.

    The message is the library's text as is (Yuanrong's messages name no
    operation); ``what`` is used only when the library gave no text.
    """
    if code != K_OK:
        msg = last_error()
        if not msg:
            msg = (load().ds_status_message(code) or b"").decode("utf-8", "replace")
            if what:
                msg = "%s: %s" % (what, msg) if msg else what
        raise DsError(code, msg)


# ---------------------------------------------------------------------------
# Hooks: the library calls behind Yuanrong's Context.set_trace_id,
# KVClient.read, ReadOnlyBuffer.rlatch / unrlatch and ObjectClient's global
# references. They are newer than the rest of the C API (branch wt-sem); a
# library built without them still loads, and ``hook(name)`` is then None, so
# the Python API says K_NOT_SUPPORTED (or keeps the feature client-side).
#
#   set_trace_id(trace_id: str) -> None             ds_context_set_trace_id
#   kv_read(handle, [(key bytes, offset, size)])
#       -> list of ds_buffer_t handles (None: missing)   ds_kv_read
#   kv_rlatch(handle, [key bytes], timeout_ms) -> None     ds_kv_rlatch
#   kv_unrlatch(handle, [key bytes]) -> None               ds_kv_unrlatch
#   object_wlatch(handle, [key bytes], timeout_ms) -> None ds_object_wlatch
#   object_unwlatch(handle, [key bytes]) -> None           ds_object_unwlatch
#   object_seal(handle, [key bytes]) -> None               ds_object_seal
#   object_set_nested(handle, parent bytes, [key bytes]) -> None  ds_object_set_nested
#   object_get_meta_info(handle, tenant bytes, [key bytes])
#       -> list of (size, location str)                   ds_object_get_meta_info
#   g_increase_ref / g_decrease_ref(handle, [key bytes])
#       -> list of per-key statuses                       ds_object_g_*_ref
#   query_global_ref_num(handle, key bytes) -> int   ds_object_query_global_ref_num
#
# Each raises DsError on failure, like ``check``.

_HOOK_SYMBOLS = {
    "set_trace_id": "ds_context_set_trace_id",
    "kv_read": "ds_kv_read",
    "kv_rlatch": "ds_kv_rlatch",
    "kv_unrlatch": "ds_kv_unrlatch",
    "object_wlatch": "ds_object_wlatch",
    "object_unwlatch": "ds_object_unwlatch",
    "object_seal": "ds_object_seal",
    "object_set_nested": "ds_object_set_nested",
    "object_get_meta_info": "ds_object_get_meta_info",
    "g_increase_ref": "ds_object_g_increase_ref",
    "g_decrease_ref": "ds_object_g_decrease_ref",
    "query_global_ref_num": "ds_object_query_global_ref_num",
}


def has_symbol(symbol):
    try:
        return getattr(load(), symbol, None) is not None
    except (AttributeError, LibraryNotFound):
        return False


def hook(name):
    """The helper ``name`` of this module when the library has its C call, else None."""
    fn = globals().get("_hook_" + name)
    symbol = _HOOK_SYMBOLS.get(name)
    if fn is None or symbol is None or not has_symbol(symbol):
        return None
    return fn


def _hook_set_trace_id(trace_id):
    check(load().ds_context_set_trace_id(trace_id.encode() if trace_id else None), "set_trace_id")


def _statuses_for(n):
    arr = (c_status * n)()
    for i in range(n):
        arr[i] = -1
    return arr


def _hook_kv_read(handle, params):
    lib = load()
    n = len(params)
    arr = (ReadParamC * n)()
    for i, (key, offset, size) in enumerate(params):
        arr[i].key = key
        arr[i].offset = offset
        arr[i].size = size
    out = (c_buffer_p * n)()
    statuses = _statuses_for(n)
    rc = lib.ds_kv_read(handle, n, arr, out, statuses)
    if rc != K_OK:
        err_msg = last_error()
        for i in range(n):
            if out[i]:
                lib.ds_buffer_release(out[i])
        if rc == K_NOT_FOUND:
            err_msg = "Cannot get objects from worker"
        raise DsError(rc, err_msg)
    return [out[i] or None for i in range(n)]


def _hook_kv_rlatch(handle, keys, timeout_ms):
    check(load().ds_kv_rlatch(handle, len(keys), keys_array(keys), timeout_ms, None), "rlatch")


def _hook_kv_unrlatch(handle, keys):
    check(load().ds_kv_unrlatch(handle, len(keys), keys_array(keys), None), "unrlatch")


def _hook_object_wlatch(handle, keys, timeout_ms):
    check(load().ds_object_wlatch(handle, len(keys), keys_array(keys), timeout_ms, None), "wlatch")


def _hook_object_unwlatch(handle, keys):
    check(load().ds_object_unwlatch(handle, len(keys), keys_array(keys), None), "unwlatch")


def _hook_object_seal(handle, keys):
    check(load().ds_object_seal(handle, len(keys), keys_array(keys), None), "seal")


def _hook_object_set_nested(handle, parent, keys):
    check(load().ds_object_set_nested(handle, parent, len(keys), keys_array(keys)), "set_nested")


def _hook_object_get_meta_info(handle, tenant, keys):
    n = len(keys)
    metas = (ObjMetaC * n)()
    check(load().ds_object_get_meta_info(handle, tenant, n, keys_array(keys), metas, None),
          "get_meta_info")
    return [(int(m.size), m.location.decode("utf-8", "replace")) for m in metas]


def _ref_call(symbol, handle, keys, absent_ok=False):
    """Per-key statuses. absent_ok: a key with no reference (K_NOT_FOUND) counts
    as done, as Yuanrong's g_decrease_ref skips such a key (a warning, not a failure)."""
    n = len(keys)
    statuses = _statuses_for(n)
    rc = getattr(load(), symbol)(handle, n, keys_array(keys), statuses)
    sts = [int(statuses[i]) for i in range(n)]
    if absent_ok:
        sts = [K_OK if st == K_NOT_FOUND else st for st in sts]
    if rc != K_OK and all(st != K_OK for st in sts):
        check(rc, symbol)
    return sts


def _hook_g_increase_ref(handle, keys):
    return _ref_call("ds_object_g_increase_ref", handle, keys)


def _hook_g_decrease_ref(handle, keys):
    return _ref_call("ds_object_g_decrease_ref", handle, keys, absent_ok=True)


def _hook_query_global_ref_num(handle, key):
    count = ctypes.c_uint32()
    check(load().ds_object_query_global_ref_num(handle, key, ctypes.byref(count)), "query_global_ref_num")
    return int(count.value)


# ---------------------------------------------------------------------------
# Borrowing a bytes-like object's memory for one call.

_PyObject_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_PyObject_GetBuffer.restype = ctypes.c_int
_PyBuffer_Release = ctypes.pythonapi.PyBuffer_Release
_PyBuffer_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
_PyBuffer_Release.restype = None
_PYBUF_SIMPLE = 0
# A bytes object's data pointer, in one C call (a cast through c_char_p is three).
_PyBytes_AsString = ctypes.pythonapi.PyBytes_AsString
_PyBytes_AsString.argtypes = [ctypes.py_object]
_PyBytes_AsString.restype = ctypes.c_void_p


class BorrowedBuffers:
    """Holds buffer exports of several objects until ``release`` (or ``with`` exit).

    While held, a bytearray cannot be resized under the C call (it raises
    BufferError instead), so the addresses stay valid with the GIL released.
    """

    __slots__ = ("_views", "_keep")

    def __init__(self):
        self._views = []
        self._keep = []

    def add(self, obj):
        """Returns (address, length) of obj's bytes; copies only when obj is not contiguous."""
        if isinstance(obj, bytes):
            # A bytes object is immutable; its data pointer is stable while we hold it.
            self._keep.append(obj)
            n = len(obj)
            return (_PyBytes_AsString(obj) if n else None), n
        # A writable contiguous buffer (a numpy array, a bytearray): a ctypes
        # object over it holds the export, in a quarter of the time of
        # PyObject_GetBuffer through ctypes and its release (0.5 against 2.1 us).
        mv = memoryview(obj)
        if mv.c_contiguous and not mv.readonly and mv.nbytes:
            head = ctypes.c_char.from_buffer(mv)
            self._keep.append(head)
            return ctypes.addressof(head), mv.nbytes
        mv.release()
        view = _PyBuffer()
        try:
            _PyObject_GetBuffer(obj, ctypes.byref(view), _PYBUF_SIMPLE)
        except (BufferError, ValueError):
            # Not C-contiguous (a strided memoryview or ndarray, say): take a
            # packed copy.
            return self.add(memoryview(obj).tobytes())
        self._views.append(view)
        return view.buf, view.len

    def release(self):
        views, self._views = self._views, []
        for view in views:
            _PyBuffer_Release(ctypes.byref(view))
        self._keep = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        self.release()


# ---------------------------------------------------------------------------
# Zero-copy views over library memory.

# One array type as large as the address space: from_address() on it costs no
# allocation and, unlike ``c_ubyte * n``, does not grow ctypes' per-length type
# cache with every distinct value size.
_Span = ctypes.c_ubyte * sys.maxsize


class Pin:
    """Owns one ds_buffer_t*; releases it once nothing refers to the pin.

    Views made by ``pinned_view`` refer to the pin through their exporting
    ctypes object, so the buffer outlives every memoryview (and every slice or
    numpy array built on one) taken from it. ``release`` drops it early.
    """

    __slots__ = ("handle", "_finalizer", "__weakref__")

    def __init__(self, handle, deferred=False):
        """deferred: drop the pin with ds_buffer_release_deferred (the worker
        hears of it with the client's next request) where the library has it."""
        self.handle = handle
        release = _release_handle_deferred if deferred else _release_handle
        self._finalizer = weakref.finalize(self, release, handle, _pid[0])

    def release(self):
        self.handle = None
        self._finalizer()

    @property
    def alive(self):
        return self._finalizer.alive


def _release_handle(handle, pid):
    # A forked child inherits the parent's pins but not its connections: only
    # the process that took a buffer releases it.
    lib = _lib
    if lib is not None and handle and _pid[0] == pid:
        lib.ds_buffer_release(handle)


def _release_handle_deferred(handle, pid):
    lib = _lib
    if lib is not None and handle and _pid[0] == pid:
        (_release_deferred_fn or lib.ds_buffer_release)(handle)


# This process's id, kept current across fork without a getpid() system call
# per request (the hot paths compare it with the id a client or pin was made in).
_pid = [os.getpid()]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _pid.__setitem__(0, os.getpid()))


def current_pid():
    return _pid[0]


class ViewPin:
    """A read pin that only memoryviews refer to (KVClient.get_view): released
    with ds_buffer_release_deferred when the last view goes, with no
    weakref.finalize (a third of a view's cost). A view still alive at exit
    is left to the worker, which drops a closed session's pins."""

    __slots__ = ("handle", "_pid")

    def __init__(self, handle):
        self.handle = handle
        self._pid = _pid[0]

    def __del__(self):
        h, self.handle = self.handle, None
        lib = _lib
        if h and lib is not None and self._pid == _pid[0]:
            fn = _release_deferred_fn
            (fn or lib.ds_buffer_release)(h)


def pinned_view(pin, addr, size, readonly=True):
    """A memoryview of ``size`` bytes at ``addr`` that keeps ``pin`` alive."""
    if size == 0 or not addr:
        return memoryview(b"") if readonly else memoryview(bytearray())
    span = _Span.from_address(addr)
    span._ds_pin = pin
    view = memoryview(span).cast("B")[:size]
    return view.toreadonly() if readonly else view


def string_at(addr, size):
    """bytes copied from C memory (one copy)."""
    if size == 0:
        return b""
    return ctypes.string_at(addr, size)


def keys_array(encoded_keys):
    """A C ``const char *const *`` over already-encoded key bytes."""
    arr = (ctypes.c_char_p * len(encoded_keys))()
    arr[:] = encoded_keys
    return arr


def set_trace_id(trace_id):
    """Sets this thread's trace id (Yuanrong's ``Context.set_trace_id``): every
    later request of this thread carries it, and the worker prints it as
    ``[trace_id]`` in its log lines about them. "" clears it. Raises
    RuntimeError (DsError, K_INVALID) for an invalid id (1..128 bytes of
    ``[A-Za-z0-9._:-]``) and TypeError for a non-str."""
    if not isinstance(trace_id, str):
        raise TypeError("trace_id must be a str, not %s" % type(trace_id).__name__)
    check(load().ds_context_set_trace_id(trace_id.encode("utf-8", "surrogateescape")),
          "set_trace_id")
