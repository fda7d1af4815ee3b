"""Build of the ``openyuanrong-datasystem`` wheel (metadata: pyproject.toml).

One wheel, as Yuanrong Datasystem ships it: the ``yr.datasystem`` SDK (and
its ``datasystem`` alias), ``omni_connectors``, ``libdatasystem.so``, and the
``dscli`` and ``datasystem_worker`` commands. Offline, with Debian's
setuptools and wheel (no build isolation):

    python3 -m venv --system-site-packages /tmp/v
    /tmp/v/bin/pip install --no-build-isolation ./python

The C code lives outside python/, so the wheel is built from a checkout:
build_py runs CMake on the repository root (the folder above this one), builds
the targets datasystem, datasystem_worker and dscli (Release) and copies them
into the package: yr/datasystem/lib/libdatasystem.so and
yr/datasystem/bin/{dscli,datasystem_worker}, and, where CMake found the
installing Python's headers, the buffer-protocol module yr.datasystem._pybuffer
(src/client/pybuffer.c, in yr/datasystem/lib; the package works without it,
see _native.BufferBase). An sdist carries no C sources and is not supported.

Environment, all optional:
    DS_WHEEL_BUILD_DIR    the CMake build folder (default python/build/cmake;
                          kept, so a second install rebuilds incrementally)
    CMAKE_BUILD_PARALLEL_LEVEL  make jobs (default: the number of CPUs, at most 8)
    DS_WHEEL_NO_NATIVE=1  no CMake: a pure-Python package; libdatasystem is then
                          found at run time (DS_LIBDIR, DS_BUILD_DIR, system path)
"""

import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (CMake target, file in the build tree, path inside the yr/datasystem package)
NATIVE = [
    ("datasystem", os.path.join("src", "client", "libdatasystem.so"),
     os.path.join("lib", "libdatasystem.so")),
    ("datasystem_worker", os.path.join("src", "worker", "datasystem_worker"),
     os.path.join("bin", "datasystem_worker")),
    ("dscli", os.path.join("src", "cli", "dscli"), os.path.join("bin", "dscli")),
    # --enable_rdma: the worker runs it from its own directory
    ("ds_ucx_check", os.path.join("src", "worker", "ds_ucx_check"),
     os.path.join("bin", "ds_ucx_check")),
]


def _native_wanted():
    return os.environ.get("DS_WHEEL_NO_NATIVE", "") not in ("1", "true", "yes")


def _check_root():
    if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")) or not os.path.isfile(
        os.path.join(ROOT, "include", "ds", "kv_client.h")
    ):
        raise SystemExit(
            "openyuanrong-datasystem: the C sources are not at %s (the folder above "
            "python/). Build the wheel from a checkout of the repository "
            "(pip install ./python), not from an sdist; or set DS_WHEEL_NO_NATIVE=1 "
            "for the pure-Python package." % ROOT
        )


def _cmake_build(announce):
    """Configures (once) and builds the NATIVE targets; returns the build folder."""
    _check_root()
    if shutil.which("cmake") is None:
        raise SystemExit(
            "openyuanrong-datasystem: cmake not found; on Debian: "
            "apt-get install cmake build-essential pkg-config libyaml-dev libmsgpack-dev "
            "libcurl4-openssl-dev libcjson-dev libssl-dev "
            "(or run scripts/setup.sh)"
        )
    build = os.path.abspath(
        os.environ.get("DS_WHEEL_BUILD_DIR") or os.path.join(HERE, "build", "cmake")
    )
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        announce("configuring %s in %s" % (ROOT, build))
        subprocess.check_call(
            # The tests are not part of the wheel: no cmocka needed. _pybuffer
            # is built against the Python that installs the package.
            ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
             "-DDS_BUILD_TESTS=OFF", "-DPython3_EXECUTABLE=" + sys.executable]
        )
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(min(os.cpu_count() or 1, 8))
    native = _native_files(build)
    targets = []
    for target, _, _ in native:
        targets += ["--target", target]
    announce("building %s (-j%s)" % (", ".join(t for t, _, _ in native), jobs))
    subprocess.check_call(["cmake", "--build", build, "-j", jobs] + targets)
    # A kept build folder configured before _pybuffer existed learns of it in
    # that build's re-configure.
    later = [n for n in _native_files(build) if n not in native]
    if later:
        subprocess.check_call(["cmake", "--build", build, "-j", jobs, "--target", later[0][0]])
        native += later
    return build, native


def _native_files(build):
    """NATIVE, and the _pybuffer module where the configure made its target
    (it records the file name in the cache as DS_PYBUFFER_FILE)."""
    native = list(NATIVE)
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("DS_PYBUFFER_FILE:"):
                    name = line.split("=", 1)[1].strip()
                    if name:
                        native.append(("ds_pybuffer", os.path.join("src", "client", name),
                                       os.path.join("lib", name)))
    except OSError:
        pass
    return native


def _generate_status():
    """yr/datasystem/_status.py from include/ds/status.h (when building
    from a checkout), so the wheel's status codes are the C library's."""
    if os.path.isfile(os.path.join(ROOT, "include", "ds", "status.h")):
        sys.path.insert(0, HERE)
        try:
            import gen_status
        finally:
            sys.path.pop(0)
        gen_status.generate()


class BuildPyWithNative(build_py):
    """build_py that also builds the C library and binaries into the package."""

    def run(self):
        _generate_status()
        super().run()
        if not _native_wanted():
            self.announce("DS_WHEEL_NO_NATIVE: no libdatasystem or binaries bundled", level=3)
            return
        build, native = _cmake_build(lambda msg: self.announce(msg, level=3))
        pkg = os.path.join(self.build_lib, "yr", "datasystem")
        for target, src, dest in native:
            src = os.path.realpath(os.path.join(build, src))
            dest = os.path.join(pkg, dest)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(src, dest)
            os.chmod(dest, 0o755)
            self.announce("bundled %s -> %s" % (src, dest), level=3)


class _Distribution(Distribution):
    """A wheel carrying native code is platform-specific, not py3-none-any."""

    def has_ext_modules(self):
        return _native_wanted()


cmdclass = {"build_py": BuildPyWithNative}

try:
    from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):
        """Tag py3-none-<platform>: the binaries do not depend on Python's ABI
        (ctypes), only on the platform. The one extension module, _pybuffer,
        is optional: an interpreter its file name does not suit leaves it
        unloaded and the package uses plain Python classes."""

        def get_tag(self):
            python, abi, plat = super().get_tag()
            if _native_wanted():
                return "py3", "none", plat
            return python, abi, plat

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:  # no wheel package: setuptools still installs
    pass


def _version():
    header = os.path.join(ROOT, "include", "ds", "version.h")
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
    version=_version(),
    cmdclass=cmdclass,
    distclass=_Distribution,
)
