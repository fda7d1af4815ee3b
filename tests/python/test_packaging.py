"""The README's install, from a clean clone: venv, pip install, dscli, set/get.

What a user does (README "Install", python/README.md), step by step and with
nothing of this checkout's environment:

1. ``git clone <this repository> src`` (the committed state of HEAD: commit
   before running this test to check a change);
2. ``python3 -m venv --system-site-packages venv`` (Debian's python3, so the
   venv sees Debian's setuptools, wheel, msgpack and numpy);
3. ``venv/bin/pip install --no-build-isolation ./python`` in the clone, which
   builds the C code with CMake (-j2) and installs the wheel;
4. with PATH = venv/bin:/usr/bin:/bin and no other variable (no PYTHONPATH,
   no DS_BUILD_DIR, no DS_LIBDIR): ``dscli start -w --worker_address
   127.0.0.1:<free port>``, a set/get through
   ``yr.datasystem.kv_client.KVClient`` (also ``datasystem`` and
   ``omni_connectors`` import), ``dscli stop``, and the worker's PID is gone.

It builds the C code from scratch (about a minute on 2 cores). Skip it with
DS_SKIP_PACKAGING=1; scripts/test.sh runs it.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/bin:/bin"

pytestmark = pytest.mark.skipif(
    os.environ.get("DS_SKIP_PACKAGING", "") not in ("", "0"),
    reason="DS_SKIP_PACKAGING is set",
)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, cwd, env, timeout, check=True):
    """Runs cmd, returns CompletedProcess; on failure the assertion shows the output."""
    p = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if check:
        assert p.returncode == 0, "%s (rc %d):\n%s" % (" ".join(cmd), p.returncode, p.stdout[-6000:])
    return p


def _alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


SET_GET = r"""
import os, sys
from yr.datasystem.kv_client import KVClient
from yr.datasystem import _native
import datasystem.kv_client
import omni_connectors

host, port = sys.argv[1], int(sys.argv[2])
c = KVClient(host, port)
c.init()
c.set("packaging-key", b"packaging-value")
got = c.get(["packaging-key", "packaging-missing"])
assert got == [b"packaging-value", None], got
# The buffer protocol of get_buffers' result: on CPython 3.12 and later from
# __buffer__, before that from the bundled _pybuffer module.
assert _native.BUFFER_PROTOCOL
assert bytes(memoryview(c.get_buffers(["packaging-key"])[0])) == b"packaging-value"
if sys.version_info < (3, 12):
    print("_pybuffer:", sys.modules[_native.PYBUFFER_MODULE].__file__)
c.close()
print("set/get ok")
print("yr.datasystem:", os.path.dirname(_native.__file__))
print("libdatasystem:", _native.library_path())
print("datasystem.kv_client is yr's:", datasystem.kv_client.KVClient is KVClient)
print("omni_connectors:", os.path.dirname(omni_connectors.__file__))
"""


def test_clean_clone_venv_install_dscli_set_get():
    if shutil.which("git") is None:
        pytest.fail("git is needed to clone the repository")
    tmp = Path(tempfile.mkdtemp(prefix="ds-packaging-"))
    src, venv, home = tmp / "src", tmp / "venv", tmp / "home"
    home.mkdir()
    pid = None
    addr = None
    run_env = {"PATH": "%s:%s" % (venv / "bin", SYSTEM_PATH)}
    try:
        t0 = time.monotonic()
        _run(["git", "clone", "-q", str(REPO), str(src)], cwd=tmp,
             env={"PATH": SYSTEM_PATH, "HOME": str(home)}, timeout=120)
        # The README's commands, run by Debian's python3 (first on PATH).
        build_env = {"PATH": SYSTEM_PATH, "HOME": str(home), "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
        _run(["python3", "-m", "venv", "--system-site-packages", str(venv)], cwd=src,
             env=build_env, timeout=300)
        p = _run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "./python"],
                 cwd=src, env=build_env, timeout=1200)
        assert "Successfully installed openyuanrong-datasystem" in p.stdout, p.stdout[-3000:]
        t_install = time.monotonic() - t0

        # Installed where the README says.
        for name in ("dscli", "datasystem_worker"):
            found = shutil.which(name, path=run_env["PATH"])
            assert found == str(venv / "bin" / name), (name, found)
        _run(["datasystem_worker", "--help"], cwd=tmp, env=run_env, timeout=30)

        port = _free_port()
        addr = "127.0.0.1:%d" % port
        # --enable_rdma: the bundled worker finds its UCX address checker
        # (ds_ucx_check) beside it, or refuses to start.
        p = _run(["dscli", "start", "-w", "--worker_address", addr, "--enable_rdma", "true"],
                 cwd=tmp, env=run_env, timeout=60)
        m = re.search(r"\[  OK  \] Start worker service @ \S+ success, PID: (\d+)", p.stdout)
        assert m, p.stdout
        pid = int(m.group(1))
        assert _alive(pid)
        # The worker is the bundled binary, not one of a build tree.
        exe = os.readlink("/proc/%d/exe" % pid)
        assert exe.startswith(str(venv)) and exe.endswith("/yr/datasystem/bin/datasystem_worker"), exe

        p = _run(["python3", "-c", SET_GET, "127.0.0.1", str(port)], cwd=tmp, env=run_env,
                 timeout=60)
        assert "set/get ok" in p.stdout, p.stdout
        site = str(venv / "lib")
        lib = re.search(r"libdatasystem: (\S+)", p.stdout).group(1)
        assert lib.startswith(site) and lib.endswith("/yr/datasystem/lib/libdatasystem.so"), lib
        assert re.search(r"yr\.datasystem: %s" % re.escape(site), p.stdout), p.stdout
        assert re.search(r"omni_connectors: %s" % re.escape(site), p.stdout), p.stdout
        if sys.version_info < (3, 12):
            assert re.search(r"_pybuffer: %s\S*/yr/datasystem/lib/_pybuffer\." % re.escape(site),
                             p.stdout), p.stdout

        _run(["dscli", "stop", "--worker_address", addr], cwd=tmp, env=run_env, timeout=60)
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "worker pid %d still alive after dscli stop" % pid
        pid = None
        print("packaging: clone + venv + pip install %.0f s; dscli start/set/get/stop ok, lib %s"
              % (t_install, lib))
    finally:
        if pid is not None and _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
