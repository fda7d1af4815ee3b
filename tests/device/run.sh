#!/usr/bin/env bash
# The device check: builds the project, then runs the heterogeneous client's
# device tests and benchmark rows on the device backend this machine has.
#
#   bash tests/device/run.sh            # cuda when a GPU and its driver are
#                                       # here, else host (as CI runs it)
#   DS_DEVICE_BACKEND=host bash tests/device/run.sh   # force a backend
#
# On cuda: it_device (allocation, mset_d2h from GPU memory into the arena,
# mget_h2d back, async, device-to-device, a value written from another
# process's GPU memory, a killed client, and cross-process device-to-device:
# dev_publish in one process, dev_subscribe copying straight from its GPU
# memory in another (cuIpc*), a publisher killed while its key is published,
# the fallback to the worker's copy) and hetero_bench's rows with real
# D2H/H2D copies against cuMemcpy of the same bytes. On host: the same plus
# it_hetero and the C++ and Python HeteroClient tests (which use host
# addresses as device pointers, so they run on host only); the DsTensorClient
# tests on both (CUDA tensors on cuda, when torch has CUDA). Results go to
# bench/results/device_check_<backend>.txt (and .json), or to
# $DS_DEVICE_OUT.txt (and .json) when that is set (CI: under build/).
# DS_DEVICE_SKIP_BUILD=1 uses the build already there; DS_DEVICE_BENCH_REPS
# sets the benchmark's repetitions (default 300). Exit status: 0 when every
# test passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${DS_BUILD_DIR:-$ROOT/build}

if [[ -z "${DS_DEVICE_BACKEND:-}" ]]; then
  if [[ -e /dev/nvidiactl ]] && { ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; }; then
    DS_DEVICE_BACKEND=cuda
  else
    DS_DEVICE_BACKEND=host
  fi
fi
export DS_DEVICE_BACKEND
echo "device check: backend $DS_DEVICE_BACKEND"
if [[ "$DS_DEVICE_BACKEND" == cuda ]] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
fi

if [[ -z "${DS_DEVICE_SKIP_BUILD:-}" ]]; then
  bash scripts/build.sh release
fi

OUT=${DS_DEVICE_OUT:-$ROOT/bench/results/device_check_${DS_DEVICE_BACKEND}}
mkdir -p "$(dirname "$OUT")"
fail=0
# Verbose, so the log names each of it_device's tests (the cross-process
# device-to-device one among them) and its result.
ctest --test-dir "$BUILD" -R 'integration\.it_device$' -V 2>&1 \
  | grep -E '\[ *(RUN|OK|FAILED|PASSED|ERROR|LINE) *\]|device backend|tests passed|tests failed|Error' \
  || fail=1
if [[ "$DS_DEVICE_BACKEND" == host ]]; then
  ctest --test-dir "$BUILD" -R 'integration\.it_hetero$|cpp\.test_cpp_hetero$' --output-on-failure \
    || fail=1
  DS_BUILD_DIR=$BUILD PYTHONPATH=$ROOT/python /usr/bin/python3 -m pytest -q \
    tests/python/test_hetero_client.py || fail=1
fi
# DsTensorClient: CPU tensors on host; CUDA tensors on cuda (skipped, saying
# so, where torch has no CUDA, as Debian's python3-torch has not).
DS_BUILD_DIR=$BUILD PYTHONPATH=$ROOT/python /usr/bin/python3 -m pytest -q -rs \
  tests/python/test_ds_tensor_client.py || fail=1
"$BUILD/bench/hetero_bench" --reps "${DS_DEVICE_BENCH_REPS:-300}" --json "$OUT.json" | tee "$OUT.txt" \
  || fail=1
echo "device check: backend $DS_DEVICE_BACKEND: $([[ $fail == 0 ]] && echo PASSED || echo FAILED)"
exit $fail
