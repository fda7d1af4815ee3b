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


def start_worker(build_dir, shm_mb):
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
         "--shared_memory_size_mb", str(shm_mb), "--log_level", "warn"],
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
    args = ap.parse_args()

    os.environ.setdefault("DS_BUILD_DIR", args.build_dir)
    from yr.datasystem import KVClient

    proc = tmp = None
    if args.address:
        host, _, port = args.address.rpartition(":")
        port, sock_dir = int(port), args.unix_socket_dir
    else:
        proc, host, port, sock_dir, tmp = start_worker(args.build_dir, args.shm_mb)
    try:
        # "local": measure the shared-memory path or fail, never a silent TCP fallback.
        client = KVClient(host, port, unix_socket_dir=sock_dir, transport="local")
        client.init()
        big = os.urandom(MiB) * 64
        small = os.urandom(MiB)
        cases = []
        for name, payload, ds_fn, ds_label, target in (
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
        if np is not None:
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
    result = {
        "bench": "py_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "client_local": local,
        "iters": args.iters,
        "warmup": args.warmup,
        "cases": cases,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("wrote", out)
    return 0 if all(c["meets_target"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
