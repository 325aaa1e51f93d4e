#!/usr/bin/env python3
"""Dynamic batching benchmark: perf_analyzer at concurrency 16 (BENCH_CONCURRENCY) on `batched_scale`
with its dynamic_batching block and on a copy without it, against tritonrs (ONNX model) and the real
Triton (the same model for its Python backend, benches/triton-repo-batching), in one run. Prints the
throughput gain and the p99 cost of batching for each server.

  benches/batching.sh

The model pays a fixed ~2 ms per execution whatever the batch size, so batching should multiply
throughput. Compare ratios from one run, not absolute numbers across runs.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from side_by_side import REPO, TRITON, TRITONRS, Server, free_port, perf  # noqa: E402

MODEL = "batched_scale"
UNBATCHED = "batched_scale_nobatch"
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))


def make_repo(src: Path, dest: Path) -> None:
    """dest gets the model as is and a copy named UNBATCHED without its dynamic_batching block."""
    shutil.copytree(src, dest / MODEL)
    shutil.copytree(src, dest / UNBATCHED)
    cfg = dest / UNBATCHED / "config.pbtxt"
    text = cfg.read_text()
    text = re.sub(r"dynamic_batching \{[^}]*\}\n", "", text)
    text = text.replace(f'name: "{MODEL}"', f'name: "{UNBATCHED}"')
    cfg.write_text(text)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rs_repo, tr_repo = Path(tmp, "rs"), Path(tmp, "tr")
        make_repo(REPO / "model-repos/examples" / MODEL, rs_repo)
        make_repo(REPO / "benches/triton-repo-batching" / MODEL, tr_repo)
        results = {}
        h, g = free_port(), free_port()
        rs = Server("tritonrs", [str(TRITONRS), "--model-repository", str(rs_repo), "--http-port", str(h),
                                 "--grpc-port", str(g), "--metrics-port", "0", "--log-info=false"], h, g)
        try:
            for m in (MODEL, UNBATCHED):
                results[("tritonrs", m)] = perf(rs, "grpc", CONCURRENCY, m)
        finally:
            rs.stop()
        # numpy's BLAS would otherwise use every core for the matrix products; ORT runs on one thread.
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        h, g, m_port = free_port(), free_port(), free_port()
        tr = Server("triton", [str(TRITON), "--model-repository", str(tr_repo), "--http-port", str(h),
                               "--grpc-port", str(g), "--metrics-port", str(m_port), "--log-info=false"], h, g, env)
        try:
            for m in (MODEL, UNBATCHED):
                results[("triton", m)] = perf(tr, "grpc", CONCURRENCY, m)
        finally:
            tr.stop()

    print()
    print(f"gRPC, concurrency {CONCURRENCY}, model {MODEL} (fixed cost per execution)")
    print(f"{'server':8} | {'batched inf/s':>13} {'p99 us':>8} | {'unbatched inf/s':>15} {'p99 us':>8} | "
          f"{'thr gain':>8} {'p99 ratio':>9}")
    for server in ("tritonrs", "triton"):
        a, b = results[(server, MODEL)], results[(server, UNBATCHED)]
        if a is None or b is None:
            print(f"{server:8} | n/a")
            continue
        print(f"{server:8} | {a['thr']:>13,.0f} {a['p99']:>8,.0f} | {b['thr']:>15,.0f} {b['p99']:>8,.0f} | "
              f"{a['thr'] / b['thr']:>7.2f}x {a['p99'] / b['p99']:>8.2f}x")
    a, b = results[("tritonrs", MODEL)], results[("triton", MODEL)]
    if a and b:
        print(f"batched tritonrs / batched triton: throughput {a['thr'] / b['thr']:.2f}x, p99 {a['p99'] / b['p99']:.2f}x")


if __name__ == "__main__":
    main()
