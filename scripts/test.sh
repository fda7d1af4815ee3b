#!/usr/bin/env bash
# The whole test suite, as the README's second command and CI run it:
# installs what is missing, builds a release, an ASan+UBSan and a TSan
# flavour, runs the unit and integration suites under ctest in all three
# (TSan: the worker processes the integration tests start too), the worker under
# valgrind memcheck, the libFuzzer targets for DS_FUZZ_SECONDS each (default
# 20), the device check on the host backend, the Python suite, and a
# formatting check. Every test starts and stops
# its own processes.
#
#   bash scripts/test.sh          the whole suite (CI: .ci/run)
#   bash scripts/test.sh quick    the edit-build-test loop: a release build and
#                                 the unit and integration suites under ctest
#                                 (no soak, cluster, sanitizers, valgrind,
#                                 fuzzers or package installs); a few minutes
#                                 on two cores
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full}
case "$mode" in
    full | quick) ;;
    *) echo "test.sh: unknown mode '$mode' (quick, or none for the whole suite)" >&2; exit 2 ;;
esac
[ "$mode" = quick ] || bash scripts/setup.sh || exit 1

LOGS=build/test-logs
mkdir -p "$LOGS"
failed=()
npass=0
nfail=0
# step NAME CMD...: runs one step, its output shown and kept in $LOGS. The
# count of individual tests comes from ctest's and pytest's own summaries;
# any other step counts as one check.
step() {
    local name=$1; shift
    local log="$LOGS/$(echo "$name" | tr -c 'a-zA-Z0-9' '_').log"
    echo "==== $name"
    "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local p f total
    if total=$(grep -oE 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1) &&
        [ -n "$total" ]; then
        f=$(echo "$total" | grep -oE '[0-9]+' | head -1)
        p=$(( $(echo "$total" | grep -oE '[0-9]+' | tail -1) - f ))
    elif total=$(grep -E '^[0-9]+ (passed|failed)|[0-9]+ passed' "$log" | tail -1) &&
        [ -n "$total" ]; then
        p=$(echo "$total" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
        f=$(echo "$total" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 0)
    elif [ "$rc" -eq 0 ]; then
        p=1; f=0
    else
        p=0; f=1
    fi
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    npass=$((npass + p))
    nfail=$((nfail + f))
    [ "$rc" -eq 0 ] || failed+=("$name")
}

# pytest_two: the Python suite in two pytest processes at once (its tests
# mostly wait on workers and subprocesses), the files alternating between
# them, the clean-clone pip build of test_packaging.py and the Yuanrong
# suites in different ones. Prints both outputs, then one summary line.
pytest_two() {
    local a=() b=() i=0 f
    for f in tests/python/test_*.py; do
        case "$f" in
            */test_packaging.py) a+=("$f") ;;
            */test_yuanrong_suites.py) b+=("$f") ;;
            *) if [ $((i++ % 2)) -eq 0 ]; then b+=("$f"); else a+=("$f"); fi ;;
        esac
    done
    /usr/bin/python3 -m pytest -q -p no:cacheprovider "${a[@]}" >"$LOGS/pytest_1.log" 2>&1 &
    local pa=$! ra rb
    /usr/bin/python3 -m pytest -q -p no:cacheprovider "${b[@]}" >"$LOGS/pytest_2.log" 2>&1
    rb=$?
    wait "$pa"
    ra=$?
    cat "$LOGS/pytest_1.log" "$LOGS/pytest_2.log"
    # "3 failed, 510 passed, 1 skipped in 80.1s" from each process's last line
    tail -qn1 "$LOGS/pytest_1.log" "$LOGS/pytest_2.log" | grep -oE '[0-9]+ (passed|failed|skipped|errors?)' |
        awk '{sub(/errors?/, "failed", $2); n[$2] += $1}
             END {printf "pytest, both processes: %d failed, %d passed, %d skipped\n",
                  n["failed"], n["passed"], n["skipped"]}'
    [ "$ra" -eq 0 ] && [ "$rb" -eq 0 ]
}

# summary: the failed steps and the totals; the exit status says whether all passed.
summary() {
    echo
    for f in "${failed[@]}"; do echo "FAILED step: $f (log in $LOGS)"; done
    echo "tests: $npass passed, $nfail failed"
    [ ${#failed[@]} -eq 0 ]
}

step "build (release)" bash scripts/build.sh release
if [ "$mode" = quick ]; then
    # The soak runs a minute and the cluster tests need root and etcd: the
    # full command runs them.
    step "ctest (release, unit and integration)" ctest --test-dir build --output-on-failure \
        -j 2 --timeout 300 -L 'unit|integration|cpp' -LE 'cluster|soak'
    summary
    exit
fi
step "build (asan+ubsan)" bash scripts/build.sh asan
step "build (tsan)" bash scripts/build.sh tsan
step "ctest (release)" ctest --test-dir build --output-on-failure -j 2 --timeout 300
# The sanitizer flavours soak for 30 s (the release soak runs the full 60 s)
# and skip the cluster suite's TLS and UCX variants: their peer paths differ
# from the plain one only in the transport, which the ASan integration suite
# (it_tls*, it_ucx_client) and cluster test (ct_rdma) cover; the release run
# keeps every cluster test over TLS and over UCX. The ASan run also skips
# ct_netns_lossless: its scenarios are those of ct_migrate, ct_replica and
# ct_rebalance, which it runs, moved into network namespaces (the release run
# has it).
export DS_SAN_SOAK_SECONDS=${DS_SAN_SOAK_SECONDS:-30}
DS_SOAK_SECONDS=$DS_SAN_SOAK_SECONDS \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    step "ctest (asan+ubsan)" ctest --test-dir build-asan --output-on-failure -j 2 --timeout 600 \
    -LE 'tls|rdma' -E 'ct_netns_lossless'
# Unit, integration and C++ SDK suites only (the soak included): the cluster tests
# need root and etcd, the fuzzers ASan. The integration tests start their
# workers from build-tsan, so the worker runs under TSan too. Any report fails
# the test: halt_on_error exits non-zero, in a worker too (the harness checks
# its exit status).
DS_SOAK_SECONDS=$DS_SAN_SOAK_SECONDS TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    step "ctest (tsan)" ctest --test-dir build-tsan --output-on-failure -j 2 --timeout 600 \
    -L 'unit|integration|cpp' -LE cluster
step "valgrind (worker under memcheck)" bash scripts/valgrind.sh build
step "fuzz (${DS_FUZZ_SECONDS:-20} s per target)" bash scripts/fuzz.sh "${DS_FUZZ_SECONDS:-20}"
# The device check on the host backend (a GPU machine runs it on cuda):
# its tests and benchmark rows, results kept under build/.
DS_DEVICE_BACKEND=host DS_DEVICE_SKIP_BUILD=1 DS_DEVICE_BENCH_REPS=50 \
    DS_DEVICE_OUT=$PWD/$LOGS/device_check_host \
    step "device check (host backend)" bash tests/device/run.sh
DS_BUILD_DIR=$PWD/build PYTHONPATH=$PWD/python step "pytest" pytest_two
step "clang-format" bash -c 'git ls-files "*.c" "*.h" "*.cpp" | xargs clang-format --dry-run -Werror'
summary
