"""Iterative sequences and request rescheduling (issue 36), against tritonserver 2.51.

With `sequence_batching { iterative_sequence: true }` a request without a sequence id is a sequence of its
own: the batcher gives it a correlation id (1, 2, ... per model) and START on its first execution, and the
model runs it again as long as it releases it with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`
(`request.set_release_flags(...)` in Python), one response per execution for a decoupled model (the
python_backend README's example), or one response at the end (`None` for the executions before).

The model here counts down from IN per correlation id, pausing `pause` seconds per execution so that a
second request arrives while the first runs, and writes every `execute` call's requests (id, correlation
id, flags) to `events.txt`, so the batches the two servers form can be compared.
"""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path

import numpy as np
import pytest

MODEL = '''
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(cfg)
        self.events = os.path.join(args["model_repository"], "events.txt")
        self.pause = float(cfg.get("parameters", {}).get("pause", {}).get("string_value", "0"))
        self.left = {}

    def execute(self, requests):
        with open(self.events, "a") as f:
            f.write(json.dumps([[r.request_id(), r.correlation_id(), r.flags()] for r in requests]) + "\\n")
        time.sleep(self.pause)
        out = []
        for r in requests:
            n = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            corr = r.correlation_id()
            if r.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START or corr not in self.left:
                self.left[corr] = int(n.reshape(-1)[0])
            self.left[corr] -= 1
            left = self.left[corr]
            if left > 0:
                r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                del self.left[corr]
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.full(n.shape, left, np.int32))])
            if self.decoupled:
                final = 0 if left > 0 else pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                r.get_response_sender().send(response, flags=final)
            else:
                out.append(None if left > 0 else response)
        return None if self.decoupled else out
'''

ITERATIVE = "sequence_batching { iterative_sequence: true }"
DECOUPLED = "model_transaction_policy { decoupled: true }"
# name: (scheduling and policy, seconds per execution)
MODELS = {
    "iter_stream": (f"{ITERATIVE}\n{DECOUPLED}", 0.5),
    "iter": (ITERATIVE, 0.0),
    "resched_dyn": ("dynamic_batching { }", 0.0),
}


def write_models(repo: Path) -> Path:
    for name, (extra, pause) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL)
        (repo / name / "config.pbtxt").write_text(
            'backend: "python"\nmax_batch_size: 4\n'
            'input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]\n'
            'output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]\n'
            'instance_group [{ count: 1 kind: KIND_CPU }]\n'
            f'parameters {{ key: "pause" value: {{ string_value: "{pause}" }} }}\n{extra}\n')
    return repo


def batches(repo: Path, model: str) -> list[list]:
    p = repo / model / "events.txt"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def inputs(module, value: int):
    i = module.InferInput("IN", [1, 1], "INT32")
    i.set_data_from_numpy(np.array([[value]], np.int32))
    return [i]


def stream(s, model: str, starts: dict[str, int], **kw) -> dict[str, list]:
    """Sends the requests (id: IN) on one gRPC stream, 0.1 s apart; collects each one's responses as
    (OUT, final) until every one has had its final response."""
    import tritonclient.grpc as grpcclient

    got = queue.Queue()
    c = s.grpc_client()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    for rid, value in starts.items():
        c.async_stream_infer(model, inputs(grpcclient, value), request_id=rid, **kw)
        time.sleep(0.1)
    out: dict[str, list] = {rid: [] for rid in starts}
    while any(not r or not r[-1][1] for r in out.values()):
        result, error = got.get(timeout=20)
        assert error is None, error
        r = result.get_response()
        out[r.id].append((int(result.as_numpy("OUT").reshape(-1)[0]), r.parameters["triton_final_response"].bool_param))
    c.stop_stream()
    return out


def counts(s, model: str) -> tuple[int, int]:
    st = s.get(f"/v2/models/{model}/stats").json()["model_stats"][0]
    return st["inference_count"], st["execution_count"]


def run_cases(s, repo: Path) -> dict:
    """What both servers are asked: two decoupled iterative requests sharing batches, one with a sequence id
    of its own, and a non-decoupled one over HTTP and over gRPC."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    seen = {"streamed": stream(s, "iter_stream", {"a": 3, "b": 2})}
    seen["streamed_batches"] = batches(repo, "iter_stream")
    seen["own_id"] = stream(s, "iter_stream", {"c": 2}, sequence_id=77, sequence_start=True)
    seen["own_id_batches"] = batches(repo, "iter_stream")[len(seen["streamed_batches"]):]
    seen["stream_counts"] = counts(s, "iter_stream")
    h = httpclient.InferenceServerClient(s.url).infer("iter", inputs(httpclient, 3), request_id="h")
    g = s.grpc_client().infer("iter", inputs(grpcclient, 2), request_id="g")
    seen["unary"] = [h.as_numpy("OUT").tolist(), g.as_numpy("OUT").tolist()]
    seen["unary_batches"] = batches(repo, "iter")
    seen["unary_counts"] = counts(s, "iter")
    return seen


def test_iterative_sequences_run_as_in_tritonserver(start_server, start_tritonserver, tmp_path):
    theirs_repo, ours_repo = write_models(tmp_path / "theirs"), write_models(tmp_path / "ours")
    theirs = run_cases(start_tritonserver("--model-repository", str(theirs_repo)), theirs_repo)
    ours = run_cases(start_server("--model-repository", str(ours_repo)), ours_repo)
    assert ours == theirs
    # What both did: the second request joined the first's batches as it was rescheduled.
    assert ours["streamed"] == {"a": [(2, False), (1, False), (0, True)], "b": [(1, False), (0, True)]}
    assert ours["streamed_batches"] == [[["a", 1, 1]], [["a", 1, 0], ["b", 2, 1]], [["a", 1, 0], ["b", 2, 0]]]
    assert ours["own_id_batches"] == [[["c", 77, 1]], [["c", 77, 0]]]
    assert ours["unary"] == [[[0]], [[0]]]
    assert ours["unary_batches"] == [[["h", 1, 1]], [["h", 1, 0]], [["h", 1, 0]], [["g", 2, 1]], [["g", 2, 0]]]
    assert ours["stream_counts"] == (7, 5) and ours["unary_counts"] == (5, 5)


def test_rescheduling_outside_an_iterative_sequence_is_an_error(start_server, start_tritonserver, tmp_path):
    """tritonserver 2.51 logs the refusal and never answers the request; tritonrs answers it with the
    same words (a difference the README lists)."""
    message = ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
               "configured to handle such a flag.")
    body = {"inputs": [{"name": "IN", "shape": [1, 1], "datatype": "INT32", "data": [3]}]}
    ours = start_server("--model-repository", str(write_models(tmp_path / "ours")))
    r = ours.post("/v2/models/resched_dyn/infer", body)
    assert (r.status, r.json()) == (400, {"error": message})
    theirs = start_tritonserver("--model-repository", str(write_models(tmp_path / "theirs")))
    with pytest.raises(OSError):  # socket.timeout: no answer
        theirs.post("/v2/models/resched_dyn/infer", body, timeout=3)
    theirs.wait_for_log(message)


def test_a_cancelled_iterative_request_stops_running(start_server, tmp_path):
    repo = write_models(tmp_path / "repo")
    s = start_server("--model-repository", str(repo), "--allow-metrics=true", "--metrics-port", "0")
    got = queue.Queue()
    c = s.grpc_client()
    c.start_stream(callback=lambda result, error: got.put(result))
    import tritonclient.grpc as grpcclient

    c.async_stream_infer("iter_stream", inputs(grpcclient, 1000), request_id="long")
    got.get(timeout=10)
    got.get(timeout=10)
    c.stop_stream(cancel_requests=True)
    time.sleep(0.5)
    ran = len(batches(repo, "iter_stream"))
    time.sleep(1.0)
    assert len(batches(repo, "iter_stream")) == ran, "no execution after the cancellation"
    assert ran < 10
    canceled = [v for k, v in s.metrics().items()
                if k.startswith("nv_inference_request_failure{") and 'model="iter_stream"' in k and "CANCELED" in k]
    assert canceled == [1.0]
    # The model serves the next sequence as usual.
    assert stream(s, "iter_stream", {"next": 2}) == {"next": [(1, False), (0, True)]}
