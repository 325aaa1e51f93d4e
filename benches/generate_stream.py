#!/usr/bin/env python3
"""Streamed responses per second through the generate extension's `/generate_stream` (Server-Sent
Events), tritonrs against tritonserver 2.51 in one run, on the same decoupled Python model: each
request asks for 16 responses (a "token" each), 8 clients at a time, each on its own keep-alive
connection. Prints responses per second, requests per second, the time to the first event (p50, p99)
and the tritonrs/tritonserver ratios.

  source scripts/env.sh && cargo build --release && python benches/generate_stream.py

The servers run one after the other (never side by side), in rounds that alternate which goes first;
each round warms up, then measures. The client is asyncio on raw sockets (it reads the chunked body and
counts `data: ` events without parsing them), so it costs the machine as little as a client can. The
model sends its responses from `execute` one after another, as a token generator does. The model is
written to a temporary folder. Machines here are shared and noisy: compare the ratios of one run, not
absolute numbers across runs.

Environment: TRITONRS_BIN (target/release/tritonrs), TRITONSERVER (.anchors/bin/tritonserver),
BENCH_CONCURRENCY (8), BENCH_RESPONSES (16), BENCH_SECONDS (10, per round and server),
BENCH_WARMUP_SECONDS (2), BENCH_ROUNDS (2), BENCH_INSTANCES (the model's instance count, 1).
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRITONRS = Path(os.environ.get("TRITONRS_BIN", REPO / "target/release/tritonrs"))
TRITONSERVER = Path(os.environ.get("TRITONSERVER", REPO / ".anchors/bin/tritonserver"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "8"))
RESPONSES = int(os.environ.get("BENCH_RESPONSES", "16"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
WARMUP = float(os.environ.get("BENCH_WARMUP_SECONDS", "2"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
INSTANCES = int(os.environ.get("BENCH_INSTANCES", "1"))
MODEL = "token_stream"

CONFIG = f"""
backend: "python"
max_batch_size: 0
input [ {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
        {{ name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: {INSTANCES} kind: KIND_CPU }} ]
model_transaction_policy {{ decoupled: true }}
"""

# One response per "token", sent from execute as a generator loop would, then the final flag alone.
MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            prompt = pb_utils.get_input_tensor_by_name(r, "text_input").as_numpy().reshape(-1)[0]
            n = int(pb_utils.get_input_tensor_by_name(r, "max_tokens").as_numpy().reshape(-1)[0])
            sender = r.get_response_sender()
            for i in range(n):
                token = np.array([b" tok%d" % i], np.object_)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", token)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def write_model(root: Path) -> Path:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(textwrap.dedent(CONFIG))
    (root / MODEL / "1" / "model.py").write_text(textwrap.dedent(MODEL_PY))
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process on free ports, ready when started."""

    def __init__(self, name: str, cmd: list[str], port: int):
        self.name, self.port = name, port
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                sys.exit(f"{name} did not become ready:\n{self.log.read().decode(errors='replace')[-3000:]}")
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start(name: str, repo: Path) -> Server:
    http, grpc, metrics = free_port(), free_port(), free_port()
    common = [f"--model-repository={repo}", f"--http-port={http}", f"--grpc-port={grpc}",
              f"--metrics-port={metrics}", "--http-address=127.0.0.1"]
    if name == "tritonrs":
        cmd = [str(TRITONRS), *common, f"--backend-config=python,python-executable={sys.executable}"]
    else:
        cmd = [str(TRITONSERVER), *common]
    return Server(name, cmd, http)


async def read_reply(reader: asyncio.StreamReader, sent_at: float) -> tuple[int, float | None, int]:
    """Reads one chunked reply: its status, the time to its first event, and its number of events."""
    status = int((await reader.readline()).split()[1])
    chunked = False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if not chunked:
        raise RuntimeError(f"expected a chunked reply, got status {status}")
    first, events = None, 0
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        if size == 0:
            await reader.readline()
            return status, first, events
        chunk = await reader.readexactly(size + 2)
        n = chunk.count(b"data: ")
        if n and first is None:
            first = time.perf_counter() - sent_at
        events += n


async def client(port: int, until: float, out: list):
    """Sends requests one after another on one connection until `until`; records (sent, first event
    after, done, events) for each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"text_input": "Tell me about the camera event.", "max_tokens": RESPONSES}).encode()
    request = (f"POST /v2/models/{MODEL}/generate_stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    try:
        while time.perf_counter() < until:
            sent = time.perf_counter()
            writer.write(request)
            status, first, events = await read_reply(reader, sent)
            if status != 200 or events != RESPONSES:
                raise RuntimeError(f"status {status} with {events} events (expected 200 and {RESPONSES})")
            out.append((sent, first, time.perf_counter(), events))
    finally:
        writer.close()


async def load(port: int, seconds: float) -> list:
    out: list = []
    until = time.perf_counter() + seconds
    await asyncio.gather(*(client(port, until, out) for _ in range(CONCURRENCY)))
    return out


def measure(server: Server) -> dict:
    asyncio.run(load(server.port, WARMUP))
    begin = time.perf_counter()
    done = asyncio.run(load(server.port, SECONDS))
    # Requests sent after the start of the window and the time until the last of them ended.
    end = max(r[2] for r in done)
    ttfe = sorted(r[1] * 1000 for r in done)
    return {
        "responses_s": sum(r[3] for r in done) / (end - begin),
        "requests_s": len(done) / (end - begin),
        "ttfe_p50": statistics.median(ttfe),
        "ttfe_p99": ttfe[min(len(ttfe) - 1, int(len(ttfe) * 0.99))],
    }


def main():
    for path in (TRITONRS, TRITONSERVER):
        if not path.exists():
            sys.exit(f"{path} not found (cargo build --release; scripts/test-tools.sh installs tritonserver)")
    results: dict[str, list[dict]] = {"tritonrs": [], "tritonserver": []}
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_model(Path(tmp) / "repo")
        for round_ in range(ROUNDS):
            order = ["tritonrs", "tritonserver"] if round_ % 2 == 0 else ["tritonserver", "tritonrs"]
            for name in order:
                server = start(name, repo)
                try:
                    r = measure(server)
                finally:
                    server.stop()
                results[name].append(r)
                print(f"round {round_ + 1} {name:12s} {r['responses_s']:9.0f} responses/s "
                      f"{r['requests_s']:7.1f} requests/s  TTFE p50 {r['ttfe_p50']:6.2f} ms  "
                      f"p99 {r['ttfe_p99']:6.2f} ms", flush=True)
    # Each server's median round by throughput (of two, the slower), so one disturbed round does not
    # decide the ratio.
    best = {n: sorted(rs, key=lambda r: r["responses_s"])[(len(rs) - 1) // 2] for n, rs in results.items()}
    print(f"\n/generate_stream, concurrency {CONCURRENCY}, {RESPONSES} responses a request, "
          f"{SECONDS:g} s per round, {ROUNDS} rounds (each server's median round; of two, the slower):")
    print(f"{'server':14s}{'responses/s':>13s}{'requests/s':>12s}{'TTFE p50 ms':>13s}{'TTFE p99 ms':>13s}")
    for n, r in best.items():
        print(f"{n:14s}{r['responses_s']:13.0f}{r['requests_s']:12.1f}{r['ttfe_p50']:13.2f}{r['ttfe_p99']:13.2f}")
    rs, ts = best["tritonrs"], best["tritonserver"]
    print(f"tritonrs/tritonserver: throughput {rs['responses_s'] / ts['responses_s']:.2f}x, "
          f"TTFE p50 {rs['ttfe_p50'] / ts['ttfe_p50']:.2f}x (lower is better)")


if __name__ == "__main__":
    main()
