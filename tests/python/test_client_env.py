"""The client environment variables of Yuanrong's client_env_guide that the
library reads: the connection fallbacks (DATASYSTEM_HOST, _PORT, _TOKEN,
_CONNECT_TIME_MS) in the C library itself, so C and C++ callers get them,
and the logging ones (DATASYSTEM_CLIENT_LOG_DIR, _CLIENT_LOG_WITHOUT_PID,
_LOG_V, _MIN_LOG_LEVEL, _LOG_TO_STDERR, _ALSO_LOG_TO_STDERR). Each case runs
in a child process: the logging variables are read once per process."""

import os
import subprocess
import sys

from conftest import PYTHON_DIR

# Connects through the C API with no host, port or timeout in the options,
# then prints the status code and the library's message.
CHILD = r"""
import ctypes, sys
from yr.datasystem import _native as n
lib = n.load()
o = n.ClientOptions()
lib.ds_client_options_init(o)
o.connect_timeout_ms = 0
o.transport = n.TRANSPORT_AUTO
out = n.c_client_p()
rc = lib.ds_client_connect(o, out)
print(rc, n.last_error())
if rc == 0:
    print(lib.ds_client_health_check(out.value))
    lib.ds_client_close(out.value)
"""


def _run(worker, tmp_path, **env_over):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("DATASYSTEM_"):
            del env[k]
    env["PYTHONPATH"] = str(PYTHON_DIR)
    if worker.sock_dir:
        env["DS_UNIX_SOCKET_DIR"] = worker.sock_dir
    env.update(env_over)
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=60, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    return p.stdout.split("\n"), p.stderr


def test_host_and_port_come_from_the_environment(worker, tmp_path):
    out, _ = _run(worker, tmp_path, DATASYSTEM_HOST=worker.host,
                  DATASYSTEM_PORT=str(worker.port), DATASYSTEM_CONNECT_TIME_MS="5000")
    assert out[0].startswith("0 ") and out[1] == "0"


def test_unset_or_bad_variables_are_named(worker, tmp_path):
    out, _ = _run(worker, tmp_path)
    assert out[0].startswith("2 ") and "DATASYSTEM_HOST" in out[0]
    out, _ = _run(worker, tmp_path, DATASYSTEM_HOST=worker.host, DATASYSTEM_PORT="port")
    assert out[0] == "2 DATASYSTEM_PORT='port' is not a port"
    out, _ = _run(worker, tmp_path, DATASYSTEM_HOST=worker.host,
                  DATASYSTEM_PORT=str(worker.port), DATASYSTEM_CONNECT_TIME_MS="-1")
    assert out[0].startswith("2 DATASYSTEM_CONNECT_TIME_MS='-1' is not a timeout")


def test_log_lines_go_to_the_client_log_dir(worker, tmp_path):
    addr = dict(DATASYSTEM_HOST=worker.host, DATASYSTEM_PORT=str(worker.port))
    logs = tmp_path / "logs"
    # LOG_V adds the debug lines, among them the transport chosen.
    out, err = _run(worker, tmp_path, DATASYSTEM_CLIENT_LOG_DIR=str(logs), DATASYSTEM_LOG_V="1",
                    **addr)
    assert out[0].startswith("0 ")
    text = (logs / "ds_client.log").read_text()
    assert "client: using " in text and "client: using " not in err

    # With the pid in the name; and copied to stderr.
    pid_logs = tmp_path / "pid_logs"
    out, err = _run(worker, tmp_path, DATASYSTEM_CLIENT_LOG_DIR=str(pid_logs),
                    DATASYSTEM_LOG_V="1", DATASYSTEM_CLIENT_LOG_WITHOUT_PID="false",
                    DATASYSTEM_ALSO_LOG_TO_STDERR="true", **addr)
    files = os.listdir(pid_logs)
    assert len(files) == 1 and files[0].startswith("ds_client_") and files[0] != "ds_client.log"
    assert "client: using " in (pid_logs / files[0]).read_text() and "client: using " in err

    # MIN_LOG_LEVEL 2 (ERROR) drops the debug and info lines.
    quiet = tmp_path / "quiet"
    _run(worker, tmp_path, DATASYSTEM_CLIENT_LOG_DIR=str(quiet), DATASYSTEM_LOG_V="1",
         DATASYSTEM_MIN_LOG_LEVEL="2", **addr)
    assert (quiet / "ds_client.log").read_text() == ""

    # LOG_TO_STDERR keeps the lines on stderr; no file is made.
    kept = tmp_path / "kept"
    _, err = _run(worker, tmp_path, DATASYSTEM_CLIENT_LOG_DIR=str(kept), DATASYSTEM_LOG_V="1",
                  DATASYSTEM_LOG_TO_STDERR="true", **addr)
    assert not kept.exists() and "client: using " in err


def test_unreadable_log_variables_are_reported_not_fatal(worker, tmp_path):
    out, err = _run(worker, tmp_path, DATASYSTEM_HOST=worker.host,
                    DATASYSTEM_PORT=str(worker.port), DATASYSTEM_MIN_LOG_LEVEL="loud")
    assert out[0].startswith("0 ")
    assert "DATASYSTEM_MIN_LOG_LEVEL='loud' is not a number in 0..3; ignored" in err
