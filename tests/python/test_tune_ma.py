"""`tritonrs tune` against NVIDIA Model Analyzer 1.58 (remote mode, measuring a tritonrs server): the
same model, the same candidates and concurrencies, the same short perf_analyzer windows; both tools
must pick a variant with the same settings. The models make the answer unambiguous on a noisy
2-core machine: a Python model that sleeps 40 ms per execution (a second instance doubles throughput
at concurrency 2) and an ONNX model whose cost does not grow with the batch (dynamic batching wins
by 2x or more at concurrency 8). Throughputs are shown, never compared across the tools: tune
measures in-process, Model Analyzer through perf_analyzer over gRPC on the same two cores.

Skipped when model-analyzer or perf_analyzer is missing (see ma_harness.py for where they are
looked for, and ma_recipe.md for how Model Analyzer is driven).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import ma_harness as ma
from helpers import TritonServer, python_sleep_model, run_cli

pytestmark = pytest.mark.skipif(ma.missing() is not None, reason=str(ma.missing()))

# The same window settings on both sides: perf_analyzer's (through MA's perf_analyzer_flags) and tune's.
WINDOW_MS, STABILITY, TRIALS = 500, 50, 5
TUNE_FLAGS = ["--measurement-interval-ms", str(WINDOW_MS), "--stability-percentage", str(STABILITY),
              "--max-trials", str(TRIALS), "--quiet"]


def sleepy_model(repo: Path, name: str = "sleepy") -> str:
    """A batching Python model that takes 40 ms per execution, one instance."""
    return python_sleep_model(repo, name, execute_s=0.04, max_batch_size=8, instances=1).name


def fixed_cost_model(repo: Path) -> str:
    from test_tune import fixed_cost_onnx

    return fixed_cost_onnx(repo).name


# id: (model builder, tune's custom space, MA's candidates besides its default, concurrency,
#      the settings (instance count, dynamic batching) that must win)
CASES = {
    "python-instances": (sleepy_model, "instance_count = [1, 2]\n", [{"instance_count": 2}], [2], (2, False)),
    "onnx-dynamic-batching": (fixed_cost_model, "dynamic_batching = [false, true]\n", [{"dynamic_batching": True}],
                              [8], (1, True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tune_picks_what_model_analyzer_picks(tmp_path, case):
    build, space_toml, ma_candidates, concurrency, expected = CASES[case]
    repo = tmp_path / "repo"
    model = build(repo)
    # The model's own configuration (1 instance, no dynamic batching) and the other candidate.
    candidates = {(1, False), expected}

    # tritonrs tune, in-process.
    space = tmp_path / "space.toml"
    space.write_text(space_toml)
    out, export = tmp_path / "tune", tmp_path / "tune-export"
    r = run_cli("tune", *TUNE_FLAGS, "--model-repository", str(repo), "--model", model, "--search", f"custom:{space}",
                "--concurrency", ",".join(map(str, concurrency)), "--output-dir", str(out), "--export", str(export),
                timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    tune = ma.tune_result(r.stdout, out, export, model)
    assert tune["best"] is not None, r.stdout

    # Model Analyzer against a tritonrs server over the same repository.
    server = TritonServer(["--model-repository", str(repo), "--model-control-mode", "explicit",
                           "--allow-metrics=true", "--metrics-port", "0"], name="ma-target").start()
    try:
        metrics_port = int(server.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
        server.grpc_client().close()  # waits for the gRPC port to be logged
        try:
            mar = ma.profile(model, tmp_path / "ma", http_port=server.port, grpc_port=server.grpc_port,
                             metrics_port=metrics_port, candidates=ma_candidates, concurrency=concurrency,
                             measurement_interval_ms=WINDOW_MS, stability_percentage=STABILITY, max_trials=TRIALS,
                             timeout=150)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            pytest.fail(f"Model Analyzer failed against tritonrs: {e}\n--- tritonrs log ---\n{server.log[-3000:]}")
        # Every load MA asked for (its default and each variant, with a config override) succeeded.
        bad = [line for line in server.log.splitlines() if "failed" in line.lower() or " ERROR " in line]
        assert not bad, "\n".join(bad)
    finally:
        server.stop()

    report = (f"\ntritonrs tune (* = its pick):\n{ma.table(tune)}\n"
              f"model-analyzer (* = its pick):\n{ma.table(mar)}\n"
              f"MA log lines worth a look: {[p for run in mar['runs'] for p in run['problems']] or 'none'}")
    print(report, f"\nMA took {mar['wall_s']} s")  # shown with -s, or with a failure
    for res in (tune, mar):
        listed = {ma.settings(v) for v in res["variants"]}
        assert candidates <= listed, f"{res['tool']}'s CSV lacks a candidate {sorted(candidates - listed)}" + report
        assert all(len(v["measurements"]) == len(concurrency) for v in res["variants"]), report
    assert len(tune["variants"]) == 2, "tune measured the default twice or missed one" + report
    assert ma.settings(tune["best"]) == ma.settings(mar["best"]), (
        f"the tools disagree: tune picked {ma.describe(tune['best'])}, "
        f"Model Analyzer picked {ma.describe(mar['best'])}" + report)
    assert ma.settings(tune["best"]) == expected, (
        f"both picked {ma.settings(tune['best'])}, expected {expected}" + report)
