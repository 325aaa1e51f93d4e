#!/usr/bin/env python3
"""perf_analyzer against tritonrs and the real Triton (2.51, from the anchors) in one run, on the same
Python-backend models: add_sub (FP32), bytes_upper (BYTES) and bls_sync (BLS calling add_sub, another
Python model), at concurrency 1 and 8. Prints throughput and p50/p99 latency with the tritonrs/Triton
ratios, and the resident memory of each server with its stub processes, idle and after the load.

  benches/python_side_by_side.sh        (installs the anchors, builds the release binary, runs this)

Both servers serve the same copy of those models and run them with the anchors' Python and numpy.
Knobs (environment): BENCH_CONCURRENCY (default "1,8"), BENCH_PROTOCOLS (default "grpc"; "grpc,http"
for both), BENCH_INTERVAL_MS (default 3000), BENCH_MODELS (default "add_sub,bytes_upper,bls_sync"),
BENCH_REPEAT (default 2: each measurement runs this many times, alternating the servers, and the run
with the best throughput counts, for both alike), BENCH_SERVER_CORES with BENCH_CLIENT_CORES (cores of
their own for the servers, stubs included, and for perf_analyzer, as in side_by_side.py). Machines here
are shared and noisy: compare the ratios from one run, not absolute numbers across runs.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from side_by_side import (CLIENT_CORES, SERVER_CORES, CpuCost, cost_table, free_port,  # noqa: E402
                          on_cores, rss_kib)

REPO = Path(__file__).resolve().parent.parent
ANCHORS = Path(os.environ.get("ANCHORS", Path.home() / ".cache/anchors"))
PERF = ANCHORS / "bin/perf_analyzer"
TRITON = ANCHORS / "bin/tritonserver"
TRITONRS = Path(os.environ.get("TRITONRS_BIN", REPO / "target/release/tritonrs"))
CONCURRENCY = [int(c) for c in os.environ.get("BENCH_CONCURRENCY", "1,8").split(",")]
PROTOCOLS = os.environ.get("BENCH_PROTOCOLS", "grpc").split(",")
INTERVAL_MS = os.environ.get("BENCH_INTERVAL_MS", "3000")
STABILITY = os.environ.get("BENCH_STABILITY_PERCENT", "40")
MODELS = os.environ.get("BENCH_MODELS", "add_sub,bytes_upper,bls_sync").split(",")
REPEAT = max(1, int(os.environ.get("BENCH_REPEAT", "2")))
# perf_analyzer needs a shape for variable dimensions.
SHAPES = {"bytes_upper": ["--shape", "TEXT:16", "--string-length", "16"]}
# What the models need besides themselves.
NEEDS = {"bls_sync": ["add_sub"]}


class Server:
    def __init__(self, name: str, cmd: list[str], http: int, grpc: int, models: list[str]):
        self.name, self.http, self.grpc = name, http, grpc
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
        start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=on_cores(SERVER_CORES))
        while not self._ready(models):
            if self.proc.poll() is not None or time.monotonic() - start > 120:
                sys.exit(f"{name} did not become ready; log in {self.log.name}")
            time.sleep(0.05)
        self.ready_ms = (time.monotonic() - start) * 1000
        time.sleep(1.0)
        self.idle_rss = rss_kib(self.proc.pid)
        self.peak_rss = self.idle_rss

    def _ready(self, models) -> bool:
        try:
            for m in models:
                urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/models/{m}/ready", timeout=1)
            return True
        except OSError:
            return False

    def sample_rss(self):
        self.peak_rss = max(self.peak_rss, rss_kib(self.proc.pid))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def perf(server: Server, model: str, protocol: str, concurrency: int) -> dict | None:
    port = server.http if protocol == "http" else server.grpc
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        cmd = [str(PERF), "-m", model, "-u", f"127.0.0.1:{port}", "-i", protocol,
               "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-interval", INTERVAL_MS,
               "--stability-percentage", STABILITY, "--max-trials", "20", "-f", f.name, *SHAPES.get(model, [])]
        cost = CpuCost(server, model)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=on_cores(CLIENT_CORES))
        while p.poll() is None:
            server.sample_rss()
            time.sleep(0.5)
        out = p.stdout.read() if p.stdout else ""
        if p.returncode != 0:
            print(f"perf_analyzer failed for {server.name} {model} {protocol} c={concurrency}:\n{out[-2000:]}")
            return None
        row = next(csv.DictReader(open(f.name)))
    return {"thr": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]), "p99": float(row["p99 latency"]),
            **cost.stop()}


def main():
    for p in (PERF, TRITON, TRITONRS):
        if not p.exists():
            sys.exit(f"{p} not found (benches/python_side_by_side.sh installs and builds what it needs)")
    work = Path(tempfile.mkdtemp(prefix="python-bench-"))
    repo = work / "repo"
    repo.mkdir()
    served = sorted({m for model in MODELS for m in [model, *NEEDS.get(model, [])]})
    for m in served:
        shutil.copytree(REPO / "model-repos/python" / m, repo / m)
    python = ANCHORS / "venv/bin/python"
    rs_ports = [free_port() for _ in range(3)]
    tr_ports = [free_port() for _ in range(3)]
    rs = Server("tritonrs", [str(TRITONRS), "--model-repository", str(repo), "--log-info=false",
                             f"--backend-config=python,python-executable={python}",
                             "--http-port", str(rs_ports[0]), "--grpc-port", str(rs_ports[1]),
                             "--metrics-port", str(rs_ports[2])], rs_ports[0], rs_ports[1], served)
    tr = Server("triton", [str(TRITON), "--model-repository", str(repo), "--log-info=false",
                           "--http-port", str(tr_ports[0]), "--grpc-port", str(tr_ports[1]),
                           "--metrics-port", str(tr_ports[2])], tr_ports[0], tr_ports[1], served)
    rows = []
    try:
        for model in MODELS:
            for protocol in PROTOCOLS:
                for c in CONCURRENCY:
                    runs = [(perf(rs, model, protocol, c), perf(tr, model, protocol, c)) for _ in range(REPEAT)]
                    best = [max((r[i] for r in runs if r[i]), key=lambda d: d["thr"], default=None) for i in (0, 1)]
                    rows.append((model, protocol, c, best[0], best[1]))
    finally:
        rs.stop()
        tr.stop()
        shutil.rmtree(work, ignore_errors=True)

    def fmt(v):
        return "n/a" if v is None else f"{v:,.0f}"

    def ratio(a, b, key):
        return "n/a" if a is None or b is None or b[key] == 0 else f"{a[key] / b[key]:.2f}x"

    print()
    print(f"{'model':12} {'proto':5} {'conc':>4} | {'tritonrs inf/s':>14} {'p50 us':>8} {'p99 us':>8} | "
          f"{'triton inf/s':>12} {'p50 us':>8} {'p99 us':>8} | {'thr ratio':>9} {'p99 ratio':>9}")
    for model, protocol, c, a, b in rows:
        def g(d, k):
            return None if d is None else d[k]
        print(f"{model:12} {protocol:5} {c:>4} | {fmt(g(a, 'thr')):>14} {fmt(g(a, 'p50')):>8} {fmt(g(a, 'p99')):>8} | "
              f"{fmt(g(b, 'thr')):>12} {fmt(g(b, 'p50')):>8} {fmt(g(b, 'p99')):>8} | "
              f"{ratio(a, b, 'thr'):>9} {ratio(a, b, 'p99'):>9}")
    cost_table([(f"{model:12} {protocol:5} {c:>4}", a, b) for model, protocol, c, a, b in rows],
               f"{'model':12} {'proto':5} {'conc':>4}")
    print()
    print(f"start-to-ready ({len(served)} Python models): tritonrs {rs.ready_ms:.0f} ms, triton {tr.ready_ms:.0f} ms")
    for what, a, b in (("idle", rs.idle_rss, tr.idle_rss), ("peak under load", rs.peak_rss, tr.peak_rss)):
        print(f"RSS {what}, server + stubs: tritonrs {a / 1024:.1f} MiB, triton {b / 1024:.1f} MiB (ratio {a / b:.2f}x)")
    print("RSS adds each process's resident pages, so shared memory both map is counted in each.")


if __name__ == "__main__":
    main()
