"""Triton backends through the TRITONBACKEND C API (issue 22): tests/capi/test_backend.c, a backend
written against the documented API, is built here with the system C compiler and served by tritonrs
from --backend-directory or the model's folder, over HTTP and gRPC, one request or a dynamic batch of
them per Execute; its lifecycle runs in Triton's order; and backends that go wrong (initialize
fails, a future API, no execute entry point, not a library, an error per request, requests never
answered) fail only their own models, with the reason, while the server serves the rest."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import BIN, REPO_ROOT, copy_models, simple_inputs

SOURCE = REPO_ROOT / "tests" / "capi" / "test_backend.c"

CONFIG = """
name: "{name}"
backend: "{backend}"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ -1 ] }} ]
instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
{extra}
"""


def build(dest: Path, backend: str, *defines: str) -> Path:
    """Compiles the test backend as `dest/libtriton_<backend>.so`."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (Debian package gcc); scripts/test.sh installs one")
    dest.mkdir(parents=True, exist_ok=True)
    lib = dest / f"libtriton_{backend}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(lib), str(SOURCE),
                    *[f"-D{d}" for d in defines]], check=True, capture_output=True, text=True, timeout=120)
    return lib


def model(repo: Path, name: str, backend: str, extra: str = "", count: int = 2) -> Path:
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(CONFIG.format(name=name, backend=backend, extra=extra, count=count))
    return d


def inputs(module, batch: int, value: float):
    a = module.InferInput("INPUT0", [batch, 4], "FP32")
    a.set_data_from_numpy(np.full((batch, 4), value, dtype=np.float32))
    b = module.InferInput("INPUT1", [batch, 3], "INT32")
    b.set_data_from_numpy(np.arange(batch * 3, dtype=np.int32).reshape(batch, 3) + int(value))
    return [a, b]


@pytest.fixture
def backends(tmp_path):
    """A --backend-directory holding the test backend as `testc`."""
    d = tmp_path / "backends"
    build(d / "testc", "testc")
    return d


def test_a_c_backend_serves_over_http_and_grpc_with_its_lifecycle_in_order(start_server, repo, backends):
    model(repo, "identity_c", "testc")
    s = start_server("--model-repository", repo, "--backend-directory", backends,
                     "--backend-config=testc,greeting=hello", "--model-control-mode=explicit",
                     "--load-model=identity_c")
    c = s.client()
    r = c.infer("identity_c", inputs(httpclient, 2, 1.5), request_id="req-7")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((2, 4), 1.5, dtype=np.float32))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), np.arange(6, dtype=np.int32).reshape(2, 3) + 1)
    assert r.get_response()["id"] == "req-7"
    g = s.grpc_client()
    out = g.infer("identity_c", inputs(grpcclient, 1, -3.0))
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), np.full((1, 4), -3.0, dtype=np.float32))
    # Only the outputs asked for are made.
    r = c.infer("identity_c", inputs(httpclient, 1, 2.0), outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert r.as_numpy("OUTPUT0") is None and r.as_numpy("OUTPUT1") is not None
    # The compute split comes from what the backend reported (1 ns per phase per request), not from
    # the server's clock.
    stats = c.get_inference_statistics("identity_c")["model_stats"][0]["inference_stats"]
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert stats[phase]["count"] >= 3 and stats[phase]["ns"] == stats[phase]["count"], stats
    # The backend saw its configuration as Triton passes it, with the backend directory in it.
    s.wait_for_log(r'test_backend: backend config \{"cmdline":\{.*"greeting":"hello"')
    assert '"backend-directory"' in s.log
    # Unload: instances, then the model, then the backend (which still has its state).
    assert s.post("/v2/repository/models/identity_c/unload").status == 200
    s.wait_for_log("test_backend: finalize with its state", timeout=15)
    events = [line.split("test_backend: ", 1)[1].strip() for line in s.log.splitlines() if "test_backend: " in line]
    order = [e.split(" {")[0] for e in events]
    assert order[0] == "initialize testc", events
    assert order[1] == "backend config", events
    assert order[2] == "model initialize identity_c", events
    assert sorted(order[3:5]) == ["instance initialize identity_c_0_0", "instance initialize identity_c_0_1"], events
    assert sorted(order[5:7]) == ["instance finalize identity_c_0_0", "instance finalize identity_c_0_1"], events
    assert order[7:] == ["model finalize identity_c", "finalize with its state"], events


def test_dynamic_batches_reach_execute_as_lists_of_requests(start_server, repo, backends):
    model(repo, "batched_c", "testc", "dynamic_batching { max_queue_delay_microseconds: 20000 }")
    s = start_server("--model-repository", repo, "--backend-directory", backends)
    errors = []

    def client(k):
        c = s.client()
        for i in range(10):
            v = float(k * 100 + i)
            try:
                r = c.infer("batched_c", inputs(httpclient, 1 + (i % 3), v))
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1 + (i % 3), 4), v, dtype=np.float32))
            except Exception as e:  # noqa: BLE001 - collected and reported below
                errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors, errors[:3]
    stats = s.client().get_inference_statistics("batched_c")["model_stats"][0]
    assert int(stats["inference_count"]) == sum(1 + (i % 3) for i in range(10)) * 6, stats
    # Requests were batched (fewer executions than requests).
    assert int(stats["execution_count"]) < 60, stats


def test_a_library_in_the_model_folder_comes_before_the_backend_directory(start_server, repo, backends, tmp_path):
    d = model(repo, "local_c", "testc")
    build(d, "testc", "FAIL_EXECUTE")
    s = start_server("--model-repository", repo, "--backend-directory", backends)
    with pytest.raises(InferenceServerException) as e:
        s.client().infer("local_c", inputs(httpclient, 1, 1.0))
    assert "test_backend fails every request" in str(e.value), e.value
    assert e.value.status() == "500", e.value


@pytest.mark.parametrize("defines,reason", [
    (["FAIL_INIT"], "TRITONBACKEND_Initialize: test_backend refuses to initialize"),
    (["WANT_API_MAJOR=2"], "triton backend API version 1.19 does not support this backend (needs 2.x)"),
    (["NO_EXECUTE"], "lacks TRITONBACKEND_ModelInstanceExecute"),
])
def test_a_backend_that_cannot_start_fails_only_its_models(start_server, repo, tmp_path, defines, reason):
    bad = tmp_path / "backends"
    build(bad / "badc", "badc", *defines)
    model(repo, "bad_c", "badc")
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--backend-directory", bad, "--strict-readiness=false")
    s.wait_until(s.settled, what="loads to finish")
    r = s.index_row("bad_c")
    assert r["state"] == "UNAVAILABLE" and reason in r["reason"], r
    assert "libtriton_badc.so" in r["reason"], r
    out = s.client().infer("simple", simple_inputs(httpclient, 2))
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), np.full((1, 16), 4, dtype=np.int32))
    # A backend that did not initialize is not finalized either (as in tritonserver).
    s.stop()
    assert "test_backend: finalize" not in s.log and "TRITONBACKEND_Finalize" not in s.log, s.log


def test_missing_and_broken_libraries_are_reasons_not_crashes(start_server, repo, tmp_path):
    backends = tmp_path / "backends"
    (backends / "textc").mkdir(parents=True)
    (backends / "textc" / "libtriton_textc.so").write_text("not a shared object\n")
    model(repo, "text_c", "textc")
    model(repo, "missing_c", "pytorch")
    (repo / "torch_model" / "1").mkdir(parents=True)
    (repo / "torch_model" / "1" / "model.pt").write_bytes(b"PK\x03\x04")
    (repo / "torch_model" / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 1\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--backend-directory", backends, "--strict-readiness=false")
    s.wait_until(s.settled, what="loads to finish")
    r = s.index_row("text_c")
    assert r["state"] == "UNAVAILABLE" and "cannot be loaded" in r["reason"], r
    for name in ("missing_c", "torch_model"):
        r = s.index_row(name)
        assert r["state"] == "UNAVAILABLE", r
        assert "backend 'pytorch' is neither built in nor installed: no libtriton_pytorch.so in" in r["reason"], r
        assert str(backends / "pytorch") in r["reason"], r
    assert s.client().is_model_ready("simple")


def test_requests_a_backend_never_answers_fail_after_the_timeout(start_server, repo, tmp_path):
    backends = tmp_path / "backends"
    build(backends / "stuckc", "stuckc", "NEVER_RELEASE")
    model(repo, "stuck_c", "stuckc")
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--backend-directory", backends,
                     "--backend-config=stuckc,response-timeout-ms=300")
    with pytest.raises(InferenceServerException) as e:
        s.client().infer("stuck_c", inputs(httpclient, 1, 1.0))
    assert "neither sent the final response nor released the request within 300 ms" in str(e.value), e.value
    assert s.client().is_model_ready("simple")
    # Unloading says what was abandoned.
    s.stop()
    assert "request(s) the backend never finished" in s.log


@pytest.fixture
def misbehaving(tmp_path):
    """A --backend-directory holding the test backend as `oddc`, built to misbehave on request (see
    MISBEHAVE in tests/capi/test_backend.c: the first value of INPUT0 says how)."""
    d = tmp_path / "backends"
    build(d / "oddc", "oddc", "MISBEHAVE")
    return d


def test_an_execute_that_never_returns_fails_its_requests_and_unload_abandons_the_instance(
        start_server, repo, misbehaving):
    model(repo, "hang_c", "oddc")
    s = start_server("--model-repository", repo, "--backend-directory", misbehaving,
                     "--backend-config=oddc,response-timeout-ms=2000", "--model-control-mode=explicit",
                     "--load-model=hang_c", "--allow-metrics=true", "--metrics-port", "0")
    # Each request fails after the response timeout with a typed error (UNAVAILABLE), over HTTP and
    # gRPC; the second may reach the instance still stuck in the first one's Execute.
    t = time.monotonic()
    with pytest.raises(InferenceServerException) as e:
        s.client(network_timeout=20).infer("hang_c", inputs(httpclient, 1, -1.0), request_id="stuck-1")
    assert time.monotonic() - t < 10, "the client waited far past the response timeout"
    assert e.value.status() == "503", e.value
    # What the backend logged inside Execute (on its own thread) names the request it was running.
    s.wait_for_log(r"request\{model=hang_c version=1 id=stuck-1\}: .*test_backend: execute never returns for")
    assert "TRITONBACKEND_ModelInstanceExecute" in e.value.message() and "2000 ms" in e.value.message(), e.value
    t = time.monotonic()
    with pytest.raises(InferenceServerException) as e:
        s.grpc_client().infer("hang_c", inputs(grpcclient, 1, -1.0), client_timeout=20)
    assert time.monotonic() - t < 10, "the client waited far past the response timeout"
    assert e.value.status() == "StatusCode.UNAVAILABLE", e.value
    assert "TRITONBACKEND_ModelInstanceExecute" in e.value.message(), e.value
    assert s.client().is_server_ready()
    # Unload gives up on the stuck Execute within the README's 30 s, leaves its thread to it and
    # counts it; a new load of the model then serves.
    t = time.monotonic()
    assert s.post("/v2/repository/models/hang_c/unload", timeout=40).status == 200
    assert time.monotonic() - t < 35
    assert s.index_row("hang_c")["state"] == "UNAVAILABLE"
    s.wait_for_log(r"Model 'hang_c': instance 'hang_c_0_\d' is abandoned")
    gauge = 'tritonrs_backend_abandoned_threads{backend="oddc",model="hang_c"}'
    assert s.metrics().get(gauge, 0) >= 1, s.metrics()
    assert s.post("/v2/repository/models/hang_c/load", timeout=40).status == 200
    r = s.client().infer("hang_c", inputs(httpclient, 1, 8.0))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 4), 8.0, dtype=np.float32))


def test_unload_fails_queued_requests_at_once_when_the_backend_never_releases(start_server, repo, tmp_path):
    backends = tmp_path / "backends"
    build(backends / "holdc", "holdc", "NEVER_RELEASE")
    model(repo, "hold_c", "holdc", count=1)
    s = start_server("--model-repository", repo, "--backend-directory", backends,
                     "--backend-config=holdc,response-timeout-ms=4000", "--model-control-mode=explicit",
                     "--load-model=hold_c", "--allow-metrics=true", "--metrics-port", "0")
    c = httpclient.InferenceServerClient(s.url, concurrency=20, network_timeout=90)
    try:
        pending = [c.async_infer("hold_c", inputs(httpclient, 1, float(i))) for i in range(20)]
        # One request is in the backend, the other 19 wait in the queue.
        queued = 'nv_inference_pending_request_count{model="hold_c",version="1"}'
        s.wait_until(lambda: s.metrics().get(queued) == 19, what="19 queued requests")
        t = time.monotonic()
        assert s.post("/v2/repository/models/hold_c/unload", timeout=40).status == 200
        took = time.monotonic() - t
        errors = []
        for p in pending:
            with pytest.raises(InferenceServerException) as e:
                p.get_result()
            errors.append(e.value.message())
    finally:
        c.close()
    # Not 20 x 4 s: the queued requests never reach the backend, only the one it holds is waited for.
    assert took < 35, took
    unloaded = [m for m in errors if "model 'hold_c' was unloaded before the request ran" in m]
    assert len(unloaded) == 19, errors
    assert sum("neither sent the final response nor released the request within 4000 ms" in m for m in errors) == 1


def test_outputs_that_do_not_match_their_shape_are_errors_naming_the_output(start_server, repo, misbehaving):
    model(repo, "odd_c", "oddc")
    s = start_server("--model-repository", repo, "--backend-directory", misbehaving)
    c = s.client()
    cases = {
        1.0: "output 'OUTPUT0' (FP32, shape [1, 1048576]) with 4 bytes where its shape needs 4194304",
        2.0: "output 'OUTPUT0' of shape [1099511627776, 1099511627776], too many elements to hold",
        3.0: "output 'OUTPUT0' (FP32, shape [1, 4]) without a buffer",
        4.0: "BYTES output 'OUTPUT0' (shape [1, 2]) holding 1 element(s) where its shape needs 2",
        5.0: "BYTES output 'OUTPUT0' (shape [1, 1]) that is not a list of length-prefixed elements",
    }
    for value, why in cases.items():
        with pytest.raises(InferenceServerException) as e:
            c.infer("odd_c", inputs(httpclient, 1, value))
        assert e.value.status() == "500", (value, e.value)
        assert "backend 'oddc' sent " + why in e.value.message(), (value, e.value)
    with pytest.raises(InferenceServerException) as e:
        s.grpc_client().infer("odd_c", inputs(grpcclient, 1, 1.0))
    assert e.value.status() == "StatusCode.INTERNAL" and "output 'OUTPUT0'" in e.value.message(), e.value
    # The server stays up and the backend's good answers still pass.
    r = c.infer("odd_c", inputs(httpclient, 1, 7.0))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 4), 7.0, dtype=np.float32))
    # A second final response for a request is dropped; the log says so once per model.
    for _ in range(3):
        r = c.infer("odd_c", inputs(httpclient, 1, 6.0))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 4), 6.0, dtype=np.float32))
    s.wait_for_log("Model 'odd_c': backend 'oddc' sent a response after the final response of request")
    assert s.log.count("after the final response of request") == 1, s.log
    assert s.client().is_server_ready()


def test_a_decoupled_backend_streams_its_responses_from_a_factory(start_server, repo, tmp_path):
    import queue
    import time

    backends = tmp_path / "backends"
    build(backends / "repeatc", "repeatc", "DECOUPLED")
    model(repo, "repeat_c", "repeatc", "model_transaction_policy { decoupled: true }")
    s = start_server("--model-repository", repo, "--backend-directory", backends)
    q: queue.Queue = queue.Queue()
    g = s.grpc_client()
    g.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        for rid, v in (("a", 1.0), ("b", 2.0)):
            g.async_stream_infer("repeat_c", inputs(grpcclient, 1, v), request_id=rid, enable_empty_final_response=True)
        got: dict[str, list] = {"a": [], "b": []}
        finals = 0
        deadline = time.monotonic() + 20
        while finals < 2:
            result, error = q.get(timeout=max(0.1, deadline - time.monotonic()))
            assert error is None, error
            resp = result.get_response()
            if resp.parameters["triton_final_response"].bool_param:
                finals += 1
                continue
            v = 1.0 if resp.id == "a" else 2.0
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), v, dtype=np.float32))
            got[resp.id].append(resp.parameters["index"].int64_param)
    finally:
        g.stop_stream()
    assert got == {"a": [0, 1, 2], "b": [0, 1, 2]}, got
    # HTTP refuses decoupled models, as tritonserver does.
    with pytest.raises(InferenceServerException) as e:
        s.client().infer("repeat_c", inputs(httpclient, 1, 1.0))
    assert e.value.status() == "501", e.value


def test_a_decoupled_backend_that_never_sends_the_final_flag_ends_in_an_error(start_server, repo, tmp_path):
    import queue

    backends = tmp_path / "backends"
    build(backends / "openc", "openc", "DECOUPLED", "NO_FINAL")
    model(repo, "open_c", "openc", "model_transaction_policy { decoupled: true }")
    s = start_server("--model-repository", repo, "--backend-directory", backends,
                     "--backend-config=openc,response-timeout-ms=400")
    q: queue.Queue = queue.Queue()
    g = s.grpc_client()
    g.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        g.async_stream_infer("open_c", inputs(grpcclient, 1, 1.0), request_id="x")
        got = [q.get(timeout=20) for _ in range(4)]
    finally:
        g.stop_stream()
    assert all(e is None for _, e in got[:3]), got
    assert got[3][0] is None and "did not send the final response within 400 ms" in got[3][1].message(), got[3]
    assert s.client().is_server_ready()
    s.stop()
    assert "unloaded with 1 decoupled request(s) that backend 'openc' did not finish" in s.log, s.log[-2000:]


def test_the_executable_exports_the_api_and_nothing_else():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", str(BIN)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    exported = sorted(n for n in names if n.startswith("TRITON"))
    if os.environ.get("TRITONRS_EXPECT_NO_EXPORTS") == "1":
        # A zig-linked (glibc-2.27) binary: its linker takes no symbol list, so it exports nothing and
        # serves the API through its libtritonserver.so alone.
        assert exported == [] and not [n for n in names if not n.startswith("_")], names[:10]
        return
    listed = sorted(line.strip().rstrip(";") for line in
                    (REPO_ROOT / "src/backend/capi/exports.list").read_text().splitlines()
                    if line.strip().startswith("TRITON"))
    assert exported == listed
    others = [n for n in names if not n.startswith("TRITON") and not n.startswith("_")]
    assert not others, others[:10]
