#!/usr/bin/env bash
# Configures and builds one flavour: scripts/build.sh [release|asan|tsan|profile]
# -> build/, build-asan/, build-tsan/ or build-prof/ (release code with frame
# pointers, for scripts/profile.sh's call graphs). These are the dev and CI builds, so
# warnings are errors here (DS_WERROR=ON); a plain cmake configure leaves them
# warnings.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
case "$flavour" in
    release) dir=build; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
    # The sanitizer flavours run tests only, so they leave the benchmarks out.
    asan) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DDS_SANITIZE=ON -DDS_BUILD_BENCH=OFF) ;;
    # clang: GCC's TSan does not model atomic_thread_fence (it says so with
    # -Wtsan), which the shared-memory seqlock (common/shm_index.c) needs.
    # RelWithDebInfo: the integration suite runs 2-3x faster than at -O0.
    tsan) dir=build-tsan; args=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS_TSAN=ON -DDS_BUILD_BENCH=OFF) ;;
    profile) dir=build-prof; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS=-fno-omit-frame-pointer" "-DCMAKE_CXX_FLAGS=-fno-omit-frame-pointer") ;;
    *) echo "build.sh: unknown flavour '$flavour' (release, asan, tsan or profile)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${args[@]}" -DDS_WERROR=ON >/dev/null
if ! cmake --build "$dir" -j "$(nproc)" >"$dir/build.log" 2>&1; then
    grep -E 'error|Error' "$dir/build.log" | head -40 >&2
    echo "build.sh: $flavour build failed, full log in $dir/build.log" >&2
    exit 1
fi
echo "build.sh: $flavour build ok ($dir)"
