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
