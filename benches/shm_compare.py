#!/usr/bin/env python3
"""System shared memory against the socket: perf_analyzer on an identity model with a 1 MiB input and a
1 MiB output (FP32 [262144]), gRPC, concurrency 4, with and without `--shared-memory system`, on
tritonrs and on the real Triton in one run, printing throughput, latency and the ratios.

  source scripts/env.sh && cargo build --release --bin tritonrs && python benches/shm_compare.py

tritonrs serves the identity twice: as an ONNX model (ONNX Runtime) and as a Python model; Triton
serves the same Python model (its reference build has only the Python backend), so the Python rows are
like for like. perf_analyzer and Triton come from ../shared/anchors/install.sh. Machines here are
shared and noisy: compare the ratios of one run, not absolute numbers across runs.

Environment: BENCH_PROTOCOL (grpc), BENCH_CONCURRENCY (4), BENCH_INTERVAL_MS (3000),
BENCH_STABILITY_PERCENT (40).
"""
from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from side_by_side import ANCHORS, TRITON, TRITONRS, Server, free_port  # noqa: E402

TRITONRS = Path(os.environ.get("TRITONRS_BIN", TRITONRS))

ELEMENTS = 262144  # FP32: 1 MiB
PROTOCOL = os.environ.get("BENCH_PROTOCOL", "grpc")
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "4"))
INTERVAL_MS = os.environ.get("BENCH_INTERVAL_MS", "3000")
STABILITY = os.environ.get("BENCH_STABILITY_PERCENT", "40")

PY_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy())])
                for r in requests]
'''

CONFIG = '''name: "{name}"
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {n} ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {n} ] }} ]
'''


def write_repo(root: Path, onnx: bool) -> Path:
    repo = root / ("rs" if onnx else "triton")
    py = repo / "identity_py"
    (py / "1").mkdir(parents=True)
    (py / "1/model.py").write_text(PY_MODEL)
    (py / "config.pbtxt").write_text(CONFIG.format(name="identity_py", backend="python", n=ELEMENTS))
    if onnx:
        import onnx
        from onnx import TensorProto, helper

        m = repo / "identity_onnx"
        (m / "1").mkdir(parents=True)
        graph = helper.make_graph(
            [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])], "identity",
            [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [ELEMENTS])],
            [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [ELEMENTS])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.save(model, str(m / "1/model.onnx"))
        (m / "config.pbtxt").write_text(CONFIG.format(name="identity_onnx", backend="onnxruntime", n=ELEMENTS))
    return repo


def perf_cmd(tmp: Path) -> list[str]:
    """perf_analyzer behind the anchors' glibc, with a libcudart.so it can dlopen: perf_analyzer 2.60
    loads the CUDA runtime for any --shared-memory, even `system` (no GPU is needed to load it)."""
    glibc = ANCHORS / "glibc/usr/lib/x86_64-linux-gnu"
    cudart = sorted(glob.glob(str(ANCHORS / "triton/nvidia_pytriton.libs/libcudart*.so*")))
    if not cudart:
        sys.exit("no libcudart in the anchors; run ../shared/anchors/install.sh")
    link = tmp / "libcudart.so"
    if not link.exists():
        link.symlink_to(cudart[0])
    return [str(glibc / "ld-linux-x86-64.so.2"), "--library-path", f"{glibc}:{tmp}",
            str(ANCHORS / "pa/perf_analyzer/bin/perf_analyzer")]


def perf(pa: list[str], server: Server, model: str, shm: bool) -> dict | None:
    port = server.grpc if PROTOCOL == "grpc" else server.http
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        cmd = [*pa, "-m", model, "-u", f"127.0.0.1:{port}", "-i", PROTOCOL,
               "--concurrency-range", f"{CONCURRENCY}:{CONCURRENCY}", "--measurement-interval", INTERVAL_MS,
               "--stability-percentage", STABILITY, "--max-trials", "20", "-f", f.name]
        if shm:
            cmd += ["--shared-memory", "system", "--output-shared-memory-size", str(ELEMENTS * 4)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"perf_analyzer failed for {server.name} {model} shm={shm}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            return None
        row = next(csv.DictReader(open(f.name)))
    return {"thr": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]), "p99": float(row["p99 latency"])}


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        pa = perf_cmd(tmp)
        rs_repo, tr_repo = write_repo(tmp, onnx=True), write_repo(tmp, onnx=False)
        rs_http, rs_grpc = free_port(), free_port()
        rs = Server("tritonrs", [str(TRITONRS), "--model-repository", str(rs_repo), "--http-port", str(rs_http),
                                 "--grpc-port", str(rs_grpc), "--metrics-port", "0", "--log-info=false"],
                    rs_http, rs_grpc, dict(os.environ))
        t_http, t_grpc = free_port(), free_port()
        tr = Server("triton", [str(TRITON), "--model-repository", str(tr_repo), "--http-port", str(t_http),
                               "--grpc-port", str(t_grpc), "--metrics-port", str(free_port()), "--log-info=false"],
                    t_http, t_grpc)
        rows = []
        try:
            for server, model in ((rs, "identity_onnx"), (rs, "identity_py"), (tr, "identity_py")):
                rows.append((server.name, model, perf(pa, server, model, False), perf(pa, server, model, True)))
        finally:
            rs.stop()
            tr.stop()

    def fmt(v, digits=0):
        return "n/a" if v is None else f"{v:,.{digits}f}"

    print()
    print(f"1 MiB in + 1 MiB out, {PROTOCOL}, concurrency {CONCURRENCY}")
    print(f"{'server':9} {'model':14} | {'socket inf/s':>12} {'p50 us':>8} | {'shm inf/s':>10} {'p50 us':>8} | {'shm/socket':>10}")
    by = {}
    for name, model, sock, shm in rows:
        g = lambda r, k: None if r is None else r[k]
        ratio = "n/a" if not sock or not shm else f"{shm['thr'] / sock['thr']:.2f}x"
        print(f"{name:9} {model:14} | {fmt(g(sock, 'thr')):>12} {fmt(g(sock, 'p50')):>8} | "
              f"{fmt(g(shm, 'thr')):>10} {fmt(g(shm, 'p50')):>8} | {ratio:>10}")
        by[(name, model)] = (sock, shm)
    print()
    for model in ("identity_onnx", "identity_py"):
        a, b = by.get(("tritonrs", model), (None, None))[1], by.get(("triton", "identity_py"), (None, None))[1]
        if a and b:
            print(f"with shm, tritonrs {model} / triton identity_py: {a['thr'] / b['thr']:.2f}x throughput")


if __name__ == "__main__":
    main()
