"""The TensorRT backend from outside: `tensorrt_plan` models on a machine without TensorRT are UNAVAILABLE
with a reason naming what is missing, and the rest of the server serves. Where TensorRT and a GPU exist,
`TRITONRS_TRT_PLAN=path/to/model.plan` serves a real engine (auto-completed from the engine) and, with
`TRITONRS_TRT_ONNX=path/to/model.onnx`, compares its outputs with ONNX Runtime's; elsewhere that test
is reported as skipped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from helpers import copy_models, simple_inputs

CONFIG = """
name: "{name}"
platform: "tensorrt_plan"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
"""


def plan_model(repo: Path, name: str, plan: bytes, config: bool = True) -> Path:
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.plan").write_bytes(plan)
    if config:
        (d / "config.pbtxt").write_text(CONFIG.format(name=name))
    return d


def test_plans_without_tensorrt_are_unavailable_and_the_rest_serve(start_server, repo):
    copy_models(repo, "simple")
    plan_model(repo, "trt_plan", b"ftrt" + bytes(range(256)) * 8)
    # No config.pbtxt: the backend comes from the file name, and auto-complete needs TensorRT to read it.
    plan_model(repo, "trt_bare", b"\x00" * 512, config=False)
    s = start_server("--model-repository", repo, "--strict-readiness=false")
    s.wait_until(s.settled, what="loads to finish")
    for name in ("trt_plan", "trt_bare"):
        r = s.index_row(name)
        assert r["state"] == "UNAVAILABLE", r
        assert "TensorRT is not installed: no libnvinfer could be loaded" in r["reason"], r
        assert "libnvinfer.so.10" in r["reason"] and "libnvinfer.so.8" in r["reason"], r
    c = s.client()
    assert not c.is_model_ready("trt_plan")
    x = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    x.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("trt_plan", [x])
    assert "trt_plan" in str(e.value) and e.value.status() in ("400", "404", "503"), e.value
    # The ONNX model serves, and the server stays up.
    r = c.infer("simple", simple_inputs(httpclient, 2))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 16), 4, dtype=np.int32))
    assert s.is_running()


def test_a_named_library_that_is_not_tensorrt_is_reported(start_server, repo, tmp_path):
    fake = tmp_path / "libnvinfer.so.10"
    fake.write_text("not a shared object\n")
    plan_model(repo, "trt_plan", b"\x01" * 64)
    s = start_server("--model-repository", repo, "--strict-readiness=false",
                     f"--backend-config=tensorrt,library={fake}")
    s.wait_until(s.settled, what="loads to finish")
    r = s.index_row("trt_plan")
    assert r["state"] == "UNAVAILABLE" and str(fake) in r["reason"], r


def test_explicit_load_of_a_plan_fails_with_the_reason(start_server, repo):
    plan_model(repo, "trt_plan", b"\x02" * 64)
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    resp = s.post("/v2/repository/models/trt_plan/load")
    assert resp.status >= 400, resp
    assert "TensorRT is not installed" in resp.json()["error"], resp.json()
    assert s.is_running()


FAKE_NVINFER = r"""
#include <stddef.h>
#include <stdint.h>
int32_t getInferLibVersion(void) { return VERSION; }
#ifndef NO_RUNTIME
void* createInferRuntime_INTERNAL(void* logger, int32_t version) { (void)logger; (void)version; return NULL; }
#endif
"""

REPO_ROOT = Path(__file__).resolve().parents[2]


def fake_nvinfer(tmp_path: Path, version: int, runtime: bool = True) -> Path:
    """A stand-in libnvinfer exporting TensorRT's two C entry points: the version it reports, and a
    createInferRuntime_INTERNAL that fails (returns NULL), so the loading path runs for real."""
    src = tmp_path / "fake_nvinfer.c"
    src.write_text(FAKE_NVINFER)
    out = tmp_path / f"libnvinfer-{version}.so"
    flags = [f"-DVERSION={version}"] + ([] if runtime else ["-DNO_RUNTIME"])
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return out


def trt10_headers() -> Path | None:
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    found = sorted(home.glob("registry/src/*/trtx-sys-0.4.0/TensorRT-Headers/TRT-Enterprise-10.16"))
    return found[0] if found else None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in libnvinfer")
@pytest.mark.parametrize("version,runtime,shim,message", [
    (100300, True, False, "TensorRT 10.3.0 could not create a runtime: TensorRT logged no reason"),
    (101600, False, False, "libnvinfer has no createInferRuntime_INTERNAL"),
    (8201, True, False, "TensorRT 8.2.1 needs libtritonrs_trt8.so, which is not installed: build it on the device "
                        "with jetson/build-trt8-shim.sh"),
    (8601, True, True, "the TensorRT shim was built for TensorRT 10, but TensorRT 8.6.1 is installed"),
    (7103, True, False, "TensorRT 7.1.3 is not supported: this server serves TensorRT 8.2 to 8.6 and 10.x"),
])
def test_libnvinfer_versions_are_checked(start_server, repo, tmp_path, version, runtime, shim, message):
    lib = fake_nvinfer(tmp_path, version, runtime)
    args = [f"--backend-config=tensorrt,library={lib}"]
    if shim:
        headers = trt10_headers()
        if headers is None:
            pytest.skip("no TensorRT 10 headers (cargo fetch unpacks them)")
        # jetson/build-trt8-shim.sh, run against TensorRT 10 headers: a shim of the wrong major version.
        out = tmp_path / "libtritonrs_trt8.so"
        subprocess.run([str(REPO_ROOT / "jetson/build-trt8-shim.sh"), str(out)], check=True,
                       env=dict(os.environ, TRT_INCLUDE=str(headers)), capture_output=True)
        args.append(f"--backend-config=tensorrt,shim={out}")
    plan_model(repo, "trt_plan", b"\x03" * 64)
    s = start_server("--model-repository", repo, "--strict-readiness=false", *args)
    s.wait_until(s.settled, what="loads to finish")
    r = s.index_row("trt_plan")
    assert r["state"] == "UNAVAILABLE" and message in r["reason"], r
    assert s.is_running()


@pytest.mark.skipif(not os.environ.get("TRITONRS_TRT_PLAN"),
                    reason="needs TensorRT and a GPU: set TRITONRS_TRT_PLAN=path/to/model.plan")
def test_a_real_engine_serves(start_server, repo):
    plan = Path(os.environ["TRITONRS_TRT_PLAN"])
    d = repo / "engine" / "1"
    d.mkdir(parents=True)
    shutil.copy(plan, d / "model.plan")
    onnx = os.environ.get("TRITONRS_TRT_ONNX")
    if onnx:
        (repo / "reference" / "1").mkdir(parents=True)
        shutil.copy(onnx, repo / "reference" / "1" / "model.onnx")
    s = start_server("--model-repository", repo, "--min-supported-compute-capability=5.3", timeout=300)
    c = s.client()
    meta = c.get_model_metadata("engine")
    cfg = c.get_model_config("engine")
    assert cfg["platform"] == "tensorrt_plan"
    batch = [1] if cfg.get("max_batch_size", 0) > 0 else []
    rng = np.random.default_rng(0)
    inputs, arrays = [], {}
    for t in meta["inputs"]:
        shape = batch + [d if d > 0 else 1 for d in t["shape"][len(batch):]]
        a = rng.random(shape).astype(triton_to_np_dtype(t["datatype"]))
        i = httpclient.InferInput(t["name"], a.shape, t["datatype"])
        i.set_data_from_numpy(a)
        inputs.append(i)
        arrays[t["name"]] = a
    r = c.infer("engine", inputs)
    for t in meta["outputs"]:
        out = r.as_numpy(t["name"])
        assert out is not None and np.all(np.isfinite(out.astype(np.float64))), t
        if onnx:
            ref_inputs = []
            for name, a in arrays.items():
                i = httpclient.InferInput(name, a.shape, np_to_triton(a))
                i.set_data_from_numpy(a)
                ref_inputs.append(i)
            ref = c.infer("reference", ref_inputs).as_numpy(t["name"])
            np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)


def np_to_triton(a: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype
    return np_to_triton_dtype(a.dtype)


def test_the_device_selftest_ends_in_a_report_where_it_cannot_run(tmp_path):
    """jetson/selftest.sh is written to run on a device with TensorRT; here (no TensorRT, a stand-in
    trtexec that copies the ONNX file as the "engine") its flow still has to end in a pasteable report
    that says which check failed and why, with a failing exit status."""
    import socket

    from helpers import BIN, REPO_ROOT

    fake = tmp_path / "trtexec"
    fake.write_text(
        "#!/bin/sh\n"
        'for a; do case "$a" in --onnx=*) src=${a#--onnx=};; --saveEngine=*) dst=${a#--saveEngine=};; esac; done\n'
        'cp "$src" "$dst"\n'
    )
    fake.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, TRTEXEC=str(fake), PORT=str(port), READY_TIMEOUT="5")
    r = subprocess.run(["bash", str(REPO_ROOT / "jetson" / "selftest.sh"), str(BIN)], env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "### tritonrs GPU self-test" in out, out
    assert "| check | result | detail |" in out
    # No TensorRT Python module here: the two-profile engine cannot be built, and that is a skip.
    assert "| profiles | SKIP | no engine with two profiles:" in out, out
    engine = next(line for line in out.splitlines() if line.startswith("| engine |"))
    assert "| FAIL | the server did not become ready within 5 s:" in engine, out
    assert "TensorRT is not installed" in engine, out
    assert any(line.startswith("| faults | FAIL |") for line in out.splitlines()), out
    tune = next(line for line in out.splitlines() if line.startswith("| tune |"))
    assert "| FAIL |" in tune and "cannot tune model 'engine'" in tune, out
    kept = re.search(r"the servers' logs are in (\S+) \(server.log, faults.log\)", out)
    assert kept and (Path(kept.group(1)) / "server.log").is_file(), out
    shutil.rmtree(kept.group(1))
