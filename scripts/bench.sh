#!/usr/bin/env bash
# The benchmark entry point: installs what it needs, builds the release
# flavour, runs the side-by-side harness (this project vs Redis 7 vs
# vLLM-Omni's shared-memory path, with the machine's limits; it starts and
# stops its own worker and Redis by PID), records the machine, and plots.
# Results go to the results folder only; tracked documentation changes only
# with --update-docs.
#
#   scripts/bench.sh [--quick] [--build-dir DIR] [--out-dir DIR] [--update-docs]
#
# --quick        fewer iterations and 100,000 resident keys instead of 1,000,000
# --build-dir    use (and incrementally build) this CMake build directory
#                instead of the release flavour in build/
# --out-dir      the results folder (default bench/results/): side_by_side.{json,
#                txt,svg}, side_by_side_throughput.dat, machine.json
# --update-docs  then regenerate docs/performance.md and the README's performance
#                paragraph from the results (a full run into bench/results/ only)
#
# To regenerate the documentation from the results already in bench/results/
# without running anything:
#   python3 bench/side_by_side/report.py --json bench/results/side_by_side.json \
#       --plot ../bench/results/side_by_side.svg --out docs/performance.md --readme README.md
set -euo pipefail
cd "$(dirname "$0")/.."

quick=()
build_dir=""
results=bench/results
update_docs=0
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=(--quick) ;;
        --build-dir) build_dir=${2:?--build-dir needs a directory}; shift ;;
        --out-dir) results=${2:?--out-dir needs a directory}; shift ;;
        --update-docs) update_docs=1 ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
results=${results%/}
if [ "$update_docs" = 1 ]; then
    # The tracked pages describe the tracked results of a full run, nothing else.
    if [ ${#quick[@]} -gt 0 ]; then
        echo "bench.sh: --update-docs needs a full run (not --quick)" >&2
        exit 2
    fi
    if [ "$(realpath -m "$results")" != "$(realpath -m bench/results)" ]; then
        echo "bench.sh: --update-docs needs the results in bench/results/ (not $results)" >&2
        exit 2
    fi
fi

bash scripts/setup.sh
if [ -z "$build_dir" ]; then
    bash scripts/build.sh release
    build_dir=build
else
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build_dir" -j "$(nproc)" --target sbs datasystem_worker dscli >/dev/null
fi
sbs="$build_dir/bench/sbs"
if [ ! -x "$sbs" ]; then
    echo "bench.sh: $sbs was not built (is libhiredis-dev installed?)" >&2
    exit 1
fi

mkdir -p "$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
set +e
"$sbs" "${quick[@]}" --build-dir "$build_dir" --out-dir "$results" \
    --python /usr/bin/python3 --shm-script bench/side_by_side/shm_bench.py \
    | tee "$results/side_by_side.txt"
rc=${PIPESTATUS[0]}
set -e
if [ ! -s "$results/side_by_side.json" ]; then
    echo "bench.sh: the harness wrote no results (exit $rc)" >&2
    exit 1
fi

/usr/bin/python3 bench/side_by_side/report.py --capture-machine "$results/machine.json" \
    --load-before "$load_before"
gnuplot -e "datafile='$results/side_by_side_throughput.dat'; outfile='$results/side_by_side.svg'" \
    bench/side_by_side/plot.gp
echo "bench.sh: table in $results/side_by_side.txt, plot in $results/side_by_side.svg," \
    "machine in $results/machine.json"
if [ "$update_docs" = 1 ]; then
    /usr/bin/python3 bench/side_by_side/report.py --json "$results/side_by_side.json" \
        --plot ../bench/results/side_by_side.svg --out docs/performance.md --readme README.md
fi
exit "$rc"
