"""The model repository extension (index, load, unload, config and file overrides), control modes,
version policies, duplicate model names and auto-complete switches."""

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLE_MODELS, EXAMPLES, copy_models


def vlen_infer(c, name="vlen_scale", values=(1.0, -2.5, 3.25), version=""):
    x = np.array([values], dtype=np.float32)
    i = httpclient.InferInput("INPUT", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return c.infer(name, [i], model_version=version).as_numpy("OUTPUT")


def simple_infer(c, batch=1, name="simple"):
    ins = []
    for n in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(n, [batch, 16], "INT32")
        i.set_data_from_numpy(np.full((batch, 16), 3, dtype=np.int32))
        ins.append(i)
    return c.infer(name, ins).as_numpy("OUTPUT0")


def mv_infer(c, version="", name="multi_version"):
    i = httpclient.InferInput("INPUT", [1, 4], "INT32")
    i.set_data_from_numpy(np.array([[0, 1, 2, 3]], dtype=np.int32))
    return c.infer(name, [i], model_version=version).as_numpy("OUTPUT").tolist()


def states(index, name):
    # Triton leaves "reason" out when it is empty.
    return {row.get("version"): (row.get("state"), row.get("reason", "")) for row in index if row["name"] == name}


def wait_settled(server, names, timeout=20):
    """Waits until every model in `names` is in the index and no row is LOADING/UNLOADING (or not yet
    tried); returns the index."""
    def settled():
        idx = server.index()
        if set(names) - {r["name"] for r in idx}:
            return None
        return idx if all(r.get("state") in ("READY", "UNAVAILABLE") for r in idx) else None

    return server.wait_until(settled, timeout=timeout, what="all models settled")


# ---- repository index ------------------------------------------------------------------------


def test_index_lists_every_model_version(examples_server, client):
    idx = client.get_model_repository_index()
    rows = sorted((r["name"], r["version"], r["state"], r.get("reason", "")) for r in idx)
    expect = sorted([(m, "1", "READY", "") for m in EXAMPLE_MODELS if m != "multi_version"]
                    + [("multi_version", v, "READY", "") for v in ("1", "2", "3")])
    assert rows == expect


def test_index_ready_filter(examples_server):
    r = examples_server.post("/v2/repository/index", {"ready": True})
    assert r.status == 200
    # One row per model version: multi_version has three.
    versions = len(EXAMPLE_MODELS) + 2
    assert len(r.json()) == versions and all(row["state"] == "READY" for row in r.json())
    r = examples_server.post("/v2/repository/index", {"ready": "yes"})
    assert r.status == 400 and "ready" in r.json()["error"]
    r = examples_server.post("/v2/repository/index", b"")
    assert r.status == 200 and len(r.json()) == versions


def test_load_in_mode_none_is_refused(examples_server, client):
    for f in (lambda: client.load_model("simple"), lambda: client.unload_model("simple")):
        with pytest.raises(InferenceServerException) as e:
            f()
        assert e.value.status() != "200"
        assert "not allowed" in e.value.message()
        assert "none" in e.value.message()
    assert client.is_model_ready("simple")
    assert simple_infer(client).tolist() == [[6] * 16]


# ---- explicit mode --------------------------------------------------------------------------


@pytest.fixture
def explicit_server(start_server):
    return start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", "simple")


def test_explicit_only_load_model_is_ready(explicit_server):
    c = explicit_server.client()
    idx = c.get_model_repository_index()
    assert states(idx, "simple") == {"1": ("READY", "")}
    names = sorted({r["name"] for r in idx})
    assert names == sorted(EXAMPLE_MODELS)
    for m in EXAMPLE_MODELS:
        if m != "simple":
            assert all(r.get("state") != "READY" for r in idx if r["name"] == m), idx
            assert c.is_model_ready(m) is False
    with pytest.raises(InferenceServerException) as e:
        vlen_infer(c)
    assert e.value.status() in ("400", "404", "503")
    assert simple_infer(c).tolist() == [[6] * 16]


def test_explicit_missing_load_model_at_start(start_server):
    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", "simple",
                     "--load-model", "ghost", wait="live")
    c = s.client()
    s.wait_until(lambda: c.is_model_ready("simple"), what="simple READY")
    rows = [r for r in c.get_model_repository_index() if r["name"] == "ghost"]
    assert len(rows) == 1 and rows[0]["state"] == "UNAVAILABLE" and "ghost" in rows[0]["reason"], rows
    assert s.get("/v2/health/ready").status != 200  # strict readiness: a requested model failed
    assert simple_infer(c).tolist() == [[6] * 16]


def test_explicit_load_then_unload(explicit_server):
    c = explicit_server.client()
    c.load_model("vlen_scale")
    assert c.is_model_ready("vlen_scale")
    assert states(c.get_model_repository_index(), "vlen_scale") == {"1": ("READY", "")}
    assert vlen_infer(c).tolist() == [[2.0, -5.0, 6.5]]
    c.unload_model("vlen_scale")
    assert states(c.get_model_repository_index(), "vlen_scale") == {"1": ("UNAVAILABLE", "unloaded")}
    assert c.is_model_ready("vlen_scale") is False
    with pytest.raises(InferenceServerException) as e:
        vlen_infer(c)
    assert e.value.status() in ("400", "404", "503")
    # Load again after the unload.
    c.load_model("vlen_scale")
    assert vlen_infer(c, values=(4.0,)).tolist() == [[8.0]]
    # simple was never touched.
    assert simple_infer(c).tolist() == [[6] * 16]


def test_explicit_load_all_versions_and_unload(explicit_server):
    c = explicit_server.client()
    c.load_model("multi_version")
    assert states(c.get_model_repository_index(), "multi_version") == {
        "1": ("READY", ""), "2": ("READY", ""), "3": ("READY", "")}
    assert mv_infer(c, "1") == [[1, 2, 3, 4]]
    c.unload_model("multi_version", unload_dependents=True)
    assert states(c.get_model_repository_index(), "multi_version") == {
        "1": ("UNAVAILABLE", "unloaded"), "2": ("UNAVAILABLE", "unloaded"), "3": ("UNAVAILABLE", "unloaded")}


def test_unload_and_reload_under_load(explicit_server):
    """Requests racing with unload/load either succeed with the right answer or fail cleanly (400/404/503);
    never a 500, a wrong answer or a dropped connection."""
    import threading

    c = explicit_server.client()
    c.load_model("vlen_scale")
    x = np.arange(20000, dtype=np.float32).reshape(1, 20000)
    outcomes = []
    stop = threading.Event()

    def hammer():
        hc = explicit_server.client()
        try:
            while not stop.is_set():
                i = httpclient.InferInput("INPUT", [1, 20000], "FP32")
                i.set_data_from_numpy(x)
                try:
                    out = hc.infer("vlen_scale", [i]).as_numpy("OUTPUT")
                    outcomes.append("ok" if np.array_equal(out, x * 2) else "WRONG")
                except InferenceServerException as e:
                    outcomes.append(e.status())
        finally:
            hc.close()

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        # On a busy machine the hammers may not get a request in before the first unload; wait for one
        # good answer so the race below really has requests in flight.
        explicit_server.wait_until(lambda: "ok" in outcomes, what="a first successful inference")
        for _ in range(3):
            c.unload_model("vlen_scale")
            c.load_model("vlen_scale")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert outcomes, "no request completed"
    assert set(outcomes) <= {"ok", "400", "404", "503"}, sorted(set(outcomes))
    assert "ok" in outcomes
    assert explicit_server.is_live()
    assert vlen_infer(c).tolist() == [[2.0, -5.0, 6.5]]


def test_explicit_load_unknown_model_fails(explicit_server):
    c = explicit_server.client()
    with pytest.raises(InferenceServerException) as e:
        c.load_model("does_not_exist")
    assert e.value.status() in ("400", "404")
    assert "does_not_exist" in e.value.message()
    assert explicit_server.is_live()
    assert simple_infer(c).tolist() == [[6] * 16]


@pytest.mark.parametrize("name", ["../simple", "a/b", ".."])
def test_explicit_load_path_like_name_refused(explicit_server, name):
    from urllib.parse import quote

    r = explicit_server.post(f"/v2/repository/models/{quote(name, safe='')}/load", b"{}")
    assert r.status in (400, 404), r
    assert "error" in r.json()
    assert explicit_server.is_live()


def test_explicit_unload_unknown_model(explicit_server):
    c = explicit_server.client()
    with pytest.raises(InferenceServerException) as e:
        c.unload_model("does_not_exist")
    assert e.value.status() in ("400", "404")
    assert explicit_server.is_live()


def test_load_with_config_override(explicit_server):
    c = explicit_server.client()
    cfg = c.get_model_config("simple")
    assert cfg["max_batch_size"] == 8
    cfg["max_batch_size"] = 2
    c.load_model("simple", config=json.dumps(cfg))
    assert c.get_model_config("simple")["max_batch_size"] == 2
    assert simple_infer(c, batch=2).tolist() == [[6] * 16] * 2
    with pytest.raises(InferenceServerException) as e:
        simple_infer(c, batch=3)
    assert e.value.status() == "400"
    # Loading again without a config keeps the override while the model stays loaded, as tritonserver
    # 2.51 does (a plain reload, after new model files say, does not drop it).
    c.load_model("simple")
    assert c.get_model_config("simple")["max_batch_size"] == 2
    with pytest.raises(InferenceServerException):
        simple_infer(c, batch=3)
    # An unload forgets it: the next load reads config.pbtxt.
    c.unload_model("simple")
    c.load_model("simple")
    assert c.get_model_config("simple")["max_batch_size"] == 8
    assert simple_infer(c, batch=3).tolist() == [[6] * 16] * 3
    # A failed override leaves the one in force in place.
    cfg["max_batch_size"] = 4
    c.load_model("simple", config=json.dumps(cfg))
    with pytest.raises(InferenceServerException):
        c.load_model("simple", config=json.dumps({**cfg, "max_batch_size": "many"}))
    c.load_model("simple")
    assert c.get_model_config("simple")["max_batch_size"] == 4


def test_load_with_config_override_version_policy(explicit_server):
    c = explicit_server.client()
    cfg = {"name": "multi_version", "backend": "onnxruntime", "max_batch_size": 4,
           "input": [{"name": "INPUT", "data_type": "TYPE_INT32", "dims": [4]}],
           "output": [{"name": "OUTPUT", "data_type": "TYPE_INT32", "dims": [4]}],
           "version_policy": {"specific": {"versions": [2]}}}
    c.load_model("multi_version", config=json.dumps(cfg))
    assert states(c.get_model_repository_index(), "multi_version") == {"2": ("READY", "")}
    assert mv_infer(c) == [[2, 3, 4, 5]]


def test_load_with_bad_config_override_fails_and_keeps_serving(explicit_server):
    c = explicit_server.client()
    for bad in ("{not json", json.dumps({"max_batch_size": "many"}), json.dumps({"no_such_field": 1})):
        with pytest.raises(InferenceServerException) as e:
            c.load_model("simple", config=bad)
        assert e.value.status() == "400", e.value
        assert "config" in e.value.message()
        assert c.is_model_ready("simple")
        assert simple_infer(c).tolist() == [[6] * 16]


def test_load_with_files_new_model(explicit_server):
    c = explicit_server.client()
    onnx_bytes = (EXAMPLES / "vlen_scale" / "1" / "model.onnx").read_bytes()
    cfg = {"name": "fresh_scale", "backend": "onnxruntime", "max_batch_size": 4,
           "input": [{"name": "INPUT", "data_type": "TYPE_FP32", "dims": [-1]}],
           "output": [{"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [-1]}]}
    c.load_model("fresh_scale", config=json.dumps(cfg), files={"file:1/model.onnx": onnx_bytes})
    assert c.is_model_ready("fresh_scale")
    assert vlen_infer(c, name="fresh_scale", values=(0.5, 8.0)).tolist() == [[1.0, 16.0]]
    md = c.get_model_metadata("fresh_scale")
    assert md["versions"] == ["1"] and md["inputs"][0]["shape"] == [-1, -1]
    assert states(c.get_model_repository_index(), "fresh_scale") == {"1": ("READY", "")}
    c.unload_model("fresh_scale")
    assert c.is_model_ready("fresh_scale") is False


def test_load_with_files_autocompleted_config(explicit_server):
    c = explicit_server.client()
    onnx_bytes = (EXAMPLES / "autocomplete_add" / "1" / "model.onnx").read_bytes()
    c.load_model("fresh_add", config=json.dumps({"backend": "onnxruntime"}),
                 files={"file:1/model.onnx": onnx_bytes})
    cfg = c.get_model_config("fresh_add")
    assert cfg["name"] == "fresh_add" and cfg["max_batch_size"] == 4
    a = httpclient.InferInput("INPUT0", [1, 8], "FP32")
    a.set_data_from_numpy(np.arange(8, dtype=np.float32).reshape(1, 8))
    b = httpclient.InferInput("INPUT1", [1, 8], "FP32")
    b.set_data_from_numpy(np.full((1, 8), 0.25, dtype=np.float32))
    out = c.infer("fresh_add", [a, b]).as_numpy("OUTPUT")
    assert out.tolist() == [[x + 0.25 for x in range(8)]]


def test_load_with_files_requires_config(explicit_server):
    onnx_bytes = (EXAMPLES / "vlen_scale" / "1" / "model.onnx").read_bytes()
    c = explicit_server.client()
    with pytest.raises(InferenceServerException) as e:
        c.load_model("nocfg", files={"file:1/model.onnx": onnx_bytes})
    assert e.value.status() == "400"
    assert "config" in e.value.message()


@pytest.mark.parametrize("path", ["../escape.onnx", "/abs/model.onnx", "1/../../x"])
def test_load_with_files_rejects_escaping_paths(explicit_server, path):
    import base64

    body = {"parameters": {"config": json.dumps({"backend": "onnxruntime"}),
                           f"file:{path}": base64.b64encode(b"x").decode()}}
    r = explicit_server.post("/v2/repository/models/evil/load", body)
    assert r.status == 400, r
    assert "error" in r.json()
    assert explicit_server.is_live()


def test_load_with_files_bad_model_bytes(explicit_server):
    c = explicit_server.client()
    with pytest.raises(InferenceServerException) as e:
        c.load_model("junk", config=json.dumps({"backend": "onnxruntime", "max_batch_size": 0,
                                                "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
                                                "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}]}),
                     files={"file:1/model.onnx": b"definitely not onnx"})
    assert e.value.status() != "200"
    assert c.is_model_ready("junk") is False
    assert explicit_server.is_live()
    assert simple_infer(c).tolist() == [[6] * 16]


def test_explicit_load_broken_then_fixed(start_server, repo):
    copy_models(repo, "simple")
    cfg = repo / "simple" / "config.pbtxt"
    good = cfg.read_text()
    cfg.write_text(good.replace("max_batch_size: 8", "max_batch_size: 8\nbogus_field: 1"))
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    c = s.client()
    with pytest.raises(InferenceServerException) as e:
        c.load_model("simple")
    assert e.value.status() == "400"
    assert "bogus_field" in e.value.message() and "config.pbtxt:4" in e.value.message()
    rows = [r for r in c.get_model_repository_index() if r["name"] == "simple"]
    assert len(rows) == 1 and rows[0]["state"] == "UNAVAILABLE" and "bogus_field" in rows[0]["reason"], rows
    assert c.is_model_ready("simple") is False
    cfg.write_text(good)
    c.load_model("simple")
    assert states(c.get_model_repository_index(), "simple") == {"1": ("READY", "")}
    assert simple_infer(c).tolist() == [[6] * 16]


def _slow_model(repo, name="slow"):
    """A model whose load takes a few hundred ms (auto-complete parses a 20 MB ONNX file)."""
    import onnx

    (repo / name / "1").mkdir(parents=True)
    m = onnx.load(str(EXAMPLES / "autocomplete_add" / "1" / "model.onnx"))
    m.doc_string = "x" * (20 * 1024 * 1024)
    onnx.save(m, str(repo / name / "1" / "model.onnx"))


def test_concurrent_loads_of_same_model_all_succeed(start_server, repo):
    import threading

    _slow_model(repo)
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    results = []
    lock = threading.Lock()

    def load():
        r = s.post("/v2/repository/models/slow/load", b"{}")
        with lock:
            results.append((r.status, r.body))

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert s.client().is_model_ready("slow")
    assert [st for st, _ in results] == [200, 200, 200], results


def test_load_model_star_loads_everything(start_server):
    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model=*")
    idx = s.client().get_model_repository_index()
    # One row per model version: multi_version has three.
    assert len(idx) == len(EXAMPLE_MODELS) + 2 and all(r["state"] == "READY" for r in idx)


# ---- version policies -----------------------------------------------------------------------


def _with_policy(repo, policy):
    copy_models(repo, "multi_version")
    cfg = repo / "multi_version" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("version_policy: { all { } }", f"version_policy: {policy}"))


def test_version_policy_latest(start_server, repo):
    _with_policy(repo, "{ latest { num_versions: 2 } }")
    s = start_server("--model-repository", repo)
    c = s.client()
    assert states(c.get_model_repository_index(), "multi_version") == {"2": ("READY", ""), "3": ("READY", "")}
    assert c.get_model_metadata("multi_version")["versions"] == ["2", "3"]
    assert mv_infer(c, "2") == [[2, 3, 4, 5]]
    assert mv_infer(c, "3") == [[3, 4, 5, 6]]
    assert mv_infer(c) == [[3, 4, 5, 6]]
    with pytest.raises(InferenceServerException) as e:
        mv_infer(c, "1")
    assert e.value.status() == "404"
    assert c.is_model_ready("multi_version", "1") is False


def test_version_policy_specific(start_server, repo):
    _with_policy(repo, "{ specific { versions: [1, 3] } }")
    s = start_server("--model-repository", repo)
    c = s.client()
    assert states(c.get_model_repository_index(), "multi_version") == {"1": ("READY", ""), "3": ("READY", "")}
    assert mv_infer(c, "1") == [[1, 2, 3, 4]]
    assert mv_infer(c, "3") == [[3, 4, 5, 6]]
    with pytest.raises(InferenceServerException) as e:
        mv_infer(c, "2")
    assert e.value.status() == "404"


def test_version_policy_default_is_latest_one(start_server, repo):
    copy_models(repo, "multi_version")
    cfg = repo / "multi_version" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("version_policy: { all { } }", ""))
    s = start_server("--model-repository", repo)
    c = s.client()
    assert states(c.get_model_repository_index(), "multi_version") == {"3": ("READY", "")}
    assert c.get_model_config("multi_version")["version_policy"] == {"latest": {"num_versions": 1}}


def test_non_numeric_version_folders_are_ignored(start_server, repo):
    copy_models(repo, "vlen_scale")
    (repo / "vlen_scale" / "notaversion").mkdir()
    (repo / "vlen_scale" / "01").mkdir()
    s = start_server("--model-repository", repo)
    assert states(s.index(), "vlen_scale") == {"1": ("READY", "")}


# ---- duplicate names, auto-complete ---------------------------------------------------------


def test_duplicate_model_across_repositories(start_server, tmp_path):
    a = copy_models(tmp_path / "repo_a", "simple", "vlen_scale")
    b = copy_models(tmp_path / "repo_b", "simple", "classifier")
    s = start_server("--model-repository", a, "--model-repository", b, wait="live")
    idx = wait_settled(s, ["simple", "vlen_scale", "classifier"])
    dup = [r for r in idx if r["name"] == "simple"]
    assert len(dup) == 1 and dup[0]["state"] == "UNAVAILABLE", dup
    reason = dup[0]["reason"]
    assert str(a) in reason and str(b) in reason, reason
    assert states(idx, "vlen_scale") == {"1": ("READY", "")}
    assert states(idx, "classifier") == {"1": ("READY", "")}
    c = s.client()
    assert c.is_model_ready("simple") is False
    assert vlen_infer(c).tolist() == [[2.0, -5.0, 6.5]]
    with pytest.raises(InferenceServerException):
        simple_infer(c)
    # Strict readiness: a model that should be served is not.
    assert s.get("/v2/health/ready").status != 200


def test_duplicate_name_via_comma_separated_repositories(start_server, tmp_path):
    a = copy_models(tmp_path / "repo_a", "vlen_scale")
    b = copy_models(tmp_path / "repo_b", "vlen_scale", "simple")
    s = start_server(f"--model-repository={a},{b}", wait="live")
    idx = wait_settled(s, ["simple", "vlen_scale"])
    assert states(idx, "simple") == {"1": ("READY", "")}
    assert [r["state"] for r in idx if r["name"] == "vlen_scale"] == ["UNAVAILABLE"]


def test_disable_auto_complete_config(start_server):
    s = start_server("--model-repository", EXAMPLES, "--disable-auto-complete-config", wait="live")
    idx = wait_settled(s, EXAMPLE_MODELS)
    rows = [r for r in idx if r["name"] == "autocomplete_add"]
    assert len(rows) == 1 and rows[0]["state"] == "UNAVAILABLE", rows
    assert "config.pbtxt" in rows[0]["reason"] and "auto-complete" in rows[0]["reason"], rows[0]
    c = s.client()
    assert c.is_model_ready("autocomplete_add") is False
    for m in EXAMPLE_MODELS:
        if m != "autocomplete_add":
            assert c.is_model_ready(m), m
    assert simple_infer(c).tolist() == [[6] * 16]


def test_strict_model_config_true_also_disables_auto_complete(start_server):
    s = start_server("--model-repository", EXAMPLES, "--strict-model-config=true", "--strict-readiness=false")
    idx = wait_settled(s, EXAMPLE_MODELS)
    assert [r["state"] for r in idx if r["name"] == "autocomplete_add"] == ["UNAVAILABLE"]


def test_backend_config_default_max_batch_size(start_server, repo):
    copy_models(repo, "autocomplete_add")
    s = start_server("--model-repository", repo, "--backend-config=onnxruntime,default-max-batch-size=2")
    c = s.client()
    assert c.get_model_config("autocomplete_add")["max_batch_size"] == 2


def test_model_stays_in_index_while_loading(start_server, repo):
    import http.client
    import threading

    _slow_model(repo)
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    assert [r["name"] for r in s.index()] == ["slow"]
    done = threading.Event()
    status = []

    def load():
        try:
            status.append(s.post("/v2/repository/models/slow/load", b"{}").status)
        finally:
            done.set()

    t = threading.Thread(target=load)
    t.start()
    snapshots = []
    conn = http.client.HTTPConnection(s.host, s.port, timeout=30)
    try:
        while not done.is_set():
            conn.request("POST", "/v2/repository/index", b"{}")
            snapshots.append(json.loads(conn.getresponse().read()))
    finally:
        conn.close()
        t.join(30)
    assert status == [200]
    assert len(snapshots) > 0
    missing = [snap for snap in snapshots if "slow" not in {r["name"] for r in snap}]
    assert missing == [], f"{len(missing)} of {len(snapshots)} index snapshots lack the model"
