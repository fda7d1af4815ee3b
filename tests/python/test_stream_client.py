"""yr.datasystem.stream_client against a real worker: Yuanrong's API
(StreamClient, Producer, Consumer, Element, SubconfigType) with values and
status codes checked; docs/streams.md has the rules."""

import threading
import time

import pytest

from yr.datasystem import _native as _n
from yr.datasystem.stream_client import (
    Element,
    StreamClient,
    SubconfigType,
    SubscriptionConfig,
    SubscriptionType,
)


@pytest.fixture
def sc(worker):
    c = StreamClient(worker.host, worker.port)
    c.init()
    return c


def test_send_receive_ack_in_order(sc):
    p = sc.create_producer("py_s1", page_size_byte=4096, max_stream_size_byte=64 * 1024)
    c = sc.subscribe("py_s1", "sub", SubconfigType.STREAM.value)
    vals = [b"x" * i for i in range(1, 30)]
    for v in vals:
        p.send(v)
    p.send(bytearray(b"ba"))
    p.send(memoryview(b"mv"))
    got = c.receive(len(vals) + 2, 0)
    assert [bytes(e) for e in got] == vals + [b"ba", b"mv"]
    assert [e.get_id() for e in got] == list(range(1, len(vals) + 3))
    assert isinstance(got[0], Element)
    assert memoryview(got[3]).tobytes() == vals[3]
    c.ack(got[-1].get_id())
    assert c.receive_any(0) == []
    assert sc.query_global_producer_num("py_s1") == 1
    assert sc.query_global_consumer_num("py_s1") == 1
    with pytest.raises(RuntimeError) as e:
        sc.delete_stream("py_s1")
    assert e.value.code == _n.K_SC_STREAM_IN_USE
    p.close()
    c.close()
    with pytest.raises(RuntimeError) as e:
        c.close()
    assert e.value.code == _n.K_SC_ALREADY_CLOSED
    sc.delete_stream("py_s1")
    with pytest.raises(RuntimeError) as e:
        sc.delete_stream("py_s1")
    assert e.value.code == _n.K_SC_STREAM_NOT_FOUND


def test_bad_input(sc):
    with pytest.raises(TypeError):
        sc.create_producer(5)
    with pytest.raises(TypeError):
        sc.create_producer("py_bad").send("text")
    with pytest.raises(RuntimeError) as e:
        sc.create_producer("py_bad2", page_size_byte=5000)
    assert e.value.code == _n.K_INVALID and "Page size not multiple of 4096" in str(e.value)
    rr = sc.subscribe("py_bad", "rr", SubconfigType.ROUND_ROBIN.value)
    with pytest.raises(RuntimeError) as e:
        sc.subscribe("py_bad", "rr", SubconfigType.KEY_PARTITIONS.value)
    assert e.value.code == _n.K_INVALID and "exists with type 1, asked 2" in str(e.value)
    rr.close()
    assert SubscriptionType.KEY_PARTITIONS.value == 2
    assert SubscriptionConfig("s").subscription_type == SubconfigType.STREAM
    c = sc.subscribe("py_bad", "one", SubconfigType.STREAM.value)
    with pytest.raises(RuntimeError):
        c.receive(0, 0)
    with pytest.raises(RuntimeError):
        c.receive(1, 2**31)
    c.close()


def test_receive_waits_for_a_send(sc, worker):
    c = sc.subscribe("py_wait", "sub", SubconfigType.STREAM.value)
    t0 = time.monotonic()
    assert c.receive(1, 300) == []
    assert time.monotonic() - t0 >= 0.29

    def later():
        other = StreamClient(worker.host, worker.port)
        other.init()
        time.sleep(0.1)
        p = other.create_producer("py_wait")
        p.send(b"late")
        p.close()

    th = threading.Thread(target=later)
    th.start()
    got = c.receive_any(20000)
    th.join()
    assert [bytes(e) for e in got] == [b"late"]
    c.close()


def test_full_stream_send_times_out_then_goes_on(sc):
    p = sc.create_producer("py_full", page_size_byte=4096, max_stream_size_byte=64 * 1024)
    c = sc.subscribe("py_full", "slow", SubconfigType.STREAM.value)
    sent = 0
    with pytest.raises(RuntimeError) as e:
        for _ in range(1000):
            p.send(b"a" * 1000, 0)
            sent += 1
    assert sent == 64
    assert e.value.code == _n.K_OUT_OF_MEMORY
    assert "Producer unable to secure enough memory" in str(e.value)
    got = c.receive(4, 0)
    c.ack(got[-1].get_id())
    p.send(b"b" * 1000, 0)
    p.close()
    c.close()
