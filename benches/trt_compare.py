#!/usr/bin/env python3
"""TensorRT three ways, on a device with TensorRT and a GPU (a Jetson, or an x86 CUDA host): the same
ONNX model served by tritonrs as a `tensorrt_plan` engine (built here with trtexec), as ONNX with ONNX
Runtime's CUDA execution provider, and as ONNX with ONNX Runtime's TensorRT execution provider;
perf_analyzer over gRPC at concurrency 1 and 8 against each, in one run. Prints throughput, p50 and
p99, and each as a ratio of the tensorrt_plan model.

  benches/trt_compare.py [path/to/model.onnx INPUT_NAME MIN OPT MAX]

Defaults to the example model batched_scale (INPUT, shapes 1x16 / 4x16 / 16x16). Needs: trtexec
(TRTEXEC, default /usr/src/tensorrt/bin/trtexec), perf_analyzer (PERF_ANALYZER, default on PATH or
the anchors'), target/release/tritonrs (TRITONRS), and an ONNX Runtime with the CUDA and TensorRT
providers (onnxruntime-gpu; BACKEND_CONFIG, e.g. onnxruntime,library=/path/libonnxruntime.so).
On TensorRT 8, build the shim first (jetson/build-trt8-shim.sh). Not runnable on a machine without a
GPU; the engine build is the slow part (minutes on a Nano). Compare ratios from one run.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import side_by_side  # noqa: E402
from side_by_side import REPO, Server, free_port, perf  # noqa: E402

CONCURRENCIES = (1, 8)


def config(name: str, platform: str, max_batch: int, inp: str, dims: str, extra: str = "") -> str:
    # Inputs and outputs come from auto-complete; the group puts every variant on GPU 0.
    return (f'name: "{name}"\nplatform: "{platform}"\nmax_batch_size: {max_batch}\n'
            f'instance_group [ {{ kind: KIND_GPU gpus: [ 0 ] }} ]\n{extra}\n')


def main():
    args = sys.argv[1:]
    onnx = Path(args[0]) if args else REPO / "model-repos/examples/batched_scale/1/model.onnx"
    inp, lo, opt, hi = (args[1:5] if len(args) >= 5 else ["INPUT", "1x16", "4x16", "16x16"])
    max_batch = int(hi.split("x")[0])
    trtexec = os.environ.get("TRTEXEC", shutil.which("trtexec") or "/usr/src/tensorrt/bin/trtexec")
    perf_bin = os.environ.get("PERF_ANALYZER", shutil.which("perf_analyzer") or str(side_by_side.PERF))
    side_by_side.PERF = Path(perf_bin)
    tritonrs = os.environ.get("TRITONRS", str(side_by_side.TRITONRS))
    for what, path in (("trtexec", trtexec), ("perf_analyzer", perf_bin), ("tritonrs", tritonrs)):
        if not Path(path).exists():
            sys.exit(f"trt_compare: {what} not found at {path}")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp, "repo")
        plan_dir = repo / "plan" / "1"
        plan_dir.mkdir(parents=True)
        print(f"building the engine from {onnx} with {trtexec} ...", flush=True)
        r = subprocess.run([trtexec, f"--onnx={onnx}", f"--saveEngine={plan_dir / 'model.plan'}",
                            f"--minShapes={inp}:{lo}", f"--optShapes={inp}:{opt}", f"--maxShapes={inp}:{hi}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"trtexec failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        (repo / "plan" / "config.pbtxt").write_text(config("plan", "tensorrt_plan", max_batch, inp, ""))
        cache = Path(tmp, "trt-cache")
        trt_ep = ('optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" '
                  f'parameters {{ key: "trt_engine_cache_enable" value: "true" }} '
                  f'parameters {{ key: "trt_engine_cache_path" value: "{cache}" }} '
                  f'parameters {{ key: "trt_profile_min_shapes" value: "{inp}:{lo}" }} '
                  f'parameters {{ key: "trt_profile_opt_shapes" value: "{inp}:{opt}" }} '
                  f'parameters {{ key: "trt_profile_max_shapes" value: "{inp}:{hi}" }} ] }} }}')
        for name, extra in (("onnx_cuda", ""), ("onnx_trt", trt_ep)):
            (repo / name / "1").mkdir(parents=True)
            shutil.copy(onnx, repo / name / "1" / "model.onnx")
            (repo / name / "config.pbtxt").write_text(config(name, "onnxruntime_onnx", max_batch, inp, "", extra))
        h, g = free_port(), free_port()
        cmd = [tritonrs, "--model-repository", str(repo), "--http-port", str(h), "--grpc-port", str(g),
               "--metrics-port", "0", "--log-info=false", "--min-supported-compute-capability=5.3"]
        if os.environ.get("BACKEND_CONFIG"):
            cmd.append(f"--backend-config={os.environ['BACKEND_CONFIG']}")
        server = Server("tritonrs", cmd, h, g)
        results = {}
        try:
            for model in ("plan", "onnx_cuda", "onnx_trt"):
                for c in CONCURRENCIES:
                    results[(model, c)] = perf(server, "grpc", c, model)
        finally:
            server.stop()
    print()
    print(f"tritonrs, gRPC, {onnx.name} ({inp} {lo}..{hi})")
    print(f"{'model':10} {'c':>2} | {'inf/s':>9} {'p50 us':>8} {'p99 us':>8} | {'thr / plan':>10} {'p99 / plan':>10}")
    for model in ("plan", "onnx_cuda", "onnx_trt"):
        for c in CONCURRENCIES:
            r, base = results[(model, c)], results[("plan", c)]
            if r is None:
                print(f"{model:10} {c:>2} | n/a")
                continue
            ratio = f"{r['thr'] / base['thr']:>9.2f}x {r['p99'] / base['p99']:>9.2f}x" if base else "n/a"
            print(f"{model:10} {c:>2} | {r['thr']:>9,.0f} {r['p50']:>8,.0f} {r['p99']:>8,.0f} | {ratio}")


if __name__ == "__main__":
    main()
