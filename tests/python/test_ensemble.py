"""Ensembles (`platform: "ensemble"`), driven by the official tritonclient over HTTP and gRPC: the
example `ensemble_classify` (preprocess -> classify_logits) against its steps called by hand,
classification with the ensemble's own labels, metadata and configuration, statistics of the ensemble
and of its composing models, broken ensembles that are UNAVAILABLE with a reason while the rest
serve, readiness that follows the composing models (explicit and poll mode), and a failing step."""

import os
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES, copy_models

ENSEMBLE = "ensemble_classify"
COMPOSING = ("preprocess", "classify_logits")
LABELS = ["cat", "dog", "bird", "fish", "horse"]
# Raw readings of 1 and 3 normalise to the 0 and 1 the classify weights expect: one row per class.
RAW = np.array([[3, 1, 1, 1], [1, 3, 1, 1], [1, 1, 1, 3], [2.5, 0, 4, -1]], dtype=np.float32)
POLL_TIMEOUT = 15


def infer_input(module, name, x):
    i = module.InferInput(name, list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i


def by_hand(client, module, x):
    """preprocess, then classify_logits, each called as its own model."""
    norm = client.infer("preprocess", [infer_input(module, "RAW", x)]).as_numpy("NORMALIZED")
    scores = client.infer("classify_logits", [infer_input(module, "FEATURES", norm)]).as_numpy("LOGITS")
    return norm, scores


def stats_of(client, name):
    [m] = client.get_inference_statistics(name)["model_stats"]
    return m


def ensemble_config(name, steps, inputs='{ name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] }',
                    outputs='{ name: "OUT" data_type: TYPE_FP32 dims: [ 5 ] }'):
    """An ensemble config.pbtxt; steps: (model, {model input: tensor}, {model output: tensor})."""
    def maps(kind, pairs):
        return " ".join(f'{kind} {{ key: "{k}" value: "{v}" }}' for k, v in pairs.items())

    body = ",\n".join(f'{{ model_name: "{m}" model_version: -1 {maps("input_map", i)} {maps("output_map", o)} }}'
                      for m, i, o in steps)
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 4\ninput [ {inputs} ]\noutput [ {outputs} ]\n'
            f"ensemble_scheduling {{ step [\n{body}\n] }}\n")


def write_ensemble(repo, name, text):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text)


def row(server, name):
    rows = server.index_rows(name)
    assert len(rows) == 1, rows
    return rows[0]


# ---- inference -------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_gives_the_same_outputs_as_its_steps_by_hand(examples_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    c = examples_server.client() if protocol == "http" else examples_server.grpc_client()
    try:
        r = c.infer(ENSEMBLE, [infer_input(module, "INPUT", RAW)], request_id="req-7")
        norm, scores = by_hand(c, module, RAW)
        np.testing.assert_array_equal(r.as_numpy("NORMALIZED"), norm)
        np.testing.assert_array_equal(r.as_numpy("SCORES"), scores)
        assert r.as_numpy("SCORES").shape == (4, 5) and r.as_numpy("SCORES").dtype == np.float32
        # The classifier's weights: one-hot features select their class.
        assert [LABELS[i] for i in np.argmax(r.as_numpy("SCORES")[:3], axis=1)] == ["cat", "dog", "fish"]
        response = r.get_response()
        if protocol == "http":
            assert response["model_name"] == ENSEMBLE and response["model_version"] == "1"
            assert response["id"] == "req-7"
        else:
            assert response.model_name == ENSEMBLE and response.model_version == "1" and response.id == "req-7"
    finally:
        c.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_classification_uses_the_ensembles_labels(examples_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    c = examples_server.client() if protocol == "http" else examples_server.grpc_client()
    try:
        out = module.InferRequestedOutput("SCORES", class_count=2)
        r = c.infer(ENSEMBLE, [infer_input(module, "INPUT", RAW[:2])], outputs=[out])
        assert r.as_numpy("SCORES").tolist() == [[b"4.000000:0:cat", b"3.000000:4:horse"],
                                                 [b"4.000000:1:dog", b"3.000000:4:horse"]]
        assert r.as_numpy("NORMALIZED") is None, "only the requested output comes back"
        # classify_logits has no label file of its own: the labels come from the ensemble's output.
        norm = c.infer("preprocess", [infer_input(module, "RAW", RAW[:1])]).as_numpy("NORMALIZED")
        out = module.InferRequestedOutput("LOGITS", class_count=1)
        r = c.infer("classify_logits", [infer_input(module, "FEATURES", norm)], outputs=[out])
        assert r.as_numpy("LOGITS").tolist() == [[b"4.000000:0"]]
    finally:
        c.close()


def test_concurrent_requests_each_get_their_own_answer(examples_server):
    c = examples_server.client(concurrency=8)
    try:
        rows = [RAW[i % 4: i % 4 + 1] + i for i in range(16)]
        pending = [c.async_infer(ENSEMBLE, [infer_input(httpclient, "INPUT", x)]) for x in rows]
        for x, p in zip(rows, pending):
            norm = (x - 1) * 0.5
            np.testing.assert_array_equal(p.get_result().as_numpy("NORMALIZED"), norm)
    finally:
        c.close()


def test_bad_requests_are_checked_against_the_ensemble(examples_server, client):
    bad = httpclient.InferInput("INPUT", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer(ENSEMBLE, [bad])
    assert e.value.status() == "400" and ENSEMBLE in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.infer(ENSEMBLE, [infer_input(httpclient, "INPUT", np.zeros((5, 4), np.float32))])
    assert e.value.status() == "400" and "batch-size must be <= 4" in e.value.message()
    # An intermediate tensor is not an output of the ensemble.
    with pytest.raises(InferenceServerException) as e:
        client.infer(ENSEMBLE, [infer_input(httpclient, "INPUT", RAW[:1])],
                     outputs=[httpclient.InferRequestedOutput("LOGITS")])
    assert e.value.status() == "400" and "LOGITS" in e.value.message()


# ---- metadata and configuration --------------------------------------------------------------


def test_metadata_and_config_http(examples_server, client):
    md = client.get_model_metadata(ENSEMBLE)
    assert md == {
        "name": ENSEMBLE,
        "versions": ["1"],
        "platform": "ensemble",
        "inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "SCORES", "datatype": "FP32", "shape": [-1, 5]},
                    {"name": "NORMALIZED", "datatype": "FP32", "shape": [-1, 4]}],
    }
    cfg = client.get_model_config(ENSEMBLE)
    assert cfg["platform"] == "ensemble" and cfg["backend"] == "" and cfg["max_batch_size"] == 4
    # As Triton prints an ensemble: no instances, no optimization, a non-decoupled transaction policy.
    assert cfg["instance_group"] == [] and "optimization" not in cfg
    assert cfg["model_transaction_policy"] == {"decoupled": False}
    assert cfg["output"][0]["label_filename"] == "labels.txt"
    steps = cfg["ensemble_scheduling"]["step"]
    assert [(s["model_name"], s["model_version"], s["input_map"], s["output_map"]) for s in steps] == [
        ("preprocess", -1, {"RAW": "INPUT"}, {"NORMALIZED": "NORMALIZED"}),
        ("classify_logits", -1, {"FEATURES": "NORMALIZED"}, {"LOGITS": "SCORES"}),
    ]
    assert client.is_model_ready(ENSEMBLE)


def test_metadata_and_config_grpc(examples_server):
    c = examples_server.grpc_client()
    try:
        md = c.get_model_metadata(ENSEMBLE)
        assert md.platform == "ensemble" and list(md.versions) == ["1"]
        assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [("INPUT", "FP32", [-1, 4])]
        assert [t.name for t in md.outputs] == ["SCORES", "NORMALIZED"]
        cfg = c.get_model_config(ENSEMBLE).config
        assert cfg.platform == "ensemble" and len(cfg.instance_group) == 0
        assert [s.model_name for s in cfg.ensemble_scheduling.step] == list(COMPOSING)
        assert dict(cfg.ensemble_scheduling.step[0].input_map) == {"RAW": "INPUT"}
    finally:
        c.close()


# ---- statistics ------------------------------------------------------------------------------


def test_statistics_of_the_ensemble_and_its_composing_models(start_server):
    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", ENSEMBLE)
    c = s.client()
    n = 3
    for _ in range(n):
        c.infer(ENSEMBLE, [infer_input(httpclient, "INPUT", RAW[:2])])
    ens, pre, cls = (stats_of(c, m) for m in (ENSEMBLE, *COMPOSING))
    inf = ens["inference_stats"]
    # Triton counts each ensemble request as one execution, with its steps' compute times summed.
    assert inf["success"]["count"] == n and inf["fail"]["count"] == 0
    assert ens["execution_count"] == n and ens["inference_count"] == 2 * n
    assert inf["queue"]["count"] == n and inf["compute_infer"]["count"] == n
    for k in ("compute_input", "compute_infer", "compute_output"):
        parts = pre["inference_stats"][k]["ns"] + cls["inference_stats"][k]["ns"]
        assert inf[k]["ns"] == parts, (k, inf[k], parts)
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in ens["batch_stats"]] == [(2, n)]
    assert ens["last_inference"] > 0
    # Each step is an ordinary request on its composing model.
    for m in (pre, cls):
        assert m["inference_stats"]["success"]["count"] == n
        assert m["execution_count"] == n and m["inference_count"] == 2 * n

    # Asking for the intermediate output only runs the step that makes it (Triton prunes the rest).
    c.infer(ENSEMBLE, [infer_input(httpclient, "INPUT", RAW[:1])],
            outputs=[httpclient.InferRequestedOutput("NORMALIZED")])
    assert stats_of(c, "preprocess")["inference_stats"]["success"]["count"] == n + 1
    assert stats_of(c, "classify_logits")["inference_stats"]["success"]["count"] == n
    assert stats_of(c, ENSEMBLE)["inference_stats"]["success"]["count"] == n + 1

    # A request the ensemble refuses counts as a failure of the ensemble only.
    with pytest.raises(InferenceServerException):
        c.infer(ENSEMBLE, [infer_input(httpclient, "INPUT", np.zeros((1, 3), np.float32))])
    assert stats_of(c, ENSEMBLE)["inference_stats"]["fail"]["count"] == 1
    assert stats_of(c, "preprocess")["inference_stats"]["fail"]["count"] == 0

    g = s.grpc_client()
    try:
        [m] = g.get_inference_statistics(ENSEMBLE).model_stats
        assert m.execution_count == n + 1 and m.inference_stats.success.count == n + 1
        assert m.inference_stats.fail.count == 1
    finally:
        g.close()


# ---- a failing step --------------------------------------------------------------------------


def test_a_step_that_refuses_its_input_fails_the_ensemble_with_400(start_server, repo):
    copy_models(repo, "preprocess")
    # The ensemble takes any length; preprocess only 4: a wrong length passes the ensemble and fails
    # in its first step.
    write_ensemble(repo, "any_length", ensemble_config(
        "any_length", [("preprocess", {"RAW": "INPUT"}, {"NORMALIZED": "OUT"})],
        inputs='{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] }',
        outputs='{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }'))
    s = start_server("--model-repository", repo)
    c = s.client()
    r = c.infer("any_length", [infer_input(httpclient, "INPUT", RAW[:1])])
    np.testing.assert_array_equal(r.as_numpy("OUT"), (RAW[:1] - 1) * 0.5)
    with pytest.raises(InferenceServerException) as e:
        c.infer("any_length", [infer_input(httpclient, "INPUT", np.zeros((1, 3), np.float32))])
    assert e.value.status() == "400", e.value
    msg = e.value.message()
    assert msg.startswith("in ensemble 'any_length', ") and "'RAW'" in msg and "preprocess" in msg, msg
    g = s.grpc_client()
    try:
        with pytest.raises(InferenceServerException) as e:
            g.infer("any_length", [infer_input(grpcclient, "INPUT", np.zeros((1, 3), np.float32))])
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "in ensemble 'any_length'" in e.value.message()
    finally:
        g.close()
    assert stats_of(c, "any_length")["inference_stats"]["fail"]["count"] == 2
    assert stats_of(c, "any_length")["inference_stats"]["success"]["count"] == 1


# ---- broken ensembles ------------------------------------------------------------------------

BROKEN = {
    "ens_cycle": (
        [("preprocess", {"RAW": "b"}, {"NORMALIZED": "a"}),
         ("preprocess", {"RAW": "a"}, {"NORMALIZED": "b"}),
         ("classify_logits", {"FEATURES": "INPUT"}, {"LOGITS": "OUT"})],
        ["cycle", "writes 'a', read by step 1"],
    ),
    "ens_unknown": (
        [("no_such_model", {"RAW": "INPUT"}, {"NORMALIZED": "x"}),
         ("classify_logits", {"FEATURES": "x"}, {"LOGITS": "OUT"})],
        ["no_such_model", "not available"],
    ),
    "ens_unmapped": (
        [("preprocess", {"RAW": "INPUT"}, {"NORMALIZED": "x"}),
         ("classify_logits", {"FEATURES": "nowhere"}, {"LOGITS": "OUT"})],
        ["'nowhere'", "no ensemble input or step output provides"],
    ),
    "ens_bad_tensor": (
        [("preprocess", {"NOPE": "INPUT"}, {"NORMALIZED": "x"}),
         ("classify_logits", {"FEATURES": "x"}, {"LOGITS": "OUT"})],
        ["'NOPE'", "preprocess", "no such input"],
    ),
}


def broken_repo(repo):
    copy_models(repo, *COMPOSING, ENSEMBLE)
    for name, (steps, _) in BROKEN.items():
        write_ensemble(repo, name, ensemble_config(name, steps))
    return repo


def test_broken_ensembles_are_unavailable_while_the_rest_serve(start_server, repo):
    s = start_server("--model-repository", broken_repo(repo), wait="live")
    c = s.client()
    s.wait_until(lambda: all(row(s, n).get("state") == "UNAVAILABLE" for n in BROKEN) and c.is_model_ready(ENSEMBLE),
                 what="broken ensembles settled")
    for name, (_, words) in BROKEN.items():
        r = row(s, name)
        assert r["state"] == "UNAVAILABLE", r
        for w in words:
            assert w in r["reason"], (name, r["reason"])
        assert c.is_model_ready(name) is False
        with pytest.raises(InferenceServerException):
            c.infer(name, [infer_input(httpclient, "INPUT", RAW[:1])])
    r = c.infer(ENSEMBLE, [infer_input(httpclient, "INPUT", RAW[:1])])
    assert r.as_numpy("SCORES").tolist() == [[4.0, 1.0, 0.5, 0.25, 3.0]]
    assert s.get("/v2/health/ready").status != 200, "strict readiness counts the broken models"


def test_loading_a_broken_ensemble_explains_why(start_server, repo):
    s = start_server("--model-repository", broken_repo(repo), "--model-control-mode=explicit")
    c = s.client()
    for name, (_, words) in BROKEN.items():
        with pytest.raises(InferenceServerException) as e:
            c.load_model(name)
        assert e.value.status() == "400", (name, e.value)
        for w in words:
            assert w in e.value.message(), (name, e.value.message())
        assert c.is_model_ready(name) is False
    # A broken ensemble does not take its composing models down with it.
    assert c.is_model_ready("preprocess") and c.is_model_ready("classify_logits")


# ---- readiness follows the composing models --------------------------------------------------


def index_states(server, *names):
    return {n: row(server, n).get("state") for n in names}


def test_explicit_loading_an_ensemble_loads_its_composing_models(start_server):
    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit")
    c = s.client()
    assert not any(c.is_model_ready(m) for m in (ENSEMBLE, *COMPOSING))
    c.load_model(ENSEMBLE)
    assert all(c.is_model_ready(m) for m in (ENSEMBLE, *COMPOSING))
    assert index_states(s, "classifier", "simple") == {"classifier": None, "simple": None}, "nothing else loads"
    x = infer_input(httpclient, "INPUT", RAW[:1])
    assert c.infer(ENSEMBLE, [x]).as_numpy("SCORES").tolist() == [[4.0, 1.0, 0.5, 0.25, 3.0]]

    # Unloading a composing model takes the ensemble down, as in Triton.
    c.unload_model("classify_logits")
    assert c.is_model_ready(ENSEMBLE) is False
    r = row(s, ENSEMBLE)
    assert r["state"] == "UNAVAILABLE" and "classify_logits" in r["reason"], r
    with pytest.raises(InferenceServerException) as e:
        c.infer(ENSEMBLE, [x])
    assert e.value.status() == "503" and ENSEMBLE in e.value.message(), e.value
    assert "classify_logits" in e.value.message(), "the error says why"
    assert c.is_model_ready("preprocess")

    # Loading it again brings the ensemble back.
    c.load_model("classify_logits")
    assert c.is_model_ready(ENSEMBLE)
    assert c.infer(ENSEMBLE, [x]).as_numpy("SCORES").tolist() == [[4.0, 1.0, 0.5, 0.25, 3.0]]

    # Unloading the ensemble leaves its composing models serving.
    c.unload_model(ENSEMBLE)
    assert c.is_model_ready(ENSEMBLE) is False
    assert all(c.is_model_ready(m) for m in COMPOSING)
    # ... and loading a composing model does not bring an ensemble unloaded on purpose back.
    c.load_model("preprocess")
    assert c.is_model_ready(ENSEMBLE) is False


def test_explicit_load_of_an_ensemble_retries_a_composing_model_that_failed(start_server, repo):
    copy_models(repo, *COMPOSING, ENSEMBLE)
    good = (repo / "preprocess" / "config.pbtxt").read_text()
    (repo / "preprocess" / "config.pbtxt").write_text(good.replace("max_batch_size: 8", "max_batch_size: -1"))
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    c = s.client()
    with pytest.raises(InferenceServerException) as e:
        c.load_model(ENSEMBLE)
    assert "preprocess" in e.value.message() and "max_batch_size" in e.value.message(), e.value.message()
    assert c.is_model_ready(ENSEMBLE) is False
    (repo / "preprocess" / "config.pbtxt").write_text(good)
    c.load_model(ENSEMBLE)
    assert c.is_model_ready(ENSEMBLE) and c.is_model_ready("preprocess")


def add_atomically(repo, staging, name):
    shutil.copytree(EXAMPLES / name, staging / name)
    os.rename(staging / name, repo / name)


def test_poll_mode_ensemble_waits_for_its_composing_model(start_server, tmp_path):
    repo = copy_models(tmp_path / "repo", "classify_logits", ENSEMBLE)
    staging = tmp_path / "staging"
    staging.mkdir()
    s = start_server("--model-repository", repo, "--model-control-mode=poll", "--repository-poll-secs=1",
                     "--strict-readiness=false")
    c = s.client()
    r = row(s, ENSEMBLE)
    assert r["state"] == "UNAVAILABLE" and "preprocess" in r["reason"], r
    assert c.is_model_ready(ENSEMBLE) is False

    add_atomically(repo, staging, "preprocess")
    s.wait_until(lambda: c.is_model_ready(ENSEMBLE), timeout=POLL_TIMEOUT, what="ensemble READY")
    x = infer_input(httpclient, "INPUT", RAW[:1])
    assert c.infer(ENSEMBLE, [x]).as_numpy("SCORES").tolist() == [[4.0, 1.0, 0.5, 0.25, 3.0]]

    shutil.rmtree(repo / "preprocess")
    s.wait_until(lambda: not c.is_model_ready(ENSEMBLE), timeout=POLL_TIMEOUT, what="ensemble down")
    assert "preprocess" in row(s, ENSEMBLE)["reason"]
    assert c.is_model_ready("classify_logits")

    add_atomically(repo, staging, "preprocess")
    s.wait_until(lambda: c.is_model_ready(ENSEMBLE), timeout=POLL_TIMEOUT, what="ensemble back")
    assert c.infer(ENSEMBLE, [x]).as_numpy("SCORES").tolist() == [[4.0, 1.0, 0.5, 0.25, 3.0]]


def test_ensembles_of_ensembles_and_circular_ones(start_server, repo):
    copy_models(repo, *COMPOSING, ENSEMBLE)
    # outer runs ensemble_classify as a step.
    write_ensemble(repo, "outer", ensemble_config(
        "outer", [(ENSEMBLE, {"INPUT": "INPUT"}, {"SCORES": "OUT"})]))
    # loop_a and loop_b contain each other.
    write_ensemble(repo, "loop_a", ensemble_config("loop_a", [("loop_b", {"INPUT": "INPUT"}, {"OUT": "OUT"})]))
    write_ensemble(repo, "loop_b", ensemble_config("loop_b", [("loop_a", {"INPUT": "INPUT"}, {"OUT": "OUT"})]))
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    c = s.client()
    c.load_model("outer")
    assert all(c.is_model_ready(m) for m in ("outer", ENSEMBLE, *COMPOSING))
    r = c.infer("outer", [infer_input(httpclient, "INPUT", RAW[:2])])
    assert r.as_numpy("OUT").tolist()[1] == [0.5, 4.0, 2.0, 0.25, 3.0]
    with pytest.raises(InferenceServerException) as e:
        c.load_model("loop_a")
    assert "circular" in e.value.message(), e.value.message()
    assert c.is_model_ready("loop_a") is False and c.is_model_ready("loop_b") is False
    # The server stays responsive after refusing the circle.
    assert c.is_model_ready("outer")


def test_validate_checks_ensembles_against_their_composing_models(repo):
    from helpers import run_cli

    broken_repo(repo)
    r = run_cli("validate", "--model-repository", str(repo))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = dict(line[6:].split(": ", 1) if line.startswith("FAIL") else (line[6:], "") for line in r.stdout.splitlines())
    assert set(lines) == {*BROKEN, *COMPOSING, ENSEMBLE}, r.stdout
    for name in (*COMPOSING, ENSEMBLE):
        assert f"OK    {name}" in r.stdout.splitlines()
    for name, (_, words) in BROKEN.items():
        if name == "ens_unknown":
            words = ["no_such_model", "not in the model repositories"]
        for w in words:
            assert w in lines[name], (name, lines[name])


def test_non_batching_ensemble_over_batching_models(start_server, repo):
    copy_models(repo, "preprocess")
    # The ensemble takes a single [4] vector; preprocess batches: the step gets a batch of 1 and the
    # ensemble answers without the batch dimension, as Triton converts between the two.
    text = ensemble_config("single", [("preprocess", {"RAW": "INPUT"}, {"NORMALIZED": "OUT"})],
                           outputs='{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }')
    write_ensemble(repo, "single", text.replace("max_batch_size: 4", "max_batch_size: 0"))
    s = start_server("--model-repository", repo)
    c = s.client()
    r = c.infer("single", [infer_input(httpclient, "INPUT", RAW[0])])
    assert r.as_numpy("OUT").tolist() == [1.0, 0.0, 0.0, 0.0]
    assert c.get_model_metadata("single")["inputs"][0]["shape"] == [4]
    assert stats_of(c, "preprocess")["inference_count"] == 1
