#!/usr/bin/env bash
# Profiles the worker and Redis on the same operations: runs phases of the
# side-by-side harness under `perf record -a -g` (every CPU, frame-pointer
# call graphs, 499 samples a second), then writes for each server a flame
# graph, its folded stacks and the functions with the most samples of their
# own (bench/flamegraph.py). The default phase, resident, is the small
# operations: random 1 KiB gets and sets among a million resident keys, ours
# and Redis's, over the Unix socket and over TCP.
#
#   scripts/profile.sh [--phases P] [--quick] [--out-dir DIR]
#
# --phases    harness phases (sbs --phases; default resident)
# --quick     the harness's --quick (100,000 resident keys)
# --out-dir   where to write (default bench/results/profile): perf.data,
#             perf.txt, datasystem_work.svg/.folded, redis-server.svg/.folded,
#             top.txt and the harness's own output
#
# The worker runs from a build with frame pointers (scripts/build.sh profile,
# build-prof/); Debian's redis-server is stripped, so its own frames show as
# [redis-server] and its kernel frames by name. Installs linux-perf if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=resident
quick=()
out=bench/results/profile
while [ $# -gt 0 ]; do
    case "$1" in
        --phases) phases=${2:?--phases needs a list}; shift ;;
        --quick) quick=(--quick) ;;
        --out-dir) out=${2:?--out-dir needs a directory}; shift ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "profile.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

bash scripts/setup.sh linux-perf
bash scripts/build.sh profile

mkdir -p "$out"
perf record -a -g -F 499 -o "$out/perf.data" -- \
    build-prof/bench/sbs "${quick[@]}" --phases "$phases" --build-dir build-prof \
    --out-dir "$out/sbs" --python /usr/bin/python3 --shm-script bench/side_by_side/shm_bench.py \
    | tee "$out/sbs.txt"
perf script -i "$out/perf.data" >"$out/perf.txt" 2>/dev/null
/usr/bin/python3 bench/flamegraph.py "$out/perf.txt" --out-dir "$out" \
    --comm datasystem_work --comm redis-server | tee "$out/top.txt"
echo "profile.sh: flame graphs in $out/datasystem_work.svg and $out/redis-server.svg, top functions in $out/top.txt"
