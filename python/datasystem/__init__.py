"""Alias of ``yr.datasystem``, the import path vLLM-Omni's YuanrongConnector uses
(``from datasystem.kv_client import KVClient, SetParam, WriteMode``)."""

from yr.datasystem import (  # noqa: F401
    Buffer,
    CacheType,
    DsError,
    ExistenceOpt,
    KVClient,
    LibraryNotFound,
    SetParam,
    Status,
    WriteMode,
    __all__,
    __version__,
)
