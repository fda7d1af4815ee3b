#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan in
# build-fuzz/, then runs each for a bounded time: scripts/fuzz.sh [seconds]
# (default 20 per target; FUZZ_TARGETS="fuzz_wire ..." picks a subset).
# Each run starts from the target's seed corpus and regression inputs in
# tests/fuzz/corpus/<target>/ (copied to a scratch directory, so the repo is
# not changed) and fails on the first crash, leak, sanitizer report or
# timeout, leaving the input that caused it in the scratch directory. Prints
# executions and executions per second per target. Exit 0 only when every
# target ran clean.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
case "$secs" in '' | *[!0-9]*) echo "fuzz.sh: seconds must be a number" >&2; exit 2 ;; esac
root=$PWD
dir=build-fuzz

if ! command -v clang >/dev/null; then
    echo "fuzz.sh: clang is not installed (scripts/setup.sh installs it)" >&2
    exit 1
fi
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DDS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >/dev/null || exit 1
targets=${FUZZ_TARGETS:-$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//' | tr '\n' ' ')}
# shellcheck disable=SC2086
if ! cmake --build "$dir" -j 2 --target $targets >"$dir/fuzz-build.log" 2>&1; then
    grep -E 'error|Error' "$dir/fuzz-build.log" | head -40 >&2
    echo "fuzz.sh: build failed, full log in $dir/fuzz-build.log" >&2
    exit 1
fi

scratch=$(mktemp -d /tmp/ds-fuzz-run-XXXXXX)
# run_one T: runs target T for $secs in its own scratch folder and leaves its
# verdict in $scratch/T/rc; the targets run one per core at a time.
run_one() {
    local t=$1 work="$scratch/$1"
    mkdir -p "$work/corpus"
    [ -d "tests/fuzz/corpus/$t" ] && cp -r "tests/fuzz/corpus/$t/." "$work/corpus/"
    # -timeout: one input running 25 s is a hang; -rss_limit_mb: a leak or a
    # runaway allocation. Both count as failures, like a crash.
    (cd "$work" && timeout $((secs + 120)) "$root/$dir/tests/fuzz/$t" \
        -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/" corpus >"$work/log" 2>&1)
    echo $? >"$work/rc"
}
jobs_max=$(nproc 2>/dev/null || echo 1)
for t in $targets; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    run_one "$t" &
done
wait
failed=()
for t in $targets; do
    work="$scratch/$t"
    rc=$(cat "$work/rc" 2>/dev/null || echo 1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        echo "fuzz.sh: $t: ${execs:-?} executions in ${secs} s (${rate:-?}/s), no crash"
    else
        failed+=("$t")
        echo "fuzz.sh: $t FAILED (exit $rc) after ${execs:-?} executions" >&2
        grep -E 'ERROR|SUMMARY|check failed|fuzz_[a-z_]+:|^    #[0-9] ' "$work/log" | head -30 >&2
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
            [ -e "$a" ] && echo "fuzz.sh: reproducer $a (add it to tests/fuzz/corpus/$t/ as regress-*)" >&2
        done
        echo "fuzz.sh: full log $work/log" >&2
    fi
done
if [ ${#failed[@]} -eq 0 ]; then
    rm -rf "$scratch"
    exit 0
fi
echo "fuzz.sh: failed: ${failed[*]} (scratch kept in $scratch)" >&2
exit 1
