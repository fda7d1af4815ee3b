#!/usr/bin/env bash
# repl_bench.sh: what copies of a write cost and save (docs/replication.md),
# on loopback, every figure from the same run:
#   - hot copies: a 64 MiB key set through worker A, got twice through a
#     local client of worker B: the second get (served by B's hot copy)
#     against a local get of a key written through B (target: at most 1.2x);
#   - memory replicas: set latency (p50) at 1 KiB and 1 MiB through a local
#     client, in a cluster of three with --replica_num 2 against one with
#     --replica_num 1 (the same machine, one after the other).
# Each cluster is etcd plus three workers on 127.0.0.11-13. A benchmark: it
# reports, it does not assert. Everything it starts is stopped by PID.
#
#   BUILD_DIR=build bench/repl_bench.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
OUT=${1:-bench/results/repl_bench.json}
RB=$BUILD/bench/repl_bench
WORKER=$BUILD/src/worker/datasystem_worker
HOT_ITERS=${HOT_ITERS:-20}
SMALL_ITERS=${SMALL_ITERS:-2000}
MID_ITERS=${MID_ITERS:-200}
for b in "$RB" "$WORKER" /usr/bin/etcd; do
    [ -x "$b" ] || { echo "repl_bench: $b is missing (build first; BUILD_DIR=$BUILD)" >&2; exit 2; }
done
TMP=$(mktemp -d /tmp/replbench-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

EP=$(free_port)
PP=$(free_port)
/usr/bin/etcd --name rb --data-dir "$TMP/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
    --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$PP" \
    --initial-advertise-peer-urls "http://127.0.0.1:$PP" --initial-cluster "rb=http://127.0.0.1:$PP" \
    >"$TMP/etcd.log" 2>&1 &
PIDS+=($!)

# cluster NAME REPLICAS: three workers; their addresses in ADDRS.
cluster() {
    local name=$1 n=$2
    ADDRS=()
    for i in 11 12 13; do
        local port
        port=$(free_port)
        "$WORKER" --worker_address "127.0.0.$i:$port" --etcd_address "127.0.0.1:$EP" \
            --cluster_name "$name" --unix_socket_dir "$TMP" --shared_memory_size_mb 512 \
            --node_timeout_s 2 --heartbeat_interval_ms 300 --replica_num "$n" \
            >"$TMP/$name-$i.log" 2>&1 &
        PIDS+=($!)
        ADDRS+=("127.0.0.$i:$port")
    done
    for _ in $(seq 150); do
        if [ "$(grep -l 'cluster: 3 members' "$TMP/$name"-*.log 2>/dev/null | wc -l)" = 3 ]; then
            return 0
        fi
        sleep 0.2
    done
    echo "repl_bench: cluster $name did not form" >&2
    cat "$TMP/$name"-*.log >&2
    exit 1
}

cluster r1 1
R1=("${ADDRS[@]}")
cluster r2 2
R2=("${ADDRS[@]}")

HOT=$("$RB" hot "$TMP" "${R1[0]}" "${R1[1]}" $((64 << 20)) "$HOT_ITERS")
S1_1K=$("$RB" set "$TMP" "${R1[0]}" 1024 "$SMALL_ITERS")
S2_1K=$("$RB" set "$TMP" "${R2[0]}" 1024 "$SMALL_ITERS")
S1_1M=$("$RB" set "$TMP" "${R1[0]}" $((1 << 20)) "$MID_ITERS")
S2_1M=$("$RB" set "$TMP" "${R2[0]}" $((1 << 20)) "$MID_ITERS")
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

p50() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["set"]["p50_us"])' "$1"; }
ratio() { python3 -c 'import sys; print("%.3f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
R_1K=$(ratio "$(p50 "$S2_1K")" "$(p50 "$S1_1K")")
R_1M=$(ratio "$(p50 "$S2_1M")" "$(p50 "$S1_1M")")
HOT_R=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["second_vs_local"])' "$HOT")

cat >"$OUT" <<JSON
{
  "bench": "repl_bench",
  "where": "etcd and three workers per cluster on 127.0.0.11-13 (loopback)",
  "cpus": $(nproc),
  "loadavg": "$LOAD",
  "hot_copy_64MiB": $HOT,
  "set_1KiB_replica_num_1": $S1_1K,
  "set_1KiB_replica_num_2": $S2_1K,
  "set_1MiB_replica_num_1": $S1_1M,
  "set_1MiB_replica_num_2": $S2_1M,
  "ratios": {
    "hot_second_get_vs_local_get_64MiB": $HOT_R,
    "set_replica_num_2_vs_1_1KiB": $R_1K,
    "set_replica_num_2_vs_1_1MiB": $R_1M
  },
  "targets": {"hot_second_get_vs_local_get_max": 1.2}
}
JSON
echo "repl_bench (load average $LOAD):"
echo "  64 MiB: second get through B (hot copy) vs local get: ${HOT_R}x (target <= 1.2x)"
echo "  set p50 replica_num 2 vs 1: 1 KiB ${R_1K}x, 1 MiB ${R_1M}x"
echo "  written to $OUT"
