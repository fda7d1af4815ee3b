#!/usr/bin/env bash
# Installs the Debian 12 packages the project builds, tests and benchmarks
# with, and any further packages named as arguments (scripts/profile.sh:
# linux-perf). Idempotent: apt-get runs only when something is missing.
set -euo pipefail

PKGS=(build-essential cmake pkg-config libyaml-dev libmsgpack-dev libcurl4-openssl-dev
      libcjson-dev libcmocka-dev libssl-dev libhiredis-dev etcd-server etcd-client
      redis-server redis-tools python3 python3-pytest python3-numpy python3-msgpack
      python3-yaml python3-setuptools python3-wheel python3-venv python3-pip python3-dev
      git clang llvm valgrind iproute2 gnuplot-nox procps libucx-dev ucx-utils
      libzmq3-dev python3-zmq python3-torch)
# python3-torch: DsTensorClient's tests (CPU tensors on the host device backend);
# the SDK itself imports torch only in yr.datasystem.ds_tensor_client.
# libzmq3-dev: the worker's KV event publisher (--kv_events_config); python3-zmq
# and python3-msgpack: its test's subscriber.
# libucx-dev: the worker's --enable_rdma data plane (UCX); ucx-utils: ucx_perftest and
# ucx_info, reference figures for the UCX data plane.
# python3-venv, python3-wheel, python3-setuptools and git: the README's install
# (python3 -m venv --system-site-packages; pip install --no-build-isolation
# ./python), which tests/python/test_packaging.py runs from a fresh clone.

PKGS+=("$@")
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts etcd and redis as services on install; the project starts its
# own on private loopback ports and never uses those.
