#!/usr/bin/env bash
# cluster_bench.sh: the store across a real link, measured against that link
# in the same run. Two network namespaces A and B joined by one veth pair
# (198.18.0.1 and 198.18.0.2, addresses that exist only inside them), etcd
# and worker A in A, worker B in B. Measured:
#   - the link: a plain TCP stream A -> B of 64 MiB messages (GB/s at the
#     median) and a 1 KiB TCP round trip B <-> A (p50);
#   - remote get by a TCP client: the writer in A puts into worker A, a
#     reader in B gets 64 MiB and 1 KiB over TCP from worker A;
#   - remote get through the cluster: a reader in B, local to worker B
#     (shared memory), gets the keys living on worker A, so worker B pulls
#     them over the veth (1 KiB twice: a key whose metadata A owns, which
#     takes B a LOCATE at A and a pull, and one B owns: the pull alone).
#   - the same pulls between a second pair of workers with --enable_rdma
#     true (UCX over TCP on the veth): 64 MiB and the two 1 KiB gets, and
#     UCX's own ucx_perftest (tag_bw, stream_bw, ucp_get of 64 MiB) over
#     the same veth for reference.
# Prints a table with the ratios against the targets (get >= 0.7x the
# stream, 1 KiB get <= 3x the round trip; with UCX: 64 MiB >= 0.9x the
# stream, 1 KiB <= 1.2x the TCP pull) and writes JSON. A benchmark: it
# reports, it does not assert. Needs root (ip netns); everything it starts
# is stopped by PID and the namespaces are deleted on exit, even on failure.
#
#   sudo BUILD_DIR=build bench/cluster_bench.sh [OUT.json]
set -euo pipefail

BUILD=${BUILD_DIR:-build}
OUT=${1:-bench/results/cluster_bench.json}
NB=$BUILD/bench/netbench
WORKER=$BUILD/src/worker/datasystem_worker
DSCLI=$BUILD/src/cli/dscli
ITERS_BIG=${ITERS_BIG:-20}
ITERS_SMALL=${ITERS_SMALL:-5000}
BIG=$((64 << 20))

[ "$(id -u)" = 0 ] || { echo "cluster_bench: needs root for network namespaces" >&2; exit 2; }
for b in "$NB" "$WORKER" "$DSCLI" /usr/bin/etcd; do
    [ -x "$b" ] || { echo "cluster_bench: $b is missing (build first; BUILD_DIR=$BUILD)" >&2; exit 2; }
done

TAG=dsbn$$
NSA=$TAG-a
NSB=$TAG-b
TMP=$(mktemp -d /tmp/dsbench-XXXXXX)
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do
        kill -9 "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    ip netns del "$NSA" 2>/dev/null || true
    ip netns del "$NSB" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_a() { ip netns exec "$NSA" "$@"; }
in_b() { ip netns exec "$NSB" "$@"; }
# Starts a command in a namespace in the background and remembers its PID
# (ip netns exec execs the command: the PID is the command's).
bg_in() {
    local ns=$1 log=$2
    shift 2
    ip netns exec "$ns" "$@" >"$log" 2>&1 &
    PIDS+=($!)
}
field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" <<<"$1"; }

ip netns add "$NSA"
ip netns add "$NSB"
ip -n "$NSA" link set lo up
ip -n "$NSB" link set lo up
# The pair is made inside A with its far end straight in B.
ip -n "$NSA" link add veth0 type veth peer name veth0 netns "$NSB"
ip -n "$NSA" addr add 198.18.0.1/24 dev veth0
ip -n "$NSB" addr add 198.18.0.2/24 dev veth0
ip -n "$NSA" link set veth0 up
ip -n "$NSB" link set veth0 up

echo "== the link (veth, $NSA -> $NSB)"
bg_in "$NSA" "$TMP/serve.log" "$NB" serve 198.18.0.1 7001
for _ in $(seq 50); do in_b "$NB" rtt 198.18.0.1 7001 8 1 >/dev/null 2>&1 && break; sleep 0.1; done
STREAM=$(in_b "$NB" stream 198.18.0.1 7001 $BIG "$ITERS_BIG")
RTT=$(in_b "$NB" rtt 198.18.0.1 7001 1024 "$ITERS_SMALL")
echo "tcp stream 64 MiB: $STREAM"
echo "tcp rtt 1 KiB:     $RTT"

echo "== the cluster (etcd and worker A in $NSA, worker B in $NSB)"
bg_in "$NSA" "$TMP/etcd.log" /usr/bin/etcd --name b --data-dir "$TMP/etcd" \
    --listen-client-urls http://198.18.0.1:2379 --advertise-client-urls http://198.18.0.1:2379 \
    --listen-peer-urls http://198.18.0.1:2380 --initial-advertise-peer-urls http://198.18.0.1:2380 \
    --initial-cluster b=http://198.18.0.1:2380
FLAGS=(--etcd_address 198.18.0.1:2379 --shared_memory_size_mb 512 --unix_socket_dir "$TMP"
       --node_timeout_s 2 --heartbeat_interval_ms 300)
bg_in "$NSA" "$TMP/wa.log" "$WORKER" --worker_address 198.18.0.1:7002 "${FLAGS[@]}"
bg_in "$NSB" "$TMP/wb.log" "$WORKER" --worker_address 198.18.0.2:7003 "${FLAGS[@]}"
ready=0
for _ in $(seq 100); do
    if in_b "$DSCLI" status --worker_address 198.18.0.2:7003 -t 1 2>/dev/null |
        grep -q '"members":[[:space:]]*2'; then
        ready=1
        break
    fi
    sleep 0.2
done
[ $ready = 1 ] || { echo "cluster_bench: the workers did not form a cluster" >&2; cat "$TMP"/*.log >&2; exit 1; }
in_a "$NB" put -t local -d "$TMP" 198.18.0.1:7002 bench-64m $BIG
# Two 1 KiB keys on A: one whose metadata owner is A (B asks A where it is,
# then pulls it: two round trips) and one owned by B (B knows where it is:
# one round trip). The owner shows in worker A's owned_keys.
owned_a() {
    in_a "$DSCLI" status --worker_address 198.18.0.1:7002 -t 5 |
        sed -n 's/.*"owned_keys":[[:space:]]*\([0-9]*\).*/\1/p'
}
KA=""
KB=""
for i in $(seq 0 63); do
    before=$(owned_a)
    in_a "$NB" put -t local -d "$TMP" 198.18.0.1:7002 "bench-1k-$i" 1024
    if [ "$(owned_a)" -gt "$before" ]; then
        [ -n "$KA" ] || KA=bench-1k-$i
    else
        [ -n "$KB" ] || KB=bench-1k-$i
    fi
    [ -n "$KA" ] && [ -n "$KB" ] && break
done
[ -n "$KA" ] && [ -n "$KB" ] || { echo "cluster_bench: no key owned by each worker" >&2; exit 1; }
# The same pulls with both workers on UCX (--enable_rdma true): a second
# cluster of two, UCX over TCP on the veth (UCX_TLS=tcp, UCX_NET_DEVICES=veth0;
# without UCX_TLS, UCX would take shared memory between namespaces of one
# host, which is no link at all). Keys as above, found the same way.
RFLAGS=(--etcd_address 198.18.0.1:2379 --cluster_name rdma --shared_memory_size_mb 512
        --unix_socket_dir "$TMP/r" --node_timeout_s 2 --heartbeat_interval_ms 300 --enable_rdma true)
mkdir -p "$TMP/r"
# UCX_BENCH_ENV: more UCX_* settings for the UCX workers (e.g. UCX_RNDV_THRESH=inf).
read -r -a UENV <<<"UCX_TLS=tcp UCX_NET_DEVICES=veth0 ${UCX_BENCH_ENV:-}"
bg_in "$NSA" "$TMP/ra.log" env "${UENV[@]}" "$WORKER" --worker_address 198.18.0.1:7012 "${RFLAGS[@]}"
bg_in "$NSB" "$TMP/rb.log" env "${UENV[@]}" "$WORKER" --worker_address 198.18.0.2:7013 "${RFLAGS[@]}"
ready=0
for _ in $(seq 100); do
    if in_b "$DSCLI" status --worker_address 198.18.0.2:7013 -t 1 2>/dev/null |
        grep -q '"members":[[:space:]]*2'; then
        ready=1
        break
    fi
    sleep 0.2
done
[ $ready = 1 ] || { echo "cluster_bench: the UCX workers did not form a cluster" >&2; cat "$TMP"/r*.log >&2; exit 1; }
in_a "$NB" put -t local -d "$TMP/r" 198.18.0.1:7012 bench-64m $BIG
owned_ra() {
    in_a "$DSCLI" status --worker_address 198.18.0.1:7012 -t 5 |
        sed -n 's/.*"owned_keys":[[:space:]]*\([0-9]*\).*/\1/p'
}
RKA=""
RKB=""
for i in $(seq 0 63); do
    before=$(owned_ra)
    in_a "$NB" put -t local -d "$TMP/r" 198.18.0.1:7012 "bench-1k-$i" 1024
    if [ "$(owned_ra)" -gt "$before" ]; then
        [ -n "$RKA" ] || RKA=bench-1k-$i
    else
        [ -n "$RKB" ] || RKB=bench-1k-$i
    fi
    [ -n "$RKA" ] && [ -n "$RKB" ] && break
done
[ -n "$RKA" ] && [ -n "$RKB" ] || { echo "cluster_bench: no key owned by each UCX worker" >&2; exit 1; }
ucx_pulls() {
    in_b "$DSCLI" status --worker_address 198.18.0.2:7013 -t 5 |
        sed -n 's/.*"ucx_pulls":[[:space:]]*\([0-9]*\).*/\1/p'
}

TCP_BIG=$(in_b "$NB" get -t tcp 198.18.0.1:7002 bench-64m $BIG "$ITERS_BIG")
TCP_SMALL=$(in_b "$NB" get -t tcp 198.18.0.1:7002 "$KA" 1024 "$ITERS_SMALL")
# The pulls, TCP worker and UCX worker interleaved, REPS rounds, each round
# with its own stream measurement: the machine is shared, so a ratio is only
# taken between figures of the same round; the table shows the round whose
# ratio is the median, and the JSON every round.
REPS=${REPS:-3}
median_idx() { # values... -> index of the median
    printf '%s\n' "$@" | awk '{ print NR - 1, $1 }' | sort -k2 -g | awk -v n=$# 'NR == int((n + 1) / 2) { print $1 }'
}
S_R=() PB_R=() UB_R=() PS_R=() US_R=() PSB_R=() USB_R=() UBR=() USR=() USBR=()
U0=$(ucx_pulls)
for r in $(seq "$REPS"); do
    S_R+=("$(in_b "$NB" stream 198.18.0.1 7001 $BIG "$ITERS_BIG")")
    PB_R+=("$(in_b "$NB" get -t local -d "$TMP" 198.18.0.2:7003 bench-64m $BIG "$ITERS_BIG")")
    UB_R+=("$(in_b "$NB" get -t local -d "$TMP/r" 198.18.0.2:7013 bench-64m $BIG "$ITERS_BIG")")
    PS_R+=("$(in_b "$NB" get -t local -d "$TMP" 198.18.0.2:7003 "$KA" 1024 "$ITERS_SMALL")")
    US_R+=("$(in_b "$NB" get -t local -d "$TMP/r" 198.18.0.2:7013 "$RKA" 1024 "$ITERS_SMALL")")
    PSB_R+=("$(in_b "$NB" get -t local -d "$TMP" 198.18.0.2:7003 "$KB" 1024 "$ITERS_SMALL")")
    USB_R+=("$(in_b "$NB" get -t local -d "$TMP/r" 198.18.0.2:7013 "$RKB" 1024 "$ITERS_SMALL")")
    i=$((r - 1))
    UBR+=("$(awk -v a="$(field "${UB_R[$i]}" gbps)" -v b="$(field "${S_R[$i]}" gbps)" 'BEGIN { printf "%.3f", a / b }')")
    USR+=("$(awk -v a="$(field "${US_R[$i]}" p50_us)" -v b="$(field "${PS_R[$i]}" p50_us)" 'BEGIN { printf "%.3f", a / b }')")
    USBR+=("$(awk -v a="$(field "${USB_R[$i]}" p50_us)" -v b="$(field "${PSB_R[$i]}" p50_us)" 'BEGIN { printf "%.3f", a / b }')")
    echo "round $r: stream $(field "${S_R[$i]}" gbps) GB/s; 64 MiB pull tcp $(field "${PB_R[$i]}" gbps) ucx $(field "${UB_R[$i]}" gbps) GB/s (${UBR[$i]}x stream); 1 KiB pull p50 tcp $(field "${PS_R[$i]}" p50_us) ucx $(field "${US_R[$i]}" p50_us) us (${USR[$i]}x), B-owned tcp $(field "${PSB_R[$i]}" p50_us) ucx $(field "${USB_R[$i]}" p50_us) us (${USBR[$i]}x)"
done
U1=$(ucx_pulls)
mb=$(median_idx "${UBR[@]}")
ms=$(median_idx "${USR[@]}")
msb=$(median_idx "${USBR[@]}")
STREAM2=${S_R[$mb]}
PULL_BIG=${PB_R[$mb]}
UCX_BIG=${UB_R[$mb]}
PULL_SMALL=${PS_R[$ms]}
UCX_SMALL=${US_R[$ms]}
PULL_SMALL_B=${PSB_R[$msb]}
UCX_SMALL_B=${USB_R[$msb]}
range() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }
jarr() { local IFS=,; echo "[$*]"; }
[ $((U1 - U0)) -ge "$ITERS_BIG" ] || { echo "cluster_bench: the UCX pulls did not go over UCX ($U0 -> $U1)" >&2; exit 1; }

# UCX's own figures over the same veth, for reference beside ours: ucx_perftest
# (ucx-utils) tagged rendezvous, the stream API and a one-sided get, 64 MiB,
# UCX over TCP. A server in A serves one test; the client in B retries until
# it is up. GB/s (ucx_perftest prints MiB/s).
perftest() { # test -> GB/s, or 0 when ucx_perftest is missing or failed
    command -v ucx_perftest >/dev/null || { echo 0; return; }
    bg_in "$NSA" "$TMP/pt-$1.log" env UCX_TLS=tcp UCX_NET_DEVICES=veth0 ucx_perftest -p 13337
    local out=""
    for _ in $(seq 50); do
        out=$(in_b env UCX_TLS=tcp UCX_NET_DEVICES=veth0 timeout 120 ucx_perftest 198.18.0.1 \
            -p 13337 -t "$1" -s $BIG -n "$ITERS_BIG" -w 2 2>/dev/null | awk '/^Final:/ {print $6}')
        [ -n "$out" ] && break
        sleep 0.2
    done
    awk -v m="${out:-0}" 'BEGIN { printf "%.3f", m * 1048576 / 1e9 }'
}
PT_TAG=$(perftest tag_bw)
PT_STREAM=$(perftest stream_bw)
PT_GET=$(perftest ucp_get)

S_GBPS=$(field "$STREAM" gbps)
R_US=$(field "$RTT" p50_us)
row() { # name json
    local g l
    g=$(field "$2" gbps)
    l=$(field "$2" p50_us)
    printf '%-34s p50 %10.1f us  %7.3f GB/s\n' "$1" "$l" "$g"
}
echo
printf '%-34s p50 %10.1f us  %7.3f GB/s\n' "tcp stream 64 MiB (link)" "$(field "$STREAM" p50_us)" "$S_GBPS"
printf '%-34s p50 %10.1f us\n' "tcp round trip 1 KiB (link)" "$R_US"
row "get 64 MiB, TCP client in B" "$TCP_BIG"
row "get 1 KiB, TCP client in B" "$TCP_SMALL"
row "get 64 MiB, B pulls from A" "$PULL_BIG"
row "get 1 KiB, B pulls, A owns key" "$PULL_SMALL"
row "get 1 KiB, B pulls, B owns key" "$PULL_SMALL_B"
row "get 64 MiB, B pulls over UCX" "$UCX_BIG"
row "get 1 KiB, UCX worker, A owns key" "$UCX_SMALL"
row "get 1 KiB, UCX worker, B owns key" "$UCX_SMALL_B"
printf '%-34s %25.3f GB/s\n' "ucx_perftest tag_bw 64 MiB" "$PT_TAG"
printf '%-34s %25.3f GB/s\n' "ucx_perftest stream_bw 64 MiB" "$PT_STREAM"
printf '%-34s %25.3f GB/s\n' "ucx_perftest ucp_get 64 MiB" "$PT_GET"
printf '%-34s p50 %10.1f us  %7.3f GB/s\n' "tcp stream 64 MiB (UCX round)" "$(field "$STREAM2" p50_us)" "$(field "$STREAM2" gbps)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }
TB=$(ratio "$(field "$TCP_BIG" gbps)" "$S_GBPS")
TS=$(ratio "$(field "$TCP_SMALL" p50_us)" "$R_US")
PB=$(ratio "$(field "$PULL_BIG" gbps)" "$(field "$STREAM2" gbps)")
PS=$(ratio "$(field "$PULL_SMALL" p50_us)" "$R_US")
PSB=$(ratio "$(field "$PULL_SMALL_B" p50_us)" "$R_US")
UB=${UBR[$mb]}
US=${USR[$ms]}
USB=${USBR[$msb]}
verdict() { awk -v r="$1" -v t="$2" -v d="$3" 'BEGIN { ok = d == "ge" ? r >= t : r <= t; printf "%s", ok ? "meets" : "MISSES" }'; }
echo
echo "targets: 64 MiB get >= 0.7x the stream; 1 KiB get <= 3x the round trip"
echo "  TCP client:   64 MiB ${TB}x stream ($(verdict "$TB" 0.7 ge)), 1 KiB ${TS}x rtt ($(verdict "$TS" 3 le))"
echo "  worker pull:  64 MiB ${PB}x stream ($(verdict "$PB" 0.7 ge)), 1 KiB ${PS}x rtt ($(verdict "$PS" 3 le)) owned by A, ${PSB}x rtt ($(verdict "$PSB" 3 le)) owned by B"
echo "--enable_rdma (UCX over TCP): 64 MiB pull >= 0.9x the stream; 1 KiB pulled get <= 1.2x the TCP path's"
echo "  UCX pull (median of $REPS rounds, range in brackets): 64 MiB ${UB}x stream [$(range "${UBR[@]}")] ($(verdict "$UB" 0.9 ge)),"
echo "    1 KiB ${US}x the TCP pull [$(range "${USR[@]}")] ($(verdict "$US" 1.2 le)) owned by A, ${USB}x [$(range "${USBR[@]}")] ($(verdict "$USB" 1.2 le)) owned by B"

mkdir -p "$(dirname "$OUT")"
cat >"$OUT" <<JSON
{
  "bench": "cluster_bench",
  "link": "veth pair between two network namespaces",
  "cpus": $(nproc),
  "tcp_stream_64MiB": $STREAM,
  "tcp_rtt_1KiB": $RTT,
  "get_64MiB_tcp_client": $TCP_BIG,
  "get_1KiB_tcp_client": $TCP_SMALL,
  "get_64MiB_worker_pull": $PULL_BIG,
  "get_1KiB_worker_pull_owner_a": $PULL_SMALL,
  "get_1KiB_worker_pull_owner_b": $PULL_SMALL_B,
  "get_64MiB_ucx_pull": $UCX_BIG,
  "get_1KiB_ucx_worker_owner_a": $UCX_SMALL,
  "get_1KiB_ucx_worker_owner_b": $UCX_SMALL_B,
  "tcp_stream_64MiB_ucx_round": $STREAM2,
  "rounds": {"stream": $(jarr "${S_R[@]}"), "tcp_pull_64MiB": $(jarr "${PB_R[@]}"),
             "ucx_pull_64MiB": $(jarr "${UB_R[@]}"), "tcp_pull_1KiB_owner_a": $(jarr "${PS_R[@]}"),
             "ucx_pull_1KiB_owner_a": $(jarr "${US_R[@]}"), "tcp_pull_1KiB_owner_b": $(jarr "${PSB_R[@]}"),
             "ucx_pull_1KiB_owner_b": $(jarr "${USB_R[@]}"),
             "ucx_64MiB_vs_stream": $(jarr "${UBR[@]}"), "ucx_1KiB_owner_a_vs_tcp_pull": $(jarr "${USR[@]}"),
             "ucx_1KiB_owner_b_vs_tcp_pull": $(jarr "${USBR[@]}")},
  "ucx_perftest_64MiB_gbps": {"tag_bw": $PT_TAG, "stream_bw": $PT_STREAM, "ucp_get": $PT_GET},
  "ucx": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "veth0", "more": "${UCX_BENCH_ENV:-}", "version": "$(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p')"},
  "ratios": {
    "tcp_client_64MiB_vs_stream": $TB,
    "tcp_client_1KiB_vs_rtt": $TS,
    "worker_pull_64MiB_vs_stream": $PB,
    "worker_pull_1KiB_owner_a_vs_rtt": $PS,
    "worker_pull_1KiB_owner_b_vs_rtt": $PSB,
    "ucx_pull_64MiB_vs_stream": $UB,
    "ucx_1KiB_owner_a_vs_tcp_pull": $US,
    "ucx_1KiB_owner_b_vs_tcp_pull": $USB
  },
  "targets": {"64MiB_vs_stream_min": 0.7, "1KiB_vs_rtt_max": 3.0,
              "ucx_64MiB_vs_stream_min": 0.9, "ucx_1KiB_vs_tcp_pull_max": 1.2}
}
JSON
echo "wrote $OUT"
