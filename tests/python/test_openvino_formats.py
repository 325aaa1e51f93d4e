"""The model formats besides OpenVINO IR that the built-in openvino backend reads through OpenVINO's
frontends, laid out as Triton lays them out (model-repos/openvino_formats, written by
model-repos/gen_openvino_formats.py without TensorFlow): TensorFlow GraphDef (`platform:
"tensorflow_graphdef"`) and SavedModel (`platform: "tensorflow_savedmodel"`), served by the openvino backend
unless `--backend-config=tensorflow,use-shared-library=true` asks for NVIDIA's library, and TFLite and
ONNX named by `default_model_filename` under `backend: "openvino"`. Every output is compared with OpenVINO's
own Python runtime on the same files and inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT, copy_models
from test_openvino import concurrently, infer, reason

FORMATS = REPO_ROOT / "model-repos" / "openvino_formats"

# Each model and the file (or folder) OpenVINO reads.
FILES = {
    "tf_graphdef": "model.graphdef",
    "tf_savedmodel": "model.savedmodel",
    "ov_tflite": "model.tflite",
    "ov_onnx": "model.onnx",
}


def reference(model: str, x: np.ndarray) -> np.ndarray:
    """Output `y` of OpenVINO's Python runtime for the model's file, on its CPU device."""
    compiled = ov.Core().compile_model(str(FORMATS / model / "1" / FILES[model]), "CPU")
    return compiled([x])[compiled.outputs[0]]


def renamed(repo: Path, src: str, name: str, config: str | None) -> Path:
    """A copy of model `src` as `name`, with `config` as its config.pbtxt (`None`: no config.pbtxt)."""
    shutil.copytree(FORMATS / src, repo / name)
    (repo / name / "config.pbtxt").unlink()
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)
    return repo / name


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_each_format_matches_openvino_at_batch_1_and_larger(start_server, repo, protocol):
    copy_models(repo, *FILES, src=FORMATS)
    s = start_server("--model-repository", repo)
    rng = np.random.default_rng(11)
    for model in FILES:
        for batch in (1, 3, 8):
            x = rng.standard_normal((batch, 4)).astype(np.float32)
            (y,) = infer(s, protocol, model, {"x": x}, ["y"])
            assert y.shape == (batch, 3), (model, y.shape)
            np.testing.assert_allclose(y, reference(model, x), rtol=1e-6, atol=1e-6, err_msg=model)


def test_concurrent_requests_to_a_graphdef_are_batched_and_each_gets_its_own_rows(start_server, repo):
    # A long queue delay, so that concurrent requests meet in the batcher even on a busy 2-core machine.
    renamed(repo, "tf_graphdef", "gd_batched", (FORMATS / "tf_graphdef" / "config.pbtxt").read_text()
            .replace('"tf_graphdef"', '"gd_batched"') + "dynamic_batching { max_queue_delay_microseconds: 100000 }\n")
    s = start_server("--model-repository", repo)
    rng = np.random.default_rng(5)
    xs = [[rng.standard_normal((1 + (k % 2), 4)).astype(np.float32) for k in range(4)] for _ in range(8)]
    def worker(w: int) -> list:
        wrong = []
        for x in xs[w]:
            (y,) = infer(s, "grpc", "gd_batched", {"x": x}, ["y"])
            if not np.allclose(y, reference("tf_graphdef", x), rtol=1e-6, atol=1e-6):
                wrong.append((w, x, y))
        return wrong

    errors = concurrently(8, worker)
    assert not errors, errors[:3]
    st = s.client().get_inference_statistics("gd_batched")["model_stats"][0]
    assert int(st["inference_count"]) == sum(x.shape[0] for w in xs for x in w), st
    assert int(st["execution_count"]) < 32, st


def test_tensorflow_models_are_served_by_the_openvino_backend(start_server, repo):
    copy_models(repo, "tf_graphdef", "tf_savedmodel", src=FORMATS)
    s = start_server("--model-repository", repo)
    for model in ("tf_graphdef", "tf_savedmodel"):
        # The load log and the index say which backend serves the model.
        s.wait_for_log(rf"Model '{model}' version 1 is READY .*served by the openvino backend")
        row = s.index_row(model)
        assert row["state"] == "READY" and "openvino backend" in row["reason"], row
        # The configuration stays Triton's: the platform and the tensorflow backend.
        cfg = s.get(f"/v2/models/{model}/config").json()
        assert (cfg["platform"], cfg["backend"]) == (model.replace("tf_", "tensorflow_"), "tensorflow"), cfg
        assert cfg["default_model_filename"] == FILES[model], cfg


@pytest.mark.parametrize("names", [("x", "y"), ("x:0", "y:0")])
def test_tensorflow_tensor_names_with_or_without_the_output_index(start_server, repo, names):
    # OpenVINO names the GraphDef's ports `x:0` and `y:0`, the SavedModel's `x` and `y` (the signature's
    # keys); a configuration may use either form, as Triton's TensorFlow backend does.
    x_name, y_name = names
    io = (f'input [ {{ name: "{x_name}" data_type: TYPE_FP32 dims: [ 4 ] }} ]\n'
          f'output [ {{ name: "{y_name}" data_type: TYPE_FP32 dims: [ 3 ] }} ]\n')
    for src, platform in (("tf_graphdef", "tensorflow_graphdef"), ("tf_savedmodel", "tensorflow_savedmodel")):
        renamed(repo, src, f"{src}_named", f'platform: "{platform}"\nmax_batch_size: 4\n{io}')
    s = start_server("--model-repository", repo)
    x = np.array([[1, 2, 3, 4], [-1, 0, 1, 0]], np.float32)
    for src in ("tf_graphdef", "tf_savedmodel"):
        for protocol in ("http", "grpc"):
            (y,) = infer(s, protocol, f"{src}_named", {x_name: x}, [y_name])
            np.testing.assert_allclose(y, reference(src, x), rtol=1e-6, atol=1e-6)
        # The other form is not the configuration's name: refused as Triton refuses it.
        other = x_name[:-2] if x_name.endswith(":0") else x_name + ":0"
        with pytest.raises(InferenceServerException) as e:
            infer(s, "http", f"{src}_named", {other: x}, [y_name])
        assert "unexpected inference input" in e.value.message(), e.value.message()


def test_a_graphdef_savedmodel_or_tflite_configuration_is_completed_from_the_model(start_server, repo):
    # Inputs and outputs left out (Triton's TensorFlow backend cannot complete a GraphDef; OpenVINO reads
    # them), and a model folder with no config.pbtxt at all, found by its `model.graphdef`.
    renamed(repo, "tf_graphdef", "gd_platform", 'platform: "tensorflow_graphdef"\n')
    renamed(repo, "tf_graphdef", "gd_bare", None)
    renamed(repo, "tf_savedmodel", "sm_bare", None)
    # A TFLite model under the openvino backend, completed the same way.
    renamed(repo, "ov_tflite", "tfl_auto", 'backend: "openvino"\ndefault_model_filename: "model.tflite"\n')
    s = start_server("--model-repository", repo)
    x = np.array([[0.5, -2, 3, 1]], np.float32)
    for model, src in (("gd_platform", "tf_graphdef"), ("gd_bare", "tf_graphdef"), ("sm_bare", "tf_savedmodel"),
                       ("tfl_auto", "ov_tflite")):
        cfg = s.get(f"/v2/models/{model}/config").json()
        if src.startswith("tf_"):
            assert cfg["platform"] == src.replace("tf_", "tensorflow_") and cfg["backend"] == "tensorflow", cfg
        # The plain names, as Triton's TensorFlow backend names tensors, and a dynamic batch.
        assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [("x", "TYPE_FP32", [4])], cfg
        assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == [("y", "TYPE_FP32", [3])], cfg
        assert cfg["max_batch_size"] == 4, cfg
        (y,) = infer(s, "grpc", model, {"x": x}, ["y"])
        np.testing.assert_allclose(y, reference(src, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("folder", ["model.saved_model", "model.savedmodel", "model.pb"])
def test_openvino_backend_reads_tensorflow_files_named_by_default_model_filename(start_server, repo, folder):
    # Triton's openvino README names a SavedModel folder `model.saved_model`; a GraphDef may be `model.pb`.
    src = "tf_graphdef" if folder == "model.pb" else "tf_savedmodel"
    d = renamed(repo, src, "ov_tf", f'backend: "openvino"\ndefault_model_filename: "{folder}"\nmax_batch_size: 4\n')
    (d / "1" / FILES[src]).rename(d / "1" / folder)
    s = start_server("--model-repository", repo)
    x = np.array([[1, 1, 1, 1], [2, -3, 0.5, 0]], np.float32)
    for protocol in ("http", "grpc"):
        (y,) = infer(s, protocol, "ov_tf", {"x": x}, ["y"])
        np.testing.assert_allclose(y, reference(src, x), rtol=1e-6, atol=1e-6)


def test_use_shared_library_asks_for_nvidias_tensorflow_backend(start_server, repo, tmp_path):
    copy_models(repo, "tf_graphdef", "ov_tflite", src=FORMATS)
    backends = tmp_path / "backends"
    backends.mkdir()
    s = start_server("--model-repository", repo, "--backend-directory", backends,
                     "--backend-config=tensorflow,use-shared-library=true", wait="live")
    s.wait_until(s.settled, what="every model settled")
    why = reason(s, "tf_graphdef")
    assert "libtriton_tensorflow.so" in why, why
    assert s.index_row("ov_tflite")["state"] == "READY"
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(infer(s, "http", "ov_tflite", {"x": x}, ["y"])[0], reference("ov_tflite", x),
                               rtol=1e-6, atol=1e-6)


def test_a_corrupt_graphdef_or_tflite_file_or_an_unknown_operation_is_unavailable_with_openvinos_reason(start_server, repo):
    for src in ("tf_graphdef", "ov_tflite"):
        d = renamed(repo, src, f"{src}_bad", (FORMATS / src / "config.pbtxt").read_text()
                    .replace(f'"{src}"', f'"{src}_bad"'))
        f = d / "1" / FILES[src]
        data = f.read_bytes()
        # Cut inside a node or tensor (a GraphDef cut between two nodes is a smaller, valid graph).
        f.write_bytes(data[: len(data) * 3 // 4])
    # An operation OpenVINO's TensorFlow frontend has no conversion for.
    d = renamed(repo, "tf_graphdef", "tf_unknown_op", (FORMATS / "tf_graphdef" / "config.pbtxt").read_text()
                .replace('"tf_graphdef"', '"tf_unknown_op"'))
    f = d / "1" / "model.graphdef"
    f.write_bytes(f.read_bytes().replace(b"Relu", b"Frob"))
    copy_models(repo, "tf_savedmodel", src=FORMATS)
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(s.settled, what="every model settled")
    for src in ("tf_graphdef", "ov_tflite"):
        why = reason(s, f"{src}_bad")
        assert "OpenVINO cannot read" in why and FILES[src] in why, why
    why = reason(s, "tf_unknown_op")
    assert "OpenVINO cannot read" in why and "Frob" in why, why
    assert s.index_row("tf_savedmodel")["state"] == "READY"
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(infer(s, "grpc", "tf_savedmodel", {"x": x}, ["y"])[0], reference("tf_savedmodel", x),
                               rtol=1e-6, atol=1e-6)


def test_tensorflow_parameters_openvino_cannot_apply_are_named_in_a_warning(start_server, repo):
    # OpenVINO reads a SavedModel's graph and signature itself: the default tag and signature are what it
    # reads, any other is named in a warning, and the model still serves.
    params = {"TF_GRAPH_TAG": "serve", "TF_SIGNATURE_DEF": "predict_v2"}
    extra = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    renamed(repo, "tf_savedmodel", "sm_params", (FORMATS / "tf_savedmodel" / "config.pbtxt").read_text()
            .replace('"tf_savedmodel"', '"sm_params"') + extra)
    s = start_server("--model-repository", repo)
    s.wait_for_log(r"WARN .*model 'sm_params'.*TF_SIGNATURE_DEF.*predict_v2.*ignored")
    assert "TF_GRAPH_TAG" not in s.log, s.log
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(infer(s, "http", "sm_params", {"x": x}, ["y"])[0], reference("tf_savedmodel", x),
                               rtol=1e-6, atol=1e-6)
