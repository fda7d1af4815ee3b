"""KVClient(enable_ucx=...): a remote client's gets over UCX (the C library's
enable_ucx, see tests/integration/it_ucx_client.c for the failure cases)."""
import json
import subprocess

import pytest

from conftest import BUILD_DIR
from datasystem.kv_client import KVClient


def ucx_stats(w):
    """The worker's STATS 'ucx' section, as `dscli status` prints it."""
    out = subprocess.run(
        [str(BUILD_DIR / "src" / "cli" / "dscli"), "status", "--worker_address",
         "%s:%d" % (w.host, w.port), "--unix_socket_dir", str(w.sock_dir)],
        check=True, capture_output=True, text=True, timeout=20,
    ).stdout
    return json.loads(out)["ucx"]


@pytest.fixture
def ucx_env(monkeypatch):
    # UCX over its TCP transport on loopback only, for the worker and the client.
    monkeypatch.setenv("UCX_TLS", "tcp")
    monkeypatch.setenv("UCX_NET_DEVICES", "lo")
    monkeypatch.delenv("DS_CLIENT_UCX", raising=False)


def test_round_trip_over_ucx(fresh_worker, ucx_env, key):
    w = fresh_worker(extra_args=("--enable_rdma", "true"))
    c = KVClient(w.host, w.port, transport="tcp", enable_ucx=True)
    c.init()
    try:
        before = ucx_stats(w)["client_sends"]
        for n in (1024, (1 << 20) + 3, 16 << 20):
            value = bytes((i * 7 + n) & 0xFF for i in range(256)) * (n // 256) + b"x" * (n % 256)
            c.set(key + str(n), value)
            assert c.get([key + str(n)], False)[0] == value
        # The two values above the 64 KiB inline limit came by UCX, the 1 KiB one inline.
        assert ucx_stats(w)["client_sends"] == before + 2
    finally:
        c.close()


def test_worker_without_rdma_says_so(fresh_worker, ucx_env, key):
    w = fresh_worker()
    c = KVClient(w.host, w.port, transport="tcp", enable_ucx=True)
    c.init()
    try:
        c.set(key, b"v" * (1 << 20))
        with pytest.raises(RuntimeError, match="--enable_rdma true"):
            c.get([key], False)
    finally:
        c.close()


def test_bad_arguments(monkeypatch, fresh_worker, ucx_env):
    with pytest.raises(TypeError):
        KVClient("127.0.0.1", 1, enable_ucx="yes")
    w = fresh_worker()
    monkeypatch.setenv("UCX_TLS", "bogus")
    c = KVClient(w.host, w.port, transport="tcp", enable_ucx=True)
    with pytest.raises(RuntimeError, match="cannot start UCX for the client"):
        c.init()
