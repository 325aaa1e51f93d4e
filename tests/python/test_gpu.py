"""GPU configuration on a machine without a GPU (CI): KIND_GPU models are UNAVAILABLE with a reason
that names what is missing, KIND_AUTO runs on the CPU, execution accelerators are checked, the memory
pool flags work and show in the metrics, and every other model keeps serving."""

from __future__ import annotations

import re
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import copy_models, python_sleep_model, run_cli, simple_inputs


def variant(repo, name: str, extra: str):
    """A copy of the example `simple` model named `name`, with `extra` appended to its config."""
    d = repo / name
    staging = repo.parent / f"staging-{name}"
    copy_models(staging, "simple")
    (staging / "simple").rename(d)
    cfg = (d / "config.pbtxt").read_text().replace('name: "simple"', f'name: "{name}"')
    (d / "config.pbtxt").write_text(cfg + "\n" + extra + "\n")
    return d


def reason(server, name: str) -> str:
    rows = [r for r in server.index() if r["name"] == name]
    assert rows, server.index()
    return rows[0].get("reason", "") + " / " + rows[0]["state"]


def test_gpu_models_fail_clearly_and_the_rest_serve(start_server, repo):
    copy_models(repo, "simple")
    variant(repo, "on_gpu", "instance_group [ { kind: KIND_GPU } ]")
    variant(repo, "on_gpu_1", "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]")
    variant(repo, "auto", "instance_group [ { kind: KIND_AUTO } ]")
    variant(repo, "trt", 'instance_group [ { kind: KIND_GPU } ]\n'
                         'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" '
                         'parameters { key: "precision_mode" value: "FP16" } } ] } }')
    variant(repo, "trt_typo", 'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" '
                              'parameters { key: "precision_mode" value: "FP12" } } ] } }')
    variant(repo, "openvino", 'optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }')
    variant(repo, "unknown_accel", 'optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "npu" } ] } }')
    s = start_server("--model-repository", repo, "--strict-readiness=false")
    s.wait_until(lambda: all(r["state"] in ("READY", "UNAVAILABLE") for r in s.index()), what="loads to finish")

    no_driver = "no CUDA driver could be loaded (libcuda.so.1"
    for name in ("on_gpu", "on_gpu_1", "trt"):
        r = reason(s, name)
        assert "UNAVAILABLE" in r and f"instance '{name}_0_0' is KIND_GPU, but {no_driver}" in r, r
    r = reason(s, "trt_typo")
    assert "UNAVAILABLE" in r and "parameter 'precision_mode' must be FP32, FP16 or INT8, got 'FP12'" in r, r
    r = reason(s, "openvino")
    assert "UNAVAILABLE" in r and "asks for the OpenVINO execution accelerator, but the loaded ONNX Runtime library " \
                                  "has no OpenVINO execution provider" in r, r
    r = reason(s, "unknown_accel")
    assert "UNAVAILABLE" in r and "unknown CPU execution accelerator 'npu'" in r, r

    # KIND_AUTO runs on the CPU here, and the plain model serves.
    assert reason(s, "auto").endswith("READY")
    cfg = s.client().get_model_config("auto")
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    c = s.client()
    for name in ("simple", "auto"):
        r = c.infer(name, simple_inputs(httpclient, 3))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 16), 6, dtype=np.int32))


def test_memory_pool_flags_and_metrics(start_server, repo):
    s = start_server("--model-repository", copy_models(repo, "simple"), "--allow-metrics=true", "--metrics-port", "0",
                     "--metrics-address", "127.0.0.1", "--pinned-memory-pool-byte-size", "33554432",
                     "--cuda-memory-pool-byte-size", "0:1048576", "--min-supported-compute-capability", "5.3")
    port = int(s.wait_for_log(r"Started Metrics Service at \S+:(\d+)").group(1))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert re.search(r"^nv_pinned_memory_pool_total_bytes 33554432$", text, re.M), text
    assert re.search(r"^nv_pinned_memory_pool_used_bytes 0$", text, re.M), text
    assert re.search(r'^tritonrs_memory_pool_fallback_total\{pool="pinned"\} 0$', text, re.M), text
    # No GPU here: no device pools.
    assert "tritonrs_cuda_memory_pool_total_bytes{" not in text


@pytest.mark.parametrize("flag,value,message", [
    ("--cuda-memory-pool-byte-size", "67108864", "is not <gpu>:<bytes>"),
    ("--cuda-memory-pool-byte-size", "x:5", "is not a GPU index"),
    ("--pinned-memory-pool-byte-size", "-1", "--pinned-memory-pool-byte-size"),
    ("--min-supported-compute-capability", "-2", "--min-supported-compute-capability"),
])
def test_bad_memory_flags_are_refused(repo, flag, value, message):
    r = run_cli("--model-repository", str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
                f"{flag}={value}", timeout=30)
    assert r.returncode == 2 or r.returncode == 1, r
    assert message in r.stderr, r.stderr


def test_gpu_instances_of_python_and_c_api_models_need_the_gpu(start_server, repo, tmp_path):
    # tritonserver refuses a KIND_GPU group without a GPU for every backend ("... has kind KIND_GPU but
    # no GPUs are available"); the Python stub and a C API backend would otherwise run on the CPU.
    from test_capi import build, model

    py = python_sleep_model(repo, "py_gpu", instances=1) / "config.pbtxt"
    py.write_text(py.read_text().replace("KIND_CPU", "KIND_GPU"))
    backends = tmp_path / "backends"
    build(backends / "testc", "testc")
    cfg = model(repo, "c_gpu", "testc") / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("KIND_CPU", "KIND_GPU"))
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--backend-directory", backends, "--strict-readiness=false")
    s.wait_until(s.settled, what="loads to finish")
    no_driver = "no CUDA driver could be loaded (libcuda.so.1"
    for name in ("py_gpu", "c_gpu"):
        r = reason(s, name)
        assert "UNAVAILABLE" in r and f"instance '{name}_0_0' is KIND_GPU, but {no_driver}" in r, r
    c = s.client()
    r = c.infer("simple", simple_inputs(httpclient, 3))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 16), 6, dtype=np.int32))
    c.close()
