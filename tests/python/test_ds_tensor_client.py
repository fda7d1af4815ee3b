"""DsTensorClient (``yr.datasystem.ds_tensor_client``) on the device backend.

conftest.py sets DS_DEVICE_BACKEND=host, where CPU tensors are the device
tensors; with DS_DEVICE_BACKEND=cuda (tests/device/run.sh on a GPU) the same
tests use CUDA tensors, and skip when torch has no CUDA. Against a real worker: tensors of several dtypes written with
mset_d2h come back byte-exact through mget_h2d and as plain KV values; the
async calls agree; the device-to-device calls (dev_mset / dev_mget /
dev_mget_into_tensor / dev_send / dev_recv and the deletes) round-trip; exist
and delete answer per key; bad input fails with Yuanrong's exceptions and
messages; a client killed in a waiting get leaves the worker serving. Needs
torch (Debian's python3-torch); skipped without it.
"""

import collections
import os
import subprocess
import sys
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")

import yr.datasystem as yds  # noqa: E402
from yr.datasystem import ds_tensor_client as dtc  # noqa: E402
from yr.datasystem.ds_tensor_client import CopyRange, DsTensorClient  # noqa: E402
from yr.datasystem.kv_client import KVClient, SetParam  # noqa: E402
from yr.datasystem.object_client import WriteMode  # noqa: E402

# The tensors live where the backend copies: CPU tensors on host, cuda:0 on
# cuda (tests/device/run.sh, with a CUDA build of torch).
BACKEND = os.environ.get("DS_DEVICE_BACKEND", "host")
DEV = "cuda:0" if BACKEND == "cuda" else "cpu"
if BACKEND == "cuda" and not torch.cuda.is_available():
    pytest.skip("the cuda backend's tensor tests need a CUDA build of torch",
                allow_module_level=True)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
          torch.int32, torch.int8, torch.uint8, torch.bool]


@pytest.fixture
def tc(worker):
    c = DsTensorClient(worker.host, worker.port, 0)
    c.init()
    yield c
    c.close()


@pytest.fixture
def kv(worker):
    c = KVClient(worker.host, worker.port)
    c.init()
    yield c
    c.close()


def _tensor(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        t = (torch.rand(shape, generator=g, dtype=torch.float64) * 2000 - 1000).to(dtype)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=g).bool()
    else:
        info = torch.iinfo(dtype)
        t = torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1) + 1, shape,
                          generator=g, dtype=torch.int64).to(dtype)
    return t.to(DEV)


def _raw(t):
    """The tensor's bytes (through uint8 storage: numpy has no bfloat16)."""
    t = t.cpu()
    return bytes(t.contiguous().view(torch.uint8).reshape(-1).tolist()) \
        if t.dtype != torch.bool else bytes(t.to(torch.uint8).reshape(-1).tolist())


def _keys(key, n):
    return ["%s-%d" % (key, i) for i in range(n)]


def test_lazy_exports_and_no_torch_on_import(worker):
    assert yds.DsTensorClient is DsTensorClient and yds.CopyRange is CopyRange
    assert "DsTensorClient" in yds.__all__ and "CopyRange" in yds.__all__
    probe = ("import sys, yr.datasystem as d; from yr.datasystem import KVClient; "
             "print('torch' in sys.modules); d.DsTensorClient; print('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", probe], env=worker.env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "True"]


def test_mset_d2h_mget_h2d_byte_exact(tc, kv, key):
    shapes = [(3, 7), (64,), (2, 3, 5), (1, 1024)]
    src = [_tensor(dt, shapes[i % len(shapes)], i) for i, dt in enumerate(DTYPES)]
    keys = _keys(key, len(src))
    param = SetParam()
    param.write_mode = WriteMode.NONE_L2_CACHE_EVICT
    assert tc.mset_d2h(keys, src, param) is None
    assert tc.exist(keys + [key + "-none"]) == [True] * len(keys) + [False]
    out = [torch.zeros_like(t) for t in src]
    assert tc.mget_h2d(keys, out) == []
    for s, o, k in zip(src, out, keys):
        assert o.dtype == s.dtype and torch.equal(o, s)
        # The value is the tensor's bytes, as a plain KV reader sees them.
        assert _raw(o) == _raw(s) == bytes(kv.get([k])[0])
    # A view at an offset of a larger tensor (contiguous) reads and writes its own bytes.
    big = torch.arange(100, dtype=torch.int32, device=DEV)
    tc.mset_d2h([keys[0]], [big[10:20]])
    dst = torch.full((30,), -1, dtype=torch.int32, device=DEV)
    assert tc.mget_h2d([keys[0]], [dst[5:15]]) == []
    assert dst[5:15].tolist() == list(range(10, 20))
    assert dst[:5].tolist() == [-1] * 5 and dst[15:].tolist() == [-1] * 15
    assert tc.delete(keys) == []
    assert tc.exist(keys) == [False] * len(keys)
    # Deleting a key that is not there counts as deleted.
    assert tc.delete([key + "-none"]) == []


def test_async_calls_agree_with_sync(tc, key):
    src = [_tensor(torch.float16, (4, 256), 10 + i) for i in range(4)]
    keys = _keys(key, 4)
    fut = tc.async_mset_d2h(keys, src)
    assert isinstance(fut, yds.Future)
    assert fut.get(60000) == []
    sync_out = [torch.zeros_like(t) for t in src]
    async_out = [torch.zeros_like(t) for t in src]
    assert tc.mget_h2d(keys, sync_out, 0) == []
    assert tc.async_mget_h2d(keys, async_out, 0).get(60000) == []
    for s, a, b in zip(src, sync_out, async_out):
        assert torch.equal(a, s) and torch.equal(b, s)
    # A missing key among found ones: reported by both, not raised.
    pad = torch.zeros_like(src[0])
    assert tc.mget_h2d(keys[:1] + [key + "-x"], [sync_out[0], pad]) == [key + "-x"]
    assert tc.async_mget_h2d(keys[:1] + [key + "-x"], [async_out[0], pad]).get() == [key + "-x"]
    with pytest.raises(RuntimeError, match=r"code: \[Key not found\]"):
        tc.async_mget_h2d([key + "-x"], [pad]).get()
    assert tc.delete(keys) == []


def test_missing_key_waits_sub_timeout_ms(tc, key):
    out = torch.zeros(16, dtype=torch.int64, device=DEV)
    with pytest.raises(RuntimeError, match=r"code: \[Key not found\].*%s-late" % key):
        tc.mget_h2d([key + "-late"], [out], 100)
    # A get still waiting is completed by a later set.
    src = torch.arange(16, dtype=torch.int64, device=DEV)
    setter = threading.Timer(0.3, lambda: tc.mset_d2h([key + "-late"], [src]))
    setter.start()
    try:
        assert tc.mget_h2d([key + "-late"], [out], 30000) == []
    finally:
        setter.join()
    assert torch.equal(out, src)
    tc.delete([key + "-late"])


def test_device_to_device_calls(tc, worker, key):
    src = [_tensor(torch.float32, (8, 16), 20 + i) for i in range(3)]
    keys = _keys(key, 3)
    assert tc.dev_mset(keys, src) == []
    other = DsTensorClient(worker.host, worker.port, 0)
    other.init()
    out = [torch.zeros_like(t) for t in src]
    assert other.dev_mget(keys, out, 1000) == []
    assert all(torch.equal(o, s) for o, s in zip(out, src))
    # Pieces of two values into one tensor.
    dst = torch.zeros(64, dtype=torch.float32, device=DEV)
    ranges = [CopyRange(src_offset=16, dst_offset=0, length=32),
              CopyRange(src_offset=0, dst_offset=128, length=64)]
    assert other.dev_mget_into_tensor(keys[:2], dst, ranges) == []
    assert torch.equal(dst[:8], src[0].reshape(-1)[4:12])
    assert torch.equal(dst[32:48], src[1].reshape(-1)[:16])
    assert torch.count_nonzero(dst[8:32]) == 0 and torch.count_nonzero(dst[48:]) == 0
    assert tc.dev_local_delete(keys[:1]) == []
    assert tc.dev_delete(keys[1:2]) == []
    assert tc.async_dev_delete(keys[2:]).get() == []
    assert tc.exist(keys) == [False] * 3
    # send / recv: the receiver's futures complete with the bytes; the objects go.
    out = [torch.zeros_like(t) for t in src]
    recv = other.dev_recv(keys, out)
    sent = tc.dev_send(keys, src)
    assert [f.get(60000) for f in sent] == [[]] * 3
    assert [f.get(60000) for f in recv] == [[]] * 3
    assert all(torch.equal(o, s) for o, s in zip(out, src))
    assert tc.exist(keys) == [False] * 3
    other.close()


def test_bad_tensors(tc, key, monkeypatch):
    t = torch.arange(12, dtype=torch.float32, device=DEV).reshape(3, 4)
    with pytest.raises(TypeError, match=r"^Tensor memory is not contiguous\. Possible solutions:"):
        tc.mset_d2h([key], [t.t()])
    with pytest.raises(TypeError, match="Tensor memory is not contiguous"):
        tc.mget_h2d([key], [t[:, :2]])
    with pytest.raises(TypeError, match="not contiguous"):
        tc.dev_send([key], [t.expand(2, 3, 4)])
    with pytest.raises(RuntimeError, match=r"no valid data storage \(data_ptr is null\)"):
        tc.mset_d2h([key], [torch.empty(0, device=DEV)])
    # A tensor the backend cannot copy (checked before any copy, so either
    # backend's check runs on any machine).
    monkeypatch.setattr(dtc, "_backend_name", "host")
    with pytest.raises(ValueError, match=r"^meta tensor, not a supported device tensor on the "
                                         r"host device backend \(expected cpu"):
        tc.mset_d2h([key], [torch.empty(4, device="meta")])
    # On the cuda backend a CPU tensor gets Yuanrong's message.
    monkeypatch.setattr(dtc, "_backend_name", "cuda")
    with pytest.raises(ValueError, match=r"^cpu tensor, not a supported device tensor "
                                         r"\(expected npu/Ascend/cuda\)$"):
        tc.mset_d2h([key], [t.cpu()])
    monkeypatch.setattr(dtc, "_backend_name", BACKEND)
    # Types, as Yuanrong's Validator words them.
    with pytest.raises(TypeError, match="The input of keys has invalid type"):
        tc.mset_d2h(key, [t])
    with pytest.raises(TypeError, match="The input of tensors has invalid type"):
        tc.mget_h2d([key], t)
    for bad in (True, "1"):
        with pytest.raises(TypeError, match="sub_timeout_ms"):
            tc.mget_h2d([key], [t], bad)
        with pytest.raises(TypeError, match="sub_timeout_ms"):
            tc.dev_mget_into_tensor([key], t, [CopyRange(0, 0, 4)], bad)
    with pytest.raises(TypeError, match="device_id"):
        DsTensorClient("127.0.0.1", 1, "0")
    assert tc.exist([key]) == [False]


def test_counts_and_sizes(tc, key):
    a = torch.arange(8, dtype=torch.int64, device=DEV)
    b = torch.arange(8, 16, dtype=torch.int64, device=DEV)
    keys = _keys(key, 2)
    with pytest.raises(RuntimeError, match=r"code: \[Invalid parameter\], msg: \[The size of "
                                           r"objKeys\(2\) and devBlobList\(1\) does not match"):
        tc.mset_d2h(keys, [a])
    with pytest.raises(RuntimeError, match=r"objKeys\(1\) and devBlobList\(2\) does not match"):
        tc.mget_h2d(keys[:1], [a, b])
    with pytest.raises(RuntimeError, match="objKeys"):
        tc.async_mset_d2h(keys, [a]).get()
    with pytest.raises(RuntimeError, match="should not be empty"):
        tc.mset_d2h([], [])
    assert tc.exist(keys) == [False, False]
    tc.mset_d2h(keys, [a, b])
    # A tensor larger than the value fails its key; the others are read.
    big = torch.zeros(9, dtype=torch.int64, device=DEV)
    out = torch.zeros(8, dtype=torch.int64, device=DEV)
    assert tc.mget_h2d(keys, [big, out]) == [keys[0]]
    assert torch.equal(out, b)
    # A smaller one takes the value's first bytes.
    small = torch.zeros(4, dtype=torch.int64, device=DEV)
    assert tc.mget_h2d(keys[1:], [small]) == []
    assert small.tolist() == [8, 9, 10, 11]
    with pytest.raises(RuntimeError, match=r"code: \[Invalid parameter\].*the value has 64 "
                                           r"bytes, the blobs want 72"):
        tc.mget_h2d(keys[:1], [big])
    # dev_mget_into_tensor: Yuanrong's length check, and ranges must fit the tensor.
    dst = torch.zeros(8, dtype=torch.int64, device=DEV)
    with pytest.raises(RuntimeError, match=r"^The length of keys and copy_ranges do not match, "
                                           r"keys:2, copy_ranges:1$"):
        tc.dev_mget_into_tensor(keys, dst, [CopyRange(0, 0, 8)])
    with pytest.raises(ValueError, match=r"copy_ranges\[0\] .*does not fit in the tensor's "
                                         r"64 bytes"):
        tc.dev_mget_into_tensor(keys[:1], dst, [CopyRange(0, 60, 8)])
    with pytest.raises(TypeError, match=r"copy_ranges\[0\]"):
        tc.dev_mget_into_tensor(keys[:1], dst, [(0, 0, 8)])
    assert tc.dev_mget_into_tensor(keys[:1], dst[4:], [CopyRange(8, 0, 24)]) == []
    assert dst.tolist() == [0, 0, 0, 0, 1, 2, 3, 0]
    # Any object with CopyRange's fields will do, as in Yuanrong.
    Range = collections.namedtuple("Range", "src_offset dst_offset length")
    assert tc.dev_mget_into_tensor(keys[1:], dst, [Range(56, 56, 8)]) == []
    assert dst.tolist() == [0, 0, 0, 0, 1, 2, 3, 15]
    assert tc.delete(keys) == []


_WAITER = textwrap.dedent("""
    import sys, torch
    from yr.datasystem import DsTensorClient
    c = DsTensorClient(sys.argv[1], int(sys.argv[2]), 0)
    c.init()
    print("waiting", flush=True)
    c.mget_h2d([sys.argv[3]], [torch.zeros(32, device=sys.argv[4])], 600000)
""")


def test_killed_client_in_waiting_get(tc, worker, key):
    p = subprocess.Popen([sys.executable, "-c", _WAITER, worker.host, str(worker.port),
                          key + "-never", DEV], env=worker.env(), stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
    finally:
        os.kill(p.pid, 9)
        p.wait(timeout=30)
        p.stdout.close()
    assert p.returncode == -9
    src = torch.rand(32, device=DEV)
    tc.mset_d2h([key + "-never"], [src])
    out = torch.zeros(32, device=DEV)
    assert tc.mget_h2d([key + "-never"], [out]) == []
    assert torch.equal(out, src)
    assert tc.delete([key + "-never"]) == []


def test_no_backend_names_the_variable(worker):
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU is present: the cuda backend opens")
    probe = textwrap.dedent("""
        import sys, torch
        from yr.datasystem import DsTensorClient
        c = DsTensorClient(sys.argv[1], int(sys.argv[2]), 0)
        c.init()
        print(c.exist(["probe"]))
        try:
            c.mset_d2h(["probe"], [torch.zeros(4)])
        except RuntimeError as e:
            print("ERR", e)
    """)
    env = worker.env()
    env.pop("DS_DEVICE_BACKEND", None)
    p = subprocess.run([sys.executable, "-c", probe, worker.host, str(worker.port)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "[False]" in p.stdout
    assert "ERR" in p.stdout and "DS_DEVICE_BACKEND is unset" in p.stdout
