"""The trace extension: settings over HTTP and gRPC (global, per model, clearing), sampling by rate
and count, and the trace file tritonserver 2.51 writes (a JSON array of per-timestamp records, or
<file>.<n> chunks), driven by the official tritonclient."""

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES, run_cli

DEFAULTS = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0",
            "trace_file": "", "trace_mode": "triton"}

HTTP_NAMES = ["HTTP_RECV_START", "HTTP_RECV_END", "MODEL", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
              "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
              "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
GRPC_NAMES = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"] + HTTP_NAMES[2:-2] + ["GRPC_SEND_START", "GRPC_SEND_END"]


def start(start_server, *trace_args):
    """A server with only `simple` loaded and the given trace flags."""
    return start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", "simple",
                        *trace_args)


def traced(start_server, path, *more):
    return start(start_server, "--trace-config", f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
                 *more)


def infer_http(server, request_id=""):
    c = server.client()
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(x)
    out = c.infer("simple", inputs, request_id=request_id).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, x + x)


def grpc_inputs():
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(x)
    return inputs


def infer_grpc(server, request_id=""):
    c = server.grpc_client()
    c.infer("simple", grpc_inputs(), request_id=request_id)
    c.close()


def load(path):
    with open(path) as f:
        return json.load(f)  # fails the test unless the file is valid JSON


def traces(records):
    """Groups records by trace id, in file order: {id: [names...]} with the model record as "MODEL"."""
    out = {}
    for r in records:
        name = r["timestamps"][0]["name"] if "timestamps" in r else "MODEL"
        out.setdefault(r["id"], []).append(name)
    return out


def model_records(records):
    return [r for r in records if "model_name" in r]


def assert_status(excinfo, status):
    assert str(status) in str(excinfo.value.status()), excinfo.value


# ---- settings ----------------------------------------------------------------------------------


def test_metadata_lists_trace(examples_server):
    assert "trace" in examples_server.client().get_server_metadata()["extensions"]
    assert examples_server.client().get_trace_settings() == DEFAULTS


def test_settings_from_trace_config_flags(start_server, tmp_path):
    path = tmp_path / "t.json"
    s = start(start_server, "--trace-config", f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
              "--trace-config", "level=TENSORS", "--trace-config", "rate=7", "--trace-config", "count=-1",
              "--trace-config", "triton,log-frequency=3", "--trace-config", "mode=triton")
    want = {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "7", "trace_count": "-1",
            "log_frequency": "3", "trace_file": str(path), "trace_mode": "triton"}
    assert s.client().get_trace_settings() == want
    assert s.client().get_trace_settings(model_name="simple") == want
    g = s.grpc_client()
    got = g.get_trace_settings(as_json=True)["settings"]
    assert {k: v["value"] for k, v in got.items()} == {k: v if isinstance(v, list) else [v] for k, v in want.items()}


def test_deprecated_trace_flags(start_server, tmp_path):
    s = start(start_server, f"--trace-file={tmp_path / 't.json'}", "--trace-level=TIMESTAMPS", "--trace-rate=3",
              "--trace-count=5", "--trace-log-frequency=2")
    got = s.client().get_trace_settings()
    assert (got["trace_level"], got["trace_rate"], got["trace_count"], got["log_frequency"]) == \
        (["TIMESTAMPS"], "3", "5", "2")
    assert "deprecated" in s.log


@pytest.mark.parametrize("bad", [["--trace-config", "level"], ["--trace-config", "level=LOUD"],
                                 ["--trace-config", "rate=abc"], ["--trace-config", "count=-2"],
                                 ["--trace-config", "mode=zipkin"], ["--trace-config", "triton,bogus=1"],
                                 ["--trace-config", "opentelemetry,bogus=1"],
                                 ["--trace-config", "opentelemetry,resource=novalue"],
                                 ["--trace-config", "opentelemetry,url=ftp://collector/v1/traces"]])
def test_bad_trace_flags_stop_the_server(bad):
    r = run_cli("--model-repository", str(EXAMPLES), "--http-port=0", "--grpc-port=0", "--allow-metrics=false", *bad)
    assert r.returncode != 0
    assert "--trace-config" in r.stderr, r.stderr


def test_http_update_model_override_and_clear(start_server, tmp_path):
    s = traced(start_server, tmp_path / "t.json", "--trace-config", "rate=1", "--trace-config", "count=7")
    c = s.client()
    got = c.update_trace_settings(model_name="simple", settings={"trace_rate": "5"})
    assert (got["trace_rate"], got["trace_count"]) == ("5", "7")
    assert c.get_trace_settings()["trace_rate"] == "1"
    # The model's unspecified fields follow the global setting.
    c.update_trace_settings(settings={"trace_count": "10", "log_frequency": "3"})
    got = c.get_trace_settings(model_name="simple")
    assert (got["trace_rate"], got["trace_count"], got["log_frequency"]) == ("5", "10", "3")
    got = c.update_trace_settings(model_name="simple", settings={"trace_level": ["OFF"]})
    assert got["trace_level"] == ["OFF"]
    assert c.get_trace_settings()["trace_level"] == ["TIMESTAMPS"]
    # null clears a field back to the global value; with nothing left the model uses the global setting.
    assert c.update_trace_settings(model_name="simple", settings={"trace_rate": None})["trace_rate"] == "1"
    got = c.update_trace_settings(model_name="simple", settings={"trace_level": None})
    assert got == c.get_trace_settings()
    # Clearing a global field returns it to its start-up value.
    assert c.update_trace_settings(settings={"trace_count": None})["trace_count"] == "7"


def test_grpc_update_model_override_and_clear(start_server, tmp_path):
    s = traced(start_server, tmp_path / "t.json", "--trace-config", "rate=1")
    g = s.grpc_client()

    def values(resp):
        return {k: v["value"] for k, v in resp["settings"].items()}

    got = values(g.update_trace_settings(model_name="simple", settings={"trace_rate": "4", "trace_count": "2"},
                                         as_json=True))
    assert (got["trace_rate"], got["trace_count"], got["trace_level"]) == (["4"], ["2"], ["TIMESTAMPS"])
    assert values(g.get_trace_settings(as_json=True))["trace_rate"] == ["1"]
    # HTTP sees what gRPC set: one core API.
    assert s.client().get_trace_settings(model_name="simple")["trace_rate"] == "4"
    got = values(g.update_trace_settings(model_name="simple", settings={"trace_rate": None, "trace_count": None},
                                         as_json=True))
    assert got == values(g.get_trace_settings(as_json=True))
    got = values(g.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]}, as_json=True))
    assert got["trace_level"] == ["TIMESTAMPS", "TENSORS"]


def test_http_bad_settings_are_400(start_server, tmp_path):
    s = traced(start_server, tmp_path / "t.json")
    before = s.client().get_trace_settings()
    for body in [{"trace_rate": "abc"}, {"trace_rate": "-1"}, {"trace_rate": 5}, {"trace_count": "-2"},
                 {"trace_count": "0"}, {"log_frequency": "x"}, {"trace_level": ["LOUD"]},
                 {"trace_level": ["OFF", "TIMESTAMPS"]}, {"trace_rate": "0"}, {"trace_mode": "opentelemetry"},
                 {"bogus": "1"}, {"trace_level": ["OFF"], "trace_rate": "abc"}]:
        r = s.post("/v2/trace/setting", body)
        assert r.status == 400, (body, r)
        assert "error" in r.json()
        r = s.post("/v2/models/simple/trace/setting", body)
        assert r.status == 400, (body, r)
    for raw in ["{", "[]", "1"]:
        assert s.post("/v2/trace/setting", raw).status == 400, raw
    # Nothing of a refused update was applied.
    assert s.client().get_trace_settings() == before
    r = s.post("/v2/trace/setting", {"trace_file": "/tmp/elsewhere.json"})
    assert r.status == 501 and "error" in r.json()
    assert s.get("/v2/models/nope/trace/setting").status == 404
    assert s.post("/v2/models/nope/trace/setting", {"trace_rate": "2"}).status == 404
    assert s.request("DELETE", "/v2/trace/setting").status == 405
    with pytest.raises(InferenceServerException) as e:
        s.client().update_trace_settings(settings={"trace_count": "-5"})
    assert_status(e, 400)


def test_grpc_bad_settings(start_server, tmp_path):
    s = traced(start_server, tmp_path / "t.json")
    g = s.grpc_client()
    for settings in [{"trace_rate": "abc"}, {"trace_rate": ["1", "2"]}, {"trace_count": "-5"},
                     {"trace_level": ["OFF", "TENSORS"]}, {"bogus": "1"}]:
        with pytest.raises(InferenceServerException) as e:
            g.update_trace_settings(settings=settings)
        assert_status(e, "INVALID_ARGUMENT")
    with pytest.raises(InferenceServerException) as e:
        g.update_trace_settings(settings={"trace_file": "/tmp/x"})
    assert_status(e, "UNIMPLEMENTED")
    with pytest.raises(InferenceServerException) as e:
        g.get_trace_settings(model_name="nope")
    assert_status(e, "NOT_FOUND")


def test_tracing_needs_a_file(start_server):
    s = start(start_server)
    r = s.post("/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]})
    assert r.status == 400 and "file" in r.json()["error"]
    # Turning it off is always allowed, even with an otherwise invalid rate.
    got = s.client().update_trace_settings(settings={"trace_level": ["OFF"], "trace_rate": "0"})
    assert got["trace_rate"] == "0"


# ---- sampling and the file -----------------------------------------------------------------------


def test_trace_file_records_for_http_and_grpc(start_server, tmp_path):
    path = tmp_path / "trace.json"
    s = traced(start_server, path, "--trace-config", "rate=1")
    infer_http(s, "h1")
    infer_grpc(s, "g1")
    infer_http(s)
    assert not path.exists(), "with log-frequency 0 the file is written at shutdown"
    assert s.stop() == 0
    records = load(path)
    by_id = traces(records)
    assert list(by_id) == [1, 2, 3]
    assert by_id[1] == HTTP_NAMES
    assert by_id[2] == GRPC_NAMES
    assert by_id[3] == HTTP_NAMES
    assert model_records(records) == [
        {"id": 1, "model_name": "simple", "model_version": 1, "request_id": "h1"},
        {"id": 2, "model_name": "simple", "model_version": 1, "request_id": "g1"},
        {"id": 3, "model_name": "simple", "model_version": 1},
    ]
    for tid in by_id:
        ns = [r["timestamps"][0]["ns"] for r in records if r["id"] == tid and "timestamps" in r]
        assert ns == sorted(ns), (tid, ns)
        assert all(isinstance(n, int) and n > 0 for n in ns)


def test_a_large_grpc_request_is_traced_from_its_arrival(start_server, tmp_path):
    # A message over 64 KiB is read ahead of tonic (src/frontend/grpc/align.rs), before the interceptor
    # that marks GRPC_WAITREAD_START runs: the mark is the call's arrival, carried to it, so the trace
    # still has every gRPC timestamp, in order.
    path = tmp_path / "trace.json"
    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", "vlen_scale",
                     "--trace-config", f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
                     "--trace-config", "rate=1")
    c = s.grpc_client()
    x = np.arange(200_000, dtype=np.float32).reshape(1, -1)
    i = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    np.testing.assert_array_equal(c.infer("vlen_scale", [i], request_id="big").as_numpy("OUTPUT"), x * 2)
    c.close()
    assert s.stop() == 0
    records = load(path)
    assert traces(records)[1] == GRPC_NAMES
    ns = {r["timestamps"][0]["name"]: r["timestamps"][0]["ns"] for r in records if "timestamps" in r}
    assert ns["GRPC_WAITREAD_START"] <= ns["GRPC_WAITREAD_END"] <= ns["REQUEST_START"]


def test_grpc_stream_requests_are_traced(start_server, tmp_path):
    path = tmp_path / "trace.json"
    s = traced(start_server, path, "--trace-config", "rate=1")
    import queue
    done = queue.Queue()
    g = s.grpc_client()
    g.start_stream(callback=lambda result, error: done.put((result, error)))
    for i in range(2):
        g.async_stream_infer("simple", grpc_inputs(), request_id=f"s{i}")
    for _ in range(2):
        result, error = done.get(timeout=30)
        assert error is None, error
    g.stop_stream()
    g.close()
    assert s.stop() == 0
    records = load(path)
    assert sorted(r["request_id"] for r in model_records(records)) == ["s0", "s1"]
    assert all(names == GRPC_NAMES for names in traces(records).values())


def test_rate_traces_every_nth_request(start_server, tmp_path):
    path = tmp_path / "trace.json"
    s = traced(start_server, path, "--trace-config", "rate=2")
    for i in range(1, 6):
        infer_http(s, f"r{i}")
    assert s.stop() == 0
    assert [(r["id"], r["request_id"]) for r in model_records(load(path))] == [(1, "r2"), (2, "r4")]


def test_count_stops_after_n_traces_and_counts_down(start_server, tmp_path):
    path = tmp_path / "trace.json"
    s = traced(start_server, path, "--trace-config", "rate=1", "--trace-config", "count=3")
    c = s.client()
    counts = []
    for i in range(1, 6):
        infer_http(s, f"c{i}")
        counts.append(c.get_trace_settings()["trace_count"])
    assert counts == ["2", "1", "0", "0", "0"]
    # As in tritonserver, a used-up count writes its traces at once, as the first chunk.
    chunk = tmp_path / "trace.json.0"
    assert [r["request_id"] for r in model_records(load(chunk))] == ["c1", "c2", "c3"]
    assert s.stop() == 0
    assert not path.exists()
    # Re-arming through the API traces again.
    s2 = traced(start_server, tmp_path / "again.json", "--trace-config", "rate=1", "--trace-config", "count=1")
    infer_http(s2)
    assert s2.client().update_trace_settings(settings={"trace_count": "2"})["trace_count"] == "2"
    infer_grpc(s2)
    assert s2.client().get_trace_settings()["trace_count"] == "1"


def test_model_override_decides_sampling(start_server, tmp_path):
    path = tmp_path / "trace.json"
    s = traced(start_server, path, "--trace-config", "rate=1")
    c = s.client()
    c.update_trace_settings(model_name="simple", settings={"trace_level": ["OFF"]})
    infer_http(s, "off")
    c.update_trace_settings(model_name="simple", settings={"trace_level": None})
    infer_http(s, "on")
    assert s.stop() == 0
    assert [r["request_id"] for r in model_records(load(path))] == ["on"]


def test_log_frequency_writes_numbered_chunks(start_server, tmp_path):
    path = tmp_path / "trace.json"
    s = traced(start_server, path, "--trace-config", "rate=1", "--trace-config", "triton,log-frequency=2")
    for i in range(3):
        (infer_http if i % 2 == 0 else infer_grpc)(s, f"f{i}")
    assert [r["request_id"] for r in model_records(load(tmp_path / "trace.json.0"))] == ["f0", "f1"]
    assert not (tmp_path / "trace.json.1").exists()
    assert s.stop() == 0
    # The rest is written as the next chunk at shutdown.
    assert [r["request_id"] for r in model_records(load(tmp_path / "trace.json.1"))] == ["f2"]
    assert not path.exists()


def test_off_writes_nothing(start_server, tmp_path):
    path = tmp_path / "trace.json"
    s = start(start_server, "--trace-config", f"triton,file={path}", "--trace-config", "rate=1")
    infer_http(s)
    infer_grpc(s)
    assert s.stop() == 0
    assert list(tmp_path.iterdir()) == []
