#!/usr/bin/env bash
# A well-behaved client's 1 KiB set+get p99 while hostile clients flood one
# worker up to each quota (bench/flood_bench.c): starts one worker on a free
# loopback port with a 2 GiB arena, a 1 s handshake deadline (so the silent
# sockets it closes are reopened within the run) and a 256 MiB in-flight
# quota (so four connections pipelining 256 MiB SETs pass it); the latch and
# subscription quotas are the defaults. Stops the worker by PID.
#   BUILD_DIR=build SAMPLES=2000 bench/flood_bench.sh [results.json]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
samples=${SAMPLES:-2000}
dir=$(mktemp -d /tmp/floodbench-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
flags=(--shared_memory_size_mb 2048 --handshake_timeout_ms 1000 --max_client_inflight_mb 256)
"$build/src/worker/datasystem_worker" --worker_address "127.0.0.1:$port" \
    --unix_socket_dir "$dir" "${flags[@]}" >"$dir/worker.log" 2>&1 &
pid=$!
for _ in $(seq 600); do # up to 60 s: a 2 GiB arena takes seconds to map on a busy machine
    grep -qs "listening on" "$dir/worker.log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$dir/worker.log" >&2; exit 1; }
    sleep 0.1
done
grep -q "listening on" "$dir/worker.log" || { echo "flood_bench.sh: the worker did not start" >&2; exit 1; }
# LOOP_FIFO=1 (root): the worker's loop thread (its main thread; the
# others, started before it listens, keep their policy) runs SCHED_FIFO, so
# that the longest loop pass and event the bench reads from STATS are the
# loop's own work, not stretched by preemption on a loaded machine.
if [ "${LOOP_FIFO:-0}" = 1 ]; then chrt -f -p 10 "$pid"; echo "worker loop thread: SCHED_FIFO 10"; fi
echo "worker flags: ${flags[*]}; $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/flood_bench" --host 127.0.0.1 --port "$port" --sockdir "$dir" --samples "$samples" \
    ${1:+--json "$1"}
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
