"""Service discovery and client failover on a real three-worker cluster.

etcd and three workers (cluster "sdtest", --host_id_env_name DS_TEST_HOST_ID,
each worker given its own host ID h0, h1, h2) on loopback. The discovery in
this process takes host ID h0, so worker 0 is "this node" and the others are
not: selection per affinity policy, the worker lists, and then the failover
itself: a KVClient, an ObjectClient and a DsClient built with the discovery and
enable_cross_node_connection=True serve through worker 0, worker 0 is
SIGKILLed, and they carry on through another worker the discovery lists:
new sets and gets succeed, a key stored on another worker still reads, and
the key stored only on the dead worker is gone.

Every process is stopped by PID at the end, also when an assertion fails.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import LIB_PATH, WORKER_BIN, free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
CLUSTER = "sdtest"
HOST_ENV = "DS_TEST_HOST_ID"

pytestmark = pytest.mark.skipif(
    not (WORKER_BIN.exists() and LIB_PATH.exists() and os.access(ETCD, os.X_OK)),
    reason="needs datasystem_worker, libdatasystem and etcd",
)


def _kill(proc):
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def _start_etcd(tmp, procs):
    cport, pport = free_port(), free_port()
    client, peer = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    log = open(tmp / "etcd.log", "w")
    p = subprocess.Popen([ETCD, "--name", "sd", "--data-dir", str(tmp / "etcd"),
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", "sd=" + peer, "--initial-cluster-state", "new"],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert p.poll() is None, (tmp / "etcd.log").read_text()[-2000:]
        try:
            req = urllib.request.Request(client + "/v3/kv/range", data=b'{"key":"Lw=="}')
            urllib.request.urlopen(req, timeout=1).read()
            return "127.0.0.1:%d" % cport
        except OSError:
            time.sleep(0.2)
    pytest.fail("etcd did not answer within 30 s")


def _start_worker(tmp, i, etcd, procs):
    port = free_port()
    sock = tmp / ("s%d" % i)
    sock.mkdir()
    log = open(tmp / ("worker%d.log" % i), "w")
    env = dict(os.environ, **{HOST_ENV: "h%d" % i})
    p = subprocess.Popen([str(WORKER_BIN), "--worker_address", "127.0.0.1:%d" % port,
                          "--etcd_address", etcd, "--cluster_name", CLUSTER,
                          "--host_id_env_name", HOST_ENV, "--unix_socket_dir", str(sock),
                          "--shared_memory_size_mb", "64", "--node_timeout_s", "3"],
                         stdout=log, stderr=subprocess.STDOUT, env=env)
    procs.append(p)
    return "127.0.0.1:%d" % port, p


@pytest.fixture
def procs():
    started = []
    yield started
    for p in reversed(started):
        _kill(p)


@pytest.fixture
def cluster(procs, monkeypatch):
    tmp = Path(tempfile.mkdtemp(prefix="dssd-", dir="/tmp"))  # short: socket paths
    try:
        etcd = _start_etcd(tmp, procs)
        workers = [_start_worker(tmp, i, etcd, procs) for i in range(3)]
        monkeypatch.setenv(HOST_ENV, "h0")
        yield etcd, workers, tmp
    finally:
        for p in reversed(procs):
            _kill(p)
        shutil.rmtree(tmp, ignore_errors=True)


def _discovery(etcd, policy=None, host_env=HOST_ENV):
    from yr.datasystem import ServiceAffinityPolicy, ServiceDiscovery, ServiceDiscoveryOptions

    o = ServiceDiscoveryOptions()
    o.etcd_address = etcd
    o.cluster_name = CLUSTER
    o.host_id_env_name = host_env
    o.affinity_policy = policy or ServiceAffinityPolicy.PREFERRED_SAME_NODE
    sd = ServiceDiscovery(o)
    sd.init()
    return sd


def _wait_listed(sd, n, tmp):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, same, other = sd.get_all_workers()
        if len(same) + len(other) == n:
            return same, other
        time.sleep(0.1)
    logs = "".join((tmp / ("worker%d.log" % i)).read_text()[-1500:] for i in range(3))
    pytest.fail("etcd did not list %d ready workers within 30 s:\n%s" % (n, logs))


def test_discovery_selects_per_affinity_policy(cluster):
    from yr.datasystem import ServiceAffinityPolicy

    etcd, workers, tmp = cluster
    addrs = [a for a, _ in workers]
    sd = _discovery(etcd)
    same, other = _wait_listed(sd, 3, tmp)
    assert same == [addrs[0]]
    assert sorted(other) == sorted(addrs[1:])
    assert sd.has_host_affinity()
    assert sd.get_affinity_policy() == ServiceAffinityPolicy.PREFERRED_SAME_NODE
    for _ in range(5):
        st, ip, port, same_node = sd.select_worker()
        assert st.is_ok() and "%s:%d" % (ip, port) == addrs[0] and same_node is True
    st, ip, port = sd.select_same_node_worker()
    assert "%s:%d" % (ip, port) == addrs[0]

    required = _discovery(etcd, ServiceAffinityPolicy.REQUIRED_SAME_NODE)
    assert required.get_all_workers()[1:] == ([addrs[0]], [])
    assert required.select_worker()[1:] == ("127.0.0.1", int(addrs[0].split(":")[1]), True)

    rnd = _discovery(etcd, ServiceAffinityPolicy.RANDOM)
    assert not rnd.has_host_affinity()
    _, same, other = rnd.get_all_workers()
    assert same == [] and sorted(other) == sorted(addrs)
    seen = {"%s:%d" % rnd.select_worker()[1:3] for _ in range(60)}
    assert seen <= set(addrs) and len(seen) >= 2

    # Without a host ID: every worker is another node's; REQUIRED cannot work.
    none = _discovery(etcd, ServiceAffinityPolicy.REQUIRED_SAME_NODE, host_env="DS_TEST_NO_SUCH")
    assert not none.has_host_affinity()
    with pytest.raises(RuntimeError, match="host_id"):
        none.select_worker()
    with pytest.raises(RuntimeError, match="host_id"):
        none.select_same_node_worker()

    # Another cluster name lists nobody: select says try again.
    from yr.datasystem import ServiceDiscovery, ServiceDiscoveryOptions

    o = ServiceDiscoveryOptions()
    o.etcd_address = etcd
    o.cluster_name = "nobody_here"
    empty = ServiceDiscovery(o)
    empty.init()
    assert empty.get_all_workers()[1:] == ([], [])
    with pytest.raises(RuntimeError, match="No available worker"):
        empty.select_worker()


def test_discovery_reports_bad_options_and_unreachable_etcd():
    from yr.datasystem import ServiceDiscovery, ServiceDiscoveryOptions

    o = ServiceDiscoveryOptions()
    with pytest.raises(RuntimeError, match="EtcdAddress should not be empty"):
        ServiceDiscovery(o).init()
    o.etcd_address = "127.0.0.1:%d" % free_port()  # nothing listens there
    with pytest.raises(RuntimeError, match="etcd"):
        ServiceDiscovery(o).init()
    o.etcd_ca = "/nonexistent/ca.pem"
    with pytest.raises(RuntimeError, match="TLS to etcd"):
        ServiceDiscovery(o).init()
    with pytest.raises(TypeError):
        ServiceDiscovery("127.0.0.1:2379")


def test_clients_fail_over_when_their_worker_is_killed(cluster):
    from yr.datasystem import DsClient, KVClient, ObjectClient

    etcd, workers, tmp = cluster
    addrs = [a for a, _ in workers]
    sd = _discovery(etcd)
    _wait_listed(sd, 3, tmp)

    # A value held by worker 1 only.
    host1, port1 = addrs[1].split(":")
    w1 = KVClient(host1, int(port1), unix_socket_dir=str(tmp / "s1"))
    w1.init()
    w1.set("sd_far", b"far")

    kv = KVClient(service_discovery=sd, enable_cross_node_connection=True)
    kv.init()
    oc = ObjectClient("", 0, service_discovery=sd, enable_cross_node_connection=True)
    oc.init()
    ds = DsClient(service_discovery=sd, enable_cross_node_connection=True)
    ds.init()
    kv.set("sd_near", b"near")  # on worker 0, the one this node prefers
    oc.put("sd_obj_near", b"objnear")
    assert kv.get(["sd_near", "sd_far"]) == [b"near", b"far"]
    assert w1.get(["sd_near"]) == [b"near"]  # it is in the cluster
    assert [bytes(b.immutable_data()) for b in oc.get(["sd_far"], 0)] == [b"far"]

    _kill(workers[0][1])  # SIGKILL

    # At once, while etcd still lists the dead worker (its lease has not run
    # out): the first call may be the one that finds the worker gone; the
    # next dials another listed worker, never the dead one again.
    st = kv.health_check()
    if not st.is_ok():
        assert st.get_code() in (23, 1001, 1002), st.to_string()
        st = kv.health_check()
    assert st.is_ok(), st.to_string()
    for c in (oc._kv, ds.kv(), ds.object()._kv):
        st = c.health_check()
        if not st.is_ok():
            st = c.health_check()
        assert st.is_ok(), st.to_string()

    # Once the lease is out the survivors drop the dead worker from the ring
    # and re-register their keys with its successors: then every key held by
    # a live worker reads again from anywhere.
    _wait_listed(sd, 2, tmp)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if kv.get(["sd_far"]) == [b"far"]:
                break
        except RuntimeError:
            pass
        time.sleep(0.1)
    assert kv.get(["sd_far"]) == [b"far"]

    kv.set("sd_after", b"after")
    assert kv.get(["sd_after"]) == [b"after"]
    for i in range(20):
        kv.set("sd_many_%d" % i, b"v%d" % i)
    assert kv.get(["sd_many_%d" % i for i in range(20)]) == [b"v%d" % i for i in range(20)]
    assert w1.get(["sd_after"]) == [b"after"]
    # What only the dead worker held is gone.
    try:
        gone = kv.get(["sd_near"])
    except RuntimeError:
        gone = [None]
    assert gone == [None]

    oc.put("sd_obj_after", b"objafter")
    assert [bytes(b.immutable_data()) for b in oc.get(["sd_obj_after", "sd_far"], 0)] == [
        b"objafter", b"far"]
    assert kv.get(["sd_obj_after"]) == [b"objafter"]

    ds.kv().set("sd_ds_after", b"dsafter")
    assert [bytes(b.immutable_data()) for b in ds.object().get(["sd_ds_after"], 0)] == [b"dsafter"]

    ds.close()
    kv.close()
    oc.close()
    w1.close()


def test_without_cross_node_connection_the_client_stays(cluster):
    from yr.datasystem import DsError, KVClient

    etcd, workers, tmp = cluster
    sd = _discovery(etcd)
    _wait_listed(sd, 3, tmp)
    with pytest.warns(RuntimeWarning, match="enable_cross_node_connection is False"):
        kv = KVClient(service_discovery=sd)
    kv.init()
    kv.set("sd_stay", b"x")
    _kill(workers[0][1])
    for _ in range(3):
        with pytest.raises(DsError):
            kv.set("sd_stay2", b"y")
    kv.close()
