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


# Where the CMake build tree keeps each binary (an editable install, `pip
# install -e ./python`, runs from the checkout: no bundled copies, but the
# build of python/build/cmake).
_BUILD_SUBDIR = {"dscli": "cli", "datasystem_worker": "worker"}


def binary_path(name):
    """The bundled binary ``name``; in a checkout (editable install) without
    one, the binary of python/build/cmake when that exists."""
    path = os.path.join(BIN_DIR, name)
    if not os.path.exists(path):
        root = os.path.normpath(os.path.join(os.path.dirname(BIN_DIR), "..", "..", ".."))
        built = os.path.join(root, "python", "build", "cmake", "src", _BUILD_SUBDIR[name], name)
        if os.path.isfile(os.path.join(root, "include", "ds", "kv_client.h")) and \
                os.path.exists(built):
            return built
    return path


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
