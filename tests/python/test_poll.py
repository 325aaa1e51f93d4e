"""--model-control-mode=poll: the server follows the repository (new models, new versions, changed
configs, removed models) and keeps serving while it reloads."""

import os
import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES, copy_models

POLL_TIMEOUT = 15  # seconds; the poll interval is 1 s


def add_model_atomically(repo, staging, name, src=EXAMPLES):
    """Copies a model next to the repository, then renames it in, so a scan never sees half a model."""
    shutil.copytree(src / name, staging / name)
    os.rename(staging / name, repo / name)


def vlen(c, values=(1.0, 2.0)):
    x = np.array([values], dtype=np.float32)
    i = httpclient.InferInput("INPUT", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return c.infer("vlen_scale", [i]).as_numpy("OUTPUT").tolist()


def mv(c, version=""):
    i = httpclient.InferInput("INPUT", [1, 4], "INT32")
    i.set_data_from_numpy(np.array([[0, 1, 2, 3]], dtype=np.int32))
    return c.infer("multi_version", [i], model_version=version).as_numpy("OUTPUT").tolist()


@pytest.fixture
def poll_setup(start_server, tmp_path):
    repo = tmp_path / "repo"
    staging = tmp_path / "staging"
    staging.mkdir()
    copy_models(repo, "vlen_scale")

    def start(*extra):
        return start_server("--model-repository", repo, "--model-control-mode=poll", "--repository-poll-secs=1", *extra)

    return repo, staging, start


def test_poll_picks_up_new_model(poll_setup):
    repo, staging, start = poll_setup
    s = start()
    c = s.client()
    assert c.is_model_ready("vlen_scale")
    assert c.is_model_ready("simple") is False
    add_model_atomically(repo, staging, "simple")
    s.wait_until(lambda: c.is_model_ready("simple"), timeout=POLL_TIMEOUT, what="simple READY")
    ins = []
    for n in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(n, [1, 16], "INT32")
        i.set_data_from_numpy(np.full((1, 16), 2, dtype=np.int32))
        ins.append(i)
    assert c.infer("simple", ins).as_numpy("OUTPUT0").tolist() == [[4] * 16]
    assert vlen(c) == [[2.0, 4.0]]


def test_poll_picks_up_new_version(poll_setup):
    repo, staging, start = poll_setup
    copy_models(repo, "multi_version")
    for v in ("2", "3"):
        shutil.rmtree(repo / "multi_version" / v)
    s = start()
    c = s.client()
    assert c.get_model_metadata("multi_version")["versions"] == ["1"]
    assert mv(c) == [[1, 2, 3, 4]]
    shutil.copytree(EXAMPLES / "multi_version" / "2", staging / "2")
    os.rename(staging / "2", repo / "multi_version" / "2")
    s.wait_until(lambda: c.is_model_ready("multi_version", "2"), timeout=POLL_TIMEOUT, what="version 2 READY")
    assert mv(c, "2") == [[2, 3, 4, 5]]
    assert mv(c) == [[2, 3, 4, 5]]  # the highest version now
    assert mv(c, "1") == [[1, 2, 3, 4]]  # policy "all": version 1 stays
    assert c.get_model_metadata("multi_version")["versions"] == ["1", "2"]


def test_poll_new_version_replaces_latest(poll_setup):
    """Default policy latest(1): a new version folder takes over and the old one is unloaded."""
    repo, staging, start = poll_setup
    s = start()
    c = s.client()
    shutil.copytree(repo / "vlen_scale" / "1", staging / "2")
    os.rename(staging / "2", repo / "vlen_scale" / "2")

    def v2_only():
        rows = [r for r in s.index() if r["name"] == "vlen_scale"]
        st = {r["version"]: r["state"] for r in rows}
        return st.get("2") == "READY" and st.get("1") != "READY"

    s.wait_until(v2_only, timeout=POLL_TIMEOUT, what="version 2 replaces version 1")
    res = c.infer("vlen_scale", [_vlen_input()])
    assert res.get_response()["model_version"] == "2"
    with pytest.raises(InferenceServerException):
        c.infer("vlen_scale", [_vlen_input()], model_version="1")


def test_poll_still_ready_after_version_replaced(poll_setup):
    repo, staging, start = poll_setup
    s = start()
    assert s.get("/v2/health/ready").status == 200
    shutil.copytree(repo / "vlen_scale" / "1", staging / "2")
    os.rename(staging / "2", repo / "vlen_scale" / "2")
    s.wait_until(lambda: {r["version"]: r["state"] for r in s.index() if r["name"] == "vlen_scale"}.get("1")
                 == "UNAVAILABLE", timeout=POLL_TIMEOUT, what="version 1 retired")
    assert s.get("/v2/health/ready").status == 200


def _vlen_input():
    i = httpclient.InferInput("INPUT", [1, 1], "FP32")
    i.set_data_from_numpy(np.array([[1.0]], dtype=np.float32))
    return i


def test_poll_removed_model_becomes_unavailable(poll_setup):
    repo, staging, start = poll_setup
    copy_models(repo, "simple")
    s = start()
    c = s.client()
    assert c.is_model_ready("simple")
    shutil.rmtree(repo / "simple")
    s.wait_until(lambda: not c.is_model_ready("simple"), timeout=POLL_TIMEOUT, what="simple gone")
    assert all(r.get("state") != "READY" for r in s.index() if r["name"] == "simple")
    with pytest.raises(InferenceServerException) as e:
        c.infer("simple", [])
    assert e.value.status() in ("400", "404", "503")
    assert vlen(c) == [[2.0, 4.0]]
    assert s.get("/v2/health/ready").status == 200
    # Putting it back brings it back.
    add_model_atomically(repo, staging, "simple")
    s.wait_until(lambda: c.is_model_ready("simple"), timeout=POLL_TIMEOUT, what="simple back")


def test_poll_config_change_reloads_while_serving(poll_setup):
    """A changed config.pbtxt is reloaded; requests sent throughout the reload all succeed."""
    repo, staging, start = poll_setup
    s = start()
    c = s.client()
    assert c.get_model_config("vlen_scale")["max_batch_size"] == 4
    errors: list[str] = []
    ok = [0]
    stop = threading.Event()

    def hammer():
        hc = s.client()
        try:
            while not stop.is_set():
                try:
                    assert vlen(hc, (1.5,)) == [[3.0]]
                    ok[0] += 1
                except Exception as e:  # noqa: BLE001 - every failure is reported below
                    errors.append(repr(e))
        finally:
            hc.close()

    t = threading.Thread(target=hammer)
    t.start()
    try:
        time.sleep(0.3)
        cfg = repo / "vlen_scale" / "config.pbtxt"
        text = cfg.read_text().replace("max_batch_size: 4", "max_batch_size: 3")
        tmp = staging / "config.pbtxt"
        tmp.write_text(text)
        os.replace(tmp, cfg)
        s.wait_until(lambda: c.get_model_config("vlen_scale")["max_batch_size"] == 3, timeout=POLL_TIMEOUT,
                     what="config reloaded")
        time.sleep(0.3)
    finally:
        stop.set()
        t.join(10)
    assert errors == []
    assert ok[0] > 5
    x = httpclient.InferInput("INPUT", [4, 1], "FP32")
    x.set_data_from_numpy(np.ones((4, 1), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("vlen_scale", [x])
    assert e.value.status() == "400"


def test_poll_broken_config_keeps_old_model_serving(poll_setup):
    repo, staging, start = poll_setup
    s = start()
    c = s.client()
    cfg = repo / "vlen_scale" / "config.pbtxt"
    tmp = staging / "config.pbtxt"
    tmp.write_text(cfg.read_text().replace("max_batch_size", "max_batch_sise"))
    os.replace(tmp, cfg)
    s.wait_for_log(r"max_batch_sise", timeout=POLL_TIMEOUT)
    # The failed reload leaves the previous copy serving.
    assert c.is_model_ready("vlen_scale")
    assert vlen(c) == [[2.0, 4.0]]


def test_load_api_refused_in_poll_mode(poll_setup):
    repo, staging, start = poll_setup
    s = start()
    c = s.client()
    with pytest.raises(InferenceServerException) as e:
        c.load_model("vlen_scale")
    assert "not allowed" in e.value.message() and "poll" in e.value.message()
