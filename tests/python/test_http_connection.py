"""HTTP/1.1 keep-alive: an error response must not silently break the client's connection."""

import http.client
import json

import pytest

GOOD = json.dumps({"inputs": [{"name": "INPUT", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}).encode()
# Padding (JSON whitespace) large enough that the server cannot have buffered the whole body by the
# time it answers an error it detects before reading the body.
PAD = b" " * 1_000_000


def two_requests(server, method, path, body, headers=None):
    """Sends a request, then a good inference on the same connection. Returns
    (first status, first Connection header, second status or the exception name)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        r.read()
        first = (r.status, (r.getheader("connection") or "").lower())
        try:
            conn.request("POST", "/v2/models/vlen_scale/infer", body=GOOD)
            r2 = conn.getresponse()
            data = json.loads(r2.read())
            second = r2.status if data["outputs"][0]["data"] == [2.0, 4.0] else f"wrong answer {data}"
        except (http.client.HTTPException, OSError) as e:
            second = type(e).__name__
        return first[0], first[1], second
    finally:
        conn.close()


@pytest.mark.parametrize("method, path, body, headers, status", [
    ("POST", "/v2/models/vlen_scale/infer", GOOD, {}, 200),
    ("POST", "/v2/models/no_such_model/infer", GOOD + PAD, {}, 404),
    ("POST", "/v2/models/vlen_scale/infer", b"{" + PAD, {}, 400),
    ("POST", "/v2/models/vlen_scale/infer", GOOD + PAD, {"Content-Encoding": "br"}, 400),
    ("GET", "/v2/health/ready", None, {}, 200),
], ids=["ok", "unknown-model", "malformed", "bad-encoding", "get"])
def test_connection_reusable_after_response(examples_server, method, path, body, headers, status):
    st, conn_hdr, second = two_requests(examples_server, method, path, body, headers)
    assert st == status
    assert second == 200, (second, conn_hdr)


EARLY = ("Errors detected before the request body is read (version in the URL, Inference-Header-"
             "Content-Length header, unknown route, wrong method) are answered and then the keep-alive "
             "connection is closed without a 'Connection: close' header, so the client's next request on "
             "that connection fails (BrokenPipe / RemoteDisconnected). Read/drain the body first, or send "
             "Connection: close")


@pytest.mark.parametrize("method, path, headers, status", [
    ("POST", "/v2/models/vlen_scale/versions/abc/infer", {}, 400),
    ("POST", "/v2/models/vlen_scale/infer", {"Inference-Header-Content-Length": "x"}, 400),
    ("POST", "/v2/no/such/route", {}, 404),
    ("POST", "/v2/health/live", {}, 405),
], ids=["bad-version", "bad-header-length", "unknown-route", "wrong-method"])
def test_connection_reusable_after_early_error(examples_server, method, path, headers, status):
    st, conn_hdr, second = two_requests(examples_server, method, path, GOOD + PAD, headers)
    assert st == status
    assert conn_hdr == "close" or second == 200, (conn_hdr, second)
