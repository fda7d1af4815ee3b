#!/usr/bin/env bash
# Yuanrong's C++ examples, unmodified, against this SDK: installs the build
# into a temporary prefix, builds example/cpp/{datasystem,object_client,
# kv_client,stream_client}_example.cpp and hetero_client_gpu_example.cpp from
# the Yuanrong source mirror with a CMakeLists in the form of theirs
# (find_package(Datasystem); the GPU example with a stand-in for the CUDA
# runtime's header, on the host device backend), builds one of them again
# with pkg-config, starts a worker and runs them with the arguments
# Yuanrong's example/run-example.sh gives them.
#   yuanrong_examples.sh BUILD_DIR [EXTRA_CXX_FLAGS]
# EXTRA_CXX_FLAGS: the build's sanitizer flags, which executables linking
# sanitized libraries need too. Exits 77 (ctest: skipped) when the mirror
# (DS_YUANRONG_MIRROR, a bare git dir) is absent.
set -euo pipefail
build=$(cd "$1" && pwd)
flags=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
mirror=${DS_YUANRONG_MIRROR:-/work/.mirror/openeuler-mirror+yuanrong-datasystem/repo}
if ! git --git-dir="$mirror" rev-parse -q --verify HEAD >/dev/null 2>&1; then
    echo "SKIP: no Yuanrong source mirror at $mirror (set DS_YUANRONG_MIRROR to a bare clone of yuanrong-datasystem)"
    exit 77
fi
cxx=${CXX:-$(grep -m1 '^CMAKE_CXX_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)}

tmp=$(mktemp -d /tmp/ds-cpp-examples-XXXXXX)
worker_pid=
cleanup() {
    if [ -n "$worker_pid" ]; then
        kill "$worker_pid" 2>/dev/null || true
        wait "$worker_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    [ -f "$tmp/worker.log" ] && tail -20 "$tmp/worker.log" >&2
    exit 1
}

# 1. Install.
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cfg=$(find "$tmp/prefix" -name DatasystemConfig.cmake | head -1)
[ -n "$cfg" ] || fail "the install has no DatasystemConfig.cmake"
pcdir=$(dirname "$(find "$tmp/prefix" -name datasystem-cpp.pc | head -1)")
libdir=$(dirname "$(find "$tmp/prefix" -name 'libdatasystem_cpp.so' | head -1)")

# 2. Their sources, unmodified, with our CMakeLists in the form of theirs.
mkdir -p "$tmp/src"
cp "$here/yuanrong_examples/CMakeLists.txt" "$tmp/src/"
cp -r "$here/yuanrong_examples/cuda_stub" "$tmp/src/"
for ex in datasystem_example object_client_example kv_client_example stream_client_example \
    hetero_client_gpu_example; do
    git --git-dir="$mirror" show "HEAD:example/cpp/$ex.cpp" >"$tmp/src/$ex.cpp"
done
cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; fail "configuring the examples (find_package(Datasystem))"; }
cmake --build "$tmp/build" -j 2 >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log"; fail "building the examples"; }

# 3. pkg-config builds the same program.
# shellcheck disable=SC2046
"$cxx" -std=c++17 $flags -o "$tmp/kv_pc" "$tmp/src/kv_client_example.cpp" \
    $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs datasystem-cpp) || fail "building with pkg-config"

# 4. A worker on a free loopback port; its socket in a private directory.
export DS_UNIX_SOCKET_DIR="$tmp/sock"
mkdir -p "$DS_UNIX_SOCKET_DIR"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/src/worker/datasystem_worker" --worker_address "127.0.0.1:$port" --shared_memory_size_mb 64 \
    >"$tmp/worker.log" 2>&1 &
worker_pid=$!
for _ in $(seq 1 200); do
    [ -S "$DS_UNIX_SOCKET_DIR/worker-127.0.0.1-$port.sock" ] && break
    kill -0 "$worker_pid" 2>/dev/null || fail "the worker exited"
    sleep 0.1
done
[ -S "$DS_UNIX_SOCKET_DIR/worker-127.0.0.1-$port.sock" ] || fail "the worker did not start within 20 s"

# 5. Run them as run-example.sh does.
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
run() {
    local out=$tmp/$(basename "$1").out
    echo "+ $*"
    "$@" >"$out" 2>&1 || { cat "$out"; fail "$* exited $?"; }
    cat "$out"
}
expect() {  # expect OUTFILE TEXT: the program printed TEXT
    grep -qF -- "$2" "$tmp/$1.out" || fail "$1 did not print '$2'"
}
# Yuanrong's run-example.sh runs the stream example first.
run "$tmp/build/stream_client_example" 127.0.0.1 "$port"
expect stream_client_example "Verify element successfully."
run "$tmp/build/datasystem_example" 127.0.0.1 "$port"
expect datasystem_example "Run ds client test success."
run "$tmp/build/object_client_example" 127.0.0.1 "$port" 1000 false
# object_client_example exits 0 whatever happens: check what it printed.
expect object_client_example "Create: code: [K_OK]"
expect object_client_example "Read succeeds."
expect object_client_example "Modify succeeds !!!"
expect object_client_example "GDecreaseRef: code: [K_OK]"
! grep -q "Fail" "$tmp/object_client_example.out" || fail "object_client_example reported a failure"
run "$tmp/build/kv_client_example" 127.0.0.1 "$port"
expect kv_client_example "KV client set value api succeeds."
run "$tmp/kv_pc" 127.0.0.1 "$port"
expect kv_pc "KV client get succeeds."
# The GPU hetero example: a writer (DevMSet, then it waits for Enter) and a
# reader in another process (DevMGet, checking the bytes).
export DS_DEVICE_BACKEND=host
mkfifo "$tmp/enter"
# The writer never frees the blobs it cudaMalloc'd (the process's exit does
# on a GPU), so a sanitizer build does not count them as its leaks.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    "$tmp/build/hetero_client_gpu_example" --write 127.0.0.1 "$port" 0 <"$tmp/enter" \
    >"$tmp/hetero_write.out" 2>&1 &
writer=$!
exec 3>"$tmp/enter"
for _ in $(seq 1 200); do
    grep -q "Data written." "$tmp/hetero_write.out" && break
    kill -0 "$writer" 2>/dev/null || break
    sleep 0.1
done
grep -q "Data written." "$tmp/hetero_write.out" || { cat "$tmp/hetero_write.out"; fail "the GPU example's writer"; }
run "$tmp/build/hetero_client_gpu_example" --read 127.0.0.1 "$port" 0
expect hetero_client_gpu_example "DevMGet succeeds."
expect hetero_client_gpu_example "Data verification succeeds."
echo >&3
exec 3>&-
rc=0
wait "$writer" || rc=$?
[ "$rc" = 0 ] || { cat "$tmp/hetero_write.out"; fail "the GPU example's writer exited $rc"; }
cat "$tmp/hetero_write.out"
echo "PASS: Yuanrong's C++ examples built with find_package(Datasystem) and pkg-config, and ran"
