#!/usr/bin/env python3
"""A camera-sized input (FP32 [1,3,224,224], 588 KiB) into a small conv net: how close does the served
throughput come to running the same model in-process with ONNX Runtime? perf_analyzer at concurrency 1
over gRPC, HTTP and gRPC with system shared memory, against the in-process floor measured in the same
run, with the server's own per-stage times.

  source scripts/env.sh && cargo build --release --bin tritonrs && python benches/large_tensor.py

The in-process floor is onnxruntime's Python API in this venv (the same libonnxruntime.so the server
loads), timing `session.run` on one pre-built input, twice: with ONNX Runtime's default options (its
thread pools spin after a run) and with the server's (no spinning; `--backend-config=onnxruntime,
allow_spinning=true` turns it back on). The server is measured both ways too, so each served row has
a floor with the same session options beside it. The floor is measured again just before and just
after every row, and each row is compared with the mean of those two: its own minutes' floor, where
one floor for the whole run would compare a row with the machine's speed at another moment. The
model is generated into a temporary folder (weights fixed by a seed). Machines here are shared and noisy: compare the ratios of one run, not
absolute numbers across runs.

On a 2-core machine the client shares the cores with ONNX Runtime's two intra-op threads, so the
served rows include perf_analyzer's own work (building and sending 588 KiB per request); the server's
columns show what the server itself adds (request - infer), and `client` is perf_analyzer's CPU time
per request (for the `python` rows, this process's: tritonclient's Python API with its input built
once and reused, a leaner client than perf_analyzer, which builds every request anew). The
`in-process (tune)` rows serve the same model through the server's core with no
transport and no client process (`tritonrs tune` at concurrency 1 on the model's own configuration):
what the server costs when the network and the client are taken away.

Environment: BENCH_INTERVAL_MS (3000), BENCH_STABILITY_PERCENT (40), BENCH_RUNS (in-process runs, 300),
BENCH_SERVER_ARGS (extra server flags), BENCH_PIN (cores, e.g. 0: the served rows put the I/O threads and
the model's instance on those cores, with `--io-cpu-cores` and a `--host-policy` the model names, so a
request's two thread hand-offs stay on one core; the in-process and tune rows are not pinned),
BENCH_TRACE (1: after the table, one more perf_analyzer run per protocol against a server tracing every
request at TIMESTAMPS level, printing the median time between each two of a request's trace events:
where the server's own time goes, stage by stage; tracing itself adds a little to each stage).
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from side_by_side import PERF, TRITONRS, Server, free_port  # noqa: E402
from shm_compare import perf_cmd  # noqa: E402

TRITONRS = Path(os.environ.get("TRITONRS_BIN", TRITONRS))
INTERVAL_MS = os.environ.get("BENCH_INTERVAL_MS", "3000")
STABILITY = os.environ.get("BENCH_STABILITY_PERCENT", "40")
RUNS = int(os.environ.get("BENCH_RUNS", "300"))
PIN = os.environ.get("BENCH_PIN", "")
SHAPE = [1, 3, 224, 224]
NAME = "camera_conv"


def write_model(repo: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3), dtype=np.float32) * 0.1, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3), dtype=np.float32) * 0.1, "w2")
    nodes = [
        helper.make_node("Conv", ["INPUT", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["OUTPUT"]),
    ]
    graph = helper.make_graph(nodes, NAME, [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [1, 8])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    d = repo / NAME
    (d / "1").mkdir(parents=True)
    onnx.save(model, str(d / "1/model.onnx"))
    (d / "config.pbtxt").write_text(
        f'name: "{NAME}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: {SHAPE} }} ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1, 8 ] } ]\n'
        # On the CPU also where a GPU is present (the floor is onnxruntime's CPU provider).
        'instance_group [ { kind: KIND_CPU } ]\n')
    return d / "1/model.onnx"


class InProcess:
    """The in-process floor: `session.run` in this process, one session per spinning setting, measured
    again next to every served row (`measure`), so that a row is compared with the floor of its own
    minutes: on a shared machine the floor drifts by tens of percent between the start and the end of
    a run, and a floor from another moment measures the drift, not the server."""

    def __init__(self, model: Path):
        import onnxruntime as ort

        self.x = np.random.default_rng(1).random(SHAPE, dtype=np.float32)
        self.sessions = {}
        for spinning in (False, True):
            so = ort.SessionOptions()
            so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
            so.add_session_config_entry("session.inter_op.allow_spinning", "1" if spinning else "0")
            self.sessions[spinning] = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        self.all: dict[bool, list[float]] = {False: [], True: []}

    def measure(self, spinning: bool) -> float:
        """Runs per second of `session.run`, after a warm-up (kept in `all` too)."""
        sess = self.sessions[spinning]
        for _ in range(20):
            sess.run(None, {"INPUT": self.x})
        t = time.perf_counter()
        for _ in range(RUNS):
            sess.run(None, {"INPUT": self.x})
        rate = RUNS / (time.perf_counter() - t)
        self.all[spinning].append(rate)
        return rate

    def bracket(self, spinning: bool, row):
        """`row()`'s result with `floor`: the mean of the floor measured just before and just after it
        (runs per second), or None where the row failed."""
        before = self.measure(spinning)
        r = row()
        after = self.measure(spinning)
        if r is not None:
            r["floor"] = (before + after) / 2
        return r


def stats(server: Server) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http}/v2/models/{NAME}/stats") as r:
        s = json.load(r)["model_stats"][0]["inference_stats"]
    return {k: (int(v["count"]), int(v["ns"])) for k, v in s.items() if isinstance(v, dict) and "ns" in v}


def per_request(before: dict, after: dict) -> tuple[int, dict]:
    """Successful requests between two stats() readings, and the server's mean per-request stage
    times over them, in microseconds."""
    n = max(1, after["success"][0] - before["success"][0])
    return n, {k: (after[k][1] - before[k][1]) / n / 1000
               for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")}


def perf(pa: list[str], server: Server, protocol: str, shm: bool) -> dict | None:
    port = server.grpc if protocol == "grpc" else server.http
    before = stats(server)
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        cmd = [*pa, "-m", NAME, "-u", f"127.0.0.1:{port}", "-i", protocol, "--concurrency-range", "1:1",
               "--measurement-interval", INTERVAL_MS, "--stability-percentage", STABILITY, "--max-trials", "20",
               "-f", f.name]
        if shm:
            cmd += ["--shared-memory", "system", "--output-shared-memory-size", "32"]
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, for its resource usage
            out.seek(0)
            if proc.returncode != 0:
                print(f"perf_analyzer failed for {protocol} shm={shm}:\n{out.read()[-4000:]}")
                return None
        row = next(csv.DictReader(open(f.name)))
    after = stats(server)
    # The server's mean per-request times over the whole perf_analyzer run (warm-up trials included).
    n, per = per_request(before, after)
    # perf_analyzer's own CPU time per request (user + system, all its threads, warm-up included).
    client_ms = (usage.ru_utime + usage.ru_stime) * 1000 / n
    return {"thr": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]), "server": per,
            "client_ms": client_ms}


def in_process_served(tmp: Path, spinning: bool) -> dict | None:
    """The same model served through the server's core with no transport and no client process:
    `tritonrs tune` loads it as the server does and keeps one request in flight from inside the
    process (one variant: the model's own configuration, concurrency 1, the same windows)."""
    out = tmp / f"tune-{spinning}"
    space = tmp / "own-configuration.toml"
    space.write_text("")  # a custom space with no keys: the model's own values only
    extra = ["--backend-config=onnxruntime,allow_spinning=true"] if spinning else []
    cmd = [str(TRITONRS), "tune", "--model-repository", str(tmp / "repo"), "--model", NAME,
           "--search", f"custom:{space}", "--concurrency", "1", "--measurement-interval-ms", INTERVAL_MS,
           "--stability-percentage", STABILITY, "--max-trials", "20", "--quiet", "--output-dir", str(out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"tritonrs tune failed (spinning={spinning}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return None
    row = next(csv.DictReader(open(out / "metrics-model-inference.csv")))

    def us(key: str) -> float:
        return float(row[key]) * 1000

    return {"thr": float(row["Throughput (infer/sec)"]), "p50": us("p50 Latency (ms)"),
            "server": {"success": us("Avg Latency (ms)"), "queue": us("Server Queue time (ms)"),
                       "compute_input": us("Server Compute Input time (ms)"),
                       "compute_infer": us("Server Compute Infer time (ms)"),
                       "compute_output": us("Server Compute Output time (ms)")},
            "client_ms": None}


def python_client(server: Server, protocol: str, shm: bool) -> dict:
    """tritonclient's Python API in this process, one request in flight, its input built once and
    reused (with `shm`, written once into a registered system shared memory region): a client that does
    little per request besides the call itself. client_ms is this process's CPU time per request.
    None, with the reason printed, where tritonclient for that protocol cannot be imported."""
    try:
        if protocol == "grpc":
            import tritonclient.grpc as mod
        else:
            import tritonclient.http as mod
    except (ImportError, RuntimeError) as e:  # tritonclient raises RuntimeError without its extra
        print(f"python {protocol} rows skipped: {e}")
        return None

    x = np.random.default_rng(1).random(SHAPE, dtype=np.float32)
    url = f"127.0.0.1:{server.grpc if protocol == 'grpc' else server.http}"
    client = mod.InferenceServerClient(url)
    inp = mod.InferInput("INPUT", SHAPE, "FP32")
    out = mod.InferRequestedOutput("OUTPUT") if protocol == "grpc" else mod.InferRequestedOutput("OUTPUT", binary_data=True)
    region = None
    if shm:
        import tritonclient.utils.shared_memory as sysshm

        key = f"/large_tensor_{os.getpid()}"
        region = sysshm.create_shared_memory_region("large_tensor_in", key, x.nbytes)
        sysshm.set_shared_memory_region(region, [x])
        client.register_system_shared_memory("large_tensor_in", key, x.nbytes)
        inp.set_shared_memory("large_tensor_in", x.nbytes)
    elif protocol == "grpc":
        inp.set_data_from_numpy(x)
    else:
        inp.set_data_from_numpy(x, binary_data=True)
    try:
        for _ in range(30):
            client.infer(NAME, [inp], outputs=[out])
        before = stats(server)
        deadline = time.perf_counter() + int(INTERVAL_MS) * 3 / 1000
        n, latencies = 0, []
        t0, c0 = time.perf_counter(), time.process_time()
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            client.infer(NAME, [inp], outputs=[out])
            latencies.append(time.perf_counter() - t)
            n += 1
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        after = stats(server)
    finally:
        if region is not None:
            client.unregister_system_shared_memory("large_tensor_in")
            sysshm.destroy_shared_memory_region(region)
    _, per = per_request(before, after)
    latencies.sort()
    return {"thr": n / wall, "p50": latencies[len(latencies) // 2] * 1e6, "server": per, "client_ms": cpu * 1000 / n}


def pinned_repo(tmp: Path) -> Path:
    """A copy of the repository whose model's instance names the host policy `p0` (BENCH_PIN)."""
    import shutil

    repo = tmp / "pinned-repo"
    if not repo.exists():
        shutil.copytree(tmp / "repo", repo)
        config = repo / NAME / "config.pbtxt"
        config.write_text(config.read_text().replace("{ kind: KIND_CPU }", '{ kind: KIND_CPU host_policy: "p0" }'))
    return repo


def serve(tmp: Path, spinning: bool, floor: InProcess) -> list:
    http, grpc = free_port(), free_port()
    extra = ["--backend-config=onnxruntime,allow_spinning=true"] if spinning else []
    repo = tmp / "repo"
    if PIN:
        repo = pinned_repo(tmp)
        extra += [f"--host-policy=p0,cpu-cores={PIN}", f"--io-cpu-cores={PIN}"]
    rs = Server("tritonrs", [str(TRITONRS), "--model-repository", str(repo), "--http-port", str(http),
                             "--grpc-port", str(grpc), "--metrics-port", "0", "--log-info=false", *extra,
                             *os.environ.get("BENCH_SERVER_ARGS", "").split()],
                http, grpc, dict(os.environ))
    try:
        shm_pa = perf_cmd(tmp)
        rows = [("grpc", lambda: perf([str(PERF)], rs, "grpc", False)),
                ("http", lambda: perf([str(PERF)], rs, "http", False)),
                ("grpc + system shm", lambda: perf(shm_pa, rs, "grpc", True)),
                ("python grpc", lambda: python_client(rs, "grpc", False)),
                ("python http", lambda: python_client(rs, "http", False)),
                ("python grpc + system shm", lambda: python_client(rs, "grpc", True))]
        return [("in-process (tune)", None)] + [(name, floor.bracket(spinning, row)) for name, row in rows]
    finally:
        rs.stop()


def traced_stages(tmp: Path) -> list[str]:
    """BENCH_TRACE: per protocol, a server (the table's served setting: no spinning, BENCH_PIN) that traces
    every request, one perf_analyzer run, and the median gap between each two consecutive trace events."""
    import statistics

    lines = []
    repo = pinned_repo(tmp) if PIN else tmp / "repo"
    pin = [f"--host-policy=p0,cpu-cores={PIN}", f"--io-cpu-cores={PIN}"] if PIN else []
    for protocol in ("grpc", "http"):
        trace = tmp / f"trace-{protocol}.json"
        http, grpc = free_port(), free_port()
        rs = Server("tritonrs", [str(TRITONRS), "--model-repository", str(repo), "--http-port", str(http),
                                 "--grpc-port", str(grpc), "--metrics-port", "0", "--log-info=false", *pin,
                                 "--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS",
                                 "--trace-config", "rate=1", *os.environ.get("BENCH_SERVER_ARGS", "").split()],
                    http, grpc, dict(os.environ))
        try:
            perf([str(PERF)], rs, protocol, False)
        finally:
            rs.stop()
        by_trace: dict[int, list[tuple[int, str]]] = {}  # a trace's events may come in several records
        for record in json.loads(trace.read_text() or "[]"):
            by_trace.setdefault(record["id"], []).extend((t["ns"], t["name"]) for t in record.get("timestamps", []))
        gaps: dict[str, list[float]] = {}
        for stamps in by_trace.values():
            stamps.sort()
            for (a_ns, a), (b_ns, b) in zip(stamps, stamps[1:]):
                gaps.setdefault(f"{a} -> {b}", []).append((b_ns - a_ns) / 1000)
        common = max((len(v) for v in gaps.values()), default=0)
        lines.append(f"\n{protocol}, every request traced ({common} requests): median µs between trace events")
        for name, v in gaps.items():
            if len(v) * 2 >= common:  # the events every request has
                lines.append(f"  {name:48} {statistics.median(v):9.1f}")
    return lines


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = write_model(tmp / "repo")
        floors = InProcess(model)
        served = {spin: serve(tmp, spin, floors) for spin in (False, True)}
        for spin in (False, True):  # after the server has stopped, so the two do not share the cores
            served[spin][0] = (served[spin][0][0], floors.bracket(spin, lambda: in_process_served(tmp, spin)))
        traced = traced_stages(tmp) if os.environ.get("BENCH_TRACE") == "1" else []
    floor = {spin: sum(v) / len(v) for spin, v in floors.all.items()}
    print()
    print(f"FP32 {SHAPE} into a 2-layer conv net, concurrency 1. In-process ONNX Runtime floor: "
          f"{floor[True]:,.1f} runs/s ({1000 / floor[True]:.2f} ms) with its default spinning thread pools, "
          f"{floor[False]:,.1f} runs/s ({1000 / floor[False]:.2f} ms) without (the server's default), the means of"
          f" {len(floors.all[False])} measurements each (no spinning: {', '.join(f'{1000 / r:.2f}' for r in floors.all[False])} ms)"
          + (f"; served rows pinned to cores {PIN} (I/O threads and the instance)" if PIN else ""))
    print(f"{'path':36} | {'inf/s':>8} {'p50 ms':>7} | {'/floor':>6} {'/same':>6} | server ms: {'request':>7} "
          f"{'queue':>6} {'input':>6} {'infer':>6} {'output':>6} | {'floor':>5} {'own':>5} {'share':>6} {'run':>6} | {'client':>6}")
    for spin in (False, True):
        for name, r in served[spin]:
            label = f"{name}{' (spinning)' if spin else ''}"
            if r is None:
                print(f"{label:36} | n/a")
                continue
            s = r["server"]
            own = (s["success"] - s["compute_infer"]) / 1000
            # The in-process run with the same spinning setting measured next to this row, in ms: what the
            # server's own time and its ONNX Runtime run are compared with (issue 39's goals: own at most
            # 5% of it, run within 10%).
            run = 1000 / r["floor"]
            print(f"{label:36} | {r['thr']:>8,.1f} {r['p50'] / 1000:>7.2f} | {r['thr'] / floor[True]:>5.2f}x "
                  f"{r['thr'] / r['floor']:>5.2f}x | {'':10} {s['success'] / 1000:>7.2f} {s['queue'] / 1000:>6.2f} "
                  f"{s['compute_input'] / 1000:>6.2f} {s['compute_infer'] / 1000:>6.2f} {s['compute_output'] / 1000:>6.2f}"
                  f" | {run:>5.2f} {own:>5.2f} {own / run:>6.1%} {s['compute_infer'] / 1000 / run:>5.2f}x | " + (f"{r['client_ms']:>6.2f}" if r["client_ms"] is not None else f"{'-':>6}"))
    print("/floor: served throughput over the default floor; /same: over the row's floor (same spinning setting);"
          " floor: the in-process run with the same spinning setting, ms, measured just before and just after"
          " the row (their mean); own: the server's time per request outside ONNX Runtime's run (request -"
          " infer), ms; share: own over that floor; run: the server's ONNX Runtime run (infer) over that floor;"
          " client:"
          " perf_analyzer's own CPU time per request (user + system), ms, which at concurrency 1 on a shared"
          " machine is spent in series with the server's. in-process: `tritonrs tune` driving the model through"
          " the core from inside the server process (request = its average latency)")
    for line in traced:
        print(line)


if __name__ == "__main__":
    main()
