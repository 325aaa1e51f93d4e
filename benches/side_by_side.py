#!/usr/bin/env python3
"""Runs perf_analyzer against tritonrs and the real Triton in one run, on the same machine, and prints
throughput and p50/p99 latency for each with the tritonrs/Triton ratios, plus start-to-ready time and
idle RSS of both servers.

  benches/side_by_side.sh            (installs the anchors, builds the release binary, runs this)

tritonrs serves model-repos/examples (the ONNX `simple` model); Triton serves benches/triton-repo
(the same model for its Python backend, the only backend the reference build has). Machines here are
shared and noisy: compare the ratios from one run, not absolute numbers across runs.

BENCH_SERVER_CORES and BENCH_CLIENT_CORES (e.g. "0" and "1", both or neither) give each server (with its
threads and Python stubs) and perf_analyzer cores of their own, set by `sched_setaffinity` before they
start: on a 2-core machine perf_analyzer's own 110-200 µs of CPU a request otherwise shares the cores
with the server it measures, so the throughput ratio there carries perf_analyzer's cost as much as the
servers'. Both servers get the same cores, one after the other; each sizes its thread pools to them.
"""
from __future__ import annotations

import csv
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANCHORS = Path(os.environ.get("ANCHORS", Path.home() / ".cache/anchors"))
PERF = ANCHORS / "bin/perf_analyzer"
TRITON = ANCHORS / "bin/tritonserver"
TRITONRS = REPO / "target/release/tritonrs"
CONCURRENCY = [int(c) for c in os.environ.get("BENCH_CONCURRENCY", "1,8").split(",")]
INTERVAL_MS = os.environ.get("BENCH_INTERVAL_MS", "3000")
# perf_analyzer's default 10% stability is rarely met on a shared 2-core machine.
STABILITY = os.environ.get("BENCH_STABILITY_PERCENT", "40")


def _cores(var: str) -> set[int] | None:
    v = os.environ.get(var, "").strip()
    return {int(c) for c in v.split(",")} if v else None


SERVER_CORES, CLIENT_CORES = _cores("BENCH_SERVER_CORES"), _cores("BENCH_CLIENT_CORES")
if (SERVER_CORES is None) != (CLIENT_CORES is None):
    sys.exit("BENCH_SERVER_CORES and BENCH_CLIENT_CORES go together")


def on_cores(cores: set[int] | None):
    """A `preexec_fn` that puts the child (and what it starts) on `cores`; None when not splitting."""
    return None if cores is None else (lambda: os.sched_setaffinity(0, cores))


def split_note() -> str:
    return (f"; servers on cores {sorted(SERVER_CORES)}, perf_analyzer on cores {sorted(CLIENT_CORES)}"
            if SERVER_CORES else "; servers and perf_analyzer share the cores")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    """RSS of a process and all its descendants (Triton's Python stubs are child processes)."""
    total = 0
    for p in [pid] + descendants(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def descendants(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int(Path(d, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out += [int(d.name)] + descendants(int(d.name))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its live descendants (the servers' Python stubs)."""
    ticks = 0
    for p in [pid] + descendants(pid):
        try:
            # After the command's closing parenthesis: state is field 3, utime and stime fields 14 and 15.
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def inference_count(http: int, model: str) -> int | None:
    """The model's inference count from the statistics extension (both servers have it)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/models/{model}/stats", timeout=5) as r:
            return sum(int(m.get("inference_count", 0)) for m in json.load(r).get("model_stats", []))
    except (OSError, ValueError):
        return None


class CpuCost:
    """CPU time per inference over a perf_analyzer run: the server's (with its stubs) and
    perf_analyzer's own, which shares this machine's cores with the server. Start before the run,
    `stop` after it; perf_analyzer must have been waited for (its time is in RUSAGE_CHILDREN then)."""

    def __init__(self, server, model: str):
        self.server, self.model = server, model
        self.count = inference_count(server.http, model)
        self.cpu = cpu_seconds(server.proc.pid)
        self.children = self._children()

    @staticmethod
    def _children() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    def stop(self) -> dict:
        count = inference_count(self.server.http, self.model)
        if self.count is None or count is None or count <= self.count:
            return {}
        n = count - self.count
        return {"server_us": (cpu_seconds(self.server.proc.pid) - self.cpu) * 1e6 / n,
                "client_us": (self._children() - self.children) * 1e6 / n}


def cost_table(rows, label: str):
    """CPU per inference for each row (`label` names a row's key columns); the server ratio is
    triton/tritonrs, so above 1 means tritonrs spends less."""
    print()
    print("CPU per inference, in microseconds (server includes its Python stubs" + split_note() + "):")
    print(f"{label} | {'tritonrs server':>15} {'perf_analyzer':>13} | {'triton server':>13} {'perf_analyzer':>13} | "
          f"{'server ratio':>12}")
    for key, a, b in rows:
        def g(d, k):
            v = None if d is None else d.get(k)
            return "n/a" if v is None else f"{v:,.0f}"
        both = a and b and a.get("server_us") and b.get("server_us")
        ratio = f"{b['server_us'] / a['server_us']:.2f}x" if both else "n/a"
        print(f"{key} | {g(a, 'server_us'):>15} {g(a, 'client_us'):>13} | {g(b, 'server_us'):>13} "
              f"{g(b, 'client_us'):>13} | {ratio:>12}")


class Server:
    def __init__(self, name: str, cmd: list[str], http: int, grpc: int | None, env=None):
        self.name, self.http, self.grpc = name, http, grpc
        start = time.monotonic()
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=on_cores(SERVER_CORES))
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1).status == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() - start > 120:
                self.log.seek(0)
                sys.exit(f"{name} did not become ready:\n{self.log.read().decode(errors='replace')[-3000:]}")
            time.sleep(0.01)
        self.ready_ms = (time.monotonic() - start) * 1000
        time.sleep(1.0)
        self.idle_rss = rss_kib(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def perf(server: Server, protocol: str, concurrency: int, model: str = "simple") -> dict | None:
    port = server.http if protocol == "http" else server.grpc
    if port is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        cmd = [str(PERF), "-m", model, "-u", f"127.0.0.1:{port}", "-i", protocol,
               "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-interval", INTERVAL_MS,
               "--stability-percentage", STABILITY, "--max-trials", "20", "-f", f.name]
        cost = CpuCost(server, model)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, preexec_fn=on_cores(CLIENT_CORES))
        if r.returncode != 0:
            print(f"perf_analyzer failed for {server.name} {protocol} c={concurrency}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            return None
        row = next(csv.DictReader(open(f.name)))
    return {"thr": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]), "p99": float(row["p99 latency"]),
            **cost.stop()}


def main():
    env = dict(os.environ)
    rs_http, rs_grpc = free_port(), free_port()
    rs = Server("tritonrs", [str(TRITONRS), "--model-repository", str(REPO / "model-repos/examples"),
                             "--http-port", str(rs_http), "--grpc-port", str(rs_grpc), "--metrics-port", "0",
                             "--log-info=false"], rs_http, rs_grpc, env)
    try:
        socket.create_connection(("127.0.0.1", rs_grpc), timeout=2).close()
    except OSError:
        rs.grpc = None  # a build without the gRPC front-end
    t_http, t_grpc, t_metrics = free_port(), free_port(), free_port()
    tr = Server("triton", [str(TRITON), "--model-repository", str(REPO / "benches/triton-repo"),
                           "--http-port", str(t_http), "--grpc-port", str(t_grpc), "--metrics-port", str(t_metrics),
                           "--log-info=false"], t_http, t_grpc)
    try:
        rows = []
        for protocol in ("grpc", "http"):
            for c in CONCURRENCY:
                a, b = perf(rs, protocol, c), perf(tr, protocol, c)
                rows.append((protocol, c, a, b))
    finally:
        rs.stop()
        tr.stop()

    def fmt(v, unit=""):
        return "n/a" if v is None else f"{v:,.0f}{unit}"

    def ratio(a, b, key):
        return "n/a" if a is None or b is None or b[key] == 0 else f"{a[key] / b[key]:.2f}x"

    print()
    print(f"{'proto':5} {'conc':>4} | {'tritonrs inf/s':>14} {'p50 us':>8} {'p99 us':>8} | {'triton inf/s':>12} {'p50 us':>8} {'p99 us':>8} | {'thr ratio':>9} {'p50 ratio':>9} {'p99 ratio':>9}")
    for protocol, c, a, b in rows:
        g = lambda d, k: None if d is None else d[k]
        print(f"{protocol:5} {c:>4} | {fmt(g(a,'thr')):>14} {fmt(g(a,'p50')):>8} {fmt(g(a,'p99')):>8} | "
              f"{fmt(g(b,'thr')):>12} {fmt(g(b,'p50')):>8} {fmt(g(b,'p99')):>8} | "
              f"{ratio(a,b,'thr'):>9} {ratio(a,b,'p50'):>9} {ratio(a,b,'p99'):>9}")
    cost_table([(f"{protocol:5} {c:>4}", a, b) for protocol, c, a, b in rows], f"{'proto':5} {'conc':>4}")
    print()
    print(f"start-to-ready: tritonrs {rs.ready_ms:.0f} ms, triton {tr.ready_ms:.0f} ms (ratio {rs.ready_ms / tr.ready_ms:.2f}x)")
    print(f"idle RSS (with children): tritonrs {rs.idle_rss / 1024:.1f} MiB, triton {tr.idle_rss / 1024:.1f} MiB "
          f"(ratio {rs.idle_rss / tr.idle_rss:.2f}x)")
    print("tritonrs runs the ONNX model through ONNX Runtime; Triton runs the same model in its Python backend.")


if __name__ == "__main__":
    main()
