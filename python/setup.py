"""Installs yr.datasystem, its ``datasystem`` alias and omni_connectors.

Offline and with Debian's setuptools only: this is a pure-Python package (the
binding is ctypes), so no compiler or build isolation is needed:

    pip install ./python                # in a venv
    pip install --break-system-packages ./python   # into Debian's python3

When a built libdatasystem is found (env DS_LIBDIR, DS_BUILD_DIR, or the
checkout's build / build-py tree), a copy is bundled into
yr/datasystem/lib/ so the installed package works without DS_LIBDIR.
"""

import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _find_library():
    dirs = []
    if os.environ.get("DS_LIBDIR"):
        dirs.append(os.environ["DS_LIBDIR"])
    if os.environ.get("DS_BUILD_DIR"):
        dirs.append(os.path.join(os.environ["DS_BUILD_DIR"], "src", "client"))
    for b in ("build", "build-py"):
        dirs.append(os.path.join(ROOT, b, "src", "client"))
    for d in dirs:
        for name in ("libdatasystem.so.0", "libdatasystem.so"):
            p = os.path.join(d, name)
            if os.path.isfile(p):
                return p
    return None


class BuildPyWithLibrary(build_py):
    """build_py that also copies libdatasystem into the package, when one is built."""

    def run(self):
        super().run()
        lib = _find_library()
        if lib is None:
            self.announce("libdatasystem not found: the package will look for it at run time "
                          "(DS_LIBDIR, or the system library path)", level=3)
            return
        dest = os.path.join(self.build_lib, "yr", "datasystem", "lib")
        os.makedirs(dest, exist_ok=True)
        real = os.path.realpath(lib)
        shutil.copyfile(real, os.path.join(dest, "libdatasystem.so"))
        self.announce("bundled %s" % real, level=3)


class _Distribution(Distribution):
    """A wheel carrying libdatasystem is platform-specific, not py3-none-any."""

    def has_ext_modules(self):
        return _find_library() is not None


def _version():
    header = os.path.join(ROOT, "include", "datasystem", "version.h")
    if os.path.isfile(header):
        parts = {}
        with open(header) as f:
            for line in f:
                bits = line.split()
                if len(bits) == 3 and bits[0] == "#define" and bits[1].startswith("DS_VERSION_"):
                    parts[bits[1][len("DS_VERSION_"):]] = bits[2]
        if {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
            return "%s.%s.%s" % (parts["MAJOR"], parts["MINOR"], parts["PATCH"])
    return "0.1.0"


setup(
    name="yr-datasystem-c",
    version=_version(),
    description="Python client of the C datasystem (yr.datasystem / datasystem) and "
    "OmniConnectors (omni_connectors)",
    long_description=open(os.path.join(HERE, "README.md")).read()
    if os.path.exists(os.path.join(HERE, "README.md"))
    else "",
    long_description_content_type="text/markdown",
    packages=["yr", "yr.datasystem", "datasystem", "omni_connectors"],
    package_data={"yr.datasystem": ["lib/*.so*"]},
    python_requires=">=3.9",
    install_requires=[],
    extras_require={"connector": ["msgpack", "numpy"]},
    cmdclass={"build_py": BuildPyWithLibrary},
    distclass=_Distribution,
    zip_safe=False,
)
