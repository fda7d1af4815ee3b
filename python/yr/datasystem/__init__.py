"""Python client of the datasystem (Yuanrong Datasystem's ``yr.datasystem`` API).

    from yr.datasystem.kv_client import KVClient, SetParam, ExistenceOpt, ReadParam
    from yr.datasystem.object_client import WriteMode, ObjectClient, Buffer
    from yr.datasystem.util import Status, Context
    from yr.datasystem.ds_client import DsClient  # kv(), object(), hetero()
    from yr.datasystem.service_discovery import ServiceDiscovery, ServiceDiscoveryOptions
    from yr.datasystem import KVClient          # resolved lazily, as in Yuanrong
    # or, as vLLM-Omni imports it:
    from datasystem.kv_client import KVClient, SetParam, WriteMode

As in Yuanrong, the public names of this package are resolved on first use
(module ``__getattr__``), so ``import yr.datasystem`` loads no client module
and no library. libdatasystem is loaded on the first call that needs it; see
``_native.candidate_paths`` for where it is looked for (DS_LIBDIR overrides).
"""

from importlib import import_module

__version__ = "0.1.0"

# name -> (module, attribute). Yuanrong's names first, then this package's.
_LAZY_EXPORTS = {
    "Buffer": ("yr.datasystem.object_client", "Buffer"),
    "ConsistencyType": ("yr.datasystem.object_client", "ConsistencyType"),
    "ObjectClient": ("yr.datasystem.object_client", "ObjectClient"),
    "WriteMode": ("yr.datasystem.object_client", "WriteMode"),
    "DsClient": ("yr.datasystem.ds_client", "DsClient"),
    "HeteroClient": ("yr.datasystem.hetero_client", "HeteroClient"),
    "Blob": ("yr.datasystem.hetero_client", "Blob"),
    "DeviceBlobList": ("yr.datasystem.hetero_client", "DeviceBlobList"),
    "MetaInfo": ("yr.datasystem.hetero_client", "MetaInfo"),
    "Future": ("yr.datasystem.hetero_client", "Future"),
    "KVClient": ("yr.datasystem.kv_client", "KVClient"),
    "StreamClient": ("yr.datasystem.stream_client", "StreamClient"),
    "SubconfigType": ("yr.datasystem.stream_client", "SubconfigType"),
    "Status": ("yr.datasystem.util", "Status"),
    "Context": ("yr.datasystem.util", "Context"),
    "ServiceDiscovery": ("yr.datasystem.service_discovery", "ServiceDiscovery"),
    "ServiceDiscoveryOptions": ("yr.datasystem.service_discovery", "ServiceDiscoveryOptions"),
    "CoordinatorServiceDiscovery": ("yr.datasystem.service_discovery", "CoordinatorServiceDiscovery"),
    "CoordinatorServiceDiscoveryOptions": (
        "yr.datasystem.service_discovery",
        "CoordinatorServiceDiscoveryOptions",
    ),
    "ServiceAffinityPolicy": ("yr.datasystem.service_discovery", "ServiceAffinityPolicy"),
    # Importing these imports torch.
    "DsTensorClient": ("yr.datasystem.ds_tensor_client", "DsTensorClient"),
    "CopyRange": ("yr.datasystem.ds_tensor_client", "CopyRange"),
    # This package's (Yuanrong keeps them in their modules only).
    "CacheType": ("yr.datasystem.object_client", "CacheType"),
    "SetParam": ("yr.datasystem.kv_client", "SetParam"),
    "ExistenceOpt": ("yr.datasystem.kv_client", "ExistenceOpt"),
    "ReadParam": ("yr.datasystem.kv_client", "ReadParam"),
    "ReadOnlyBuffer": ("yr.datasystem.kv_client", "ReadOnlyBuffer"),
    "DsError": ("yr.datasystem._native", "DsError"),
    "LibraryNotFound": ("yr.datasystem._native", "LibraryNotFound"),
}

__all__ = [
    "Buffer",
    "ConsistencyType",
    "DsClient",
    "HeteroClient",
    "ObjectClient",
    "KVClient",
    "StreamClient",
    "SubconfigType",
    "Status",
    "WriteMode",
    "Context",
    "Blob",
    "DeviceBlobList",
    "MetaInfo",
    "Future",
    "ServiceDiscovery",
    "ServiceDiscoveryOptions",
    "CoordinatorServiceDiscovery",
    "CoordinatorServiceDiscoveryOptions",
    "ServiceAffinityPolicy",
    "DsTensorClient",
    "CopyRange",
    "CacheType",
    "SetParam",
    "ExistenceOpt",
    "ReadParam",
    "ReadOnlyBuffer",
    "DsError",
    "LibraryNotFound",
]


def _load_lazy_export(name):
    module_name, attr = _LAZY_EXPORTS[name]
    value = getattr(import_module(module_name), attr)
    globals()[name] = value
    return value


def __getattr__(name):
    if name in _LAZY_EXPORTS:
        return _load_lazy_export(name)
    raise AttributeError("module %s has no attribute %s" % (__name__, name))


def __dir__():
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
