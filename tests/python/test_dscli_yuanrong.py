"""Yuanrong deployments run unchanged: dscli and the worker, end to end.

1. Two workers and etcd deployed from Yuanrong-format configuration files
   (tests/data/yuanrong_worker_config.json, given each worker's port and the
   etcd address) with ``dscli start -d DIR -f FILE``; Yuanrong's output
   lines; health and ready files saying "health check success"; ``dscli
   query cluster`` and ``query route`` in Yuanrong's schema; a C program and a
   Python program write and read across both workers; a C++ program built
   against the installed C++ SDK the way Yuanrong's examples are
   (find_package(Datasystem), ${Datasystem_INCLUDE_DIR}, target
   ``datasystem``) writes and reads across both workers through KVClient and
   ObjectClient; ``dscli stop -f`` stops each and its probe files go away.
2. Yuanrong's own cli/deploy/conf/worker_config.json from the mirror's HEAD,
   copied into the test's directory at run time (only its worker_address and
   shared_memory_size_mb values changed: a free port, a small arena), starts
   a worker through ``dscli start -f``; its unknown flags draw warnings that
   name them; ``dscli stop -f`` stops it. Skipped, saying why, without the
   mirror.
3. gflags syntax: a worker started with single-dash flags, directly and
   through ``dscli start -w``, serves.

Every process is stopped by PID at the end, also when an assertion fails.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import BUILD_DIR, LIB_PATH, PYTHON_DIR, REPO, WORKER_BIN, free_port

DSCLI = BUILD_DIR / "src" / "cli" / "dscli"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
MIRROR = Path("/work/.mirror/openeuler-mirror+yuanrong-datasystem/repo")
OUR_CONFIG = REPO / "tests" / "data" / "yuanrong_worker_config.json"
HEALTH_TEXT = "health check success\n"

pytestmark = pytest.mark.skipif(
    not (DSCLI.exists() and WORKER_BIN.exists() and LIB_PATH.exists()),
    reason="needs dscli, datasystem_worker and libdatasystem of DS_BUILD_DIR=%s" % BUILD_DIR,
)


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _kill(pid):
    if pid and _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _dscli(*args, timeout=120):
    p = subprocess.run([str(DSCLI)] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, DS_WORKER_BIN=str(WORKER_BIN)))
    sys.stderr.write("$ dscli %s\n%s%s" % (" ".join(map(str, args)), p.stdout, p.stderr))
    return p


def _started_pid(out, addr):
    m = re.search(r"^\[INFO\] \[  OK  \] Start worker service @ %s success, PID: (\d+)$"
                  % re.escape(addr), out, re.M)
    assert m, out
    return int(m.group(1))


def _read(path):
    with open(path) as f:
        return f.read()


def _set_config(src, dst, **values):
    """Copies a Yuanrong-format file, setting entries' values."""
    with open(src) as f:
        cfg = json.load(f)
    for k, v in values.items():
        if isinstance(cfg.get(k), dict):
            cfg[k]["value"] = v
        else:
            cfg[k] = {"value": v, "description": ""}
    with open(dst, "w") as f:
        json.dump(cfg, f, indent=4)


@pytest.fixture
def short_dir():
    """A directory with a short path: Unix socket paths have ~107 bytes."""
    d = Path(tempfile.mkdtemp(prefix="dsyr-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def procs():
    """PIDs to kill at the end (workers dscli started, etcd)."""
    pids = []
    yield pids
    for pid in pids:
        _kill(pid)


def _start_etcd(tmp, procs):
    if not os.access(ETCD, os.X_OK):
        pytest.skip("etcd is not installed (%s)" % ETCD)
    cport, pport = free_port(), free_port()
    client, peer = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    log = open(tmp / "etcd.log", "w")
    p = subprocess.Popen([ETCD, "--name", "e2e", "--data-dir", str(tmp / "etcd"),
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", "e2e=" + peer, "--initial-cluster-state", "new"],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(p.pid)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert p.poll() is None, _read(tmp / "etcd.log")[-2000:]
        try:
            req = urllib.request.Request(client + "/v3/kv/range", data=b'{"key":"Lw=="}')
            urllib.request.urlopen(req, timeout=1).read()
            return "127.0.0.1:%d" % cport
        except OSError:
            time.sleep(0.2)
    pytest.fail("etcd did not answer within 30 s")


C_PROGRAM = r"""
#include "ds/kv_client.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_client_t *connect_to(const char *host, int port)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    o.transport = DS_TRANSPORT_TCP;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK) return NULL;
    return c;
}

int main(int argc, char **argv)
{
    ds_client_t *a = connect_to("127.0.0.1", atoi(argv[1]));
    ds_client_t *b = connect_to("127.0.0.1", atoi(argv[2]));
    if (!a || !b) { printf("connect failed\n"); return 1; }
    const char val[] = "from-c";
    if (ds_kv_set(a, "e2e-c", val, sizeof(val) - 1, NULL) != DS_K_OK) { printf("set\n"); return 1; }
    void *v = NULL;
    size_t n = 0;
    ds_status_t st = ds_kv_get(b, "e2e-py", 0, &v, &n);
    if (st != DS_K_OK || n != 7 || memcmp(v, "from-py", 7) != 0) {
        printf("get e2e-py: status %d\n", (int)st);
        return 1;
    }
    ds_free(v);
    ds_client_close(a);
    ds_client_close(b);
    printf("c program ok\n");
    return 0;
}
"""

PY_PROGRAM = r"""
import sys
from yr.datasystem import KVClient
a = KVClient("127.0.0.1", int(sys.argv[1])); a.init()
b = KVClient("127.0.0.1", int(sys.argv[2])); b.init()
a.set("e2e-py", b"from-py")
assert b.get(["e2e-py"]) == [b"from-py"]
print("python program ok")
"""

PY_CHECK = r"""
import sys
from yr.datasystem import KVClient
b = KVClient("127.0.0.1", int(sys.argv[1])); b.init()
assert b.get(["e2e-c"]) == [b"from-c"], b.get(["e2e-c"])
print("python read ok")
"""


# Our own program over Yuanrong's C++ API: writes on the first worker, reads
# on the second, through KVClient and ObjectClient; reads the Python
# program's key too. Prints one line per check; exits 1 on the first failure.
CPP_PROGRAM = r"""
#include "datasystem/datasystem.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

using namespace datasystem;

static ConnectOptions Opts(const char *port)
{
    ConnectOptions o;
    o.host = "127.0.0.1";
    o.port = std::atoi(port);
    return o;
}

static int Fail(const std::string &what, const Status &st)
{
    std::cout << what << " failed: " << st.ToString() << std::endl;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::cout << "usage: e2e_cpp PORT_A PORT_B" << std::endl;
        return 2;
    }
    KVClient kvA(Opts(argv[1])), kvB(Opts(argv[2]));
    Status st = kvA.Init();
    if (st.IsError()) return Fail("KVClient A Init", st);
    if ((st = kvB.Init()).IsError()) return Fail("KVClient B Init", st);
    if ((st = kvA.Set("e2e-cpp", "from-cpp")).IsError()) return Fail("KVClient A Set", st);
    std::string val;
    if ((st = kvB.Get("e2e-cpp", val)).IsError()) return Fail("KVClient B Get", st);
    std::cout << "kv read on B: " << val << std::endl;
    if ((st = kvB.Get("e2e-py", val)).IsError()) return Fail("KVClient B Get e2e-py", st);
    std::cout << "kv read python's key on B: " << val << std::endl;

    ObjectClient objA(Opts(argv[1])), objB(Opts(argv[2]));
    if ((st = objA.Init()).IsError()) return Fail("ObjectClient A Init", st);
    if ((st = objB.Init()).IsError()) return Fail("ObjectClient B Init", st);
    const std::string key = "e2e-cpp-object", data = "object-from-cpp";
    std::vector<std::string> failed;
    if ((st = objA.GIncreaseRef({key}, failed)).IsError() || !failed.empty())
        return Fail("ObjectClient A GIncreaseRef", st);
    std::shared_ptr<Buffer> buf;
    if ((st = objA.Create(key, data.size(), CreateParam{}, buf)).IsError())
        return Fail("ObjectClient A Create", st);
    if ((st = buf->WLatch()).IsError()) return Fail("Buffer WLatch", st);
    if ((st = buf->MemoryCopy(data.data(), data.size())).IsError()) return Fail("MemoryCopy", st);
    if ((st = buf->Seal()).IsError()) return Fail("Buffer Seal", st);
    buf->UnWLatch();
    std::vector<Optional<Buffer>> got;
    if ((st = objB.Get({key}, 30000, got)).IsError()) return Fail("ObjectClient B Get", st);
    if (got.size() != 1 || !got[0]) {
        std::cout << "ObjectClient B Get returned no buffer" << std::endl;
        return 1;
    }
    got[0]->RLatch();
    std::string read(static_cast<const char *>(got[0]->ImmutableData()), got[0]->GetSize());
    got[0]->UnRLatch();
    std::cout << "object read on B: " << read << std::endl;
    if ((st = objA.GDecreaseRef({key}, failed)).IsError() || !failed.empty())
        return Fail("ObjectClient A GDecreaseRef", st);
    std::cout << "cpp program ok" << std::endl;
    return 0;
}
"""

# Yuanrong's example/cpp/CMakeLists.txt, less what builds their tarball.
CPP_CMAKELISTS = """\
cmake_minimum_required(VERSION 3.14.1)
project(ds_e2e LANGUAGES CXX C)
set(CMAKE_CXX_STANDARD 17)
find_package(Datasystem ${Datasystem_version} REQUIRED)
include_directories(${Datasystem_INCLUDE_DIR})
add_executable(e2e_cpp e2e_cpp.cpp)
target_link_libraries(e2e_cpp datasystem)
"""


def _cache_value(name):
    try:
        with open(BUILD_DIR / "CMakeCache.txt") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


@pytest.fixture(scope="module")
def cpp_program(tmp_path_factory):
    """The C++ program, built once per test run against an install of
    DS_BUILD_DIR (cmake --install into a temporary prefix). Yields the
    executable and the install's library directory, or skips saying why."""
    cmake = shutil.which("cmake")
    cxx = _cache_value("CMAKE_CXX_COMPILER") or shutil.which("c++")
    if cmake is None or not cxx:
        pytest.skip("no cmake or C++ compiler")
    if not (BUILD_DIR / "src" / "cpp").is_dir():
        pytest.skip("DS_BUILD_DIR=%s has no C++ SDK (src/cpp)" % BUILD_DIR)
    top = tmp_path_factory.mktemp("cpp")
    prefix, src, build = top / "prefix", top / "src", top / "build"
    r = subprocess.run([cmake, "--install", str(BUILD_DIR), "--prefix", str(prefix)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    libs = list(prefix.rglob("libdatasystem_cpp.so"))
    assert libs and list(prefix.rglob("DatasystemConfig.cmake")), "incomplete install"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CPP_CMAKELISTS)
    (src / "e2e_cpp.cpp").write_text(CPP_PROGRAM)
    # A sanitized build's libraries need the program built with the same runtime.
    flags = ""
    if _cache_value("DS_SANITIZE").upper() in ("ON", "1", "TRUE", "YES"):
        flags = "-fsanitize=address,undefined"
    elif _cache_value("DS_TSAN").upper() in ("ON", "1", "TRUE", "YES"):
        flags = "-fsanitize=thread"
    r = subprocess.run([cmake, "-S", str(src), "-B", str(build), "-DCMAKE_PREFIX_PATH=" + str(prefix),
                        "-DCMAKE_CXX_COMPILER=" + cxx, "-DCMAKE_CXX_FLAGS=" + flags,
                        "-DCMAKE_EXE_LINKER_FLAGS=" + flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([cmake, "--build", str(build)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    yield build / "e2e_cpp", libs[0].parent

PY_CHECK_CPP = r"""
import sys
from yr.datasystem import KVClient
b = KVClient("127.0.0.1", int(sys.argv[1])); b.init()
assert b.get(["e2e-cpp"]) == [b"from-cpp"], b.get(["e2e-cpp"])
print("python read of cpp key ok")
"""


def _py(code, *args):
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), DS_LIBDIR=str(LIB_PATH.parent))
    p = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=60, env=env)
    sys.stderr.write(p.stdout + p.stderr)
    return p


def test_two_workers_and_etcd_from_yuanrong_config_files(tmp_path, short_dir, procs,
                                                        cpp_program):
    etcd = _start_etcd(tmp_path, procs)
    workers = []
    for i in range(2):
        port = free_port()
        home = short_dir / ("w%d" % i)
        home.mkdir()
        cfg = home / "worker_config.json"
        _set_config(OUR_CONFIG, cfg, worker_address="127.0.0.1:%d" % port, etcd_address=etcd)
        p = _dscli("start", "-d", home, "-f", cfg, "-t", 60)
        addr = "127.0.0.1:%d" % port
        if p.returncode == 0:
            procs.append(_started_pid(p.stdout, addr))
        assert p.returncode == 0, p.stderr
        assert "[INFO] Starting worker service with PID: %d" % procs[-1] in p.stdout
        probe = home / "datasystem" / "probe"
        assert _read(probe / "healthy") == HEALTH_TEXT
        assert _read(probe / "ready") == HEALTH_TEXT
        assert oct((probe / "ready").stat().st_mode & 0o777) == oct(0o600)
        log = _read(home / "datasystem" / "logs" / ("worker-127.0.0.1-%d.log" % port))
        assert "unknown flag '--zmq_server_io_context' ignored" in log
        workers.append((port, cfg, procs[-1], probe))

    # query cluster / route: Yuanrong's schema, both members, the whole ring.
    deadline = time.monotonic() + 30
    while True:
        p = _dscli("query", "cluster", "--etcd_address", etcd)
        doc = json.loads(p.stdout)
        if p.returncode == 0 and len(doc["nodes"]) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert p.returncode == 0, p.stdout
    assert doc["schema_version"] == "1.0" and doc["status"] == "OK"
    assert doc["cluster_name"] == "default" and doc["topology_version"] > 0
    assert sorted(n["worker_address"] for n in doc["nodes"]) == sorted(
        "127.0.0.1:%d" % w[0] for w in workers)
    for n in doc["nodes"]:
        assert set(n) == {"worker_address", "health", "state", "hash_ranges"}
        assert n["health"] == "HEALTHY" and n["state"] == "ACTIVE"
        for r in n["hash_ranges"]:
            assert re.fullmatch(r"\(\d+,\d+\]", r), r
    # The ranges of both members tile the ring: total width 2^32.
    width = 0
    for n in doc["nodes"]:
        for r in n["hash_ranges"]:
            s, e = map(int, r[1:-1].split(","))
            width += (e - s) % (1 << 32)
    assert width == 1 << 32

    p = _dscli("query", "route", "--etcd_address", etcd, "--keys", "k1", "k2", "k1", "k3")
    assert p.returncode == 0, p.stdout
    doc = json.loads(p.stdout)
    assert doc["status"] == "OK" and doc["schema_version"] == "1.0"
    keys = [k for r in doc["routes"] for k in r["keys"]]
    assert sorted(keys) == ["k1", "k1", "k2", "k3"]
    for r in doc["routes"]:
        assert r["health"] == "HEALTHY"
        assert r["keys"] == [k for k in ["k1", "k2", "k1", "k3"] if k in r["keys"]]
    p = _dscli("query", "route", "--coordinator_address", "127.0.0.1:1", "--keys", "k")
    assert p.returncode == 1
    assert json.loads(p.stdout)["status"] == "Invalid parameter"

    # A Python, a C and a C++ program, each across both workers.
    (p0, p1) = (workers[0][0], workers[1][0])
    p = _py(PY_PROGRAM, p0, p1)
    assert "python program ok" in p.stdout, p.stderr
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src, exe = tmp_path / "prog.c", tmp_path / "prog"
    src.write_text(C_PROGRAM)
    c = subprocess.run([cc, "-std=c11", "-o", str(exe), str(src), "-I", str(REPO / "include"),
                        "-L", str(LIB_PATH.parent), "-ldatasystem",
                        "-Wl,-rpath," + str(LIB_PATH.parent)],
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stderr
    r = subprocess.run([str(exe), str(p1), str(p0)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "c program ok" in r.stdout, r.stdout + r.stderr
    p = _py(PY_CHECK, p0)
    assert "python read ok" in p.stdout, p.stderr
    exe, libdir = cpp_program
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    r = subprocess.run([str(exe), str(p0), str(p1)], capture_output=True, text=True, timeout=120,
                       env=env)
    sys.stderr.write(r.stdout + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "kv read on B: from-cpp",
        "kv read python's key on B: from-py",
        "object read on B: object-from-cpp",
        "cpp program ok",
    ]
    p = _py(PY_CHECK_CPP, p1)
    assert "python read of cpp key ok" in p.stdout, p.stderr

    # dscli stop -f: Yuanrong's line, the process gone, the probes removed.
    for port, cfg, pid, probe in workers:
        p = _dscli("stop", "-f", cfg, "-t", 60)
        assert p.returncode == 0, p.stderr
        assert ("[INFO] [  OK  ] Stop worker service @ 127.0.0.1:%d normally, PID: %d\n"
                % (port, pid)) in p.stdout
        assert not _alive(pid)
        assert not (probe / "healthy").exists() and not (probe / "ready").exists()


def test_yuanrong_head_worker_config(tmp_path, short_dir, procs):
    if not MIRROR.exists():
        pytest.skip("the Yuanrong Datasystem mirror (%s) is absent; its worker_config.json is "
                    "never committed here" % MIRROR)
    raw = subprocess.run(["git", "--git-dir", str(MIRROR), "show",
                          "HEAD:cli/deploy/conf/worker_config.json"],
                         capture_output=True, timeout=60)
    if raw.returncode != 0:
        pytest.skip("cannot read worker_config.json from the mirror: %s" % raw.stderr[-300:])
    orig = tmp_path / "yuanrong_worker_config.json"
    orig.write_bytes(raw.stdout)
    port = free_port()
    cfg = tmp_path / "worker_config.json"
    _set_config(orig, cfg, worker_address="127.0.0.1:%d" % port, shared_memory_size_mb="64")
    home = short_dir / "home"
    p = _dscli("start", "-d", home, "-f", cfg, "-t", 60)
    addr = "127.0.0.1:%d" % port
    if p.returncode == 0:
        procs.append(_started_pid(p.stdout, addr))
    assert p.returncode == 0, p.stderr
    pid = procs[-1]
    healthy = home / "datasystem" / "probe" / "healthy"
    assert _read(healthy) == HEALTH_TEXT
    logs = list((home / "datasystem" / "logs").glob("worker-*-%d.log" % port))
    assert logs
    log = _read(logs[0])
    # Flags of Yuanrong's HEAD this worker does not know: warned about by name.
    with open(orig) as f:
        names = set(json.load(f))
    for name in ("zmq_server_io_context", "ub_numa_rr"):
        if name in names:
            assert "unknown flag '--%s' ignored" % name in log
    p = _dscli("stop", "-f", cfg, "-t", 60)
    assert p.returncode == 0, p.stderr
    assert "[INFO] [  OK  ] Stop worker service @ %s normally, PID: %d" % (addr, pid) in p.stdout
    assert not _alive(pid)
    assert not healthy.exists()


def test_single_dash_flags_serve(tmp_path, procs):
    # Directly, as Yuanrong's Helm chart runs the worker.
    port = free_port()
    sock = tmp_path / "uds"
    log = open(tmp_path / "direct.log", "w")
    w = subprocess.Popen([str(WORKER_BIN), "-worker_address=127.0.0.1:%d" % port,
                          "-shared_memory_size_mb=32", "-unix_socket_dir", str(sock),
                          "-noenable_rdma", "-health_check_path=%s" % (tmp_path / "h" / "healthy")],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(w.pid)
    deadline = time.monotonic() + 30
    while not (tmp_path / "h" / "healthy").exists():
        assert w.poll() is None, _read(tmp_path / "direct.log")[-2000:]
        assert time.monotonic() < deadline, "the worker did not become healthy in 30 s"
        time.sleep(0.1)
    assert _read(tmp_path / "h" / "healthy") == HEALTH_TEXT
    p = _py(PY_PROGRAM, port, port)
    assert "python program ok" in p.stdout, p.stderr
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0
    assert not (tmp_path / "h" / "healthy").exists()

    # Through dscli start -w, which passes them on as written.
    port = free_port()
    addr = "127.0.0.1:%d" % port
    p = _dscli("start", "-t", 60, "-w", "-worker_address=" + addr, "-shared_memory_size_mb=32",
               "-log_dir", tmp_path / "logs", "--noenable_rdma")
    if p.returncode == 0:
        procs.append(_started_pid(p.stdout, addr))
    assert p.returncode == 0, p.stderr
    pid = procs[-1]
    # Probe files of their own: under the log directory, per worker.
    probe = tmp_path / "logs" / ("worker-127.0.0.1-%d" % port) / "probe"
    assert _read(probe / "healthy") == HEALTH_TEXT and _read(probe / "ready") == HEALTH_TEXT
    p = _py(PY_PROGRAM, port, port)
    assert "python program ok" in p.stdout, p.stderr
    p = _dscli("stop", "-w", addr, "-t", 60)
    assert p.returncode == 0, p.stderr
    assert not _alive(pid)


PY_TLS_PROGRAM = r"""
import sys
from yr.datasystem import KVClient
ca, cert, key = sys.argv[3:6]
def tls(port):
    c = KVClient("127.0.0.1", port, transport="tcp", enable_tls=True, tls_ca=ca, tls_cert=cert,
                 tls_key=key)
    c.init()
    return c
a, b = tls(int(sys.argv[1])), tls(int(sys.argv[2]))
a.set("e2e-tls", b"over-tls")
assert b.get(["e2e-tls"]) == [b"over-tls"], b.get(["e2e-tls"])
plain = KVClient("127.0.0.1", int(sys.argv[1]), transport="tcp", enable_tls=False)
try:
    plain.init()
    print("a plain client was let in")
except RuntimeError as e:
    assert "TLS" in str(e), e
    print("tls program ok")
"""


def test_security_flags_pass_through(tmp_path, short_dir, procs):
    """--cluster_secret_file and the TLS flags go through dscli start to the
    worker, after -w, after -f FILE and as the file's entries; dscli's own
    readiness check speaks TLS to such a worker, and so do dscli status and
    stop when they find it over TCP."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    from test_tls import _certs

    certs = _certs(tmp_path)
    secret = tmp_path / "cluster_secret"
    secret.write_text("e2e-cluster-secret\n")
    secret.chmod(0o600)
    etcd = _start_etcd(tmp_path, procs)
    security = ["--cluster_secret_file", secret, "--enable_tls", "--tls_verify_client",
                "--tls_cert", certs["worker.pem"], "--tls_key", certs["worker.key"],
                "--tls_ca", certs["ca.pem"]]
    workers = []
    # One after -w, as Yuanrong's dscli passes worker flags.
    port = free_port()
    p = _dscli("start", "-t", 60, "-w", "--worker_address", "127.0.0.1:%d" % port,
               "--etcd_address", etcd, "--shared_memory_size_mb", 32,
               "--log_dir", short_dir / "logs", *security)
    if p.returncode == 0:
        procs.append(_started_pid(p.stdout, "127.0.0.1:%d" % port))
    assert p.returncode == 0, p.stderr
    workers.append((port, short_dir / "logs" / ("worker-127.0.0.1-%d.log" % port), None))
    # One from a Yuanrong-format file holding the TLS entries, the secret
    # after -f FILE.
    port = free_port()
    home = short_dir / "w1"
    home.mkdir()
    cfg = home / "worker_config.json"
    _set_config(OUR_CONFIG, cfg, worker_address="127.0.0.1:%d" % port, etcd_address=etcd,
                enable_tls="true", tls_verify_client="true", tls_cert=certs["worker.pem"],
                tls_key=certs["worker.key"], tls_ca=certs["ca.pem"])
    p = _dscli("start", "-t", 60, "-d", home, "-f", cfg, "--cluster_secret_file", secret)
    if p.returncode == 0:
        procs.append(_started_pid(p.stdout, "127.0.0.1:%d" % port))
    assert p.returncode == 0, p.stderr
    workers.append((port, home / "datasystem" / "logs" / ("worker-127.0.0.1-%d.log" % port), cfg))

    for port, log, _ in workers:
        text = _read(log)
        assert "TLS on 127.0.0.1:%d" % port in text, text[-2000:]
        assert "no --cluster_secret_file" not in text, text[-2000:]
    # A TLS client writes on one and reads on the other: the peers share
    # the secret and speak TLS to each other; a plain client is refused.
    p = _py(PY_TLS_PROGRAM, workers[0][0], workers[1][0], certs["ca.pem"], certs["client.pem"],
            certs["client.key"])
    assert "tls program ok" in p.stdout, p.stdout + p.stderr
    # query cluster / route check the members with a TLS handshake when
    # told: healthy with the deployment's CA (and a client certificate, which
    # --tls_verify_client asks for), unhealthy when their certificates do
    # not chain to --tls_ca (here a leaf certificate, no CA at all).
    tls_args = ["--enable_tls", "--tls_ca", certs["ca.pem"], "--tls_cert", certs["client.pem"],
                "--tls_key", certs["client.key"]]
    p = _dscli("query", "cluster", "--etcd_address", etcd, *tls_args)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert sorted(n["worker_address"] for n in doc["nodes"]) == sorted(
        "127.0.0.1:%d" % w[0] for w in workers)
    assert all(n["health"] == "HEALTHY" for n in doc["nodes"]), doc
    p = _dscli("query", "route", "--etcd_address", etcd, "--keys", "k1", *tls_args)
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(r["health"] == "HEALTHY" for r in json.loads(p.stdout)["routes"])
    p = _dscli("query", "cluster", "--etcd_address", etcd, "--enable_tls", "--tls_ca",
               certs["client.pem"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(n["health"] == "UNHEALTHY" for n in json.loads(p.stdout)["nodes"])

    # The first: over the Unix socket where dscli start put it. The second's
    # socket is not where dscli looks without -d, so dscli finds it over TCP:
    # with TLS when told (flags, or the file's entries), else refused.
    p = _dscli("stop", "-w", "127.0.0.1:%d" % workers[0][0], "-t", 60)
    assert p.returncode == 0, p.stderr
    assert not _alive(procs[1])
    addr1 = "127.0.0.1:%d" % workers[1][0]
    p = _dscli("stop", "-w", addr1, "-t", 60)
    assert p.returncode == 1
    assert "--enable_tls" in p.stderr, p.stderr
    assert _alive(procs[2])
    p = _dscli("status", "--worker_address", addr1, "--enable_tls", "--tls_ca", certs["ca.pem"],
               "--tls_cert", certs["client.pem"], "--tls_key", certs["client.key"])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["dscli_transport"]["used"] == "unix"
    p = _dscli("stop", "-f", workers[1][2], "-t", 60)
    assert p.returncode == 0, p.stderr
    assert ("[INFO] [  OK  ] Stop worker service @ 127.0.0.1:%d normally, PID: %d\n"
            % (workers[1][0], procs[2])) in p.stdout
    assert not _alive(procs[2])
