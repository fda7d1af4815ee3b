#!/usr/bin/env bash
# Bursts of local 1 MiB set+gets after idle gaps (bench/lane_bursts.c)
# against a worker of each build directory given, the builds taking turns
# with a fresh worker per round, so that two builds are compared in one run
# on the same machine state. Each worker runs on 127.0.0.1 and is stopped by
# its PID. Per round and build: one line per burst, a summary and the polling
# rows (the shares of small sets the worker caught while polling, the worker
# and the client on given CPUs: lane_bursts.c); at the end each build's
# totals over all rounds.
#
#   bench/lane_bursts.sh BUILD_DIR [BUILD_DIR ...]
#
# Environment: ROUNDS (10), BURSTS per round (10), IDLE_MS (100), PAIRS (100),
# SIZE (1048576), PORT (31557).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
rounds=${ROUNDS:-10}
port=${PORT:-31557}
out=$(mktemp -d /tmp/ds-lane-bursts-XXXXXX)
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$out"
}
trap cleanup EXIT
for b in "$@"; do
    for f in src/worker/datasystem_worker src/cli/dscli bench/lane_bursts; do
        [ -x "$b/$f" ] || { echo "lane_bursts.sh: $b/$f is not built" >&2; exit 1; }
    done
done
for r in $(seq 1 "$rounds"); do
    for b in "$@"; do
        "$b/src/worker/datasystem_worker" --worker_address "127.0.0.1:$port" \
            --shared_memory_size_mb 1024 --log_level warn >"$out/worker.log" 2>&1 &
        pid=$!
        up=0
        for _ in $(seq 100); do
            if "$b/src/cli/dscli" status --worker_address "127.0.0.1:$port" >/dev/null 2>&1; then
                up=1
                break
            fi
            sleep 0.05
        done
        [ "$up" = 1 ] || { echo "lane_bursts.sh: the worker of $b did not start" >&2; cat "$out/worker.log" >&2; exit 1; }
        sleep 0.3
        "$b/bench/lane_bursts" --worker_address "127.0.0.1:$port" \
            --worker-pid "$pid" --bursts "${BURSTS:-10}" --pairs "${PAIRS:-100}" \
            --size "${SIZE:-1048576}" --idle-ms "${IDLE_MS:-100}" \
            --dscli "$b/src/cli/dscli" | sed "s|^|$b |" | tee -a "$out/all"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        pid=""
    done
done
echo
for b in "$@"; do
    lines=$(grep "^$b burst" "$out/all")
    ratios=$(sed -E 's/.*\(([0-9.]+) of a memcpy\).*/\1/' <<<"$lines" | sort -n)
    n=$(wc -l <<<"$ratios")
    median=$(sed -n "$((n / 2 + 1))p" <<<"$ratios")
    under=$(awk '$1 < 0.65' <<<"$ratios" | wc -l)
    cpu=$(sed -E 's|.* CPU ([0-9]+)/([0-9]+)$|\1 \2|' <<<"$lines" |
        awk '{ s += $1; l += $2 } END { printf "%d/%d", s, l }')
    echo "$b: $n bursts, median set $median of a memcpy, $under under 0.65; worker on the client's CPU $cpu"
    for row in apart parting watch; do
        shares=$(grep "^$b polling  $row " "$out/all" | sed -E 's/.*\(([0-9.]+)\)$/\1/' | sort -n)
        [ -n "$shares" ] || continue
        k=$(wc -l <<<"$shares")
        echo "$b: polling $row: median share caught $(sed -n "$((k / 2 + 1))p" <<<"$shares") over $k rounds"
    done
done
