"""Alias of ``yr.datasystem.kv_client``: the same classes, not copies."""

from yr.datasystem.kv_client import *  # noqa: F401,F403
from yr.datasystem.kv_client import __all__  # noqa: F401
