#!/usr/bin/env bash
# The whole test suite, as the README's second command and CI run it:
# installs what is missing, builds a release and an ASan+UBSan flavour, runs
# the unit and integration suites under ctest in both, the worker under
# valgrind memcheck, the libFuzzer targets for DS_FUZZ_SECONDS each (default
# 20), the Python suite, and a formatting check. Every test starts and stops
# its own processes.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

failed=()
passed=()
step() { # step NAME CMD...
    local name=$1; shift
    echo "==== $name"
    if "$@"; then passed+=("$name"); else failed+=("$name"); fi
}

step "build (release)" bash scripts/build.sh release
step "build (asan+ubsan)" bash scripts/build.sh asan
step "ctest (release)" ctest --test-dir build --output-on-failure -j 2 --timeout 300
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    step "ctest (asan+ubsan)" ctest --test-dir build-asan --output-on-failure -j 2 --timeout 600
step "valgrind (worker under memcheck)" bash scripts/valgrind.sh build
step "fuzz (${DS_FUZZ_SECONDS:-20} s per target)" bash scripts/fuzz.sh "${DS_FUZZ_SECONDS:-20}"
if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
    DS_BUILD_DIR=$PWD/build PYTHONPATH=$PWD/python \
        step "pytest" /usr/bin/python3 -m pytest -q tests/python -p no:cacheprovider
fi
step "clang-format" bash -c 'git ls-files "*.c" "*.h" | xargs clang-format --dry-run -Werror'

echo
echo "suite steps: ${#passed[@]} passed, ${#failed[@]} failed"
for f in "${failed[@]}"; do echo "  FAILED: $f"; done
[ ${#failed[@]} -eq 0 ]
