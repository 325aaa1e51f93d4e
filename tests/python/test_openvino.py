"""The built-in openvino backend: OpenVINO IR models (model-repos/openvino, written by
model-repos/gen_openvino.py with OpenVINO's Python API) served through PyPI's `openvino` runtime, which the
server finds through the `python3` on the PATH. Every output is compared with OpenVINO's own Python
runtime on the same files and inputs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT, copy_models, system_python_path

OV_MODELS = REPO_ROOT / "model-repos" / "openvino"


def reference(model: str, *inputs: np.ndarray) -> list[np.ndarray]:
    """The outputs of OpenVINO's Python runtime for the model's files, on its CPU device."""
    compiled = ov.Core().compile_model(str(OV_MODELS / model / "1" / "model.xml"), "CPU")
    result = compiled(list(inputs))
    return [result[o] for o in compiled.outputs]


def infer(s, protocol: str, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
    mod, c = (httpclient, s.client()) if protocol == "http" else (grpcclient, s.grpc_client())
    wire = {np.float32: "FP32", np.int32: "INT32"}
    ins = []
    for name, a in inputs.items():
        i = mod.InferInput(name, list(a.shape), wire[a.dtype.type])
        i.set_data_from_numpy(a)
        ins.append(i)
    r = c.infer(model, ins, outputs=[mod.InferRequestedOutput(o) for o in outputs])
    return [r.as_numpy(o) for o in outputs]


def reason(s, name: str) -> str:
    row = s.wait_until(lambda: next((r for r in s.index() if r["name"] == name and r.get("state") == "UNAVAILABLE"),
                                    None), what=f"{name} UNAVAILABLE")
    return row["reason"]


def concurrently(n: int, work) -> list:
    """Runs `work(w)` for w in 0..n on n threads at once; the mismatches they return, and anything they
    raise, in one list."""
    errors: list = []

    def run(w: int) -> None:
        try:
            errors.extend(work(w))
        except Exception as e:  # noqa: BLE001 - returned to the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ir_outputs_match_openvino_at_batch_1_and_larger(start_server, repo, protocol):
    copy_models(repo, "ov_affine", src=OV_MODELS)
    s = start_server("--model-repository", repo)
    # The log says which library serves the model.
    s.wait_for_log(r"OpenVINO 20\d\d\.\d+\S* is loaded from '\S*libopenvino_c\.so")
    rng = np.random.default_rng(7)
    nonzero = 0
    for batch in (1, 5, 8):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        y, total = infer(s, protocol, "ov_affine", {"x": x}, ["y", "sum"])
        want_y, want_sum = reference("ov_affine", x)
        assert y.shape == (batch, 3) and total.shape == (batch, 1)
        np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(total, want_sum, rtol=1e-6, atol=1e-6)
        nonzero += int(np.count_nonzero(y))
    # The weights were read: not every output is relu's zero.
    assert nonzero > 0


def test_configuration_is_completed_from_the_model(start_server, repo):
    copy_models(repo, "ov_int", src=OV_MODELS)
    s = start_server("--model-repository", repo)
    cfg = s.get("/v2/models/ov_int/config").json()
    assert cfg["max_batch_size"] == 4, cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [("a", "TYPE_INT32", [2])], cfg
    assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == [("z", "TYPE_INT32", [2])], cfg
    a = np.array([[1, -2], [7, 40], [0, 3]], dtype=np.int32)
    for protocol in ("http", "grpc"):
        (z,) = infer(s, protocol, "ov_int", {"a": a}, ["z"])
        np.testing.assert_array_equal(z, reference("ov_int", a)[0])


def python_without_openvino(tmp_path: Path) -> str:
    """A PATH whose `python3` has no `openvino` package (the system's, or a venv without it)."""
    return system_python_path(tmp_path, "nov-bin")


@pytest.mark.parametrize("how", ["library-named-nowhere", "no-package"])
def test_without_openvino_its_models_are_unavailable_and_the_others_serve(start_server, repo, tmp_path, how):
    copy_models(repo, "ov_affine", src=OV_MODELS)
    copy_models(repo, "simple")
    if how == "library-named-nowhere":
        env = {"TRITONRS_OPENVINO_LIB": str(tmp_path / "nowhere" / "libopenvino_c.so")}
    else:
        env = {"PATH": python_without_openvino(tmp_path)}
        probe = subprocess.run([Path(env["PATH"].split(":")[0]) / "python3", "-c", "import openvino"],
                               capture_output=True)
        assert probe.returncode != 0, "the system python3 has openvino; this case needs one without it"
    s = start_server("--model-repository", repo, wait="live", env=env)
    s.wait_until(s.settled, what="every model settled")
    why = reason(s, "ov_affine")
    assert "libopenvino_c.so" in why and "pip install openvino" in why, why
    if how == "library-named-nowhere":
        assert "nowhere" in why and "not found" in why, why
    assert s.index_row("simple")["state"] == "READY"
    c = s.client()
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(np.ones((1, 16), np.int32))
    assert c.infer("simple", [i0, i1]).as_numpy("OUTPUT0").tolist() == [list(range(1, 17))]


def test_broken_models_are_unavailable_with_the_reason(start_server, repo):
    for name in ("truncated", "no_bin", "garbage", "unknown_op"):
        shutil.copytree(OV_MODELS / "ov_affine", repo / name)
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('"ov_affine"', f'"{name}"'))
    xml = repo / "truncated" / "1" / "model.xml"
    text = xml.read_text()
    xml.write_text(text[: len(text) // 2])
    (repo / "no_bin" / "1" / "model.bin").unlink()
    (repo / "garbage" / "1" / "model.bin").write_bytes(b"\x01" * 3)
    # An operation no opset has.
    xml = repo / "unknown_op" / "1" / "model.xml"
    xml.write_text(xml.read_text().replace('type="MatMul"', 'type="FrobnicateMatMul"'))
    copy_models(repo, "ov_int", src=OV_MODELS)
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(s.settled, what="every model settled")
    why = reason(s, "truncated")
    assert "OpenVINO cannot read" in why and "model.xml" in why, why
    why = reason(s, "no_bin")
    assert "model.bin" in why and "missing" in why, why
    # Weights shorter than the IR says.
    why = reason(s, "garbage")
    assert "OpenVINO cannot read" in why, why
    why = reason(s, "unknown_op")
    assert "OpenVINO cannot read" in why and "FrobnicateMatMul" in why, why
    assert s.index_row("ov_int")["state"] == "READY"


def test_wrong_datatype_or_shape_is_a_400(start_server, repo):
    copy_models(repo, "ov_affine", src=OV_MODELS)
    s = start_server("--model-repository", repo)
    bad = [{"x": np.zeros((1, 4), np.int32)}, {"x": np.zeros((1, 5), np.float32)}, {"x": np.zeros((9, 4), np.float32)},
           {"x": np.zeros((4,), np.float32)}]
    for inputs in bad:
        for protocol in ("http", "grpc"):
            with pytest.raises(InferenceServerException) as e:
                infer(s, protocol, "ov_affine", inputs, ["y"])
            assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), (e.value.status(), e.value.message())
    r = s.post("/v2/models/ov_affine/infer", json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 5], "datatype": "FP32", "data": [0, 0, 0, 0, 0]}]}))
    assert r.status == 400 and "x" in r.json()["error"], r.json()
    # The instance is not stuck: a good request still works.
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(infer(s, "http", "ov_affine", {"x": x}, ["y"])[0], reference("ov_affine", x)[0],
                               rtol=1e-6)


def with_parameters(repo: Path, name: str, params: dict[str, str]) -> None:
    shutil.copytree(OV_MODELS / "ov_affine", repo / name)
    cfg = repo / name / "config.pbtxt"
    extra = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    cfg.write_text(cfg.read_text().replace('"ov_affine"', f'"{name}"') + extra)


def test_parameters_reach_openvino_and_unknown_ones_are_named(start_server, repo):
    with_parameters(repo, "tuned", {"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
                                    "NUM_STREEMS": "2"})
    with_parameters(repo, "bad_hint", {"PERFORMANCE_HINT": "FASTEST"})
    with_parameters(repo, "bad_threads", {"INFERENCE_NUM_THREADS": "-3"})
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(s.settled, what="every model settled")
    # OpenVINO's compiled model reports the values it was given.
    s.wait_for_log(r"Model 'tuned' version 1 is compiled for OpenVINO's CPU device with PERFORMANCE_HINT=THROUGHPUT, "
                   r"NUM_STREAMS=1, INFERENCE_NUM_THREADS=1,")
    s.wait_for_log(r"model 'tuned': parameter 'NUM_STREEMS' is not one the openvino backend reads \(did you mean "
                   r"'NUM_STREAMS'\?\); it is ignored")
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 3
    np.testing.assert_allclose(infer(s, "http", "tuned", {"x": x}, ["y"])[0], reference("ov_affine", x)[0], rtol=1e-6)
    why = reason(s, "bad_hint")
    assert "PERFORMANCE_HINT" in why and "FASTEST" in why and "LATENCY" in why, why
    why = reason(s, "bad_threads")
    assert "INFERENCE_NUM_THREADS" in why and "-3" in why, why


def test_an_onnx_file_named_by_default_model_filename_is_read_by_openvino(start_server, repo):
    (repo / "ov_onnx" / "1").mkdir(parents=True)
    onnx_file = REPO_ROOT / "model-repos" / "examples" / "simple" / "1" / "model.onnx"
    shutil.copy(onnx_file, repo / "ov_onnx" / "1" / "model.onnx")
    (repo / "ov_onnx" / "config.pbtxt").write_text('backend: "openvino"\ndefault_model_filename: "model.onnx"\n')
    s = start_server("--model-repository", repo)
    cfg = s.get("/v2/models/ov_onnx/config").json()
    assert sorted(i["name"] for i in cfg["input"]) == ["INPUT0", "INPUT1"], cfg
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 5, np.int32)
    compiled = ov.Core().compile_model(str(onnx_file), "CPU")
    want = compiled({"INPUT0": a, "INPUT1": b})
    for protocol in ("http", "grpc"):
        got = infer(s, protocol, "ov_onnx", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
        for name, g in zip(["OUTPUT0", "OUTPUT1"], got):
            np.testing.assert_array_equal(g, want[compiled.output(name)])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(start_server, repo, protocol):
    copy_models(repo, "ov_affine", src=OV_MODELS)
    cfg = repo / "ov_affine" / "config.pbtxt"
    # A long queue delay, so that concurrent requests meet in the batcher even on a busy 2-core machine.
    cfg.write_text(cfg.read_text().replace("max_queue_delay_microseconds: 2000", "max_queue_delay_microseconds: 100000"))
    s = start_server("--model-repository", repo)
    rng = np.random.default_rng(3)
    xs = [[rng.standard_normal((1 + (k % 3), 4)).astype(np.float32) for k in range(4)] for _ in range(8)]
    def worker(w: int) -> list:
        wrong = []
        for x in xs[w]:
            y, total = infer(s, protocol, "ov_affine", {"x": x}, ["y", "sum"])
            want_y, want_sum = reference("ov_affine", x)
            if not (np.allclose(y, want_y, rtol=1e-6, atol=1e-6) and np.allclose(total, want_sum, rtol=1e-6, atol=1e-6)):
                wrong.append((w, x, y, want_y))
        return wrong

    errors = concurrently(8, worker)
    assert not errors, errors[:3]
    st = s.client().get_inference_statistics("ov_affine")["model_stats"][0]
    rows = sum(x.shape[0] for w in xs for x in w)
    assert int(st["inference_count"]) == rows, st
    assert int(st["execution_count"]) < 32, st


def test_a_model_with_a_fixed_batch_of_1_gets_a_dynamic_batch(start_server, repo):
    copy_models(repo, "ov_static", src=OV_MODELS)
    shutil.copytree(OV_MODELS / "ov_static", repo / "skipped")
    cfg = repo / "skipped" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"ov_static"', '"skipped"')
                   + 'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }\n')
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(s.settled, what="every model settled")
    compiled = ov.Core().compile_model(str(OV_MODELS / "ov_static" / "1" / "model.xml"), "CPU")
    for batch in (1, 3, 4):
        x = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4) - 2.5
        # OpenVINO's runtime on the model as written takes one row at a time.
        want = np.concatenate([compiled([x[i:i + 1]])[compiled.output(0)] for i in range(batch)])
        for protocol in ("http", "grpc"):
            np.testing.assert_allclose(infer(s, protocol, "ov_static", {"x": x}, ["y"])[0], want, rtol=1e-6)
    # Told to keep the model's batch of 1 (SKIP_OV_DYNAMIC_BATCHSIZE), it serves that batch only, and a
    # larger one is the client's error, naming the shape the model takes.
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.testing.assert_allclose(infer(s, "grpc", "skipped", {"x": x}, ["y"])[0], x * 2 + 1, rtol=1e-6)
    with pytest.raises(InferenceServerException) as e:
        infer(s, "http", "skipped", {"x": np.ones((3, 4), np.float32)}, ["y"])
    assert e.value.status() == "400" and "[1, 4]" in e.value.message(), e.value.message()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_loading_and_unloading_does_not_keep_the_model(start_server, repo):
    """Each load's model graph and weights go with its unload (the `openvino` crate's ports kept
    them: 16 MiB more per cycle with this model)."""
    import openvino.opset13 as ops
    (repo / "big" / "1").mkdir(parents=True)
    x = ops.parameter([-1, 1024], np.float32, name="x")
    x.output(0).set_names({"x"})
    w = np.random.default_rng(0).standard_normal((1024, 4096)).astype(np.float32)  # 16 MiB of weights
    y = ops.matmul(x, ops.constant(w), False, False)
    y.output(0).set_names({"y"})
    ov.save_model(ov.Model([y], [x], "big"), str(repo / "big" / "1" / "model.xml"), compress_to_fp16=False)
    (repo / "big" / "config.pbtxt").write_text(
        'backend: "openvino"\nmax_batch_size: 4\ninput [{name: "x" data_type: TYPE_FP32 dims: [1024]}]\n'
        'output [{name: "y" data_type: TYPE_FP32 dims: [4096]}]\n')
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    c = s.client()

    def cycle():
        c.load_model("big")
        row = np.ones((1, 1024), np.float32)
        assert infer(s, "http", "big", {"x": row}, ["y"])[0].shape == (1, 4096)
        c.unload_model("big")
        s.wait_until(lambda: not c.is_model_ready("big"), what="big unloaded")

    for _ in range(3):
        cycle()
    before = rss_mib(s.proc.pid)
    for _ in range(8):
        cycle()
    mid = rss_mib(s.proc.pid)
    for _ in range(8):
        cycle()
    end = rss_mib(s.proc.pid)
    # A leak grows with every cycle: 8 leaked models are 128 MiB in each half. The allocator's arenas
    # settle (80 MiB over twelve cycles was seen on a loaded machine), so the second half counts, with
    # the old bound's sensitivity (64 MiB over 12 cycles: about 5 MiB a cycle).
    assert end - mid < 42, f"RSS grew by {mid - before:.0f} then {end - mid:.0f} MiB over two runs of 8 load/unload cycles"


def big_model(repo: Path, name: str, count: int) -> None:
    """A model with 16 MiB of weights: x FP32 [-1, 1024] -> y = x @ W, FP32 [-1, 4096]."""
    import openvino.opset13 as ops
    (repo / name / "1").mkdir(parents=True)
    x = ops.parameter([-1, 1024], np.float32, name="x")
    x.output(0).set_names({"x"})
    w = np.random.default_rng(0).standard_normal((1024, 4096)).astype(np.float32)
    y = ops.matmul(x, ops.constant(w), False, False)
    y.output(0).set_names({"y"})
    ov.save_model(ov.Model([y], [x], name), str(repo / name / "1" / "model.xml"), compress_to_fp16=False)
    (repo / name / "config.pbtxt").write_text(
        'backend: "openvino"\nmax_batch_size: 4\ninput [{name: "x" data_type: TYPE_FP32 dims: [1024]}]\n'
        'output [{name: "y" data_type: TYPE_FP32 dims: [4096]}]\n'
        f'instance_group [{{ count: {count} kind: KIND_CPU }}]\n')


def test_several_instances_share_one_compiled_model_with_a_stream_each(start_server, repo):
    """count: 4 compiles the model once (its weights are in memory once, not four times) and OpenVINO
    gives each instance a stream, splitting the cores between them."""
    big_model(repo, "one", 1)
    big_model(repo, "big", 4)
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    c = s.client()
    # The first model also brings OpenVINO's CPU plugin and thread pools into memory.
    c.load_model("one")
    before = rss_mib(s.proc.pid)
    c.load_model("big")
    grown = rss_mib(s.proc.pid) - before
    compiled = re.findall(r"Model 'big' version 1 is compiled for OpenVINO's CPU device with (.*), for (\d+) instance",
                          s.log)
    assert len(compiled) == 1 and compiled[0][1] == "4", s.log
    # A stream per instance, as far as the cores go (OpenVINO gives a stream at least one core).
    streams = int(re.search(r"NUM_STREAMS=(\d+)", compiled[0][0]).group(1))
    assert streams == min(4, len(os.sched_getaffinity(0))), compiled
    assert len(re.findall(r"Instance 'big_0_\d' of model 'big' has an infer request", s.log)) == 4, s.log
    # Measured: 29 MiB with one shared compiled model, 102 MiB when each instance compiled its own.
    assert grown < 60, f"RSS grew by {grown:.0f} MiB loading a model with 16 MiB of weights and 4 instances"
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 1024)).astype(np.float32) for _ in range(8)]
    compiled_here = ov.Core().compile_model(str(repo / "big" / "1" / "model.xml"), "CPU")
    want = [compiled_here(x)[0] for x in xs]
    results: dict[int, np.ndarray] = {}

    def one(i: int) -> list:
        results[i] = infer(s, "grpc", "big", {"x": xs[i]}, ["y"])[0]
        return []

    assert not concurrently(8, one)
    for i in range(8):
        # OpenVINO may compute in bf16 where the CPU has it; streams split the sums differently.
        np.testing.assert_allclose(results[i], want[i], rtol=1e-2, atol=0.5)


def test_a_request_without_an_optional_input_is_refused_not_fed_the_previous_one(start_server, repo):
    (repo / "ov_onnx" / "1").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "model-repos" / "examples" / "simple" / "1" / "model.onnx", repo / "ov_onnx" / "1")
    (repo / "ov_onnx" / "config.pbtxt").write_text(
        'backend: "openvino"\ndefault_model_filename: "model.onnx"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },\n'
        '        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] optional: true } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]\n')
    s = start_server("--model-repository", repo)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    secret = np.full((1, 16), 1000, np.int32)
    (out,) = infer(s, "http", "ov_onnx", {"INPUT0": a, "INPUT1": secret}, ["OUTPUT0"])
    np.testing.assert_array_equal(out, a + secret)
    for protocol in ("http", "grpc"):
        with pytest.raises(InferenceServerException) as e:
            infer(s, protocol, "ov_onnx", {"INPUT0": a}, ["OUTPUT0"])
        assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), (e.value.status(), e.value.message())
        assert "INPUT1" in e.value.message(), e.value.message()


def test_kind_gpu_is_refused_with_a_reason(start_server, repo):
    shutil.copytree(OV_MODELS / "ov_affine", repo / "on_gpu")
    cfg = repo / "on_gpu" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"ov_affine"', '"on_gpu"').replace("KIND_CPU", "KIND_GPU"))
    copy_models(repo, "ov_int", src=OV_MODELS)
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(s.settled, what="every model settled")
    why = reason(s, "on_gpu")
    assert "KIND_GPU" in why and "KIND_CPU" in why and "TARGET_DEVICE" in why, why
    assert s.index_row("ov_int")["state"] == "READY"
