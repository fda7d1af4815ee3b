"""Command line for cross-process and cross-language checks.

    python3 -m omni_connectors get --port 31501 --from 0 --to 1 --key req-1
    python3 -m omni_connectors put --port 31501 --from 0 --to 1 --key req-1 \\
        --ndarray float32:64x128 [--seed 0] [--tensor]

``get`` prints one JSON line describing what arrived: the payload size, the
sha256 of the stored bytes, and for every array in it (top level or in a dict)
its kind, dtype, shape and the sha256 of its data, so a producer written in
another language can compare. ``put`` stores a deterministic array (numpy
``default_rng(seed).standard_normal``, or ``arange`` for integer dtypes) as an
ndarray, or as a tensor map with --tensor, and prints the same description.
Exit status: 0 on success, 1 when get found nothing, 2 on errors.
"""

import argparse
import hashlib
import json
import sys

from .serializer import RawTensor, serialize


def _describe_value(v, path, out):
    import numpy as np

    if isinstance(v, np.ndarray):
        out.append({"path": path, "kind": "ndarray", "dtype": v.dtype.str, "shape": list(v.shape),
                    "sha256": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()})
    elif isinstance(v, RawTensor):
        out.append({"path": path, "kind": "tensor", "dtype": v.dtype, "shape": v.shape,
                    "sha256": hashlib.sha256(v.data).hexdigest()})
    elif type(v).__name__ == "Tensor" and hasattr(v, "numpy"):
        import torch

        raw = v.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        out.append({"path": path, "kind": "tensor", "dtype": str(v.dtype).replace("torch.", ""),
                    "shape": list(v.shape), "sha256": hashlib.sha256(raw).hexdigest()})
    elif isinstance(v, dict):
        for k, x in v.items():
            _describe_value(x, "%s/%s" % (path, k), out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _describe_value(x, "%s/%d" % (path, i), out)
    elif isinstance(v, (bytes, bytearray, memoryview)):
        out.append({"path": path, "kind": "bytes", "len": len(v),
                    "sha256": hashlib.sha256(bytes(v)).hexdigest()})


def describe(obj, size, stored=None):
    arrays = []
    _describe_value(obj, "", arrays)
    d = {"size": size, "arrays": arrays}
    if stored is not None:
        d["stored_sha256"] = hashlib.sha256(stored).hexdigest()
    return d


def _make_array(spec, seed):
    import numpy as np

    dtype, _, dims = spec.partition(":")
    shape = [int(x) for x in dims.split("x")] if dims else []
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    if dt.kind == "f":
        arr = np.random.default_rng(seed).standard_normal(n).astype(dt)
    else:
        arr = (np.arange(n) % 251).astype(dt)
    return arr.reshape(shape)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m omni_connectors", description=__doc__.split("\n\n")[0])
    ap.add_argument("op", choices=["get", "put"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=35001)
    ap.add_argument("--unix-socket-dir")
    ap.add_argument("--from", dest="from_stage", default="0")
    ap.add_argument("--to", dest="to_stage", default="1")
    ap.add_argument("--key", required=True, help="the request id (put_key / get_key)")
    ap.add_argument("--timeout-ms", type=int, default=1000)
    ap.add_argument("--ndarray", default="float32:16x16", help="put: dtype:DIMxDIM")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tensor", action="store_true", help="put: as a tensor map")
    args = ap.parse_args(argv)

    from .yuanrong_connector import YuanrongConnector

    cfg = {"host": args.host, "port": args.port, "get_sub_timeout_ms": args.timeout_ms,
           "zero_copy": False}
    if args.unix_socket_dir:
        cfg["unix_socket_dir"] = args.unix_socket_dir
    try:
        conn = YuanrongConnector(cfg)
    except Exception as e:
        print(json.dumps({"error": str(e)}))
        return 2
    try:
        if args.op == "put":
            arr = _make_array(args.ndarray, args.seed)
            if args.tensor:
                torch_name = {"<f4": "float32", "<f8": "float64", "<f2": "float16", "<i8": "int64",
                              "<i4": "int32", "<i2": "int16", "|i1": "int8", "|u1": "uint8",
                              "|b1": "bool"}[arr.dtype.str]
                data = {"__tensor__": True, "dtype": torch_name, "shape": list(arr.shape),
                        "data": arr.tobytes()}
            else:
                data = arr
            ok, size, _ = conn.put(args.from_stage, args.to_stage, args.key, data)
            if not ok:
                print(json.dumps({"error": conn.health().get("last_error")}))
                return 2
            print(json.dumps(describe(arr, size, serialize(data))))
            return 0
        got = conn.get(args.from_stage, args.to_stage, args.key)
        if got is None:
            h = conn.health()
            print(json.dumps({"error": "nothing under %s:%s_%s" % (args.key, args.from_stage,
                                                                    args.to_stage),
                              "last_error": h.get("last_error")}))
            return 1
        obj, size = got
        stored = conn.client.get([conn._make_key(args.key, args.from_stage, args.to_stage)])[0]
        print(json.dumps(describe(obj, size, stored)))
        return 0
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
