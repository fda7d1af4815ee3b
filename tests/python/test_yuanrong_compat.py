"""Code written for Yuanrong Datasystem's Python SDK runs on our worker.

The tests below are written the way Yuanrong's users (and Yuanrong's own
Python tests) write them: Yuanrong's imports (``yr.datasystem.kv_client``,
``yr.datasystem.object_client``, ``yr.datasystem.util``), ``KVClient(host,
port)`` + ``init()``, and assertions on Yuanrong's exception types and texts
(``assertRaisesRegex(RuntimeError, "Cannot get objects from worker", ...)``).
Each one checks a behaviour this package did not have before it followed
Yuanrong's layout and messages. They run against the session's real worker
(conftest.py).
"""

import os
import random
import re
import subprocess
import sys
import textwrap
import threading
import unittest

import pytest

from yr.datasystem.kv_client import ExistenceOpt, KVClient, ReadOnlyBuffer, ReadParam, SetParam
from yr.datasystem.object_client import (
    Buffer,
    CacheType,
    ConsistencyType,
    ObjectClient,
    WriteMode,
)
from yr.datasystem.util import Context, Status

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def random_str(slen=10):
    seed = "1234567890abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!@#%^*()_+=-"
    return "".join(random.choice(seed) for _ in range(slen))


@pytest.fixture
def tc():
    """unittest's assertions, as Yuanrong's tests use them."""
    case = unittest.TestCase()
    case.maxDiff = None
    return case


@pytest.fixture
def yclient(worker):
    """A client made the way Yuanrong's users make one: host and port, then init()."""
    client = KVClient(worker.host, worker.port)
    client.init()
    yield client
    Context.set_trace_id("")
    client.close()


# ---------------------------------------------------------------------------
# Module layout and lazy exports


def test_module_layout_matches_yuanrong():
    import datasystem
    import datasystem.object_client
    import datasystem.util
    import yr.datasystem
    import yr.datasystem.kv_client as kv
    import yr.datasystem.object_client as oc
    import yr.datasystem.util as util

    # Yuanrong's kv_client imports WriteMode and CacheType from object_client.
    assert kv.WriteMode is oc.WriteMode and kv.CacheType is oc.CacheType
    assert yr.datasystem.WriteMode is oc.WriteMode
    assert yr.datasystem.Buffer is oc.Buffer and yr.datasystem.ObjectClient is oc.ObjectClient
    assert yr.datasystem.ConsistencyType is oc.ConsistencyType
    assert yr.datasystem.KVClient is kv.KVClient
    assert yr.datasystem.Status is util.Status and yr.datasystem.Context is util.Context
    for name in ("Buffer", "ConsistencyType", "ObjectClient", "KVClient", "Status", "WriteMode", "Context"):
        assert name in yr.datasystem.__all__
    # The alias package: the very same modules and objects.
    assert datasystem.object_client is oc and datasystem.util is util
    assert datasystem.KVClient is kv.KVClient and datasystem.Context is util.Context
    # Yuanrong's names and values.
    assert [m.name for m in WriteMode] == [
        "NONE_L2_CACHE",
        "WRITE_THROUGH_L2_CACHE",
        "WRITE_BACK_L2_CACHE",
        "NONE_L2_CACHE_EVICT",
        "WRITE_BACK_L2_CACHE_EVICT",
    ]
    assert CacheType.MEMEORY is CacheType.MEMORY and CacheType.DISK.value == 1
    assert {m.name for m in ConsistencyType} == {"PRAM", "CAUSAL"}
    assert ExistenceOpt.NONE.value == 0 and ExistenceOpt.NX.value == 1
    param = SetParam()
    assert (param.write_mode, param.ttl_second, param.existence, param.cache_type) == (
        WriteMode.NONE_L2_CACHE,
        0,
        ExistenceOpt.NONE,
        CacheType.MEMEORY,
    )
    rp = ReadParam(key="k", offset=3, size=4)
    assert rp._fields == ("key", "offset", "size") and (rp.key, rp.offset, rp.size) == ("k", 3, 4)


def test_top_level_exports_are_lazy():
    code = textwrap.dedent(
        """
        import sys
        import yr.datasystem as ds
        assert "KVClient" not in vars(ds), "KVClient bound at import"
        assert "yr.datasystem.kv_client" not in sys.modules
        assert "yr.datasystem._native" not in sys.modules
        from yr.datasystem import KVClient, WriteMode, Context
        assert "yr.datasystem.kv_client" in sys.modules
        assert vars(ds)["KVClient"] is KVClient
        assert WriteMode.__module__ == "yr.datasystem.object_client"
        try:
            ds.NoSuchName
        except AttributeError as e:
            assert "has no attribute NoSuchName" in str(e)
        else:
            raise SystemExit("no AttributeError")
        print("lazy-ok")
        """
    )
    env = dict(os.environ)
    python_dir = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    env["PYTHONPATH"] = os.pathsep.join([python_dir] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "lazy-ok" in out.stdout


# ---------------------------------------------------------------------------
# Yuanrong's messages


def test_state_set_failed(yclient, tc):
    key2 = random_str()
    tc.assertRaisesRegex(RuntimeError, "The objectKey should not be empty.", yclient.set, "", random_str(20))
    tc.assertRaisesRegex(
        RuntimeError, "The dataSize value should be bigger than zero.", yclient.set, key2, ""
    )
    with pytest.raises(RuntimeError) as ei:
        yclient.set("", "v")
    assert str(ei.value) == "code: [Invalid parameter], msg: [The objectKey should not be empty.]"


def test_state_get_failed(yclient, tc):
    key1, val1, key2 = random_str(), random_str(), random_str()
    yclient.set(key1, val1)
    tc.assertEqual(yclient.get([key1], True), [val1])
    tc.assertRaisesRegex(RuntimeError, "Cannot get objects from worker", yclient.get, [key2], False, 5)
    tc.assertEqual(yclient.get([key1, key2], True), [val1, None])
    tc.assertEqual(yclient.get([key1, key2], False), [val1.encode(), None])
    with pytest.raises(RuntimeError) as ei:
        yclient.get([key2, key2 + "x"])
    assert str(ei.value) == "code: [Key not found], msg: [Cannot get objects from worker]"
    with pytest.raises(RuntimeError) as ei:
        yclient.get_buffers([key2])
    assert str(ei.value) == "code: [Key not found], msg: [Cannot get objects from worker]"


def test_empty_key_list(yclient, tc):
    for call in (yclient.get, yclient.delete, yclient.exist, yclient.get_buffers):
        with tc.assertRaisesRegex(RuntimeError, r"Invalid parameter"):
            call([])
        with pytest.raises(RuntimeError) as ei:
            call([])
        assert str(ei.value) == "code: [Invalid parameter], msg: [The keys are empty]"
    with tc.assertRaisesRegex(RuntimeError, "The keys should not be empty"):
        yclient.mset([], [])
    with tc.assertRaisesRegex(RuntimeError, r"keys\[1\] can not be empty"):
        yclient.get([random_str(), ""])


def test_batch_over_limit(yclient, tc):
    keys_exceed = ["k%d" % i for i in range(10001)]
    with tc.assertRaisesRegex(RuntimeError, r"The objectKeys size exceed 10000"):
        yclient.get(keys_exceed)


def test_state_set_ttl_invalid_args(yclient, tc):
    key1, val1 = random_str(), random_str(20)
    param1 = WriteMode.NONE_L2_CACHE
    with tc.assertRaises(TypeError):
        yclient.set(key1, val1, param1, -1)
    with tc.assertRaises(TypeError):
        yclient.set(key1, val1, param1, 4294967296)
    with tc.assertRaises(TypeError):
        yclient.expire([key1], -1)
    ttl_second = 4294967295
    yclient.set(key1, val1, param1, ttl_second)
    tc.assertEqual(yclient.get([key1], True), [val1])


def test_argument_type_errors(yclient, tc):
    key = random_str()
    with tc.assertRaisesRegex(TypeError, r"The input of key has invalid type, valid type: \[<class 'str'>\]"):
        yclient.set(1, "v")
    with tc.assertRaisesRegex(TypeError, r"The input of val has invalid type"):
        yclient.set(key, 5)
    with tc.assertRaisesRegex(TypeError, r"The input of write_mode has invalid type"):
        yclient.set(key, "v", "NONE_L2_CACHE")
    with tc.assertRaisesRegex(TypeError, r"The input of ttl_second has invalid type"):
        yclient.set(key, "v", WriteMode.NONE_L2_CACHE, "1")
    with tc.assertRaisesRegex(TypeError, r"The input of keys has invalid type, valid type: \[<class 'list'>\]"):
        yclient.get(key)
    with tc.assertRaisesRegex(TypeError, r"The input of keys has invalid type"):
        yclient.get()
    with tc.assertRaisesRegex(TypeError, r"The input of sub_timeout_ms has invalid type"):
        yclient.get([key], False, 1.5)
    with tc.assertRaisesRegex(TypeError, r"The input of existence_opt has invalid type"):
        yclient.mset([key], ["v"], WriteMode.NONE_L2_CACHE, 0, "NX")
    with tc.assertRaisesRegex(TypeError, r"The input of prefix has invalid type"):
        yclient.generate_key(5)
    with tc.assertRaisesRegex(TypeError, r"The input of port has invalid type"):
        KVClient("127.0.0.1", "31501")
    with tc.assertRaisesRegex(RuntimeError, "host and port must be provided together"):
        KVClient("127.0.0.1", 0)


def test_range_errors_are_runtime_errors(yclient, tc):
    with tc.assertRaisesRegex(
        RuntimeError, r"Invalid sub_timeout_ms size -1 is set, which should be between \[0,2147483647\]"
    ):
        yclient.get([random_str()], False, -1)
    with tc.assertRaisesRegex(RuntimeError, r"Invalid timeout_ms size -1 is set"):
        yclient.get_read_only_buffers([random_str()], -1)


def test_generate_key(yclient, tc):
    key = yclient.generate_key()
    tc.assertEqual(len(key), 36)
    assert UUID_RE.match(key), key
    tc.assertNotEqual(yclient.generate_key(), key)
    tc.assertEqual(yclient.generate_key("my_key"), "my_key")
    k = yclient.set_value("qqqqq")
    assert UUID_RE.match(k)
    tc.assertEqual(yclient.get([k], True), ["qqqqq"])


def test_msettx_is_deprecated(yclient, tc):
    keys = [random_str(15) for _ in range(3)]
    vals = [random_str(20) for _ in range(3)]
    with pytest.raises(RuntimeError) as ei:
        yclient.msettx(keys, vals, WriteMode.NONE_L2_CACHE, 0, ExistenceOpt.NX)
    assert str(ei.value) == (
        "code: [Runtime error], msg: [MSetTx is a deprecated API and is no longer supported.]"
    )
    tc.assertEqual(yclient.exist(keys), [False, False, False])
    with tc.assertRaises(TypeError):
        yclient.msettx("k", vals)


def test_status_and_health_check(yclient, tc):
    status = yclient.health_check()
    assert isinstance(status, Status)
    tc.assertTrue(status.is_ok())
    tc.assertFalse(status.is_error())
    tc.assertEqual(status.to_string(), "code: [OK], msg: []")
    tc.assertEqual(Status(3, "gone").to_string(), "code: [Key not found], msg: [gone]")
    c = KVClient("127.0.0.1", 1)
    assert c.health_check().is_error()
    assert c.health_check().to_string().startswith("code: [Not ready], msg: [")


# ---------------------------------------------------------------------------
# Context (trace ids)


def test_context_trace_id_in_errors(yclient, tc):
    Context.set_trace_id("test_state_get_failed")
    with pytest.raises(RuntimeError) as ei:
        yclient.get([random_str()])
    assert str(ei.value) == (
        "code: [Key not found], msg: [Cannot get objects from worker, traceId: test_state_get_failed]"
    )
    # Yuanrong drops the message's final '.' before the trace id.
    with pytest.raises(RuntimeError) as ei:
        yclient.set("", "v")
    assert str(ei.value).endswith("msg: [The objectKey should not be empty, traceId: test_state_get_failed]")

    # Per thread: another thread's errors carry no trace id.
    seen = {}

    def other():
        try:
            yclient.get([random_str()])
        except RuntimeError as e:
            seen["msg"] = str(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert "traceId" not in seen["msg"]
    Context.set_trace_id("")
    with pytest.raises(RuntimeError) as ei:
        yclient.get([random_str()])
    assert "traceId" not in str(ei.value)


def test_context_trace_id_checks(tc):
    with tc.assertRaisesRegex(RuntimeError, "The trace id contains illegal char"):
        Context.set_trace_id("bad trace id")
    with tc.assertRaisesRegex(RuntimeError, "The length of trace id should less than 36"):
        Context.set_trace_id("x" * 37)
    with tc.assertRaises(TypeError):
        Context.set_trace_id(5)
    Context.set_trace_id("a" * 36)
    Context.set_trace_id("")


# ---------------------------------------------------------------------------
# Buffers: mcreate (Yuanrong's CamelCase and object_client's snake_case names),
# get_read_only_buffers, read


def test_mcreate_buffers_have_yuanrong_methods(yclient, tc):
    keys = [random_str(), random_str()]
    vals = [b"hello", os.urandom(100000)]
    buffers = yclient.mcreate(keys, [len(v) for v in vals], WriteMode.NONE_L2_CACHE_EVICT)
    for buf, val in zip(buffers, vals):
        tc.assertEqual(buf.GetSize(), len(val))
        view = buf.MutableData()
        assert isinstance(view, memoryview) and not view.readonly
        view[:] = val
        tc.assertTrue(buf.RLatch().is_ok())
        tc.assertTrue(buf.UnRLatch().is_ok())
        tc.assertEqual(bytes(buf.ImmutableData()), val)
        tc.assertEqual(buf.get_size(), len(val))
    yclient.mset_buffer(buffers)
    tc.assertEqual(yclient.get(keys), vals)


def test_object_client_buffer(worker, tc):
    client = ObjectClient(worker.host, worker.port)
    client.init()
    key = client.generate_object_id()
    assert UUID_RE.match(key)
    buf = client.create(key, 11)
    assert isinstance(buf, Buffer)
    buf.wlatch(timeout_sec=1)
    buf.memory_copy(b"hello world")
    buf.unwlatch()
    buf.publish()
    got = client.get([key, key + ".none"], timeout_ms=1000)
    tc.assertIsNone(got[1])
    got[0].rlatch(timeout_sec=1)
    tc.assertEqual(got[0].immutable_data().tobytes(), b"hello world")
    got[0].unrlatch()
    tc.assertEqual(got[0].get_size(), 11)
    with tc.assertRaisesRegex(RuntimeError, r"Invalid timeout_sec size 0 is set"):
        got[0].rlatch(timeout_sec=0)
    client.put(key + ".put", b"put value", {"consistency_type": ConsistencyType.CAUSAL})
    tc.assertEqual(client.get([key + ".put"], 0)[0].immutable_data().tobytes(), b"put value")
    # Objects and KV values share the namespace.
    kv = KVClient(worker.host, worker.port)
    kv.init()
    tc.assertEqual(kv.get([key, key + ".put"]), [b"hello world", b"put value"])
    kv.close()
    with tc.assertRaisesRegex(RuntimeError, "Cannot get objects from worker"):
        client.get([key + ".none"], 0)
    with tc.assertRaisesRegex(RuntimeError, "The input of object_keys list should not be empty"):
        client.get([], 0)
    with tc.assertRaises(TypeError):
        client.put(key, "str is not accepted by ObjectClient.put")
    client.close()


def test_state_get_read_only_buffers(yclient, tc):
    key_list = [random_str(), random_str(), random_str()]
    val_list = [random_str(20), random_str(20), random_str(1_000_000)]
    for k, v in zip(key_list, val_list):
        yclient.set(k, v)
    read_only_buffers = yclient.get_read_only_buffers(key_list, 0)
    assert all(isinstance(b, ReadOnlyBuffer) for b in read_only_buffers)
    views = [buffer.immutable_data() for buffer in read_only_buffers]
    for i, mem_view in enumerate(views):
        read_only_buffers[i].rlatch()
        tc.assertEqual(val_list[i].encode(), mem_view.tobytes())
        read_only_buffers[i].unrlatch()
    # with_latch takes the read latch (writers wait until unrlatch); the view
    # outlives an overwrite (it pins its version).
    views = [b.immutable_data(with_latch=True) for b in read_only_buffers]
    for b in read_only_buffers:
        b.unrlatch()
    yclient.set(key_list[0], "overwritten")
    for i, mem_view in enumerate(views):
        tc.assertEqual(val_list[i].encode(), mem_view.tobytes())
        tc.assertEqual(read_only_buffers[i].GetSize(), len(val_list[i]))
    missing = yclient.get_read_only_buffers([key_list[1], random_str()], 0)
    tc.assertIsNone(missing[1])
    with tc.assertRaisesRegex(RuntimeError, "Cannot get objects from worker"):
        yclient.get_read_only_buffers([random_str()], 0)


def test_read(yclient, tc):
    from yr.datasystem import _native

    key_num, value_size, append_value = 3, 100 * 1024, "abcdefg"
    key_list = [random_str() for _ in range(key_num)]
    val_list = [random_str(value_size) + append_value for _ in range(key_num)]
    tc.assertEqual(yclient.mset(key_list, val_list, WriteMode.NONE_L2_CACHE, 0, ExistenceOpt.NONE), [])
    read_param_list = [ReadParam(key=k, offset=value_size, size=len(append_value)) for k in key_list]
    if _native.hook("kv_read") is None:
        # The partial read is the library's (wt-sem); until it lands the call says so.
        with pytest.raises(RuntimeError) as ei:
            yclient.read(read_param_list)
        assert ei.value.code == 36 and "kv_read" in str(ei.value)
    else:
        buffers = yclient.read(read_param_list)
        tc.assertEqual(len(buffers), key_num)
        for i in range(key_num):
            mem_view = buffers[i].immutable_data(with_latch=True, timeout_sec=1)
            tc.assertEqual(mem_view.tobytes().decode("utf-8", errors="replace"), append_value)
    with tc.assertRaisesRegex(TypeError, "The input of read_params has invalid type"):
        yclient.read(None)
    tc.assertEqual(yclient.delete(key_list), [])
