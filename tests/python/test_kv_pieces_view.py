"""KVClient.set_pieces (C: ds_kv_setv) and KVClient.get_view (a pinned view
whose release rides on the client's next request, ds_buffer_release_deferred),
against a real worker: stored bytes, argument errors with their codes, the
view's lifetime, and when the worker hears of the released pin."""

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from yr.datasystem import DsError, ExistenceOpt, WriteMode

np = pytest.importorskip("numpy")

K_INVALID = 2
MiB = 1 << 20


def worker_stats(worker):
    build = Path(os.environ.get("DS_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
    out = subprocess.run([str(build / "src" / "cli" / "dscli"), "status", "--worker_address",
                          worker.address], capture_output=True, text=True, timeout=20, check=True)
    return json.loads(out.stdout)


def pinned(worker):
    return worker_stats(worker)["objects"]["pinned"]


def wait_pinned(worker, want, timeout=3.0):
    end = time.monotonic() + timeout
    while True:
        got = pinned(worker)
        if got == want or time.monotonic() > end:
            return got
        time.sleep(0.02)


def pieces_of(seed):
    rng = np.random.default_rng(seed)
    arr = rng.standard_normal((256, 1024)).astype(np.float32)  # 1 MiB
    return [b"\x84head", b"", bytearray(b"mid" * 100), memoryview(b"view-bytes"), arr,
            arr[:3].reshape(-1).view(np.uint8)]


def joined(pieces):
    return b"".join(p if isinstance(p, bytes) else memoryview(p).tobytes() for p in pieces)


@pytest.mark.parametrize("transport", ["local", "tcp"])
def test_set_pieces_stores_the_concatenation(worker, key, transport):
    c = worker.client(transport=transport)
    try:
        for seed in range(3):  # the first may ask for arena space, later ones use it
            pieces = pieces_of(seed)
            c.set_pieces(key, pieces, WriteMode.NONE_L2_CACHE_EVICT)
            assert c.get([key])[0] == joined(pieces)
        # Small totals travel inline; a tuple works as well as a list.
        c.set_pieces(key, (b"a", b"", b"bc"))
        assert c.get([key])[0] == b"abc"
        # A strided array piece is packed first, same bytes.
        strided = np.arange(20000, dtype=np.int32)[::2]
        c.set_pieces(key, [strided])
        assert c.get([key])[0] == strided.tobytes()
    finally:
        c.close()


def test_set_pieces_nx_and_ttl(client, key):
    client.set_pieces(key, [b"old-", b"x" * 70000])
    client.set_pieces(key, [b"new-", b"y" * 70000], existence=ExistenceOpt.NX)
    assert client.get([key])[0] == b"old-" + b"x" * 70000
    k2 = key + ".ttl"
    client.set_pieces(k2, [b"z" * 100000], WriteMode.NONE_L2_CACHE, 1)
    assert client.get([k2])[0] == b"z" * 100000
    time.sleep(2.2)
    assert client.exist([k2]) == [False]


def test_borrowed_buffers_hold_each_export_until_released():
    """What lets a call release the GIL over borrowed memory: the address is
    the object's own, and while it is held a bytearray cannot be resized,
    whichever way the address was taken (a ctypes object over a writable
    buffer, PyObject_GetBuffer for a read-only one, a bytes object kept)."""
    import ctypes

    from yr.datasystem import _native as _n

    ba, arr = bytearray(b"abc"), np.arange(4, dtype=np.float32)
    with _n.BorrowedBuffers() as b:
        for obj, want in ((ba, b"abc"), (arr, arr.tobytes()), (memoryview(b"xyz"), b"xyz"),
                          (b"bytes", b"bytes"), (arr[::2], arr[::2].tobytes())):
            addr, n = b.add(obj)
            assert ctypes.string_at(addr, n) == want
        addr, n = b.add(ba)
        assert addr == ctypes.addressof(ctypes.c_char.from_buffer(ba))
        with pytest.raises(BufferError):
            ba.extend(b"d")
        assert b.add(bytearray())[1] == 0
    ba.extend(b"d")  # released
    assert ba == b"abcd"


def test_set_pieces_argument_errors(client, key):
    with pytest.raises(TypeError):
        client.set_pieces(key, b"not a list")
    with pytest.raises(TypeError):
        client.set_pieces(key, ["a str piece"])
    with pytest.raises(TypeError):
        client.set_pieces(key, [b"ok", 12])
    with pytest.raises(TypeError):
        client.set_pieces(123, [b"x"])
    for bad in ([], [b""] * 3, [b"x"] * 4097):
        with pytest.raises(DsError) as e:
            client.set_pieces(key, bad)
        assert e.value.code == K_INVALID
    with pytest.raises(DsError) as e:
        client.set_pieces("bad key", [b"x"])
    assert e.value.code == K_INVALID
    assert client.exist([key]) == [False]


def test_get_view_reads_in_place_and_pins(worker, client, key):
    value = np.random.default_rng(1).integers(0, 255, MiB, dtype=np.uint8).tobytes()
    client.set(key, value)
    view = client.get_view(key)
    assert isinstance(view, memoryview) and view.readonly and len(view) == MiB
    assert view == value
    arr = np.frombuffer(view, dtype=np.uint8)
    del view
    # The array keeps the pin: overwriting and deleting the key leave it intact.
    client.set(key, b"\0" * MiB)
    client.delete([key])
    assert arr.tobytes() == value
    assert client.get_view(key) is None
    del arr


def test_get_view_waits_for_the_key(client, key):
    def later():
        time.sleep(0.15)
        client.set(key, b"late" * 30000)

    t = threading.Thread(target=later)
    t.start()
    t0 = time.monotonic()
    view = client.get_view(key, 3000)
    t.join()
    assert view == b"late" * 30000 and time.monotonic() - t0 < 2.5
    t0 = time.monotonic()
    assert client.get_view(key + ".never", 200) is None
    assert 0.18 <= time.monotonic() - t0 < 1.5


def test_get_view_argument_errors(client):
    with pytest.raises(TypeError):
        client.get_view(["a list"])
    with pytest.raises(TypeError):
        client.get_view("k", "1000")
    with pytest.raises((DsError, ValueError)):
        client.get_view("k", -1)
    with pytest.raises(DsError) as e:
        client.get_view("")
    assert e.value.code == K_INVALID


def shm_held(worker):
    return worker_stats(worker)["objects"]["shm_held"]


def test_get_view_of_an_indexed_value_takes_no_request(worker, key):
    c = worker.client()
    try:
        c.set(key, b"v" * MiB)
        gets = worker_stats(worker)["operations"]["get"]
        base = wait_pinned(worker, pinned(worker))
        view = c.get_view(key)
        assert bytes(view) == b"v" * MiB
        # No pin at the worker, no request: the client's pin table holds it.
        assert pinned(worker) == base
        assert worker_stats(worker)["operations"]["get"] == gets
        # Overwritten, the old version is held for the view, bytes intact.
        c.set(key, b"x" * MiB)
        assert shm_held(worker) == 1
        assert bytes(view[:4]) == b"vvvv" and bytes(view[-4:]) == b"vvvv"
        del view
        # Freed by the worker's next sweep (an allocation, or its timer).
        end = time.monotonic() + 3
        while shm_held(worker) and time.monotonic() < end:
            time.sleep(0.01)
        assert shm_held(worker) == 0
    finally:
        c.close()


def test_get_view_release_rides_on_the_next_request(worker, key):
    c = worker.client()
    try:
        # A TTL keeps the value out of the shared index: its view is a pin
        # taken with a GET.
        c.set(key, b"v" * MiB, ttl_second=600)
        base = wait_pinned(worker, pinned(worker))
        view = c.get_view(key)
        assert pinned(worker) == base + 1
        del view  # released by this client, told to the worker with its next request
        time.sleep(0.1)
        assert pinned(worker) == base + 1
        assert c.exist([key]) == [True]
        assert wait_pinned(worker, base) == base
        # A value over 4 MiB is released at once.
        c.set(key, b"w" * (5 * MiB))
        view = c.get_view(key)
        assert pinned(worker) == base + 1
        del view
        assert wait_pinned(worker, base) == base
        # Pins still waiting go with the session when the client closes.
        c.set(key, b"u" * MiB, ttl_second=600)
        view = c.get_view(key)
        del view
        c.close()
        assert wait_pinned(worker, base) == base
    finally:
        c.close()
