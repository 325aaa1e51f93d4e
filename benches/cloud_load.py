#!/usr/bin/env python3
"""Load time of a 50 MB ONNX model from a cloud repository against local disk, in one run: moto's S3
server on loopback holds the model, a local repository holds a copy, and the server (explicit model
control) is asked to load each through the repository API.

  scripts/env.sh python benches/cloud_load.py [--mb 50] [--rounds 5] [--bin target/release/tritonrs]

- local: the load from a local folder;
- s3 cold: the load with an empty cache (a new server and cache folder each round): listing, download,
  fsync, switch, load;
- s3 warm: the load after a restart with the cache filled: one listing, the manifest matches, load.

Prints the medians and the ratios to local (the warm load should cost under 10% more than local), then
runs benches/agent_load.py on a model of the same size for the cost of the decrypt agent.
Machines here are shared and noisy: read the ratios of one run.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_load import CONFIG, big_model, free_port, post, wait_http  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
AWS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


class Server:
    def __init__(self, binary: str, repos: list[str], cache: Path, log: Path):
        self.port = free_port()
        args = [binary, "--model-control-mode=explicit", "--http-port", str(self.port), "--grpc-port", "0",
                "--allow-metrics=false", "--repository-cache-dir", str(cache)]
        for r in repos:
            args += ["--model-repository", r]
        self.proc = subprocess.Popen(args, stdout=open(log, "a"), stderr=subprocess.STDOUT, env={**os.environ, **AWS})
        if not wait_http(self.port):
            raise RuntimeError(f"server did not become ready; see {log}")

    def load(self, name: str) -> float:
        t0 = time.perf_counter()
        post(f"http://127.0.0.1:{self.port}/v2/repository/models/{name}/load")
        return time.perf_counter() - t0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", default=str(REPO / "target/release/tritonrs"))
    args = ap.parse_args()
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", **{
        "aws_access_key_id": "bench", "aws_secret_access_key": "bench", "region_name": "us-east-1"})
    times = {"local": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        local = tmp / "local"
        big_model(local / "local/1/model.onnx", args.mb)
        (local / "local/config.pbtxt").write_text(CONFIG.format(name="local", extra=""))
        # Loaded first and not timed: ONNX Runtime's one-time set-up must not land on either side.
        big_model(local / "warmup/1/model.onnx", 1)
        (local / "warmup/config.pbtxt").write_text(CONFIG.format(name="warmup", extra=""))
        size_mb = (local / "local/1/model.onnx").stat().st_size / 1e6
        s3.create_bucket(Bucket="bench")
        s3.put_object(Bucket="bench", Key="models/remote/1/model.onnx", Body=(local / "local/1/model.onnx").read_bytes())
        s3.put_object(Bucket="bench", Key="models/remote/config.pbtxt", Body=CONFIG.format(name="remote", extra=""))
        url = f"s3://{host}:{port}/bench/models"
        repos = [str(local), url]
        log = tmp / "log"
        for r in range(args.rounds):
            cache = tmp / f"cache{r}"
            srv = Server(args.bin, repos, cache, log)
            try:
                srv.load("warmup")
                times["cold"].append(srv.load("remote"))
            finally:
                srv.stop()
            # The same cache after a restart; local and warm alternate which goes first.
            srv = Server(args.bin, repos, cache, log)
            try:
                srv.load("warmup")
                for name in (("local", "remote") if r % 2 == 0 else ("remote", "local")):
                    times["warm" if name == "remote" else "local"].append(srv.load(name))
            finally:
                srv.stop()
            shutil.rmtree(cache, ignore_errors=True)
    moto.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"model: {size_mb:.1f} MB ONNX; {args.rounds} loads each, median (moto S3 on loopback)")
    print(f"load from local disk:   {med['local'] * 1e3:8.1f} ms")
    print(f"load from S3, cold:     {med['cold'] * 1e3:8.1f} ms  ({med['cold'] / med['local']:.2f}x local)")
    print(f"load from S3, warm:     {med['warm'] * 1e3:8.1f} ms  ({med['warm'] / med['local']:.2f}x local; "
          f"{(med['warm'] / med['local'] - 1) * 100:+.0f}%)")
    sys.stdout.flush()
    print("\ndecrypt agent on the same size (benches/agent_load.py):")
    sys.stdout.flush()
    subprocess.run([sys.executable, str(Path(__file__).with_name("agent_load.py")), "--mb", str(args.mb),
                    "--rounds", str(args.rounds), "--bin", args.bin], check=True)


if __name__ == "__main__":
    sys.exit(main())
