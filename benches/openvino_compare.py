#!/usr/bin/env python3
"""The openvino backend against OpenVINO's own `benchmark_app` on the same IR model, in one run: how
much of OpenVINO's speed survives serving? A compute-bound conv net (FP32 [1,3,96,96], about 3.7 ms per
inference on two cores; weights fixed by a seed, generated with OpenVINO's Python API into a temporary
folder) is measured

- at concurrency 1 over gRPC (perf_analyzer), the model configured with PERFORMANCE_HINT LATENCY,
  against `benchmark_app -hint latency`;
- at concurrency 8 over gRPC, the model configured with PERFORMANCE_HINT THROUGHPUT, once as one
  instance with dynamic batching (max_batch_size 8), as `count: <cores>` instances without batching,
  and as both (and, for comparison, one instance with batching and the LATENCY hint), against
  `benchmark_app -hint throughput`; the ratio is the best variant's;
- at concurrency 1 in-process: `tritonrs tune` drives the model through the server's core with no
  transport and no client process, against `-hint latency` (the server's own cost alone);
- at concurrency 1 again with one OpenVINO thread on the first core on both sides and perf_analyzer on
  the second (with two cores or more), so that the client's share of the cores is taken out and what is
  left is the server's own cost and the gRPC round trip.

Each mode runs BENCH_ROUNDS rounds (2): benchmark_app, then the served rows, then benchmark_app again;
each round's ratios are over the mean of the benchmark_app runs around it (the machines here are shared
and noisy: the drift between those runs is printed; believe the spread of the rounds, not one). Prints the served/benchmark_app throughput ratios,
the raw numbers, what OpenVINO made of the hints on each side, the server's time per request outside
OpenVINO's infer, and the CPU time per inference of the server and of the client.

  source scripts/env.sh && cargo build --release --bins && python3 benches/openvino_compare.py [TRITONRS]

TRITONRS defaults to $TRITONRS_BIN, else target/release/tritonrs. perf_analyzer: $PERF_ANALYZER, else
$ANCHORS/bin/perf_analyzer, else .anchors/bin/perf_analyzer (scripts/test-tools.sh). The server finds
OpenVINO through this Python's `openvino` package, the same library benchmark_app uses. Environment: BENCH_OV_SIZE (image side, 96),
BENCH_APP_SECONDS (each benchmark_app run, 10), BENCH_INTERVAL_MS (3000), BENCH_STABILITY_PERCENT (40),
BENCH_OV_CONCURRENCY (the throughput row's, 8), BENCH_ROUNDS (2).
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from side_by_side import PERF, REPO, TRITONRS, Server, free_port  # noqa: E402

SIZE = int(os.environ.get("BENCH_OV_SIZE", "96"))
APP_SECONDS = os.environ.get("BENCH_APP_SECONDS", "10")
INTERVAL_MS = os.environ.get("BENCH_INTERVAL_MS", "3000")
STABILITY = os.environ.get("BENCH_STABILITY_PERCENT", "40")
TP_CONCURRENCY = int(os.environ.get("BENCH_OV_CONCURRENCY", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
# scripts/test-tools.sh installs it into the repository's .anchors; ../shared/anchors/install.sh into $ANCHORS.
PERF_ANALYZER = os.environ.get("PERF_ANALYZER") or next(
    (str(p) for p in (PERF, REPO / ".anchors/bin/perf_analyzer") if p.exists()), str(PERF))
CORES = os.cpu_count() or 1
# The served throughput variants: (model name, PERFORMANCE_HINT, max_batch_size, count, more parameters).
# count:N instances share one compiled model, a stream each; one instance has one infer request, so
# under THROUGHPUT (a stream per core) it runs on one stream's share of the cores. The LATENCY row
# (one stream with every core) is for comparison.
TP_VARIANTS = [("ov_tp_batch", "THROUGHPUT", 8, 1, {}), ("ov_tp_count", "THROUGHPUT", 0, CORES, {}),
               ("ov_tp_batch_count", "THROUGHPUT", 8, CORES, {}), ("ov_tp_batch_lat", "LATENCY", 8, 1, {})]
SETTINGS = ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT")


def write_model(folder: Path) -> Path:
    """Five 3x3 convolutions (3->32->64->64->64/2->128 channels) with bias and relu, a global mean and a
    128x10 matmul: about 0.2 GFLOP per image, 1.3 MB of weights."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(34)
    x = ops.parameter([1, 3, SIZE, SIZE], np.float32, name="x")
    x.output(0).set_names({"x"})
    h, cin = x, 3
    for cout, stride in [(32, 1), (64, 1), (64, 1), (64, 2), (128, 1)]:
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        h = ops.convolution(h, ops.constant(w), [stride, stride], [1, 1], [1, 1], [1, 1])
        h = ops.relu(ops.add(h, ops.constant((rng.standard_normal((1, cout, 1, 1)) * 0.1).astype(np.float32))))
        cin = cout
    pooled = ops.reduce_mean(h, ops.constant(np.array([2, 3], np.int64)), keep_dims=False)
    y = ops.matmul(pooled, ops.constant((rng.standard_normal((cin, 10)) / np.sqrt(cin)).astype(np.float32)),
                   False, False)
    y.output(0).set_names({"y"})
    folder.mkdir(parents=True)
    ov.save_model(ov.Model([y], [x], "ov_bench"), str(folder / "model.xml"))
    return folder / "model.xml"


def write_config(repo: Path, model: Path, name: str, hint: str, max_batch: int, count: int,
                 params: dict | None = None) -> str:
    """A model folder `name` serving the IR at `model` with the given hint, batching, instances and other
    backend parameters."""
    more = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in (params or {}).items())
    d = repo / name / "1"
    d.mkdir(parents=True)
    for f in ("model.xml", "model.bin"):
        shutil.copy(model.parent / f, d / f)
    dims = [3, SIZE, SIZE] if max_batch else [1, 3, SIZE, SIZE]
    out = [10] if max_batch else [1, 10]
    batching = "dynamic_batching { }\n" if max_batch else ""
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "openvino"\nmax_batch_size: {max_batch}\n'
        f'input [ {{ name: "x" data_type: TYPE_FP32 dims: {dims} }} ]\n'
        f'output [ {{ name: "y" data_type: TYPE_FP32 dims: {out} }} ]\n{batching}'
        f'instance_group [ {{ kind: KIND_CPU count: {count} }} ]\n'
        f'parameters {{ key: "PERFORMANCE_HINT" value: {{ string_value: "{hint}" }} }}\n{more}')
    return name


def benchmark_app_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "benchmark_app"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "openvino.tools.benchmark.main"]


def benchmark_app(model: Path, hint: str, extra: tuple[str, ...] = ()) -> dict:
    """benchmark_app on the CPU device with `-hint`; its throughput, median latency, the settings it
    reports, and its CPU time per inference (compilation and start-up included, a small share)."""
    cmd = [*benchmark_app_cmd(), "-m", str(model), "-d", "CPU", "-hint", hint, "-t", APP_SECONDS, *extra]
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        text = out.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"benchmark_app failed: {' '.join(cmd)}\n{text[-3000:]}")
    count = int(re.search(r"Count:\s+(\d+) iterations", text).group(1))
    settings = {k: m.group(1) for k in SETTINGS if (m := re.search(rf"\b{k}: (.+)", text))}
    return {"thr": float(re.search(r"Throughput:\s+([\d.]+) FPS", text).group(1)),
            "p50": float(re.search(r"Median:\s+([\d.]+) ms", text).group(1)),
            "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000 / count, "settings": settings}


def serve(repo: Path) -> Server:
    """The server on `repo`, finding OpenVINO through this Python (the PATH's python3), with info logging
    so that its log (`Server.log`) has what OpenVINO made of the model's hints."""
    http, grpc = free_port(), free_port()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    return Server("tritonrs", [str(BINARY), "--model-repository", str(repo), "--http-port", str(http),
                               "--grpc-port", str(grpc), "--metrics-port", "0", "--log-info=true"], http, grpc, env)


def stats(server: Server, model: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http}/v2/models/{model}/stats") as r:
        s = json.load(r)["model_stats"][0]
    inf = s["inference_stats"]
    out = {k: (int(v["count"]), int(v["ns"])) for k, v in inf.items() if isinstance(v, dict) and "ns" in v}
    out["executions"] = int(s.get("execution_count", 0))
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def perf(server: Server, model: str, concurrency: int) -> dict | None:
    """perf_analyzer over gRPC at `concurrency`; its throughput and p50, and over the whole run the
    server's mean per-request stage times (us), executions, and the CPU time per request (ms) of the
    server process (OpenVINO's threads included) and of perf_analyzer."""
    before, cpu0 = stats(server, model), cpu_seconds(server.proc.pid)
    with tempfile.NamedTemporaryFile(suffix=".csv") as f, tempfile.TemporaryFile("w+") as out:
        cmd = [PERF_ANALYZER, "-m", model, "-u", f"127.0.0.1:{server.grpc}", "-i", "grpc",
               "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-interval", INTERVAL_MS,
               "--stability-percentage", STABILITY, "--max-trials", "20", "-f", f.name]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            out.seek(0)
            print(f"perf_analyzer failed for {model} c={concurrency}:\n{out.read()[-3000:]}")
            return None
        row = next(csv.DictReader(open(f.name)))
    after, cpu1 = stats(server, model), cpu_seconds(server.proc.pid)
    n = max(1, after["success"][0] - before["success"][0])
    per = {k: (after[k][1] - before[k][1]) / n / 1000
           for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")}
    return {"thr": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]), "server": per,
            "batch": n / max(1, after["executions"] - before["executions"]),
            "server_cpu_ms": (cpu1 - cpu0) * 1000 / n, "client_cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000 / n}


def served(tmp: Path, model: Path, name: str, hint: str, max_batch: int, count: int, concurrency: int,
           params: dict | None = None):
    repo = tmp / f"repo-{name}"
    write_config(repo, model, name, hint, max_batch, count, params)
    s = serve(repo)
    try:
        r = perf(s, name, concurrency)
    finally:
        s.stop()
        s.log.seek(0)
        text = s.log.read().decode(errors="replace")
    # The backend's log line with what OpenVINO made of the hints ("... OpenVINO's CPU device with ...").
    found = re.findall(r"OpenVINO's CPU device with ([^\n]*?)(?:, for \d+ instance\(s\))?\.\s*$", text, re.M)
    return r, sorted(set(found))


def mean_app(runs: list[dict]) -> dict:
    return {"thr": sum(r["thr"] for r in runs) / len(runs), "p50": sum(r["p50"] for r in runs) / len(runs),
            "cpu_ms": sum(r["cpu_ms"] for r in runs) / len(runs), "settings": runs[0]["settings"],
            "drift": abs(runs[0]["thr"] - runs[-1]["thr"]) / max(runs[0]["thr"], runs[-1]["thr"])}


def report(title: str, app: dict, rows: list) -> None:
    """One round of a mode: benchmark_app (the mean of the runs before and after it) and the served rows."""
    s = app["settings"]
    print(f"\n{title}\n  benchmark_app: {app['thr']:8,.1f} inf/s  p50 {app['p50']:6.2f} ms  cpu/inf {app['cpu_ms']:5.2f} ms"
          f"  (two runs {app['drift'] * 100:.0f}% apart; {', '.join(f'{k}={v}' for k, v in s.items())})")
    for label, r, settings in rows:
        if r is None:
            print(f"  {label:40} n/a")
            continue
        sv = r["server"]
        print(f"  {label:40} {r['thr']:8,.1f} inf/s  p50 {r['p50'] / 1000:6.2f} ms  ratio {r['thr'] / app['thr']:.2f}x"
              f"  | server/req: total {sv['success'] / 1000:.2f} queue {sv['queue'] / 1000:.2f} input "
              f"{sv['compute_input'] / 1000:.2f} infer {sv['compute_infer'] / 1000:.2f} output "
              f"{sv['compute_output'] / 1000:.2f} ms, batch {r['batch']:.2f} | cpu/req: server "
              f"{r['server_cpu_ms']:.2f} client {r['client_cpu_ms']:.2f} ms\n  {'':40} {'; '.join(settings)}")


def rounds(tmp: Path, model: Path, hint: str, variants: list, concurrency: int) -> list:
    """ROUNDS rounds of the served `variants` at `concurrency`, benchmark_app `-hint` before, between and
    after them: [(benchmark_app's mean of the runs around the round, [(label, result, settings)])]."""
    apps, out = [benchmark_app(model, hint)], []
    for i in range(ROUNDS):
        rows = [(f"c{concurrency} {h} {'batching ' if batch else ''}count:{count}"
                 + "".join(f" {k}={v}" for k, v in params.items()),
                 *served(tmp, model, f"{name}_{i}", h, batch, count, concurrency, params))
                for name, h, batch, count, params in variants]
        apps.append(benchmark_app(model, hint))
        out.append((mean_app(apps[-2:]), rows))
    return out


def pinned(tmp: Path, model: Path) -> list:
    """Concurrency 1 with the client off the inference's core: benchmark_app and the server each run
    OpenVINO on one thread on the first core (benchmark_app `-hint none -nstreams 1 -nthreads 1 -nireq 1`,
    the served model INFERENCE_NUM_THREADS 1), and perf_analyzer runs on the second. What is left between
    the two is the server's own cost and the gRPC round trip, not the client's share of the cores."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return []
    out = []
    try:
        for i in range(ROUNDS):
            os.sched_setaffinity(0, {cores[0]})
            app = benchmark_app(model, "none", ("-nstreams", "1", "-nthreads", "1", "-nireq", "1"))
            repo = tmp / f"repo-pinned-{i}"
            name = write_config(repo, model, f"ov_pinned_{i}", "LATENCY", 0, 1, {"INFERENCE_NUM_THREADS": "1"})
            server = serve(repo)  # started on the first core, which it keeps
            try:
                os.sched_setaffinity(0, {cores[1]})
                r = perf(server, name, 1)
            finally:
                server.stop()
            out.append(({**app, "drift": 0.0}, [("c1 one thread, client on its own core", r, [])]))
    finally:
        os.sched_setaffinity(0, set(cores))
    return out


def in_process(tmp: Path, model: Path) -> list:
    """Concurrency 1 through the server's core with no transport and no client process: `tritonrs tune`
    loads the LATENCY-hinted model as the server does and keeps one request in flight from inside the
    process, against `benchmark_app -hint latency` (what serving costs once gRPC and the client are
    taken away)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    space = tmp / "own-configuration.toml"
    space.write_text("")  # a custom space with no keys: the model's own values only
    out = []
    for i in range(ROUNDS):
        app = benchmark_app(model, "latency")
        repo, folder = tmp / f"repo-tune-{i}", tmp / f"tune-{i}"
        name = write_config(repo, model, f"ov_tune_{i}", "LATENCY", 0, 1)
        cmd = [str(BINARY), "tune", "--model-repository", str(repo), "--model", name, "--search", f"custom:{space}",
               "--concurrency", "1", "--measurement-interval-ms", INTERVAL_MS, "--stability-percentage", STABILITY,
               "--max-trials", "20", "--quiet", "--output-dir", str(folder)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        result = None
        if r.returncode != 0:
            print(f"tritonrs tune failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        else:
            row = next(csv.DictReader(open(folder / "metrics-model-inference.csv")))

            def us(key: str) -> float:
                return float(row[key]) * 1000

            result = {"thr": float(row["Throughput (infer/sec)"]), "p50": us("p50 Latency (ms)"), "batch": 1.0,
                      "server": {"success": us("Avg Latency (ms)"), "queue": us("Server Queue time (ms)"),
                                 "compute_input": us("Server Compute Input time (ms)"),
                                 "compute_infer": us("Server Compute Infer time (ms)"),
                                 "compute_output": us("Server Compute Output time (ms)")},
                      "server_cpu_ms": float("nan"), "client_cpu_ms": 0.0}
        out.append(({**app, "drift": 0.0}, [("c1 in-process (tritonrs tune)", result, [])]))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = write_model(tmp / "ir")
        lat = rounds(tmp, model, "latency", [("ov_latency", "LATENCY", 0, 1, {})], 1)
        tp = rounds(tmp, model, "throughput", TP_VARIANTS, TP_CONCURRENCY)
        pin = pinned(tmp, model)
        tune = in_process(tmp, model)
    print(f"\nFP32 [1,3,{SIZE},{SIZE}] conv net on OpenVINO's CPU device, {CORES} cores; tritonrs over gRPC "
          f"(perf_analyzer) against benchmark_app on the same IR. server/req: the server's mean stage times "
          f"per request; cpu/req: CPU time per request of the server process and of perf_analyzer.")
    for i, (app, rows) in enumerate(lat):
        report(f"Latency (concurrency 1, -hint latency), round {i + 1}:", app, rows)
    for i, (app, rows) in enumerate(tp):
        report(f"Throughput (concurrency {TP_CONCURRENCY}, -hint throughput), round {i + 1}:", app, rows)
    for i, (app, rows) in enumerate(tune):
        report(f"Latency in-process (no transport, no client), round {i + 1}:", app, rows)
    for i, (app, rows) in enumerate(pin):
        report(f"Latency, one OpenVINO thread on core 0 each, perf_analyzer on core 1, round {i + 1}:", app, rows)

    def ratios(mode: list) -> list[tuple[float, str]]:
        """Per round, the best served row's throughput over benchmark_app's, and its label."""
        return [max(((r["thr"] / app["thr"], label) for label, r, _ in rows if r), default=(0.0, "none"))
                for app, rows in mode]

    best = ratios(tp)
    print(f"\nserved/benchmark_app by round: latency {', '.join(f'{x:.2f}x' for x, _ in ratios(lat))}; "
          f"throughput {', '.join(f'{x:.2f}x ({label})' for x, label in best)}; "
          f"latency with the client on its own core {', '.join(f'{x:.2f}x' for x, _ in ratios(pin)) or 'n/a'}; "
          f"latency in-process {', '.join(f'{x:.2f}x' for x, _ in ratios(tune))}")


BINARY = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TRITONRS_BIN", TRITONRS))

if __name__ == "__main__":
    if len(sys.argv) > 2 or not BINARY.exists():
        sys.exit(f"no server binary at {BINARY}\n{__doc__}")
    main()
