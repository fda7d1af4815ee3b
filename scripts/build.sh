#!/usr/bin/env bash
# Configures and builds one flavour: scripts/build.sh [release|asan] -> build/ or build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
case "$flavour" in
    release) dir=build; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
    asan) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DDS_SANITIZE=ON) ;;
    *) echo "build.sh: unknown flavour '$flavour' (release or asan)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${args[@]}" >/dev/null
if ! cmake --build "$dir" -j "$(nproc)" >"$dir/build.log" 2>&1; then
    grep -E 'error|Error' "$dir/build.log" | head -40 >&2
    echo "build.sh: $flavour build failed, full log in $dir/build.log" >&2
    exit 1
fi
echo "build.sh: $flavour build ok ($dir)"
