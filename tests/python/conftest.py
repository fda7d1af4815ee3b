"""Fixtures for the Python tests: a real datasystem_worker on loopback.

The worker binary and libdatasystem come from one CMake build tree: env
DS_BUILD_DIR, default <repo>/build-py. The session's worker listens on a free
127.0.0.1 port with a private --unix_socket_dir under pytest's tmp dir and a
256 MiB arena; it is stopped by PID at the end of the session, also when tests
fail (and, as a last resort, at interpreter exit).

Point the tests at a worker that is already running with
DS_WORKER_ADDRESS=host:port (and DS_UNIX_SOCKET_DIR for its socket folder).

Tests that need no worker (the serializer's) run without a build; the others
are skipped with the reason when the binary or library is missing.
"""

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

BUILD_DIR = Path(os.environ.get("DS_BUILD_DIR") or (REPO / "build-py")).resolve()
WORKER_BIN = BUILD_DIR / "src" / "worker" / "datasystem_worker"
LIB_PATH = BUILD_DIR / "src" / "client" / "libdatasystem.so"
# The client library of the same build as the worker, here and in the child
# processes tests start (DS_BUILD_DIR itself is left as the caller set it).
os.environ.setdefault("DS_LIBDIR", str(LIB_PATH.parent))
# Device memory tests run on the host backend (a device pointer is a host
# address) unless the environment names another (tests/device/run.sh: cuda).
os.environ.setdefault("DS_DEVICE_BACKEND", "host")

_started = []  # Popen objects of workers this process started


def _kill_all():
    for proc in list(_started):
        _stop(proc)


atexit.register(_kill_all)


def _stop(proc, timeout=5.0):
    """SIGTERM the worker by its PID, then SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=timeout)
    if proc in _started:
        _started.remove(proc)
    return proc.returncode


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """A running worker: its address, socket folder and process."""

    def __init__(self, host, port, sock_dir, proc=None, log_path=None):
        self.host = host
        self.port = port
        self.sock_dir = str(sock_dir) if sock_dir else None
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    def client(self, **kwargs):
        """An init()ed KVClient for this worker: shared memory ("local": never a
        silent TCP fallback) unless told otherwise."""
        from yr.datasystem import KVClient

        kwargs.setdefault("unix_socket_dir", self.sock_dir)
        if self.sock_dir and self.host.startswith("127."):
            kwargs.setdefault("transport", "local")
        c = KVClient(self.host, self.port, **kwargs)
        c.init()
        return c

    def log(self):
        if self.log_path and os.path.exists(self.log_path):
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        return ""

    def stop(self):
        if self.proc is not None:
            return _stop(self.proc)
        return None

    def env(self):
        """Environment for a child process that talks to this worker."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PYTHON_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        env["DATASYSTEM_HOST"] = self.host
        env["DATASYSTEM_PORT"] = str(self.port)
        if self.sock_dir:
            env["DS_UNIX_SOCKET_DIR"] = self.sock_dir
        return env


def _wait_ready(proc, host, port, sock_path, log_path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                raise RuntimeError(
                    "datasystem_worker exited with %s:\n%s" % (proc.returncode, f.read()[-4000:])
                )
        if os.path.exists(sock_path):
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return
            except OSError:
                pass
        time.sleep(0.02)
    raise RuntimeError("datasystem_worker on %s:%d not ready in %.0fs" % (host, port, timeout))


def start_worker(base_dir, shm_mb=256, extra_args=()):
    """Starts a worker on a free loopback port; returns a Worker."""
    if not WORKER_BIN.exists():
        pytest.skip("no worker binary at %s (build with cmake -B %s)" % (WORKER_BIN, BUILD_DIR))
    if not LIB_PATH.exists():
        pytest.skip("no libdatasystem at %s" % LIB_PATH)
    base_dir = Path(base_dir)
    sock_dir = base_dir / "sock"
    sock_dir.mkdir(parents=True, exist_ok=True)
    log_path = str(base_dir / "worker.log")
    host = "127.0.0.1"
    for attempt in range(5):
        port = free_port()
        args = [
            str(WORKER_BIN),
            "--worker_address", "%s:%d" % (host, port),
            "--unix_socket_dir", str(sock_dir),
            "--shared_memory_size_mb", str(shm_mb),
            *extra_args,
        ]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        _started.append(proc)
        sock_path = str(sock_dir / ("worker-%s-%d.sock" % (host, port)))
        try:
            _wait_ready(proc, host, port, sock_path, log_path)
            return Worker(host, port, sock_dir, proc, log_path)
        except RuntimeError as e:
            _stop(proc)
            # Another process may have taken the port between probe and bind.
            if "in use" in str(e).lower() and attempt < 4:
                continue
            raise
    raise RuntimeError("could not start a worker")


@pytest.fixture(scope="session")
def worker(tmp_path_factory):
    """The session's worker (or the one DS_WORKER_ADDRESS names)."""
    addr = os.environ.get("DS_WORKER_ADDRESS")
    if addr:
        host, _, port = addr.rpartition(":")
        yield Worker(host, int(port), os.environ.get("DS_UNIX_SOCKET_DIR"))
        return
    w = start_worker(tmp_path_factory.mktemp("ds"))
    old_env = {k: os.environ.get(k) for k in ("DS_UNIX_SOCKET_DIR",)}
    # Clients built the way vLLM-Omni builds them (host, port only) find the
    # private socket through the library's env fallback and use shared memory.
    os.environ["DS_UNIX_SOCKET_DIR"] = w.sock_dir
    try:
        yield w
    finally:
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        rc = w.stop()
        if rc not in (0, -signal.SIGTERM, None):
            sys.stderr.write("worker exited with %s\n%s\n" % (rc, w.log()))


@pytest.fixture
def fresh_worker(tmp_path):
    """Starts private workers for one test (factory); all are stopped after it."""
    mine = []

    def make(**kwargs):
        w = start_worker(tmp_path / ("w%d" % len(mine)), **kwargs)
        mine.append(w)
        return w

    try:
        yield make
    finally:
        for w in mine:
            w.stop()


@pytest.fixture
def client(worker):
    c = worker.client()
    try:
        yield c
    finally:
        c.close()


_counter = [0]


@pytest.fixture
def key(request):
    """A key unique to this test (and call)."""
    _counter[0] += 1
    name = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:80]
    return "t.%d.%s.%d" % (os.getpid(), name, _counter[0])
