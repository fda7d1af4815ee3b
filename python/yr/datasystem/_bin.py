"""Console scripts ``dscli`` and ``datasystem_worker`` of the installed package.

A wheel built from this repository (``pip install ./python``) carries the C
binaries in ``yr/datasystem/bin/``, next to the bundled ``lib/libdatasystem.so``.
pip puts a small script for each on PATH that calls ``dscli()`` or
``datasystem_worker()`` here, which replace the Python process with the
bundled binary (``os.execv``: same PID, same exit status, signals go straight
to it). ``dscli`` is told where the bundled worker is through
``DS_WORKER_BIN`` unless the caller set that already.
"""

import os
import sys

BIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def binary_path(name):
    """The bundled binary ``name`` (it may not exist: a pure-Python install)."""
    return os.path.join(BIN_DIR, name)


def _exec(name):
    path = binary_path(name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.stderr.write(
            "%s: not bundled in this installation of yr.datasystem (looked for %s); "
            "install the package from a checkout with CMake and a C compiler "
            "(pip install ./python), or use the binary of a CMake build\n" % (name, path)
        )
        return 127
    if name == "dscli":
        worker = binary_path("datasystem_worker")
        if not os.environ.get("DS_WORKER_BIN") and os.access(worker, os.X_OK):
            os.environ["DS_WORKER_BIN"] = worker
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [name] + sys.argv[1:])
    return 127  # not reached


def dscli():
    return _exec("dscli")


def datasystem_worker():
    return _exec("datasystem_worker")
