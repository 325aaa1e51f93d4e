"""Issue 35, `--model-namespacing`: two repositories each hold a model named `add_k` (one adds 1, the
other 2) and an ensemble that uses `add_k`. With namespacing both copies serve, each ensemble reaches
the copy of its own repository, a request naming `add_k` itself is refused (it cannot say which), and
loading or unloading the name acts on both. tritonserver 2.51 runs the same repositories and the
test compares what the two do."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import run_cli

MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + np.float32({k}))])
            for r in requests]
"""

IO = """input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

ENSEMBLE = """platform: "ensemble"
""" + IO + """ensemble_scheduling { step [ {
  model_name: "add_k" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }
"""


def repository(root: Path, k: int) -> Path:
    """A repository with `add_k` (adds k) and the ensemble `ens_<k>` over it."""
    (root / "add_k" / "1").mkdir(parents=True)
    (root / "add_k" / "1" / "model.py").write_text(MODEL.format(k=k))
    (root / "add_k" / "config.pbtxt").write_text('backend: "python"\n' + IO)
    (root / f"ens_{k}" / "1").mkdir(parents=True)
    (root / f"ens_{k}" / "config.pbtxt").write_text(ENSEMBLE)
    return root


def infer(server, model: str) -> tuple[int, object]:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
    r = server.post(f"/v2/models/{model}/infer", json.dumps(body))
    if r.status != 200:
        return r.status, None
    return r.status, r.json()["outputs"][0]["data"]


def rows(server, name: str) -> list[tuple]:
    return sorted((r["name"], r.get("version", ""), r.get("state", "")) for r in server.index() if r["name"] == name)


def repositories(root: Path) -> list[str]:
    return ["--model-repository", str(repository(root / "r1", 1)), "--model-repository",
            str(repository(root / "r2", 2))]


def served(server) -> dict:
    """What a client sees of the two repositories."""
    return {
        "ens_1": infer(server, "ens_1"),
        "ens_2": infer(server, "ens_2"),
        "add_k": infer(server, "add_k")[0],
        "rows": rows(server, "add_k"),
    }


def test_both_copies_serve_and_each_ensemble_uses_its_own(start_server, start_tritonserver, tmp_path):
    ours = served(start_server(*repositories(tmp_path / "ours"), "--model-namespacing=true"))
    assert ours["ens_1"] == (200, [2, 3, 4, 5]) and ours["ens_2"] == (200, [3, 4, 5, 6]), ours
    assert ours["add_k"] == 400, ours
    assert ours["rows"] == [("add_k", "1", "READY")] * 2, ours
    theirs = served(start_tritonserver(*repositories(tmp_path / "theirs"), "--model-namespacing=true"))
    # tritonserver answers the ambiguous name with a 400 too; the rest must be the same.
    assert ours == theirs


def test_an_ambiguous_name_says_why(start_server, tmp_path):
    server = start_server(*repositories(tmp_path), "--model-namespacing=true")
    r = server.post("/v2/models/add_k/infer", json.dumps({"inputs": []}))
    assert r.status == 400 and "2 model repositories" in r.json()["error"], r
    client = server.grpc_client()
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="namespacing"):
        client.get_model_metadata("add_k")
    # The ensembles' statistics are the plain ones, and the server stays up.
    assert server.get("/v2/models/ens_1/stats").status == 200


def test_load_and_unload_act_on_every_copy(start_server, tmp_path):
    server = start_server(*repositories(tmp_path), "--model-namespacing=true", "--model-control-mode=explicit",
                          "--load-model=ens_1", "--load-model=ens_2")
    assert infer(server, "ens_1") == (200, [2, 3, 4, 5])
    assert server.post("/v2/repository/models/add_k/unload", b"{}").status == 200
    server.wait_until(lambda: [s for _, _, s in rows(server, "add_k")] == ["UNAVAILABLE"] * 2,
                      what="both copies unloaded")
    assert infer(server, "ens_2")[0] != 200
    assert server.post("/v2/repository/models/add_k/load", b"{}").status == 200
    assert rows(server, "add_k") == [("add_k", "1", "READY")] * 2
    server.wait_until(lambda: infer(server, "ens_2")[0] == 200, what="ens_2 serving again")
    assert infer(server, "ens_1") == (200, [2, 3, 4, 5]) and infer(server, "ens_2") == (200, [3, 4, 5, 6])


def test_without_namespacing_the_name_is_unavailable(start_server, tmp_path):
    server = start_server(*repositories(tmp_path), wait="live")
    server.wait_until(server.settled, what="settled")
    [row] = server.index_rows("add_k")
    assert row["state"] == "UNAVAILABLE" and "more than one model repository" in row["reason"], row
    assert infer(server, "ens_1")[0] != 200


def test_a_unique_name_resolves_across_repositories(start_server, tmp_path):
    """With namespacing, an ensemble's step whose name only one repository holds uses that model,
    wherever it is."""
    r1, r2 = tmp_path / "r1", repository(tmp_path / "r2", 2)
    (r1 / "ens_x" / "1").mkdir(parents=True)
    (r1 / "ens_x" / "config.pbtxt").write_text(ENSEMBLE)
    server = start_server("--model-repository", str(r1), "--model-repository", str(r2), "--model-namespacing")
    assert infer(server, "ens_x") == (200, [3, 4, 5, 6])
    assert infer(server, "add_k") == (200, [3, 4, 5, 6])
    assert np.array_equal(np.array(infer(server, "ens_2")[1]), np.array([3, 4, 5, 6]))


def test_validate_follows_namespacing(tmp_path):
    """`tritonrs validate` (the unit's ExecStartPre) checks what the server would serve: with
    namespacing each copy and each ensemble against its own repository's copy."""
    args = ["validate", *repositories(tmp_path)]
    r = run_cli(*args, "--model-namespacing=true")
    assert r.returncode == 0, r.stdout + r.stderr
    ok = [line for line in r.stdout.splitlines() if line.startswith("OK ")]
    assert len(ok) == 4 and sum("add_k@" in line for line in ok) == 2, r.stdout
    r = run_cli(*args)
    assert r.returncode != 0 and "more than one model repository" in r.stdout, r.stdout
