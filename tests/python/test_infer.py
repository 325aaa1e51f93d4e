"""Inference over HTTP: JSON and binary tensor data, BYTES, classification, ids, output selection,
versions, the auto-completed model and raw binary bodies."""

import json
import struct

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def simple_inputs(batch=1, binary=True):
    in0 = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    in1 = np.ones((batch, 16), dtype=np.int32)
    i0 = httpclient.InferInput("INPUT0", [batch, 16], "INT32")
    i0.set_data_from_numpy(in0, binary_data=binary)
    i1 = httpclient.InferInput("INPUT1", [batch, 16], "INT32")
    i1.set_data_from_numpy(in1, binary_data=binary)
    return [i0, i1], in0, in1


def post_infer(server, model, body, headers=None, version=None):
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    return server.post(path, body, headers=h)


def split_binary(resp):
    """Splits a binary-extension response into (json header, binary tail)."""
    n = int(resp.headers["inference-header-content-length"])
    return json.loads(resp.body[:n]), resp.body[n:]


# ---- simple (INT32) -------------------------------------------------------------------------


@pytest.mark.parametrize("binary_in", [True, False], ids=["bin_in", "json_in"])
@pytest.mark.parametrize("binary_out", [True, False], ids=["bin_out", "json_out"])
def test_simple_binary_and_json(client, binary_in, binary_out):
    inputs, in0, in1 = simple_inputs(binary=binary_in)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out)]
    res = client.infer("simple", inputs, outputs=outputs)
    o0, o1 = res.as_numpy("OUTPUT0"), res.as_numpy("OUTPUT1")
    assert o0.dtype == np.int32 and o0.shape == (1, 16)
    np.testing.assert_array_equal(o0, in0 + in1)
    np.testing.assert_array_equal(o1, in0 - in1)
    assert o0.tolist() == [list(range(1, 17))]
    assert o1.tolist() == [list(range(-1, 15))]
    resp = res.get_response()
    assert resp["model_name"] == "simple"
    assert resp["model_version"] == "1"
    for out in resp["outputs"]:
        assert out["datatype"] == "INT32" and out["shape"] == [1, 16]
        if binary_out:
            assert out["parameters"]["binary_data_size"] == 64
            assert "data" not in out
        else:
            assert "data" in out


def test_default_outputs_are_all_returned(client):
    inputs, in0, in1 = simple_inputs()
    res = client.infer("simple", inputs)  # no outputs: client asks binary_data_output=true
    names = sorted(o["name"] for o in res.get_response()["outputs"])
    assert names == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), in0 + in1)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), in0 - in1)


def test_requested_subset_of_outputs(client):
    inputs, in0, in1 = simple_inputs()
    res = client.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert [o["name"] for o in res.get_response()["outputs"]] == ["OUTPUT1"]
    assert res.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), in0 - in1)


def test_batched_simple(client):
    inputs, in0, in1 = simple_inputs(batch=8)
    res = client.infer("simple", inputs)
    assert res.as_numpy("OUTPUT0").shape == (8, 16)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), in0 + in1)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), in0 - in1)


def test_int32_overflow_wraps(client):
    big = np.full((1, 16), 2**31 - 1, dtype=np.int32)
    one = np.ones((1, 16), dtype=np.int32)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(big)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(one)
    res = client.infer("simple", [i0, i1])
    assert res.as_numpy("OUTPUT0").tolist() == [[-(2**31)] * 16]


def test_request_id_echoed(client):
    inputs, _, _ = simple_inputs()
    res = client.infer("simple", inputs, request_id="req-42/ü")
    assert res.get_response()["id"] == "req-42/ü"


def test_request_parameters_accepted(client):
    inputs, in0, in1 = simple_inputs()
    for kw in ({"priority": 1}, {"timeout": 5_000_000}, {"parameters": {"custom": "x", "n": 3, "flag": True}},
               {"headers": {"X-Custom": "1"}}, {"query_params": {"a": "b"}}):
        res = client.infer("simple", inputs, **kw)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), in0 + in1)


def test_no_id_when_not_sent(examples_server):
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
                       {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}
    r = post_infer(examples_server, "simple", body)
    assert r.status == 200
    assert "id" not in r.json() or r.json()["id"] == ""


def test_raw_json_flat_and_nested(examples_server):
    flat = {"id": "flat", "inputs": [
        {"name": "INPUT0", "shape": [2, 16], "datatype": "INT32", "data": list(range(32))},
        {"name": "INPUT1", "shape": [2, 16], "datatype": "INT32", "data": [2] * 32}]}
    nested = {"id": "nested", "inputs": [
        {"name": "INPUT0", "shape": [2, 16], "datatype": "INT32", "data": [list(range(16)), list(range(16, 32))]},
        {"name": "INPUT1", "shape": [2, 16], "datatype": "INT32", "data": [[2] * 16, [2] * 16]}]}
    for body in (flat, nested):
        r = post_infer(examples_server, "simple", body)
        assert r.status == 200, r
        assert r.headers["content-type"].startswith("application/json")
        assert "inference-header-content-length" not in r.headers
        j = r.json()
        assert j["id"] == body["id"]
        assert j["model_name"] == "simple" and j["model_version"] == "1"
        outs = {o["name"]: o for o in j["outputs"]}
        assert outs["OUTPUT0"] == {"name": "OUTPUT0", "datatype": "INT32", "shape": [2, 16],
                                   "data": [x + 2 for x in range(32)]}
        assert outs["OUTPUT1"]["data"] == [x - 2 for x in range(32)]
        assert outs["OUTPUT1"]["shape"] == [2, 16]


def test_raw_binary_data_output_parameter(examples_server):
    body = {"parameters": {"binary_data_output": True}, "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}
    r = post_infer(examples_server, "simple", body)
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/octet-stream"
    head, tail = split_binary(r)
    assert len(r.body) == int(r.headers["content-length"])
    outs = head["outputs"]
    assert [o["name"] for o in outs] == ["OUTPUT0", "OUTPUT1"]
    assert all(o["parameters"]["binary_data_size"] == 64 and "data" not in o for o in outs)
    assert len(tail) == 128
    assert np.frombuffer(tail[:64], "<i4").tolist() == list(range(1, 17))
    assert np.frombuffer(tail[64:], "<i4").tolist() == list(range(-1, 15))


def test_raw_binary_output_overrides_default(examples_server):
    # binary_data_output=true, but OUTPUT1 asks for JSON explicitly.
    body = {"parameters": {"binary_data_output": True}, "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": {"binary_data": False}}]}
    r = post_infer(examples_server, "simple", body)
    assert r.status == 200, r
    head, tail = split_binary(r)
    outs = {o["name"]: o for o in head["outputs"]}
    assert outs["OUTPUT0"]["parameters"]["binary_data_size"] == 64
    assert outs["OUTPUT1"]["data"] == list(range(-1, 15))
    assert np.frombuffer(tail, "<i4").tolist() == list(range(1, 17))


def test_header_length_equal_to_json_body(examples_server):
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()
    r = examples_server.post("/v2/models/simple/infer", body, headers={"Inference-Header-Content-Length": str(len(body))})
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == list(range(1, 17))


def test_raw_binary_input_data(examples_server):
    in0 = np.arange(16, dtype="<i4").tobytes()
    in1 = np.full(16, 3, dtype="<i4").tobytes()
    head = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]}).encode()
    r = examples_server.post("/v2/models/simple/infer", head + in0 + in1,
                             headers={"Inference-Header-Content-Length": str(len(head)),
                                      "Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    j = r.json()
    assert [o["name"] for o in j["outputs"]] == ["OUTPUT0"]
    assert j["outputs"][0]["data"] == [x + 3 for x in range(16)]


# ---- vlen_scale (FP32, variable length) ---------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
def test_vlen_scale(client, binary):
    x = np.array([[1.0, -2.5, 3.25]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    res = client.infer("vlen_scale", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)])
    out = res.as_numpy("OUTPUT")
    assert out.dtype == np.float32 and out.shape == (1, 3)
    assert out.tolist() == [[2.0, -5.0, 6.5]]


def test_vlen_scale_batch_and_lengths(client):
    for shape in [(4, 1), (2, 7), (1, 100)]:
        x = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 3.5)
        inp = httpclient.InferInput("INPUT", list(shape), "FP32")
        inp.set_data_from_numpy(x)
        res = client.infer("vlen_scale", [inp])
        np.testing.assert_array_equal(res.as_numpy("OUTPUT"), x * 2)


@pytest.mark.parametrize("pad", [0, 1, 3, 7])
def test_large_binary_inputs_at_any_offset(examples_server, pad):
    """Bodies of 64 KiB and more are read into a buffer where the binary part is aligned (so ONNX
    Runtime takes the tensor where it lies): whatever the JSON header's length the answer is right,
    and a body shorter than its binary_data_size is a 400."""
    import json as _json

    x = (np.arange(100_000, dtype=np.float32) - 50_000.5).reshape(1, 100_000)
    header = _json.dumps({"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 100_000],
                                      "parameters": {"binary_data_size": x.nbytes}}],
                          "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": False}}]}) + " " * pad
    body = header.encode() + x.tobytes()
    r = examples_server.post("/v2/models/vlen_scale/infer", body,
                             headers={"Inference-Header-Content-Length": str(len(header))})
    assert r.status == 200, r
    np.testing.assert_array_equal(np.array(r.json()["outputs"][0]["data"], dtype=np.float32), x.ravel() * 2)
    r = examples_server.post("/v2/models/vlen_scale/infer", body[:-4],
                             headers={"Inference-Header-Content-Length": str(len(header))})
    assert r.status == 400, r


def test_large_binary_bodies_in_a_row_each_get_their_own_answer(examples_server):
    """The aligned buffers are reused from request to request (src/memory/recycled.rs): consecutive
    large bodies, a smaller one after a larger one, each answer with their own data only."""
    import json as _json

    for n, base in ((120_000, 3.0), (70_000, -1.5), (100_000, 0.25)):
        x = (np.arange(n, dtype=np.float32) * base).reshape(1, n)
        header = _json.dumps({"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, n],
                                          "parameters": {"binary_data_size": x.nbytes}}],
                              "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": False}}]})
        r = examples_server.post("/v2/models/vlen_scale/infer", header.encode() + x.tobytes(),
                                 headers={"Inference-Header-Content-Length": str(len(header))})
        assert r.status == 200, r
        out = np.array(r.json()["outputs"][0]["data"], dtype=np.float32)
        np.testing.assert_array_equal(out, x.ravel() * 2)


def test_raw_binary_body_single_input(examples_server):
    body = np.array([1.0, -2.5, 3.25], dtype="<f4").tobytes()
    r = examples_server.post("/v2/models/vlen_scale/infer", body,
                             headers={"Inference-Header-Content-Length": "0",
                                      "Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    j = r.json()
    assert j["model_name"] == "vlen_scale"
    assert j["outputs"] == [{"name": "OUTPUT", "datatype": "FP32", "shape": [1, 3], "data": [2.0, -5.0, 6.5]}]


def test_raw_binary_body_fixed_shape_and_gzip(examples_server):
    body = np.array([1, 2, 3, 4], dtype="<f4").tobytes()
    r = examples_server.post("/v2/models/classifier/infer", body, headers={"Inference-Header-Content-Length": "0"})
    assert r.status == 200, r
    assert r.json()["outputs"] == [{"name": "OUTPUT", "datatype": "FP32", "shape": [1, 5],
                                    "data": [15.0, 17.75, 17.5, 19.75, 30.0]}]
    import gzip

    r = examples_server.post("/v2/models/vlen_scale/infer", gzip.compress(np.array([1, 2], dtype="<f4").tobytes()),
                             headers={"Inference-Header-Content-Length": "0", "Content-Encoding": "gzip"})
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == [2.0, 4.0]
    assert r.json()["outputs"][0]["shape"] == [1, 2]


def test_raw_binary_body_bytes(examples_server):
    body = struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0) + struct.pack("<I", 3) + "é!".encode()
    r = examples_server.post("/v2/models/bytes_identity/infer", body, headers={"Inference-Header-Content-Length": "0"})
    assert r.status == 200, r
    assert r.json()["outputs"] == [{"name": "OUTPUT", "datatype": "BYTES", "shape": [1, 3], "data": ["hi", "", "é!"]}]


def test_raw_binary_body_needs_single_input_model(examples_server):
    body = np.zeros(32, dtype="<i4").tobytes()
    r = examples_server.post("/v2/models/simple/infer", body, headers={"Inference-Header-Content-Length": "0"})
    assert r.status == 400
    assert "input" in r.json()["error"]
    assert examples_server.is_live()


# ---- bytes_identity (BYTES) ---------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
def test_bytes_identity(client, binary):
    data = np.array([["hello".encode(), b"", "wörld".encode()]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT", [1, 3], "BYTES")
    inp.set_data_from_numpy(data, binary_data=binary)
    res = client.infer("bytes_identity", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)])
    out = res.as_numpy("OUTPUT")
    assert out.shape == (1, 3)
    got = [v if isinstance(v, bytes) else v.encode() for v in out.ravel()]
    assert got == [b"hello", b"", "wörld".encode()]
    o = res.get_response()["outputs"][0]
    assert o["datatype"] == "BYTES" and o["shape"] == [1, 3]


def test_bytes_identity_binary_payload_exact(client):
    # Multi-byte UTF-8, an empty element and a long element survive a binary round trip untouched.
    vals = ["ℝ∞ – 😀".encode(), b"", b"a" * 1000]
    data = np.array(vals, dtype=np.object_).reshape(3, 1)
    inp = httpclient.InferInput("INPUT", [3, 1], "BYTES")
    inp.set_data_from_numpy(data)
    res = client.infer("bytes_identity", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT")])
    out = res.as_numpy("OUTPUT")
    assert out.shape == (3, 1)
    assert list(out.ravel()) == vals


def test_bytes_identity_nul_bytes_pass_through(examples_server):
    # ONNX Runtime stores each string element with its length, so embedded NULs survive (JSON data).
    body = {"inputs": [{"name": "INPUT", "shape": [1, 2], "datatype": "BYTES", "data": ["a\u0000b", "\u0000"]}]}
    r = post_infer(examples_server, "bytes_identity", body)
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == ["a\u0000b", "\u0000"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_identity_nul_and_non_utf8_bytes_pass_through(examples_server, protocol):
    # The embedded-NUL elements tritonclient's string examples send, and bytes that are not UTF-8: ONNX
    # string tensors hold bytes with their lengths, so every element comes back exactly (as in Triton).
    import tritonclient.grpc as grpcclient

    mod = httpclient if protocol == "http" else grpcclient
    c = examples_server.client() if protocol == "http" else examples_server.grpc_client()
    vals = [b"\x00abc", b"a\x00b\x00", b"\x00", bytes([0xFF, 0xFE, 0x80]), b"", "h\u00e9".encode()]
    inp = mod.InferInput("INPUT", [1, len(vals)], "BYTES")
    inp.set_data_from_numpy(np.array([vals], dtype=np.object_))
    out = c.infer("bytes_identity", [inp]).as_numpy("OUTPUT")
    assert out.tolist() == [vals]


def test_bytes_identity_raw_json(examples_server):
    body = {"inputs": [{"name": "INPUT", "shape": [2, 2], "datatype": "BYTES",
                        "data": [["a", "bc"], ["", "日本"]]}]}
    r = post_infer(examples_server, "bytes_identity", body)
    assert r.status == 200, r
    assert r.json()["outputs"] == [{"name": "OUTPUT", "datatype": "BYTES", "shape": [2, 2],
                                    "data": ["a", "bc", "", "日本"]}]


# ---- classifier (classification extension) -----------------------------------------------

TOP2 = {
    (1, 0, 0, 0): [b"4.000000:0:cat", b"3.000000:4:horse"],
    (0, 1, 0, 0): [b"4.000000:1:dog", b"3.000000:4:horse"],
    (0, 0, 1, 0): [b"4.000000:2:bird", b"3.000000:4:horse"],
    (0, 0, 0, 1): [b"4.000000:3:fish", b"3.000000:4:horse"],
    (1, 1, 1, 1): [b"12.000000:4:horse", b"7.500000:0:cat"],
    (1, 2, 3, 4): [b"30.000000:4:horse", b"19.750000:3:fish"],
}


def classifier_input(rows):
    x = np.array(rows, dtype=np.float32)
    inp = httpclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def test_classifier_scores(client):
    res = client.infer("classifier", [classifier_input([[1, 0, 0, 0], [1, 2, 3, 4]])])
    assert res.as_numpy("OUTPUT").tolist() == [[4.0, 1.0, 0.5, 0.25, 3.0], [15.0, 17.75, 17.5, 19.75, 30.0]]


@pytest.mark.parametrize("binary", [True, False])
def test_classification_top2(client, binary):
    res = client.infer("classifier", [classifier_input([[1, 0, 0, 0]])],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=binary, class_count=2)])
    out = res.as_numpy("OUTPUT")
    assert out.shape == (1, 2)
    got = [v if isinstance(v, bytes) else v.encode() for v in out.ravel()]
    assert got == [b"4.000000:0:cat", b"3.000000:4:horse"]
    o = res.get_response()["outputs"][0]
    assert o["datatype"] == "BYTES" and o["shape"] == [1, 2]


def test_classification_batched(client):
    rows = list(TOP2)[:4]
    res = client.infer("classifier", [classifier_input(rows)],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT", class_count=2)])
    out = res.as_numpy("OUTPUT")
    assert out.shape == (4, 2)
    assert out.tolist() == [TOP2[r] for r in rows]


def test_classification_other_rows_and_top1(client):
    rows = [(1, 1, 1, 1), (1, 2, 3, 4)]
    res = client.infer("classifier", [classifier_input(rows)],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT", class_count=1)])
    assert res.as_numpy("OUTPUT").tolist() == [[TOP2[r][0]] for r in rows]
    res = client.infer("classifier", [classifier_input(rows)],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT", class_count=2)])
    assert res.as_numpy("OUTPUT").tolist() == [TOP2[r] for r in rows]


def test_classification_all_classes(client):
    res = client.infer("classifier", [classifier_input([[0, 1, 0, 0]])],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT", class_count=5)])
    assert res.as_numpy("OUTPUT").tolist() == [[b"4.000000:1:dog", b"3.000000:4:horse", b"2.000000:2:bird",
                                                 b"0.500000:0:cat", b"0.250000:3:fish"]]


def test_classification_count_beyond_classes_is_clamped(client):
    # As in Triton, k is capped at the number of classes.
    res = client.infer("classifier", [classifier_input([[0, 0, 0, 1]])],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT", class_count=9)])
    assert res.as_numpy("OUTPUT").tolist() == [[b"4.000000:3:fish", b"3.000000:4:horse", b"2.000000:1:dog",
                                                 b"1.000000:0:cat", b"0.250000:2:bird"]]


def test_classification_negative_scores(client):
    res = client.infer("classifier", [classifier_input([[-1, 0, 0, 0]])],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT", class_count=3)])
    assert res.as_numpy("OUTPUT").tolist() == [[b"-0.250000:3:fish", b"-0.500000:2:bird", b"-1.000000:1:dog"]]


def test_classification_raw_json(examples_server):
    body = {"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "FP32", "data": [1, 0, 0, 0]}],
            "outputs": [{"name": "OUTPUT", "parameters": {"classification": 2}}]}
    r = post_infer(examples_server, "classifier", body)
    assert r.status == 200, r
    assert r.json()["outputs"] == [{"name": "OUTPUT", "datatype": "BYTES", "shape": [1, 2],
                                    "data": ["4.000000:0:cat", "3.000000:4:horse"]}]


# ---- multi_version ------------------------------------------------------------------------


def mv_input():
    x = np.array([[0, 1, 2, 3]], dtype=np.int32)
    inp = httpclient.InferInput("INPUT", [1, 4], "INT32")
    inp.set_data_from_numpy(x)
    return inp


@pytest.mark.parametrize("version", ["1", "2", "3"])
def test_multi_version_selects(client, version):
    res = client.infer("multi_version", [mv_input()], model_version=version)
    v = int(version)
    assert res.as_numpy("OUTPUT").tolist() == [[v, 1 + v, 2 + v, 3 + v]]
    assert res.get_response()["model_version"] == version


def test_multi_version_default_is_highest(client):
    res = client.infer("multi_version", [mv_input()])
    assert res.as_numpy("OUTPUT").tolist() == [[3, 4, 5, 6]]
    assert res.get_response()["model_version"] == "3"


# ---- autocomplete_add ---------------------------------------------------------------------


def test_autocomplete_add_infers(client):
    in0 = (0.5 * np.arange(16, dtype=np.float32)).reshape(2, 8)
    in1 = np.full((2, 8), 0.25, dtype=np.float32)
    a = httpclient.InferInput("INPUT0", [2, 8], "FP32")
    a.set_data_from_numpy(in0)
    b = httpclient.InferInput("INPUT1", [2, 8], "FP32")
    b.set_data_from_numpy(in1)
    res = client.infer("autocomplete_add", [a, b])
    out = res.as_numpy("OUTPUT")
    assert out.shape == (2, 8)
    assert out.tolist() == (in0 + 0.25).tolist()


def test_concurrent_requests(examples_server):
    """Several clients at once on different models all get their own correct answers."""
    import concurrent.futures

    def one(i):
        c = examples_server.client()
        try:
            x = np.full((1, 16), i, dtype=np.int32)
            a = httpclient.InferInput("INPUT0", [1, 16], "INT32")
            a.set_data_from_numpy(x)
            b = httpclient.InferInput("INPUT1", [1, 16], "INT32")
            b.set_data_from_numpy(x)
            r = c.infer("simple", [a, b], request_id=str(i))
            return r.get_response()["id"], r.as_numpy("OUTPUT0").tolist()
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(24)))
    assert results == [(str(i), [[2 * i] * 16]) for i in range(24)]


def test_bytes_binary_output_layout(examples_server):
    """A binary BYTES output is 4-byte little-endian length prefixes followed by the bytes."""
    body = {"inputs": [{"name": "INPUT", "shape": [1, 2], "datatype": "BYTES", "data": ["ab", "xyz"]}],
            "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}}]}
    r = post_infer(examples_server, "bytes_identity", body)
    assert r.status == 200, r
    head, tail = split_binary(r)
    assert head["outputs"][0]["parameters"]["binary_data_size"] == len(tail) == 4 + 2 + 4 + 3
    assert tail == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 3) + b"xyz"
