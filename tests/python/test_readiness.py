"""Server readiness with a broken model (--strict-readiness), --exit-on-error, and shutdown."""

import signal

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import TritonServer, copy_models


def make_broken(repo):
    bad = repo / "broken"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('name: "broken"\nbackend: "onnxruntime"\nmax_batch_sizee: 8\n')


def simple_ok(c):
    ins = []
    for n in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(n, [1, 16], "INT32")
        i.set_data_from_numpy(np.full((1, 16), 7, dtype=np.int32))
        ins.append(i)
    return c.infer("simple", ins).as_numpy("OUTPUT1").tolist() == [[0] * 16]


def test_strict_readiness_default_not_ready_with_broken_model(start_server, repo):
    copy_models(repo, "simple")
    make_broken(repo)
    s = start_server("--model-repository", repo, wait="live")
    s.wait_for_log(r"Server is not ready: ", timeout=20)
    c = s.client()
    s.wait_until(lambda: c.is_model_ready("simple"), what="simple READY")
    assert s.get("/v2/health/ready").status != 200
    assert c.is_server_ready() is False
    assert c.is_server_live() is True
    assert simple_ok(c)
    assert c.is_model_ready("broken") is False
    rows = [r for r in s.index() if r["name"] == "broken"]
    assert len(rows) == 1 and rows[0]["state"] == "UNAVAILABLE"
    assert "max_batch_sizee" in rows[0]["reason"] and "config.pbtxt:3" in rows[0]["reason"], rows[0]


def test_strict_readiness_false_is_ready_with_broken_model(start_server, repo):
    copy_models(repo, "simple")
    make_broken(repo)
    s = start_server("--model-repository", repo, "--strict-readiness=false")  # waits for ready == 200
    c = s.client()
    assert s.get("/v2/health/ready").status == 200
    assert c.is_model_ready("simple")
    assert c.is_model_ready("broken") is False
    assert simple_ok(c)


def test_not_ready_while_models_load(start_server, repo):
    import onnx

    from helpers import EXAMPLES

    # A model whose load takes a few hundred ms (auto-complete parses a 20 MB ONNX file).
    (repo / "slow" / "1").mkdir(parents=True)
    m = onnx.load(str(EXAMPLES / "autocomplete_add" / "1" / "model.onnx"))
    m.doc_string = "x" * (20 * 1024 * 1024)
    onnx.save(m, str(repo / "slow" / "1" / "model.onnx"))
    s = start_server("--model-repository", repo, wait="live")
    assert s.get("/v2/health/ready").status == 503
    assert s.client().is_model_ready("slow") is False
    s.wait_until(lambda: s.get("/v2/health/ready").status == 200, what="ready")
    assert s.client().is_model_ready("slow")


def test_ready_when_all_models_good(start_server, repo):
    copy_models(repo, "simple", "vlen_scale")
    s = start_server("--model-repository", repo, "--strict-readiness=true")
    assert s.get("/v2/health/ready").status == 200


def test_explicit_mode_ready_after_load(start_server):
    from helpers import EXAMPLES

    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", "simple")
    c = s.client()
    assert s.get("/v2/health/ready").status == 200
    c.load_model("vlen_scale")
    assert s.get("/v2/health/ready").status == 200


def test_explicit_mode_still_ready_after_unload(start_server):
    from helpers import EXAMPLES

    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", "simple")
    c = s.client()
    c.load_model("vlen_scale")
    c.unload_model("vlen_scale")
    assert [(r["state"], r.get("reason")) for r in s.index() if r["name"] == "vlen_scale"] == [("UNAVAILABLE", "unloaded")]
    assert simple_ok(c)
    assert s.get("/v2/health/ready").status == 200


def test_exit_on_error_with_broken_model_exits_nonzero(repo):
    copy_models(repo, "simple")
    make_broken(repo)
    s = TritonServer(["--model-repository", repo, "--exit-on-error=true"])
    try:
        s.start(wait=None)
    except RuntimeError:
        pass  # it may exit before logging its port
    rc = s.wait_exit(timeout=30)
    assert rc != 0
    assert "broken" in s.log, s.log


def test_exit_on_error_with_good_models_keeps_running(start_server, repo):
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--exit-on-error=true")
    assert s.is_running()
    assert simple_ok(s.client())


def test_exit_on_error_false_keeps_serving(start_server, repo):
    copy_models(repo, "simple")
    make_broken(repo)
    s = start_server("--model-repository", repo, "--exit-on-error=false", wait="live")
    c = s.client()
    s.wait_until(lambda: c.is_model_ready("simple"), what="simple READY")
    assert s.is_running()
    assert simple_ok(c)


def test_sigterm_shuts_down_cleanly(start_server, repo):
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo)
    assert simple_ok(s.client())
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait_exit(timeout=15) == 0
    assert "Shutting down" in s.log or "shutdown" in s.log.lower()
