"""Every class of bad request gets the right status code and a JSON error naming the problem, and
the server stays up (live, and still inferring correctly) afterwards."""

import json
import struct

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

GOOD0 = list(range(16))
GOOD1 = [1] * 16


def good_json_body(**over):
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": GOOD0},
                       {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": GOOD1}]}
    body.update(over)
    return body


def simple_inputs(batch=1, dims=16, dtype="INT32", names=("INPUT0", "INPUT1")):
    np_dtype = {"INT32": np.int32, "FP32": np.float32, "INT64": np.int64}[dtype]
    out = []
    for n in names:
        i = httpclient.InferInput(n, [batch, dims], dtype)
        i.set_data_from_numpy(np.ones((batch, dims), dtype=np_dtype))
        out.append(i)
    return out


def expect_error(server, resp, status, *words):
    """`resp` is an HttpResponse; checks the status, that the body is {"error": "..."} mentioning every
    word (case-insensitively), and that the server is still live."""
    assert resp.status == status, resp
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert set(body) == {"error"}, body
    msg = body["error"]
    assert isinstance(msg, str) and msg
    for w in words:
        assert w.lower() in msg.lower(), f"{w!r} not in {msg!r}"
    assert server.is_live()
    return msg


def expect_client_error(server, fn, status, *words):
    with pytest.raises(InferenceServerException) as e:
        fn()
    assert e.value.status() == str(status), (e.value.status(), e.value.message())
    for w in words:
        assert w.lower() in e.value.message().lower(), f"{w!r} not in {e.value.message()!r}"
    assert server.is_live()
    return e.value.message()


def infer_path(model="simple", version=None):
    return f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "") + "/infer"


def check_good_inference(server):
    r = server.post(infer_path(), good_json_body())
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == [x + 1 for x in range(16)]


# ---- malformed requests (raw HTTP) ------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{not json", b'{"inputs": [', b"\xff\xfe", b"[1,2,3]", b'"str"',
                                  b'{"inputs": 5}', b'{"outputs": []}'])
def test_malformed_json_400(examples_server, body):
    r = examples_server.post(infer_path(), body, headers={"Content-Type": "application/json"})
    expect_error(examples_server, r, 400)


def test_empty_body_400(examples_server):
    r = examples_server.post(infer_path(), b"", headers={"Content-Type": "application/json"})
    expect_error(examples_server, r, 400)


def test_element_count_mismatch_400(examples_server):
    body = good_json_body()
    body["inputs"][0]["data"] = list(range(15))
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INPUT0", "15", "16")


def test_element_count_too_many_400(examples_server):
    body = good_json_body()
    body["inputs"][1]["data"] = [1] * 17
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INPUT1", "17")


def test_wrong_json_type_in_data_400(examples_server):
    body = good_json_body()
    body["inputs"][0]["data"] = ["x"] * 16
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INPUT0", "INT32")


def test_float_for_int32_400(examples_server):
    body = good_json_body()
    body["inputs"][0]["data"] = [0.5] * 16
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INPUT0")


def test_int32_out_of_range_400(examples_server):
    body = good_json_body()
    body["inputs"][0]["data"] = [2**31] + list(range(15))
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INPUT0", "range")


def test_unknown_datatype_string_400(examples_server):
    body = good_json_body()
    body["inputs"][0]["datatype"] = "INT33"
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INT33")


def test_negative_shape_400(examples_server):
    body = good_json_body()
    body["inputs"][0]["shape"] = [-1, 16]
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INPUT0")


def test_input_without_data_400(examples_server):
    body = good_json_body()
    del body["inputs"][0]["data"]
    expect_error(examples_server, examples_server.post(infer_path(), body), 400, "INPUT0")


def _binary_request(inputs_meta, payload, header_len=None, extra_headers=None):
    head = json.dumps({"inputs": inputs_meta}).encode()
    h = {"Inference-Header-Content-Length": str(len(head) if header_len is None else header_len),
         "Content-Type": "application/octet-stream"}
    h.update(extra_headers or {})
    return head + payload, h


def test_binary_data_size_larger_than_body_400(examples_server):
    meta = [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}]
    body, h = _binary_request(meta, b"\x01" * 100)
    expect_error(examples_server, examples_server.post(infer_path(), body, headers=h), 400, "INPUT1", "binary_data_size")


def test_binary_data_size_wrong_for_shape_400(examples_server):
    meta = [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 60}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}]
    body, h = _binary_request(meta, b"\x01" * 124)
    expect_error(examples_server, examples_server.post(infer_path(), body, headers=h), 400, "INPUT0")


def test_unclaimed_binary_bytes_400(examples_server):
    meta = [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}]
    body, h = _binary_request(meta, b"\x01" * 130)
    expect_error(examples_server, examples_server.post(infer_path(), body, headers=h), 400)


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "", "99999999999999999999999"])
def test_invalid_inference_header_content_length_400(examples_server, value):
    body = json.dumps(good_json_body()).encode()
    r = examples_server.post(infer_path(), body, headers={"Inference-Header-Content-Length": value})
    expect_error(examples_server, r, 400)


def test_inference_header_content_length_beyond_body_400(examples_server):
    body = json.dumps(good_json_body()).encode()
    r = examples_server.post(infer_path(), body, headers={"Inference-Header-Content-Length": str(len(body) + 10)})
    expect_error(examples_server, r, 400, "Inference-Header-Content-Length")


def test_inference_header_content_length_cuts_json_400(examples_server):
    body = json.dumps(good_json_body()).encode()
    r = examples_server.post(infer_path(), body, headers={"Inference-Header-Content-Length": "10"})
    expect_error(examples_server, r, 400)


def test_bytes_truncated_length_prefix_400(examples_server):
    # First element declares 10 bytes but only 2 follow.
    payload = struct.pack("<I", 10) + b"ab"
    meta = [{"name": "INPUT", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": len(payload)}}]
    body, h = _binary_request(meta, payload)
    r = examples_server.post(infer_path("bytes_identity"), body, headers=h)
    expect_error(examples_server, r, 400)


def test_bytes_partial_length_prefix_400(examples_server):
    payload = struct.pack("<I", 1) + b"a" + b"\x02\x00"  # second prefix cut after 2 of 4 bytes
    meta = [{"name": "INPUT", "shape": [1, 2], "datatype": "BYTES", "parameters": {"binary_data_size": len(payload)}}]
    body, h = _binary_request(meta, payload)
    expect_error(examples_server, examples_server.post(infer_path("bytes_identity"), body, headers=h), 400)


def test_bytes_element_count_mismatch_400(examples_server):
    payload = struct.pack("<I", 1) + b"a"  # one element, shape says two
    meta = [{"name": "INPUT", "shape": [1, 2], "datatype": "BYTES", "parameters": {"binary_data_size": len(payload)}}]
    body, h = _binary_request(meta, payload)
    expect_error(examples_server, examples_server.post(infer_path("bytes_identity"), body, headers=h), 400)


def test_raw_binary_body_wrong_size_400(examples_server):
    r = examples_server.post(infer_path("vlen_scale"), b"\x00" * 7, headers={"Inference-Header-Content-Length": "0"})
    expect_error(examples_server, r, 400)


@pytest.mark.parametrize("encoding", ["br", "compress", "zstd"])
def test_unsupported_content_encoding_400(examples_server, encoding):
    body = json.dumps(good_json_body()).encode()
    r = examples_server.post(infer_path(), body, headers={"Content-Encoding": encoding})
    expect_error(examples_server, r, 400, encoding)


def test_corrupt_gzip_body_400(examples_server):
    r = examples_server.post(infer_path(), b"\x1f\x8b\x08\x00garbage", headers={"Content-Encoding": "gzip"})
    expect_error(examples_server, r, 400)


@pytest.mark.parametrize("method, path", [
    ("GET", "/v2/nope"), ("GET", "/v3"), ("POST", "/v2/models/simple/frobnicate"), ("GET", "/"),
    ("GET", "/v2/models/simple/versions/1/extra/ready"),
])
def test_unknown_endpoint_404(examples_server, method, path):
    r = examples_server.request(method, path)
    expect_error(examples_server, r, 404)


def test_bad_version_string_400(examples_server, client):
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(), model_version="abc"), 400, "abc")
    r = examples_server.post(infer_path(version="-3"), good_json_body())
    expect_error(examples_server, r, 400)


# ---- model-level errors (tritonclient) ----------------------------------------------------------


def test_unknown_model_404(examples_server, client):
    msg = expect_client_error(examples_server, lambda: client.infer("no_such_model", simple_inputs()), 404)
    assert "no_such_model" in msg


def test_unknown_version_404(examples_server, client):
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(), model_version="7"), 404, "simple")
    expect_client_error(examples_server, lambda: client.infer("multi_version", simple_inputs(), model_version="4"), 404)


def test_wrong_datatype_400(examples_server, client):
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(dtype="FP32")), 400, "INPUT0")
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(dtype="INT64")), 400, "INT64")


def test_unknown_input_400(examples_server, client):
    inputs = simple_inputs(names=("INPUT0", "INPUT1", "INPUTX"))
    expect_client_error(examples_server, lambda: client.infer("simple", inputs), 400, "INPUTX")


def test_duplicate_input_400(examples_server, client):
    inputs = simple_inputs(names=("INPUT0", "INPUT0", "INPUT1"))
    expect_client_error(examples_server, lambda: client.infer("simple", inputs), 400, "INPUT0")


def test_unknown_output_400(examples_server, client):
    outs = [httpclient.InferRequestedOutput("NOPE")]
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(), outputs=outs), 400, "NOPE")


def test_missing_input_400(examples_server, client):
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(names=("INPUT0",))), 400, "INPUT1")


def test_duplicate_requested_output_400(examples_server, client):
    outs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT0")]
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(), outputs=outs), 400, "OUTPUT0")


def test_no_inputs_400(examples_server):
    expect_error(examples_server, examples_server.post(infer_path(), {"inputs": []}), 400)


def test_batch_too_large_400(examples_server, client):
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(batch=9)), 400, "batch")
    x = np.ones((5, 4), dtype=np.float32)
    inp = httpclient.InferInput("INPUT", [5, 4], "FP32")
    inp.set_data_from_numpy(x)
    expect_client_error(examples_server, lambda: client.infer("classifier", [inp]), 400, "batch")


def test_shape_mismatch_400(examples_server, client):
    expect_client_error(examples_server, lambda: client.infer("simple", simple_inputs(dims=15)), 400, "INPUT0")
    # A rank that does not match the configuration.
    inp = httpclient.InferInput("INPUT", [4], "FP32")
    inp.set_data_from_numpy(np.ones(4, dtype=np.float32))
    expect_client_error(examples_server, lambda: client.infer("classifier", [inp]), 400, "INPUT")


def test_mismatched_batch_sizes_between_inputs_400(examples_server):
    body = good_json_body()
    body["inputs"][1]["shape"] = [2, 16]
    body["inputs"][1]["data"] = [1] * 32
    expect_error(examples_server, examples_server.post(infer_path(), body), 400)


def test_classification_on_bytes_model_is_rejected(examples_server):
    body = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "BYTES", "data": ["a"]}],
            "outputs": [{"name": "OUTPUT", "parameters": {"classification": 1}}]}
    r = examples_server.post(infer_path("bytes_identity"), body)
    expect_error(examples_server, r, 400)


def test_bad_classification_parameter_400(examples_server):
    body = {"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "FP32", "data": [1, 0, 0, 0]}],
            "outputs": [{"name": "OUTPUT", "parameters": {"classification": "two"}}]}
    expect_error(examples_server, examples_server.post(infer_path("classifier"), body), 400, "classification")


def test_server_healthy_after_all_errors(examples_server, client):
    """Runs after the error tests in this module: the shared server is live, ready and still right."""
    assert client.is_server_live() and client.is_server_ready()
    check_good_inference(examples_server)
    res = client.infer("simple", simple_inputs())
    assert res.as_numpy("OUTPUT0").tolist() == [[2] * 16]


# ---- out-of-range value for a small integer type (a generated UINT8 model) ----------------------


def _uint8_identity_model(path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("INPUT", TensorProto.UINT8, ["N", 4])
    y = helper.make_tensor_value_info("OUTPUT", TensorProto.UINT8, ["N", 4])
    g = helper.make_graph([helper.make_node("Identity", ["INPUT"], ["OUTPUT"])], "u8", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(m, path)


def test_uint8_out_of_range_400(start_server, repo):
    d = repo / "u8"
    (d / "1").mkdir(parents=True)
    _uint8_identity_model(str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text(
        'name: "u8"\nbackend: "onnxruntime"\nmax_batch_size: 2\n'
        'input [ { name: "INPUT" data_type: TYPE_UINT8 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_UINT8 dims: [ 4 ] } ]\n')
    s = start_server("--model-repository", repo)
    ok = s.post(infer_path("u8"), {"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "UINT8",
                                                "data": [0, 1, 254, 255]}]})
    assert ok.status == 200, ok
    assert ok.json()["outputs"][0]["data"] == [0, 1, 254, 255]
    for bad in ([300, 0, 0, 0], [-1, 0, 0, 0]):
        r = s.post(infer_path("u8"), {"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "UINT8", "data": bad}]})
        expect_error(s, r, 400, "INPUT", "range")
