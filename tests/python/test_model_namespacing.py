"""--model-namespacing: tritonrs accepts tritonserver 2.51's flag; false (the default) is checked
against tritonserver 2.51 on two repositories sharing model names (Python steps and ensembles of them):
the shared names are UNAVAILABLE in both servers, the unique ones serve. With true both copies serve
and a request cannot name them; test_namespacing.py has the rest of namespacing."""

import json
from pathlib import Path


STEP_PY = '''import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.factor = int(json.loads(args["model_config"])["parameters"]["factor"]["string_value"])

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", (self.factor * pb_utils.get_input_tensor_by_name(r, "X").as_numpy()).astype(np.int32))])
            for r in requests]
'''
IO = '''input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
'''


def step(repo: Path, name: str, factor: int):
    """A Python model: Y = factor * X."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(STEP_PY)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\n{IO}'
        f'parameters {{ key: "factor" value: {{ string_value: "{factor}" }} }}\n')


def ensemble(repo: Path, name: str, of: str):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\n{IO}'
        f'ensemble_scheduling {{ step [ {{ model_name: "{of}" model_version: -1 '
        'input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } } ] }\n')


def two_repositories(tmp: Path) -> tuple[Path, Path]:
    """Both hold `step` (x2 in a, x5 in b) and an ensemble `ens` of it; `only_a` is in a only."""
    a, b = tmp / "a", tmp / "b"
    step(a, "step", 2), ensemble(a, "ens", "step"), step(a, "only_a", 7)
    step(b, "step", 5), ensemble(b, "ens", "step")
    return a, b


def outcome(server, model: str):
    body = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [1]}]}
    r = server.post(f"/v2/models/{model}/infer", json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"})
    return r.status == 200, json.loads(r.body)["outputs"][0]["data"] if r.status == 200 else None


def test_without_namespacing_shared_names_are_unavailable_as_in_tritonserver(tmp_path, start_server,
                                                                             start_tritonserver):
    a, b = two_repositories(tmp_path)
    args = [f"--model-repository={a}", f"--model-repository={b}", "--model-namespacing=false",
            "--strict-readiness=false"]
    ref = start_tritonserver(*args, "--exit-on-error=false")
    expected = {m: outcome(ref, m) for m in ("step", "ens", "only_a")}
    ref.stop()
    assert expected["only_a"] == (True, [7]) and not expected["step"][0], expected
    ours = start_server(*args)
    assert {m: outcome(ours, m) for m in ("step", "ens", "only_a")} == expected


def test_with_namespacing_shared_names_serve_as_in_tritonserver(tmp_path, start_server, start_tritonserver):
    """Both copies of `step` and of `ens` serve, so a request naming either is refused as ambiguous,
    in both servers; `only_a` serves."""
    a, b = two_repositories(tmp_path)
    args = [f"--model-repository={a}", f"--model-repository={b}", "--model-namespacing=true"]
    ref = start_tritonserver(*args)
    expected = {m: outcome(ref, m) for m in ("step", "ens", "only_a")}
    ref.stop()
    assert expected == {"step": (False, None), "ens": (False, None), "only_a": (True, [7])}, expected
    ours = start_server(*args)
    assert {m: outcome(ours, m) for m in ("step", "ens", "only_a")} == expected
    assert sorted(r["state"] for r in ours.index_rows("step")) == ["READY", "READY"]
