"""Camera frames through the MQTT bridge, and the same frames through HTTP, in one run.

Publishes N 640x480 JPEG frames at a fixed rate to a mosquitto started here, with one and then two
tritonrs processes on the fleet's shared subscription, and prints the result rate, the end-to-end
latency (publish -> result, p50/p99) and where the server's time goes (decode, preprocess, queue,
infer, postprocess, from the results' timings_ms). Then the HTTP path on the same frames and model:
the client decodes and resizes (Pillow + numpy) and sends a KServe binary request with tritonclient.
The model is a 224x224 FP32 NCHW classifier written here (a ReduceMean; the point is the transport
and the image work, not the network). Not a test: compare numbers of one run only.

    source scripts/env.sh && cargo build --release && python benches/mqtt_frames.py [--frames 300] [--fps 30]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from mqtt_helpers import Mosquitto, Requester, correlation  # noqa: E402


def write_model(repo: Path):
    import onnx
    from onnx import TensorProto, helper

    m = repo / "frames224"
    (m / "1").mkdir(parents=True)
    node = helper.make_node("ReduceMean", ["IMAGE"], ["PROBS"], axes=[2, 3], keepdims=0)
    g = helper.make_graph([node], "frames224", [helper.make_tensor_value_info("IMAGE", TensorProto.FLOAT, [1, 3, 224, 224])],
                          [helper.make_tensor_value_info("PROBS", TensorProto.FLOAT, [1, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, m / "1" / "model.onnx")
    (m / "labels.txt").write_text("red\ngreen\nblue\n")
    (m / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] } ]\n'
        'output [ { name: "PROBS" data_type: TYPE_FP32 dims: [ 1, 3 ] label_filename: "labels.txt" } ]\n'
        'parameters { key: "image.resize" value: { string_value: "stretch" } }\n'
        'parameters { key: "image.scale" value: { string_value: "1/255" } }\n')


def frames(n: int) -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(7)
    out = []
    base = np.linspace(0, 255, 640, dtype=np.float32)[None, :, None].repeat(480, 0).repeat(3, 2)
    for i in range(min(n, 20)):
        noise = rng.normal(0, 20, (480, 640, 3))
        img = np.clip(base + noise + i * 5, 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=85)
        out.append(buf.getvalue())
    return [out[i % len(out)] for i in range(n)]


def start_tritonrs(binary: str, repo: Path, broker: Mosquitto, device: str) -> subprocess.Popen:
    p = subprocess.Popen([binary, "--model-repository", str(repo), "--http-port", "0", "--grpc-port", "0",
                          "--allow-metrics=false", "--mqtt-broker", broker.url, "--mqtt-device-id", device,
                          "--mqtt-stats-interval-secs", "0", "--mqtt-max-inflight", "64", "--log-info=false"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p


def pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def run_mqtt(broker: Mosquitto, jpegs: list[bytes], fps: float, devices: list[str]) -> dict:
    r = Requester(broker.port)
    for d in devices:
        r.subscribe(f"tritonrs/{d}/available")
        r.wait_for(f"tritonrs/{d}/available", lambda m: m.payload == b"online", 30)
    time.sleep(1.0)  # the fleet subscriptions follow the models' READY
    r.subscribe("bench/results")
    sent: dict[bytes, float] = {}
    lat, timings, by_dev = [], [], {}
    done = threading.Event()

    def collect():
        while len(lat) < len(jpegs):
            m = r.get(60)
            if m.topic != "bench/results":
                continue
            t = time.perf_counter()
            c = correlation(m)
            b = json.loads(m.payload)
            lat.append((t - sent[c]) * 1e3)
            timings.append(b.get("timings_ms", {}))
            by_dev[b.get("device")] = by_dev.get(b.get("device"), 0) + 1
        done.set()

    threading.Thread(target=collect, daemon=True).start()
    start = time.perf_counter()
    for i, j in enumerate(jpegs):
        target = start + i / fps
        while time.perf_counter() < target:
            time.sleep(0.0005)
        c = f"f{i}".encode()
        sent[c] = time.perf_counter()
        r.publish("tritonrs/infer/frames224/cam", j, qos=1, response_topic="bench/results", correlation=c)
    done.wait(120)
    elapsed = time.perf_counter() - start
    r.close()
    stage = {k: statistics.mean(t[k] for t in timings if k in t) for k in
             ("decode", "preprocess", "queue", "infer", "postprocess", "total")}
    return {"results_per_s": len(lat) / elapsed, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "server_ms": stage, "by_device": by_dev}


def run_http(url: str, jpegs: list[bytes], fps: float) -> dict:
    import tritonclient.http as httpclient
    from PIL import Image

    client = httpclient.InferenceServerClient(url)
    lat, dec = [], []
    start = time.perf_counter()
    for i, j in enumerate(jpegs):
        target = start + i / fps
        while time.perf_counter() < target:
            time.sleep(0.0005)
        t0 = time.perf_counter()
        img = Image.open(io.BytesIO(j)).convert("RGB").resize((224, 224), Image.BILINEAR)
        x = (np.asarray(img, dtype=np.float32) / 255.0).transpose(2, 0, 1)[None]
        t1 = time.perf_counter()
        inp = httpclient.InferInput("IMAGE", [1, 3, 224, 224], "FP32")
        inp.set_data_from_numpy(np.ascontiguousarray(x), binary_data=True)
        client.infer("frames224", [inp])
        lat.append((time.perf_counter() - t0) * 1e3)
        dec.append((t1 - t0) * 1e3)
    elapsed = time.perf_counter() - start
    return {"results_per_s": len(lat) / elapsed, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "client_decode_resize_ms": statistics.mean(dec)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--fps", type=float, default=30)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "tritonrs"))
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mqtt-bench-"))
    repo = tmp / "repo"
    write_model(repo)
    jpegs = frames(a.frames)
    print(f"{a.frames} frames of 640x480 JPEG (~{len(jpegs[0]) // 1024} KiB) at {a.fps} fps")
    # Without TCP_NODELAY, mosquitto holds small packets for delayed ACKs (~40 ms per hop).
    broker = Mosquitto(tmp / "broker", extra="set_tcp_nodelay true\n").start()
    procs = []
    try:
        procs.append(start_tritonrs(a.bin, repo, broker, "bench0"))
        one = run_mqtt(broker, jpegs, a.fps, ["bench0"])
        procs.append(start_tritonrs(a.bin, repo, broker, "bench1"))
        two = run_mqtt(broker, jpegs, a.fps, ["bench0", "bench1"])
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        broker.stop()
    http = subprocess.Popen([a.bin, "--model-repository", str(repo), "--http-port", "18765", "--grpc-port", "0",
                             "--allow-metrics=false", "--log-info=false"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        import urllib.request
        for _ in range(200):
            try:
                if urllib.request.urlopen("http://127.0.0.1:18765/v2/health/ready", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        h = run_http("127.0.0.1:18765", jpegs, a.fps)
    finally:
        http.terminate()
        http.wait(10)
    for name, r in (("MQTT, 1 process", one), ("MQTT, 2 processes", two), ("HTTP (client decodes)", h)):
        print(f"{name:24s} {r['results_per_s']:7.1f} results/s  p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms")
        if "server_ms" in r:
            s = r["server_ms"]
            print("    server: " + "  ".join(f"{k} {v:.2f}" for k, v in s.items()) + f" ms; by device {r['by_device']}")
        else:
            print(f"    client decode+resize {r['client_decode_resize_ms']:.2f} ms")
    print(f"p50 ratio MQTT(1) / HTTP: {one['p50_ms'] / h['p50_ms']:.2f}")


if __name__ == "__main__":
    main()
