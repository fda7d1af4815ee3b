#!/usr/bin/env bash
# A remote client's get over UCX vs over TCP (bench/ucx_client_bench.c):
# starts one worker with --enable_rdma true on a free loopback port, UCX over
# its TCP transport on loopback (UCX_TLS=tcp UCX_NET_DEVICES=lo, override them
# in the environment), runs the interleaved rounds, stops the worker by PID.
#   BUILD_DIR=build ROUNDS=5 bench/ucx_client_bench.sh [results.json]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
rounds=${ROUNDS:-5}
export UCX_TLS=${UCX_TLS:-tcp} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d /tmp/ucxbench-XXXXXX)
"$build/src/worker/datasystem_worker" --worker_address "127.0.0.1:$port" --unix_socket_dir "$dir" \
    --shared_memory_size_mb 512 --enable_rdma true >"$dir/worker.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
    grep -q "listening on" "$dir/worker.log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$dir/worker.log" >&2; exit 1; }
    sleep 0.1
done
echo "UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES, load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/ucx_client_bench" --worker_address "127.0.0.1:$port" --rounds "$rounds" \
    ${1:+--json "$1"}
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
