"""Alias of ``yr.datasystem.object_client``: this name is bound to that very module."""

import sys

from yr.datasystem import object_client as _module

sys.modules[__name__] = _module
