"""Alias of ``yr.datasystem.kv_client``: this name is bound to that very module."""

import sys

from yr.datasystem import kv_client as _module

sys.modules[__name__] = _module
