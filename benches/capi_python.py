#!/usr/bin/env python3
"""Triton's own Python backend (libtriton_python.so of Triton 2.51, from the nvidia-pytriton wheel)
three ways in one run, on the same add_sub model: hosted by tritonrs through the C API, inside Triton
2.51 (the anchors), and tritonrs's built-in Python backend. perf_analyzer over gRPC at concurrency 1
and 8; prints throughput, p50/p99 and the ratios against Triton.

  benches/capi_python.sh        (installs the anchors, builds the release binary, runs this)

Knobs (environment) as benches/python_side_by_side.py: BENCH_CONCURRENCY (default "1,8"),
BENCH_PROTOCOLS (default "grpc"), BENCH_INTERVAL_MS, BENCH_REPEAT (default 2; the best of the runs
counts, alike for all three). Machines here are shared and noisy: compare ratios from one run.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from python_side_by_side import ANCHORS, CONCURRENCY, PERF, PROTOCOLS, REPEAT, TRITON, TRITONRS, Server, perf  # noqa: E402
from side_by_side import free_port  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODEL = "add_sub"


def layout(dest: Path) -> Path:
    spec = importlib.util.spec_from_file_location("pytriton_backend", REPO / "scripts/pytriton-backend.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    wheels = sorted((ANCHORS / "dl").glob("nvidia_pytriton-0.7.0-*.whl"))
    wheel = wheels[0] if wheels else mod.fetch_wheel()
    return mod.lay_out(dest, wheel, TRITONRS.parent / "libtritonserver.so", mod.system_python_version())


def main():
    for p in (PERF, TRITON, TRITONRS, TRITONRS.parent / "libtritonserver.so"):
        if not p.exists():
            sys.exit(f"{p} not found (benches/capi_python.sh installs and builds what it needs)")
    work = Path(tempfile.mkdtemp(prefix="capi-bench-"))
    repo = work / "repo"
    repo.mkdir()
    shutil.copytree(REPO / "model-repos/python" / MODEL, repo / MODEL)
    backends = layout(work / "pytriton")
    python = ANCHORS / "venv/bin/python"

    def ports():
        return [free_port() for _ in range(3)]

    def flags(p):
        return ["--http-port", str(p[0]), "--grpc-port", str(p[1]), "--metrics-port", str(p[2])]

    servers = {}
    p = ports()
    servers["hosted"] = Server("tritonrs+libtriton_python", [
        str(TRITONRS), "--model-repository", str(repo), "--log-info=false", "--backend-directory", str(backends),
        "--backend-config=python,use-shared-library=true", *flags(p)], p[0], p[1], [MODEL])
    p = ports()
    servers["triton"] = Server("triton", [str(TRITON), "--model-repository", str(repo), "--log-info=false", *flags(p)],
                               p[0], p[1], [MODEL])
    p = ports()
    servers["builtin"] = Server("tritonrs-builtin", [
        str(TRITONRS), "--model-repository", str(repo), "--log-info=false",
        f"--backend-config=python,python-executable={python}", *flags(p)], p[0], p[1], [MODEL])
    rows = []
    try:
        for protocol in PROTOCOLS:
            for c in CONCURRENCY:
                best = {}
                for _ in range(REPEAT):
                    for key, s in servers.items():
                        r = perf(s, MODEL, protocol, c)
                        if r and (key not in best or r["thr"] > best[key]["thr"]):
                            best[key] = r
                rows.append((protocol, c, best))
    finally:
        for s in servers.values():
            s.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)

    def cell(d, k):
        return "n/a" if d is None else f"{d[k]:,.0f}"

    def ratio(a, b):
        return "n/a" if a is None or b is None or b["thr"] == 0 else f"{a['thr'] / b['thr']:.2f}x"

    print()
    print(f"{MODEL}: inferences/s (p50 us / p99 us)")
    print(f"{'proto':5} {'conc':>4} | {'hosted in tritonrs':>26} | {'inside Triton 2.51':>26} | {'tritonrs built-in':>26} |"
          f" {'hosted/Triton':>13} {'built-in/Triton':>15} {'hosted/built-in':>15}")
    for protocol, c, b in rows:
        h, t, n = b.get("hosted"), b.get("triton"), b.get("builtin")

        def col(d):
            return f"{cell(d, 'thr')} ({cell(d, 'p50')}/{cell(d, 'p99')})"

        print(f"{protocol:5} {c:>4} | {col(h):>26} | {col(t):>26} | {col(n):>26} |"
              f" {ratio(h, t):>13} {ratio(n, t):>15} {ratio(h, n):>15}")
    print()
    for key, s in servers.items():
        print(f"{s.name}: ready in {s.ready_ms:.0f} ms, RSS idle {s.idle_rss / 1024:.1f} MiB, "
              f"peak {s.peak_rss / 1024:.1f} MiB (server + stubs)")


if __name__ == "__main__":
    main()
