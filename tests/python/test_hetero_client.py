"""HeteroClient (``yr.datasystem.hetero_client``) on the host device backend.

A "device pointer" is a host address (conftest.py sets DS_DEVICE_BACKEND=host),
so numpy arrays stand in for device pages. Checked against a real worker:
pages written from several blobs come back byte-exact into blobs split
another way; failed keys are reported, not raised, while any key succeeds;
the async calls agree with the synchronous ones; the key operations, the
device-to-device calls and the backend selection's errors. Then the
``YuanrongBackend`` class of vLLM-Ascend's patch in Yuanrong's repository,
extracted unmodified at test time, drives this client with vLLM's imports
stubbed around it, and Yuanrong's hetero example runs with an ``acl`` stub
over this backend.
"""

import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from yr.datasystem.hetero_client import Blob, DeviceBlobList, HeteroClient, MetaInfo
from yr.datasystem.kv_client import KVClient, SetParam
from yr.datasystem.lib import libds_client_py as native
from yr.datasystem.object_client import WriteMode

MIRROR = Path(os.environ.get("YUANRONG_MIRROR",
                             "/work/.mirror/openeuler-mirror+yuanrong-datasystem/repo"))
PATCH = "tests/kvconnector/patch/v0.13.0rc1/0001-Implement-yuanrong-backend.patch"
PAGE = 64 * 1024


def _ptr(a):
    return a.ctypes.data


@pytest.fixture
def hc(worker):
    c = HeteroClient(worker.host, worker.port)
    c.init()
    yield c
    c.close()


def _pages(n, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(n, PAGE), dtype=np.uint8)


def test_backend_is_host():
    assert native.device_backend_name() == "host"


def test_pages_roundtrip_split_differently(hc, key):
    k_pages, v_pages = _pages(16, 1), _pages(16, 2)
    keys = ["%s-%d" % (key, i) for i in range(16)]
    blobs = [DeviceBlobList(0, [Blob(_ptr(k_pages[i]), PAGE), Blob(_ptr(v_pages[i]), PAGE)])
             for i in range(16)]
    param = SetParam()
    param.write_mode = WriteMode.NONE_L2_CACHE_EVICT
    hc.mset_d2h(keys, blobs, param)
    assert hc.exist(keys) == [True] * 16
    assert hc.batch_is_exist(keys + [key + "-none"]) == [1] * 16 + [0]
    out = np.zeros((16, 2 * PAGE), dtype=np.uint8)
    # One blob per key on the way back: the value is the blobs joined.
    outs = [DeviceBlobList(0, [Blob(_ptr(out[i]), 2 * PAGE)]) for i in range(16)]
    assert hc.mget_h2d(keys, outs, 0) == []
    assert np.array_equal(out[:, :PAGE], k_pages) and np.array_equal(out[:, PAGE:], v_pages)
    # The same bytes to a plain KV reader.
    assert KVClient_get(hc, keys[3]) == k_pages[3].tobytes() + v_pages[3].tobytes()
    # src_offset: the V page alone.
    v = np.zeros(PAGE, dtype=np.uint8)
    assert hc.mget_h2d([keys[5]], [DeviceBlobList(0, [Blob(_ptr(v), PAGE)], PAGE)], 0) == []
    assert np.array_equal(v, v_pages[5])
    failed, metas = hc.get_meta_info([keys[0], key + "-none"], False)
    assert failed == [key + "-none"]
    assert isinstance(metas[0], MetaInfo) and metas[0].blob_size_list == [2 * PAGE]
    assert hc.delete(keys) == []
    assert hc.exist(keys) == [False] * 16


def KVClient_get(hc, k):
    kv = hc._client._kv
    return bytes(kv.get([k])[0])


def test_failed_keys_reported_and_all_failed_raises(hc, key):
    a = np.arange(256, dtype=np.uint8)
    hc.mset_d2h([key], [DeviceBlobList(0, [Blob(_ptr(a), 256)])])
    out = np.zeros(512, dtype=np.uint8)
    lists = [DeviceBlobList(0, [Blob(_ptr(out), 256)]),
             DeviceBlobList(0, [Blob(_ptr(out) + 256, 256)]),
             DeviceBlobList(0, [Blob(_ptr(out), 257)])]  # longer than the value
    failed = hc.mget_h2d([key, key + "-missing", key], lists, 0)
    assert failed == [key + "-missing", key]
    assert np.array_equal(out[:256], a)
    with pytest.raises(RuntimeError, match=r"Key not found.*%s-missing" % key):
        hc.mget_h2d([key + "-missing"], lists[:1], 0)
    with pytest.raises(RuntimeError, match="the value has 256 bytes, the blobs want 257"):
        hc.mget_h2d([key], lists[2:], 0)
    with pytest.raises(RuntimeError, match="should not be empty"):
        hc.mget_h2d([], lists, 0)
    with pytest.raises(TypeError, match="sub_timeout_ms"):
        hc.mget_h2d([key], lists[:1], "0")
    with pytest.raises(RuntimeError, match=r"Invalid parameter.*size of 0"):
        hc.mset_d2h([key], [DeviceBlobList(0, [Blob(_ptr(a), 0)])])
    with pytest.raises(RuntimeError, match="NULL pointer"):
        hc.mset_d2h([key], [DeviceBlobList(0, [Blob(0, 8)])])
    with pytest.raises(RuntimeError, match="device index 3 does not exist"):
        hc.mset_d2h([key], [DeviceBlobList(3, [Blob(_ptr(a), 8)])])
    with pytest.raises(RuntimeError, match="invalid byte"):
        hc.mset_d2h(["bad key"], [DeviceBlobList(0, [Blob(_ptr(a), 8)])])
    hc.delete([key])


def test_async_calls_agree_with_sync(hc, key):
    pages = _pages(8, 3)
    keys = ["%s-%d" % (key, i) for i in range(8)]
    blobs = [DeviceBlobList(0, [Blob(_ptr(pages[i]), PAGE)]) for i in range(8)]
    assert hc.async_mset_d2h(keys, blobs).get() == []
    sync_out, async_out = np.zeros_like(pages), np.zeros_like(pages)
    assert hc.mget_h2d(keys + [key + "-x"], [DeviceBlobList(0, [Blob(_ptr(sync_out[i]), PAGE)])
                                            for i in range(8)] + blobs[:1], 0) == [key + "-x"]
    fut = hc.async_mget_h2d(keys + [key + "-x"], [DeviceBlobList(0, [Blob(_ptr(async_out[i]),
                                                                          PAGE)])
                                                 for i in range(8)] + blobs[:1], 0)
    assert fut.get(60000) == [key + "-x"]
    assert np.array_equal(sync_out, pages) and np.array_equal(async_out, pages)
    # All failing: the future raises as the sync call does.
    with pytest.raises(RuntimeError, match="Key not found"):
        hc.async_mget_h2d([key + "-x"], blobs[:1], 0).get()
    # A get still waiting: get(timeout) says so; the late publish completes it.
    late = np.zeros(PAGE, dtype=np.uint8)
    fut = hc.async_mget_h2d([key + "-late"], [DeviceBlobList(0, [Blob(_ptr(late), PAGE)])], 30000)
    with pytest.raises(RuntimeError, match="did not finish within 50 ms"):
        fut.get(50)
    hc.mset_d2h([key + "-late"], blobs[2:3])
    assert fut.get(60000) == []
    assert np.array_equal(late, pages[2])
    hc.delete(keys + [key + "-late"])


def test_multi_buffers(hc, key):
    k_pages, v_pages = _pages(4, 4), _pages(4, 5)
    keys = ["%s-%d" % (key, i) for i in range(4)]
    addrs = [[_ptr(k_pages[i]), _ptr(v_pages[i])] for i in range(4)]
    sizes = [[PAGE, PAGE] for _ in range(4)]
    hc.mset_d2h_from_multi_buffers(keys, addrs, sizes)
    ok, ov = np.zeros_like(k_pages), np.zeros_like(v_pages)
    assert hc.mget_h2d_from_multi_buffers(
        keys, [[_ptr(ok[i]), _ptr(ov[i])] for i in range(4)], sizes) == []
    assert np.array_equal(ok, k_pages) and np.array_equal(ov, v_pages)
    with pytest.raises(ValueError, match="same outer size"):
        hc.mget_h2d_from_multi_buffers(keys, addrs[:1], sizes)
    hc.delete(keys)


def test_device_to_device_calls(hc, key):
    src, dst = _pages(2, 6), np.zeros((2, PAGE), dtype=np.uint8)
    keys = [key + "-a", key + "-b"]
    ins = [DeviceBlobList(0, [Blob(_ptr(src[i]), PAGE)]) for i in range(2)]
    outs = [DeviceBlobList(0, [Blob(_ptr(dst[i]), PAGE)]) for i in range(2)]
    assert hc.dev_mset(keys, ins) == []
    assert hc.dev_mget(keys, outs, 1000) == []
    assert np.array_equal(dst, src)
    assert hc.dev_local_delete(keys[:1]) == []
    assert hc.async_dev_delete(keys[1:]).get() == []
    assert hc.exist(keys) == [False, False]
    # publish / subscribe: the subscriber's futures complete once it has the
    # bytes, and the objects are gone afterwards.
    dst[:] = 0
    subs = hc.dev_subscribe(keys, outs)
    pubs = hc.dev_publish(keys, ins)
    assert [f.get() for f in pubs] == [[], []]
    assert [f.get(60000) for f in subs] == [[], []]
    assert np.array_equal(dst, src)
    assert hc.exist(keys) == [False, False]
    assert hc.generate_key("mine") == "mine"
    assert len(hc.generate_key()) > 0
    hc.pre_register_device_memory([_ptr(src)], [src.nbytes])
    with pytest.raises(RuntimeError, match=r"sizes\[0\]"):
        hc.pre_register_device_memory([_ptr(src)], [0])
    # The same range again is kept; an overlapping one is refused, naming it.
    hc.pre_register_device_memory([_ptr(src)], [src.nbytes])
    with pytest.raises(RuntimeError, match=r"dev_ptrs\[0\].*overlaps the registered"):
        hc.pre_register_device_memory([_ptr(src) + 1], [PAGE])
    # A blob starting in the registered range must end in it.
    hc.mset_d2h([key + "-r"], [DeviceBlobList(0, [Blob(_ptr(src[0]), PAGE)])])
    past = [DeviceBlobList(0, [Blob(_ptr(src[1]) + 1, PAGE)])]
    with pytest.raises(RuntimeError, match="runs past its end"):
        hc.mget_h2d([key + "-r"], past, 0)
    hc.delete([key + "-r"])


# A publisher process: device memory from the backend (shareable), filled
# with a seed's pages; dev_publish; "published"; then it waits for its key
# to be received, or (hang) to be killed.
_PUBLISHER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from yr.datasystem.hetero_client import Blob, DeviceBlobList, HeteroClient
    from yr.datasystem.lib import libds_client_py as native
    host, port, key, seed, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    data = np.random.default_rng(seed).integers(0, 256, size=2 * %d, dtype=np.uint8)
    d = native.device_malloc(data.nbytes)
    native.device_memcpy(d, data.ctypes.data, data.nbytes, native.COPY_H2D)
    c = HeteroClient(host, port)
    c.init()
    futs = c.dev_publish([key], [DeviceBlobList(0, [Blob(d, %d), Blob(d + %d, %d)])])
    print("published", flush=True)
    if mode == "hang":
        time.sleep(600)
    print("received", [f.get() for f in futs], flush=True)
""" % ((PAGE,) * 4))


def _spawn_publisher(worker, key, seed, mode):
    p = subprocess.Popen([sys.executable, "-c", _PUBLISHER, worker.host, str(worker.port), key,
                          str(seed), mode], env=worker.env(), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "published"
    return p


def _subscribe(hc, key, seed):
    """Receives key into pages split unlike the publisher's; returns which
    path ran ("d2d" or "arena")."""
    want = np.random.default_rng(seed).integers(0, 256, size=2 * PAGE, dtype=np.uint8)
    out = np.zeros(2 * PAGE, dtype=np.uint8)
    before = hc.dev_transfer_stats()
    blobs = [Blob(_ptr(out), 100), Blob(_ptr(out) + 100, 2 * PAGE - 100)]
    assert [f.get(30000) for f in hc.dev_subscribe([key], [DeviceBlobList(0, blobs)])] == [[]]
    assert np.array_equal(out, want)
    assert hc.exist([key]) == [False]
    after = hc.dev_transfer_stats()
    ran = [k for k in ("d2d", "arena") if after[k] == before[k] + 1]
    assert len(ran) == 1 and sum(after.values()) == sum(before.values()) + 1
    return ran[0]


def test_dev_publish_subscribe_across_processes(hc, worker, key):
    # Another process's device memory, device to device; its futures end
    # once the key is received.
    p = _spawn_publisher(worker, key + "-x", 31, "wait")
    assert _subscribe(hc, key + "-x", 31) == "d2d"
    assert p.communicate(timeout=60)[0].strip() == "received [[]]"
    assert p.returncode == 0
    # A publisher killed while its key is published: the bytes come from
    # the worker's copy, never from the dead process; the worker serves on.
    p = _spawn_publisher(worker, key + "-k", 32, "hang")
    p.kill()
    p.wait(timeout=60)
    assert _subscribe(hc, key + "-k", 32) == "arena"
    # Memory the backend cannot share (a numpy array): the worker's copy.
    src = np.random.default_rng(33).integers(0, 256, size=2 * PAGE, dtype=np.uint8)
    pubs = hc.dev_publish([key + "-n"], [DeviceBlobList(0, [Blob(_ptr(src), 2 * PAGE)])])
    assert _subscribe(hc, key + "-n", 33) == "arena"
    assert [f.get() for f in pubs] == [[]]
    # Nobody subscribes: the publisher's future reports it, in time.
    pubs = hc.dev_publish([key + "-q"], [DeviceBlobList(0, [Blob(_ptr(src), PAGE)])])
    with pytest.raises(RuntimeError, match="did not finish within 300 ms"):
        pubs[0].get(300)
    hc.delete([key + "-q"])  # gone: the publisher's memory is free again
    assert pubs[0].get(30000) == []


def test_not_initialized_and_bad_worker():
    c = HeteroClient("127.0.0.1", 1)
    with pytest.raises(RuntimeError, match="not initialized"):
        c.mset_d2h(["k"], [DeviceBlobList(0, [Blob(8, 8)])])
    with pytest.raises(RuntimeError):
        c.init()
    with pytest.raises(TypeError, match="enable_remote_h2d"):
        HeteroClient("127.0.0.1", 1, enable_remote_h2d=1)


_BACKEND_PROBE = textwrap.dedent("""
    import ctypes, sys
    from yr.datasystem.hetero_client import HeteroClient, Blob, DeviceBlobList
    c = HeteroClient(sys.argv[1], int(sys.argv[2]))
    c.init()
    print("exist", c.exist(["probe"]))
    buf = ctypes.create_string_buffer(8)
    try:
        c.mset_d2h(["probe"], [DeviceBlobList(0, [Blob(ctypes.addressof(buf), 8)])])
        print("OK")
    except RuntimeError as e:
        print("ERR", e)
""")


@pytest.mark.parametrize("value,want", [
    (None, "DS_DEVICE_BACKEND is unset"),
    ("bogus", "DS_DEVICE_BACKEND='bogus' is not a device backend: use host or cuda"),
    ("cuda", "DS_DEVICE_BACKEND=cuda: "),
    ("host", "OK"),
])
def test_backend_selection(worker, value, want):
    if value in (None, "cuda") and Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU is present: the cuda backend opens")
    env = worker.env()
    env.pop("DS_DEVICE_BACKEND", None)
    if value is not None:
        env["DS_DEVICE_BACKEND"] = value
    p = subprocess.run([sys.executable, "-c", _BACKEND_PROBE, worker.host, str(worker.port)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "exist [False]" in p.stdout  # key operations need no device
    assert want in p.stdout, p.stdout


# ---- vLLM-Ascend's YuanrongBackend, unmodified ----------------------------


def _backend_source():
    if not (MIRROR / "HEAD").exists():
        pytest.skip("no Yuanrong mirror at %s (set YUANRONG_MIRROR)" % MIRROR)
    patch = subprocess.run(["git", "--git-dir", str(MIRROR), "show", "HEAD:" + PATCH],
                           check=True, capture_output=True, text=True).stdout
    # The new file's lines of the diff, "+" stripped: the module as vLLM-Ascend has it.
    section = patch.split("+++ b/vllm_ascend/distributed/kvpool/backend/yuanrong_backend.py\n")[1]
    body = section.split("\ndiff --git")[0].split("\n")[1:]  # after the @@ line
    return "\n".join(line[1:] for line in body if line.startswith("+")) + "\n"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.errors = []

    def emit(self, record):
        if record.levelno >= logging.ERROR:
            self.errors.append(record.getMessage())


def _stub_vllm(monkeypatch):
    """The modules the backend imports, reduced to what it uses."""
    log = logging.getLogger("stub.vllm")
    records = _Records()
    log.addHandler(records)
    mods = {}

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        mods[name] = m
        return m

    class _Npu:
        current = 0

        @staticmethod
        def set_device(device):
            _Npu.current = int(str(device).split(":")[1])

        @staticmethod
        def current_device():
            return _Npu.current

    mod("torch", device=lambda s: s, npu=_Npu)
    for name in ("vllm", "vllm.utils", "vllm_ascend", "vllm_ascend.distributed",
                 "vllm_ascend.distributed.kvpool", "vllm_ascend.distributed.kvpool.backend"):
        mod(name)
    mod("vllm.config", ParallelConfig=type("ParallelConfig", (), {}))
    mod("vllm.logger", logger=log)
    mod("vllm.utils.network_utils",
        split_host_port=lambda a: (a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])))
    mod("vllm_ascend.distributed.kvpool.backend.backend", Backend=type("Backend", (), {}))
    for name, m in mods.items():
        monkeypatch.setitem(sys.modules, name, m)
    return records


def test_vllm_ascend_yuanrong_backend_drives_hetero_client(worker, monkeypatch, key):
    src = _backend_source()
    assert "class YuanrongBackend(Backend):" in src
    records = _stub_vllm(monkeypatch)
    monkeypatch.setenv("DS_WORKER_ADDR", worker.address)
    module = types.ModuleType("yuanrong_backend")
    exec(compile(src, "yuanrong_backend.py", "exec"), module.__dict__)
    cfg = sys.modules["vllm.config"].ParallelConfig()
    cfg.rank = 0
    backend = module.YuanrongBackend(cfg)
    backend.set_device()

    # vLLM's layout: per block key, one K and one V page per layer (2 layers).
    nblocks, nlayers = 8, 2
    kv = _pages(nblocks * nlayers * 2, 7).reshape(nblocks, nlayers * 2, PAGE)
    # One key over 255 bytes with '/' and '.', which the backend renames.
    keys = ["%s@model/Qwen2.5-7B@tp0@%d" % (key, i) for i in range(nblocks - 1)]
    keys.append(key + "x" * 300)
    addrs = [[_ptr(kv[b, j]) for j in range(nlayers * 2)] for b in range(nblocks)]
    sizes = [[PAGE] * (nlayers * 2) for _ in range(nblocks)]
    assert backend.exists(keys) == [0] * nblocks
    backend.put(keys, addrs, sizes)
    assert backend.exists(keys) == [1] * nblocks
    out = np.zeros_like(kv)
    backend.get(keys, [[_ptr(out[b, j]) for j in range(nlayers * 2)] for b in range(nblocks)],
                sizes)
    assert np.array_equal(out, kv)
    assert records.errors == []

    # The async calls on the same pages and keys agree.
    hc = backend._hetero_client
    ds_keys = backend._normalize_ds_keys(keys)
    out2 = np.zeros_like(kv)
    lists = [backend._ds_make_blob_list([_ptr(out2[b, j]) for j in range(nlayers * 2)],
                                        sizes[b]) for b in range(nblocks)]
    assert hc.async_mget_h2d(ds_keys, lists, 0).get() == []
    assert np.array_equal(out2, kv)
    kv2 = _pages(nblocks * nlayers * 2, 8).reshape(nblocks, nlayers * 2, PAGE)
    put_lists = [backend._ds_make_blob_list([_ptr(kv2[b, j]) for j in range(nlayers * 2)],
                                            sizes[b]) for b in range(nblocks)]
    assert hc.async_mset_d2h(ds_keys, put_lists, backend._ds_set_param).get() == []
    backend.get(keys, [[_ptr(out[b, j]) for j in range(nlayers * 2)] for b in range(nblocks)],
                sizes)
    assert np.array_equal(out, kv2)
    assert records.errors == []

    # A missing key is logged by the backend, as vLLM-Ascend does.
    backend.get([key + "-missing"], [[_ptr(out[0, 0])]], [[PAGE]])
    assert len(records.errors) == 1 and "Failed to get keys" in records.errors[0]
    hc.delete(ds_keys)


def test_yuanrong_hetero_example_with_acl_stub(worker, tmp_path):
    """Yuanrong's example/python/hetero_client_example.py, unmodified; its
    ``acl`` (Ascend runtime) calls go to this backend's device memory."""
    if not (MIRROR / "HEAD").exists():
        pytest.skip("no Yuanrong mirror at %s" % MIRROR)
    example = subprocess.run(
        ["git", "--git-dir", str(MIRROR), "show", "HEAD:example/python/hetero_client_example.py"],
        check=True, capture_output=True).stdout
    (tmp_path / "hetero_client_example.py").write_bytes(example)
    (tmp_path / "acl.py").write_text(textwrap.dedent("""
        # Ascend's acl, reduced to the example's calls, over libdatasystem's device helpers.
        import ctypes
        from yr.datasystem.lib import libds_client_py as _d
        _held = []
        def init(): return 0
        def finalize(): return 0
        class rt:
            set_device = staticmethod(lambda dev: 0)
            malloc = staticmethod(lambda size, policy: (_d.device_malloc(size), 0))
            free = staticmethod(lambda ptr: _d.device_free(ptr))
            @staticmethod
            def memcpy(dst, dst_size, src, count, kind):
                _d.device_memcpy(dst, src, count, {1: _d.COPY_H2D, 2: _d.COPY_D2H}[kind])
                return 0
        class util:
            @staticmethod
            def bytes_to_ptr(b):
                buf = ctypes.create_string_buffer(b, len(b))
                _held.append(buf)
                return ctypes.addressof(buf)
    """))
    env = worker.env()
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "hetero_client_example.py", "--host", worker.host,
                        "--port", str(worker.port)], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
