"""Triton's own Python backend (`libtriton_python.so` of Triton 2.51, from PyPI's nvidia-pytriton 0.7.0
wheel) hosted by tritonrs through the C API, with `--backend-config=python,use-shared-library=true`.
The same models of model-repos/python run through the built-in backend too, and the answers must
agree.

The library lists `libtritonserver-717102f0.so` (auditwheel's name) as NEEDED and finds it through
its RPATH, `$ORIGIN/../../../../nvidia_pytriton.libs`: the test lays the backend out so that this
folder holds tritonrs's own libtritonserver.so under that name (README: "A backend that names a
renamed libtritonserver"). Triton's stub embeds the system interpreter in isolated mode, so it uses
Debian's libpython and python3-numpy (scripts/test.sh installs both)."""

from __future__ import annotations

import importlib.util
import os
import platform
import queue
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from helpers import BIN, REPO_ROOT, TritonServer, copy_models
from test_python_backend import check_model_control, grpc_inputs, http_inputs

PYTHON_REPO = REPO_ROOT / "model-repos" / "python"
SYSTEM_PYTHON = "/usr/bin/python3"
A = np.array([10, 20, 30, 40], np.float32)
B = np.array([1, 2, 3, 4], np.float32)
MODELS = ("add_sub", "add_sub_auto", "bls_sync", "bls_async", "bls_decoupled", "repeat", "custom_metrics", "identity")


def _system_python() -> tuple[str, Path] | None:
    """The system interpreter's version and its shared libpython, which Triton's stub links."""
    if not os.path.exists(SYSTEM_PYTHON):
        return None
    out = subprocess.run([SYSTEM_PYTHON, "-c", "import sys, sysconfig; print(f'{sys.version_info[0]}.{sys.version_info[1]}'); "
                          "print(sysconfig.get_config_var('LIBDIR')); import numpy"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    version, libdir = out.stdout.split()
    lib = Path(libdir) / f"libpython{version}.so.1.0"
    return (version, lib) if lib.exists() else None


@pytest.fixture(scope="module")
def backends(tmp_path_factory) -> Path:
    """The backend directory scripts/pytriton-backend.py lays out: Triton's libtriton_python.so, its
    stub for the system Python, and the wheel's libraries with tritonrs's libtritonserver.so in place of
    Triton's."""
    if platform.machine() != "x86_64":
        pytest.skip("the nvidia-pytriton wheel is built for x86_64")
    sysinfo = _system_python()
    if sysinfo is None:
        pytest.skip("needs Debian's python3 with python3-numpy and libpython3.X (scripts/test.sh installs them)")
    stub_lib = BIN.parent / "libtritonserver.so"
    assert stub_lib.is_file(), f"{stub_lib} was not built (build.rs builds it next to the binary)"
    spec = importlib.util.spec_from_file_location("pytriton_backend", REPO_ROOT / "scripts" / "pytriton-backend.py")
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    return layout.lay_out(tmp_path_factory.mktemp("pytriton"), layout.fetch_wheel(), stub_lib, sysinfo[0])


@pytest.fixture(scope="module")
def servers(backends, tmp_path_factory):
    """(hosted, built-in): the same models through Triton's library and through tritonrs's backend."""
    repo = copy_models(tmp_path_factory.mktemp("repo"), *MODELS, src=PYTHON_REPO)
    hosted = TritonServer(["--model-repository", repo, "--backend-directory", backends,
                           "--backend-config=python,use-shared-library=true", "--allow-metrics=true", "--metrics-port", "0"],
                          name="hosted").start(timeout=120)
    builtin = TritonServer(["--model-repository", repo, f"--backend-config=python,python-executable={sys.executable}"],
                           name="builtin").start(timeout=120)
    yield hosted, builtin
    hosted.stop()
    builtin.stop()


def outputs(result, *names):
    return {n: result.as_numpy(n).tolist() for n in names}


def test_models_are_served_by_tritons_library(servers, backends):
    hosted, _ = servers
    index = {m["name"]: m for m in hosted.client().get_model_repository_index()}
    lib = str(backends / "python" / "libtriton_python.so")
    for name in MODELS:
        assert index[name]["state"] == "READY", index[name]
        assert index[name]["reason"] == f"served by {lib}"
    assert hosted.wait_for_log(r"Model 'add_sub' version 1 is READY \(loaded in [0-9.]+ ms, served by (\S+)\)").group(1) == lib
    assert "python_be.cc" in hosted.log, "Triton's backend logs into tritonrs's log"


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_add_sub_agrees_with_the_builtin_backend(servers, proto):
    got = []
    for s in servers:
        if proto == "http":
            r = s.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
        else:
            r = s.grpc_client().infer("add_sub", grpc_inputs(INPUT0=A, INPUT1=B))
        got.append(outputs(r, "OUTPUT0", "OUTPUT1"))
    assert got[0] == got[1] == {"OUTPUT0": [11, 22, 33, 44], "OUTPUT1": [9, 18, 27, 36]}


def test_auto_complete_config_runs_in_tritons_backend(servers):
    # add_sub_auto has no config.pbtxt: its model.py's auto_complete_config declares everything, run by
    # Triton's library through TRITONBACKEND_ModelSetConfig in one server and by tritonrs's in the other.
    configs = [s.client().get_model_config("add_sub_auto") for s in servers]
    for cfg in configs:
        assert sorted(i["name"] for i in cfg["input"]) == ["INPUT0", "INPUT1"], cfg
        assert sorted(o["name"] for o in cfg["output"]) == ["OUTPUT0", "OUTPUT1"], cfg
    got = [outputs(s.client().infer("add_sub_auto", http_inputs(INPUT0=A[None], INPUT1=B[None])), "OUTPUT0", "OUTPUT1")
           for s in servers]
    assert got[0] == got[1]


def test_bls_sync_and_async_agree_with_the_builtin_backend(servers):
    hosted, builtin = servers
    for model, want1 in (("bls_sync", [9, 18, 27, 36]), ("bls_async", [-9, -18, -27, -36])):
        got = [outputs(s.client().infer(model, http_inputs(INPUT0=A, INPUT1=B)), "OUTPUT0", "OUTPUT1")
               for s in (hosted, builtin)]
        assert got[0] == got[1] == {"OUTPUT0": [11, 22, 33, 44], "OUTPUT1": want1}, model
    # The BLS request went through add_sub's scheduler and statistics in tritonrs.
    stats = hosted.client().get_inference_statistics("add_sub")["model_stats"][0]
    assert stats["inference_count"] >= 2


def test_bls_error_is_a_response_error(servers):
    from tritonclient.utils import InferenceServerException

    for s in servers:
        with pytest.raises(InferenceServerException) as e:
            s.client().infer("bls_sync", http_inputs(INPUT0=A, INPUT1=B), parameters={"target": "missing"})
        assert "'missing'" in e.value.message()


def test_bls_to_a_decoupled_model(servers):
    for s in servers:
        r = s.client().infer("bls_decoupled", http_inputs(IN=np.array([1, 2, 3, 4], np.int32)))
        assert (int(r.as_numpy("SUM")[0]), int(r.as_numpy("COUNT")[0])) == (10, 4)


def test_decoupled_repeat_streams_as_the_builtin_backend_does(servers):
    answers = []
    for s in servers:
        q: queue.Queue = queue.Queue()
        c = s.grpc_client()
        c.start_stream(callback=lambda result, error: q.put((result, error)))
        i = grpcclient.InferInput("IN", [3], "INT32")
        i.set_data_from_numpy(np.array([5, 6, 7], np.int32))
        c.async_stream_infer("repeat", [i], request_id="r", enable_empty_final_response=True)
        got = []
        while True:
            result, error = q.get(timeout=30)
            assert error is None, error
            resp = result.get_response()
            final = resp.parameters["triton_final_response"].bool_param
            got.append((None if not resp.outputs else int(result.as_numpy("OUT")[0]), final))
            if final:
                break
        c.stop_stream()
        answers.append(got)
    assert answers[0] == answers[1] == [(5, False), (6, False), (7, False), (None, True)]


def test_custom_metrics_reach_tritonrs_metrics(servers):
    hosted, _ = servers
    port = int(hosted.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    c = hosted.client()
    counts = [float(c.infer("custom_metrics", http_inputs(X=np.array(x, np.float32))).as_numpy("COUNT")[0])
              for x in ([0.5, 2.0], [7.0], [20.0, 1.0])]
    assert counts == [1, 2, 3]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode().splitlines()
    labels = 'model="custom_metrics",version="1"'
    for line in ["# TYPE example_requests_total counter", f"example_requests_total{{{labels}}} 3",
                 f"example_last_input_sum{{{labels}}} 21", "# TYPE example_input_values histogram",
                 f'example_input_values_bucket{{{labels},le="5"}} 3', f"example_input_values_count{{{labels}}} 5",
                 f"example_input_values_sum{{{labels}}} 30.5"]:
        assert line in text, line


def test_a_model_loads_and_unloads_another(backends, tmp_path):
    repo = copy_models(tmp_path / "repo", "model_control", "add_sub", src=PYTHON_REPO)
    s = TritonServer(["--model-repository", repo, "--backend-directory", backends,
                      "--backend-config=python,use-shared-library=true", "--model-control-mode=explicit",
                      "--load-model=model_control"], name="hosted-control").start(timeout=120)
    try:
        # Not the failed load of a missing model afterwards: Triton 2.51's libtriton_python.so aborts the
        # process (boost::interprocess::lock_exception) on a model-control request that follows the
        # unload of a model its stub served, inside tritonserver 2.51 itself too (README, "Differences").
        check_model_control(s.client(), load_missing=False)
    finally:
        s.stop()
