"""Native layer of ``yr.datasystem`` (Yuanrong's ``yr.datasystem.lib``).

``libds_client_py`` has the names of Yuanrong's pybind11 module of that name
that the public modules build on, over libdatasystem through ctypes. An
installed package also carries ``libdatasystem.so`` in this folder.
"""
