#!/usr/bin/env bash
# What TLS costs a remote client (bench/tls_bench.c): makes a throw-away CA
# and worker certificate (openssl CLI), starts two workers on free loopback
# ports - one plain, one with --enable_tls - runs the interleaved rounds
# against both, stops the workers by PID.
#   BUILD_DIR=build ROUNDS=5 bench/tls_bench.sh [results.json]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
rounds=${ROUNDS:-5}
dir=$(mktemp -d /tmp/tlsbench-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
(cd "$dir" &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
        -out ca.pem -days 1 -subj /CN=tls-bench-ca &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout worker.key \
        -out worker.csr -subj /CN=tls-bench-worker &&
    openssl x509 -req -in worker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out worker.pem \
        -days 1) >/dev/null 2>&1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
start() { # name port flags...
    local name=$1 port=$2
    shift 2
    "$build/src/worker/datasystem_worker" --worker_address "127.0.0.1:$port" \
        --unix_socket_dir "$dir/$name" --shared_memory_size_mb 512 "$@" >"$dir/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do
        grep -q "listening on" "$dir/$name.log" && return 0
        kill -0 "${pids[-1]}" 2>/dev/null || { cat "$dir/$name.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "tls_bench.sh: the $name worker did not start" >&2
    exit 1
}
mkdir -p "$dir/plain" "$dir/tls"
pp=$(free_port)
start plain "$pp"
tp=$(free_port)
start tls "$tp" --enable_tls --tls_cert "$dir/worker.pem" --tls_key "$dir/worker.key" \
    --tls_ca "$dir/ca.pem"
echo "$(openssl version), load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/tls_bench" --plain "127.0.0.1:$pp" --tls "127.0.0.1:$tp" --ca "$dir/ca.pem" \
    --rounds "$rounds" --pids "${pids[0]},${pids[1]}" ${1:+--json "$1"}
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
