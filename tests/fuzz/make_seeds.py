#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Seeds are small valid (and a few nearly valid) inputs for every message
layout wire.h documents, for the worker's request path, for both transfer-config
schemas in YAML and JSON, and for OmniSerializer documents with each marker
map. Regression inputs found by fuzzing live next to them under names starting
with "crash-" or "regress-" and are never rewritten by this script.

Usage: /usr/bin/python3 tests/fuzz/make_seeds.py   (needs python3-msgpack)
"""
import os
import struct

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
DATA = os.path.join(HERE, "..", "data")

MAGIC = 0x53445259
OPS = {"HELLO": 1, "SET": 2, "GET": 3, "CREATE": 4, "PUBLISH": 5, "RELEASE": 6, "DEL": 7,
       "EXIST": 8, "EXPIRE": 9, "QSIZE": 10, "GENKEY": 11, "HEALTH": 12, "STATS": 13,
       "SHUTDOWN": 14, "LOCATE": 15, "META_PUT": 16, "META_DEL": 17, "DROP": 18, "SETR": 23, "UCX_PULL": 24,
       "PEER_AUTH": 28}
PEER = 4
RESPONSE, NOREPLY = 1, 2


def u8(v): return struct.pack("<B", v)
def u32(v): return struct.pack("<I", v)
def i32(v): return struct.pack("<i", v)
def u64(v): return struct.pack("<Q", v)
def s(b): return u32(len(b)) + b


def keys(ks): return u32(len(ks)) + b"".join(s(k) for k in ks)


def frame(op, meta=b"", data=b"", flags=0, status=0, req=1):
    hdr = u32(MAGIC) + u8(1) + u8(flags) + struct.pack("<H", OPS[op]) + u32(status) + \
        u32(len(meta)) + u64(req) + u64(len(data))
    return hdr + meta + data


def hello(shm=0, sid=0, token=b"", key=b""):
    return u32(1) + u64(sid) + u8(shm) + s(token) + s(key)


def set_meta(kv, mode=0, ttl=0, nx=0):
    return u8(mode) + u32(ttl) + u8(nx) + u32(len(kv)) + \
        b"".join(s(k) + u64(len(v)) for k, v in kv)


def setr_meta(space, want, kv=()):
    """SETR: the space's handle, bytes wanted next, flags, the write head, (key, offset, len)."""
    return u64(space) + u64(want) + u8(0) + u8(0) + u32(0) + u8(0) + u32(len(kv)) + \
        b"".join(s(k) + u64(o) + u64(n) for k, o, n in kv)


def worker_input(nconn, hello=0xF, shm=0, tcp=0, join=0, fire_end=False, chunks=()):
    """A fuzz_worker input: nconn connections, bit i of each mask for connection i."""
    return u8((nconn - 1) | (4 if fire_end else 0)) + u8(hello | shm << 4) + u8(tcp | join << 4) + \
        b"".join(chunks)


def chunk(conn, data, close=False, fire=False, same_turn=False):
    ctl = conn | (4 if close else 0) | (8 if fire else 0) | (16 if same_turn else 0)
    return u8(ctl) + struct.pack("<H", len(data)) + data


def worker_multi_seeds():
    """Several connections: a publish on one ends waits parked by others
    whose connections have requests pipelined behind the wait. The first is
    the use-after-free the request layer fixed: C's SET completes A's wait,
    A's pipelined SET then published k again from inside C's publish and
    freed B's wait, which C's publish still walked."""
    k = [b"k"]
    wait = frame("GET", i32(100000) + u8(0) + keys(k), req=2)
    wait2 = frame("GET", i32(100000) + u8(0) + keys([b"k", b"j"]), req=3)
    set_k = frame("SET", set_meta([(b"k", b"v1")]), b"v1", req=4)
    set_j = frame("SET", set_meta([(b"j", b"jj")]), b"jj", req=5)
    get_k = frame("GET", i32(0) + u8(0) + keys(k), req=6)
    del_k = frame("DEL", keys(k), req=7)
    create = frame("CREATE", set_meta([(b"zc", b"0" * 4096)]), req=8)
    health = frame("HEALTH", req=9)
    A, B, C, D = 0, 1, 2, 3
    return {
        "multi_wait_pipelined_set": worker_input(3, chunks=[
            chunk(B, wait), chunk(A, wait + set_k), chunk(C, set_k)]),
        "multi_wait_pipelined_set_tcp": worker_input(3, tcp=0b101, chunks=[
            chunk(B, wait), chunk(A, wait + set_k), chunk(C, set_k)]),
        "multi_wait_pipelined_same_turn": worker_input(3, chunks=[
            chunk(B, wait), chunk(A, wait + set_k, same_turn=True), chunk(C, set_k)]),
        "multi_waiters": worker_input(4, tcp=0b1000, chunks=[
            chunk(B, wait), chunk(D, wait + get_k), chunk(A, wait + set_k + get_k),
            chunk(B, wait), chunk(C, set_k)]),
        "multi_wait_del_get": worker_input(3, chunks=[
            chunk(B, wait + del_k + get_k), chunk(A, wait + del_k + get_k + set_k + wait),
            chunk(C, set_k), chunk(C, del_k + set_k)]),
        "multi_wait_two_keys": worker_input(3, chunks=[
            chunk(B, wait2), chunk(A, wait + set_j + set_k), chunk(C, set_k)]),
        "multi_close_after_pipeline": worker_input(3, chunks=[
            chunk(B, wait), chunk(A, wait + set_k + del_k, close=True), chunk(C, set_k)]),
        "multi_close_same_turn": worker_input(3, chunks=[
            chunk(B, wait), chunk(A, wait + set_k, close=True, same_turn=True),
            chunk(C, set_k)]),
        "multi_close_mid_frame": worker_input(3, chunks=[
            chunk(B, wait), chunk(A, wait + set_k[:40], close=True), chunk(C, set_k),
            chunk(A, wait + set_k), chunk(C, set_k)]),
        "multi_wait_expire": worker_input(2, chunks=[
            chunk(B, wait), chunk(A, wait + set_k + get_k, fire=True), chunk(B, get_k)]),
        "multi_session_join": worker_input(2, hello=0b11, shm=0b01, join=0b10, chunks=[
            chunk(A, create), chunk(B, wait + health), chunk(A, set_k, close=True),
            chunk(B, get_k)]),
    }


REQUESTS = {
    "hello": frame("HELLO", hello(1)),
    "hello_join": frame("HELLO", hello(0, sid=0x9e3779b97f4a7c15, key=b"00112233445566778899aabbccddeeff")),
    "set": frame("SET", set_meta([(b"k1", b"v1"), (b"k2", b"hello")]), b"v1hello"),
    "set_ttl_nx": frame("SET", set_meta([(b"a.b-c_d", b"x" * 40)], mode=3, ttl=5, nx=1), b"x" * 40),
    "get": frame("GET", i32(0) + u8(0) + keys([b"k1", b"missing"])),
    "get_wait": frame("GET", i32(50) + u8(1) + keys([b"k1"])),
    "get_pin": frame("GET", i32(0) + u8(2) + keys([b"k1"])),
    "create": frame("CREATE", set_meta([(b"zc", b"0" * 4096)])),
    "publish": frame("PUBLISH", u32(2) + u64(1) + u64(1 << 32 | 1)),
    "release": frame("RELEASE", u32(1) + u64(1), flags=NOREPLY),
    # the first space a session gets is slot 0; its handle's generation is 2
    # once the answer has renamed it
    "setr_reserve": frame("SETR", setr_meta(0, 4096)),
    "setr": frame("SETR", setr_meta(2, 4096, [(b"k1", 0, 10), (b"k2", 64, 3)])),
    "del": frame("DEL", keys([b"k1", b"k2"])),
    "exist": frame("EXIST", keys([b"k1", b"nope"])),
    "expire": frame("EXPIRE", u32(3) + keys([b"k1"])),
    "qsize": frame("QSIZE", keys([b"k2"])),
    "genkey": frame("GENKEY", s(b"pre_")),
    "health": frame("HEALTH"),
    "stats": frame("STATS"),
    "shutdown": frame("SHUTDOWN"),
    "locate": frame("LOCATE", i32(10) + keys([b"k1"])),
    "meta_put": frame("META_PUT", s(b"127.0.0.1:31501") + u8(0) + u32(1) + s(b"k1") + u64(2) + u64(7)),
    "meta_del": frame("META_DEL", s(b"127.0.0.1:31501") + u8(1) + u32(1) + s(b"k1") + u64(7)),
    "drop": frame("DROP", u32(1) + s(b"k1") + u64(9)),
}

RESPONSES = {
    "r_hello": frame("HELLO", s(b"") + u64(7) + u64(1 << 20) + u32(65536) + s(b"0123456789abcdef") + u32(99) +
                     u64(0) + u32(0) + u32(0) + s(b"00112233445566778899aabbccddeeff"), flags=RESPONSE),
    "r_set": frame("SET", s(b"") + u32(2) + u32(0) + u32(0), flags=RESPONSE),
    "r_get": frame("GET", s(b"") + u32(3) + u8(1) + u64(2) + u8(0) + u64(0) + u8(2) + u64(10) +
                   u64(4096) + u64(1 << 32 | 1), b"v1", flags=RESPONSE),
    "r_create": frame("CREATE", s(b"") + u32(1) + u32(0) + u64(0) + u64(1), flags=RESPONSE),
    "r_setr": frame("SETR", s(b"") + u32(1) + u32(0) + u64(3) + u64(4096) + u64(4096),
                    flags=RESPONSE),
    "r_setr_refused": frame("SETR", s(b"bad range") + u64(0) + u64(0) + u64(0), flags=RESPONSE,
                            status=2),
    "r_exist": frame("EXIST", s(b"") + u32(2) + u8(1) + u8(0), flags=RESPONSE),
    "r_qsize": frame("QSIZE", s(b"") + u32(1) + u32(0) + u64(5), flags=RESPONSE),
    "r_genkey": frame("GENKEY", s(b"") + s(b"pre_abcd-0001"), flags=RESPONSE),
    "r_stats": frame("STATS", s(b"") + s(b'{"objects":{"count":1}}'), flags=RESPONSE),
    "r_err": frame("GET", s(b"key 'k' not found"), flags=RESPONSE, status=3),
    "r_locate": frame("LOCATE", s(b"") + u32(1) + u8(1) + u64(5) + u64(3) + s(b"127.0.0.1:1"),
                      flags=RESPONSE),
}


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    for name, data in {**REQUESTS, **RESPONSES}.items():
        write("fuzz_wire", name, data)
    # fuzz_worker: three setup bytes (connections - 1 and fire-at-end; HELLO
    # and want-arena bits; TCP and join-session bits), then chunks: a control
    # byte (connection, close after, fire deadlines after, no loop turn after),
    # a u16 length and the bytes (see fuzz_worker.c).
    r = REQUESTS
    for name, (ctl, stream) in {
        "set_get": (1, r["set"] + r["get"] + r["exist"] + r["qsize"]),
        "local_create": (3, r["create"] + r["publish"] + r["get_pin"] + r["release"]),
        "local_setr": (3, r["setr_reserve"] + r["setr"] + r["get"] + r["setr"]),
        "tcp_setr": (5, r["setr_reserve"] + r["setr"]),
        "tcp_mixed": (5, r["set_ttl_nx"] + r["expire"] + r["del"] + r["genkey"] + r["health"] +
                      r["stats"]),
        "wait": (9, r["get_wait"] + r["set"]),
        "wait_expire": (11, frame("GET", i32(100000) + u8(1) + keys([b"never"]))),
        "raw_hello": (0, r["hello"] + r["set"]),
        "half_set": (1, r["set"][:-3]),
        "bad_first": (0, r["get"]),
        "cluster_ops": (1, r["locate"] + r["meta_put"] + r["meta_del"] + r["drop"]),
        "shutdown": (3, r["shutdown"] + r["health"]),
    }.items():
        write("fuzz_worker", name, worker_input(1, hello=ctl & 1, shm=(ctl >> 1) & 1,
                                                tcp=(ctl >> 2) & 1, fire_end=bool(ctl & 8),
                                                chunks=[chunk(0, stream)]))
    for name, data in worker_multi_seeds().items():
        write("fuzz_worker", name, data)
    # fuzz_peer: one setup byte (bit 0 the harness completes PEER_AUTH first,
    # bit 1 Unix socket, bit 2 fire deadlines at the end, bit 3 no HELLO),
    # then the connection's frames (see fuzz_peer.c).
    nonce = b"0123456789abcdef" * 4
    pa1 = frame("PEER_AUTH", u8(1) + s(b"127.0.0.1:9") + s(nonce), req=40)
    pa2 = frame("PEER_AUTH", u8(2) + s(b"127.0.0.1:9") + s(nonce) + s(nonce) + s(b"ab" * 32),
                req=41)
    peer_ops = r["locate"] + r["meta_put"] + r["meta_del"] + r["drop"]
    wait_locate = frame("LOCATE", i32(100000) + u32(0) + keys([b"waited"]), req=7)
    pull = frame("UCX_PULL", s(b"k") + u64(5) + u64(9) + s(b"127.0.0.1:9") + u32(100), req=8)
    for name, (setup, stream) in {
        "client_peer_ops": (0, peer_ops + r["health"]),
        "client_peer_flag": (2, frame("DEL", keys([b"k"]), flags=PEER, req=3) +
                             frame("GET", i32(0) + u8(0) + keys([b"k"]), flags=PEER | NOREPLY,
                                   req=4) + frame("HEALTH", flags=0x40, req=5)),
        "client_peer_auth": (0, pa1 + pa2 + peer_ops),
        "proven_ops": (1, r["set"] + peer_ops + wait_locate + pull + r["get"]),
        "proven_wait": (5, wait_locate + r["set"]),
        "no_hello": (8, pa1 + peer_ops),
    }.items():
        write("fuzz_peer", name, u8(setup) + stream)

    for fn in sorted(os.listdir(DATA)):
        if fn.endswith((".yaml", ".yml")):
            with open(os.path.join(DATA, fn), "rb") as f:
                write("fuzz_transfer_config", "yaml_" + fn, b"\x00" + f.read())
    write("fuzz_transfer_config", "yaml_new",
          b"\x00connectors:\n  yr: {name: YuanrongConnector, extra: {host: 127.0.0.1, port: 35001}}\n"
          b"stages:\n  - stage_id: 0\n    output_connectors: {to_stage_1: yr}\n"
          b"  - stage_id: 1\n    input_connectors: {from_stage_0: yr}\n    engine_input_source: [0]\n")
    write("fuzz_transfer_config", "yaml_anchor",
          b"\x02base: &b {name: SharedMemoryConnector, extra: {shm_threshold_bytes: 65536}}\n"
          b"runtime:\n  connectors:\n    a: *b\n    c:\n      <<: *b\n      name: YuanrongConnector\n"
          b"  edges:\n    - {from: 0, to: 1}\n"
          b"stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: a}}\n")
    write("fuzz_transfer_config", "json_legacy",
          b'\x01{"stage_args":[{"stage_id":0,"output_connectors":{"to_stage_1":"yr"}},'
          b'{"stage_id":1,"input_connectors":{"from_stage_0":"yr"},"engine_input_source":[0]}],'
          b'"runtime":{"connectors":{"yr":{"name":"YuanrongConnector","extra":{"port":35001,'
          b'"get_sub_timeout_ms":1000,"nested":{"a":[1,2,null]}}}},"edges":[{"from":1,"to":2}]}}')
    write("fuzz_transfer_config", "json_new",
          b'\x03{"connectors":{"m":{"name":"MooncakeConnector"}},"stages":[{"stage_id":"0",'
          b'"output_connectors":{"to_stage_1":{"name":"MooncakeConnector","extra":{"x":true}}}}]}')

    f32 = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    docs = {
        "tensor": {"__tensor__": True, "dtype": "float32", "shape": [2, 2], "data": f32},
        "ndarray": {"__ndarray__": True, "dtype": "<f4", "shape": [4], "data": f32},
        "image": {"__pil_image__": True, "mode": "RGB", "shape": [1, 2, 3], "data": bytes(6)},
        "payload": {"request_id": "req-1", "ids": [1, -2, 300, 70000, 2 ** 40, -(2 ** 40)],
                    "hidden": {"__tensor__": True, "dtype": "bfloat16", "shape": [3],
                               "data": bytes(6)},
                    "meta": {"ok": True, "none": None, "f": 0.5, "s": "text" * 10},
                    "list": [[], {}, b"bin", 1.5]},
        "scalar_tensor": {"__tensor__": True, "dtype": "int64", "shape": [], "data": bytes(8)},
        "empty_tensor": {"__tensor__": True, "dtype": "uint8", "shape": [0, 3], "data": b""},
    }
    for name, doc in docs.items():
        write("fuzz_serializer", name, msgpack.packb(doc, use_bin_type=True))
    write("fuzz_serializer", "ext", msgpack.packb([msgpack.ExtType(5, b"abc"), 2 ** 64 - 1],
                                                  use_bin_type=True))
    write("fuzz_serializer", "float32", b"\xca\x3f\x80\x00\x00")

    # fuzz_client: control byte, four call numbers (see fuzz_client.c), then
    # the fake worker's answers, each a u16 length and a frame.
    def resp(op, meta, data=b"", status=0):
        return frame(op, meta, data, flags=RESPONSE, status=status)

    def statuses(n):
        return s(b"") + u32(n) + b"".join(u32(0) for _ in range(n))

    answers = {
        0: resp("SET", statuses(1)),
        1: resp("SET", statuses(3)),
        2: resp("GET", s(b"") + u32(1) + u8(1) + u64(3), b"one"),
        3: resp("GET", s(b"") + u32(3) + u8(1) + u64(3) + u8(0) + u64(0) + u8(1) + u64(5),
                b"onefive!"),
        4: resp("GET", s(b"") + u32(1) + u8(1) + u64(7), b"two-two"),
        5: resp("GET", s(b"") + u32(2) + u8(1) + u64(2) + u8(1) + u64(1), b"abc"),
        6: resp("SET", statuses(1)),
        7: resp("DEL", statuses(2)),
        8: resp("EXIST", s(b"") + u32(3) + u8(1) + u8(0) + u8(1)),
        9: resp("EXPIRE", statuses(2)),
        10: resp("QSIZE", s(b"") + u32(2) + u32(0) + u64(3) + u32(3) + u64(0)),
        11: resp("GENKEY", s(b"") + s(b"pre-0001")),
        12: resp("HEALTH", s(b"")),
        13: resp("GET", s(b"key missing"), status=3),
    }
    for name, calls in {"set_get_exist_genkey": [0, 2, 8, 11], "mset_mget_into_buffers": [1, 3, 4, 5],
                        "create_del_expire_qsize": [6, 7, 9, 10], "health_wait": [12, 13, 2, 0]}.items():
        body = b"".join(struct.pack("<H", len(answers[k])) + answers[k] for k in calls)
        write("fuzz_client", name, b"\x00" + bytes(calls) + body)
    hello_answer = resp("HELLO", s(b"") + u64(1) + u64(0) + u32(65536) + s(b"0123456789abcdef") +
                        u32(1) + u64(0) + u32(0) + u32(0) + s(b"00112233445566778899aabbccddeeff"))
    write("fuzz_client", "fuzzed_hello", b"\x01" + bytes([12, 2, 0, 0]) +
          struct.pack("<H", len(hello_answer)) + hello_answer +
          struct.pack("<H", len(answers[12])) + answers[12])


if __name__ == "__main__":
    main()
