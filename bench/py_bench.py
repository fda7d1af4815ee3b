#!/usr/bin/python3
"""Python side-by-side: the datasystem vs multiprocessing.shared_memory.

Two cases, measured in one run against one worker:

* 64 MiB: ``KVClient.set`` + ``get_buffers`` (a zero-copy view of the worker's
  arena) against a SharedMemory segment created, filled, attached, copied out
  and unlinked -- what a pipeline does when it hands a payload to another
  process through a fresh segment per payload.
* 1 MiB: ``set`` + ``get`` (bytes copied out) against the same shm path.
* (for information, no target) 64 MiB through the connectors: a
  YuanrongConnector ``put`` + ``get`` of ``{"hidden": <64 MiB float32>, ...}``
  against the same shm path carrying the pickled dict.
* the connector's one-copy hand-off: a YuanrongConnector ``put`` + ``get`` of
  a 64 MiB and of a 1 MiB float32 tensor payload (serialized straight into an
  arena buffer, read back as views of the pinned buffer) against one warm
  memcpy of the same size (numpy.copyto into a buffer already touched),
  measured right before and after the row in the same run; the ratio is
  memcpy time / put+get time (targets: >= 0.5x at 64 MiB, >= 0.3x at 1 MiB).
  Next to it, for information, the old two-copy path: ``serialize`` + plain
  ``set``, ``get`` + ``deserialize``.

Each path runs in one process (the consumer's attach happens in the same
process, which only favours shm: no IPC for the name). The figure is the
median wall time of --iters rounds after --warmup rounds; the ratio is shm
time / datasystem time (targets: >= 50x at 64 MiB, >= 10x at 1 MiB).

Starts its own datasystem_worker on a free loopback port (from --build-dir,
default $DS_BUILD_DIR or <repo>/build-py) unless --address host:port names one
already running. Writes JSON to --json (default bench/results/py_bench.json).
"""

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import shared_memory
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

MiB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(build_dir, shm_mb, busy_poll_us=None):
    binary = Path(build_dir) / "src" / "worker" / "datasystem_worker"
    if not binary.exists():
        sys.exit("no worker at %s; build it or pass --address" % binary)
    tmp = tempfile.mkdtemp(prefix="pybench-")
    sock_dir = os.path.join(tmp, "sock")
    os.makedirs(sock_dir)
    port = free_port()
    log = open(os.path.join(tmp, "worker.log"), "wb")
    proc = subprocess.Popen(
        [str(binary), "--worker_address", "127.0.0.1:%d" % port, "--unix_socket_dir", sock_dir,
         "--shared_memory_size_mb", str(shm_mb), "--log_level", "warn"]
        + (["--busy_poll_us", str(busy_poll_us)] if busy_poll_us is not None else []),
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    sock = os.path.join(sock_dir, "worker-127.0.0.1-%d.sock" % port)
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit("worker did not start; see %s" % log.name)
        if os.path.exists(sock):
            try:
                # Listening on TCP too: the worker is past its start-up.
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                pass
        time.sleep(0.02)
    return proc, "127.0.0.1", port, sock_dir, tmp


def stop_worker(proc, tmp):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "iters": iters,
    }


def shm_roundtrip(payload):
    """Producer creates + fills a segment; consumer attaches, copies out; unlink."""

    def run():
        seg = shared_memory.SharedMemory(create=True, size=len(payload))
        try:
            seg.buf[: len(payload)] = payload
            peer = shared_memory.SharedMemory(name=seg.name)
            try:
                out = bytes(peer.buf[: len(payload)])
            finally:
                peer.close()
        finally:
            seg.close()
            seg.unlink()
        assert len(out) == len(payload)

    return run


def ds_set_get_buffers(client, key, payload):
    def run():
        client.set(key, payload)
        view = client.get_buffers([key])[0]
        assert len(view) == len(payload)
        view.release()

    return run


def ds_set_get(client, key, payload):
    def run():
        client.set(key, payload)
        out = client.get([key])[0]
        assert len(out) == len(payload)

    return run


def connector_put_get(conn, payload):
    state = {"i": 0}

    def run():
        rid = "pybench-conn-%d" % state["i"]
        state["i"] += 1
        ok, size, _ = conn.put("0", "1", rid, payload)
        assert ok
        obj, got = conn.get("0", "1", rid)
        assert got == size and obj["hidden"].shape == payload["hidden"].shape
        del obj
        conn.cleanup(rid)

    return run


def connector_put_get_same_key(conn, payload):
    """put + get under one request id, overwritten each round (no delete in the
    timed part; the previous version is freed once its views are gone)."""

    def run():
        ok, size, _ = conn.put("0", "1", "pybench-onecopy", payload)
        assert ok
        obj, got = conn.get("0", "1", "pybench-onecopy")
        assert got == size and obj.shape == payload.shape
        del obj

    return run


def old_path_put_get(client, payload):
    """What a connector without the one-copy path does: serialize into bytes,
    plain set (copied into the arena), plain get (copied out), deserialize."""
    from omni_connectors.serializer import deserialize, serialize

    def run():
        client.set("pybench-oldpath:0_1", serialize(payload))
        obj = deserialize(client.get(["pybench-oldpath:0_1"])[0], tensor_type="numpy")
        assert obj.shape == payload.shape

    return run


def warm_memcpy(src):
    import numpy as np

    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch every page of dst once

    def run():
        np.copyto(dst, src)

    return run


def onecopy_rows(client, host, port, sock_dir, args):
    import numpy as np

    from omni_connectors import YuanrongConnector

    conn = YuanrongConnector({"host": host, "port": port, "unix_socket_dir": sock_dir,
                              "transport": "local"})
    rows = []
    try:
        for name, nbytes, target in (("onecopy64MiB", 64 * MiB, 0.5), ("onecopy1MiB", MiB, 0.3)):
            iters = args.iters if nbytes > MiB else args.iters * 20
            warm = args.warmup if nbytes > MiB else args.warmup * 20
            t = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
            t = t.reshape(-1, 1024)
            copy = warm_memcpy(t)
            m0 = timed(copy, warm, iters)
            conn_t = timed(connector_put_get_same_key(conn, t), warm, iters)
            m1 = timed(copy, warm, iters)
            old = timed(old_path_put_get(client, t), warm, iters)
            memcpy_s = (m0["median_s"] + m1["median_s"]) / 2
            ratio = memcpy_s / conn_t["median_s"]
            rows.append({
                "case": name,
                "bytes": nbytes,
                "datasystem": dict(conn_t, path="conn put+get 1-copy",
                                   gb_per_s=nbytes / conn_t["median_s"] / 1e9),
                "memcpy": {"median_s": memcpy_s, "before_s": m0["median_s"],
                           "after_s": m1["median_s"], "gb_per_s": nbytes / memcpy_s / 1e9},
                "old_path": dict(old, path="serialize+set, get+deserialize",
                                 gb_per_s=nbytes / old["median_s"] / 1e9),
                "ratio": ratio,
                "old_path_ratio": memcpy_s / old["median_s"],
                "target_ratio": target,
                "meets_target": ratio >= target,
            })
    finally:
        conn.close()
        client.delete(["pybench-onecopy:0_1", "pybench-oldpath:0_1"])
    return rows


def shm_pickled(payload):
    import pickle

    def run():
        blob = pickle.dumps(payload, protocol=5)
        shm_roundtrip(blob)()

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", help="host:port of a running worker")
    ap.add_argument("--unix-socket-dir", help="its --unix_socket_dir")
    ap.add_argument("--build-dir", default=os.environ.get("DS_BUILD_DIR", str(REPO / "build-py")))
    ap.add_argument("--shm-mb", type=int, default=512)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "py_bench.json"))
    ap.add_argument("--onecopy-only", action="store_true",
                    help="only the connector one-copy rows against memcpy")
    ap.add_argument("--busy-poll-us", type=int, default=None,
                    help="the worker's --busy_poll_us and the client's DS_BUSY_POLL_US: "
                         "the longest either polls before sleeping, 0 = off (default: "
                         "their defaults, adaptive polling up to 200 us)")
    args = ap.parse_args()
    if args.busy_poll_us is not None:
        os.environ["DS_BUSY_POLL_US"] = str(args.busy_poll_us)

    os.environ.setdefault("DS_BUILD_DIR", args.build_dir)
    from yr.datasystem import KVClient

    proc = tmp = None
    if args.address:
        host, _, port = args.address.rpartition(":")
        port, sock_dir = int(port), args.unix_socket_dir
    else:
        proc, host, port, sock_dir, tmp = start_worker(args.build_dir, args.shm_mb,
                                                       args.busy_poll_us)
    try:
        # "local": measure the shared-memory path or fail, never a silent TCP fallback.
        client = KVClient(host, port, unix_socket_dir=sock_dir, transport="local")
        client.init()
        big = os.urandom(MiB) * 64
        small = os.urandom(MiB)
        cases = []
        onecopy = []
        try:
            import numpy  # noqa: F401
        except ImportError:
            pass
        else:
            onecopy = onecopy_rows(client, host, port, sock_dir, args)
        for name, payload, ds_fn, ds_label, target in () if args.onecopy_only else (
            ("64MiB", big, ds_set_get_buffers(client, "pybench.64m", big), "set+get_buffers", 50),
            ("1MiB", small, ds_set_get(client, "pybench.1m", small), "set+get", 10),
        ):
            ds = timed(ds_fn, args.warmup, args.iters)
            shm = timed(shm_roundtrip(payload), args.warmup, args.iters)
            ratio = shm["median_s"] / ds["median_s"]
            cases.append({
                "case": name,
                "bytes": len(payload),
                "datasystem": dict(ds, path=ds_label,
                                   gb_per_s=len(payload) / ds["median_s"] / 1e9),
                "shared_memory": dict(shm, path="create+copy+attach+copy+unlink",
                                      gb_per_s=len(payload) / shm["median_s"] / 1e9),
                "ratio": ratio,
                "target_ratio": target,
                "meets_target": ratio >= target,
            })
        try:
            import numpy as np
            from omni_connectors import YuanrongConnector
        except ImportError:
            np = None
        if np is not None and not args.onecopy_only:
            conn = YuanrongConnector({"host": host, "port": port, "unix_socket_dir": sock_dir,
                                      "transport": "local"})
            payload = {"hidden": np.frombuffer(big, dtype=np.float32).reshape(4096, -1),
                       "request_id": "r", "ids": list(range(64))}
            ds = timed(connector_put_get(conn, payload), args.warmup, args.iters)
            shm = timed(shm_pickled(payload), args.warmup, args.iters)
            conn.close()
            cases.append({
                "case": "conn64MiB",
                "bytes": len(big),
                "datasystem": dict(ds, path="conn put+get (dict)",
                                   gb_per_s=len(big) / ds["median_s"] / 1e9),
                "shared_memory": dict(shm, path="pickle+shm path",
                                      gb_per_s=len(big) / shm["median_s"] / 1e9),
                "ratio": shm["median_s"] / ds["median_s"],
                "target_ratio": None,
                "meets_target": True,
            })
        client.delete(["pybench.64m", "pybench.1m"])
        local = client.is_local
        client.close()
    finally:
        if proc is not None:
            stop_worker(proc, tmp)

    print("%-9s %-20s %12s   %-32s %12s   %8s  %s" % (
        "case", "datasystem", "median", "shared_memory", "median", "ratio", "target"))
    for c in cases:
        target = ("  >= %dx %s" % (c["target_ratio"], "ok" if c["meets_target"] else "MISSED")
                  if c["target_ratio"] else "  (info)")
        print("%-9s %-20s %9.3f ms   %-32s %9.3f ms   %7.1fx%s" % (
            c["case"], c["datasystem"]["path"], c["datasystem"]["median_s"] * 1e3,
            c["shared_memory"]["path"], c["shared_memory"]["median_s"] * 1e3, c["ratio"],
            target))
    if onecopy:
        print()
        print("%-13s %10s %10s %8s  %-7s %12s %8s  %s" % (
            "case", "put+get", "memcpy", "ratio", "target", "old path", "ratio", "memcpy GB/s"))
    for c in onecopy:
        print("%-13s %7.3f ms %7.3f ms %7.3fx  >= %.1fx %s %7.3f ms %7.3fx  %.1f (%.3f/%.3f ms)" % (
            c["case"], c["datasystem"]["median_s"] * 1e3, c["memcpy"]["median_s"] * 1e3,
            c["ratio"], c["target_ratio"], "ok    " if c["meets_target"] else "MISSED",
            c["old_path"]["median_s"] * 1e3, c["old_path_ratio"], c["memcpy"]["gb_per_s"],
            c["memcpy"]["before_s"] * 1e3, c["memcpy"]["after_s"] * 1e3))
    cases += onecopy
    result = {
        "bench": "py_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "client_local": local,
        "iters": args.iters,
        "warmup": args.warmup,
        "busy_poll_us": args.busy_poll_us,
        "cases": cases,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("wrote", out)
    return 0 if all(c["meets_target"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
