"""Decoupled ensembles, as tritonserver 2.51 serves them: an ensemble whose steps include a decoupled
model is decoupled itself; each response of the decoupled step flows on through the rest of the graph,
and the ensemble's responses stream to the client (gRPC ModelStreamInfer). The pipeline is three
Python models written here: `tokenize` (text to word ids), `stream` (decoupled: one response per id)
and `detokenize` (an id back to its word). Each case runs on tritonrs and on tritonserver 2.51 (the
anchors, where installed) and both must give the same responses in the same order with the same final
flags: the final flag on the last response, a final flag alone, an error from the middle step, no
response at all, and a non-decoupled ensemble, which is unchanged; both refuse to load steps that
read responses of different decoupled steps. On tritonrs only: the first-response histogram of a
decoupled ensemble, and a client that cancels its stream, which stops the decoupled step."""

from __future__ import annotations

import queue
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import both

VOCAB = ["<unk>", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "bad"]

TOKENIZE = f'''
import numpy as np
import triton_python_backend_utils as pb_utils

VOCAB = {VOCAB!r}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy().reshape(-1)[0].decode()
            ids = [VOCAB.index(w) if w in VOCAB else 0 for w in text.split()]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("IDS", np.array(ids, np.int32))]))
        return out
'''

# One response per id, 30 ms apart (300 ms before an error), so each id has usually gone through
# `detokenize` before the next one comes.
# The word "bad" gets an error response; the request's `final` parameter says how the request ends:
# "with_last" puts the final flag on the last response, "alone" sends it 300 ms later by itself.
STREAM = '''
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

BAD = 9


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            ids = pb_utils.get_input_tensor_by_name(r, "IDS").as_numpy().reshape(-1).tolist()
            params = json.loads(r.parameters() or "{}")
            threading.Thread(target=self.run, args=(r.get_response_sender(), ids, params.get("final", "with_last"))).start()
        return None

    def run(self, sender, ids, final):
        for k, i in enumerate(ids):
            # Long enough before an error for the words before it to have gone all the way through.
            time.sleep(0.3 if i == BAD else 0.03)
            last = k == len(ids) - 1 and final == "with_last"
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
            if i == BAD:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("stream: cannot say word %d" % k)),
                            flags=flags)
                continue
            outs = [pb_utils.Tensor("ID", np.array([i], np.int32)), pb_utils.Tensor("INDEX", np.array([k], np.int32))]
            sender.send(pb_utils.InferenceResponse(outs), flags=flags)
        if final != "with_last" or not ids:
            time.sleep(0.3 if ids else 0.0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

DETOKENIZE = f'''
import numpy as np
import triton_python_backend_utils as pb_utils

VOCAB = {VOCAB!r}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            i = int(pb_utils.get_input_tensor_by_name(r, "ID").as_numpy().reshape(-1)[0])
            word = VOCAB[i] if 0 <= i < len(VOCAB) else "?"
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("WORD", np.array([word.encode()], np.object_))]))
        return out
'''

# Non-decoupled: how many ids there are.
COUNT = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "N", np.array([pb_utils.get_input_tensor_by_name(r, "IDS").as_numpy().size], np.int32))])
            for r in requests]
'''


def python_model(repo, name, code, inputs, outputs, decoupled=False):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(code)
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\ninput [ {inputs} ]\noutput [ {outputs} ]\n'
        f'instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{policy}')


def ensemble(repo, name, steps, inputs, outputs, extra=""):
    """steps: (model, {model input: tensor}, {model output: tensor})."""
    def maps(kind, pairs):
        return " ".join(f'{kind} {{ key: "{k}" value: "{v}" }}' for k, v in pairs.items())

    body = ",\n".join(f'{{ model_name: "{m}" model_version: -1 {maps("input_map", i)} {maps("output_map", o)} }}'
                      for m, i, o in steps)
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\ninput [ {inputs} ]\noutput [ {outputs} ]\n'
        f"ensemble_scheduling {{ step [\n{body}\n] }}\n{extra}")


TEXT_IN = '{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }'
IDS = '{ name: "IDS" data_type: TYPE_INT32 dims: [ -1 ] }'
PIPELINE_STEPS = [
    ("tokenize", {"TEXT": "TEXT"}, {"IDS": "ids"}),
    ("stream", {"IDS": "ids"}, {"ID": "id", "INDEX": "INDEX"}),
    ("detokenize", {"ID": "id"}, {"WORD": "WORD"}),
]
PIPELINE_OUT = ('{ name: "WORD" data_type: TYPE_STRING dims: [ 1 ] },'
                ' { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }')


def write_repo(repo):
    python_model(repo, "tokenize", TOKENIZE, TEXT_IN, IDS)
    python_model(repo, "stream", STREAM, IDS,
                 '{ name: "ID" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }',
                 decoupled=True)
    python_model(repo, "detokenize", DETOKENIZE, '{ name: "ID" data_type: TYPE_INT32 dims: [ 1 ] }',
                 '{ name: "WORD" data_type: TYPE_STRING dims: [ 1 ] }')
    python_model(repo, "count", COUNT, IDS, '{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }')
    ensemble(repo, "pipeline", PIPELINE_STEPS, TEXT_IN, PIPELINE_OUT)
    # The decoupled step's responses are the ensemble's.
    ensemble(repo, "just_stream", [PIPELINE_STEPS[0], ("stream", {"IDS": "ids"}, {"INDEX": "INDEX"})], TEXT_IN,
             '{ name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }')
    ensemble(repo, "counted", [("tokenize", {"TEXT": "TEXT"}, {"IDS": "ids"}), ("count", {"IDS": "ids"}, {"N": "N"})],
             TEXT_IN, '{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }',
             extra="model_transaction_policy { decoupled: true }\n")
    return repo


def stream_infer(server, model, *texts, final=None, empty_final=True, settle=0.5):
    """Requests r1, r2, ... (one per text) on one gRPC stream; what came back, as comparable tuples in
    arrival order: ("response", id, outputs, final) or ("error", message). Collects until every request
    has ended (its final flag or an error), then `settle` seconds more to see that nothing follows."""
    q: queue.Queue = queue.Queue()
    c = server.grpc_client()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        for k, text in enumerate(texts):
            i = grpcclient.InferInput("TEXT", [1], "BYTES")
            i.set_data_from_numpy(np.array([text.encode()], np.object_))
            c.async_stream_infer(model, [i], request_id=f"r{k + 1}", enable_empty_final_response=empty_final,
                                 parameters={"final": final} if final else None)
        got, ended = [], 0
        deadline = time.monotonic() + 20
        done_at = None
        while True:
            wait = (done_at + settle if done_at else deadline) - time.monotonic()
            try:
                result, error = q.get(timeout=max(wait, 0.01))
            except queue.Empty:
                break
            if error is not None:
                got.append(("error", error.message()))
                ended += 1
            else:
                resp = result.get_response()
                final_flag = resp.parameters["triton_final_response"].bool_param
                got.append(("response", resp.id, {o.name: result.as_numpy(o.name).tolist() for o in resp.outputs},
                            final_flag))
                ended += final_flag
            if ended == len(texts) and done_at is None:
                done_at = time.monotonic()
        return got
    finally:
        c.stop_stream()


def words(*ws, rid="r1", last_final=True):
    """The pipeline's responses to request `rid` for these words, the final flag on the last one."""
    return [("response", rid, {"WORD": [w.encode()], "INDEX": [k]}, last_final and k == len(ws) - 1)
            for k, w in enumerate(ws)]


def empty_final(rid="r1"):
    return ("response", rid, {}, True)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """tritonrs and (where installed) tritonserver 2.51 on the same repository."""
    from helpers import TRITONSERVER, Tritonserver, TritonServer

    repo = write_repo(tmp_path_factory.mktemp("dec") / "repo")
    ours = TritonServer(["--model-repository", str(repo)], name="tritonrs").start()
    theirs = None
    if TRITONSERVER.exists():
        theirs = Tritonserver(["--model-repository", str(repo)], name="tritonserver").start()
    yield ours, theirs
    ours.stop()
    if theirs:
        theirs.stop()



# ---- streaming ---------------------------------------------------------------------------------------


def test_each_response_of_the_decoupled_step_flows_through_the_rest(servers):
    got = both(servers, lambda s: stream_infer(s, "pipeline", "the quick brown fox"))
    assert got == words("the", "quick", "brown", "fox"), "the final flag rides on the last response"


def test_a_final_flag_sent_alone_ends_the_stream_with_an_empty_final_response(servers):
    got = both(servers, lambda s: stream_infer(s, "pipeline", "lazy dog", final="alone"))
    assert got == words("lazy", "dog", last_final=False) + [empty_final()]
    # Clients that do not ask for empty final responses get the responses only.
    got = both(servers, lambda s: stream_infer(s, "pipeline", "lazy dog", final="alone", empty_final=False,
                                               settle=1.0))
    assert got == words("lazy", "dog", last_final=False)


def test_an_error_response_of_the_decoupled_step_ends_the_ensemble_request(servers):
    got = both(servers, lambda s: stream_infer(s, "pipeline", "the bad fox jumps"))
    assert got == words("the", last_final=False) + [("error", "in ensemble 'pipeline', stream: cannot say word 1")]


def test_a_decoupled_step_without_responses_gives_only_the_final_flag(servers):
    assert both(servers, lambda s: stream_infer(s, "pipeline", "")) == [empty_final()]


def test_the_decoupled_step_may_answer_for_the_ensemble(servers):
    got = both(servers, lambda s: stream_infer(s, "just_stream", "over the dog"))
    assert got == [("response", "r1", {"INDEX": [k]}, k == 2) for k in range(3)]


def test_requests_on_one_stream_each_get_their_own_responses(servers):
    def by_request(s):
        got: dict = {}
        for item in stream_infer(s, "pipeline", "the fox", "lazy dog jumps"):
            got.setdefault(item[1], []).append(item)
        return got

    got = both(servers, by_request)
    assert got == {"r1": words("the", "fox"), "r2": words("lazy", "dog", "jumps", rid="r2")}


# ---- configuration -----------------------------------------------------------------------------------


def test_an_ensemble_with_a_decoupled_step_is_decoupled(servers):
    def facts(s):
        cfg = s.get("/v2/models/pipeline/config").json()
        with pytest.raises(InferenceServerException) as http:
            s.client().infer("pipeline", [text_input(httpclient, "the")])
        with pytest.raises(InferenceServerException) as grpc:
            s.grpc_client().infer("pipeline", [text_input(grpcclient, "the")])
        return (cfg["model_transaction_policy"], cfg["platform"], http.value.status(), http.value.message(),
                grpc.value.status(), grpc.value.message())

    got = both(servers, facts)
    assert got == ({"decoupled": True}, "ensemble", "501",
                   "HTTP end point doesn't support models with decoupled transaction policy",
                   "StatusCode.UNIMPLEMENTED", "ModelInfer RPC doesn't support models with decoupled transaction policy")


def test_an_ensemble_without_decoupled_steps_is_not_decoupled(servers):
    # `counted` says `decoupled: true`, but none of its steps is: as Triton, it is not decoupled.
    def facts(s):
        cfg = s.get("/v2/models/counted/config").json()
        r = s.client().infer("counted", [text_input(httpclient, "a b c d")])
        return cfg["model_transaction_policy"], r.as_numpy("N").tolist(), stream_infer(s, "counted", "x y")

    got = both(servers, facts)
    assert got == ({"decoupled": False}, [4], [("response", "r1", {"N": [2]}, True)])


def text_input(module, text):
    i = module.InferInput("TEXT", [1], "BYTES")
    i.set_data_from_numpy(np.array([text.encode()], np.object_))
    return i


def test_steps_reading_responses_of_different_decoupled_steps_are_refused(tmp_path, start_server, start_tritonserver):
    repo = write_repo(tmp_path / "repo")
    pair = ("import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n"
            "    def execute(self, requests):\n"
            "        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, 'ID')]) for r in requests]\n")
    python_model(repo, "pair", pair, '{ name: "ID" data_type: TYPE_INT32 dims: [ 1 ] }, ' + IDS,
                 '{ name: "ID" data_type: TYPE_INT32 dims: [ 1 ] }')
    # `pair` reads one of the stream's responses and the tokenizer's answer: which response goes with it?
    ensemble(repo, "mixed_inputs", [PIPELINE_STEPS[0], ("stream", {"IDS": "ids"}, {"ID": "id", "INDEX": "INDEX"}),
                                    ("pair", {"ID": "id", "IDS": "ids"}, {"ID": "OUT"})],
             TEXT_IN, '{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }')
    # One output from the stream's responses, one from the request itself.
    ensemble(repo, "mixed_outputs", PIPELINE_STEPS + [("count", {"IDS": "ids"}, {"N": "N"})], TEXT_IN,
             PIPELINE_OUT + ', { name: "N" data_type: TYPE_INT32 dims: [ 1 ] }')
    ours = start_server("--model-repository", str(repo), wait="live")
    ours.wait_until(ours.settled, what="every model tried")
    assert "receives inputs originated from different decoupled models" in ours.index_row("mixed_inputs")["reason"]
    assert "outputs originated from different decoupled models" in ours.index_row("mixed_outputs")["reason"]
    assert ours.index_row("pipeline")["state"] == "READY"
    try:
        theirs = start_tritonserver("--model-repository", str(repo), "--exit-on-error=false", wait="live")
    except pytest.skip.Exception:
        return
    theirs.wait_until(lambda: theirs.get("/v2/models/pipeline/ready").status == 200, what="pipeline ready")
    for m in ("mixed_inputs", "mixed_outputs"):
        assert theirs.get(f"/v2/models/{m}/ready").status != 200
        assert ours.get(f"/v2/models/{m}/ready").status != 200


# ---- first-response metrics ----------------------------------------------------------------------------


def test_a_decoupled_ensemble_has_the_first_response_histogram(tmp_path, start_server):
    repo = write_repo(tmp_path / "repo")
    s = start_server("--model-repository", str(repo), "--allow-metrics=true", "--metrics-port=0",
                     "--metrics-config=histogram_latencies=true")
    assert stream_infer(s, "pipeline", "the quick fox", settle=0.1) == words("the", "quick", "fox")
    assert stream_infer(s, "pipeline", "", settle=0.1) == [empty_final()]
    m = s.metrics()
    # One request had a first response; the one with none is not observed.
    assert m['nv_inference_first_response_histogram_ms_count{model="pipeline",version="1"}'] == 1
    assert m['nv_inference_first_response_histogram_ms_count{model="stream",version="1"}'] == 1
    # The ensemble's first response waits for the stream's first and its detokenization.
    assert (m['nv_inference_first_response_histogram_ms_sum{model="pipeline",version="1"}']
            >= m['nv_inference_first_response_histogram_ms_sum{model="stream",version="1"}'])
    assert not any(k.startswith("nv_inference_first_response_histogram_ms_count{model=\"counted\"") for k in m)


# ---- cancellation ------------------------------------------------------------------------------------


def test_a_client_that_goes_away_stops_the_decoupled_step(tmp_path, start_server):
    repo = write_repo(tmp_path / "repo")
    s = start_server("--model-repository", str(repo))
    q: queue.Queue = queue.Queue()
    c = s.grpc_client()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    c.async_stream_infer("pipeline", [text_input(grpcclient, "the quick brown fox jumps over the lazy dog")],
                         request_id="gone")
    result, error = q.get(timeout=20)
    assert error is None and result.as_numpy("WORD").tolist() == [b"the"]
    c.stop_stream(cancel_requests=True)

    def cancelled(model):
        [m] = s.client().get_inference_statistics(model)["model_stats"]
        return sum(r["cancel"]["count"] for r in m["response_stats"].values())

    # The stream's request to `stream` is dropped with it: both count a cancelled response.
    s.wait_until(lambda: cancelled("pipeline") == 1 and cancelled("stream") == 1, what="both cancelled")
    [m] = s.client().get_inference_statistics("stream")["model_stats"]
    assert sum(r["success"]["count"] for r in m["response_stats"].values()) < 9, "the stream stopped early"
    assert stream_infer(s, "pipeline", "dog", settle=0.1) == words("dog"), "the pipeline still serves"
