#!/usr/bin/env bash
# Runs the worker under valgrind memcheck while integration tests drive it,
# and requires zero errors: scripts/valgrind.sh [build-dir] (default build/,
# as scripts/build.sh release makes it; VALGRIND_TESTS="it_basic ..." picks
# the tests). The tests reach the worker through DS_TEST_WORKER and
# DS_UNIX_SOCKET_DIR (tests/integration/harness.h), so tests that would
# restart or kill it skip themselves. At the end the worker is stopped with
# SIGTERM, so its shutdown path and the leak check at exit run too; memcheck
# exits non-zero on any error or definite/indirect leak (--error-exitcode).
# The worker is stopped by its PID, also when the script fails.
set -uo pipefail
cd "$(dirname "$0")/.."
bdir=${1:-build}
tests=${VALGRIND_TESTS:-"it_basic it_subscribe it_fault_net it_fault_kill it_soak"}
bin="$bdir/src/worker/datasystem_worker"
for t in $tests; do
    [ -x "$bdir/tests/integration/$t" ] || { echo "valgrind.sh: $bdir/tests/integration/$t is not built" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "valgrind.sh: $bin is not built (scripts/build.sh release)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed" >&2; exit 1; }

dir=$(mktemp -d /tmp/ds-valgrind-XXXXXX)
vpid=""
cleanup() {
    if [ -n "$vpid" ] && kill -0 "$vpid" 2>/dev/null; then
        kill -KILL "$vpid" 2>/dev/null
        wait "$vpid" 2>/dev/null
    fi
}
trap cleanup EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

started=0
for attempt in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 40000))
    port_in_use "$port" && continue
    valgrind --tool=memcheck --error-exitcode=1 --leak-check=full \
        --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
        --log-file="$dir/valgrind.log" \
        "$bin" --worker_address "127.0.0.1:$port" --unix_socket_dir "$dir" \
        --shared_memory_size_mb 128 >"$dir/worker.log" 2>&1 &
    vpid=$!
    for _ in $(seq 1 600); do
        kill -0 "$vpid" 2>/dev/null || break
        port_in_use "$port" && { started=1; break; }
        sleep 0.1
    done
    [ $started -eq 1 ] && break
    cleanup
    vpid=""
done
if [ $started -ne 1 ]; then
    echo "valgrind.sh: the worker did not start under valgrind" >&2
    cat "$dir/worker.log" "$dir/valgrind.log" >&2 2>/dev/null
    exit 1
fi
echo "valgrind.sh: worker pid $vpid on 127.0.0.1:$port under memcheck"

failed=()
for t in $tests; do
    # The soak runs briefly here: every operation, a few thousand times.
    if DS_TEST_WORKER="127.0.0.1:$port" DS_UNIX_SOCKET_DIR="$dir" DS_BUILD_DIR="$bdir" \
        DS_SOAK_SECONDS="${VALGRIND_SOAK_SECONDS:-8}" timeout 600 "$bdir/tests/integration/$t" >"$dir/$t.log" 2>&1; then
        echo "valgrind.sh: $t passed against the worker under memcheck"
    else
        failed+=("$t")
        echo "valgrind.sh: $t FAILED (log below)" >&2
        tail -40 "$dir/$t.log" >&2
    fi
done

kill -TERM "$vpid"
rc=""
for _ in $(seq 1 600); do
    if ! kill -0 "$vpid" 2>/dev/null; then
        wait "$vpid"
        rc=$?
        break
    fi
    sleep 0.1
done
vpid_done=$vpid
vpid=""
if [ -z "$rc" ]; then
    echo "valgrind.sh: worker $vpid_done did not stop within 60 s of SIGTERM" >&2
    kill -KILL "$vpid_done" 2>/dev/null
    wait "$vpid_done" 2>/dev/null
    rc=1
fi
summary=$(grep -E "ERROR SUMMARY|in use at exit|All heap blocks|definitely lost|indirectly lost|possibly lost" "$dir/valgrind.log" | sed 's/^==[0-9]*== *//')
echo "valgrind.sh: memcheck: $(echo "$summary" | tr '\n' ';' | sed 's/;$//')"
if [ "$rc" -ne 0 ]; then
    echo "valgrind.sh: the worker exited with $rc; memcheck report:" >&2
    sed -n '/Invalid\|uninitialised\|definitely lost\|indirectly lost\|Mismatched\|overlap/,+25p' "$dir/valgrind.log" | head -120 >&2
    echo "valgrind.sh: full logs in $dir" >&2
    exit 1
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "valgrind.sh: failed tests: ${failed[*]} (logs in $dir)" >&2
    exit 1
fi
[ -n "${VALGRIND_KEEP:-}" ] || rm -rf "$dir"
echo "valgrind.sh: zero memcheck errors"
