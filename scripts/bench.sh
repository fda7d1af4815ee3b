#!/usr/bin/env bash
# The benchmark entry point: installs what it needs, builds the release
# flavour, runs the side-by-side harness (this project vs Redis 7 vs
# vLLM-Omni's shared-memory path, with the machine's limits; it starts and
# stops its own worker and Redis by PID), plots, and regenerates
# docs/performance.md from the run. Results go to bench/results/.
#
#   scripts/bench.sh [--quick] [--build-dir DIR]
#
# --quick        fewer iterations and 100,000 resident keys instead of 1,000,000
# --build-dir    use (and incrementally build) this CMake build directory
#                instead of the release flavour in build/
set -euo pipefail
cd "$(dirname "$0")/.."

quick=()
build_dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=(--quick) ;;
        --build-dir) build_dir=${2:?--build-dir needs a directory}; shift ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

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

results=bench/results
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

gnuplot -e "datafile='$results/side_by_side_throughput.dat'; outfile='$results/side_by_side.svg'" \
    bench/side_by_side/plot.gp
/usr/bin/python3 bench/side_by_side/report.py --json "$results/side_by_side.json" \
    --plot ../bench/results/side_by_side.svg --out docs/performance.md --load-before "$load_before"
echo "bench.sh: table in $results/side_by_side.txt, plot in $results/side_by_side.svg, report in docs/performance.md"
exit "$rc"
