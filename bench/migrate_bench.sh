#!/usr/bin/env bash
# Planned-exit migration throughput against the data plane's stream rate,
# measured in the same run: tests/cluster/ct_migrate (three workers over a
# private etcd, 240 keys of 1 KiB to 2 MiB, two `dscli stop`s) reports the
# bytes its two exits moved and the seconds they took, and the rate of one
# 64 MiB worker-to-worker get. Run with the migration rate limit lifted
# (what the machinery can do) and at Yuanrong's default 40 MiB/s (that the
# limit holds). Writes one JSON object with both rows and the load average.
#   BUILD_DIR=build bench/migrate_bench.sh [results.json]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${BUILD_DIR:-build}" && pwd)
out=${1:-bench/results/migrate_bench.json}
tmp=$(mktemp -d /tmp/migbench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for rate in 100000 40; do
    DS_BUILD_DIR="$build" DS_MIGRATE_RATE=$rate DS_MIGRATE_BENCH_OUT="$tmp/$rate.json" \
        "$build/tests/cluster/ct_migrate" >"$tmp/$rate.log" 2>&1 || {
        cat "$tmp/$rate.log" >&2
        exit 1
    }
done
python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
rows = {r: json.load(open(os.path.join(tmp, r + ".json"))) for r in ("100000", "40")}
doc = {
    "bench": "migrate_bench",
    "what": "bytes moved by two planned exits (dscli stop) over their seconds, against one "
            "64 MiB worker-to-worker get in the same run",
    "loadavg": open("/proc/loadavg").read().split()[:3],
    "unlimited": rows["100000"],
    "limit_40": rows["40"],
}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(json.dumps(doc, indent=1))
PY
