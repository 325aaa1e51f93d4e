"""OpenTelemetry tracing (`--trace-config mode=opentelemetry`): the spans a server exports over OTLP/HTTP
to a real receiver (otlp_receiver.py), as tritonserver 2.51 exports them.

Every test runs on tritonrs and on tritonserver 2.51 (param `tritonserver`, skipped where 2.51 is not
installed) and compares each server's trace, normalised (span names, kinds, status, parent/child
structure, attribute keys with the values that must match, event names in order; ids and times
dropped, but children must lie inside their parent's time window and events inside their span), with
the trees below, which were read off tritonserver 2.51. Beyond 2.51 (tritonrs only): a collector that
is down is counted in `tritonrs_trace_spans_dropped_total`.

Facts of 2.51 the trees encode: every span is kind SERVER with status UNSET; the root `InferRequest`
span holds the front end's events (its receive events may precede its own start); one span per model
with the request events and `triton.model_name`, `triton.model_version` (int), `triton.trace_id`,
`triton.trace_parent_id` (ints: the parent model's `triton.trace_id`, 0 at the top) and
`triton.request_id` (only when the request has one); a `compute` span under each model that runs; an
ensemble's steps are children of the ensemble's model span; a BLS call made with
`trace=request.trace()` is a child of the calling model's span, beside its `compute` span.
"""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

import numpy as np
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import TRITONSERVER, Tritonserver, TritonServer
from otlp_receiver import OtlpReceiver

# ---- the models: Python backend, so both servers run the same model.py files ------------------------

SIMPLE_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return out
"""
SIMPLE_CFG = """backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""
STEP_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() OP)])
                for r in requests]
"""
F4_CFG = """backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
ENS_CFG = """platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "add1" model_version: -1 input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "MID" } },
  { model_name: "mul2" model_version: -1 input_map { key: "IN" value: "MID" } output_map { key: "OUT" value: "OUT" } }
] }
"""
# A BLS model: (IN + 1) * 2, the + 1 by `add1`; `trace=r.trace()` makes the call part of r's trace
# (2.51 traces no BLS call made without it).
BLS_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN")
            child = pb_utils.InferenceRequest(model_name="add1", requested_output_names=["OUT"], inputs=[x],
                                              trace=r.trace())
            resp = child.exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            y = pb_utils.get_output_tensor_by_name(resp, "OUT").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", y * 2)]))
        return out
"""
MODELS = {"simple": (SIMPLE_CFG, SIMPLE_PY), "add1": (F4_CFG, STEP_PY.replace("OP", "+ 1")),
          "mul2": (F4_CFG, STEP_PY.replace("OP", "* 2")), "ens": (ENS_CFG, None), "bls": (F4_CFG, BLS_PY)}


def write_models(repo):
    for name, (cfg, py) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{cfg}')
        if py is not None:
            (repo / name / "1" / "model.py").write_text(py)
    return repo


# ---- the trees of tritonserver 2.51 --------------------------------------------------------------

FRONT_EVENTS = {
    "HTTP": ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"],
    "GRPC": ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START",
             "GRPC_SEND_END"],
}
# Events a span may carry from before its own start: 2.51 opens the InferRequest span after reading.
EARLY_EVENTS = {"HTTP_RECV_START", "HTTP_RECV_END", "GRPC_WAITREAD_START", "GRPC_WAITREAD_END"}
MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
# Attribute values compared as they are; any other attribute is compared by its key and value type.
COMPARED = {"triton.model_name", "triton.model_version", "triton.request_id"}


def span(name, attrs, events, children=()):
    return {"name": name, "kind": "SERVER", "status": "UNSET", "attrs": attrs, "events": list(events),
            "children": list(children)}


def model(name, *children, request_id=None):
    attrs = {"triton.model_name": name, "triton.model_version": 1, "triton.trace_id": "int",
             "triton.trace_parent_id": "int"}
    if request_id is not None:
        attrs["triton.request_id"] = request_id
    return span(name, attrs, MODEL_EVENTS, children)


COMPUTE = span("compute", {}, COMPUTE_EVENTS)


def infer_request(front, child):
    return span("InferRequest", {}, FRONT_EVENTS[front], [child])


SIMPLE_TREE = {front: infer_request(front, model("simple", COMPUTE, request_id="r-1")) for front in FRONT_EVENTS}
# The ensemble's steps carry the request's id; a BLS call carries its own (none here).
ENSEMBLE_TREE = infer_request("HTTP", model("ens", model("add1", COMPUTE, request_id="r-1"),
                                            model("mul2", COMPUTE, request_id="r-1"), request_id="r-1"))
BLS_TREE = infer_request("HTTP", model("bls", COMPUTE, model("add1", COMPUTE), request_id="r-1"))
SPANS = {"simple": 3, "ens": 6, "bls": 5}

CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
RESOURCE = "site=cam7"
BSP_DELAY_MS = "50"  # 2.51's default is 5000: a test would wait 5 s for every trace


# ---- normalising a trace -------------------------------------------------------------------------


def normalise(spans: list[dict]) -> dict:
    """One trace's spans as the tree the expectations above are written in; fails on anything that
    is not one tree of one trace, on a child outside its parent's time window, on an event outside
    its span, and on model spans whose triton.trace_parent_id is not their parent model's id."""
    assert len({s["trace_id"] for s in spans}) == 1, f"spans of several traces: {summary(spans)}"
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans), f"repeated span ids: {summary(spans)}"
    roots = [s for s in spans if s["parent_span_id"] not in by_id]
    assert len(roots) == 1, f"not one root: {summary(spans)}"
    children: dict[str, list[dict]] = {}
    for s in spans:
        children.setdefault(s["parent_span_id"], []).append(s)

    def node(s, parent_model):
        check_times(s, by_id.get(s["parent_span_id"]))
        if "triton.model_name" in s["attributes"]:
            want = parent_model["attributes"]["triton.trace_id"] if parent_model else 0
            assert s["attributes"].get("triton.trace_parent_id") == want, (s["name"], s["attributes"])
            parent_model = s
        kids = sorted(children.get(s["span_id"], []), key=lambda k: (k["start"], k["name"]))
        attrs = {k: (v if k in COMPARED else type(v).__name__) for k, v in s["attributes"].items()}
        return {"name": s["name"], "kind": s["kind"], "status": s["status"]["code"], "attrs": attrs,
                "events": [e[0] for e in s["events"]], "children": [node(k, parent_model) for k in kids]}

    return node(roots[0], None)


def check_times(s, parent):
    assert s["start"] <= s["end"], f"{s['name']} ends before it starts"
    if parent is not None:
        assert parent["start"] <= s["start"] and s["end"] <= parent["end"], \
            f"{s['name']} [{s['start']}, {s['end']}] is outside {parent['name']} [{parent['start']}, {parent['end']}]"
    times = [t for _, t, _ in s["events"]]
    assert times == sorted(times), f"{s['name']}'s events are out of time order: {s['events']}"
    for name, t, _ in s["events"]:
        assert t <= s["end"] and (t >= s["start"] or name in EARLY_EVENTS), \
            f"event {name} at {t} is outside {s['name']} [{s['start']}, {s['end']}]"


def summary(spans):
    return [(s["name"], s["trace_id"][:8], s["span_id"][:8], s["parent_span_id"][:8]) for s in spans]


# ---- servers ---------------------------------------------------------------------------------------

SERVERS = ["tritonrs", "tritonserver"]


def otel_flags(receiver, *more):
    return ["--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={receiver.url}",
            "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
            "--trace-config", f"opentelemetry,bsp_schedule_delay={BSP_DELAY_MS}", *more]


def launch(which, args):
    """A started server of kind `which` ("tritonrs" or "tritonserver"); the caller stops it."""
    if which == "tritonserver":
        if not TRITONSERVER.exists():
            pytest.skip(f"tritonserver 2.51 is not installed at {TRITONSERVER} (scripts/test-tools.sh installs it)")
        return Tritonserver(args, name="tritonserver").start()
    return TritonServer(args, name="tritonrs").start()


@pytest.fixture(scope="module")
def model_repo(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("otel") / "repo")


@pytest.fixture(scope="module", params=SERVERS)
def traced(request, model_repo):
    """(server, receiver): one server per kind for the module, every request traced to the receiver."""
    receiver = OtlpReceiver().start()
    try:
        server = launch(request.param, ["--model-repository", str(model_repo),
                                        *otel_flags(receiver, "--trace-config", f"opentelemetry,resource={RESOURCE}")])
    except BaseException:
        receiver.stop()
        raise
    yield server, receiver
    server.stop()
    receiver.stop()


@pytest.fixture
def otel(traced):
    """`traced` with the receiver emptied first (spans of earlier tests are all in by then)."""
    server, receiver = traced
    receiver.clear()
    return server, receiver


@pytest.fixture(params=SERVERS)
def start_one(request, tmp_path):
    """Factory: `start_one(*args)` starts a server of this test's kind (a fresh one per test), stopped
    at the end of it."""
    started = []

    def _start(*args):
        s = launch(request.param, list(args))
        started.append(s)
        return s

    _start.kind = request.param
    yield _start
    for s in started:
        s.stop()


def one_trace(receiver, n_spans, timeout=15.0):
    """The spans of the one trace that the receiver gets: exactly `n_spans` of them."""
    spans = receiver.wait_for(n_spans, timeout, settle=0.3)
    assert len(spans) == n_spans, f"{len(spans)} spans, not {n_spans}: {summary(spans)}"
    return spans


# ---- requests --------------------------------------------------------------------------------------


def simple_inputs(module):
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(x)
    return inputs, x


def infer_simple(server, front, headers=None):
    if front == "HTTP":
        inputs, x = simple_inputs(httpclient)
        out = server.client().infer("simple", inputs, request_id="r-1", headers=headers).as_numpy("OUTPUT0")
    else:
        c = server.grpc_client()
        inputs, x = simple_inputs(grpcclient)
        out = c.infer("simple", inputs, request_id="r-1", headers=headers).as_numpy("OUTPUT0")
        c.close()
    np.testing.assert_array_equal(out, x + x)


def infer_f4(server, name):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    i = httpclient.InferInput("IN", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    out = server.client().infer(name, [i], request_id="r-1").as_numpy("OUT")
    np.testing.assert_array_equal(out, (x + 1) * 2)


# ---- the span trees --------------------------------------------------------------------------------


@pytest.mark.parametrize("front", ["HTTP", "GRPC"])
def test_plain_request_tree(otel, front):
    server, receiver = otel
    infer_simple(server, front)
    spans = one_trace(receiver, SPANS["simple"])
    assert normalise(spans) == SIMPLE_TREE[front]
    assert all(s["parent_span_id"] == "" for s in spans if s["name"] == "InferRequest")


def test_ensemble_tree(otel):
    server, receiver = otel
    infer_f4(server, "ens")
    assert normalise(one_trace(receiver, SPANS["ens"])) == ENSEMBLE_TREE


def test_bls_tree(otel):
    server, receiver = otel
    infer_f4(server, "bls")
    assert normalise(one_trace(receiver, SPANS["bls"])) == BLS_TREE


@pytest.mark.parametrize("front", ["HTTP", "GRPC"])
def test_traceparent_continues_the_callers_trace(otel, front):
    """A W3C traceparent header (HTTP) or metadata entry (gRPC): the server's spans join the caller's
    trace, its InferRequest span a child of the caller's span."""
    server, receiver = otel
    infer_simple(server, front, headers={"traceparent": TRACEPARENT})
    spans = one_trace(receiver, SPANS["simple"])
    assert {s["trace_id"] for s in spans} == {CALLER_TRACE}
    root = next(s for s in spans if s["name"] == "InferRequest")
    assert root["parent_span_id"] == CALLER_SPAN
    assert CALLER_SPAN not in {s["span_id"] for s in spans}
    assert normalise(spans) == SIMPLE_TREE[front]


def test_malformed_traceparent_starts_a_new_trace(otel):
    server, receiver = otel
    infer_simple(server, "HTTP", headers={"traceparent": "00-not-a-trace-01"})
    spans = one_trace(receiver, SPANS["simple"])
    assert normalise(spans) == SIMPLE_TREE["HTTP"]
    assert spans[0]["trace_id"] != CALLER_TRACE
    assert all(s["parent_span_id"] != CALLER_SPAN for s in spans)


def test_resource_and_scope(otel):
    server, receiver = otel
    infer_simple(server, "HTTP")
    spans = one_trace(receiver, SPANS["simple"])
    for s in spans:
        assert s["resource"]["service.name"] == "triton-inference-server"
        assert s["resource"]["site"] == "cam7"
        assert s["resource"]["telemetry.sdk.name"] == "opentelemetry"
        assert s["scope"]["name"] == "triton-server"


def test_resource_flags_override_and_batch_size(start_one, otlp_receiver, model_repo):
    """`opentelemetry,resource=k=v` (repeatable) sets resource attributes, service.name among them;
    `bsp_max_export_batch_size=1` exports the spans one per request."""
    server = start_one("--model-repository", str(model_repo), "--model-control-mode=explicit",
                       "--load-model", "simple",
                       *otel_flags(otlp_receiver, "--trace-config", "opentelemetry,resource=service.name=edge1",
                                   "--trace-config", "opentelemetry,resource=a=b",
                                   "--trace-config", "opentelemetry,bsp_max_export_batch_size=1"))
    infer_simple(server, "HTTP")
    spans = one_trace(otlp_receiver, SPANS["simple"])
    assert normalise(spans) == SIMPLE_TREE["HTTP"]
    for s in spans:
        assert s["resource"]["service.name"] == "edge1" and s["resource"]["a"] == "b", s["resource"]
    assert otlp_receiver.batch_sizes == [1, 1, 1]


# ---- the trace settings API in OpenTelemetry mode ----------------------------------------------------


def expected_settings(receiver, rate="1"):
    return {"trace_level": ["TIMESTAMPS"], "trace_rate": rate, "trace_count": "-1", "trace_mode": "opentelemetry",
            "url": receiver.url, "resource": RESOURCE, "bsp_schedule_delay": BSP_DELAY_MS,
            "bsp_max_export_batch_size": "512", "bsp_max_queue_size": "2048"}


def grpc_settings(reply):
    return {k: list(v.value) for k, v in reply.settings.items()}


def grpc_expected(receiver, rate="1"):
    return {k: (v if isinstance(v, list) else [v]) for k, v in expected_settings(receiver, rate).items()}


def test_settings_api_reports_the_opentelemetry_settings(otel):
    """GET (global and per model) over HTTP and gRPC: the global settings, the `opentelemetry,*` flags
    given and the batch span processor's settings; no trace_file or log_frequency."""
    server, receiver = otel
    for path in ("/v2/trace/setting", "/v2/models/simple/trace/setting"):
        r = server.get(path)
        assert r.status == 200 and r.json() == expected_settings(receiver), (path, r)
    c = server.grpc_client()
    try:
        assert grpc_settings(c.get_trace_settings()) == grpc_expected(receiver)
        assert grpc_settings(c.get_trace_settings(model_name="simple")) == grpc_expected(receiver)
    finally:
        c.close()


def test_settings_api_updates_in_opentelemetry_mode(otel):
    """An update of the rate shows in the settings; trace_file cannot be set over the network (HTTP
    501, gRPC UNIMPLEMENTED); log_frequency is accepted and not shown."""
    server, receiver = otel
    try:
        r = server.post("/v2/trace/setting", json.dumps({"trace_rate": "2"}))
        assert r.status == 200 and r.json() == expected_settings(receiver, rate="2"), r
        r = server.post("/v2/trace/setting", json.dumps({"log_frequency": "5"}))
        assert r.status == 200 and r.json() == expected_settings(receiver, rate="2"), r
        r = server.post("/v2/trace/setting", json.dumps({"trace_file": "/tmp/elsewhere.json"}))
        assert r.status == 501 and "error" in r.json(), r
        c = server.grpc_client()
        try:
            reply = c.update_trace_settings(settings={"trace_rate": "3"})
            assert grpc_settings(reply) == grpc_expected(receiver, rate="3")
            with pytest.raises(InferenceServerException) as e:
                c.update_trace_settings(settings={"trace_file": "/tmp/elsewhere.json"})
            assert "UNIMPLEMENTED" in str(e.value.status()), e.value
        finally:
            c.close()
    finally:
        r = server.post("/v2/trace/setting", json.dumps({"trace_rate": "1"}))
        assert r.status == 200, r
    # Back at rate 1 every request is traced again.
    receiver.clear()
    infer_simple(server, "HTTP")
    assert normalise(one_trace(receiver, SPANS["simple"])) == SIMPLE_TREE["HTTP"]


# ---- a collector that is down --------------------------------------------------------------------


def dropped_spans(server) -> float:
    m = server.metrics()
    found = {k: v for k, v in m.items() if k.split("{")[0] == "tritonrs_trace_spans_dropped_total"}
    assert found, "no tritonrs_trace_spans_dropped_total metric"
    return sum(found.values())


def timed_requests(server, n):
    """n requests, HTTP and gRPC in turn, each of which must succeed; the slowest one's seconds."""
    slowest = 0.0
    for i in range(n):
        t0 = time.monotonic()
        infer_simple(server, "HTTP" if i % 2 else "GRPC")
        slowest = max(slowest, time.monotonic() - t0)
    return slowest


def test_collector_down_never_fails_or_slows_inference(start_one, otlp_receiver, model_repo):
    """A collector that holds every export unanswered, then one that answers 503: every request
    succeeds at once (an export on the request path would wait out the exporter's timeout); the
    spans are dropped (tritonrs counts them) and tracing resumes when the collector is back."""
    metrics = ["--allow-metrics=true", "--metrics-port", "0"] if start_one.kind == "tritonrs" else []
    otlp_receiver.down = "hang"
    server = start_one("--model-repository", str(model_repo), "--model-control-mode=explicit",
                       "--load-model", "simple", *metrics, *otel_flags(otlp_receiver))
    assert timed_requests(server, 10) < 2.0
    otlp_receiver.down = "503"
    assert timed_requests(server, 10) < 2.0
    server.wait_until(lambda: otlp_receiver.rejected >= 1, timeout=10, what="an export to the down collector")
    if start_one.kind == "tritonrs":
        server.wait_until(lambda: dropped_spans(server) > 0, timeout=10, what="dropped spans counted")
        before = dropped_spans(server)
        timed_requests(server, 4)
        server.wait_until(lambda: dropped_spans(server) > before, timeout=10, what="more dropped spans counted")
    assert server.is_live()
    time.sleep(0.5)  # the exports of the requests above are all answered 503 by now
    otlp_receiver.down = None
    # A trace of its own (by traceparent), so that a late retry of a dropped batch cannot stand in.
    infer_simple(server, "HTTP", headers={"traceparent": TRACEPARENT})
    server.wait_until(lambda: len(spans_of(otlp_receiver, CALLER_TRACE)) >= SPANS["simple"], timeout=15,
                      what="the trace sent after the collector came back")
    assert normalise(spans_of(otlp_receiver, CALLER_TRACE)) == SIMPLE_TREE["HTTP"]


def spans_of(receiver, trace_id):
    return [s for s in receiver.spans if s["trace_id"] == trace_id]


# ---- Triton's file mode: the parent_id of ensemble steps and BLS calls ------------------------------


def file_trees(records):
    """The trace file's records as {(model, parent model or None): sorted timestamp names}; fails
    unless parent_id is on child model records only, naming a traced request's id."""
    models, names, parents = {}, {}, {}
    for r in records:
        if "model_name" in r:
            models[r["id"]] = r["model_name"]
            if "parent_id" in r:
                parents[r["id"]] = r["parent_id"]
        for t in r.get("timestamps", []):
            names.setdefault(r["id"], []).append((t["ns"], t["name"]))
    out = {}
    for i, name in models.items():
        parent = parents.get(i)
        assert parent is None or parent in models, f"parent_id {parent} of {name} names no traced request"
        out[(name, models.get(parent))] = sorted(n for _, n in sorted(names[i]))
    return out


def test_file_mode_parent_ids(start_one, tmp_path, model_repo):
    path = tmp_path / "trace.json"
    server = start_one("--model-repository", str(model_repo), "--model-control-mode=explicit",
                       "--load-model", "add1", "--load-model", "mul2", "--load-model", "ens", "--load-model", "bls",
                       "--trace-config", f"triton,file={path}",
                       "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1")
    infer_f4(server, "ens")
    infer_f4(server, "bls")
    server.stop()
    with open(path) as f:
        trees = file_trees(json.load(f))
    front = FRONT_EVENTS["HTTP"]
    step = sorted(MODEL_EVENTS + COMPUTE_EVENTS)
    assert trees == {
        ("ens", None): sorted(front + MODEL_EVENTS),
        ("add1", "ens"): step,
        ("mul2", "ens"): step,
        ("bls", None): sorted(front + MODEL_EVENTS + COMPUTE_EVENTS),
        ("add1", "bls"): step,
    }


def test_trace_mode_switches_at_run_time(start_server, otlp_receiver, tmp_path, model_repo):
    """Beyond 2.51 (which ignores trace_mode in an update): a server started in triton mode with the
    exporter set up (`opentelemetry,url=`) switches to OpenTelemetry over HTTP and back over gRPC; a
    switch to a mode whose destination was not set up at start is refused."""
    path = tmp_path / "trace.json"
    server = start_server("--model-repository", str(model_repo), "--model-control-mode=explicit",
                          "--load-model", "simple", "--trace-config", f"triton,file={path}",
                          "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
                          "--trace-config", f"opentelemetry,url={otlp_receiver.url}",
                          "--trace-config", f"opentelemetry,bsp_schedule_delay={BSP_DELAY_MS}")
    assert server.client().get_trace_settings()["trace_mode"] == "triton"
    r = server.post("/v2/trace/setting", json.dumps({"trace_mode": "opentelemetry"}))
    assert r.status == 200 and r.json()["trace_mode"] == "opentelemetry" and r.json()["url"] == otlp_receiver.url, r
    infer_simple(server, "HTTP")
    assert normalise(one_trace(otlp_receiver, SPANS["simple"])) == SIMPLE_TREE["HTTP"]
    c = server.grpc_client()
    try:
        reply = c.update_trace_settings(settings={"trace_mode": "triton"})
        assert grpc_settings(reply)["trace_mode"] == ["triton"]
        assert grpc_settings(reply)["trace_file"] == [str(path)]
    finally:
        c.close()
    infer_simple(server, "GRPC")
    server.stop()
    with open(path) as f:
        records = json.load(f)
    assert [r["model_name"] for r in records if "model_name" in r] == ["simple"]
    assert len(otlp_receiver.spans) == SPANS["simple"]
    # Without a file there is nothing to switch back to; without the exporter nothing to switch to.
    bare = start_server("--model-repository", str(model_repo), "--model-control-mode=explicit",
                        "--load-model", "simple", "--trace-config", "triton,file=" + str(tmp_path / "t2.json"),
                        "--trace-config", "level=TIMESTAMPS")
    r = bare.post("/v2/trace/setting", json.dumps({"trace_mode": "opentelemetry"}))
    assert r.status == 400 and "opentelemetry,url" in r.json()["error"], r


def test_mqtt_traceparent_continues_a_cameras_trace(start_server, otlp_receiver, tmp_path, model_repo):
    """Beyond 2.51 (no MQTT there): an MQTT 5 request with a `traceparent` user property joins the
    caller's trace (its InferRequest span under the caller's span); one without starts its own."""
    from mqtt_helpers import Mosquitto, Requester, body
    from test_mqtt import simple_request, wait_online
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        server = start_server("--model-repository", str(model_repo), "--model-control-mode=explicit",
                              "--load-model", "simple", "--mqtt-broker", broker.url, "--mqtt-device-id", "cam",
                              "--mqtt-protocol", "5", "--mqtt-stats-interval-secs", "0", *otel_flags(otlp_receiver))
        r = Requester(broker.port)
        wait_online(r, "cam")
        r.subscribe("app/answers")
        r.publish("tritonrs/infer/simple/front", json.dumps(simple_request(5, rid="r-1")),
                  response_topic="app/answers", user={"traceparent": TRACEPARENT})
        assert body(r.wait_for("app/answers"))["outputs"]
        spans = one_trace(otlp_receiver, SPANS["simple"])
        assert {s["trace_id"] for s in spans} == {CALLER_TRACE}
        root = next(s for s in spans if s["name"] == "InferRequest")
        assert root["parent_span_id"] == CALLER_SPAN
        assert normalise(spans) == infer_request_mqtt(model("simple", COMPUTE, request_id="r-1"))
        otlp_receiver.clear()
        r.publish("tritonrs/infer/simple/front", json.dumps(simple_request(6)), response_topic="app/answers")
        r.wait_for("app/answers")
        spans = one_trace(otlp_receiver, SPANS["simple"])
        assert CALLER_TRACE not in {s["trace_id"] for s in spans}
        server.stop()
    finally:
        broker.stop()


def infer_request_mqtt(child):
    """The MQTT bridge's InferRequest span: its one front-end event is INFER_RESPONSE_COMPLETE."""
    return span("InferRequest", {}, ["INFER_RESPONSE_COMPLETE"], [child])


# ---- the receiver itself: both OTLP/HTTP encodings (2.51 sends JSON; protobuf is the default elsewhere)


def test_receiver_decodes_protobuf_and_json(otlp_receiver):
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name", value=common_pb2.AnyValue(string_value="svc"))
    ss = rs.scope_spans.add()
    ss.scope.name = "triton-server"
    s = ss.spans.add(trace_id=bytes.fromhex(CALLER_TRACE), span_id=bytes.fromhex(CALLER_SPAN), name="simple",
                     kind=trace_pb2.Span.SPAN_KIND_SERVER, start_time_unix_nano=10, end_time_unix_nano=20)
    s.attributes.add(key="triton.model_version", value=common_pb2.AnyValue(int_value=1))
    s.events.add(name="REQUEST_START", time_unix_nano=11)
    as_json = json_format.MessageToDict(req)
    for span_json in as_json["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # OTLP/JSON ids are hex
        span_json["traceId"], span_json["spanId"] = CALLER_TRACE, CALLER_SPAN
    bodies = [(req.SerializeToString(), "application/x-protobuf"), (json.dumps(as_json).encode(), "application/json")]
    for body, ctype in bodies:
        r = httpclient_post(otlp_receiver.url, body, ctype)
        assert r.status == 200 and r.getheader("Content-Type") == ctype
    spans = otlp_receiver.wait_for(2, 5)
    for got in spans:
        assert (got["trace_id"], got["span_id"], got["parent_span_id"]) == (CALLER_TRACE, CALLER_SPAN, "")
        assert (got["name"], got["kind"], got["status"]["code"]) == ("simple", "SERVER", "UNSET")
        assert got["attributes"] == {"triton.model_version": 1}
        assert got["events"] == [("REQUEST_START", 11, {})]
        assert got["resource"] == {"service.name": "svc"} and got["scope"]["name"] == "triton-server"
    otlp_receiver.down = "503"
    assert httpclient_post(otlp_receiver.url, bodies[0][0], bodies[0][1]).status == 503
    assert otlp_receiver.requests == 3 and otlp_receiver.rejected == 1 and len(otlp_receiver.spans) == 2


def httpclient_post(url, body, ctype):
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    conn.request("POST", u.path, body=body, headers={"Content-Type": ctype})
    r = conn.getresponse()
    r.read()
    conn.close()
    return r
