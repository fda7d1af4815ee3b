"""Black-box tests of yr.datasystem.kv_client against a real worker."""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from yr.datasystem import (
    Buffer,
    DsError,
    ExistenceOpt,
    KVClient,
    SetParam,
    Status,
    WriteMode,
)

K_INVALID = 2
K_NOT_FOUND = 3
K_OUT_OF_MEMORY = 6
K_OC_KEY_ALREADY_EXIST = 2004


def codes_of(excinfo):
    return getattr(excinfo.value, "code", None)


# ---------------------------------------------------------------------------
# Module surface (no worker needed)


def test_exports_and_enums():
    import datasystem
    import datasystem.kv_client as dk
    import yr.datasystem as yd
    import yr.datasystem.kv_client as yk

    for name in ("KVClient", "SetParam", "WriteMode", "ExistenceOpt"):
        assert getattr(dk, name) is getattr(yk, name)
        assert getattr(datasystem, name) is getattr(yd, name)
    assert [int(m) for m in WriteMode] == [0, 1, 2, 3, 4]
    assert WriteMode.NONE_L2_CACHE == 0 and WriteMode.WRITE_THROUGH_L2_CACHE == 1
    assert WriteMode.WRITE_BACK_L2_CACHE == 2 and WriteMode.NONE_L2_CACHE_EVICT == 3
    assert WriteMode.WRITE_BACK_L2_CACHE_EVICT == 4
    assert ExistenceOpt.NONE == 0 and ExistenceOpt.NX == 1
    p = SetParam()
    assert p.write_mode == WriteMode.NONE_L2_CACHE and p.ttl_second == 0
    assert p.existence == ExistenceOpt.NONE
    p.write_mode = WriteMode.NONE_L2_CACHE_EVICT
    assert p.write_mode is WriteMode.NONE_L2_CACHE_EVICT
    assert issubclass(DsError, RuntimeError)


def test_constructor_type_errors():
    with pytest.raises(TypeError):
        KVClient(host=1, port=1)
    with pytest.raises(TypeError):
        KVClient("127.0.0.1", "31501")
    with pytest.raises(TypeError):
        KVClient("127.0.0.1", 1, connect_timeout_ms="9000")
    with pytest.raises(TypeError):
        KVClient("127.0.0.1", 1, token=None)
    with pytest.raises(TypeError):
        KVClient("127.0.0.1", 1, req_timeout_ms=1.5)


def test_uninitialized_client_raises():
    c = KVClient("127.0.0.1", 1)
    with pytest.raises(RuntimeError) as ei:
        c.set("k", b"v")
    assert codes_of(ei) == 8
    assert c.health_check().is_error()
    c.close()
    c.close()


def test_missing_address_raises(monkeypatch):
    monkeypatch.delenv("DATASYSTEM_HOST", raising=False)
    monkeypatch.delenv("DATASYSTEM_PORT", raising=False)
    with pytest.raises(RuntimeError) as ei:
        KVClient().init()
    assert codes_of(ei) == K_INVALID


def test_unreachable_worker_fails_promptly(worker):
    from conftest import free_port

    c = KVClient("127.0.0.1", free_port(), connect_timeout_ms=500, transport="tcp")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as ei:
        c.init()
    assert time.monotonic() - t0 < 5.0
    assert isinstance(ei.value.code, int) and ei.value.code != 0


# ---------------------------------------------------------------------------
# Connection


def test_init_with_env_fallback(worker, monkeypatch, key):
    monkeypatch.setenv("DATASYSTEM_HOST", worker.host)
    monkeypatch.setenv("DATASYSTEM_PORT", str(worker.port))
    c = KVClient()
    c.init()
    c.init()  # a second init is harmless
    try:
        c.set(key, b"env")
        assert c.get([key]) == [b"env"]
    finally:
        c.close()


def test_health_and_local(client):
    st = client.health_check()
    assert isinstance(st, Status) and st.is_ok() and not st.is_error()
    assert client.is_local


def test_context_manager_and_close(worker, key):
    with KVClient(worker.host, worker.port, unix_socket_dir=worker.sock_dir) as c:
        c.set(key, b"x")
    with pytest.raises(RuntimeError):
        c.get([key])
    c.close()


# ---------------------------------------------------------------------------
# set / get


@pytest.mark.parametrize(
    "val, expect",
    [
        (b"bytes-value", b"bytes-value"),
        (bytearray(b"bytearray-value"), b"bytearray-value"),
        (memoryview(b"memoryview-value"), b"memoryview-value"),
        ("str-value \u00e9", "str-value \u00e9".encode()),
        (memoryview(b"0123456789")[::2], b"02468"),  # non-contiguous: packed first
        (b"\x00\xff" * 1000, b"\x00\xff" * 1000),
    ],
)
def test_set_get_value_types(client, key, val, expect):
    client.set(key, val)
    assert client.get([key]) == [expect]
    assert isinstance(client.get([key])[0], bytes)


def test_get_convert_to_str(client, key):
    client.set(key, "h\u00e9llo")
    assert client.get([key], True) == ["h\u00e9llo"]
    assert client.get([key], convert_to_str=False) == ["h\u00e9llo".encode()]


def test_set_numpy_array_via_memoryview(client, key):
    np = pytest.importorskip("numpy")
    a = np.arange(1000, dtype=np.float32)
    client.set(key, memoryview(a))
    assert client.get([key])[0] == a.tobytes()


def test_overwrite(client, key):
    client.set(key, b"one")
    client.set(key, b"two-longer")
    assert client.get([key]) == [b"two-longer"]


def test_get_some_missing_gives_none(client, key):
    client.set(key, b"here")
    out = client.get([key + ".missing", key, key + ".missing2"])
    assert out == [None, b"here", None]


def test_get_all_missing_raises_not_found(client, key):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as ei:
        client.get([key])
    assert codes_of(ei) == K_NOT_FOUND
    assert time.monotonic() - t0 < 2.0  # no wait; nothing to time out


def test_get_timeout_returns_promptly(client, key):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as ei:
        client.get([key], False, 300)
    dt = time.monotonic() - t0
    assert codes_of(ei) == K_NOT_FOUND
    assert 0.28 <= dt < 0.3 + 5.0, dt


def test_get_partial_after_timeout(client, key):
    client.set(key, b"present")
    t0 = time.monotonic()
    out = client.get([key, key + ".never"], False, 250)
    dt = time.monotonic() - t0
    assert out == [b"present", None]
    assert 0.23 <= dt < 0.25 + 5.0, dt


def test_get_existing_key_with_timeout_does_not_wait(client, key):
    client.set(key, b"v")
    t0 = time.monotonic()
    assert client.get([key], False, 5000) == [b"v"]
    assert time.monotonic() - t0 < 2.5  # not the 5 s wait


def _run_child(worker, code, *args):
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=worker.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


_SETTER = """
    import sys, time
    from yr.datasystem import KVClient
    c = KVClient()          # host and port from DATASYSTEM_HOST / DATASYSTEM_PORT
    c.init()
    time.sleep(float(sys.argv[2]))
    for k in sys.argv[1].split(","):
        c.set(k, ("from-child:" + k).encode())
    print("done", flush=True)
"""


def test_subscribe_get_woken_by_other_process(worker, client, key):
    child = _run_child(worker, _SETTER, key, "0.4")
    try:
        t0 = time.monotonic()
        out = client.get([key], False, 10000)
        dt = time.monotonic() - t0
    finally:
        stdout, stderr = child.communicate(timeout=30)
    assert child.returncode == 0, stderr.decode()
    assert out == [("from-child:" + key).encode()]
    # Woken by the publish (~0.4 s plus child start-up), long before the 10 s timeout.
    assert dt < 6.0, dt


def test_subscribe_get_many_keys_waits_for_all(worker, client, key):
    keys = [key + ".%d" % i for i in range(3)]
    client.set(keys[0], ("from-child:" + keys[0]).encode())
    child = _run_child(worker, _SETTER, ",".join(keys[1:]), "0.3")
    try:
        out = client.get(keys, False, 10000)
    finally:
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 0, stderr.decode()
    assert out == [("from-child:" + k).encode() for k in keys]


def test_get_buffers_subscribe_woken(worker, client, key):
    child = _run_child(worker, _SETTER, key, "0.3")
    try:
        views = client.get_buffers([key], 10000)
    finally:
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 0, stderr.decode()
    assert bytes(views[0]) == ("from-child:" + key).encode()


def test_blocking_get_releases_gil(client, key):
    done = threading.Event()
    result = {}

    def waiter():
        try:
            client.get([key], False, 800)
        except RuntimeError as e:
            result["code"] = e.code
        done.set()

    t = threading.Thread(target=waiter)
    t.start()
    spins = 0
    t0 = time.monotonic()
    while not done.is_set() and time.monotonic() - t0 < 5:
        spins += 1
    t.join()
    assert result.get("code") == K_NOT_FOUND
    # The main thread kept running Python while the other waited in C.
    assert spins > 10000


def test_threads_share_a_client(client, key):
    errors = []

    def work(i):
        try:
            for j in range(50):
                k = "%s.%d.%d" % (key, i, j)
                v = os.urandom(100 + j)
                client.set(k, v)
                assert client.get([k]) == [v]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_large_value_roundtrip(client, key):
    val = os.urandom(1024) * (32 * 1024)  # 32 MiB
    client.set(key, val)
    assert client.get([key])[0] == val
    view = client.get_buffers([key])[0]
    assert len(view) == len(val) and view == val
    client.delete([key])


def test_tcp_client_interoperates(worker, client, key):
    tcp = worker.client(transport="tcp")
    try:
        assert not tcp.is_local
        tcp.set(key, b"over-tcp")
        assert client.get([key]) == [b"over-tcp"]
        client.set(key + ".b", b"x" * 200000)
        assert tcp.get([key + ".b"]) == [b"x" * 200000]
        view = tcp.get_buffers([key + ".b"])[0]
        assert bytes(view) == b"x" * 200000
    finally:
        tcp.close()


# ---------------------------------------------------------------------------
# set_value, generate_key, mset


def test_generate_key_and_set_value(client):
    a, b = client.generate_key(), client.generate_key()
    assert a and b and a != b
    p = client.generate_key("my_prefix")
    assert p.startswith("my_prefix")
    k = client.set_value(b"auto-keyed")
    assert isinstance(k, str) and client.get([k]) == [b"auto-keyed"]
    k2 = client.set_value("s", WriteMode.NONE_L2_CACHE_EVICT, 0)
    assert client.get([k2], True) == ["s"]
    with pytest.raises(TypeError):
        client.generate_key(5)


def test_mset_roundtrip(client, key):
    keys = [key + ".%d" % i for i in range(5)]
    vals = [b"b", bytearray(b"ba"), memoryview(b"mv"), "str", b"z" * 70000]
    assert client.mset(keys, vals) == []
    assert client.get(keys) == [b"b", b"ba", b"mv", b"str", b"z" * 70000]


def test_mset_nx_keeps_existing_without_failing(client, key):
    # As in Yuanrong: existing keys keep their values and are not failed keys.
    keys = [key + ".a", key + ".b"]
    client.set(keys[0], b"old")
    failed = client.mset(keys, [b"new", b"new"], WriteMode.NONE_L2_CACHE, 0, ExistenceOpt.NX)
    assert failed == []
    assert client.get(keys) == [b"old", b"new"]
    assert client.mset(keys, [b"x", b"y"], existence_opt=ExistenceOpt.NX) == []
    assert client.get(keys) == [b"old", b"new"]


def test_mset_argument_errors(client, key):
    with pytest.raises(RuntimeError) as ei:
        client.mset([key], [b"a", b"b"])
    assert codes_of(ei) == K_INVALID
    with pytest.raises(TypeError):
        client.mset(key, [b"a"])
    with pytest.raises(TypeError):
        client.mset([key], b"a")
    with pytest.raises(TypeError):
        client.mset([key], [1])
    with pytest.raises(TypeError):
        client.mset([key], [b"a"], existence_opt="NX")


def test_set_nx(client, key):
    client.set(key, b"first")
    # As in Yuanrong: NX on an existing key succeeds and keeps the old value.
    client.set(key, b"second", existence=ExistenceOpt.NX)
    assert client.get([key]) == [b"first"]
    p = SetParam()
    p.existence = ExistenceOpt.NX
    client.set(key, b"third", p)
    assert client.get([key]) == [b"first"]
    client.set(key + ".new", b"ok", existence=ExistenceOpt.NX)
    assert client.get([key + ".new"]) == [b"ok"]


# ---------------------------------------------------------------------------
# TTL, expire


def _wait_gone(client, key, limit):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if client.exist([key]) == [False]:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def test_ttl_expires(client, key):
    client.set(key, b"short-lived", WriteMode.NONE_L2_CACHE, 1)
    assert client.exist([key]) == [True]
    gone = _wait_gone(client, key, 4.0)
    assert gone is not None, "key with ttl 1 s still there after 4 s"
    with pytest.raises(RuntimeError) as ei:
        client.get([key])
    assert codes_of(ei) == K_NOT_FOUND


def test_ttl_zero_keeps(client, key):
    client.set(key, b"forever", ttl_second=0)
    time.sleep(1.2)
    assert client.exist([key]) == [True]


def test_expire(client, key):
    keys = [key + ".a", key + ".b"]
    client.set(keys[0], b"a")
    failed = client.expire([keys[0], keys[1]], 1)
    assert failed == [keys[1]]
    assert _wait_gone(client, keys[0], 4.0) is not None
    with pytest.raises(RuntimeError) as ei:
        client.expire([keys[1]], 5)
    assert codes_of(ei) == K_NOT_FOUND


def test_expire_zero_removes_ttl(client, key):
    client.set(key, b"v", ttl_second=1)
    assert client.expire([key], 0) == []
    time.sleep(1.6)
    assert client.exist([key]) == [True]


# ---------------------------------------------------------------------------
# delete / exist


def test_delete_and_exist(client, key):
    keys = [key + ".%d" % i for i in range(3)]
    client.mset(keys[:2], [b"1", b"2"])
    assert client.exist(keys) == [True, True, False]
    assert client.delete(keys) == []  # a missing key is not a failure
    assert client.exist(keys) == [False, False, False]
    assert client.delete([key + ".never"]) == []


def test_exist_many(client, key):
    client.set(key, b"v")
    keys = [key] + ["%s.none.%d" % (key, i) for i in range(20000)]
    out = client.exist(keys)
    assert out[0] is True and not any(out[1:]) and len(out) == len(keys)


def test_batch_limits(client, key):
    keys = ["%s.%d" % (key, i) for i in range(10001)]
    with pytest.raises(RuntimeError) as ei:
        client.get(keys)
    assert codes_of(ei) == K_INVALID
    with pytest.raises(RuntimeError) as ei:
        client.exist(keys * 10)
    assert codes_of(ei) == K_INVALID


def test_query_size(client, key):
    client.set(key, b"x" * 12345)
    assert client.query_size([key, key + ".none"]) == [12345, None]


# ---------------------------------------------------------------------------
# Bad keys and values, wrong types


BAD_KEYS = ["", "a b", "tab\tkey", "slash/key", "caf\u00e9", "nul\0key", "q?", "x" * 1025, "brace{", "quote'"]


@pytest.mark.parametrize("bad", BAD_KEYS, ids=repr)
def test_bad_keys_are_invalid(client, bad):
    for call in (
        lambda: client.set(bad, b"v"),
        lambda: client.get([bad]),
        lambda: client.get_buffers([bad]),
        lambda: client.delete([bad]),
        lambda: client.exist([bad]),
        lambda: client.mset([bad], [b"v"]),
    ):
        with pytest.raises(RuntimeError) as ei:
            call()
        assert codes_of(ei) == K_INVALID, (bad, ei.value)
        assert str(ei.value)


def test_every_allowed_key_character(client):
    key = "azAZ09.-_!@#%^*()+=:;"
    client.set(key, b"ok")
    assert client.get([key]) == [b"ok"]
    long_key = "k" * 1024
    client.set(long_key, b"long")
    assert client.get([long_key]) == [b"long"]
    client.delete([key, long_key])


def test_invalid_key_message_names_the_byte(client):
    with pytest.raises(RuntimeError) as ei:
        client.set("a b", b"v")
    assert "0x20" in str(ei.value) or "' '" in str(ei.value)


def test_empty_value_is_invalid(client, key):
    for v in (b"", "", bytearray()):
        with pytest.raises(RuntimeError) as ei:
            client.set(key, v)
        assert codes_of(ei) == K_INVALID


def test_empty_key_list_is_invalid(client):
    for call in (client.get, client.delete, client.exist, client.get_buffers):
        with pytest.raises(RuntimeError) as ei:
            call([])
        assert codes_of(ei) == K_INVALID


def test_l2_write_modes_are_cached(client, key):
    for mode in (
        WriteMode.WRITE_THROUGH_L2_CACHE,
        WriteMode.WRITE_BACK_L2_CACHE,
        WriteMode.WRITE_BACK_L2_CACHE_EVICT,
    ):
        client.set(key, b"v%d" % mode, mode)
        assert client.get([key]) == [b"v%d" % mode]


@pytest.mark.parametrize(
    "call",
    [
        lambda c, k: c.set(1, b"v"),
        lambda c, k: c.set(b"bytes-key", b"v"),
        lambda c, k: c.set(k, 5),
        lambda c, k: c.set(k, None),
        lambda c, k: c.set(k, [1, 2]),
        lambda c, k: c.set(k, b"v", "NONE_L2_CACHE"),
        lambda c, k: c.set(k, b"v", None),
        lambda c, k: c.set(k, b"v", WriteMode.NONE_L2_CACHE, "1"),
        lambda c, k: c.set(k, b"v", WriteMode.NONE_L2_CACHE, 1.0),
        lambda c, k: c.get(k),
        lambda c, k: c.get([k, 2]),
        lambda c, k: c.get([k], "yes"),
        lambda c, k: c.get([k], False, 1.5),
        lambda c, k: c.get_buffers(k),
        lambda c, k: c.get_buffers([k], "10"),
        lambda c, k: c.delete(k),
        lambda c, k: c.exist(k),
        lambda c, k: c.exist(None),
        lambda c, k: c.expire([k], "1"),
        lambda c, k: c.expire(k, 1),
        lambda c, k: c.set_value(123),
        lambda c, k: c.mcreate(k, [1]),
        lambda c, k: c.mcreate([k], [1.5]),
        lambda c, k: c.mset_buffer([b"not a buffer"]),
        lambda c, k: c.mset_buffer(None),
    ],
)
def test_wrong_types_raise_type_error(client, key, call):
    with pytest.raises(TypeError):
        call(client, key)


def test_out_of_range_numbers(client, key):
    with pytest.raises(ValueError):
        client.set(key, b"v", WriteMode.NONE_L2_CACHE, -1)
    with pytest.raises(ValueError):
        client.get([key], False, -5)
    with pytest.raises(ValueError):
        client.set(key, b"v", 9)


def test_int_write_mode_accepted(client, key):
    client.set(key, b"v", 3)
    assert client.get([key]) == [b"v"]


# ---------------------------------------------------------------------------
# Zero-copy reads


def test_get_buffers_views(client, key):
    client.set(key, b"zero-copy")
    views = client.get_buffers([key, key + ".missing"])
    assert views[1] is None
    v = views[0]
    # Yuanrong's StateValueBuffer: GetSize, ImmutableData; it also reads like its view.
    assert v.GetSize() == 9 and v.readonly
    mv = v.ImmutableData()
    assert isinstance(mv, memoryview) and mv.readonly and mv.format == "B"
    assert bytes(v) == b"zero-copy" and len(v) == 9 and v == b"zero-copy" and v[:4] == b"zero"
    with pytest.raises(TypeError):
        mv[0] = 1
    with pytest.raises(RuntimeError) as ei:
        client.get_buffers([key + ".missing"])
    assert codes_of(ei) == K_NOT_FOUND


def test_get_buffers_timeout_prompt(client, key):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        client.get_buffers([key], 200)
    assert 0.18 <= time.monotonic() - t0 < 1.2


def test_get_buffers_is_zero_copy(client, key):
    np = pytest.importorskip("numpy")
    client.set(key, b"s" * 100000)
    a, b = client.get_buffers([key]), client.get_buffers([key])
    addr_a = np.frombuffer(a[0].ImmutableData(), dtype=np.uint8).ctypes.data
    addr_b = np.frombuffer(b[0].ImmutableData(), dtype=np.uint8).ctypes.data
    # Two reads of one version see the same memory: the worker's arena.
    assert addr_a == addr_b


def test_view_survives_overwrite_and_delete(client, key):
    np = pytest.importorskip("numpy")
    original = os.urandom(1 << 20)
    client.set(key, original)
    view = client.get_buffers([key])[0].ImmutableData()
    arr = np.frombuffer(view, dtype=np.uint8)
    sub = view[100:200]
    del view
    gc.collect()
    client.set(key, b"\x00" * (1 << 20))  # overwrite: a new version
    assert arr.tobytes() == original
    client.delete([key])
    # Churn the arena so freed memory is reused, then check the pinned bytes.
    for i in range(20):
        client.set("%s.churn.%d" % (key, i), b"\xee" * (1 << 20))
    assert arr.tobytes() == original
    assert bytes(sub) == original[100:200]
    client.delete(["%s.churn.%d" % (key, i) for i in range(20)])


def test_pin_released_when_views_dropped(fresh_worker, key):
    w = fresh_worker(shm_mb=64)
    c = w.client()
    try:
        big = 40 << 20
        c.set(key + ".a", b"a" * big)
        view = c.get_buffers([key + ".a"])[0]
        c.delete([key + ".a"])
        # The deleted version is still pinned: a second 40 MiB value cannot fit.
        with pytest.raises(RuntimeError) as ei:
            c.set(key + ".b", b"b" * big)
        assert codes_of(ei) == K_OUT_OF_MEMORY
        assert view[:1] == b"a" and view[-1:] == b"a"
        del view
        gc.collect()
        deadline = time.monotonic() + 3
        while True:
            try:
                c.set(key + ".b", b"b" * big)
                break
            except RuntimeError as e:
                if e.code != K_OUT_OF_MEMORY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        assert c.get_buffers([key + ".b"])[0][:1] == b"b"
    finally:
        c.close()


def test_views_outlive_client_close(worker, key):
    c = worker.client()
    c.set(key, b"outlives")
    view = c.get_buffers([key])[0]
    c.close()
    assert bytes(view) == b"outlives"


# ---------------------------------------------------------------------------
# Zero-copy writes


def test_mcreate_mset_buffer(client, key):
    keys = [key + ".a", key + ".b"]
    bufs = client.mcreate(keys, [5, 100000])
    assert all(isinstance(b, Buffer) for b in bufs)
    assert [b.get_size() for b in bufs] == [5, 100000]
    assert [b.key for b in bufs] == keys
    mv = bufs[0].mutable_data()
    assert not mv.readonly and len(mv) == 5
    mv[:] = b"hello"
    bufs[1].memory_copy(b"\x07" * 100000)
    assert client.exist(keys) == [False, False]  # invisible until published
    client.mset_buffer(bufs)
    assert client.get(keys) == [b"hello", b"\x07" * 100000]
    assert bufs[0].published
    # A published buffer's writable view is of the key's next version
    # (object_client's mutable objects): invisible until published again.
    bufs[0].mutable_data()[:1] = b"j"
    assert client.get([keys[0]]) == [b"hello"]
    assert bytes(bufs[0].immutable_data()) == b"jello"
    bufs[0].publish()
    assert client.get([keys[0]]) == [b"jello"]
    for b in bufs:
        b.release()


def test_mcreate_release_unpublished_discards(client, key):
    buf = client.mcreate([key], [10])[0]
    buf.memory_copy(b"0123456789")
    buf.release()
    assert client.exist([key]) == [False]
    with pytest.raises(RuntimeError):
        buf.mutable_data()


def test_mcreate_numpy_fill_and_publish(client, key):
    np = pytest.importorskip("numpy")
    src = np.arange(250000, dtype=np.float32)
    buf = client.mcreate([key], [src.nbytes], WriteMode.NONE_L2_CACHE_EVICT)[0]
    dst = np.frombuffer(buf.mutable_data(), dtype=np.float32)
    dst[:] = src
    del dst
    buf.publish()
    out = np.frombuffer(client.get_buffers([key])[0].ImmutableData(), dtype=np.float32)
    assert np.array_equal(out, src)


def test_memory_copy_bounds(client, key):
    buf = client.mcreate([key], [4])[0]
    with pytest.raises(RuntimeError) as ei:
        buf.memory_copy(b"too long")
    assert codes_of(ei) == K_INVALID
    with pytest.raises(TypeError):
        buf.memory_copy(1234)
    buf.release()


def test_close_waits_for_calls_in_flight(worker, key):
    c = worker.client()
    result = {}

    def waiter():
        try:
            c.get([key], False, 600)
        except RuntimeError as e:
            result["code"] = e.code

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.15)
    t0 = time.monotonic()
    c.close()  # must not free the client under the waiting get
    waited = time.monotonic() - t0
    t.join()
    assert result.get("code") == K_NOT_FOUND
    assert 0.2 < waited < 2.0, waited
    with pytest.raises(RuntimeError):
        c.get([key])


def test_forked_child_cannot_use_parent_client(client, key):
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    client.set(key, b"parent")
    view = client.get_buffers([key])[0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the inherited client refuses; dropping the view releases nothing
        code = 0
        try:
            client.get([key])
            code = 1
        except RuntimeError:
            pass
        except BaseException:
            code = 2
        del view
        gc.collect()
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 1) == b"\x00"
    os.close(r)
    # The parent's client and pin are untouched by the child.
    assert bytes(view) == b"parent"
    assert client.get([key]) == [b"parent"]


def test_eviction_spares_pinned_objects(fresh_worker, key):
    w = fresh_worker(shm_mb=64)
    c = w.client()
    try:
        first = os.urandom(1 << 20) * 8  # 8 MiB
        c.set(key + ".0", first, WriteMode.NONE_L2_CACHE_EVICT)
        view = c.get_buffers([key + ".0"])[0]
        # Far more volatile data than the arena holds: older objects are evicted
        # to make room, but never one a reader still pins.
        for i in range(1, 20):
            c.set("%s.%d" % (key, i), bytes([i]) * (8 << 20), WriteMode.NONE_L2_CACHE_EVICT)
        present = c.exist(["%s.%d" % (key, i) for i in range(20)])
        assert present[19] and not all(present[1:19])
        assert view == first
    finally:
        c.close()


def test_worker_gone_gives_runtime_error_and_views_survive(fresh_worker, key):
    w = fresh_worker(shm_mb=64)
    c = w.client()
    try:
        c.set(key, b"before the crash" * 1000)
        view = c.get_buffers([key])[0]
        w.stop()
        t0 = time.monotonic()
        with pytest.raises(RuntimeError) as ei:
            c.set(key + ".after", b"x")
        assert time.monotonic() - t0 < 5
        assert ei.value.code in (7, 21, 23, 24, 1001, 1002), ei.value
        assert not c.health_check().is_ok()
        # The mapping of the arena outlives the worker: the pinned bytes read fine.
        assert bytes(view) == b"before the crash" * 1000
    finally:
        c.close()
