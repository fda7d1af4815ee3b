"""Python client of the datasystem (Yuanrong Datasystem's ``yr.datasystem`` API).

    from yr.datasystem import KVClient, SetParam, WriteMode, ExistenceOpt
    # or, as vLLM-Omni imports it:
    from datasystem.kv_client import KVClient, SetParam, WriteMode

libdatasystem is loaded on first use; see ``_native.candidate_paths`` for
where it is looked for (DS_LIBDIR overrides).
"""

from yr.datasystem._native import DsError, LibraryNotFound
from yr.datasystem.kv_client import (
    Buffer,
    CacheType,
    ExistenceOpt,
    KVClient,
    SetParam,
    Status,
    WriteMode,
)

__version__ = "0.1.0"

__all__ = [
    "KVClient",
    "SetParam",
    "WriteMode",
    "ExistenceOpt",
    "CacheType",
    "Buffer",
    "Status",
    "DsError",
    "LibraryNotFound",
]
