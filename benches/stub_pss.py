#!/usr/bin/env python3
"""Memory of the Python stubs: nine instances of the add_sub Python model (numpy imported in each),
served by tritonrs with the stubs' fork server, by tritonrs with it off, and by Triton 2.51
(../shared/anchors), one after the other in one run. Sums the PSS (/proc/PID/smaps_rollup: shared pages
divided among the processes sharing them) of every process under the server but the server itself:
the stubs, and tritonrs's fork server. RSS counts a shared page once per process, so it is printed
too but is not the measure.

  scripts/env.sh python benches/stub_pss.py [--bin target/release/tritonrs] [--instances 9]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANCHOR = Path(os.environ.get("ANCHORS", Path.home() / ".cache/anchors")) / "bin/tritonserver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def descendants(root: int) -> list[int]:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    out, frontier = [], {root}
    while frontier:
        kids = [p for p in pids if parent(p) in frontier]
        out += kids
        frontier = set(kids)
    return out


def rollup(pid: int) -> tuple[int, int]:
    """PSS and RSS in kB."""
    pss = rss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
        elif line.startswith("Rss:"):
            rss = int(line.split()[1])
    return pss, rss


def measure(cmd: list[str], http: int, instances: int, log: Path) -> tuple[int, int, int]:
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/models/add_sub/ready", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"not ready; see {log}")
        time.sleep(2)  # let the stubs settle after initialize
        procs = descendants(proc.pid)
        pss = rss = 0
        for p in procs:
            a, b = rollup(p)
            pss, rss = pss + a, rss + b
        return len(procs), pss, rss
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target/release/tritonrs"))
    ap.add_argument("--instances", type=int, default=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(REPO / "model-repos/python/add_sub", repo / "add_sub")
        cfg = repo / "add_sub/config.pbtxt"
        cfg.write_text(cfg.read_text().replace("count: 1 kind: KIND_CPU", f"count: {args.instances} kind: KIND_CPU"))
        py = f"--backend-config=python,python-executable={sys.executable}"
        runs = [
            ("tritonrs, fork server", [args.bin, py]),
            ("tritonrs, zygote=false", [args.bin, py, "--backend-config=python,zygote=false"]),
        ]
        if ANCHOR.exists():
            runs.append(("Triton 2.51", [str(ANCHOR)]))
        else:
            print(f"(no {ANCHOR}: run ../shared/anchors/install.sh for the Triton row)")
        print(f"{args.instances} instances of a Python model (numpy); processes under the server, PSS and RSS in MB")
        results = {}
        for name, base in runs:
            http = free_port()
            cmd = base + ["--model-repository", str(repo), "--http-port", str(http), "--grpc-port", str(free_port()),
                          "--metrics-port", str(free_port())]
            n, pss, rss = measure(cmd, http, args.instances, Path(tmp) / f"{len(results)}.log")
            results[name] = pss
            print(f"{name:<24} {n:>3} processes  PSS {pss / 1024:8.1f}  RSS {rss / 1024:8.1f}")
        if "Triton 2.51" in results:
            print(f"fork server / Triton PSS: {results['tritonrs, fork server'] / results['Triton 2.51']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
