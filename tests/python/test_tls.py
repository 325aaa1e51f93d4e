"""TLS (issue 11): gRPC with tritonserver's --grpc-use-ssl / --grpc-use-ssl-mutual flags and HTTPS with
the same flags for HTTP (which tritonserver lacks), driven by tritonclient with certificates made per
test (trustme): plain TLS works; with mutual TLS a client without a certificate signed by the root is
refused and one with it is served."""

import socket
import time

import gevent.ssl
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import trustme
from tritonclient.utils import InferenceServerException

from helpers import copy_models, run_cli, simple_inputs


@pytest.fixture
def certs(tmp_path):
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    client = ca.issue_cert("client.local")
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "server.pem", "key": tmp_path / "server.key",
             "client_cert": tmp_path / "client.pem", "client_key": tmp_path / "client.key"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    with open(files["cert"], "wb") as f:
        for blob in server.cert_chain_pems:
            f.write(blob.bytes())
    client.private_key_pem.write_to_path(str(files["client_key"]))
    with open(files["client_cert"], "wb") as f:
        for blob in client.cert_chain_pems:
            f.write(blob.bytes())
    return {k: str(v) for k, v in files.items()}


def tls_flags(proto, certs, mutual):
    flags = [f"--{proto}-use-ssl", f"--{proto}-server-cert={certs['cert']}", f"--{proto}-server-key={certs['key']}"]
    if mutual:
        flags += [f"--{proto}-use-ssl-mutual", f"--{proto}-root-cert={certs['ca']}"]
    return flags


def https_client(server, certs, with_client_cert):
    def factory():
        ctx = gevent.ssl.create_default_context(cafile=certs["ca"])
        if with_client_cert:
            ctx.load_cert_chain(certs["client_cert"], certs["client_key"])
        return ctx

    return httpclient.InferenceServerClient(f"localhost:{server.port}", ssl=True, ssl_context_factory=factory,
                                            connection_timeout=5, network_timeout=5)


def grpcs_client(server, certs, with_client_cert):
    kw = {"root_certificates": certs["ca"]}
    if with_client_cert:
        kw.update(private_key=certs["client_key"], certificate_chain=certs["client_cert"])
    return grpcclient.InferenceServerClient(f"localhost:{server.grpc_port}", ssl=True, **kw)


def start_tls(start_server, repo, certs, mutual):
    copy_models(repo, "simple")
    return start_server("--model-repository", repo, *tls_flags("http", certs, mutual),
                        *tls_flags("grpc", certs, mutual), wait=None)


def wait_ready(client):
    for _ in range(150):
        try:
            if client.is_server_ready():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError("not ready over HTTPS within 15 s")


def test_tls_on_both_protocols(start_server, repo, certs):
    s = start_tls(start_server, repo, certs, mutual=False)
    h = https_client(s, certs, with_client_cert=False)
    wait_ready(h)
    assert h.infer("simple", simple_inputs(httpclient, 2)).as_numpy("OUTPUT0")[0][0] == 4
    h.close()
    g = grpcs_client(s, certs, with_client_cert=False)
    assert g.infer("simple", simple_inputs(grpcclient, 2), client_timeout=10).as_numpy("OUTPUT0")[0][0] == 4
    g.close()
    # Plain HTTP on the TLS port gets no answer; the server keeps serving TLS.
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        data = sock.recv(100)
    except OSError:
        data = b""
    assert not data.startswith(b"HTTP/1.1 200")
    sock.close()


def test_mutual_tls_refuses_clients_without_a_certificate(start_server, repo, certs):
    s = start_tls(start_server, repo, certs, mutual=True)
    good = https_client(s, certs, with_client_cert=True)
    wait_ready(good)
    assert good.infer("simple", simple_inputs(httpclient, 2)).as_numpy("OUTPUT0")[0][0] == 4
    good.close()
    bad = https_client(s, certs, with_client_cert=False)
    with pytest.raises(Exception):
        bad.is_server_live()
    bad.close()
    g = grpcs_client(s, certs, with_client_cert=True)
    assert g.is_server_live(client_timeout=10)
    g.close()
    g = grpcs_client(s, certs, with_client_cert=False)
    with pytest.raises(InferenceServerException) as e:
        g.is_server_live(client_timeout=5)
    assert e.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED"), e.value
    g.close()


def test_missing_tls_files_stop_the_start(tmp_path, certs):
    r = run_cli("--model-repository", str(tmp_path), "--http-use-ssl", timeout=10)
    assert r.returncode == 1 and "--http-use-ssl needs --http-server-cert" in r.stderr, r.stderr
    r = run_cli("--model-repository", str(tmp_path), "--grpc-use-ssl", f"--grpc-server-cert={certs['cert']}",
                f"--grpc-server-key={tmp_path / 'nope.key'}", timeout=10)
    assert r.returncode == 1 and "cannot read the server key" in r.stderr, r.stderr
