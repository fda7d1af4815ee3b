"""The worker's KV event publisher (--kv_events_config), read by a real ZMQ
subscriber (pyzmq) and decoded as vLLM's KV event batches: three frames
(topic, 8-byte big-endian sequence, msgpack [ts, events, dp_rank]); one
BlockStored per key written, one BlockRemoved per key deleted, evicted or
expired; a vLLM-Ascend pool key's chunk hash as the block hash, other keys'
bytes; a bad config stops the worker's start with the field named."""

import socket
import struct
import subprocess
import time

import pytest

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

from conftest import WORKER_BIN  # noqa: E402
from yr.datasystem.kv_client import KVClient, SetParam  # noqa: E402
from yr.datasystem.object_client import WriteMode  # noqa: E402


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Sub:
    def __init__(self, endpoint):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.last_seq = None

    def batches(self, timeout_s):
        """Batches received until timeout_s passes with none."""
        out = []
        while self.sock.poll(int(timeout_s * 1000)):
            topic, seq, payload = self.sock.recv_multipart()
            assert topic == b""
            (n,) = struct.unpack(">Q", seq)
            if self.last_seq is not None:
                assert n == self.last_seq + 1
            self.last_seq = n
            out.append(msgpack.unpackb(payload, raw=False))
        return out

    def events(self, timeout_s=0.5):
        evs = []
        for ts, events, dp_rank in self.batches(timeout_s):
            assert isinstance(ts, float) and dp_rank == 3
            evs.extend(events)
        return evs

    def close(self):
        self.sock.close(0)
        self.ctx.term()


@pytest.fixture
def kv_worker(fresh_worker):
    port = _free_port()
    endpoint = "tcp://127.0.0.1:%d" % port
    cfg = ('{"bind_endpoint": "%s", "backend_id": "w0", "block_size": 128, "dp_rank": 3}'
           % endpoint)
    w = fresh_worker(shm_mb=64, extra_args=("--kv_events_config", cfg))
    sub = Sub(endpoint)
    c = KVClient(w.host, w.port)
    c.init()
    # A PUB socket drops what it sends before the subscription arrives:
    # write probes until one is seen, then start from a quiet socket.
    for i in range(100):
        c.set("kvev-probe-%d" % i, b"x")
        if sub.events(0.1):
            break
    else:
        pytest.fail("no event reached the subscriber")
    sub.events(0.3)
    yield w, c, sub
    c.close()
    sub.close()


def _keys(events, tag):
    out = []
    for e in events:
        assert e[0] == tag, e
        assert len(e[1]) == 1
        out.append(e[1][0])
    return out


def test_stored_and_removed_per_key(kv_worker):
    _w, c, sub = kv_worker
    keys = ["kvev-%d" % i for i in range(20)]
    for k in keys:
        c.set(k, b"v" * 100)
    stored = sub.events()
    assert _keys(stored, "BlockStored") == [k.encode() for k in keys]
    # vLLM's BlockStored fields: hashes, parent, token_ids, block_size, lora_id, medium.
    assert stored[0][2:] == [None, [], 128, None, "CPU"]
    # An overwrite is a store again, not a removal.
    c.set(keys[0], b"w")
    assert _keys(sub.events(), "BlockStored") == [keys[0].encode()]
    c.delete(keys[:5])
    removed = sub.events()
    assert _keys(removed, "BlockRemoved") == [k.encode() for k in keys[:5]]
    assert removed[0][2] == "CPU"
    c.delete(["kvev-absent"])  # nothing was there: no event
    assert sub.events(0.3) == []


def test_pool_key_hash_and_expiry(kv_worker):
    _w, c, sub = kv_worker
    k = "Qwen@tp0@cache_family:full@00000000000000000000000000abc123@7"
    c.set(k, b"page", ttl_second=1)
    assert sub.events() == [["BlockStored", [0xABC123], None, [], 128, None, "CPU"]]
    deadline = time.time() + 10
    events = []
    while not events and time.time() < deadline:
        events = sub.events(0.5)
        if not events:
            c.exist([k])  # expiry is also found on lookup
    assert events == [["BlockRemoved", [0xABC123], "CPU"]]


def test_eviction_removed_events(kv_worker):
    _w, c, sub = kv_worker
    param = SetParam()
    param.write_mode = WriteMode.NONE_L2_CACHE_EVICT
    val = b"e" * (4 << 20)
    keys = ["kvev-evict-%d" % i for i in range(30)]  # 120 MiB through a 64 MiB arena
    for k in keys:
        c.set(k, val, param)
    events = sub.events(1.0)
    stored = [e[1][0] for e in events if e[0] == "BlockStored"]
    removed = [e[1][0] for e in events if e[0] == "BlockRemoved"]
    assert stored == [k.encode() for k in keys]
    gone = [k for k, there in zip(keys, c.exist(keys)) if not there]
    assert gone and sorted(removed) == sorted(k.encode() for k in gone)


@pytest.mark.parametrize("cfg,want", [
    ('{"backend_id": "w"}', "kv_events_config.bind_endpoint is required"),
    ('{"bind_endpoint": "tcp://127.0.0.1:1", "backend_id": ""}',
     "kv_events_config.backend_id must be a non-empty string"),
    ('{"bind_endpoint": "nowhere", "backend_id": "w"}',
     "kv_events_config.bind_endpoint 'nowhere': cannot bind"),
    ('{"bind_endpoint": "tcp://127.0.0.1:1", "backend_id": "w", "queue_capacity": 0}',
     "kv_events_config.queue_capacity must be an integer"),
    ("[1]", "kv_events_config must be a JSON object"),
])
def test_bad_config_is_named(tmp_path, cfg, want):
    port = _free_port()
    p = subprocess.run([str(WORKER_BIN), "--worker_address", "127.0.0.1:%d" % port,
                        "--unix_socket_dir", str(tmp_path), "--shared_memory_size_mb", "16",
                        "--kv_events_config", cfg], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert want in p.stdout + p.stderr
