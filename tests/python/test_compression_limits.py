"""Compressed request bodies (Content-Encoding gzip / deflate) and --http-max-input-size."""

import gzip
import http.client
import json
import zlib

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import copy_models


def simple_inputs(batch=1):
    x = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    y = np.full((batch, 16), 5, dtype=np.int32)
    a = httpclient.InferInput("INPUT0", [batch, 16], "INT32")
    a.set_data_from_numpy(x)
    b = httpclient.InferInput("INPUT1", [batch, 16], "INT32")
    b.set_data_from_numpy(y)
    return [a, b], x, y


JSON_BODY = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
                        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [5] * 16}]}


@pytest.mark.parametrize("algo", ["gzip", "deflate"])
def test_client_request_compression(client, algo):
    inputs, x, y = simple_inputs(batch=3)
    res = client.infer("simple", inputs, request_compression_algorithm=algo)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x + y)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), x - y)
    # Asking for a compressed response is allowed too (the server may answer uncompressed).
    res = client.infer("simple", inputs, request_compression_algorithm=algo, response_compression_algorithm=algo)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x + y)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), x - y)


@pytest.mark.parametrize("encoding, compress", [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("GZIP", gzip.compress), ("deflate", zlib.compress),
    ("identity", lambda b: b),
])
def test_raw_compressed_json_body(examples_server, encoding, compress):
    body = compress(json.dumps(JSON_BODY).encode())
    r = examples_server.post("/v2/models/simple/infer", body,
                             headers={"Content-Encoding": encoding, "Content-Type": "application/json"})
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == [x + 5 for x in range(16)]


def test_raw_gzip_with_binary_tensor_data(examples_server):
    """Inference-Header-Content-Length refers to the decompressed body."""
    head = json.dumps({"inputs": [
        {"name": "INPUT", "shape": [1, 3], "datatype": "FP32", "parameters": {"binary_data_size": 12}}]}).encode()
    raw = head + np.array([1.0, 2.0, -0.5], dtype="<f4").tobytes()
    r = examples_server.post("/v2/models/vlen_scale/infer", gzip.compress(raw),
                             headers={"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(head))})
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == [2.0, 4.0, -1.0]


@pytest.fixture(scope="module")
def small_limit_server(tmp_path_factory):
    from helpers import TritonServer

    repo = copy_models(tmp_path_factory.mktemp("limit") / "repo", "simple", "vlen_scale")
    s = TritonServer(["--model-repository", repo, "--http-max-input-size", "4096"], name="limit-4096")
    s.start()
    yield s
    s.stop()


def vlen_body(n_floats):
    return {"inputs": [{"name": "INPUT", "shape": [1, n_floats], "datatype": "FP32", "data": [1.5] * n_floats}]}


def test_body_under_limit_is_accepted(small_limit_server):
    body = json.dumps(vlen_body(100)).encode()
    assert len(body) < 4096
    r = small_limit_server.post("/v2/models/vlen_scale/infer", body)
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == [3.0] * 100


def test_body_over_limit_413(small_limit_server):
    body = json.dumps(vlen_body(2000)).encode()
    assert len(body) > 4096
    r = small_limit_server.post("/v2/models/vlen_scale/infer", body)
    assert r.status == 413, r
    assert "error" in r.json() and "4096" in r.json()["error"]
    assert small_limit_server.is_live()


def test_binary_body_over_limit_413(small_limit_server):
    x = np.ones((1, 2000), dtype=np.float32)
    inp = httpclient.InferInput("INPUT", [1, 2000], "FP32")
    inp.set_data_from_numpy(x)
    c = small_limit_server.client()
    try:
        with pytest.raises(InferenceServerException) as e:
            c.infer("vlen_scale", [inp])
        assert e.value.status() == "413", e.value
        assert "4096" in e.value.message()
        # The same client (connection pool) still works afterwards.
        small = httpclient.InferInput("INPUT", [1, 2], "FP32")
        small.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
        assert c.infer("vlen_scale", [small]).as_numpy("OUTPUT").tolist() == [[2.0, 4.0]]
    finally:
        c.close()
    assert small_limit_server.is_live()


def test_decompressed_size_over_limit_413(small_limit_server):
    raw = json.dumps(vlen_body(5000)).encode()
    body = gzip.compress(raw)
    assert len(body) < 4096 < len(raw)
    r = small_limit_server.post("/v2/models/vlen_scale/infer", body, headers={"Content-Encoding": "gzip"})
    assert r.status == 413, r
    assert "error" in r.json()
    r = small_limit_server.post("/v2/models/vlen_scale/infer", zlib.compress(raw), headers={"Content-Encoding": "deflate"})
    assert r.status == 413, r
    assert small_limit_server.is_live()


def test_gzip_bomb_is_refused(small_limit_server):
    raw = b"{" + b" " * (16 * 1024 * 1024) + b"}"
    body = gzip.compress(raw, compresslevel=9)
    assert len(body) < 4096 * 64
    r = small_limit_server.post("/v2/models/vlen_scale/infer", body, headers={"Content-Encoding": "gzip"})
    assert r.status == 413, r
    assert small_limit_server.is_live()


def _chunked_request(server, payload, chunk=1000):
    """Sends a chunked POST in one write (it fits in the socket buffers, so an early answer cannot
    break the send) and parses the response."""
    import socket

    req = (b"POST /v2/models/vlen_scale/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    for i in range(0, len(payload), chunk):
        part = payload[i:i + chunk]
        req += b"%x\r\n" % len(part) + part + b"\r\n"
    req += b"0\r\n\r\n"
    sock = socket.create_connection((server.host, server.port), timeout=30)
    try:
        sock.sendall(req)
        r = http.client.HTTPResponse(sock)
        r.begin()
        return r.status, r.read()
    finally:
        sock.close()


def test_chunked_body_over_limit_413(small_limit_server):
    """No Content-Length: the limit must still hold while the body streams in."""
    payload = json.dumps(vlen_body(2000)).encode()
    assert len(payload) > 4096
    status, data = _chunked_request(small_limit_server, payload)
    assert status == 413, data
    assert "error" in json.loads(data)
    assert small_limit_server.is_live()


def test_chunked_body_under_limit_ok(small_limit_server):
    status, data = _chunked_request(small_limit_server, json.dumps(vlen_body(10)).encode(), chunk=20)
    assert status == 200, data
    assert json.loads(data)["outputs"][0]["data"] == [3.0] * 10


def test_limit_applies_to_repository_endpoints(small_limit_server):
    r = small_limit_server.post("/v2/repository/index", b"{" + b" " * 5000 + b"}")
    assert r.status == 413, r
    assert "error" in r.json()
    assert small_limit_server.get("/v2/health/ready").status == 200
