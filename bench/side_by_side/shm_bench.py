#!/usr/bin/python3
"""vLLM-Omni's default same-node path, timed for the side-by-side harness.

vLLM-Omni's SharedMemoryConnector hands a payload to the next stage through a
fresh ``multiprocessing.shared_memory`` segment per payload
(``shm_write_bytes`` / ``shm_read_bytes`` in vllm_omni.entrypoints.stage_utils):

* put: ``SharedMemory(create=True, size=n)``, copy the payload in through a
  memoryview, close the segment (the name travels as metadata);
* get: ``SharedMemory(name=...)``, ``bytes(buf[:n])`` (a copy into a new
  bytes object), close, unlink.

This script does exactly that for one payload size: ``--warmup`` untimed
rounds, then ``--iters`` timed ones, with the payload a warm numpy array (as
a producer's serialized bytes would be). Both halves run in this process, which
only favours this path (no IPC to pass the name). It prints one JSON object:
{"size": n, "put_ns": [...], "get_ns": [...], "pair_ns": [...]} and the harness
(bench/side_by_side/sbs) turns the samples into rows.
"""

import argparse
import json
import sys
import time
from multiprocessing import shared_memory

import numpy as np


def put(payload):
    n = payload.nbytes
    shm = shared_memory.SharedMemory(create=True, size=n)
    mv = memoryview(shm.buf)
    mv[:n] = payload.data
    del mv
    name = shm.name
    shm.close()
    return name


def get(name, n):
    shm = shared_memory.SharedMemory(name=name)
    mv = memoryview(shm.buf)
    data = bytes(mv[:n])
    del mv
    shm.close()
    shm.unlink()
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--iters", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    if args.size <= 0 or args.iters <= 0 or args.iters > 100000:
        sys.exit("shm_bench: --size must be > 0 and --iters in 1..100000")

    payload = np.full(args.size, 0x5A, dtype=np.uint8)
    payload[-1] = 0xA5
    n = args.size
    for _ in range(args.warmup):
        get(put(payload), n)
    put_ns, get_ns, pair_ns = [], [], []
    for _ in range(args.iters):
        t0 = time.perf_counter_ns()
        name = put(payload)
        t1 = time.perf_counter_ns()
        data = get(name, n)
        t2 = time.perf_counter_ns()
        put_ns.append(t1 - t0)
        get_ns.append(t2 - t1)
        pair_ns.append(t2 - t0)
        if len(data) != n or data[0] != 0x5A or data[-1] != 0xA5:
            sys.exit("shm_bench: the payload came back wrong")
        del data
    json.dump({"size": n, "put_ns": put_ns, "get_ns": get_ns, "pair_ns": pair_ns}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
