#!/usr/bin/env python3
"""A 320x320 frame to a detector through Frigate's ZMQ protocol, through the DeepStack endpoint (the
frame as a JPEG) and through gRPC (the raw tensor, tritonclient), at one and four cameras, in one run.

  scripts/env.sh python benches/frigate_zmq.py [--frames 200] [--bin target/release/tritonrs]

The detector is gen_frigate.py's YOLOv8-layout model with a 320x320 FP32 NCHW input (its compute is
a channel mean: what is measured is the path, not the model), with dynamic batching. Each camera is a
thread with its own socket or client sending frames back to back. Prints frames/s, p50 and p99 per
protocol and camera count. Machines here are shared and noisy: compare within one run.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "model-repos"))
import gen_frigate  # noqa: E402

sys.path.insert(0, str(REPO / "benches"))
from agent_load import free_port, wait_http  # noqa: E402

SIZE = 320
CONFIG = f"""name: "det320"
backend: "onnxruntime"
max_batch_size: 4
dynamic_batching {{ max_queue_delay_microseconds: 500 }}
parameters {{ key: "image.output" value: {{ string_value: "yolo" }} }}
"""


def zmq_camera(endpoint: str, frames: int, frame: np.ndarray, out: list):
    import zmq

    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send(json.dumps({"model_request": True, "model_name": "det320.onnx"}).encode())
    sock.recv()
    header = json.dumps({"shape": list(frame.shape), "dtype": "float32", "model_type": "yolo-generic"}).encode()
    data = frame.tobytes()
    for _ in range(frames):
        t0 = time.perf_counter()
        sock.send_multipart([header, data])
        sock.recv_multipart()
        out.append(time.perf_counter() - t0)
    sock.close()


def deepstack_camera(url: str, frames: int, jpeg: bytes, out: list):
    boundary = "tritonrsbench"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"f.jpg\"\r\n"
            f"Content-Type: image/jpeg\r\n\r\n").encode() + jpeg + f"\r\n--{boundary}--\r\n".encode()
    import http.client

    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port))
    for _ in range(frames):
        t0 = time.perf_counter()
        conn.request("POST", "/v1/vision/custom/det320", body=body,
                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        conn.getresponse().read()
        out.append(time.perf_counter() - t0)
    conn.close()


def grpc_camera(url: str, frames: int, frame: np.ndarray, out: list):
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url)
    inp = grpcclient.InferInput("images", list(frame.shape), "FP32")
    inp.set_data_from_numpy(frame)
    for _ in range(frames):
        t0 = time.perf_counter()
        c.infer("det320", [inp])
        out.append(time.perf_counter() - t0)
    c.close()


def run(fn, cameras: int, frames: int, *args) -> tuple[float, float, float]:
    lat: list[float] = []
    threads = [threading.Thread(target=fn, args=(*args[:1], frames, *args[1:], lat)) for _ in range(cameras)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3  # noqa: E731
    return len(lat) / wall, p(0.5), p(0.99)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200, help="frames per camera")
    ap.add_argument("--bin", default=str(REPO / "target/release/tritonrs"))
    args = ap.parse_args()
    from PIL import Image

    rng = np.random.default_rng(0)
    frame = rng.random((1, 3, SIZE, SIZE), dtype=np.float32)
    pixels = (frame[0].transpose(1, 2, 0) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    jpeg = buf.getvalue()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        (repo / "det320" / "1").mkdir(parents=True)
        (repo / "det320" / "1" / "model.onnx").write_bytes(gen_frigate.model_yolov8_push(SIZE))
        (repo / "det320" / "config.pbtxt").write_text(CONFIG)
        http, grpc, zport = free_port(), free_port(), free_port()
        server = subprocess.Popen([args.bin, "--model-repository", str(repo), "--http-port", str(http),
                                   "--grpc-port", str(grpc), "--allow-metrics=false",
                                   "--frigate-zmq-endpoint", f"tcp://127.0.0.1:{zport}"],
                                  stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "log", "w"), env=os.environ)
        try:
            wait_http(http)
            print(f"320x320 frame: ZMQ and gRPC send FP32 NCHW ({frame.nbytes} bytes), DeepStack a JPEG ({len(jpeg)} bytes)")
            print(f"{'path':<10} {'cameras':>7} {'frames/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
            paths = [
                ("zmq", zmq_camera, f"tcp://127.0.0.1:{zport}", frame),
                ("deepstack", deepstack_camera, f"http://127.0.0.1:{http}", jpeg),
                ("grpc", grpc_camera, f"127.0.0.1:{grpc}", frame),
            ]
            for cameras in (1, 4):
                for name, fn, url, payload in paths:
                    run(fn, cameras, 10, url, payload)  # warm-up
                    fps, p50, p99 = run(fn, cameras, args.frames, url, payload)
                    print(f"{name:<10} {cameras:>7} {fps:>9.0f} {p50:>8.2f} {p99:>8.2f}")
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    sys.exit(main())
