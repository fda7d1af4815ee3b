"""A module written the way vLLM-Omni's YuanrongConnector uses the datasystem
client runs unchanged against our worker.

The module below imports ``datasystem.kv_client`` exactly as vLLM-Omni does,
constructs ``KVClient(host, port)``, calls ``init()``, writes with
``set(key, bytes, WriteMode.NONE_L2_CACHE_EVICT)`` and reads with
``get([key], False, timeout)[0]``. It is written to a file and run as separate
producer and consumer processes.
"""

import subprocess
import sys
import time

import pytest

VLLM_STYLE_MODULE = '''
import pickle
import sys
import time
from typing import Any

try:
    from datasystem.kv_client import KVClient, SetParam, WriteMode
except ImportError:
    KVClient = None
    SetParam = None
    WriteMode = None


class StageConnector:
    """Shaped like vLLM-Omni's YuanrongConnector (pickle stands in for its serializer)."""

    def __init__(self, config: dict[str, Any]):
        if KVClient is None or SetParam is None or WriteMode is None:
            raise ImportError("datasystem is not available")
        self.config = config
        self.client = None
        self.set_param = SetParam()
        self.set_param.write_mode = WriteMode.NONE_L2_CACHE_EVICT
        self.get_sub_timeout_ms = max(0, int(self.config.get("get_sub_timeout_ms", 1000)))
        self.metrics = {"puts": 0, "gets": 0, "errors": 0, "timeouts": 0}
        self.host = self.config.get("host", "127.0.0.1")
        self.port = int(self.config.get("port", "35001"))
        self.client = KVClient(self.host, self.port)
        self.client.init()

    @staticmethod
    def _make_key(key, from_stage, to_stage):
        return f"{key}:{from_stage}_{to_stage}"

    def put(self, from_stage, to_stage, put_key, data):
        try:
            payload = pickle.dumps(data)
            key = self._make_key(put_key, from_stage, to_stage)
            put_rc = self.client.set(key, payload, self.set_param.write_mode)
            ok = put_rc is None or put_rc == 0 or put_rc is True
            if not ok:
                self.metrics["errors"] += 1
                return False, 0, None
            self.metrics["puts"] += 1
            return True, len(payload), None
        except Exception as e:
            print("put failed:", e, file=sys.stderr)
            self.metrics["errors"] += 1
            return False, 0, None

    def get(self, from_stage, to_stage, get_key, metadata=None):
        key = self._make_key(get_key, from_stage, to_stage)
        try:
            raw_list = self.client.get([key], False, self.get_sub_timeout_ms)
            raw = raw_list[0] if raw_list else None
            if raw:
                self.metrics["gets"] += 1
                return pickle.loads(raw), len(raw)
        except Exception:
            self.metrics["timeouts"] += 1
            return None
        return None

    def close(self):
        self.client = None


PAYLOADS = {
    "small": {"ids": [1, 2, 3], "text": "hello"},
    "bytes": b"\\x00\\x01" * 5000,
    "big": bytes(range(256)) * 8192,   # 2 MiB
    "nested": {"a": [{"b": 1.5}, None, True], "s": "x" * 100000},
}


def main():
    role, host, port, request = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    conn = StageConnector({"host": host, "port": port, "get_sub_timeout_ms": 15000})
    if role == "producer":
        time.sleep(0.3)   # the consumer is already waiting
        for name, payload in PAYLOADS.items():
            ok, size, meta = conn.put("0", "1", f"{request}-{name}", payload)
            assert ok and size > 0 and meta is None
        print("produced", conn.metrics["puts"])
    else:
        for name, payload in PAYLOADS.items():
            got = conn.get("0", "1", f"{request}-{name}")
            assert got is not None, name
            obj, size = got
            assert obj == payload, name
        conn.get_sub_timeout_ms = 200
        t0 = time.monotonic()
        assert conn.get("0", "1", f"{request}-never") is None
        assert time.monotonic() - t0 < 2.0
        assert conn.metrics == {"puts": 0, "gets": 4, "errors": 0, "timeouts": 1}, conn.metrics
        print("consumed", conn.metrics["gets"])
    conn.close()


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def vllm_module(tmp_path):
    path = tmp_path / "vllm_style_connector.py"
    path.write_text(VLLM_STYLE_MODULE)
    return path


def test_vllm_style_producer_consumer_processes(worker, vllm_module, key):
    env = worker.env()
    request = key.replace(".", "-")
    consumer = subprocess.Popen(
        [sys.executable, str(vllm_module), "consumer", worker.host, str(worker.port), request],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    time.sleep(0.2)
    producer = subprocess.Popen(
        [sys.executable, str(vllm_module), "producer", worker.host, str(worker.port), request],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    p_out, p_err = producer.communicate(timeout=60)
    c_out, c_err = consumer.communicate(timeout=60)
    assert producer.returncode == 0, p_err.decode()
    assert consumer.returncode == 0, c_err.decode()
    assert b"produced 4" in p_out
    assert b"consumed 4" in c_out


def test_vllm_style_in_process(worker, vllm_module, key, monkeypatch):
    monkeypatch.syspath_prepend(str(vllm_module.parent))
    import importlib

    mod = importlib.import_module("vllm_style_connector")
    conn = mod.StageConnector({"host": worker.host, "port": worker.port, "get_sub_timeout_ms": 0})
    try:
        # The datasystem client it built is ours, reached through shared memory.
        assert conn.client.is_local
        for name, payload in mod.PAYLOADS.items():
            ok, size, meta = conn.put("thinker", "talker", key + name, payload)
            assert ok and meta is None
            obj, got_size = conn.get("thinker", "talker", key + name)
            assert obj == payload and got_size == size
        assert conn.client.exist([key + "small:thinker_talker"]) == [True]
        assert conn.get("thinker", "talker", key + "absent") is None
    finally:
        conn.close()


def test_vllm_style_unreachable_worker_raises_at_construction(vllm_module, monkeypatch):
    from conftest import LIB_PATH, free_port

    if not LIB_PATH.exists():
        pytest.skip("no libdatasystem build")
    monkeypatch.syspath_prepend(str(vllm_module.parent))
    import importlib

    mod = importlib.import_module("vllm_style_connector")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        mod.StageConnector({"host": "127.0.0.1", "port": free_port()})
    assert time.monotonic() - t0 < 10
