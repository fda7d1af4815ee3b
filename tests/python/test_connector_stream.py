"""Streaming edges of YuanrongConnector (omni_connectors/stream_edge.py)
against a real worker: chunks arrive in order and byte-exact, each one before
the writer sends the next; put_chunked/get_chunked with the stream_chunk_size
option; bad calls raise naming what was wrong."""

import threading

import pytest

from omni_connectors import YuanrongConnector


@pytest.fixture
def conn(worker):
    c = YuanrongConnector({"host": worker.host, "port": worker.port, "get_sub_timeout_ms": 5000,
                           "unix_socket_dir": worker.sock_dir, "stream_chunk_size": 1000})
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def rid(key):
    return key.replace(".", "-")


def data(n, seed=0):
    return bytes((i * 31 + seed) & 0xFF for i in range(n))


def test_put_get_chunked(conn, rid):
    payload = data(10500, 5)
    assert conn.put_chunked("talker", "code2wav", rid, payload) == 11
    assert conn.get_chunked("talker", "code2wav", rid) == payload


def test_chunks_by_chunk_size(conn, rid):
    payload = data(4100, 1)
    conn.put_chunked("talker", "code2wav", rid, payload, chunk_size=1024)
    with conn.open_chunk_reader("talker", "code2wav", rid) as r:
        got = list(r.chunks(5000))
        assert r.next(0) is None  # after the end, end again
    assert [len(c) for c in got] == [1024, 1024, 1024, 1024, 4]
    assert b"".join(got) == payload


def test_reader_first_gets_each_chunk_before_the_next_is_sent(conn, rid):
    chunks = [data(2048, i) for i in range(5)]
    allowed = [threading.Event() for _ in chunks]
    sent = []
    errors = []

    def writer():
        try:
            with conn.open_chunk_writer("talker", "code2wav", rid) as w:
                for i, c in enumerate(chunks):
                    assert allowed[i].wait(10)
                    w.send(c)
                    sent.append(i)
                w.end()
        except Exception as e:  # reported by the main thread
            errors.append(e)

    with conn.open_chunk_reader("talker", "code2wav", rid) as r:
        with pytest.raises(TimeoutError, match="no chunk within"):
            r.next(0)
        t = threading.Thread(target=writer)
        t.start()
        for i, c in enumerate(chunks):
            allowed[i].set()
            assert r.next(10000) == c
            # Chunk i arrived while the writer was not yet allowed chunk i + 1.
            assert len(sent) <= i + 1
        assert r.next(10000) is None
        t.join(10)
    assert not errors


def test_bad_calls(conn, rid, worker):
    with pytest.raises(ValueError, match="stream_chunk_size"):
        YuanrongConnector({"host": worker.host, "port": worker.port,
                           "unix_socket_dir": worker.sock_dir, "stream_chunk_size": -1})
    plain = YuanrongConnector({"host": worker.host, "port": worker.port,
                               "unix_socket_dir": worker.sock_dir})
    try:
        with pytest.raises(ValueError, match="needs a chunk size"):
            plain.put_chunked("a", "b", rid, b"xyz")
    finally:
        plain.close()
    with conn.open_chunk_writer("a", "b", rid) as w:
        with pytest.raises(ValueError, match="not empty"):
            w.send(b"")
        w.end()
        with pytest.raises(ValueError, match="after the end marker"):
            w.send(b"x")
    conn.close()
    with pytest.raises(RuntimeError, match="closed"):
        conn.open_chunk_writer("a", "b", rid)
