#!/usr/bin/env python3
"""Time to the answer: `tritonrs tune --search quick` against NVIDIA Model Analyzer 1.58's quick search
(`run_config_search_mode: quick`) on the same model, bounded the same way, in one run. Prints the wall
times, their ratio, and the best configuration each tool chose (instance count, max_batch_size, dynamic
batching) and whether they agree. The goal: tritonrs at least 5x faster to the same answer.

  source scripts/env.sh && python benches/tune_vs_ma.py

Model Analyzer runs in one or both of its launch modes (BENCH_MA_MODE: local, remote or both; default
both):
- local, its default and the way it runs on a device: it starts the real tritonserver 2.51
  ($TRITONSERVER, default ~/.cache/anchors/bin/tritonserver from ../shared/anchors/install.sh) itself
  and restarts it for every variant;
- remote: it measures a tritonrs server that the bench started, loading each variant through the
  repository API, so no restart is counted.

Needs model-analyzer (tests/python/ma_harness.py: $MA_BIN, <repo>/.ma-venv, /tmp/ma-venv) and
perf_analyzer ($PERF_ANALYZER, default ~/.cache/anchors/bin/perf_analyzer). Uses the release binary
($TRITONRS_BIN, default target/release/tritonrs; built with `cargo build --release --bin tritonrs` only
when missing, and a warning is printed when it is older than the last commit).

The model (BENCH_MODEL): `sleepy` (default), a batching Python model that takes 40 ms per execution
whatever the batch, so the answer is unambiguous: the most instances, the largest batch and dynamic
batching, at a concurrency of at least instances x batch; or `fixed_cost`, the ONNX model of
tests/python/test_tune.py whose cost does not grow with the batch (Model Analyzer's remote mode only:
the anchors' tritonserver has no ONNX Runtime backend).

What is identical: the model and repository; the search bounds (instance count 1..BENCH_MAX_INSTANCES,
KIND_CPU only, max_batch_size powers of two up to BENCH_MAX_BATCH, concurrency up to
BENCH_MAX_CONCURRENCY); the measurement rule (time windows of BENCH_INTERVAL_MS, stability
BENCH_STABILITY_PERCENT, at most BENCH_MAX_TRIALS windows per point; perf_analyzer_flags for MA, the
same-named tune flags for tritonrs); the objective (throughput, no constraints); the server build.
What is not: each tool walks its own path through that space. Model Analyzer's quick search always
enables dynamic batching, climbs instance count x max_batch_size measuring each at concurrency
2 x count x batch (capped at the maximum; its default config is measured uncapped), then sweeps
concurrency 1, 2, 4, ... on its top 3. tritonrs's quick search starts from one instance with dynamic
batching on, climbs one setting at a time (instance count, max_batch_size, dynamic batching on/off, and
ONNX Runtime intra-op threads for ONNX models), and sweeps concurrency by doubling from 1 on every
variant until throughput stops rising. tritonrs loads variants in-process and generates requests
in-process; Model Analyzer loads them over the repository API and runs perf_analyzer over gRPC. The
wall time of each is its whole process (tune's includes starting its in-process server; MA's excludes
starting the server it measures, and the unload/restore around it). Each tool's chosen throughput is
printed but not comparable across tools (in-process vs gRPC client on the same 2 cores).

Environment: BENCH_MODEL (sleepy), BENCH_MAX_INSTANCES (2), BENCH_MAX_BATCH (8),
BENCH_MAX_CONCURRENCY (16), BENCH_INTERVAL_MS (500), BENCH_STABILITY_PERCENT (50),
BENCH_MAX_TRIALS (5), BENCH_KEEP (keep the work folder and print it). Machines here are shared and
noisy: compare the ratios of one run, not absolute numbers across runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TRITONRS_BIN", str(REPO / "target/release/tritonrs"))
sys.path.insert(0, str(REPO / "tests/python"))
import ma_harness as ma  # noqa: E402
from helpers import BIN, TritonServer, server_env  # noqa: E402

MODEL = os.environ.get("BENCH_MODEL", "sleepy")
MAX_INSTANCES = int(os.environ.get("BENCH_MAX_INSTANCES", "2"))
MAX_BATCH = int(os.environ.get("BENCH_MAX_BATCH", "8"))
MAX_CONCURRENCY = int(os.environ.get("BENCH_MAX_CONCURRENCY", "16"))
INTERVAL_MS = int(os.environ.get("BENCH_INTERVAL_MS", "500"))
STABILITY = int(os.environ.get("BENCH_STABILITY_PERCENT", "50"))
MAX_TRIALS = int(os.environ.get("BENCH_MAX_TRIALS", "5"))
MA_MODE = os.environ.get("BENCH_MA_MODE", "both")
TRITONSERVER = Path(os.environ.get("TRITONSERVER", Path.home() / ".cache/anchors/bin/tritonserver"))


def binary() -> None:
    """Builds the release binary only when it is missing; warns when it is older than the last commit,
    and stops when it has no `tune` at all."""
    if not BIN.exists():
        print(f"{BIN} missing: cargo build --release --bin tritonrs", flush=True)
        subprocess.run(["cargo", "build", "--release", "--bin", "tritonrs"], cwd=REPO, check=True)
        return
    commit = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True, text=True)
    if commit.returncode == 0 and commit.stdout.strip() and BIN.stat().st_mtime < int(commit.stdout):
        print(f"warning: {BIN} is older than the last commit; it may not have the newest tune", flush=True)
    if subprocess.run([str(BIN), "tune", "--help"], capture_output=True, env=server_env()).returncode != 0:
        sys.exit(f"{BIN} has no `tune` subcommand: rebuild it (cargo build --release --bin tritonrs) "
                 "or point TRITONRS_BIN at a binary that has it")


def write_model(repo: Path) -> str:
    if MODEL == "fixed_cost":
        from test_tune import fixed_cost_onnx

        return fixed_cost_onnx(repo).name
    from test_tune_ma import sleepy_model

    return sleepy_model(repo)


def run_tune(repo: Path, work: Path, model: str) -> tuple[dict, float]:
    out, export = work / "tune", work / "tune-export"
    cmd = [str(BIN), "tune", "--model-repository", str(repo), "--model", model, "--search", "quick",
           "--max-instance-count", str(MAX_INSTANCES), "--max-batch-size", str(MAX_BATCH),
           "--max-concurrency", str(MAX_CONCURRENCY), "--measurement-interval-ms", str(INTERVAL_MS),
           "--stability-percentage", str(STABILITY), "--max-trials", str(MAX_TRIALS), "--quiet",
           "--output-dir", str(out), "--export", str(export)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=server_env(), timeout=1800)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"tritonrs tune failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}")
    return ma.tune_result(r.stdout, out, export, model), wall


def ma_kw() -> dict:
    return {"quick": {"max_instance_count": MAX_INSTANCES, "max_model_batch_size": MAX_BATCH,
                      "max_concurrency": MAX_CONCURRENCY},
            "measurement_interval_ms": INTERVAL_MS, "stability_percentage": STABILITY, "max_trials": MAX_TRIALS,
            "timeout": 1800}


def run_ma_local(repo: Path, work: Path, model: str) -> dict:
    return ma.profile_local(model, work / "ma-local", repository=repo, server_path=TRITONSERVER, **ma_kw())


def run_ma(repo: Path, work: Path, model: str) -> dict:
    server = TritonServer(["--model-repository", str(repo), "--model-control-mode", "explicit",
                           "--allow-metrics=true", "--metrics-port", "0"], name="ma-target").start()
    try:
        metrics = int(server.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
        server.grpc_client().close()  # waits for the gRPC port
        return ma.profile(model, work / "ma", http_port=server.port, grpc_port=server.grpc_port,
                          metrics_port=metrics, **ma_kw())
    finally:
        server.stop()


def main():
    if ma.missing():
        sys.exit(ma.missing())
    if MA_MODE not in ("local", "remote", "both"):
        sys.exit(f"BENCH_MA_MODE={MA_MODE}: local, remote or both")
    if MA_MODE != "remote" and not TRITONSERVER.exists():
        sys.exit(f"{TRITONSERVER} missing: run ../shared/anchors/install.sh, set $TRITONSERVER, or BENCH_MA_MODE=remote")
    binary()
    work = Path(tempfile.mkdtemp(prefix="tune_vs_ma-"))
    try:
        repo = work / "repo"
        model = write_model(repo)
        print(f"model {model}; bounds: instances <= {MAX_INSTANCES} (KIND_CPU), max_batch_size <= {MAX_BATCH}, "
              f"concurrency <= {MAX_CONCURRENCY}; windows {INTERVAL_MS} ms, stability {STABILITY}%, "
              f"<= {MAX_TRIALS} trials; tritonrs {BIN}", flush=True)
        tune, tune_wall = run_tune(repo, work, model)
        mas = []
        if MA_MODE in ("local", "both") and MODEL == "fixed_cost":
            print("model-analyzer local mode skipped: the anchors' tritonserver has only the Python backend, "
                  "not ONNX Runtime", flush=True)
        elif MA_MODE in ("local", "both"):
            mas.append((f"model-analyzer, local (tritonserver 2.51, restarted per variant)",
                        run_ma_local(repo, work, model)))
        if MA_MODE in ("remote", "both"):
            mas.append(("model-analyzer, remote (a tritonrs server)", run_ma(repo, work, model)))
        keys = ("instance_count", "max_batch_size", "dynamic_batching")

        def points(res):
            return sum(len(v["measurements"]) for v in res["variants"])

        def chosen(res):
            b = res["best"]
            if b is None:
                return "(none)"
            return (f"instances={b['instance_count']} max_batch_size={b['max_batch_size']} "
                    f"dynamic_batching={'on' if b['dynamic_batching'] else 'off'} "
                    f"(concurrency {b['best_concurrency']}: {b['best_throughput']:.1f} infer/s, "
                    f"p99 {b['p99_ms']:.1f} ms)")

        print()
        print(f"{'tool':62} {'wall s':>8} {'variants':>8} {'points':>6} {'ratio':>6} {'same':>5}  best")
        print(f"{'tritonrs tune (in-process)':62} {tune_wall:8.1f} {len(tune['variants']):8} {points(tune):6} "
              f"{'':6} {'':5}  {chosen(tune)}")
        for label, mar in mas:
            agree = ma.settings(tune["best"], keys) == ma.settings(mar["best"], keys)
            print(f"{label:62} {mar['wall_s']:8.1f} {len(mar['variants']):8} {points(mar):6} "
                  f"{mar['wall_s'] / tune_wall:5.1f}x {'yes' if agree else 'NO':>5}  {chosen(mar)}")
        print("\nratio: model-analyzer's wall time over tritonrs tune's (goal: >= 5x); same: the same instances, "
              "max_batch_size and dynamic batching")
        print("\ntritonrs tune's variants (* = best):\n" + ma.table(tune))
        for label, mar in mas:
            print(f"{label}: variants (* = best):\n" + ma.table(mar))
            if mar["runs"][0]["problems"]:
                print("  log lines worth a look:\n  " + "\n  ".join(mar["runs"][0]["problems"]))
    finally:
        if os.environ.get("BENCH_KEEP"):
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
