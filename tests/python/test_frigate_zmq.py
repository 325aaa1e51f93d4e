"""Frigate's `zmq` detector against tritonrs (--frigate-zmq-endpoint), with pyzmq REQ sockets speaking
the protocol as Frigate's plugin documents it: the model check and push, then `[header, tensor]`
frames answered with 20 rows of [class, score, y_min, x_min, y_max, x_max], normalised."""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import EXAMPLES, REPO_ROOT, copy_models

zmq = pytest.importorskip("zmq")

FRIGATE = REPO_ROOT / "model-repos" / "frigate"
PUSH = REPO_ROOT / "model-repos" / "frigate_push" / "yolov8-tiny.onnx"
S = 32.0
# image_detector on an all-red frame: box 0 (x 8..24, y 12..20) at 1.0, box 2 (x 0..8, y 24..32) at 0.5.
RED_ROWS = [[0, 1.0, 12 / S, 8 / S, 20 / S, 24 / S], [0, 0.5, 24 / S, 0.0, 1.0, 8 / S]]


class Frigate:
    """A REQ socket as Frigate's detector uses one (LINGER 0, a receive timeout)."""

    def __init__(self, endpoint: str, timeout_ms: int = 5000):
        self.endpoint, self.timeout_ms = endpoint, timeout_ms
        self.connect()

    def connect(self):
        self.sock = zmq.Context.instance().socket(zmq.REQ)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        self.sock.connect(self.endpoint)

    def reconnect(self):
        self.sock.close(linger=0)
        self.connect()

    def close(self):
        self.sock.close(linger=0)

    def model_check(self, name: str) -> dict:
        self.sock.send(json.dumps({"model_request": True, "model_name": name}).encode())
        return json.loads(self.sock.recv())

    def push(self, name: str, data: bytes) -> dict:
        self.sock.send_multipart([json.dumps({"model_data": True, "model_name": name}).encode(), data])
        return json.loads(self.sock.recv())

    def send_frames(self, frames: list[bytes]) -> list[bytes]:
        self.sock.send_multipart(frames)
        return self.sock.recv_multipart()

    def detect(self, tensor: np.ndarray, model_type: str = "yolo-generic") -> np.ndarray:
        header = {"shape": list(tensor.shape), "dtype": str(tensor.dtype), "model_type": model_type}
        return rows(self.send_frames([json.dumps(header).encode(), tensor.tobytes()]))


def rows(reply: list[bytes]) -> np.ndarray:
    if len(reply) == 2:
        assert json.loads(reply[0]) == {"shape": [20, 6], "dtype": "float32"}
        data = reply[1]
    else:
        assert len(reply) == 1
        data = reply[0]
    assert len(data) == 480
    return np.frombuffer(data, dtype="<f4").reshape(20, 6)


def expect(got: np.ndarray, want: list[list[float]]):
    if want:
        assert np.allclose(got[: len(want)], np.array(want, dtype=np.float32), atol=1e-5), got[: len(want) + 1]
    assert not got[len(want):].any(), got


def red_nchw() -> np.ndarray:
    x = np.zeros((1, 3, 32, 32), np.float32)
    x[:, 0] = 1.0
    return x


def red_nhwc_u8() -> np.ndarray:
    x = np.zeros((1, 32, 32, 3), np.uint8)
    x[..., 0] = 255
    return x


def endpoint_of(s) -> str:
    return s.wait_for_log(r"Started Frigate ZMQ detector at (\S+)").group(1)


@pytest.fixture
def frigate_repo(repo):
    copy_models(repo, "image_detector")
    copy_models(repo, "detector_nhwc_u8", "detector_ssd", src=FRIGATE)
    return repo


def start(start_server, repo, *extra):
    s = start_server("--model-repository", repo, "--frigate-zmq-endpoint", "tcp://127.0.0.1:0",
                     "--allow-metrics=true", "--metrics-port", "0", *extra)
    return s, endpoint_of(s)


@pytest.mark.parametrize("form", ["tensor", "bytes"])
def test_model_check_then_nchw_float_and_nhwc_uint8_frames(start_server, frigate_repo, form):
    s, ep = start(start_server, frigate_repo, f"--frigate-zmq-reply={form}")
    a, b = Frigate(ep), Frigate(ep)
    try:
        assert a.model_check("/config/model_cache/image_detector.onnx") == {"model_available": True, "model_loaded": True}
        reply = a.send_frames([json.dumps({"shape": [1, 3, 32, 32], "dtype": "float32"}).encode(), red_nchw().tobytes()])
        assert len(reply) == (2 if form == "tensor" else 1)
        expect(rows(reply), RED_ROWS)
        # The other socket names another model: each peer keeps its own.
        assert b.model_check("detector_nhwc_u8.onnx") == {"model_available": True, "model_loaded": True}
        expect(b.detect(red_nhwc_u8()), RED_ROWS)
        expect(a.detect(red_nchw()), RED_ROWS)
        # Nothing found is an all-zero reply.
        expect(a.detect(np.zeros((1, 3, 32, 32), np.float32)), [])
    finally:
        a.close()
        b.close()
    m = s.metrics()
    assert m['tritonrs_frigate_zmq_requests_total{kind="detect"}'] == 4
    assert m['tritonrs_frigate_zmq_requests_total{kind="model_request"}'] == 2
    assert m["tritonrs_frigate_zmq_request_duration_seconds_count"] == 4


def test_ssd_outputs(start_server, frigate_repo):
    s, ep = start(start_server, frigate_repo)
    c = Frigate(ep)
    try:
        assert c.model_check("detector_ssd.onnx")["model_loaded"] is True
        white = np.full((1, 32, 32, 3), 255, np.uint8)
        expect(c.detect(white, "ssd"), [[2, 0.9, 0.1, 0.2, 0.5, 0.6], [0, 0.4, 0.0, 0.0, 0.25, 0.25]])
        # 0.9 x 0.4 and 0.4 x 0.4: only the first passes detection.score_threshold 0.3.
        grey = np.full((1, 32, 32, 3), 102, np.uint8)
        expect(c.detect(grey, "ssd"), [[2, 0.36, 0.1, 0.2, 0.5, 0.6]])
    finally:
        c.close()


def test_unknown_models_and_pushes(start_server, frigate_repo, tmp_path):
    s, ep = start(start_server, frigate_repo)
    c = Frigate(ep)
    try:
        assert c.model_check("yolov8-tiny.onnx") == {"model_available": False, "model_loaded": False}
        assert c.push("yolov8-tiny.onnx", PUSH.read_bytes()) == {"model_saved": False, "model_loaded": False}
        s.wait_for_log(r"pushes are refused without --frigate-zmq-accept-models DIR")
    finally:
        c.close()
    assert s.metrics()['tritonrs_frigate_zmq_errors_total{reason="model_push_refused"}'] == 1

    # Accepted into a repository folder of the server, then loaded (explicit control loads it now).
    accept = tmp_path / "accepted"
    accept.mkdir()
    s2 = start_server("--model-repository", frigate_repo, "--model-repository", accept,
                      "--model-control-mode=explicit", "--load-model=*",
                      "--frigate-zmq-endpoint", "tcp://127.0.0.1:0", "--frigate-zmq-accept-models", accept)
    c = Frigate(endpoint_of(s2))
    try:
        assert c.model_check("/config/model_cache/yolov8-tiny.onnx") == {"model_available": False, "model_loaded": False}
        assert c.push("/config/model_cache/yolov8-tiny.onnx", PUSH.read_bytes()) == {"model_saved": True, "model_loaded": True}
        assert (accept / "yolov8-tiny" / "1" / "model.onnx").read_bytes() == PUSH.read_bytes()
        assert 'string_value: "yolo"' in (accept / "yolov8-tiny" / "config.pbtxt").read_text()
        assert c.model_check("yolov8-tiny.onnx") == {"model_available": True, "model_loaded": True}
        expect(c.detect(red_nchw()), RED_ROWS)
        # Not an ONNX model, and a name that would leave the folder: refused, nothing written.
        assert c.push("bad.onnx", b"this is not a model")["model_saved"] is False
        # Only the file name counts: a path that climbs out still lands in the folder, as "escape".
        assert c.push("../../escape.onnx", PUSH.read_bytes())["model_saved"] is True
        assert not (tmp_path / "escape").exists()
        assert sorted(p.name for p in accept.iterdir()) == ["escape", "yolov8-tiny"]
        assert c.push("bad name!.onnx", PUSH.read_bytes())["model_saved"] is False
    finally:
        c.close()


def test_fallback_model_serves_any_name(start_server, frigate_repo):
    s, ep = start(start_server, frigate_repo, "--frigate-zmq-model", "image_detector")
    c = Frigate(ep)
    try:
        # Detection before any model check uses the fallback.
        expect(c.detect(red_nchw()), RED_ROWS)
        assert c.model_check("something-else.onnx") == {"model_available": True, "model_loaded": True}
    finally:
        c.close()


def test_bad_requests_get_zero_replies_and_the_socket_keeps_serving(start_server, frigate_repo):
    broken = frigate_repo / "broken"
    shutil.copytree(EXAMPLES / "image_detector", broken)
    (broken / "config.pbtxt").write_text('name: "broken"\nbackend: "onnxruntime"\nmax_batch_size: 1\n'
                                         'input [ { name: "nope" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
    s, ep = start(start_server, frigate_repo, "--strict-readiness=false")
    c = Frigate(ep)
    good = [json.dumps({"shape": [1, 3, 32, 32], "dtype": "float32"}).encode(), red_nchw().tobytes()]
    try:
        # No model named yet, no fallback.
        expect(rows(c.send_frames(good)), [])
        assert c.model_check("image_detector.onnx")["model_loaded"] is True
        cases = {
            "header": [b"{not json", red_nchw().tobytes()],
            "dtype": [json.dumps({"shape": [1, 3, 32, 32], "dtype": "uint8"}).encode(),
                      red_nchw().astype(np.uint8).tobytes()],
            "shape": [json.dumps({"shape": [1, 3, 16, 16], "dtype": "float32"}).encode(),
                      np.zeros((1, 3, 16, 16), np.float32).tobytes()],
            "short_tensor": [json.dumps({"shape": [1, 3, 32, 32], "dtype": "float32"}).encode(), b"\0" * 100],
        }
        for frames in cases.values():
            expect(rows(c.send_frames(frames)), [])
            expect(rows(c.send_frames(good)), RED_ROWS)
        # A model that is in the repository but failed to load: available, not loaded, zero replies.
        assert c.model_check("broken.onnx") == {"model_available": True, "model_loaded": False}
        expect(rows(c.send_frames(good)), [])
        expect(rows(c.send_frames([json.dumps({"shape": [1], "dtype": "float32"}).encode()])), [])
    finally:
        c.close()
    m = s.metrics()
    for reason in cases:
        assert m[f'tritonrs_frigate_zmq_errors_total{{reason="{reason}"}}'] >= 1, reason
    assert m['tritonrs_frigate_zmq_errors_total{reason="model"}'] == 2
    assert s.is_running()


def test_a_client_that_times_out_reconnects_and_gets_its_own_replies(start_server, frigate_repo):
    s, ep = start(start_server, frigate_repo)
    c = Frigate(ep, timeout_ms=5000)
    try:
        assert c.model_check("detector_nhwc_u8.onnx")["model_loaded"] is True
        red = red_nhwc_u8()
        header = json.dumps({"shape": [1, 32, 32, 3], "dtype": "uint8"}).encode()
        for i in range(6):
            if i == 3:
                # The batcher holds a lone frame up to 20 ms: a 2 ms timeout runs out, as Frigate's
                # 200 ms one does on a busy board. Frigate then drops the socket and opens another.
                c.sock.setsockopt(zmq.RCVTIMEO, 2)
                c.sock.send_multipart([header, red.tobytes()])
                with pytest.raises(zmq.Again):
                    c.sock.recv_multipart()
                c.reconnect()
                continue
            black = np.zeros_like(red)
            expect(rows(c.send_frames([header, (red if i % 2 else black).tobytes()])), RED_ROWS if i % 2 else [])
    finally:
        c.close()
    assert s.is_running()


def test_three_cameras_are_batched(start_server, frigate_repo):
    s, ep = start(start_server, frigate_repo)
    header = json.dumps({"shape": [1, 32, 32, 3], "dtype": "uint8"}).encode()
    errors = []

    def camera():
        c = Frigate(ep)
        try:
            assert c.model_check("detector_nhwc_u8.onnx")["model_loaded"] is True
            for _ in range(20):
                expect(rows(c.send_frames([header, red_nhwc_u8().tobytes()])), RED_ROWS)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=camera) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    stats = s.client().get_inference_statistics("detector_nhwc_u8")["model_stats"][0]
    assert stats["inference_count"] == 60
    assert stats["execution_count"] < 60, stats


def test_ipc_endpoint(start_server, frigate_repo, tmp_path):
    path = tmp_path / "frigate.sock"
    s = start_server("--model-repository", frigate_repo, "--frigate-zmq-endpoint", f"ipc://{path}")
    c = Frigate(f"ipc://{path}")
    try:
        assert c.model_check("image_detector.onnx")["model_loaded"] is True
        expect(c.detect(red_nchw()), RED_ROWS)
    finally:
        c.close()


def test_ssd_model_through_deepstack_too(start_server, frigate_repo):
    # The ssd decoder serves the DeepStack endpoint as well, in the picture's pixels.
    import io

    from PIL import Image
    from test_deepstack import post_image

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (255, 255, 255)).save(buf, format="PNG")
    s = start_server("--model-repository", frigate_repo)
    r = post_image(s, "/v1/vision/custom/detector_ssd", buf.getvalue())
    assert r.status == 200, r
    preds = r.json()["predictions"]
    assert [(p["label"], round(p["confidence"], 3)) for p in preds] == [("2", 0.9), ("0", 0.4)]
    first = preds[0]
    # y 0.1..0.5, x 0.2..0.6 of a 64x64 picture.
    assert [first[k] for k in ("x_min", "y_min", "x_max", "y_max")] == pytest.approx([12.8, 6.4, 38.4, 32], abs=1)


# ---- what a hostile or broken peer can cost (issue 40) -------------------------------------------

import socket  # noqa: E402
import time  # noqa: E402

MiB = 1 << 20


def rss_mb(s) -> float:
    for line in open(f"/proc/{s.proc.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def recv_exact(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def raw_peer(ep: str, socket_type: bytes = b"DEALER") -> socket.socket:
    """A plain TCP socket that speaks ZMTP 3.0's greeting and READY by hand (RFC 23), as any client of
    the port could, so the test can then send frames no ZeroMQ library would."""
    host, port = ep.removeprefix("tcp://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0") + b"\0" * 32)
    greeting = recv_exact(sock, 64)
    assert greeting[0] == 0xFF and greeting[10] == 3 and greeting[12:16] == b"NULL"
    body = b"\x05READY" + b"\x0bSocket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    sock.sendall(bytes([0x04, len(body)]) + body)
    flags, size = recv_exact(sock, 2)
    assert flags == 0x04 and b"READY" in recv_exact(sock, size)
    return sock


def closed_by_peer(sock, within: float = 10.0) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def wait_metric(s, name: str, want, timeout: float = 10.0):
    deadline = time.time() + timeout
    while True:
        got = s.metrics().get(name)
        if got == want or time.time() > deadline:
            return got
        time.sleep(0.1)


def check_then_detect(ep: str):
    """A new Frigate socket names image_detector and gets its detections of a red frame."""
    c = Frigate(ep)
    try:
        assert c.model_check("image_detector.onnx")["model_loaded"] is True
        expect(c.detect(red_nchw()), RED_ROWS)
    finally:
        c.close()


@pytest.mark.parametrize("declared", [1 << 36, 1 << 40, 1 << 62])
def test_a_frame_declaring_more_than_any_message_closes_only_that_connection(start_server, frigate_repo, declared):
    # Before: the decoder reserved what the header declared, and the allocation failure aborted the server.
    s, ep = start(start_server, frigate_repo, "--frigate-zmq-model", "image_detector")
    sock = raw_peer(ep)
    sock.sendall(b"\x02" + declared.to_bytes(8, "big"))
    assert closed_by_peer(sock), "the connection stayed open"
    sock.close()
    assert s.is_running()
    c = Frigate(ep)
    try:
        expect(c.detect(red_nchw()), RED_ROWS)
    finally:
        c.close()
    assert s.metrics()['tritonrs_frigate_zmq_errors_total{reason="too_large"}'] == 1
    s.wait_for_log(r"closed the connection from 127\.0\.0\.1:\d+: .*more than the \d+ allowed")


def test_a_push_past_the_model_limit_is_refused_from_its_frame_header(start_server, frigate_repo, tmp_path):
    # Before: the 384 MiB frame was read into memory whole, and only then refused.
    accept = tmp_path / "accepted"
    accept.mkdir()
    s, ep = start(start_server, frigate_repo, "--model-repository", accept,
                  "--frigate-zmq-accept-models", accept, "--frigate-zmq-max-model-mb", "1")
    before = rss_mb(s)
    sock = raw_peer(ep)
    header = json.dumps({"model_data": True, "model_name": "huge.onnx"}).encode()
    sock.sendall(bytes([0x01, len(header)]) + header + b"\x02" + (384 * MiB).to_bytes(8, "big"))
    sent, chunk = 0, b"\0" * MiB
    try:
        while sent < 384 * MiB:
            sock.sendall(chunk)
            sent += MiB
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert sent < 64 * MiB, f"the server read {sent >> 20} MiB of a push it had to refuse"
    assert closed_by_peer(sock)
    sock.close()
    assert rss_mb(s) - before < 48, (before, rss_mb(s))
    assert s.metrics()['tritonrs_frigate_zmq_errors_total{reason="too_large"}'] == 1
    assert list(accept.iterdir()) == []
    # A push within the limit still works on a new connection.
    c = Frigate(ep)
    try:
        assert c.push("yolov8-tiny.onnx", PUSH.read_bytes())["model_saved"] is True
    finally:
        c.close()


def test_a_peer_that_never_reads_costs_bounded_memory(start_server, frigate_repo):
    # Before: every reply to a DEALER that never read was kept, 250 MB more for each 20,000 requests,
    # and most of it stayed after the peer left.
    s, ep = start(start_server, frigate_repo)
    header = json.dumps({"shape": [1, 3, 32, 32], "dtype": "float32"}).encode()
    tensor = red_nchw().tobytes()  # 12 KiB
    check_then_detect(ep)
    before = rss_mb(s)
    d = zmq.Context.instance().socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.setsockopt(zmq.SNDTIMEO, 20000)
    d.connect(ep)
    growth = []
    try:
        # The peer names no model, so each request is answered at once (nothing found, reason "model").
        for _ in range(3):
            for _ in range(20000):
                d.send_multipart([header, tensor])
            time.sleep(0.5)
            growth.append(rss_mb(s) - before)
        print(f"RSS growth after each round of 20,000: {[round(g) for g in growth]} MB")
        assert max(growth) < 120, growth
        dropped = s.metrics()['tritonrs_frigate_zmq_errors_total{reason="reply_dropped"}']
        assert dropped > 0
        assert wait_metric(s, "tritonrs_frigate_zmq_peers", 1) == 1
    finally:
        d.close(linger=0)
    assert wait_metric(s, "tritonrs_frigate_zmq_peers", 0) == 0
    time.sleep(0.5)
    print(f"RSS after the peer left: {rss_mb(s) - before:.0f} MB over the start")
    assert rss_mb(s) - before < 120, (before, rss_mb(s), growth)
    check_then_detect(ep)


def test_a_push_may_not_take_the_name_of_a_model_in_another_repository(start_server, frigate_repo, tmp_path):
    # Before: saved and "loaded", after which image_detector was in two repositories and failed to load.
    accept = tmp_path / "accepted"
    accept.mkdir()
    s, ep = start(start_server, frigate_repo, "--model-repository", accept, "--frigate-zmq-accept-models", accept)
    c = Frigate(ep)
    try:
        assert c.push("/config/model_cache/image_detector.onnx", PUSH.read_bytes()) == \
            {"model_saved": False, "model_loaded": False}
        s.wait_for_log(r"Frigate pushed model 'image_detector', refused: the model repository '.*' has a model of that name")
        assert list(accept.iterdir()) == []
        assert c.model_check("image_detector.onnx") == {"model_available": True, "model_loaded": True}
        expect(c.detect(red_nchw()), RED_ROWS)
    finally:
        c.close()
    assert s.metrics()['tritonrs_frigate_zmq_errors_total{reason="model_push_refused"}'] == 1


def test_zmtp_heartbeats_are_answered(start_server, frigate_repo):
    # libzmq's ZMTP 3.1 heartbeats: a peer that hears no PONG within its timeout drops the connection.
    import zmq.utils.monitor

    s, ep = start(start_server, frigate_repo, "--frigate-zmq-model", "image_detector")
    sock = zmq.Context.instance().socket(zmq.REQ)
    for opt, value in ((zmq.HEARTBEAT_IVL, 100), (zmq.HEARTBEAT_TIMEOUT, 300), (zmq.HEARTBEAT_TTL, 1000),
                       (zmq.RCVTIMEO, 5000), (zmq.LINGER, 0)):
        sock.setsockopt(opt, value)
    monitor = sock.get_monitor_socket()
    sock.connect(ep)
    try:
        time.sleep(1.5)
        header = json.dumps({"shape": [1, 3, 32, 32], "dtype": "float32"}).encode()
        sock.send_multipart([header, red_nchw().tobytes()])
        expect(rows(sock.recv_multipart()), RED_ROWS)
        events = []
        while monitor.poll(10):
            events.append(zmq.Event(zmq.utils.monitor.recv_monitor_message(monitor)["event"]).name)
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)
    assert "HANDSHAKE_SUCCEEDED" in events and "DISCONNECTED" not in events, events
