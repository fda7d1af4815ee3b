"""Object cache semantics as Yuanrong defines them (ObjectClient, Buffer), against the real worker."""

import pytest

from yr.datasystem.object_client import Buffer, ObjectClient


@pytest.fixture
def oc(worker):
    c = ObjectClient(worker.host, worker.port)
    c.init()
    yield c
    c.close()


def test_empty_buffer_says_create_it_first():
    b = Buffer()
    for call in (b.get_size, b.mutable_data, b.immutable_data, b.wlatch, b.unwlatch, b.rlatch,
                 b.publish, b.seal, b.invalidate_buffer):
        with pytest.raises(RuntimeError, match="The buffer is None, please create it first."):
            call()
    b.release()  # nothing to drop


def test_g_decrease_ref_of_a_key_without_references_is_not_a_failure(oc):
    assert oc.g_decrease_ref(["objs_never_referenced"]) == []
    assert oc.g_increase_ref(["objs_ref_a"]) == []
    assert oc.g_decrease_ref(["objs_ref_a", "objs_never_referenced"]) == []
    assert oc.query_global_ref_num("objs_ref_a") == 0
    with pytest.raises(RuntimeError, match="object_keys"):
        oc.g_decrease_ref([])


def test_invalidate_buffer_removes_the_object_and_keeps_readers_pins(oc, worker):
    oc.put("objs_inv", b"payload")
    reader = ObjectClient(worker.host, worker.port)
    reader.init()
    pinned = reader.get(["objs_inv"], 0)[0]
    b = oc.get(["objs_inv"], 0)[0]
    b.invalidate_buffer()
    with pytest.raises(RuntimeError):
        oc.get(["objs_inv"], 0)
    # A pin taken before keeps its version's bytes, as for a delete.
    assert pinned.immutable_data().tobytes() == b"payload"
    with pytest.raises(RuntimeError, match="released"):
        b.immutable_data()
    reader.close()


def test_invalidate_unpublished_buffer_only_discards_it(oc):
    oc.put("objs_inv2", b"old")
    b = oc.create("objs_inv2", 3)
    b.invalidate_buffer()
    assert oc.get(["objs_inv2"], 0)[0].immutable_data().tobytes() == b"old"


def _client(worker):
    c = ObjectClient(worker.host, worker.port)
    c.init()
    return c


def test_write_latch_excludes_other_writers_and_latched_readers(oc, worker):
    import threading
    import time

    from yr.datasystem.kv_client import KVClient

    oc.put("objs_wl", b"v1")
    other = _client(worker)
    kv = KVClient(worker.host, worker.port)
    kv.init()
    mine = oc.get(["objs_wl"], 0)[0]
    mine.wlatch(timeout_sec=1)
    theirs = other.get(["objs_wl"], 0)[0]
    with pytest.raises(RuntimeError, match="still latched by another client"):
        theirs.wlatch(timeout_sec=1)
    ro = kv.get_read_only_buffers(["objs_wl"], 0)[0]
    with pytest.raises(RuntimeError):
        ro.immutable_data(with_latch=True, timeout_sec=1)
    # A plain read is not latched: it sees the published version.
    assert ro.immutable_data().tobytes() == b"v1"
    # The holder may read with a latch and publish under its write latch.
    mine.rlatch(1)
    mine.unrlatch()
    oc.put("objs_wl", b"v2")
    # Another client's write waits for the write latch.
    done = []
    t = threading.Thread(target=lambda: done.append(other.put("objs_wl", b"v3")))
    t.start()
    time.sleep(0.3)
    assert other.get(["objs_wl"], 0)[0].immutable_data().tobytes() == b"v2"
    mine.unwlatch()
    t.join(10)
    assert done == [None]
    assert other.get(["objs_wl"], 0)[0].immutable_data().tobytes() == b"v3"
    theirs.wlatch(timeout_sec=1)
    theirs.unwlatch()
    mine.unwlatch()  # nothing held any more: nothing to do
    kv.close()
    other.close()


def test_write_latch_released_when_its_client_dies(oc, worker):
    import subprocess
    import sys
    import textwrap

    oc.put("objs_wl_dead", b"v")
    code = textwrap.dedent(
        """
        import os, sys
        from yr.datasystem.object_client import ObjectClient
        c = ObjectClient(os.environ["DATASYSTEM_HOST"], int(os.environ["DATASYSTEM_PORT"]))
        c.init()
        c.get(["objs_wl_dead"], 0)[0].wlatch(timeout_sec=60)
        print("latched", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=worker.env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "latched"
        b = oc.get(["objs_wl_dead"], 0)[0]
        with pytest.raises(RuntimeError):
            b.wlatch(timeout_sec=1)
        proc.kill()
        proc.wait(10)
        b.wlatch(timeout_sec=10)
        b.unwlatch()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
