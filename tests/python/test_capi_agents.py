"""Repository agents through TRITONREPOAGENT: tests/capi/test_agent.c, built here with the system C
compiler as several agents (pass-through, failing, relocating), run on models of the C test backend.
The action order is Triton's: LOAD in order, LOAD_COMPLETE or LOAD_FAIL in reverse order, UNLOAD in
order, UNLOAD_COMPLETE in reverse order."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from helpers import REPO_ROOT
from test_capi import build, inputs, model

AGENT_SOURCE = REPO_ROOT / "tests" / "capi" / "test_agent.c"


def build_agent(agents: Path, name: str, *defines: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (Debian package gcc); scripts/test.sh installs one")
    d = agents / name
    d.mkdir(parents=True, exist_ok=True)
    lib = d / f"libtritonrepoagent_{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(lib), str(AGENT_SOURCE),
                    f"-DAGENT_NAME=\"{name}\"", *[f"-D{x}" for x in defines]], check=True, capture_output=True,
                   text=True, timeout=120)
    return lib


@pytest.fixture
def setup(tmp_path):
    backends = tmp_path / "backends"
    build(backends / "testc", "testc")
    agents = tmp_path / "agents"
    build_agent(agents, "first")
    build_agent(agents, "second")
    build_agent(agents, "failing", "FAIL_ON=0")
    build_agent(agents, "relocate", "RELOCATE")
    return backends, agents, tmp_path / "actions.log"


def agents_config(log: Path, *names: str) -> str:
    entries = ", ".join(f'{{ name: "{n}" parameters {{ key: "log" value: "{log}" }} }}' for n in names)
    return f"model_repository_agents {{ agents [ {entries} ] }}"


def actions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def serve(start_server, repo, backends, agents, *extra, wait="ready"):
    return start_server("--model-repository", repo, "--backend-directory", backends, "--repoagent-directory", agents,
                        "--model-control-mode=explicit", *extra, wait=wait)


def test_agents_run_in_tritons_order_around_load_and_unload(start_server, repo, setup):
    backends, agents, log = setup
    model(repo, "m", "testc", agents_config(log, "first", "second"))
    s = serve(start_server, repo, backends, agents, "--load-model=m")
    c = s.client()
    assert c.infer("m", inputs(httpclient, 1, 2.0)).as_numpy("OUTPUT0").tolist() == [[2.0] * 4]
    assert actions(log) == ["first LOAD m 1 config", "second LOAD m 1 config",
                            "second LOAD_COMPLETE m 1 config", "first LOAD_COMPLETE m 1 config"]
    c.unload_model("m")
    s.wait_for_log(r"Model 'm' is unloaded")
    assert actions(log)[4:] == ["first UNLOAD m 1 config", "second UNLOAD m 1 config",
                                "second UNLOAD_COMPLETE m 1 config", "first UNLOAD_COMPLETE m 1 config"]


def test_a_failing_agent_fails_its_model_and_the_agents_before_it_hear_load_fail(start_server, repo, setup):
    backends, agents, log = setup
    model(repo, "bad", "testc", agents_config(log, "first", "failing"))
    model(repo, "good", "testc")
    s = serve(start_server, repo, backends, agents, "--load-model=good", "--load-model=bad", wait="live")
    c = s.client()
    s.wait_for_log(r"Model 'bad' failed to load")
    # The two load side by side: 'bad' may fail before 'good' is ready.
    s.wait_for_log(r"Model 'good' version 1 is READY")
    assert c.is_model_ready("good")
    row = next(r for r in c.get_model_repository_index() if r["name"] == "bad")
    assert row["state"] == "UNAVAILABLE"
    assert "repository agent 'failing' failed to load model 'bad'" in row["reason"], row
    assert "failing fails on purpose" in row["reason"], row
    assert actions(log) == ["first LOAD bad 1 config", "failing LOAD bad 1 config", "first LOAD_FAIL bad 1 config"]


def test_a_relocating_agent_hands_the_next_agent_and_the_backend_a_new_repository(start_server, repo, setup):
    backends, agents, log = setup
    model(repo, "moved", "testc", agents_config(log, "relocate", "second"))
    s = serve(start_server, repo, backends, agents, "--load-model=moved")
    where = Path(s.wait_for_log(r"Model 'moved' is loaded from '([^']+)', where its repository agents put it").group(1))
    assert (where / "1" / "relocated_by_agent").exists()
    assert s.client().infer("moved", inputs(httpclient, 1, 3.0)).as_numpy("OUTPUT0").tolist() == [[3.0] * 4]
    assert actions(log)[:2] == ["relocate LOAD moved 1 config", "second LOAD acquired 1 config"]
    s.client().unload_model("moved")
    s.wait_for_log(r"Model 'moved' is unloaded")
    assert not where.exists(), "the acquired folder goes with the model's agents"


def test_a_missing_agent_library_is_a_reason_not_a_crash(start_server, repo, setup):
    backends, agents, log = setup
    model(repo, "lost", "testc", agents_config(log, "nowhere"))
    model(repo, "good", "testc")
    s = serve(start_server, repo, backends, agents, "--load-model=good", "--load-model=lost", wait="live")
    s.wait_for_log(r"Model 'lost' failed to load")
    s.wait_for_log(r"Model 'good' version 1 is READY")
    row = next(r for r in s.client().get_model_repository_index() if r["name"] == "lost")
    assert re.search(r"libtritonrepoagent_nowhere\.so.*not found", row["reason"]), row
    assert s.client().is_model_ready("good")
