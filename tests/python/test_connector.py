"""omni_connectors.YuanrongConnector against a real worker."""

import gc
import subprocess
import sys
import textwrap
import time

import pytest

np = pytest.importorskip("numpy")

from omni_connectors import (  # noqa: E402
    ConnectorSpec,
    OmniConnectorBase,
    OmniConnectorFactory,
    OmniSerializer,
    YuanrongConnector,
)


@pytest.fixture
def conn(worker):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "get_sub_timeout_ms": 500,
                           "unix_socket_dir": worker.sock_dir})
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def rid(key):
    return key.replace(".", "-")


def payload(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "request_id": "r%d" % seed,
        "hidden_states": rng.standard_normal((16, 64)).astype(np.float32),
        "token_ids": np.arange(37, dtype=np.int64),
        "meta": {"finished": False, "stage": 1, "score": 0.25, "names": ["a", "b"]},
        "audio": rng.integers(-32768, 32767, size=4000, dtype=np.int16),
    }


def assert_payload_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert isinstance(b[k], np.ndarray), k
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
            assert np.array_equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_is_an_omni_connector(conn):
    assert isinstance(conn, OmniConnectorBase)
    assert conn.supports_raw_data is True
    assert conn._make_key("req-1", "0", "1") == "req-1:0_1"


def test_put_get_dict_with_arrays(conn, rid):
    data = payload(1)
    ok, size, meta = conn.put("0", "1", rid, data)
    assert ok is True and meta is None
    assert size == len(OmniSerializer.serialize(data))
    got = conn.get("0", "1", rid)
    assert got is not None
    obj, got_size = got
    assert got_size == size
    assert_payload_equal(data, obj)


def test_key_format_and_write_mode(conn, worker, rid):
    conn.put("thinker", "talker", rid, {"x": 1})
    kv = worker.client()
    try:
        raw = kv.get(["%s:thinker_talker" % rid])[0]
        assert OmniSerializer.deserialize(raw) == {"x": 1}
    finally:
        kv.close()
    from datasystem.kv_client import WriteMode

    assert conn.set_param.write_mode == WriteMode.NONE_L2_CACHE_EVICT


def test_stored_bytes_are_omni_serializer_bytes(conn, worker, rid):
    data = payload(2)
    conn.put("0", "1", rid, data)
    kv = worker.client()
    try:
        assert kv.get([rid + ":0_1"])[0] == OmniSerializer.serialize(data)
    finally:
        kv.close()


@pytest.mark.parametrize(
    "raw",
    [b"raw-bytes", bytearray(b"\x01" * 200000),
     np.arange(100, dtype=np.float32).reshape(10, 10),
     np.ones((512, 1024), dtype=np.float16)],
    ids=["bytes", "bytearray", "small-array", "1MiB-array"],
)
def test_raw_path_roundtrip(conn, worker, rid, raw):
    ok, size, meta = conn.put("0", "1", rid, raw)
    assert ok and meta is None
    # The raw path stores exactly what the serializer would.
    kv = worker.client()
    try:
        stored = kv.get([rid + ":0_1"])[0]
    finally:
        kv.close()
    assert stored == OmniSerializer.serialize(raw)
    assert size == len(stored)
    obj, got_size = conn.get("0", "1", rid)
    assert got_size == size
    if isinstance(raw, np.ndarray):
        assert isinstance(obj, np.ndarray) and obj.dtype == raw.dtype
        assert np.array_equal(obj, raw)
    else:
        assert obj == bytes(raw) and isinstance(obj, bytes)


def test_raw_array_view_survives_cleanup(conn, rid):
    a = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)
    conn.put("0", "1", rid, a)
    obj, _ = conn.get("0", "1", rid)
    assert not obj.flags.writeable  # a view of pinned shared memory
    conn.cleanup(rid)
    gc.collect()
    assert np.array_equal(obj, a)


def test_get_missing_times_out_within_margin(worker, rid):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "get_sub_timeout_ms": 300})
    try:
        t0 = time.monotonic()
        assert c.get("0", "1", rid) is None
        dt = time.monotonic() - t0
        assert 0.28 <= dt < 0.3 + 5.0, dt
        h = c.health()
        assert h["timeouts"] == 1 and h["timeout"] == 1 and h["not_found"] == 0
        assert h["gets"] == 0 and h["errors"] == 0
    finally:
        c.close()


def test_get_zero_timeout_does_not_wait(worker, rid):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "get_sub_timeout_ms": 0})
    try:
        t0 = time.monotonic()
        assert c.get("0", "1", rid) is None
        assert time.monotonic() - t0 < 2.0  # no wait; nothing to time out
        h = c.health()
        assert h["not_found"] == 1 and h["timeouts"] == 1 and h["timeout"] == 0
    finally:
        c.close()


def test_get_waits_for_producer_process(worker, conn, rid):
    code = textwrap.dedent("""
        import sys, time
        import numpy as np
        from omni_connectors import YuanrongConnector
        c = YuanrongConnector({"host": sys.argv[1], "port": int(sys.argv[2])})
        time.sleep(0.4)
        ok, size, meta = c.put("0", "1", sys.argv[3], {"arr": np.arange(5), "tag": "late"})
        assert ok
        c.close()
    """)
    child = subprocess.Popen(
        [sys.executable, "-c", code, worker.host, str(worker.port), rid],
        env=worker.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    conn.get_sub_timeout_ms = 15000
    try:
        t0 = time.monotonic()
        got = conn.get("0", "1", rid)
        dt = time.monotonic() - t0
    finally:
        _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err.decode()
    assert got is not None
    obj, _ = got
    assert obj["tag"] == "late" and np.array_equal(obj["arr"], np.arange(5))
    assert dt < 8.0


def test_cleanup_deletes_every_edge(conn, worker, rid):
    conn.put("0", "1", rid, {"a": 1})
    conn.put("1", "2", rid, np.arange(10))
    conn.put("2", "3", rid, b"raw")
    conn.put("0", "1", rid + "_chunk1", {"c": 1})   # a chunk of the same request
    conn.put("0", "1", rid + "0", {"other": True})  # another request sharing a prefix
    keys = [rid + ":0_1", rid + ":1_2", rid + ":2_3", rid + "_chunk1:0_1"]
    other = rid + "0:0_1"
    kv = worker.client()
    try:
        assert kv.exist(keys + [other]) == [True] * 5
        conn.cleanup(rid)
        assert kv.exist(keys) == [False] * 4
        assert kv.exist([other]) == [True]
        conn.cleanup(rid)  # nothing left: harmless
        conn.cleanup("never-seen")
        conn.cleanup(rid + "0")
        assert kv.exist([other]) == [False]
    finally:
        kv.close()
    assert conn.health()["tracked_keys"] == 0


def test_cleanup_on_consumer_deletes_read_keys(worker, rid):
    producer = YuanrongConnector({"host": worker.host, "port": worker.port})
    consumer = YuanrongConnector({"host": worker.host, "port": worker.port})
    kv = worker.client()
    try:
        producer.put("0", "1", rid, {"v": 1})
        assert consumer.get("0", "1", rid)[0] == {"v": 1}
        consumer.cleanup(rid)
        assert kv.exist([rid + ":0_1"]) == [False]
    finally:
        producer.close()
        consumer.close()
        kv.close()


def test_health_counters(conn, rid):
    h0 = conn.health()
    assert h0["status"] == "healthy"
    for k in ("puts", "gets", "bytes_transferred", "errors", "timeouts", "not_found",
              "timeout", "transport", "decode"):
        assert h0[k] == 0, k
    _, s1, _ = conn.put("0", "1", rid, {"a": np.zeros(100)})
    _, s2, _ = conn.put("0", "1", rid + "b", b"xyz")
    conn.get("0", "1", rid)
    conn.get("0", "1", rid + "b")
    conn.get_sub_timeout_ms = 0
    assert conn.get("0", "1", rid + "missing") is None
    ok, size, _ = conn.put("0", "1", rid + "bad", {"obj": object()})
    assert ok is False and size == 0
    ok, _, _ = conn.put("0", "1", "bad key", {"a": 1})  # invalid key byte
    assert ok is False
    h = conn.health()
    assert h["puts"] == 2 and h["gets"] == 2
    assert h["bytes_transferred"] == 2 * (s1 + s2)
    assert h["not_found"] == 1 and h["timeouts"] == 1
    assert h["errors"] == 2 and h["transport"] == 1
    assert h["host"] == conn.host and h["port"] == conn.port


def test_decode_error_counted(conn, worker, rid):
    kv = worker.client()
    try:
        kv.set(rid + ":0_1", b"\xc1\xc1 not msgpack")
    finally:
        kv.close()
    assert conn.get("0", "1", rid) is None
    h = conn.health()
    assert h["decode"] == 1 and h["errors"] == 1


def test_close_is_idempotent_and_context_manager(worker, rid):
    with YuanrongConnector({"host": worker.host, "port": worker.port}) as c:
        assert c.put("0", "1", rid, {"a": 1})[0]
    c.close()
    c.close()
    assert c.put("0", "1", rid, {"a": 1}) == (False, 0, None)
    assert c.get("0", "1", rid) is None
    assert c.health()["status"] == "unhealthy"
    c.cleanup(rid)


def test_unreachable_worker_is_error_at_construction():
    from conftest import WORKER_BIN, free_port

    if not WORKER_BIN.exists():
        pytest.skip("no worker build")
    with pytest.raises(RuntimeError):
        YuanrongConnector({"host": "127.0.0.1", "port": free_port(), "connect_timeout_ms": 500})
    # A failed construction leaves an object whose __del__ / close are safe.
    obj = YuanrongConnector.__new__(YuanrongConnector)
    obj.close()
    del obj
    gc.collect()


def test_config_defaults(worker, monkeypatch):
    import omni_connectors.yuanrong_connector as yc

    seen = {}

    class FakeClient:
        def __init__(self, host, port, **kw):
            seen["addr"] = (host, port)

        def init(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(yc, "KVClient", FakeClient)
    c = yc.YuanrongConnector({})
    assert seen["addr"] == ("127.0.0.1", 35001)
    assert c.get_sub_timeout_ms == 1000
    c2 = yc.YuanrongConnector({"host": "127.0.0.2", "port": "31501", "get_sub_timeout_ms": -5})
    assert seen["addr"] == ("127.0.0.2", 31501) and c2.get_sub_timeout_ms == 0
    c.close()
    c2.close()


def test_factory(worker):
    with pytest.raises(ValueError) as ei:
        OmniConnectorFactory.create_connector("NoSuchConnector", {})
    assert "YuanrongConnector" in str(ei.value)
    with pytest.raises(ValueError):
        OmniConnectorFactory.register_connector("YuanrongConnector", YuanrongConnector)
    c = OmniConnectorFactory.create_connector(
        ConnectorSpec("YuanrongConnector", {"host": worker.host, "port": str(worker.port)})
    )
    try:
        assert isinstance(c, YuanrongConnector)
    finally:
        c.close()


def test_dict_arrays_are_zero_copy_views(conn, rid):
    big = np.random.default_rng(4).standard_normal((512, 512)).astype(np.float32)
    conn.put("0", "1", rid, {"hidden": big, "id": rid})
    obj, _ = conn.get("0", "1", rid)
    assert obj["id"] == rid and np.array_equal(obj["hidden"], big)
    assert not obj["hidden"].flags.writeable  # views the pinned arena buffer
    conn.cleanup(rid)
    assert np.array_equal(obj["hidden"], big)


def test_zero_copy_off_gives_private_copies(worker, rid):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "zero_copy": False})
    try:
        a = np.arange(100000, dtype=np.float64)
        c.put("0", "1", rid, {"a": a})
        c.put("0", "1", rid + "raw", a)
        obj, _ = c.get("0", "1", rid)
        raw, _ = c.get("0", "1", rid + "raw")
        assert np.array_equal(obj["a"], a) and np.array_equal(raw, a)
        # Backed by private bytes, not by the worker's shared memory.
        def owner(arr):
            while isinstance(arr, np.ndarray) and arr.base is not None:
                arr = arr.base
            return arr

        assert isinstance(owner(obj["a"]), bytes) and isinstance(owner(raw), bytes)
        c.cleanup(rid)
        c.cleanup(rid + "raw")
    finally:
        c.close()


def test_large_dict_payload_roundtrip(conn, rid):
    payload_ = {"hidden": np.ones((4096, 2048), dtype=np.float32),  # 32 MiB
                "ids": list(range(1000)), "text": "t" * 10000}
    ok, size, _ = conn.put("0", "1", rid, payload_)
    assert ok and size > 32 << 20
    obj, got = conn.get("0", "1", rid)
    assert got == size and obj["ids"] == payload_["ids"] and obj["text"] == payload_["text"]
    assert np.array_equal(obj["hidden"], payload_["hidden"])
    conn.cleanup(rid)


def test_command_line_put_then_get(worker, rid):
    import json as _json

    env = worker.env()
    base = [sys.executable, "-m", "omni_connectors"]
    common = ["--host", worker.host, "--port", str(worker.port), "--key", rid]
    put = subprocess.run(base + ["put"] + common + ["--ndarray", "float32:8x4", "--seed", "3"],
                         env=env, capture_output=True, timeout=60)
    assert put.returncode == 0, put.stderr.decode()
    sent = _json.loads(put.stdout)
    got = subprocess.run(base + ["get"] + common, env=env, capture_output=True, timeout=60)
    assert got.returncode == 0, got.stderr.decode()
    recv = _json.loads(got.stdout)
    assert recv["stored_sha256"] == sent["stored_sha256"]
    assert recv["arrays"] == sent["arrays"] and recv["arrays"][0]["shape"] == [8, 4]
    missing = subprocess.run(base + ["get"] + common[:-1] + [rid + "-none", "--timeout-ms", "0"],
                             env=env, capture_output=True, timeout=60)
    assert missing.returncode == 1


def test_tracking_is_bounded(worker, rid):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "max_tracked_requests": 3})
    try:
        for i in range(5):
            assert c.put("0", "1", "%s-%d" % (rid, i), b"v")[0]
        assert c.health()["tracked_keys"] == 3
        for i in range(5):
            c.cleanup("%s-%d" % (rid, i))
        kv = worker.client()
        try:
            # The two forgotten requests are left to eviction; the rest are gone.
            assert kv.exist(["%s-%d:0_1" % (rid, i) for i in range(5)]) == [True, True, False,
                                                                            False, False]
            kv.delete(["%s-%d:0_1" % (rid, i) for i in range(2)])
        finally:
            kv.close()
    finally:
        c.close()
