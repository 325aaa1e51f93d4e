"""--model-config-name: each model's `configs/<name>.pbtxt` in place of `config.pbtxt`, falling back to
`config.pbtxt` where the model has no such file, differential against tritonserver 2.51 on a Python
model with two configurations; `validate` and an empty name."""

import json
import time
from pathlib import Path

import pytest

from helpers import REPO_ROOT, copy_models, run_cli

PY = REPO_ROOT / "model-repos" / "python"


def two_config_repo(repo: Path) -> Path:
    """args_echo with config.pbtxt (no batching, one instance) and configs/alt.pbtxt (batching, two
    instances) and "configs/with space.pbtxt" (tritonserver 2.51 accepts a name with a space)."""
    copy_models(repo, "args_echo", src=PY)
    model = repo / "args_echo"
    text = (model / "config.pbtxt").read_text()
    (model / "configs").mkdir()
    (model / "configs" / "alt.pbtxt").write_text(
        text.replace('backend: "python"', 'backend: "python"\nmax_batch_size: 8\n'
                     'instance_group [ { count: 2 kind: KIND_CPU } ]'))
    (model / "configs" / "with space.pbtxt").write_text(
        text.replace('backend: "python"', 'backend: "python"\nmax_batch_size: 3'))
    return repo


def chosen(server) -> tuple:
    """What tells the configurations apart, as the model configuration API returns it."""
    r = server.get("/v2/models/args_echo/config")
    assert r.status == 200, r.body
    cfg = json.loads(r.body)
    return cfg.get("max_batch_size", 0), [g.get("count") for g in cfg.get("instance_group", [])]


@pytest.mark.parametrize("name", ["alt", "with space", "absent"])
def test_config_name_matches_tritonserver(repo, start_server, start_tritonserver, name):
    two_config_repo(repo)
    ref = start_tritonserver(f"--model-repository={repo}", f"--model-config-name={name}")
    expected = chosen(ref)
    ref.stop()
    ours = start_server("--model-repository", repo, f"--model-config-name={name}")
    assert chosen(ours) == expected
    # And the model runs with the configuration it reports.
    assert ours.post("/v2/models/args_echo/infer", json.dumps(
        {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1, 1] if expected[0] else [1],
                     "data": [1]}]}).encode()).status == 200


def test_config_name_by_env_var(repo, start_server):
    two_config_repo(repo)
    s = start_server("--model-repository", repo, env={"TRITONRS_MODEL_CONFIG_NAME": "alt"})
    assert chosen(s)[0] == 8


def test_validate_follows_config_name(repo):
    two_config_repo(repo)
    r = run_cli("validate", "--model-repository", str(repo), "--model-config-name=alt", "--print-config")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max_batch_size: 8" in r.stdout
    r = run_cli("validate", "--model-repository", str(repo), "--print-config")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max_batch_size: 8" not in r.stdout


def test_empty_config_name_is_a_start_error(repo):
    # tritonserver 2.51 stops with "empty argument for --model-config-name".
    two_config_repo(repo)
    r = run_cli("--model-repository", str(repo), "--model-config-name=")
    assert r.returncode != 0
    assert "--model-config-name" in r.stderr


def test_poll_mode_follows_the_named_file(repo, start_server):
    two_config_repo(repo)
    s = start_server("--model-repository", repo, "--model-config-name=alt", "--model-control-mode=poll",
                     "--repository-poll-secs=1")
    assert chosen(s)[0] == 8
    alt = repo / "args_echo" / "configs" / "alt.pbtxt"
    alt.write_text(alt.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
    deadline = time.monotonic() + 60
    while chosen(s)[0] != 4:
        assert time.monotonic() < deadline, "the change to configs/alt.pbtxt was not loaded within 60 s"
        time.sleep(0.5)
