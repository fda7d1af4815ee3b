"""TLS from Python: KVClient's enable_tls / tls_ca / tls_cert / tls_key
keywords against a worker started with --enable_tls (certificates made here
with the openssl CLI), values byte-exact; a plain client is refused with the
worker's reason; bad keyword types are TypeErrors."""
import shutil
import subprocess

import pytest

from yr.datasystem.kv_client import KVClient

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def _certs(d):
    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=py-ca")
    for name in ("worker", "client"):
        run("req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=py-" + name)
        run("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".pem", "-days", "1")
    return {n: str(d / n) for n in ("ca.pem", "worker.pem", "worker.key", "client.pem", "client.key")}


def test_tls_kwargs(fresh_worker, tmp_path):
    c = _certs(tmp_path)
    w = fresh_worker(extra_args=(
        "--enable_tls", "--tls_verify_client", "--tls_cert", c["worker.pem"],
        "--tls_key", c["worker.key"], "--tls_ca", c["ca.pem"]))
    cli = KVClient(w.host, w.port, transport="tcp", enable_tls=True, tls_ca=c["ca.pem"],
                   tls_cert=c["client.pem"], tls_key=c["client.key"])
    cli.init()
    value = bytes(range(256)) * 8192  # 2 MiB
    cli.set("py-tls", value)
    assert cli.get(["py-tls"])[0] == value
    cli.close()

    plain = KVClient(w.host, w.port, transport="tcp", enable_tls=False)
    with pytest.raises(RuntimeError, match="TLS"):
        plain.init()

    with pytest.raises(TypeError):
        KVClient(w.host, w.port, enable_tls="yes")
    with pytest.raises(TypeError):
        KVClient(w.host, w.port, tls_ca=3)
