"""`tritonrs tune`: variants loaded in-process (and over gRPC with --via), measured, ranked under an
objective and constraints, and written as Model Analyzer's CSV, an HTML report with SVG plots and
exported configurations. The assertions are about rankings and files, never absolute speeds: each
test's models make one variant win by a wide margin (a second instance of a model that sleeps, dynamic
batching of a model whose cost does not grow with the batch)."""

from __future__ import annotations

import csv
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import BIN, REPO_ROOT, TritonServer, copy_models, python_sleep_model, run_cli, server_env

JETSON = REPO_ROOT / "tests" / "data" / "jetson"
# Short windows: the models below differ by 2x or more, far beyond the noise of a 250 ms window.
FAST = ["--measurement-interval-ms", "250", "--stability-percentage", "50", "--max-trials", "4",
        "--warmup-requests", "4", "--quiet"]


def tune(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("tune", *FAST, *args, timeout=timeout, env=env)


def rows(out: Path) -> list[dict]:
    with open(out / "metrics-model-inference.csv", newline="") as f:
        return list(csv.DictReader(f))


def best(stdout: str, model: str) -> tuple[str, str]:
    """(variant name, candidate) from the `<model>: best is NAME (CANDIDATE) at ...` line."""
    m = re.search(rf"^{re.escape(model)}: best is (\S+) \((.*?)\) at concurrency", stdout, re.M)
    assert m, stdout
    return m.group(1), m.group(2)


def memory_model(repo: Path, name: str = "hungry") -> Path:
    """A Python model that holds 64 MB of its own and takes 40 ms per execution whatever the batch:
    a second instance doubles throughput at concurrency 2 and costs 64 MB more."""
    return python_sleep_model(repo, name, execute_s=0.04, instances=1, ballast_mb=64)


def fixed_cost_onnx(repo: Path, name: str = "fixed_cost") -> Path:
    """An ONNX model whose work does not grow with the batch: the input is reduced to one number that
    scales a 256x256 matrix, which is multiplied by itself four times (not constant-folded, since it
    depends on the input). Batching 8 requests costs about what one does."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((256, 256)) * 0.05).astype(np.float32), "W")
    nodes = [
        helper.make_node("ReduceMean", ["INPUT"], ["m"], keepdims=0),
        helper.make_node("Mul", ["W", "m"], ["s0"]),
    ]
    for i in range(4):
        nodes.append(helper.make_node("MatMul", [f"s{i}", "W"], [f"s{i + 1}"]))
    nodes += [
        helper.make_node("ReduceSum", ["s4"], ["total"], keepdims=0),
        helper.make_node("Add", ["INPUT", "total"], ["OUTPUT"]),
    ]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [-1, 4])],
                              [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [-1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    d = repo / name
    (d / "1").mkdir(parents=True)
    onnx.save(model, str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'instance_group [ { kind: KIND_CPU count: 1 } ]\n')
    return d


def test_a_second_instance_wins_and_a_memory_limit_rules_it_out(tmp_path):
    repo = tmp_path / "repo"
    model_dir = memory_model(repo)
    space = tmp_path / "space.toml"
    space.write_text("instance_count = [1, 2]\n")
    out, export = tmp_path / "out", tmp_path / "export"
    r = tune("--model-repository", str(repo), "--model", "hungry", "--search", f"custom:{space}",
             "--concurrency", "2", "--output-dir", str(out), "--export", str(export))
    assert r.returncode == 0, r.stdout + r.stderr
    name, candidate = best(r.stdout, "hungry")
    assert candidate.startswith("2xCPU"), r.stdout

    # Model Analyzer's CSV: its columns first, one row per point, variants best first.
    table = rows(out)
    assert list(table[0])[:9] == ["Model", "Batch", "Concurrency", "Model Config Path", "Instance Group",
                                  "Max Batch Size", "Satisfies Constraints", "Throughput (infer/sec)",
                                  "p99 Latency (ms)"]
    by_variant = {row["Model Config Path"]: row for row in table}
    assert set(by_variant) == {"hungry_config_default", "hungry_config_0"}
    assert table[0]["Model Config Path"] == name == "hungry_config_0"
    assert by_variant["hungry_config_0"]["Instance Group"] == "2:CPU"
    fast, slow = by_variant["hungry_config_0"], by_variant["hungry_config_default"]
    assert float(fast["Throughput (infer/sec)"]) > 1.5 * float(slow["Throughput (infer/sec)"]), table
    # Memory is what each variant adds to the server (PSS after its load less before it, the previous
    # variant unloaded): the default, measured first, is charged its stub (64 MB of ballast and the
    # interpreter's own pages), not the server's tens of MB nor the stubs' fork server; the second
    # stub's 64 MB are counted (the stubs are processes of their own), about twice the first.
    ram_fast, ram_slow = float(fast["RAM Usage (MB)"]), float(slow["RAM Usage (MB)"])
    assert 64 < ram_slow < 64 + 36, table
    assert ram_fast > ram_slow + 40 and 1.5 * ram_slow < ram_fast < 2.5 * ram_slow, table
    assert "mem MB: what each variant adds to the server's PSS" in r.stdout, r.stdout

    # The HTML report embeds SVG plots that exist beside it, with no script.
    html = (out / "report.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    assert images and all((out / i).is_file() and (out / i).read_text().lstrip().startswith("<svg")
                          for i in images), images
    assert "<script" not in html
    # The report calls the memory figure what it is, as the CSV's "RAM Usage (MB)" and the README do.
    assert "<th>Memory added (MB, PSS)</th>" in html and "RSS" not in html, html

    # The export is a repository: validate accepts it and the server serves the best variant from it.
    best_cfg = (export / "hungry" / "config.pbtxt").read_text()
    assert "count: 2" in best_cfg, best_cfg
    assert (export / "hungry_config_default" / "config.pbtxt").is_file()
    v = run_cli("validate", "--model-repository", str(export))
    assert v.returncode == 0 and "OK    hungry\n" in v.stdout, v.stdout + v.stderr
    s = TritonServer(["--model-repository", str(export), "--model-control-mode", "explicit",
                      "--load-model", "hungry"], name="exported").start()
    try:
        assert s.get("/v2/models/hungry/ready").status == 200
        cfg = s.get("/v2/models/hungry/config").json()
        assert cfg["instance_group"][0]["count"] == 2
    finally:
        s.stop()
    # Tuning only read the repository.
    assert (model_dir / "config.pbtxt").read_text().count("count: 1") == 1
    assert not list(model_dir.glob("config.pbtxt.bak-*"))

    # A memory limit between the two rules the faster variant out.
    limit = (ram_fast + ram_slow) / 2
    out2 = tmp_path / "out2"
    r = tune("--model-repository", str(repo), "--model", "hungry", "--search", f"custom:{space}",
             "--concurrency", "2", "--output-dir", str(out2), "--max-memory-mb", f"{limit:.0f}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert best(r.stdout, "hungry") == ("hungry_config_default", "1xCPU"), r.stdout
    sat = {row["Model Config Path"]: row["Satisfies Constraints"] for row in rows(out2)}
    assert sat == {"hungry_config_default": "Yes", "hungry_config_0": "No"}, sat

    # A limit nothing meets: a clear message, a non-zero exit, and the report still written.
    out3 = tmp_path / "out3"
    r = tune("--model-repository", str(repo), "--model", "hungry", "--search", f"custom:{space}",
             "--concurrency", "2", "--output-dir", str(out3), "--max-memory-mb", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no variant of some model meets the constraints" in r.stderr
    assert {row["Satisfies Constraints"] for row in rows(out3)} == {"No"}
    assert (out3 / "report.html").is_file()


def test_dynamic_batching_wins_for_an_onnx_model_at_concurrency_8(tmp_path):
    repo = tmp_path / "repo"
    fixed_cost_onnx(repo)
    space = tmp_path / "space.toml"
    space.write_text("dynamic_batching = [false, true]\n")
    out = tmp_path / "out"
    r = tune("--model-repository", str(repo), "--model", "fixed_cost", "--search", f"custom:{space}",
             "--concurrency", "8", "--output-dir", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    _, candidate = best(r.stdout, "fixed_cost")
    assert "db(" in candidate, r.stdout
    table = {row["Model Config Path"]: float(row["Throughput (infer/sec)"]) for row in rows(out)}
    assert table["fixed_cost_config_0"] > 2 * table["fixed_cost_config_default"], table


def test_quick_search_climbs_from_one_instance_and_apply_writes_back_with_a_backup(tmp_path):
    repo = tmp_path / "repo"
    model_dir = memory_model(repo)
    out = tmp_path / "out"
    r = tune("--model-repository", str(repo), "--model", "hungry", "--search", "quick", "--max-instance-count",
             "2", "--concurrency", "2", "--output-dir", str(out), "--apply")
    assert r.returncode == 0, r.stdout + r.stderr
    assert best(r.stdout, "hungry")[1].startswith("2xCPU"), r.stdout
    assert "wrote hungry_config_0 into" in r.stdout, r.stdout
    backups = list(model_dir.glob("config.pbtxt.bak-*"))
    assert len(backups) == 1 and "count: 1" in backups[0].read_text()
    assert "count: 2" in (model_dir / "config.pbtxt").read_text()
    v = run_cli("validate", "--model-repository", str(repo))
    assert v.returncode == 0, v.stdout + v.stderr


def test_quick_search_sweeps_low_concurrencies_only_where_latency_decides(tmp_path):
    """The best variants' final sweep: upward from the concurrency they were climbed at (2 x instances)
    when only throughput counts, from 1 when a p99 limit does. A model that does not batch: the climb
    measures 1 instance at concurrency 2 and 2 instances at 4 (the largest allowed here)."""
    repo = tmp_path / "repo"
    python_sleep_model(repo, "nap", execute_s=0.02)

    def concurrencies(*extra: str) -> dict[str, list[int]]:
        out = tmp_path / f"out{len(extra)}"
        r = tune("--model-repository", str(repo), "--model", "nap", "--search", "quick", "--max-instance-count",
                 "2", "--max-concurrency", "4", "--output-dir", str(out), *extra)
        assert r.returncode == 0, r.stdout + r.stderr
        found: dict[str, list[int]] = {}
        for row in rows(out):
            found.setdefault(row["Instance Group"], []).append(int(row["Concurrency"]))
        return {k: sorted(v) for k, v in found.items()}

    # Throughput: 1 instance goes on upward from 2 to 4; 2 instances were climbed at 4 already.
    assert concurrencies() == {"1:CPU": [2, 4], "2:CPU": [4]}
    # A p99 limit: lower concurrencies may be the only ones within it, so both sweeps start at 1 (and
    # one instance, saturated at 1, may stop doubling at 2).
    low = concurrencies("--max-p99-ms", "10000")
    assert low["2:CPU"] == [1, 2, 4] and low["1:CPU"][:2] == [1, 2], low


@pytest.mark.parametrize("board,watts", [("orin-jp6", 5.056 * 1.328), ("nano-jp46", 3.812)])
def test_efficiency_is_inferences_per_joule_on_a_jetson(tmp_path, board, watts):
    out = tmp_path / "out"
    r = tune("--model-repository", str(copy_models(tmp_path / "repo", "simple")), "--model", "simple",
             "--search", "custom:/dev/null", "--concurrency", "1", "--objective", "efficiency",
             "--max-power-w", "20", "--output-dir", str(out), env={"TRITONRS_SYSFS_ROOT": str(JETSON / board)})
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = rows(out)
    assert abs(float(row["Power Usage (W)"]) - watts) < 0.06, row
    assert row["Efficiency Unit"] == "infer/J"
    thr = float(row["Throughput (infer/sec)"])
    assert abs(float(row["Efficiency"]) - thr / watts) <= 0.01 * thr / watts + 0.1, row
    # Without a power sensor the same objective counts inferences per CPU-second, and a power limit
    # cannot be met.
    r = tune("--model-repository", str(tmp_path / "repo"), "--model", "simple", "--search", "custom:/dev/null",
             "--concurrency", "1", "--objective", "efficiency", "--output-dir", str(tmp_path / "o2"))
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = rows(tmp_path / "o2")
    assert row["Efficiency Unit"] == "infer/CPU-s" and row["Power Usage (W)"] == ""


def test_via_grpc_measures_a_running_server_and_restores_its_configuration(tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    s = TritonServer(["--model-repository", str(repo), "--model-control-mode", "explicit",
                      "--load-model", "simple"], name="production").start()
    try:
        space = tmp_path / "space.toml"
        space.write_text("instance_count = [1, 2]\n")
        out = tmp_path / "out"
        r = tune("--via", f"grpc://{s.grpc_url}", "--yes", "--model", "simple", "--search", f"custom:{space}",
                 "--concurrency", "2", "--output-dir", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "warning: tune --via loads variants" in r.stderr
        assert {row["Model Config Path"] for row in rows(out)} == {"simple_config_default", "simple_config_0"}
        # The server is another process: its memory and CPU are not recorded (this process's would be the
        # load generator's), its queue and compute times are.
        for row in rows(out):
            assert float(row["RAM Usage (MB)"] or 0) == 0 and float(row["CPU Utilization (%)"] or 0) == 0, row
            # The CSV keeps Model Analyzer's one decimal, and `simple` computes in about 0.05 ms: any one
            # column may round to 0.0, so the server's times are checked together.
            server_ms = sum(float(row[f"Server {c} time (ms)"])
                            for c in ("Queue", "Compute Input", "Compute Infer", "Compute Output"))
            assert server_ms > 0, row
        assert f"<th>Measured by</th><td>grpc://{s.grpc_url}</td>" in (out / "report.html").read_text()
        # The server is back on its own configuration and still serving.
        cfg = s.get("/v2/models/simple/config").json()
        assert cfg["instance_group"][0]["count"] == 1, cfg
        assert s.get("/v2/models/simple/ready").status == 200
        import tritonclient.grpc as grpcclient
        from helpers import simple_inputs
        res = s.grpc_client().infer("simple", simple_inputs(grpcclient, 2))
        assert res.as_numpy("OUTPUT0").tolist() == [[4] * 16]
    finally:
        s.stop()


def test_ctrl_c_writes_what_was_measured(tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    out = tmp_path / "out"
    p = subprocess.Popen([str(BIN), "tune", *FAST[:-1], "--model-repository", str(repo), "--model", "simple",
                          "--search", "brute", "--output-dir", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=server_env())
    try:
        # Progress lines go to stderr when it is not a terminal; the first measured point is enough.
        deadline = time.monotonic() + 120
        seen = ""
        while "infer/s" not in seen and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            seen += line
        assert "infer/s" in seen, seen
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, stdout + stderr
    assert "Interrupted" in stderr
    assert len(rows(out)) >= 1
    assert "interrupted" in (out / "report.html").read_text().lower()


def test_bad_requests_end_with_a_clear_message(tmp_path):
    repo = copy_models(tmp_path / "repo", "simple", "ensemble_classify", "classify_logits", "classifier")
    r = tune("--model-repository", str(repo), "--model", "simpel")
    assert r.returncode == 1 and "unknown model 'simpel'" in r.stderr and "did you mean 'simple'" in r.stderr
    r = tune("--model-repository", str(repo), "--model", "simple", "--budget", "500ms")
    assert r.returncode == 1 and "too small for one measurement" in r.stderr, r.stderr
    r = tune("--model-repository", str(repo), "--model", "ensemble_classify", "--output-dir", str(tmp_path / "o"))
    assert r.returncode == 1 and "is an ensemble" in r.stderr, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("instance_counts = [1]\n")
    r = tune("--model-repository", str(repo), "--model", "simple", "--search", f"custom:{bad}")
    assert r.returncode == 1 and "instance_counts" in r.stderr, r.stderr
    r = tune("--model-repository", str(repo), "--model", "simple", "--via", "http://127.0.0.1:1")
    assert r.returncode == 1 and "grpc://HOST:PORT" in r.stderr, r.stderr
    r = tune("--model-repository", str(repo), "--model", "simple", "--objective", "speed")
    assert r.returncode == 2 and "throughput, latency or efficiency" in r.stderr, r.stderr
    r = run_cli("tune", "--help")
    assert r.returncode == 0 and "Examples:" in r.stdout and "--max-power-w" in r.stdout


def test_options_come_from_the_configuration_file(tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    out = tmp_path / "out"
    conf = tmp_path / "tritonrs.toml"
    conf.write_text(f'model-repository = ["{repo}"]\nobjective = "latency"\nconcurrency = [1]\n'
                    f'output-dir = "{out}"\nhttp-port = 8000\n')
    r = run_cli("tune", "--config", str(conf), *FAST, "--model", "simple", "--search", "custom:/dev/null",
                timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "objective: latency" in r.stdout
    assert [row["Concurrency"] for row in rows(out)] == ["1"]
    # The server itself ignores tune's keys in a shared file.
    v = run_cli("validate", "--config", str(conf))
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.parametrize("which", ["tritonrs", "tritonserver"])
def test_via_a_server_that_does_not_allow_loading_stops_at_once_saying_how_to_start_it(
        tmp_path, start_server, start_tritonserver, which):
    """The server scripts/run-example.sh starts (--model-control-mode=none), and tritonserver 2.51 in
    the same mode: one line before anything is loaded or the 5-second warning, not a run whose every
    variant fails."""
    repo = tmp_path / "repo"
    python_sleep_model(repo, "echo")  # a Python model: the reference serves it too
    s = (start_server if which == "tritonrs" else start_tritonserver)("--model-repository", str(repo))
    r = tune("--via", f"grpc://{s.grpc_url}", "--model", "echo", "--output-dir", str(tmp_path / "out"), timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), r.stderr
    assert "start it with --model-control-mode=explicit" in errors[0], errors[0]
    assert "not allowed" in errors[0], errors[0]  # the server's own words
    assert not (tmp_path / "out").exists()
    assert s.index_row("echo")["state"] == "READY"


def test_a_run_whose_every_variant_failed_says_why(tmp_path):
    repo = tmp_path / "repo"
    model = python_sleep_model(repo, "broken")
    (model / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        raise ValueError('broken on purpose')\n")
    space = tmp_path / "space.toml"
    space.write_text("instance_count = [2]\n")
    r = tune("--model-repository", str(repo), "--model", "broken", "--search", f"custom:{space}",
             "--concurrency", "1", "--output-dir", str(tmp_path / "out"), timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "meets the constraints" not in r.stdout + r.stderr
    error = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert error == [error[0]] and error[0].startswith("error: model 'broken': all 2 variants failed"), r.stderr
    assert "broken_config_default: a request failed at concurrency 1: " in error[0], error[0]
    assert "broken on purpose" in error[0], error[0]
    assert re.search(r"^broken: all 2 variants failed, so nothing was measured: ", r.stdout, re.M), r.stdout
