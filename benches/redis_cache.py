#!/usr/bin/env python3
"""A response-cache hit through Redis against the model's own run (issue 37's goal: a hit at least 3x
faster on a model that takes 1 ms or more).

One tritonrs server with `--cache-config redis,...` against a redis-server started here on a loopback
port, serving two copies of one Python model that sleeps SLEEP_MS (default 2 ms) and doubles its FP32
[16] input: `sleepy_cached` has `response_cache { enable: true }`, `sleepy` does not. perf_analyzer (from
the anchors) sends the same input over gRPC, so every request to `sleepy_cached` after the first is a
hit served from Redis, and every request to `sleepy` runs the model; rounds alternate between the two
and the best of each counts. Then a plain gRPC client times misses (distinct inputs: a look-up, the
run, and the insert after the response) against runs without the cache, to show what Redis adds to a
miss.

  source scripts/env.sh; python benches/redis_cache.py [--bin target/release/tritonrs] [--sleep-ms 2]
      [--concurrency 1,8] [--rounds 2] [--interval-ms 2000]

Prints throughput and p50/p99 of each and the hit/run ratios. Machines here are shared and noisy:
compare the ratios of one run.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

REPO = Path(__file__).resolve().parent.parent
ANCHORS = Path(os.environ.get("ANCHORS", REPO / ".anchors"))
PERF = ANCHORS / "bin/perf_analyzer"

MODEL_PY = """import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({seconds})
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]) for r in requests]
"""

CONFIG = """name: "{name}"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_repo(repo: Path, sleep_ms: float) -> None:
    for name, extra in [("sleepy", ""), ("sleepy_cached", "response_cache { enable: true }\n")]:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL_PY.format(seconds=sleep_ms / 1000))
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))


def start_redis(work: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", str(work)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True)
        if r.stdout.strip() == "PONG":
            return proc, port
        time.sleep(0.05)
    sys.exit("redis-server did not start")


def wait_ready(http: int, models: list[str], proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"tritonrs exited:\n{log.read_text()[-3000:]}")
        try:
            for m in models:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/models/{m}/ready", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"tritonrs did not become ready:\n{log.read_text()[-3000:]}")


def perf(grpc: int, model: str, concurrency: int, interval_ms: int) -> dict | None:
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        cmd = [str(PERF), "-m", model, "-u", f"127.0.0.1:{grpc}", "-i", "grpc", "--input-data", "zero",
               "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-interval",
               str(interval_ms), "--stability-percentage", "40", "--max-trials", "10", "-f", f.name]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"perf_analyzer failed on {model} c={concurrency}:\n{r.stdout[-2000:]}{r.stderr[-1000:]}")
            return None
        row = next(csv.DictReader(open(f.name)))
    return {"thr": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]) / 1000,
            "p99": float(row["p99 latency"]) / 1000}


def client_latencies(grpc: int, model: str, count: int, offset: float) -> list[float]:
    """Sequential requests with distinct inputs (each a miss where the cache is on), in ms."""
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    times = []
    for n in range(count):
        i = grpcclient.InferInput("IN", [16], "FP32")
        i.set_data_from_numpy(np.full(16, offset + n, np.float32))
        t = time.perf_counter()
        c.infer(model, [i])
        times.append((time.perf_counter() - t) * 1000)
    c.close()
    return times


def cache_counts(http: int, model: str) -> tuple[int, int]:
    import json
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/models/{model}/stats", timeout=5) as r:
        st = json.load(r)["model_stats"][0]
    return st["execution_count"], st["inference_stats"]["cache_hit"]["count"]


def measure(args, grpc: int, http: int) -> None:
    for c in args.concurrency:
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            for model in ("sleepy", "sleepy_cached"):
                r = perf(grpc, model, c, args.interval_ms)
                if r and (model not in best or r["thr"] > best[model]["thr"]):
                    best[model] = r
        if len(best) < 2:
            continue
        run, hit = best["sleepy"], best["sleepy_cached"]
        print(f"concurrency {c}: model run {run['thr']:8.0f}/s p50 {run['p50']:.2f} ms p99 {run['p99']:.2f} ms | "
              f"Redis hit {hit['thr']:8.0f}/s p50 {hit['p50']:.2f} ms p99 {hit['p99']:.2f} ms | "
              f"hit/run: throughput {hit['thr'] / run['thr']:.1f}x, p50 {run['p50'] / hit['p50']:.1f}x faster")
    executions, hits = cache_counts(http, "sleepy_cached")
    print(f"sleepy_cached: {hits} cache hits, {executions} executions")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("TRITONRS_BIN", str(REPO / "target/release/tritonrs")))
    ap.add_argument("--sleep-ms", type=float, default=2.0)
    ap.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--interval-ms", type=int, default=2000)
    ap.add_argument("--misses", type=int, default=300)
    args = ap.parse_args()
    for need in (Path(args.bin), PERF):
        if not need.exists():
            sys.exit(f"{need} not found (cargo build --release; scripts/test-tools.sh installs the anchors)")
    if not shutil.which("redis-server"):
        sys.exit("redis-server not found (apt-get install redis-server)")
    work = Path(tempfile.mkdtemp(prefix="redis-bench-"))
    write_repo(work / "repo", args.sleep_ms)
    redis, redis_port = start_redis(work)
    http, grpc = free_port(), free_port()
    log = work / "tritonrs.log"
    server = subprocess.Popen([args.bin, "--model-repository", str(work / "repo"), "--http-port", str(http),
                               "--grpc-port", str(grpc), "--metrics-port", "0",
                               "--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={redis_port}"],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_ready(http, ["sleepy", "sleepy_cached"], server, log)
        print(f"{args.bin}, model sleeping {args.sleep_ms} ms, Redis on 127.0.0.1:{redis_port}")
        measure(args, grpc, http)
        runs = client_latencies(grpc, "sleepy", args.misses, 1e6)
        misses = client_latencies(grpc, "sleepy_cached", args.misses, 2e6)
        run50, miss50 = statistics.median(runs), statistics.median(misses)
        print(f"misses (tritonclient, c1, distinct inputs): p50 {miss50:.2f} ms against {run50:.2f} ms "
              f"without the cache: Redis adds {miss50 - run50:+.2f} ms to a miss")
    finally:
        server.terminate()
        server.wait(30)
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
