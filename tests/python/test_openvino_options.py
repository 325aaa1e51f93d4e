"""The openvino backend's model parameters beyond OpenVINO's properties (TARGET_DEVICE,
CPU_EXTENSION_PATH, ENABLE_BATCH_PADDING, RESHAPE_IO_LAYERS), and OpenVINO models under the server's
general features: warmup, the response cache, sequence batching and ensembles. Outputs are compared
with OpenVINO's own Python runtime on the same files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import copy_models
from test_openvino import OV_MODELS, infer, reason, reference


def model_copy(repo: Path, src: str, name: str, extra: str = "", replace: tuple[str, str] | None = None) -> Path:
    shutil.copytree(OV_MODELS / src, repo / name)
    cfg = repo / name / "config.pbtxt"
    text = cfg.read_text().replace(f'"{src}"', f'"{name}"')
    if replace:
        text = text.replace(*replace)
    cfg.write_text(text + extra)
    return cfg


def param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def settle(s) -> None:
    s.wait_until(s.settled, what="every model settled")


def test_a_device_the_machine_lacks_is_unavailable_and_auto_serves(start_server, repo):
    model_copy(repo, "ov_affine", "on_gpu", param("TARGET_DEVICE", "GPU"))
    model_copy(repo, "ov_affine", "on_npu", param("device", "NPU"))
    model_copy(repo, "ov_affine", "on_auto", param("TARGET_DEVICE", "AUTO"))
    model_copy(repo, "ov_affine", "on_cpu", param("TARGET_DEVICE", "CPU"))
    s = start_server("--model-repository", repo, wait="live")
    settle(s)
    found = ", ".join(ov.Core().available_devices)
    for name, device in (("on_gpu", "GPU"), ("on_npu", "NPU")):
        why = reason(s, name)
        assert f"OpenVINO's {device} device" in why and f"OpenVINO finds: {found}" in why, why
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    for name in ("on_auto", "on_cpu"):
        np.testing.assert_allclose(infer(s, "http", name, {"x": x}, ["y"])[0], reference("ov_affine", x)[0], rtol=1e-6)
    assert "compiled for OpenVINO's AUTO device" in s.log, s.log


def test_a_cpu_extension_that_is_missing_or_not_an_extension_is_unavailable(start_server, repo, tmp_path):
    model_copy(repo, "ov_affine", "no_ext", param("CPU_EXTENSION_PATH", str(tmp_path / "libmissing.so")))
    not_a_library = tmp_path / "libcustom.so"
    not_a_library.write_bytes(b"this is not an ELF file")
    model_copy(repo, "ov_affine", "bad_ext", param("CPU_EXTENSION_PATH", str(not_a_library)))
    copy_models(repo, "ov_int", src=OV_MODELS)
    s = start_server("--model-repository", repo, wait="live")
    settle(s)
    why = reason(s, "no_ext")
    assert "CPU_EXTENSION_PATH" in why and "libmissing.so" in why and "not a file" in why, why
    why = reason(s, "bad_ext")
    assert "CPU_EXTENSION_PATH" in why and "cannot load the extension" in why and "libcustom.so" in why, why
    a = np.array([[1, 2]], np.int32)
    np.testing.assert_array_equal(infer(s, "grpc", "ov_int", {"a": a}, ["z"])[0], a * 3 + 1)


def fixed_batch_model(repo: Path, name: str, extra: str) -> Path:
    """y = x * 2 + 1 with a fixed batch of 4: x FP32 [4, 3]."""
    (repo / name / "1").mkdir(parents=True)
    x = ops.parameter([4, 3], np.float32, name="x")
    x.output(0).set_names({"x"})
    y = ops.add(ops.multiply(x, ops.constant(np.float32(2))), ops.constant(np.float32(1)))
    y.output(0).set_names({"y"})
    path = repo / name / "1" / "model.xml"
    ov.save_model(ov.Model([y], [x], name), str(path))
    (repo / name / "config.pbtxt").write_text(
        'backend: "openvino"\nmax_batch_size: 4\ninput [{name: "x" data_type: TYPE_FP32 dims: [3]}]\n'
        'output [{name: "y" data_type: TYPE_FP32 dims: [3]}]\n' + param("SKIP_OV_DYNAMIC_BATCHSIZE", "YES") + extra)
    return path


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_batch_padding_pads_a_smaller_batch_to_the_fixed_one(start_server, repo, protocol):
    path = fixed_batch_model(repo, "padded", param("ENABLE_BATCH_PADDING", "YES"))
    fixed_batch_model(repo, "unpadded", "")
    s = start_server("--model-repository", repo)
    compiled = ov.Core().compile_model(str(path), "CPU")
    for rows in (1, 2, 4):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) - 2.5
        full = np.zeros((4, 3), np.float32)
        full[:rows] = x
        want = compiled(full)[0][:rows]
        (y,) = infer(s, protocol, "padded", {"x": x}, ["y"])
        assert y.shape == (rows, 3), y.shape
        np.testing.assert_allclose(y, want, rtol=1e-6)
    # Without the parameter a smaller batch is the client's error, and the reason names the parameter.
    with pytest.raises(InferenceServerException) as e:
        infer(s, protocol, "unpadded", {"x": np.ones((2, 3), np.float32)}, ["y"])
    assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), e.value.status()
    assert "ENABLE_BATCH_PADDING" in e.value.message(), e.value.message()
    np.testing.assert_allclose(infer(s, protocol, "unpadded", {"x": np.ones((4, 3), np.float32)}, ["y"])[0],
                               np.full((4, 3), 3, np.float32))


def test_reshape_io_layers_gives_the_inputs_the_configuration_dims(start_server, repo):
    # ov_static is exported as x [1, 4]; with RESHAPE_IO_LAYERS the configuration's [-1, 4] lets any
    # number of rows through.
    shutil.copytree(OV_MODELS / "ov_static", repo / "reshaped")
    (repo / "reshaped" / "config.pbtxt").write_text(
        'backend: "openvino"\nmax_batch_size: 0\ninput [{name: "x" data_type: TYPE_FP32 dims: [-1, 4]}]\n'
        'output [{name: "y" data_type: TYPE_FP32 dims: [-1, 4]}]\n' + param("RESHAPE_IO_LAYERS", "YES"))
    s = start_server("--model-repository", repo)
    for rows in (1, 3, 6):
        x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
        (y,) = infer(s, "grpc", "reshaped", {"x": x}, ["y"])
        np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)


def test_warmup_runs_on_openvino_instances_before_ready(start_server, repo):
    model_copy(repo, "ov_affine", "warmed",
               'model_warmup { name: "w" batch_size: 2 count: 3 inputs { key: "x" value: '
               '{ data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } }\n',
               replace=("count: 1", "count: 2"))
    s = start_server("--model-repository", repo)
    s.wait_for_log(r"Model 'warmed' version 1 ran 1 warmup sample\(s\) on each instance\.")
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(infer(s, "http", "warmed", {"x": x}, ["y"])[0], reference("ov_affine", x)[0], rtol=1e-6)


def test_response_cache_answers_repeats_without_running_openvino(start_server, repo):
    model_copy(repo, "ov_affine", "cached", "response_cache { enable: true }\n")
    s = start_server("--model-repository", repo, "--cache-config", "local,size=1048576")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = reference("ov_affine", x)
    for protocol in ("http", "grpc", "http"):
        y, total = infer(s, protocol, "cached", {"x": x}, ["y", "sum"])
        np.testing.assert_allclose(y, want[0], rtol=1e-6)
        np.testing.assert_allclose(total, want[1], rtol=1e-6)
    st = s.client().get_inference_statistics("cached")["model_stats"][0]
    assert st["execution_count"] == 1 and st["inference_stats"]["cache_hit"]["count"] == 2, st


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_batching_with_control_inputs_and_implicit_state(start_server, repo, protocol):
    """The example sequence_accumulate ONNX model, read by OpenVINO's ONNX frontend: START/END/READY/
    CORRID control inputs and an implicit ACC state, kept per sequence by the sequence batcher."""
    from helpers import REPO_ROOT
    src = REPO_ROOT / "model-repos" / "examples" / "sequence_accumulate"
    shutil.copytree(src, repo / "ov_acc")
    cfg = repo / "ov_acc" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "sequence_accumulate"', 'name: "ov_acc"')
                   .replace('backend: "onnxruntime"', 'backend: "openvino"\ndefault_model_filename: "model.onnx"'))
    s = start_server("--model-repository", repo)
    c = s.client() if protocol == "http" else s.grpc_client()
    mod = __import__("tritonclient.http" if protocol == "http" else "tritonclient.grpc", fromlist=["x"])

    def acc(value: int, **seq):
        i = mod.InferInput("INPUT", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        r = c.infer("ov_acc", [i], **seq)
        return int(r.as_numpy("OUTPUT")[0][0]), r.as_numpy("SIGNALS")[0].tolist(), int(r.as_numpy("CORRID_OUT")[0][0])

    # Two sequences interleaved: each keeps its own running sum.
    assert acc(5, sequence_id=11, sequence_start=True) == (5, [1, 0, 1], 11)
    assert acc(100, sequence_id=12, sequence_start=True) == (100, [1, 0, 1], 12)
    assert acc(6, sequence_id=11) == (11, [0, 0, 1], 11)
    assert acc(1, sequence_id=12, sequence_end=True) == (101, [0, 1, 1], 12)
    assert acc(7, sequence_id=11, sequence_end=True) == (18, [0, 1, 1], 11)


def test_an_ensemble_of_openvino_models(start_server, repo):
    copy_models(repo, "ov_int", src=OV_MODELS)
    (repo / "twice" / "1").mkdir(parents=True)
    (repo / "twice" / "config.pbtxt").write_text(
        'name: "twice"\nplatform: "ensemble"\nmax_batch_size: 4\n'
        'input [ { name: "A" data_type: TYPE_INT32 dims: [ 2 ] } ]\n'
        'output [ { name: "Z" data_type: TYPE_INT32 dims: [ 2 ] } ]\n'
        'ensemble_scheduling { step [\n'
        '  { model_name: "ov_int" model_version: -1 input_map { key: "a" value: "A" } output_map { key: "z" value: "mid" } },\n'
        '  { model_name: "ov_int" model_version: -1 input_map { key: "a" value: "mid" } output_map { key: "z" value: "Z" } }\n'
        '] }\n')
    s = start_server("--model-repository", repo)
    a = np.array([[1, -2], [7, 40]], dtype=np.int32)
    once = reference("ov_int", a)[0]
    want = reference("ov_int", once)[0]
    for protocol in ("http", "grpc"):
        np.testing.assert_array_equal(infer(s, protocol, "twice", {"A": a}, ["Z"])[0], want)


def test_streams_beyond_the_instances_are_named_in_a_warning(start_server, repo):
    import re
    model_copy(repo, "ov_affine", "thru", param("PERFORMANCE_HINT", "THROUGHPUT"))
    model_copy(repo, "ov_affine", "thru2", param("PERFORMANCE_HINT", "THROUGHPUT"), replace=("count: 1", "count: 8"))
    s = start_server("--model-repository", repo)
    for name, instances in (("thru", 1), ("thru2", 8)):
        m = s.wait_for_log(rf"Model '{name}' version 1 is compiled for OpenVINO's CPU device with .*NUM_STREAMS=(\d+)")
        streams = int(m.group(1))
        warned = re.search(rf"Model '{name}' is compiled with {streams} OpenVINO streams but has {instances} instance\(s\)"
                           rf".*Set instance_group count to {streams}", s.log)
        assert bool(warned) == (streams > instances), (streams, s.log)
    # On a machine with two or more cores OpenVINO's THROUGHPUT hint makes more streams than one instance uses.
    if len(__import__("os").sched_getaffinity(0)) >= 2:
        assert "Model 'thru' is compiled with" in s.log, s.log
