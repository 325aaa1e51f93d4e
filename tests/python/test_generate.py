"""The generate extension (issue 36): `POST /v2/models/M[/versions/V]/generate` (one JSON object) and
`/generate_stream` (Server-Sent Events), differential against tritonserver 2.51 on the same Python
models, decoupled and not: status, content type and parsed bodies or events must be the same, except
the deliberate differences README lists (a client's mistake that tritonserver answers with 500, or
with 200 and an error body, is 400 here). Also: the restricted-API setting, HTTPS, traces, and
events leaving as the model sends them."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import TRITONSERVER, Tritonserver, TritonServer

PY = f"--backend-config=python,python-executable={sys.executable}"
SSE = "text/event-stream; charset=utf-8"
JSON = "application/json"

# ---- models ---------------------------------------------------------------------------------------

PLAIN_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "scale" data_type: TYPE_FP32 dims: [ -1 ] optional: true },
        { name: "flag" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
        { name: "num" data_type: TYPE_INT64 dims: [ 1 ] optional: true },
        { name: "grid" data_type: TYPE_INT32 dims: [ 2, 2 ] optional: true } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "params" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "values" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "grid_out" data_type: TYPE_INT32 dims: [ 2, 2 ] },
         { name: "flag_out" data_type: TYPE_BOOL dims: [ 1 ] } ]
"""

# Not decoupled: text_output = text_input + "!", params = the request's parameters as JSON; "raise"
# raises, "error" answers an error response.
PLAIN_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "text_input").as_numpy().reshape(-1)[0].decode()
            if text == "raise":
                raise pb_utils.TritonModelException("gen_plain: raised on purpose")
            if text == "error":
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("gen_plain: error response")))
                continue
            s = pb_utils.get_input_tensor_by_name(r, "scale")
            values = s.as_numpy() * 2 if s is not None else np.array([1.5, 2.5], np.float32)
            g = pb_utils.get_input_tensor_by_name(r, "grid")
            f = pb_utils.get_input_tensor_by_name(r, "flag")
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([(text + "!").encode()], np.object_)),
                pb_utils.Tensor("params", np.array([r.parameters().encode()], np.object_)),
                pb_utils.Tensor("values", values.astype(np.float32)),
                pb_utils.Tensor("grid_out", g.as_numpy() if g is not None else np.zeros((2, 2), np.int32)),
                pb_utils.Tensor("flag_out", f.as_numpy() if f is not None else np.array([False])),
            ]))
        return out
"""

STREAM_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "count" data_type: TYPE_INT32 dims: [ 1 ] },
        { name: "delay" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "index" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"""

# Decoupled: `count` responses (text_input + index), `delay` seconds apart, then the final flag on its
# own; "raise" raises, "error" makes response 1 an error response, "error0" response 0.
STREAM_MODEL = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "text_input").as_numpy().reshape(-1)[0].decode()
            n = int(pb_utils.get_input_tensor_by_name(r, "count").as_numpy().reshape(-1)[0])
            d = pb_utils.get_input_tensor_by_name(r, "delay")
            delay = float(d.as_numpy().reshape(-1)[0]) if d is not None else 0.0
            if text == "raise":
                raise pb_utils.TritonModelException("gen_stream: raised on purpose")
            sender = r.get_response_sender()
            for i in range(n):
                if i and delay:
                    time.sleep(delay)
                if (text == "error" and i == 1) or (text == "error0" and i == 0):
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("gen_stream: error response")))
                    continue
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("text_output", np.array([f"{text}{i}".encode()], np.object_)),
                    pb_utils.Tensor("index", np.array([i], np.int32)),
                ]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

BATCHED_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_INT32 dims: [ 3 ] },
        { name: "words" data_type: TYPE_STRING dims: [ -1 ] optional: true } ]
output [ { name: "y" data_type: TYPE_INT32 dims: [ 3 ] },
         { name: "words_out" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

# Batching: y = x + 1, words_out = words (BYTES) upper-cased.
BATCHED_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "x").as_numpy()
            w = pb_utils.get_input_tensor_by_name(r, "words")
            words = w.as_numpy() if w is not None else np.array([[b"none"]] * x.shape[0], np.object_)
            upper = np.array([[v.upper() for v in row] for row in words], np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x + 1),
                                                   pb_utils.Tensor("words_out", upper)]))
        return out
"""


def write_models(root: Path) -> Path:
    for name, config, model in (("gen_plain", PLAIN_CONFIG, PLAIN_MODEL), ("gen_stream", STREAM_CONFIG, STREAM_MODEL),
                                ("gen_batched", BATCHED_CONFIG, BATCHED_MODEL)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(textwrap.dedent(config))
        (root / name / "1" / "model.py").write_text(textwrap.dedent(model))
    return root


def need_tritonserver():
    if not TRITONSERVER.exists():
        pytest.skip(f"tritonserver 2.51 is not installed at {TRITONSERVER} (scripts/test-tools.sh installs it)")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("generate") / "repo")


@pytest.fixture(scope="module")
def ours(models):
    s = TritonServer(["--model-repository", models, PY], name="tritonrs").start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def theirs(models):
    need_tritonserver()
    s = Tritonserver(["--model-repository", models], name="tritonserver").start()
    yield s
    s.stop()


# ---- comparing ------------------------------------------------------------------------------------


def events(text: str) -> list[dict]:
    """The JSON objects of a Server-Sent Events body (every event one `data: <json>` line)."""
    out = []
    for block in text.split("\n\n"):
        if block:
            assert block.startswith("data: ") and "\n" not in block, repr(block)
            out.append(json.loads(block[len("data: "):]))
    return out


def normalized(obj: dict) -> dict:
    """A response object with the model's echo of its parameters parsed (the Python backends format
    that JSON text differently)."""
    if isinstance(obj.get("params"), str):
        return {**obj, "params": json.loads(obj["params"])}
    return obj


def answer(server, path: str, body: str | bytes):
    r = server.post(path, body, headers={"Content-Type": "application/json"})
    ctype = r.headers.get("content-type")
    text = r.body.decode()
    if ctype == SSE:
        parsed = [normalized(e) for e in events(text)]
    else:
        parsed = normalized(json.loads(text))
    return r.status, ctype, parsed


G, S = "/v2/models/gen_plain/generate", "/v2/models/gen_plain/generate_stream"
DG, DS = "/v2/models/gen_stream/generate", "/v2/models/gen_stream/generate_stream"

# (path, body): both servers answer the same status, content type and parsed body or events.
SAME = [
    (G, '{"text_input":"hi","parameters":{"a":1,"b":"x","c":true,"d":1.5},"id":"r1","extra":5}'),
    (G, '{"text_input":["hi"],"scale":[1,2,3]}'),
    (G, '{"text_input":"hi","scale":7,"flag":true,"num":-5}'),
    (G, '{"text_input":"hi","grid":[1,2,3,4]}'),
    (G, '{"text_input":"hi","grid":[[1,2],[3,4]]}'),
    (G, '{"text_input":"hi","scale":[]}'),
    (G, '{"text_input":["a","b"]}'),
    (G, '{"parameters":{"text_input":"via parameters","id":"not the id"}}'),
    (G, '{"text_input":"hi","parameters":{"x":[1]}}'),
    (G, '{"text_input":"hi","foo":{"a":1}}'),
    (G, '{"text_input":"h\\u00e9 \\"q\\"\\n"}'),
    (G, '{}'),
    (G, '{"text_input":"raise"}'),
    (G, '{"text_input":"error"}'),
    (G, '{"text_input":"hi","text_input":"again"}'),
    ("/v2/models/gen_plain/versions/1/generate", '{"text_input":"hi"}'),
    ("/v2/models/gen_plain/versions/7/generate", '{"text_input":"hi"}'),
    ("/v2/models/gen_plain/versions/0/generate", '{"text_input":"hi"}'),
    ("/v2/models/gen_plain/versions/99999999999999999999/generate", '{"text_input":"hi"}'),
    ("/v2/models/nope/generate", '{"text_input":"hi"}'),
    ("/v2/models/nope/generate_stream", '{"text_input":"hi"}'),
    (S, '{"text_input":"hi","id":"s1"}'),
    (S, '{"text_input":"raise"}'),
    (S, '{"text_input":"error"}'),
    (DS, '{"text_input":"hi","count":3,"id":"abc"}'),
    (DS, '{"text_input":"hi","count":0}'),
    (DS, '{"text_input":"error","count":3}'),
    (DS, '{"text_input":"error","count":2}'),
    (DS, '{"text_input":"error0","count":3}'),
    (DS, '{"text_input":"raise","count":3}'),
    (DS, '{"text_input":"hi"}'),
    (DS, '{"text_input":"hi","count":[1,2]}'),
    ("/v2/models/gen_stream/versions/1/generate_stream", '{"text_input":"v","count":2}'),
    ("/v2/models/gen_stream/versions/3/generate_stream", '{"text_input":"hi","count":1}'),
    (DG, '{"text_input":"one","count":1}'),
    (DG, '{"text_input":"raise","count":1}'),
    (DG, '{"text_input":"error0","count":1}'),
    (DG, '{"count":1}'),
    ("/v2/models/gen_batched/generate", '{"x":[1,2,3,4,5,6]}'),
    ("/v2/models/gen_batched/generate", '{"x":[1,2,3],"words":["ab","cd"]}'),
    ("/v2/models/gen_batched/generate", '{"x":[[1,2,3]]}'),
    ("/v2/models/gen_batched/generate_stream", '{"x":[7,8,9]}'),
]

# (path, body): tritonserver answers a client's mistake with 500; tritonrs with 400 and the same body.
SERVER_ERROR_IN_TRITON = [
    (G, '{"text_input":5}'),
    (G, '{"text_input":null}'),
    (G, '{"text_input":"hi","scale":"abc"}'),
    (G, '{"text_input":"hi","scale":[[1,2]]}'),
    (G, '{"text_input":"hi","num":1.5}'),
    (G, '{"text_input":"hi","flag":1}'),
    (G, '{"text_input":"hi","id":5}'),
    (G, '{"text_input":"hi","parameters":5}'),
    (G, '[1,2]'),
    (G, ''),
    (DS, '{"text_input":"hi","count":"x"}'),
    ("/v2/models/gen_batched/generate", '{"x":[1,2,-3.5]}'),
]

# (path, body): malformed JSON, 500 with RapidJSON's words in tritonserver, 400 with serde_json's here.
MALFORMED = [(G, '{"text_input":'), (DS, '{"text_input":"hi"} x'), (G, '{"a":1e400}')]

# (path, body): a decoupled model that does not send exactly one response on /generate: tritonserver
# answers 200 with an error body, tritonrs 400 with the same body.
NOT_ONE = [(DG, '{"text_input":"hi","count":3}'), (DG, '{"text_input":"hi","count":0}')]


@pytest.mark.parametrize("path,body", SAME)
def test_same_answer_as_tritonserver(ours, theirs, path, body):
    want = answer(theirs, path, body)
    assert answer(ours, path, body) == want
    # The same request again answers the same (nothing left behind by the first one).
    assert answer(ours, path, body) == want


@pytest.mark.parametrize("path,body", SERVER_ERROR_IN_TRITON)
def test_client_mistakes_are_400_where_tritonserver_says_500(ours, theirs, path, body):
    status, ctype, want = answer(theirs, path, body)
    assert (status, ctype) == (500, JSON)
    assert answer(ours, path, body) == (400, JSON, want)


@pytest.mark.parametrize("path,body", MALFORMED)
def test_malformed_json_is_400(ours, theirs, path, body):
    status, ctype, want = answer(theirs, path, body)
    prefix = "failed to parse the request JSON buffer: "
    assert (status, ctype) == (500, JSON) and want["error"].startswith(prefix)
    status, ctype, got = answer(ours, path, body)
    assert (status, ctype) == (400, JSON) and got["error"].startswith(prefix), got


@pytest.mark.parametrize("path,body", NOT_ONE)
def test_generate_on_a_decoupled_model_needs_exactly_one_response(ours, theirs, path, body):
    status, ctype, want = answer(theirs, path, body)
    assert (status, ctype) == (200, JSON) and "exactly 1 response" in want["error"]
    assert answer(ours, path, body) == (400, JSON, want)


def test_a_missing_required_input_is_refused_even_when_the_count_fits(ours, theirs):
    # tritonserver checks only the number of inputs when a model has optional ones, and hands this
    # request to the model, which fails on the missing input; tritonrs refuses it, in tritonserver's words.
    status, ctype, want = answer(theirs, S, '{"scale":[1]}')
    assert (status, ctype) == (400, SSE) and "'NoneType' object has no attribute" in want[0]["error"]
    assert answer(ours, S, '{"scale":[1]}') == (400, JSON, {"error": (
        "[request id: <id_unknown>] expected number of inputs between 1 and 5 but got 1 inputs for model "
        "'gen_plain'. Got input(s) ['scale'], but missing required input(s) ['text_input']. Please provide all "
        "required input(s).")})


def test_fields_parameters_and_outputs_map_as_in_tritonserver(ours):
    # The differential cases above check both servers alike; this states what they agree on.
    status, ctype, got = answer(ours, G, '{"text_input":"hi","scale":[1,2],"flag":true,"id":"r1",'
                                         '"parameters":{"temperature":0.5,"max_tokens":8,"stop":"x","greedy":true},'
                                         '"top_k":3}')
    assert (status, ctype) == (200, JSON)
    assert got == {"id": "r1", "model_name": "gen_plain", "model_version": "1", "text_output": "hi!",
                   "values": [2.0, 4.0], "grid_out": [0, 0, 0, 0], "flag_out": True,
                   "params": {"temperature": 0.5, "max_tokens": 8, "stop": "x", "greedy": True, "top_k": 3,
                              "id": "r1"}}
    status, ctype, got = answer(ours, DS, '{"text_input":"t","count":2}')
    assert (status, ctype) == (200, SSE)
    assert got == [{"model_name": "gen_stream", "model_version": "1", "text_output": f"t{i}", "index": i}
                   for i in range(2)]


def test_wrong_method_is_405_as_in_tritonserver(ours, theirs):
    for path in (G, S, DS, "/v2/models/gen_plain/versions/1/generate"):
        want = theirs.get(path)
        got = ours.get(path)
        assert (got.status, got.headers["content-type"], got.json()) == (405, JSON, {"error": "Method Not Allowed"})
        assert (want.status, want.headers["content-type"], want.json()) == (405, JSON, {"error": "Method Not Allowed"})


def test_non_numeric_version_is_no_route_as_in_tritonserver(ours, theirs):
    for path in ("/v2/models/gen_plain/versions/abc/generate", "/v2/models/gen_plain/versions/-1/generate_stream"):
        want, got = theirs.post(path, '{"text_input":"hi"}'), ours.post(path, '{"text_input":"hi"}')
        assert (want.status, want.headers["content-type"], want.body) == (404, "text/plain", b'{"error":"Not Found"}')
        assert (got.status, got.headers["content-type"], got.body) == (404, "text/plain", b'{"error":"Not Found"}')


def test_events_leave_as_the_model_sends_them(ours):
    # Three responses 0.6 s apart: the first event is read long before the last is sent.
    conn = http.client.HTTPConnection(ours.host, ours.port, timeout=30)
    conn.request("POST", DS, body='{"text_input":"slow","count":3,"delay":0.6}')
    r = conn.getresponse()
    assert (r.status, r.getheader("content-type")) == (200, SSE)
    start = time.monotonic()
    first = r.readline()
    first_at = time.monotonic() - start
    assert r.readline() == b"\n"
    rest = r.read()
    end_at = time.monotonic() - start
    conn.close()
    assert json.loads(first[len(b"data: "):])["text_output"] == "slow0"
    assert end_at - first_at > 0.8, (first_at, end_at)
    assert [e["index"] for e in events(rest.decode())] == [1, 2]


def test_a_client_that_leaves_mid_stream_leaves_the_server_serving(ours):
    conn = http.client.HTTPConnection(ours.host, ours.port, timeout=30)
    conn.request("POST", DS, body='{"text_input":"gone","count":4,"delay":0.3}')
    r = conn.getresponse()
    assert json.loads(r.readline()[len(b"data: "):])["text_output"] == "gone0"
    conn.close()
    assert answer(ours, DS, '{"text_input":"next","count":2}')[2][1]["text_output"] == "next1"


def test_generate_is_in_the_inference_group_of_the_restricted_api(models, start_server, start_tritonserver):
    # Also: tritonserver's generate forwards no headers as parameters, whatever the pattern says.
    flags = ["--http-restricted-api=inference:gen-key=s3cret", "--http-header-forward-pattern=x-fw.*"]
    rs = start_server("--model-repository", models, PY, *flags)
    ts = start_tritonserver("--model-repository", models, *flags)
    key = {"gen-key": "s3cret", "x-fwd": "not a parameter", "Content-Type": "application/json"}
    for path, body in ((G, '{"text_input":"k"}'), (DS, '{"text_input":"k","count":1}')):
        want, got = ts.post(path, body), rs.post(path, body)
        assert want.status == got.status == 403
        assert want.json() == got.json() == {"error": "This API is restricted, expecting header 'gen-key'"}
        want, got = ts.post(path, body, headers=key), rs.post(path, body, headers=key)
        assert want.status == got.status == 200 and want.body == got.body
        if path == G:
            assert json.loads(got.body)["params"] == "{}"


def test_generate_stream_over_https(models, start_server, tmp_path):
    # tritonserver has no HTTPS; tritonrs's --http-use-ssl covers the generate routes as every other.
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    s = start_server("--model-repository", models, PY, "--http-use-ssl", f"--http-server-cert={tmp_path / 'cert.pem'}",
                     f"--http-server-key={tmp_path / 'key.pem'}", wait=None)
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)

    def post(path, body):
        conn = http.client.HTTPSConnection(s.host, s.port, context=ctx, timeout=10)
        conn.request("POST" if body else "GET", path, body=body)
        r = conn.getresponse()
        out = (r.status, r.getheader("content-type"), r.read().decode())
        conn.close()
        return out

    deadline = time.monotonic() + 30
    while True:
        try:
            if post("/v2/health/ready", None)[0] == 200:
                break
        except (OSError, ssl.SSLError):
            pass
        assert time.monotonic() < deadline, "not ready over HTTPS within 30 s"
        time.sleep(0.2)
    status, ctype, text = post(DS, '{"text_input":"tls","count":2}')
    assert (status, ctype) == (200, SSE)
    assert [e["text_output"] for e in events(text)] == ["tls0", "tls1"]


# ---- traces -------------------------------------------------------------------------------------


def trace_activities(path: Path) -> list[tuple]:
    """Each trace of a trace file: (model, request id, its activity names sorted)."""
    records = json.loads(path.read_text())
    traces: dict[int, dict] = {}
    for rec in records:
        t = traces.setdefault(rec["id"], {"model": None, "request_id": None, "names": []})
        if "model_name" in rec:
            t["model"], t["request_id"] = rec["model_name"], rec.get("request_id")
        t["names"] += [ts["name"] for ts in rec.get("timestamps", [])]
    return [(t["model"], t["request_id"], sorted(t["names"])) for _, t in sorted(traces.items())]


def test_generate_routes_are_traced_as_in_tritonserver(models, start_server, start_tritonserver, tmp_path):
    requests = [
        (DS, '{"text_input":"t","count":3,"id":"stream-3"}'),
        (DS, '{"text_input":"t","count":0}'),
        (G, '{"text_input":"t","id":"plain"}'),
        (S, '{"text_input":"t"}'),
        (DG, '{"text_input":"t","count":1}'),
        (G, '{"text_input":'),
    ]
    found = {}
    for who, start in (("tritonserver", start_tritonserver), ("tritonrs", start_server)):
        path = tmp_path / f"{who}.json"
        args = ["--model-repository", models, "--trace-config", f"triton,file={path}",
                "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"]
        s = start(*args, PY) if who == "tritonrs" else start(*args)
        for p, body in requests:
            s.post(p, body)
        s.stop()  # the trace file is written at exit
        found[who] = trace_activities(path)
    assert found["tritonrs"] == found["tritonserver"]
    # What they agree on: each streamed response has its own send records.
    model, rid, names = found["tritonrs"][0]
    assert (model, rid) == ("gen_stream", "stream-3")
    assert names.count("INFER_RESPONSE_COMPLETE") == 4 and names.count("HTTP_SEND_START") == 3
    assert found["tritonrs"][-1] == (None, None, ["HTTP_RECV_END", "HTTP_RECV_START"])
