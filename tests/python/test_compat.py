"""Yuanrong drop-in calls: read with ReadParam, get_read_only_buffers with read
latches, msettx, the ObjectClient's global references (_object helpers) and
the trace id (_native.set_trace_id)."""

import threading
import time

import pytest

from yr.datasystem import _native, _object
from yr.datasystem.kv_client import ReadOnlyBuffer, ReadParam

K_INVALID = 2
K_NOT_FOUND = 3


def code(ei):
    return getattr(ei.value, "code", None)


def test_read_ranges(client, key):
    big = bytes(range(256)) * 1000
    client.set(key, big)
    client.set(key + ".s", b"0123456789")
    bufs = client.read(
        [
            ReadParam(key, 1000, 16),
            ReadParam(key + ".s", 7, 0),
            ReadParam(key + ".s", 11, 1),
            ReadParam(key + ".missing", 0, 1),
        ]
    )
    assert isinstance(bufs[0], ReadOnlyBuffer)
    assert bytes(bufs[0].immutable_data()) == big[1000:1016]
    assert bufs[0].get_size() == 16
    assert bytes(bufs[1].immutable_data()) == b"789"
    assert bufs[2] is None and bufs[3] is None
    with pytest.raises(RuntimeError) as ei:
        client.read([ReadParam(key + ".s", 50, 1)])
    assert code(ei) == K_INVALID
    with pytest.raises(TypeError):
        client.read(ReadParam(key, 0, 1))


def test_get_read_only_buffers_and_latch(worker, client, key):
    client.set(key, b"old")
    bufs = client.get_read_only_buffers([key, key + ".missing"])
    assert bufs[1] is None
    b = bufs[0]
    assert bytes(b.immutable_data(with_latch=True, timeout_sec=10)) == b"old"
    writer = worker.client()
    took = []

    def write():
        t0 = time.monotonic()
        writer.set(key, b"new")
        took.append(time.monotonic() - t0)

    th = threading.Thread(target=write)
    th.start()
    time.sleep(0.3)
    assert client.get([key]) == [b"old"]
    b.unrlatch()
    th.join(5)
    assert took and took[0] >= 0.25
    assert client.get([key]) == [b"new"]
    assert bytes(b.immutable_data()) == b"old"  # the pinned version stays intact
    with pytest.raises(RuntimeError):
        b.unrlatch()
    with pytest.raises(RuntimeError):
        b.rlatch(0)
    with pytest.raises(TypeError):
        b.rlatch("1")
    writer.close()


def test_global_refs(client, key):
    h = client._handle
    assert _object.g_increase_ref(h, [key, key]) == []
    assert _object.query_global_ref_num(h, key) == 2
    client.set(key, b"obj")
    assert _object.g_decrease_ref(h, [key]) == []
    assert client.exist([key]) == [True]
    assert _object.g_decrease_ref(h, [key, key + ".none"]) == [key + ".none"]
    assert client.exist([key]) == [False]
    assert _object.query_global_ref_num(h, key) == 0
    with pytest.raises(RuntimeError) as ei:
        _object.g_decrease_ref(h, [key])
    assert code(ei) == K_NOT_FOUND
    with pytest.raises(RuntimeError):
        _object.g_increase_ref(h, [])
    with pytest.raises(TypeError):
        _object.g_increase_ref(h, key)


def test_trace_id_reaches_worker_log(worker, client, key):
    if worker.proc is None:
        pytest.skip("external worker: its log is not ours")
    with pytest.raises(RuntimeError):
        _native.set_trace_id("bad id")
    _native.set_trace_id("py-trace-42")
    try:
        client.set(key, b"v")
    finally:
        _native.set_trace_id("")
    time.sleep(0.1)
    with open(worker.log_path, errors="replace") as f:
        assert "[py-trace-42] conn" in f.read()
