"""Issue 36, item 7: text generation over MQTT. A prompt published on `tritonrs/generate/<model>` (or the
device's own topic) runs as a streamed inference; every response of a decoupled model is published in
order with its index, then a final marker with the whole text, on the request's response topic with its
correlation data. A real mosquitto brokers it and paho-mqtt is the requester."""

from __future__ import annotations

import json

from mqtt_helpers import Requester, body, correlation
# The broker and the requesters' clean-up are test_mqtt's fixtures.
from test_mqtt import broker, close_requesters, mqtt_server, wait_online  # noqa: F401

STREAMER = """import json
import triton_python_backend_utils as pb_utils
import numpy as np


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(r, "text_input").as_numpy().reshape(-1)[0].decode()
            if text == "fail":
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("the model refuses 'fail'")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            limit = json.loads(r.parameters()).get("max_words", 100)
            with open({log!r}, "a") as f:
                f.write(text + "\\n")
            for i, word in enumerate(text.split()[:limit]):
                piece = (" " if i else "") + word.upper()
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=np.object_))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

CONFIG = """backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def llm_repo(root, log):
    (root / "shout" / "1").mkdir(parents=True)
    (root / "shout" / "1" / "model.py").write_text(STREAMER.replace("{log!r}", repr(str(log))))
    (root / "shout" / "config.pbtxt").write_text(CONFIG)
    return root


def stream(r: Requester, topic: str, corr: bytes | None = None) -> list[dict]:
    """The messages of one generation, up to and including its final marker, each with the request's
    correlation data."""
    out = []
    while True:
        m = r.get(timeout=20)
        out.append(body(m))
        assert m.topic == topic and correlation(m) == corr, (m.topic, correlation(m))
        if out[-1]["final"]:
            return out


def test_a_prompt_streams_each_response_in_order_then_a_final_marker(start_server, broker, tmp_path):
    repo = llm_repo(tmp_path / "repo", tmp_path / "prompts.txt")
    mqtt_server(start_server, broker, repo, "llm1")
    r = Requester(broker.port)
    wait_online(r, "llm1")
    r.subscribe("app/text")
    r.publish("tritonrs/llm1/generate/shout/kitchen", "the quick brown fox", response_topic="app/text",
              correlation=b"c-1")
    got = stream(r, "app/text", b"c-1")
    assert [m["text_output"] for m in got[:-1]] == ["THE", " QUICK", " BROWN", " FOX"]
    assert [m["index"] for m in got] == [0, 1, 2, 3, 4]
    assert [m["final"] for m in got] == [False] * 4 + [True]
    last = got[-1]
    assert last["success"] is True and last["responses"] == 4 and last["text_output"] == "THE QUICK BROWN FOX"
    assert all(m["model"] == "shout" and m["source"] == "kitchen" and m["device"] == "llm1" for m in got)


def test_json_prompts_carry_parameters_and_ids_and_go_to_the_result_topic(start_server, broker, tmp_path):
    repo = llm_repo(tmp_path / "repo", tmp_path / "prompts.txt")
    mqtt_server(start_server, broker, repo, "llm2", protocol="3.1.1")
    r = Requester(broker.port, protocol=311)
    wait_online(r, "llm2")
    r.subscribe("tritonrs/result/shout")
    prompt = {"text_input": "one two three four", "parameters": {"max_words": 2}, "id": "req-7"}
    r.publish("tritonrs/generate/shout", json.dumps(prompt))
    got = stream(r, "tritonrs/result/shout")
    assert [m["text_output"] for m in got] == ["ONE", " TWO", "ONE TWO"]
    assert {m["id"] for m in got} == {"req-7"}


def test_errors_end_the_stream_and_duplicates_get_the_final_marker_without_running_again(
        start_server, broker, tmp_path):
    log = tmp_path / "prompts.txt"
    repo = llm_repo(tmp_path / "repo", log)
    mqtt_server(start_server, broker, repo, "llm3")
    r = Requester(broker.port)
    wait_online(r, "llm3")
    r.subscribe("app/#")
    r.publish("tritonrs/llm3/generate/shout", "fail", response_topic="app/err")
    [err] = stream(r, "app/err")
    assert err["success"] is False and "refuses" in err["error"]["message"] and err["responses"] == 0
    r.publish("tritonrs/llm3/generate/nope", "hello", response_topic="app/missing")
    [missing] = stream(r, "app/missing")
    assert missing["error"]["code"] == "not_found"
    r.publish("tritonrs/llm3/generate/shout", b"\xff\xfe", response_topic="app/bad")
    [bad] = stream(r, "app/bad")
    assert bad["error"]["code"] == "bad_request"
    r.publish("tritonrs/llm3/generate/shout", "say it once", response_topic="app/dup", correlation=b"same")
    first = stream(r, "app/dup", b"same")
    r.publish("tritonrs/llm3/generate/shout", "say it once", response_topic="app/dup", correlation=b"same")
    [again] = stream(r, "app/dup", b"same")
    assert again["text_output"] == first[-1]["text_output"] == "SAY IT ONCE"
    assert log.read_text().splitlines() == ["say it once"]
