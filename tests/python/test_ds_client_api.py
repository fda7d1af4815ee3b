"""DsClient (Yuanrong's ``yr.datasystem.ds_client``) and the constructors' parameter order."""

import pytest

from yr.datasystem.ds_client import DsClient
from yr.datasystem.kv_client import KVClient
from yr.datasystem.object_client import ObjectClient


def test_ds_client_kv_and_object_share_the_worker(worker):
    a = DsClient(worker.host, worker.port)
    b = DsClient(worker.host, worker.port)
    a.init()
    b.init()
    a.kv().set("dsc_kv_key", "v1")
    assert b.object().get(["dsc_kv_key"], 0)[0].immutable_data().tobytes() == b"v1"
    a.object().put("dsc_obj_key", b"v2")
    assert b.kv().get(["dsc_obj_key"]) == [b"v2"]
    assert isinstance(a.kv(), KVClient) and isinstance(a.object(), ObjectClient)
    a.close()
    b.close()


def test_ds_client_hetero_moves_device_memory(worker):
    # The host device backend (conftest.py): a device pointer is a host address.
    import ctypes

    from yr.datasystem.hetero_client import Blob, DeviceBlobList, HeteroClient

    c = DsClient(worker.host, worker.port)
    c.init()
    h = c.hetero()
    assert isinstance(h, HeteroClient)
    with pytest.raises(RuntimeError, match="should not be empty"):
        h.mset_d2h(["k"], [])
    src = ctypes.create_string_buffer(b"device bytes", 12)
    dst = ctypes.create_string_buffer(12)
    h.mset_d2h(["dsc_hetero"], [DeviceBlobList(0, [Blob(ctypes.addressof(src), 12)])])
    assert h.mget_h2d(["dsc_hetero"], [DeviceBlobList(0, [Blob(ctypes.addressof(dst), 12)])],
                      0) == []
    assert dst.raw == b"device bytes"
    assert c.kv().get(["dsc_hetero"]) == [b"device bytes"]
    c.close()


def test_ds_client_argument_checks():
    with pytest.raises(TypeError, match="port"):
        DsClient("127.0.0.1", "1")
    with pytest.raises(RuntimeError, match="host and port must be provided together"):
        DsClient("127.0.0.1", 0)


def test_ds_client_service_discovery(worker):
    class OneWorker:
        def select_worker(self):
            return None, worker.host, worker.port, None

    c = DsClient(service_discovery=OneWorker())
    c.init()
    c.kv().set("dsc_sd_key", "v")
    assert c.kv().get(["dsc_sd_key"]) == [b"v"]
    c.close()


def test_lazy_exports():
    import yr.datasystem as ds

    assert ds.DsClient is DsClient
    assert "DsClient" in ds.__all__ and "HeteroClient" in ds.__all__


def test_kv_client_thirteenth_positional_is_fast_transport_mem_size():
    from yr.datasystem.util import Validator  # noqa: F401

    KVClient("127.0.0.1", 1, 9000, "", "", "", "", "", "", "", False, 0, 1024)
    with pytest.raises(TypeError, match="fast_transport_mem_size"):
        KVClient("127.0.0.1", 1, 9000, "", "", "", "", "", "", "", False, 0, True)
    with pytest.raises(RuntimeError, match="fast_transport_mem_size"):
        KVClient("127.0.0.1", 1, 9000, "", "", "", "", "", "", "", False, 0, 0)


def test_connect_time_env(worker, monkeypatch):
    monkeypatch.setenv("DATASYSTEM_CONNECT_TIME_MS", "soon")
    c = KVClient(worker.host, worker.port)
    with pytest.raises(RuntimeError, match="DATASYSTEM_CONNECT_TIME_MS='soon'"):
        c.init()
    # An explicit timeout is not overridden.
    c = KVClient(worker.host, worker.port, 5000)
    c.init()
    c.close()
    monkeypatch.setenv("DATASYSTEM_CONNECT_TIME_MS", "3000")
    c = KVClient(worker.host, worker.port)
    c.init()
    assert c._connect_timeout() == 3000
    c.close()
