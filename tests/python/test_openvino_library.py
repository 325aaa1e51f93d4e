"""Where the openvino backend finds OpenVINO's C library: `--backend-config=openvino,library=PATH` (or
`backend-config = [...]` in the configuration file), a file or a folder as TRITONRS_OPENVINO_LIB takes,
serves OpenVINO models with no `python3` that has the `openvino` package on the PATH; it wins over
TRITONRS_OPENVINO_LIB as `onnxruntime,library=` wins over ORT_DYLIB_PATH; a wrong one leaves OpenVINO
models UNAVAILABLE with a reason naming it while the others serve. A `python3` that hangs when asked
where `openvino` is does not stall loading. Outputs are compared with OpenVINO's Python runtime."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import openvino
import pytest

from helpers import copy_models
from test_openvino import OV_MODELS, infer, python_without_openvino, reason, reference

# The wheel's folder of libraries (libopenvino_c.so.2641 and its plugins).
OV_LIBS = Path(openvino.__file__).parent / "libs"


def c_library() -> Path:
    (lib,) = sorted(OV_LIBS.glob("libopenvino_c.so*"))
    return lib


def assert_serves_ov_int(s) -> None:
    a = np.array([[1, -2], [7, 40], [0, 3]], dtype=np.int32)
    for protocol in ("http", "grpc"):
        (z,) = infer(s, protocol, "ov_int", {"a": a}, ["z"])
        np.testing.assert_array_equal(z, reference("ov_int", a)[0])


def assert_simple_serves(s) -> None:
    assert s.index_row("simple")["state"] == "READY"
    s.wait_until(lambda: s.get("/v2/models/simple/ready").status == 200, what="simple ready")


def no_openvino_path(tmp_path: Path) -> dict:
    path = python_without_openvino(tmp_path)
    assert os.system(f"PATH={path} python3 -c 'import openvino' 2>/dev/null") != 0, "python3 there has openvino"
    return {"PATH": path}


@pytest.mark.parametrize("how", ["folder-flag", "file-flag", "config-file"])
def test_library_from_backend_config_serves_without_python_openvino(start_server, repo, tmp_path, how):
    copy_models(repo, "ov_int", src=OV_MODELS)
    lib = OV_LIBS if how == "folder-flag" else c_library()
    if how == "config-file":
        cfg = tmp_path / "tritonrs.toml"
        cfg.write_text(f'model-repository = ["{repo}"]\nbackend-config = ["openvino,library={lib}"]\n')
        args = ["--config", cfg]
    else:
        args = ["--model-repository", repo, f"--backend-config=openvino,library={lib}"]
    s = start_server(*args, env=no_openvino_path(tmp_path))
    # The log names the library that serves, the one configured.
    s.wait_for_log(r"OpenVINO 20\d\d\.\d+\S* is loaded from '" + str(c_library()) + "'")
    assert_serves_ov_int(s)


def test_backend_config_wins_over_the_environment_variable(start_server, repo, tmp_path):
    copy_models(repo, "ov_int", src=OV_MODELS)
    env = {**no_openvino_path(tmp_path), "TRITONRS_OPENVINO_LIB": str(tmp_path / "nowhere" / "libopenvino_c.so")}
    s = start_server("--model-repository", repo, f"--backend-config=openvino,library={OV_LIBS}", env=env)
    assert_serves_ov_int(s)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_wrong_library_leaves_openvino_models_unavailable_naming_it(start_server, repo, tmp_path, what):
    copy_models(repo, "ov_int", src=OV_MODELS)
    copy_models(repo, "simple")
    wrong = tmp_path / "no-ov" / ("libopenvino_c.so" if what == "file" else "")
    wrong.parent.mkdir(exist_ok=True)
    # Even with a python3 that has openvino on the PATH (the test's own): the configured path is the
    # only one tried.
    s = start_server("--model-repository", repo, f"--backend-config=openvino,library={wrong}", wait="live")
    s.wait_until(s.settled, what="every model settled")
    why = reason(s, "ov_int")
    assert str(tmp_path / "no-ov") in why and "not found" in why and "--backend-config=openvino,library" in why, why
    assert_simple_serves(s)


def test_a_hanging_python3_does_not_stall_loading(start_server, repo, tmp_path):
    copy_models(repo, "ov_int", src=OV_MODELS)
    copy_models(repo, "simple")
    bindir = tmp_path / "hang-bin"
    bindir.mkdir()
    (bindir / "python3").write_text("#!/bin/sh\nexec sleep 600\n")
    (bindir / "python3").chmod(0o755)
    # No OpenVINO anywhere else: the python3 probe is the last place tried.
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "LD_LIBRARY_PATH": ""}
    s = start_server("--model-repository", repo, wait="live", env=env)
    s.wait_for_log(r"python3 .*did not answer within \d+ s", timeout=30)
    s.wait_until(s.settled, timeout=30, what="every model settled")
    why = reason(s, "ov_int")
    assert "libopenvino_c.so" in why and "pip install openvino" in why, why
    assert_simple_serves(s)
