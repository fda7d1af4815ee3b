"""Alias of ``yr.datasystem.util``: this name is bound to that very module."""

import sys

from yr.datasystem import util as _module

sys.modules[__name__] = _module
