"""ONNX Runtime backend specifics: library discovery, instance groups, KIND_GPU, thread parameters."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

import helpers
from helpers import REPO_ROOT, copy_models, system_python_path

# The pinned wheel (scripts/requirements.txt), which a model's reason tells users to install.
ORT_VERSION = re.search(r"^onnxruntime==(\S+)", (REPO_ROOT / "scripts" / "requirements.txt").read_text(), re.M)[1]


def simple_infer(c) -> np.ndarray:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(np.ones((1, 16), np.int32))
    return c.infer("simple", [i0, i1]).as_numpy("OUTPUT0")


def set_config_tail(repo: Path, model: str, extra: str) -> None:
    cfg = repo / model / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "\n" + extra + "\n")


def thread_names(pid: int) -> list[str]:
    return [(t / "comm").read_text().strip() for t in Path(f"/proc/{pid}/task").iterdir()]


def test_missing_library_makes_onnx_models_unavailable_but_server_starts(start_server, repo):
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--backend-config=onnxruntime,library=/nonexistent/libonnxruntime.so",
                     wait="live")
    rows = s.wait_until(lambda: [r for r in s.index() if r.get("state") == "UNAVAILABLE"], what="simple UNAVAILABLE")
    assert rows[0]["name"] == "simple"
    assert "libonnxruntime" in rows[0]["reason"] and "/nonexistent/libonnxruntime.so" in rows[0]["reason"]
    assert s.get("/v2/health/live").status == 200
    assert s.get("/v2/health/ready").status == 503
    r = s.post("/v2/models/simple/infer", '{"inputs": []}')
    assert r.status == 503 and "simple" in r.json()["error"]


def test_instance_group_count_starts_one_thread_per_instance(start_server, repo):
    copy_models(repo, "simple")
    set_config_tail(repo, "simple", 'instance_group [ { count: 3 kind: KIND_CPU } ]')
    s = start_server("--model-repository", repo)
    names = thread_names(s.proc.pid)
    assert sorted(n for n in names if n.startswith("inst-simple")) == ["inst-simple_0_0", "inst-simple_0_1", "inst-simple_0_2"]
    assert simple_infer(s.client()).tolist() == [list(range(1, 17))]
    cfg = s.client().get_model_config("simple")
    assert cfg["instance_group"][0]["count"] == 3 and cfg["instance_group"][0]["kind"] == "KIND_CPU"


def test_two_instance_groups(start_server, repo):
    copy_models(repo, "simple")
    set_config_tail(repo, "simple", 'instance_group [ { name: "a" count: 1 kind: KIND_CPU }, { name: "b" count: 2 kind: KIND_CPU } ]')
    s = start_server("--model-repository", repo)
    names = sorted(n for n in thread_names(s.proc.pid) if n.startswith("inst-"))
    assert names == ["inst-a_0", "inst-b_0", "inst-b_1"]


def test_kind_gpu_without_cuda_fails_the_load_with_a_reason(start_server, repo):
    copy_models(repo, "simple", "vlen_scale")
    set_config_tail(repo, "simple", 'instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]')
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(lambda: any(r.get("state") == "UNAVAILABLE" for r in s.index_rows("simple")), what="simple UNAVAILABLE")
    reason = s.index_rows("simple")[0]["reason"]
    assert "KIND_GPU" in reason and "CUDA" in reason, reason
    # Never a silent CPU fallback, and the other model keeps serving.
    s.wait_until(lambda: s.client().is_model_ready("vlen_scale"), what="vlen_scale READY")
    assert not s.client().is_model_ready("simple")


def test_thread_count_parameters(start_server, repo):
    copy_models(repo, "simple", "vlen_scale")
    set_config_tail(repo, "simple", 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
                                    'parameters { key: "inter_op_thread_count" value: { string_value: "1" } }')
    set_config_tail(repo, "vlen_scale", 'parameters { key: "intra_op_thread_count" value: { string_value: "many" } }')
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(lambda: s.client().is_model_ready("simple"), what="simple READY")
    assert simple_infer(s.client()).tolist() == [list(range(1, 17))]
    s.wait_until(lambda: any(r.get("state") == "UNAVAILABLE" for r in s.index_rows("vlen_scale")), what="vlen_scale fails")
    reason = s.index_rows("vlen_scale")[0]["reason"]
    assert "intra_op_thread_count" in reason and "many" in reason, reason


def test_config_tensor_missing_from_model_fails_the_load(start_server, repo):
    copy_models(repo, "simple")
    cfg = repo / "simple" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "OUTPUT1"', 'name: "OUTPUT9"'))
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(lambda: any(r.get("state") == "UNAVAILABLE" for r in s.index_rows("simple")), what="simple fails")
    reason = s.index_rows("simple")[0]["reason"]
    assert "OUTPUT9" in reason and "not an output of the ONNX model" in reason, reason


def test_a_missing_or_wrong_library_is_said_once_with_the_loaders_reason(start_server, repo, tmp_path):
    """Not an ELF file: the loader's own words reach the log once, each ONNX model is UNAVAILABLE with
    a short reason, and the rest of the server serves."""
    copy_models(repo, "simple", "classify_logits", "batched_scale")
    fake = tmp_path / "libonnxruntime.so"
    fake.write_text("not a library")
    s = start_server("--model-repository", repo, "--strict-readiness=false", env={"ORT_DYLIB_PATH": str(fake)})
    s.wait_for_log(r"Server is ready")
    assert s.log.count("could not be loaded, so ONNX models cannot be served") == 1, s.log
    assert f"Tried: {fake} (dlopen failed: {fake}: " in s.log, s.log
    rows = [r for r in s.index() if r["name"] == "simple"]
    assert rows and rows[0]["state"] == "UNAVAILABLE"
    assert "ORT_DYLIB_PATH" in rows[0]["reason"] and f"from {fake} (dlopen failed: " in rows[0]["reason"], rows
    assert s.is_live()


def python_without_onnxruntime(tmp_path: Path) -> str:
    """A PATH whose `python3` (the system's) has no `onnxruntime` package."""
    path = system_python_path(tmp_path, "no-ort-bin")
    if subprocess.run([tmp_path / "no-ort-bin" / "python3", "-c", "import onnxruntime"],
                      capture_output=True).returncode == 0:
        pytest.skip("the system python3 has onnxruntime; this case needs one without it")
    return path


def test_without_ort_dylib_path_the_onnxruntime_package_of_python3_serves(start_server, repo):
    """The binary run directly, as from a second terminal: no ORT_DYLIB_PATH, the .venv's python3 first
    on the PATH (what `source scripts/env.sh` or an activated venv gives)."""
    copy_models(repo, "simple")
    env = {"ORT_DYLIB_PATH": "", "PATH": f"{REPO_ROOT / '.venv' / 'bin'}:/usr/bin:/bin"}
    s = start_server("--model-repository", repo, env=env)
    m = s.wait_for_log(r"ONNX Runtime is loaded from '([^']+)' \(([^)]+)\)")
    assert m[1].endswith(f"onnxruntime/capi/libonnxruntime.so.{ORT_VERSION}"), m[0]
    assert m[2] == "the onnxruntime package of python3 on the PATH", m[0]
    assert simple_infer(s.client()).tolist() == [list(range(1, 17))]


def test_without_python_onnxruntime_the_checkouts_ort_folder_serves(start_server, repo, tmp_path):
    if not (REPO_ROOT / ".ort" / "libonnxruntime.so").exists():
        pytest.skip("no .ort/libonnxruntime.so in this checkout (source scripts/env.sh)")
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, env={"ORT_DYLIB_PATH": "", "PATH": python_without_onnxruntime(tmp_path)})
    m = s.wait_for_log(r"ONNX Runtime is loaded from '([^']+)' \(([^)]+)\)")
    assert m[1] == str(helpers.BIN.resolve().parents[2] / ".ort" / "libonnxruntime.so"), m[0]
    assert ".ort" in m[2] and "scripts/env.sh" in m[2], m[0]
    assert s.index_row("simple")["state"] == "READY"


def test_found_nowhere_the_reason_says_what_to_install(start_server, repo, tmp_path, monkeypatch):
    """The binary outside a checkout (a hard link: no .ort/ above it), no ORT_DYLIB_PATH, a python3
    without onnxruntime: ONNX models are UNAVAILABLE saying what to install; the server serves on."""
    usual = [*Path("/usr/lib").glob("libonnxruntime.so*"), *Path("/usr/local/lib").glob("libonnxruntime.so*"),
             *Path("/usr/lib").glob("*-linux-gnu/libonnxruntime.so*"), *Path("/opt").glob("*/lib/libonnxruntime.so*")]
    if usual:
        pytest.skip(f"this machine has ONNX Runtime installed: {usual[0]}")
    linked = tmp_path / "bin" / "tritonrs"
    linked.parent.mkdir()
    try:
        os.link(helpers.BIN.resolve(), linked)
    except OSError as e:  # another file system: a copy would be hundreds of MB
        pytest.skip(f"cannot hard-link the binary into {tmp_path}: {e}")
    monkeypatch.setattr(helpers, "BIN", linked)
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--strict-readiness=false",
                     env={"ORT_DYLIB_PATH": "", "PATH": python_without_onnxruntime(tmp_path)})
    s.wait_until(s.settled, what="every model settled")
    row = s.index_row("simple")
    assert row["state"] == "UNAVAILABLE", row
    assert f"pip install onnxruntime=={ORT_VERSION}" in row["reason"] and "ORT_DYLIB_PATH" in row["reason"], row
    assert "the server's log lists them" in row["reason"], row
    assert "Tried: " in s.log and "/usr/lib/libonnxruntime.so (not found)" in s.log
    assert s.is_live()
