"""Ragged batching (issue 35): `allow_ragged_batch` inputs, `batch_input` of every kind and `batch_output`
BATCH_SCATTER_WITH_INPUT_SHAPE, checked against tritonserver 2.51 where a Python model can observe them
(what execute() receives, the configuration, load errors), and on an ONNX model (model-repos/ragged,
from model-repos/gen_ragged.py) whose graph returns the batch inputs tritonrs computed."""

import shutil
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import REPO_ROOT

PYTHON = REPO_ROOT / "model-repos" / "python"
RAGGED = REPO_ROOT / "model-repos" / "ragged"
LENGTHS = (2, 3, 5)


def infer_concurrently(server, model, lengths, outputs):
    """Sends one request per length at once (INPUT0 = [[0, 1, .., k-1]]) so the dynamic batcher (1 s
    queue delay) puts them in one batch; returns {k: result}."""
    results, errors = {}, []
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}", concurrency=len(lengths))
    barrier = threading.Barrier(len(lengths))

    def one(k):
        try:
            x = np.arange(k, dtype=np.float32).reshape(1, k)
            i = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
            i.set_data_from_numpy(x)
            barrier.wait()
            results[k] = client.infer(model, [i], outputs=[httpclient.InferRequestedOutput(o) for o in outputs])
        except Exception as e:  # noqa: BLE001 -- reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in lengths]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


def python_repo(repo):
    shutil.copytree(PYTHON / "ragged_echo", repo / "ragged_echo")
    return repo


def test_python_model_sees_each_request_as_sent_like_tritonserver(repo, start_server, start_tritonserver):
    python_repo(repo)
    seen = {}
    for name, start in (("tritonserver", start_tritonserver), ("tritonrs", start_server)):
        s = start(f"--model-repository={repo}")
        res = infer_concurrently(s, "ragged_echo", LENGTHS, ["OUTPUT0", "NAMES"])
        seen[name] = {k: ([v.decode() for v in r.as_numpy("NAMES")[0]], r.as_numpy("OUTPUT0").tolist())
                      for k, r in res.items()}
        cfg = s.client().get_model_config("ragged_echo")
        seen[name + " config"] = (cfg.get("batch_input"), cfg.get("batch_output"))
    assert seen["tritonrs"] == seen["tritonserver"]
    assert seen["tritonrs config"] == seen["tritonserver config"]
    # What that is: the three requests in one execute() call, each with only its own INPUT0.
    assert seen["tritonrs"][5][0] == ["3", "INPUT0:[1, 5]"]


BASE = """backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "NAMES" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
BAD = {
    "bad_source": ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT32 '
                   'source_input: "NOPE" } ]', "batch_input"),
    "bad_type": ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT64 '
                 'source_input: "INPUT0" } ]', "batch_input"),
    "two_sources": ('batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "C" data_type: TYPE_INT32 '
                    'source_input: [ "INPUT0", "INPUT0" ] } ]', "batch_input"),
    "no_source": ('batch_input [ { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "C" data_type: TYPE_FP32 } ]',
                  "batch_input"),
    "out_source": ('batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT0" '
                   'source_input: "NOPE" } ]', "batch_output"),
    "out_twice": ('batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: [ "OUTPUT0", "OUTPUT0" ] '
                  'source_input: "INPUT0" } ]', "batch_output"),
    "out_two_sources": ('batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT0" '
                        'source_input: [ "INPUT0", "INPUT0" ] } ]', "batch_output"),
    "out_unknown": ('batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "NOPE" '
                    'source_input: "INPUT0" } ]', "batch_output"),
    # Accepted by both: a Python model is not checked against its batch inputs' targets.
    "good": ('batch_input [ { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "M" data_type: TYPE_FP32 '
             'source_input: "INPUT0" } ]', None),
}


def test_bad_batch_inputs_and_outputs_fail_the_load_like_tritonserver(repo, start_server, start_tritonserver):
    for name, (text, _) in BAD.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(PYTHON / "ragged_echo" / "1" / "model.py", repo / name / "1" / "model.py")
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{BASE}{text}\n')
    ref = start_tritonserver(f"--model-repository={repo}", "--exit-on-error=false", wait="live")
    ours = start_server(f"--model-repository={repo}", "--exit-on-error=false", wait="live")
    for s in (ref, ours):
        for _ in range(600):
            if len(s.index()) == len(BAD) and s.settled():
                break
            threading.Event().wait(0.1)
    for name, (_, field) in BAD.items():
        theirs, mine = ref.index_row(name), ours.index_row(name)
        assert mine["state"] == theirs["state"], (name, mine, theirs)
        if field is None:
            assert mine["state"] == "READY"
            continue
        # tritonserver: "Invalid argument: <message> for <model>"; tritonrs names the field too.
        message = theirs["reason"].removeprefix("Invalid argument: ").removesuffix(f" for {name}")
        assert message in mine["reason"], (name, mine["reason"], theirs["reason"])
        assert f"field '{field}'" in mine["reason"], mine["reason"]


def ints(result, name):
    return [int(v) for v in result.as_numpy(name).reshape(-1)]


ONNX_OUTPUTS = ["OUTPUT0", "COUNT_OUT", "ACC_OUT", "ACC0_HEAD", "ACC0_TAIL", "MAX_OUT", "ISHAPE_OUT", "ISHAPE_F_OUT"]


def test_onnx_model_gets_every_batch_input_and_a_scattered_output(start_server):
    s = start_server(f"--model-repository={RAGGED}")
    res = infer_concurrently(s, "ragged_onnx", LENGTHS, ONNX_OUTPUTS)
    # The requests went through in one batch, in some order: their running totals, sorted, add up the
    # counts in that order.
    order = sorted(LENGTHS, key=lambda k: ints(res[k], "ACC_OUT")[0])
    total = 0
    for k in order:
        r = res[k]
        assert ints(r, "COUNT_OUT") == [k]
        assert ints(r, "ACC0_HEAD") == [total]
        total += k
        assert ints(r, "ACC_OUT") == [total]
        assert ints(r, "ACC0_TAIL") == [total]
        assert ints(r, "MAX_OUT") == [max(LENGTHS)]
        assert ints(r, "ISHAPE_OUT") == [k]
        assert ints(r, "ISHAPE_F_OUT") == [k]
        # OUTPUT0 (flat in the model) comes back with this request's INPUT0 shape.
        out = r.as_numpy("OUTPUT0")
        assert out.shape == (1, k)
        assert out.tolist() == [[2.0 * v for v in range(k)]]
    stats = s.client().get_inference_statistics("ragged_onnx")["model_stats"][0]
    assert (stats["inference_count"], stats["execution_count"]) == (3, 1)


def test_onnx_model_alone_gets_its_own_batch_inputs(start_server):
    s = start_server(f"--model-repository={RAGGED}")
    res = infer_concurrently(s, "ragged_onnx", (4,), ONNX_OUTPUTS)[4]
    assert [ints(res, n) for n in ONNX_OUTPUTS[1:]] == [[4], [4], [0], [4], [4], [4], [4]]
    assert res.as_numpy("OUTPUT0").tolist() == [[0.0, 2.0, 4.0, 6.0]]


def test_onnx_model_warms_up_with_its_batch_inputs(repo, start_server):
    shutil.copytree(RAGGED / "ragged_onnx", repo / "ragged_onnx")
    cfg = repo / "ragged_onnx" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + 'model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" value: '
                   '{ data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } } ]\n')
    s = start_server(f"--model-repository={repo}")
    assert s.index_row("ragged_onnx")["state"] == "READY"
