"""The MQTT bridge against a real mosquitto, with paho-mqtt as the independent requester: request
kinds, response topics, availability, Home Assistant discovery, fleets on a shared subscription,
crashes and broker restarts without lost or repeated work, and bad input."""

from __future__ import annotations

import json
import signal
import struct
import time
import uuid

import numpy as np
import pytest

from helpers import EXAMPLES, copy_models
from mqtt_helpers import Mosquitto, Requester, body, correlation, user_props


@pytest.fixture(autouse=True)
def close_requesters():
    yield
    Requester.close_all()


@pytest.fixture
def broker(tmp_path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.stop()


def simple_request(value: int, rid: str | None = None) -> dict:
    r = {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [value] * 16},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
    ]}
    if rid:
        r["id"] = rid
    return r


def mqtt_server(start_server, broker, repo, device="dev1", *extra, protocol="5"):
    return start_server("--model-repository", repo, "--mqtt-broker", broker.url, "--mqtt-device-id", device,
                        "--mqtt-protocol", protocol, "--mqtt-stats-interval-secs", "0", *extra)


def wait_online(req: Requester, device: str, timeout: float = 15.0):
    req.subscribe(f"tritonrs/{device}/available")
    req.wait_for(f"tritonrs/{device}/available", lambda m: m.payload == b"online", timeout)


def wait_subscribed(broker: Mosquitto, device: str, model: str, timeout: float = 15.0):
    """Waits until the broker's log shows the device's fleet subscription for `model`."""
    needle = f"$share/tritonrs/tritonrs/infer/{model}/#"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f"tritonrs-{device}" in broker.log and needle in broker.log:
            return
        time.sleep(0.05)
    raise AssertionError(f"{device} never subscribed {needle}:\n{broker.log[-3000:]}")


def counting_model(repo, name: str, log_path, execute_s: float = 0.0):
    """A Python model (INT32 [1] IN -> OUT = IN * 2) that appends every input it runs to `log_path`,
    so a test can tell whether any request ran twice, even across a SIGKILL."""
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(
        "import os, time\n"
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        out = []\n"
        "        for r in requests:\n"
        "            x = pb_utils.get_input_tensor_by_name(r, 'IN').as_numpy()\n"
        f"            time.sleep({execute_s})\n"
        f"            with open({str(log_path)!r}, 'a') as f:\n"
        "                f.write(f'{int(x[0])}\\n')\n"
        "                f.flush()\n"
        "                os.fsync(f.fileno())\n"
        "            out.append(pb_utils.InferenceResponse([pb_utils.Tensor('OUT', x * 2)]))\n"
        "        return out\n")
    (model / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')


def count_request(i: int) -> str:
    return json.dumps({"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [i]}]})


# ---- requests and results -------------------------------------------------------------------------


def test_json_request_answers_on_the_response_topic_with_the_correlation_data(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    mqtt_server(start_server, broker, repo)
    r = Requester(broker.port)
    wait_online(r, "dev1")
    r.subscribe("app/answers")
    corr = b"\x00\x01binary\xff"
    r.publish("tritonrs/infer/simple/front", json.dumps(simple_request(5)), response_topic="app/answers",
              correlation=corr)
    m = r.wait_for("app/answers")
    assert correlation(m) == corr, "correlation data must come back byte for byte"
    b = body(m)
    assert b["model"] == "simple" and b["model_version"] == "1"
    assert b["device"] == "dev1" and b["source"] == "front"
    assert b["ts"].endswith("Z") and b["id"]
    outs = {o["name"]: o["data"] for o in b["outputs"]}
    assert outs["OUTPUT0"] == [6] * 16 and outs["OUTPUT1"] == [4] * 16
    assert getattr(m.properties, "ContentType", None) == "application/json"


def test_binary_tensor_request_and_binary_outputs(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    mqtt_server(start_server, broker, repo)
    r = Requester(broker.port)
    wait_online(r, "dev1")
    r.subscribe("app/bin")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    ones = np.ones((1, 16), dtype=np.int32)
    header = json.dumps({
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}],
    }).encode()
    r.publish("tritonrs/dev1/infer/simple", header + a.tobytes() + ones.tobytes(), response_topic="app/bin",
              correlation=b"b1", user={"Inference-Header-Content-Length": len(header)})
    m = r.wait_for("app/bin")
    n = int(user_props(m)["Inference-Header-Content-Length"])
    head = json.loads(m.payload[:n])
    outs = {o["name"]: o for o in head["outputs"]}
    assert outs["OUTPUT0"]["parameters"]["binary_data_size"] == 64
    assert np.array_equal(np.frombuffer(m.payload[n:], dtype=np.int32), (a + ones).ravel())
    assert outs["OUTPUT1"]["data"] == list((a - ones).ravel())


def test_mqtt_311_results_go_to_the_result_topic_with_the_request_id(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    mqtt_server(start_server, broker, repo, "old", protocol="3.1.1")
    r = Requester(broker.port, protocol=311)
    wait_online(r, "old")
    r.subscribe("tritonrs/result/#")
    r.publish("tritonrs/infer/simple/garage", json.dumps(simple_request(1, rid="req-42")))
    m = r.wait_for("tritonrs/result/simple/garage")
    b = body(m)
    assert b["id"] == "req-42" and b["source"] == "garage" and b["device"] == "old"
    # A request without an id gets a generated one.
    r.publish("tritonrs/old/infer/simple", json.dumps(simple_request(2)))
    m = r.wait_for("tritonrs/result/simple")
    assert len(body(m)["id"]) == 36


# ---- availability, state, discovery ---------------------------------------------------------------


def test_retained_online_and_state_then_will_offline_on_sigkill(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    s = mqtt_server(start_server, broker, repo, "box")
    late = Requester(broker.port)
    wait_online(late, "box")
    # A client that subscribes later still gets both, retained.
    r = Requester(broker.port)
    r.subscribe("tritonrs/box/#")
    got = {m.topic: m for m in r.collect(2)}
    assert got["tritonrs/box/available"].payload == b"online" and got["tritonrs/box/available"].retain
    state = body(got["tritonrs/box/state"])
    assert got["tritonrs/box/state"].retain
    assert {"name": "simple", "version": "1", "state": "READY", "reason": ""} in state["models"]
    assert state["tritonrs_version"] and state["platform"]["arch"]
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(5)
    m = r.wait_for("tritonrs/box/available", timeout=60)
    assert m.payload == b"offline"


def test_clean_shutdown_publishes_offline_and_unload_updates_state(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple", "classifier")
    s = mqtt_server(start_server, broker, repo, "box2", "--model-control-mode", "explicit", "--load-model", "*")
    r = Requester(broker.port)
    wait_online(r, "box2")
    r.subscribe("tritonrs/box2/state")
    assert s.post("/v2/repository/models/classifier/unload").status == 200
    r.wait_for("tritonrs/box2/state", lambda m: any(
        x["name"] == "classifier" and x["state"] == "UNAVAILABLE" for x in body(m)["models"]))
    # The fleet topic of the unloaded model is unsubscribed: the broker log shows it.
    deadline = time.monotonic() + 10
    while "tritonrs-box2 $share/tritonrs/tritonrs/infer/classifier/#" not in broker.log:
        assert time.monotonic() < deadline, broker.log[-2000:]
        time.sleep(0.1)
    s.stop()
    m = r.wait_for("tritonrs/box2/available", lambda m: m.payload == b"offline", timeout=10)


def test_home_assistant_discovery_and_its_resend_when_home_assistant_restarts(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    # Home Assistant's own client speaks 3.1.1.
    ha = Requester(broker.port, protocol=311)
    ha.subscribe("homeassistant/device/#")
    mqtt_server(start_server, broker, repo, "cam-nvr", "--mqtt-homeassistant", "--mqtt-stats-interval-secs", "1")
    m = ha.wait_for("homeassistant/device/tritonrs_cam-nvr/config")
    d = body(m)
    assert d["avty_t"] == "tritonrs/cam-nvr/available" and d["stat_t"] == "tritonrs/cam-nvr/stats"
    assert d["dev"]["ids"] == ["tritonrs_cam-nvr"]
    assert set(d["cmps"]) >= {"inferences_per_second", "queue_time_ms"}
    for c in d["cmps"].values():
        assert c["p"] == "sensor" and c["uniq_id"].startswith("tritonrs_cam-nvr_")
    # The stats topic carries the values the templates read.
    ha.subscribe("tritonrs/cam-nvr/stats", 0)
    st = body(ha.wait_for("tritonrs/cam-nvr/stats"))
    assert "inferences_per_second" in st and "queue_time_ms" in st
    assert st["mqtt"]["tritonrs_mqtt_connected"] == 1
    # Home Assistant comes back: discovery is sent again within 0-5 s.
    ha.publish("homeassistant/status", "online", qos=1)
    t0 = time.monotonic()
    m = ha.wait_for("homeassistant/device/tritonrs_cam-nvr/config", lambda m: not m.retain, timeout=10)
    assert time.monotonic() - t0 < 7


def test_metrics_count_mqtt_messages(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    s = start_server("--model-repository", repo, "--mqtt-broker", broker.url, "--mqtt-device-id", "m1",
                     "--allow-metrics=true", "--metrics-port", "0", "--metrics-address", "127.0.0.1")
    r = Requester(broker.port)
    wait_online(r, "m1")
    r.subscribe("tritonrs/result/#")
    r.publish("tritonrs/m1/infer/simple", json.dumps(simple_request(1)))
    r.publish("tritonrs/m1/infer/simple", b"neither an image nor json")
    r.collect(2)
    port = int(s.wait_for_log(r"Started Metrics Service at [\d.]+:(\d+)").group(1))
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "tritonrs_mqtt_connected 1" in text
    assert 'tritonrs_mqtt_messages_total{result="ok"} 1' in text
    assert 'tritonrs_mqtt_messages_total{result="error"} 1' in text
    assert "tritonrs_mqtt_request_duration_seconds_count 2" in text


# ---- fleets, crashes, broker restarts -------------------------------------------------------------


def test_three_servers_split_300_requests_on_the_shared_subscription(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    servers = [mqtt_server(start_server, broker, repo, f"node{i}") for i in range(3)]
    for i in range(3):
        wait_subscribed(broker, f"node{i}", "simple")
    r = Requester(broker.port)
    r.subscribe("app/fleet")
    ids = [uuid.uuid4().bytes for _ in range(300)]
    for i, c in enumerate(ids):
        r.publish("tritonrs/infer/simple", json.dumps(simple_request(i)), response_topic="app/fleet", correlation=c)
    got = r.collect(300, timeout=60)
    corrs = [correlation(m) for m in got]
    assert sorted(corrs) == sorted(ids), "every correlation id gets exactly one result"
    by_device = {}
    for m in got:
        b = body(m)
        assert b["outputs"][0]["data"][0] == int(b["outputs"][1]["data"][0]) + 2
        by_device[b["device"]] = by_device.get(b["device"], 0) + 1
    assert set(by_device) == {"node0", "node1", "node2"}, f"the work is split: {by_device}"
    time.sleep(0.5)
    assert r.messages.empty(), "no result twice"
    for s in servers:
        assert s.is_running()


def test_a_node_killed_with_requests_in_hand_answers_them_after_restart_without_running_any_twice(
        start_server, broker, tmp_path):
    repo = tmp_path / "repo"
    runs = tmp_path / "runs.txt"
    counting_model(repo, "count", runs, execute_s=0.05)
    state = tmp_path / "state"
    args = ("--mqtt-state-dir", state, "--mqtt-max-inflight", "100")
    s = mqtt_server(start_server, broker, repo, "victim", *args)
    r = Requester(broker.port)
    wait_online(r, "victim")
    r.subscribe("app/crash")
    n = 60
    for i in range(n):
        r.publish("tritonrs/victim/infer/count", count_request(i), response_topic="app/crash",
                  correlation=f"c{i}".encode())
    # Kill it while it holds requests: some answered, some running, some still queued at the broker.
    deadline = time.monotonic() + 20
    while not runs.exists() or len(runs.read_text().split()) < 10:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(5)
    mqtt_server(start_server, broker, repo, "victim", *args)
    seen = {}
    deadline = time.monotonic() + 60
    while len(seen) < n:
        m = r.get(max(0.1, deadline - time.monotonic()))
        if m.topic == "app/crash":
            seen[correlation(m).decode()] = body(m)
    interrupted = set()
    for i in range(n):
        b = seen[f"c{i}"]
        if b.get("success") is False:
            # Running when the node died: it may have run, so it is answered, not run again.
            assert b["error"]["code"] == "interrupted", b
            interrupted.add(i)
        else:
            assert b["outputs"][0]["data"] == [2 * i], b
    ran = sorted(map(int, runs.read_text().split()))
    assert len(ran) == len(set(ran)), f"no request runs twice: {ran}"
    assert set(range(n)) - interrupted <= set(ran)
    # At most the requests it had taken in (--mqtt-max-inflight); the rest waited at the broker.
    assert len(interrupted) <= 100, interrupted


def test_every_accepted_request_is_answered_across_a_broker_restart(start_server, broker, tmp_path):
    repo = tmp_path / "repo"
    runs = tmp_path / "runs.txt"
    counting_model(repo, "count", runs, execute_s=0.02)
    mqtt_server(start_server, broker, repo, "steady", "--mqtt-max-inflight", "4")
    r = Requester(broker.port, client_id="steady-app", persistent=True)
    r.client.reconnect_delay_set(0.05, 0.5)
    wait_online(r, "steady")
    r.subscribe("app/steady")
    n = 80
    for i in range(n // 2):
        r.publish("tritonrs/steady/infer/count", count_request(i), response_topic="app/steady",
                  correlation=f"s{i}".encode())
    time.sleep(0.3)
    broker.stop()  # saves sessions and queued messages
    broker.start()
    r.wait_connects(2)
    for i in range(n // 2, n):
        r.publish("tritonrs/steady/infer/count", count_request(i), response_topic="app/steady",
                  correlation=f"s{i}".encode())
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < n:
        assert time.monotonic() < deadline, f"answered {len(seen)} of {n}"
        try:
            m = r.get(1)
        except Exception:
            continue
        if m.topic == "app/steady":
            seen.add(correlation(m))
    # Results published before the restart were delivered to the requester's kept session.
    assert seen == {f"s{i}".encode() for i in range(n)}


def test_duplicates_get_the_stored_result_without_running_again(start_server, broker, tmp_path):
    repo = tmp_path / "repo"
    runs = tmp_path / "runs.txt"
    counting_model(repo, "count", runs)
    mqtt_server(start_server, broker, repo, "dd")
    r = Requester(broker.port)
    wait_online(r, "dd")
    r.subscribe("app/dup")
    for _ in range(3):
        r.publish("tritonrs/dd/infer/count", count_request(7), response_topic="app/dup", correlation=b"same")
    got = r.collect(3)
    assert all(body(m)["outputs"][0]["data"] == [14] for m in got)
    # The same request id is a duplicate too (3.1.1 clients have no correlation data).
    req = json.loads(count_request(8))
    req["id"] = "once"
    for _ in range(2):
        r.publish("tritonrs/dd/infer/count", json.dumps(req), response_topic="app/dup")
    got = r.collect(2)
    assert [body(m)["id"] for m in got] == ["once", "once"]
    assert sorted(runs.read_text().split()) == ["7", "8"]


def test_the_bridge_connects_once_the_broker_comes_up_and_the_server_serves_meanwhile(start_server, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    b = Mosquitto(tmp_path / "late")
    s = start_server("--model-repository", repo, "--mqtt-broker", b.url, "--mqtt-device-id", "late")
    assert s.get("/v2/health/ready").status == 200
    s.wait_for_log("MQTT bridge: cannot connect")
    b.start()
    try:
        r = Requester(b.port)
        wait_online(r, "late", timeout=40)
        r.subscribe("tritonrs/result/#")
        r.publish("tritonrs/late/infer/simple", json.dumps(simple_request(3)))
        assert body(r.wait_for("tritonrs/result/simple"))["outputs"][0]["data"] == [4] * 16
    finally:
        b.stop()


# ---- bad input ----------------------------------------------------------------------------------


def test_bad_input_gets_error_results_and_the_bridge_keeps_serving(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    python_slow = repo / "slow"
    from helpers import python_sleep_model

    python_sleep_model(repo, "slow", execute_s=1.0)
    s = mqtt_server(start_server, broker, repo, "bad", "--mqtt-max-payload-bytes", "2048",
                    "--mqtt-max-inflight", "2")
    r = Requester(broker.port)
    wait_online(r, "bad")
    r.subscribe("app/bad")

    def ask(topic, payload, corr, qos=1, **kw):
        r.publish(topic, payload, qos=qos, response_topic="app/bad", correlation=corr, **kw)

    ask("tritonrs/bad/infer/simple", b"\xff\xd8\xff\xe0\x00\x10JFIF-but-truncated", b"corrupt")
    ask("tritonrs/bad/infer/nosuch", json.dumps(simple_request(1)), b"unknown")
    ask("tritonrs/bad/infer/simple", b"{" + b" " * 4000 + b"}", b"big")
    # Over the limit, a JSON request is refused unread: its id is not taken from it.
    ask("tritonrs/bad/infer/simple", json.dumps({**simple_request(1, "big-id"), "pad": " " * 4000}), b"bigid")
    ask("tritonrs/bad/infer/simple", b"{not json", b"badjson")
    ask("tritonrs/bad/infer/simple", json.dumps(simple_request(1)), b"badprop", user={"top_k": "zero"})
    got = {correlation(m): body(m) for m in r.collect(6)}
    codes = {k: v["error"]["code"] for k, v in got.items()}
    assert codes == {b"corrupt": "bad_request", b"unknown": "not_found", b"big": "payload_too_large",
                     b"bigid": "payload_too_large", b"badjson": "bad_request", b"badprop": "bad_request"}, codes
    assert got[b"bigid"]["id"] and got[b"bigid"]["id"] != "big-id", got[b"bigid"]
    assert all(v["success"] is False and v["error"]["message"] for v in got.values())
    # A full queue: QoS 0 requests are not held back by the broker's receive window.
    slow = json.dumps({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}]})
    for i in range(5):
        ask("tritonrs/bad/infer/slow", slow, f"q{i}".encode(), qos=0)
    got = [body(m) for m in r.collect(5, timeout=20)]
    rejected = [b for b in got if b.get("success") is False]
    assert len(rejected) == 3 and all(b["error"]["code"] == "rejected" for b in rejected)
    assert sum(1 for b in got if "outputs" in b) == 2
    # Still serving.
    ask("tritonrs/bad/infer/simple", json.dumps(simple_request(1)), b"after")
    assert body(r.wait_for("app/bad"))["outputs"][0]["data"] == [2] * 16
    assert s.is_running()


def test_expired_requests_get_an_expired_result(start_server, broker, tmp_path):
    repo = tmp_path / "repo"
    from helpers import python_sleep_model

    python_sleep_model(repo, "slow", execute_s=1.5)
    mqtt_server(start_server, broker, repo, "exp", "--mqtt-request-timeout-ms", "300")
    r = Requester(broker.port)
    wait_online(r, "exp")
    r.subscribe("app/exp")
    slow = json.dumps({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}]})
    r.publish("tritonrs/exp/infer/slow", slow, response_topic="app/exp", correlation=b"e1")
    b = body(r.wait_for("app/exp"))
    assert b["success"] is False and b["error"]["code"] == "expired"


# ---- images -------------------------------------------------------------------------------------

IMAGES = EXAMPLES.parent.parent / "tests" / "data" / "images"


def test_jpeg_and_png_frames_are_classified_with_labels(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "image_classifier")
    mqtt_server(start_server, broker, repo, "cams")
    r = Requester(broker.port)
    wait_online(r, "cams")
    r.subscribe("tritonrs/result/#")
    r.publish("tritonrs/infer/image_classifier/front_door", (IMAGES / "red_64x48.jpg").read_bytes())
    b = body(r.wait_for("tritonrs/result/image_classifier/front_door"))
    assert b["classes"][0]["label"] == "red" and b["classes"][0]["index"] == 0
    assert abs(b["classes"][0]["score"] - 1.0) < 0.01
    assert b["image"] == {"width": 64, "height": 48} and b["source"] == "front_door"
    assert set(b["timings_ms"]) == {"decode", "preprocess", "queue", "infer", "postprocess", "total"}
    # PNG, with user properties: top_k and a request id.
    r.publish("tritonrs/cams/infer/image_classifier", (IMAGES / "green_40x30.png").read_bytes(),
              user={"top_k": 2, "request_id": "frame-1"})
    b = body(r.wait_for("tritonrs/result/image_classifier"))
    assert b["id"] == "frame-1"
    assert b["classes"] == [{"index": 1, "label": "green", "score": 1.0}, {"index": 0, "label": "red", "score": 0.0}]


def test_letterboxed_detections_come_back_in_picture_pixels(start_server, broker, tmp_path):
    repo = copy_models(tmp_path / "repo", "image_detector")
    mqtt_server(start_server, broker, repo, "det")
    r = Requester(broker.port)
    wait_online(r, "det")
    r.subscribe("app/det")
    r.publish("tritonrs/det/infer/image_detector/yard", (IMAGES / "red_320x240.jpg").read_bytes(),
              response_topic="app/det", correlation=b"f1")
    b = body(r.wait_for("app/det"))
    assert b["success"] is True and b["image"] == {"width": 320, "height": 240}
    boxes = [(p["label"], round(p["x_min"]), round(p["y_min"]), round(p["x_max"]), round(p["y_max"]))
             for p in b["predictions"]]
    # See test_deepstack.py: the model's boxes are constants of its 32x32 input, so the letterbox
    # alone decides them in the picture's pixels.
    assert boxes == [("red", 80, 80, 240, 160), ("red", 0, 200, 80, 240)], b
    assert all("class_id" in p and "confidence" in p for p in b["predictions"])
    # min_confidence as a user property.
    r.publish("tritonrs/det/infer/image_detector/yard", (IMAGES / "red_320x240.jpg").read_bytes(),
              response_topic="app/det", correlation=b"f2", user={"min_confidence": "0.6"})
    b = body(r.wait_for("app/det"))
    assert len(b["predictions"]) == 1
