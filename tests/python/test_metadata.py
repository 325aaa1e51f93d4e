"""Health, server metadata, model metadata, model readiness and model configuration."""

import pytest
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES

EXTENSIONS = {"classification", "model_repository", "model_configuration", "binary_tensor_data",
              "parameters", "statistics", "logging"}


def test_health_live_and_ready(examples_server, client):
    assert examples_server.get("/v2/health/live").status == 200
    assert examples_server.get("/v2/health/ready").status == 200
    assert client.is_server_live() is True
    assert client.is_server_ready() is True


def test_server_metadata(examples_server, client):
    md = client.get_server_metadata()
    assert md["name"] == "triton"
    assert isinstance(md["version"], str) and md["version"]
    assert EXTENSIONS <= set(md["extensions"]), md["extensions"]
    from helpers import run_cli

    assert run_cli("--version").stdout.strip() == f"tritonrs {md['version']}"
    r = examples_server.get("/v2")
    assert r.status == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == md


def test_server_id_changes_name(start_server):
    s = start_server("--model-repository", EXAMPLES, "--id", "edge-box-7", "--model-control-mode=explicit")
    assert s.get("/v2").json()["name"] == "edge-box-7"


@pytest.mark.parametrize("name, inputs, outputs", [
    ("simple", [("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])],
               [("OUTPUT0", "INT32", [-1, 16]), ("OUTPUT1", "INT32", [-1, 16])]),
    ("vlen_scale", [("INPUT", "FP32", [-1, -1])], [("OUTPUT", "FP32", [-1, -1])]),
    ("bytes_identity", [("INPUT", "BYTES", [-1, -1])], [("OUTPUT", "BYTES", [-1, -1])]),
    ("classifier", [("INPUT", "FP32", [-1, 4])], [("OUTPUT", "FP32", [-1, 5])]),
    ("multi_version", [("INPUT", "INT32", [-1, 4])], [("OUTPUT", "INT32", [-1, 4])]),
    ("autocomplete_add", [("INPUT0", "FP32", [-1, 8]), ("INPUT1", "FP32", [-1, 8])],
                         [("OUTPUT", "FP32", [-1, 8])]),
])
def test_model_metadata(client, name, inputs, outputs):
    md = client.get_model_metadata(name)
    assert md["name"] == name
    assert md["platform"] == "onnxruntime_onnx"
    expect_versions = ["1", "2", "3"] if name == "multi_version" else ["1"]
    assert md["versions"] == expect_versions
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["inputs"]] == inputs
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["outputs"]] == outputs


def test_model_metadata_for_version(client):
    md = client.get_model_metadata("multi_version", model_version="2")
    assert md["name"] == "multi_version"
    assert md["inputs"][0]["shape"] == [-1, 4]


def test_model_metadata_unknown_version(examples_server, client):
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("multi_version", model_version="9")
    assert e.value.status() == "404"
    r = examples_server.get("/v2/models/simple/versions/abc")
    assert r.status == 400 and "abc" in r.json()["error"]


def test_model_metadata_unknown_model(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no_such_model")
    assert e.value.status() == "404"
    assert "no_such_model" in e.value.message()


def test_model_ready(examples_server, client):
    assert client.is_model_ready("simple") is True
    assert client.is_model_ready("multi_version", "2") is True
    assert client.is_model_ready("no_such_model") is False
    assert client.is_model_ready("multi_version", "7") is False
    assert examples_server.get("/v2/models/simple/ready").status == 200
    assert examples_server.get("/v2/models/multi_version/versions/3/ready").status == 200
    r = examples_server.get("/v2/models/no_such_model/ready")
    assert r.status == 404
    assert "no_such_model" in r.json()["error"]
    assert examples_server.get("/v2/models/multi_version/versions/7/ready").status != 200


def test_model_config_simple_is_triton_json(examples_server, client):
    cfg = client.get_model_config("simple")
    assert cfg["name"] == "simple"
    assert cfg["backend"] == "onnxruntime"
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["max_batch_size"] == 8
    assert [i["name"] for i in cfg["input"]] == ["INPUT0", "INPUT1"]
    assert [o["name"] for o in cfg["output"]] == ["OUTPUT0", "OUTPUT1"]
    inp = cfg["input"][0]
    # snake_case names, enums by name, int64 as JSON numbers, defaults printed.
    assert inp["data_type"] == "TYPE_INT32"
    assert inp["dims"] == [16]
    assert inp["format"] == "FORMAT_NONE"
    assert inp["optional"] is False
    assert inp["is_shape_tensor"] is False
    assert inp["allow_ragged_batch"] is False
    out = cfg["output"][0]
    assert out["data_type"] == "TYPE_INT32" and out["dims"] == [16]
    assert out["label_filename"] == ""
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["instance_group"][0]["count"] == 1
    assert cfg["default_model_filename"] == "model.onnx"
    assert cfg["parameters"] == {}
    for k in cfg:
        assert k == k.lower() and "-" not in k, k
    raw = examples_server.get("/v2/models/simple/config")
    assert raw.status == 200
    assert b'"dims":[16]' in raw.body.replace(b" ", b"")
    assert raw.json() == cfg


def test_model_config_classifier_and_policy(client):
    cfg = client.get_model_config("classifier")
    assert cfg["output"][0]["label_filename"] == "labels.txt"
    assert cfg["output"][0]["dims"] == [5]
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    mv = client.get_model_config("multi_version")
    assert mv["version_policy"] == {"all": {}}
    vl = client.get_model_config("vlen_scale")
    assert vl["input"][0]["dims"] == [-1]
    bi = client.get_model_config("bytes_identity")
    assert bi["input"][0]["data_type"] == "TYPE_STRING"


def test_model_config_autocompleted(client):
    cfg = client.get_model_config("autocomplete_add")
    assert cfg["name"] == "autocomplete_add"
    assert cfg["backend"] == "onnxruntime"
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("INPUT0", "TYPE_FP32", [8]), ("INPUT1", "TYPE_FP32", [8])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == [("OUTPUT", "TYPE_FP32", [8])]
    assert "dynamic_batching" in cfg


def test_model_config_unknown_model(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_model_config("nope")
    assert e.value.status() == "404"


def test_model_config_for_version(examples_server):
    r = examples_server.get("/v2/models/multi_version/versions/1/config")
    assert r.status == 200
    assert r.json()["name"] == "multi_version"
    r = examples_server.get("/v2/models/multi_version/versions/9/config")
    assert r.status == 404
    assert "error" in r.json()
