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


def _exists(oc, key):
    try:
        return oc.get([key], 0)[0] is not None
    except RuntimeError:
        return False


def test_nested_references_keep_children_until_the_parent_goes(oc):
    p, c1, c2, gc = "objs_nest_p", "objs_nest_c1", "objs_nest_c2", "objs_nest_gc"
    assert oc.g_increase_ref([p, c1, c2, gc]) == []
    oc.put(gc, b"grandchild")
    oc.put(c1, b"child1", nested_object_keys=[gc])
    oc.put(c2, b"child2")
    b = oc.create(p, 6)
    b.memory_copy(b"parent")
    b.publish([c1, c2])
    assert oc.g_decrease_ref([c1, c2, gc]) == []
    # The holds are not counted as references, and keep the objects.
    assert [oc.query_global_ref_num(k) for k in (c1, c2, gc)] == [0, 0, 0]
    assert all(_exists(oc, k) for k in (p, c1, c2, gc))
    # Two parents: the child stays while either holds it.
    assert oc.g_increase_ref(["objs_nest_p2"]) == []
    oc.put("objs_nest_p2", b"p2", nested_object_keys=[c2])
    assert oc.g_decrease_ref([p]) == []
    assert not _exists(oc, p) and not _exists(oc, c1) and not _exists(oc, gc)
    assert _exists(oc, c2)
    assert oc.g_decrease_ref(["objs_nest_p2"]) == []
    assert not _exists(oc, c2)


def test_republish_replaces_the_nested_keys(oc):
    p, a, b = "objs_renest_p", "objs_renest_a", "objs_renest_b"
    assert oc.g_increase_ref([p, a, b]) == []
    oc.put(a, b"a")
    oc.put(b, b"b")
    oc.put(p, b"1", nested_object_keys=[a])
    assert oc.g_decrease_ref([a, b]) == []
    # b had no holder: it went with its last reference; a is held.
    assert _exists(oc, a) and not _exists(oc, b)
    oc.put(b, b"b")
    oc.put(p, b"2", nested_object_keys=[b])
    # a's only hold went with the re-publish.
    assert not _exists(oc, a) and _exists(oc, b)
    assert oc.g_decrease_ref([p]) == []
    assert not _exists(oc, b)


def test_nested_keys_are_checked(oc):
    with pytest.raises(TypeError, match="nested_object_keys"):
        oc.put("objs_nest_bad", b"x", nested_object_keys=[1])
    with pytest.raises(RuntimeError, match="cannot be nested in itself"):
        oc.put("objs_nest_self", b"x", nested_object_keys=["objs_nest_self"])


def test_references_of_a_killed_client_are_released(oc, worker):
    import subprocess
    import sys
    import textwrap

    oc.put("objs_dead_ref", b"v")
    oc.put("objs_dead_kid", b"k")
    oc.put("objs_dead_shared", b"s")
    assert oc.g_increase_ref(["objs_dead_shared"]) == []
    code = textwrap.dedent(
        """
        import os, sys
        from yr.datasystem.object_client import ObjectClient
        c = ObjectClient(os.environ["DATASYSTEM_HOST"], int(os.environ["DATASYSTEM_PORT"]))
        c.init()
        assert c.g_increase_ref(["objs_dead_ref", "objs_dead_shared"]) == []
        c.put("objs_dead_ref", b"v", nested_object_keys=["objs_dead_kid"])
        print("held", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=worker.env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert oc.query_global_ref_num("objs_dead_shared") == 2
        # Another client cannot drop them (Yuanrong skips such keys).
        assert oc.g_decrease_ref(["objs_dead_ref"]) == []
        assert _exists(oc, "objs_dead_ref")
        proc.kill()
        proc.wait(10)
        import time

        for _ in range(500):
            if not _exists(oc, "objs_dead_ref"):
                break
            time.sleep(0.01)
        assert not _exists(oc, "objs_dead_ref") and not _exists(oc, "objs_dead_kid")
        assert _exists(oc, "objs_dead_shared")
        assert oc.query_global_ref_num("objs_dead_shared") == 1
        assert oc.g_decrease_ref(["objs_dead_shared"]) == []
        assert not _exists(oc, "objs_dead_shared")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_mutable_object_readers_see_whole_versions(oc, worker):
    import threading

    from yr.datasystem.kv_client import KVClient

    key, size, versions = "objs_mut", 256 * 1024, 30
    oc.put(key, bytes([0]) * size)
    stop = threading.Event()
    seen, bad = set(), []

    def read_loop():
        r = ObjectClient(worker.host, worker.port)
        r.init()
        kv = KVClient(worker.host, worker.port)
        kv.init()
        try:
            for _ in range(5000):
                if stop.is_set():
                    break
                data = r.get([key], 0)[0].immutable_data().tobytes()
                # Also a latched read: it either waits out the writer or fails, never tears.
                ro = kv.get_read_only_buffers([key], 0)[0]
                try:
                    latched = ro.immutable_data(with_latch=True, timeout_sec=1).tobytes()
                    ro.unrlatch()
                except RuntimeError:
                    latched = data
                for d in (data, latched):
                    if d.count(d[:1]) != size:
                        bad.append(d[:1])
                    seen.add(d[0])
        finally:
            kv.close()
            r.close()

    readers = [threading.Thread(target=read_loop) for _ in range(2)]
    for t in readers:
        t.start()
    b = oc.get([key], 0)[0]
    try:
        for v in range(1, versions + 1):
            b.wlatch(timeout_sec=10)
            # Written in two halves: no reader may see the first half alone.
            b.memory_copy(bytes([v]) * (size // 2))
            b.mutable_data()[size // 2:] = bytes([v]) * (size // 2)
            b.publish()
            b.unwlatch()
            assert b.immutable_data().tobytes() == bytes([v]) * size
    finally:
        stop.set()
        for t in readers:
            t.join(30)
    assert bad == []
    assert oc.get([key], 0)[0].immutable_data().tobytes() == bytes([versions]) * size
    assert seen <= set(range(versions + 1))


def test_mutable_write_keeps_old_readers_bytes_and_partial_copy(oc):
    oc.put("objs_mut2", b"abcdef")
    old = oc.get(["objs_mut2"], 0)[0]
    b = oc.get(["objs_mut2"], 0)[0]
    b.memory_copy(b"XY", 2)
    # Unpublished: the writer sees its write, nobody else does.
    assert b.immutable_data().tobytes() == b"abXYef"
    assert oc.get(["objs_mut2"], 0)[0].immutable_data().tobytes() == b"abcdef"
    b.publish()
    assert oc.get(["objs_mut2"], 0)[0].immutable_data().tobytes() == b"abXYef"
    assert old.immutable_data().tobytes() == b"abcdef"


def test_seal_is_final(oc, worker):
    b = oc.create("objs_seal", 3)
    b.wlatch()
    b.memory_copy(b"one")
    b.seal()
    b.unwlatch()
    for call in (lambda: b.memory_copy(b"two"), b.mutable_data, b.publish, b.seal, b.wlatch):
        with pytest.raises(RuntimeError, match="Client object is already sealed") as ei:
            call()
        assert ei.value.code == 2000  # K_OC_ALREADY_SEALED
    assert oc.get(["objs_seal"], 0)[0].immutable_data().tobytes() == b"one"
    # The mark is the worker's: another client cannot publish over it either.
    other = ObjectClient(worker.host, worker.port)
    other.init()
    try:
        with pytest.raises(RuntimeError) as ei:
            other.put("objs_seal", b"two")
        assert ei.value.code == 2000
        g = other.get(["objs_seal"], 0)[0]
        with pytest.raises(RuntimeError) as ei:
            g.memory_copy(b"two")
            g.publish()
        assert ei.value.code == 2000
    finally:
        other.close()
    assert oc.get(["objs_seal"], 0)[0].immutable_data().tobytes() == b"one"
    # publish, unlike seal, leaves the object writable.
    p = oc.create("objs_pub", 3)
    p.memory_copy(b"one")
    p.publish()
    p.memory_copy(b"two")
    p.publish()
    assert oc.get(["objs_pub"], 0)[0].immutable_data().tobytes() == b"two"


def test_get_meta_info(oc, worker):
    from yr.datasystem.object_client import ObjMetaInfo

    oc.put("objs_meta", b"12345")
    metas = oc.get_meta_info(["objs_meta", "objs_meta_missing"])
    assert metas == [ObjMetaInfo(5, ["%s:%d" % (worker.host, worker.port)]), ObjMetaInfo(0, [])]
    with pytest.raises(RuntimeError):
        oc.get_meta_info(["objs_meta_missing"])
    with pytest.raises(RuntimeError, match="no tenants"):
        oc.get_meta_info(["objs_meta"], "tenant1")
    with pytest.raises(RuntimeError, match="should not be empty"):
        oc.get_meta_info([])
    with pytest.raises(TypeError):
        oc.get_meta_info("objs_meta")
