"""The names Yuanrong's Python layer takes from its native module
``libds_client_py``, served over libdatasystem's C API (ctypes).

Only what this package's modules use lives here: service discovery (the
etcd-backed ``ServiceDiscovery`` and ``CoordinatorServiceDiscovery`` of
ds/service_discovery.h, their options and ``ServiceAffinityPolicy``),
``KVClient``, which, as Yuanrong's native client does, takes the
constructor's arguments in order (the service discovery last, when there is
one; the Python ``KVClient`` connects with them in ``init()``), and the
heterogeneous client's objects (``_hetero``). The latter and the enums
(``WriteMode``, ``ExistenceOpt``, ``CacheType``, ``ConsistencyType``, the
public modules' own) are looked up on first use: the public modules import
this one, so importing them back at load time would be a cycle.

Calls answer a ``Status`` first, as the native module's do, and raise
nothing for a failed call.
"""

import ctypes

from yr.datasystem import _native as _n
from yr.datasystem.util import Status


class ServiceAffinityPolicy:
    """Yuanrong's ServiceAffinityPolicy numbers (ds_service_affinity_policy_t)."""

    PREFERRED_SAME_NODE = 0
    REQUIRED_SAME_NODE = 1
    RANDOM = 2










class ServiceDiscoveryOptions:
    """The fields of ds_service_discovery_options_t; no others can be set."""

    __slots__ = (
        "etcd_address",
        "cluster_name",
        "etcd_ca",
        "etcd_cert",
        "etcd_key",
        "etcd_dns_name",
        "username",
        "password",
        "token_refresh_interval_sec",
        "host_id_env_name",
        "affinity_policy",
    )

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, "")
        self.token_refresh_interval_sec = 30
        self.affinity_policy = ServiceAffinityPolicy.PREFERRED_SAME_NODE


class CoordinatorServiceDiscoveryOptions:
    """A coordinator's address, cluster name, host ID variable and policy."""

    __slots__ = (
        "service_address",
        "cluster_name",
        "host_id_env_name",
        "affinity_policy",
        "coordinator_discovery",
    )

    def __init__(self):
        self.service_address = ""
        self.cluster_name = ""
        self.host_id_env_name = ""
        self.affinity_policy = ServiceAffinityPolicy.PREFERRED_SAME_NODE
        self.coordinator_discovery = None


def _enc(v):
    return v.encode() if v else None


def _status(rc):
    return Status(rc, _n.last_error() if rc != _n.K_OK else "")


class _Discovery:
    """One ds_service_discovery_t. A constructor the library refused (bad
    options) leaves no handle; every call then answers why."""

    def __init__(self, make):
        self._lib = _n.load()
        out = ctypes.c_void_p()
        rc = make(self._lib, out)
        self._error = _status(rc)
        self._handle = out.value if rc == _n.K_OK else None

    @property
    def handle(self):
        """The ds_service_discovery_t pointer (None after a refused construction)."""
        return self._handle

    def init(self):
        if self._handle is None:
            return self._error
        return _status(self._lib.ds_service_discovery_init(self._handle))

    def select_worker(self):
        if self._handle is None:
            return self._error, "", 0, False
        ip = ctypes.create_string_buffer(256)
        port, same = ctypes.c_int(0), ctypes.c_bool(False)
        rc = self._lib.ds_service_discovery_select_worker(
            self._handle, ip, len(ip), ctypes.byref(port), ctypes.byref(same))
        return _status(rc), ip.value.decode(), port.value, bool(same.value)

    def select_same_node_worker(self):
        if self._handle is None:
            return self._error, "", 0
        ip = ctypes.create_string_buffer(256)
        port = ctypes.c_int(0)
        rc = self._lib.ds_service_discovery_select_same_node_worker(
            self._handle, ip, len(ip), ctypes.byref(port))
        return _status(rc), ip.value.decode(), port.value

    def get_all_workers(self):
        if self._handle is None:
            return self._error, [], []
        same, other = ctypes.POINTER(ctypes.c_char_p)(), ctypes.POINTER(ctypes.c_char_p)()
        n_same, n_other = ctypes.c_size_t(0), ctypes.c_size_t(0)
        rc = self._lib.ds_service_discovery_get_all_workers(
            self._handle, ctypes.byref(same), ctypes.byref(n_same), ctypes.byref(other),
            ctypes.byref(n_other))
        st = _status(rc)
        if rc != _n.K_OK:
            return st, [], []
        same_list = [same[i].decode() for i in range(n_same.value)]
        other_list = [other[i].decode() for i in range(n_other.value)]
        self._lib.ds_strings_free(same, n_same.value)
        self._lib.ds_strings_free(other, n_other.value)
        return st, same_list, other_list

    def get_affinity_policy(self):
        if self._handle is None:
            return ServiceAffinityPolicy.PREFERRED_SAME_NODE
        return self._lib.ds_service_discovery_affinity_policy(self._handle)

    def has_host_affinity(self):
        return bool(self._handle) and bool(
            self._lib.ds_service_discovery_has_host_affinity(self._handle))

    def get_host_id(self):
        if self._handle is None:
            return ""
        return (self._lib.ds_service_discovery_host_id(self._handle) or b"").decode()

    def __del__(self):
        # Clients connected with this discovery hold a reference to it (the
        # Python KVClient keeps its service_discovery), so none is left.
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.ds_service_discovery_free(h)


class ServiceDiscovery(_Discovery):
    """Service discovery over etcd (ds_service_discovery_new)."""

    def __init__(self, options):
        def make(lib, out):
            o = _n.DiscoveryOptions()
            lib.ds_service_discovery_options_init(o)
            o.etcd_address = _enc(options.etcd_address)
            o.cluster_name = _enc(options.cluster_name)
            o.etcd_ca = _enc(options.etcd_ca)
            o.etcd_cert = _enc(options.etcd_cert)
            o.etcd_key = _enc(options.etcd_key)
            o.etcd_dns_name = _enc(options.etcd_dns_name)
            o.username = _enc(options.username)
            o.password = _enc(options.password)
            o.token_refresh_interval_sec = int(options.token_refresh_interval_sec)
            o.host_id_env_name = _enc(options.host_id_env_name)
            o.affinity_policy = int(options.affinity_policy)
            return lib.ds_service_discovery_new(o, ctypes.byref(out))

        super().__init__(make)


class CoordinatorServiceDiscovery(_Discovery):
    """Service discovery through a coordinator: a service answering etcd's v3
    KV range API (ds_coordinator_service_discovery_new)."""

    def __init__(self, options):
        def make(lib, out):
            return lib.ds_coordinator_service_discovery_new(
                _enc(options.service_address), _enc(options.cluster_name),
                _enc(options.host_id_env_name), int(options.affinity_policy),
                ctypes.byref(out))

        super().__init__(make)


class KVClient:
    """The native KVClient's constructor arguments, in Yuanrong's order:
    host, port, connect_timeout_ms, token, client_public_key,
    client_private_key, server_public_key, access_key, secret_key, tenant_id,
    enable_cross_node_connection, req_timeout_ms, fast_transport_mem_size
    and, when given, the service discovery."""

    def __init__(self, *args):
        if len(args) not in (13, 14):
            raise TypeError("KVClient takes 13 or 14 arguments, not %d" % len(args))
        self.args = args

    @property
    def service_discovery(self):
        return self.args[13] if len(self.args) == 14 else None


_LAZY = {
    "WriteMode": "yr.datasystem.object_client",
    "CacheType": "yr.datasystem.object_client",
    "ConsistencyType": "yr.datasystem.object_client",
    "ExistenceOpt": "yr.datasystem.kv_client",
}
_HETERO = (
    "Blob", "DeviceBlobList", "Future", "HeteroClient", "MetaInfo", "SetParam",
    "device_backend_name", "device_malloc", "device_free", "device_memcpy",
    "COPY_H2D", "COPY_D2H", "COPY_D2D",
)


def __getattr__(name):
    import importlib

    if name in _HETERO:
        return getattr(importlib.import_module("yr.datasystem.lib._hetero"), name)
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
