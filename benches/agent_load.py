#!/usr/bin/env python3
"""Cost of the `decrypt` repository agent: the time to load a 50 MB ONNX model from local disk, plain
and encrypted (`tritonrs encrypt-model`, then decrypted into a private folder at each load), in one
run, alternating. Also times `encrypt-model` itself (the same AES-256-GCM work the agent does).

  scripts/env.sh python benches/agent_load.py [--mb 50] [--rounds 5] [--bin target/release/tritonrs]

Prints the median load time of each, the ratio, and the agent's extra time as MB/s of model.
Machines here are shared and noisy: read the ratio of one run.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent


def big_model(path: Path, mb: int) -> None:
    """OUTPUT = INPUT + W[0:4], with W a `mb` MB float initializer (so the file is that large)."""
    n = mb * (1 << 20) // 4
    w = numpy_helper.from_array(np.arange(n, dtype=np.float32) % 7, "W")
    nodes = [
        helper.make_node("Constant", [], ["starts"], value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Constant", [], ["ends"], value=numpy_helper.from_array(np.array([4], np.int64))),
        helper.make_node("Slice", ["W", "starts", "ends"], ["w4"]),
        helper.make_node("Add", ["INPUT", "w4"], ["OUTPUT"]),
    ]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [4])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())


CONFIG = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{extra}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, path: str = "/v2/health/ready", seconds: float = 30.0) -> bool:
    """Until the server on 127.0.0.1:`port` answers `path` with 200; False if it never does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1)
            return True
        except OSError:
            time.sleep(0.05)
    return False


def post(url: str) -> None:
    req = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", default=str(REPO / "target/release/tritonrs"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        repo, plain = tmp / "repo", tmp / "plain"
        big_model(plain / "1/model.onnx", args.mb)
        (plain / "config.pbtxt").write_text(CONFIG.format(name="encrypted", extra='model_repository_agents { agents [ { name: "decrypt" } ] }\n'))
        key = tmp / "key"
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        t0 = time.perf_counter()
        subprocess.run([args.bin, "encrypt-model", str(plain), "--key-file", str(key), "--output", str(repo / "encrypted")],
                       check=True, capture_output=True)
        enc_s = time.perf_counter() - t0
        (repo / "local/1").mkdir(parents=True)
        os.link(plain / "1/model.onnx", repo / "local/1/model.onnx")
        (repo / "local/config.pbtxt").write_text(CONFIG.format(name="local", extra=""))
        size_mb = (plain / "1/model.onnx").stat().st_size / 1e6
        http = free_port()
        log = open(tmp / "log", "w")
        server = subprocess.Popen([args.bin, "--model-repository", str(repo), "--model-control-mode=explicit",
                                   "--http-port", str(http), "--grpc-port", "0", "--metrics-port", "0",
                                   f"--repoagent-config=decrypt,key-file={key};decrypt,work-dir={tmp / 'work'}"],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{http}/v2/repository/models"
            wait_http(http, "/v2/health/live", 15)
            times = {"local": [], "encrypted": []}
            for r in range(args.rounds):
                for name in (("local", "encrypted") if r % 2 == 0 else ("encrypted", "local")):
                    t0 = time.perf_counter()
                    post(f"{base}/{name}/load")
                    times[name].append(time.perf_counter() - t0)
                    post(f"{base}/{name}/unload")
                    time.sleep(0.2)
        finally:
            server.terminate()
            server.wait(30)
    local, encrypted = statistics.median(times["local"]), statistics.median(times["encrypted"])
    extra = encrypted - local
    print(f"model: {size_mb:.1f} MB ONNX; {args.rounds} loads each, median")
    print(f"load from local disk:        {local * 1e3:8.1f} ms")
    print(f"load through decrypt agent:  {encrypted * 1e3:8.1f} ms  ({encrypted / local:.2f}x)")
    print(f"decrypt agent's extra time:  {extra * 1e3:8.1f} ms  ({size_mb / extra:,.0f} MB/s of model)" if extra > 0 else "")
    print(f"encrypt-model:               {enc_s * 1e3:8.1f} ms  ({size_mb / enc_s:,.0f} MB/s)")


if __name__ == "__main__":
    sys.exit(main())
