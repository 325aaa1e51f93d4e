#!/usr/bin/env python3
"""A/B benchmark of two tritonrs binaries in one run: both serve the example repository, and
perf_analyzer measures each in turn (the order alternates per row) over gRPC and HTTP at each
concurrency. Prints throughput and p50/p99 of both and the B/A ratios. For checking that a refactor
costs nothing: build the old binary, copy it aside, build the new one.

  python3 benches/ab_compare.py OLD_BINARY NEW_BINARY     (after sourcing scripts/env.sh)

BENCH_CONCURRENCY (default 1,8), BENCH_INTERVAL_MS and BENCH_STABILITY_PERCENT as for
side_by_side.py. BENCH_LOG_INFO=1 serves with info logging on (tritonserver's default) instead of off. Machines here are shared and noisy: read the ratios of one run, and run it twice
before believing a difference under 10%.
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from side_by_side import CONCURRENCY, REPO, Server, free_port, perf  # noqa: E402

LOG_INFO = "true" if os.environ.get("BENCH_LOG_INFO") == "1" else "false"


def start(name: str, binary: str) -> Server:
    http, grpc = free_port(), free_port()
    s = Server(name, [binary, "--model-repository", str(REPO / "model-repos/examples"), "--http-port", str(http),
                      "--grpc-port", str(grpc), "--metrics-port", "0", f"--log-info={LOG_INFO}"], http, grpc)
    socket.create_connection(("127.0.0.1", grpc), timeout=2).close()
    return s


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = start("A", sys.argv[1]), start("B", sys.argv[2])
    rows = []
    try:
        for i, (protocol, c) in enumerate((p, c) for p in ("grpc", "http") for c in CONCURRENCY):
            if i % 2:
                rb, ra = perf(b, protocol, c), perf(a, protocol, c)
            else:
                ra, rb = perf(a, protocol, c), perf(b, protocol, c)
            rows.append((protocol, c, ra, rb))
    finally:
        a.stop()
        b.stop()
    print(f"A = {sys.argv[1]}\nB = {sys.argv[2]}")
    print(f"{'':10} {'A inf/s':>9} {'B inf/s':>9} {'B/A':>6}   {'A p50':>7} {'B p50':>7} {'B/A':>6}   "
          f"{'A p99':>7} {'B p99':>7} {'B/A':>6}")
    for protocol, c, ra, rb in rows:
        if ra is None or rb is None:
            print(f"{protocol} c{c}: a perf_analyzer run failed")
            continue
        print(f"{protocol:5} c{c:<3} {ra['thr']:9,.0f} {rb['thr']:9,.0f} {rb['thr'] / ra['thr']:5.2f}x   "
              f"{ra['p50']:7,.0f} {rb['p50']:7,.0f} {rb['p50'] / ra['p50']:5.2f}x   "
              f"{ra['p99']:7,.0f} {rb['p99']:7,.0f} {rb['p99'] / ra['p99']:5.2f}x")
    print(f"(idle RSS KiB: A {a.idle_rss:,}, B {b.idle_rss:,}; ready in ms: A {a.ready_ms:.0f}, B {b.ready_ms:.0f})")


if __name__ == "__main__":
    main()
