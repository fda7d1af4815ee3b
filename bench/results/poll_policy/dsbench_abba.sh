#!/bin/bash
# Alternates dsbench --quick against a worker with the policy on (defaults)
# and one with it off (--busy_poll_us 0, clients DS_BUSY_POLL_US=0), ABBA.
set -u
cd "$(dirname "$0")/../../.."
W=build/src/worker/datasystem_worker
D=$(mktemp -d)
$W --worker_address 127.0.0.1:39611 --shared_memory_size_mb 1024 --log_level warn > $D/w_on.log 2>&1 & P_ON=$!
$W --worker_address 127.0.0.1:39612 --shared_memory_size_mb 1024 --log_level warn --busy_poll_us 0 > $D/w_off.log 2>&1 & P_OFF=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/39611 && exec 4<>/dev/tcp/127.0.0.1/39612) 2>/dev/null && break; sleep 0.2; done
for r in on1 off1 off2 on2 on3 off3; do
  case $r in on*) port=39611; env=;; off*) port=39612; env="DS_BUSY_POLL_US=0";; esac
  echo "== $r load $(cut -d' ' -f1 /proc/loadavg)"
  env $env timeout 300 build/bench/dsbench --worker_address 127.0.0.1:$port --quick --json $D/$r.json > $D/$r.txt 2>&1
  grep -E "^(local|remote) +(set|get|set\+get) +(1024|1048576) " $D/$r.txt
done
kill $P_ON $P_OFF; wait
