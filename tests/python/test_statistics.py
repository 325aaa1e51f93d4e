"""The statistics extension: counts, durations, batch statistics and scoping by model and version.
Each test starts its own server so the counts are exactly what the test did."""

import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES


def simple_inputs(batch=1, dims=16):
    out = []
    for n in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(n, [batch, dims], "INT32")
        i.set_data_from_numpy(np.ones((batch, dims), dtype=np.int32))
        out.append(i)
    return out


def mv_input(batch=1):
    i = httpclient.InferInput("INPUT", [batch, 4], "INT32")
    i.set_data_from_numpy(np.zeros((batch, 4), dtype=np.int32))
    return i


def explicit(start_server, *models):
    args = ["--model-repository", EXAMPLES, "--model-control-mode=explicit"]
    for m in models:
        args += ["--load-model", m]
    return start_server(*args)


def only(stats, name, version):
    rows = [m for m in stats["model_stats"] if m["name"] == name and m["version"] == version]
    assert len(rows) == 1, stats
    return rows[0]


def batch_counts(model_stat):
    return {b["batch_size"]: b["compute_infer"]["count"] for b in model_stat["batch_stats"]}


def test_fresh_model_has_zero_stats(start_server):
    s = explicit(start_server, "simple")
    c = s.client()
    st = c.get_inference_statistics("simple")
    m = only(st, "simple", "1")
    assert m["inference_count"] == 0 and m["execution_count"] == 0
    assert m["last_inference"] == 0
    for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
        assert m["inference_stats"][k] == {"count": 0, "ns": 0}, k
    assert m["batch_stats"] == []  # only batch sizes that ran are listed, as in Triton


def test_counts_after_successful_inferences(start_server):
    s = explicit(start_server, "simple")
    c = s.client()
    n = 5
    t0 = int(time.time() * 1000)
    for _ in range(n):
        c.infer("simple", simple_inputs())
    t1 = int(time.time() * 1000)
    m = only(c.get_inference_statistics("simple"), "simple", "1")
    assert m["inference_count"] == n
    assert m["execution_count"] == n
    inf = m["inference_stats"]
    assert inf["success"]["count"] == n
    assert inf["fail"]["count"] == 0
    for k in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inf[k]["count"] == n, k
    assert inf["success"]["ns"] > 0 and inf["compute_infer"]["ns"] > 0
    # The request's whole duration covers its compute time.
    assert inf["success"]["ns"] >= inf["compute_infer"]["ns"]
    assert t0 - 1000 <= m["last_inference"] <= t1 + 1000, (t0, m["last_inference"], t1)
    assert batch_counts(m) == {1: n}


def test_batch_sizes_are_recorded(start_server):
    s = explicit(start_server, "simple")
    c = s.client()
    c.infer("simple", simple_inputs(batch=1))
    c.infer("simple", simple_inputs(batch=2))
    c.infer("simple", simple_inputs(batch=2))
    c.infer("simple", simple_inputs(batch=8))
    m = only(c.get_inference_statistics("simple"), "simple", "1")
    # A batch of b counts b inferences and one execution (as in Triton).
    assert m["inference_count"] == 1 + 2 + 2 + 8
    assert m["execution_count"] == 4
    assert m["inference_stats"]["success"]["count"] == 4
    assert batch_counts(m) == {1: 1, 2: 2, 8: 1}
    for b in m["batch_stats"]:
        if b["batch_size"] == 2:
            assert b["compute_input"]["count"] == 2 and b["compute_output"]["count"] == 2
            assert b["compute_infer"]["ns"] > 0


def test_failures_are_counted_per_model(start_server):
    s = explicit(start_server, "simple", "vlen_scale")
    c = s.client()
    c.infer("simple", simple_inputs())
    bad = [
        lambda: c.infer("simple", simple_inputs(dims=15)),       # shape mismatch
        lambda: c.infer("simple", simple_inputs(batch=9)),       # batch too large
        lambda: c.infer("simple", simple_inputs()[:1]),          # missing input
    ]
    for f in bad:
        with pytest.raises(InferenceServerException) as e:
            f()
        assert e.value.status() == "400"
    st = c.get_inference_statistics()
    m = only(st, "simple", "1")
    assert m["inference_stats"]["success"]["count"] == 1
    assert m["inference_stats"]["fail"]["count"] == 3
    assert m["inference_count"] == 1 and m["execution_count"] == 1
    assert batch_counts(m) == {1: 1}
    v = only(st, "vlen_scale", "1")
    assert v["inference_stats"]["fail"]["count"] == 0
    assert v["inference_stats"]["success"]["count"] == 0


def test_all_models_and_one_version(start_server):
    s = explicit(start_server, "simple", "multi_version")
    c = s.client()
    c.infer("multi_version", [mv_input()], model_version="2")
    c.infer("multi_version", [mv_input(batch=3)], model_version="2")
    c.infer("multi_version", [mv_input()])  # version 3
    st = c.get_inference_statistics()
    keys = [(m["name"], m["version"]) for m in st["model_stats"]]
    assert keys == [("multi_version", "1"), ("multi_version", "2"), ("multi_version", "3"), ("simple", "1")]
    assert only(st, "multi_version", "1")["inference_count"] == 0
    assert only(st, "multi_version", "2")["inference_count"] == 4
    assert only(st, "multi_version", "2")["execution_count"] == 2
    assert batch_counts(only(st, "multi_version", "2")) == {1: 1, 3: 1}
    assert batch_counts(only(st, "multi_version", "1")) == {}
    assert only(st, "multi_version", "3")["inference_stats"]["success"]["count"] == 1
    # One model: every version of it.
    per_model = c.get_inference_statistics("multi_version")
    assert [m["version"] for m in per_model["model_stats"]] == ["1", "2", "3"]
    assert all(m["name"] == "multi_version" for m in per_model["model_stats"])
    # One version.
    v2 = c.get_inference_statistics("multi_version", "2")
    assert len(v2["model_stats"]) == 1
    assert v2["model_stats"][0]["version"] == "2"
    assert v2["model_stats"][0]["inference_count"] == 4
    # Raw URLs agree.
    assert s.get("/v2/models/multi_version/versions/2/stats").json() == v2
    assert s.get("/v2/models/stats").json()["model_stats"][0]["name"] == "multi_version"


def test_stats_unknown_model_or_version_is_an_error(start_server):
    s = explicit(start_server, "simple")
    c = s.client()
    with pytest.raises(InferenceServerException) as e:
        c.get_inference_statistics("no_such_model")
    assert e.value.status() in ("400", "404")
    assert "no_such_model" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        c.get_inference_statistics("simple", "5")
    assert e.value.status() in ("400", "404")
    r = s.get("/v2/models/simple/versions/xyz/stats")
    assert r.status == 400 and "error" in r.json()


def test_classification_counts_as_success(start_server):
    s = explicit(start_server, "classifier")
    c = s.client()
    x = httpclient.InferInput("INPUT", [2, 4], "FP32")
    x.set_data_from_numpy(np.eye(4, dtype=np.float32)[:2])
    res = c.infer("classifier", [x], outputs=[httpclient.InferRequestedOutput("OUTPUT", class_count=1)])
    assert res.as_numpy("OUTPUT").tolist() == [[b"4.000000:0:cat"], [b"4.000000:1:dog"]]
    m = only(c.get_inference_statistics("classifier"), "classifier", "1")
    assert m["inference_count"] == 2 and m["execution_count"] == 1
    assert m["inference_stats"]["success"]["count"] == 1
