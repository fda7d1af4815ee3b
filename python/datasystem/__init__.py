"""Alias of ``yr.datasystem``, the import path vLLM-Omni's YuanrongConnector uses
(``from datasystem.kv_client import KVClient, SetParam, WriteMode``).

``datasystem.<name>`` resolves lazily to ``yr.datasystem.<name>`` (the same
objects), and ``datasystem.kv_client`` / ``object_client`` / ``util`` are the
very modules of ``yr.datasystem``.
"""

import yr.datasystem as _yd

__version__ = _yd.__version__
__all__ = list(_yd.__all__)


def __getattr__(name):
    return getattr(_yd, name)


def __dir__():
    return sorted(set(globals()) | set(_yd.__all__))
