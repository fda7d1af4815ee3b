"""Yuanrong keeps its native extension here (``yr.datasystem.lib.libds_client_py``);
this package keeps a module of that name that serves the same names over
libdatasystem's C API."""
