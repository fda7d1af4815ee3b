#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the release
# flavour, starts a standalone datasystem worker on a free loopback port,
# runs the three-process pipeline demo (thinker -> talker -> code2wav through
# YuanrongConnector, examples/pipeline.yaml) against it, and stops the worker
# again: with `dscli stop`, and by PID if that fails, also on Ctrl-C or error.
#
#   scripts/demo.sh [--requests N] [--window N] [--arena_mb N]
#                   [--worker_address H:P] [--config FILE] [--talker_edge keys|stream]
#
# --worker_address uses a worker (or a cluster member) that is already
# running instead of starting one; nothing is stopped then. --config picks
# another stage config (examples/pipeline_shm.yaml: SharedMemoryConnector
# on every edge). --talker_edge stream sends each request's audio-code chunks
# from talker to code2wav as one stream (one element per chunk, an end
# marker) instead of one key per chunk.
set -euo pipefail
cd "$(dirname "$0")/.."

requests=200
window=32
arena_mb=512
address=""
config=examples/pipeline.yaml
talker_edge=keys
usage() { sed -n 's/^#   //p' "$0" | sed 's/^/usage: /' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) requests=${2:?}; shift 2 ;;
        --window) window=${2:?}; shift 2 ;;
        --arena_mb) arena_mb=${2:?}; shift 2 ;;
        --worker_address) address=${2:?}; shift 2 ;;
        --config) config=${2:?}; shift 2 ;;
        --talker_edge) talker_edge=${2:?}; shift 2 ;;
        -h|--help) usage ;;
        *) echo "demo.sh: unknown argument '$1'" >&2; usage ;;
    esac
done

bash scripts/setup.sh
bash scripts/build.sh release
dscli=build/src/cli/dscli
demo=build/examples/pipeline_demo

started=""
worker_pid=""
stop_worker() {
    [ -n "$started" ] || return 0
    started=""
    echo "demo.sh: stopping the worker at $address"
    if ! "$dscli" stop --worker_address "$address" -t 15 >/dev/null 2>&1; then
        echo "demo.sh: dscli stop failed; stopping pid $worker_pid" >&2
        kill -TERM "$worker_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$worker_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$worker_pid" 2>/dev/null || true
    fi
}
trap stop_worker EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if [ -z "$address" ]; then
    for attempt in 1 2 3; do
        address="127.0.0.1:$(free_port)"
        if out=$("$dscli" start -w --worker_address "$address" \
                --shared_memory_size_mb "$arena_mb" 2>&1); then
            worker_pid=$(sed -n 's/.* pid \([0-9][0-9]*\).*/\1/p' <<<"$out")
            started=1
            echo "demo.sh: $out"
            break
        fi
        echo "demo.sh: starting a worker at $address failed (attempt $attempt): $out" >&2
        [ "$attempt" -lt 3 ] || exit 1
    done
else
    echo "demo.sh: using the worker at $address"
fi

"$demo" --config "$config" --worker_address "$address" \
    --requests "$requests" --window "$window" --talker_edge "$talker_edge"
